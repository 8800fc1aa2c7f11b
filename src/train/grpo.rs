//! GRPO, top to bottom in one place (CleanRL style): [`train_stage`] is a stage's loop
//! (resume, adapters, optimiser, KL reference, steps, durable points), [`step`] one
//! gradient step, [`GrpoConfig`] every hyper-parameter, as the plan names them.
//!
//! Per gradient step: take a batch of training instances (a seeded permutation of the
//! stage's set, a pure function of (stage, step)); sample G plans per instance; score
//! each with the fixed, shaped, verifiable reward ([`reward`]: format, per-agent credit,
//! validity, cost relative to the solver's optimum); normalise rewards within each
//! instance's group; optimise the clipped-ratio objective per action, with an optional
//! KL penalty to the base model and an entropy bonus; with `rehearsal_coef`, each update
//! also takes that weight times the imitation loss of a batch of solver plans from the
//! pretraining mix ([`super::warmup::rehearse`], PPO-ptx). Groups whose rewards are all equal
//! carry no gradient: they are counted, with `zero_variance = skip` left out of the
//! loss, and with `drop` out of the batch before the KL reference and the training
//! forward ([`training_rows`]: the same objective, fewer rows computed). Each step
//! ends with a [`GrpoStats`] record (reward spread, groups with signal, KL, clip
//! fraction, tokens).
//!
//! Loss normalisation is token-level: every term is the mean over all actions (tokens)
//! of the whole batch, so long and short answers weigh per token, not per answer (DAPO's
//! token-level normalisation). The "old" log-probs are those recorded at sampling when
//! the policy records them (the `lm` policy), else one no-grad forward. Every
//! sampled plan is recorded as a trajectory, every optimiser update as a gradient step
//! (parameter hash, loss terms as exact bits, gradient norm).
use super::batches::{batch_indices, named};
use super::eval::outcome_of;
use super::lm::model::LoraSpec;
use super::policy::{Policy, Rollout};
use super::timing::{prompt_tokens, sampling_work, scoring_work, Phases};
use super::{TrainError, TrainState};
use crate::env::simulate::agent_credit;
use crate::env::{CostMetric, Instance, Outcome, Plan, Reference, Solved};
use crate::record::timing::phase;
use crate::record::trainer::{GradientStep, GrpoStats, StepRecord, Trajectory, TrajectoryBatch};
use crate::record::Hash;
use crate::seed::Seed;
use std::borrow::Cow;
use tch::{Kind, Tensor};

pub use crate::plan::trainer::{GrpoConfig, ZeroVariance};

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
    metric: CostMetric,
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
        let (cost, best) = match metric {
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
        if outcome.optimal(reference, metric) {
            r += cfg.optimal_bonus;
        }
    }
    r
}

/// Group-normalised advantages: (r - mean) / (std + `advantage_eps`) within each
/// instance's `group_size` samples; a group without signal (see [`signal_groups`])
/// has advantage 0.
pub fn advantages(rewards: &[f64], cfg: &GrpoConfig) -> Vec<f64> {
    let group = cfg.group_size as usize;
    let mut adv = vec![0.0; rewards.len()];
    for (g, chunk) in rewards.chunks(group).enumerate() {
        if let Some(std) = group_spread(chunk, cfg.signal_eps) {
            let mean = chunk.iter().sum::<f64>() / chunk.len() as f64;
            for (i, r) in chunk.iter().enumerate() {
                adv[g * group + i] = (r - mean) / (std + cfg.advantage_eps);
            }
        }
    }
    adv
}

/// The population standard deviation of a group's rewards, None when it is at most
/// `signal_eps` (the rewards are all equal): such a group has no signal.
fn group_spread(chunk: &[f64], signal_eps: f64) -> Option<f64> {
    let mean = chunk.iter().sum::<f64>() / chunk.len().max(1) as f64;
    let var = chunk.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / chunk.len().max(1) as f64;
    let std = var.sqrt();
    (std > signal_eps).then_some(std)
}

/// Which groups of a batch have signal (rewards that differ), in group order.
pub fn signal_groups(rewards: &[f64], cfg: &GrpoConfig) -> Vec<bool> {
    rewards
        .chunks(cfg.group_size as usize)
        .map(|c| group_spread(c, cfg.signal_eps).is_some())
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
    /// Tokens the step generated (0 for a warm-up step, which generates none).
    pub tokens: u64,
}

/// One GRPO step: sample, score, update. Returns the events to record (trajectories
/// first, then one gradient step per optimiser update) and the step's statistics.
/// Untimed: [`step_timed`] is the same step with its phases measured.
#[allow(clippy::too_many_arguments)]
pub fn step(
    state: &mut TrainState,
    base: Option<&dyn Policy>,
    cfg: &GrpoConfig,
    metric: CostMetric,
    data: &[Solved],
    data_blobs: &[Hash],
    rehearsal: &[Solved],
    stage_seed: Seed,
    step: u64,
) -> (Vec<StepRecord>, StepStats) {
    step_timed(
        state,
        base,
        cfg,
        metric,
        data,
        data_blobs,
        rehearsal,
        stage_seed,
        step,
        &mut Phases::off(),
    )
}

