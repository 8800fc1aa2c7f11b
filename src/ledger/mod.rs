//! The event-sourced ledger: an append-only, content-addressed, verifiable log that
//! every later piece writes to and every view reads from.
//!
//! Layers, bottom to top: [`hash`] (content addresses) and [`codec`] (the only bincode
//! user); [`storage`], the engine (packs, blobs, refs, index, lock), which never looks
//! inside an event; [`record`], what the bytes mean (events, metadata, plans,
//! projections, the recorder, references); then the [`Ledger`] itself ([`store`]: open,
//! the durable append protocol, forks, lookups, the projection cache) with
//! [`verify`], [`bundle`] (bundles, fetch) and [`gc`]. Views of a ledger live in
//! [`crate::views`].
pub mod bundle;
pub mod codec;
pub mod gc;
pub mod hash;
pub mod record;
pub mod recover;
pub mod storage;
pub mod store;
pub mod verify;

// The layers' modules under their short names (`ledger::event`, `ledger::pack`, ...).
pub use record::{event, meta, plan, projection, recorder, reference};
pub use storage::{blob, index, lock, pack, refs};

pub use event::{Event, EventBody};
pub use hash::Hash;
pub use meta::Meta;
pub use plan::LedgerPlan;
pub use projection::{BranchState, StageState};
pub use reference::{parse_stage, Reference};
pub use store::{Ledger, Location, RebuildReport, Resolved};
pub use verify::{Problem, Report};

use schemars::schema_for;
use std::path::PathBuf;

/// Errors at the ledger's library boundary. Messages name the path, branch, event or
/// field concerned.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error("{}: {message}", path.display())]
    Io { path: PathBuf, message: String },
    #[error("ledger {} is being written by another process (one writer at a time; read commands work meanwhile)", path.display())]
    Locked { path: PathBuf },
    #[error("{} is not a ledger (create one with `ledger init --plan FILE`)", path.display())]
    NotALedger { path: PathBuf },
    #[error("ledger {} already exists", path.display())]
    AlreadyExists { path: PathBuf },
    #[error(transparent)]
    Plan(#[from] plan::PlanError),
    #[error("ledger storage (sled): {0}")]
    Sled(String),
    #[error("{what} is corrupt: {problem}")]
    Corrupt { what: String, problem: String },
    #[error("no branch named `{name}`")]
    UnknownBranch { name: String },
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
    #[error("no event {what}")]
    UnknownEvent { what: String },
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

impl From<sled::Error> for LedgerError {
    fn from(e: sled::Error) -> Self {
        LedgerError::Sled(e.to_string())
    }
}

/// JSON Schemas of the ledger's formats: the JSON form of an event (every kind) and
/// the plan file, as `(file stem, pretty JSON)`.
pub fn schemas() -> Vec<(&'static str, String)> {
    vec![
        (
            "ledger-event",
            crate::schemas::pretty(schema_for!(crate::views::export::EventRecord)),
        ),
        (
            "ledger-plan",
            crate::schemas::pretty(schema_for!(plan::LedgerPlan)),
        ),
        // What `verify --json`, `rebuild --json`, `gc --json`, `recover --json` and `fetch --json` print.
        (
            "verify",
            crate::schemas::pretty(schema_for!(verify::Report)),
        ),
        (
            "rebuild",
            crate::schemas::pretty(schema_for!(store::RebuildReport)),
        ),
        ("gc", crate::schemas::pretty(schema_for!(gc::GcReport))),
        (
            "recover",
            crate::schemas::pretty(schema_for!(recover::RecoverReport)),
        ),
        (
            "fetch",
            crate::schemas::pretty(schema_for!(bundle::FetchReport)),
        ),
    ]
}
