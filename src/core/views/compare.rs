//! `compare`: per-stage validation curves and final test tables of branches side by
//! side in the paper's layout (rows are map sizes, a "Sum" row per agent count is the
//! mean over sizes), the final stage's tables per wait-ratio subset of stratified
//! suites, paired differences of every branch against the first on the same suite items
//! ([`super::paired`]), every engineer decision, and the statistics study reports share.
//! Views over projections (and the outcomes events they name).
use super::paired::{paired_rows, unpairable, PairedRow};
use crate::env::table::ResultTable;
use crate::ledger::{BranchState, EventBody, Hash, Ledger, LedgerError, Resolved};
use crate::record::event::{Evaluation, EvaluationOutcomes};
use crate::record::trainer::table_of;
use std::collections::BTreeSet;
use std::fmt::Write as _;

/// What `compare` shows of one branch.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct BranchSummary {
    pub branch: String,
    /// Engineer of each designed stage, by stage.
    #[serde(with = "named::engineers")]
    #[schemars(with = "Vec<named::StageEngineer>")]
    pub engineers: Vec<(u32, String)>,
    /// (stage, validation valid %, validation optimal %) of every evaluated stage.
    #[serde(with = "named::validation")]
    #[schemars(with = "Vec<named::ValidationPoint>")]
    pub validation: Vec<(u32, f64, f64)>,
    /// The last evaluated stage's test table.
    pub final_stage: Option<u32>,
    #[serde(skip)]
    pub test: ResultTable,
    /// The test table as rows: (agents, size, total, valid, optimal).
    #[serde(with = "named::cells")]
    #[schemars(with = "Vec<named::Cell>")]
    pub test_cells: Vec<(usize, usize, u32, u32, u32)>,
    /// Every engineer decision of the branch, by stage.
    pub decisions: Vec<DecisionLine>,
    /// The final stage's tables of each wait-ratio subset (stratified suites only).
    #[serde(default)]
    pub subsets: Vec<SubsetTable>,
    /// Every evaluated stage's valid/optimal % on the items that need coordination and
    /// on the rest, per suite and agent count, beside the independent-shortest-paths
    /// baseline (empty for ledgers recorded before per-item outcomes).
    #[serde(default)]
    pub coordination: Vec<super::coordination::StageCoordination>,
    /// Per suite, whether each item (in suite order) needs coordination: the pairing
    /// groups `coord`/`indep` of paired statistics.
    #[serde(skip)]
    pub coordination_flags: std::collections::BTreeMap<String, Vec<bool>>,
    /// Paired differences against the first branch compared (`compare` only; absent on
    /// the first branch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paired: Option<PairedComparison>,
    /// What training did: the final stage against the branch's own stage 0 on the same
    /// suite items (`against` is `BRANCH@stage0`), every Sum row with its paired
    /// interval, whole and per subset and coordination half. Trained on 2 agents, its
    /// 3-5-agent rows are the transfer. Absent before a second evaluated stage or
    /// without per-instance outcomes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transfer: Option<PairedComparison>,
    /// The final stage's per-instance outcomes per suite, with their events (loaded by
    /// [`load_outcomes`]; empty for ledgers recorded before outcomes were).
    #[serde(skip)]
    pub outcomes: Vec<(Hash, EvaluationOutcomes)>,
    /// Stage 0's per-instance outcomes per suite, with their events: the other side of
    /// [`BranchSummary::transfer`].
    #[serde(skip)]
    pub stage0_outcomes: Vec<(Hash, EvaluationOutcomes)>,
}

/// The JSON of a summary's rows: objects with named fields (`{"stage": 2, "valid":
/// 41.5, ...}`), not positional arrays. The views keep their tuples; reading accepts
/// either form, so a `study.json` written before names its fields still reads back.
pub mod named {
    use schemars::JsonSchema;
    use serde::{Deserialize, Serialize};

    /// The engineer that designed a stage.
    #[derive(Serialize, Deserialize, JsonSchema)]
    pub struct StageEngineer {
        pub stage: u32,
        pub engineer: String,
    }

    /// A stage's validation Sum row (2 agents, mean over sizes).
    #[derive(Serialize, Deserialize, JsonSchema)]
    pub struct ValidationPoint {
        pub stage: u32,
        /// Valid plans, %.
        pub valid: f64,
        /// Optimal plans, %.
        pub optimal: f64,
    }

    /// One (agents, size) cell of a table: counts of its instances.
    #[derive(Serialize, Deserialize, JsonSchema)]
    pub struct Cell {
        pub agents: usize,
        pub size: usize,
        pub total: u32,
        pub valid: u32,
        pub optimal: u32,
    }

