//! Value parsers for numeric options whose range is fixed: clap calls them, so a bad
//! value is refused naming the option and the value before the command runs, and the
//! command receives a number already in range (the ranges of numbers that are not
//! counts: `mapf_ledger::plan::values`). (Without the `train` feature only the
//! testbed's counts are used.)
#![cfg_attr(not(feature = "train"), allow(dead_code))]

use clap::builder::RangedU64ValueParser;

use mapf_ledger::env::{generator::MAX_COUNT, suite::MAX_PER_CELL};

/// `env generate --count`: instances to draw, 1..=MAX_COUNT.
pub fn count_arg() -> RangedU64ValueParser<usize> {
    RangedU64ValueParser::new().range(1..=MAX_COUNT as u64)
}

/// `--per-cell`: instances per (agents, size) cell, 1..=MAX_PER_CELL.
pub fn per_cell_arg() -> RangedU64ValueParser<usize> {
    RangedU64ValueParser::new().range(1..=MAX_PER_CELL as u64)
}

/// `--max-size`: the largest map side of a suite, 5 (the 5-agent cells' smallest) up to
/// the generator's largest.
pub fn max_size_arg() -> RangedU64ValueParser<usize> {
    RangedU64ValueParser::new().range(5..=mapf_ledger::env::instance::MAX_SIZE as u64)
}
