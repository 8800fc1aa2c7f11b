//! Engineer RL, the trained trainer (`[engineer.train]`, or an engineer spec ending in
//! `+engineer-rl`): after a stage's plan steps, GRPO steps on engineer prompts, so the
//! policy that will design the next stage (`current`) learns to design. With
//! `after_evaluation = true` they run after the stage's evaluation, so they cannot move
//! the planner the stage is judged by; the next stage takes them up.
//!
//! One step, top to bottom ([`step`]):
//! 1. the contexts ([`contexts`]): the stage's own (what its engineer read), then
//!    synthetic ones with known ground truth ([`super::eval::synthetic`]) drawn from the
//!    stage seed, a subtree no benchmark seed reaches;
//! 2. the prompt of each, exactly as the `current` engineer reads it (the plan's prompt
//!    budget and text revision), and `group_size` sampled replies;
//! 3. the reward of each reply, the sum of:
//!    - `learnability_weight` × 4·mean p(1-p) of the current policy on instances drawn
//!      from the configuration the reply leads to, estimated size by size
//!      ([`super::probe::SizeProbe`], one per context: a group's replies are compared
//!      on the same instances for every size they leave alone, so the term measures
//!      their edits, not probe noise; 0 when nothing usable was proposed),
//!    - `format_weight` if the proposal parses and is legal as written,
//!    - `grounding_weight` if the rationale makes a checkable claim and every claim
//!      holds (`ledger engineer eval`'s rules, the version `[engineer.train] rules`
//!      names: under v4 every edited size must be cited too);
//! 4. group-normalised advantages and the plan steps' clipped objective
//!    ([`grpo::clipped_loss`]: the plan's clip, entropy and KL settings; the KL
//!    reference is the frozen base under LoRA and none otherwise), a token mean over
//!    the groups whose rewards differ, and one update of the stage's optimiser
//!    ([`update`]: under `[grpo] zero_variance = "drop"` the other groups' replies are
//!    not scored at all; otherwise they are, with weight 0). A step where no group
//!    differs changes nothing (no update, so Adam's momentum from the plan steps does
//!    not move the weights in the engineer's name).
//!
//! Everything is drawn from the seed tree, so a replay recomputes every reply, reward
//! and update bit for bit; the stage records each step as an `engineer_training` event.
use super::{eval, model, probe, prompt, reply, Decision, EngineerContext};
use crate::plan::trainer::{GrpoConfig, Sampling, ZeroVariance};
use crate::plan::EngineerTrain;
use crate::record::Hash;
use crate::seed::Seed;
use crate::train::lm::generate::Generated;
use crate::train::{grpo, TrainState};
use tch::{Kind, Tensor};

/// The end of an engineer spec that turns engineer RL on for its branch.
pub const SUFFIX: &str = "+engineer-rl";

/// What engineer RL reads from the plan.
#[derive(Clone, Debug)]
pub struct Settings {
    pub train: EngineerTrain,
    /// The plan's GRPO settings (clip, KL and entropy coefficients, advantage epsilon).
    pub grpo: GrpoConfig,
    /// How the `current` engineer samples its reply.
    pub sampling: Sampling,
    pub max_prompt_tokens: u32,
    /// The plan's engineer text revision.
    pub text: super::text::TextRevision,
    /// The rules the grounding term and the synthetic contexts follow (the plan's
    /// `[engineer.train] rules`).
    pub rules: eval::Rules,
}

/// One scored reply.
#[derive(Clone, Debug, PartialEq)]
pub struct ScoredReply {
    pub context: usize,
    pub text: String,
    pub parsed: bool,
    pub legal: bool,
    pub claims: u32,
    pub grounded: bool,
    pub learnability: Option<f64>,
    pub pass_rate: Option<f64>,
    pub reward: f64,
}

/// What one step did.
#[derive(Clone, Debug)]
pub struct StepOutcome {
    pub replies: Vec<ScoredReply>,
    pub signal_groups: u32,
    pub tokens: u64,
    pub params: Hash,
    pub loss: f64,
    pub kl: f64,
    pub clip_fraction: f64,
    pub grad_norm: f64,
}

/// The contexts of step `step`: the stage's own (`own`, labelled `stageN`), then
/// `prompts - 1` synthetic ones drawn from `seed` for this step as `rules` draw them,
/// shown with the same context modules as the stage's own.
pub fn contexts(
    own: &EngineerContext,
    cfg: &EngineerTrain,
    rules: eval::Rules,
    seed: Seed,
    step: u64,
) -> Vec<(String, EngineerContext)> {
    let mut out = vec![(format!("stage{}", own.stage), own.clone())];
    let extra = cfg.prompts.saturating_sub(1) as usize;
    for c in eval::synthetic_for(rules, seed.child("contexts", step), extra) {
        let mut ctx = c.context;
        ctx.modules = own.modules.clone();
        ctx.max_size = own.max_size;
        out.push((c.id, ctx.without_switched_off_modules()));
    }
    out
}

