//! The trainer's configuration types, as plan files name them: `[grpo]`
//! ([`GrpoConfig`]), `[lm]` ([`LmSpec`], [`PromptStyle`], [`LoraSpec`], [`Sampling`]),
//! `[train] dtype` ([`Dtype`]) and `device`, and the optimiser's [`AdamConfig`].
//!
//! They live here, below the ledger, so that a plan (and with it every ledger command
//! that reads one) needs no libtorch; the trainer (`mapf_ledger::train`) implements
//! them. One type from the plan's text through its hash to the loop.
use super::lm_config::{Family, LmConfig};
use super::PlanError;
use crate::env::text::{
    render_cells_plan, render_cells_prompt, render_compact_prompt, render_plan_in, render_prompt,
    render_steps_plan,
};
use crate::env::{Instance, Plan};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What GRPO does with a zero-variance group, a group whose samples all got the same
/// reward (the plan's `grpo.zero_variance`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ZeroVariance {
    /// It stays in the loss's token mean with advantage 0, diluting the step.
    #[default]
    Keep,
    /// Its tokens leave the loss (DAPO's filter): they are still scored by the KL
    /// reference and run through the training forward and backward, with weight 0.
    Skip,
    /// `skip`'s objective on fewer rows: the group leaves the batch before the KL
    /// reference and the training forward, so neither runs on rows that weigh nothing.
    /// The same loss and gradients as `skip` up to float rounding (the rows are batched
    /// differently), so a plan that names it is a different plan.
    Drop,
}

impl ZeroVariance {
    /// The name a plan uses.
    pub fn name(self) -> &'static str {
        match self {
            ZeroVariance::Keep => "keep",
            ZeroVariance::Skip => "skip",
            ZeroVariance::Drop => "drop",
        }
    }

    /// Whether a group without signal leaves the loss (`skip`, `drop`).
    pub fn leaves_the_loss(self) -> bool {
        matches!(self, ZeroVariance::Skip | ZeroVariance::Drop)
    }
}

