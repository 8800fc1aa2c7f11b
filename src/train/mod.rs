//! The libtorch trainer: policies (`grid`, `lm`), the supervised warm-up that makes
//! the base model, GRPO, evaluation and failure breakdowns, and bit-exact checkpoints;
//! [`timing`] measures where the time of a stage (or of one GRPO step) goes.
//!
//! Determinism: torch runs with a fixed intra-op thread count (set once per process from
//! the plan and recorded in event metadata), sampling draws from the seed tree, and
//! every reduction the trainer does itself runs in a fixed order.
pub mod adam;
pub mod batches;
pub mod bench;
pub mod checkpoint;
pub mod compute;
pub mod eval;
pub mod export;
pub mod grid;
pub mod grpo;
pub mod kernels;
pub mod lm;
pub mod memory;
pub mod policy;
pub mod scorecard;
pub mod timing;
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
    #[error("device {0:?} is not available: {1}")]
    Device(String, #[source] CudaError),
    #[error(transparent)]
    Checkpoint(#[from] checkpoint::CheckpointError),
    #[error("checkpoint architecture: {0}")]
    Arch(String),
}

pub use crate::plan::trainer::DeviceSpec;

/// Where the README says how to provide CUDA (named in every refusal).
const CUDA_HELP: &str = "see README.md, \"Using a GPU\"";

/// One binary serves CPU and GPU: a build linked against the CPU libtorch can load the
/// CUDA half of a libtorch of the *same version* at run time. `libtorch_cuda.so`
/// registers its CUDA backend with the already loaded `libtorch_cpu.so` when it is
/// opened with global symbol visibility. The PyPI `torch==2.11.0` wheel is the very
/// build whose CPU half `tools/libtorch.sh` assembles, so its `torch/lib` works:
/// `LIBTORCH_CUDA_LIB=$(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__) + "/lib")')`.
fn load_cuda_runtime() -> Result<(), CudaError> {
    let path = match std::env::var_os("LIBTORCH_CUDA_LIB") {
        Some(dir) => std::path::Path::new(&dir).join("libtorch_cuda.so"),
        None => std::path::PathBuf::from("libtorch_cuda.so"), // the loader's search path
    };
    dlopen_global(&path.to_string_lossy()).map_err(|load| CudaError::NoRuntime {
        path,
        load: Box::new(load),
    })
}

/// Keep the memory torch frees in this process's heap instead of handing it back to
/// the kernel; for CPU training, called once before a run's first step.
///
/// Why: a training step's activations are tens of MB per tensor, and glibc serves
/// blocks that large with a fresh `mmap` and unmaps them on `free`, so every step
/// page-faults its activations in again and the kernel zeroes every page (perf on the
/// base planner's GRPO step: about 10% of its time in `clear_page` and page faults).
/// With `mmap` and heap trimming off, freed blocks are reused. The cost: the heap stays
/// at its peak size, which is why a GPU run (whose host memory peaks while loading a
/// checkpoint) does not call it. Results do not change: addresses reach no hash.
pub fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets allocator parameters; glibc takes its own lock.
    unsafe {
        libc::mallopt(libc::M_MMAP_MAX, 0);
        libc::mallopt(libc::M_TRIM_THRESHOLD, i32::MAX);
    }
}

/// Whether `libtorch_cuda.so` is already in this process (linked in, or loaded before),
/// asked without loading it (`RTLD_NOLOAD`) and without asking libtorch.
fn cuda_runtime_loaded() -> bool {
    let name = c"libtorch_cuda.so";
    // SAFETY: dlopen with a valid C string and RTLD_NOLOAD loads nothing; the extra
    // reference it takes on an already loaded library is never released, which only
    // keeps loaded what must stay loaded anyway.
    !unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) }.is_null()
}

/// `dlopen(name, RTLD_NOW | RTLD_GLOBAL)`; the handle is never closed. Err: dlerror().
fn dlopen_global(name: &str) -> Result<(), CudaError> {
    let c = std::ffi::CString::new(name.as_bytes()).map_err(|e| CudaError::Load(e.to_string()))?;
    // SAFETY: dlopen with a valid C string; the handle is deliberately never closed
    // (the CUDA backend must stay registered for the life of the process).
    let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
    if handle.is_null() {
        // SAFETY: dlerror returns a thread-local C string or null.
        let err = unsafe { libc::dlerror() };
        return Err(CudaError::Load(if err.is_null() {
            "unknown error".to_string()
        } else {
            unsafe { std::ffi::CStr::from_ptr(err) }
                .to_string_lossy()
                .into_owned()
        }));
    }
    Ok(())
}