    macro_rules! named {
        ($m:ident, $named:ident, $tuple:ty, |$t:pat_param| $to:expr, |$n:ident| $from:expr) => {
            pub mod $m {
                #[allow(unused_imports)]
                use super::*;
                pub fn serialize<S: serde::Serializer>(
                    v: &[$tuple],
                    s: S,
                ) -> Result<S::Ok, S::Error> {
                    s.collect_seq(v.iter().map(|$t| $to))
                }
                pub fn deserialize<'de, D: serde::Deserializer<'de>>(
                    d: D,
                ) -> Result<Vec<$tuple>, D::Error> {
                    Ok(<Vec<super::$named> as serde::Deserialize>::deserialize(d)?
                        .into_iter()
                        .map(|$n| $from)
                        .collect())
                }
            }
        };
    }
    named!(
        engineers,
        StageEngineer,
        (u32, String),
        |(stage, engineer)| StageEngineer {
            stage: *stage,
            engineer: engineer.clone()
        },
        |x| (x.stage, x.engineer)
    );
    named!(
        validation,
        ValidationPoint,
        (u32, f64, f64),
        |&(stage, valid, optimal)| ValidationPoint {
            stage,
            valid,
            optimal
        },
        |x| (x.stage, x.valid, x.optimal)
    );
    named!(
        cells,
        Cell,
        (usize, usize, u32, u32, u32),
        |&(agents, size, total, valid, optimal)| Cell {
            agents,
            size,
            total,
            valid,
            optimal
        },
        |x| (x.agents, x.size, x.total, x.valid, x.optimal)
    );
}

/// One wait-ratio subset's table at the final stage (`test@wait0.25`, ...).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct SubsetTable {
    /// `val` or `test`.
    pub suite: String,
    /// `wait0.25`, ...
    pub subset: String,
    /// The evaluation event it came from.
    pub event: Hash,
    /// (agents, size, total, valid, optimal) per cell.
    #[serde(with = "named::cells")]
    #[schemars(with = "Vec<named::Cell>")]
    pub cells: Vec<(usize, usize, u32, u32, u32)>,
    #[serde(skip)]
    pub table: ResultTable,
}

/// A branch against the first branch compared, item by item on the same suites.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct PairedComparison {
    /// The branch compared against (A; differences are this branch minus it).
    pub against: String,
    /// A's final evaluated stage and this branch's.
    pub against_stage: Option<u32>,
    pub stage: Option<u32>,
    /// Bootstrap resamples of every interval.
    pub resamples: u32,
    /// Per suite, agent count and wait-ratio subset: both rates with their own
    /// intervals, the paired difference with its bootstrap interval, McNemar's test.
    pub rows: Vec<PairedRow>,
    /// Suites without rows and why (no outcomes recorded, different instances).
    pub missing: Vec<String>,
}

/// One engineer decision as `compare --decisions` shows it.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct DecisionLine {
    pub stage: u32,
    /// The decision event (`ledger show` it).
    pub event: String,
    pub engineer: String,
    /// accepted, clipped, rejected or fallback.
    pub status: String,
    /// What the applied configuration changed (`4 wait 0.20->0.35`, `9 added`, ...).
    pub changes: Vec<String>,
    /// Keys the engineer wrote that no engineer may set (refused and recorded).
    pub refused: Vec<String>,
    /// The parameter hash the stage trained to (short), if it completed.
    pub params: Option<String>,
}

/// A stage's latest evaluation on `suite` as a table.
pub fn table(state: &crate::ledger::StageState, suite: &str) -> Option<ResultTable> {
    state.evaluations.get(suite).map(|cells| {
        table_of(&Evaluation {
            suite: suite.into(),
            checkpoint: None,
            cells: cells.clone(),
        })
    })
}

/// The decisions of a branch, by stage, with what each changed.
pub fn decisions(ledger: &Ledger, state: &BranchState) -> Result<Vec<DecisionLine>, LedgerError> {
    let mut out = Vec::new();
    let mut previous = state.initial_config.clone();
    for st in state.stages.iter().filter(|s| s.stage > 0) {
        if let Some(h) = st.decision {
            if let crate::ledger::EventBody::EngineerDecision(d) = ledger.event(&h)?.body {
                let changes = previous
                    .as_ref()
                    .map(|p| super::config_changes(p, &d.applied))
                    .unwrap_or_default();
                out.push(DecisionLine {
                    stage: st.stage,
                    event: h.short(),
                    engineer: d.engineer.clone(),
                    status: st.decision_status.clone().unwrap_or_default(),
                    changes,
                    refused: d.refused.iter().map(|r| r.field.clone()).collect(),
                    params: st.checkpoint.as_ref().map(|c| c.1.short()),
                });
            }
        }
        if st.config.is_some() {
            previous = st.config.clone();
        }
    }
    Ok(out)
}

