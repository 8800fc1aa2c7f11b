//! `ledger plan check`: the memory plan of a ledger plan, before a GPU is booked.
//!
//! From the plan alone (and the model's `config.json` and `tokenizer.json` where the
//! `hf:` directory is present) it builds the workloads a run will put on the device —
//! a GRPO group's generation, the training micro-batch, the KL reference, an evaluation
//! batch, the engineer's reply, a stage-0 warm-up — and estimates each one's peak with
//! [`crate::train::memory`], as the run would cut it: generation in waves of lanes
//! under the generation budget (`[lm] generation_memory`, or on CUDA derived from the
//! GPU's memory), training micro-batches with recomputed layers and log-probs in
//! chunks where `[grpo]` asks, and attention by the device's kernel. Given the GPU's
//! memory it says whether the run fits and, if not, which single setting
//! (micro-batch, batch, group, max new tokens, evaluation batch, LoRA rank) would make
//! it fit, or else which settings together would. [`gate`] is the same check as
//! `ledger run` makes it before a CUDA run.
pub mod gate;

use crate::engineer::prompt::TokenCounter;
use crate::env::{generate, Budget, GeneratorConfig, Instance};
use crate::plan::LedgerPlan;
use crate::seed::Seed;
use crate::train::lm::config::LmConfig;
use crate::train::lm::{ChatFormat, PromptStyle};
use crate::train::memory::{
    self, AttentionKernel, Estimator, Generation, Training, TrainingLayout, CUDA_RESERVE,
};
use schemars::JsonSchema;
use serde::Serialize;

/// What `ledger plan check --json` prints.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct MemoryPlan {
    /// The plan's name.
    pub plan: String,
    /// `cpu`, `cuda` or `cuda:N`.
    pub device: String,
    /// The compute dtype: `bf16` or `f32`.
    pub dtype: String,
    pub model: ModelFacts,
    pub tokens: TokenFacts,
    /// Memory held throughout: weights, trainable tensors, gradients and Adam moments.
    pub resident: Vec<Part>,
    /// Each workload's peak (resident memory included).
    pub phases: Vec<Part>,
    pub peak_bytes: u64,
    /// The phase that sets the peak.
    pub peak_phase: String,
    /// Set aside on a GPU for the CUDA context, kernels and allocator slack (0 on CPU).
    pub reserve_bytes: u64,
    /// The memory compared against (`--gpu-memory`, or the device's), if any.
    pub gpu_memory_bytes: Option<u64>,
    /// What a generation call's lanes may hold; absent: every call in one wave.
    pub generation_budget: Option<GenerationBudget>,
    /// peak + reserve <= GPU memory (absent without a memory to compare against).
    pub fits: Option<bool>,
    /// When it does not fit: single settings that would make it fit, with the peak then.
    pub changes: Vec<Change>,
    /// Settings tried that no value makes fit alone.
    pub no_single_fix: Vec<String>,
    /// When no single setting fits: settings changed together that do (each halved in
    /// turn where it lowers the peak most), with the peak they reach; empty when even
    /// all of them at their floors do not fit.
    pub together: Vec<Change>,
    /// When it does not fit and training keeps what it could bound: the plan with
    /// `[grpo] recompute` on, log-probs in chunks and micro-batches, and its peak.
    pub bounded_training: Option<BoundedTraining>,
}

/// The plan with its training micro-batches bounded (see [`MemoryPlan::bounded_training`]).
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct BoundedTraining {
    pub micro_batch: u64,
    pub log_prob_chunk: u64,
    pub peak_bytes: u64,
    pub fits: bool,
}

/// Target tokens per log-prob chunk that `plan check` suggests.
const SUGGESTED_CHUNK: u64 = 1024;
/// Rows per micro-batch it suggests when the plan does not split the batch.
const SUGGESTED_MICRO_BATCH: u64 = 8;

/// The bytes a generation call's lanes may hold, and where the figure comes from.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct GenerationBudget {
    pub bytes: u64,
    /// `lm.generation_memory`, or `derived`: on CUDA, the GPU's memory less the CUDA
    /// reserve, what is resident and the generation copy of the weights.
    pub source: String,
}

#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct ModelFacts {
    /// Where the shape came from: a config.json path, or `scratch`.
    pub source: String,
    pub parameters: u64,
    pub trainable: u64,
    pub layers: u64,
    pub hidden_size: u64,
    pub vocab_size: u64,
    /// 0: full fine-tuning.
    pub lora_rank: u32,
}

