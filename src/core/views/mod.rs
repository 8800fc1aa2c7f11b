//! Views: what read commands show, built from a ledger snapshot as typed values with
//! JSON Schemas under `schemas/` (the CLI only formats them). [`audit`]: every engineer
//! decision with its evidence and outcome; [`branches`]: the branch listing;
//! [`compare`]: branches side by side; [`coordination`]: every stage on the items that
//! need coordination and the rest; [`paired`]: paired statistics between branches
//! evaluated on the same items; [`samples`]: sampled plans drawn on their grids;
//! [`steps`]: GRPO step by step; [`study`]: study reports; [`tensorboard`]: TensorBoard event files;
//! [`timing`]: where a stage's time went (`show --timing`); [`export`]: export rows and
//! event records; [`replay`]: what a replay verified; [`show`]: `show` of a branch or stage, replay outcomes,
//! the engineer list; [`text`]: what the commands print as text.
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
pub mod text;
pub mod timing;

/// A ratio or setting as read commands and the report print it, with the digits it
/// has: whole numbers whole, others to at most 4 decimals without trailing zeros
/// (0.125, not 0.12; 0.2, not 0.20). The one formatter of the views. (The engineer's
/// prompt keeps two decimals, `engineer::text::ratio` in the application: prompts are
/// hashed into recorded events.)
pub fn number(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        return format!("{x:.0}");
    }
    let s = format!("{x:.4}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".into()
    } else {
        s.to_string()
    }
}

/// What changed from `before` to `after`, per size and field, for people: every value
/// with the digits it has (`4 wait 0.125->0.35`, by [`number`]).
pub fn config_changes(
    before: &crate::env::GeneratorConfig,
    after: &crate::env::GeneratorConfig,
) -> Vec<String> {
    crate::context::changes_with(before, after, number)
}

/// `x` as % of `n` (0 when `n` is 0).
pub(crate) fn pct(x: u32, n: u32) -> f64 {
    if n == 0 {
        0.0
    } else {
        100.0 * x as f64 / n as f64
    }
}

#[cfg(test)]
mod number_tests {
    #[test]
    fn ratios_keep_their_digits() {
        use super::number;
        assert_eq!(number(0.125), "0.125");
        assert_eq!(number(0.2), "0.2");
        assert_eq!(number(0.35), "0.35");
        assert_eq!(number(1.0), "1");
        assert_eq!(number(0.123456), "0.1235");
        assert_eq!(number(-0.00001), "0");
        assert_eq!(number(2.5e-5), "0");
    }
}