/// Why a `cuda:N` request cannot be met: the first missing piece, each refusal naming
/// the README section that says how to provide it. A separate type from [`TrainError`]
/// (which wraps it as `Device`'s source) because [`CudaFacts`] holds these as data, so
/// they are `Clone` and comparable. The loader's own message (`dlerror`) is a string:
/// it is all the C loader gives, and the refusals quote it mid-sentence.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CudaError {
    /// `dlopen` failed: the loader's message.
    #[error("{0}")]
    Load(String),
    #[error("libtorch_cuda is missing: this libtorch has no CUDA and {} could not be loaded ({load}); set LIBTORCH_CUDA_LIB to the lib directory of a CUDA libtorch 2.11.0 (e.g. pip's torch/lib), or build with LIBTORCH_USE_PYTORCH=1; {help}", path.display(), help = CUDA_HELP)]
    NoRuntime {
        path: std::path::PathBuf,
        load: Box<CudaError>,
    },
    #[error("no NVIDIA driver: libtorch_cuda loaded but libcuda.so.1 could not ({load}); install the NVIDIA driver; {help}", help = CUDA_HELP)]
    NoDriver { load: Box<CudaError> },
    #[error("no CUDA device: the driver is there but libtorch sees no GPU (CUDA_VISIBLE_DEVICES={visible}); {help}", help = CUDA_HELP)]
    NoDevice {
        /// `CUDA_VISIBLE_DEVICES`, or `unset`.
        visible: String,
    },
    #[error("no device cuda:{index}: this machine has {count} CUDA device{} (cuda:0{}); {help}",
        if *.count == 1 { "" } else { "s" },
        if *.count > 1 { format!("..cuda:{}", .count - 1) } else { String::new() },
        help = CUDA_HELP)]
    NoSuchDevice { index: usize, count: usize },
}

/// What a CUDA request found on this machine, in the order it is checked.
#[derive(Clone, Debug, PartialEq)]
pub struct CudaFacts {
    /// Err: why libtorch_cuda could not be loaded.
    pub runtime: Result<(), CudaError>,
    /// Err: why the NVIDIA driver library (libcuda.so.1) could not be loaded.
    pub driver: Result<(), CudaError>,
    /// CUDA devices libtorch sees.
    pub devices: usize,
}

/// Decide a `cuda:N` request from what the machine has: the first missing piece
/// (libtorch_cuda, the driver, a device, device N) is named, with the README section
/// that says how to provide it.
pub fn check_cuda(index: usize, facts: &CudaFacts) -> Result<(), CudaError> {
    facts.runtime.clone()?;
    if let Err(e) = &facts.driver {
        return Err(CudaError::NoDriver {
            load: Box::new(e.clone()),
        });
    }
    match facts.devices {
        0 => Err(CudaError::NoDevice {
            visible: std::env::var("CUDA_VISIBLE_DEVICES").unwrap_or_else(|_| "unset".into()),
        }),
        count if index >= count => Err(CudaError::NoSuchDevice { index, count }),
        _ => Ok(()),
    }
}

/// The torch device of a [`DeviceSpec`] (parsed at the edge), checking that CUDA and
/// device N are there (exit 2 from the CLI, naming what is missing).
pub fn open_device(spec: DeviceSpec) -> Result<Device, TrainError> {
    let s = spec.to_string();
    match spec.cuda_index() {
        None => Ok(Device::Cpu),
        Some(idx) => {
            // libtorch resolves its CUDA hooks once per process, on the first question
            // about CUDA, and keeps the answer: asked before libtorch_cuda is loaded, it
            // says "no GPU" for good (seen on an H200: device_count 0 after the load).
            // So the runtime is loaded first, unless it already is (a binary linked
            // against a CUDA libtorch), and libtorch is asked only after that.
            let runtime = if cuda_runtime_loaded() {
                Ok(())
            } else {
                load_cuda_runtime()
            };
            let driver = match &runtime {
                Ok(()) if !tch::Cuda::is_available() => dlopen_global("libcuda.so.1"),
                _ => Ok(()),
            };
            let facts = CudaFacts {
                devices: if runtime.is_ok() {
                    tch::Cuda::device_count().max(0) as usize
                } else {
                    0
                },
                runtime,
                driver,
            };
            check_cuda(idx, &facts).map_err(|e| TrainError::Device(s.clone(), e))?;
            Ok(Device::Cuda(idx))
        }
    }
}