pub fn summarise(branch: &str, state: &BranchState) -> BranchSummary {
    let mut validation = Vec::new();
    let mut final_stage = None;
    let mut test = ResultTable::default();
    for s in &state.stages {
        if let Some(v) = table(s, "val") {
            let (valid, optimal) = v.sum_row(2);
            validation.push((s.stage, valid, optimal));
        }
        if let Some(t) = table(s, "test") {
            final_stage = Some(s.stage);
            test = t;
        }
    }
    BranchSummary {
        branch: branch.to_string(),
        engineers: state
            .stages
            .iter()
            .filter(|s| s.stage > 0)
            .filter_map(|s| s.engineer.clone().map(|e| (s.stage, e)))
            .collect(),
        validation,
        final_stage,
        test_cells: test
            .cells
            .iter()
            .map(|(&(k, n), c)| (k, n, c.total, c.valid, c.optimal))
            .collect(),
        test,
        decisions: Vec::new(),
        subsets: final_stage
            .and_then(|n| state.stage(n))
            .map(subset_tables)
            .unwrap_or_default(),
        coordination: Vec::new(),
        coordination_flags: Default::default(),
        paired: None,
        transfer: None,
        outcomes: Vec::new(),
        stage0_outcomes: Vec::new(),
    }
}

/// The subset tables of a stage (evaluations named `SUITE@SUBSET`), in suite then
/// recorded order.
fn subset_tables(st: &crate::ledger::StageState) -> Vec<SubsetTable> {
    let mut out: Vec<SubsetTable> = st
        .evaluations
        .keys()
        .filter_map(|name| {
            let (suite, subset) = name.split_once('@')?;
            let table = table(st, name)?;
            Some(SubsetTable {
                suite: suite.to_string(),
                subset: subset.to_string(),
                event: *st.evaluation_events.get(name)?,
                cells: table
                    .cells
                    .iter()
                    .map(|(&(k, n), c)| (k, n, c.total, c.valid, c.optimal))
                    .collect(),
                table,
            })
        })
        .collect();
    // `val` before `test`, as everywhere; subsets by name (wait0.25 < wait0.50 ...).
    out.sort_by_key(|t| (t.suite != "val", t.subset.clone()));
    out
}

/// Load the final stage's outcomes events into `summary` (none when the ledger
/// predates them).
pub fn load_outcomes(
    ledger: &Ledger,
    state: &BranchState,
    summary: &mut BranchSummary,
) -> Result<(), LedgerError> {
    summary.outcomes.clear();
    if let Some(head) = state.head {
        let suites = super::coordination::suite_items(ledger, &head)?;
        summary.coordination = super::coordination::branch_rows(ledger, state, &suites)?;
        summary.coordination_flags = suites
            .iter()
            .map(|(k, v)| {
                let flags = v.items.iter().map(|s| s.needs_coordination).collect();
                (k.clone(), flags)
            })
            .collect();
    }
    summary.stage0_outcomes.clear();
    summary.transfer = None;
    let Some(fs) = summary.final_stage else {
        return Ok(());
    };
    let load = |stage: u32, out: &mut Vec<(Hash, EvaluationOutcomes)>| -> Result<(), LedgerError> {
        let Some(st) = state.stage(stage) else {
            return Ok(());
        };
        for suite in ["val", "test"] {
            if let Some(h) = st.outcome_events.get(suite) {
                if let EventBody::EvaluationOutcomes(o) = ledger.event(h)?.body {
                    out.push((*h, o));
                }
            }
        }
        Ok(())
    };
    load(fs, &mut summary.outcomes)?;
    if fs > 0 {
        load(0, &mut summary.stage0_outcomes)?;
        summary.transfer = Some(transfer(summary, fs));
    }
    Ok(())
}

/// The final stage `fs` against stage 0 of the same branch, item by item on each suite
/// both evaluated ([`BranchSummary::transfer`]).
fn transfer(summary: &BranchSummary, fs: u32) -> PairedComparison {
    let mut rows = Vec::new();
    let mut missing = Vec::new();
    let of = |v: &[(Hash, EvaluationOutcomes)], suite: &str| {
        v.iter().find(|o| o.1.suite == suite).cloned()
    };
    for suite in ["val", "test"] {
        match (of(&summary.stage0_outcomes, suite), of(&summary.outcomes, suite)) {
            (Some((ha, oa)), Some((hb, ob))) => match unpairable(&oa, &ob) {
                Some(why) => missing.push(format!("{suite}: {why}")),
                None => rows.extend(paired_rows(
                    &oa,
                    &ob,
                    [ha, hb],
                    summary.coordination_flags.get(suite).map(Vec::as_slice),
                )),
            },
            _ => missing.push(format!(
                "{suite}: no per-instance outcomes at stage 0 or stage {fs} (evaluated before evaluation_outcomes events were recorded, or not evaluated)"
            )),
        }
    }
    PairedComparison {
        against: format!("{}@stage0", summary.branch),
        against_stage: Some(0),
        stage: Some(fs),
        resamples: super::paired::RESAMPLES,
        rows,
        missing,
    }
}

/// One number pair of the paper's tables at a branch's final stage: the Sum (mean over
/// sizes) of one agent count of a suite, whole or one wait-ratio subset.
#[derive(Clone, Debug, PartialEq)]
pub struct SumRate {
    pub suite: String,
    pub agents: usize,
    pub subset: Option<String>,
    pub valid: f64,
    pub optimal: f64,
}

