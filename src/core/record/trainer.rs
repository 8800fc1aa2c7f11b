//! What the trainer reports: typed records of its steps and evaluations. The trainer
//! knows nothing of the ledger's events; the stage wraps these records into events
//! (`EventBody::Trajectories`, `::GradientStep`, `::Evaluation`, `::EvaluationOutcomes`,
//! `::FailureBreakdown`),
//! so their encoding is part of the event encoding and reaches hashed bytes: no
//! HashMap, no wall-clock time, floats only as bit patterns.
use crate::env::simulate::FailureKind;
use crate::record::codec;
use crate::record::hash::Hash;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Context for the content hash of one trajectory inside a batch.
pub const TRAJECTORY_CONTEXT: &str = "mapf-ledger 2026 trajectory v1";

/// What one training step produced, in the order it is recorded.
#[derive(Clone, Debug, PartialEq)]
pub enum StepRecord {
    Trajectories(TrajectoryBatch),
    GradientStep(GradientStep),
    GrpoStats(GrpoStats),
}

/// A batch of sampled plans with their outcomes. Instances are listed once per batch
/// and referenced by index, so one trajectory costs a few tens of bytes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TrajectoryBatch {
    /// The gradient step these samples fed.
    pub step: u64,
    /// Instance blobs referenced by `Trajectory::instance`.
    pub instances: Vec<Hash>,
    pub trajectories: Vec<Trajectory>,
}

/// One sampled plan and its outcome.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Trajectory {
    /// Index into the batch's `instances`.
    pub instance: u32,
    /// The plan in the policy's compact encoding (moves, or text bytes; JSON shows text
    /// as a string).
    #[serde(with = "crate::record::readable::plan_bytes")]
    #[schemars(with = "crate::record::readable::JsonBytes")]
    pub plan: Vec<u8>,
    pub valid: bool,
    pub optimal: bool,
    pub failure: Option<FailureKind>,
    /// Sum of costs of the plan (0 when invalid) and of the optimum.
    pub cost: u32,
    pub optimal_cost: u32,
    /// The reward, as f32 bits (JSON: `reward`, the number).
    #[serde(rename = "reward", with = "crate::record::readable::f32_bits")]
    #[schemars(with = "crate::record::readable::JsonFloat")]
    pub reward_bits: u32,
}

impl TrajectoryBatch {
    /// The content hash of each trajectory (trajectory context over the instance hash
    /// and the trajectory's encoding), in batch order. Errors name a bad instance index.
    pub fn trajectory_hashes(&self) -> Result<Vec<Hash>, NoSuchInstance> {
        self.trajectories
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let inst = self
                    .instances
                    .get(t.instance as usize)
                    .ok_or(NoSuchInstance {
                        trajectory: i,
                        instance: t.instance,
                        instances: self.instances.len(),
                    })?;
                let mut buf = inst.0.to_vec();
                codec::encode_into(t, &mut buf);
                Ok(Hash::derive(TRAJECTORY_CONTEXT, &buf))
            })
            .collect()
    }
}

/// A trajectory of a batch that names an instance index the batch does not have.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("trajectory {trajectory} names instance {instance} of {instances}")]
pub struct NoSuchInstance {
    /// The trajectory's index in the batch.
    pub trajectory: usize,
    /// The instance index it names.
    pub instance: u32,
    /// How many instances the batch has.
    pub instances: usize,
}

/// One optimiser step. Loss terms are f64 bit patterns (JSON: numbers).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GradientStep {
    pub step: u64,
    /// Parameter hash after the step (blake3 over raw parameters in name order).
    pub params: Hash,
    /// The objective minimised: the policy loss, plus `kl_coef` x KL, less
    /// `entropy_coef` x entropy, plus `rehearsal_coef` x the rehearsal batch's imitation
    /// loss where the plan rehearses (the warm-up's: its imitation loss alone).
    #[serde(with = "crate::record::readable::f64_bits")]
    #[schemars(with = "crate::record::readable::JsonFloat")]
    pub loss: u64,
    #[serde(with = "crate::record::readable::f64_bits")]
    #[schemars(with = "crate::record::readable::JsonFloat")]
    pub policy_loss: u64,
    #[serde(with = "crate::record::readable::f64_bits")]
    #[schemars(with = "crate::record::readable::JsonFloat")]
    pub kl: u64,
    #[serde(with = "crate::record::readable::f64_bits")]
    #[schemars(with = "crate::record::readable::JsonFloat")]
    pub entropy: u64,
    #[serde(with = "crate::record::readable::f64_bits")]
    #[schemars(with = "crate::record::readable::JsonFloat")]
    pub grad_norm: u64,
    #[serde(with = "crate::record::readable::f64_bits")]
    #[schemars(with = "crate::record::readable::JsonFloat")]
    pub reward_mean: u64,
}

