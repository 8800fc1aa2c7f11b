//! What decides which kernels libtorch runs, recorded in event metadata so a replay on
//! another machine can explain (or avoid) a mismatch: the libtorch build, and on the
//! CPU the ATen CPU capability (the vectorised kernel set ATen dispatches to: DEFAULT,
//! AVX2, AVX512, ... chosen from the CPU's features or pinned by `ATEN_CPU_CAPABILITY`).
//! Different capabilities may round differently, so bit-exact replay needs the same one.
//! The processor is recorded too: libtorch's BLAS (MKL, linked into libtorch_cpu) picks
//! its code path per processor, so two machines with the same capability can still train
//! to different bits (study v3's stage 1 did, on two AVX-512 machines). On CUDA the
//! GPU's model is recorded, and everywhere the environment variables that choose or
//! round kernels ([`KERNEL_ENV`]: cuDNN's attention order, cuBLAS's workspace, TF32,
//! TunableOp, MKL's code path) where they are set: none of them is in the plan, and
//! each can move a run's bits.
use crate::record::meta::KERNEL_ENV_PREFIX;
use std::collections::BTreeMap;

/// The libtorch version `tch` is built against (tools/libtorch.sh provisions it).
pub const LIBTORCH: &str = "2.11.0";

/// Metadata key of the ATen CPU capability.
pub const CAPABILITY_KEY: &str = "aten_cpu_capability";

/// The environment variable ATen reads to pin its CPU capability.
pub const CAPABILITY_ENV: &str = "ATEN_CPU_CAPABILITY";

/// The ATen CPU capability this process uses, as ATen names it ("AVX2", "DEFAULT").
/// Computed by ATen once, at its first use, from the CPU and `ATEN_CPU_CAPABILITY`.
pub fn cpu_capability() -> String {
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    {
        // `at::get_cpu_capability()` returns a std::string (libstdc++, new ABI). On
        // x86-64 SysV a class return value is written through a hidden pointer passed
        // first; capability names fit the string's inline buffer (<= 15 bytes), so the
        // data pointer points into `ret` and there is nothing to free.
        #[repr(C)]
        struct StdString {
            ptr: *const u8,
            len: usize,
            buf: [u8; 16],
        }
        extern "C" {
            #[link_name = "_ZN2at18get_cpu_capabilityB5cxx11Ev"]
            fn at_get_cpu_capability(ret: *mut StdString);
        }
        let mut s = std::mem::MaybeUninit::<StdString>::uninit();
        // SAFETY: the symbol is exported by libtorch_cpu (linked through tch) with the
        // signature above under the x86-64 Itanium C++ ABI; it only writes `s`.
        let s = unsafe {
            at_get_cpu_capability(s.as_mut_ptr());
            s.assume_init()
        };
        if s.len <= 15 {
            return String::from_utf8_lossy(&s.buf[..s.len]).into_owned();
        }
        // Longer than any capability name: read it, leak the small allocation.
        // SAFETY: ptr/len describe the string's heap buffer, which is never freed.
        let bytes = unsafe { std::slice::from_raw_parts(s.ptr, s.len) };
        String::from_utf8_lossy(bytes).into_owned()
    }
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
    {
        std::env::var(CAPABILITY_ENV).unwrap_or_else(|_| "unknown".into())
    }
}

/// Whether this CPU can run ATen's kernels of `capability` (as ATen names it, any
/// case): the features ATen's dispatch asks of it before choosing that set. ATen obeys
/// `ATEN_CPU_CAPABILITY` without asking, so a capability pinned on a CPU that lacks it
/// dies of an illegal instruction at the first vectorised kernel. Names this does not
/// know are not runnable.
pub fn cpu_supports(capability: &str) -> bool {
    match capability.to_ascii_uppercase().as_str() {
        "DEFAULT" => true,
        #[cfg(target_arch = "x86_64")]
        "AVX2" => std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma"),
        #[cfg(target_arch = "x86_64")]
        "AVX512" => {
            std::is_x86_feature_detected!("avx512f")
                && std::is_x86_feature_detected!("avx512vl")
                && std::is_x86_feature_detected!("avx512bw")
                && std::is_x86_feature_detected!("avx512dq")
                && std::is_x86_feature_detected!("fma")
        }
        _ => false,
    }
}

/// Metadata key of the processor.
pub const CPU_KEY: &str = "cpu";

/// The processor as the OS names it: `model name`, `cpu family` and `model` of the
/// first processor in `/proc/cpuinfo` ("AMD EPYC (family 25, model 17)"); "unknown"
/// where that file is not there or says nothing of it.
pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| processor(&t))
        .unwrap_or_else(|| "unknown".into())
}

/// The first processor of a `/proc/cpuinfo` text.
fn processor(cpuinfo: &str) -> Option<String> {
    let first = cpuinfo.split("\n\n").next()?;
    let field = |key: &str| {
        first.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == key).then(|| v.trim().to_string())
        })
    };
    let name = field("model name")?;
    Some(match (field("cpu family"), field("model")) {
        (Some(f), Some(m)) => format!("{name} (family {f}, model {m})"),
        _ => name,
    })
}

