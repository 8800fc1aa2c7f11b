//! Stage 0: the supervised warm-up that makes the *base model*. The policy imitates
//! the solver's optimal plans on an easy distribution (2 agents, small maps, few holes);
//! each step maximises the log-likelihood of a batch of reference plans.
use super::grpo::batch_indices;
use super::policy::Rollout;
use super::TrainState;
use crate::env::Solved;
use crate::ledger::event::{EventBody, GradientStep};
use crate::seed::Seed;
use tch::Kind;

/// Warm-up hyper-parameters (the plan file's `[warmup]` section).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct WarmupConfig {
    pub steps: u64,
    pub lr: f64,
    pub batch_size: usize,
    /// Solved instances generated for imitation.
    pub instances: usize,
}

/// One imitation step on the batch `step` of `data`; returns its gradient-step event
/// and the loss.
pub fn step(
    state: &mut TrainState,
    cfg: &WarmupConfig,
    data: &[Solved],
    seed: Seed,
    step: u64,
) -> (EventBody, f64) {
    let idx = batch_indices(data.len(), cfg.batch_size, seed.child("order", 0), step);
    let instances: Vec<_> = idx.iter().map(|&i| data[i].instance.clone()).collect();
    let rollouts: Vec<Rollout> = idx
        .iter()
        .enumerate()
        .map(|(j, &i)| Rollout {
            instance: j,
            actions: state.policy.encode_plan(&data[i].instance, &data[i].plan),
            plan: Ok(data[i].plan.clone()),
            plan_bytes: Vec::new(),
            logprobs: Vec::new(),
        })
        .collect();
    let lp = state.policy.log_probs(&instances, &rollouts);
    imitation_update(state, lp)
}

/// One imitation step on text pairs (an `lm` policy): maximise the log-likelihood of
/// `targets` after `prompts` for the batch `step` of `pairs` (the engineer examples a
/// scratch base model learns from).
pub fn text_step(
    state: &mut TrainState,
    pairs: &[(Vec<u32>, Vec<u32>)],
    batch_size: usize,
    seed: Seed,
    step: u64,
) -> (EventBody, f64) {
    let idx = batch_indices(pairs.len(), batch_size, seed.child("order", 1), step);
    let lm = state
        .policy
        .as_lm()
        .expect("text pairs train a language model");
    let prompts: Vec<&[u32]> = idx.iter().map(|&i| pairs[i].0.as_slice()).collect();
    let targets: Vec<&[u32]> = idx.iter().map(|&i| pairs[i].1.as_slice()).collect();
    let lp = lm.token_log_probs(&prompts, &targets, lm.arch.sampling.temperature, true);
    imitation_update(state, lp)
}

/// Minimise the negative mean log-likelihood of `lp`'s actions: one optimiser update and
/// its gradient-step event, and the loss.
fn imitation_update(state: &mut TrainState, lp: super::policy::LogProbs) -> (EventBody, f64) {
    let loss = -lp.per_action.mean(Kind::Float);
    super::adam::Adam::zero_grad(state.policy.vars());
    loss.backward();
    let grad_norm = state.adam.update(state.policy.vars());
    state.global_step += 1;
    let l = loss.double_value(&[]);
    let h = lp.entropy.mean(Kind::Float).double_value(&[]);
    let event = EventBody::GradientStep(GradientStep {
        step: state.global_step,
        params: super::checkpoint::param_hash(state.policy.vars()),
        loss: l.to_bits(),
        policy_loss: l.to_bits(),
        kl: 0f64.to_bits(),
        entropy: h.to_bits(),
        grad_norm: grad_norm.to_bits(),
        reward_mean: 0f64.to_bits(),
    });
    (event, l)
}
