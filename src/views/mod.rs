//! Views: what read commands show, built from a ledger snapshot as typed values with
//! JSON Schemas under `schemas/` (the CLI only formats them). [`audit`]: every engineer
//! decision with its evidence and outcome; [`branches`]: the branch listing.
//! (Compare and study reports live in `study.rs`, export rows in `ledger/export.rs`.)
pub mod audit;
pub mod branches;
