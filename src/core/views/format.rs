//! How the views and the report write numbers for people, in one place: a setting with
//! the digits it has ([`number`]), a rate in percent ([`rate`]) and a mean with its
//! interval ([`pm`]). study.md and the report's page both format with these, so the
//! same number reads the same in both.

/// A ratio or setting as read commands and the report print it, with the digits it
/// has: whole numbers whole, others to at most 4 decimals without trailing zeros
/// (0.125, not 0.12; 0.2, not 0.20). (The engineer's prompt keeps two decimals,
/// `engineer::text::ratio` in the application: prompts are hashed into recorded
/// events.)
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

/// `n` and the word for that many: `1 branch`, `2 branches`, `0 stages`.
pub fn count(n: impl Into<u64>, one: &str, many: &str) -> String {
    let n = n.into();
    format!("{n} {}", if n == 1 { one } else { many })
}

/// A rate in percent (valid %, optimal %, a share × 100) with two decimals: `12.50`.
pub fn rate(v: f64) -> String {
    format!("{v:.2}")
}

/// "mean ± half-width" of an interval, or the mean alone without one, two decimals each:
/// `12.50 ± 3.10`, `12.50`.
pub fn pm(mean: f64, ci: Option<f64>) -> String {
    match ci {
        Some(c) => format!("{mean:.2} ± {c:.2}"),
        None => format!("{mean:.2}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_keep_their_digits() {
        assert_eq!(number(0.125), "0.125");
        assert_eq!(number(0.2), "0.2");
        assert_eq!(number(0.35), "0.35");
        assert_eq!(number(1.0), "1");
        assert_eq!(number(0.123456), "0.1235");
        assert_eq!(number(-0.00001), "0");
        assert_eq!(number(2.5e-5), "0");
    }

    #[test]
    fn rates_and_intervals_have_two_decimals() {
        assert_eq!(rate(12.5), "12.50");
        assert_eq!(pm(12.5, Some(3.1)), "12.50 ± 3.10");
        assert_eq!(pm(12.5, None), "12.50");
    }
}
