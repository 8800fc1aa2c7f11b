//! The event model: [`Event`] `{ parent, stage, body }` and every kind of
//! [`EventBody`] the mission records, from genesis to replay verification.
//!
//! Everything here reaches hashed bytes, so: no HashMap, no wall-clock time, and floats
//! only as their bit patterns (`u32`/`u64` fields named `*_bits` or documented as bits;
//! JSON shows them as numbers, see [`super::readable`]).
//! New kinds are appended at the end of [`EventBody`] (the variant index is encoded).
use crate::env::config::{Clip, GeneratorConfig};
use crate::record::codec::{self, CodecError};
use crate::record::hash::Hash;
// The trainer's own records: the stage turns them into events.
pub use crate::record::trainer::{
    EvalCell, Evaluation, EvaluationOutcomes, FailureBreakdown, GradientStep, GrpoStats,
    SizeFailures, StepRecord, Trajectory, TrajectoryBatch, OUTCOME_INVALID, OUTCOME_OPTIMAL,
    OUTCOME_VALID,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One immutable ledger event. Its id is the blake3 hash (event context) of its
/// encoding; `parent` links it to the previous event of its branch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Event {
    /// The previous event on the branch (None only for genesis).
    pub parent: Option<Hash>,
    /// The curriculum stage this event belongs to (0 = before the first stage).
    pub stage: u32,
    pub body: EventBody,
}

/// Every kind of event. JSON form: `{"<kind>": {fields}}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum EventBody {
    Genesis(Genesis),
    EngineerRegistered(EngineerRegistered),
    StageStarted(StageStarted),
    EngineerDecision(EngineerDecision),
    InstancesGenerated(InstancesGenerated),
    Trajectories(TrajectoryBatch),
    GradientStep(GradientStep),
    CheckpointSaved(CheckpointSaved),
    Evaluation(Evaluation),
    FailureBreakdown(FailureBreakdown),
    StageCompleted(StageCompleted),
    BranchForked(BranchForked),
    ReplayVerified(ReplayVerified),
    // New kinds go last: the encoding numbers variants in order.
    EngineerChosen(EngineerChosen),
    /// Per GRPO step: reward spread, groups with signal, KL, clip fraction, tokens.
    GrpoStats(GrpoStats),
    /// Per suite evaluation, right after its `Evaluation`: one byte per suite item (0
    /// invalid, 1 valid, 2 optimal), for paired statistics between branches.
    EvaluationOutcomes(EvaluationOutcomes),
    /// Per suite evaluation of a plan with `suites.keep_plans`, right after its
    /// `EvaluationOutcomes`: the greedy plan of every item, in suite order, as a blob.
    EvaluationPlans(EvaluationPlans),
    /// Per engineer-RL step (`[engineer.train]`): the contexts shown, every reply with
    /// its reward terms, and the update.
    EngineerTraining(EngineerTraining),
    /// Per candidate of the `oracle` engineer's search, between its stage's
    /// `StageStarted` and `EngineerDecision`: the candidate's decision, and how the
    /// stage trained on it scored on the validation suite.
    OracleCandidate(OracleCandidate),
}

/// One candidate configuration of the `oracle` engineer at a stage: what a named
/// engineer proposed (or a random draw), the whole stage trained on it from the stage's
/// starting checkpoint, and its validation score. Its model is not kept: only its
/// parameter hash, which the stage's own final checkpoint repeats when the candidate is
/// the one chosen.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct OracleCandidate {
    /// Its place among the stage's candidates, from 0.
    pub index: u32,
    /// Where it came from: the engineer's name, or `random#K` for the K-th random draw.
    pub source: String,
    /// That engineer's decision as a stage would record it (context, proposal, applied
    /// configuration, clips, rationale, status).
    pub decision: EngineerDecision,
    /// Some(j): the same applied configuration as candidate j, so the same training and
    /// score, not trained again.
    pub same_as: Option<u32>,
    /// The validation table of the model the stage ends on under this configuration.
    pub validation: Vec<EvalCell>,
    /// Its score: the validation Sum (mean over sizes) of valid %, then of optimal %.
    #[serde(with = "crate::record::readable::f64_bits")]
    #[schemars(with = "crate::record::readable::JsonFloat")]
    pub valid_sum: u64,
    #[serde(with = "crate::record::readable::f64_bits")]
    #[schemars(with = "crate::record::readable::JsonFloat")]
    pub optimal_sum: u64,
    /// Parameter hash of that model.
    pub params: Hash,
}

