//! Where the stages a replay recomputes ran, read from the metadata of their
//! `StageStarted`, and what a replay does with it: it pins ATen to the recorded CPU
//! capability where this CPU can run it and sets the recorded kernel variables this
//! process leaves unset, recomputes on the recorded device unless told otherwise, and
//! notes a device, GPU, capability, kernel variable or processor that differs (hashes
//! may then differ with no fault in the record).
use crate::ledger::{Ledger, LedgerError};
use crate::plan::PlanError;
use crate::record::meta::describe_kernel_env;
use crate::stage::{Pipeline, StageError};
use crate::train::{kernels, DeviceSpec};
use std::collections::BTreeMap;

/// What `ledger replay` was asked that does not go together.
#[derive(Debug, thiserror::Error)]
pub enum AskedError {
    #[error("`--keep` needs `--engineer`")]
    KeepWithoutEngineer,
    #[error(
        "`--verify` and `--engineer` exclude each other (a counterfactual is not a verification)"
    )]
    VerifyAndEngineer,
    #[error("`--stage 0`: the warm-up has no engineer; a counterfactual needs N >= 1")]
    WarmupCounterfactual,
    #[error("`--engineer` needs `--stage N`")]
    NoStage,
}

/// Check a replay's request before any work: a kept fork (`keep`) needs another
/// engineer, and a counterfactual (`engineer`) is not a verification (`verify`).
pub fn check_asked(keep: bool, engineer: bool, verify: bool) -> Result<(), AskedError> {
    if keep && !engineer {
        Err(AskedError::KeepWithoutEngineer)
    } else if engineer && verify {
        Err(AskedError::VerifyAndEngineer)
    } else {
        Ok(())
    }
}

/// The stage a counterfactual re-runs: `--stage N`, N >= 1 (the warm-up has no engineer).
pub fn counterfactual_stage(stage: Option<u32>) -> Result<u32, AskedError> {
    match stage {
        Some(n) if n >= 1 => Ok(n),
        Some(_) => Err(AskedError::WarmupCounterfactual),
        None => Err(AskedError::NoStage),
    }
}

/// Why a replay's pipeline could not be set up ([`pipeline`]).
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// The device the replayed stages recorded does not read.
    #[error("recorded device {0}")]
    RecordedDevice(#[source] PlanError),
    /// The ledger's plan (for its device) does not read. Its text only, as `replay` has
    /// always said it: an input error (exit 2).
    #[error("{0}")]
    Plan(Box<StageError>),
    /// The pipeline did not open on the device; `recorded`: the device taken from the
    /// record, when no `--device` was given. Its text only, an input error.
    #[error("{error}{}", recorded.map(|d| format!(" (the stages to replay were recorded on {d}: replay them where they ran, or give --device to recompute them here, where hashes may differ)")).unwrap_or_default())]
    Pipeline {
        error: Box<StageError>,
        recorded: Option<DeviceSpec>,
    },
}

/// The pipeline a replay of `stage` (None: every completed stage) recomputes in, on
/// `given` (`--device`); without it a verification (not `counterfactual`) recomputes
/// where the stages ran ([`recorded_device`]), and otherwise on the plan's device.
pub fn pipeline<'a>(
    ledger: &'a mut Ledger,
    given: Option<DeviceSpec>,
    counterfactual: bool,
    recorded: &[RecordedSetup],
    stage: Option<u32>,
) -> Result<Pipeline<'a>, SetupError> {
    // A verification recomputes where the stages ran: bf16 on a GPU and f32 on the CPU
    // round differently, so a CUDA run replayed on the plan's CPU would "mismatch".
    let chosen = match (given, counterfactual) {
        (Some(d), _) => Some(d),
        (None, false) => recorded_device(recorded).map_err(SetupError::RecordedDevice)?,
        (None, true) => None,
    };
    let device = match chosen {
        Some(d) => d,
        None => {
            crate::stage::ledger_plan(ledger)
                .map_err(|e| SetupError::Plan(Box::new(e)))?
                .train
                .device
        }
    };
    // Replaying the warm-up recomputes the evaluation suites it recorded. A later stage
    // reads them back as recorded input, as the run that recorded it did (and like its
    // starting checkpoint): their blobs are content-addressed and `verify` rehashes
    // them. Solving them again cost a 12 s demo stage 6 s of its replay.
    let replays_warmup = stage.is_none_or(|n| n == 0);
    let pipeline = if !counterfactual && replays_warmup {
        Pipeline::regenerating_suites(ledger, device)
    } else {
        Pipeline::new(ledger, device)
    };
    pipeline.map_err(|error| SetupError::Pipeline {
        error: Box::new(error),
        recorded: chosen.filter(|_| given.is_none()),
    })
}

/// Where a stage to replay ran, from the metadata of its `StageStarted`.
pub struct RecordedSetup {
    stage: u32,
    /// The ATen CPU capability (absent in stages recorded before it was).
    capability: Option<String>,
    /// `cpu`, `cuda`, `cuda:N`, as recorded.
    device: Option<String>,
    /// The processor (absent in stages recorded before it was).
    cpu: Option<String>,
    /// The GPU's model (CUDA stages recorded since it was).
    gpu: Option<String>,
    /// The kernel variables set ([`kernels::KERNEL_ENV`]; empty in stages recorded
    /// before they were).
    env: BTreeMap<String, String>,
}

