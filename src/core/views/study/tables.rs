//! What a study shows, computed once from its [`StudyReport`] ([`StudyTables`]): the
//! test tables in the paper's layout, the subset rows, the transfer and paired tables
//! with their intervals, the orderings with their verdicts, the power line and the
//! validation curve. study.md ([`super::study_markdown`]) and the report's study section
//! (`report::html`) both render this one structure and only format it, with the cell
//! texts here ([`paired_cell`], [`paired_cell_parts`], [`Verdict::text`]) and
//! [`crate::views::format`].
use super::model::{
    StudyCell, StudyCurvePoint, StudyPaired, StudyPairedMetric, StudyPower, StudyReport, StudyRun,
    BASELINE, ORDERINGS,
};
use crate::ledger::Hash;
use crate::views::compare::mean_ci;
use std::collections::BTreeSet;

/// Everything study.md and the report's study section show of one study.
pub struct StudyTables<'a> {
    /// The study shown: its design (from, at, seeds, engineers) and its runs.
    pub study: &'a StudyReport,
    /// One per engineer, in study order (the column order of every table).
    pub engineers: Vec<EngineerRuns<'a>>,
    /// Final-stage test results, one table per agent count (ascending).
    pub test: Vec<TestTable<'a>>,
    /// The Sum row of each wait-ratio subset of a stratified test suite, by (agents,
    /// subset); empty when the suite is not stratified.
    pub subsets: Vec<SubsetRow<'a>>,
    /// Each engineer's final stage against its runs' stage 0 (None: no run has a
    /// transfer).
    pub transfer: Option<DeltaTable<'a>>,
    /// Each engineer against [`BASELINE`] (None: the study has no baseline).
    pub paired: Option<DeltaTable<'a>>,
    /// Each arm's regret, a row per arm (its `engineer` is the arm; each cell's pair is
    /// the oracle against it, Δ = oracle − arm). None: the study has no oracle arm.
    pub regret: Option<DeltaTable<'a>>,
    /// The paper's orderings stated plainly (None: no power line, or no ordering the
    /// study can state).
    pub orderings: Option<Orderings<'a>>,
    /// Seeds 80% power asks on the target row.
    pub power: Option<&'a StudyPower>,
    /// Mean validation rates per stage (ascending), a point per engineer.
    pub validation: Vec<CurveRow<'a>>,
}

/// One engineer of a study: its runs, their heads (what its cells cite) and its
/// final-stage validation.
pub struct EngineerRuns<'a> {
    pub engineer: &'a str,
    pub runs: Vec<&'a StudyRun>,
    /// The runs' heads, in run order.
    pub heads: Vec<Hash>,
    /// The latest stage any run validated.
    pub final_stage: Option<u32>,
    /// Valid % and optimal % of each run's last validation: (mean, half-width of the
    /// 95% t-interval) over the runs that validated (None: none did).
    pub final_validation: Option<[(f64, Option<f64>); 2]>,
}

/// One agent count's final-stage test table: a row per map size and the Sum row.
pub struct TestTable<'a> {
    pub agents: usize,
    /// The Sum row (mean over sizes).
    pub sum: CellRow<'a>,
    /// A row per map size, ascending.
    pub sizes: Vec<CellRow<'a>>,
}

/// One row of a test table: the cell of each engineer (None: not evaluated).
pub struct CellRow<'a> {
    /// The map size (None: the Sum row).
    pub size: Option<usize>,
    pub cells: Vec<Option<&'a StudyCell>>,
}

/// The Sum row of one wait-ratio subset: the cell of each engineer.
pub struct SubsetRow<'a> {
    pub agents: usize,
    pub subset: &'a str,
    pub cells: Vec<Option<&'a StudyCell>>,
}

/// Paired differences in the paper's layout: a column per Sum row, a row per engineer
/// (and per engineer and subset).
pub struct DeltaTable<'a> {
    /// (suite, agents): validation first, then the test agent counts.
    pub cols: Vec<(&'a str, usize)>,
    pub rows: Vec<DeltaRow<'a>>,
    /// The most seeds any row pairs.
    pub seeds: usize,
    /// Why rows lack instance-level statistics, each reason once.
    pub notes: BTreeSet<&'a str>,
}

/// One row of a [`DeltaTable`]: an engineer on every item or on one subset.
pub struct DeltaRow<'a> {
    pub engineer: &'a str,
    pub subset: Option<&'a str>,
    /// One per column (None: not paired).
    pub cells: Vec<Option<DeltaCell<'a>>>,
}

/// One paired comparison and the heads of the runs it pairs (what its numbers cite).
pub struct DeltaCell<'a> {
    pub pair: &'a StudyPaired,
    pub heads: Vec<Hash>,
}

