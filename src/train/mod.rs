//! The libtorch trainer: policies (`grid`, `lm`), the supervised warm-up that makes
//! the base model, GRPO, evaluation and failure breakdowns, and bit-exact checkpoints.
//!
//! Determinism: torch runs with a fixed intra-op thread count (set once per process from
//! the plan and recorded in event metadata), sampling draws from the seed tree, and
//! every reduction the trainer does itself runs in a fixed order.
pub mod adam;
pub mod checkpoint;
pub mod eval;
pub mod grid;
pub mod grpo;
pub mod kernels;
pub mod lm;
pub mod policy;
pub mod records;
pub mod warmup;

use adam::{Adam, AdamConfig};
use policy::Policy;
use tch::Device;

/// Torch's global generator, seeded for one weight initialisation. The guard keeps other
/// threads (parallel tests, a library user's threads) from drawing from the generator
/// between the seeding and the last initialiser, which would make weights depend on
/// scheduling. Hold it for the whole construction of a policy.
pub fn seeded_torch_rng(seed: crate::seed::Seed) -> std::sync::MutexGuard<'static, ()> {
    static TORCH_RNG: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let guard = TORCH_RNG.lock().unwrap_or_else(|e| e.into_inner());
    tch::manual_seed(seed.as_u64() as i64 & i64::MAX);
    guard
}

