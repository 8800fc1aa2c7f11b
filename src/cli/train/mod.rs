//! The commands that train, or run what trains (the `train` feature: libtorch): their
//! clap declarations in [`TrainCommand`], flattened into `ledger`'s command list, and
//! their one dispatch point, [`run`]. A `ledger` built without the feature has
//! `cli/refused.rs` in this module's place, which refuses them naming what to install.
pub mod checkpoint;
pub mod engineer;
pub mod eval;
pub mod lm;
pub mod plan;
pub mod replay;
pub mod run;
pub mod study;

use super::{open_writer, CliResult};
use clap::Subcommand;
use mapf_ledger::engineer::EngineerSpec;
use mapf_ledger::train::DeviceSpec;
use mapf_ledger::views::text::ledger as view;
use std::path::{Path, PathBuf};

#[derive(Subcommand, Debug)]
pub enum TrainCommand {
    /// Write the JSON Schemas of every interchange format into a directory.
    Schemas {
        /// Directory to write the schemas into (created if missing).
        #[arg(long, default_value = "schemas")]
        out: PathBuf,
    },
    /// Run the branch's stages (warm-up, then engineered GRPO stages) from where it stops.
    Run(RunArgs),
    /// Continue a branch after a crash or Ctrl-C (same as `run`).
    Resume(ResumeArgs),
    /// Fork a branch at a stage: the new branch keeps stages before N and lets the
    /// engineer design stage N onward (`ledger run --branch NEW` continues it).
    Fork {
        /// stageN (N >= 1).
        #[arg(long, value_parser = mapf_ledger::replay::parse_stage)]
        at: u32,
        /// The branch to fork from.
        #[arg(long, default_value = "main")]
        from: String,
        /// The engineer of stage N onward (as for `run --engineer`, module switches included).
        #[arg(long)]
        engineer: EngineerSpec,
        /// Name of the new branch (default FROM-ENGINEER-atN).
        #[arg(long)]
        name: Option<String>,
    },
    /// Write a stage's policy weights as a safetensors file (REF: BRANCH@stageN, a
    /// branch, or a checkpoint event hash prefix).
    ExportCheckpoint {
        /// The checkpoint: BRANCH@stageN, a branch (its latest), or a checkpoint event's hash prefix.
        #[arg(value_name = "REF")]
        reference: String,
        /// A safetensors file of the trained parameters.
        #[arg(long, required_unless_present = "hf", conflicts_with = "hf")]
        out: Option<PathBuf>,
        /// An HF model directory (lm policy; LoRA merged) that transformers and vLLM load.
        #[arg(long, value_name = "DIR")]
        hf: Option<PathBuf>,
    },
    /// Plan files on their own: `plan check` estimates a run's peak device memory.
    #[command(subcommand)]
    Plan(plan::PlanCommand),
    /// The language model on its own: `lm generate` samples from a model directory or
    /// a ledger checkpoint (a sanity check of a loaded model).
    #[command(subcommand)]
    Lm(lm::LmCommand),
    /// Score a checkpoint (an HF model directory or a ledger reference) on the paper's
    /// suites without a run: valid and optimal % per size, Sum per agent count, failure
    /// kinds.
    Eval(eval::EvalArgs),
    /// Recompute recorded stages and compare every event hash (`--verify`, the
    /// default), or re-run a stage with another engineer (`--engineer E [--keep NAME]`).
    Replay(replay::ReplayArgs),
    // Help lists these from display order 1 on (see `super::Command`), except the
    // three below, which name their place.
    /// Counterfactual study: fork at stageN once per engineer x seed, run each to the
    /// plan's end (resumable; here, in local processes, or on Slurm), write study.csv,
    /// study.md, study.json and the plot.
    #[command(display_order = 14)]
    Study(study::StudyArgs),
    /// One study run in a worker ledger (what `study --executor local:N|slurm` starts):
    /// create the ledger from the bundle if needed, run the branch, write `done`.
    #[command(hide = true, display_order = 14)]
    StudyTask(study::TaskArgs),
    /// Register and list LLM engineers (OpenAI-compatible chat endpoints).
    #[command(subcommand, display_order = 17)]
    Engineer(engineer::EngineerCommand),
}

