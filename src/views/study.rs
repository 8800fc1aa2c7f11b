//! Study reports: the runs of a counterfactual study (`ledger study`), their test
//! cells aggregated over seeds (mean and 95% t-interval), and the CSV, Markdown and
//! plot series written from them. `crate::study` runs the study and writes the files.
use super::compare::{mean_ci, BranchSummary};
use std::collections::BTreeSet;
use std::fmt::Write as _;

/// One engineer × seed run of a study.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct StudyRun {
    pub engineer: String,
    pub replicate: u32,
    pub branch: String,
    /// ran (forked and run now), resumed (continued a partial run) or skipped (already
    /// finished).
    pub action: String,
    pub head: crate::ledger::Hash,
    pub summary: BranchSummary,
}

/// Mean and 95% interval over seeds of one test cell (or Sum row) for one engineer.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct StudyCell {
    pub engineer: String,
    pub agents: usize,
    /// Map size (None: the Sum row, the mean over sizes).
    pub size: Option<usize>,
    /// Seeds aggregated.
    pub n: usize,
    pub valid_mean: f64,
    /// Half-width of the 95% t-interval (None with one seed).
    pub valid_ci95: Option<f64>,
    pub optimal_mean: f64,
    pub optimal_ci95: Option<f64>,
}

/// Mean validation rates over seeds of one engineer at one stage.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct StudyCurvePoint {
    pub engineer: String,
    pub stage: u32,
    pub n: usize,
    pub valid_mean: f64,
    pub optimal_mean: f64,
}

/// `ledger study --json`.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct StudyReport {
    pub from: String,
    pub at: u32,
    pub seeds: u32,
    pub engineers: Vec<String>,
    pub runs: Vec<StudyRun>,
    pub cells: Vec<StudyCell>,
    pub validation: Vec<StudyCurvePoint>,
    /// Files written (CSV, markdown, SVG).
    pub files: Vec<String>,
}

pub(crate) fn aggregate(
    engineers: &[String],
    runs: &[StudyRun],
) -> (Vec<StudyCell>, Vec<StudyCurvePoint>) {
    let mut cells = Vec::new();
    let mut curve = Vec::new();
    for e in engineers {
        let rs: Vec<&StudyRun> = runs.iter().filter(|r| &r.engineer == e).collect();
        let keys: BTreeSet<(usize, usize)> = rs
            .iter()
            .flat_map(|r| r.summary.test.cells.keys().copied())
            .collect();
        let agents: BTreeSet<usize> = keys.iter().map(|k| k.0).collect();
        for k in agents {
            let mut push = |size: Option<usize>, vals: Vec<(f64, f64)>| {
                let (vm, vc) = mean_ci(&vals.iter().map(|v| v.0).collect::<Vec<_>>());
                let (om, oc) = mean_ci(&vals.iter().map(|v| v.1).collect::<Vec<_>>());
                cells.push(StudyCell {
                    engineer: e.clone(),
                    agents: k,
                    size,
                    n: vals.len(),
                    valid_mean: vm,
                    valid_ci95: vc,
                    optimal_mean: om,
                    optimal_ci95: oc,
                });
            };
            push(
                None,
                rs.iter()
                    .filter(|r| r.summary.test.agent_counts().contains(&k))
                    .map(|r| r.summary.test.sum_row(k))
                    .collect(),
            );
            for &(_, n) in keys.iter().filter(|c| c.0 == k) {
                push(
                    Some(n),
                    rs.iter()
                        .filter_map(|r| r.summary.test.cells.get(&(k, n)))
                        .map(|c| (c.valid_rate(), c.optimal_rate()))
                        .collect(),
                );
            }
        }
        let stages: BTreeSet<u32> = rs
            .iter()
            .flat_map(|r| r.summary.validation.iter().map(|v| v.0))
            .collect();
        for st in stages {
            let pts: Vec<(f64, f64)> = rs
                .iter()
                .filter_map(|r| r.summary.validation.iter().find(|v| v.0 == st))
                .map(|v| (v.1, v.2))
                .collect();
            let n = pts.len();
            curve.push(StudyCurvePoint {
                engineer: e.clone(),
                stage: st,
                n,
                valid_mean: pts.iter().map(|p| p.0).sum::<f64>() / n as f64,
                optimal_mean: pts.iter().map(|p| p.1).sum::<f64>() / n as f64,
            });
        }
    }
    (cells, curve)
}

fn opt(x: Option<f64>) -> String {
    x.map(|v| format!("{v:.4}")).unwrap_or_default()
}

