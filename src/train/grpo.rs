//! GRPO, top to bottom in one place (CleanRL style).
//!
//! Per gradient step: take a batch of training instances (a seeded permutation of the
//! stage's set, a pure function of (stage, step)); sample G plans per instance; score
//! each with the fixed, shaped, verifiable reward ([`reward`]: format, per-agent credit,
//! validity, cost relative to the solver's optimum); normalise rewards within each
//! instance's group; optimise the clipped-ratio objective per action, with an optional
//! KL penalty to the base model and an entropy bonus. Groups whose rewards are all equal
//! carry no gradient: they are counted, and with `zero_variance = skip` left out of the
//! loss. Each step ends with a [`GrpoStats`] record (reward spread, groups with signal,
//! KL, clip fraction, tokens).
//!
//! Loss normalisation is token-level: every term is the mean over all actions (tokens)
//! of the whole batch, so long and short answers weigh per token, not per answer (DAPO's
//! token-level normalisation). The "old" log-probs are those recorded at sampling when
//! the policy records them (the `lm` policy), else one no-grad forward. Every
//! sampled plan is recorded as a trajectory, every optimiser update as a gradient step
//! (parameter hash, loss terms as exact bits, gradient norm).
use super::eval::outcome_of;
use super::policy::{Policy, Rollout};
use super::records::{GradientStep, GrpoStats, StepRecord, Trajectory, TrajectoryBatch};
use super::TrainState;
use crate::env::simulate::agent_credit;
use crate::env::{CostMetric, Instance, Outcome, Plan, Reference, Solved};
pub use crate::ledger::plan::ZeroVariance;
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
    /// The reward's terms (see [`reward`]).
    pub valid_reward: f64,
    pub optimal_bonus: f64,
    pub format_reward: f64,
    pub agent_reward: f64,
    pub cost_reward: f64,
    /// Zero-variance groups: kept in the loss (advantage 0) or skipped.
    pub zero_variance: ZeroVariance,
    pub metric: CostMetric,
    /// Save a checkpoint (a durable point) every this many steps.
    pub checkpoint_every: u64,
    /// Rollouts per training forward and backward (gradients accumulate over the
    /// micro-batches); 0: all of the step's rollouts at once.
    pub micro_batch: usize,
}

/// The fixed, shaped, verifiable reward; the engineer never changes it. For a plan that
/// parses (`plan` is Some):
/// - `format_reward`;
/// - `agent_reward` times the share of agents credited by [`agent_credit`] (reached the
///   goal with no hole, illegal move or conflict of their own, played past the first
///   failure), so a plan with one collision still ranks above one where everyone fails;
/// - if valid, `valid_reward`, plus `cost_reward` times optimum / cost under `metric`
///   (1 for an optimal plan, less the longer the plan), plus `optimal_bonus` if optimal.
///
/// A plan that does not parse earns 0.
pub fn reward(
    cfg: &GrpoConfig,
    inst: &Instance,
    plan: Option<&Plan>,
    outcome: &Outcome,
    reference: &Reference,
) -> f64 {
    let Some(plan) = plan else {
        return 0.0;
    };
    let mut r = cfg.format_reward;
    if cfg.agent_reward > 0.0 {
        let credit = agent_credit(inst, plan);
        let share = credit.iter().filter(|&&c| c).count() as f64 / credit.len().max(1) as f64;
        r += cfg.agent_reward * share;
    }
    if outcome.valid {
        r += cfg.valid_reward;
        let (cost, best) = match cfg.metric {
            CostMetric::Makespan => (outcome.makespan, reference.makespan),
            CostMetric::SumOfCosts => (outcome.sum_of_costs, reference.sum_of_costs),
        };
        // A valid plan never beats the optimum; cost 0 means every agent starts on its goal.
        let ratio = if cost == 0 {
            1.0
        } else {
            (best as f64 / cost as f64).min(1.0)
        };
        r += cfg.cost_reward * ratio;
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
        if let Some(std) = group_spread(chunk) {
            let mean = chunk.iter().sum::<f64>() / chunk.len() as f64;
            for (i, r) in chunk.iter().enumerate() {
                adv[g * group + i] = (r - mean) / (std + 1e-6);
            }
        }
    }
    adv
}

/// The population standard deviation of a group's rewards, None when they are all
/// equal (below 1e-8): such a group has no signal.
fn group_spread(chunk: &[f64]) -> Option<f64> {
    let mean = chunk.iter().sum::<f64>() / chunk.len().max(1) as f64;
    let var = chunk.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / chunk.len().max(1) as f64;
    let std = var.sqrt();
    (std > 1e-8).then_some(std)
}

/// Which groups of a batch have signal (rewards that differ), in group order.
pub fn signal_groups(rewards: &[f64], group: usize) -> Vec<bool> {
    rewards
        .chunks(group)
        .map(|c| group_spread(c).is_some())
        .collect()
}