// `ledger run`: what to run and where.
#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// The branch to run: main, or one `ledger fork` made.
    #[arg(long, default_value = "main")]
    pub branch: String,
    /// Run at most N more stages.
    #[arg(long)]
    pub stages: Option<u32>,
    #[arg(long, help = engineer_help("Engineer for the stages this run designs"))]
    pub engineer: Option<EngineerSpec>,
    /// cpu, cuda or cuda:N (default: the plan's).
    #[arg(long)]
    pub device: Option<DeviceSpec>,
    /// On CUDA: the GPU memory the memory check compares with (default: the
    /// device's own), e.g. 80GiB.
    #[arg(long, value_name = "SIZE")]
    pub gpu_memory: Option<String>,
    /// Run even when the memory check says the plan cannot fit.
    #[arg(long)]
    pub force: bool,
    /// No progress (bars on a terminal, plain lines elsewhere).
    #[arg(long)]
    pub quiet: bool,
}

// `ledger resume`: as `run`, to the plan's end.
#[derive(clap::Args, Debug)]
pub struct ResumeArgs {
    /// The branch to run: main, or one `ledger fork` made.
    #[arg(long, default_value = "main")]
    pub branch: String,
    /// cpu, cuda or cuda:N (default: the plan's).
    #[arg(long)]
    pub device: Option<DeviceSpec>,
    /// On CUDA: the GPU memory the memory check compares with (default: the device's own), e.g. 80GiB.
    #[arg(long, value_name = "SIZE")]
    pub gpu_memory: Option<String>,
    /// Run even when the memory check says the plan cannot fit.
    #[arg(long)]
    pub force: bool,
    /// No progress (bars on a terminal, plain lines elsewhere).
    #[arg(long)]
    pub quiet: bool,
}

/// Run a training command on the ledger at `dir`.
pub fn run(cmd: TrainCommand, dir: &Path) -> CliResult {
    let check = |gpu_memory, force| run::MemoryCheck { gpu_memory, force };
    match cmd {
        TrainCommand::Schemas { out } => write_schemas(&out),
        TrainCommand::Run(a) => {
            let opts = mapf_ledger::stage::RunOptions {
                branch: a.branch,
                stages: a.stages,
                engineer: a.engineer,
            };
            run::run(dir, opts, a.device, check(a.gpu_memory, a.force), a.quiet)
        }
        TrainCommand::Resume(a) => {
            let opts = mapf_ledger::stage::RunOptions::to_the_end(a.branch);
            run::run(dir, opts, a.device, check(a.gpu_memory, a.force), a.quiet)
        }
        TrainCommand::Fork {
            at,
            from,
            engineer,
            name,
        } => {
            let mut ledger = open_writer(dir)?;
            let (name, head) =
                mapf_ledger::replay::fork(&mut ledger, &from, at, &engineer, name.as_deref(), 0)?;
            let engineer = engineer.to_string();
            print!("{}", view::forked(&name, &from, at, &engineer, &head));
            Ok(())
        }
        TrainCommand::ExportCheckpoint { reference, out, hf } => {
            checkpoint::export(dir, &reference, out.as_deref(), hf.as_deref())
        }
        TrainCommand::Plan(cmd) => plan::run(cmd),
        TrainCommand::Lm(cmd) => lm::run(dir, cmd),
        TrainCommand::Eval(args) => eval::run(dir, args),
        TrainCommand::Replay(args) => replay::run(dir, args),
        TrainCommand::Study(args) => study::run(dir, args),
        TrainCommand::StudyTask(args) => study::task(dir, args),
        TrainCommand::Engineer(cmd) => engineer::run(cmd, dir),
    }
}

fn write_schemas(out: &Path) -> CliResult {
    let mut wrote = |path: &Path| println!("wrote {}", path.display());
    Ok(mapf_ledger::schemas::write_all(out, &mut wrote)?)
}

/// The help of an `--engineer` option: `lead`, then the built-in engineers as the
/// registry (`engineer::BUILTINS`) lists them, and the spec's grammar.
pub(crate) fn engineer_help(lead: &str) -> String {
    use mapf_ledger::engineer::builtin_names_where as names;
    format!(
        "{lead}: {}, {} (lm plans), or a registered LLM; `NAME:-module+module` switches context modules (e.g. `current:-failure_breakdown`)",
        names(false),
        names(true)
    )
}
