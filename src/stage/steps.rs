//! Steps durable as they train: a stage's step records (its gradient steps, their
//! GRPO statistics and the sampled plans they keep) reach the ledger when each step
//! ends (a warm-up's, at most [`WARMUP_FLUSH`] apart), not at the next checkpoint, so
//! `log --follow`, `serve` and the TensorBoard export show a stage while it trains.
//!
//! A stage still resumes from its last checkpoint: the steps after it are recomputed
//! (every step is a pure function of the state, the stage seed and the step number),
//! and [`StepLog`] checks each recomputed record against the one the branch already
//! holds instead of appending it twice. So a run stopped or killed between two
//! checkpoints, then resumed, appends exactly the events of an uninterrupted run and
//! reaches its head. Flush boundaries reach nothing hashed: an event's id is its
//! content and its parent's id.
use super::{Divergence, StageError};
use crate::ledger::recorder::Recorder;
use crate::ledger::Ledger;
use crate::record::event::EventBody;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// How far apart a warm-up's flushes may be (its steps take milliseconds; a GRPO
/// stage flushes at every step).
pub const WARMUP_FLUSH: Duration = Duration::from_secs(1);

/// The step records of one stage: those the branch holds past the stage's last
/// checkpoint (a resumed stage meets them again), then the new ones.
pub(super) struct StepLog {
    stage: u32,
    /// Recorded, not yet met again by the recomputation: oldest first.
    recorded: VecDeque<EventBody>,
    last_flush: Instant,
}

impl StepLog {
    /// The step records `branch` holds for `stage` after the last event that is not one
    /// (its last checkpoint, or the start of its training): what a resumed stage
    /// recomputes first. None for a branch whose head is in another stage.
    pub(super) fn resume(ledger: &Ledger, branch: &str, stage: u32) -> Result<StepLog, StageError> {
        let mut recorded = VecDeque::new();
        for id in ledger.ancestry(&ledger.head(branch)?)? {
            let event = ledger.event(&id)?;
            if event.stage != stage || !is_step_record(&event.body) {
                break;
            }
            recorded.push_front(event.body);
        }
        Ok(StepLog {
            stage,
            recorded,
            last_flush: Instant::now(),
        })
    }

    /// Step `step`'s record `body`: queued on `rec`, or, when the branch holds it
    /// already, checked to be the same (a different one is a divergence: the stage was
    /// recorded on other kernels, or with other inputs).
    pub(super) fn record(
        &mut self,
        rec: &mut Recorder<'_>,
        body: EventBody,
        step: u64,
    ) -> Result<(), StageError> {
        match self.recorded.pop_front() {
            None => {
                rec.push(self.stage, body);
                Ok(())
            }
            Some(held) if held == body => Ok(()),
            Some(held) => Err(StageError::Diverged(Divergence::Step {
                stage: self.stage,
                step,
                recorded: kind(&held),
                recomputed: kind(&body),
            })),
        }
    }

    /// Make the queued records durable when `due` says so (or a stop is asked for),
    /// once the recomputation has met every record the branch held.
    pub(super) fn flush(
        &mut self,
        rec: &mut Recorder<'_>,
        due: Due,
        stopping: bool,
    ) -> Result<(), StageError> {
        let due = match due {
            Due::EveryStep => true,
            Due::Apart(d) => self.last_flush.elapsed() >= d,
        };
        if self.recorded.is_empty() && (due || stopping) {
            rec.flush()?;
            self.last_flush = Instant::now();
        }
        Ok(())
    }
}

/// When [`StepLog::flush`] flushes.
#[derive(Clone, Copy, Debug)]
pub(super) enum Due {
    EveryStep,
    Apart(Duration),
}

/// The events a training step records.
fn is_step_record(body: &EventBody) -> bool {
    matches!(
        body,
        EventBody::GradientStep(_) | EventBody::GrpoStats(_) | EventBody::Trajectories(_)
    )
}

/// An event's kind and step, as a divergence names it.
fn kind(body: &EventBody) -> String {
    match body {
        EventBody::GradientStep(g) => format!("gradient step {}", g.step),
        EventBody::GrpoStats(s) => format!("GRPO statistics of step {}", s.step),
        EventBody::Trajectories(t) => {
            format!("{} trajectories of step {}", t.trajectories.len(), t.step)
        }
        other => format!("a {} event", other.kind()),
    }
}
