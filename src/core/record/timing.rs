//! Where a stage's time went: [`StageTiming`], the stage's wall time split into named
//! [`Phase`]s (generation, reward, the training forward/backward, ...) with the tokens
//! each sampled or prefilled.
//!
//! Wall-clock times are facts about one run on one machine, never about the experiment:
//! a stage's timing lives in the unhashed metadata of its `stage_completed` event
//! ([`super::meta::Meta::timing`]), so a replay that reproduces every event reproduces
//! every hash while its own timing differs. The trainer (`train::timing` in the
//! application crate) measures it; `ledger show BRANCH@stageN --timing` and the
//! TensorBoard export read it back, and this crate alone (no libtorch) can show it.
//!
//! Phase names are the constants of [`phase`]; a stage records the phases it ran, in the
//! order they first ran. Phases never overlap (a phase begun inside another pauses the
//! outer one), so their seconds add up to at most the stage's wall time, and what they
//! leave out is the small glue between them.
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The names a stage's phases are recorded under, and what each one covers.
pub mod phase {
    /// The stage's engineer: reading its evidence, building it (a model engineer loads
    /// a checkpoint), its reply, and recording the decision.
    pub const ENGINEER: &str = "engineer";
    /// Generating (and storing) the stage's training instances; stage 0 also stores its
    /// evaluation suites.
    pub const INSTANCES: &str = "instances";
    /// Building the warm-up's teacher examples: the engineer examples and pairs, and a
    /// scratch model's tokenizer corpus.
    pub const EXAMPLE_BUILDING: &str = "example_building";
    /// Making the stage's starting model (a fresh or shipped one, stage 0) or loading a
    /// checkpoint from the ledger.
    pub const LOADING: &str = "loading";
    /// GRPO's rollouts: sampling the group of plans for each instance of a step's batch.
    pub const GENERATION: &str = "generation";
    /// Scoring the rollouts: simulation, the shaped reward, group advantages and the
    /// trajectory records.
    pub const REWARD: &str = "reward";
    /// Recomputing the sampling policy's log-probs when the policy did not record them
    /// (the `grid` policy); a no-grad forward.
    pub const OLD_LOG_PROBS: &str = "old_log_probs";
    /// The KL reference's log-probs (the frozen base under LoRA, else stage 0's model);
    /// a no-grad forward.
    pub const KL_REFERENCE: &str = "kl_reference";
    /// The training forward and backward: the loss of the update and its gradients
    /// (all micro-batches), and reading the loss terms back.
    pub const TRAINING: &str = "training";
    /// The optimiser update (gradient norm and clipping included).
    pub const OPTIMISER: &str = "optimiser";
    /// Hashing the parameters after each update, for the gradient-step record.
    pub const PARAMETER_HASH: &str = "parameter_hash";
    /// Engineer RL's steps, when the branch trains its engineer.
    pub const ENGINEER_RL: &str = "engineer_rl";
    /// Saving checkpoints and committing everything recorded (each step's records,
    /// durable points, the stage's final checkpoint).
    pub const CHECKPOINTING: &str = "checkpointing";
    /// The stage's evaluation: greedy decoding of the validation and test suites,
    /// scoring, and their records.
    pub const EVALUATION: &str = "evaluation";

    /// Every name above, in the order a stage usually runs them.
    pub const ALL: [&str; 14] = [
        ENGINEER,
        INSTANCES,
        EXAMPLE_BUILDING,
        LOADING,
        GENERATION,
        REWARD,
        OLD_LOG_PROBS,
        KL_REFERENCE,
        TRAINING,
        OPTIMISER,
        PARAMETER_HASH,
        ENGINEER_RL,
        CHECKPOINTING,
        EVALUATION,
    ];
}

/// A stage's wall time and its phases, as the process that completed the stage
/// measured them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StageTiming {
    /// Seconds from the stage's start in this process to its completion event.
    pub wall_seconds: f64,
    /// The phases, in the order they first ran.
    pub phases: Vec<Phase>,
    /// The stage was resumed (after a stop or a crash) or its start was recorded by an
    /// earlier process: the wall time and phases cover only this process's part.
    pub resumed: bool,
    /// The GPU's model name as its driver reports it (`NVIDIA H100 80GB HBM3`), when
    /// the stage ran on CUDA and the name was known; None on the CPU.
    pub gpu: Option<String>,
}

