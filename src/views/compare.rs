//! `compare`: per-stage validation curves and final test tables of branches side by
//! side in the paper's layout (rows are map sizes, a "Sum" row per agent count is the
//! mean over sizes), every engineer decision, and the statistics study reports share.
//! Pure views over projections.
use crate::env::table::ResultTable;
use crate::ledger::event::Evaluation;
use crate::ledger::{BranchState, Ledger, LedgerError};
use crate::train::eval::table_of;
use std::collections::BTreeSet;
use std::fmt::Write as _;

/// What `compare` shows of one branch.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
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
    /// Every engineer decision of the branch, by stage.
    pub decisions: Vec<DecisionLine>,
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
                    .map(|p| crate::engineer::context::config_changes(p, &d.applied))
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
    }
}

pub fn compare(
    ledger: &mut Ledger,
    branches: &[String],
) -> Result<Vec<BranchSummary>, LedgerError> {
    branches
        .iter()
        .map(|b| {
            let state = ledger.projection(b)?;
            let mut summary = summarise(b, &state);
            summary.decisions = decisions(ledger, &state)?;
            Ok(summary)
        })
        .collect()
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
    s
}

fn truncate(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

// ---- plots ----

/// `compare --plot`: the validation valid-rate curve of every branch.
pub fn plot_compare(path: &std::path::Path, summaries: &[BranchSummary]) -> Result<(), String> {
    let series: Vec<crate::figures::Series> = summaries
        .iter()
        .map(|b| {
            (
                b.branch.clone(),
                b.validation.iter().map(|&(s, v, _)| (s, v)).collect(),
            )
        })
        .collect();
    crate::figures::write_curves(
        path,
        &crate::figures::Curves {
            title: "Validation (2 agents, mean over sizes)",
            y_label: "valid %",
            series: &series,
        },
    )
}

// ---- statistics ----

/// Two-sided 95% quantile of Student's t with `df` degrees of freedom.
pub fn t975(df: usize) -> f64 {
    const T: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042,
    ];
    match df {
        0 => f64::NAN,
        1..=30 => T[df - 1],
        31..=40 => 2.021,
        41..=60 => 2.000,
        61..=120 => 1.980,
        _ => 1.960,
    }
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
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
    (mean, Some(t975(n - 1) * (var / n as f64).sqrt()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn t_interval() {
        assert_eq!(mean_ci(&[5.0]), (5.0, None));
        let (m, ci) = mean_ci(&[1.0, 3.0]);
        assert_eq!(m, 2.0);
        // sd = sqrt(2), se = 1, t(1) = 12.706
        assert!((ci.unwrap() - 12.706).abs() < 1e-9);
        let (m, ci) = mean_ci(&[2.0, 2.0, 2.0]);
        assert_eq!((m, ci), (2.0, Some(0.0)));
        assert_eq!(t975(1000), 1.96);
    }
}
