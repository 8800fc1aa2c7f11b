//! Fields stored for hashing, read by people: float bit patterns shown as numbers, and
//! plan bytes shown as text when they are text.
//!
//! Event fields keep floats as `u64`/`u32` bit patterns, so the hashed encoding never
//! depends on a float formatter. People and pandas read JSON, though, where a bit
//! pattern is noise (`"loss": 4571838597660934144`). These `serde(with = ...)` helpers
//! split on [`serde::Serializer::is_human_readable`]: the ledger's codec (bincode, not
//! human-readable) still sees the plain integer, byte for byte as before, while JSON
//! gets the decoded number. Non-finite values, which JSON numbers cannot hold, are the
//! strings `"NaN"`, `"inf"` and `"-inf"` ([`JsonFloat`] is their schema). Reading JSON
//! back gives the same bits for every finite value (serde_json's `float_roundtrip`) and
//! for the infinities; a NaN comes back as the canonical quiet NaN.
//!
//! Plan bytes ([`plan_bytes`]) are the same trick for `Vec<u8>`: a language model's plan
//! is text and JSON shows it as a string; other bytes (a grid policy's move codes) stay
//! an array of integers.
use schemars::JsonSchema;
use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

/// The JSON shape of a decoded float (for schemas only): a number, or a string naming
/// a value JSON numbers cannot hold.
#[allow(dead_code)]
#[derive(JsonSchema)]
#[serde(untagged)]
pub enum JsonFloat {
    Number(f64),
    NonFinite(NonFinite),
}

/// Non-finite floats in JSON.
#[allow(dead_code)]
#[derive(JsonSchema)]
pub enum NonFinite {
    #[serde(rename = "NaN")]
    NaN,
    #[serde(rename = "inf")]
    Inf,
    #[serde(rename = "-inf")]
    NegInf,
}

fn serialize_float<S: Serializer>(v: f64, narrow: bool, s: S) -> Result<S::Ok, S::Error> {
    if v.is_finite() && narrow {
        s.serialize_f32(v as f32)
    } else if v.is_finite() {
        s.serialize_f64(v)
    } else if v.is_nan() {
        s.serialize_str("NaN")
    } else if v > 0.0 {
        s.serialize_str("inf")
    } else {
        s.serialize_str("-inf")
    }
}

/// A JSON float: a number (integers too), or one of the non-finite names.
struct FloatVisitor;

impl Visitor<'_> for FloatVisitor {
    type Value = f64;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a number, or \"NaN\", \"inf\" or \"-inf\"")
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<f64, E> {
        Ok(v)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<f64, E> {
        Ok(v as f64)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<f64, E> {
        Ok(v as f64)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<f64, E> {
        match v {
            "NaN" => Ok(f64::NAN),
            "inf" => Ok(f64::INFINITY),
            "-inf" => Ok(f64::NEG_INFINITY),
            _ => Err(E::invalid_value(de::Unexpected::Str(v), &self)),
        }
    }
}

fn deserialize_f64<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    d.deserialize_any(FloatVisitor)
}

/// A JSON value as a float (for the `Vec`/`Option` helpers).
struct Decoded(f64);

impl<'de> Deserialize<'de> for Decoded {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        deserialize_f64(d).map(Decoded)
    }
}

impl Serialize for Decoded {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        serialize_float(self.0, false, s)
    }
}

/// `u64` holding f64 bits.
pub mod f64_bits {
    use super::*;
    pub fn serialize<S: Serializer>(bits: &u64, s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            serialize_float(f64::from_bits(*bits), false, s)
        } else {
            s.serialize_u64(*bits)
        }
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        if d.is_human_readable() {
            deserialize_f64(d).map(f64::to_bits)
        } else {
            u64::deserialize(d)
        }
    }
}

/// `u32` holding f32 bits. JSON prints the f32's shortest form (0.1f32 reads 0.1);
/// reading it back parses to f64 and narrows, which gives the same bits (tested).
pub mod f32_bits {
    use super::*;
    pub fn serialize<S: Serializer>(bits: &u32, s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            serialize_float(f32::from_bits(*bits) as f64, true, s)
        } else {
            s.serialize_u32(*bits)
        }
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
        if d.is_human_readable() {
            deserialize_f64(d).map(|v| (v as f32).to_bits())
        } else {
            u32::deserialize(d)
        }
    }
}

/// `Option<u64>` holding f64 bits.
pub mod opt_f64_bits {
    use super::*;
    pub fn serialize<S: Serializer>(bits: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            bits.map(|b| Decoded(f64::from_bits(b))).serialize(s)
        } else {
            bits.serialize(s)
        }
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        if d.is_human_readable() {
            Ok(Option::<Decoded>::deserialize(d)?.map(|v| v.0.to_bits()))
        } else {
            Option::<u64>::deserialize(d)
        }
    }
}

/// `Vec<u64>` holding f64 bits.
pub mod vec_f64_bits {
    use super::*;
    pub fn serialize<S: Serializer>(bits: &[u64], s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            s.collect_seq(bits.iter().map(|&b| Decoded(f64::from_bits(b))))
        } else {
            bits.serialize(s)
        }
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u64>, D::Error> {
        if d.is_human_readable() {
            Ok(Vec::<Decoded>::deserialize(d)?
                .into_iter()
                .map(|v| v.0.to_bits())
                .collect())
        } else {
            Vec::<u64>::deserialize(d)
        }
    }
}

/// The JSON shape of plan bytes (for schemas only): text, or the raw bytes.
#[allow(dead_code)]
#[derive(JsonSchema)]
#[serde(untagged)]
pub enum JsonBytes {
    Text(String),
    Bytes(Vec<u8>),
}

