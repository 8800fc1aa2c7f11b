//! `ledger study`: fork a branch at a stage once per engineer × seed replicate, run
//! every fork to the plan's end (resumable), and write a CSV, a markdown table in the
//! paper's layout (mean ± 95% t-interval over seeds) and an SVG plot.
use crate::cli::{CliError, CliResult};
use mapf_ledger::study::{StudyError, StudySpec};
use std::path::{Path, PathBuf};

/// Most seed replicates one study runs (each is a whole run per engineer).
const MAX_SEEDS: u32 = 1000;

#[derive(clap::Args, Debug)]
pub struct StudyArgs {
    /// stageN (N >= 1): the forks keep stages before N.
    #[arg(long, value_parser = mapf_ledger::replay::parse_stage)]
    pub at: u32,
    #[arg(
        long,
        help = super::engineer_help("Comma-separated engineers (`NAME:-module+module` is an ablation, e.g. `current,current:-failure_breakdown,current:+training_details`)")
    )]
    pub engineers: mapf_ledger::engineer::EngineerList,
    /// Seed replicates per engineer (0..K; replicate 0 uses the plan's seeds).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=MAX_SEEDS as i64))]
    pub seeds: u32,
    /// The branch every run forks from.
    #[arg(long, default_value = "main")]
    pub from: String,
    /// Output directory (default: LEDGER/study-atN).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// cpu, cuda or cuda:N (default: the plan's).
    #[arg(long)]
    pub device: Option<mapf_ledger::train::DeviceSpec>,
    /// Where runs execute: local (this process, one after another), local:N (N worker
    /// processes at once), or slurm (one job array; see README, "Running a study on a
    /// cluster").
    #[arg(long, default_value = "local", value_name = "local[:N]|slurm")]
    pub executor: mapf_ledger::executor::Executor,
    /// An sbatch option for every task (repeatable): `--sbatch-arg=--partition=gpu
    /// --sbatch-arg=--gres=gpu:1 --sbatch-arg=--time=12:00:00`.
    #[arg(long = "sbatch-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub sbatch_args: Vec<String>,
    /// Worker ledgers, logs and job scripts (default: OUT/work). With slurm it must be on
    /// a filesystem the compute nodes share.
    #[arg(long, value_name = "DIR")]
    pub workdir: Option<PathBuf>,
    /// For study.md's power line: the standard deviation of per-seed paired differences
    /// (valid %, points) a pilot measured on the target row (the test suite's smallest
    /// agent count, its coordination items when marked); the line then says how many
    /// seeds 80% power asks. Without it only the study's own spread is used.
    #[arg(long, value_name = "POINTS", value_parser = mapf_ledger::plan::values::non_negative)]
    pub power_sd: Option<f64>,
    /// The smallest difference the power line asks to see, in points.
    #[arg(long, value_name = "POINTS", default_value_t = 5.0, value_parser = mapf_ledger::plan::values::positive)]
    pub power_effect: f64,
    /// An earlier report of this same study (its `study.json`, or the directory holding
    /// it): its finished runs this ledger lacks count in the tables instead of being
    /// forked and run again (worker ledgers lost, or a study split over machines). Each
    /// is checked to fork from this ledger's FROM; the pooled item bootstrap is left out
    /// of rows that pair one (a report has no per-instance outcomes).
    #[arg(long, value_name = "REPORT")]
    pub reuse: Option<PathBuf>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// No progress lines.
    #[arg(long)]
    pub quiet: bool,
}

#[derive(clap::Args, Debug)]
pub struct TaskArgs {
    /// The bundle the worker ledger is created from when it does not exist yet.
    #[arg(long, value_name = "FILE")]
    pub bundle: PathBuf,
    /// The branch of the worker ledger to run.
    #[arg(long)]
    pub branch: String,
    /// cpu, cuda or cuda:N (default: the plan's).
    #[arg(long)]
    pub device: Option<mapf_ledger::train::DeviceSpec>,
    /// No progress lines.
    #[arg(long)]
    pub quiet: bool,
}

/// `ledger study-task`: the worker side of an out-of-process study run. Idempotent:
/// a resubmitted task reopens its worker ledger and resumes the branch.
pub fn task(ledger_dir: &Path, args: TaskArgs) -> CliResult {
    let open = crate::cli::open_writer;
    mapf_ledger::executor::prepare_worker(ledger_dir, &args.bundle, &open)?;
    super::run::run(
        ledger_dir,
        mapf_ledger::stage::RunOptions::to_the_end(args.branch.clone()),
        args.device,
        // A worker warns when the memory check fails but runs: the study was started
        // on purpose, and a refusal here would only show up in a task log.
        super::run::MemoryCheck {
            gpu_memory: None,
            force: true,
        },
        args.quiet,
    )?;
    let head = mapf_ledger::executor::finish_task(ledger_dir, &args.branch)?;
    println!("{} finished at {}", args.branch, head.short());
    Ok(())
}

pub fn run(ledger_dir: &Path, args: StudyArgs) -> CliResult {
    let StudyArgs {
        at,
        engineers,
        seeds,
        from,
        out,
        device,
        executor,
        sbatch_args,
        workdir,
        power_sd,
        power_effect,
        reuse,
        json,
        quiet,
    } = args;
    let power = mapf_ledger::views::study::PowerPlan {
        effect: power_effect,
        pilot_sd: power_sd,
    };
    let executor = executor.with_sbatch_args(sbatch_args)?;
    let engineers = engineers.0;
    let mut ledger = crate::cli::open_writer(ledger_dir)?;
    let stop = super::run::stop_on_ctrl_c();
    let dir = out.unwrap_or_else(|| ledger_dir.join(format!("study-at{at}")));
    let mut spec = StudySpec {
        at,
        from,
        engineers,
        seeds,
        device,
        executor,
        workdir: workdir.unwrap_or_else(|| dir.join("work")),
        reuse: Default::default(),
    };
    let reused = match &reuse {
        None => Vec::new(),
        Some(path) => spec.reuse_report(&ledger, path)?,
    };
    let mut progress = mapf_ledger::stage::progress::Lines::new(quiet);
    let runs = match mapf_ledger::study::run_study(&mut ledger, &spec, &mut progress, &stop) {
        Ok(r) => r,
        Err(StudyError::Interrupted) => {
            eprintln!("{}", StudyError::Interrupted);
            return Err(CliError {
                code: 130,
                message: "interrupted".into(),
            });
        }
        Err(e @ StudyError::Executor(mapf_ledger::executor::ExecutorError::Failed { .. })) => {
            return Err(CliError::check(e.to_string()))
        }
        Err(e) => return Err(e.into()),
    };
    let mut report =
        mapf_ledger::views::study::study_report(&mut ledger, &spec.design(), runs, reused, power)?;
    mapf_ledger::views::study::write_study(&mut report, &dir)?;
    crate::cli::say(json, &report, |r| {
        let markdown = mapf_ledger::views::study::study_markdown(r);
        markdown + &mapf_ledger::views::study::runs_line(r)
    })
}
