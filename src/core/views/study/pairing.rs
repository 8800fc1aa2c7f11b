//! Each engineer against another on the Sum rows of the final stage, replicate r
//! against replicate r ([`paired_vs_baseline`], [`orderings`]), and each engineer's
//! final stage against its runs' stage 0 ([`transfers`]): the per-seed differences with
//! their t-interval over seeds, and the instance-level paired bootstrap and McNemar's
//! test pooled over the seeds' items.
use super::model::{
    StudyPaired, StudyPairedMetric, StudyRun, BASELINE, ORACLE, ORDERINGS, REUSED,
    TRANSFER_BASELINE,
};
use crate::views::compare::{self, mean_ci, BranchSummary};
use crate::views::paired;

impl StudyPairedMetric {
    /// The per-seed differences with their mean and t-interval, and the instance-level
    /// statistics of `pooled` (the bootstrap pooled over seeds) when there are any.
    fn of(per_seed: Vec<f64>, pooled: Option<paired::PairedMetric>) -> StudyPairedMetric {
        let (mean, ci95) = mean_ci(&per_seed);
        StudyPairedMetric {
            per_seed,
            mean,
            ci95,
            bootstrap_ci95: pooled.map(|b| b.diff_ci95),
            mcnemar: pooled.map(|b| b.mcnemar),
        }
    }
}

/// Each engineer against [`BASELINE`] on every Sum row of the final stage, replicate
/// by replicate (empty when the study has no baseline).
pub fn paired_vs_baseline(engineers: &[String], runs: &[StudyRun]) -> Vec<StudyPaired> {
    if !engineers.iter().any(|e| e == BASELINE) {
        return Vec::new();
    }
    engineers
        .iter()
        .filter(|e| *e != BASELINE)
        .flat_map(|e| paired_against(e, BASELINE, runs))
        .collect()
}

/// Each arm's regret: [`ORACLE`] against every other engineer on every Sum row of the
/// final stage, replicate by replicate (Δ = oracle − arm; empty without an oracle arm).
pub fn regrets(engineers: &[String], runs: &[StudyRun]) -> Vec<StudyPaired> {
    if !engineers.iter().any(|e| e == ORACLE) {
        return Vec::new();
    }
    engineers
        .iter()
        .filter(|e| *e != ORACLE)
        .flat_map(|e| paired_against(ORACLE, e, runs))
        .collect()
}

/// Each engineer's final stage against its runs' stage 0 on every Sum row, seed by seed:
/// the per-seed changes with their t-interval, and the instance-level bootstrap pooled
/// over the seeds' items (see [`BranchSummary::transfer`]).
pub fn transfers(engineers: &[String], runs: &[StudyRun]) -> Vec<StudyPaired> {
    let mut out = Vec::new();
    for e in engineers {
        let rs: Vec<&StudyRun> = runs
            .iter()
            .filter(|r| &r.engineer == e)
            .filter(|r| {
                r.summary
                    .transfer
                    .as_ref()
                    .is_some_and(|t| !t.rows.is_empty())
            })
            .collect();
        let Some(first) = rs.first() else { continue };
        let first = first.summary.transfer.as_ref().expect("filtered");
        for key in &first.rows {
            let same = |r: &StudyRun| {
                r.summary.transfer.as_ref().and_then(|t| {
                    t.rows
                        .iter()
                        .find(|x| {
                            x.suite == key.suite && x.agents == key.agents && x.subset == key.subset
                        })
                        .cloned()
                })
            };
            let rows: Vec<(u32, paired::PairedRow)> = rs
                .iter()
                .filter_map(|r| Some((r.replicate, same(r)?)))
                .collect();
            // The pooled bootstrap needs every seed's items at both stages.
            let mut units = Vec::new();
            let mut note = None;
            for r in &rs {
                let outcomes = |v: &[(
                    crate::ledger::Hash,
                    crate::record::event::EvaluationOutcomes,
                )]| {
                    v.iter()
                        .find(|o| o.1.suite == key.suite)
                        .map(|o| o.1.clone())
                };
                let (Some(a), Some(b)) = (
                    outcomes(&r.summary.stage0_outcomes),
                    outcomes(&r.summary.outcomes),
                ) else {
                    note = Some(format!(
                        "no per-instance {} outcomes of replicate {} at both stages{}",
                        key.suite,
                        r.replicate,
                        if r.action == REUSED {
                            " (taken from an earlier report)"
                        } else {
                            ""
                        }
                    ));
                    break;
                };
                if let Some(why) = paired::unpairable(&a, &b) {
                    note = Some(format!("replicate {}: {why}", r.replicate));
                    break;
                }
                let flags = r.summary.coordination_flags.get(&key.suite);
                match paired::groups_with(&a, flags.map(Vec::as_slice))
                    .into_iter()
                    .find(|g| g.agents == key.agents && g.subset == key.subset)
                {
                    Some(g) => units.push(paired::unit(&g, &a, &b)),
                    None => {
                        note = Some(format!("replicate {}: no such group", r.replicate));
                        break;
                    }
                }
            }
            let boot = note.is_none().then(|| {
                let label = format!(
                    "transfer {e} {} {} agents {}",
                    key.suite,
                    key.agents,
                    key.subset.as_deref().unwrap_or("all")
                );
                paired::paired_metrics(&units, &label)
            });
            let diffs: Vec<(u32, f64, f64)> = rows
                .iter()
                .map(|(n, r)| (*n, r.valid.diff, r.optimal.diff))
                .collect();
            out.push(study_paired(
                e,
                TRANSFER_BASELINE,
                (&key.suite, key.agents, &key.subset),
                &diffs,
                boot,
                note,
            ));
        }
    }
    out
}

