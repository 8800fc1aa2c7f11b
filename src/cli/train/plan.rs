//! `ledger plan check PLAN`: the memory plan of a ledger plan (peak device memory per
//! phase, whether it fits a GPU, which setting to change if not), and the same check
//! that `ledger run --device cuda` makes before it starts.
use crate::cli::{CliError, CliResult};
use clap::Subcommand;
use mapf_ledger::plan::LedgerPlan;
use mapf_ledger::plan_check;
use mapf_ledger::train::memory::human;
use mapf_ledger::train::DeviceSpec;
use std::path::PathBuf;

#[derive(Subcommand, Debug)]
pub enum PlanCommand {
    /// Estimate peak device memory of a plan's run: weights in their dtype, trainable
    /// parameters and Adam state, the training micro-batch's activations, the KV cache
    /// of each generation. Exit 1 when it does not fit --gpu-memory.
    Check {
        /// The plan file (TOML).
        plan: PathBuf,
        /// cpu, cuda or cuda:N (default: the plan's [train] device).
        #[arg(long)]
        device: Option<DeviceSpec>,
        /// The GPU's memory, e.g. 80GiB, 40GB, 24GiB.
        #[arg(long, value_name = "SIZE")]
        gpu_memory: Option<String>,
        /// The model's config.json, when the plan's hf: directory is not on this machine.
        #[arg(long, value_name = "FILE")]
        model_config: Option<PathBuf>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

pub fn run(cmd: PlanCommand) -> CliResult {
    let PlanCommand::Check {
        plan,
        device,
        gpu_memory,
        model_config,
        json,
    } = cmd;
    let m = plan_check::check_file(
        &plan,
        device,
        gpu_memory.as_deref(),
        model_config.as_deref(),
    )?;
    crate::cli::say(json, &m, plan_check::render)?;
    if m.fits == Some(false) {
        return Err(CliError::check(format!(
            "{}: the run does not fit in {}",
            plan.display(),
            human(m.gpu_memory_bytes.unwrap_or(0))
        )));
    }
    Ok(())
}

/// Before `ledger run` on CUDA: the memory plan against the GPU (see
/// [`plan_check::gate`]); a forced run that would be refused says why on stderr.
pub fn check_before_run(
    plan: &LedgerPlan,
    device: DeviceSpec,
    gpu_memory: Option<&str>,
    force: bool,
) -> CliResult {
    let warning = plan_check::gate::check_before_run(plan, device, gpu_memory, force)
        .map_err(|e| CliError::input(e.to_string()))?;
    if let Some(w) = warning {
        eprintln!("{w}");
    }
    Ok(())
}