/// GRPO hyper-parameters: the plan file's `[grpo]` section itself, one type from the
/// plan's text through its hash to the loop (`mapf_ledger::train::grpo::train_stage`). Fields added after the
/// first ledgers (`micro_batch` on) are left out of the plan's canonical encoding while
/// at their defaults, so a plan that does not set them keeps its hash.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct GrpoConfig {
    /// Gradient steps per stage.
    pub steps: u64,
    /// The optimiser's learning rate in GRPO stages.
    pub lr: f64,
    /// G: plans sampled per instance.
    pub group_size: u32,
    pub clip_eps: f64,
    /// KL penalty to the base (stage-0) model; 0 disables it.
    pub kl_coef: f64,
    /// Instances per gradient step.
    pub batch_size: u32,
    /// Training instances generated per stage.
    pub instances_per_stage: u32,
    pub entropy_coef: f64,
    /// Optimiser updates per sampled batch (1 = on-policy).
    pub epochs: u32,
    /// The shaped reward's terms (each recorded here, none changed by an engineer; see
    /// `train::grpo::reward`): `format_reward` for a plan that parses; `agent_reward` times the
    /// share of agents that reach their goal without a violation (plays past the first
    /// failure); `valid_reward` for a valid plan; `cost_reward` times optimum / cost (1
    /// when optimal, under `train.metric`) and `optimal_bonus` for an optimal one.
    pub valid_reward: f64,
    pub optimal_bonus: f64,
    pub format_reward: f64,
    pub agent_reward: f64,
    pub cost_reward: f64,
    /// What a group whose rewards are all equal (no signal) does: `keep` (it stays in the
    /// loss's token mean with advantage 0, diluting the step), `skip` (its tokens leave
    /// the loss, DAPO's filter) or `drop` (it leaves the batch before the KL reference
    /// and the training forward: `skip`'s objective without computing the rows that
    /// weigh nothing). Counted in every step's `grpo_stats` either way.
    pub zero_variance: ZeroVariance,
    /// A checkpoint (durable point) every this many steps.
    pub checkpoint_every: u64,
    /// Sampled plans per training forward and backward: the step's gradient is
    /// accumulated over micro-batches of this many rows (same loss, less memory; the
    /// KL reference forward is cut the same way). 0, the default: the whole batch
    /// (`batch_size` x `group_size` rows) at once.
    #[serde(skip_serializing_if = "is_zero")]
    pub micro_batch: u32,
    /// Adam's first- and second-moment decay rates.
    #[serde(skip_serializing_if = "is_default_beta1")]
    pub beta1: f64,
    #[serde(skip_serializing_if = "is_default_beta2")]
    pub beta2: f64,
    /// Adam's epsilon (added to the second moment's square root).
    #[serde(skip_serializing_if = "is_default_adam_eps")]
    pub adam_eps: f64,
    /// Decoupled weight decay (AdamW); 0 disables it.
    #[serde(skip_serializing_if = "is_zero_f")]
    pub weight_decay: f64,
    /// The global gradient norm is clipped to this; 0 disables clipping.
    #[serde(skip_serializing_if = "is_default_max_grad_norm")]
    pub max_grad_norm: f64,
    /// Added to a group's reward standard deviation before dividing (see `train::grpo::advantages`).
    #[serde(skip_serializing_if = "is_default_advantage_eps")]
    pub advantage_eps: f64,
    /// A group whose reward standard deviation is at most this has no signal.
    #[serde(skip_serializing_if = "is_default_signal_eps")]
    pub signal_eps: f64,
    /// Recompute each layer's activations in the backward pass of a training
    /// micro-batch instead of keeping them (activation checkpointing per layer): the
    /// forward keeps each layer's input only, so a micro-batch holds its layer
    /// boundaries and one layer's activations at a time, for about one more forward of
    /// compute. Applies where `micro_batch` or `micro_batch_tokens` splits the batch.
    /// Off by default.
    #[serde(skip_serializing_if = "is_false")]
    pub recompute: bool,
    /// Target tokens whose log-softmax over the vocabulary is computed at once: scoring
    /// (the KL reference, old log-probs) makes the `[tokens, vocabulary]` f32 tensors
    /// one chunk at a time, and a training micro-batch also runs each chunk's backward
    /// before the next. 0, the default: every target of a forward at once.
    #[serde(skip_serializing_if = "is_zero")]
    pub log_prob_chunk: u32,
    /// Tokens per training micro-batch: a micro-batch takes consecutive sampled replies
    /// while its rows times its longest row (prompt and reply) stay within this many
    /// tokens, at least one row, and at most `micro_batch` rows where that is set too.
    /// A memory bound in the unit memory grows with, so short replies train many rows
    /// at once and thinking-length ones few. The KL reference is cut the same way. 0,
    /// the default: micro-batches are `micro_batch` rows alone.
    #[serde(skip_serializing_if = "is_zero")]
    pub micro_batch_tokens: u32,
    /// Rehearsal (InstructGPT's PPO-ptx): every update also minimises this weight times
    /// the mean negative log-likelihood of `rehearsal_batch` solver plans drawn from the
    /// plan's `[warmup]` mix (the pretraining distribution), so that RL on the trained
    /// sizes keeps what the base knows elsewhere (3-5 agents, plans that need no
    /// coordination). Each stage draws `rehearsal_instances` fresh ones from its own seed
    /// and records them (split `rehearsal`). Their agents keep the plain names `1..=k`:
    /// neither `agent_names` (GRPO's, the warm-up's) applies to them, so the ledgers
    /// recorded with both settings replay as they are. 0, the default: no rehearsal.
    #[serde(skip_serializing_if = "is_zero_f")]
    pub rehearsal_coef: f64,
    /// Solver plans per rehearsal batch (one batch an update).
    #[serde(skip_serializing_if = "is_zero")]
    pub rehearsal_batch: u32,
    /// Solver plans a stage draws to rehearse from.
    #[serde(skip_serializing_if = "is_zero")]
    pub rehearsal_instances: u32,
    /// Named training agents: in GRPO's prompts and plans the k agents of a training
    /// instance go by k distinct numbers drawn from `1..=agent_names`, in increasing
    /// order (2 agents up to 5: `agent 3` and `agent 5`), drawn per instance and step
    /// from the stage's seed. RL on 2 agents teaches `agent 2` to make way and no other
    /// agent (issue 53, `ledgers/results/transfer-diagnosis`); naming was meant to move
    /// that onto the later of any two agents, and did not (`ledgers/results/names-pilot`:
    /// the second line still makes way). Evaluation keeps `1..=k`. The agent-line styles
    /// only (the `steps` style tags agents by position). 0, the default: `1..=k`.
    #[serde(skip_serializing_if = "is_zero")]
    pub agent_names: u32,
}