#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct TokenFacts {
    /// `tokenizer.json` of the model directory, or an estimate (characters / 4).
    pub counted_by: String,
    pub train_prompt: u64,
    pub train_new: u64,
    pub eval_prompt: u64,
    pub eval_new: u64,
    pub engineer_prompt: u64,
    pub engineer_new: u64,
    /// With `[grpo] rehearsal_coef`: the longest rehearsed plan's prompt and answer (the
    /// warm-up mix's most agents on its largest map).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rehearsal_prompt: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rehearsal_new: Option<u64>,
}

#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct Part {
    pub name: String,
    pub bytes: u64,
}

#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct Change {
    /// The plan field, e.g. `grpo.micro_batch`.
    pub setting: String,
    pub from: u64,
    pub to: u64,
    pub peak_bytes: u64,
}

/// Why a memory plan cannot be made; names the file or field.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error("{0}")]
    Input(String),
}

/// The settings a memory plan depends on (the plan's, or a candidate change of them).
#[derive(Clone, Copy, Debug)]
struct Knobs {
    batch: u64,
    group: u64,
    micro: u64,
    max_new: u64,
    rank: u32,
    eval: u64,
    /// `[grpo] recompute` and `log_prob_chunk`.
    recompute: bool,
    chunk: u64,
    /// `[grpo] micro_batch_tokens` is set: the batch trains in micro-batches (of `micro`
    /// rows at the plan's longest row) even when one holds it all.
    by_tokens: bool,
    /// `[grpo] rehearsal_batch` (0: no rehearsal).
    rehearsal: u64,
}

/// The model's shape: `--model-config`, the `hf:` directory's config.json, or the
/// plan's scratch architecture. Also the tokenizer counting prompt tokens.
fn model_shape(
    plan: &LedgerPlan,
    model_config: Option<&std::path::Path>,
) -> Result<(LmConfig, String, TokenCounter, String), CheckError> {
    let approx = || {
        (
            TokenCounter::Approximate,
            format!(
                "estimate ({} characters per token)",
                crate::engineer::prompt::CHARS_PER_TOKEN
            ),
        )
    };
    let read_config = |p: &std::path::Path| -> Result<LmConfig, CheckError> {
        let text = std::fs::read_to_string(p)
            .map_err(|e| CheckError::Input(format!("{}: {e}", p.display())))?;
        LmConfig::from_hf_json(&text)
            .map_err(|e| CheckError::Input(format!("{}: {e}", p.display())))
    };
    if let Some(p) = model_config {
        let (c, by) = approx();
        return Ok((read_config(p)?, p.display().to_string(), c, by));
    }
    match plan.lm.hf_dir() {
        Some(dir) => {
            let dir = std::path::Path::new(dir);
            let cfg_path = dir.join("config.json");
            if !cfg_path.exists() {
                return Err(CheckError::Input(format!(
                    "{}: not found (lm.init = {:?}); put the model directory there, or pass --model-config FILE (its config.json)",
                    cfg_path.display(),
                    plan.lm.init
                )));
            }
            let cfg = read_config(&cfg_path)?;
            let tok = dir.join("tokenizer.json");
            let (counter, by) = match std::fs::read(&tok)
                .ok()
                .and_then(|b| crate::train::lm::chat::tokenizer_from_bytes(&b).ok())
            {
                Some(t) => (
                    TokenCounter::Tokenizer(Box::new(t)),
                    tok.display().to_string(),
                ),
                None => approx(),
            };
            Ok((cfg, cfg_path.display().to_string(), counter, by))
        }
        None => {
            let (c, by) = approx();
            let cfg = plan.lm.scratch_config(plan.lm.vocab_size as i64, vec![]);
            Ok((cfg, "scratch".into(), c, by))
        }
    }
}

/// One solvable instance of `agents` agents on a `size` map (the longest prompts).
fn instance(agents: usize, size: usize) -> Result<Instance, CheckError> {
    let cfg = GeneratorConfig::uniform(agents, [size], 0.2, 0.2);
    generate(
        &cfg,
        1,
        Seed::root(0).child("plan-check", 0),
        Budget::default(),
    )
    .map_err(|e| CheckError::Input(format!("a {agents}-agent {size}x{size} instance: {e}")))?
    .pop()
    .map(|s| s.instance)
    .ok_or_else(|| CheckError::Input("no instance generated".into()))
}

/// New tokens a plan for `inst` may take (the policy's plan budget).
fn plan_budget(inst: &Instance, prompt: PromptStyle, max_new: u64) -> u64 {
    let steps = crate::train::policy::max_steps(inst);
    (prompt.plan_tokens(inst.agents(), steps) as u64).min(max_new)
}

