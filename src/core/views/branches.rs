//! The branch listing (`ledger branches`): every branch with its head, size, engineer
//! and fork point.
use crate::ledger::{Hash, Ledger, LedgerError};

/// One row of `ledger branches --json` (schema `schemas/branches.json`).
#[derive(Clone, Debug, serde::Serialize, schemars::JsonSchema)]
pub struct BranchListing {
    pub name: String,
    pub head: Hash,
    pub events: u64,
    pub stages: usize,
    /// The engineer recorded for the branch's next stages (a fork's, or a
    /// `run --engineer` choice); None: the plan's.
    pub engineer: Option<String>,
    pub forked_from: Option<ForkPoint>,
}

/// Where a fork came from.
#[derive(Clone, Debug, serde::Serialize, schemars::JsonSchema)]
pub struct ForkPoint {
    pub branch: String,
    pub at: Hash,
    pub engineer: String,
}

/// Every branch of the snapshot, in name order.
pub fn branches(l: &mut Ledger) -> Result<Vec<BranchListing>, LedgerError> {
    let mut rows = Vec::new();
    for (name, head) in l.branches()? {
        let s = l.projection(&name)?;
        rows.push(BranchListing {
            name,
            head,
            events: s.events,
            stages: s.stages.len(),
            engineer: s.engineer.clone(),
            forked_from: s.forked_from.as_ref().map(|(b, at, e)| ForkPoint {
                branch: b.clone(),
                at: *at,
                engineer: e.clone(),
            }),
        });
    }
    Ok(rows)
}