// Defaults of the fields left out of the canonical encoding at their default (see
// [`GrpoConfig`]); the optimiser's are `AdamConfig::default()`'s.
const ADVANTAGE_EPS: f64 = 1e-6;
const SIGNAL_EPS: f64 = 1e-8;

pub(super) fn is_zero(v: &u32) -> bool {
    *v == 0
}
fn is_zero_f(v: &f64) -> bool {
    *v == 0.0
}
fn is_default_beta1(v: &f64) -> bool {
    *v == AdamConfig::default().beta1
}
fn is_default_beta2(v: &f64) -> bool {
    *v == AdamConfig::default().beta2
}
fn is_default_adam_eps(v: &f64) -> bool {
    *v == AdamConfig::default().eps
}
fn is_default_max_grad_norm(v: &f64) -> bool {
    *v == AdamConfig::default().max_grad_norm
}
fn is_default_advantage_eps(v: &f64) -> bool {
    *v == ADVANTAGE_EPS
}
fn is_default_signal_eps(v: &f64) -> bool {
    *v == SIGNAL_EPS
}

impl Default for GrpoConfig {
    fn default() -> Self {
        let adam = AdamConfig::default();
        GrpoConfig {
            steps: 100,
            lr: 3e-4,
            group_size: 8,
            clip_eps: 0.2,
            kl_coef: 0.01,
            batch_size: 16,
            instances_per_stage: 512,
            entropy_coef: 0.001,
            epochs: 1,
            valid_reward: 1.0,
            optimal_bonus: 0.5,
            format_reward: 0.0,
            agent_reward: 0.0,
            cost_reward: 0.0,
            zero_variance: ZeroVariance::Keep,
            checkpoint_every: 25,
            micro_batch: 0,
            beta1: adam.beta1,
            beta2: adam.beta2,
            adam_eps: adam.eps,
            weight_decay: adam.weight_decay,
            max_grad_norm: adam.max_grad_norm,
            advantage_eps: ADVANTAGE_EPS,
            signal_eps: SIGNAL_EPS,
            recompute: false,
            log_prob_chunk: 0,
            micro_batch_tokens: 0,
            rehearsal_coef: 0.0,
            rehearsal_batch: 0,
            rehearsal_instances: 0,
            agent_names: 0,
        }
    }
}

impl GrpoConfig {
    /// The optimiser of a GRPO stage: this stage's learning rate and the plan's Adam
    /// settings.
    pub fn adam(&self) -> AdamConfig {
        AdamConfig {
            lr: self.lr,
            beta1: self.beta1,
            beta2: self.beta2,
            eps: self.adam_eps,
            weight_decay: self.weight_decay,
            max_grad_norm: self.max_grad_norm,
        }
    }
}

/// What a policy is told from its plan once it is loaded for a run
/// (`train::policy::Policy::apply_settings`); not recorded in checkpoints (the plan
/// records them). Two kinds:
/// - **memory bounds** (`[lm] generation_memory`, `[grpo] recompute` and
///   `log_prob_chunk`): they change in how many pieces things are computed, not what;
/// - **kernels** (`[lm] lora_in_compute_dtype`, `training_attention`,
///   `training_norms`): they change what is computed by a rounding.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PolicySettings {
    /// Bytes a generation call's lanes may hold (None: derived on CUDA, one wave on the
    /// CPU).
    pub generation_memory: Option<u64>,
    /// Target tokens per log-softmax chunk (0: all at once).
    pub log_prob_chunk: u32,
    /// Recompute layer activations in training micro-batches.
    pub recompute: bool,
    /// `[lm] lora_in_compute_dtype`.
    pub lora_in_compute_dtype: bool,
    /// `[lm] training_attention`.
    pub training_attention: TrainingAttention,
    /// `[lm] training_norms`.
    pub training_norms: TrainingNorms,
}

/// Optimiser hyper-parameters (named in the plan file, recorded in checkpoints).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct AdamConfig {
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
    /// Clip the global gradient norm to this value (0 disables).
    pub max_grad_norm: f64,
}

impl Default for AdamConfig {
    fn default() -> Self {
        AdamConfig {
            lr: 1e-3,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
            max_grad_norm: 1.0,
        }
    }
}

