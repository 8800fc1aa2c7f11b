//! Resume, fork and replay.
//!
//! * Forks of a branch at a stage boundary (and, with them, counterfactual runs): O(1),
//!   a new ref at an existing event plus one `BranchForked` event naming the engineer
//!   that designs the next stage onward ([`fork`]).
//! * Deterministic replay ([`verify_stage`]): a stage is recomputed from its recorded
//!   inputs on a scratch branch forked at the event just before the stage's
//!   `StageStarted`, and every recomputed event id is compared, in order, with the
//!   recorded one. Events chain through their parent, so equal ids mean equal content
//!   and equal history. LLM decisions are answered from the recorded replies (matched
//!   by prompt hash) unless the replay is live. The scratch branch is a scratch ref
//!   (`_replay-N-<head>`, [`crate::ledger::refs::is_scratch`]): no listing, reference,
//!   report or bundle sees it, it is deleted on every way out (success, error, a stop
//!   requested by Ctrl-C or SIGTERM), and `gc` removes one a kill -9 left. A replay
//!   changes no branch; recording its outcome is the caller's choice
//!   ([`record_verified`]).
//! * Counterfactual replay ([`counterfactual`]): one stage re-run with another engineer
//!   on a fork, deleted unless kept.
//!
//! * Where the stages to replay ran, and how a replay sets itself up from that
//!   ([`setup`]); a branch's stages verified in turn, and a counterfactual as text
//!   ([`branch`]).
//!
//! Resume needs nothing here: `Pipeline::run` continues any branch from its last
//! durable point.
pub mod branch;
pub mod setup;

use crate::engineer::llm::{RecordedCall, RecordedReplies};
use crate::engineer::EngineerSpec;
use crate::ledger::{Event, Hash, Ledger, LedgerError, Meta};
use crate::record::event::{BranchForked, DecisionStatus, EvalCell, EventBody, ReplayVerified};
use crate::stage::{Pipeline, Progress, RunOptions, StageError};
pub use crate::views::replay::{Mismatch, StageReplay};
use std::sync::atomic::AtomicBool;
use std::time::Instant;