/// Each of [`ORDERINGS`] the study ran both arms of, on every Sum row, replicate by
/// replicate.
pub fn orderings(engineers: &[String], runs: &[StudyRun]) -> Vec<StudyPaired> {
    let has = |e: &str| engineers.iter().any(|x| x == e);
    ORDERINGS
        .iter()
        .filter(|(_, e, b)| has(e) && has(b))
        .flat_map(|(_, e, b)| paired_against(e, b, runs))
        .collect()
}

/// `engineer` against `baseline` on every Sum row of the final stage, replicate by
/// replicate (the replicates both finished).
fn paired_against(e: &str, baseline: &str, runs: &[StudyRun]) -> Vec<StudyPaired> {
    let mut out = Vec::new();
    let run = |e: &str, r: u32| -> Option<&StudyRun> {
        runs.iter()
            .find(|x| x.engineer == e && x.replicate == r && x.summary.final_stage.is_some())
    };
    // (baseline run, engineer run) per replicate both finished.
    let pairs: Vec<(&StudyRun, &StudyRun)> = runs
        .iter()
        .filter(|x| x.engineer == e)
        .filter_map(|x| Some((run(baseline, x.replicate)?, run(e, x.replicate)?)))
        .collect();
    let Some(&(first, _)) = pairs.first() else {
        return out;
    };
    for key in first.summary.sum_rates() {
        let same = |s: &BranchSummary| {
            s.sum_rates()
                .into_iter()
                .find(|x| x.suite == key.suite && x.agents == key.agents && x.subset == key.subset)
        };
        let rows: Vec<(u32, f64, f64)> = pairs
            .iter()
            .filter_map(|(a, b)| {
                let (ra, rb) = (same(&a.summary)?, same(&b.summary)?);
                Some((b.replicate, rb.valid - ra.valid, rb.optimal - ra.optimal))
            })
            .collect();
        if rows.is_empty() {
            continue;
        }
        let (boot, note) = pooled_bootstrap(&pairs, &key);
        out.push(study_paired(
            e,
            baseline,
            (&key.suite, key.agents, &key.subset),
            &rows,
            boot,
            note,
        ));
    }
    out
}

/// One paired row of a study: `rows` are (replicate, valid Δ, optimal Δ) per seed, with
/// the pooled item bootstrap of both metrics or the note saying why there is none.
fn study_paired(
    engineer: &str,
    baseline: &str,
    (suite, agents, subset): (&str, usize, &Option<String>),
    rows: &[(u32, f64, f64)],
    boot: Option<(paired::PairedMetric, paired::PairedMetric)>,
    note: Option<String>,
) -> StudyPaired {
    let (valid, optimal) = match boot {
        Some((v, o)) => (Some(v), Some(o)),
        None => (None, None),
    };
    StudyPaired {
        engineer: engineer.to_string(),
        baseline: baseline.to_string(),
        suite: suite.to_string(),
        agents,
        subset: subset.clone(),
        replicates: rows.iter().map(|r| r.0).collect(),
        valid: StudyPairedMetric::of(rows.iter().map(|r| r.1).collect(), valid),
        optimal: StudyPairedMetric::of(rows.iter().map(|r| r.2).collect(), optimal),
        note,
    }
}

/// The instance-level paired bootstrap of one Sum row pooled over the replicate pairs,
/// or why there is none.
#[allow(clippy::type_complexity)]
fn pooled_bootstrap(
    pairs: &[(&StudyRun, &StudyRun)],
    key: &compare::SumRate,
) -> (
    Option<(paired::PairedMetric, paired::PairedMetric)>,
    Option<String>,
) {
    let mut units = Vec::new();
    for (a, b) in pairs {
        if let Some(r) = [a, b]
            .into_iter()
            .find(|r| r.action == REUSED && r.summary.outcomes_of(&key.suite).is_none())
        {
            return (
                None,
                Some(format!(
                    "replicate {} of {} was taken from an earlier report, which holds no per-instance outcomes",
                    r.replicate, r.engineer
                )),
            );
        }
        let (Some((_, oa)), Some((_, ob))) = (
            a.summary.outcomes_of(&key.suite),
            b.summary.outcomes_of(&key.suite),
        ) else {
            return (
                None,
                Some(format!(
                    "no per-instance {} outcomes on replicate {} (runs recorded before evaluation_outcomes events)",
                    key.suite, b.replicate
                )),
            );
        };
        if let Some(why) = paired::unpairable(oa, ob) {
            return (None, Some(format!("replicate {}: {why}", b.replicate)));
        }
        let flags = a.summary.coordination_flags.get(&key.suite);
        let Some(g) = paired::groups_with(oa, flags.map(Vec::as_slice))
            .into_iter()
            .find(|g| g.agents == key.agents && g.subset == key.subset)
        else {
            return (
                None,
                Some(format!("replicate {}: no such group", b.replicate)),
            );
        };
        units.push(paired::unit(&g, oa, ob));
    }
    let label = format!(
        "study {} {} agents {}",
        key.suite,
        key.agents,
        key.subset.as_deref().unwrap_or("all")
    );
    (Some(paired::paired_metrics(&units, &label)), None)
}