/// The plan's `[train] dtype`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Dtype {
    /// bf16 on CUDA, f32 on the CPU.
    #[default]
    Auto,
    /// f32 everywhere.
    F32,
    /// bf16 compute with f32 master copies of trainable tensors, on any device.
    Bf16,
}

impl Dtype {
    /// The default (`auto`): skipped in a plan's canonical encoding, so plans written
    /// before the field existed keep their hash.
    pub fn is_auto(&self) -> bool {
        *self == Dtype::Auto
    }

    /// The name a plan uses.
    pub fn name(self) -> &'static str {
        match self {
            Dtype::Auto => "auto",
            Dtype::F32 => "f32",
            Dtype::Bf16 => "bf16",
        }
    }
}

/// A device as the command line (`--device`) and plans (`[train] device`) name it:
/// `cpu`, `cuda` or `cuda:N`. Parsed by [`DeviceSpec::from_str`], the one place a device
/// name is read; everything past the edge (CLI arguments, a plan's load) passes this
/// type. It writes itself back exactly as written (`cuda` stays `cuda`, `cuda:0` stays
/// `cuda:0`), so plans hash as they always did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum DeviceSpec {
    #[default]
    Cpu,
    /// `cuda` (None: device 0, written without an index) or `cuda:N`.
    Cuda(Option<usize>),
}

impl DeviceSpec {
    /// The CUDA device index (None for the CPU).
    pub fn cuda_index(self) -> Option<usize> {
        match self {
            DeviceSpec::Cpu => None,
            DeviceSpec::Cuda(i) => Some(i.unwrap_or(0)),
        }
    }
}

impl std::str::FromStr for DeviceSpec {
    type Err = PlanError;
    fn from_str(s: &str) -> Result<DeviceSpec, PlanError> {
        let bad = || PlanError::Device { text: s.into() };
        match s {
            "cpu" => Ok(DeviceSpec::Cpu),
            "cuda" => Ok(DeviceSpec::Cuda(None)),
            _ => {
                let n = s.strip_prefix("cuda:").ok_or_else(bad)?;
                let i: usize = n.parse().map_err(|_| bad())?;
                // Written back as read: `cuda:01` would come back as `cuda:1`.
                if i.to_string() != n {
                    return Err(bad());
                }
                Ok(DeviceSpec::Cuda(Some(i)))
            }
        }
    }
}

impl std::fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeviceSpec::Cpu => f.write_str("cpu"),
            DeviceSpec::Cuda(None) => f.write_str("cuda"),
            DeviceSpec::Cuda(Some(i)) => write!(f, "cuda:{i}"),
        }
    }
}

impl TryFrom<String> for DeviceSpec {
    type Error = PlanError;
    fn try_from(s: String) -> Result<DeviceSpec, PlanError> {
        s.parse()
    }
}

impl From<DeviceSpec> for String {
    fn from(d: DeviceSpec) -> String {
        d.to_string()
    }
}

/// How the MAPF task is put to the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PromptStyle {
    /// The paper's natural-language prompt (`ledger env prompt`).
    Paper,
    /// A terse rendering (grid rows, starts and goals), for small scratch models.
    Compact,
    /// Positions never implicit: holes, starts and goals as `(row,col)` cells, and a
    /// plan that writes the cell each move reaches (the shipped base planner's format).
    Cells,
    /// The cells prompt with the plan written time first: a line per time step naming
    /// every agent's cell and move, so that making way depends on the cells already
    /// written on the line rather than on the agent's number (issue 53).
    Steps,
}

/// A name that is no prompt style; its message lists the styles there are.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("expected {}", PromptStyle::expected())]
pub struct UnknownPromptStyle;

/// The style a command line names (`paper`, `compact`, `cells`, `steps`); a plan names it
/// through serde, with the same names.
impl std::str::FromStr for PromptStyle {
    type Err = UnknownPromptStyle;

    fn from_str(name: &str) -> Result<PromptStyle, UnknownPromptStyle> {
        PromptStyle::ALL
            .into_iter()
            .find(|s| s.name() == name)
            .ok_or(UnknownPromptStyle)
    }
}