impl BranchSummary {
    /// Rebuild the tables a JSON copy of this summary leaves out (`test` from
    /// `test_cells`, each subset's from its `cells`), so a summary read back from a
    /// `study.json` gives the same Sum rows as the one that was written. Per-instance
    /// outcomes are not in the summary's JSON; a report keeps them beside it
    /// (`views::study::StudyItems::restore` puts them back).
    pub fn restore_tables(&mut self) {
        let table = |cells: &[(usize, usize, u32, u32, u32)]| ResultTable {
            cells: cells
                .iter()
                .map(|&(k, n, total, valid, optimal)| {
                    let c = crate::env::table::CellCounts {
                        total,
                        valid,
                        optimal,
                    };
                    ((k, n), c)
                })
                .collect(),
        };
        self.test = table(&self.test_cells);
        for t in &mut self.subsets {
            t.table = table(&t.cells);
        }
    }

    /// The final stage's outcomes of `suite`, with their event.
    pub fn outcomes_of(&self, suite: &str) -> Option<&(Hash, EvaluationOutcomes)> {
        self.outcomes.iter().find(|o| o.1.suite == suite)
    }

    /// Every Sum row of the final stage: validation (2 agents), test per agent count,
    /// then each subset's per agent count.
    pub fn sum_rates(&self) -> Vec<SumRate> {
        let mut out = Vec::new();
        let Some(fs) = self.final_stage else {
            return out;
        };
        let rate = |suite: &str, agents, subset: Option<&str>, (valid, optimal)| SumRate {
            suite: suite.to_string(),
            agents,
            subset: subset.map(str::to_string),
            valid,
            optimal,
        };
        if let Some(&(_, v, o)) = self.validation.iter().find(|v| v.0 == fs) {
            out.push(rate("val", 2, None, (v, o)));
        }
        for k in self.test.agent_counts() {
            out.push(rate("test", k, None, self.test.sum_row(k)));
        }
        for t in &self.subsets {
            for k in t.table.agent_counts() {
                out.push(rate(&t.suite, k, Some(&t.subset), t.table.sum_row(k)));
            }
        }
        // The items that need coordination and the rest (pooled over sizes).
        for sc in self.coordination.iter().filter(|c| c.stage == fs) {
            for r in &sc.rows {
                out.push(rate(
                    &sc.suite,
                    r.agents as usize,
                    Some(super::paired::coordination_label(r.needs_coordination)),
                    (r.valid_pct, r.optimal_pct),
                ));
            }
        }
        out
    }
}

/// `b` against `a`, item by item, on each suite both have outcomes of.
pub fn pair(a: &BranchSummary, b: &BranchSummary) -> PairedComparison {
    let mut rows = Vec::new();
    let mut missing = Vec::new();
    for suite in ["val", "test"] {
        let lacking: Vec<&str> = [a, b]
            .iter()
            .filter(|x| x.outcomes_of(suite).is_none())
            .map(|x| x.branch.as_str())
            .collect();
        if !lacking.is_empty() {
            missing.push(format!(
                "{suite}: no per-instance outcomes on {} (evaluated before evaluation_outcomes events were recorded, or not evaluated)",
                lacking.join(" and ")
            ));
            continue;
        }
        let (ha, oa) = a.outcomes_of(suite).expect("checked");
        let (hb, ob) = b.outcomes_of(suite).expect("checked");
        match unpairable(oa, ob) {
            Some(why) => missing.push(format!("{suite}: {why}")),
            None => rows.extend(paired_rows(
                oa,
                ob,
                [*ha, *hb],
                a.coordination_flags.get(suite).map(Vec::as_slice),
            )),
        }
    }
    PairedComparison {
        against: a.branch.clone(),
        against_stage: a.final_stage,
        stage: b.final_stage,
        resamples: super::paired::RESAMPLES,
        rows,
        missing,
    }
}

