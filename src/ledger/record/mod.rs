//! The record: what the ledger's bytes mean. [`event`]: the event model and its
//! encoding; [`meta`]: unhashed metadata; [`plan`]: plan files (embedding the trainer's
//! and generator's own config types); [`projection`]: pure folds of a history into
//! stage state; [`recorder`]: batching a stage's events into durable appends;
//! [`reference`]: the one grammar of stage references.
pub mod event;
pub mod meta;
pub mod plan;
pub mod projection;
pub mod recorder;
pub mod reference;