impl PromptStyle {
    /// Every style, in the order error messages list them.
    pub const ALL: [PromptStyle; 4] = [
        PromptStyle::Paper,
        PromptStyle::Compact,
        PromptStyle::Cells,
        PromptStyle::Steps,
    ];

    /// The styles' names for an error message: `paper, compact, cells or steps`.
    pub fn expected() -> String {
        let names: Vec<&str> = Self::ALL.iter().map(|s| s.name()).collect();
        let (last, rest) = names.split_last().expect("four styles");
        format!("{} or {last}", rest.join(", "))
    }

    /// The name a plan or command line uses for this style.
    pub fn name(self) -> &'static str {
        match self {
            PromptStyle::Paper => "paper",
            PromptStyle::Compact => "compact",
            PromptStyle::Cells => "cells",
            PromptStyle::Steps => "steps",
        }
    }

    /// The task text of an instance in this style.
    pub fn task_text(self, inst: &Instance) -> String {
        match self {
            PromptStyle::Paper => render_prompt(inst),
            PromptStyle::Compact => render_compact_prompt(inst),
            PromptStyle::Cells | PromptStyle::Steps => render_cells_prompt(inst),
        }
    }

    /// A plan's text in this style (what the model is taught to write).
    pub fn plan_text(self, inst: &Instance, plan: &Plan) -> String {
        match self {
            PromptStyle::Paper | PromptStyle::Compact => render_plan_in(inst, plan),
            PromptStyle::Cells => render_cells_plan(inst, plan),
            PromptStyle::Steps => render_steps_plan(inst, plan),
        }
    }

    /// The most new tokens a plan of `agents` agents and `steps` moves each may take in
    /// this style (the policy's plan budget before the plan's cap): an agent line's
    /// `agent k: ` and two tokens a move (four where a cell follows each move), or in the
    /// steps layout a line per step of tag, cell and move per agent and an end line.
    pub fn plan_tokens(self, agents: usize, steps: usize) -> usize {
        match self {
            PromptStyle::Paper | PromptStyle::Compact => agents * (8 + 2 * steps) + 2,
            PromptStyle::Cells => agents * (8 + 4 * steps) + 2,
            PromptStyle::Steps => (steps + 1) * (4 * agents + 2) + 2,
        }
    }

    /// The regex a scratch tokenizer splits text with before BPE: Qwen's, or for the
    /// cells format Qwen's with whole numbers and a ` (row,col)` cell as one piece, so
    /// that every cell of a map up to 10x10 becomes one token.
    pub fn split_pattern(self) -> &'static str {
        match self {
            PromptStyle::Paper | PromptStyle::Compact => QWEN_SPLIT,
            PromptStyle::Cells | PromptStyle::Steps => CELLS_SPLIT,
        }
    }
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_default<T: Default + PartialEq>(t: &T) -> bool {
    *t == T::default()
}

/// How a training or scoring forward (GRPO's loss, its old and reference log-probs,
/// the warm-up's imitation) lays out its rows and attends: the plan's `[lm]
/// training_attention`. Both give every target token the same log-probability up to
/// the kernels' rounding (`train::lm` tests them against each other).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TrainingAttention {
    /// Rows left-padded under an additive `[B, 1, T, T]` mask that hides the padding:
    /// what every recorded run computed.
    #[default]
    Masked,
    /// Rows right-padded, attending with torch's causal kernel and no mask: a real
    /// token's keys are all real, and the padding after it is never read. No mask is
    /// made (a 64 x 1,100-token micro-batch's is 310 MB in f32 plus its bf16 cast), and
    /// a GPU may run its flash kernel, which takes no mask.
    Causal,
}

/// How a training or scoring forward computes RMSNorm: the plan's `[lm]
/// training_norms`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TrainingNorms {
    /// transformers' eager order: a cast to f32, the mean of squares, the reciprocal
    /// root, the product, a cast back (eight kernels forward), then the weight.
    #[default]
    Eager,
    /// torch's `rms_norm` (statistics in f32, rounded once) and the weight: two
    /// kernels forward, as a GPU's generation copy already runs them. Agrees with the
    /// eager order to the rounding of the mean.
    Fused,
}