/// One phase of a stage: its seconds summed over every time it ran, and its work.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Phase {
    /// One of [`phase`]'s names.
    pub name: String,
    pub seconds: f64,
    /// How many times the phase ran (e.g. once per GRPO step).
    pub calls: u64,
    /// Tokens the phase generated (generation, evaluation, the engineer's reply) or
    /// scored (the training forward and the KL reference score the sampled tokens);
    /// None when it counts none. A `grid` policy's tokens are its moves.
    pub sampled_tokens: Option<u64>,
    /// Prompt tokens the phase ran through the model (each distinct prompt once when it
    /// decodes; every row's prompt when it scores); None when it counts none.
    pub prefilled_tokens: Option<u64>,
    /// Decode forwards (one per generated position of a batch), at least: counted as
    /// the longest lane of each generation call, so a call split into waves ran more.
    pub decode_steps: Option<u64>,
    /// Bytes a memory-bound decode must read, at least: every decode forward's weights
    /// in the compute dtype plus every lane's key/value cache up to its position. Over a
    /// memory bandwidth it is the decode's roofline time.
    pub decode_bytes: Option<u64>,
}

impl StageTiming {
    /// The phase named `name`, if the stage ran it.
    pub fn phase(&self, name: &str) -> Option<&Phase> {
        self.phases.iter().find(|p| p.name == name)
    }

    /// Seconds of all phases together.
    pub fn covered_seconds(&self) -> f64 {
        self.phases.iter().map(|p| p.seconds).sum()
    }
}

/// Peak memory bandwidth in bytes per second of a GPU, by the model name its driver
/// reports (`NVIDIA H100 80GB HBM3`, `NVIDIA H200`); None for a GPU not in the table,
/// whose roofline is then not guessed. Figures are the vendors' data-sheet peaks.
pub fn gpu_bandwidth(name: &str) -> Option<f64> {
    let n = name.trim();
    let n = n.strip_prefix("NVIDIA ").unwrap_or(n);
    let n = n.strip_prefix("GeForce ").unwrap_or(n);
    // (model prefix, variant words that must all appear, bytes/s), most specific first.
    const TABLE: &[(&str, &[&str], f64)] = &[
        ("H200", &[], 4.8e12),
        ("H100 NVL", &[], 3.9e12),
        ("H100 PCIe", &[], 2.0e12),
        ("H100", &["PCIe"], 2.0e12),
        ("H100", &["HBM3"], 3.35e12),
        ("H100 SXM", &[], 3.35e12),
        ("A100-SXM4-80GB", &[], 2.039e12),
        ("A100 80GB PCIe", &[], 1.935e12),
        ("A100-SXM4-40GB", &[], 1.555e12),
        ("A100-PCIE-40GB", &[], 1.555e12),
        ("L40S", &[], 0.864e12),
        ("L4", &[], 0.3e12),
        ("A10G", &[], 0.6e12),
        ("RTX 4090", &[], 1.008e12),
    ];
    TABLE.iter().find_map(|(model, words, bw)| {
        let rest = n.strip_prefix(model)?;
        // The model name ends there (`L4` is not `L40S`).
        let whole = rest.is_empty() || rest.starts_with([' ', '-']);
        (whole
            && words
                .iter()
                .all(|w| rest.split([' ', '-']).any(|x| x == *w)))
        .then_some(*bw)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bandwidth_by_driver_name() {
        assert_eq!(gpu_bandwidth("NVIDIA H100 80GB HBM3"), Some(3.35e12));
        assert_eq!(gpu_bandwidth("NVIDIA H100 PCIe"), Some(2.0e12));
        assert_eq!(gpu_bandwidth("NVIDIA H100 NVL"), Some(3.9e12));
        assert_eq!(gpu_bandwidth("NVIDIA H200"), Some(4.8e12));
        assert_eq!(gpu_bandwidth("NVIDIA A100-SXM4-80GB"), Some(2.039e12));
        assert_eq!(gpu_bandwidth("NVIDIA L4"), Some(0.3e12));
        assert_eq!(gpu_bandwidth("NVIDIA L40S"), Some(0.864e12));
        assert_eq!(gpu_bandwidth("NVIDIA GeForce RTX 4090"), Some(1.008e12));
        // Not guessed: an H100 whose variant the name does not say, a GH200, unknowns.
        assert_eq!(gpu_bandwidth("NVIDIA H100"), None);
        assert_eq!(gpu_bandwidth("NVIDIA GH200 480GB"), None);
        assert_eq!(gpu_bandwidth("NVIDIA L40"), None);
        assert_eq!(gpu_bandwidth(""), None);
    }

    #[test]
    fn covered_seconds_and_lookup() {
        let t = StageTiming {
            wall_seconds: 3.0,
            phases: vec![
                Phase {
                    name: phase::GENERATION.into(),
                    seconds: 1.5,
                    calls: 2,
                    ..Phase::default()
                },
                Phase {
                    name: phase::TRAINING.into(),
                    seconds: 1.25,
                    calls: 2,
                    ..Phase::default()
                },
            ],
            ..StageTiming::default()
        };
        assert_eq!(t.covered_seconds(), 2.75);
        assert_eq!(t.phase("training").unwrap().calls, 2);
        assert!(t.phase("reward").is_none());
    }
}