/// [`step`], adding its phases to `phases` (see [`super::timing`]): `generation` (the
/// rollouts, with their tokens), `reward`, `old_log_probs` (when the policy did not
/// record them), `kl_reference`, `training` (forward and backward), `optimiser` and
/// `parameter_hash`. The records and statistics are the same bits as [`step`]'s.
/// `rehearsal`: the solver plans of the rehearsal term (`cfg.rehearsal_coef`; empty or
/// a weight of 0: none), timed with training.
///
/// The body is the algorithm, one named part after another, each wrapped in its phase.
/// `training` also covers, without counting another call, putting recorded log-probs on
/// the device, building the update's inputs, and reading back a whole-batch update's
/// loss terms (after the optimiser's work is queued).
#[allow(clippy::too_many_arguments)]
pub fn step_timed(
    state: &mut TrainState,
    base: Option<&dyn Policy>,
    cfg: &GrpoConfig,
    metric: CostMetric,
    data: &[Solved],
    data_blobs: &[Hash],
    rehearsal: &[Solved],
    stage_seed: Seed,
    step: u64,
    phases: &mut Phases,
) -> (Vec<StepRecord>, StepStats) {
    // 1. The batch and its rollouts.
    let batch = phases.time(phase::GENERATION, || {
        sample_batch(state, cfg, data, stage_seed, step)
    });
    // Prompt tokens, for the work of the phases (only when timing).
    let prompts = phases
        .is_on()
        .then(|| prompt_tokens(state.policy.as_ref(), &batch.instances))
        .flatten();
    if phases.is_on() {
        let work = sampling_work(state.policy.as_ref(), prompts.as_deref(), &batch.rollouts);
        phases.count(phase::GENERATION, work);
    }
    // 2. Rewards from the testbed, advantages within each group; 3. the trajectories,
    //    recorded before the update they feed.
    let (scores, mut events) = phases.time(phase::REWARD, || {
        let scores = score(cfg, metric, data, &batch);
        let trajectories =
            trajectory_batch(state.global_step, metric, data, data_blobs, &batch, &scores);
        (scores, vec![StepRecord::Trajectories(trajectories)])
    });

    // 4. The rows the update trains on (every rollout, or under `drop` those of the
    //    groups with signal) and the clipped-ratio objective's inputs over them. Old
    //    log-probs are the sampling policy's.
    let rows = training_rows(cfg, &batch.rollouts, &scores);
    let trained = scoring_work(prompts.as_deref(), &rows);
    let old = if recorded(&rows) {
        // Putting recorded log-probs on the device is part of training.
        phases.time_resumed(phase::TRAINING, || {
            recorded_log_probs(&rows, state.policy.device())
        })
    } else {
        let old = phases.time(phase::OLD_LOG_PROBS, || {
            old_log_probs(state, &batch.instances, &rows)
        });
        phases.count(phase::OLD_LOG_PROBS, trained);
        old
    };
    let micro = micro_batches(
        cfg,
        rows.len(),
        (cfg.micro_batch_tokens > 0)
            .then(|| state.policy.row_tokens(&batch.instances, &rows))
            .as_deref(),
    );
    let base_lp = if cfg.kl_coef > 0.0 && !rows.is_empty() {
        let lp = phases.time(phase::KL_REFERENCE, || {
            kl_reference(state, base, &batch.instances, &rows, micro.as_deref())
        });
        phases.count(phase::KL_REFERENCE, trained);
        lp
    } else {
        None
    };
    let (objective, mut grpo_stats, mut stats) = phases.time_resumed(phase::TRAINING, || {
        let (adv, keep) = update_weights(cfg, &scores, &rows, state.policy.device());
        let (grpo_stats, stats) = step_stats(state.global_step, cfg, metric, data, &batch, &scores);
        let objective = Objective {
            old,
            base: base_lp,
            adv,
            keep,
            micro,
        };
        (objective, grpo_stats, stats)
    });

    // 5. The updates, each through the one update path: forward and backward (with the
    //    rehearsal term), the optimiser, the loss terms read back, the parameter hash and
    //    the gradient step's record.
    for epoch in 0..cfg.epochs {
        let update = step * cfg.epochs as u64 + epoch as u64;
        let pending = phases.time(phase::TRAINING, || {
            backward(state, cfg, &batch.instances, &rows, &objective, || {
                rehearse(state, cfg, rehearsal, stage_seed, update)
            })
        });
        let grad_norm = phases.time(phase::OPTIMISER, || state.adam.update(state.policy.vars()));
        state.global_step += 1;
        let terms = match pending {
            Pending::Read(terms) => terms,
            // Read back with the training phase (waiting for its kernels).
            Pending::OnDevice { terms, rehearsed } => {
                phases.time_resumed(phase::TRAINING, || terms.read(rehearsed))
            }
        };
        phases.count(phase::TRAINING, trained);
        let params = phases.time(phase::PARAMETER_HASH, || {
            super::checkpoint::param_hash(state.policy.vars())
        });
        events.push(StepRecord::GradientStep(GradientStep {
            step: state.global_step,
            params,
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
    }
    events.push(StepRecord::GrpoStats(grpo_stats));
    (events, stats)
}

/// The statistics a step's records end with (see [`step`]).
pub fn recorded_stats(records: &[StepRecord]) -> &GrpoStats {
    match records.last() {
        Some(StepRecord::GrpoStats(s)) => s,
        _ => panic!("a GRPO step's records end with its statistics"),
    }
}

/// A step's batch: the indices of its instances in the stage's set, the instances as
/// the policy reads them (agent names drawn per step), and their rollouts
/// (`group_size` per instance, instance-major).
struct Batch {
    idx: Vec<usize>,
    instances: Vec<Instance>,
    rollouts: Vec<Rollout>,
}

/// Part 1: the batch of step `step` (a seeded permutation of the stage's set, a pure
/// function of (stage, step)) and its sampled plans.
fn sample_batch(
    state: &TrainState,
    cfg: &GrpoConfig,
    data: &[Solved],
    stage_seed: Seed,
    step: u64,
) -> Batch {
    let idx = batch_indices(
        data.len(),
        cfg.batch_size as usize,
        stage_seed.child("order", 0),
        step,
    );
    let instances = named(
        data,
        &idx,
        cfg.agent_names,
        stage_seed.child("agent_names", step),
    );
    let rollouts = state.policy.sample(
        &instances,
        cfg.group_size as usize,
        false,
        stage_seed.child("rollout", step),
    );
    Batch {
        idx,
        instances,
        rollouts,
    }
}

/// A batch's scores: each rollout's outcome and reward, in rollout order, each
/// rollout's advantage and which groups have signal.
struct Scores {
    outcomes: Vec<Outcome>,
    rewards: Vec<f64>,
    adv: Vec<f64>,
    signal: Vec<bool>,
}

/// Part 2: the testbed's verdict on every rollout, its [`reward`], and the
/// group-normalised [`advantages`].
fn score(cfg: &GrpoConfig, metric: CostMetric, data: &[Solved], batch: &Batch) -> Scores {
    let outcomes: Vec<Outcome> = batch
        .rollouts
        .iter()
        .map(|r| outcome_of(&batch.instances[r.instance], r))
        .collect();
    let rewards: Vec<f64> = batch
        .rollouts
        .iter()
        .zip(&outcomes)
        .map(|(r, o)| {
            let d = &data[batch.idx[r.instance]];
            reward(
                cfg,
                metric,
                &d.instance,
                r.plan.as_ref().ok(),
                o,
                &d.reference,
            )
        })
        .collect();
    let adv = advantages(&rewards, cfg);
    let signal = signal_groups(&rewards, cfg);
    Scores {
        outcomes,
        rewards,
        adv,
        signal,
    }
}

/// Part 3: the batch's trajectories as recorded at global step `step`.
fn trajectory_batch(
    step: u64,
    metric: CostMetric,
    data: &[Solved],
    data_blobs: &[Hash],
    batch: &Batch,
    scores: &Scores,
) -> TrajectoryBatch {
    TrajectoryBatch {
        step,
        instances: batch.idx.iter().map(|&i| data_blobs[i]).collect(),
        trajectories: batch
            .rollouts
            .iter()
            .zip(&scores.outcomes)
            .zip(&scores.rewards)
            .map(|((r, o), &rew)| {
                let reference = &data[batch.idx[r.instance]].reference;
                Trajectory {
                    instance: r.instance as u32,
                    plan: r.plan_bytes.clone(),
                    valid: o.valid,
                    optimal: o.optimal(reference, metric),
                    failure: o.failure_kind(),
                    cost: o.sum_of_costs,
                    optimal_cost: reference.sum_of_costs,
                    reward_bits: (rew as f32).to_bits(),
                }
            })
            .collect(),
    }
}

/// Whether the policy recorded every action's log-prob at sampling (the `lm` policy).
fn recorded(rollouts: &[Rollout]) -> bool {
    rollouts.iter().all(|r| r.logprobs.len() == r.actions.len())
}

/// Part 4, old log-probs as recorded at sampling, on `device`.
fn recorded_log_probs(rollouts: &[Rollout], device: tch::Device) -> Tensor {
    let flat: Vec<f32> = rollouts
        .iter()
        .flat_map(|r| r.logprobs.iter().copied())
        .collect();
    Tensor::from_slice(&flat).to(device)
}

/// Part 4, old log-probs the policy did not record: one no-grad forward.
fn old_log_probs(state: &TrainState, instances: &[Instance], rollouts: &[Rollout]) -> Tensor {
    tch::no_grad(|| {
        state
            .policy
            .log_probs(instances, rollouts)
            .per_action
            .detach()
    })
}

/// Part 4, the KL reference's log-probs of every action: the policy's own frozen base
/// when it carries one, else `base`'s (None without either). Per micro-batch when the
/// update splits (`micro`), concatenated: the same actions in the same order.
fn kl_reference(
    state: &TrainState,
    base: Option<&dyn Policy>,
    instances: &[Instance],
    rollouts: &[Rollout],
    micro: Option<&[std::ops::Range<usize>]>,
) -> Option<Tensor> {
    tch::no_grad(|| {
        let reference = |part: &[Rollout]| {
            state
                .policy
                .reference_log_probs(instances, part)
                .or_else(|| base.map(|b| b.log_probs(instances, part)))
                .map(|lp| lp.per_action.detach())
        };
        match micro {
            None => reference(rollouts),
            Some(parts) => parts
                .iter()
                .map(|r| reference(&rollouts[r.clone()]))
                .collect::<Option<Vec<Tensor>>>()
                .map(|parts| Tensor::cat(&parts, 0)),
        }
    })
}

/// Part 4, the rows an update trains on, in rollout order: every rollout, or under
/// `drop` the rollouts of the groups with signal (the others weigh nothing in `skip`'s
/// objective, so they are neither scored by the KL reference nor trained).
/// Dereferences to the rows' rollouts.
struct Rows<'b> {
    rollouts: Cow<'b, [Rollout]>,
    /// Each row's place in the batch's rollouts.
    index: Vec<usize>,
}

impl std::ops::Deref for Rows<'_> {
    type Target = [Rollout];
    fn deref(&self) -> &[Rollout] {
        &self.rollouts
    }
}

/// The rows of `rollouts` an update trains on under `cfg` (see [`Rows`]).
fn training_rows<'b>(cfg: &GrpoConfig, rollouts: &'b [Rollout], scores: &Scores) -> Rows<'b> {
    if cfg.zero_variance != ZeroVariance::Drop {
        return Rows {
            rollouts: Cow::Borrowed(rollouts),
            index: (0..rollouts.len()).collect(),
        };
    }
    let group = cfg.group_size as usize;
    let index: Vec<usize> = (0..rollouts.len())
        .filter(|&i| scores.signal[i / group])
        .collect();
    Rows {
        rollouts: Cow::Owned(index.iter().map(|&i| rollouts[i].clone()).collect()),
        index,
    }
}

