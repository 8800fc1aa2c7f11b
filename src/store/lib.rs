//! The ledger's storage engine, shaped like git's object store, as its own crate: it
//! knows frames, ids, lengths and branch heads, never what an event means.
//!
//! - [`hash`]: content addresses (blake3, domain-separated);
//! - [`codec`]: the one place bytes are encoded with bincode (bincode is unmaintained, so
//!   every encoding goes through this module);
//! - [`pack`]: append-only pack files of framed records;
//! - [`blob`]: content-addressed blobs (small ones in packs, large ones one file each);
//! - [`refs`]: the `REFS` log of branch heads and committed pack lengths, readable
//!   without a lock;
//! - [`index`]: event id -> place and parent, with saved segments;
//! - [`lock`]: the one writer;
//! - [`aside`]: `set-aside/`, where a writer keeps intact records it finds past the
//!   committed lengths before cutting them;
//! - [`faults`]: the write budget tests use to run a ledger out of disk space;
//! - [`store`]: [`Store`], an open ledger directory: opening what `REFS` lists, blobs,
//!   branch refs, durable commits of framed records, lookups by id.
//!
//! It depends on no tensor library and no MAPF type: the application crate
//! (`mapf-ledger`) puts its event model, plans and projections on top, and this crate's
//! tests run without libtorch (`cargo test -p ledger-store`).
pub mod aside;
pub mod blob;
pub mod codec;
pub mod commits;
pub mod faults;
pub mod hash;
pub mod index;
pub mod lock;
pub mod pack;
pub mod refs;
pub mod store;

pub use hash::Hash;
pub use store::{Batch, Location, OpenProblem, Store};

use std::path::PathBuf;

/// Errors at the storage engine's boundary. Messages name the path, file or branch
/// concerned; the application maps each variant onto its own error of the same name.
/// What repairs the damage a [`StoreError::Damaged`] reports. The store names the
/// repair, never the command that performs it: that is for the porcelain to say (the
/// `ledger` CLI renders each as the command to run).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Repair {
    /// Restore the newest intact `REFS` snapshot and find the branch tips after it
    /// (the refs log or a pack it lists is damaged).
    Recover,
    /// Remake derived data (the saved index) from the packs.
    Rebuild,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{}: {message}", path.display())]
    Io { path: PathBuf, message: String },
    /// A write found the filesystem full (ENOSPC, or a quota: EDQUOT). Nothing that was
    /// committed is touched: a write that fails leaves what it wrote uncommitted (a
    /// pack's tail past its committed length, set aside on the next open) or removed
    /// (a blob's temporary file).
    #[error("{}: the disk is full ({needed} bytes could not be written)", path.display())]
    Full { path: PathBuf, needed: u64 },
    #[error("ledger {} is being written by another process (one writer at a time; read commands work meanwhile)", path.display())]
    Locked { path: PathBuf },
    #[error("{what} is corrupt: {problem}")]
    Corrupt { what: String, problem: String },
    /// Damage with a known repair (the porcelain names the command that performs it).
    #[error("{what} is corrupt: {problem}")]
    Damaged {
        what: String,
        problem: String,
        repair: Repair,
    },
    #[error(
        "invalid branch name `{name}` (use 1-100 of A-Z a-z 0-9 . _ - in /-separated parts, none empty or starting with . or -)"
    )]
    BadBranchName { name: String },
    #[error("no blob {hash}")]
    MissingBlob { hash: Hash },
    #[error("{} is not a ledger", path.display())]
    NotALedger { path: PathBuf },
    #[error("the ledger is open read-only")]
    ReadOnly,
    #[error("no event {what}")]
    UnknownEvent { what: String },
    #[error("no branch named `{name}`")]
    UnknownBranch { name: String },
    #[error("branch `{name}` already exists")]
    BranchExists { name: String },
    #[error(
        "branch `main` cannot be deleted: every branch descends from its genesis (`ledger \
         branch delete` removes another branch; to discard the whole ledger, delete its \
         directory)"
    )]
    MainUndeletable,
    #[error("invalid event: {0}")]
    Invalid(String),
}

/// The bytes free to this user on the filesystem holding `dir` (None where the
/// filesystem does not say).
pub fn free_space(dir: &std::path::Path) -> Option<u64> {
    fs4::available_space(dir).ok()
}

impl StoreError {
    /// The error of an I/O operation on `path`: [`StoreError::Full`] when the
    /// filesystem is full, else [`StoreError::Io`].
    pub fn io(path: &std::path::Path, e: std::io::Error) -> StoreError {
        StoreError::writing(path, e, 0)
    }

    /// [`StoreError::io`] of a write of `needed` bytes (the size a full disk reports).
    pub fn writing(path: &std::path::Path, e: std::io::Error, needed: u64) -> StoreError {
        // ENOSPC and EDQUOT on Linux; ErrorKind::StorageFull covers both where it is set.
        let full = e.kind() == std::io::ErrorKind::StorageFull
            || matches!(e.raw_os_error(), Some(28) | Some(122));
        if full {
            StoreError::Full {
                path: path.to_path_buf(),
                needed,
            }
        } else {
            StoreError::Io {
                path: path.to_path_buf(),
                message: e.to_string(),
            }
        }
    }
}

/// An error and its causes (its `source()` chain) as one line, `error: cause: cause`,
/// each cause once: a cause whose text the line already ends with is not repeated (a
/// wrapper that shows its source as its own text, `#[error("{0}")]`, which keeps the
/// source reachable where `#[error(transparent)]` would hide it, or a message that
/// embeds its source). Errors keep their causes typed; this is where they become text.
pub struct Chain<'a>(pub &'a (dyn std::error::Error + 'static));

impl std::fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut line = self.0.to_string();
        let mut cause = self.0.source();
        while let Some(c) = cause {
            let text = c.to_string();
            if !text.is_empty() && !line.ends_with(&text) {
                line.push_str(": ");
                line.push_str(&text);
            }
            cause = c.source();
        }
        f.write_str(&line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    enum Outer {
        /// A wrapper that adds nothing: its text is its source's.
        #[error("{0}")]
        Store(#[from] StoreError),
        /// Context: its own words only; the chain adds the cause.
        #[error("reading {what}")]
        Reading {
            what: String,
            #[source]
            source: StoreError,
        },
    }

    #[test]
    fn each_cause_is_written_once() {
        let io = || StoreError::Io {
            path: "packs/0".into(),
            message: "disk full".into(),
        };
        let e = Outer::Store(io());
        assert_eq!(Chain(&e).to_string(), "packs/0: disk full");
        let e = Outer::Reading {
            what: "the index".into(),
            source: io(),
        };
        let line = Chain(&e).to_string();
        assert_eq!(line, "reading the index: packs/0: disk full");
        assert_eq!(line.matches("disk full").count(), 1);
    }
}
