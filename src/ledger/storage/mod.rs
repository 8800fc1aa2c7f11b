//! The storage engine, shaped like git's object store: it knows frames, ids and
//! lengths, never what an event means. [`pack`]: append-only pack files of framed
//! records; [`blob`]: content-addressed blobs (small ones in packs, large ones one file
//! each); [`refs`]: the `REFS` log of branch heads and committed pack lengths, readable
//! without a lock; [`index`]: event id -> place and parent, with saved segments;
//! [`lock`]: the one writer. The [`crate::ledger::Ledger`] puts the record on top.
pub mod blob;
pub mod index;
pub mod lock;
pub mod pack;
pub mod refs;