/// What a memory plan is computed from: the plan's model, dtype and token counts.
struct Sizing<'a> {
    plan: &'a LedgerPlan,
    cfg: LmConfig,
    /// Where the model's shape came from.
    source: String,
    dtype: tch::Kind,
    /// Bytes per weight in the compute dtype.
    bytes: u64,
    tokens: TokenFacts,
    /// Whether `current`/`base` write the engineer's reply (one more generation).
    model_engineer: bool,
    /// Whether the device is a GPU (its generation copy and attention kernel).
    cuda: bool,
    /// The generation budget the run would have: the plan's, or on CUDA derived from
    /// the GPU's memory (given) once the model's resident parts are known.
    generation_memory: GenerationMemory,
}

/// Where a run's generation budget comes from.
#[derive(Clone, Copy, Debug)]
enum GenerationMemory {
    /// `[lm] generation_memory`.
    Plan(u64),
    /// On CUDA: the GPU's memory, less what is resident under the knobs.
    Derived { gpu_memory: u64 },
    /// No budget: every call in one wave (the CPU, or a GPU of unknown memory).
    Unbounded,
}

/// Phase 1 of [`check`]: the device, the model's shape and chat template, the prompt
/// and answer lengths of the longest instances, and the plan's knobs.
fn sizing<'a>(
    plan: &'a LedgerPlan,
    device: crate::train::DeviceSpec,
    gpu_memory: Option<u64>,
    model_config: Option<&std::path::Path>,
) -> Result<(Sizing<'a>, Knobs, bool), CheckError> {
    if plan.policy != crate::plan::PolicyKind::Lm {
        return Err(CheckError::Input(format!(
            "policy {:?}: the memory plan is for lm plans (a grid policy is a few MB)",
            plan.policy.name()
        )));
    }
    let index = device.cuda_index();
    let tch_device = index.map_or(tch::Device::Cpu, tch::Device::Cuda);
    let dtype = crate::train::compute::dtype_kind(plan.train.dtype, tch_device);
    let (cfg, source, counter, counted_by) = model_shape(plan, model_config)?;
    let family_chat = ChatFormat::for_family(cfg.family);
    let chat = if plan.lm.thinking {
        family_chat.thinking().ok_or_else(|| {
            CheckError::Input(format!(
                "lm.thinking = true needs a Qwen3 model; {source} is {:?}",
                cfg.family
            ))
        })?
    } else {
        family_chat
    };
    let count = |text: &str| counter.count(&chat.wrap(text)) as u64;
    let train_agents = plan.initial_config.agents;
    let train_inst = instance(train_agents, plan.engineer.max_size as usize)?;
    let eval_inst = instance(5, plan.suites.max_size as usize)?;
    let spec = &plan.lm;
    // Rehearsal imitates the warm-up mix: its most agents on its largest map.
    let rehearsal = if plan.grpo.rehearsal_coef > 0.0 {
        let most = |v: &[u32]| v.iter().copied().max().unwrap_or(2) as usize;
        let inst = instance(most(&plan.warmup.agents), most(&plan.warmup.sizes))?;
        Some((
            count(&spec.prompt.task_text(&inst)),
            plan_budget(&inst, spec.prompt, u64::MAX),
        ))
    } else {
        None
    };
    let mut knobs = Knobs {
        batch: plan.grpo.batch_size as u64,
        group: plan.grpo.group_size as u64,
        micro: plan.grpo.micro_batch as u64,
        max_new: spec.max_new_tokens as u64,
        rank: spec.lora_rank,
        eval: plan.suites.eval_batch as u64,
        recompute: plan.grpo.recompute,
        chunk: plan.grpo.log_prob_chunk as u64,
        by_tokens: false,
        rehearsal: if rehearsal.is_some() {
            plan.grpo.rehearsal_batch as u64
        } else {
            0
        },
    };
    let tokens = TokenFacts {
        counted_by,
        train_prompt: count(&spec.prompt.task_text(&train_inst)),
        // Thinking spends the whole budget before the plan; without it, a plan stops
        // at its own length.
        train_new: if spec.thinking {
            knobs.max_new
        } else {
            plan_budget(&train_inst, spec.prompt, knobs.max_new)
        },
        eval_prompt: count(&spec.prompt.task_text(&eval_inst)),
        eval_new: if spec.thinking {
            knobs.max_new
        } else {
            plan_budget(&eval_inst, spec.prompt, knobs.max_new)
        },
        engineer_prompt: spec.engineer_prompt_tokens as u64,
        engineer_new: spec.engineer_max_new_tokens as u64,
        rehearsal_prompt: rehearsal.map(|r| r.0),
        rehearsal_new: rehearsal.map(|r| r.1),
    };
    // A token budget is rows at the plan's longest training row, within any row cap.
    if plan.grpo.micro_batch_tokens > 0 {
        let row = (tokens.train_prompt + tokens.train_new)
            .saturating_sub(1)
            .max(1);
        let rows = (plan.grpo.micro_batch_tokens as u64 / row).max(1);
        let lanes = knobs.batch * knobs.group;
        knobs.micro = match knobs.micro {
            0 => rows,
            cap => cap.min(rows),
        }
        .min(lanes);
        knobs.by_tokens = true;
    }
    // The policy writes the engineer's proposals (an `lm_only` built-in of the registry).
    let model_engineer = plan
        .engineer
        .name
        .parse::<crate::engineer::EngineerSpec>()
        .ok()
        .and_then(|s| crate::engineer::builtin(&s.name))
        .is_some_and(|b| b.lm_only);
    let bytes = if dtype == tch::Kind::BFloat16 { 2 } else { 4 };
    let cuda = index.is_some();
    let generation_memory = match (plan.lm.generation_memory, gpu_memory) {
        (Some(b), _) => GenerationMemory::Plan(b.0),
        (None, Some(gpu_memory)) if cuda => GenerationMemory::Derived { gpu_memory },
        (None, _) => GenerationMemory::Unbounded,
    };
    let sizing = Sizing {
        plan,
        cfg,
        source,
        dtype,
        bytes,
        tokens,
        model_engineer,
        cuda,
        generation_memory,
    };
    Ok((sizing, knobs, cuda))
}