/// Why `compare --plot FILE` cannot write its plot, found before any work.
#[derive(Debug, thiserror::Error)]
pub enum PlotPathError {
    /// Not `.svg` or `.png`.
    #[error("{0}")]
    Format(#[from] crate::figures::FigureError),
    #[error("{0}")]
    Output(#[from] crate::output::OutputError),
}

/// Check `compare --plot`'s file before any work: a figure format by its extension,
/// and a file that can be written there.
pub fn check_plot(path: &std::path::Path) -> Result<(), PlotPathError> {
    crate::figures::format_of(path)?;
    crate::output::check_file("--plot", path)?;
    Ok(())
}

/// `ledger compare` of the ledger at `dir`: [`compare`] of `branches`, read as a reader.
pub fn compare_dir(
    dir: &std::path::Path,
    branches: &[String],
) -> Result<Vec<BranchSummary>, LedgerError> {
    compare(&mut Ledger::open_read_only(dir)?, branches)
}

/// Summaries of `branches` (references: `BRANCH`, `BRANCH@stageN` or a hash prefix),
/// each after the first paired against the first.
pub fn compare(
    ledger: &mut Ledger,
    branches: &[String],
) -> Result<Vec<BranchSummary>, LedgerError> {
    let mut out = branches
        .iter()
        .map(|b| {
            // Any reference of the one grammar: a branch, BRANCH@stageN (the branch
            // through that stage), or an event's hash prefix.
            let state = match ledger.resolve(b)? {
                Resolved::Branch { name, .. } => ledger.projection(&name)?,
                Resolved::Stage { branch, stage } => {
                    ledger.state_at(&ledger.stage_end(&branch, stage)?)?
                }
                Resolved::Event(h) => ledger.state_at(&h)?,
            };
            let mut summary = summarise(b, &state);
            summary.decisions = decisions(ledger, &state)?;
            load_outcomes(ledger, &state, &mut summary)?;
            Ok(summary)
        })
        .collect::<Result<Vec<_>, LedgerError>>()?;
    for i in 1..out.len() {
        out[i].paired = Some(pair(&out[0], &out[i]));
    }
    Ok(out)
}

/// Render each branch's decisions, then say where branches made the same decision at
/// the same stage (their curves can then only differ by what came before).
pub fn render_decisions(summaries: &[BranchSummary]) -> String {
    let mut s = String::new();
    for b in summaries {
        let _ = writeln!(s, "Decisions of {}:", b.branch);
        if b.decisions.is_empty() {
            let _ = writeln!(s, "  (none)");
        }
        for d in &b.decisions {
            let _ = writeln!(
                s,
                "  stage {} {} ({}, {}): {}{}",
                d.stage,
                d.engineer,
                d.status,
                d.event,
                if d.changes.is_empty() {
                    "no change".to_string()
                } else {
                    d.changes.join(", ")
                },
                if d.refused.is_empty() {
                    String::new()
                } else {
                    format!("; refused {}", d.refused.join(", "))
                }
            );
        }
    }
    for (i, a) in summaries.iter().enumerate() {
        for b in &summaries[i + 1..] {
            for da in &a.decisions {
                let same = b.decisions.iter().find(|db| {
                    db.stage == da.stage && db.engineer != da.engineer && db.changes == da.changes
                });
                let differs = b
                    .decisions
                    .iter()
                    .find(|db| db.stage == da.stage && db.changes != da.changes);
                if let Some(db) = differs {
                    // Different decisions must show up as different training; say so even
                    // where the (small) validation suite cannot tell the two apart.
                    let val = |x: &BranchSummary| {
                        x.validation
                            .iter()
                            .find(|v| v.0 == da.stage)
                            .map(|v| (v.1, v.2))
                    };
                    let weights = match (&da.params, &db.params) {
                        (Some(pa), Some(pb)) if pa == pb => format!("identical weights ({pa})"),
                        (Some(pa), Some(pb)) => format!("different weights ({pa} vs {pb})"),
                        _ => "weights not recorded".to_string(),
                    };
                    let equal_val = match (val(a), val(b)) {
                        (Some(x), Some(y)) if x == y => {
                            format!("; validation equal ({:.2}% valid)", x.0)
                        }
                        _ => String::new(),
                    };
                    let _ = writeln!(
                        s,
                        "Note: at stage {} {} ({}) and {} ({}) decided differently and trained to {}{}",
                        da.stage, a.branch, da.engineer, b.branch, db.engineer, weights, equal_val
                    );
                }
                if let Some(db) = same {
                    let _ = writeln!(
                        s,
                        "Note: at stage {} {} ({}) and {} ({}) made the same change: {}",
                        da.stage,
                        a.branch,
                        da.engineer,
                        b.branch,
                        db.engineer,
                        if da.changes.is_empty() {
                            "none".to_string()
                        } else {
                            da.changes.join(", ")
                        }
                    );
                }
            }
        }
    }
    s
}

/// Render validation curves and the final test tables side by side.
pub fn render(summaries: &[BranchSummary]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "Validation (2 agents, mean over sizes), valid % / optimal % per stage:"
    );
    let stages: BTreeSet<u32> = summaries
        .iter()
        .flat_map(|b| b.validation.iter().map(|v| v.0))
        .collect();
    let mut head = format!("{:>6}", "stage");
    for b in summaries {
        head.push_str(&format!(" | {:^17}", truncate(&b.branch, 17)));
    }
    let _ = writeln!(s, "{head}");
    for st in &stages {
        let mut row = format!("{st:>6}");
        for b in summaries {
            match b.validation.iter().find(|v| v.0 == *st) {
                Some(&(_, v, o)) => row.push_str(&format!(" | {v:>8.2} {o:>8.2}")),
                None => row.push_str(&format!(" | {:>8} {:>8}", "-", "-")),
            }
        }
        let _ = writeln!(s, "{row}");
    }
    let agents: BTreeSet<usize> = summaries
        .iter()
        .flat_map(|b| b.test.agent_counts())
        .collect();
    for k in agents {
        let _ = writeln!(s, "\nTest, {k} agents (final stage), valid % / optimal %:");
        let mut head = format!("{:>6}", "size");
        for b in summaries {
            head.push_str(&format!(" | {:^17}", truncate(&b.branch, 17)));
        }
        let _ = writeln!(s, "{head}");
        let sizes: BTreeSet<usize> = summaries
            .iter()
            .flat_map(|b| b.test.cells.keys().filter(|c| c.0 == k).map(|c| c.1))
            .collect();
        for n in &sizes {
            let mut row = format!("{:>6}", format!("{n}x{n}"));
            for b in summaries {
                match b.test.cells.get(&(k, *n)) {
                    Some(c) => row.push_str(&format!(
                        " | {:>8.2} {:>8.2}",
                        c.valid_rate(),
                        c.optimal_rate()
                    )),
                    None => row.push_str(&format!(" | {:>8} {:>8}", "-", "-")),
                }
            }
            let _ = writeln!(s, "{row}");
        }
        let mut row = format!("{:>6}", "Sum");
        for b in summaries {
            let (v, o) = b.test.sum_row(k);
            row.push_str(&format!(" | {v:>8.2} {o:>8.2}"));
        }
        let _ = writeln!(s, "{row}");
    }
    s.push_str(&render_transfer(summaries));
    s.push_str(&render_subsets(summaries));
    s.push_str(&render_paired(summaries));
    s
}

/// What training did on each branch: a line per agent count, its Sum row's change from
/// stage 0 to the final stage on the same items with the paired 95% bootstrap interval,
/// valid then optimal, and the change of valid on the items that need coordination and
/// on the rest (empty when no branch has a transfer).
pub fn render_transfer(summaries: &[BranchSummary]) -> String {
    let mut s = String::new();
    let with: Vec<(&BranchSummary, &PairedComparison)> = summaries
        .iter()
        .filter_map(|b| Some((b, b.transfer.as_ref()?)))
        .filter(|(_, t)| !t.rows.is_empty())
        .collect();
    let Some((_, first)) = with.first() else {
        return s;
    };
    let _ = writeln!(
        s,
        "\nTransfer: each branch's final stage against its stage 0 on the same items, Sum rows (Δ points with its paired 95% bootstrap interval, {} resamples; indep/coord: valid Δ on the items that need no coordination and on those that do):",
        first.resamples
    );
    let _ = writeln!(
        s,
        "{:<17} {:>6} {:>5} {:>5} | {:^16} | {:^23} | {:^23} | {:^23} | {:^23}",
        "branch",
        "agents",
        "suite",
        "n",
        "valid 0 -> final",
        "valid Δ [95%]",
        "optimal Δ [95%]",
        "indep valid Δ [95%]",
        "coord valid Δ [95%]"
    );
    let delta = |m: &super::paired::PairedMetric| {
        format!(
            "{:>6} [{:>6}, {:>6}]",
            signed(m.diff),
            signed(m.diff_ci95.low),
            signed(m.diff_ci95.high)
        )
    };
    for (b, t) in with {
        for r in t.rows.iter().filter(|r| r.subset.is_none()) {
            let half = |name: &str| {
                t.rows
                    .iter()
                    .find(|h| {
                        h.suite == r.suite
                            && h.agents == r.agents
                            && h.subset.as_deref() == Some(name)
                    })
                    .map_or_else(|| "-".to_string(), |h| delta(&h.valid))
            };
            let _ = writeln!(
                s,
                "{:<17} {:>6} {:>5} {:>5} | {:>6.2} -> {:>6.2} | {:^23} | {:^23} | {:^23} | {:^23}",
                truncate(&b.branch, 17),
                r.agents,
                r.suite,
                r.instances,
                r.valid.a,
                r.valid.b,
                delta(&r.valid),
                delta(&r.optimal),
                half(super::paired::coordination_label(false)),
                half(super::paired::coordination_label(true)),
            );
        }
        for m in &t.missing {
            let _ = writeln!(s, "{:<17} {m}", truncate(&b.branch, 17));
        }
    }
    s
}

/// The rows of a subset table, in display order: (validation first, suite, agents,
/// subset) over every branch's subset tables. The text view and the report share it.
pub fn subset_rows<'a>(
    tables: impl Iterator<Item = &'a [SubsetTable]>,
) -> BTreeSet<(bool, String, usize, String)> {
    tables
        .flatten()
        .flat_map(|t| {
            t.table
                .agent_counts()
                .into_iter()
                .map(|k| (t.suite != "val", t.suite.clone(), k, t.subset.clone()))
        })
        .collect()
}

