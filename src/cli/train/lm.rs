//! `ledger lm generate`: sample from a language model — an HF model directory or an
//! `lm` checkpoint of the ledger — and print the token ids, the text and per-token
//! log-probs. A user's sanity check that a model loaded as it should.
//!
//! `ledger lm bench`: the policy's throughput on a device (`train::bench`): decode
//! tokens/s at a shape, one GRPO step of a plan, warm-up steps of a model directory.
use super::{CliError, CliResult};
use clap::Subcommand;
use mapf_ledger::ledger::Chain;
use mapf_ledger::seed::Seed;
use mapf_ledger::train::lm::{LmPolicy, Sampling};
use mapf_ledger::views::model::GenerateOutput;
use std::path::{Path, PathBuf};

#[derive(Subcommand, Debug)]
pub enum LmCommand {
    /// Generate a continuation of a prompt.
    Generate {
        /// An HF model directory (config.json, safetensors, tokenizer.json), or a
        /// checkpoint reference of the ledger (BRANCH, BRANCH@stageN, hash prefix).
        #[arg(long)]
        model: String,
        /// The user message (wrapped in the model's chat template unless --raw).
        #[arg(long)]
        prompt_file: PathBuf,
        /// Most tokens to generate after the prompt.
        #[arg(long, default_value_t = 64)]
        max_new_tokens: usize,
        /// 0 decodes greedily.
        #[arg(long, default_value_t = 0.0, value_parser = super::values::non_negative)]
        temperature: f64,
        /// Nucleus sampling: sample from the smallest set of tokens whose probability reaches this (1 samples from all).
        #[arg(long, default_value_t = 1.0, value_parser = super::values::unit_mass)]
        top_p: f64,
        /// Seed of the sampler (with --temperature above 0).
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Feed the file's text as is, without the chat template.
        #[arg(long)]
        raw: bool,
        /// cpu, cuda or cuda:N.
        #[arg(long, default_value = "cpu")]
        device: mapf_ledger::train::DeviceSpec,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Measure decode tokens/s, a GRPO step and warm-up steps on a device; prints JSON.
    Bench(BenchArgs),
}

/// What `ledger lm bench` measures. Each part runs when its inputs are given.
#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// A model's config.json (ledgers/models/shapes/*.config.json, or an HF directory's):
    /// decode and the GRPO step run random weights of that shape, made on the device.
    #[arg(long)]
    shape: Option<PathBuf>,
    /// cpu, cuda or cuda:N.
    #[arg(long, default_value = "cpu")]
    device: mapf_ledger::train::DeviceSpec,
    /// Decode batch sizes, comma-separated (each distinct prompts, one sample each);
    /// `--batch` alone measures no decode.
    #[arg(long, value_delimiter = ',', num_args = 0.., default_value = "1,64,256")]
    batch: Vec<usize>,
    /// Prompt length of the decode figures, in tokens.
    #[arg(long, default_value_t = 128)]
    prompt_tokens: usize,
    /// New tokens every decode lane generates (no stop token ends one early).
    #[arg(long, default_value_t = 128)]
    new_tokens: usize,
    /// Decode with LoRA adapters of this rank on every projection (0: none), as a
    /// GRPO stage's rollouts do (merged into the weights on a GPU).
    #[arg(long, default_value_t = 0)]
    lora_rank: i64,
    /// A plan whose GRPO step to time at --shape: its [grpo] batch, group, micro-batch
    /// and KL, its [lm] prompt style, sampling and LoRA, and its initial_config's
    /// instances; thinking off, --grpo-new-tokens new tokens.
    #[arg(long)]
    grpo_plan: Option<PathBuf>,
    /// New tokens per completion in the timed GRPO step.
    #[arg(long, default_value_t = 512)]
    grpo_new_tokens: usize,
    /// The tokenizer.json the GRPO step's prompts are written with (its ids fit any
    /// vocabulary at least as large).
    #[arg(long, default_value = "ledgers/models/mapf-base/tokenizer.json")]
    tokenizer: PathBuf,
    /// An HF model directory whose warm-up (imitation) steps to time on the engineer
    /// examples of --warmup-plan, as the base planner's pretraining runs them.
    #[arg(long, requires = "warmup_plan")]
    warmup_model: Option<PathBuf>,
    /// The plan whose engineer examples the --warmup-model steps train on.
    #[arg(long, requires = "warmup_model")]
    warmup_plan: Option<PathBuf>,
    /// Warm-up steps to time.
    #[arg(long, default_value_t = 10)]
    warmup_steps: u64,
    /// Rows of a warm-up step (default: the plan's `warmup.engineer_batch_size`).
    #[arg(long)]
    warmup_batch: Option<usize>,
    /// The device's memory bandwidth in bytes/s (e.g. 3.35e12 for an H100 SXM): decode
    /// figures then carry their share of the memory roofline.
    #[arg(long, value_parser = super::values::positive)]
    memory_bandwidth: Option<f64>,
    /// The device's dense bf16 peak in FLOP/s (e.g. 989e12 for an H100 SXM): the GRPO
    /// step then carries its model FLOPs utilisation.
    #[arg(long, value_parser = super::values::positive)]
    peak_flops: Option<f64>,
}

