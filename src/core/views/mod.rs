//! Views: what read commands show, built from a ledger snapshot as typed values with
//! JSON Schemas under `schemas/` (the CLI only formats them). [`audit`]: every engineer
//! decision with its evidence and outcome; [`branches`]: the branch listing;
//! [`compare`]: branches side by side; [`coordination`]: every stage on the items that
//! need coordination and the rest; [`paired`]: paired statistics between branches
//! evaluated on the same items; [`samples`]: sampled plans drawn on their grids;
//! [`steps`]: GRPO step by step; [`study`]: study reports; [`tensorboard`]: TensorBoard event files;
//! [`timing`]: where a stage's time went (`show --timing`); [`export`]: export rows and
//! event records; [`replay`]: what a replay verified; [`show`]: `show` of a branch or stage, replay outcomes,
//! the engineer list.
pub mod audit;
pub mod branches;
pub mod compare;
pub mod coordination;
pub mod export;
pub mod model;
pub mod paired;
pub mod replay;
pub mod samples;
pub mod show;
pub mod steps;
pub mod study;
pub mod tensorboard;
pub mod testbed;
pub mod timing;

/// `x` as % of `n` (0 when `n` is 0).
pub(crate) fn pct(x: u32, n: u32) -> f64 {
    if n == 0 {
        0.0
    } else {
        100.0 * x as f64 / n as f64
    }
}
