//! The workloads `ledger lm bench` times on a device, each run when its inputs are
//! named: decode tokens/s of random weights at a model's shape, for each batch size;
//! one GRPO step of a plan at that shape; warm-up (imitation) steps of a model
//! directory on a plan's engineer examples. `train::bench` times each; this module
//! makes what it times (models, prompts, data), reads the inputs it names, says each
//! figure as a line, and gathers them into one JSON object.
use crate::engineer::text::TextRevision;
use crate::plan::trainer::ZeroVariance;
use crate::plan::LedgerPlan;
use crate::record::Hash;
use crate::seed::Seed;
use crate::train::bench::{self, GrpoFigure, WarmupFigure};
use crate::train::lm::model::{compute_dtype, LoraSpec, LORA_MODULES};
use crate::train::lm::{ChatFormat, LmArch, LmConfig, LmPolicy, Origin, Sampling};
use crate::train::DeviceSpec;
use std::path::{Path, PathBuf};

/// What to measure: each part runs when its inputs are given (the options of
/// `ledger lm bench`, whose names the errors use).
pub struct BenchSpec {
    /// A model's config.json: decode and the GRPO step run random weights of its shape.
    pub shape: Option<PathBuf>,
    pub device: DeviceSpec,
    /// Decode batch sizes (empty: no decode).
    pub batch: Vec<usize>,
    pub prompt_tokens: usize,
    pub new_tokens: usize,
    /// The decode loop (None: the device's own, as training decodes).
    pub decode_loop: Option<crate::train::lm::generate::DecodeLoop>,
    /// LoRA adapters of this rank on every projection while decoding (0: none).
    pub lora_rank: i64,
    /// The plan whose GRPO step to time at the shape.
    pub grpo_plan: Option<PathBuf>,
    /// New tokens per completion, thinking off; None: the plan's own thinking mode and
    /// max_new_tokens (the step as committed).
    pub grpo_new_tokens: Option<usize>,
    /// Prompts of the timed step (None: the plan's `[grpo] batch_size`): fewer time the
    /// plan's step on part of its batch, each prompt's samples, budget and memory
    /// settings as the plan says (a step too long for one lease, measured by its part).
    pub grpo_prompts: Option<u32>,
    /// Every row of the step trains (a `drop` plan runs as `skip`: its worst case,
    /// which random weights, whose groups have no signal, would not time).
    pub grpo_every_row: bool,
    /// Where the step's samples come from: decoded, or every lane its budget of drawn
    /// tokens (the KL reference and training of the worst case, without the decode).
    pub grpo_rollouts: crate::train::bench::Rollouts,
    /// The tokenizer.json the GRPO step's prompts are written with.
    pub tokenizer: PathBuf,
    /// A model directory whose warm-up steps to time on `warmup_plan`'s examples.
    pub warmup: Option<(PathBuf, PathBuf)>,
    pub warmup_steps: u64,
    /// Rows of a warm-up step (None: the plan's `warmup.engineer_batch_size`).
    pub warmup_batch: Option<usize>,
    /// The device's memory bandwidth (bytes/s): decode figures carry their roofline share.
    pub memory_bandwidth: Option<f64>,
    /// The device's dense bf16 peak (FLOP/s): the GRPO step carries its MFU.
    pub peak_flops: Option<f64>,
}

