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
    let series: Vec<(String, Vec<(u32, f64)>)> = summaries
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

// ---- counterfactual studies ----

/// What `ledger study` runs.
#[derive(Clone, Debug)]
pub struct StudySpec {
    /// Fork before this stage (>= 1).
    pub at: u32,
    pub from: String,
    pub engineers: Vec<String>,
    /// Seed replicates 0..seeds (0: the plan's seeds).
    pub seeds: u32,
    pub device: Option<String>,
    /// Where the pending runs execute (see `crate::executor`).
    pub executor: crate::executor::Executor,
    /// Worker ledgers, logs and Slurm scripts of out-of-process runs.
    pub workdir: std::path::PathBuf,
}

/// The deterministic branch name of one study run.
pub fn study_branch(at: u32, engineer: &str, replicate: u32) -> String {
    // A spec's module switches become readable name parts:
    // `current:-failure_breakdown` -> `current-no-failure_breakdown`.
    let name = engineer
        .replace(':', "")
        .replace('-', "-no-")
        .replace('+', "-with-");
    format!("study-at{at}-{name}-s{replicate}")
}

#[derive(Debug, thiserror::Error)]
pub enum StudyError {
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    #[error(transparent)]
    Fork(#[from] crate::replay::ForkError),
    #[error(transparent)]
    Stage(#[from] crate::stage::StageError),
    #[error("branch {branch} exists but is not this study's run ({why}); delete or rename it")]
    Clash { branch: String, why: String },
    #[error("interrupted: the study is durable; run the same command again to resume")]
    Interrupted,
    #[error("{0}")]
    Output(String),
    #[error(transparent)]
    Executor(#[from] crate::executor::ExecutorError),
}

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

/// Fork (when missing) and run (when unfinished) every engineer × seed branch, then
/// summarise them. A second call skips the finished runs.
pub fn run_study(
    ledger: &mut Ledger,
    spec: &StudySpec,
    progress: &mut dyn crate::stage::Progress,
    stop: &std::sync::atomic::AtomicBool,
) -> Result<StudyReport, StudyError> {
    use crate::stage::{next_stage, Pipeline, RunOptions};
    let last = crate::stage::ledger_plan(ledger)?.engineer.stages;
    let existing: BTreeSet<String> = ledger.branches()?.into_iter().map(|b| b.0).collect();
    // Pass 1: fork what is missing, find what must run.
    let mut plan = Vec::new();
    for e in &spec.engineers {
        for r in 0..spec.seeds {
            let name = study_branch(spec.at, e, r);
            let action = if existing.contains(&name) {
                let st = ledger.projection(&name)?;
                match &st.forked_from {
                    Some((from, _, eng)) if from == &spec.from && eng == e && st.replicate == r => {
                    }
                    other => {
                        return Err(StudyError::Clash {
                            branch: name,
                            why: match other {
                                Some((f, _, eng)) => format!(
                                    "forked from {f} with engineer {eng}, replicate {}",
                                    st.replicate
                                ),
                                None => "not a fork".into(),
                            },
                        })
                    }
                }
                if next_stage(&st) > last {
                    "skipped"
                } else {
                    "resumed"
                }
            } else {
                crate::replay::fork(ledger, &spec.from, spec.at, e, Some(&name), r)?;
                "ran"
            };
            plan.push((e.clone(), r, name, action));
        }
    }
    // Pass 2: run the unfinished branches, here (one pipeline: the suites are shared)
    // or in worker ledgers fetched back.
    let pending: Vec<&(String, u32, String, &str)> =
        plan.iter().filter(|p| p.3 != "skipped").collect();
    match &spec.executor {
        _ if pending.is_empty() => {}
        crate::executor::Executor::Local(1) => {
            let mut pipeline = Pipeline::new(ledger, spec.device.as_deref())?;
            let total = pending.len();
            for (i, (e, r, name, action)) in pending.into_iter().enumerate() {
                progress.note(&format!(
                    "[{}/{total}] {name}: engineer {e}, replicate {r} ({})",
                    i + 1,
                    if *action == "ran" { "new" } else { "resuming" }
                ));
                let opts = RunOptions {
                    branch: name.clone(),
                    stages: None,
                    engineer: None,
                    device: spec.device.clone(),
                };
                let s = pipeline.run(&opts, &mut crate::engineer::build, progress, stop)?;
                if s.interrupted {
                    return Err(StudyError::Interrupted);
                }
            }
        }
        executor => {
            let names: Vec<&str> = pending.iter().map(|p| p.2.as_str()).collect();
            run_elsewhere(ledger, spec, executor, &names, progress, stop)?;
        }
    }
    // Pass 3: summaries and aggregates.
    let mut runs = Vec::new();
    for (e, r, name, action) in plan {
        let st = ledger.projection(&name)?;
        runs.push(StudyRun {
            engineer: e,
            replicate: r,
            head: ledger.head(&name)?,
            summary: summarise(&name, &st),
            branch: name,
            action: action.into(),
        });
    }
    let (cells, validation) = aggregate(&spec.engineers, &runs);
    Ok(StudyReport {
        from: spec.from.clone(),
        at: spec.at,
        seeds: spec.seeds,
        engineers: spec.engineers.clone(),
        runs,
        cells,
        validation,
        files: vec![],
    })
}

/// Run `branches` (forks in `ledger`, maybe partly run) in worker ledgers with
/// `executor`, then fetch every finished one back; errors name the tasks that did not
/// finish, with their logs, after fetching the others.
fn run_elsewhere(
    ledger: &mut Ledger,
    spec: &StudySpec,
    executor: &crate::executor::Executor,
    branches: &[&str],
    progress: &mut dyn crate::stage::Progress,
    stop: &std::sync::atomic::AtomicBool,
) -> Result<(), StudyError> {
    use crate::executor::{self as ex, Executor, Task};
    use crate::ledger::bundle::Bundle;
    let workdir = &spec.workdir;
    std::fs::create_dir_all(workdir)
        .map_err(|e| StudyError::Output(format!("{}: {e}", workdir.display())))?;
    let tasks: Vec<Task> = branches.iter().map(|b| Task::new(workdir, b)).collect();
    let bundle = workdir.join("pending.bundle");
    if tasks.iter().any(|t| !t.is_done()) {
        let refs = branches
            .iter()
            .map(|b| Ok((b.to_string(), ledger.head(b)?)))
            .collect::<Result<Vec<_>, LedgerError>>()?;
        Bundle::collect(
            ledger,
            &refs,
            &|_| false,
            &|_| false,
            &crate::train::TrainState::referenced_blobs,
        )?
        .write(&bundle)?;
    }
    let mut note = |m: &str| progress.note(m);
    match executor {
        Executor::Local(n) => {
            ex::run_local(&tasks, &bundle, spec.device.as_deref(), *n, &mut note, stop)?
        }
        Executor::Slurm { sbatch_args } => ex::run_slurm(
            &tasks,
            workdir,
            &bundle,
            spec.device.as_deref(),
            sbatch_args,
            std::time::Duration::from_secs(2),
            &mut note,
            stop,
        )?,
    }
    // Fetch each finished worker's branch (a fast-forward of the fork recorded here).
    for t in tasks.iter().filter(|t| t.is_done()) {
        let worker = Ledger::open_read_only(&t.ledger())?;
        let head = worker.head(&t.branch)?;
        let b = Bundle::collect(
            &worker,
            &[(t.branch.clone(), head)],
            &|h| ledger.contains_event(h),
            &|h| ledger.has_blob(h).unwrap_or(false),
            &crate::train::TrainState::referenced_blobs,
        )?;
        drop(worker);
        let r = ledger.fetch(&b, None)?;
        progress.note(&format!(
            "fetched {} ({} events, {} blobs)",
            t.branch, r.events_added, r.blobs_added
        ));
    }
    if stop.load(std::sync::atomic::Ordering::SeqCst) {
        return Err(StudyError::Interrupted);
    }
    let failed = ex::failures(&tasks);
    if !failed.is_empty() {
        return Err(ex::ExecutorError::Failed {
            failed,
            total: tasks.len(),
        }
        .into());
    }
    Ok(())
}

fn aggregate(engineers: &[String], runs: &[StudyRun]) -> (Vec<StudyCell>, Vec<StudyCurvePoint>) {
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
pub fn study_series(r: &StudyReport) -> Vec<(String, Vec<(u32, f64)>)> {
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

/// Write study.csv, study.md, study.svg, study.png and study.json into `dir` (listed in
/// `r.files`).
pub fn write_study(r: &mut StudyReport, dir: &std::path::Path) -> Result<(), StudyError> {
    let io = |p: &std::path::Path, e: std::io::Error| {
        StudyError::Output(format!("{}: {e}", p.display()))
    };
    std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    let csv = dir.join("study.csv");
    std::fs::write(&csv, study_csv(r)).map_err(|e| io(&csv, e))?;
    let md = dir.join("study.md");
    std::fs::write(&md, study_markdown(r)).map_err(|e| io(&md, e))?;
    let svg = dir.join("study.svg");
    let series = study_series(r);
    let title = format!(
        "Validation valid % per stage (fork of {} at stage {}, mean over {} seeds)",
        r.from, r.at, r.seeds
    );
    let curves = crate::figures::Curves {
        title: &title,
        y_label: "valid %",
        series: &series,
    };
    crate::figures::write_curves(&svg, &curves).map_err(StudyError::Output)?;
    let png = dir.join("study.png");
    crate::figures::write_curves(&png, &curves).map_err(StudyError::Output)?;
    let json = dir.join("study.json");
    r.files = [&csv, &md, &svg, &png, &json]
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    // study.json is what `ledger report --study DIR` reads back.
    std::fs::write(
        &json,
        serde_json::to_string_pretty(&*r).expect("a study report serialises"),
    )
    .map_err(|e| io(&json, e))?;
    Ok(())
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

    #[test]
    fn study_names_are_deterministic() {
        assert_eq!(study_branch(3, "base", 1), "study-at3-base-s1");
        assert_eq!(
            study_branch(2, "current:-failure_breakdown+training_details", 0),
            "study-at2-current-no-failure_breakdown-with-training_details-s0"
        );
    }
}