/// What one GRPO step reports (for progress bars and the stage summary).
#[derive(Clone, Debug, Default)]
pub struct StepStats {
    pub step: u64,
    pub loss: f64,
    pub reward_mean: f64,
    pub valid_rate: f64,
    pub grad_norm: f64,
    /// Share of groups with a reward difference.
    pub signal_share: f64,
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
        .map(|(r, o)| {
            let d = &data[idx[r.instance]];
            reward(cfg, &d.instance, r.plan.as_ref().ok(), o, &d.reference)
        })
        .collect();
    let adv = advantages(&rewards, cfg.group_size);
    let signal = signal_groups(&rewards, cfg.group_size);

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
    let micro =
        (cfg.micro_batch > 0 && cfg.micro_batch < rollouts.len()).then_some(cfg.micro_batch);
    let base_lp = if cfg.kl_coef > 0.0 {
        tch::no_grad(|| {
            let reference = |part: &[Rollout]| {
                state
                    .policy
                    .reference_log_probs(&instances, part)
                    .or_else(|| base.map(|b| b.log_probs(&instances, part)))
                    .map(|lp| lp.per_action.detach())
            };
            match micro {
                None => reference(&rollouts),
                // Per micro-batch, concatenated: the same actions in the same order.
                Some(m) => rollouts
                    .chunks(m)
                    .map(reference)
                    .collect::<Option<Vec<Tensor>>>()
                    .map(|parts| Tensor::cat(&parts, 0)),
            }
        })
    } else {
        None
    };
    let adv_t = Tensor::from_slice(&adv.iter().map(|&a| a as f32).collect::<Vec<_>>()).to(device);
    let n = rewards.len().max(1) as f64;
    let reward_mean = rewards.iter().sum::<f64>() / n;
    let mut grpo_stats = GrpoStats {
        samples: rewards.len() as u32,
        groups: signal.len() as u32,
        signal_groups: signal.iter().filter(|&&s| s).count() as u32,
        valid: outcomes.iter().filter(|o| o.valid).count() as u32,
        optimal: rollouts
            .iter()
            .zip(&outcomes)
            .filter(|(r, o)| o.optimal(&data[idx[r.instance]].reference, cfg.metric))
            .count() as u32,
        reward_mean: reward_mean.to_bits(),
        reward_std: (rewards
            .iter()
            .map(|r| (r - reward_mean).powi(2))
            .sum::<f64>()
            / n)
            .sqrt()
            .to_bits(),
        tokens: rollouts.iter().map(|r| r.actions.len() as u64).sum(),
        ..Default::default()
    };
    // `skip`: the loss is a mean over the tokens of groups with signal only (a per-rollout
    // 0/1 weight); `keep` takes the plain mean over every token, as before the option.
    let keep = match cfg.zero_variance {
        ZeroVariance::Skip => {
            grpo_stats.skipped_groups = grpo_stats.groups - grpo_stats.signal_groups;
            let w: Vec<f32> = (0..rollouts.len())
                .map(|i| signal[i / cfg.group_size] as u8 as f32)
                .collect();
            Some(Tensor::from_slice(&w).to(device))
        }
        ZeroVariance::Keep => None,
    };
    let mut stats = StepStats {
        step: state.global_step,
        reward_mean,
        valid_rate: grpo_stats.valid as f64 / n,
        signal_share: grpo_stats.signal_share(),
        ..Default::default()
    };
    for _epoch in 0..cfg.epochs {
        if let Some(m) = micro {
            let terms = accumulate_micro_batches(
                state,
                &instances,
                &rollouts,
                m,
                &old,
                base_lp.as_ref(),
                &adv_t,
                keep.as_ref(),
                cfg,
            );
            let grad_norm = state.adam.update(state.policy.vars());
            state.global_step += 1;
            events.push(StepRecord::GradientStep(GradientStep {
                step: state.global_step,
                params: super::checkpoint::param_hash(state.policy.vars()),
                loss: terms.loss.to_bits(),
                policy_loss: terms.policy_loss.to_bits(),
                kl: terms.kl.to_bits(),
                entropy: terms.entropy.to_bits(),
                grad_norm: grad_norm.to_bits(),
                reward_mean: stats.reward_mean.to_bits(),
            }));
            stats.loss = terms.loss;
            stats.grad_norm = grad_norm;
            grpo_stats.step = state.global_step;
            grpo_stats.kl = terms.kl.to_bits();
            grpo_stats.clip_fraction = terms.clip_fraction.to_bits();
            continue;
        }
        let lp = state.policy.log_probs(&instances, &rollouts);
        let adv_a = adv_t.index_select(0, &lp.rollout_of);
        let weight = keep.as_ref().map(|w| w.index_select(0, &lp.rollout_of));
        let token_mean = |t: &Tensor| match &weight {
            Some(w) => (t * w).sum(Kind::Float) / w.sum(Kind::Float).clamp_min(1.0),
            None => t.mean(Kind::Float),
        };
        let ratio = (&lp.per_action - &old).exp();
        let unclipped = &ratio * &adv_a;
        let clipped = ratio.clamp(1.0 - cfg.clip_eps, 1.0 + cfg.clip_eps) * &adv_a;
        let policy_loss = -token_mean(&unclipped.minimum(&clipped));
        // A token is clipped when the clipped term is the smaller one and differs.
        let held = (ratio.gt(1.0 + cfg.clip_eps).logical_and(&adv_a.gt(0.0)))
            .logical_or(&ratio.lt(1.0 - cfg.clip_eps).logical_and(&adv_a.lt(0.0)))
            .to_kind(Kind::Float);
        let clip_fraction = tch::no_grad(|| token_mean(&held));
        let kl = match &base_lp {
            // k3 estimator of KL(pi || base): exp(b - p) - (b - p) - 1 >= 0.
            Some(b) => {
                let d = b - &lp.per_action;
                token_mean(&(d.exp() - &d - 1.0))
            }
            None => Tensor::zeros([], (Kind::Float, device)),
        };
        let entropy = token_mean(&lp.entropy);
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
        grpo_stats.step = state.global_step;
        grpo_stats.kl = k.to_bits();
        grpo_stats.clip_fraction = scalar(&clip_fraction).to_bits();
    }
    events.push(StepRecord::GrpoStats(grpo_stats));
    (events, stats)
}

