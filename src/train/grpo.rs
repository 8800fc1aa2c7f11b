//! GRPO, top to bottom in one place (CleanRL style).
//!
//! Per gradient step: take a batch of training instances (a seeded permutation of the
//! stage's set, a pure function of (stage, step)); sample G plans per instance; score
//! each with the fixed verifiable reward (valid, optimal bonus, format term for text);
//! normalise rewards within each instance's group; optimise the clipped-ratio objective
//! per action, with an optional KL penalty to the base model and an entropy bonus.
//!
//! Loss normalisation is token-level: every term is the mean over all actions (tokens)
//! of the whole batch, so long and short answers weigh per token, not per answer (DAPO's
//! token-level normalisation). The "old" log-probs are those recorded at sampling when
//! the policy records them (the `lm` policy), else one no-grad forward. Every
//! sampled plan is recorded as a trajectory, every optimiser update as a gradient step
//! (parameter hash, loss terms as exact bits, gradient norm).
use super::eval::outcome_of;
use super::policy::{Policy, Rollout};
use super::records::{GradientStep, StepRecord, Trajectory, TrajectoryBatch};
use super::TrainState;
use crate::env::{CostMetric, Outcome, Reference, Solved};
use crate::ledger::Hash;
use crate::seed::Seed;
use rand::seq::SliceRandom;
use tch::{Kind, Tensor};

/// GRPO hyper-parameters (the plan file's `[grpo]` section).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct GrpoConfig {
    pub steps: u64,
    pub lr: f64,
    /// G: plans sampled per instance.
    pub group_size: usize,
    /// Instances per gradient step.
    pub batch_size: usize,
    pub clip_eps: f64,
    /// KL penalty to the base (stage-0) model; 0 disables it.
    pub kl_coef: f64,
    pub entropy_coef: f64,
    /// Optimiser updates per sampled batch (1 = on-policy).
    pub epochs: usize,
    /// Reward for a valid plan; optimal plans get `valid_reward + optimal_bonus`.
    pub valid_reward: f64,
    pub optimal_bonus: f64,
    /// Reward for text that parses (text policy only).
    pub format_reward: f64,
    pub metric: CostMetric,
    /// Save a checkpoint (a durable point) every this many steps.
    pub checkpoint_every: u64,
}

/// The fixed, verifiable reward. The engineer never changes it.
pub fn reward(cfg: &GrpoConfig, outcome: &Outcome, reference: &Reference, parsed: bool) -> f64 {
    let mut r = if parsed { cfg.format_reward } else { 0.0 };
    if outcome.valid {
        r += cfg.valid_reward;
        if outcome.optimal(reference, cfg.metric) {
            r += cfg.optimal_bonus;
        }
    }
    r
}

/// The instance indices of step `step`'s batch: consecutive slices of per-epoch seeded
/// permutations of `0..n`, so any step's batch is known without replaying earlier ones.
pub fn batch_indices(n: usize, batch: usize, seed: Seed, step: u64) -> Vec<usize> {
    let mut out = Vec::with_capacity(batch);
    let mut cached: Option<(u64, Vec<usize>)> = None;
    for j in 0..batch as u64 {
        let flat = step * batch as u64 + j;
        let (epoch, pos) = (flat / n as u64, (flat % n as u64) as usize);
        if cached.as_ref().is_none_or(|(e, _)| *e != epoch) {
            let mut perm: Vec<usize> = (0..n).collect();
            perm.shuffle(&mut seed.child("epoch", epoch).rng());
            cached = Some((epoch, perm));
        }
        out.push(cached.as_ref().expect("set above").1[pos]);
    }
    out
}

/// Group-normalised advantages: (r - mean) / std within each instance's G samples;
/// a group whose rewards are all equal carries no signal (advantage 0).
pub fn advantages(rewards: &[f64], group: usize) -> Vec<f64> {
    let mut adv = vec![0.0; rewards.len()];
    for (g, chunk) in rewards.chunks(group).enumerate() {
        let mean = chunk.iter().sum::<f64>() / chunk.len() as f64;
        let var = chunk.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / chunk.len() as f64;
        let std = var.sqrt();
        if std > 1e-8 {
            for (i, r) in chunk.iter().enumerate() {
                adv[g * group + i] = (r - mean) / (std + 1e-6);
            }
        }
    }
    adv
}

/// What one GRPO step reports (for progress bars and the stage summary).
#[derive(Clone, Debug, Default)]
pub struct StepStats {
    pub step: u64,
    pub loss: f64,
    pub reward_mean: f64,
    pub valid_rate: f64,
    pub grad_norm: f64,
}