/// Total memory of CUDA device `index` in bytes, from the CUDA runtime libtorch_cuda
/// loaded (`cudaMemGetInfo`); None when it cannot be asked.
pub fn cuda_total_memory(index: usize) -> Option<u64> {
    type SetDevice = unsafe extern "C" fn(i32) -> i32;
    type MemGetInfo = unsafe extern "C" fn(*mut usize, *mut usize) -> i32;
    let sym = |name: &str| {
        let c = std::ffi::CString::new(name).ok()?;
        // SAFETY: dlsym over every loaded library with a valid C string.
        let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c.as_ptr()) };
        (!p.is_null()).then_some(p)
    };
    let set = sym("cudaSetDevice")?;
    let info = sym("cudaMemGetInfo")?;
    // SAFETY: the CUDA runtime's documented signatures; both only write the outputs.
    unsafe {
        let set: SetDevice = std::mem::transmute(set);
        let info: MemGetInfo = std::mem::transmute(info);
        if set(index as i32) != 0 {
            return None;
        }
        let (mut free, mut total) = (0usize, 0usize);
        (info(&mut free, &mut total) == 0).then_some(total as u64)
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
    /// `compute`: a device (its default dtype) or a device and dtype (`lm` policies).
    pub fn load(
        bytes: &[u8],
        compute: impl Into<compute::Compute>,
        blobs: lm::BlobSource<'_>,
    ) -> Result<TrainState, TrainError> {
        let compute = compute.into();
        let device = compute.device;
        let (h, _) = checkpoint::header(bytes)?;
        let mut policy: Box<dyn Policy> = match h.policy.as_str() {
            "grid" => {
                let shape: grid::GridShape =
                    crate::record::codec::decode(&h.arch, "grid architecture")
                        .map_err(|e| TrainError::Arch(e.to_string()))?;
                Box::new(grid::GridPolicy::new(
                    device,
                    shape,
                    crate::seed::Seed::root(0),
                ))
            }
            "lm" => {
                let arch: lm::LmArch = crate::record::codec::decode(&h.arch, "lm architecture")
                    .map_err(|e| TrainError::Arch(e.to_string()))?;
                Box::new(lm::LmPolicy::from_arch(arch, compute, blobs)?)
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
    pub fn referenced_blobs(bytes: &[u8]) -> Vec<crate::record::Hash> {
        crate::record::checkpoint::referenced_blobs(bytes)
    }

    /// Point the optimiser at a new learning rate (stages may differ from the warm-up).
    pub fn set_lr(&mut self, lr: f64) {
        self.adam.config.lr = lr;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuda_refusals_name_the_first_missing_piece_and_the_readme() {
        let ok = CudaFacts {
            runtime: Ok(()),
            driver: Ok(()),
            devices: 2,
        };
        assert_eq!(check_cuda(1, &ok), Ok(()));
        let e = check_cuda(2, &ok).unwrap_err().to_string();
        assert!(
            e.contains("no device cuda:2") && e.contains("2 CUDA devices (cuda:0..cuda:1)"),
            "{e}"
        );
        let none = CudaFacts {
            devices: 0,
            ..ok.clone()
        };
        assert!(check_cuda(0, &none)
            .unwrap_err()
            .to_string()
            .contains("no CUDA device"));
        let no_driver = CudaFacts {
            driver: Err(CudaError::Load(
                "libcuda.so.1: cannot open shared object file".into(),
            )),
            devices: 0,
            ..ok.clone()
        };
        let e = check_cuda(0, &no_driver).unwrap_err().to_string();
        assert!(
            e.contains("no NVIDIA driver") && e.contains("libcuda.so.1"),
            "{e}"
        );
        let no_runtime = CudaFacts {
            runtime: Err(CudaError::NoRuntime {
                path: "libtorch_cuda.so".into(),
                load: Box::new(CudaError::Load("not found".into())),
            }),
            ..no_driver
        };
        assert!(check_cuda(0, &no_runtime)
            .unwrap_err()
            .to_string()
            .contains("libtorch_cuda is missing"));
        for facts in [&ok, &none] {
            if let Err(e) = check_cuda(5, facts) {
                let e = e.to_string();
                assert!(e.contains("README.md"), "{e}");
            }
        }
    }
}