/// Metadata key of the GPU's model, as the driver names it (CUDA devices only).
pub const GPU_KEY: &str = "gpu";

/// The environment variables that choose which kernels libtorch and the libraries under
/// it run, or how those round, read from the process's environment and not from the
/// plan. `ATEN_CPU_CAPABILITY` is recorded as the capability it pins ([`CAPABILITY_KEY`]).
/// Thread counts are not here: torch runs with the plan's.
pub const KERNEL_ENV: &[&str] = &[
    // cuBLAS: workspace sizes pick among algorithms, TF32 rounds matmuls' inputs.
    "CUBLASLT_WORKSPACE_SIZE",
    "CUBLAS_WORKSPACE_CONFIG",
    // MKL (linked into libtorch_cpu): its code path per processor, or a pinned one.
    "MKL_CBWR",
    "MKL_DEBUG_CPU_TYPE",
    "MKL_ENABLE_INSTRUCTIONS",
    "NVIDIA_TF32_OVERRIDE",
    // oneDNN's instruction set.
    "ONEDNN_MAX_CPU_ISA",
    // TunableOp chooses GEMM kernels by timing them, or from a file of earlier choices.
    "PYTORCH_TUNABLEOP_ENABLED",
    "PYTORCH_TUNABLEOP_FILENAME",
    "PYTORCH_TUNABLEOP_TUNING",
    "TORCH_CUBLASLT_UNIFIED_WORKSPACE",
    // cuDNN's attention: moved last among torch's kernels, or its graph cache kept.
    "TORCH_CUDNN_SDPA_AVOID_RECOMPILE",
    "TORCH_CUDNN_SDPA_DEPRIORITIZED",
    "TORCH_CUDNN_USE_HEURISTIC_MODE_B",
];

/// The [`KERNEL_ENV`] variables set in this process, by name (recorded under
/// [`KERNEL_ENV_PREFIX`]).
pub fn kernel_env() -> BTreeMap<String, String> {
    KERNEL_ENV
        .iter()
        .filter_map(|name| {
            let value = std::env::var_os(name)?;
            Some((name.to_string(), value.to_string_lossy().into_owned()))
        })
        .collect()
}

/// The metadata entries that say which kernels ran on `device`: the libtorch build,
/// the ATen CPU capability (CPU kernels also run for a CUDA device's host side), the
/// processor, the GPU's model on CUDA, and the kernel variables set ([`KERNEL_ENV`]).
pub fn facts(device: tch::Device) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    m.insert("libtorch".into(), LIBTORCH.into());
    m.insert(CAPABILITY_KEY.into(), cpu_capability());
    m.insert(CPU_KEY.into(), cpu_model());
    if let tch::Device::Cuda(i) = device {
        m.insert("cuda_device".into(), format!("cuda:{i}"));
        if let Some(gpu) = crate::train::timing::gpu_name(i) {
            m.insert(GPU_KEY.into(), gpu);
        }
    }
    for (name, value) in kernel_env() {
        m.insert(format!("{KERNEL_ENV_PREFIX}{name}"), value);
    }
    m
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_processor_is_read_from_the_first_cpuinfo_entry() {
        let info = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\nmodel name\t: AMD EPYC\n\nprocessor\t: 1\nmodel name\t: other\n";
        assert_eq!(
            super::processor(info).as_deref(),
            Some("AMD EPYC (family 25, model 17)")
        );
        assert_eq!(
            super::processor("processor\t: 0\nmodel name\t: ARM thing\n").as_deref(),
            Some("ARM thing")
        );
        assert_eq!(super::processor("processor\t: 0\n"), None);
    }

    /// The capability ATen runs with is one this CPU supports: the one it chose by
    /// itself, or the one `ATEN_CPU_CAPABILITY` pins (ATen obeys the pin without asking
    /// the CPU, which is why replay checks a recorded one first); and a name ATen does
    /// not have is never pinned.
    #[test]
    fn the_capability_aten_runs_with_is_one_this_cpu_supports() {
        let c = super::cpu_capability();
        #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
        assert_ne!(c, "unknown", "ATen's capability is read on x86-64 Linux");
        if c != "unknown" {
            if let Some(pinned) = std::env::var_os(super::CAPABILITY_ENV) {
                let pinned = pinned.to_string_lossy().to_ascii_uppercase();
                assert_eq!(c, pinned, "ATen runs with the pinned capability");
            }
            assert!(super::cpu_supports(&c), "{c}");
        }
        assert!(super::cpu_supports("default"));
        assert!(!super::cpu_supports("AVX1024"));
    }

    #[test]
    fn capability_is_a_name_aten_knows() {
        let c = super::cpu_capability();
        assert!(
            ["DEFAULT", "AVX2", "AVX512", "ZVECTOR", "VSX", "SVE256", "unknown"]
                .contains(&c.as_str()),
            "{c}"
        );
    }
}