/// One engineer-RL step: GRPO on engineer prompts, after the stage's plan steps.
/// Floats are f64 bit patterns (JSON: numbers).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EngineerTraining {
    /// The policy's global step after this update.
    pub step: u64,
    /// Blobs of the codec-encoded contexts shown (the stage's own first, then the
    /// synthetic ones), in order.
    pub contexts: Vec<Hash>,
    /// Their ids (`stage3`, `synthetic/7`), in the same order.
    pub context_ids: Vec<String>,
    /// Every reply, grouped by context (`group_size` each).
    pub replies: Vec<EngineerReply>,
    /// Groups whose rewards differ (the others carry no gradient and are skipped).
    pub signal_groups: u32,
    /// Reply tokens trained on.
    pub tokens: u64,
    /// Parameter hash after the update.
    pub params: Hash,
    #[serde(with = "crate::record::readable::f64_bits")]
    #[schemars(with = "crate::record::readable::JsonFloat")]
    pub loss: u64,
    #[serde(with = "crate::record::readable::f64_bits")]
    #[schemars(with = "crate::record::readable::JsonFloat")]
    pub kl: u64,
    #[serde(with = "crate::record::readable::f64_bits")]
    #[schemars(with = "crate::record::readable::JsonFloat")]
    pub clip_fraction: u64,
    #[serde(with = "crate::record::readable::f64_bits")]
    #[schemars(with = "crate::record::readable::JsonFloat")]
    pub grad_norm: u64,
}

impl EngineerTraining {
    /// The step's mean reward over its replies (0 without replies).
    pub fn reward_mean(&self) -> f64 {
        let sum: f64 = self.replies.iter().map(|r| f64::from_bits(r.reward)).sum();
        sum / self.replies.len().max(1) as f64
    }
}

/// One sampled engineer reply and the terms of its reward.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EngineerReply {
    /// Index into the step's `contexts`.
    pub context: u32,
    /// Blob of the reply text.
    pub reply: Hash,
    /// A proposal came out of the reply.
    pub parsed: bool,
    /// It projects onto the legal ranges as written (nothing clipped or refused).
    pub legal: bool,
    /// Checkable claims in the rationale, and whether every one holds (false when
    /// there is none).
    pub claims: u32,
    pub grounded: bool,
    /// The probe of the configuration the reply leads to: 4·mean p(1-p) and mean pass
    /// rate p of the current policy (None: nothing usable was proposed, or the
    /// generator could not draw the probe).
    #[serde(with = "crate::record::readable::opt_f64_bits")]
    #[schemars(with = "Option<crate::record::readable::JsonFloat>")]
    pub learnability: Option<u64>,
    #[serde(with = "crate::record::readable::opt_f64_bits")]
    #[schemars(with = "Option<crate::record::readable::JsonFloat>")]
    pub pass_rate: Option<u64>,
    #[serde(with = "crate::record::readable::f64_bits")]
    #[schemars(with = "crate::record::readable::JsonFloat")]
    pub reward: u64,
}

/// The greedy plans of one suite evaluation (`suites.keep_plans`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EvaluationPlans {
    /// "val" or "test".
    pub suite: String,
    /// The suite's content hash (as in its `EvaluationOutcomes`).
    pub suite_hash: Hash,
    /// The checkpoint evaluated.
    pub checkpoint: Option<Hash>,
    /// Items in the blob (the suite's length).
    pub items: u32,
    /// Blob of the codec-encoded `Vec<String>`: each item's plan text as decoded.
    pub plans: Hash,
}

/// The ledger's first event: the plan file it was created from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Genesis {
    /// Blob holding the plan file's exact bytes.
    pub plan_blob: Hash,
    /// Hash of the parsed plan's canonical encoding (plan context).
    pub plan_hash: Hash,
    pub name: String,
    pub seed: u64,
    /// The plan's policy kind: "grid" or "lm".
    pub policy: String,
    /// The generator configuration of stage 1 before any engineer decision.
    pub initial_config: GeneratorConfig,
}