/// The paper's orderings on the items that need coordination (validation, and the
/// power line's test row) or, in a suite that does not mark them, on every item.
pub struct Orderings<'a> {
    /// The items compared: the coordination subset, or None for every item.
    pub subset: Option<&'a str>,
    /// Each claim on each row the study paired, claim by claim.
    pub claims: Vec<Claim<'a>>,
}

/// One ordering on one row: the claim ("current > base"), the comparison that tests
/// it and what its interval says.
pub struct Claim<'a> {
    pub claim: &'static str,
    pub pair: &'a StudyPaired,
    pub verdict: Verdict,
}

/// What a paired interval says about "engineer > baseline".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The interval is above 0.
    Holds,
    /// The interval is below 0.
    Reversed,
    /// The interval spans 0.
    NotResolved,
    /// One seed and no pooled bootstrap: no interval to read.
    NoInterval,
}

/// One stage of the validation curve: each engineer's mean (None: no run validated it).
pub struct CurveRow<'a> {
    pub stage: u32,
    pub points: Vec<Option<&'a StudyCurvePoint>>,
}

impl<'a> StudyTables<'a> {
    /// The tables of `study`.
    pub fn of(study: &'a StudyReport) -> StudyTables<'a> {
        StudyTables {
            study,
            engineers: study
                .engineers
                .iter()
                .map(|e| EngineerRuns::of(study, e))
                .collect(),
            test: test_tables(study),
            subsets: subset_rows(study),
            transfer: transfer_table(study),
            paired: paired_table(study),
            regret: regret_table(study),
            orderings: orderings(study),
            power: study.power.as_ref(),
            validation: curve_rows(study),
        }
    }
}

impl<'a> EngineerRuns<'a> {
    fn of(study: &'a StudyReport, e: &'a str) -> EngineerRuns<'a> {
        let runs: Vec<&StudyRun> = study.runs.iter().filter(|x| x.engineer == e).collect();
        let finals: Vec<(u32, f64, f64)> = runs
            .iter()
            .filter_map(|x| x.summary.validation.last().copied())
            .collect();
        let final_validation = (!finals.is_empty()).then(|| {
            [
                mean_ci(&finals.iter().map(|f| f.1).collect::<Vec<_>>()),
                mean_ci(&finals.iter().map(|f| f.2).collect::<Vec<_>>()),
            ]
        });
        EngineerRuns {
            engineer: e,
            heads: runs.iter().map(|x| x.head).collect(),
            final_stage: finals.iter().map(|f| f.0).max(),
            final_validation,
            runs,
        }
    }
}

impl Verdict {
    /// The verdict of `m`'s t-interval over seeds, or of its pooled bootstrap with one
    /// seed.
    pub fn of(m: &StudyPairedMetric) -> Verdict {
        let (low, high) = match (m.ci95, m.bootstrap_ci95) {
            (Some(h), _) => (m.mean - h, m.mean + h),
            (None, Some(b)) => (b.low, b.high),
            (None, None) => return Verdict::NoInterval,
        };
        if low > 0.0 {
            Verdict::Holds
        } else if high < 0.0 {
            Verdict::Reversed
        } else {
            Verdict::NotResolved
        }
    }

    /// As study.md states it.
    pub fn text(self) -> &'static str {
        match self {
            Verdict::Holds => "holds",
            Verdict::Reversed => "reversed",
            Verdict::NotResolved => "not resolved",
            Verdict::NoInterval => "one seed, no interval",
        }
    }
}

/// The whole-suite cells (not a subset's) of `study`.
fn whole(study: &StudyReport) -> impl Iterator<Item = &StudyCell> {
    study.cells.iter().filter(|c| c.subset.is_none())
}

/// One test table per agent count: the Sum row and a row per size, each engineer's
/// whole-suite cell.
fn test_tables(study: &StudyReport) -> Vec<TestTable<'_>> {
    let agents: BTreeSet<usize> = whole(study).map(|c| c.agents).collect();
    let row = |k: usize, size: Option<usize>| CellRow {
        size,
        cells: study
            .engineers
            .iter()
            .map(|e| whole(study).find(|c| &c.engineer == e && c.agents == k && c.size == size))
            .collect(),
    };
    agents
        .into_iter()
        .map(|k| {
            let sizes: BTreeSet<usize> = whole(study)
                .filter(|c| c.agents == k)
                .filter_map(|c| c.size)
                .collect();
            TestTable {
                agents: k,
                sum: row(k, None),
                sizes: sizes.into_iter().map(|n| row(k, Some(n))).collect(),
            }
        })
        .collect()
}