/// The reward of a scored reply under `cfg` (see the module doc).
pub fn reward(cfg: &EngineerTrain, parsed_legal: bool, grounded: bool, learnability: f64) -> f64 {
    cfg.learnability_weight * learnability
        + cfg.format_weight * parsed_legal as u8 as f64
        + cfg.grounding_weight * grounded as u8 as f64
}

/// Why an engineer-RL step cannot run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RlError {
    #[error("engineer RL needs an `lm` policy (it trains the model on engineer prompts)")]
    NotLm,
}

/// One engineer-RL step on `contexts` (see the module doc). `seed` is this step's node.
/// Errors when the policy is not a language model.
pub fn step(
    state: &mut TrainState,
    s: &Settings,
    contexts: &[(String, EngineerContext)],
    seed: Seed,
) -> Result<StepOutcome, RlError> {
    let group = s.train.group_size as usize;
    let lm = state.policy.as_lm().ok_or(RlError::NotLm)?;

    // 1-2. The prompts as the `current` engineer reads them, and the sampled replies.
    let counter = model::counter(lm);
    let prompts: Vec<Vec<u32>> = contexts
        .iter()
        .map(|(_, ctx)| {
            let p = prompt::build(ctx, &[], Some(s.max_prompt_tokens), &counter, s.text);
            model::prompt_ids(lm, &p)
        })
        .collect();
    let gens = crate::train::lm::generate::generate(
        &lm.model,
        &prompts,
        group,
        &vec![s.sampling.max_new_tokens; prompts.len()],
        &s.sampling,
        false,
        &lm.stop,
        seed.child("replies", 0),
        true,
    );

    // 3. Rewards, the learnability term from one size-by-size probe per context, so a
    //    group's replies are compared on the same instances wherever they agree.
    let mut replies = Vec::with_capacity(gens.len());
    let mut probes: Vec<probe::SizeProbe> = (0..contexts.len())
        .map(|i| {
            probe::SizeProbe::new(
                seed.child("probe", i as u64),
                s.train.probe_per_size as usize,
                s.train.probe_samples as usize,
            )
        })
        .collect();
    for (lane, g) in gens.iter().enumerate() {
        let i = lane / group;
        let (id, ctx) = &contexts[i];
        let text = lm.decode(&g.tokens);
        let mut d = Decision::default();
        reply::read_reply(&mut d, &text, vec![], s.text);
        let score = eval::score(id, ctx, &d, s.rules);
        let grounded = !score.claims.is_empty() && score.grounded;
        let probed = if score.parsed {
            probes[i].probe(state.policy.as_ref(), &eval::applied(ctx, &d).0)
        } else {
            None
        };
        let learnability = probed.map(|(l, _)| 4.0 * l);
        replies.push(ScoredReply {
            context: i,
            text,
            parsed: score.parsed,
            legal: score.legal,
            claims: score.claims.len() as u32,
            grounded,
            learnability,
            pass_rate: probed.map(|(_, p)| p),
            reward: reward(
                &s.train,
                score.parsed && score.legal,
                grounded,
                learnability.unwrap_or(0.0),
            ),
        });
    }

    // 4. Group-normalised advantages and the clipped objective over groups with signal.
    let cfg = GrpoConfig {
        group_size: s.train.group_size,
        ..s.grpo.clone()
    };
    let rewards: Vec<f64> = replies.iter().map(|r| r.reward).collect();
    let signal = grpo::signal_groups(&rewards, &cfg);
    let signal_groups = signal.iter().filter(|&&x| x).count() as u32;
    let tokens = gens
        .iter()
        .enumerate()
        .filter(|(lane, _)| signal[lane / group])
        .map(|(_, g)| g.tokens.len() as u64)
        .sum();
    let mut out = StepOutcome {
        replies,
        signal_groups,
        tokens,
        params: crate::train::checkpoint::param_hash(state.policy.vars()),
        loss: 0.0,
        kl: 0.0,
        clip_fraction: 0.0,
        grad_norm: 0.0,
    };
    if let Some(u) = update(
        state,
        &prompts,
        &gens,
        &rewards,
        &cfg,
        s.sampling.temperature,
    )? {
        out.loss = u.loss;
        out.kl = u.kl;
        out.clip_fraction = u.clip_fraction;
        out.grad_norm = u.grad_norm;
        out.params = crate::train::checkpoint::param_hash(state.policy.vars());
    }
    Ok(out)
}

/// What an engineer-RL update measured.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Update {
    pub loss: f64,
    pub kl: f64,
    pub clip_fraction: f64,
    pub grad_norm: f64,
}