/// A language model from an HF directory or a ledger checkpoint (see
/// `stage::load_language_model`).
pub fn load(dir: &Path, model: &str, device: tch::Device) -> Result<LmPolicy, CliError> {
    Ok(mapf_ledger::stage::load_language_model(dir, model, device)?)
}

pub fn run(dir: &Path, cmd: LmCommand) -> CliResult {
    match cmd {
        LmCommand::Generate {
            model,
            prompt_file,
            max_new_tokens,
            temperature,
            top_p,
            seed,
            raw,
            device,
            json,
        } => generate(
            dir,
            &model,
            &prompt_file,
            max_new_tokens,
            temperature,
            top_p,
            seed,
            raw,
            device,
            json,
        ),
        LmCommand::Bench(args) => bench(args),
    }
}

#[allow(clippy::too_many_arguments)]
fn generate(
    dir: &Path,
    model: &str,
    prompt_file: &Path,
    max_new_tokens: usize,
    temperature: f64,
    top_p: f64,
    seed: u64,
    raw: bool,
    device: mapf_ledger::train::DeviceSpec,
    json: bool,
) -> CliResult {
    let device =
        mapf_ledger::train::open_device(device).map_err(|e| CliError::input(e.to_string()))?;
    let text = std::fs::read_to_string(prompt_file)
        .map_err(|e| CliError::input(format!("{}: {e}", prompt_file.display())))?;
    let lm = load(dir, model, device)?;
    let prompt = if raw {
        lm.try_encode(&text)
    } else {
        lm.try_encode(&lm.arch.chat.wrap(&text))
    }
    .map_err(|e| CliError::input(format!("{}: {}", prompt_file.display(), Chain(&e))))?;
    if prompt.is_empty() {
        return Err(CliError::input(format!(
            "{}: the prompt encodes to no tokens",
            prompt_file.display()
        )));
    }
    // The model reads at most max_position_embeddings positions; past that RoPE
    // extrapolates and the KV cache grows without bound (1e8 tokens once asked libtorch
    // for 25 GB and aborted), so the length is bounded before any allocation.
    let limit = (lm.model.cfg.max_position_embeddings.max(0) as usize).saturating_sub(prompt.len());
    if max_new_tokens == 0 || max_new_tokens > limit {
        return Err(CliError::input(format!(
            "--max-new-tokens {max_new_tokens}: must be in 1..={limit} (the model's max_position_embeddings {} less the prompt's {} tokens)",
            lm.model.cfg.max_position_embeddings,
            prompt.len()
        )));
    }
    let sampling = Sampling {
        temperature: if temperature > 0.0 { temperature } else { 1.0 },
        top_p,
        max_new_tokens,
    };
    let g = mapf_ledger::train::lm::generate::generate(
        &lm.model,
        std::slice::from_ref(&prompt),
        1,
        &[max_new_tokens],
        &sampling,
        temperature == 0.0,
        &lm.stop,
        Seed::root(seed).child("lm-generate", 0),
        true,
    )
    .remove(0);
    let out = GenerateOutput {
        text: lm
            .try_decode(&g.tokens)
            .map_err(|e| CliError::input(format!("{model}: {}", Chain(&e))))?,
        prompt_tokens: prompt,
        tokens: g.tokens,
        logprobs: g.logprobs,
        stopped: g.stopped,
    };
    if json {
        println!("{}", serde_json::to_string(&out).expect("serialises"));
    } else {
        println!("prompt tokens: {}", out.prompt_tokens.len());
        println!("{}", out.text);
        println!("--");
        for (t, lp) in out.tokens.iter().zip(&out.logprobs) {
            println!("{t}\t{lp:.6}\t{:?}", lm.decode(&[*t]));
        }
        println!(
            "{} tokens, {}",
            out.tokens.len(),
            if out.stopped {
                "stopped on a stop token"
            } else {
                "hit --max-new-tokens"
            }
        );
    }
    Ok(())
}

