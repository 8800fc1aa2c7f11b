//! `ledger report`: one self-contained HTML page of an experiment (validation curves,
//! test tables with their wait-ratio subsets and paired differences between branches, a
//! size × stage heatmap per branch, sampled plans drawn on their grids, the decision
//! timeline, the fork tree, and a study's
//! means with 95% intervals and paired differences against `fixed`), plus its figures
//! as SVG and PNG beside it.
//!
//! Two steps, one data flow: [`gather`] reads projections and audits of the chosen
//! branches into a [`Report`] (every number keeps the hash of the event it came from),
//! and [`write`](fn@write) renders it ([`html`] for the page, [`crate::figures`] for the images).
//! Nothing here reads a clock, so the same ledger and arguments give the same bytes.
pub mod html;
pub mod serve;

use crate::env::table::ResultTable;
use crate::ledger::{Hash, Ledger, LedgerError};
use crate::views::audit::AuditReport;
use crate::views::study::StudyReport;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Errors of `ledger report`, each naming the branch, file or figure concerned.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("{0}")]
    Ledger(#[from] LedgerError),
    #[error("{}: {message}", path.display())]
    Study { path: PathBuf, message: String },
    #[error("{}: {message}", path.display())]
    Output { path: PathBuf, message: String },
    #[error("figure {name}")]
    Figure {
        name: String,
        #[source]
        source: crate::figures::FigureError,
    },
    #[error(
        "nothing to report: the ledger has no branch outside studies (name branches with --branch)"
    )]
    NoBranches,
}

/// One evaluation as the report shows it: its table and the event it came from.
#[derive(Clone, Debug)]
pub struct Eval {
    pub event: Hash,
    pub table: ResultTable,
}

impl Eval {
    /// (valid %, optimal %) of one cell, if evaluated.
    pub fn rate(&self, agents: usize, size: usize) -> Option<(f64, f64)> {
        self.table
            .cells
            .get(&(agents, size))
            .map(|c| (c.valid_rate(), c.optimal_rate()))
    }

    /// The paper's Sum row of one agent count, if it was evaluated.
    pub fn sum(&self, agents: usize) -> Option<(f64, f64)> {
        self.table
            .agent_counts()
            .contains(&agents)
            .then(|| self.table.sum_row(agents))
    }

    pub fn sizes(&self, agents: usize) -> impl Iterator<Item = usize> + '_ {
        self.table
            .cells
            .keys()
            .filter(move |k| k.0 == agents)
            .map(|k| k.1)
    }
}

/// One stage of a branch.
#[derive(Clone, Debug)]
pub struct StageView {
    pub stage: u32,
    pub engineer: Option<String>,
    pub validation: Option<Eval>,
    pub test: Option<Eval>,
    /// Parameter hash of the stage's checkpoint.
    pub params: Option<Hash>,
    pub completed: Option<Hash>,
}

/// Where a branch was forked from.
#[derive(Clone, Debug)]
pub struct Fork {
    pub from: String,
    /// The event the fork shares with its source (the source's last kept event).
    pub at: Hash,
    /// The first stage the fork designs itself.
    pub stage: u32,
    pub engineer: String,
}

/// One branch: its stages, decisions and origin.
#[derive(Clone, Debug)]
pub struct BranchView {
    pub name: String,
    pub head: Hash,
    pub fork: Option<Fork>,
    pub stages: Vec<StageView>,
    pub audit: AuditReport,
    /// The final stage's tables per wait-ratio subset (stratified suites).
    pub subsets: Vec<crate::views::compare::SubsetTable>,
    /// Every evaluated stage on the items that need coordination and the rest.
    pub coordination: Vec<crate::views::coordination::StageCoordination>,
    /// GRPO's per-stage means (reward, zero-variance share, KL, sampled validity).
    pub training: Vec<crate::views::steps::StageSteps>,
    /// Sampled validity on instances that need coordination, step by step (a moving
    /// mean over [`STEP_WINDOW`] steps): (global step, %).
    pub coordination_curve: Vec<(u32, f64)>,
    /// Sampled plans of the last trained stage, drawn on their grids: up to
    /// [`SAMPLES_PER_KIND`] valid, conflicting and falling in a hole; then, when the
    /// plan keeps evaluation plans, up to twice that many failed test items of the
    /// final stage.
    pub samples: Vec<crate::views::samples::Sample>,
}

/// Sampled plans the report draws per kind (valid, conflict, hole) and branch.
pub const SAMPLES_PER_KIND: usize = 2;

/// Steps in the moving mean of the report's per-step coordination curve.
pub const STEP_WINDOW: usize = 10;

impl BranchView {
    /// The last stage with a test evaluation (the paper's final-stage tables).
    pub fn final_test(&self) -> Option<(u32, &Eval)> {
        self.stages
            .iter()
            .rev()
            .find_map(|s| s.test.as_ref().map(|t| (s.stage, t)))
    }