/// The plan's `[lm]` section.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct LmSpec {
    /// `scratch` (the architecture below, pretrained in stage 0) or `hf:DIR` (a Hugging
    /// Face model directory: config.json, safetensors, tokenizer.json).
    pub init: String,
    /// Scratch architecture: `qwen3`, `qwen2` or `llama`.
    pub family: String,
    pub hidden_size: u32,
    pub intermediate_size: u32,
    pub layers: u32,
    pub heads: u32,
    pub kv_heads: u32,
    pub head_dim: u32,
    /// Size of the byte-level BPE vocabulary trained for a scratch model.
    pub vocab_size: u32,
    pub rope_theta: f64,
    pub tie_word_embeddings: bool,
    pub prompt: PromptStyle,
    /// Sampling during GRPO (evaluation is greedy).
    pub temperature: f64,
    pub top_p: f64,
    pub max_new_tokens: u32,
    /// LoRA rank for the GRPO stages (0: full fine-tuning).
    pub lora_rank: u32,
    pub lora_alpha: f64,
    pub lora_targets: Vec<String>,
    /// Qwen3's thinking mode (`enable_thinking=True`, the paper's setting): the chat
    /// template leaves the assistant turn open, the model reasons in a `<think>` block
    /// first, and only what follows `</think>` is parsed as the plan (or proposal);
    /// `max_new_tokens` then budgets reasoning and answer together. Needs a Qwen3
    /// checkpoint. Left out of the plan's canonical encoding while false, so plans
    /// written before it existed keep their hash.
    #[serde(skip_serializing_if = "is_false")]
    pub thinking: bool,
    /// As the `current`/`base` engineer: the most tokens of a reply, and of the prompt
    /// (the context is trimmed to fit, as for registered LLM engineers).
    pub engineer_max_new_tokens: u32,
    pub engineer_prompt_tokens: u32,
    /// Sampling of the proposal (`current`/`base`): a model writing JSON is usually
    /// sampled cooler than it explores plans.
    pub engineer_temperature: f64,
    pub engineer_top_p: f64,
    /// Replies sampled at most per decision: a reply with no usable proposal is
    /// resampled (the next seed of the decision's node) up to this many times in all,
    /// and the rejected attempts are named in the rationale. 1: one reply, as an HTTP
    /// engineer gets.
    pub engineer_attempts: u32,
    /// Bytes a generation call may hold for its lanes (`"24GiB"`): each lane's
    /// key/value cache for prompt + new tokens, its decode buffers and its prompt's
    /// prefill. Lanes then run in waves that fit (`train::memory::lanes_per_wave`).
    /// Unset: on CUDA, the device's memory less what is resident, the generation copy
    /// of the weights and the CUDA reserve; on the CPU, one wave.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generation_memory: Option<super::size::ByteSize>,
    /// LoRA adapters' products in the model's compute dtype (bf16 on a GPU), as
    /// mixed-precision training runs them, instead of in f32 with a cast of the input
    /// and of the product at every projection. Adam still updates f32 masters. On one
    /// H100 a 4B GRPO step of `ledgers/paper.toml`'s shape took 23.7 s against 29.3 s,
    /// its training 14.3 s against 19.1 s (`ledgers/results/cuda-bench-h100/run8`).
    /// Changes what is computed (by a rounding), so it is a plan field; left out of the
    /// canonical encoding while false, so plans without it keep their hash.
    #[serde(skip_serializing_if = "is_false")]
    pub lora_in_compute_dtype: bool,
    /// Training and scoring forwards on left-padded rows under a mask (`masked`) or on
    /// right-padded rows with the causal kernel (`causal`); see [`TrainingAttention`].
    /// Changes what is computed (by a rounding), so it is a plan field; left out of the
    /// canonical encoding while `masked`, so plans without it keep their hash.
    #[serde(skip_serializing_if = "is_default")]
    pub training_attention: TrainingAttention,
    /// RMSNorm of the trained model in transformers' eager order (`eager`) or as one
    /// fused kernel (`fused`); see [`TrainingNorms`]. Left out of the canonical
    /// encoding while `eager`.
    #[serde(skip_serializing_if = "is_default")]
    pub training_norms: TrainingNorms,
}