/// How an engineer is implemented.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum EngineerKind {
    /// A built-in engineer (`fixed`, `random`, `heuristic`, `current`, `base`).
    Builtin,
    /// An LLM behind an OpenAI-compatible chat API (never the API key).
    Llm {
        url: String,
        model: String,
        tokenizer: Option<Hash>,
        /// Name of the environment variable holding the API key, read at call time
        /// (the key itself is never recorded).
        api_key_env: Option<String>,
        /// The model's context window in tokens; the prompt is trimmed to fit.
        max_context: Option<u32>,
    },
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EngineerRegistered {
    pub name: String,
    pub kind: EngineerKind,
    /// Context modules switched on (failure_breakdown, guideline, history, ...).
    pub context_modules: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StageStarted {
    /// The engineer designing this stage.
    pub engineer: String,
    /// Checkpoint blob the stage trains from (None: the initial policy).
    pub from_checkpoint: Option<Hash>,
    /// The seed-tree node of this stage (32 bytes).
    pub seed: Hash,
}

/// What the engineer proposed, verbatim.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ProposedConfig {
    /// Nothing usable was proposed.
    None,
    /// The proposal's JSON text inline.
    Json(String),
    /// The proposal's text in a blob (large replies).
    Blob(Hash),
}

/// Outcome of validating an engineer's proposal.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DecisionStatus {
    /// Used as proposed.
    Accepted,
    /// Used after clipping the listed fields into range.
    Clipped,
    /// Unusable; the previous configuration was kept.
    Rejected { reason: String },
    /// The engineer failed (timeout, unparseable reply); a fallback engineer decided.
    Fallback { reason: String },
}