/// A row per (agents, subset) of the subset cells, each engineer's cell.
fn subset_rows(study: &StudyReport) -> Vec<SubsetRow<'_>> {
    let keys: BTreeSet<(usize, &str)> = study
        .cells
        .iter()
        .filter_map(|c| Some((c.agents, c.subset.as_deref()?)))
        .collect();
    keys.into_iter()
        .map(|(k, subset)| SubsetRow {
            agents: k,
            subset,
            cells: study
                .engineers
                .iter()
                .map(|e| {
                    study.cells.iter().find(|c| {
                        &c.engineer == e && c.agents == k && c.subset.as_deref() == Some(subset)
                    })
                })
                .collect(),
        })
        .collect()
}

/// The columns of a paired table: every (suite, agents) its comparisons cover,
/// validation first.
fn columns(pairs: &[StudyPaired]) -> Vec<(&str, usize)> {
    let cols: BTreeSet<(bool, &str, usize)> = pairs
        .iter()
        .map(|p| (p.suite != "val", p.suite.as_str(), p.agents))
        .collect();
    cols.into_iter().map(|(_, s, k)| (s, k)).collect()
}

/// A [`DeltaTable`] of `pairs` with these rows, each cell citing the heads of
/// `runs_of` its comparison.
fn delta_table<'a>(
    pairs: &'a [StudyPaired],
    rows: Vec<(&'a str, Option<&'a str>)>,
    runs_of: impl Fn(&StudyPaired) -> Vec<Hash>,
) -> DeltaTable<'a> {
    delta_table_by(pairs, rows, |p| &p.engineer, runs_of)
}

/// [`delta_table`] whose rows are named by `row_of` of each pair (the regret table's
/// rows are the arms, each pair's baseline).
fn delta_table_by<'a>(
    pairs: &'a [StudyPaired],
    rows: Vec<(&'a str, Option<&'a str>)>,
    row_of: fn(&StudyPaired) -> &str,
    runs_of: impl Fn(&StudyPaired) -> Vec<Hash>,
) -> DeltaTable<'a> {
    let cols = columns(pairs);
    let rows = rows
        .into_iter()
        .map(|(engineer, subset)| DeltaRow {
            engineer,
            subset,
            cells: cols
                .iter()
                .map(|&(suite, k)| {
                    let pair = pairs.iter().find(|p| {
                        row_of(p) == engineer
                            && p.suite == suite
                            && p.agents == k
                            && p.subset.as_deref() == subset
                    })?;
                    Some(DeltaCell {
                        pair,
                        heads: runs_of(pair),
                    })
                })
                .collect(),
        })
        .collect();
    DeltaTable {
        cols,
        rows,
        seeds: pairs.iter().map(|p| p.replicates.len()).max().unwrap_or(0),
        notes: pairs.iter().filter_map(|p| p.note.as_deref()).collect(),
    }
}

/// What training did per engineer: a row per engineer and half (all items, then those
/// that need no coordination and those that do) that has a transfer.
fn transfer_table(study: &StudyReport) -> Option<DeltaTable<'_>> {
    if study.transfer.is_empty() {
        return None;
    }
    let rows: Vec<(&str, Option<&str>)> = study
        .engineers
        .iter()
        .flat_map(|e| [None, Some("indep"), Some("coord")].map(|h| (e.as_str(), h)))
        .filter(|(e, h)| {
            study
                .transfer
                .iter()
                .any(|p| p.engineer == *e && p.subset.as_deref() == *h)
        })
        .collect();
    Some(delta_table(&study.transfer, rows, |p| {
        study
            .runs
            .iter()
            .filter(|x| x.engineer == p.engineer && p.replicates.contains(&x.replicate))
            .map(|x| x.head)
            .collect()
    }))
}

/// Each engineer against [`BASELINE`]: rows (engineer, subset) in study order, each
/// engineer's whole suite before its subsets.
fn paired_table(study: &StudyReport) -> Option<DeltaTable<'_>> {
    pairs_table(study, &study.paired, |p| &p.engineer)
}

/// Each arm's regret, a row per arm in study order (its whole suite before its
/// subsets), each cell the oracle against the arm.
fn regret_table(study: &StudyReport) -> Option<DeltaTable<'_>> {
    pairs_table(study, &study.regret, |p| &p.baseline)
}