/// Step 4 of the module doc: one optimiser update of `state` from the replies `gens`
/// (lanes in groups of `cfg.group_size`, lane `l` answering `prompts[l / group]`) and
/// their `rewards`, sampled at `temperature`: the clipped objective's token mean over
/// the groups whose rewards differ. None, and nothing changed, when no group differs or
/// their replies are empty. Under the plan's `zero_variance = "drop"` only those groups'
/// lanes are scored, by the KL reference and the training forward alike: the same
/// objective (the others weigh nothing in it), batched without them.
pub fn update(
    state: &mut TrainState,
    prompts: &[Vec<u32>],
    gens: &[Generated],
    rewards: &[f64],
    cfg: &GrpoConfig,
    temperature: f64,
) -> Result<Option<Update>, RlError> {
    let group = cfg.group_size as usize;
    let lm = state.policy.as_lm().ok_or(RlError::NotLm)?;
    let adv = grpo::advantages(rewards, cfg);
    let signal = grpo::signal_groups(rewards, cfg);
    let lanes: Vec<usize> = (0..gens.len())
        .filter(|&l| cfg.zero_variance != ZeroVariance::Drop || signal[l / group])
        .collect();
    if !lanes
        .iter()
        .any(|&l| signal[l / group] && !gens[l].tokens.is_empty())
    {
        return Ok(None);
    }
    let device = lm.model.device();
    let lane_prompts: Vec<&[u32]> = lanes
        .iter()
        .map(|&l| prompts[l / group].as_slice())
        .collect();
    let targets: Vec<&[u32]> = lanes.iter().map(|&l| gens[l].tokens.as_slice()).collect();
    let old: Vec<f32> = lanes
        .iter()
        .flat_map(|&l| gens[l].logprobs.iter().copied())
        .collect();
    let old = Tensor::from_slice(&old).to(device);
    let lp = lm.token_log_probs(&lane_prompts, &targets, temperature, true);
    let base = (cfg.kl_coef > 0.0 && lm.model.lora.is_some()).then(|| {
        tch::no_grad(|| {
            lm.token_log_probs(&lane_prompts, &targets, temperature, false)
                .per_action
                .detach()
        })
    });
    let lane_values = |f: &dyn Fn(usize) -> f32| {
        let v: Vec<f32> = lanes.iter().map(|&l| f(l)).collect();
        Tensor::from_slice(&v)
            .to(device)
            .index_select(0, &lp.rollout_of)
    };
    let adv_a = lane_values(&|l| adv[l] as f32);
    let w = lane_values(&|l| signal[l / group] as u8 as f32);
    let token_mean = |t: &Tensor| (t * &w).sum(Kind::Float) / w.sum(Kind::Float).clamp_min(1.0);
    let terms = grpo::clipped_loss(&lp, &old, &adv_a, base.as_ref(), cfg, token_mean);
    crate::train::adam::Adam::zero_grad(state.policy.vars());
    terms.loss.backward();
    let grad_norm = state.adam.update(state.policy.vars());
    state.global_step += 1;
    Ok(Some(Update {
        loss: terms.loss.double_value(&[]),
        kl: terms.kl.double_value(&[]),
        clip_fraction: terms.clip_fraction.double_value(&[]),
        grad_norm,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reward_adds_the_weighted_terms() {
        let cfg = EngineerTrain::default();
        assert_eq!(reward(&cfg, false, false, 0.0), 0.0);
        assert_eq!(reward(&cfg, true, false, 0.0), cfg.format_weight);
        assert_eq!(
            reward(&cfg, true, true, 0.5),
            cfg.format_weight + cfg.grounding_weight + 0.5 * cfg.learnability_weight
        );
    }

    /// The stage's own context comes first; synthetic ones follow, differ from step to
    /// step, and never come from the benchmark's subtree for the same root seed.
    #[test]
    fn contexts_lead_with_the_stage_and_draw_fresh_synthetic_ones() {
        let own = eval::synthetic(Seed::root(1), 1).remove(0).context;
        let cfg = EngineerTrain {
            prompts: 3,
            ..EngineerTrain::default()
        };
        let seed = Seed::root(9).child("engineer-rl", 0);
        let a = contexts(&own, &cfg, eval::Rules::V3, seed, 0);
        let b = contexts(&own, &cfg, eval::Rules::V3, seed, 1);
        assert_eq!(a.len(), 3);
        assert_eq!(a[0].1, own);
        assert_ne!(a[1].1, b[1].1);
        let bench = eval::synthetic(Seed::root(9), 2);
        assert!(a[1..]
            .iter()
            .all(|(_, c)| bench.iter().all(|x| &x.context != c)));
    }
}