impl Default for LmSpec {
    fn default() -> Self {
        LmSpec {
            init: "scratch".into(),
            family: "qwen3".into(),
            hidden_size: 64,
            intermediate_size: 192,
            layers: 2,
            heads: 4,
            kv_heads: 2,
            head_dim: 16,
            vocab_size: 512,
            rope_theta: 10_000.0,
            tie_word_embeddings: true,
            prompt: PromptStyle::Compact,
            temperature: 1.0,
            top_p: 1.0,
            max_new_tokens: 200,
            thinking: false,
            lora_rank: 0,
            lora_alpha: 16.0,
            lora_targets: LORA_MODULES.iter().map(|s| s.to_string()).collect(),
            engineer_max_new_tokens: 160,
            engineer_prompt_tokens: 4096,
            engineer_temperature: 0.7,
            engineer_top_p: 0.9,
            engineer_attempts: 1,
            generation_memory: None,
            lora_in_compute_dtype: false,
            training_attention: TrainingAttention::Masked,
            training_norms: TrainingNorms::Eager,
        }
    }
}

impl LmSpec {
    /// The model directory of an `hf:` init.
    pub fn hf_dir(&self) -> Option<&str> {
        self.init.strip_prefix("hf:")
    }

    /// Whether an `hf:` init names a model directory from here. A relative path is
    /// read from the directory `ledger` runs in (committed plans are written for the
    /// repository root), not from the plan file's: plans are hashed as written, so
    /// their paths keep meaning what they meant. The message names `lm.init`, the path
    /// as written, and the directory it was resolved against.
    pub fn check_hf_dir(&self) -> Result<(), PlanError> {
        let Some(dir) = self.hf_dir() else {
            return Ok(());
        };
        let p = std::path::Path::new(dir);
        if p.join("config.json").is_file() {
            return Ok(());
        }
        let against = (!p.is_absolute()).then(|| {
            std::env::current_dir()
                .map(|d| d.display().to_string())
                .unwrap_or_else(|_| "the current directory".into())
        });
        Err(PlanError::HfDir {
            init: self.init.clone(),
            dir: dir.into(),
            is_dir: p.is_dir(),
            against,
        })
    }

    /// Range checks; the message names the field.
    pub fn validate(&self) -> Result<(), (String, String)> {
        let f = |k: &str, m: String| Err((format!("lm.{k}"), m));
        if self.init != "scratch" && self.hf_dir().is_none_or(|d| d.is_empty()) {
            return f(
                "init",
                format!("expected \"scratch\" or \"hf:DIR\", got {:?}", self.init),
            );
        }
        if !["qwen3", "qwen2", "llama"].contains(&self.family.as_str()) {
            return f(
                "family",
                format!("expected qwen3, qwen2 or llama, got {:?}", self.family),
            );
        }
        for (k, v, lo, hi) in [
            ("hidden_size", self.hidden_size, 8, 65_536),
            ("intermediate_size", self.intermediate_size, 8, 262_144),
            ("layers", self.layers, 1, 256),
            ("heads", self.heads, 1, 256),
            ("kv_heads", self.kv_heads, 1, 256),
            ("head_dim", self.head_dim, 2, 1024),
            ("vocab_size", self.vocab_size, 300, 1_000_000),
            ("max_new_tokens", self.max_new_tokens, 1, 1_000_000),
            ("engineer_attempts", self.engineer_attempts, 1, 16),
            (
                "engineer_max_new_tokens",
                self.engineer_max_new_tokens,
                1,
                1_000_000,
            ),
            (
                "engineer_prompt_tokens",
                self.engineer_prompt_tokens,
                64,
                10_000_000,
            ),
            ("lora_rank", self.lora_rank, 0, 4096),
        ] {
            if !(lo..=hi).contains(&v) {
                return f(k, format!("must be in {lo}..={hi}, got {v}"));
            }
        }
        if self.heads % self.kv_heads != 0 {
            return f(
                "kv_heads",
                format!("{} does not divide heads {}", self.kv_heads, self.heads),
            );
        }
        if self.head_dim % 2 != 0 {
            return f("head_dim", "must be even (RoPE rotates pairs)".into());
        }
        if !(self.temperature > 0.0 && self.temperature <= 10.0) {
            return f(
                "temperature",
                format!("must be in (0, 10], got {}", self.temperature),
            );
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return f("top_p", format!("must be in (0, 1], got {}", self.top_p));
        }
        if !(self.engineer_temperature > 0.0 && self.engineer_temperature <= 10.0) {
            return f(
                "engineer_temperature",
                format!("must be in (0, 10], got {}", self.engineer_temperature),
            );
        }
        if !(self.engineer_top_p > 0.0 && self.engineer_top_p <= 1.0) {
            return f(
                "engineer_top_p",
                format!("must be in (0, 1], got {}", self.engineer_top_p),
            );
        }
        if !(self.rope_theta > 0.0 && self.rope_theta.is_finite()) {
            return f("rope_theta", "must be positive".into());
        }
        if !(self.lora_alpha > 0.0 && self.lora_alpha.is_finite()) {
            return f("lora_alpha", "must be positive".into());
        }
        if self.lora_rank > 0 && self.lora_targets.is_empty() {
            return f("lora_targets", "must name at least one module".into());
        }
        for t in &self.lora_targets {
            if !LORA_MODULES.contains(&t.as_str()) {
                return f(
                    "lora_targets",
                    format!("unknown module {t:?} (expected one of {:?})", LORA_MODULES),
                );
            }
        }
        Ok(())
    }

