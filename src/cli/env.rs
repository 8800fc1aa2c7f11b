//! `ledger env ...`: the MAPF-FrozenLake testbed on its own: generate, solve, check,
//! suite, import-movingai, prompt. Every command takes `--json`.
//!
//! Exit codes: 0 success; 1 when the thing checked fails (`check`: the plan is invalid;
//! `solve`: the instance is unsolvable or the budget ran out); 2 bad input, with a
//! message naming the file, line or field.
use super::{print_json, say, CliError, CliResult};
use clap::{Subcommand, ValueEnum};
use mapf_ledger::env::{
    self, files, generator, suite, text, verdict, Budget, CostMetric, GeneratorConfig,
};
use mapf_ledger::seed::Seed;
use mapf_ledger::views::testbed::{CheckReport, SolveReport, SuiteReport};
use std::path::PathBuf;

use super::values::{count_arg, max_size_arg, per_cell_arg};

#[derive(Subcommand, Debug)]
pub enum EnvCommand {
    /// Generate solved instances from a generator config (or one size given by flags).
    Generate(GenerateArgs),
    /// Solve an instance (JSON file) optimally with CBS.
    Solve(SolveArgs),
    /// Validate a plan (JSON `{"moves": [...]}` or text `agent 1: R D ...`) against an instance.
    Check(CheckArgs),
    /// Build a benchmark suite of the paper's protocol and print its statistics.
    Suite(SuiteArgs),
    /// Import a MovingAI `.map` + `.scen` pair as an instance (first K scenario lines).
    ImportMovingai(ImportMovingaiArgs),
    /// Render an instance as the prompt text an LLM reads.
    Prompt(PromptArgs),
    /// Measure the batched step API: random actions on generated instances, observation
    /// planes updated every step, finished instances auto-reset.
    Throughput(ThroughputArgs),
}

#[derive(clap::Args, Debug)]
pub struct GenerateArgs {
    /// A GeneratorConfig JSON file (schemas/generator-config.json); overrides the flags below.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Map side length (the map is size x size).
    #[arg(long, default_value_t = 5)]
    pub size: usize,
    /// Number of agents.
    #[arg(long, default_value_t = 2)]
    pub agents: usize,
    /// Hole ratio in [0, 0.5].
    #[arg(long, default_value_t = 0.2)]
    pub holes: f64,
    /// Share of instances that need coordination, in [0, 1].
    #[arg(long, default_value_t = 0.0)]
    pub wait: f64,
    /// Instances to generate.
    #[arg(long, default_value_t = 10, value_parser = count_arg())]
    pub count: usize,
    /// Seed of the generator (the same seed gives the same instances).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args, Debug)]
pub struct SolveArgs {
    /// An instance, or what `env generate --json` wrote (pick one with --index).
    pub file: PathBuf,
    /// Which instance of a file that holds several (from 0).
    #[arg(long)]
    pub index: Option<usize>,
    /// Most high-level CBS nodes per search.
    #[arg(long, default_value_t = 200_000)]
    pub max_nodes: u64,
    /// Wall-clock limit in milliseconds.
    #[arg(long)]
    pub timeout_ms: Option<u64>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    /// The plan: JSON `{"moves": [...]}` or text `agent 1: R D ...`.
    pub plan: PathBuf,
    /// An instance, or what `env generate --json` wrote (pick one with --index).
    pub instance: PathBuf,
    /// Which instance of a file that holds several (from 0).
    #[arg(long)]
    pub index: Option<usize>,
    /// Cost that "optimal" refers to.
    #[arg(long, value_enum, default_value_t = Metric::Makespan)]
    pub metric: Metric,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args, Debug)]
pub struct SuiteArgs {
    /// `val` (2 agents, sizes 3..max) or `test` (3, 4, 5 agents).
    #[arg(long)]
    pub name: suite::SuiteName,
    /// Instances per (agents, size) cell.
    #[arg(long, default_value_t = 150, value_parser = per_cell_arg())]
    pub per_cell: usize,
    /// Largest map size of the suite.
    #[arg(long, default_value_t = 10, value_parser = max_size_arg())]
    pub max_size: usize,
    /// Seed of the generator (the same seed gives the same instances).
    #[arg(long, default_value_t = 2026)]
    pub seed: u64,
    /// Write the whole suite (instances, optima, plans) as JSON to this file.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Also score the independent-shortest-paths baseline (valid/optimal per cell).
    #[arg(long)]
    pub baseline: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args, Debug)]
pub struct ImportMovingaiArgs {
    /// The MovingAI .map file.
    pub map: PathBuf,
    /// The MovingAI .scen file (its first --agents lines are the agents).
    pub scen: PathBuf,
    /// Number of agents.
    #[arg(long, default_value_t = 2)]
    pub agents: usize,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args, Debug)]