impl DecisionStatus {
    /// The status's name, as the JSON form and `audit` write it.
    pub fn name(&self) -> &'static str {
        match self {
            DecisionStatus::Accepted => "accepted",
            DecisionStatus::Clipped => "clipped",
            DecisionStatus::Rejected { .. } => "rejected",
            DecisionStatus::Fallback { .. } => "fallback",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EngineerDecision {
    pub engineer: String,
    /// Blob holding the structured context the engineer read (`EngineerContext`, codec-encoded;
    /// the application's `engineer::text::render` is the text of its modules).
    pub context: Hash,
    /// Exact prompt and raw reply blobs (LLM engineers).
    pub prompt: Option<Hash>,
    pub reply: Option<Hash>,
    pub proposed: ProposedConfig,
    /// The configuration actually used for the stage.
    pub applied: GeneratorConfig,
    /// Every field the projection onto legal ranges changed.
    pub clips: Vec<Clip>,
    /// Every key the engineer may not set, with its value (never applied).
    pub refused: Vec<crate::env::RefusedField>,
    pub rationale: String,
    pub status: DecisionStatus,
}

impl OracleCandidate {
    /// The candidate the oracle keeps: the highest validation valid Sum, then optimal
    /// Sum, then the earliest. None when there is none.
    pub fn best(candidates: &[OracleCandidate]) -> Option<usize> {
        let key =
            |c: &OracleCandidate| (f64::from_bits(c.valid_sum), f64::from_bits(c.optimal_sum));
        let mut best: Option<usize> = None;
        for (i, c) in candidates.iter().enumerate() {
            if best.is_none_or(|b| key(c) > key(&candidates[b])) {
                best = Some(i);
            }
        }
        best
    }

    /// ` (the configuration of #j)` for a candidate that repeats candidate j, else empty.
    pub fn same_as_note(&self) -> String {
        self.same_as
            .map_or(String::new(), |j| format!(" (the configuration of #{j})"))
    }
}

impl EngineerDecision {
    /// The blobs the decision references: its context, prompt, reply, a long proposal.
    pub fn blobs(&self) -> Vec<Hash> {
        let mut v = vec![self.context];
        v.extend(self.prompt);
        v.extend(self.reply);
        if let ProposedConfig::Blob(h) = self.proposed {
            v.push(h);
        }
        v
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct InstancesGenerated {
    /// "train", "val", "test", ...
    pub split: String,
    /// Hash of the generator configuration used (codec encoding, blob context).
    pub config: Hash,
    /// Each instance's blob.
    pub instances: Vec<Hash>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CheckpointSaved {
    pub step: u64,
    /// The checkpoint file's blob.
    pub blob: Hash,
    pub params: Hash,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StageCompleted {
    /// Final checkpoint blob of the stage.
    pub checkpoint: Option<Hash>,
    pub steps: u64,
}

/// The first event of a forked branch, recording where it came from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct BranchForked {
    pub from_branch: String,
    pub at: Hash,
    /// The engineer the fork hands the next stage to.
    pub engineer: String,
    /// Seed replicate of the stages this branch runs (0: the plan's own seed tree;
    /// k > 0: an independent replicate, as `ledger study --seeds` uses).
    pub replicate: u32,
}

/// `run --engineer X` on a branch whose engineer was another: X designs the branch's
/// next stages (and later runs and resumes without the flag keep X).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EngineerChosen {
    pub engineer: String,
    /// The engineer it replaces (the plan's, a fork's, or an earlier choice).
    pub previous: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ReplayVerified {
    /// The stage recomputed.
    pub replayed_stage: u32,
    /// Events recomputed and compared.
    pub events: u64,
    /// The recorded head the recomputation matched up to.
    pub head: Hash,
    /// None when every hash matched; else the first mismatch (stage, step, kind).
    pub mismatch: Option<String>,
}

impl EventBody {
    /// The kind's name, as in the JSON form.
    pub fn kind(&self) -> &'static str {
        match self {
            EventBody::Genesis(_) => "genesis",
            EventBody::EngineerRegistered(_) => "engineer_registered",
            EventBody::StageStarted(_) => "stage_started",
            EventBody::EngineerDecision(_) => "engineer_decision",
            EventBody::InstancesGenerated(_) => "instances_generated",
            EventBody::Trajectories(_) => "trajectories",
            EventBody::GradientStep(_) => "gradient_step",
            EventBody::CheckpointSaved(_) => "checkpoint_saved",
            EventBody::Evaluation(_) => "evaluation",
            EventBody::FailureBreakdown(_) => "failure_breakdown",
            EventBody::StageCompleted(_) => "stage_completed",
            EventBody::BranchForked(_) => "branch_forked",
            EventBody::EngineerChosen(_) => "engineer_chosen",
            EventBody::GrpoStats(_) => "grpo_stats",
            EventBody::EvaluationOutcomes(_) => "evaluation_outcomes",
            EventBody::EvaluationPlans(_) => "evaluation_plans",
            EventBody::ReplayVerified(_) => "replay_verified",
            EventBody::EngineerTraining(_) => "engineer_training",
            EventBody::OracleCandidate(_) => "oracle_candidate",
        }
    }

    /// Every blob this event references (verify checks each exists and matches).
    pub fn blobs(&self) -> Vec<Hash> {
        match self {
            EventBody::Genesis(g) => vec![g.plan_blob],
            EventBody::EngineerRegistered(r) => match &r.kind {
                EngineerKind::Llm {
                    tokenizer: Some(t), ..
                } => vec![*t],
                _ => vec![],
            },
            EventBody::StageStarted(s) => s.from_checkpoint.into_iter().collect(),
            EventBody::EngineerDecision(d) => d.blobs(),
            EventBody::OracleCandidate(c) => c.decision.blobs(),
            EventBody::InstancesGenerated(i) => i.instances.clone(),
            EventBody::Trajectories(t) => t.instances.clone(),
            EventBody::CheckpointSaved(c) => vec![c.blob],
            EventBody::Evaluation(e) => e.checkpoint.into_iter().collect(),
            EventBody::EvaluationOutcomes(o) => o.checkpoint.into_iter().collect(),
            EventBody::EvaluationPlans(p) => {
                let mut v = vec![p.plans];
                v.extend(p.checkpoint);
                v
            }
            EventBody::StageCompleted(s) => s.checkpoint.into_iter().collect(),
            EventBody::EngineerTraining(t) => {
                let mut v = t.contexts.clone();
                v.extend(t.replies.iter().map(|r| r.reply));
                v
            }
            EventBody::GradientStep(_)
            | EventBody::FailureBreakdown(_)
            | EventBody::BranchForked(_)
            | EventBody::EngineerChosen(_)
            | EventBody::GrpoStats(_)
            | EventBody::ReplayVerified(_) => vec![],
        }
    }

    /// A one-line human summary (for `log`). Numbers are rounded for people; the event
    /// itself (`show --json`, `cat`) holds every bit.
    pub fn summary(&self) -> String {
        let f = |b: u64| f64::from_bits(b);
        match self {
            EventBody::Genesis(g) => format!("plan {} seed {} policy {}", g.name, g.seed, g.policy),
            EventBody::EngineerRegistered(r) => format!("engineer {}", r.name),
            EventBody::StageStarted(s) => format!("engineer {}", s.engineer),
            EventBody::EngineerDecision(d) => {
                let st = match &d.status {
                    DecisionStatus::Accepted => "accepted".to_string(),
                    DecisionStatus::Clipped => format!("clipped {} fields", d.clips.len()),
                    DecisionStatus::Rejected { reason } => format!("rejected: {reason}"),
                    DecisionStatus::Fallback { reason } => format!("fallback: {reason}"),
                };
                format!("{} {st}", d.engineer)
            }
            EventBody::InstancesGenerated(i) => {
                format!("{} {} instances", i.instances.len(), i.split)
            }
            EventBody::Trajectories(t) => {
                let valid = t.trajectories.iter().filter(|x| x.valid).count();
                format!(
                    "step {} {} trajectories, {valid} valid",
                    t.step,
                    t.trajectories.len()
                )
            }
            EventBody::GradientStep(g) => {
                format!(
                    "step {} loss {} grad_norm {}",
                    g.step,
                    short(f(g.loss)),
                    short(f(g.grad_norm))
                )
            }
            EventBody::CheckpointSaved(c) => format!("step {} blob {}", c.step, c.blob.short()),
            EventBody::Evaluation(e) => {
                let (t, v, o) = e.cells.iter().fold((0u64, 0u64, 0u64), |a, c| {
                    (
                        a.0 + c.total as u64,
                        a.1 + c.valid as u64,
                        a.2 + c.optimal as u64,
                    )
                });
                format!("{}: {v}/{t} valid, {o}/{t} optimal", e.suite)
            }
            EventBody::EvaluationOutcomes(o) => {
                let count = |b: u8| o.outcomes.iter().filter(|&&x| x == b).count();
                format!(
                    "{}: {} items, {} valid, {} optimal{}",
                    o.suite,
                    o.outcomes.len(),
                    count(OUTCOME_VALID) + count(OUTCOME_OPTIMAL),
                    count(OUTCOME_OPTIMAL),
                    if o.wait_ratios.is_empty() {
                        String::new()
                    } else {
                        format!(", {} wait-ratio subsets", o.wait_ratios.len())
                    }
                )
            }
            EventBody::EvaluationPlans(p) => {
                format!("{}: {} plans in blob {}", p.suite, p.items, p.plans.short())
            }
            EventBody::FailureBreakdown(b) => format!("{}: {} sizes", b.suite, b.sizes.len()),
            EventBody::StageCompleted(s) => format!("{} steps", s.steps),
            EventBody::BranchForked(b) => format!(
                "from {} at {} engineer {}",
                b.from_branch,
                b.at.short(),
                b.engineer
            ),
            EventBody::EngineerChosen(c) => {
                format!("engineer {} (was {})", c.engineer, c.previous)
            }
            EventBody::GrpoStats(g) => format!(
                "step {} reward {:.3} ± {:.3}, {}/{} groups with signal, kl {:.4}, clipped {:.1}%, {} tokens",
                g.step,
                f(g.reward_mean),
                f(g.reward_std),
                g.signal_groups,
                g.groups,
                f(g.kl),
                100.0 * f(g.clip_fraction),
                g.tokens
            ),
            EventBody::EngineerTraining(t) => {
                let count = |f: fn(&EngineerReply) -> bool| t.replies.iter().filter(|r| f(r)).count();
                format!(
                    "step {} {} replies to {} contexts: reward {:.3}, {} parsed, {} legal, {} grounded, {}/{} groups with signal",
                    t.step,
                    t.replies.len(),
                    t.contexts.len(),
                    t.reward_mean(),
                    count(|r| r.parsed),
                    count(|r| r.legal),
                    count(|r| r.grounded),
                    t.signal_groups,
                    t.contexts.len()
                )
            }
            EventBody::OracleCandidate(c) => format!(
                "#{} {}: val Sum {:.2} valid, {:.2} optimal{}",
                c.index,
                c.source,
                f(c.valid_sum),
                f(c.optimal_sum),
                c.same_as_note()
            ),
            EventBody::ReplayVerified(r) => match &r.mismatch {
                None => format!("stage {} matched {} events", r.replayed_stage, r.events),
                Some(m) => format!("stage {} mismatch: {m}", r.replayed_stage),
            },
        }
    }
}

impl From<StepRecord> for EventBody {
    fn from(r: StepRecord) -> EventBody {
        match r {
            StepRecord::Trajectories(t) => EventBody::Trajectories(t),
            StepRecord::GradientStep(g) => EventBody::GradientStep(g),
            StepRecord::GrpoStats(g) => EventBody::GrpoStats(g),
        }
    }
}

/// Append an event's encoding (version byte, parent, stage, body) to `buf`; the event's
/// id is [`Hash::of_event`] over exactly these bytes.
pub fn encode_event_into(parent: Option<&Hash>, stage: u32, body: &EventBody, buf: &mut Vec<u8>) {
    // A struct encodes as the concatenation of its fields: this equals encoding `Event`.
    codec::encode_event_fields_into(&(parent, stage, body), buf);
}

/// The encoded bytes of an event.
pub fn encode_event(event: &Event) -> Vec<u8> {
    let mut buf = Vec::new();
    encode_event_into(event.parent.as_ref(), event.stage, &event.body, &mut buf);
    buf
}

/// Decode an event's bytes (as written by [`encode_event_into`]).
pub fn decode_event(bytes: &[u8]) -> Result<Event, CodecError> {
    codec::decode_event_fields(bytes)
}

/// A loss or a norm for a summary line: 4 decimals, or 4 significant digits in
/// scientific notation when 4 decimals would hide it (`0.1235`, `3.142e-6`).
fn short(x: f64) -> String {
    if x == 0.0 || !x.is_finite() || (1e-3..1e6).contains(&x.abs()) {
        format!("{x:.4}")
    } else {
        format!("{x:.3e}")
    }
}

#[cfg(test)]
mod codec_tests {
    //! Events through the store's codec: round trips, version and length checks, and
    //! arbitrary or mutated bytes never panic.
    use super::*;
    use crate::record::codec::*;
    use proptest::prelude::*;

    fn sample() -> Event {
        Event {
            parent: Some(Hash::of_blob(b"p")),
            stage: 3,
            body: EventBody::GradientStep(GradientStep {
                step: 9,
                params: Hash::of_blob(b"w"),
                loss: 1.5f64.to_bits(),
                policy_loss: 0,
                kl: 2,
                entropy: 3,
                grad_norm: 0.25f64.to_bits(),
                reward_mean: 7,
            }),
        }
    }

    #[test]
    fn event_round_trip_and_parent_peek() {
        let e = sample();
        let b = encode_event(&e);
        assert_eq!(decode_event(&b).unwrap(), e);
        assert_eq!(event_parent(&b).unwrap(), e.parent);
        let root = Event { parent: None, ..e };
        assert_eq!(event_parent(&encode_event(&root)).unwrap(), None);
    }

    #[test]
    fn version_and_trailing_bytes_are_errors() {
        let mut b = encode_event(&sample());
        b[0] = 9;
        assert_eq!(
            decode_event(&b),
            Err(CodecError::UnknownVersion {
                found: 9,
                expected: 1
            })
        );
        let mut b = encode_event(&sample());
        b.push(0);
        assert!(matches!(
            decode_event(&b),
            Err(CodecError::Trailing { extra: 1, .. })
        ));
        assert_eq!(decode_event(&[]), Err(CodecError::Empty));
    }

    #[test]
    fn huge_claimed_lengths_fail_without_allocating() {
        // version, parent None, stage 0, variant Trajectories (index 5), step 0, then a
        // claimed instance count of u64::MAX.
        let mut b = vec![EVENT_VERSION, 0, 0, 5, 0, 253];
        b.extend_from_slice(&u64::MAX.to_le_bytes());
        assert!(decode_event(&b).is_err());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = decode_event(&bytes);
            let mut v = vec![EVENT_VERSION];
            v.extend_from_slice(&bytes);
            let _ = decode_event(&v);
            let _ = event_parent(&v);
            let _ = crate::record::meta::Meta::decode(&bytes, "meta");
        }

        #[test]
        fn mutated_events_never_panic(pos in 0usize..200, byte in any::<u8>()) {
            let mut b = encode_event(&sample());
            let n = b.len();
            b[pos % n] = byte;
            let _ = decode_event(&b);
        }
    }
}
