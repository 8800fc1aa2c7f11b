//! Numbers in a fixed range, as a command line's options take them (a temperature, a
//! standard deviation, an effect size, a bandwidth, nucleus sampling's mass): parsed
//! once, and refused naming the range, so what takes one receives a number in range.

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
