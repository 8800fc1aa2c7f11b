//! Study reports: the runs of a counterfactual study (`ledger study`), their test
//! cells aggregated over seeds (mean and 95% t-interval), each engineer's paired
//! differences against `fixed` (replicate r against replicate r: the same fork point and
//! suite items), and the CSV, Markdown and plot series written from them.
//! The application (`mapf_ledger::study`) forks and runs the study; [`study_report`]
//! summarises its runs and [`write_study`] writes the files.
//!
//! One data flow, a file per step:
//! - `model.rs`: the types of `study.json` ([`StudyReport`] and its parts) and the
//!   names a study agrees on ([`BASELINE`], [`REUSED`], [`ORDERINGS`]);
//! - `items.rs`: the per-instance outcomes a report keeps for a later study to reuse
//!   ([`StudyItems`]);
//! - [`study_report`] (here) summarises the runs with `aggregate.rs` (means over seeds),
//!   `pairing.rs` (paired differences, transfers, orderings) and `power.rs` (the power
//!   line);
//! - `tables.rs`: what a study shows, computed once ([`StudyTables`]): study.md
//!   (`markdown.rs`) and the report's study section (`report::html`) only format it;
//! - `csv.rs`: study.csv; `write.rs`: every file of the study into its directory.
mod aggregate;
mod csv;
mod items;
mod markdown;
mod model;
mod pairing;
mod power;
mod tables;
mod write;

pub use self::csv::study_csv;
pub use markdown::{runs_line, study_markdown};
pub use model::{
    ItemsMismatch, PowerPlan, RecordedOutcomes, StudyCell, StudyCurvePoint, StudyDesign,
    StudyItems, StudyPaired, StudyPairedMetric, StudyPower, StudyPowerObserved, StudyReport,
    StudyRun, StudyRunRecord, UndecidedStage, BASELINE, ORACLE, ORDERINGS, REUSED,
    TRANSFER_BASELINE,
};
pub use pairing::{orderings, paired_vs_baseline, regrets, transfers};
pub use tables::{
    paired_cell, paired_cell_parts, study_series, CellRow, Claim, CurveRow, DeltaCell, DeltaRow,
    DeltaTable, EngineerRuns, Orderings, StudyTables, SubsetRow, TestTable, Verdict,
};
pub use write::{write_study, StudyWriteError};

use crate::views::compare;

/// The study's report from its runs (as the application's `run_study` returns them): each
/// run's summary and outcomes, the per-engineer aggregates and the paired differences
/// against the first engineer.
///
/// `reused` are finished runs taken from an earlier report of the same study (see the
/// application's `reusable_runs`): they count like the others, and pair item by item
/// through the outcomes the report kept ([`StudyItems`]). A report written before it
/// kept them has none, so the pooled bootstrap of a row that pairs such a run is left
/// out with a note and the seed-level t-interval stands alone.
pub fn study_report(
    ledger: &mut crate::ledger::Ledger,
    spec: &StudyDesign,
    records: Vec<StudyRunRecord>,
    reused: Vec<StudyRun>,
    plan: PowerPlan,
) -> Result<StudyReport, crate::ledger::LedgerError> {
    let mut runs = reused;
    for rec in records {
        let st = ledger.projection(&rec.branch)?;
        let mut summary = compare::summarise(&rec.branch, &st);
        compare::load_outcomes(ledger, &st, &mut summary)?;
        let undecided = undecided(&st, spec.at);
        runs.push(StudyRun {
            engineer: rec.engineer,
            replicate: rec.replicate,
            head: ledger.head(&rec.branch)?,
            undecided,
            items: StudyItems::of(&summary),
            summary,
            branch: rec.branch,
            action: rec.action.into(),
        });
    }
    // Engineer by engineer (the design's order), seed by seed, wherever a run came from.
    let rank = |e: &str| spec.engineers.iter().position(|x| x == e);
    runs.sort_by_key(|r| (rank(&r.engineer), r.replicate));
    let (cells, validation) = aggregate::aggregate(&spec.engineers, &runs);
    let paired = pairing::paired_vs_baseline(&spec.engineers, &runs);
    let orderings = pairing::orderings(&spec.engineers, &runs);
    let transfer = pairing::transfers(&spec.engineers, &runs);
    let regret = pairing::regrets(&spec.engineers, &runs);
    let power = power::power(&runs, &paired, &orderings, plan);
    Ok(StudyReport {
        from: spec.from.clone(),
        at: spec.at,
        seeds: spec.seeds,
        engineers: spec.engineers.clone(),
        runs,
        cells,
        validation,
        paired,
        orderings,
        transfer,
        regret,
        power,
        files: vec![],
    })
}

/// The stages from `at` on whose decision kept the configuration without the engineer
/// deciding it (see [`StudyRun::undecided`]).
fn undecided(st: &crate::ledger::BranchState, at: u32) -> Vec<UndecidedStage> {
    st.stages
        .iter()
        .filter(|s| s.stage >= at)
        .filter_map(|s| match s.decision_status.as_deref() {
            Some(status @ ("fallback" | "rejected")) => Some(UndecidedStage {
                stage: s.stage,
                status: status.to_string(),
            }),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_names_the_stages_its_engineer_did_not_decide_from_the_fork_on() {
        let stage = |n: u32, status: &str| crate::ledger::StageState {
            stage: n,
            decision_status: Some(status.to_string()),
            ..Default::default()
        };
        let st = crate::ledger::BranchState {
            stages: vec![
                stage(1, "fallback"), // before the fork: the source's, not the arm's
                stage(2, "accepted"),
                stage(3, "fallback"),
                stage(4, "clipped"),
                stage(5, "rejected"),
            ],
            ..Default::default()
        };
        let names: Vec<(u32, &str)> = undecided(&st, 2)
            .iter()
            .map(|u| {
                (
                    u.stage,
                    if u.status == "fallback" {
                        "fallback"
                    } else {
                        "rejected"
                    },
                )
            })
            .collect();
        assert_eq!(names, vec![(3, "fallback"), (5, "rejected")]);
    }
}