/// Why a benchmark cannot run; each names the option whose input is at fault.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("{0}")]
    Device(#[source] crate::train::TrainError),
    #[error("{}: {error}", path.display())]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("--shape {}: {error}", path.display())]
    Shape { path: PathBuf, error: String },
    #[error("--new-tokens must be at least 2")]
    NewTokens,
    #[error("--grpo-plan needs --shape")]
    GrpoWithoutShape,
    #[error("--grpo-as-committed: the plan sets lm.thinking = true, and --shape's {chat} chat template has no thinking mode (Qwen3's has)")]
    Thinking { chat: String },
    #[error("{flag} {}: {error}", path.display())]
    Plan {
        flag: &'static str,
        path: PathBuf,
        error: crate::plan::PlanError,
    },
    #[error("--tokenizer {}: {error}", path.display())]
    Tokenizer { path: PathBuf, error: String },
    #[error("--grpo-plan: its initial_config: {0}")]
    Data(crate::env::generator::GenerateError),
    /// The --warmup-model directory could not be loaded.
    #[error("{0}")]
    Model(#[source] super::StageError),
    #[error("--warmup-plan: {0}")]
    Text(crate::engineer::text::UnknownRevision),
    #[error("--warmup-plan: the plan's warm-up has no engineer examples (an lm plan with warmup.engineer_examples > 0)")]
    NoExamples,
}

fn read(path: &Path) -> Result<Vec<u8>, BenchError> {
    std::fs::read(path).map_err(|error| BenchError::Read {
        path: path.to_path_buf(),
        error,
    })
}

fn read_plan(flag: &'static str, path: &Path) -> Result<LedgerPlan, BenchError> {
    LedgerPlan::parse(&read(path)?).map_err(|error| BenchError::Plan {
        flag,
        path: path.to_path_buf(),
        error,
    })
}

/// Run every part `spec` names, in order (decode, GRPO step, warm-up), saying each
/// figure to `say` as it is measured; the figures as one JSON object.
pub fn run(
    spec: &BenchSpec,
    say: &mut dyn FnMut(&str),
) -> Result<serde_json::Map<String, serde_json::Value>, BenchError> {
    let device = crate::train::open_device(spec.device).map_err(BenchError::Device)?;
    let dtype = compute_dtype(device);
    let mut out = serde_json::Map::new();
    out.insert("device".into(), format!("{device:?}").into());
    out.insert("dtype".into(), format!("{dtype:?}").into());
    // What a ledger's metadata records of the kernels (the GPU's model and the kernel
    // variables set among them), so that figures taken under different settings say so.
    out.insert(
        "kernels".into(),
        to_value(&crate::train::kernels::facts(device)),
    );
    let cfg = match &spec.shape {
        Some(p) => {
            let text = String::from_utf8_lossy(&read(p)?).into_owned();
            Some(
                LmConfig::from_hf_json(&text).map_err(|e| BenchError::Shape {
                    path: p.clone(),
                    error: e.to_string(),
                })?,
            )
        }
        None => None,
    };
    if let Some(cfg) = &cfg {
        out.insert("parameters".into(), cfg.parameter_count().into());
        if !spec.batch.is_empty() {
            let figures = decode(spec, cfg, device, dtype, say)?;
            out.insert("decode".into(), to_value(&figures));
        }
    }
    if let Some(plan_path) = &spec.grpo_plan {
        let cfg = cfg.as_ref().ok_or(BenchError::GrpoWithoutShape)?;
        let mut plan = read_plan("--grpo-plan", plan_path)?;
        if let Some(n) = spec.grpo_prompts {
            plan.grpo.batch_size = n;
        }
        if spec.grpo_every_row && plan.grpo.zero_variance == ZeroVariance::Drop {
            plan.grpo.zero_variance = ZeroVariance::Skip;
        }
        let figure = grpo(spec, cfg, &plan, device, dtype)?;
        say(&format!(
            "GRPO step{}: {:.1} s, {:.1} TFLOP/s{}; {} of {} groups with signal, {} tokens trained (zero_variance {}); attention kernel {}",
            match figure.rollouts {
                crate::train::bench::Rollouts::Decoded => "",
                crate::train::bench::Rollouts::AtBudget => " (samples at their budget, not decoded)",
            },
            figure.seconds,
            figure.tflops_per_s,
            figure
                .mfu
                .map(|m| format!(", MFU {:.1}%", 100.0 * m))
                .unwrap_or_default(),
            figure.signal_groups,
            figure.groups,
            figure.trained_tokens,
            plan.grpo.zero_variance.name(),
            figure.attention_kernel.name(),
        ));
        for p in &figure.timing.phases {
            say(&format!("  {:<16} {:>8.2} s", p.name, p.seconds));
        }
        out.insert("grpo".into(), to_value(&figure));
    }
    if let Some((model_dir, plan_path)) = &spec.warmup {
        let plan = read_plan("--warmup-plan", plan_path)?;
        let figure = warmup(spec, model_dir, &plan, device)?;
        say(&format!(
            "warm-up: {:.3} s a step ({} rows of {:.0} tokens); attention kernel {}",
            figure.seconds_per_step,
            figure.batch,
            figure.mean_tokens,
            figure.attention_kernel.name()
        ));
        for p in &figure.timing.phases {
            say(&format!(
                "  {:<16} {:>8.3} s a step",
                p.name,
                p.seconds / figure.steps.max(1) as f64
            ));
        }
        out.insert("warmup".into(), to_value(&figure));
    }
    Ok(out)
}

fn to_value(v: &impl serde::Serialize) -> serde_json::Value {
    serde_json::to_value(v).expect("serialises")
}

/// Decode tokens/s of random weights at `cfg` for each batch size of `spec`.
fn decode(
    spec: &BenchSpec,
    cfg: &LmConfig,
    device: tch::Device,
    dtype: tch::Kind,
    say: &mut dyn FnMut(&str),
) -> Result<Vec<bench::DecodeFigure>, BenchError> {
    if spec.new_tokens < 2 {
        return Err(BenchError::NewTokens);
    }
    let lora = (spec.lora_rank > 0).then(|| LoraSpec {
        rank: spec.lora_rank,
        alpha: 2.0 * spec.lora_rank as f64,
        targets: LORA_MODULES.iter().map(|m| m.to_string()).collect(),
    });
    let model = bench::random_model(cfg, device, dtype, lora, Seed::root(1));
    // Untimed: the first call pays for kernels' first use.
    let _ = bench::decode(&model, 1, 8, 2, None, spec.decode_loop);
    let mut figures = Vec::new();
    for &b in &spec.batch {
        let f = bench::decode(
            &model,
            b,
            spec.prompt_tokens,
            spec.new_tokens,
            spec.memory_bandwidth,
            spec.decode_loop,
        );
        say(&format!(
            "decode batch {b} ({}{}): {:.0} tokens/s, {:.2} ms a step{}",
            f.decode_loop,
            match (f.graphs_replayed, f.tokens_equal_eager) {
                (Some(false), _) => ", no graphs: decoded windowed".to_string(),
                (_, Some(same)) => format!(", tokens equal eager: {same}"),
                _ => String::new(),
            },
            f.decode_tokens_per_s,
            f.step_ms,
            f.roofline_share
                .map(|s| format!(", {:.1}% of the memory roofline", 100.0 * s))
                .unwrap_or_default()
        ));
        figures.push(f);
    }
    Ok(figures)
}

/// One GRPO step of `plan`'s shape at `cfg` with random weights.
fn grpo(
    spec: &BenchSpec,
    cfg: &LmConfig,
    plan: &LedgerPlan,
    device: tch::Device,
    dtype: tch::Kind,
) -> Result<GrpoFigure, BenchError> {
    let tokenizer_json = std::fs::read(&spec.tokenizer).map_err(|e| BenchError::Tokenizer {
        path: spec.tokenizer.clone(),
        error: e.to_string(),
    })?;
    let lm = &plan.lm;
    let lora = lm.lora();
    let plain = ChatFormat::for_family(cfg.family);
    let (chat, max_new_tokens) = match spec.grpo_new_tokens {
        Some(n) => (plain, n),
        None if lm.thinking => (
            plain.thinking().ok_or_else(|| BenchError::Thinking {
                chat: format!("{plain:?}"),
            })?,
            lm.sampling().max_new_tokens,
        ),
        None => (plain, lm.sampling().max_new_tokens),
    };
    let model = bench::random_model(cfg, device, dtype, lora.clone(), Seed::root(2));
    let arch = LmArch {
        config: cfg.clone(),
        tokenizer: Hash::of_blob(&tokenizer_json),
        chat,
        prompt: lm.prompt,
        sampling: Sampling {
            max_new_tokens,
            ..lm.sampling()
        },
        origin: Origin::Scratch,
        frozen: lora.as_ref().map(|_| crate::train::lm::Frozen::Origin),
        lora,
    };
    let mut policy =
        LmPolicy::new(model, tokenizer_json, arch).map_err(|e| BenchError::Tokenizer {
            path: spec.tokenizer.clone(),
            error: e.to_string(),
        })?;
    // The plan's settings, as a run applies them (recomputed layers, log-probs
    // in chunks, a generation budget).
    crate::train::policy::Policy::apply_settings(&mut policy, plan.policy_settings());
    let data = crate::env::generate(
        &plan.initial_config,
        plan.grpo.batch_size as usize,
        Seed::root(plan.seed).child("bench-data", 0),
        crate::env::Budget::default(),
    )
    .map_err(BenchError::Data)?;
    Ok(bench::grpo_step(
        policy,
        spec.grpo_rollouts,
        &plan.grpo,
        &data,
        Seed::root(plan.seed).child("bench-step", 0),
        spec.peak_flops,
    ))
}

/// Warm-up steps of `model_dir` on `plan`'s engineer examples (at least a batch of
/// them; the plan's `warmup.engineer_batch_size` rows a step).
fn warmup(
    spec: &BenchSpec,
    model_dir: &Path,
    plan: &LedgerPlan,
    device: tch::Device,
) -> Result<WarmupFigure, BenchError> {
    use super::corpus;
    let name = format!("{}", model_dir.display());
    let mut lm =
        super::load_language_model(Path::new("."), &name, device).map_err(BenchError::Model)?;
    // The plan's memory bounds and training kernels, as a run applies them.
    crate::train::policy::Policy::apply_settings(&mut lm, plan.policy_settings());
    let batch = spec
        .warmup_batch
        .unwrap_or(plan.warmup.engineer_batch_size as usize)
        .max(1);
    let mut plan = plan.clone();
    plan.warmup.engineer_examples = plan
        .warmup
        .engineer_examples
        .clamp(batch as u32, 4 * batch as u32);
    let text = TextRevision::of_plan(&plan).map_err(BenchError::Text)?;
    let examples = corpus::engineer_examples(&plan, text, Seed::root(plan.seed));
    if examples.is_empty() {
        return Err(BenchError::NoExamples);
    }
    let pairs = corpus::engineer_pairs(&lm, &examples, plan.lm.engineer_prompt_tokens, text);
    Ok(bench::warmup_steps(
        lm,
        &pairs,
        batch,
        spec.warmup_steps,
        Seed::root(plan.seed),
    ))
}
