//! `ledger lm generate`: sample from a language model — an HF model directory or an
//! `lm` checkpoint of the ledger — and print the token ids, the text and per-token
//! log-probs. A user's sanity check that a model loaded as it should.
//!
//! `ledger lm bench`: the policy's throughput on a device (`train::bench`): decode
//! tokens/s at a shape, one GRPO step of a plan, warm-up steps of a model directory.
use crate::cli::{CliError, CliResult};
use clap::Subcommand;
use std::path::{Path, PathBuf};

#[derive(Subcommand, Debug)]
pub enum LmCommand {
    /// Generate a continuation of a prompt.
    Generate(GenerateArgs),
    /// Measure decode tokens/s, a GRPO step and warm-up steps on a device; prints JSON.
    Bench(BenchArgs),
}

// What `ledger lm generate` samples, and how.
#[derive(clap::Args, Debug)]
pub struct GenerateArgs {
    /// An HF model directory (config.json, safetensors, tokenizer.json), or a
    /// checkpoint reference of the ledger (BRANCH, BRANCH@stageN, hash prefix).
    #[arg(long)]
    pub model: String,
    /// The user message (wrapped in the model's chat template unless --raw).
    #[arg(long)]
    pub prompt_file: PathBuf,
    /// Most tokens to generate after the prompt.
    #[arg(long, default_value_t = 64)]
    pub max_new_tokens: usize,
    /// 0 decodes greedily.
    #[arg(long, default_value_t = 0.0, value_parser = mapf_ledger::plan::values::non_negative)]
    pub temperature: f64,
    /// Nucleus sampling: sample from the smallest set of tokens whose probability reaches this (1 samples from all).
    #[arg(long, default_value_t = 1.0, value_parser = mapf_ledger::plan::values::unit_mass)]
    pub top_p: f64,
    /// Seed of the sampler (with --temperature above 0).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Feed the file's text as is, without the chat template.
    #[arg(long)]
    pub raw: bool,
    /// cpu, cuda or cuda:N.
    #[arg(long, default_value = "cpu")]
    pub device: mapf_ledger::train::DeviceSpec,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
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
    /// How decode steps meet the host: `device` (the device's own loop, as training
    /// decodes: per token on the CPU, windowed on a GPU), `windowed`, `fixed` (the
    /// fixed-shape step a CUDA graph captures, run eagerly) or `graphed` (that step
    /// captured once per wave and replayed a token at a time; without the shim of
    /// tools/cuda-graph.sh it says so once and decodes windowed).
    #[arg(long, value_enum, default_value = "device")]
    decode_loop: DecodeLoopArg,
    /// Decode with LoRA adapters of this rank on every projection (0: none), as a
    /// GRPO stage's rollouts do (merged into the weights on a GPU).
    #[arg(long, default_value_t = 0)]
    lora_rank: i64,
    /// A plan whose GRPO step to time at --shape: its [grpo] batch, group, micro-batch
    /// and KL, its [lm] prompt style, sampling and LoRA, and its initial_config's
    /// instances; thinking off, --grpo-new-tokens new tokens (--grpo-as-committed: the
    /// plan's own).
    #[arg(long)]
    grpo_plan: Option<PathBuf>,
    /// New tokens per completion in the timed GRPO step.
    #[arg(long, default_value_t = 512)]
    grpo_new_tokens: usize,
    /// Time the --grpo-plan step as the plan is committed: its thinking mode and its
    /// max_new_tokens, instead of thinking off and --grpo-new-tokens (random weights run
    /// every lane to that budget, the worst case).
    #[arg(long, requires = "grpo_plan", conflicts_with = "grpo_new_tokens")]
    grpo_as_committed: bool,
    /// Prompts of the timed GRPO step, each with the plan's group of samples (default:
    /// the plan's batch_size): part of a step too long to time whole, its budget,
    /// thinking and memory settings otherwise as --grpo-plan says.
    #[arg(long, requires = "grpo_plan", value_parser = clap::value_parser!(u32).range(1..))]
    grpo_prompts: Option<u32>,
    /// Train every row of the timed GRPO step: a plan with `[grpo] zero_variance =
    /// "drop"` trains only the groups with signal, and random weights give none (no
    /// plan parses), so its step would time no training; this runs it as `skip`, the
    /// same objective with every row through the KL reference and the training forward:
    /// `drop`'s worst case, every group with signal.
    #[arg(long, requires = "grpo_plan")]
    grpo_every_row: bool,
    /// Do not decode the timed GRPO step's samples: make each one its lane's whole token
    /// budget of drawn tokens, which random weights would decode to anyway, and time the
    /// KL reference and the training on those rows (a step whose decode outlasts a
    /// lease, measured without it; its FLOPs count no generation).
    #[arg(long, requires = "grpo_plan")]
    grpo_at_budget: bool,
    /// The tokenizer.json the GRPO step's prompts are written with (its ids fit any
    /// vocabulary at least as large).
    #[arg(long, default_value = "ledgers/models/mapf-base-indep/tokenizer.json")]
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
    #[arg(long, value_parser = mapf_ledger::plan::values::positive)]
    memory_bandwidth: Option<f64>,
    /// The device's dense bf16 peak in FLOP/s (e.g. 989e12 for an H100 SXM): the GRPO
    /// step then carries its model FLOPs utilisation.
    #[arg(long, value_parser = mapf_ledger::plan::values::positive)]
    peak_flops: Option<f64>,
}

