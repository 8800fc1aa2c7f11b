//! Where a policy computes and in which floating-point type: the plan's `[train] device`
//! and `[train] dtype`.
//!
//! The dtype logic of the language model (`lm/model.rs`) is keyed on the *compute
//! dtype*, not on the device: in bf16, weights run in bf16 while trainable tensors stay
//! f32 master copies (cast on use), a generation call takes one bf16 copy of them, and
//! a LoRA base is frozen in bf16. `auto` picks bf16 on CUDA and f32 on the CPU (what
//! plans without the field always did); `bf16` on the CPU runs the CUDA dtype path where
//! it can be tested without a GPU.
use tch::{Device, Kind};

pub use crate::plan::trainer::Dtype;

/// The compute dtype of `dtype` on `device`: `auto` is bf16 on CUDA and f32 on the CPU.
pub fn dtype_kind(dtype: Dtype, device: Device) -> Kind {
    match dtype {
        Dtype::Auto => match device {
            Device::Cpu => Kind::Float,
            _ => Kind::BFloat16,
        },
        Dtype::F32 => Kind::Float,
        Dtype::Bf16 => Kind::BFloat16,
    }
}

/// A device and the compute dtype on it. A bare [`Device`] converts with the `auto`
/// dtype, so callers that never chose a dtype keep the old behaviour.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Compute {
    pub device: Device,
    /// `Kind::Float` or `Kind::BFloat16`.
    pub dtype: Kind,
}

impl Compute {
    pub fn new(device: Device, dtype: Dtype) -> Compute {
        Compute {
            device,
            dtype: dtype_kind(dtype, device),
        }
    }

    /// The name of the compute dtype (`f32`, `bf16`), as metadata records it.
    pub fn dtype_name(&self) -> &'static str {
        kind_name(self.dtype)
    }
}

impl From<Device> for Compute {
    fn from(device: Device) -> Compute {
        Compute::new(device, Dtype::Auto)
    }
}

/// `f32`, `bf16`, ... for a floating-point kind.
pub fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Float => "f32",
        Kind::BFloat16 => "bf16",
        Kind::Half => "f16",
        Kind::Double => "f64",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_is_bf16_on_cuda_and_f32_on_the_cpu() {
        assert_eq!(dtype_kind(Dtype::Auto, Device::Cpu), Kind::Float);
        assert_eq!(dtype_kind(Dtype::Auto, Device::Cuda(0)), Kind::BFloat16);
        assert_eq!(dtype_kind(Dtype::Bf16, Device::Cpu), Kind::BFloat16);
        assert_eq!(dtype_kind(Dtype::F32, Device::Cuda(1)), Kind::Float);
        assert_eq!(Compute::from(Device::Cpu).dtype, Kind::Float);
    }
}
