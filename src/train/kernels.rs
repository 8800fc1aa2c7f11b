//! What decides which kernels libtorch runs, recorded in event metadata so a replay on
//! another machine can explain (or avoid) a mismatch: the libtorch build, and on the
//! CPU the ATen CPU capability (the vectorised kernel set ATen dispatches to: DEFAULT,
//! AVX2, AVX512, ... chosen from the CPU's features or pinned by `ATEN_CPU_CAPABILITY`).
//! Different capabilities may round differently, so bit-exact replay needs the same one.
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

/// The metadata entries that say which kernels ran on `device`: the libtorch build,
/// and the ATen CPU capability (CPU kernels also run for a CUDA device's host side).
pub fn facts(device: tch::Device) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    m.insert("libtorch".into(), LIBTORCH.into());
    m.insert(CAPABILITY_KEY.into(), cpu_capability());
    if let tch::Device::Cuda(i) = device {
        m.insert("cuda_device".into(), format!("cuda:{i}"));
    }
    m
}

#[cfg(test)]
mod tests {
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
