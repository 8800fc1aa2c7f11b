//! The event-sourced ledger: an append-only, content-addressed, verifiable log that
//! every later piece writes to and every view reads from.
//!
//! Layers, bottom to top: the storage engine, its own crate `ledger-store` (`src/store`:
//! [`hash`], [`codec`], packs, blobs, refs, index, lock, and `Store`, an open ledger
//! directory with its durable commits), which never looks inside an event and cannot see
//! a MAPF type; [`crate::record`], what the bytes mean (events, metadata, projections)
//! and [`crate::plan`]; then the [`Ledger`] itself, in parts: [`open`] (creating from a
//! plan, opening as writer or reader), [`facts`] (blobs, branches, appends, reads),
//! [`reference`](mod@reference) (what a command names), [`projections`] (folded branch states and their
//! cache); beside it [`verify`], [`bundle`] (bundles, fetch), [`gc`], [`recover`] and
//! [`follow`] (a branch while a writer appends). Views of a ledger
//! live in `crate::views`, above it.
pub mod bundle;
pub mod facts;
pub mod follow;
pub mod gc;
pub mod open;
pub mod projections;
pub mod recorder;
pub mod recover;
pub mod reference;
pub mod verify;

// The storage engine's modules under their short names (`ledger::pack`, `ledger::hash`, ...).
pub use ledger_store::{blob, codec, hash, index, lock, pack, refs};

// The record's modules and the plan under the ledger's name (`ledger::event`,
// `ledger::plan`, ...), for users of the library; the crate itself names them directly.
pub use crate::plan;
pub use crate::record::{event, meta, projection};

pub use event::{Event, EventBody};
pub use hash::Hash;
pub use ledger_store::{free_space, Chain, Location, Repair};
pub use meta::Meta;
pub use open::Ledger;
pub use plan::LedgerPlan;
pub use projection::{BranchState, StageState};
pub use projections::{Projections, RebuildReport};
pub use reference::{parse_stage, Reference, Resolved};
pub use verify::{Problem, Report};

use std::path::PathBuf;

/// Errors at the ledger's library boundary. Messages name the path, branch, event or
/// field concerned.
///
/// What the storage engine reports (I/O, the writer's lock, damaged packs and refs, a
/// missing blob or event, branch names, read-only) stays the store's error, wrapped in
/// [`LedgerError::Store`] rather than copied: its repair ([`Repair`]) and its message
/// come through unchanged, and the CLI finds it in the error's `source()` chain. The
/// variants here are what the ledger adds on top.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// The storage engine's error, as it said it. Shown as its own text, with the
    /// store's error as the `source()` (not `transparent`, which would hide it from a
    /// walk of the chain: the CLI finds the repair there).
    #[error("{0}")]
    Store(#[from] ledger_store::StoreError),
    #[error("ledger {} already exists", path.display())]
    AlreadyExists { path: PathBuf },
    #[error(transparent)]
    Plan(#[from] plan::PlanError),
    #[error("ledger storage (sled): {0}")]
    Sled(String),
    /// A record or blob whose bytes the store kept intact but whose content is not what
    /// the ledger wrote (an undecodable blob, a cached projection that does not fold):
    /// damage the ledger sees, where the store's own `Corrupt` is damage to its frames.
    #[error("{what} is corrupt: {problem}")]
    Corrupt { what: String, problem: String },
    /// `nearest`: the ledger's branch whose name is closest to it, if one is close
    /// (a typo's "did you mean"). The store's own unknown-branch error becomes this one
    /// where the ledger resolves a name ([`Ledger::head`]).
    #[error("no branch named `{name}`{}", reference::did_you_mean(nearest.as_deref()))]
    UnknownBranch {
        name: String,
        nearest: Option<String>,
    },
    #[error("branch `{name}` exists here with head {ours}, which the incoming head {theirs} does not continue (use --prefix NAME/ to fetch it under another name)")]
    BranchConflict {
        name: String,
        ours: String,
        theirs: String,
    },
    #[error("`{name}`: names starting with `_` are reserved for scratch work (a replay's recomputation, which no reader sees); choose another name")]
    ReservedName { name: String },
    #[error("`{name}` is scratch work, not a branch: a replay's recomputation, running now or left by one that was killed (`ledger gc` removes it)")]
    ScratchRef { name: String },
    #[error("{reference}: {why}")]
    NotACheckpoint { reference: String, why: String },
    #[error("`{text}`: expected {expected}")]
    BadReference { text: String, expected: String },
    #[error("`{what}` is ambiguous: it matches {count} events")]
    Ambiguous { what: String, count: usize },
    /// A reference that had to name a stage (for what `shows` shows, as in `--timing
    /// shows one stage's phases`) named a branch or an event.
    #[error("{shows}: name a stage, as in {}@stage1 (got {reference:?})", reference.split('@').next().unwrap_or("main"))]
    NotAStage { shows: String, reference: String },
    /// A branch's projection without the stage a reference resolved to; `has`: how many
    /// stages it has.
    #[error("branch `{branch}` has no stage {stage} (it has {has})")]
    NoStage {
        branch: String,
        stage: u32,
        has: usize,
    },
    /// Its text is the context only; the codec's error is the `source()`, which
    /// whoever prints the chain ([`ledger_store::Chain`]) writes after it.
    #[error("cannot decode {what}")]
    Decode {
        what: String,
        #[source]
        source: codec::CodecError,
    },
}

impl LedgerError {
    /// An I/O error at `path` (the store's error, as the store words it).
    pub fn io(path: impl Into<PathBuf>, e: impl std::fmt::Display) -> LedgerError {
        LedgerError::Store(ledger_store::StoreError::Io {
            path: path.into(),
            message: e.to_string(),
        })
    }

    /// An event the ledger refuses (the store's `Invalid`).
    pub fn invalid(message: impl std::fmt::Display) -> LedgerError {
        LedgerError::Store(ledger_store::StoreError::Invalid(message.to_string()))
    }

    /// The store's error inside, if this is one.
    pub fn store(&self) -> Option<&ledger_store::StoreError> {
        match self {
            LedgerError::Store(e) => Some(e),
            _ => None,
        }
    }
}

impl From<sled::Error> for LedgerError {
    fn from(e: sled::Error) -> Self {
        LedgerError::Sled(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The store's error inside the ledger's, and the codec's inside a decode error,
    /// are each written once when the chain is printed, and stay reachable as sources.
    #[test]
    fn causes_are_sources_written_once() {
        let e = LedgerError::from(ledger_store::StoreError::NotALedger { path: "x".into() });
        assert_eq!(Chain(&e).to_string(), "x is not a ledger");
        let source = std::error::Error::source(&e).expect("the store's error is the source");
        assert!(source.downcast_ref::<ledger_store::StoreError>().is_some());

        let e = LedgerError::Decode {
            what: "event 0123".into(),
            source: codec::CodecError::Empty,
        };
        assert_eq!(e.to_string(), "cannot decode event 0123");
        assert_eq!(
            Chain(&e).to_string(),
            "cannot decode event 0123: empty record"
        );
    }
}