    pub fn sampling(&self) -> Sampling {
        Sampling {
            temperature: self.temperature,
            top_p: self.top_p,
            max_new_tokens: self.max_new_tokens as usize,
        }
    }

    /// How `current`/`base` sample their reply.
    pub fn engineer_sampling(&self) -> Sampling {
        Sampling {
            temperature: self.engineer_temperature,
            top_p: self.engineer_top_p,
            max_new_tokens: self.engineer_max_new_tokens as usize,
        }
    }

    pub fn lora(&self) -> Option<LoraSpec> {
        (self.lora_rank > 0).then(|| LoraSpec {
            rank: self.lora_rank as i64,
            alpha: self.lora_alpha,
            targets: self.lora_targets.clone(),
        })
    }

    /// The scratch architecture with a vocabulary of `vocab` tokens.
    pub fn scratch_config(&self, vocab: i64, eos: Vec<i64>) -> LmConfig {
        let family = match self.family.as_str() {
            "qwen2" => Family::Qwen2,
            "llama" => Family::Llama,
            _ => Family::Qwen3,
        };
        LmConfig {
            family,
            vocab_size: vocab,
            hidden_size: self.hidden_size as i64,
            intermediate_size: self.intermediate_size as i64,
            num_hidden_layers: self.layers as i64,
            num_attention_heads: self.heads as i64,
            num_key_value_heads: self.kv_heads as i64,
            head_dim: if family == Family::Qwen2 {
                (self.hidden_size / self.heads) as i64
            } else {
                self.head_dim as i64
            },
            rms_norm_eps: 1e-6,
            rope_theta: self.rope_theta,
            rope_scaling: None,
            qkv_bias: family == Family::Qwen2,
            qk_norm: family == Family::Qwen3,
            tie_word_embeddings: self.tie_word_embeddings,
            max_position_embeddings: 4096,
            bos_token_id: None,
            eos_token_ids: eos,
        }
    }
}

/// Qwen2/Qwen3's pre-tokenizer split pattern (needs look-ahead: the `fancy-regex`
/// feature of `tokenizers`).
pub const QWEN_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// The cells format's split: a ` (row,col)` cell is one piece (so BPE makes it one
/// token: a map's cells are matched by token, never counted), numbers stay whole, and
/// the rest is Qwen's pattern.
pub const CELLS_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)| ?\(\p{N}+,\p{N}+\)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// How to pick tokens.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Sampling {
    /// Softmax temperature (> 0); ignored when greedy.
    pub temperature: f64,
    /// Nucleus mass in (0, 1]; 1 disables truncation.
    pub top_p: f64,
    /// Most tokens generated per lane.
    pub max_new_tokens: usize,
}

impl Default for Sampling {
    fn default() -> Self {
        Sampling {
            temperature: 1.0,
            top_p: 1.0,
            max_new_tokens: 256,
        }
    }
}

/// Modules LoRA may adapt.
pub const LORA_MODULES: [&str; 7] = [
    "q_proj",
    "k_proj",
    "v_proj",
    "o_proj",
    "gate_proj",
    "up_proj",
    "down_proj",
];

/// LoRA hyper-parameters (from the plan; recorded with every checkpoint).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LoraSpec {
    pub rank: i64,
    pub alpha: f64,
    /// Module names from [`LORA_MODULES`].
    pub targets: Vec<String>,
}

impl LoraSpec {
    pub fn scale(&self) -> f64 {
        self.alpha / self.rank as f64
    }
}
