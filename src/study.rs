//! Comparing branches: per-stage validation curves and final test tables side by side in
//! the paper's layout (rows are map sizes, a "Sum" row per agent count is the mean over
//! sizes). Pure views over projections.
use crate::env::table::ResultTable;
use crate::ledger::event::Evaluation;
use crate::ledger::{BranchState, Ledger, LedgerError};
use crate::train::eval::table_of;
use std::collections::BTreeSet;
use std::fmt::Write as _;

/// What `compare` shows of one branch.
#[derive(Clone, Debug, serde::Serialize)]
pub struct BranchSummary {
    pub branch: String,
    /// Engineer of each designed stage, by stage.
    pub engineers: Vec<(u32, String)>,
    /// (stage, validation valid %, validation optimal %) of every evaluated stage.
    pub validation: Vec<(u32, f64, f64)>,
    /// The last evaluated stage's test table.
    pub final_stage: Option<u32>,
    #[serde(skip)]
    pub test: ResultTable,
    /// The test table as rows: (agents, size, total, valid, optimal).
    pub test_cells: Vec<(usize, usize, u32, u32, u32)>,
}

fn table(state: &crate::ledger::StageState, suite: &str) -> Option<ResultTable> {
    state.evaluations.get(suite).map(|cells| {
        table_of(&Evaluation {
            suite: suite.into(),
            checkpoint: None,
            cells: cells.clone(),
        })
    })
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
    }
}

pub fn compare(
    ledger: &mut Ledger,
    branches: &[String],
) -> Result<Vec<BranchSummary>, LedgerError> {
    branches
        .iter()
        .map(|b| Ok(summarise(b, &ledger.projection(b)?)))
        .collect()
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
    s
}

fn truncate(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}
