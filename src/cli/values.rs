//! Value parsers for numeric options whose range is fixed: clap calls them, so a bad
//! value is refused naming the option and the value before the command runs, and the
//! command receives a number already in range. (Without the `train` feature only the
//! testbed's counts are used.)
#![cfg_attr(not(feature = "train"), allow(dead_code))]

use clap::builder::RangedU64ValueParser;

/// Most instances one `env generate` draws (each is solved optimally).
const MAX_COUNT: usize = 1_000_000;
/// Most instances per suite cell (`env suite`, as `eval --per-cell`).
const MAX_PER_CELL: usize = 100_000;

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

/// Why a value is not a number in an option's range.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BadNumber {
    #[error("not a number ({0})")]
    NotANumber(#[from] std::num::ParseFloatError),
    #[error("expected {0}")]
    OutOfRange(&'static str),
}

fn number(s: &str, ok: impl Fn(f64) -> bool, expected: &'static str) -> Result<f64, BadNumber> {
    let v: f64 = s.trim().parse()?;
    if v.is_finite() && ok(v) {
        Ok(v)
    } else {
        Err(BadNumber::OutOfRange(expected))
    }
}

/// A finite number of 0 or more (a temperature, a standard deviation).
pub fn non_negative(s: &str) -> Result<f64, BadNumber> {
    number(s, |v| v >= 0.0, "a finite number of 0 or more")
}

/// A finite number above 0 (an effect size, a bandwidth, a peak rate).
pub fn positive(s: &str) -> Result<f64, BadNumber> {
    number(s, |v| v > 0.0, "a finite number above 0")
}

/// A probability mass in (0, 1] (nucleus sampling's `top_p`).
pub fn unit_mass(s: &str) -> Result<f64, BadNumber> {
    number(s, |v| v > 0.0 && v <= 1.0, "a number in (0, 1]")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_outside_their_range_are_refused_with_the_range() {
        assert_eq!(non_negative("0"), Ok(0.0));
        assert_eq!(positive(" 2.5 "), Ok(2.5));
        assert_eq!(unit_mass("1"), Ok(1.0));
        for (bad, parse) in [
            ("-0.1", non_negative as fn(&str) -> Result<f64, BadNumber>),
            ("inf", non_negative),
            ("NaN", non_negative),
            ("0", positive),
            ("0", unit_mass),
            ("1.01", unit_mass),
        ] {
            assert!(
                matches!(parse(bad), Err(BadNumber::OutOfRange(_))),
                "{bad} accepted"
            );
        }
        assert!(positive("fast")
            .unwrap_err()
            .to_string()
            .starts_with("not a number"));
    }
}

/// Why a `serve --bind` value is no address.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    #[error("expected HOST:PORT or ADDR:PORT (e.g. localhost:8473), got {0:?}")]
    NoPort(String),
    /// (clap prints the message alone, so it holds the cause.)
    #[error("{value:?} is not an address this machine resolves: {cause}")]
    Unresolved {
        value: String,
        cause: std::io::Error,
    },
    #[error("{0:?} resolves to no address")]
    NoAddress(String),
}

/// `serve --bind`: `ADDR:PORT` or `HOST:PORT` (`localhost:8473`), resolved once here to
/// the first address the name has (IPv4 first, as a browser tries `localhost`).
pub fn bind_addr(s: &str) -> Result<std::net::SocketAddr, BindError> {
    use std::net::ToSocketAddrs;
    if let Ok(a) = s.parse() {
        return Ok(a);
    }
    if !s.contains(':') {
        return Err(BindError::NoPort(s.to_string()));
    }
    let addrs: Vec<std::net::SocketAddr> = s
        .to_socket_addrs()
        .map_err(|cause| BindError::Unresolved {
            value: s.to_string(),
            cause,
        })?
        .collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .copied()
        .ok_or_else(|| BindError::NoAddress(s.to_string()))
}