/// A [`DeltaTable`] of `pairs`, a row per (`row_of`, subset) in study order (each
/// row's whole suite before its subsets), each cell citing the heads of both sides'
/// runs. None without pairs.
fn pairs_table<'a>(
    study: &'a StudyReport,
    pairs: &'a [StudyPaired],
    row_of: fn(&StudyPaired) -> &str,
) -> Option<DeltaTable<'a>> {
    if pairs.is_empty() {
        return None;
    }
    let mut rows: Vec<(&str, Option<&str>)> = Vec::new();
    for p in pairs {
        let key = (row_of(p), p.subset.as_deref());
        if !rows.contains(&key) {
            rows.push(key);
        }
    }
    rows.sort_by_key(|&(e, sub)| {
        (
            study.engineers.iter().position(|x| x == e),
            sub.is_some(),
            sub,
        )
    });
    Some(delta_table_by(pairs, rows, row_of, |p| {
        study
            .runs
            .iter()
            .filter(|x| {
                (x.engineer == p.engineer || x.engineer == p.baseline)
                    && p.replicates.contains(&x.replicate)
            })
            .map(|x| x.head)
            .collect()
    }))
}

/// Every engineer over [`BASELINE`] ("engineered > fixed"), then each of [`ORDERINGS`]
/// the study ran, on validation (its smallest agent count) and the power line's test
/// row.
fn orderings(study: &StudyReport) -> Option<Orderings<'_>> {
    let pw = study.power.as_ref()?;
    let subset = pw.subset.as_deref();
    let all = || study.paired.iter().chain(&study.orderings);
    let val_agents = all().filter(|p| p.suite == "val").map(|p| p.agents).min();
    let mut rows: Vec<(&str, usize)> = vec![];
    if let Some(k) = val_agents {
        rows.push(("val", k));
    }
    rows.push((pw.suite.as_str(), pw.agents));
    let mut asked: Vec<(&'static str, &str, &str)> = study
        .engineers
        .iter()
        .filter(|e| *e != BASELINE)
        .map(|e| ("engineered > fixed", e.as_str(), BASELINE))
        .collect();
    for (claim, e, b) in ORDERINGS {
        if study
            .orderings
            .iter()
            .any(|p| p.engineer == e && p.baseline == b)
        {
            asked.push((claim, e, b));
        }
    }
    let mut claims = Vec::new();
    for (claim, e, b) in asked {
        for &(suite, k) in &rows {
            let found = all().find(|p| {
                p.engineer == e
                    && p.baseline == b
                    && p.suite == suite
                    && p.agents == k
                    && p.subset.as_deref() == subset
            });
            if let Some(pair) = found {
                claims.push(Claim {
                    claim,
                    pair,
                    verdict: Verdict::of(&pair.valid),
                });
            }
        }
    }
    (!claims.is_empty()).then_some(Orderings { subset, claims })
}

/// A row per validated stage, each engineer's mean.
fn curve_rows(study: &StudyReport) -> Vec<CurveRow<'_>> {
    let stages: BTreeSet<u32> = study.validation.iter().map(|v| v.stage).collect();
    stages
        .into_iter()
        .map(|stage| CurveRow {
            stage,
            points: study
                .engineers
                .iter()
                .map(|e| {
                    study
                        .validation
                        .iter()
                        .find(|v| &v.engineer == e && v.stage == stage)
                })
                .collect(),
        })
        .collect()
}

/// One paired cell: `+2.50 [-1.20, +6.20]; boot [-0.80, +5.10]; p 0.2100`.
pub fn paired_cell(m: &StudyPairedMetric) -> String {
    let (main, detail) = paired_cell_parts(m);
    match detail {
        Some(d) => format!("{main}; {d}"),
        None => main,
    }
}

/// A paired cell in two parts: the mean difference with its t-interval over seeds, and
/// the instance-level statistics (`boot [-0.80, +5.10]; p 0.2100`) when there are any.
pub fn paired_cell_parts(m: &StudyPairedMetric) -> (String, Option<String>) {
    let mut main = format!("{:+.2}", m.mean);
    if let Some(h) = m.ci95 {
        main.push_str(&format!(" [{:+.2}, {:+.2}]", m.mean - h, m.mean + h));
    }
    let mut detail = Vec::new();
    if let Some(b) = m.bootstrap_ci95 {
        detail.push(format!("boot [{:+.2}, {:+.2}]", b.low, b.high));
    }
    if let Some(mc) = m.mcnemar {
        detail.push(format!("p {:.4}", mc.p));
    }
    (main, (!detail.is_empty()).then(|| detail.join("; ")))
}

/// A study's mean validation valid-% curve per engineer (plot series).
pub fn study_series(r: &StudyReport) -> Vec<crate::figures::Series> {
    r.engineers
        .iter()
        .map(|e| {
            (
                e.clone(),
                r.validation
                    .iter()
                    .filter(|v| &v.engineer == e)
                    .map(|v| (v.stage, v.valid_mean))
                    .collect(),
            )
        })
        .collect()
}