/// What one GRPO step's sampled batch looked like and what the update did: recorded
/// after its gradient step(s), one per sampled batch. Floats are f64 bit patterns (JSON: numbers).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GrpoStats {
    /// The global step of the (last) optimiser update these samples fed.
    pub step: u64,
    pub samples: u32,
    /// Instances (one group of `group_size` samples each).
    pub groups: u32,
    /// Groups whose rewards differ: the ones that carry a policy gradient.
    pub signal_groups: u32,
    /// Zero-variance groups left out of the loss (`grpo.zero_variance = "skip"` or
    /// `"drop"`).
    pub skipped_groups: u32,
    pub valid: u32,
    pub optimal: u32,
    /// Mean and population standard deviation of the batch's rewards.
    #[serde(with = "crate::record::readable::f64_bits")]
    #[schemars(with = "crate::record::readable::JsonFloat")]
    pub reward_mean: u64,
    #[serde(with = "crate::record::readable::f64_bits")]
    #[schemars(with = "crate::record::readable::JsonFloat")]
    pub reward_std: u64,
    /// The k3 estimate of KL(policy || reference) over the loss's tokens (0 without one).
    #[serde(with = "crate::record::readable::f64_bits")]
    #[schemars(with = "crate::record::readable::JsonFloat")]
    pub kl: u64,
    /// Share of the loss's tokens whose ratio the clip held back.
    #[serde(with = "crate::record::readable::f64_bits")]
    #[schemars(with = "crate::record::readable::JsonFloat")]
    pub clip_fraction: u64,
    /// Sampled (response) tokens of the batch.
    pub tokens: u64,
}

impl GrpoStats {
    /// Share of groups with a reward difference, in [0, 1].
    pub fn signal_share(&self) -> f64 {
        self.signal_groups as f64 / self.groups.max(1) as f64
    }
}

/// Valid/optimal counts of one (agents, size) cell of a suite.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct EvalCell {
    pub agents: u32,
    pub size: u32,
    pub total: u32,
    pub valid: u32,
    pub optimal: u32,
}

impl EvalCell {
    /// A result table as evaluation cells, by (agents, size). Needs only the testbed,
    /// so `ledger env` has it in the build without libtorch.
    pub fn cells_of(t: &crate::env::table::ResultTable) -> Vec<EvalCell> {
        t.cells
            .iter()
            .map(|(&(agents, size), c)| EvalCell {
                agents: agents as u32,
                size: size as u32,
                total: c.total,
                valid: c.valid,
                optimal: c.optimal,
            })
            .collect()
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Evaluation {
    /// "val", "test", ...
    pub suite: String,
    /// The checkpoint evaluated (None: the current parameters).
    pub checkpoint: Option<Hash>,
    pub cells: Vec<EvalCell>,
}

/// `EvaluationOutcomes::outcomes` byte of an invalid plan.
pub const OUTCOME_INVALID: u8 = 0;
/// `EvaluationOutcomes::outcomes` byte of a valid plan that is not optimal.
pub const OUTCOME_VALID: u8 = 1;
/// `EvaluationOutcomes::outcomes` byte of an optimal plan (optimal implies valid).
pub const OUTCOME_OPTIMAL: u8 = 2;

/// Per-instance results of one suite evaluation, recorded right after the suite's
/// [`Evaluation`]: one byte per suite item in suite order (cells in order, each cell's
/// items in order): 0 invalid, 1 valid but not optimal, 2 optimal. Forks are evaluated on
/// the same items, so two branches' outcomes of a suite with the same `suite_hash` pair
/// item by item (paired statistics: `views::paired`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EvaluationOutcomes {
    /// "val" or "test" (the whole suite, never a subset).
    pub suite: String,
    /// The suite's content hash (`Suite::hash`): outcomes pair only when it is equal.
    pub suite_hash: Hash,
    /// The checkpoint evaluated (None: the current parameters).
    pub checkpoint: Option<Hash>,
    /// (agents, size, items) of each cell, in suite order: the items' layout.
    pub cells: Vec<(u32, u32, u32)>,
    /// The wait ratios (f64 bits) the cells are stratified by: each cell's items split
    /// into equal consecutive subsets in this order. Empty: not stratified.
    #[serde(with = "crate::record::readable::vec_f64_bits")]
    #[schemars(with = "Vec<crate::record::readable::JsonFloat>")]
    pub wait_ratios: Vec<u64>,
    /// One byte per item: [`OUTCOME_INVALID`], [`OUTCOME_VALID`] or [`OUTCOME_OPTIMAL`].
    pub outcomes: Vec<u8>,
}

impl EvaluationOutcomes {
    /// Whether the layout accounts for every byte and every byte is a known outcome.
    pub fn is_well_formed(&self) -> bool {
        let items: u64 = self.cells.iter().map(|c| c.2 as u64).sum();
        let w = self.wait_ratios.len() as u32;
        items == self.outcomes.len() as u64
            && self.outcomes.iter().all(|&b| b <= OUTCOME_OPTIMAL)
            && (w == 0 || self.cells.iter().all(|c| c.2 % w == 0))
    }

    pub fn wait_ratios(&self) -> Vec<f64> {
        self.wait_ratios
            .iter()
            .map(|&b| f64::from_bits(b))
            .collect()
    }
}

/// Failure counts for one map size.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SizeFailures {
    pub size: u32,
    pub total: u32,
    pub counts: Vec<(FailureKind, u32)>,
    /// Example failing plans, as text.
    pub examples: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FailureBreakdown {
    pub suite: String,
    pub sizes: Vec<SizeFailures>,
}

/// The table back from an evaluation event.
pub fn table_of(e: &Evaluation) -> crate::env::table::ResultTable {
    crate::env::table::ResultTable {
        cells: e
            .cells
            .iter()
            .map(|c| {
                (
                    (c.agents as usize, c.size as usize),
                    crate::env::table::CellCounts {
                        total: c.total,
                        valid: c.valid,
                        optimal: c.optimal,
                    },
                )
            })
            .collect(),
    }
}
