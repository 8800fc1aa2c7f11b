//! `ledger report`: the experiment as one self-contained HTML page with its figures.
use super::{CliError, CliResult};
use crate::ledger::Ledger;
use crate::report::ReportError;
use std::path::{Path, PathBuf};

#[derive(clap::Args, Debug)]
pub struct ReportArgs {
    /// Branches to show, in this order (repeatable; default: every branch except study
    /// runs `study-*`).
    #[arg(long = "branch", value_name = "BRANCH")]
    pub branches: Vec<String>,
    /// A study directory (written by `ledger study`): adds its means with 95% intervals.
    #[arg(long, value_name = "DIR")]
    pub study: Option<PathBuf>,
    /// Output directory: index.html and figures/*.svg|png.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
}

fn err(e: ReportError) -> CliError {
    e.into()
}

pub fn run(dir: &Path, args: ReportArgs) -> CliResult {
    let ledger = Ledger::open_read_only(dir).map_err(|e| err(e.into()))?;
    let study = match &args.study {
        Some(d) => Some(crate::report::read_study(d).map_err(err)?),
        None => None,
    };
    let branches = if args.branches.is_empty() {
        crate::report::default_branches(&ledger).map_err(|e| err(e.into()))?
    } else {
        args.branches.clone()
    };
    let report = crate::report::gather(&ledger, &dir.display().to_string(), &branches, study)
        .map_err(err)?;
    let written = crate::report::write(&report, &args.out).map_err(err)?;
    let decisions: usize = report
        .branches
        .iter()
        .map(|b| b.audit.decisions.len())
        .sum();
    println!(
        "wrote {} ({} branch{}, {} decision{}{}) and {} figures under {}",
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
        args.out.join("figures").display()
    );
    Ok(())
}
