//! Views: what read commands show, built from a ledger snapshot as typed values with
//! JSON Schemas under `schemas/` (the CLI only formats them). [`audit`]: every engineer
//! decision with its evidence and outcome; [`branches`]: the branch listing;
//! [`compare`]: branches side by side; [`coordination`]: every stage on the items that
//! need coordination and the rest; [`paired`]: paired statistics between branches
//! evaluated on the same items; [`samples`]: sampled plans drawn on their grids;
//! [`steps`]: GRPO step by step; [`study`]: study reports; [`tensorboard`]: TensorBoard event files; [`export`]: export rows and
//! event records; [`show`]: `show` of a branch or stage, replay outcomes,
//! the engineer list.
pub mod audit;
pub mod branches;
pub mod compare;
pub mod coordination;
pub mod export;
pub mod model;
pub mod paired;
pub mod plan_check;
pub mod samples;
pub mod show;
pub mod steps;
pub mod study;
pub mod tensorboard;
pub mod testbed;
