//! `ledger study`: fork a branch at a stage once per engineer × seed replicate, run
//! every fork to the plan's end (resumable), and write a CSV, a markdown table in the
//! paper's layout (mean ± 95% t-interval over seeds) and an SVG plot.
use super::{CliError, CliResult};
use crate::env::table::ResultTable;
use crate::ledger::Ledger;
use crate::stage::Progress;
use crate::study::{StudyError, StudySpec};
use crate::train::grpo::StepStats;
use std::path::{Path, PathBuf};

/// Progress as plain lines on standard error (one per stage, a few per stage's steps).
struct Lines {
    quiet: bool,
    steps: u64,
}

impl Progress for Lines {
    fn stage_begin(&mut self, stage: u32, engineer: &str, steps: u64) {
        self.steps = steps;
        if !self.quiet {
            eprintln!("  stage {stage}: engineer {engineer}, {steps} steps");
        }
    }
    fn step(&mut self, stage: u32, done: u64, s: &StepStats) {
        if !self.quiet
            && self.steps >= 4
            && done % (self.steps / 4).max(1) == 0
            && done < self.steps
        {
            eprintln!(
                "  stage {stage}: step {done}/{} loss {:.4} valid {:.2}",
                self.steps, s.loss, s.valid_rate
            );
        }
    }
    fn note(&mut self, message: &str) {
        if !self.quiet {
            eprintln!("{message}");
        }
    }
    fn stage_end(&mut self, stage: u32, v: &ResultTable) {
        if !self.quiet {
            let (valid, optimal) = v.sum_row(2);
            eprintln!("  stage {stage} done: validation valid {valid:.1}%, optimal {optimal:.1}%");
        }
    }
}

#[allow(clippy::too_many_arguments)]
pub fn run(
    ledger_dir: &Path,
    at: &str,
    engineers: &str,
    seeds: u32,
    from: &str,
    out: Option<PathBuf>,
    device: Option<String>,
    json: bool,
    quiet: bool,
) -> CliResult {
    let at = crate::replay::parse_stage(at).map_err(|e| CliError::input(e.to_string()))?;
    let engineers: Vec<String> = engineers
        .split(',')
        .map(|e| e.trim().to_string())
        .filter(|e| !e.is_empty())
        .collect();
    if engineers.is_empty() {
        return Err(CliError::input("`--engineers`: name at least one engineer"));
    }
    if seeds == 0 {
        return Err(CliError::input("`--seeds 0`: at least one seed"));
    }
    let mut seen = std::collections::BTreeSet::new();
    if let Some(d) = engineers.iter().find(|e| !seen.insert(e.as_str())) {
        return Err(CliError::input(format!(
            "`--engineers`: {d} is listed twice"
        )));
    }
    let mut ledger = Ledger::open(ledger_dir).map_err(|e| CliError::input(e.to_string()))?;
    let stop = super::run::stop_on_ctrl_c();
    let spec = StudySpec {
        at,
        from: from.to_string(),
        engineers,
        seeds,
        device,
    };
    let mut progress = Lines { quiet, steps: 0 };
    let mut report = match crate::study::run_study(&mut ledger, &spec, &mut progress, &stop) {
        Ok(r) => r,
        Err(StudyError::Interrupted) => {
            eprintln!("{}", StudyError::Interrupted);
            return Err(CliError {
                code: 130,
                message: "interrupted".into(),
            });
        }
        Err(e) => return Err(CliError::input(e.to_string())),
    };
    let dir = out.unwrap_or_else(|| ledger_dir.join(format!("study-at{at}")));
    crate::study::write_study(&mut report, &dir).map_err(|e| CliError::input(e.to_string()))?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).expect("study serialises")
        );
    } else {
        let ran = report.runs.iter().filter(|r| r.action != "skipped").count();
        print!("{}", crate::study::study_markdown(&report));
        println!(
            "\n{} runs ({} run now, {} already finished); wrote {}",
            report.runs.len(),
            ran,
            report.runs.len() - ran,
            report.files.join(", ")
        );
    }
    Ok(())
}