/// `ledger lm bench`: each part that its inputs name, then one JSON object.
fn bench(a: BenchArgs) -> CliResult {
    use mapf_ledger::train::bench;
    use mapf_ledger::train::lm::model::{compute_dtype, LoraSpec, LORA_MODULES};
    let device =
        mapf_ledger::train::open_device(a.device).map_err(|e| CliError::input(e.to_string()))?;
    let dtype = compute_dtype(device);
    let read =
        |p: &Path| std::fs::read(p).map_err(|e| CliError::input(format!("{}: {e}", p.display())));
    let mut out = serde_json::Map::new();
    out.insert("device".into(), format!("{device:?}").into());
    out.insert("dtype".into(), format!("{dtype:?}").into());
    let cfg = match &a.shape {
        Some(p) => {
            let text = String::from_utf8_lossy(&read(p)?).into_owned();
            Some(
                mapf_ledger::train::lm::LmConfig::from_hf_json(&text)
                    .map_err(|e| CliError::input(format!("--shape {}: {e}", p.display())))?,
            )
        }
        None => None,
    };
    if let Some(cfg) = &cfg {
        out.insert("parameters".into(), cfg.parameter_count().into());
        if !a.batch.is_empty() {
            if a.new_tokens < 2 {
                return Err(CliError::input("--new-tokens must be at least 2"));
            }
            let lora = (a.lora_rank > 0).then(|| LoraSpec {
                rank: a.lora_rank,
                alpha: 2.0 * a.lora_rank as f64,
                targets: LORA_MODULES.iter().map(|m| m.to_string()).collect(),
            });
            let model = bench::random_model(cfg, device, dtype, lora, Seed::root(1));
            // Untimed: the first call pays for kernels' first use.
            let _ = bench::decode(&model, 1, 8, 2, None);
            let mut figures = Vec::new();
            for &b in &a.batch {
                let f = bench::decode(&model, b, a.prompt_tokens, a.new_tokens, a.memory_bandwidth);
                eprintln!(
                    "decode batch {b}: {:.0} tokens/s, {:.2} ms a step{}",
                    f.decode_tokens_per_s,
                    f.step_ms,
                    f.roofline_share
                        .map(|s| format!(", {:.1}% of the memory roofline", 100.0 * s))
                        .unwrap_or_default()
                );
                figures.push(f);
            }
            out.insert(
                "decode".into(),
                serde_json::to_value(&figures).expect("serialises"),
            );
        }
    }
    if let Some(plan_path) = &a.grpo_plan {
        let Some(cfg) = &cfg else {
            return Err(CliError::input("--grpo-plan needs --shape"));
        };
        let plan = mapf_ledger::plan::LedgerPlan::parse(&read(plan_path)?)
            .map_err(|e| CliError::input(format!("--grpo-plan {}: {e}", plan_path.display())))?;
        let figure = grpo_bench(&a, cfg, &plan, device, dtype)?;
        eprintln!(
            "GRPO step: {:.1} s, {:.1} TFLOP/s{}",
            figure.seconds,
            figure.tflops_per_s,
            figure
                .mfu
                .map(|m| format!(", MFU {:.1}%", 100.0 * m))
                .unwrap_or_default()
        );
        for p in &figure.timing.phases {
            eprintln!("  {:<16} {:>8.2} s", p.name, p.seconds);
        }
        out.insert(
            "grpo".into(),
            serde_json::to_value(&figure).expect("serialises"),
        );
    }
    if let (Some(model_dir), Some(plan_path)) = (&a.warmup_model, &a.warmup_plan) {
        let plan = mapf_ledger::plan::LedgerPlan::parse(&read(plan_path)?)
            .map_err(|e| CliError::input(format!("--warmup-plan {}: {e}", plan_path.display())))?;
        let figure = warmup_bench(&a, model_dir, &plan, device)?;
        eprintln!(
            "warm-up: {:.3} s a step ({} rows of {:.0} tokens)",
            figure.seconds_per_step, figure.batch, figure.mean_tokens
        );
        for p in &figure.timing.phases {
            eprintln!(
                "  {:<16} {:>8.3} s a step",
                p.name,
                p.seconds / figure.steps.max(1) as f64
            );
        }
        out.insert(
            "warmup".into(),
            serde_json::to_value(&figure).expect("serialises"),
        );
    }
    println!(
        "{}",
        serde_json::to_string_pretty(&out).expect("serialises")
    );
    Ok(())
}