/// Part 4, the per-row weights of the objective on `device`: each row's advantage, and
/// under `skip` a 0/1 weight per row (1 in groups with signal), so the loss is a mean
/// over the tokens of groups with signal only; `keep` and `drop` (None) take the plain
/// mean over every row's tokens (under `drop` every row has signal).
fn update_weights(
    cfg: &GrpoConfig,
    scores: &Scores,
    rows: &Rows,
    device: tch::Device,
) -> (Tensor, Option<Tensor>) {
    let group = cfg.group_size as usize;
    let adv: Vec<f32> = rows.index.iter().map(|&i| scores.adv[i] as f32).collect();
    let adv = Tensor::from_slice(&adv).to(device);
    let keep = match cfg.zero_variance {
        ZeroVariance::Skip => {
            let w: Vec<f32> = rows
                .index
                .iter()
                .map(|&i| scores.signal[i / group] as u8 as f32)
                .collect();
            Some(Tensor::from_slice(&w).to(device))
        }
        ZeroVariance::Keep | ZeroVariance::Drop => None,
    };
    (adv, keep)
}

/// The step's statistics before its updates (each update fills in its loss terms):
/// the [`GrpoStats`] record and the [`StepStats`] report, at global step `step`.
fn step_stats(
    step: u64,
    cfg: &GrpoConfig,
    metric: CostMetric,
    data: &[Solved],
    batch: &Batch,
    scores: &Scores,
) -> (GrpoStats, StepStats) {
    let rewards = &scores.rewards;
    let n = rewards.len().max(1) as f64;
    let reward_mean = rewards.iter().sum::<f64>() / n;
    let mut grpo_stats = GrpoStats {
        samples: rewards.len() as u32,
        groups: scores.signal.len() as u32,
        signal_groups: scores.signal.iter().filter(|&&s| s).count() as u32,
        valid: scores.outcomes.iter().filter(|o| o.valid).count() as u32,
        optimal: batch
            .rollouts
            .iter()
            .zip(&scores.outcomes)
            .filter(|(r, o)| o.optimal(&data[batch.idx[r.instance]].reference, metric))
            .count() as u32,
        reward_mean: reward_mean.to_bits(),
        reward_std: (rewards
            .iter()
            .map(|r| (r - reward_mean).powi(2))
            .sum::<f64>()
            / n)
            .sqrt()
            .to_bits(),
        tokens: batch.rollouts.iter().map(|r| r.actions.len() as u64).sum(),
        ..Default::default()
    };
    if cfg.zero_variance.leaves_the_loss() {
        grpo_stats.skipped_groups = grpo_stats.groups - grpo_stats.signal_groups;
    }
    let stats = StepStats {
        step,
        reward_mean,
        valid_rate: grpo_stats.valid as f64 / n,
        signal_share: grpo_stats.signal_share(),
        tokens: grpo_stats.tokens,
        ..Default::default()
    };
    (grpo_stats, stats)
}