/// The final stage's Sum rows per wait-ratio subset, one row per (suite, agents,
/// subset), one column pair per branch (empty when no suite is stratified).
pub fn render_subsets(summaries: &[BranchSummary]) -> String {
    let mut s = String::new();
    let keys = subset_rows(summaries.iter().map(|b| b.subsets.as_slice()));
    if keys.is_empty() {
        return s;
    }
    let _ = writeln!(
        s,
        "\nBy wait-ratio subset (final stage, mean over sizes), valid % / optimal %:"
    );
    let mut head = format!("{:>5} {:>6} {:>9}", "suite", "agents", "subset");
    for b in summaries {
        head.push_str(&format!(" | {:^17}", truncate(&b.branch, 17)));
    }
    let _ = writeln!(s, "{head}");
    for (_, suite, k, subset) in keys {
        let mut row = format!("{suite:>5} {k:>6} {subset:>9}");
        for b in summaries {
            let t = b
                .subsets
                .iter()
                .find(|t| t.suite == suite && t.subset == subset)
                .filter(|t| t.table.agent_counts().contains(&k));
            match t {
                Some(t) => {
                    let (v, o) = t.table.sum_row(k);
                    row.push_str(&format!(" | {v:>8.2} {o:>8.2}"));
                }
                None => row.push_str(&format!(" | {:>8} {:>8}", "-", "-")),
            }
        }
        let _ = writeln!(s, "{row}");
    }
    s
}