/// `Vec<u8>` that is usually text: JSON shows a string when the bytes are UTF-8 without
/// control characters other than newline, tab and carriage return; otherwise the array.
pub mod plan_bytes {
    use super::*;

    fn is_text(b: &[u8]) -> Option<&str> {
        let s = std::str::from_utf8(b).ok()?;
        s.chars()
            .all(|c| !c.is_control() || matches!(c, '\n' | '\t' | '\r'))
            .then_some(s)
    }

    pub fn serialize<S: Serializer>(bytes: &Vec<u8>, s: S) -> Result<S::Ok, S::Error> {
        match is_text(bytes) {
            Some(text) if s.is_human_readable() => s.serialize_str(text),
            _ => bytes.serialize(s),
        }
    }

    struct BytesVisitor;

    impl<'de> Visitor<'de> for BytesVisitor {
        type Value = Vec<u8>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a string or an array of bytes")
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Vec<u8>, E> {
            Ok(v.as_bytes().to_vec())
        }
        fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u8>, A::Error> {
            let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1 << 16));
            while let Some(b) = seq.next_element::<u8>()? {
                out.push(b);
            }
            Ok(out)
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        if d.is_human_readable() {
            d.deserialize_any(BytesVisitor)
        } else {
            Vec::<u8>::deserialize(d)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::codec;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Sample {
        #[serde(with = "f64_bits")]
        a: u64,
        #[serde(with = "f32_bits")]
        b: u32,
        #[serde(with = "opt_f64_bits")]
        c: Option<u64>,
        #[serde(with = "vec_f64_bits")]
        d: Vec<u64>,
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Plan {
        #[serde(with = "plan_bytes")]
        plan: Vec<u8>,
    }

    #[test]
    fn text_plans_read_as_strings_and_move_codes_as_bytes() {
        let text = Plan {
            plan: b"agent 1: (0,0) (0,1)\nagent 2: (1,1)".to_vec(),
        };
        let json = serde_json::to_value(&text).unwrap();
        assert_eq!(json["plan"], "agent 1: (0,0) (0,1)\nagent 2: (1,1)");
        assert_eq!(serde_json::from_value::<Plan>(json).unwrap(), text);
        for bytes in [vec![0u8, 1, 4, 2], vec![0xff, 0x41]] {
            let moves = Plan {
                plan: bytes.clone(),
            };
            let json = serde_json::to_value(&moves).unwrap();
            assert_eq!(json["plan"], serde_json::json!(bytes));
            assert_eq!(serde_json::from_value::<Plan>(json).unwrap(), moves);
        }
        // The codec sees the plain byte vector either way.
        assert_eq!(codec::encode(&text), codec::encode(&(text.plan.clone(),)));
    }

    /// The same struct without the helpers: what the codec must keep seeing.
    #[derive(Serialize)]
    struct Plain {
        a: u64,
        b: u32,
        c: Option<u64>,
        d: Vec<u64>,
    }

    fn sample(x: f64, y: f32) -> Sample {
        Sample {
            a: x.to_bits(),
            b: y.to_bits(),
            c: Some(x.to_bits()),
            d: vec![x.to_bits(), 0.5f64.to_bits()],
        }
    }

    #[test]
    fn codec_bytes_are_the_plain_integers() {
        let s = sample(-1.25e-7, 0.1);
        let plain = Plain {
            a: s.a,
            b: s.b,
            c: s.c,
            d: s.d.clone(),
        };
        assert_eq!(codec::encode(&s), codec::encode(&plain));
        assert_eq!(
            codec::decode::<Sample>(&codec::encode(&s), "sample").unwrap(),
            s
        );
    }

    #[test]
    fn json_shows_numbers_and_reads_back_to_the_same_bits() {
        let s = sample(0.1, 0.1);
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["a"], serde_json::json!(0.1));
        let text = serde_json::to_string(&s).unwrap();
        assert!(text.contains(r#""b":0.1,"#), "{text}");
        assert_eq!(json["d"], serde_json::json!([0.1, 0.5]));
        // Bits that a careless parser gets wrong by one ulp, and the extremes.
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..20_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let x = f64::from_bits(state);
            let y = f32::from_bits(state as u32);
            if !x.is_finite() || !y.is_finite() {
                continue;
            }
            let s = sample(x, y);
            let back: Sample = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
            assert_eq!(back, s, "{x:e} / {y:e}");
        }
        for x in [f64::MIN_POSITIVE, f64::MAX, -0.0, 5e-324] {
            let s = sample(x, 1.0);
            let back: Sample = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
            assert_eq!(back, s, "{x:e}");
        }
    }

    #[test]
    fn non_finite_values_are_named() {
        let s = sample(f64::INFINITY, f32::NEG_INFINITY);
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["a"], "inf");
        assert_eq!(json["b"], "-inf");
        let back: Sample = serde_json::from_value(json).unwrap();
        assert_eq!(back, s);
        let nan = serde_json::to_value(sample(f64::NAN, f32::NAN)).unwrap();
        assert_eq!(nan["a"], "NaN");
        let back: Sample = serde_json::from_value(nan).unwrap();
        assert!(f64::from_bits(back.a).is_nan() && f32::from_bits(back.b).is_nan());
        let bad = serde_json::json!({"a": "nan?", "b": 0, "c": null, "d": []});
        let e = serde_json::from_value::<Sample>(bad)
            .unwrap_err()
            .to_string();
        assert!(e.contains("\"NaN\", \"inf\" or \"-inf\""), "{e}");
    }
}
