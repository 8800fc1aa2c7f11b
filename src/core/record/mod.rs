//! The record: what the ledger's bytes mean, at the bottom of the application crate.
//! [`event`]: the event model and its encoding; [`trainer`]: the trainer's own records
//! (steps, trajectories, evaluations), which the stage wraps into events; [`meta`]:
//! unhashed metadata; [`timing`]: where a stage's time went (kept in its metadata);
//! [`readable`]: how float bits and plan bytes read in JSON;
//! [`projection`]: pure folds of a history into stage state.
//!
//! Only the storage engine (`ledger-store`, whose [`hash`] and [`codec`] are re-exported
//! here) and the testbed lie below it; everything else in the crate may use it.
pub mod checkpoint;
pub mod event;
pub mod meta;
pub mod projection;
pub mod readable;
pub mod timing;
pub mod trainer;

pub use ledger_store::{codec, hash, Hash};