/// `--decode-loop`'s values.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum DecodeLoopArg {
    Device,
    Windowed,
    Fixed,
    Graphed,
}

impl DecodeLoopArg {
    fn decode_loop(self) -> Option<mapf_ledger::train::lm::generate::DecodeLoop> {
        use mapf_ledger::train::lm::generate::{DecodeLoop, GPU_WINDOW, KEY_SPAN};
        match self {
            DecodeLoopArg::Device => None,
            DecodeLoopArg::Windowed => Some(DecodeLoop::Windowed { steps: GPU_WINDOW }),
            DecodeLoopArg::Fixed => Some(DecodeLoop::Fixed {
                steps: GPU_WINDOW,
                graphs: false,
                key_span: KEY_SPAN,
            }),
            DecodeLoopArg::Graphed => Some(DecodeLoop::Fixed {
                steps: GPU_WINDOW,
                graphs: true,
                key_span: KEY_SPAN,
            }),
        }
    }
}

pub fn run(dir: &Path, cmd: LmCommand) -> CliResult {
    match cmd {
        LmCommand::Generate(args) => generate(dir, args),
        LmCommand::Bench(args) => bench(args),
    }
}

fn generate(dir: &Path, a: GenerateArgs) -> CliResult {
    use mapf_ledger::train::lm::complete::{complete_named, read_prompt, Request};
    let device =
        mapf_ledger::train::open_device(a.device).map_err(|e| CliError::input(e.to_string()))?;
    let text = read_prompt(&a.prompt_file)?;
    let lm = mapf_ledger::stage::load_language_model(dir, &a.model, device)?;
    let request = Request {
        text: &text,
        raw: a.raw,
        max_new_tokens: a.max_new_tokens,
        temperature: a.temperature,
        top_p: a.top_p,
        seed: a.seed,
    };
    let c = complete_named(&lm, &request, &a.model, &a.prompt_file)?;
    if a.json {
        println!("{}", serde_json::to_string(&c.output).expect("serialises"));
    } else {
        print!(
            "{}",
            mapf_ledger::views::text::lm::generated(&c.output, &c.pieces)
        );
    }
    Ok(())
}

/// `ledger lm bench`: each part that its inputs name, saying each figure on stderr,
/// then one JSON object.
fn bench(a: BenchArgs) -> CliResult {
    use mapf_ledger::stage::bench::{self, BenchError, BenchSpec};
    let spec = BenchSpec {
        shape: a.shape,
        device: a.device,
        batch: a.batch,
        prompt_tokens: a.prompt_tokens,
        new_tokens: a.new_tokens,
        decode_loop: a.decode_loop.decode_loop(),
        lora_rank: a.lora_rank,
        grpo_plan: a.grpo_plan,
        grpo_new_tokens: (!a.grpo_as_committed).then_some(a.grpo_new_tokens),
        grpo_prompts: a.grpo_prompts,
        grpo_every_row: a.grpo_every_row,
        grpo_rollouts: if a.grpo_at_budget {
            mapf_ledger::train::bench::Rollouts::AtBudget
        } else {
            mapf_ledger::train::bench::Rollouts::Decoded
        },
        tokenizer: a.tokenizer,
        warmup: a.warmup_model.zip(a.warmup_plan),
        warmup_steps: a.warmup_steps,
        warmup_batch: a.warmup_batch,
        memory_bandwidth: a.memory_bandwidth,
        peak_flops: a.peak_flops,
    };
    let out = bench::run(&spec, &mut |line| eprintln!("{line}")).map_err(|e| match e {
        BenchError::Model(e) => e.into(),
        e => CliError::input(e.to_string()),
    })?;
    crate::cli::print_json(&out)
}