/// When `b`'s engineer decided its own stages as `a`'s did (the same changes to the
/// same configuration) and they trained to the same checkpoints, the line that says so:
/// every paired difference is then 0, and a table of zeros would hide why.
pub fn agreement(a: &BranchSummary, b: &BranchSummary) -> Option<String> {
    let own: Vec<&DecisionLine> = b
        .decisions
        .iter()
        .filter(|d| !a.decisions.iter().any(|x| x.event == d.event))
        .collect();
    let (first, last) = (own.first()?, own.last()?);
    let mut ae = "";
    for d in &own {
        let x = a.decisions.iter().find(|x| x.stage == d.stage)?;
        if x.changes != d.changes || x.params.is_none() || x.params != d.params {
            return None;
        }
        if d.stage == first.stage {
            ae = x.engineer.as_str();
        }
    }
    if a.final_stage != b.final_stage {
        return None;
    }
    let stages = if first.stage == last.stage {
        format!("stage {}", first.stage)
    } else {
        format!("stages {}-{}", first.stage, last.stage)
    };
    let be = &first.engineer;
    Some(format!(
        "{} ({be}) agreed with {} ({ae}) at {stages}: the same configuration, hence the same \
         checkpoint ({}); every paired difference is 0",
        b.branch,
        a.branch,
        last.params.as_deref().unwrap_or("-")
    ))
}

fn signed(x: f64) -> String {
    format!("{x:+.2}")
}

/// Every branch after the first against the first, item by item: per suite, agent count
/// and subset, each branch's rate with its own 95% interval, the paired difference with
/// its bootstrap interval, the discordant counts and McNemar's p.
pub fn render_paired(summaries: &[BranchSummary]) -> String {
    let mut s = String::new();
    for b in summaries {
        let Some(p) = &b.paired else { continue };
        if let Some(a) = summaries.iter().find(|a| a.branch == p.against) {
            if let Some(line) = agreement(a, b) {
                let _ = writeln!(s, "\n{line}");
                continue;
            }
        }
        let stage = |x: Option<u32>| x.map_or("-".to_string(), |n| n.to_string());
        let _ = writeln!(
            s,
            "\nPaired, {} − {} (A = {}, B = {}; final stages {} and {}; the same suite items pair by pair; 95% bootstrap intervals, {} resamples; McNemar's exact test):",
            b.branch,
            p.against,
            p.against,
            b.branch,
            stage(p.against_stage),
            stage(p.stage),
            p.resamples
        );
        if p.rows.is_empty() {
            let _ = writeln!(s, "  no paired data");
        } else {
            let a = format!("A {}", truncate(&p.against, 18));
            let bb = format!("B {}", truncate(&b.branch, 18));
            let _ = writeln!(
                s,
                "{:>5} {:>6} {:>9} {:>5} {:<7} | {:^22} | {:^22} | {:^23} | {:>13} {:>9}",
                "suite",
                "agents",
                "subset",
                "n",
                "metric",
                a,
                bb,
                "Δ pp [paired 95%]",
                "only A/only B",
                "McNemar p"
            );
            for r in &p.rows {
                for (i, (name, m)) in [("valid", &r.valid), ("optimal", &r.optimal)]
                    .into_iter()
                    .enumerate()
                {
                    let lead = if i == 0 {
                        format!(
                            "{:>5} {:>6} {:>9} {:>5}",
                            r.suite,
                            r.agents,
                            r.subset.as_deref().unwrap_or("all"),
                            r.instances
                        )
                    } else {
                        format!("{:>5} {:>6} {:>9} {:>5}", "", "", "", "")
                    };
                    let _ = writeln!(
                        s,
                        "{lead} {name:<7} | {:>6.2} [{:>5.2}, {:>6.2}] | {:>6.2} [{:>5.2}, {:>6.2}] | {:>6} [{:>6}, {:>6}] | {:>13} {:>9.4}",
                        m.a,
                        m.a_ci95.low,
                        m.a_ci95.high,
                        m.b,
                        m.b_ci95.low,
                        m.b_ci95.high,
                        signed(m.diff),
                        signed(m.diff_ci95.low),
                        signed(m.diff_ci95.high),
                        format!("{}/{}", m.mcnemar.a_only, m.mcnemar.b_only),
                        m.mcnemar.p
                    );
                }
            }
        }
        for m in &p.missing {
            let _ = writeln!(s, "  {m}");
        }
    }
    s
}

