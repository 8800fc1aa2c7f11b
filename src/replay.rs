//! Forks of a branch at a stage boundary (and, with them, counterfactual runs): O(1), a
//! new ref at an existing event plus one `BranchForked` event naming the engineer that
//! designs the next stage onward.
use crate::ledger::event::{BranchForked, EventBody};
use crate::ledger::{Hash, Ledger, LedgerError, Meta};

/// Built-in engineer names.
pub const BUILTIN_ENGINEERS: [&str; 5] = ["fixed", "random", "heuristic", "current", "base"];

#[derive(Debug, thiserror::Error)]
pub enum ForkError {
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    #[error("branch {branch} has no completed stage {before} to fork stage{at} from; stages that can be forked: {valid}")]
    NoSuchStage {
        branch: String,
        at: u32,
        before: u32,
        valid: String,
    },
    #[error("unknown engineer {name:?}: built-in engineers are {}, registered on {branch}: {}", BUILTIN_ENGINEERS.join(", "), if registered.is_empty() { "none".to_string() } else { registered.join(", ") })]
    UnknownEngineer {
        name: String,
        branch: String,
        registered: Vec<String>,
    },
    #[error("`--at {0}`: expected stageN with N >= 1 (stage 0 is the warm-up)")]
    BadStage(String),
}

/// Parse `stageN` (or plain `N`).
pub fn parse_stage(s: &str) -> Result<u32, ForkError> {
    s.strip_prefix("stage")
        .unwrap_or(s)
        .parse::<u32>()
        .ok()
        .filter(|&n| n >= 1)
        .ok_or_else(|| ForkError::BadStage(s.to_string()))
}

/// Fork `from` so that stage `at` onward is designed by `engineer`: the new branch keeps
/// stages 0..at-1. Returns the new branch's name and head.
pub fn fork(
    ledger: &mut Ledger,
    from: &str,
    at: u32,
    engineer: &str,
    name: Option<&str>,
    replicate: u32,
) -> Result<(String, Hash), ForkError> {
    let state = ledger.projection(from)?;
    if !BUILTIN_ENGINEERS.contains(&engineer) && !state.engineers.iter().any(|e| e == engineer) {
        return Err(ForkError::UnknownEngineer {
            name: engineer.into(),
            branch: from.into(),
            registered: state.engineers.clone(),
        });
    }
    let completed: Vec<u32> = state
        .stages
        .iter()
        .filter(|s| s.completed.is_some())
        .map(|s| s.stage)
        .collect();
    let Some(point) = state.stage(at - 1).and_then(|s| s.completed) else {
        let valid: Vec<String> = completed
            .iter()
            .map(|n| format!("stage{}", n + 1))
            .collect();
        return Err(ForkError::NoSuchStage {
            branch: from.into(),
            at,
            before: at - 1,
            valid: if valid.is_empty() {
                "none (run the warm-up first)".into()
            } else {
                valid.join(", ")
            },
        });
    };
    let name = name
        .map(str::to_string)
        .unwrap_or_else(|| format!("{from}-{engineer}-at{at}"));
    ledger.fork(&name, &point)?;
    let ids = ledger.append(
        &name,
        vec![(
            EventBody::BranchForked(BranchForked {
                from_branch: from.into(),
                at: point,
                engineer: engineer.into(),
                replicate,
            }),
            at - 1,
            Meta::now(),
        )],
    )?;
    Ok((name, ids[0]))
}