pub struct PromptArgs {
    /// An instance, or what `env generate --json` wrote (pick one with --index).
    pub instance: PathBuf,
    /// Which instance of a file that holds several (from 0).
    #[arg(long)]
    pub index: Option<usize>,
    /// `paper` (the natural-language prompt), `compact`, `cells` (the shipped
    /// base planner's format) or `steps` (its prompt; the plan is written time first).
    #[arg(long, default_value = "paper")]
    pub format: mapf_ledger::plan::trainer::PromptStyle,
}

#[derive(clap::Args, Debug)]
pub struct ThroughputArgs {
    /// Map side length (the map is size x size).
    #[arg(long, default_value_t = 8)]
    pub size: usize,
    /// Number of agents.
    #[arg(long, default_value_t = 2)]
    pub agents: usize,
    /// Hole ratio in [0, 0.5].
    #[arg(long, default_value_t = 0.3)]
    pub holes: f64,
    /// Instances stepped together.
    #[arg(long, default_value_t = 256)]
    pub batch: usize,
    /// Steps of the whole batch.
    #[arg(long, default_value_t = 2000)]
    pub steps: usize,
    /// Step lanes in parallel with rayon (RAYON_NUM_THREADS sets the threads).
    #[arg(long)]
    pub parallel: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Metric {
    Makespan,
    SumOfCosts,
}

impl From<Metric> for CostMetric {
    fn from(m: Metric) -> Self {
        match m {
            Metric::Makespan => CostMetric::Makespan,
            Metric::SumOfCosts => CostMetric::SumOfCosts,
        }
    }
}

pub fn run(cmd: EnvCommand) -> CliResult {
    use mapf_ledger::views::text::testbed as view;
    match cmd {
        EnvCommand::Generate(a) => {
            let cfg = match &a.config {
                Some(path) => files::read_json::<GeneratorConfig>(path)?,
                None => GeneratorConfig::uniform(a.agents, [a.size], a.holes, a.wait),
            };
            cfg.validate()
                .map_err(|e| CliError::input(format!("generator config out of range: {e}")))?;
            let items = generator::generate(&cfg, a.count, Seed::root(a.seed), Budget::default())
                .map_err(|e| CliError::input(e.to_string()))?;
            say(a.json, &items, |items| view::generated(items))?;
        }
        EnvCommand::Solve(a) => {
            let inst = files::read_instance(&a.file, a.index)?;
            let budget = Budget {
                max_nodes: a.max_nodes,
                max_millis: a.timeout_ms,
            };
            let sol = env::solve(&inst, budget);
            if a.json {
                print_json(&SolveReport::of(&sol))?;
            }
            let sol = sol.map_err(|e| CliError::check(format!("{}: {e}", a.file.display())))?;
            if !a.json {
                print!("{}", view::solution(&sol));
            }
        }
        EnvCommand::Check(a) => {
            let inst = files::read_instance(&a.instance, a.index)?;
            let parsed = files::read_plan(&a.plan, &inst)?;
            let v = verdict::check(&inst, &parsed, a.metric.into());
            say(a.json, &CheckReport::of(&v), |_| view::verdict(&v))?;
            if !v.outcome.valid {
                let what = format!("{}: plan is invalid", a.plan.display());
                return Err(CliError::check(what));
            }
        }
        EnvCommand::Suite(a) => {
            if let Some(o) = &a.out {
                mapf_ledger::output::check_file("--out", o)?;
            }
            let spec = suite::SuiteSpec {
                name: a.name,
                per_cell: a.per_cell,
                max_size: a.max_size,
                seed: a.seed,
                wait_ratios: Vec::new(),
            };
            let s = suite::build(&spec, Budget::default())
                .map_err(|e| CliError::input(e.to_string()))?;
            if let Some(path) = &a.out {
                files::write_json(path, &s)?;
            }
            let scores = a.baseline.then(|| verdict::baseline_table(&s));
            let report = SuiteReport::of(&s, scores.as_ref());
            say(a.json, &report, |_| view::suite(&s, scores.as_ref()))?;
        }
        EnvCommand::ImportMovingai(a) => {
            let inst = files::import_movingai(&a.map, &a.scen, a.agents)?;
            say(a.json, &inst, text::render_prompt)?;
        }
        EnvCommand::Throughput(a) => {
            let cfg = GeneratorConfig::uniform(a.agents, [a.size], a.holes, 0.0);
            cfg.validate()
                .map_err(|e| CliError::input(format!("throughput config out of range: {e}")))?;
            let r = env::batch::measure_throughput(&cfg, a.batch, a.steps, a.parallel)
                .map_err(|e| CliError::input(e.to_string()))?;
            say(a.json, &r, |r| view::throughput(r, a.holes, a.parallel))?;
        }
        EnvCommand::Prompt(a) => {
            let inst = files::read_instance(&a.instance, a.index)?;
            print!("{}", a.format.task_text(&inst))
        }
    }
    Ok(())
}
