//! Projections: pure folds of a branch's events into its state (branch facts, one
//! [`StageState`] per stage, audit rows). `apply` never reads anything but its
//! arguments, so a state cached by event id (see ledger/projections.rs) is valid for every branch
//! that shares that prefix, and `ledger rebuild` recomputes it from the log.
use crate::env::config::GeneratorConfig;
use crate::record::event::{DecisionStatus, EvalCell, Event, EventBody, FailureBreakdown};
use crate::record::hash::Hash;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Everything the views need about one branch, as of some event.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BranchState {
    pub head: Option<Hash>,
    pub genesis: Option<Hash>,
    pub plan_name: String,
    pub seed: u64,
    pub events: u64,
    /// Set by a BranchForked event: (source branch, fork point, engineer).
    pub forked_from: Option<(String, Hash, String)>,
    /// The engineer that designs this branch's next stages, as last chosen (by a fork
    /// or by `run --engineer`); None: the plan's.
    pub engineer: Option<String>,
    /// Seed replicate of the stages run after the latest fork (0: the plan's seeds).
    pub replicate: u32,
    /// Registered engineers, in order.
    pub engineers: Vec<String>,
    /// The configuration stage 1 starts from.
    pub initial_config: Option<GeneratorConfig>,
    pub stages: Vec<StageState>,
    pub audit: Vec<AuditRow>,
    pub replays: Vec<(u32, bool)>,
}

/// The state of one curriculum stage.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StageState {
    pub stage: u32,
    pub started: Option<Hash>,
    pub engineer: Option<String>,
    /// The configuration in force (the decision's applied config, else inherited).
    pub config: Option<GeneratorConfig>,
    pub decision: Option<Hash>,
    pub decision_status: Option<String>,
    pub clipped_fields: Vec<String>,
    /// Instances generated in the stage per split: stage 0's suites (`val`, `test`), a
    /// stage's `train` set and, with rehearsal, its `rehearsal` plans.
    pub instances_by_split: BTreeMap<String, u64>,
    pub trajectories: u64,
    pub valid: u64,
    pub optimal: u64,
    pub gradient_steps: u64,
    pub last_step: Option<u64>,
    /// f64 bits of the last loss and grad norm (JSON: `last_loss`, `last_grad_norm`).
    #[serde(rename = "last_loss", with = "crate::record::readable::opt_f64_bits")]
    #[schemars(with = "Option<crate::record::readable::JsonFloat>")]
    pub last_loss_bits: Option<u64>,
    #[serde(
        rename = "last_grad_norm",
        with = "crate::record::readable::opt_f64_bits"
    )]
    #[schemars(with = "Option<crate::record::readable::JsonFloat>")]
    pub last_grad_norm_bits: Option<u64>,
    pub params: Option<Hash>,
    /// (checkpoint blob, parameter hash, step)
    pub checkpoint: Option<(Hash, Hash, u64)>,
    /// Latest evaluation per suite.
    pub evaluations: BTreeMap<String, Vec<EvalCell>>,
    /// The event each of those evaluations came from (views cite it).
    pub evaluation_events: BTreeMap<String, Hash>,
    /// Latest per-instance outcomes event per suite (`evaluation_outcomes`; absent in
    /// ledgers recorded before it existed). Views load the event for paired statistics.
    pub outcome_events: BTreeMap<String, Hash>,
    pub failures: Option<FailureBreakdown>,
    pub completed: Option<Hash>,
    /// Sums of the stage's per-step GRPO statistics (`grpo_stats` events).
    pub grpo: GrpoTotals,
    /// Sums of the stage's engineer-RL steps (`engineer_training` events).
    pub engineer_rl: EngineerRlTotals,
}

impl StageState {
    /// Instances generated in the stage, every split together.
    pub fn instances(&self) -> u64 {
        self.instances_by_split.values().sum()
    }
}

/// Running sums of a stage's `engineer_training` events.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct EngineerRlTotals {
    pub steps: u64,
    pub replies: u64,
    pub parsed: u64,
    pub legal: u64,
    pub grounded: u64,
    /// Replies whose proposal was probed, and the sum of their learnability scores.
    pub probed: u64,
    pub learnability_sum: f64,
    /// The reward mean of the stage's first and last step.
    pub first_reward: Option<f64>,
    pub last_reward: Option<f64>,
}

