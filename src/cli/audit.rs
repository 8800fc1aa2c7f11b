//! `ledger audit`: every engineer decision of a branch with its evidence, config diff,
//! clips, rationale, status and outcome on the decided stage's validation set.
use super::{CliError, CliResult};
use crate::ledger::Ledger;
use std::path::Path;

pub fn run(ledger: &Path, branch: &str, stage: Option<&str>, json: bool) -> CliResult {
    let stage = stage
        .map(|s| crate::ledger::parse_stage(s).map_err(|e| CliError::input(format!("--stage {e}"))))
        .transpose()?;
    let l = Ledger::open_read_only(ledger).map_err(err)?;
    let report = crate::views::audit::audit(&l, branch, stage).map_err(err)?;
    if let Some(n) = stage {
        if report.decisions.is_empty() {
            return Err(CliError::input(format!(
                "`--stage {n}`: branch {branch} has no engineer decision at stage {n}"
            )));
        }
    }
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).expect("audit serialises")
        );
    } else {
        print!("{}", crate::views::audit::render(&report));
    }
    Ok(())
}

use super::ledger_error as err;
