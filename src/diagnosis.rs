//! What a library error says about the ledger, read from its `source()` chain (library
//! errors keep the store's and the ledger's errors as sources, never as text): whether
//! the ledger is damaged, and what repairs or helps. The classification lives here,
//! beside the errors; the `ledger` CLI turns it into exit codes and the command to run.
use crate::ledger::{LedgerError, Repair};
use ledger_store::StoreError;

/// What helps with an error, where a `ledger` command does; the CLI names the command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Remedy {
    /// A damaged store the store's [`Repair`] names (`ledger recover`, `ledger rebuild`).
    Repair(Repair),
    /// The directory is not a ledger: create one (`ledger init`).
    CreateLedger,
    /// The filesystem is full: nothing recorded was lost; free space and run again.
    FreeSpace,
}

/// What the ledger and store errors in an error's `source()` chain say about it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Diagnosis {
    /// The ledger is damaged: a record, blob, ref file or projection cache failed its
    /// check, or a replay found recorded bytes altered.
    pub damaged: bool,
    /// The first remedy a store error in the chain names.
    pub remedy: Option<Remedy>,
}

/// The diagnosis of `e`, from every cause in its `source()` chain.
pub fn diagnose(e: &(dyn std::error::Error + 'static)) -> Diagnosis {
    let mut d = Diagnosis {
        damaged: false,
        remedy: None,
    };
    for cause in std::iter::successors(Some(e), |e| e.source()) {
        if let Some(s) = cause.downcast_ref::<StoreError>() {
            d.damaged |= matches!(
                s,
                StoreError::Corrupt { .. }
                    | StoreError::Damaged { .. }
                    | StoreError::MissingBlob { .. }
            );
            d.remedy = d.remedy.or_else(|| remedy(s));
        } else if let Some(l) = cause.downcast_ref::<LedgerError>() {
            d.damaged |= matches!(l, LedgerError::Corrupt { .. } | LedgerError::Decode { .. });
        } else {
            d.damaged |= altered(cause);
        }
    }
    d
}

/// The remedy of a store error, for the errors a `ledger` command helps with.
fn remedy(e: &StoreError) -> Option<Remedy> {
    match e {
        StoreError::Damaged { repair, .. } => Some(Remedy::Repair(*repair)),
        StoreError::NotALedger { .. } => Some(Remedy::CreateLedger),
        StoreError::Full { .. } => Some(Remedy::FreeSpace),
        _ => None,
    }
}

/// Whether `e` says a replay found recorded bytes altered (the ledger is damaged).
#[cfg(feature = "train")]
fn altered(e: &(dyn std::error::Error + 'static)) -> bool {
    matches!(
        e.downcast_ref(),
        Some(crate::replay::ReplayError::Altered { .. })
    )
}

/// No replay runs in a build without the trainer, so no error says one found records
/// altered.
#[cfg(not(feature = "train"))]
fn altered(_: &(dyn std::error::Error + 'static)) -> bool {
    false
}