    /// The agent count validation runs on (the training agent count).
    pub fn validation_agents(&self) -> Option<usize> {
        self.stages
            .iter()
            .find_map(|s| s.validation.as_ref()?.table.agent_counts().first().copied())
    }
}

/// Everything the page shows.
#[derive(Clone, Debug)]
pub struct Report {
    /// The ledger directory as given (the page's `ledger --ledger DIR show` hints).
    pub ledger: String,
    pub plan: String,
    pub branches: Vec<BranchView>,
    /// Every branch after the first against the first, item by item (`compare`'s
    /// paired section): (branch, comparison).
    pub paired: Vec<(String, crate::views::compare::PairedComparison)>,
    /// Each branch's final stage against its own stage 0, item by item (`compare`'s
    /// transfer lines): (branch, comparison).
    pub transfer: Vec<(String, crate::views::compare::PairedComparison)>,
    pub study: Option<StudyReport>,
}

/// The branches a report shows when none are named: `main` first, then every other
/// branch by name, except a study's runs (`study-*`), which `--study` summarises.
pub fn default_branches(ledger: &Ledger) -> Result<Vec<String>, LedgerError> {
    let mut names: Vec<String> = ledger
        .branches()?
        .into_iter()
        .map(|(name, _)| name)
        .filter(|name| !name.starts_with("study-"))
        .collect();
    names.sort_by_key(|n| (n != "main", n.clone()));
    Ok(names)
}

/// Read a study's report: `study.json` (written by `ledger study`) in the directory
/// `at`, or `at` itself when it is a file.
pub fn read_study(at: &Path) -> Result<StudyReport, ReportError> {
    let path = if at.is_dir() {
        at.join("study.json")
    } else {
        at.to_path_buf()
    };
    let text = std::fs::read_to_string(&path).map_err(|e| ReportError::Study {
        path: path.clone(),
        message: format!(
            "{e} (run `ledger study` again with the same arguments: it skips finished runs and writes study.json)"
        ),
    })?;
    serde_json::from_str(&text).map_err(|e| ReportError::Study {
        path,
        message: format!("not a study report: {e}"),
    })
}

fn branch_view(
    ledger: &Ledger,
    name: &str,
) -> Result<(BranchView, crate::views::compare::BranchSummary), LedgerError> {
    let head = ledger.head(name)?;
    let state = ledger.state_at(&head)?;
    let mut summary = crate::views::compare::summarise(name, &state);
    crate::views::compare::load_outcomes(ledger, &state, &mut summary)?;
    let eval = |s: &crate::ledger::StageState, suite: &str| -> Option<Eval> {
        Some(Eval {
            event: *s.evaluation_events.get(suite)?,
            table: crate::views::compare::table(s, suite)?,
        })
    };
    let stages = state
        .stages
        .iter()
        .map(|s| StageView {
            stage: s.stage,
            engineer: s.engineer.clone(),
            validation: eval(s, "val"),
            test: eval(s, "test"),
            params: s.checkpoint.as_ref().map(|c| c.1),
            completed: s.completed,
        })
        .collect();
    let fork = match &state.forked_from {
        Some((from, at, engineer)) => Some(Fork {
            from: from.clone(),
            at: *at,
            stage: ledger.event(at)?.stage + 1,
            engineer: engineer.clone(),
        }),
        None => None,
    };
    let steps = crate::views::steps::step_rows(ledger, name, &head)?;
    let mut samples = Vec::new();
    if let Some(last) = steps.last().map(|r| r.stage) {
        use crate::env::simulate::FailureKind;
        use crate::views::samples::{samples as pick, KindFilter};
        for kind in [
            KindFilter::Valid,
            KindFilter::Conflict,
            KindFilter::Failure(FailureKind::Hole),
        ] {
            samples.extend(
                pick(
                    ledger,
                    name,
                    &head,
                    last,
                    SAMPLES_PER_KIND,
                    Some(kind),
                    None,
                )?
                .samples,
            );
        }
    }
    // Test items the final model got wrong, when the plan keeps evaluation plans.
    if let Some(last) = state
        .stages
        .iter()
        .rev()
        .find(|s| s.outcome_events.contains_key("test"))
    {
        use crate::views::samples::{samples as pick, KindFilter};
        match pick(
            ledger,
            name,
            &head,
            last.stage,
            2 * SAMPLES_PER_KIND,
            Some(KindFilter::Invalid),
            Some("test"),
        ) {
            Ok(s) => samples.extend(s.samples),
            // Plans not kept (the plan's choice): nothing to draw.
            Err(LedgerError::Store(ledger_store::StoreError::Invalid(_))) => {}
            Err(e) => return Err(e),
        }
    }
    let view = BranchView {
        samples,
        training: crate::views::steps::by_stage(&steps),
        coordination_curve: crate::views::steps::coordination_curve(&steps, STEP_WINDOW),
        name: name.to_string(),
        head,
        fork,
        stages,
        audit: crate::views::audit::audit(ledger, name, None)?,
        subsets: summary.subsets.clone(),
        coordination: summary.coordination.clone(),
    };
    Ok((view, summary))
}