/// The recorded setup of each stage of `branch` to replay (`stage`, else every one).
pub fn recorded_setups(
    ledger: &Ledger,
    branch: &str,
    stage: Option<u32>,
) -> Result<Vec<RecordedSetup>, LedgerError> {
    // The projection knows each stage's StageStarted; only those metadata are read.
    let state = ledger.state_at(&ledger.head(branch)?)?;
    let mut out = Vec::new();
    for s in state
        .stages
        .iter()
        .filter(|s| stage.is_none_or(|n| n == s.stage))
    {
        if let Some(started) = s.started {
            let (_, m) = ledger.event_with_meta(&started)?;
            out.push(RecordedSetup {
                stage: s.stage,
                capability: m.versions.get(kernels::CAPABILITY_KEY).cloned(),
                cpu: m.versions.get(kernels::CPU_KEY).cloned(),
                gpu: m.versions.get(kernels::GPU_KEY).cloned(),
                env: m.kernel_env(),
                device: m.device,
            });
        }
    }
    Ok(out)
}

/// The value every item shares; None when there are none or they differ.
fn common<T: PartialEq>(mut items: impl Iterator<Item = T>) -> Option<T> {
    let first = items.next()?;
    items.all(|x| x == first).then_some(first)
}

/// The device every replayed stage recorded (None: none recorded one, or they differ):
/// where a verification recomputes, since bf16 on a GPU and f32 on the CPU round
/// differently and a CUDA run replayed on the plan's CPU would "mismatch".
pub fn recorded_device(recorded: &[RecordedSetup]) -> Result<Option<DeviceSpec>, PlanError> {
    common(recorded.iter().map(|r| r.device.as_ref()))
        .flatten()
        .map(|d| d.parse::<DeviceSpec>())
        .transpose()
}

/// Run the recorded kernels where this machine can, before libtorch runs anything:
/// pin ATen to the recorded CPU capability (when every replayed stage recorded the same
/// one, this CPU can run it, and `ATEN_CPU_CAPABILITY` is not set already), and set each
/// kernel variable every replayed stage recorded ([`kernels::KERNEL_ENV`]) that this
/// process leaves unset. Kernels of another capability or setting may round
/// differently, which would fail a bit-exact replay for no fault of the record. A
/// capability this CPU lacks (AVX512 recorded, an AVX2-only replay machine) is left to
/// ATen's own choice, a variable set here keeps its value, and the stage's note names
/// both sides.
pub fn pin_kernels(recorded: &[RecordedSetup]) {
    // ATen, MKL and the CUDA libraries read these once, when they first run a kernel;
    // nothing has run yet in this process (the ledger is opened, no tensor made).
    if let Some(env) = common(recorded.iter().map(|r| &r.env)) {
        for (name, value) in env {
            if std::env::var_os(name).is_none() {
                std::env::set_var(name, value);
            }
        }
    }
    let Some(Some(capability)) = common(recorded.iter().map(|r| r.capability.as_ref())) else {
        return;
    };
    if std::env::var_os(kernels::CAPABILITY_ENV).is_some() || !kernels::cpu_supports(capability) {
        return;
    }
    std::env::set_var(kernels::CAPABILITY_ENV, capability.to_ascii_lowercase());
}

/// A note when stage `n` was recorded on another device than this replay runs on, on
/// another GPU, with another ATen CPU capability than this process runs (the CPU lacks
/// it, or `ATEN_CPU_CAPABILITY` says otherwise), with other kernel variables, or on
/// another processor (the first of these that differs): hashes may then differ with no
/// fault in the record.
pub fn setup_note(recorded: &[RecordedSetup], n: u32, device: &DeviceSpec) -> Option<String> {
    let gpu = device.cuda_index().and_then(crate::train::timing::gpu_name);
    let device = device.to_string();
    let r = recorded.iter().find(|r| r.stage == n)?;
    if let Some(was) = r.device.as_deref().filter(|was| *was != device) {
        return Some(format!(
            "stage {n} was recorded on {was} and this replay runs on {device}: other kernels and dtypes round differently, so hashes may differ without any fault in the record"
        ));
    }
    if let (Some(was), Some(here)) = (&r.gpu, &gpu) {
        if was != here {
            return Some(format!(
                "stage {n} was recorded on GPU {was} and this replay runs on {here}: each GPU model runs its own kernels, so hashes may differ without any fault in the record"
            ));
        }
    }
    let now = kernels::cpu_capability();
    if let Some(was) = r.capability.as_ref().filter(|was| **was != now) {
        return Some(format!(
            "stage {n} was recorded with ATen CPU capability {was}, this process runs {now}{}: kernels may round differently, so hashes may differ without any fault in the record",
            match std::env::var(kernels::CAPABILITY_ENV) {
                Ok(v) => format!(" ({}={v})", kernels::CAPABILITY_ENV),
                Err(_) => String::new(),
            }
        ));
    }
    let env = kernels::kernel_env();
    if r.env != env {
        return Some(format!(
            "stage {n} was recorded with {} and this process runs with {}: these variables choose the kernels or how they round, so hashes may differ without any fault in the record",
            describe_kernel_env(&r.env),
            describe_kernel_env(&env)
        ));
    }
    let was = r.cpu.as_ref()?;
    let here = kernels::cpu_model();
    (*was != here).then(|| {
        format!(
            "stage {n} was recorded on processor {was}, this replay runs on {here}: libtorch's BLAS picks its kernels per processor, so hashes may differ without any fault in the record"
        )
    })
}
