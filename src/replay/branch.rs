//! A branch's stages verified one after another (`ledger replay`, the default): each
//! stage recomputed with a note when it was recorded elsewhere (see [`super::setup`]),
//! stopping at the first mismatch; and the counterfactual's two validation tables as
//! text.
use super::setup::{setup_note, RecordedSetup};
use super::{check_branch, completed_stages, verify_stage, Counterfactual, ReplayError};
use crate::ledger::{Hash, LedgerError};
use crate::record::event::{EvalCell, Evaluation};
use crate::stage::{Pipeline, Progress};
use crate::views::replay::StageReplay;
use std::sync::atomic::AtomicBool;

/// Why a branch's verification could not run (a mismatch is an outcome: [`Verified`]).
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// The branch's completed stages could not be read.
    #[error("{0}")]
    Stages(#[source] LedgerError),
    #[error("branch {0} has no completed stage to replay")]
    NoStages(String),
    #[error("{0}")]
    Replay(#[from] ReplayError),
}

/// The stages that matched, in order, and the first mismatch (with its stage's note).
pub struct Verified {
    pub matched: Vec<StageReplay>,
    pub mismatch: Option<String>,
}

/// What a verification says as it goes.
pub enum Said<'a> {
    /// A stage about to be recomputed was recorded elsewhere (see [`setup_note`]).
    Note(&'a str),
    /// A stage matched.
    Matched(&'a StageReplay),
}

/// Verify `stage` of `branch` (None: every completed stage) against its record, with
/// a fresh `progress` per stage (LLM engineers answer from the recorded replies unless
/// `live`), saying to `say` each note and each stage that matched.
pub fn verify_branch(
    pipeline: &mut Pipeline<'_>,
    (branch, stage, live): (&str, Option<u32>, bool),
    recorded: &[RecordedSetup],
    progress: &mut dyn FnMut() -> Box<dyn Progress>,
    stop: &AtomicBool,
    say: &mut dyn FnMut(Said<'_>),
) -> Result<Verified, VerifyError> {
    let stages = match stage {
        Some(n) => vec![n],
        None => completed_stages(pipeline.ledger, branch).map_err(VerifyError::Stages)?,
    };
    if stages.is_empty() {
        return Err(VerifyError::NoStages(branch.to_string()));
    }
    check_branch(pipeline.ledger, branch)?;
    let mut matched = Vec::new();
    for n in stages {
        let note = setup_note(recorded, n, &pipeline.device_spec);
        if let Some(note) = &note {
            say(Said::Note(note));
        }
        let r = verify_stage(pipeline, branch, n, live, progress().as_mut(), stop)?;
        if let Some(m) = &r.mismatch {
            let m = match &note {
                Some(note) => format!("{m} ({note})"),
                None => m.to_string(),
            };
            return Ok(Verified {
                matched,
                mismatch: Some(m),
            });
        }
        say(Said::Matched(&r));
        matched.push(r);
    }
    Ok(Verified {
        matched,
        mismatch: None,
    })
}

/// The last line of a verification that matched (as text): the `replay_verified` events
/// recorded on `branch` (`ids`), or that nothing was and where the branch stays.
pub fn recorded_line(ledger: &crate::ledger::Ledger, branch: &str, ids: Option<&[Hash]>) -> String {
    match ids {
        Some(ids) => format!(
            "recorded {} replay-verified event(s) on {branch}; head {}\n",
            ids.len(),
            ids.last().map(|h| h.short()).unwrap_or_default()
        ),
        None => format!(
            "nothing recorded: {branch} stays at {} (--record appends a replay-verified event per stage)\n",
            ledger.head(branch).map(|h| h.short()).unwrap_or_default()
        ),
    }
}

/// The counterfactual `c` of stage `n` of `branch` as text: the recorded stage's
/// validation table, the replayed one's, and what became of its branch.
pub fn render_counterfactual(c: &Counterfactual, branch: &str, n: u32) -> String {
    let table = |cells: &[EvalCell]| {
        crate::train::eval::table_of(&Evaluation {
            suite: "val".into(),
            checkpoint: None,
            cells: cells.to_vec(),
        })
    };
    let recorded = format!(
        "stage {n} as recorded on {branch} (engineer {})",
        c.recorded_engineer.as_deref().unwrap_or("?")
    );
    let replayed = format!(
        "stage {n} replayed with engineer {} ({:.1} s)",
        c.engineer, c.seconds
    );
    let fate = match c.kept {
        true => format!("kept as branch {}", c.branch),
        false => "scratch branch deleted (use --keep NAME to keep it)".to_string(),
    };
    format!(
        "{}{}{fate}\n",
        table(&c.recorded_validation).render(&recorded),
        table(&c.validation).render(&replayed)
    )
}
