//! `ledger plan check PLAN`: the memory plan of a ledger plan (peak device memory per
//! phase, whether it fits a GPU, which setting to change if not), and the same check
//! that `ledger run --device cuda` makes before it starts.
use super::{CliError, CliResult};
use clap::Subcommand;
use mapf_ledger::plan::LedgerPlan;
use mapf_ledger::plan_check::{self, MemoryPlan};
use mapf_ledger::train::memory::{human, parse_size};
use mapf_ledger::train::DeviceSpec;
use std::path::{Path, PathBuf};

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

fn read_plan(path: &Path) -> Result<LedgerPlan, CliError> {
    let bytes =
        std::fs::read(path).map_err(|e| CliError::input(format!("{}: {e}", path.display())))?;
    LedgerPlan::parse(&bytes).map_err(|e| CliError::input(format!("{}: {e}", path.display())))
}

pub fn run(cmd: PlanCommand) -> CliResult {
    let PlanCommand::Check {
        plan,
        device,
        gpu_memory,
        model_config,
        json,
    } = cmd;
    let p = read_plan(&plan)?;
    let device = device.unwrap_or(p.train.device);
    let memory = gpu_memory
        .as_deref()
        .map(parse_size)
        .transpose()
        .map_err(|m| CliError::input(format!("--gpu-memory {m}")))?;
    let m = plan_check::check(&p, device, memory, model_config.as_deref())
        .map_err(|e| CliError::input(e.to_string()))?;
    if json {
        println!("{}", serde_json::to_string_pretty(&m).expect("serialises"));
    } else {
        print!("{}", plan_check::render(&m));
    }
    if m.fits == Some(false) {
        return Err(CliError::check(format!(
            "{}: the run does not fit in {}",
            plan.display(),
            human(m.gpu_memory_bytes.unwrap_or(0))
        )));
    }
    Ok(())
}

/// Before `ledger run` on CUDA: the memory plan against the GPU (`--gpu-memory`, else
/// the device's own total); a plan that cannot fit is refused (exit 2) unless `force`.
/// `device` is the run's own, opened already (so the CUDA runtime is loaded).
pub fn check_before_run(
    plan: &LedgerPlan,
    device: DeviceSpec,
    gpu_memory: Option<&str>,
    force: bool,
) -> CliResult {
    let Some(index) = device.cuda_index() else {
        return Ok(());
    };
    if plan.policy != mapf_ledger::plan::PolicyKind::Lm {
        return Ok(());
    }
    let memory = match gpu_memory {
        Some(s) => parse_size(s).map_err(|m| CliError::input(format!("--gpu-memory {m}")))?,
        None => {
            // Opened first: the CUDA runtime is loaded, or the refusal names what is missing.
            mapf_ledger::train::open_device(device).map_err(|e| CliError::input(e.to_string()))?;
            match mapf_ledger::train::cuda_total_memory(index) {
                Some(m) => m,
                None if force => return Ok(()),
                None => {
                    return Err(CliError::input(format!(
                        "cannot read the memory of {device} for the memory check; pass --gpu-memory SIZE, or --force to skip the check"
                    )))
                }
            }
        }
    };
    let m: MemoryPlan = match plan_check::check(plan, device, Some(memory), None) {
        Ok(m) => m,
        Err(e) if force => {
            eprintln!("memory check skipped (--force): {e}");
            return Ok(());
        }
        Err(e) => {
            return Err(CliError::input(format!(
                "memory check: {e} (--force skips the check)"
            )))
        }
    };
    if m.fits == Some(false) {
        let text = plan_check::render(&m);
        if force {
            eprintln!("{text}--force: running anyway");
            return Ok(());
        }
        return Err(CliError::input(format!(
            "the plan cannot fit on {device}:\n{text}change the plan (see `ledger plan check`), or pass --force to run anyway"
        )));
    }
    Ok(())
}