/// Running sums of a stage's `grpo_stats` events (means are sum / steps).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GrpoTotals {
    pub steps: u64,
    pub samples: u64,
    pub groups: u64,
    pub signal_groups: u64,
    pub skipped_groups: u64,
    pub tokens: u64,
    pub reward_sum: f64,
    pub reward_std_sum: f64,
    pub kl_sum: f64,
    pub clip_fraction_sum: f64,
}

impl GrpoTotals {
    fn mean(&self, sum: f64) -> Option<f64> {
        (self.steps > 0).then(|| sum / self.steps as f64)
    }
    pub fn reward_mean(&self) -> Option<f64> {
        self.mean(self.reward_sum)
    }
    pub fn reward_std_mean(&self) -> Option<f64> {
        self.mean(self.reward_std_sum)
    }
    pub fn kl_mean(&self) -> Option<f64> {
        self.mean(self.kl_sum)
    }
    pub fn clip_fraction_mean(&self) -> Option<f64> {
        self.mean(self.clip_fraction_sum)
    }
    /// Share of groups with a reward difference over the stage.
    pub fn signal_share(&self) -> Option<f64> {
        (self.groups > 0).then(|| self.signal_groups as f64 / self.groups as f64)
    }
}

/// One decision-relevant event, for the audit view.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AuditRow {
    pub event: Hash,
    pub stage: u32,
    pub kind: String,
    pub summary: String,
}

impl BranchState {
    /// The state of stage `n` (1-based), if it has events.
    pub fn stage(&self, n: u32) -> Option<&StageState> {
        self.stages.iter().find(|s| s.stage == n)
    }

    fn stage_mut(&mut self, n: u32) -> &mut StageState {
        if let Some(i) = self.stages.iter().position(|s| s.stage == n) {
            return &mut self.stages[i];
        }
        // Inherit the configuration in force from the latest earlier stage.
        let config = self
            .stages
            .iter()
            .filter(|s| s.stage < n)
            .max_by_key(|s| s.stage)
            .and_then(|s| s.config.clone())
            .or_else(|| self.initial_config.clone());
        self.stages.push(StageState {
            stage: n,
            config,
            ..StageState::default()
        });
        self.stages.sort_by_key(|s| s.stage);
        let i = self
            .stages
            .iter()
            .position(|s| s.stage == n)
            .expect("just inserted");
        &mut self.stages[i]
    }
}

/// Fold one event (with id `hash`) into the state.
pub fn apply(mut s: BranchState, hash: &Hash, ev: &Event) -> BranchState {
    apply_in_place(&mut s, hash, ev);
    s
}