/// What every update of a step optimises against: the old log-probs, the KL
/// reference's (None without a KL term), the advantages, the signal weights (`skip`)
/// and the micro-batches (None: the batch trains whole), each over the batch's actions
/// or rollouts in order.
struct Objective {
    old: Tensor,
    base: Option<Tensor>,
    adv: Tensor,
    keep: Option<Tensor>,
    micro: Option<Vec<std::ops::Range<usize>>>,
}

/// The rehearsal term of update `update` (counted over the stage's updates): its
/// weighted loss, its gradients added to those already accumulated (0 without
/// rehearsal).
fn rehearse(
    state: &TrainState,
    cfg: &GrpoConfig,
    rehearsal: &[Solved],
    stage_seed: Seed,
    update: u64,
) -> f64 {
    if cfg.rehearsal_coef == 0.0 || rehearsal.is_empty() {
        return 0.0;
    }
    let nll = super::warmup::rehearse(
        state,
        rehearsal,
        cfg.rehearsal_batch as usize,
        cfg.rehearsal_coef,
        stage_seed.child("rehearsal", 1),
        update,
    );
    cfg.rehearsal_coef * nll
}

/// An update's loss terms once its gradients are in: read already (micro-batches read
/// each part's as they go), or still on the device (a whole-batch forward's, read after
/// the optimiser's work is queued) with the rehearsal term's weighted loss.
enum Pending {
    Read(Terms),
    OnDevice { terms: LossTerms, rehearsed: f64 },
}

