//! The end of every stage: the final checkpoint, evaluation on both suites (with every
//! item's plan when the plan keeps them), the failure breakdown and the completion
//! event, as one durable batch. The completion event's metadata carries the stage's
//! timing (unhashed).
use super::*;
use crate::record::timing::phase;
use crate::train::timing::{Phases, Work};

/// Save a checkpoint blob (and the blobs it references) and queue its event.
pub(super) fn checkpoint(
    rec: &mut Recorder<'_>,
    ts: &TrainState,
    stage: u32,
) -> Result<Hash, StageError> {
    for side in ts.policy.side_blobs() {
        rec.blob(&side)?;
    }
    let bytes = ts.save(stage);
    let blob = rec.blob(&bytes)?;
    rec.push(
        stage,
        EventBody::CheckpointSaved(CheckpointSaved {
            step: ts.global_step,
            blob,
            params: crate::train::checkpoint::param_hash(ts.policy.vars()),
        }),
    );
    Ok(blob)
}

/// A checkpoint inside a stage: save `ts` and commit everything recorded.
pub(super) fn durable_checkpoint(
    rec: &mut Recorder<'_>,
    ts: &TrainState,
    stage: u32,
) -> Result<(), StageError> {
    checkpoint(rec, ts, stage)?;
    rec.flush()?;
    Ok(())
}

/// Work a stage does after its evaluation and before it completes (engineer RL with
/// `after_evaluation`): it may change the training state, which is then saved as the
/// stage's final checkpoint.
pub(super) type AfterEvaluation<'a> =
    &'a mut dyn FnMut(&mut Recorder<'_>, &mut TrainState, &mut Phases) -> Result<(), StageError>;

/// The end of every stage, as one durable batch: the checkpoint, evaluation of it on
/// both suites, the failure breakdown, then `after` (if any) and a final checkpoint of
/// what it trained, and the completion event naming the last checkpoint, whose
/// metadata holds `phases` as the stage's timing (its wall time ends there; the batch's
/// commit after it is not counted). Returns the validation table.
#[allow(clippy::too_many_arguments)]
pub(super) fn finish_stage(
    rec: &mut Recorder<'_>,
    stage: u32,
    ts: &mut TrainState,
    (val, test): (&Suite, &Suite),
    (metric, eval_batch, keep_plans): (crate::env::CostMetric, usize, bool),
    steps: u64,
    phases: &mut Phases,
    after: Option<AfterEvaluation<'_>>,
) -> Result<ResultTable, StageError> {
    let ckpt = phases.time(phase::CHECKPOINTING, || checkpoint(rec, ts, stage))?;
    phases.begin(phase::EVALUATION);
    let validation = evaluate(
        rec,
        stage,
        ts,
        val,
        test,
        (metric, eval_batch, keep_plans),
        ckpt,
        phases,
    );
    phases.end();
    let validation = validation?;
    let ckpt = match after {
        Some(work) => {
            work(rec, ts, phases)?;
            phases.time(phase::CHECKPOINTING, || checkpoint(rec, ts, stage))?
        }
        None => ckpt,
    };
    let timing = phases.timing();
    rec.push_with(
        stage,
        EventBody::StageCompleted(StageCompleted {
            checkpoint: Some(ckpt),
            steps,
        }),
        |meta| meta.timing = Some(timing),
    );
    rec.flush()?;
    Ok(validation)
}

/// Evaluate on the validation and test suites and queue the events; returns the
/// validation table. The decoding's tokens go to `phases`' evaluation phase.
#[allow(clippy::too_many_arguments)]
pub(super) fn evaluate(
    rec: &mut Recorder<'_>,
    stage: u32,
    ts: &TrainState,
    val: &Suite,
    test: &Suite,
    (metric, eval_batch, keep_plans): (crate::env::CostMetric, usize, bool),
    ckpt: Hash,
    phases: &mut Phases,
) -> Result<ResultTable, StageError> {
    let mut work = Work::default();
    let v = eval::score_suite_counted(ts.policy.as_ref(), val, metric, eval_batch, &mut work);
    let t = eval::score_suite_counted(ts.policy.as_ref(), test, metric, eval_batch, &mut work);
    phases.count(phase::EVALUATION, work);
    // Per suite: its table, its per-instance outcomes (paired statistics), and, when the
    // suite is stratified by wait ratio, one table per subset.
    for (name, suite, scored) in [("val", val, &v), ("test", test, &t)] {
        rec.push(
            stage,
            EventBody::Evaluation(eval::evaluation_event(name, scored, Some(ckpt))),
        );
        rec.push(
            stage,
            EventBody::EvaluationOutcomes(eval::outcomes_event(name, suite, scored, Some(ckpt))),
        );
        if keep_plans {
            let texts: Vec<&str> = scored.iter().map(|s| s.plan_text.as_str()).collect();
            let plans = rec.blob(&crate::record::codec::encode(&texts))?;
            rec.push(
                stage,
                EventBody::EvaluationPlans(crate::record::event::EvaluationPlans {
                    suite: name.to_string(),
                    suite_hash: Hash::from_hex(&suite.hash).expect("a suite hash is hex"),
                    checkpoint: Some(ckpt),
                    items: scored.len() as u32,
                    plans,
                }),
            );
        }
        for e in eval::subset_evaluations(name, suite, scored, Some(ckpt)) {
            rec.push(stage, EventBody::Evaluation(e));
        }
    }
    rec.push(
        stage,
        EventBody::FailureBreakdown(eval::failure_breakdown("val", val, &v)),
    );
    Ok(eval::table(&v))
}
