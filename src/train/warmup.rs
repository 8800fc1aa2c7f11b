//! Stage 0: the supervised warm-up that makes the *base model*. The policy imitates
//! the solver's optimal plans on an easy distribution (2 agents, small maps, few holes);
//! each step maximises the log-likelihood of a batch of reference plans. The `_timed`
//! steps add their phases to a [`Phases`]: `example_building` (tokenising the batch),
//! `training` (forward and backward), `optimiser` and `parameter_hash`.
//!
//! The same imitation loss, scaled, is GRPO's rehearsal term ([`rehearse`]: InstructGPT's
//! PPO-ptx), so the loss that makes the base and the one that keeps it are one function.
use super::batches::{batch_indices, named};
use super::lm::LmPolicy;
use super::policy::Rollout;
use super::timing::{Phases, Work};
use super::TrainState;
use crate::env::{Instance, Plan, Solved};
use crate::record::timing::phase;
use crate::record::trainer::GradientStep;
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
    /// The agents of each imitated plan go by names drawn from `1..=agent_names`
    /// ([`super::batches::named`]); 0: `1..=k`.
    pub agent_names: u32,
}

/// One imitation step on the batch `step` of `data`; returns its gradient-step record
/// and the loss.
pub fn step(
    state: &mut TrainState,
    cfg: &WarmupConfig,
    data: &[Solved],
    seed: Seed,
    step: u64,
) -> (GradientStep, f64) {
    step_timed(state, cfg, data, seed, step, &mut Phases::off())
}

/// [`step`], adding its phases to `phases` (see the module doc).
pub fn step_timed(
    state: &mut TrainState,
    cfg: &WarmupConfig,
    data: &[Solved],
    seed: Seed,
    step: u64,
    phases: &mut Phases,
) -> (GradientStep, f64) {
    let idx = batch_indices(data.len(), cfg.batch_size, seed.child("order", 0), step);
    if let Some(lm) = state.policy.as_lm() {
        let names = seed.child("agent_names", step);
        let instances = named(data, &idx, cfg.agent_names, names);
        let pairs = phases.time(phase::EXAMPLE_BUILDING, || {
            plan_pairs(lm, &instances, idx.iter().map(|&i| &data[i].plan))
        });
        return text_update(state, &pairs, phases);
    }
    phases.begin(phase::TRAINING);
    let batch: Vec<&Solved> = idx.iter().map(|&i| &data[i]).collect();
    super::adam::Adam::zero_grad(state.policy.vars());
    let (l, h, work) = action_backward(state, &batch, 1.0);
    phases.end();
    phases.count(phase::TRAINING, work);
    finish_update(state, l, h, phases)
}

/// Add `scale` times the mean negative log-likelihood of the solver plans `batch` to
/// the gradients (a non-`lm` policy: each plan's actions); returns that mean (unscaled),
/// the mean entropy and the work.
fn action_backward(state: &TrainState, batch: &[&Solved], scale: f64) -> (f64, f64, Work) {
    let instances: Vec<_> = batch.iter().map(|d| d.instance.clone()).collect();
    let rollouts: Vec<Rollout> = batch
        .iter()
        .enumerate()
        .map(|(j, d)| Rollout {
            instance: j,
            actions: state.policy.encode_plan(&d.instance, &d.plan),
            plan: Ok(d.plan.clone()),
            plan_bytes: Vec::new(),
            logprobs: Vec::new(),
        })
        .collect();
    let lp = state.policy.log_probs(&instances, &rollouts);
    let loss = -lp.per_action.mean(Kind::Float);
    if scale == 1.0 {
        loss.backward();
    } else {
        (&loss * scale).backward();
    }
    let h = lp.entropy.mean(Kind::Float).double_value(&[]);
    let work = Work {
        sampled_tokens: Some(rollouts.iter().map(|r| r.actions.len() as u64).sum()),
        ..Work::default()
    };
    (loss.double_value(&[]), h, work)
}

/// GRPO's rehearsal term: add `coef` times the mean negative log-likelihood of the
/// batch `update` of the solver plans `data` (a seeded permutation, a pure function of
/// `seed` and `update`) to the gradients already accumulated, before the optimiser
/// update that takes both. Returns that mean log-likelihood's negative (unscaled).
pub fn rehearse(
    state: &TrainState,
    data: &[Solved],
    batch_size: usize,
    coef: f64,
    seed: Seed,
    update: u64,
) -> f64 {
    let idx = batch_indices(data.len(), batch_size, seed, update);
    if let Some(lm) = state.policy.as_lm() {
        let instances: Vec<_> = idx.iter().map(|&i| data[i].instance.clone()).collect();
        let plans = idx.iter().map(|&i| &data[i].plan);
        return text_backward(lm, &plan_pairs(lm, &instances, plans), coef).0;
    }
    let batch: Vec<&Solved> = idx.iter().map(|&i| &data[i]).collect();
    action_backward(state, &batch, coef).0
}

/// The (prompt ids, target ids) of solver plans: each instance's task in the chat
/// template, and its plan as the policy writes it.
fn plan_pairs<'a>(
    lm: &LmPolicy,
    instances: &[Instance],
    plans: impl Iterator<Item = &'a Plan>,
) -> Vec<(Vec<u32>, Vec<u32>)> {
    use super::policy::Policy as _;
    instances
        .iter()
        .zip(plans)
        .map(|(inst, plan)| (lm.chat_ids(&lm.task_text(inst)), lm.encode_plan(inst, plan)))
        .collect()
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
) -> (GradientStep, f64) {
    text_step_timed(state, pairs, batch_size, seed, step, &mut Phases::off())
}

