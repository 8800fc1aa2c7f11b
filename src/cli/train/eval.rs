//! `ledger eval`: score any checkpoint on the paper's benchmark suites without a run.
//! The model is an HF directory (a real Qwen3, or an exported base planner) or a
//! checkpoint reference of the ledger; the output is the paper's layout (valid and
//! optimal % per size, the Sum row per agent count) plus each suite's failure kinds.
use crate::cli::{CliError, CliResult};
use clap::{Args, ValueEnum};
use indicatif::ProgressBar;
use mapf_ledger::env::suite::{self, SuiteName};
use mapf_ledger::env::CostMetric;
use mapf_ledger::stage::progress::counter;
use mapf_ledger::train::lm::PromptStyle;
use std::path::Path;

/// Which of the paper's suites `ledger eval` scores.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum SuiteChoice {
    /// 2 agents, sizes 3..10.
    #[value(alias = "validation")]
    Val,
    /// 3, 4 and 5 agents.
    Test,
    /// Both.
    All,
}

#[derive(Args, Debug)]
pub struct EvalArgs {
    /// An HF model directory (config.json, safetensors, tokenizer.json) or a checkpoint
    /// reference of the ledger (BRANCH, BRANCH@stageN, hash prefix).
    #[arg(long)]
    pub model: String,
    /// `val` (2 agents, sizes 3..10), `test` (3, 4 and 5 agents) or `all`.
    #[arg(long, value_enum, default_value = "all")]
    pub suite: SuiteChoice,
    /// Instances per (agents, size) cell (150 in the paper).
    #[arg(long, default_value_t = 20, value_parser = crate::cli::values::per_cell_arg())]
    pub per_cell: usize,
    /// The suites' seed (a ledger's suites use its plan's, 2026 by default).
    #[arg(long, default_value_t = 2026)]
    pub suite_seed: u64,
    /// Largest map size.
    #[arg(long, default_value_t = 10, value_parser = crate::cli::values::max_size_arg())]
    pub max_size: usize,
    /// Stratify each cell by wait ratio, as a plan's `suites.wait_ratios` does (e.g.
    /// `0.25,0.5,0.75`, the paper's test subsets and the CPU study's suites): the cell's
    /// items split into equal subsets whose items need coordination with those
    /// probabilities. `--per-cell` must be a multiple of their count.
    #[arg(long, value_delimiter = ',')]
    pub wait_ratios: Vec<f64>,
    /// The MAPF prompt an HF directory reads: paper, compact, cells or steps (default: what
    /// its mapf-ledger.json says, else paper). A checkpoint uses its recorded format.
    #[arg(long)]
    pub prompt: Option<PromptStyle>,
    /// Cost the optimal rate compares: makespan (the paper's) or sum-of-costs.
    #[arg(long, value_enum, default_value = "makespan")]
    pub metric: crate::cli::env::Metric,
    /// cpu, cuda or cuda:N (an HF directory; checkpoints are scored on the CPU).
    #[arg(long, default_value = "cpu")]
    pub device: mapf_ledger::train::DeviceSpec,
    /// Instances greedily decoded per batch (as a plan's `suites.eval_batch`; smaller
    /// needs less memory).
    #[arg(long, default_value_t = mapf_ledger::plan::DEFAULT_EVAL_BATCH as usize,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=65536))]
    pub batch: usize,
    /// Print JSON (schemas/eval.json) instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Also write every item, its decoded plan and its first failure (with the agents
    /// involved) to FILE, one JSON object a line (schemas/eval-item.json). FILE is
    /// written whole when the evaluation ends; an interrupted one leaves it as it was.
    #[arg(long, value_name = "FILE")]
    pub items: Option<std::path::PathBuf>,
}

pub fn run(dir: &Path, args: EvalArgs) -> CliResult {
    use mapf_ledger::train::scorecard::{self, Progress, Suites};
    let names: Vec<SuiteName> = match args.suite {
        SuiteChoice::Val => vec![SuiteName::Val],
        SuiteChoice::Test => vec![SuiteName::Test],
        SuiteChoice::All => vec![SuiteName::Val, SuiteName::Test],
    };
    suite::check_wait_ratios(&args.wait_ratios, Some(args.per_cell))
        .map_err(|m| CliError::input(format!("--wait-ratios: {m}")))?;
    if let Some(path) = &args.items {
        mapf_ledger::output::check_file_in_directory("--items", path)?;
    }
    let device =
        mapf_ledger::train::open_device(args.device).map_err(|e| CliError::input(e.to_string()))?;
    let (model, prompt) = (&args.model, args.prompt);
    let policy = mapf_ledger::stage::load_scored_model(dir, model, prompt, device)?;
    let suites = Suites {
        names,
        per_cell: args.per_cell,
        max_size: args.max_size,
        seed: args.suite_seed,
        wait_ratios: args.wait_ratios.clone(),
    };
    let mut bar = None;
    let mut progress = |p: Progress<'_>| match p {
        Progress::Suite(name, len) if !args.json => {
            bar = Some(counter(len as u64, name.as_str(), 6, "instances"));
        }
        Progress::Suite(..) => {}
        Progress::Scored(n) => bar.iter().for_each(|b| b.inc(n as u64)),
        Progress::Done(view) => {
            bar.take().iter().for_each(ProgressBar::finish_and_clear);
            if !args.json {
                print!("{}", view.render());
            }
        }
    };
    let mut items = args.items.as_ref().map(|_| String::new());
    let metric = (CostMetric::from(args.metric), args.batch);
    let report = scorecard::score(
        policy.as_ref(),
        &args.model,
        &suites,
        metric,
        items.as_mut(),
        &mut progress,
    )
    .map_err(|e| CliError::input(e.to_string()))?;
    if let (Some(path), Some(items)) = (&args.items, &items) {
        mapf_ledger::output::write_whole("--items", path, items)?;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report).expect("json"));
    }
    Ok(())
}