/// Read the branches (in the order given) and the optional study into a [`Report`].
pub fn gather(
    ledger: &Ledger,
    ledger_arg: &str,
    branches: &[String],
    study: Option<StudyReport>,
) -> Result<Report, ReportError> {
    if branches.is_empty() && study.is_none() {
        return Err(ReportError::NoBranches);
    }
    let (views, summaries): (Vec<BranchView>, Vec<_>) = branches
        .iter()
        .map(|b| branch_view(ledger, b))
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .unzip();
    let paired = summaries
        .iter()
        .skip(1)
        .map(|b| {
            (
                b.branch.clone(),
                crate::views::compare::pair(&summaries[0], b),
            )
        })
        .collect();
    let transfer = summaries
        .iter()
        .filter_map(|b| Some((b.branch.clone(), b.transfer.clone()?)))
        .filter(|(_, t)| !t.rows.is_empty())
        .collect();
    let plan = match ledger.branches()?.first() {
        Some((_, head)) => ledger.state_at(head)?.plan_name,
        None => String::new(),
    };
    Ok(Report {
        ledger: ledger_arg.to_string(),
        plan,
        branches: views,
        paired,
        transfer,
        study,
    })
}

/// Validation curves of every branch: (branch, [(stage, valid %)]) and the same for
/// optimal %.
pub fn validation_series(r: &Report) -> [Vec<crate::figures::Series>; 2] {
    let mut valid = Vec::new();
    let mut optimal = Vec::new();
    for b in &r.branches {
        let agents = b.validation_agents().unwrap_or(2);
        let pts: Vec<(u32, (f64, f64))> = b
            .stages
            .iter()
            .filter_map(|s| Some((s.stage, s.validation.as_ref()?.sum(agents)?)))
            .collect();
        valid.push((b.name.clone(), pts.iter().map(|p| (p.0, p.1 .0)).collect()));
        optimal.push((b.name.clone(), pts.iter().map(|p| (p.0, p.1 .1)).collect()));
    }
    [valid, optimal]
}

/// 95% intervals of [`validation_series`] (valid, optimal): the Sum row is the mean of
/// per-size rates, so its variance is the mean of their binomial variances over the
/// number of sizes (a normal approximation, clamped to 0–100).
pub fn validation_bands(r: &Report) -> [Vec<crate::figures::Band>; 2] {
    let mut valid = Vec::new();
    let mut optimal = Vec::new();
    for b in &r.branches {
        let agents = b.validation_agents().unwrap_or(2);
        let (mut vb, mut ob) = (Vec::new(), Vec::new());
        for s in &b.stages {
            let Some(v) = &s.validation else { continue };
            let cells: Vec<_> = v
                .table
                .cells
                .iter()
                .filter(|(k, _)| k.0 == agents)
                .map(|(_, c)| c)
                .collect();
            if cells.is_empty() || cells.iter().any(|c| c.total == 0) {
                continue;
            }
            let m = cells.len() as f64;
            let band = |hits: &dyn Fn(&crate::env::CellCounts) -> u32| {
                let (mut mean, mut var) = (0.0, 0.0);
                for c in &cells {
                    let p = hits(c) as f64 / c.total as f64;
                    mean += p / m;
                    var += p * (1.0 - p) / c.total as f64 / (m * m);
                }
                let h = 1.96 * var.sqrt();
                (
                    s.stage,
                    (100.0 * (mean - h)).max(0.0),
                    (100.0 * (mean + h)).min(100.0),
                )
            };
            vb.push(band(&|c| c.valid));
            ob.push(band(&|c| c.optimal));
        }
        valid.push(vb);
        optimal.push(ob);
    }
    [valid, optimal]
}

/// A branch's validation valid % per (size, stage).
pub fn heatmap_values(b: &BranchView) -> BTreeMap<(usize, u32), f64> {
    let agents = b.validation_agents().unwrap_or(2);
    let mut m = BTreeMap::new();
    for s in &b.stages {
        if let Some(v) = &s.validation {
            for (&(_, size), c) in v.table.cells.iter().filter(|(k, _)| k.0 == agents) {
                m.insert((size, s.stage), c.valid_rate());
            }
        }
    }
    m
}