/// One GRPO step of `plan`'s shape at `cfg` with random weights.
fn grpo_bench(
    a: &BenchArgs,
    cfg: &mapf_ledger::train::lm::LmConfig,
    plan: &mapf_ledger::plan::LedgerPlan,
    device: tch::Device,
    dtype: tch::Kind,
) -> Result<mapf_ledger::train::bench::GrpoFigure, CliError> {
    use mapf_ledger::record::Hash;
    use mapf_ledger::train::lm::{ChatFormat, LmArch, Origin};
    let tokenizer_json = std::fs::read(&a.tokenizer)
        .map_err(|e| CliError::input(format!("--tokenizer {}: {e}", a.tokenizer.display())))?;
    let spec = &plan.lm;
    let lora = spec.lora();
    let model =
        mapf_ledger::train::bench::random_model(cfg, device, dtype, lora.clone(), Seed::root(2));
    let arch = LmArch {
        config: cfg.clone(),
        tokenizer: Hash::of_blob(&tokenizer_json),
        chat: ChatFormat::for_family(cfg.family),
        prompt: spec.prompt,
        sampling: Sampling {
            max_new_tokens: a.grpo_new_tokens,
            ..spec.sampling()
        },
        origin: Origin::Scratch,
        frozen: lora
            .as_ref()
            .map(|_| mapf_ledger::train::lm::Frozen::Origin),
        lora,
    };
    let mut policy = LmPolicy::new(model, tokenizer_json, arch)
        .map_err(|e| CliError::input(format!("--tokenizer {}: {e}", a.tokenizer.display())))?;
    // The plan's memory settings, as a run applies them (recomputed layers, log-probs
    // in chunks, a generation budget).
    mapf_ledger::train::policy::Policy::set_memory(&mut policy, plan.memory());
    let data = mapf_ledger::env::generate(
        &plan.initial_config,
        plan.grpo.batch_size as usize,
        Seed::root(plan.seed).child("bench-data", 0),
        mapf_ledger::env::Budget::default(),
    )
    .map_err(|e| CliError::input(format!("--grpo-plan: its initial_config: {e}")))?;
    Ok(mapf_ledger::train::bench::grpo_step(
        policy,
        &plan.grpo,
        &data,
        Seed::root(plan.seed).child("bench-step", 0),
        a.peak_flops,
    ))
}

/// Warm-up steps of `model_dir` on `plan`'s engineer examples (at least a batch of
/// them; the plan's `warmup.engineer_batch_size` rows a step).
fn warmup_bench(
    a: &BenchArgs,
    model_dir: &Path,
    plan: &mapf_ledger::plan::LedgerPlan,
    device: tch::Device,
) -> Result<mapf_ledger::train::bench::WarmupFigure, CliError> {
    use mapf_ledger::stage::corpus;
    let lm = load(Path::new("."), &format!("{}", model_dir.display()), device)?;
    let batch = a
        .warmup_batch
        .unwrap_or(plan.warmup.engineer_batch_size as usize)
        .max(1);
    let mut plan = plan.clone();
    plan.warmup.engineer_examples = plan
        .warmup
        .engineer_examples
        .clamp(batch as u32, 4 * batch as u32);
    let text = mapf_ledger::engineer::text::TextRevision::of_plan(&plan)
        .map_err(|e| CliError::input(format!("--warmup-plan: {e}")))?;
    let examples = corpus::engineer_examples(&plan, text, Seed::root(plan.seed));
    if examples.is_empty() {
        return Err(CliError::input(
            "--warmup-plan: the plan's warm-up has no engineer examples (an lm plan with warmup.engineer_examples > 0)",
        ));
    }
    let pairs = corpus::engineer_pairs(&lm, &examples, plan.lm.engineer_prompt_tokens, text);
    Ok(mapf_ledger::train::bench::warmup_steps(
        lm,
        &pairs,
        batch,
        a.warmup_steps,
        Seed::root(plan.seed),
    ))
}
