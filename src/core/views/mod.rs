//! Views: what read commands show, built from a ledger snapshot as typed values with
//! JSON Schemas under `schemas/` (the CLI only formats them). [`audit`]: every engineer
//! decision with its evidence and outcome; [`branches`]: the branch listing;
//! [`compare`]: branches side by side; [`coordination`]: every stage on the items that
//! need coordination and the rest; [`paired`]: paired statistics between branches
//! evaluated on the same items; [`samples`]: sampled plans drawn on their grids;
//! [`steps`]: GRPO step by step; [`study`]: study reports; [`tensorboard`]: TensorBoard event files;
//! [`timing`]: where a stage's time went (`show --timing`); [`export`]: export rows and
//! event records; [`replay`]: what a replay verified; [`show`]: `show` of a branch or stage, replay outcomes,
//! the engineer list; [`format`](mod@format): how they all write numbers; [`text`]: what
//! the commands print as text.
pub mod audit;
pub mod branches;
pub mod compare;
pub mod coordination;
pub mod export;
pub mod format;
pub mod model;
pub mod paired;
pub mod replay;
pub mod samples;
pub mod show;
pub mod steps;
pub mod study;
pub mod tensorboard;
pub mod testbed;
pub mod text;
pub mod timing;

pub use format::number;

/// What changed from `before` to `after`, per size and field, for people: every value
/// with the digits it has (`4 wait 0.125->0.35`, by [`number`]).
pub fn config_changes(
    before: &crate::env::GeneratorConfig,
    after: &crate::env::GeneratorConfig,
) -> Vec<String> {
    crate::context::changes_with(before, after, number)
}

/// `x` as % of `n` (0 when `n` is 0): the testbed's, which its tables' rates use.
pub(crate) use crate::env::table::pct;
