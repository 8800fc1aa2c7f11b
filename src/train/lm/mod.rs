//! The `lm` policy: a decoder-only language model with Hugging Face parameter names
//! (Qwen3 first; Qwen2/Qwen2.5 and Llama 3 from the same code) that reads the MAPF
//! prompt and writes the whole joint plan in one shot — the paper's trainee — and that
//! can be prompted with anything else (an engineer's context) through [`LmPolicy::generate_text`].
//!
//! Modules:
//! - [`config`]: the architecture, from and to HF `config.json`;
//! - [`model`]: parameters, LoRA, the forward pass with a KV cache;
//! - [`generate`]: batched sampling (temperature, top-p, stop tokens, log-probs);
//! - [`hf`]: reading an HF model directory (safetensors shards, memory-mapped) and
//!   writing one back (`export-checkpoint --hf`);
//! - [`chat`]: the chat templates (written in code) and the byte-level BPE tokenizer a
//!   scratch model trains on its corpus.
//!
//! Where weights come from ([`Origin`]): `scratch` (random from the seed tree, then the
//! stage-0 pretraining) or `hf:DIR` (a model directory, identified by the content hash
//! of each file and re-checked whenever it is loaded). A checkpoint holds only what
//! training changes — the full weights, or the LoRA adapters — plus the optimiser
//! state; under LoRA the frozen base is *referenced* ([`Frozen`]): the HF directory, or
//! a full-weights checkpoint blob in the ledger. A 4B run's ledger grows by adapters.
pub mod chat;
pub mod complete;
pub use crate::plan::lm_config as config;
pub mod decode;
pub mod generate;
pub mod graph;
pub mod hf;
pub mod model;
mod recompute;

use super::compute::Compute;
use super::policy::{LogProbs, Policy, PolicySettings, Rollout};
use crate::env::text::parse_plan_in;
use crate::env::{Instance, Plan};
use crate::record::Hash;
use crate::seed::Seed;
pub use chat::ChatFormat;
pub use config::{Family, LmConfig};
pub use generate::{Generated, Sampling};
use model::{LoraSpec, Model};
use std::collections::BTreeMap;
use tch::{nn, Device, Kind, Tensor};
use tokenizers::Tokenizer;

