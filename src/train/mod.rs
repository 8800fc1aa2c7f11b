//! The libtorch trainer: policies (`grid`, `text`), the supervised warm-up that makes
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
pub mod policy;
pub mod text;
pub mod warmup;

use adam::{Adam, AdamConfig};
use policy::Policy;
use tch::Device;

/// A policy with its optimiser and step counter: what a checkpoint captures.
pub struct TrainState {
    pub policy: Box<dyn Policy>,
    pub adam: Adam,
    /// Optimiser updates taken in total (warm-up and every stage).
    pub global_step: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    #[error("unknown policy kind {0:?} (expected grid or text)")]
    PolicyKind(String),
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

/// Parse `--device`: `cpu`, `cuda` or `cuda:N`, checking that CUDA is there.
pub fn parse_device(s: &str) -> Result<Device, TrainError> {
    match parse_device_name(s).map_err(|m| TrainError::Device(s.into(), m))? {
        None => Ok(Device::Cpu),
        Some(idx) => {
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

/// A fresh policy of `kind` with default architecture, initialised from `seed`.
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
        "text" => Ok(Box::new(text::TextPolicy::new(
            device,
            text::TextShape::default(),
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

    /// Serialise for a checkpoint blob.
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

    /// Rebuild a training state from checkpoint bytes.
    pub fn load(bytes: &[u8], device: Device) -> Result<TrainState, TrainError> {
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
            "text" => {
                let shape: text::TextShape =
                    crate::ledger::codec::decode(&h.arch, "text architecture")
                        .map_err(|e| TrainError::Arch(e.to_string()))?;
                shape
                    .validate()
                    .map_err(|e| TrainError::Arch(e.to_string()))?;
                Box::new(text::TextPolicy::new(
                    device,
                    shape,
                    crate::seed::Seed::root(0),
                ))
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

    /// Point the optimiser at a new learning rate (stages may differ from the warm-up).
    pub fn set_lr(&mut self, lr: f64) {
        self.adam.config.lr = lr;
    }
}