fn truncate(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

// ---- plots ----

/// `compare --plot`: every branch's validation curves, valid % beside optimal %.
pub fn plot_compare(
    path: &std::path::Path,
    summaries: &[BranchSummary],
) -> Result<(), crate::figures::FigureError> {
    let series = |optimal: bool| -> Vec<crate::figures::Series> {
        summaries
            .iter()
            .map(|b| {
                (
                    b.branch.clone(),
                    b.validation
                        .iter()
                        .map(|&(s, v, o)| (s, if optimal { o } else { v }))
                        .collect(),
                )
            })
            .collect()
    };
    let (valid, optimal) = (series(false), series(true));
    crate::figures::write_panels(
        path,
        &[
            crate::figures::Curves {
                x_label: "stage",
                title: "Validation valid % (mean over sizes)",
                y_label: "valid %",
                series: &valid,
                bands: &[],
                percent: true,
            },
            crate::figures::Curves {
                x_label: "stage",
                title: "Validation optimal % (mean over sizes)",
                y_label: "optimal %",
                series: &optimal,
                bands: &[],
                percent: true,
            },
        ],
    )
}

// ---- statistics ----

/// Quantile `p` of Student's t with `df` degrees of freedom, exact (statrs), where a
/// hand table would jump between tabulated degrees of freedom.
pub fn t_quantile(p: f64, df: usize) -> f64 {
    use statrs::distribution::{ContinuousCDF, StudentsT};
    match StudentsT::new(0.0, 1.0, df as f64) {
        Ok(t) if df > 0 => t.inverse_cdf(p),
        _ => f64::NAN,
    }
}

/// Two-sided 95% quantile of Student's t with `df` degrees of freedom.
pub fn t975(df: usize) -> f64 {
    t_quantile(0.975, df)
}

/// Seeds a paired comparison needs to see a difference of `effect` points with 80% power
/// in a two-sided 5% t-test, when the per-seed differences have standard deviation `sd`:
/// the least n with n >= ((t(0.975, n-1) + t(0.8, n-1)) sd / effect)^2 (at least 2).
pub fn seeds_for_power(sd: f64, effect: f64) -> Option<usize> {
    if !(sd.is_finite() && effect > 0.0) {
        return None;
    }
    (2..=10_000).find(|&n| {
        let k = (t975(n - 1) + t_quantile(0.8, n - 1)) * sd / effect;
        k * k <= n as f64
    })
}

/// Mean and half-width of the 95% t-interval (None for fewer than 2 values).
pub fn mean_ci(xs: &[f64]) -> (f64, Option<f64>) {
    let n = xs.len();
    if n == 0 {
        return (f64::NAN, None);
    }
    let mean = xs.iter().sum::<f64>() / n as f64;
    if n < 2 {
        return (mean, None);
    }
    (mean, Some(t975(n - 1) * sd(xs) / (n as f64).sqrt()))
}

/// Sample standard deviation (n - 1 in the denominator; NaN for fewer than 2 values).
pub fn sd(xs: &[f64]) -> f64 {
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    (xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn t_interval() {
        assert_eq!(mean_ci(&[5.0]), (5.0, None));
        let (m, ci) = mean_ci(&[1.0, 3.0]);
        assert_eq!(m, 2.0);
        // sd = sqrt(2), se = 1, t(1) = 12.7062 (exact: 12.70620473617...)
        assert!((ci.unwrap() - 12.706_204_736).abs() < 1e-6, "{ci:?}");
        let (m, ci) = mean_ci(&[2.0, 2.0, 2.0]);
        assert_eq!((m, ci), (2.0, Some(0.0)));
        // Exact quantiles, monotone in the degrees of freedom (the old table jumped
        // from 2.042 at 30 to 2.021 at 31..40).
        assert!((t975(4) - 2.776_445).abs() < 1e-5);
        assert!((t975(35) - 2.030_108).abs() < 1e-5);
        assert!((t975(100_000) - 1.959_99).abs() < 1e-4);
        assert!((t_quantile(0.8, 4) - 0.940_965).abs() < 1e-5);
    }

    #[test]
    fn seeds_for_power_solves_the_t_test_sample_size() {
        // sd 3.59 (the coordination pilot's hi - lo spread), 5 points: 7 seeds, since
        // (t(.975,6) + t(.8,6)) * 3.59 / 5 = 2.41 <= sqrt(7) but 2.51 > sqrt(6).
        assert_eq!(seeds_for_power(3.59, 5.0), Some(7));
        assert_eq!(seeds_for_power(0.0, 5.0), Some(2));
        // Twice the spread needs about four times the seeds.
        let n = seeds_for_power(7.18, 5.0).unwrap();
        assert!((18..=20).contains(&n), "{n}");
        assert_eq!(seeds_for_power(f64::NAN, 5.0), None);
    }
}