/// Part 5, one update's gradients: the objective's backward over the rows (`rows`, see
/// [`training_rows`]) whole or in micro-batches, then the rehearsal term's
/// (`rehearse`), in that order.
fn backward(
    state: &TrainState,
    cfg: &GrpoConfig,
    instances: &[Instance],
    rows: &[Rollout],
    objective: &Objective,
    rehearse: impl FnOnce() -> f64,
) -> Pending {
    if rows.is_empty() {
        // Under `drop`, a batch without signal trains nothing: zero gradients, as
        // `skip`'s weights give them, and no forward.
        super::adam::Adam::zero_grad(state.policy.vars());
        let rehearsed = rehearse();
        return Pending::Read(Terms {
            loss: rehearsed,
            ..Terms::default()
        });
    }
    if let Some(parts) = &objective.micro {
        let mut terms = accumulate_micro_batches(
            state,
            instances,
            rows,
            parts,
            &objective.old,
            objective.base.as_ref(),
            &objective.adv,
            objective.keep.as_ref(),
            cfg,
        );
        terms.loss += rehearse();
        return Pending::Read(terms);
    }
    let lp = state.policy.log_probs(instances, rows);
    let adv_a = objective.adv.index_select(0, &lp.rollout_of);
    let weight = objective
        .keep
        .as_ref()
        .map(|w| w.index_select(0, &lp.rollout_of));
    let token_mean = |t: &Tensor| match &weight {
        Some(w) => (t * w).sum(Kind::Float) / w.sum(Kind::Float).clamp_min(1.0),
        None => t.mean(Kind::Float),
    };
    let terms = clipped_loss(
        &lp,
        &objective.old,
        &adv_a,
        objective.base.as_ref(),
        cfg,
        token_mean,
    );
    super::adam::Adam::zero_grad(state.policy.vars());
    if lp.per_action.numel() > 0 {
        terms.loss.backward();
    }
    let rehearsed = rehearse();
    Pending::OnDevice { terms, rehearsed }
}

/// The loss of one forward, as tensors (see [`clipped_loss`]).
pub struct LossTerms {
    pub loss: Tensor,
    pub policy_loss: Tensor,
    pub kl: Tensor,
    pub entropy: Tensor,
    pub clip_fraction: Tensor,
}

impl LossTerms {
    /// The terms as numbers (0 for a forward without actions), `rehearsed` added to
    /// the loss.
    fn read(&self, rehearsed: f64) -> Terms {
        let scalar = |t: &Tensor| {
            if t.numel() == 0 {
                0.0
            } else {
                t.double_value(&[])
            }
        };
        Terms {
            loss: scalar(&self.loss) + rehearsed,
            policy_loss: scalar(&self.policy_loss),
            kl: scalar(&self.kl),
            entropy: scalar(&self.entropy),
            clip_fraction: scalar(&self.clip_fraction),
        }
    }
}

