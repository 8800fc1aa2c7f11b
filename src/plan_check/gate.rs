//! The memory check `ledger run` makes before a CUDA run of an `lm` plan: the plan's
//! memory plan against the GPU's memory (the size given, else the device's own total);
//! a plan that cannot fit is refused unless the run is forced, and then it goes ahead
//! with a warning.
use crate::plan::LedgerPlan;
use crate::train::memory::parse_size;
use crate::train::DeviceSpec;

/// Why a run is refused before it starts.
#[derive(Debug, thiserror::Error)]
pub enum GateError {
    #[error("--gpu-memory {0}")]
    Size(crate::plan::size::SizeError),
    #[error("{0}")]
    Device(crate::train::TrainError),
    #[error("cannot read the memory of {0} for the memory check; pass --gpu-memory SIZE, or --force to skip the check")]
    UnknownMemory(DeviceSpec),
    #[error("memory check: {0} (--force skips the check)")]
    Check(super::CheckError),
    #[error("the plan cannot fit on {device}:\n{plan}change the plan (see `ledger plan check`), or pass --force to run anyway")]
    DoesNotFit { device: DeviceSpec, plan: String },
}

/// Check `plan`'s run on `device` against `gpu_memory` (None: the device's own total;
/// the device is opened first, so the CUDA runtime is loaded, or the refusal names what
/// is missing). `force` turns every refusal but a bad size into the warning returned.
pub fn check_before_run(
    plan: &LedgerPlan,
    device: DeviceSpec,
    gpu_memory: Option<&str>,
    force: bool,
) -> Result<Option<String>, GateError> {
    let Some(index) = device.cuda_index() else {
        return Ok(None);
    };
    if plan.policy != crate::plan::PolicyKind::Lm {
        return Ok(None);
    }
    let memory = match gpu_memory {
        Some(s) => parse_size(s).map_err(GateError::Size)?,
        None => {
            crate::train::open_device(device).map_err(GateError::Device)?;
            match crate::train::cuda_total_memory(index) {
                Some(m) => m,
                None if force => return Ok(None),
                None => return Err(GateError::UnknownMemory(device)),
            }
        }
    };
    let m = match super::check(plan, device, Some(memory), None) {
        Ok(m) => m,
        Err(e) if force => return Ok(Some(format!("memory check skipped (--force): {e}"))),
        Err(e) => return Err(GateError::Check(e)),
    };
    if m.fits == Some(false) {
        let plan = super::render(&m);
        if force {
            return Ok(Some(format!("{plan}--force: running anyway")));
        }
        return Err(GateError::DoesNotFit { device, plan });
    }
    Ok(None)
}