/// A policy with its optimiser and step counter: what a checkpoint captures.
pub struct TrainState {
    pub policy: Box<dyn Policy>,
    pub adam: Adam,
    /// Optimiser updates taken in total (warm-up and every stage).
    pub global_step: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    #[error("unknown policy kind {0:?} (expected grid or lm{hint})", hint = if .0 == "text" { "; the `text` policy was replaced by `lm`: recreate the ledger from an lm plan" } else { "" })]
    PolicyKind(String),
    #[error(transparent)]
    Lm(#[from] lm::LmError),
    #[error("device {0:?} is not available ({1})")]
    Device(String, String),
    #[error(transparent)]
    Checkpoint(#[from] checkpoint::CheckpointError),
    #[error("checkpoint architecture: {0}")]
    Arch(String),
}

/// Check a device name's syntax: `cpu`, `cuda` or `cuda:N` (None for cpu).
pub fn parse_device_name(s: &str) -> Result<Option<usize>, String> {
    match s {
        "cpu" => Ok(None),
        _ => match s.strip_prefix("cuda") {
            Some("") => Ok(Some(0)),
            Some(rest) => rest
                .strip_prefix(':')
                .and_then(|n| n.parse().ok())
                .map(Some)
                .ok_or_else(|| format!("{s:?}: expected cpu, cuda or cuda:N")),
            None => Err(format!("{s:?}: expected cpu, cuda or cuda:N")),
        },
    }
}

/// One binary serves CPU and GPU: a build linked against the CPU libtorch can load the
/// CUDA half of a libtorch of the *same version* at run time. `libtorch_cuda.so`
/// registers its CUDA backend with the already loaded `libtorch_cpu.so` when it is
/// opened with global symbol visibility. The PyPI `torch==2.11.0` wheel is the very
/// build whose CPU half `tools/libtorch.sh` assembles, so its `torch/lib` works:
/// `LIBTORCH_CUDA_LIB=$(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__) + "/lib")')`.
fn load_cuda_runtime() -> Result<(), String> {
    let path = match std::env::var_os("LIBTORCH_CUDA_LIB") {
        Some(dir) => std::path::Path::new(&dir).join("libtorch_cuda.so"),
        None => std::path::PathBuf::from("libtorch_cuda.so"), // the loader's search path
    };
    let c = std::ffi::CString::new(path.to_string_lossy().as_bytes()).map_err(|e| e.to_string())?;
    // SAFETY: dlopen with a valid C string; the handle is deliberately never closed
    // (the CUDA backend must stay registered for the life of the process).
    let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
    if handle.is_null() {
        // SAFETY: dlerror returns a thread-local C string or null.
        let err = unsafe { libc::dlerror() };
        let msg = if err.is_null() {
            "unknown error".to_string()
        } else {
            unsafe { std::ffi::CStr::from_ptr(err) }
                .to_string_lossy()
                .into_owned()
        };
        return Err(format!(
            "this libtorch has no CUDA and {} could not be loaded ({msg}); set LIBTORCH_CUDA_LIB to the lib directory of a CUDA libtorch 2.11.0 (e.g. pip's torch/lib), or build with LIBTORCH_USE_PYTORCH=1",
            path.display()
        ));
    }
    Ok(())
}

/// Parse `--device`: `cpu`, `cuda` or `cuda:N`, checking that CUDA is there.
pub fn parse_device(s: &str) -> Result<Device, TrainError> {
    match parse_device_name(s).map_err(|m| TrainError::Device(s.into(), m))? {
        None => Ok(Device::Cpu),
        Some(idx) => {
            if !tch::Cuda::is_available() {
                load_cuda_runtime().map_err(|m| TrainError::Device(s.into(), m))?;
            }
            if !tch::Cuda::is_available() {
                return Err(TrainError::Device(
                    s.into(),
                    "this libtorch has no CUDA; build with LIBTORCH_USE_PYTORCH=1 against a CUDA PyTorch 2.11".into(),
                ));
            }
            Ok(Device::Cuda(idx))
        }
    }
}

/// A fresh policy of `kind` with default architecture, initialised from `seed` (the
/// `grid` policy; an `lm` policy is made by [`lm::init`] from the plan's `[lm]`).
pub fn new_policy(
    kind: &str,
    device: Device,
    seed: crate::seed::Seed,
) -> Result<Box<dyn Policy>, TrainError> {
    match kind {
        "grid" => Ok(Box::new(grid::GridPolicy::new(
            device,
            grid::GridShape::default(),
            seed,
        ))),
        other => Err(TrainError::PolicyKind(other.into())),
    }
}

impl TrainState {
    pub fn new(policy: Box<dyn Policy>, adam: AdamConfig) -> TrainState {
        let adam = Adam::new(policy.vars(), adam);
        TrainState {
            policy,
            adam,
            global_step: 0,
        }
    }

    /// Serialise for a checkpoint blob (the blobs it references: [`Policy::side_blobs`]).
    pub fn save(&self, stage: u32) -> Vec<u8> {
        checkpoint::save(
            self.policy.vars(),
            &self.adam,
            self.policy.kind(),
            self.policy.arch(),
            self.global_step,
            stage,
        )
    }

    /// Rebuild a training state from checkpoint bytes; `blobs` fetches what the
    /// checkpoint references (an `lm` tokenizer, a frozen base checkpoint).
    pub fn load(
        bytes: &[u8],
        device: Device,
        blobs: lm::BlobSource<'_>,
    ) -> Result<TrainState, TrainError> {
        let (h, _) = checkpoint::header(bytes)?;
        let mut policy: Box<dyn Policy> = match h.policy.as_str() {
            "grid" => {
                let shape: grid::GridShape =
                    crate::ledger::codec::decode(&h.arch, "grid architecture")
                        .map_err(|e| TrainError::Arch(e.to_string()))?;
                Box::new(grid::GridPolicy::new(
                    device,
                    shape,
                    crate::seed::Seed::root(0),
                ))
            }
            "lm" => {
                let arch: lm::LmArch = crate::ledger::codec::decode(&h.arch, "lm architecture")
                    .map_err(|e| TrainError::Arch(e.to_string()))?;
                Box::new(lm::LmPolicy::from_arch(arch, device, blobs)?)
            }
            other => return Err(TrainError::PolicyKind(other.into())),
        };
        let (h, adam) = checkpoint::load(bytes, policy.vars_mut())?;
        Ok(TrainState {
            policy,
            adam,
            global_step: h.global_step,
        })
    }

    /// The blobs a checkpoint's bytes reference besides itself (an `lm` tokenizer, a
    /// frozen base checkpoint); empty for other bytes. Bundles follow these, since no
    /// event names them.
    pub fn referenced_blobs(bytes: &[u8]) -> Vec<crate::ledger::Hash> {
        let Ok((h, _)) = checkpoint::header(bytes) else {
            return Vec::new();
        };
        if h.policy != "lm" {
            return Vec::new();
        }
        match crate::ledger::codec::decode::<lm::LmArch>(&h.arch, "lm architecture") {
            Ok(arch) => {
                let mut v = vec![arch.tokenizer];
                if let Some(lm::Frozen::Checkpoint(f)) = arch.frozen {
                    v.push(f);
                }
                v
            }
            Err(_) => Vec::new(),
        }
    }

    /// Point the optimiser at a new learning rate (stages may differ from the warm-up).
    pub fn set_lr(&mut self, lr: f64) {
        self.adam.config.lr = lr;
    }
}