/// The GRPO objective of one forward, the one place it is written: the clipped-ratio
/// policy loss, the k3 KL estimate to the base, and the entropy bonus, every per-token
/// term reduced by `reduce` (the batch's token mean, or a micro-batch's share of it).
/// `old` and `base` hold the same actions as `lp`, in its order. Engineer RL
/// (`engineer::rl`) optimises the same objective on engineer replies.
pub fn clipped_loss(
    lp: &super::policy::LogProbs,
    old: &Tensor,
    adv_a: &Tensor,
    base: Option<&Tensor>,
    cfg: &GrpoConfig,
    reduce: impl Fn(&Tensor) -> Tensor,
) -> LossTerms {
    let ratio = (&lp.per_action - old).exp();
    let unclipped = &ratio * adv_a;
    let clipped = ratio.clamp(1.0 - cfg.clip_eps, 1.0 + cfg.clip_eps) * adv_a;
    let policy_loss = -reduce(&unclipped.minimum(&clipped));
    // A token is clipped when the clipped term is the smaller one and differs.
    let held = (ratio.gt(1.0 + cfg.clip_eps).logical_and(&adv_a.gt(0.0)))
        .logical_or(&ratio.lt(1.0 - cfg.clip_eps).logical_and(&adv_a.lt(0.0)))
        .to_kind(Kind::Float);
    let clip_fraction = tch::no_grad(|| reduce(&held));
    let kl = match base {
        // k3 estimator of KL(pi || base): exp(b - p) - (b - p) - 1 >= 0.
        Some(b) => {
            let d = b - &lp.per_action;
            reduce(&(d.exp() - &d - 1.0))
        }
        None => Tensor::zeros([], (Kind::Float, lp.per_action.device())),
    };
    let entropy = reduce(&lp.entropy);
    let loss = &policy_loss + &kl * cfg.kl_coef - &entropy * cfg.entropy_coef;
    LossTerms {
        loss,
        policy_loss,
        kl,
        entropy,
        clip_fraction,
    }
}

/// The loss terms of one update, each a token mean over the whole batch.
#[derive(Default)]
struct Terms {
    loss: f64,
    policy_loss: f64,
    kl: f64,
    entropy: f64,
    clip_fraction: f64,
}

/// The micro-batches of one update over `n` rollouts, as consecutive ranges in order,
/// or None when the batch trains whole. `micro_batch` rows each (None when that is 0 or
/// the whole batch); with `micro_batch_tokens` (and `row_tokens`, each rollout's row
/// length), as many consecutive rows as keep rows x the longest row within the budget,
/// at least one, and at most `micro_batch` rows where that is set.
pub fn micro_batches(
    cfg: &GrpoConfig,
    n: usize,
    row_tokens: Option<&[usize]>,
) -> Option<Vec<std::ops::Range<usize>>> {
    let rows = cfg.micro_batch as usize;
    let budget = cfg.micro_batch_tokens as usize;
    let Some(lens) = row_tokens.filter(|_| budget > 0) else {
        return (rows > 0 && rows < n)
            .then(|| (0..n).step_by(rows).map(|s| s..(s + rows).min(n)).collect());
    };
    assert_eq!(lens.len(), n, "one row length per rollout");
    let cap = if rows > 0 { rows } else { n.max(1) };
    let mut parts = Vec::new();
    let (mut start, mut longest) = (0, 0);
    for (i, &len) in lens.iter().enumerate() {
        let wider = longest.max(len);
        if i > start && ((i - start + 1) * wider > budget || i - start == cap) {
            parts.push(start..i);
            (start, longest) = (i, len);
        } else {
            longest = wider;
        }
    }
    if start < n {
        parts.push(start..n);
    }
    Some(parts)
}

/// One update's gradients accumulated over the micro-batches `parts` (ranges of
/// `rollouts`, see [`micro_batches`]): each
/// micro-batch's token sums are divided by the *whole batch's* token count (or signal
/// weight under `skip`), so the summed loss is the batch's token mean, as without
/// micro-batches (up to float summation order). Leaves the gradients in the variables.
#[allow(clippy::too_many_arguments)]
fn accumulate_micro_batches(
    state: &TrainState,
    instances: &[Instance],
    rollouts: &[Rollout],
    parts: &[std::ops::Range<usize>],
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
    let mut t = Terms::default();
    let mut action = 0i64;
    for range in parts {
        let part = &rollouts[range.clone()];
        let first = range.start as i64;
        let actions: i64 = lens[range.clone()].iter().sum();
        if actions == 0 {
            continue;
        }
        let old_p = old.narrow(0, action, actions);
        let base_p = base_lp.map(|b| b.narrow(0, action, actions));
        // The loss is built once, here, from the log-probs the policy hands over; the
        // policy runs its backward (whole, or within the plan's memory settings).
        let mut built: Option<LossTerms> = None;
        state.policy.backward_loss(instances, part, &mut |lp| {
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
            let terms = clipped_loss(lp, &old_p, &adv_a, base_p.as_ref(), cfg, token_sum);
            let loss = terms.loss.shallow_clone();
            built = Some(terms);
            loss
        });
        let terms = built.expect("backward_loss builds the loss once");
        t.loss += terms.loss.double_value(&[]);
        t.policy_loss += terms.policy_loss.double_value(&[]);
        t.kl += terms.kl.double_value(&[]);
        t.entropy += terms.entropy.double_value(&[]);
        t.clip_fraction += terms.clip_fraction.double_value(&[]);
        action += actions;
    }
    t
}