/// [`text_step`], adding its phases to `phases` (see the module doc).
pub fn text_step_timed(
    state: &mut TrainState,
    pairs: &[(Vec<u32>, Vec<u32>)],
    batch_size: usize,
    seed: Seed,
    step: u64,
    phases: &mut Phases,
) -> (GradientStep, f64) {
    let idx = batch_indices(pairs.len(), batch_size, seed.child("order", 1), step);
    let batch: Vec<(Vec<u32>, Vec<u32>)> = idx.iter().map(|&i| pairs[i].clone()).collect();
    text_update(state, &batch, phases)
}

/// Micro-batches an `lm` imitation batch is cut into (by length), each of at least
/// [`MICRO_ROWS`] rows (fewer rows per matmul cost more than the padding they save).
const MICRO_BATCHES: usize = 8;
const MICRO_ROWS: usize = 4;

/// Minimise the negative mean log-likelihood of every target token of `pairs`
/// (prompt ids, target ids) with one optimiser update.
///
/// A batch is padded to its longest sequence, and a 10x10 map's prompt is three times a
/// 3x3 one's, so the batch is sorted by length and cut into [`MICRO_BATCHES`] of
/// similar lengths whose gradients accumulate: the loss is the same mean over all
/// target tokens (each micro-batch's sum divided by the batch's token count), the
/// padding mostly gone. The sort is stable, so the order (and the result) is a pure
/// function of the batch.
fn text_update(
    state: &mut TrainState,
    pairs: &[(Vec<u32>, Vec<u32>)],
    phases: &mut Phases,
) -> (GradientStep, f64) {
    phases.begin(phase::TRAINING);
    let lm = state
        .policy
        .as_lm()
        .expect("text pairs train a language model");
    super::adam::Adam::zero_grad(state.policy.vars());
    let (loss_sum, entropy) = text_backward(lm, pairs, 1.0);
    phases.end();
    phases.count(
        phase::TRAINING,
        Work {
            sampled_tokens: Some(pairs.iter().map(|p| p.1.len() as u64).sum()),
            prefilled_tokens: Some(pairs.iter().map(|p| p.0.len() as u64).sum()),
            ..Work::default()
        },
    );
    finish_update(state, loss_sum, entropy, phases)
}

/// Add `scale` times the mean negative log-likelihood of every target token of `pairs`
/// to the gradients, in micro-batches of similar lengths (see [`text_update`]); returns
/// that mean (unscaled) and the mean entropy per target token.
fn text_backward(lm: &LmPolicy, pairs: &[(Vec<u32>, Vec<u32>)], scale: f64) -> (f64, f64) {
    let mut order: Vec<usize> = (0..pairs.len()).collect();
    order.sort_by_key(|&i| pairs[i].0.len() + pairs[i].1.len());
    let tokens: usize = pairs.iter().map(|p| p.1.len()).sum::<usize>().max(1);
    // On a GPU the whole batch is one forward: there a step's time is kernel launches
    // and host round trips, and eight small forwards ran the base planner's step at
    // 2-25% GPU utilisation; the padding they save costs the GPU little.
    let parts = if lm.model.device() == tch::Device::Cpu {
        MICRO_BATCHES
    } else {
        1
    };
    let chunk = pairs.len().div_ceil(parts).max(MICRO_ROWS);
    let (mut loss_sum, mut entropy_sum) = (0.0f64, 0.0f64);
    for part in order.chunks(chunk) {
        let prompts: Vec<&[u32]> = part.iter().map(|&i| pairs[i].0.as_slice()).collect();
        let targets: Vec<&[u32]> = part.iter().map(|&i| pairs[i].1.as_slice()).collect();
        let lp = lm.token_log_probs(&prompts, &targets, lm.arch.sampling.temperature, true);
        let loss = -lp.per_action.sum(Kind::Float) / tokens as f64;
        if scale == 1.0 {
            loss.backward();
        } else {
            (&loss * scale).backward();
        }
        loss_sum += loss.double_value(&[]);
        entropy_sum += lp.entropy.sum(Kind::Float).double_value(&[]);
    }
    (loss_sum, entropy_sum / tokens as f64)
}

/// The optimiser update from the accumulated gradients, and its gradient-step record
/// (with the batch's mean loss and entropy); returns the record and the loss.
fn finish_update(
    state: &mut TrainState,
    loss: f64,
    entropy: f64,
    phases: &mut Phases,
) -> (GradientStep, f64) {
    let grad_norm = phases.time(phase::OPTIMISER, || state.adam.update(state.policy.vars()));
    state.global_step += 1;
    let params = phases.time(phase::PARAMETER_HASH, || {
        super::checkpoint::param_hash(state.policy.vars())
    });
    let record = GradientStep {
        step: state.global_step,
        params,
        loss: loss.to_bits(),
        policy_loss: loss.to_bits(),
        kl: 0f64.to_bits(),
        entropy: entropy.to_bits(),
        grad_norm: grad_norm.to_bits(),
        reward_mean: 0f64.to_bits(),
    };
    (record, loss)
}