impl Sizing<'_> {
    /// The generation budget under an estimator's resident parts (see
    /// [`GenerationMemory`]).
    fn generation_budget(&self, est: &Estimator) -> Option<u64> {
        match self.generation_memory {
            GenerationMemory::Plan(b) => Some(b),
            GenerationMemory::Derived { gpu_memory } => {
                Some(est.derived_generation_budget(gpu_memory))
            }
            GenerationMemory::Unbounded => None,
        }
    }

    /// A generation phase: `g` cut into waves under the budget, its name saying how,
    /// and the peak of one wave.
    fn generation_phase(
        &self,
        est: &Estimator,
        what: String,
        g: Generation,
        resident: u64,
    ) -> Part {
        let w = est.waves(&g, self.generation_budget(est));
        let wave = Generation {
            prompts: w.prompts,
            lanes: w.lanes,
            ..g
        };
        let name = if w.waves > 1 {
            format!("{what}; {} waves of {}", w.waves, w.lanes)
        } else {
            what
        };
        Part {
            name,
            bytes: resident + est.generation_on(&wave, self.cuda),
        }
    }

    /// Phase 2: the resident parts, the phases with their peak bytes, and the model's
    /// facts, under knobs `k`. The phases in the order printed: GRPO's (generation,
    /// training, the KL reference), rehearsal, evaluation, the engineer's reply, the
    /// stage-0 warm-up.
    fn estimate(&self, k: Knobs) -> (Vec<Part>, Vec<Part>, ModelFacts) {
        let lora = self.plan.lm.lora().map(|mut l| {
            l.rank = k.rank as i64;
            l
        });
        let lora = lora.filter(|l| l.rank > 0);
        let est = Estimator {
            cfg: &self.cfg,
            lora: lora.as_ref(),
            bytes: self.bytes,
        };
        let (w, t, o) = est.resident();
        let resident = w + t + o;
        let attention = AttentionKernel::on(self.cuda);
        let mut phases = self.grpo_phases(&est, k, resident, attention);
        phases.extend(self.rehearsal_phase(&est, k, resident, attention));
        phases.push(self.evaluation_phase(&est, k, resident));
        if self.model_engineer {
            phases.push(self.engineer_phase(&est, resident));
        }
        // The names opened a parenthesis for the waves; close them.
        for p in phases.iter_mut() {
            if p.name.matches('(').count() > p.name.matches(')').count() {
                p.name.push(')');
            }
        }
        phases.extend(self.warmup_phase(attention));
        let resident_parts = vec![
            Part {
                name: if lora.is_some() {
                    format!(
                        "weights (frozen, {})",
                        crate::train::compute::kind_name(self.dtype)
                    )
                } else {
                    "weights (f32 masters)".into()
                },
                bytes: w,
            },
            Part {
                name: "trainable adapters (f32)".into(),
                bytes: t,
            },
            Part {
                name: "gradients and Adam moments (f32)".into(),
                bytes: o,
            },
        ];
        let facts = ModelFacts {
            source: self.source.clone(),
            parameters: est.parameters(),
            trainable: est.trainable(),
            layers: self.cfg.num_hidden_layers as u64,
            hidden_size: self.cfg.hidden_size as u64,
            vocab_size: self.cfg.vocab_size as u64,
            lora_rank: lora.as_ref().map_or(0, |l| l.rank as u32),
        };
        (resident_parts, phases, facts)
    }

    /// Whether training and scoring forwards attend under a mask (the plan's `[lm]
    /// training_attention`).
    fn masked(&self) -> bool {
        self.plan.lm.training_attention == crate::plan::trainer::TrainingAttention::Masked
    }

    /// GRPO's phases under knobs `k`: a group's generation, the training micro-batch
    /// and, with a KL term under LoRA, the KL reference's scoring (its generation
    /// phase's name left open for the waves).
    fn grpo_phases(
        &self,
        est: &Estimator,
        k: Knobs,
        resident: u64,
        attention: AttentionKernel,
    ) -> Vec<Part> {
        let train_new = self.tokens.train_new.min(k.max_new);
        let lanes = k.batch * k.group;
        // GRPO splits the batch only when the micro-batch is smaller than it; then the
        // plan's recompute and log-prob chunks apply to its backward.
        let split = k.by_tokens || (k.micro > 0 && k.micro < lanes);
        let rows = if split { k.micro.min(lanes) } else { lanes };
        let layout = TrainingLayout {
            recompute: split && k.recompute,
            log_prob_chunk: if split { k.chunk } else { 0 },
            attention,
            mask: self.masked(),
        };
        let train = Training {
            rows,
            tokens: self.tokens.train_prompt + train_new - 1,
            targets: rows * train_new,
        };
        let mut how = Vec::new();
        if layout.recompute {
            how.push("recomputed".to_string());
        }
        if layout.log_prob_chunk > 0 {
            how.push(format!("log-probs by {}", layout.log_prob_chunk));
        }
        if !layout.mask {
            how.push("causal, no mask".to_string());
        }
        let how = if how.is_empty() {
            String::new()
        } else {
            format!("; {}", how.join(", "))
        };
        let mut phases = vec![
            self.generation_phase(
                est,
                format!("GRPO generation ({} prompts x {} samples", k.batch, k.group),
                Generation {
                    prompts: k.batch,
                    lanes,
                    prompt_tokens: self.tokens.train_prompt,
                    new_tokens: train_new,
                    top_p: self.plan.lm.top_p < 1.0,
                },
                resident,
            ),
            Part {
                name: format!("GRPO training ({rows} rows x {} tokens{how})", train.tokens),
                bytes: resident + est.training_with(&train, layout),
            },
        ];
        if self.plan.grpo.kl_coef > 0.0 && est.lora.is_some() {
            // Scoring reads the policy's chunk setting whether or not the batch splits.
            let scoring = TrainingLayout {
                recompute: false,
                log_prob_chunk: k.chunk,
                attention,
                mask: self.masked(),
            };
            phases.push(Part {
                name: format!("KL reference ({rows} rows, no gradients)"),
                bytes: resident + est.scoring_with(&train, scoring),
            });
        }
        phases
    }

    /// The rehearsal term's backward (with `[grpo] rehearsal_coef`): `train::warmup`'s
    /// text backward, one forward on a GPU, eight micro-batches of at least four rows
    /// on the CPU.
    fn rehearsal_phase(
        &self,
        est: &Estimator,
        k: Knobs,
        resident: u64,
        attention: AttentionKernel,
    ) -> Option<Part> {
        let (Some(prompt), Some(new)) = (self.tokens.rehearsal_prompt, self.tokens.rehearsal_new)
        else {
            return None;
        };
        let batch = k.rehearsal;
        let rows = if self.cuda {
            batch
        } else {
            batch.div_ceil(8).max(4).min(batch)
        };
        let whole = TrainingLayout {
            attention,
            mask: self.masked(),
            ..TrainingLayout::WHOLE
        };
        let tokens = prompt + new - 1;
        Some(Part {
            name: format!("rehearsal ({rows} rows x {tokens} tokens)"),
            bytes: resident
                + est.training_with(
                    &Training {
                        rows,
                        tokens,
                        targets: rows * new,
                    },
                    whole,
                ),
        })
    }

    /// An evaluation batch of greedy plans on the largest 5-agent boards (its name left
    /// open for the waves).
    fn evaluation_phase(&self, est: &Estimator, k: Knobs, resident: u64) -> Part {
        self.generation_phase(
            est,
            format!("evaluation ({} greedy plans, 5 agents", k.eval),
            Generation {
                prompts: k.eval,
                lanes: k.eval,
                prompt_tokens: self.tokens.eval_prompt,
                new_tokens: self.tokens.eval_new.min(k.max_new),
                top_p: false,
            },
            resident,
        )
    }

    /// A model engineer's reply (its name left open for the waves).
    fn engineer_phase(&self, est: &Estimator, resident: u64) -> Part {
        self.generation_phase(
            est,
            "engineer reply (current/base".into(),
            Generation {
                prompts: 1,
                lanes: 1,
                prompt_tokens: self.tokens.engineer_prompt,
                new_tokens: self.tokens.engineer_new,
                top_p: self.plan.lm.engineer_top_p < 1.0,
            },
            resident,
        )
    }

    /// Stage 0's warm-up, when it pretrains a scratch model: every weight (no LoRA
    /// yet), with its own resident parts.
    fn warmup_phase(&self, attention: AttentionKernel) -> Option<Part> {
        if self.plan.warmup.steps == 0 || self.plan.lm.hf_dir().is_some() {
            return None;
        }
        let full = Estimator {
            cfg: &self.cfg,
            lora: None,
            bytes: self.bytes,
        };
        let (fw, ft, fo) = full.resident();
        let rows = (self.plan.warmup.batch_size as u64).div_ceil(8).max(4);
        let new = self.tokens.train_new;
        let whole = TrainingLayout {
            attention,
            mask: self.masked(),
            ..TrainingLayout::WHOLE
        };
        Some(Part {
            name: format!("warm-up (stage 0, full weights, {rows} rows)"),
            bytes: fw
                + ft
                + fo
                + full.training_with(
                    &Training {
                        rows,
                        tokens: self.tokens.train_prompt + new - 1,
                        targets: rows * new,
                    },
                    whole,
                ),
        })
    }
}