/// Where a GRPO stage starts, as its branch records it.
#[derive(Clone, Debug)]
pub struct StageStart {
    /// The previous stage's final checkpoint.
    pub from: Hash,
    /// This stage's last durable checkpoint, when resuming after a stop or a crash.
    pub resume: Option<Hash>,
    /// Stage 0's final checkpoint: the KL reference of a policy without adapters.
    pub base: Option<Hash>,
    /// The adapters to train (the plan's LoRA settings); added when the stage starts
    /// from a full-weights checkpoint.
    pub lora: Option<LoraSpec>,
}

/// What [`train_stage`] needs from the stage that runs it: checkpoints by hash, and
/// the records and durable points it hands back.
pub trait StageHost {
    type Error: From<TrainError>;
    /// The training state saved in checkpoint blob `checkpoint`.
    fn load(&self, checkpoint: &Hash) -> Result<TrainState, Self::Error>;
    /// Step `done` (counted from 1) produced `records` and `stats`: record them (durable
    /// when this returns). Returns true when the run must stop after this step.
    fn stepped(
        &mut self,
        done: u64,
        records: Vec<StepRecord>,
        stats: &StepStats,
    ) -> Result<bool, Self::Error>;
    /// A checkpoint after step `done`: save `state` and commit it.
    fn durable_point(&mut self, state: &TrainState, done: u64) -> Result<(), Self::Error>;
}

/// A GRPO stage, top to bottom. Returns the trained state, or None when the host
/// stopped after a step (a later call with `start.resume` at the last checkpoint goes
/// on exactly as if it never stopped: every step is a pure function of the state, the
/// stage seed and the step number, and the host meets the steps it recorded after
/// that checkpoint again). Its phases go to `phases`: `loading`
/// (checkpoints, adapters, the KL reference model), every step's ([`step_timed`]) and
/// `checkpointing` (the durable points).
#[allow(clippy::too_many_arguments)]
pub fn train_stage<H: StageHost>(
    cfg: &GrpoConfig,
    metric: CostMetric,
    start: &StageStart,
    data: &[Solved],
    data_blobs: &[Hash],
    rehearsal: &[Solved],
    stage_seed: Seed,
    host: &mut H,
    phases: &mut Phases,
) -> Result<Option<TrainState>, H::Error> {
    // 1. Resume from this stage's last durable checkpoint, else start from the previous
    //    stage's; a full-weights start under LoRA freezes those weights and adds fresh
    //    adapters (with a fresh optimiser over them).
    phases.begin(phase::LOADING);
    let loaded = (|| {
        let mut state = host.load(start.resume.as_ref().unwrap_or(&start.from))?;
        let stage_start_step = match start.resume {
            Some(_) => host.load(&start.from)?.global_step,
            None => {
                state = with_adapters(state, start.lora.clone(), start.from, stage_seed)?;
                state.global_step
            }
        };
        Ok::<_, H::Error>((state, stage_start_step))
    })();
    phases.end();
    let (mut state, stage_start_step) = loaded?;
    let first = (state.global_step - stage_start_step) / cfg.epochs as u64;

    // 2. The optimiser: the plan's Adam settings at this stage's learning rate (the
    //    moments come with the checkpoint).
    state.adam.config = cfg.adam();

    // 3. The KL reference: under LoRA the policy's own frozen base (no second model);
    //    otherwise stage 0's model, loaded beside it.
    let lora = state.policy.as_lm().is_some_and(|p| p.model.lora.is_some());
    let reference = match start.base {
        Some(b) if cfg.kl_coef > 0.0 && !lora => {
            Some(phases.time(phase::LOADING, || host.load(&b))?)
        }
        _ => None,
    };

    // 4. The steps, each durable as it ends, with a checkpoint every `checkpoint_every`
    //    of them (the last step's is the stage's end, which the host records itself). A
    //    stop asked for ends the stage after the step under way, except the last.
    for s in first..cfg.steps {
        let (records, stats) = step_timed(
            &mut state,
            reference.as_ref().map(|r| r.policy.as_ref()),
            cfg,
            metric,
            data,
            data_blobs,
            rehearsal,
            stage_seed,
            s,
            phases,
        );
        let done = s + 1;
        // Recording the step (its commit) is the `checkpointing` phase's, as every commit.
        let stop = phases.time(phase::CHECKPOINTING, || host.stepped(done, records, &stats))?;
        if done % cfg.checkpoint_every == 0 && done < cfg.steps {
            phases.time(phase::CHECKPOINTING, || host.durable_point(&state, done))?;
        }
        if stop && done < cfg.steps {
            return Ok(None);
        }
    }
    Ok(Some(state))
}

