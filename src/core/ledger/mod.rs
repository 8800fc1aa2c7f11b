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
//! cache); beside it [`verify`], [`bundle`] (bundles, fetch), [`gc`] and [`recover`]. Views of a ledger
//! live in `crate::views`, above it.
pub mod bundle;
pub mod facts;
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
pub use ledger_store::{Location, Repair};
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
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error("{}: {message}", path.display())]
    Io { path: PathBuf, message: String },
    #[error("ledger {} is being written by another process (one writer at a time; read commands work meanwhile)", path.display())]
    Locked { path: PathBuf },
    #[error("{} is not a ledger", path.display())]
    NotALedger { path: PathBuf },
    #[error("ledger {} already exists", path.display())]
    AlreadyExists { path: PathBuf },
    #[error(transparent)]
    Plan(#[from] plan::PlanError),
    #[error("ledger storage (sled): {0}")]
    Sled(String),
    #[error("{what} is corrupt: {problem}")]
    Corrupt { what: String, problem: String },
    /// Damage with a known repair; the CLI names the command that performs it.
    #[error("{what} is corrupt: {problem}")]
    Damaged {
        what: String,
        problem: String,
        repair: Repair,
    },
    /// `nearest`: the ledger's branch whose name is closest to it, if one is close
    /// (a typo's "did you mean").
    #[error("no branch named `{name}`{}", reference::did_you_mean(nearest.as_deref()))]
    UnknownBranch {
        name: String,
        nearest: Option<String>,
    },
    #[error("branch `{name}` already exists")]
    BranchExists { name: String },
    #[error("branch `{name}` exists here with head {ours}, which the incoming head {theirs} does not continue (use --prefix NAME/ to fetch it under another name)")]
    BranchConflict {
        name: String,
        ours: String,
        theirs: String,
    },
    #[error(
        "invalid branch name `{name}` (use 1-100 of A-Z a-z 0-9 . _ - in /-separated parts, none empty or starting with . or -)"
    )]
    BadBranchName { name: String },
    #[error("`{name}`: names starting with `_` are reserved for scratch work (a replay's recomputation, which no reader sees); choose another name")]
    ReservedName { name: String },
    #[error("`{name}` is scratch work, not a branch: a replay's recomputation, running now or left by one that was killed (`ledger gc` removes it)")]
    ScratchRef { name: String },
    #[error("no event {what}")]
    UnknownEvent { what: String },
    #[error("{reference}: {why}")]
    NotACheckpoint { reference: String, why: String },
    #[error("`{text}`: expected {expected}")]
    BadReference { text: String, expected: String },
    #[error("`{what}` is ambiguous: it matches {count} events")]
    Ambiguous { what: String, count: usize },
    #[error("no blob {hash}")]
    MissingBlob { hash: Hash },
    #[error("the ledger is open read-only")]
    ReadOnly,
    #[error("invalid event: {0}")]
    Invalid(String),
    #[error("cannot decode {what}: {source}")]
    Decode {
        what: String,
        #[source]
        source: codec::CodecError,
    },
}

/// The store's errors keep their names and messages at the ledger's boundary.
impl From<ledger_store::StoreError> for LedgerError {
    fn from(e: ledger_store::StoreError) -> Self {
        use ledger_store::StoreError as S;
        match e {
            S::Io { path, message } => LedgerError::Io { path, message },
            S::Locked { path } => LedgerError::Locked { path },
            S::Corrupt { what, problem } => LedgerError::Corrupt { what, problem },
            S::Damaged {
                what,
                problem,
                repair,
            } => LedgerError::Damaged {
                what,
                problem,
                repair,
            },
            S::BadBranchName { name } => LedgerError::BadBranchName { name },
            S::MissingBlob { hash } => LedgerError::MissingBlob { hash },
            S::NotALedger { path } => LedgerError::NotALedger { path },
            S::ReadOnly => LedgerError::ReadOnly,
            S::UnknownEvent { what } => LedgerError::UnknownEvent { what },
            S::UnknownBranch { name } => LedgerError::UnknownBranch {
                name,
                nearest: None,
            },
            S::BranchExists { name } => LedgerError::BranchExists { name },
            S::Invalid(m) => LedgerError::Invalid(m),
        }
    }
}

impl From<sled::Error> for LedgerError {
    fn from(e: sled::Error) -> Self {
        LedgerError::Sled(e.to_string())
    }
}
