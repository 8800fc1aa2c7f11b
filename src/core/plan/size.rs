//! Sizes in bytes as people write them (`80GiB`, `24GB`, `512MiB`): the plan's
//! `[lm] generation_memory` and the CLI's `--gpu-memory` read them the same way.
use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

const UNITS: [(&str, u64); 5] = [
    ("TiB", 1 << 40),
    ("GiB", 1 << 30),
    ("MiB", 1 << 20),
    ("KiB", 1 << 10),
    ("B", 1),
];

/// A size that does not parse; the message quotes it as written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    #[error("{text:?}: expected a size such as 80GiB, 40GB or 512MiB")]
    NotASize { text: String },
    #[error("{text:?}: give a unit, such as {number}GiB (or {number}MiB, or {number}B for bytes)")]
    NoUnit { text: String, number: String },
    #[error("{text:?}: unknown unit {unit:?} (use KiB, MiB, GiB or TiB)")]
    UnknownUnit { text: String, unit: String },
    #[error("{text:?}: must be positive")]
    NotPositive { text: String },
    #[error("{text:?}: out of range (the largest size is 16777215TiB, 2^64 bytes less one)")]
    OutOfRange { text: String },
    #[error("{text:?}: less than one byte")]
    BelowOneByte { text: String },
}

/// Parse `80GiB`, `40GB`, `24g`, `512MiB`, `1073741824B` (binary units; `GB` = GiB,
/// as GPU memory is quoted). A number needs its unit.
pub fn parse_size(s: &str) -> Result<u64, SizeError> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let x: f64 = num
        .parse()
        .map_err(|_| SizeError::NotASize { text: s.into() })?;
    let scale = match unit.trim().to_ascii_lowercase().as_str() {
        // A bare number is almost always meant in GiB (`--gpu-memory 80`); reading it as
        // bytes would make every plan "not fit". The unit is asked for instead.
        "" => {
            return Err(SizeError::NoUnit {
                text: s.into(),
                number: num.into(),
            })
        }
        "b" => 1u64,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        u => {
            return Err(SizeError::UnknownUnit {
                text: s.into(),
                unit: u.into(),
            })
        }
    };
    if !(x.is_finite() && x > 0.0) {
        return Err(SizeError::NotPositive { text: s.into() });
    }
    // `as u64` saturates: 99999999999999999999GiB would silently become 16 EiB and
    // "fit" every plan. A size past what 64 bits count is refused, naming the value.
    let bytes = x * scale as f64;
    if bytes >= u64::MAX as f64 {
        return Err(SizeError::OutOfRange { text: s.into() });
    }
    if bytes < 1.0 {
        return Err(SizeError::BelowOneByte { text: s.into() });
    }
    Ok(bytes as u64)
}

/// A size in bytes, written in a plan as a string with its unit (`"24GiB"`). It is
/// encoded (and hashed) in the largest binary unit that divides it, so `"24GiB"` and
/// `"24576MiB"` are the same plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ByteSize(pub u64);

impl std::fmt::Display for ByteSize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (unit, scale) = UNITS
            .iter()
            .find(|(_, scale)| self.0 % scale == 0 && self.0 >= *scale)
            .copied()
            .unwrap_or(("B", 1));
        write!(f, "{}{unit}", self.0 / scale)
    }
}

impl Serialize for ByteSize {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        parse_size(&text)
            .map(ByteSize)
            .map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for ByteSize {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ByteSize".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "description": "A size with a binary unit: \"24GiB\", \"512MiB\" (GB means GiB).",
            "pattern": "^[0-9.]+ *[A-Za-z]+$"
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_in_binary_units_and_bad_ones_are_named() {
        assert_eq!(parse_size("80GiB").unwrap(), 80 << 30);
        let e = parse_size("80").unwrap_err().to_string();
        assert!(e.contains("80GiB"), "{e}");
        assert_eq!(parse_size("4096B").unwrap(), 4096);
        assert_eq!(parse_size("40GB").unwrap(), 40 << 30);
        assert_eq!(parse_size("512MiB").unwrap(), 512 << 20);
        assert_eq!(parse_size("1.5g").unwrap(), 3 << 29);
        assert!(parse_size("80XB")
            .unwrap_err()
            .to_string()
            .contains("unknown unit"));
        assert!(parse_size("lots")
            .unwrap_err()
            .to_string()
            .contains("expected a size"));
        let e = parse_size("99999999999999999999GiB")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("99999999999999999999GiB") && e.contains("out of range"),
            "{e}"
        );
        assert!(parse_size("16777216TiB")
            .unwrap_err()
            .to_string()
            .contains("out of range"));
        assert_eq!(parse_size("16777215TiB").unwrap(), 16777215 << 40);
    }

    #[test]
    fn a_size_is_written_in_its_largest_exact_unit() {
        assert_eq!(ByteSize(24 << 30).to_string(), "24GiB");
        assert_eq!(ByteSize(1536 << 20).to_string(), "1536MiB");
        assert_eq!(ByteSize(1000).to_string(), "1000B");
        let same: ByteSize = serde_json::from_str("\"24576MiB\"").unwrap();
        assert_eq!(serde_json::to_string(&same).unwrap(), "\"24GiB\"");
        let e = serde_json::from_str::<ByteSize>("\"24\"").unwrap_err();
        assert!(e.to_string().contains("give a unit"), "{e}");
    }
}