/// study.csv: one `cell` row per run and test cell, one `sum` row per run and agent
/// count, and one `mean` row per engineer and cell (mean and 95% half-width over seeds).
pub fn study_csv(r: &StudyReport) -> String {
    let mut s = String::from(
        "kind,engineer,replicate,branch,final_stage,agents,size,n,total,valid,optimal,valid_rate,optimal_rate,valid_ci95,optimal_ci95\n",
    );
    for run in &r.runs {
        let fs = run
            .summary
            .final_stage
            .map(|x| x.to_string())
            .unwrap_or_default();
        for (&(k, n), c) in &run.summary.test.cells {
            let _ = writeln!(
                s,
                "cell,{},{},{},{fs},{k},{n},1,{},{},{},{:.4},{:.4},,",
                run.engineer,
                run.replicate,
                run.branch,
                c.total,
                c.valid,
                c.optimal,
                c.valid_rate(),
                c.optimal_rate()
            );
        }
        for k in run.summary.test.agent_counts() {
            let (v, o) = run.summary.test.sum_row(k);
            let cs: Vec<_> = run
                .summary
                .test
                .cells
                .iter()
                .filter(|c| c.0 .0 == k)
                .map(|c| *c.1)
                .collect();
            let _ = writeln!(
                s,
                "sum,{},{},{},{fs},{k},,1,{},{},{},{v:.4},{o:.4},,",
                run.engineer,
                run.replicate,
                run.branch,
                cs.iter().map(|c| c.total).sum::<u32>(),
                cs.iter().map(|c| c.valid).sum::<u32>(),
                cs.iter().map(|c| c.optimal).sum::<u32>(),
            );
        }
    }
    for c in &r.cells {
        let _ = writeln!(
            s,
            "mean,{},,,,{},{},{},,,,{:.4},{:.4},{},{}",
            c.engineer,
            c.agents,
            c.size.map(|n| n.to_string()).unwrap_or_default(),
            c.n,
            c.valid_mean,
            c.optimal_mean,
            opt(c.valid_ci95),
            opt(c.optimal_ci95)
        );
    }
    s
}

fn pm(mean: f64, ci: Option<f64>) -> String {
    match ci {
        Some(c) => format!("{mean:.2} ± {c:.2}"),
        None => format!("{mean:.2}"),
    }
}

/// study.md: the paper's layout (rows: Sum and sizes per agent count; columns:
/// engineers), mean ± 95% t-interval over seeds, plus the validation curves.
pub fn study_markdown(r: &StudyReport) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# Study: {} forked at stage {}, {} seed{}\n",
        r.from,
        r.at,
        r.seeds,
        if r.seeds == 1 { "" } else { "s" }
    );
    let _ = writeln!(
        s,
        "Final-stage test results, valid % / optimal %: mean over {} seed{}{}.\n",
        r.seeds,
        if r.seeds == 1 { "" } else { "s" },
        if r.seeds > 1 {
            " ± half-width of the 95% t-interval"
        } else {
            " (one seed: no interval)"
        }
    );
    let mut head = String::from("| Agents | Size |");
    let mut rule = String::from("|---|---|");
    for e in &r.engineers {
        head.push_str(&format!(" {e} |"));
        rule.push_str("---|");
    }
    let _ = writeln!(s, "{head}\n{rule}");
    let agents: BTreeSet<usize> = r.cells.iter().map(|c| c.agents).collect();
    for k in agents {
        let mut sizes: Vec<Option<usize>> = vec![None];
        sizes.extend(
            r.cells
                .iter()
                .filter(|c| c.agents == k)
                .filter_map(|c| c.size)
                .collect::<BTreeSet<_>>()
                .into_iter()
                .map(Some),
        );
        for size in sizes {
            let mut row = format!(
                "| {k} | {} |",
                size.map(|n| format!("{n}x{n}"))
                    .unwrap_or_else(|| "**Sum**".into())
            );
            for e in &r.engineers {
                match r
                    .cells
                    .iter()
                    .find(|c| &c.engineer == e && c.agents == k && c.size == size)
                {
                    Some(c) => row.push_str(&format!(
                        " {} / {} |",
                        pm(c.valid_mean, c.valid_ci95),
                        pm(c.optimal_mean, c.optimal_ci95)
                    )),
                    None => row.push_str(" - |"),
                }
            }
            let _ = writeln!(s, "{row}");
        }
    }
    let _ = writeln!(
        s,
        "\nValidation (2 agents, mean over sizes), valid % / optimal %, mean over seeds:\n"
    );
    let mut head = String::from("| Stage |");
    let mut rule = String::from("|---|");
    for e in &r.engineers {
        head.push_str(&format!(" {e} |"));
        rule.push_str("---|");
    }
    let _ = writeln!(s, "{head}\n{rule}");
    let stages: BTreeSet<u32> = r.validation.iter().map(|v| v.stage).collect();
    for st in stages {
        let mut row = format!("| {st} |");
        for e in &r.engineers {
            match r
                .validation
                .iter()
                .find(|v| &v.engineer == e && v.stage == st)
            {
                Some(v) => row.push_str(&format!(" {:.2} / {:.2} |", v.valid_mean, v.optimal_mean)),
                None => row.push_str(" - |"),
            }
        }
        let _ = writeln!(s, "{row}");
    }
    let _ = writeln!(s, "\nRuns:\n");
    for run in &r.runs {
        let _ = writeln!(
            s,
            "- `{}`: engineer {}, replicate {}, head {}",
            run.branch,
            run.engineer,
            run.replicate,
            run.head.short()
        );
    }
    s
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
