//! `ledger run`: drive a branch through the plan's stages with progress bars; Ctrl-C
//! stops at the next durable point (a checkpoint) and `ledger run` again resumes.
use crate::cli::{CliError, CliResult};
use mapf_ledger::interrupt::{self, Work};
use mapf_ledger::stage::progress::Bars;
use mapf_ledger::stage::{Pipeline, RunOptions, StageError};
use mapf_ledger::train::DeviceSpec;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// A flag Ctrl-C (SIGINT) or SIGTERM sets: `run` and `study` poll it and stop at their
/// next durable point, the end of the gradient step under way. A second signal exits
/// at once, 130 (see [`mapf_ledger::interrupt`]; the ledger stays whole either way).
pub fn stop_on_ctrl_c() -> Arc<AtomicBool> {
    interrupt::on_signal(
        Work::Durable,
        "stopping at the end of this gradient step (its records are then durable)",
    )
}

/// `run --gpu-memory SIZE --force`: the memory check made before a CUDA run.
#[derive(Clone, Debug, Default)]
pub struct MemoryCheck {
    pub gpu_memory: Option<String>,
    pub force: bool,
}

/// `device`: `--device` (None: the plan's), resolved here once for the memory check
/// and the pipeline.
pub fn run(
    ledger_dir: &Path,
    opts: RunOptions,
    device: Option<DeviceSpec>,
    check: MemoryCheck,
    quiet: bool,
) -> CliResult {
    let started = std::time::Instant::now();
    let mut ledger = crate::cli::open_writer(ledger_dir)?;
    let plan = mapf_ledger::stage::ledger_plan(&ledger).map_err(stage_error)?;
    let device = device.unwrap_or(plan.train.device);
    super::plan::check_before_run(&plan, device, check.gpu_memory.as_deref(), check.force)?;
    let stop = stop_on_ctrl_c();
    let mut pipeline = Pipeline::new(&mut ledger, device).map_err(stage_error)?;
    if let Some(e) = &opts.engineer {
        if pipeline
            .choose_engineer(&opts.branch, e)
            .map_err(stage_error)?
            && !quiet
        {
            eprintln!(
                "branch {}: engineer {e} designs the next stages from now on",
                opts.branch
            );
        }
    }
    let mut bars = Bars::new(quiet);
    let summary = pipeline
        .run(&opts, &mut mapf_ledger::engineer::build, &mut bars, &stop)
        .map_err(stage_error)?;
    if summary.interrupted {
        eprintln!(
            "interrupted: branch {} is durable at {}; `ledger run --branch {}` resumes",
            summary.branch,
            summary.head.short(),
            summary.branch
        );
        return Err(CliError {
            code: 130,
            message: "interrupted".into(),
        });
    }
    println!("{}", summary.describe(plan.engineer.stages, opts.stages));
    if !quiet {
        // What the ledger cost this run: appends (fsync included), blobs, history and
        // projections, against the run's wall time.
        let (busy, wall) = (
            ledger.busy_time().as_secs_f64(),
            started.elapsed().as_secs_f64(),
        );
        eprintln!(
            "ledger time {busy:.2} s of {wall:.1} s ({:.2}%)",
            100.0 * busy / wall.max(1e-9)
        );
    }
    Ok(())
}

fn stage_error(e: StageError) -> CliError {
    e.into()
}