/// One GRPO step: sample, score, update. Returns the events to record (trajectories
/// first, then one gradient step per optimiser update) and the step's statistics.
#[allow(clippy::too_many_arguments)]
pub fn step(
    state: &mut TrainState,
    base: Option<&dyn Policy>,
    cfg: &GrpoConfig,
    data: &[Solved],
    data_blobs: &[Hash],
    stage_seed: Seed,
    step: u64,
) -> (Vec<StepRecord>, StepStats) {
    // 1. The batch and its rollouts.
    let idx = batch_indices(
        data.len(),
        cfg.batch_size,
        stage_seed.child("order", 0),
        step,
    );
    let instances: Vec<_> = idx.iter().map(|&i| data[i].instance.clone()).collect();
    let rollouts: Vec<Rollout> = state.policy.sample(
        &instances,
        cfg.group_size,
        false,
        stage_seed.child("rollout", step),
    );

    // 2. Rewards from the testbed, advantages within each group.
    let outcomes: Vec<Outcome> = rollouts
        .iter()
        .map(|r| outcome_of(&instances[r.instance], r))
        .collect();
    let rewards: Vec<f64> = rollouts
        .iter()
        .zip(&outcomes)
        .map(|(r, o)| reward(cfg, o, &data[idx[r.instance]].reference, r.plan.is_ok()))
        .collect();
    let adv = advantages(&rewards, cfg.group_size);

    // 3. The trajectories, recorded before the update they feed.
    let mut events = vec![StepRecord::Trajectories(TrajectoryBatch {
        step: state.global_step,
        instances: idx.iter().map(|&i| data_blobs[i]).collect(),
        trajectories: rollouts
            .iter()
            .zip(&outcomes)
            .zip(&rewards)
            .map(|((r, o), &rew)| {
                let reference = &data[idx[r.instance]].reference;
                Trajectory {
                    instance: r.instance as u32,
                    plan: r.plan_bytes.clone(),
                    valid: o.valid,
                    optimal: o.optimal(reference, cfg.metric),
                    failure: o.failure_kind(),
                    cost: o.sum_of_costs,
                    optimal_cost: reference.sum_of_costs,
                    reward_bits: (rew as f32).to_bits(),
                }
            })
            .collect(),
    })];

    // 4. The clipped-ratio objective. Old log-probs are the sampling policy's.
    let device = state.policy.device();
    let recorded = rollouts.iter().all(|r| r.logprobs.len() == r.actions.len());
    let old = if recorded {
        let flat: Vec<f32> = rollouts
            .iter()
            .flat_map(|r| r.logprobs.iter().copied())
            .collect();
        Tensor::from_slice(&flat).to(device)
    } else {
        tch::no_grad(|| {
            state
                .policy
                .log_probs(&instances, &rollouts)
                .per_action
                .detach()
        })
    };
    let base_lp = if cfg.kl_coef > 0.0 {
        tch::no_grad(|| {
            state
                .policy
                .reference_log_probs(&instances, &rollouts)
                .or_else(|| base.map(|b| b.log_probs(&instances, &rollouts)))
                .map(|lp| lp.per_action.detach())
        })
    } else {
        None
    };
    let adv_t = Tensor::from_slice(&adv.iter().map(|&a| a as f32).collect::<Vec<_>>()).to(device);
    let mut stats = StepStats {
        step: state.global_step,
        reward_mean: rewards.iter().sum::<f64>() / rewards.len().max(1) as f64,
        valid_rate: outcomes.iter().filter(|o| o.valid).count() as f64
            / outcomes.len().max(1) as f64,
        ..Default::default()
    };
    for _epoch in 0..cfg.epochs {
        let lp = state.policy.log_probs(&instances, &rollouts);
        let adv_a = adv_t.index_select(0, &lp.rollout_of);
        let ratio = (&lp.per_action - &old).exp();
        let unclipped = &ratio * &adv_a;
        let clipped = ratio.clamp(1.0 - cfg.clip_eps, 1.0 + cfg.clip_eps) * &adv_a;
        let policy_loss = -unclipped.minimum(&clipped).mean(Kind::Float);
        let kl = match &base_lp {
            // k3 estimator of KL(pi || base): exp(b - p) - (b - p) - 1 >= 0.
            Some(b) => {
                let d = b - &lp.per_action;
                (d.exp() - &d - 1.0).mean(Kind::Float)
            }
            None => Tensor::zeros([], (Kind::Float, device)),
        };
        let entropy = lp.entropy.mean(Kind::Float);
        let loss = &policy_loss + &kl * cfg.kl_coef - &entropy * cfg.entropy_coef;
        super::adam::Adam::zero_grad(state.policy.vars());
        if lp.per_action.numel() > 0 {
            loss.backward();
        }
        let grad_norm = state.adam.update(state.policy.vars());
        state.global_step += 1;
        let scalar = |t: &Tensor| {
            if t.numel() == 0 {
                0.0
            } else {
                t.double_value(&[])
            }
        };
        let (l, pl, k, h) = (
            scalar(&loss),
            scalar(&policy_loss),
            scalar(&kl),
            scalar(&entropy),
        );
        events.push(StepRecord::GradientStep(GradientStep {
            step: state.global_step,
            params: super::checkpoint::param_hash(state.policy.vars()),
            loss: l.to_bits(),
            policy_loss: pl.to_bits(),
            kl: k.to_bits(),
            entropy: h.to_bits(),
            grad_norm: grad_norm.to_bits(),
            reward_mean: stats.reward_mean.to_bits(),
        }));
        stats.loss = l;
        stats.grad_norm = grad_norm;
    }
    (events, stats)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advantages_are_group_normalised() {
        let a = advantages(&[1.0, 0.0, 1.0, 0.0, 2.0, 2.0, 2.0, 2.0], 4);
        assert!((a[0] - 1.0).abs() < 1e-4 && (a[1] + 1.0).abs() < 1e-4);
        assert_eq!(&a[4..], &[0.0; 4]);
    }

    #[test]
    fn batches_cover_each_epoch_once() {
        let seed = Seed::root(3);
        let mut seen: Vec<usize> = (0..5).flat_map(|s| batch_indices(20, 4, seed, s)).collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..20).collect::<Vec<_>>());
        assert_eq!(batch_indices(20, 4, seed, 7), batch_indices(20, 4, seed, 7));
    }
}