/// The figure files written beside the page (stem, title) — curves first, then one
/// heatmap per branch, then the study's curves.
fn figure_files(r: &Report, figures: &Path) -> Result<Vec<PathBuf>, ReportError> {
    let fig_err = |name: &str, source| ReportError::Figure {
        name: name.to_string(),
        source,
    };
    let mut written = Vec::new();
    let [valid, optimal] = validation_series(r);
    let [valid_bands, optimal_bands] = validation_bands(r);
    for (stem, title, y, series, bands) in [
        (
            "validation-valid",
            "Validation valid % per stage (shaded: 95% interval)",
            "valid %",
            &valid,
            &valid_bands,
        ),
        (
            "validation-optimal",
            "Validation optimal % per stage (shaded: 95% interval)",
            "optimal %",
            &optimal,
            &optimal_bands,
        ),
    ] {
        for ext in ["svg", "png"] {
            let p = figures.join(format!("{stem}.{ext}"));
            crate::figures::write_curves(
                &p,
                &crate::figures::Curves {
                    x_label: "stage",
                    title,
                    y_label: y,
                    series,
                    bands,
                    percent: true,
                },
            )
            .map_err(|m| fig_err(stem, m))?;
            written.push(p);
        }
    }
    for b in &r.branches {
        let values = heatmap_values(b);
        if values.is_empty() {
            continue;
        }
        let title = format!("{}: validation valid % (size × stage)", b.name);
        // Fetched branches have `/` in their names: keep figures in one directory.
        let stem = format!("heatmap-{}", b.name.replace('/', "+"));
        for ext in ["svg", "png"] {
            let p = figures.join(format!("{stem}.{ext}"));
            crate::figures::write_heatmap(
                &p,
                &crate::figures::Heatmap {
                    title: &title,
                    values: &values,
                },
            )
            .map_err(|m| fig_err(&stem, m))?;
            written.push(p);
        }
    }
    if let Some(s) = &r.study {
        let series = crate::views::study::study_series(s);
        let title = format!(
            "Study: validation valid % (fork of {} at stage {}, mean over {} seeds)",
            s.from, s.at, s.seeds
        );
        for ext in ["svg", "png"] {
            let p = figures.join(format!("study.{ext}"));
            crate::figures::write_curves(
                &p,
                &crate::figures::Curves {
                    x_label: "stage",
                    title: &title,
                    y_label: "valid %",
                    series: &series,
                    bands: &[],
                    percent: true,
                },
            )
            .map_err(|m| fig_err("study", m))?;
            written.push(p);
        }
    }
    Ok(written)
}

/// `ledger report` of the ledger at `dir`: [`gather`] `branches` (none: the
/// [`default_branches`]) with the study at `study`, and [`write`](fn@write) it under
/// `out`. Returns the report and the files written, the page first.
pub fn report_dir(
    dir: &Path,
    branches: &[String],
    study: Option<&Path>,
    out: &Path,
) -> Result<(Report, Vec<PathBuf>), ReportError> {
    let ledger = Ledger::open_read_only(dir)?;
    let study = study.map(read_study).transpose()?;
    let branches = match branches.is_empty() {
        true => default_branches(&ledger)?,
        false => branches.to_vec(),
    };
    let report = gather(&ledger, &dir.display().to_string(), &branches, study)?;
    let written = write(&report, out)?;
    Ok((report, written))
}

/// What `ledger report` says it wrote: the page, its branches, decisions and study,
/// and how many figures under `out`'s `figures/`.
pub fn written_line(report: &Report, written: &[PathBuf], out: &Path) -> String {
    let decisions: usize = report
        .branches
        .iter()
        .map(|b| b.audit.decisions.len())
        .sum();
    format!(
        "wrote {} ({} branch{}, {} decision{}{}) and {} figures under {}\n",
        written[0].display(),
        report.branches.len(),
        if report.branches.len() == 1 { "" } else { "es" },
        decisions,
        if decisions == 1 { "" } else { "s" },
        if report.study.is_some() {
            ", study"
        } else {
            ""
        },
        written.len() - 1,
        out.join("figures").display()
    )
}

/// Write `index.html` and `figures/*.{svg,png}` into `out`; returns the paths written,
/// the page first.
pub fn write(r: &Report, out: &Path) -> Result<Vec<PathBuf>, ReportError> {
    let io = |p: &Path, e: std::io::Error| ReportError::Output {
        path: p.to_path_buf(),
        message: e.to_string(),
    };
    let figures = out.join("figures");
    std::fs::create_dir_all(&figures).map_err(|e| io(&figures, e))?;
    let page = html::render(r).map_err(|source| ReportError::Figure {
        name: "inline".into(),
        source,
    })?;
    let index = out.join("index.html");
    std::fs::write(&index, page).map_err(|e| io(&index, e))?;
    let mut written = vec![index];
    written.extend(figure_files(r, &figures)?);
    Ok(written)
}
