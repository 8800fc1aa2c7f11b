//! The `Policy` trait: what the trainer needs from a network that turns instances into
//! plans, whatever its architecture (`grid` or `lm`).
//!
//! A policy acts by emitting a sequence of *action ids* (grid: one move per agent per
//! timestep; lm: one token per step). A [`Rollout`] keeps those ids, so the trainer
//! can recompute their log-probabilities with gradients (`log_probs`) and a reference
//! plan can be turned into ids for imitation (`encode_plan`). Sampling draws from the
//! project's seed tree, never from torch's global generator, so it is bit-reproducible.
use crate::env::text::ParseError;
use crate::env::{Instance, Plan};
pub use crate::plan::trainer::PolicySettings;
use crate::seed::Seed;
use tch::{nn, Device, Tensor};

/// One sampled (or decoded) plan.
#[derive(Clone, Debug, PartialEq)]
pub struct Rollout {
    /// Index of the instance in the slice it was sampled for.
    pub instance: usize,
    /// The action ids, in the order the policy emitted them.
    pub actions: Vec<u32>,
    /// The plan, or why the emitted text does not parse (the `lm` policy).
    pub plan: Result<Plan, ParseError>,
    /// Compact, policy-specific bytes of the plan for trajectory events (moves as
    /// letters with '|' between agents, or the generated text).
    pub plan_bytes: Vec<u8>,
    /// Log-probability of each action as it was sampled (the `lm` policy records them;
    /// empty when the policy does not, and GRPO then recomputes them).
    pub logprobs: Vec<f32>,
}

/// Log-probabilities of rollouts' actions under the current parameters.
pub struct LogProbs {
    /// `[A]`: log pi(action) for every action of every rollout, concatenated.
    pub per_action: Tensor,
    /// `[A]`: entropy of the action distribution at each action.
    pub entropy: Tensor,
    /// For every action, the index of its rollout (`[A]`, i64).
    pub rollout_of: Tensor,
}

/// The longest rollout for an instance: enough for every optimal plan of the suites,
/// short enough that a lost agent ends the episode quickly.
pub fn max_steps(inst: &Instance) -> usize {
    (3 * inst.size() + 2 * inst.agents()).min(inst.horizon())
}

/// A trainable policy (`grid` or `lm`): it samples plans for instances (or decodes them
/// greedily), gives the log-probabilities of its actions with gradients for GRPO and the
/// warm-up, turns reference plans into its action ids, and owns the parameters and
/// architecture that checkpoints record.
pub trait Policy {
    /// "grid" or "lm".
    fn kind(&self) -> &'static str;
    /// The parameters (names are stable: they order the parameter hash).
    fn vars(&self) -> &nn::VarStore;
    fn vars_mut(&mut self) -> &mut nn::VarStore;
    fn device(&self) -> Device {
        self.vars().device()
    }
    /// Sample `per_instance` rollouts for every instance (instance-major order), or
    /// decode greedily when `greedy` (then one per instance is enough). Deterministic
    /// from `seed`.
    fn sample(
        &self,
        instances: &[Instance],
        per_instance: usize,
        greedy: bool,
        seed: Seed,
    ) -> Vec<Rollout>;
    /// Log-probabilities (with gradients) of the rollouts' actions.
    fn log_probs(&self, instances: &[Instance], rollouts: &[Rollout]) -> LogProbs;
    /// Accumulate into the parameters' gradients the backward pass of `loss`, a scalar
    /// the closure builds from the rollouts' log-probabilities (which carry gradients).
    /// The default is one forward ([`Policy::log_probs`]) and one backward, skipped
    /// when the rollouts have no actions. A policy may bound its memory here as
    /// [`Policy::apply_settings`] asked (log-probs in chunks, recomputed activations), with
    /// the same gradients.
    fn backward_loss(
        &self,
        instances: &[Instance],
        rollouts: &[Rollout],
        loss: &mut dyn FnMut(&LogProbs) -> Tensor,
    ) {
        let lp = self.log_probs(instances, rollouts);
        let l = loss(&lp);
        if lp.per_action.numel() > 0 {
            l.backward();
        }
    }
    /// The tokens a training forward holds for each rollout (its row's length), which
    /// `[grpo] micro_batch_tokens` budgets. The default is the rollout's actions.
    fn row_tokens(&self, _instances: &[Instance], rollouts: &[Rollout]) -> Vec<usize> {
        rollouts.iter().map(|r| r.actions.len()).collect()
    }
    /// How a run bounds device memory and which kernels it runs (the plan's settings,
    /// see [`PolicySettings`]); a policy without such paths (the `grid` network)
    /// ignores them.
    fn apply_settings(&mut self, _settings: PolicySettings) {}
    /// The action ids that produce `plan` on `inst` (for supervised warm-up).
    fn encode_plan(&self, inst: &Instance, plan: &Plan) -> Vec<u32>;
    /// The architecture, codec-encoded, as checkpoints record it.
    fn arch(&self) -> Vec<u8>;
    /// Log-probabilities under the KL reference when the policy carries it itself
    /// (the frozen base under LoRA); None when the reference is a separate model.
    fn reference_log_probs(
        &self,
        _instances: &[Instance],
        _rollouts: &[Rollout],
    ) -> Option<LogProbs> {
        None
    }
    /// Blobs a checkpoint of this policy references and the ledger must hold
    /// (the `lm` policy's tokenizer).
    fn side_blobs(&self) -> Vec<Vec<u8>> {
        Vec::new()
    }
    /// The policy as `Any`, so a caller can ask for one implementor (`lm` adds
    /// `as_lm` this way) without this trait naming any.
    fn as_any(&self) -> &dyn std::any::Any;
    /// The policy by value as `Any` (to take an `LmPolicy` out of a box).
    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any>;
}

/// Draw an action from `probs` with one uniform number `u` in [0, 1) (inverse CDF; the
/// last action absorbs rounding). Greedy (`None`): the most likely action, lowest id on
/// ties. Shared by every policy so sampling means the same thing everywhere.
pub fn choose(probs: &[f32], u: Option<f32>) -> u32 {
    match u {
        None => {
            let mut best = 0;
            for i in 1..probs.len() {
                if probs[i] > probs[best] {
                    best = i;
                }
            }
            best as u32
        }
        Some(u) => {
            let mut acc = 0.0f32;
            for (i, &p) in probs.iter().enumerate() {
                acc += p;
                if u < acc {
                    return i as u32;
                }
            }
            (probs.len() - 1) as u32
        }
    }
}