/// [`apply`] without moving the state (for long folds).
pub fn apply_in_place(s: &mut BranchState, hash: &Hash, ev: &Event) {
    s.head = Some(*hash);
    s.events += 1;
    let n = ev.stage;
    let audit = |s: &mut BranchState| {
        s.audit.push(AuditRow {
            event: *hash,
            stage: n,
            kind: ev.body.kind().to_string(),
            summary: ev.body.summary(),
        })
    };
    match &ev.body {
        EventBody::Genesis(g) => {
            s.genesis = Some(*hash);
            s.plan_name = g.name.clone();
            s.seed = g.seed;
            s.initial_config = Some(g.initial_config.clone());
            audit(s);
        }
        EventBody::EngineerRegistered(r) => {
            if !s.engineers.contains(&r.name) {
                s.engineers.push(r.name.clone());
            }
            audit(s);
        }
        EventBody::StageStarted(st) => {
            let x = s.stage_mut(n);
            x.started = Some(*hash);
            x.engineer = Some(st.engineer.clone());
            audit(s);
        }
        EventBody::EngineerDecision(d) => {
            let x = s.stage_mut(n);
            x.decision = Some(*hash);
            x.decision_status = Some(d.status.name().to_string());
            x.clipped_fields = d.clips.iter().map(|c| c.field.clone()).collect();
            if !matches!(d.status, DecisionStatus::Rejected { .. }) {
                x.config = Some(d.applied.clone());
            }
            audit(s);
        }
        EventBody::InstancesGenerated(i) => {
            *s.stage_mut(n)
                .instances_by_split
                .entry(i.split.clone())
                .or_default() += i.instances.len() as u64;
        }
        EventBody::Trajectories(t) => {
            let x = s.stage_mut(n);
            x.trajectories += t.trajectories.len() as u64;
            x.valid += t.trajectories.iter().filter(|t| t.valid).count() as u64;
            x.optimal += t.trajectories.iter().filter(|t| t.optimal).count() as u64;
        }
        EventBody::GradientStep(g) => {
            let x = s.stage_mut(n);
            x.gradient_steps += 1;
            x.last_step = Some(g.step);
            x.last_loss_bits = Some(g.loss);
            x.last_grad_norm_bits = Some(g.grad_norm);
            x.params = Some(g.params);
        }
        EventBody::CheckpointSaved(c) => {
            s.stage_mut(n).checkpoint = Some((c.blob, c.params, c.step))
        }
        EventBody::Evaluation(e) => {
            let x = s.stage_mut(n);
            x.evaluations.insert(e.suite.clone(), e.cells.clone());
            x.evaluation_events.insert(e.suite.clone(), *hash);
        }
        EventBody::EvaluationOutcomes(o) => {
            s.stage_mut(n).outcome_events.insert(o.suite.clone(), *hash);
        }
        // Read by `show --samples --suite` from the history; nothing to project.
        EventBody::EvaluationPlans(_) => {}
        // Read by `audit` from the history; the decision after them is what applies.
        EventBody::OracleCandidate(_) => {}
        EventBody::FailureBreakdown(f) => s.stage_mut(n).failures = Some(f.clone()),
        EventBody::StageCompleted(_) => {
            s.stage_mut(n).completed = Some(*hash);
            audit(s);
        }
        EventBody::BranchForked(b) => {
            s.forked_from = Some((b.from_branch.clone(), b.at, b.engineer.clone()));
            s.engineer = Some(b.engineer.clone());
            s.replicate = b.replicate;
            audit(s);
        }
        EventBody::ReplayVerified(r) => {
            s.replays.push((r.replayed_stage, r.mismatch.is_none()));
            audit(s);
        }
        EventBody::EngineerChosen(c) => s.engineer = Some(c.engineer.clone()),
        EventBody::EngineerTraining(e) => {
            let t = &mut s.stage_mut(n).engineer_rl;
            let f = f64::from_bits;
            let mean = e.reward_mean();
            t.steps += 1;
            t.replies += e.replies.len() as u64;
            t.parsed += e.replies.iter().filter(|r| r.parsed).count() as u64;
            t.legal += e.replies.iter().filter(|r| r.legal).count() as u64;
            t.grounded += e.replies.iter().filter(|r| r.grounded).count() as u64;
            for l in e.replies.iter().filter_map(|r| r.learnability) {
                t.probed += 1;
                t.learnability_sum += f(l);
            }
            t.first_reward.get_or_insert(mean);
            t.last_reward = Some(mean);
        }
        EventBody::GrpoStats(g) => {
            let t = &mut s.stage_mut(n).grpo;
            let f = f64::from_bits;
            t.steps += 1;
            t.samples += g.samples as u64;
            t.groups += g.groups as u64;
            t.signal_groups += g.signal_groups as u64;
            t.skipped_groups += g.skipped_groups as u64;
            t.tokens += g.tokens;
            t.reward_sum += f(g.reward_mean);
            t.reward_std_sum += f(g.reward_std);
            t.kl_sum += f(g.kl);
            t.clip_fraction_sum += f(g.clip_fraction);
        }
    }
}

/// Fold a whole history (oldest first).
pub fn fold<'a>(events: impl IntoIterator<Item = (&'a Hash, &'a Event)>) -> BranchState {
    events
        .into_iter()
        .fold(BranchState::default(), |s, (h, e)| apply(s, h, e))
}

#[cfg(test)]
mod decode_tests {
    use super::BranchState;
    use proptest::prelude::*;

    proptest! {
        /// A damaged projection cache entry is an error, never a panic.
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = crate::record::codec::decode::<BranchState>(&bytes, "projection");
        }
    }
}