#[derive(Debug, thiserror::Error)]
pub enum ForkError {
    #[error("{0}")]
    Ledger(#[from] LedgerError),
    #[error("branch {branch} has no completed stage {before} to fork stage{at} from (a fork keeps the stages before it; stage 0 has none); stages that can be forked: {valid}")]
    NoSuchStage {
        branch: String,
        at: u32,
        before: u32,
        valid: String,
    },
    #[error("--at stage{at}: past the plan's end (it has {stages} engineered stage{}, stage1 to stage{stages}, after the warm-up, stage 0); stages that can be forked: {valid}", if *.stages == 1 { "" } else { "s" })]
    PastPlanEnd { at: u32, stages: u32, valid: String },
    #[error(transparent)]
    Engineer(#[from] crate::engineer::EngineerNameError),
    #[error("the ledger's plan: {0}")]
    Plan(#[source] Box<crate::stage::StageError>),
    #[error("`{0}`: expected stageN with N >= 1 (stage 0 is the warm-up)")]
    BadStage(String),
}

/// Parse the stage a fork starts at: `stageN` or `N` (the one grammar of
/// [`crate::ledger::parse_stage`]), N >= 1 since stage 0 is the warm-up.
pub fn parse_stage(s: &str) -> Result<u32, ForkError> {
    crate::ledger::parse_stage(s)
        .ok()
        .filter(|&n| n >= 1)
        .ok_or_else(|| ForkError::BadStage(s.to_string()))
}

/// Fork `from` so that stage `at` onward is designed by `engineer`: the new branch keeps
/// stages 0..at-1. Returns the new branch's name and head.
pub fn fork(
    ledger: &mut Ledger,
    from: &str,
    at: u32,
    engineer: &EngineerSpec,
    name: Option<&str>,
    replicate: u32,
) -> Result<(String, Hash), ForkError> {
    fork_as(ledger, from, at, engineer, name, replicate, false)
}

/// [`fork`], onto a scratch ref (`name` starts with `_`) when `scratch`.
fn fork_as(
    ledger: &mut Ledger,
    from: &str,
    at: u32,
    engineer: &EngineerSpec,
    name: Option<&str>,
    replicate: u32,
    scratch: bool,
) -> Result<(String, Hash), ForkError> {
    let state = ledger.projection(from)?;
    let plan = crate::stage::ledger_plan(ledger).map_err(|e| ForkError::Plan(Box::new(e)))?;
    crate::engineer::check_spec(engineer, &plan, &state)?;
    let completed: Vec<u32> = state
        .stages
        .iter()
        .filter(|s| s.completed.is_some())
        .map(|s| s.stage)
        .collect();
    // A fork past the plan's last stage would have nothing to run.
    let stages = plan.engineer.stages;
    if at > stages {
        let valid: Vec<String> = completed
            .iter()
            .map(|n| n + 1)
            .filter(|&n| n <= stages)
            .map(|n| format!("stage{n}"))
            .collect();
        return Err(ForkError::PastPlanEnd {
            at,
            stages,
            valid: if valid.is_empty() {
                "none yet (run the warm-up first)".into()
            } else {
                valid.join(", ")
            },
        });
    }
    // Stage 0 is the base model's evaluation: a fork before it would keep nothing.
    let Some(point) = at
        .checked_sub(1)
        .and_then(|before| state.stage(before))
        .and_then(|s| s.completed)
    else {
        let valid: Vec<String> = completed
            .iter()
            .map(|n| format!("stage{}", n + 1))
            .collect();
        return Err(ForkError::NoSuchStage {
            branch: from.into(),
            at,
            before: at.saturating_sub(1),
            valid: if valid.is_empty() {
                "none (run the warm-up first)".into()
            } else {
                valid.join(", ")
            },
        });
    };
    let name = name.map(str::to_string).unwrap_or_else(|| {
        // A spec's switches as name parts (`current:-history` ->
        // `current-no-history`, `current+engineer-rl` -> `current-engineer-rl`).
        // Plain names stay as written (`main-gpt-4o-at3`).
        let written = engineer.to_string();
        let label = if written.contains([':', '+']) {
            engineer.label()
        } else {
            written
        };
        format!("{from}-{label}-at{at}")
    });
    // The engineers registered on the source branch after the fork point (`engineer
    // add` appends to the branch it names, so a registration made after stage N is not
    // in the history a fork at stage N keeps): recorded again on the fork, so the fork
    // can run them and a bundle of it carries them. A replay's scratch fork copies
    // none: it recomputes recorded events, whose parents must stay as they were.
    let kept = ledger.state_at(&point)?.engineers;
    let registrations: Vec<EventBody> = if scratch {
        vec![]
    } else {
        ledger
            .history(from)?
            .into_iter()
            .filter_map(|(_, e)| match e.body {
                EventBody::EngineerRegistered(r) if !kept.contains(&r.name) => {
                    Some(EventBody::EngineerRegistered(r))
                }
                _ => None,
            })
            .collect()
    };
    if scratch {
        ledger.fork_scratch(&name, &point)?;
    } else {
        ledger.fork(&name, &point)?;
    }
    let forked = EventBody::BranchForked(BranchForked {
        from_branch: from.into(),
        at: point,
        engineer: engineer.to_string(),
        replicate,
    });
    let events = std::iter::once(forked)
        .chain(registrations)
        .map(|body| (body, at - 1, Meta::now()))
        .collect();
    let ids = ledger.append(&name, events)?;
    Ok((name, *ids.last().expect("one event at least")))
}

/// What can stop a replay (a mismatch is not an error: see [`StageReplay::mismatch`]).
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("{0}")]
    Ledger(#[from] LedgerError),
    #[error("{0}")]
    Stage(#[from] StageError),
    #[error("{0}")]
    Fork(#[from] ForkError),
    #[error("branch {branch} has no completed stage {stage}; completed stages: {valid}")]
    NoSuchStage {
        branch: String,
        stage: u32,
        valid: String,
    },
    /// A recorded event's bytes do not hash to its id (the record was altered).
    #[error("recorded event {id} ({kind}, stage {stage}) at {place} does not hash to its id (recomputed {got}): the record was altered")]
    Altered {
        id: Hash,
        kind: &'static str,
        stage: u32,
        place: String,
        got: Hash,
    },
    #[error("the replay of stage {0} was interrupted")]
    Interrupted(u32),
}

/// The recorded events of stage `n` on a history: the parent of its `StageStarted`
/// (where a recomputation starts) and the events from `StageStarted` to
/// `StageCompleted` inclusive. None when the stage is not complete on this history.
pub fn stage_events(history: &[(Hash, Event)], n: u32) -> Option<(Hash, &[(Hash, Event)])> {
    let start = history
        .iter()
        .position(|(_, e)| e.stage == n && matches!(e.body, EventBody::StageStarted(_)))?;
    let end = start
        + history[start..]
            .iter()
            .position(|(_, e)| e.stage == n && matches!(e.body, EventBody::StageCompleted(_)))?;
    let parent = history[start].1.parent?;
    Some((parent, &history[start..=end]))
}

/// The recorded LLM calls of a history, keyed by prompt blob hash.
pub fn recorded_replies(
    ledger: &Ledger,
    history: &[(Hash, Event)],
) -> Result<RecordedReplies, LedgerError> {
    let mut out = RecordedReplies::new();
    for (_, e) in history {
        // The oracle's candidates decided too: a replay answers their LLM calls alike.
        let d = match &e.body {
            EventBody::EngineerDecision(d) => d,
            EventBody::OracleCandidate(c) => &c.decision,
            _ => continue,
        };
        let Some(prompt) = d.prompt else { continue };
        let reply = match &d.reply {
            Some(h) => Some(String::from_utf8_lossy(&ledger.blob(h)?).into_owned()),
            None => None,
        };
        let error = match &d.status {
            DecisionStatus::Fallback { reason } => Some(reason.clone()),
            _ => None,
        };
        out.insert(
            prompt,
            RecordedCall {
                reply,
                rationale: d.rationale.clone(),
                error,
            },
        );
    }
    Ok(out)
}

/// Completed stages of a branch, in order.
pub fn completed_stages(ledger: &mut Ledger, branch: &str) -> Result<Vec<u32>, LedgerError> {
    Ok(ledger
        .projection(branch)?
        .stages
        .iter()
        .filter(|s| s.completed.is_some())
        .map(|s| s.stage)
        .collect())
}

/// The gradient step carried by an event, if any.
fn step_of(e: &Event) -> Option<u64> {
    match &e.body {
        EventBody::GradientStep(g) => Some(g.step),
        EventBody::Trajectories(t) => Some(t.step),
        EventBody::CheckpointSaved(c) => Some(c.step),
        _ => None,
    }
}

/// Check that each recorded event's bytes still hash to its id.
fn check_recorded(ledger: &Ledger, events: &[(Hash, Event)]) -> Result<(), ReplayError> {
    for (id, e) in events {
        let got = Hash::of_event(&crate::record::event::encode_event(e));
        if got != *id {
            let place = ledger
                .location(id)
                .map_or("(unknown place)".to_string(), |l| {
                    format!("{} offset {}", l.pack.display(), l.offset)
                });
            return Err(ReplayError::Altered {
                id: *id,
                kind: e.body.kind(),
                stage: e.stage,
                place,
                got,
            });
        }
    }
    Ok(())
}

/// Check that every event on `branch`'s history still hashes to its id, before any
/// recomputation writes anything: a replay of an altered ledger fails fast, naming the
/// first altered event.
pub fn check_branch(ledger: &Ledger, branch: &str) -> Result<(), ReplayError> {
    check_recorded(ledger, &ledger.history(branch)?)
}

/// Compare recorded and recomputed events in order; the first difference.
fn first_mismatch(
    stage: u32,
    recorded: &[(Hash, Event)],
    recomputed: &[(Hash, Event)],
) -> Option<Mismatch> {
    let k = (0..recorded.len().max(recomputed.len()))
        .find(|&k| recorded.get(k).map(|r| r.0) != recomputed.get(k).map(|r| r.0))?;
    let (rec, new) = (recorded.get(k), recomputed.get(k));
    let kind = rec.or(new).map_or("", |(_, e)| e.body.kind()).to_string();
    let step = recorded[..k.min(recorded.len())]
        .iter()
        .chain(rec)
        .rev()
        .find_map(|(_, e)| step_of(e));
    let note = match (rec.map(|r| &r.1.body), new.map(|r| &r.1.body)) {
        (Some(EventBody::EngineerDecision(a)), Some(EventBody::EngineerDecision(b))) => {
            if a.prompt != b.prompt {
                Some(format!(
                    "the LLM prompt changed (recorded {}, recomputed {})",
                    a.prompt.map_or("none".into(), |h| h.short()),
                    b.prompt.map_or("none".into(), |h| h.short())
                ))
            } else if a.applied != b.applied {
                Some("the applied configuration differs".into())
            } else {
                Some("the decision differs (rationale or status)".into())
            }
        }
        (Some(a), Some(b)) if a.kind() != b.kind() => {
            Some(format!("recomputed event is a {}", b.kind()))
        }
        (Some(_), None) => Some(format!(
            "the recomputation ended after {} of {} events",
            recomputed.len(),
            recorded.len()
        )),
        (None, Some(_)) => Some("the recomputation produced extra events".into()),
        _ => None,
    };
    Some(Mismatch {
        stage,
        step,
        index: k,
        kind,
        recorded: rec.map(|r| r.0),
        recomputed: new.map(|r| r.0),
        note,
    })
}

/// Replay completed stage `n` of `branch`: recompute it on a scratch ref forked at
/// the event before its `StageStarted`, with the recorded engineer (LLM engineers
/// answer from the recorded replies unless `live`), and compare every event id. The
/// scratch ref is deleted whatever happens, also when `stop` is set (the recomputation
/// then ends at its next durable point with [`ReplayError::Interrupted`]). `branch`
/// itself is not changed.
pub fn verify_stage(
    pipeline: &mut Pipeline<'_>,
    branch: &str,
    n: u32,
    live: bool,
    progress: &mut dyn Progress,
    stop: &AtomicBool,
) -> Result<StageReplay, ReplayError> {
    let history = pipeline.ledger.history(branch)?;
    let Some((parent, recorded)) = stage_events(&history, n) else {
        let valid = completed_stages(pipeline.ledger, branch)?;
        return Err(ReplayError::NoSuchStage {
            branch: branch.into(),
            stage: n,
            valid: if valid.is_empty() {
                "none".into()
            } else {
                valid
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            },
        });
    };
    check_recorded(pipeline.ledger, recorded)?;
    let engineer = match &recorded[0].1.body {
        EventBody::StageStarted(s) => s.engineer.clone(),
        _ => unreachable!("stage_events starts at a StageStarted"),
    };
    let replies = if live {
        None
    } else {
        Some(recorded_replies(pipeline.ledger, &history)?)
    };
    let head = recorded.last().expect("non-empty").0;
    // A scratch ref of this name left by a killed replay is replaced.
    let scratch = format!("_replay-{n}-{}", head.short());
    pipeline.ledger.fork_scratch(&scratch, &parent)?;
    let t = Instant::now();
    // A verification recomputes: an oracle search trains every candidate itself rather
    // than take the stage it verifies (or a sibling's) as trained.
    let reuse = std::mem::replace(&mut pipeline.reuse_trained_stages, false);
    let run = run_one(
        pipeline,
        &scratch,
        (n > 0)
            .then(|| engineer.parse::<EngineerSpec>())
            .transpose()
            .map_err(StageError::from)?,
        replies.as_ref(),
        progress,
        stop,
    );
    let recomputed = run.and_then(|()| {
        let h = pipeline.ledger.history(&scratch)?;
        let from = h
            .iter()
            .position(|(id, _)| *id == parent)
            .map_or(0, |i| i + 1);
        Ok(h[from..].to_vec())
    });
    pipeline.reuse_trained_stages = reuse;
    let seconds = t.elapsed().as_secs_f64();
    let deleted = pipeline.ledger.delete_branch(&scratch);
    let recomputed = recomputed?;
    deleted?;
    Ok(StageReplay {
        stage: n,
        events: recorded.len() as u64,
        head,
        engineer,
        seconds,
        mismatch: first_mismatch(n, recorded, &recomputed),
    })
}

/// Run exactly one stage of `branch`.
fn run_one(
    pipeline: &mut Pipeline<'_>,
    branch: &str,
    engineer: Option<EngineerSpec>,
    replies: Option<&RecordedReplies>,
    progress: &mut dyn Progress,
    stop: &AtomicBool,
) -> Result<(), ReplayError> {
    let opts = RunOptions {
        branch: branch.into(),
        stages: Some(1),
        engineer,
    };
    let mut factory = |spec: &EngineerSpec,
                       inputs: &crate::engineer::BuildInputs<'_>,
                       s: &crate::ledger::BranchState| {
        crate::engineer::build_replaying(spec, inputs, s, replies)
    };
    let summary = pipeline.run(&opts, &mut factory, progress, stop)?;
    match summary.completed.first() {
        Some(_) if !summary.interrupted => Ok(()),
        _ => Err(ReplayError::Interrupted(crate::stage::next_stage(
            &pipeline.ledger.projection(branch)?,
        ))),
    }
}

/// Metadata of a replay-verified event: where, and with which versions and threads.
pub fn replay_meta(pipeline: &Pipeline<'_>, live: bool) -> Meta {
    let mut m = Meta::now();
    m.threads = Some(pipeline.plan.train.torch_threads);
    m.device = Some(format!("{:?}", pipeline.device));
    m.versions
        .extend(crate::train::kernels::facts(pipeline.device));
    m.versions.insert(
        "rayon_threads".into(),
        rayon::current_num_threads().to_string(),
    );
    m.versions.insert(
        "replay".into(),
        if live { "live" } else { "recorded-replies" }.into(),
    );
    m
}

/// Append one `ReplayVerified` event per matched stage to `branch`, in one batch.
pub fn record_verified(
    pipeline: &mut Pipeline<'_>,
    branch: &str,
    replays: &[StageReplay],
    live: bool,
) -> Result<Vec<Hash>, LedgerError> {
    let meta = replay_meta(pipeline, live);
    let items = replays
        .iter()
        .map(|r| {
            (
                EventBody::ReplayVerified(ReplayVerified {
                    replayed_stage: r.stage,
                    events: r.events,
                    head: r.head,
                    mismatch: r.mismatch.as_ref().map(|m| m.to_string()),
                }),
                r.stage,
                meta.clone(),
            )
        })
        .collect();
    pipeline.ledger.append(branch, items)
}

/// The outcome of a counterfactual replay.
#[derive(Clone, Debug, serde::Serialize, schemars::JsonSchema)]
pub struct Counterfactual {
    pub stage: u32,
    pub engineer: String,
    /// The branch it ran on (deleted unless `kept`).
    pub branch: String,
    pub kept: bool,
    pub recorded_engineer: Option<String>,
    /// Validation cells of the recorded stage and of the counterfactual one.
    pub recorded_validation: Vec<EvalCell>,
    pub validation: Vec<EvalCell>,
    pub seconds: f64,
}

/// Re-run stage `n` of `branch` with `engineer` on a fork (the branch `keep`, or a
/// scratch ref), report both validation results, and delete the scratch ref on every
/// way out (a kept branch stays, at its last durable point when `stop` ended it).
pub fn counterfactual(
    pipeline: &mut Pipeline<'_>,
    branch: &str,
    n: u32,
    engineer: &EngineerSpec,
    keep: Option<&str>,
    progress: &mut dyn Progress,
    stop: &AtomicBool,
) -> Result<Counterfactual, ReplayError> {
    let state = pipeline.ledger.projection(branch)?;
    let recorded = state.stage(n).filter(|s| s.completed.is_some());
    let recorded_engineer = recorded.and_then(|s| s.engineer.clone());
    let recorded_validation = recorded
        .and_then(|s| s.evaluations.get("val").cloned())
        .unwrap_or_default();
    let name = match keep {
        Some(k) => k.to_string(),
        // Any spec makes a valid ref name (`base=DIR`, `current:-history`).
        None => format!(
            "_counterfactual-{n}-{}-{}",
            engineer
                .to_string()
                .replace(|c: char| !c.is_ascii_alphanumeric() && c != '.', "-"),
            pipeline.ledger.head(branch)?.short()
        ),
    };
    let t = Instant::now();
    fork_as(
        pipeline.ledger,
        branch,
        n,
        engineer,
        Some(&name),
        state.replicate,
        keep.is_none(),
    )?;
    let run = run_one(
        pipeline,
        &name,
        Some(engineer.clone()),
        None,
        progress,
        stop,
    );
    let validation = run.and_then(|()| {
        Ok(pipeline
            .ledger
            .projection(&name)?
            .stage(n)
            .and_then(|s| s.evaluations.get("val").cloned())
            .unwrap_or_default())
    });
    let seconds = t.elapsed().as_secs_f64();
    if keep.is_none() {
        let deleted = pipeline.ledger.delete_branch(&name);
        let validation = validation?;
        deleted?;
        return Ok(Counterfactual {
            stage: n,
            engineer: engineer.to_string(),
            branch: name,
            kept: false,
            recorded_engineer,
            recorded_validation,
            validation,
            seconds,
        });
    }
    Ok(Counterfactual {
        stage: n,
        engineer: engineer.to_string(),
        branch: name,
        kept: true,
        recorded_engineer,
        recorded_validation,
        validation: validation?,
        seconds,
    })
}