/// `state` with fresh LoRA adapters over its (frozen) weights when `lora` asks for
/// them and it has none yet; otherwise `state` itself.
fn with_adapters(
    state: TrainState,
    lora: Option<LoraSpec>,
    from: Hash,
    stage_seed: Seed,
) -> Result<TrainState, TrainError> {
    let Some(spec) = lora else {
        return Ok(state);
    };
    if state
        .policy
        .as_lm()
        .is_none_or(|lm| lm.model.lora.is_some())
    {
        return Ok(state);
    }
    let TrainState {
        policy,
        adam,
        global_step,
    } = state;
    let lm = super::lm::downcast(policy).expect("checked above");
    let lm = lm.into_lora(spec, from, stage_seed.child("lora", 0))?;
    let mut next = TrainState::new(Box::new(lm), adam.config);
    next.global_step = global_step;
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advantages_are_group_normalised() {
        let a = advantages(&[1.0, 0.0, 1.0, 0.0, 2.0, 2.0, 2.0, 2.0], &groups_of(4));
        assert!((a[0] - 1.0).abs() < 1e-4 && (a[1] + 1.0).abs() < 1e-4);
        assert_eq!(&a[4..], &[0.0; 4]);
    }

    #[test]
    #[allow(clippy::single_range_in_vec_init)] // one micro-batch of rows 0..8 is meant
    fn micro_batches_by_rows_or_by_tokens() {
        let cfg = |micro_batch, micro_batch_tokens| GrpoConfig {
            micro_batch,
            micro_batch_tokens,
            ..GrpoConfig::default()
        };
        // Rows alone: as before the token budget, whole when it covers the batch.
        assert_eq!(micro_batches(&cfg(0, 0), 10, None), None);
        assert_eq!(micro_batches(&cfg(10, 0), 10, None), None);
        assert_eq!(
            micro_batches(&cfg(4, 0), 10, None),
            Some(vec![0..4, 4..8, 8..10])
        );
        // Tokens: consecutive rows while rows x the longest stay within the budget; a
        // row over the budget alone.
        let lens = [100, 100, 100, 300, 50, 50, 500, 10];
        assert_eq!(
            micro_batches(&cfg(0, 300), 8, Some(&lens)),
            Some(vec![0..3, 3..4, 4..6, 6..7, 7..8])
        );
        // Both: the row cap too.
        assert_eq!(
            micro_batches(&cfg(2, 300), 8, Some(&lens)),
            Some(vec![0..2, 2..3, 3..4, 4..6, 6..7, 7..8])
        );
        // A budget that holds the batch: one micro-batch (so recompute and chunks apply).
        assert_eq!(
            micro_batches(&cfg(0, 10_000), 8, Some(&lens)),
            Some(vec![0..8])
        );
    }

    fn groups_of(group_size: u32) -> GrpoConfig {
        GrpoConfig {
            group_size,
            ..GrpoConfig::default()
        }
    }

    fn cfg() -> GrpoConfig {
        GrpoConfig {
            steps: 1,
            lr: 1e-4,
            group_size: 4,
            batch_size: 1,
            kl_coef: 0.0,
            entropy_coef: 0.0,
            valid_reward: 1.0,
            optimal_bonus: 0.25,
            format_reward: 0.1,
            agent_reward: 0.5,
            cost_reward: 0.5,
            checkpoint_every: 1,
            ..GrpoConfig::default()
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
            reward(&c, CostMetric::SumOfCosts, &inst, p, &o, &reference)
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
        assert_eq!(
            signal_groups(&rewards, &groups_of(4)),
            vec![false, true, false]
        );
        let adv = advantages(&rewards, &groups_of(4));
        assert!(adv[..4].iter().chain(&adv[8..]).all(|&a| a == 0.0));
        assert!(adv[5] > 0.0 && adv[4] < 0.0);
        // A group differing by less than `signal_eps` (1e-8) has no signal either; a
        // plan can set a larger one.
        assert_eq!(
            signal_groups(&[0.3, 0.3 + 1e-12], &groups_of(2)),
            vec![false]
        );
        let coarse = GrpoConfig {
            signal_eps: 0.1,
            ..groups_of(4)
        };
        assert_eq!(signal_groups(&rewards, &coarse), vec![false, true, false]);
        assert_eq!(signal_groups(&[0.0, 0.1, 0.0, 0.1], &coarse), vec![false]);
    }
}