/// Everything that can go wrong making or loading a language model. Each names the
/// file, tensor or key at fault.
#[derive(Debug, thiserror::Error)]
pub enum LmError {
    #[error("{path}: {message}")]
    Io { path: String, message: String },
    #[error("lm.thinking = true needs a Qwen3 checkpoint (its chat template has a thinking mode); {model} uses the {chat} template")]
    Thinking { model: String, chat: String },
    #[error("{path}: {source}")]
    Config {
        path: String,
        source: config::ConfigError,
    },
    #[error("{path}: {source}")]
    Weights {
        path: String,
        source: model::WeightsError,
    },
    #[error("{path}: not a usable safetensors file: {message}")]
    Safetensors { path: String, message: String },
    #[error("{path}: tokenizer: {source}")]
    Tokenizer {
        path: String,
        #[source]
        source: tokenizers::Error,
    },
    /// The tokenizer failed on text or ids.
    #[error("tokenizer: {0}")]
    Codec(#[source] tokenizers::Error),
    #[error("the tokenizer has {tokenizer} ids and the model's vocabulary {model}: an id past the embedding table cannot be embedded")]
    Vocabulary { tokenizer: i64, model: i64 },
    #[error("model directory {dir}: {file} has changed since the ledger recorded it (blake3 {found}, recorded {expected})")]
    Changed {
        dir: String,
        file: String,
        expected: String,
        found: String,
    },
    /// A blob a checkpoint references could not be read from the ledger.
    #[error("checkpoint blob {} is not in the ledger: {source}", .hash.short())]
    Blob {
        hash: Hash,
        #[source]
        source: crate::ledger::LedgerError,
    },
    /// The base checkpoint a LoRA checkpoint was trained on does not load.
    #[error("checkpoint blob {} is not in the ledger: {source}", .hash.short())]
    Base {
        hash: Hash,
        #[source]
        source: Box<super::TrainError>,
    },
    /// The base checkpoint a LoRA checkpoint names holds another kind of policy.
    #[error("checkpoint blob {} is not in the ledger: not an lm checkpoint", .hash.short())]
    BaseNotLm { hash: Hash },
    #[error("lm settings: {0}")]
    Spec(String),
    #[error("lm settings: {0}")]
    Plan(#[from] crate::plan::PlanError),
}

pub use crate::plan::trainer::{LmSpec, PromptStyle, TrainingAttention, TrainingNorms};

pub use crate::record::checkpoint::{Frozen, LmArch, Origin};

/// Fetches ledger blobs by hash (checkpoints reference the tokenizer and, under LoRA,
/// a base checkpoint).
pub type BlobSource<'a> = &'a dyn Fn(&Hash) -> Result<Vec<u8>, crate::ledger::LedgerError>;

/// The language-model policy.
pub struct LmPolicy {
    pub model: Model,
    pub tokenizer: Tokenizer,
    /// The exact `tokenizer.json` bytes (stored as a ledger blob).
    pub tokenizer_json: Vec<u8>,
    pub arch: LmArch,
    /// Tokens that end a generation: the chat turn's end and the config's EOS ids.
    pub stop: Vec<u32>,
    /// How scoring and training bound memory and which kernels they run
    /// ([`Policy::apply_settings`]); the default scores every target at once, keeps
    /// every activation and runs the recorded kernels.
    settings: PolicySettings,
}

impl LmPolicy {
    /// Assemble a policy from its parts.
    pub fn new(model: Model, tokenizer_json: Vec<u8>, arch: LmArch) -> Result<LmPolicy, LmError> {
        let tokenizer =
            chat::tokenizer_from_bytes(&tokenizer_json).map_err(|m| LmError::Tokenizer {
                path: "tokenizer.json".into(),
                source: m,
            })?;
        // An id past the embedding table would index out of range at the first forward.
        let ids = tokenizer.get_vocab_size(true) as i64;
        if ids > arch.config.vocab_size {
            return Err(LmError::Vocabulary {
                tokenizer: ids,
                model: arch.config.vocab_size,
            });
        }
        let mut stop: Vec<u32> = arch
            .config
            .eos_token_ids
            .iter()
            .map(|&i| i as u32)
            .collect();
        for t in arch.chat.stop_tokens() {
            if let Some(id) = tokenizer.token_to_id(t) {
                stop.push(id);
            }
        }
        stop.sort_unstable();
        stop.dedup();
        Ok(LmPolicy {
            model,
            tokenizer,
            tokenizer_json,
            arch,
            stop,
            settings: PolicySettings::default(),
        })
    }

    /// Load an HF model directory as a policy (full weights trainable, or frozen under
    /// `lora` with fresh adapters from `seed`).
    pub fn from_hf_dir(
        dir: &std::path::Path,
        compute: impl Into<Compute>,
        lora: Option<LoraSpec>,
        prompt: PromptStyle,
        sampling: Sampling,
        seed: Seed,
    ) -> Result<LmPolicy, LmError> {
        let m = hf::read_dir(dir)?;
        let weights = hf::load_weights(dir, &m.config)?;
        let model = Model::from_weights(m.config.clone(), weights, compute, lora.clone(), seed)
            .map_err(|e| LmError::Weights {
                path: dir.display().to_string(),
                source: e,
            })?;
        let arch = LmArch {
            config: m.config.clone(),
            tokenizer: Hash::of_blob(&m.tokenizer_json),
            chat: m.chat,
            prompt,
            sampling,
            origin: Origin::Hf {
                dir: dir.display().to_string(),
                files: m.files,
            },
            frozen: lora.as_ref().map(|_| Frozen::Origin),
            lora,
        };
        LmPolicy::new(model, m.tokenizer_json, arch)
    }

    /// Rebuild from a checkpoint's architecture record: the frozen base (if any) is
    /// loaded from where the record says, the trainable tensors are then restored by
    /// the checkpoint loader.
    pub fn from_arch(
        arch: LmArch,
        compute: impl Into<Compute>,
        blobs: BlobSource<'_>,
    ) -> Result<LmPolicy, LmError> {
        let tokenizer_json = blobs(&arch.tokenizer).map_err(|e| LmError::Blob {
            hash: arch.tokenizer,
            source: e,
        })?;
        let weights = match (&arch.frozen, &arch.origin) {
            (None, _) => model::Model::random_weights(&arch.config, Seed::root(0)),
            (Some(Frozen::Origin), Origin::Hf { dir, files }) => {
                let dir = std::path::Path::new(dir);
                hf::check_files(dir, files)?;
                hf::load_weights(dir, &arch.config)?
            }
            (Some(Frozen::Origin), Origin::Scratch) => {
                return Err(LmError::Spec(
                    "a scratch model has no origin directory to freeze".into(),
                ))
            }
            (Some(Frozen::Checkpoint(h)), _) => {
                let bytes = blobs(h).map_err(|e| LmError::Blob {
                    hash: *h,
                    source: e,
                })?;
                let base = super::TrainState::load(&bytes, Device::Cpu, blobs).map_err(|e| {
                    LmError::Base {
                        hash: *h,
                        source: Box::new(e),
                    }
                })?;
                match base.policy.as_lm() {
                    Some(p) => p.model.merged_weights(),
                    None => return Err(LmError::BaseNotLm { hash: *h }),
                }
            }
        };
        let model = Model::from_weights(
            arch.config.clone(),
            weights,
            compute,
            arch.lora.clone(),
            Seed::root(0),
        )
        .map_err(|e| LmError::Weights {
            path: "checkpoint".into(),
            source: e,
        })?;
        LmPolicy::new(model, tokenizer_json, arch)
    }

    /// Switch a full-weights policy to LoRA on top of its current weights (frozen, in
    /// the compute dtype), with fresh adapters from `seed`. `frozen_blob` is the ledger
    /// blob of the checkpoint those weights were loaded from.
    pub fn into_lora(
        self,
        spec: LoraSpec,
        frozen_blob: Hash,
        seed: Seed,
    ) -> Result<LmPolicy, LmError> {
        let compute = Compute {
            device: self.model.device(),
            dtype: self.model.dtype,
        };
        let weights = self.model.merged_weights();
        let model = Model::from_weights(
            self.arch.config.clone(),
            weights,
            compute,
            Some(spec.clone()),
            seed,
        )
        .map_err(|e| LmError::Weights {
            path: "checkpoint".into(),
            source: e,
        })?;
        let arch = LmArch {
            frozen: Some(match self.arch.origin {
                Origin::Hf { .. } if self.arch.frozen.is_some() => Frozen::Origin,
                _ => Frozen::Checkpoint(frozen_blob),
            }),
            lora: Some(spec),
            ..self.arch
        };
        let mut p = LmPolicy::new(model, self.tokenizer_json, arch)?;
        p.apply_settings(self.settings);
        Ok(p)
    }

    /// Token ids of text (special tokens inside it are recognised); empty when the
    /// tokenizer fails (the training loop's callers treat that as an unusable prompt;
    /// [`LmPolicy::try_encode`] says why).
    pub fn encode(&self, text: &str) -> Vec<u32> {
        self.try_encode(text).unwrap_or_default()
    }

    /// Token ids of text, or the tokenizer's error.
    pub fn try_encode(&self, text: &str) -> Result<Vec<u32>, LmError> {
        self.tokenizer
            .encode(text, false)
            .map(|e| e.get_ids().to_vec())
            .map_err(LmError::Codec)
    }

    /// Text of generated ids (special tokens skipped); empty when the tokenizer fails
    /// (a reply that then parses as no plan; [`LmPolicy::try_decode`] says why).
    pub fn decode(&self, ids: &[u32]) -> String {
        self.try_decode(ids).unwrap_or_default()
    }

    /// Text of generated ids, or the tokenizer's error.
    pub fn try_decode(&self, ids: &[u32]) -> Result<String, LmError> {
        self.tokenizer.decode(ids, true).map_err(LmError::Codec)
    }

    /// The chat-formatted prompt ids for a user message.
    pub fn chat_ids(&self, user: &str) -> Vec<u32> {
        self.encode(&self.arch.chat.wrap(user))
    }

    /// The MAPF prompt's text for an instance.
    pub fn task_text(&self, inst: &Instance) -> String {
        self.arch.prompt.task_text(inst)
    }

    /// Generate replies to arbitrary user messages (engineer prompts, `lm generate`).
    pub fn generate_text(
        &self,
        users: &[String],
        per_prompt: usize,
        sampling: &Sampling,
        greedy: bool,
        seed: Seed,
    ) -> Vec<Generated> {
        let prompts: Vec<Vec<u32>> = users.iter().map(|u| self.chat_ids(u)).collect();
        let budgets = vec![sampling.max_new_tokens; prompts.len()];
        generate::generate(
            &self.model,
            &prompts,
            per_prompt,
            &budgets,
            sampling,
            greedy,
            &self.stop,
            seed,
            true,
        )
    }

    /// Teacher-forced log-probs of `targets[i]` after `prompts[i]` (f32, with
    /// gradients), each target token at the sampling temperature, plus entropies and
    /// the row of each token. `use_lora: false` scores with the frozen base.
    ///
    /// Rows of similar length are scored together ([`length_buckets`]): one long
    /// sample (a plan that never stopped) would otherwise pad every other row of the
    /// batch to its length.
    pub fn token_log_probs(
        &self,
        prompts: &[&[u32]],
        targets: &[&[u32]],
        temperature: f64,
        use_lora: bool,
    ) -> LogProbs {
        let d = self.model.device();
        let rows: Vec<usize> = (0..targets.len())
            .filter(|&i| !targets[i].is_empty())
            .collect();
        let lens: Vec<usize> = rows
            .iter()
            .map(|&i| prompts[i].len() + targets[i].len() - 1)
            .collect();
        let buckets = length_buckets(&lens);
        if buckets.len() <= 1 {
            return self.score_rows(prompts, targets, &rows, temperature, use_lora);
        }
        // Score each bucket, then put the tokens back in row order.
        let mut start = vec![0usize; targets.len()];
        let mut offset = 0;
        let mut parts = Vec::with_capacity(buckets.len());
        for b in &buckets {
            let part: Vec<usize> = b.iter().map(|&k| rows[k]).collect();
            for &i in &part {
                start[i] = offset;
                offset += targets[i].len();
            }
            parts.push(self.score_rows(prompts, targets, &part, temperature, use_lora));
        }
        let perm: Vec<i64> = rows
            .iter()
            .flat_map(|&i| (start[i]..start[i] + targets[i].len()).map(|k| k as i64))
            .collect();
        let perm = Tensor::from_slice(&perm).to(d);
        let cat = |f: fn(&LogProbs) -> &Tensor| {
            Tensor::cat(&parts.iter().map(f).collect::<Vec<_>>(), 0).index_select(0, &perm)
        };
        LogProbs {
            per_action: cat(|l| &l.per_action),
            entropy: cat(|l| &l.entropy),
            rollout_of: cat(|l| &l.rollout_of),
        }
    }

    /// [`Self::token_log_probs`] of the given rows (ascending), padded to one length.
    fn score_rows(
        &self,
        prompts: &[&[u32]],
        targets: &[&[u32]],
        rows: &[usize],
        temperature: f64,
        use_lora: bool,
    ) -> LogProbs {
        let d = self.model.device();
        if rows.is_empty() {
            let z = Tensor::zeros([0], (Kind::Float, d));
            return LogProbs {
                per_action: z.shallow_clone(),
                entropy: z,
                rollout_of: Tensor::zeros([0], (Kind::Int64, d)),
            };
        }
        let batch = RowBatch::new(prompts, targets, rows, d, self.settings.training_attention);
        let hid = self
            .model
            .uncached(&batch.tokens, &batch.layer_inputs(&self.model), use_lora);
        let (per_action, entropy) =
            self.target_log_probs(&batch.flat(&hid), &batch.pick, &batch.target, temperature);
        LogProbs {
            per_action,
            entropy,
            rollout_of: Tensor::from_slice(&batch.row_of).to(d),
        }
    }

    /// The ranges of `n` target tokens scored together: chunks of the plan's
    /// `log_prob_chunk` tokens, or all of them.
    fn target_chunks(&self, n: usize) -> Vec<std::ops::Range<usize>> {
        let chunk = match self.settings.log_prob_chunk as usize {
            0 => n.max(1),
            c => c,
        };
        (0..n)
            .step_by(chunk)
            .map(|s| s..(s + chunk).min(n))
            .collect()
    }

    /// Log-probs and entropies `[A]` (f32) of the targets `target` read from the rows
    /// `pick` of the flat hidden states `[B T, hidden]`, one chunk of targets at a time
    /// ([`Self::target_chunks`]), so the `[tokens, vocabulary]` f32 tensors exist for one
    /// chunk at once when nothing keeps them for a backward pass.
    fn target_log_probs(
        &self,
        flat: &Tensor,
        pick: &[i64],
        target: &[i64],
        temperature: f64,
    ) -> (Tensor, Tensor) {
        let d = flat.device();
        let parts: Vec<(Tensor, Tensor)> = self
            .target_chunks(pick.len())
            .into_iter()
            .map(|r| {
                let sel = flat.index_select(0, &Tensor::from_slice(&pick[r.clone()]).to(d));
                self.target_head(&sel, &Tensor::from_slice(&target[r]).to(d), temperature)
            })
            .collect();
        if parts.len() == 1 {
            return parts.into_iter().next().expect("one part");
        }
        let (lp, ent): (Vec<Tensor>, Vec<Tensor>) = parts.into_iter().unzip();
        (Tensor::cat(&lp, 0), Tensor::cat(&ent, 0))
    }

    /// Log-probs of `target` `[C]` and the entropies of the distributions, from the
    /// hidden states `sel` `[C, hidden]` at the sampling temperature.
    fn target_head(&self, sel: &Tensor, target: &Tensor, temperature: f64) -> (Tensor, Tensor) {
        let logp = (self.model.logits(sel) / temperature).log_softmax(-1, Kind::Float);
        let entropy = -(logp.exp() * &logp).sum_dim_intlist(-1, false, Kind::Float);
        let per_action = logp.gather(1, &target.unsqueeze(1), false).squeeze_dim(1);
        (per_action, entropy)
    }

    /// New-token budget for an instance's plan: the prompt style's tokens for the
    /// longest sensible plan (`max_steps` moves an agent), capped by the plan's budget.
    /// A thinking reply reasons before it writes the plan, so it may take the whole
    /// budget (`max_new_tokens`, as `plan check` counts it): cut at the plan's own
    /// length it would stop inside its `<think>` block and never answer.
    pub fn plan_budget(&self, inst: &Instance) -> usize {
        let max_new = self.arch.sampling.max_new_tokens;
        if self.arch.chat.thinks() {
            return max_new;
        }
        let steps = super::policy::max_steps(inst);
        self.arch
            .prompt
            .plan_tokens(inst.agents(), steps)
            .min(max_new)
    }

    /// `per_instance` rollouts of every instance that a decode did not write: each is its
    /// whole token budget ([`Self::plan_budget`]) of tokens drawn uniformly from `seed`
    /// (no stop token among them), recorded at the log-probability of a uniform draw.
    /// The rows a GRPO step of random weights trains, whose every lane runs to its
    /// budget, without the decode (`lm bench --grpo-at-budget`: the training and KL
    /// reference phases of a step too long to decode in one lease).
    pub fn rollouts_at_budget(
        &self,
        instances: &[Instance],
        per_instance: usize,
        seed: Seed,
    ) -> Vec<Rollout> {
        use rand::Rng as _;
        let ids = (self.tokenizer.get_vocab_size(true) as i64).min(self.arch.config.vocab_size);
        let ids = ids.max(1) as u32;
        let logprob = -(ids as f32).ln();
        let mut rng = seed.rng();
        let gens = instances
            .iter()
            .flat_map(|i| std::iter::repeat_n(self.plan_budget(i), per_instance))
            .map(|budget| {
                let tokens: Vec<u32> = (0..budget)
                    .map(|_| {
                        let mut t = rng.random_range(0..ids);
                        while self.stop.contains(&t) && ids > self.stop.len() as u32 {
                            t = (t + 1) % ids;
                        }
                        t
                    })
                    .collect();
                Generated {
                    logprobs: vec![logprob; tokens.len()],
                    tokens,
                    stopped: false,
                }
            })
            .collect();
        self.rollouts_of(instances, gens, per_instance)
    }

    fn rollouts_of(
        &self,
        instances: &[Instance],
        gens: Vec<Generated>,
        per_instance: usize,
    ) -> Vec<Rollout> {
        gens.into_iter()
            .enumerate()
            .map(|(l, g)| {
                let i = l / per_instance;
                let text = self.decode(&g.tokens);
                Rollout {
                    instance: i,
                    plan: parse_plan_in(self.arch.chat.answer(&text), &instances[i]),
                    plan_bytes: text.into_bytes(),
                    actions: g.tokens,
                    logprobs: g.logprobs,
                }
            })
            .collect()
    }

    fn scoring_temperature(&self) -> f64 {
        self.arch.sampling.temperature
    }
}

impl Policy for LmPolicy {
    fn kind(&self) -> &'static str {
        "lm"
    }
    fn vars(&self) -> &nn::VarStore {
        &self.model.vs
    }
    fn vars_mut(&mut self) -> &mut nn::VarStore {
        &mut self.model.vs
    }

    fn sample(
        &self,
        instances: &[Instance],
        per_instance: usize,
        greedy: bool,
        seed: Seed,
    ) -> Vec<Rollout> {
        let prompts: Vec<Vec<u32>> = instances
            .iter()
            .map(|i| self.chat_ids(&self.task_text(i)))
            .collect();
        let budgets: Vec<usize> = instances.iter().map(|i| self.plan_budget(i)).collect();
        let per = if greedy { 1 } else { per_instance };
        let gens = generate::generate(
            &self.model,
            &prompts,
            per,
            &budgets,
            &self.arch.sampling,
            greedy,
            &self.stop,
            seed,
            true,
        );
        self.rollouts_of(instances, gens, per)
    }

    fn log_probs(&self, instances: &[Instance], rollouts: &[Rollout]) -> LogProbs {
        self.log_probs_with(instances, rollouts, true)
    }

    /// With `log_prob_chunk` or `recompute` set, the bounded backward of
    /// [`recompute`]; otherwise one forward and one backward.
    fn backward_loss(
        &self,
        instances: &[Instance],
        rollouts: &[Rollout],
        loss: &mut dyn FnMut(&LogProbs) -> Tensor,
    ) {
        if self.settings.log_prob_chunk == 0 && !self.settings.recompute {
            let lp = self.log_probs(instances, rollouts);
            let l = loss(&lp);
            if lp.per_action.numel() > 0 {
                l.backward();
            }
            return;
        }
        let prompts = self.prompts_of(instances, rollouts);
        let p: Vec<&[u32]> = rollouts
            .iter()
            .map(|r| prompts[&r.instance].as_slice())
            .collect();
        let t: Vec<&[u32]> = rollouts.iter().map(|r| r.actions.as_slice()).collect();
        recompute::backward_loss(self, &p, &t, self.scoring_temperature(), loss);
    }

    /// The prompt and the reply but its last token, as [`RowBatch`] lays a row out.
    fn row_tokens(&self, instances: &[Instance], rollouts: &[Rollout]) -> Vec<usize> {
        let prompts = self.prompts_of(instances, rollouts);
        rollouts
            .iter()
            .map(|r| (prompts[&r.instance].len() + r.actions.len()).saturating_sub(1))
            .collect()
    }

    fn apply_settings(&mut self, settings: PolicySettings) {
        self.settings = settings;
        self.model.generation_memory = settings.generation_memory;
        self.model.lora_in_compute_dtype = settings.lora_in_compute_dtype;
        self.model
            .set_fused_norms(settings.training_norms == TrainingNorms::Fused);
    }

    fn reference_log_probs(
        &self,
        instances: &[Instance],
        rollouts: &[Rollout],
    ) -> Option<LogProbs> {
        // Under LoRA the frozen base is the KL reference: the same model, adapters off.
        self.model
            .lora
            .is_some()
            .then(|| self.log_probs_with(instances, rollouts, false))
    }

    fn encode_plan(&self, inst: &Instance, plan: &Plan) -> Vec<u32> {
        let mut ids = self.encode(&self.arch.prompt.plan_text(inst, plan));
        if let Some(end) = self.tokenizer.token_to_id(self.arch.chat.end_token()) {
            ids.push(end);
        }
        ids
    }

    fn arch(&self) -> Vec<u8> {
        crate::record::codec::encode(&self.arch)
    }

    fn side_blobs(&self) -> Vec<Vec<u8>> {
        vec![self.tokenizer_json.clone()]
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any> {
        self
    }
}

impl LmPolicy {
    /// The attention kernel torch picks for this policy's training forward of a row of
    /// `len` tokens, as its settings lay the rows out ([`Model::attention_kernel`]).
    pub fn attention_kernel(&self, len: i64) -> model::AttentionKernel {
        let masked = self.settings.training_attention == TrainingAttention::Masked;
        self.model.attention_kernel(len.max(1), masked)
    }

    /// The chat-formatted prompt of every instance the rollouts answer.
    fn prompts_of(
        &self,
        instances: &[Instance],
        rollouts: &[Rollout],
    ) -> BTreeMap<usize, Vec<u32>> {
        let mut prompts: BTreeMap<usize, Vec<u32>> = BTreeMap::new();
        for r in rollouts {
            prompts
                .entry(r.instance)
                .or_insert_with(|| self.chat_ids(&self.task_text(&instances[r.instance])));
        }
        prompts
    }

    fn log_probs_with(
        &self,
        instances: &[Instance],
        rollouts: &[Rollout],
        use_lora: bool,
    ) -> LogProbs {
        let prompts = self.prompts_of(instances, rollouts);
        let p: Vec<&[u32]> = rollouts
            .iter()
            .map(|r| prompts[&r.instance].as_slice())
            .collect();
        let t: Vec<&[u32]> = rollouts.iter().map(|r| r.actions.as_slice()).collect();
        self.token_log_probs(&p, &t, self.scoring_temperature(), use_lora)
    }
}

/// The texts a scratch language model's tokenizer is trained on: the prompts and
/// optimal plans of the warm-up data, in the chat format the model will read.
pub fn pretraining_corpus(spec: &LmSpec, data: &[crate::env::Solved]) -> Vec<String> {
    data.iter()
        .map(|it| {
            format!(
                "{}{}<|im_end|>",
                ChatFormat::ChatMl.wrap(&spec.prompt.task_text(&it.instance)),
                spec.prompt.plan_text(&it.instance, &it.plan)
            )
        })
        .collect()
}

/// Stage 0's starting policy for a plan's `[lm]`: a scratch model (a byte-level BPE
/// tokenizer trained on `corpus()`, random weights from `seed`) or an HF directory
/// (LoRA adapters from the start when `lora_rank > 0`).
pub fn init(
    spec: &LmSpec,
    compute: impl Into<Compute>,
    seed: Seed,
    corpus: impl FnOnce() -> Vec<String>,
) -> Result<LmPolicy, LmError> {
    let compute = compute.into();
    if let Some(dir) = spec.hf_dir() {
        spec.check_hf_dir()?;
        let mut p = LmPolicy::from_hf_dir(
            std::path::Path::new(dir),
            compute,
            spec.lora(),
            spec.prompt,
            spec.sampling(),
            seed.child("lora", 0),
        )?;
        if spec.thinking {
            p.arch.chat = p.arch.chat.thinking().ok_or_else(|| LmError::Thinking {
                model: dir.to_string(),
                chat: format!("{:?}", p.arch.chat),
            })?;
        }
        return Ok(p);
    }
    if spec.thinking {
        return Err(LmError::Thinking {
            model: "a scratch model".into(),
            chat: format!("{:?}", ChatFormat::ChatMl),
        });
    }
    let tokenizer_json = chat::train_bpe(
        &corpus(),
        spec.vocab_size as usize,
        spec.prompt.split_pattern(),
    )
    .map_err(|m| LmError::Tokenizer {
        path: "(scratch corpus)".into(),
        source: m,
    })?;
    let tok = chat::tokenizer_from_bytes(&tokenizer_json).map_err(|m| LmError::Tokenizer {
        path: "(scratch corpus)".into(),
        source: m,
    })?;
    let end = tok
        .token_to_id(ChatFormat::ChatMl.end_token())
        .expect("scratch tokenizers carry the ChatML specials") as i64;
    let config = spec.scratch_config(tok.get_vocab_size(true) as i64, vec![end]);
    let weights = Model::random_weights(&config, seed.child("weights", 0));
    let model = Model::from_weights(config.clone(), weights, compute, None, seed)
        .expect("random weights have the config's shapes");
    let arch = LmArch {
        config,
        tokenizer: Hash::of_blob(&tokenizer_json),
        chat: ChatFormat::ChatMl,
        prompt: spec.prompt,
        sampling: spec.sampling(),
        origin: Origin::Scratch,
        frozen: None,
        lora: None,
    };
    LmPolicy::new(model, tokenizer_json, arch)
}

/// The `LmPolicy` inside a boxed policy, by value (None for other policies).
// An inherent method on the trait object, defined here rather than in `policy.rs`, so
// the `Policy` trait knows no implementor: `policy.as_lm()` works on any `dyn Policy`.
impl dyn Policy {
    /// The language model behind the policy, for engineers that prompt it.
    pub fn as_lm(&self) -> Option<&LmPolicy> {
        self.as_any().downcast_ref::<LmPolicy>()
    }
}

pub fn downcast(policy: Box<dyn Policy>) -> Option<LmPolicy> {
    policy.into_any().downcast::<LmPolicy>().ok().map(|b| *b)
}

/// Rows of [`LmPolicy::token_log_probs`] laid out for one forward: prompt and target
/// (all but its last token) padded to one length, and for every target token its flat
/// position in `[B T]`, its id and its row.
///
/// Under [`TrainingAttention::Masked`] rows are left-padded and attend under an
/// additive bias that hides the padding; under [`TrainingAttention::Causal`] they are
/// right-padded and attend causally with no mask: a real token sees only the tokens
/// before it, all real, and the padding after the row is never read (its outputs are
/// picked by no target, so no gradient flows from them). Real tokens sit at positions
/// `0..len` either way.
struct RowBatch {
    /// `[B, T]` token ids and positions.
    tokens: Tensor,
    positions: Tensor,
    attention: TrainingAttention,
    /// Each row's left padding (all 0 when right-padded).
    pads: Vec<i64>,
    len: i64,
    /// Per target token, in row order: where its hidden state is in `[B T]` (the
    /// position before it), its id, and its row's index among all rows.
    pick: Vec<i64>,
    target: Vec<i64>,
    row_of: Vec<i64>,
}

impl RowBatch {
    /// `rows` (ascending, not empty) of `prompts` and `targets`, on `device`, laid out
    /// for `attention`.
    fn new(
        prompts: &[&[u32]],
        targets: &[&[u32]],
        rows: &[usize],
        device: Device,
        attention: TrainingAttention,
    ) -> RowBatch {
        let len = |i: usize| prompts[i].len() + targets[i].len() - 1;
        let t = rows.iter().map(|&i| len(i)).max().unwrap_or(0) as i64;
        let b = rows.len() as i64;
        let mut toks = Vec::with_capacity((b * t) as usize);
        let mut pos = Vec::with_capacity((b * t) as usize);
        let mut pads = Vec::with_capacity(rows.len());
        let (mut pick, mut target, mut row_of) = (Vec::new(), Vec::new(), Vec::new());
        for (row, &i) in rows.iter().enumerate() {
            let fill = t - len(i) as i64;
            let pad = match attention {
                TrainingAttention::Masked => fill,
                TrainingAttention::Causal => 0,
            };
            pads.push(pad);
            toks.extend(std::iter::repeat_n(0i64, pad as usize));
            toks.extend(prompts[i].iter().map(|&x| x as i64));
            toks.extend(targets[i][..targets[i].len() - 1].iter().map(|&x| x as i64));
            toks.extend(std::iter::repeat_n(0i64, (fill - pad) as usize));
            pos.extend((0..t).map(|j| (j - pad).max(0)));
            for (k, &token) in targets[i].iter().enumerate() {
                pick.push(row as i64 * t + pad + (prompts[i].len() - 1 + k) as i64);
                target.push(token as i64);
                row_of.push(i as i64);
            }
        }
        RowBatch {
            tokens: Tensor::from_slice(&toks).view([b, t]).to(device),
            positions: Tensor::from_slice(&pos).view([b, t]).to(device),
            attention,
            pads,
            len: t,
            pick,
            target,
            row_of,
        }
    }

    /// What every layer of `model`'s forward of these rows shares: RoPE of the
    /// positions and, for left-padded rows, the mask (its f32 bias made on the model's
    /// device and cast at once, so it lives no longer than that).
    fn layer_inputs(&self, model: &model::Model) -> model::LayerInputs {
        match self.attention {
            TrainingAttention::Masked => {
                let bias = generate::attention_bias(&self.pads, self.len, self.len, model.device());
                model.layer_inputs(&self.positions, Some(&bias))
            }
            TrainingAttention::Causal => model.layer_inputs(&self.positions, None),
        }
    }

    /// Hidden states `[B, T, hidden]` as `[B T, hidden]`, the rows `pick` indexes.
    fn flat(&self, hidden: &Tensor) -> Tensor {
        let h = hidden.size().last().copied().expect("a hidden dim");
        hidden.view([-1, h])
    }
}

/// Groups of row indices (each ascending) whose lengths are close enough to be padded
/// to one length: rows go longest first, and a group takes the next row while its
/// padding stays within a quarter of its tokens. Rows of equal length always share a
/// group, so a batch of similar rows stays one forward.
pub fn length_buckets(lens: &[usize]) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..lens.len()).collect();
    order.sort_by_key(|&k| std::cmp::Reverse(lens[k]));
    let mut out: Vec<Vec<usize>> = Vec::new();
    let (mut longest, mut sum) = (0usize, 0usize);
    for k in order {
        let fits = out.last().is_some_and(|g| {
            lens[k] == longest || 4 * (g.len() + 1) * longest <= 5 * (sum + lens[k])
        });
        if fits {
            out.last_mut().expect("a group").push(k);
            sum += lens[k];
        } else {
            out.push(vec![k]);
            longest = lens[k];
            sum = lens[k];
        }
    }
    for g in &mut out {
        g.sort_unstable();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::{generate as instances, Budget, GeneratorConfig};

    #[test]
    fn length_buckets_cover_every_row_once_and_split_an_outlier() {
        let lens = [70, 72, 300, 71, 70, 69, 40];
        let b = length_buckets(&lens);
        let mut all: Vec<usize> = b.iter().flatten().copied().collect();
        all.sort_unstable();
        assert_eq!(all, (0..lens.len()).collect::<Vec<_>>());
        assert!(b.contains(&vec![2]), "the 300-token row alone: {b:?}");
        for g in &b {
            assert!(g.windows(2).all(|w| w[0] < w[1]), "ascending: {b:?}");
            let longest = g.iter().map(|&k| lens[k]).max().unwrap();
            let sum: usize = g.iter().map(|&k| lens[k]).sum();
            assert!(
                4 * g.len() * longest <= 5 * sum,
                "padding over a quarter: {b:?}"
            );
        }
        assert_eq!(length_buckets(&[5, 5, 5]), vec![vec![0, 1, 2]]);
        assert!(length_buckets(&[]).is_empty());
    }

    /// 3 prompts x 4 samples with different budgets: decode steps of 12 and 8 rows take
    /// the plain attention path, the last 4 rows the fused one; training scores the
    /// rows in length buckets. Both must give the sampler's log-probs.
    #[test]
    fn batched_decode_log_probs_equal_bucketed_training_log_probs() {
        let spec = LmSpec::default();
        let cfg = GeneratorConfig::uniform(2, [3, 4], 0.1, 0.2);
        let data = instances(&cfg, 32, Seed::root(1), Budget::default()).unwrap();
        let p = init(&spec, Device::Cpu, Seed::root(2), || {
            pretraining_corpus(&spec, &data)
        })
        .unwrap();
        let prompts = vec![
            p.chat_ids("agent 1:"),
            p.chat_ids("4x4 2 agents"),
            p.chat_ids("holes"),
        ];
        let s = Sampling {
            temperature: 0.7,
            top_p: 1.0,
            max_new_tokens: 40,
        };
        let gens = generate::generate(
            &p.model,
            &prompts,
            4,
            &[5, 40, 20],
            &s,
            false,
            &[],
            Seed::root(5),
            true,
        );
        let ps: Vec<&[u32]> = (0..12).map(|l| prompts[l / 4].as_slice()).collect();
        let ts: Vec<&[u32]> = gens.iter().map(|g| g.tokens.as_slice()).collect();
        let lens: Vec<usize> = (0..12).map(|l| ps[l].len() + ts[l].len() - 1).collect();
        assert!(length_buckets(&lens).len() > 1, "{lens:?}");
        let lp = tch::no_grad(|| p.token_log_probs(&ps, &ts, 0.7, true));
        let trained = Vec::<f32>::try_from(lp.per_action).unwrap();
        let sampled: Vec<f32> = gens.iter().flat_map(|g| g.logprobs.clone()).collect();
        assert_eq!(trained.len(), sampled.len());
        let d = trained
            .iter()
            .zip(&sampled)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f32::max);
        assert!(d < 1e-5, "max |sampled - trained| = {d}");
        let of = Vec::<i64>::try_from(lp.rollout_of).unwrap();
        let expected: Vec<i64> = (0..12)
            .flat_map(|l| std::iter::repeat_n(l as i64, ts[l].len()))
            .collect();
        assert_eq!(of, expected);
    }
}