/// The loss terms of one update, each a token mean over the whole batch.
struct Terms {
    loss: f64,
    policy_loss: f64,
    kl: f64,
    entropy: f64,
    clip_fraction: f64,
}

/// One update's gradients accumulated over micro-batches of `micro` rollouts: each
/// micro-batch's token sums are divided by the *whole batch's* token count (or signal
/// weight under `skip`), so the summed loss is the batch's token mean, as without
/// micro-batches (up to float summation order). Leaves the gradients in the variables.
#[allow(clippy::too_many_arguments)]
fn accumulate_micro_batches(
    state: &TrainState,
    instances: &[Instance],
    rollouts: &[Rollout],
    micro: usize,
    old: &Tensor,
    base_lp: Option<&Tensor>,
    adv_t: &Tensor,
    keep: Option<&Tensor>,
    cfg: &GrpoConfig,
) -> Terms {
    let lens: Vec<i64> = rollouts.iter().map(|r| r.actions.len() as i64).collect();
    // The whole batch's denominator: every action, or every action of a signal group.
    let denom = match keep {
        Some(w) => {
            let per: Vec<f32> =
                Vec::<f32>::try_from(w.to_device(tch::Device::Cpu)).expect("f32 weights");
            per.iter()
                .zip(&lens)
                .map(|(w, &n)| *w as f64 * n as f64)
                .sum::<f64>()
                .max(1.0)
        }
        None => lens.iter().sum::<i64>().max(1) as f64,
    };
    super::adam::Adam::zero_grad(state.policy.vars());
    let mut t = Terms {
        loss: 0.0,
        policy_loss: 0.0,
        kl: 0.0,
        entropy: 0.0,
        clip_fraction: 0.0,
    };
    let mut action = 0i64;
    for (c, part) in rollouts.chunks(micro).enumerate() {
        let first = (c * micro) as i64;
        let actions: i64 = lens[c * micro..c * micro + part.len()].iter().sum();
        if actions == 0 {
            continue;
        }
        let lp = state.policy.log_probs(instances, part);
        let old_p = old.narrow(0, action, actions);
        let adv_a = adv_t
            .narrow(0, first, part.len() as i64)
            .index_select(0, &lp.rollout_of);
        let weight = keep.map(|w| {
            w.narrow(0, first, part.len() as i64)
                .index_select(0, &lp.rollout_of)
        });
        let token_sum = |x: &Tensor| match &weight {
            Some(w) => (x * w).sum(Kind::Float) / denom,
            None => x.sum(Kind::Float) / denom,
        };
        let ratio = (&lp.per_action - &old_p).exp();
        let unclipped = &ratio * &adv_a;
        let clipped = ratio.clamp(1.0 - cfg.clip_eps, 1.0 + cfg.clip_eps) * &adv_a;
        let policy_loss = -token_sum(&unclipped.minimum(&clipped));
        let held = (ratio.gt(1.0 + cfg.clip_eps).logical_and(&adv_a.gt(0.0)))
            .logical_or(&ratio.lt(1.0 - cfg.clip_eps).logical_and(&adv_a.lt(0.0)))
            .to_kind(Kind::Float);
        let kl = match base_lp {
            Some(b) => {
                let d = b.narrow(0, action, actions) - &lp.per_action;
                token_sum(&(d.exp() - &d - 1.0))
            }
            None => Tensor::zeros([], (Kind::Float, lp.per_action.device())),
        };
        let entropy = token_sum(&lp.entropy);
        let loss = &policy_loss + &kl * cfg.kl_coef - &entropy * cfg.entropy_coef;
        loss.backward();
        t.loss += loss.double_value(&[]);
        t.policy_loss += policy_loss.double_value(&[]);
        t.kl += kl.double_value(&[]);
        t.entropy += entropy.double_value(&[]);
        t.clip_fraction += tch::no_grad(|| token_sum(&held)).double_value(&[]);
        action += actions;
    }
    t
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
    fn cfg() -> GrpoConfig {
        GrpoConfig {
            steps: 1,
            lr: 1e-4,
            group_size: 4,
            batch_size: 1,
            clip_eps: 0.2,
            kl_coef: 0.0,
            entropy_coef: 0.0,
            epochs: 1,
            valid_reward: 1.0,
            optimal_bonus: 0.25,
            format_reward: 0.1,
            agent_reward: 0.5,
            cost_reward: 0.5,
            zero_variance: ZeroVariance::Keep,
            metric: CostMetric::SumOfCosts,
            checkpoint_every: 1,
            micro_batch: 0,
        }
    }

    fn moves(s: &[&str]) -> Plan {
        Plan {
            moves: s
                .iter()
                .map(|x| {
                    x.chars()
                        .map(|c| crate::env::Move::from_letter(c).unwrap())
                        .collect()
                })
                .collect(),
        }
    }

    /// Each term of the shaped reward on hand-made plans for one 3x3 instance with a hole
    /// in the middle: agent 1 (0,0) -> (0,2), agent 2 (2,0) -> (2,2); optimum 2 + 2.
    #[test]
    fn shaped_reward_terms() {
        let inst = Instance::try_from(crate::env::instance::InstanceJson {
            size: 3,
            grid: vec!["FFF".into(), "FHF".into(), "FFF".into()],
            agents: vec![
                crate::env::instance::AgentSpec {
                    start: [0, 0],
                    goal: [0, 2],
                },
                crate::env::instance::AgentSpec {
                    start: [2, 0],
                    goal: [2, 2],
                },
            ],
        })
        .unwrap();
        let reference = Reference {
            sum_of_costs: 4,
            makespan: 2,
        };
        let c = cfg();
        let r = |p: Option<&Plan>| {
            let o = match p {
                Some(p) => crate::env::simulate::simulate(&inst, p),
                None => Outcome::failed(crate::env::simulate::Failure {
                    kind: crate::env::FailureKind::ParseError,
                    t: 0,
                    agents: vec![],
                    detail: String::new(),
                }),
            };
            reward(&c, &inst, p, &o, &reference)
        };
        let close = |a: f64, b: f64| assert!((a - b).abs() < 1e-12, "{a} != {b}");
        // Unparseable: nothing.
        close(r(None), 0.0);
        // Parses, nobody arrives (agent 1 falls into the hole, agent 2 stops short): format only.
        close(r(Some(&moves(&["DR", "R"]))), 0.1);
        // Agent 1 home, agent 2 short of its goal: format + half the agent term.
        close(r(Some(&moves(&["RR", "R"]))), 0.1 + 0.25);
        // Valid and optimal: every term, cost ratio 1.
        close(r(Some(&moves(&["RR", "RR"]))), 0.1 + 0.5 + 1.0 + 0.5 + 0.25);
        // Valid with a detour (agent 2 waits twice: cost 2 + 4 = 6): cost term 0.5 * 4/6,
        // no optimality bonus.
        close(
            r(Some(&moves(&["RR", "WWRR"]))),
            0.1 + 0.5 + 1.0 + 0.5 * 4.0 / 6.0,
        );
    }

    /// Zero-variance groups are counted; `skip` records them as skipped and leaves
    /// the others' advantages untouched.
    #[test]
    fn zero_variance_groups_are_counted() {
        let rewards = [1.0, 1.0, 1.0, 1.0, 0.0, 1.5, 0.0, 0.0, 0.2, 0.2, 0.2, 0.2];
        assert_eq!(signal_groups(&rewards, 4), vec![false, true, false]);
        let adv = advantages(&rewards, 4);
        assert!(adv[..4].iter().chain(&adv[8..]).all(|&a| a == 0.0));
        assert!(adv[5] > 0.0 && adv[4] < 0.0);
        // A group differing by less than 1e-8 has no signal either.
        assert_eq!(signal_groups(&[0.3, 0.3 + 1e-12], 2), vec![false]);
    }
}