/// The most demanding phase: its name and bytes.
fn peak_of(phases: &[Part]) -> (String, u64) {
    phases
        .iter()
        .max_by_key(|p| p.bytes)
        .map(|p| (p.name.clone(), p.bytes))
        .unwrap_or_default()
}

/// A setting a fix may lower: its name, current value, floor, and how to set it.
type Candidate = (&'static str, u64, u64, fn(Knobs, u64) -> Knobs);

/// The settings a fix may lower, in the order fixes are tried.
fn candidates(knobs: Knobs) -> Vec<Candidate> {
    let lanes = knobs.batch * knobs.group;
    let rows = if knobs.micro > 0 { knobs.micro } else { lanes };
    let mut candidates: Vec<Candidate> = vec![
        ("grpo.micro_batch", rows, 1, |k, v| Knobs { micro: v, ..k }),
        ("grpo.batch_size", knobs.batch, 1, |k, v| Knobs {
            batch: v,
            ..k
        }),
        ("grpo.group_size", knobs.group, 2, |k, v| Knobs {
            group: v,
            ..k
        }),
        ("lm.max_new_tokens", knobs.max_new, 16, |k, v| Knobs {
            max_new: v,
            ..k
        }),
    ];
    candidates.push(("suites.eval_batch", knobs.eval, 1, |k, v| Knobs {
        eval: v,
        ..k
    }));
    if knobs.rehearsal > 0 {
        candidates.push(("grpo.rehearsal_batch", knobs.rehearsal, 1, |k, v| Knobs {
            rehearsal: v,
            ..k
        }));
    }
    if knobs.rank > 0 {
        candidates.push(("lm.lora_rank", knobs.rank as u64, 1, |k, v| Knobs {
            rank: v as u32,
            ..k
        }));
    }
    candidates
}

/// Phase 3: one setting at a time, the largest power-of-two fraction of it that fits
/// (`changes`), and the settings no such halving makes fit (`no_single_fix`).
fn single_fixes(
    sizing: &Sizing,
    knobs: Knobs,
    fits_in: impl Fn(u64) -> bool,
) -> (Vec<Change>, Vec<String>) {
    let (mut changes, mut no_single_fix) = (Vec::new(), Vec::new());
    for &(setting, from, floor, set) in &candidates(knobs) {
        // Halve until it fits (the largest power-of-two fraction that does).
        let mut v = from;
        let mut found = None;
        while v > floor {
            v = (v / 2).max(floor);
            let (_, p, _) = sizing.estimate(set(knobs, v));
            let (_, peak) = peak_of(&p);
            if fits_in(peak) {
                found = Some((v, peak));
                break;
            }
        }
        match found {
            Some((to, peak_bytes)) => changes.push(Change {
                setting: setting.into(),
                from,
                to,
                peak_bytes,
            }),
            None => no_single_fix.push(setting.into()),
        }
    }
    (changes, no_single_fix)
}

/// Phase 4, when no single setting fixes it: halve, one at a time, whichever setting
/// lowers the peak most, until it fits or nothing lowers it. Empty when nothing fits.
fn fix_together(sizing: &Sizing, knobs: Knobs, fits_in: impl Fn(u64) -> bool) -> Vec<Change> {
    let candidates = candidates(knobs);
    // Each setting's current value, in the order of `candidates`.
    let mut values: Vec<u64> = candidates.iter().map(|c| c.1).collect();
    let apply = |values: &[u64]| {
        candidates
            .iter()
            .zip(values)
            .fold(knobs, |k, (c, &v)| (c.3)(k, v))
    };
    let mut peak = peak_of(&sizing.estimate(apply(&values)).1).1;
    while !fits_in(peak) {
        let best = (0..candidates.len())
            .filter(|&i| values[i] > candidates[i].2)
            .map(|i| {
                let mut v = values.clone();
                v[i] = (v[i] / 2).max(candidates[i].2);
                (peak_of(&sizing.estimate(apply(&v)).1).1, i, v)
            })
            .min_by_key(|(p, i, _)| (*p, *i));
        match best {
            Some((p, _, v)) if p < peak => {
                peak = p;
                values = v;
            }
            _ => break,
        }
    }
    if !fits_in(peak) {
        return Vec::new();
    }
    candidates
        .iter()
        .zip(&values)
        .filter(|(c, &v)| v != c.1)
        .map(|(c, &v)| Change {
            setting: c.0.into(),
            from: c.1,
            to: v,
            peak_bytes: peak,
        })
        .collect()
}

/// Why `ledger plan check` has no memory plan to show.
#[derive(Debug, thiserror::Error)]
pub enum CheckFileError {
    #[error("{0}")]
    Plan(#[from] crate::plan::PlanFileError),
    #[error("--gpu-memory {0}")]
    GpuMemory(#[source] crate::plan::size::SizeError),
    /// Its text only, as the command has always said it: an input error.
    #[error("{0}")]
    Check(CheckError),
}

/// `ledger plan check`: the memory plan ([`check`]) of the plan file at `path` on
/// `device` (None: the plan's), compared with `gpu_memory` (a size such as `80GiB`)
/// when given.
pub fn check_file(
    path: &std::path::Path,
    device: Option<crate::train::DeviceSpec>,
    gpu_memory: Option<&str>,
    model_config: Option<&std::path::Path>,
) -> Result<MemoryPlan, CheckFileError> {
    let p = LedgerPlan::read(path)?;
    let device = device.unwrap_or(p.train.device);
    let memory = gpu_memory
        .map(crate::plan::size::parse_size)
        .transpose()
        .map_err(CheckFileError::GpuMemory)?;
    check(&p, device, memory, model_config).map_err(CheckFileError::Check)
}

/// Build the memory plan of `plan` on `device` (compared with `gpu_memory` if given):
/// size the run, estimate every phase, and when it does not fit, the fixes.
pub fn check(
    plan: &LedgerPlan,
    device: crate::train::DeviceSpec,
    gpu_memory: Option<u64>,
    model_config: Option<&std::path::Path>,
) -> Result<MemoryPlan, CheckError> {
    let (sizing, knobs, on_cuda) = sizing(plan, device, gpu_memory, model_config)?;
    let reserve = if on_cuda { CUDA_RESERVE } else { 0 };
    let (resident, phases, model) = sizing.estimate(knobs);
    let generation_budget = {
        let lora = plan.lm.lora().filter(|l| l.rank > 0);
        let est = Estimator {
            cfg: &sizing.cfg,
            lora: lora.as_ref(),
            bytes: sizing.bytes,
        };
        sizing
            .generation_budget(&est)
            .map(|bytes| GenerationBudget {
                bytes,
                source: match sizing.generation_memory {
                    GenerationMemory::Plan(_) => "lm.generation_memory".into(),
                    _ => "derived".into(),
                },
            })
    };
    let (peak_phase, peak) = peak_of(&phases);
    let fits = gpu_memory.map(|m| peak + reserve <= m);
    let (mut changes, mut no_single_fix, mut together) = (Vec::new(), Vec::new(), Vec::new());
    let lanes = knobs.batch * knobs.group;
    let bounded_training = match (fits, gpu_memory) {
        (Some(false), Some(mem)) if !knobs.recompute || knobs.chunk == 0 => {
            let micro = if knobs.micro > 0 && (knobs.micro < lanes || knobs.by_tokens) {
                knobs.micro
            } else {
                SUGGESTED_MICRO_BATCH.min(lanes.saturating_sub(1)).max(1)
            };
            let chunk = if knobs.chunk > 0 {
                knobs.chunk
            } else {
                SUGGESTED_CHUNK
            };
            let bounded = Knobs {
                micro,
                recompute: true,
                chunk,
                ..knobs
            };
            let (_, peak_bytes) = peak_of(&sizing.estimate(bounded).1);
            Some(BoundedTraining {
                micro_batch: micro,
                log_prob_chunk: chunk,
                peak_bytes,
                fits: peak_bytes + reserve <= mem,
            })
        }
        _ => None,
    };
    if let (Some(false), Some(mem)) = (fits, gpu_memory) {
        let fits_in = |peak: u64| peak + reserve <= mem;
        (changes, no_single_fix) = single_fixes(&sizing, knobs, fits_in);
        if changes.is_empty() {
            together = fix_together(&sizing, knobs, fits_in);
        }
    }
    Ok(MemoryPlan {
        plan: plan.name.clone(),
        device: device.to_string(),
        dtype: crate::train::compute::kind_name(sizing.dtype).into(),
        model,
        tokens: sizing.tokens,
        resident,
        phases,
        peak_bytes: peak,
        peak_phase,
        reserve_bytes: reserve,
        gpu_memory_bytes: gpu_memory,
        generation_budget,
        fits,
        changes,
        no_single_fix,
        together,
        bounded_training,
    })
}

/// A parameter count as people say it: 751.6 M, 4.02 B, 2.6 M.
fn count(n: u64) -> String {
    match n {
        n if n >= 1_000_000_000 => format!("{:.2} B", n as f64 / 1e9),
        n if n >= 1_000_000 => format!("{:.1} M", n as f64 / 1e6),
        n if n >= 1_000 => format!("{:.1} K", n as f64 / 1e3),
        n => n.to_string(),
    }
}

/// The memory plan as text.
pub fn render(m: &MemoryPlan) -> String {
    use memory::human;
    let mut s = String::new();
    let lora = if m.model.lora_rank > 0 {
        format!("LoRA rank {}", m.model.lora_rank)
    } else {
        "full fine-tuning".into()
    };
    s += &format!(
        "memory plan of {} on {} in {} ({lora})\n",
        m.plan, m.device, m.dtype
    );
    s += &format!(
        "  model: {} ({} parameters, {} trainable; {} layers, hidden {}, vocabulary {})\n",
        m.model.source,
        count(m.model.parameters),
        count(m.model.trainable),
        m.model.layers,
        m.model.hidden_size,
        m.model.vocab_size
    );
    let t = &m.tokens;
    s += &format!(
        "  tokens ({}): GRPO prompt {} + {} new, evaluation prompt {} + {} new, engineer prompt {} + {} new\n",
        t.counted_by, t.train_prompt, t.train_new, t.eval_prompt, t.eval_new, t.engineer_prompt, t.engineer_new
    );
    if let Some(b) = &m.generation_budget {
        let from = match b.source.as_str() {
            "derived" => {
                "the GPU's memory less the CUDA reserve, what is resident and the generation copy"
            }
            other => other,
        };
        s += &format!(
            "  generation budget: {} for a call's lanes ({from}); larger calls run in waves\n",
            human(b.bytes)
        );
    }
    s += "  resident:";
    for p in &m.resident {
        s += &format!(" {} {};", p.name, human(p.bytes));
    }
    s.pop();
    s += "\n  peak per phase (resident included):\n";
    for p in &m.phases {
        s += &format!("    {:<68} {:>12}\n", p.name, human(p.bytes));
    }
    s += &format!("  peak: {} ({})", human(m.peak_bytes), m.peak_phase);
    if m.reserve_bytes > 0 {
        s += &format!(" + {} CUDA reserve", human(m.reserve_bytes));
    }
    match (m.fits, m.gpu_memory_bytes) {
        (Some(true), Some(g)) => s += &format!(": fits in {}\n", human(g)),
        (Some(false), Some(g)) => {
            s += &format!(": does NOT fit in {}\n", human(g));
            if !m.changes.is_empty() {
                s += "  it fits with one of these changes:\n";
                for c in &m.changes {
                    s += &format!(
                        "    {} = {} (now {}): peak {}\n",
                        c.setting,
                        c.to,
                        c.from,
                        human(c.peak_bytes)
                    );
                }
            }
            if !m.no_single_fix.is_empty() {
                s += &format!(
                    "  no value of {} alone makes it fit\n",
                    m.no_single_fix.join(", ")
                );
            }
            if let Some(c) = m.together.first() {
                s += &format!(
                    "  it fits with these changes together (peak {}):\n",
                    human(c.peak_bytes)
                );
                for c in &m.together {
                    s += &format!("    {} = {} (now {})\n", c.setting, c.to, c.from);
                }
            } else if m.changes.is_empty() {
                s += "  no combination of these settings makes it fit: a smaller model or a larger GPU\n";
            }
            if let Some(b) = &m.bounded_training {
                s += &format!(
                    "  with grpo.recompute = true, grpo.log_prob_chunk = {} and grpo.micro_batch = {}: peak {}{}\n",
                    b.log_prob_chunk,
                    b.micro_batch,
                    human(b.peak_bytes),
                    if b.fits { ", which fits" } else { ", still too much" }
                );
            }
        }
        _ => s += "\n  (give --gpu-memory SIZE to compare with a GPU)\n",
    }
    s
}
