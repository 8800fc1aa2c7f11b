//! The one place bytes are encoded and decoded with bincode.
//!
//! Encoding is bincode 2's standard configuration (little endian, varint integers,
//! floats as their IEEE bit patterns) through serde. An encoded event starts with a
//! format-version byte. Decoding is always size-limited, rejects trailing bytes and an
//! unknown version with a typed error, and never panics on arbitrary input.
use crate::hash::Hash;
use serde::de::DeserializeOwned;
use serde::Serialize;

/// Format version written first in every encoded event.
pub const EVENT_VERSION: u8 = 1;

/// Upper bound on any one decoded value (bytes claimed while decoding).
pub const MAX_DECODE: usize = 1 << 28;

type Cfg = bincode::config::Configuration<
    bincode::config::LittleEndian,
    bincode::config::Varint,
    bincode::config::Limit<MAX_DECODE>,
>;

fn cfg() -> Cfg {
    bincode::config::standard().with_limit::<MAX_DECODE>()
}

/// Why bytes did not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    #[error("empty record")]
    Empty,
    #[error("unknown format version {found} (this build reads version {expected})")]
    UnknownVersion { found: u8, expected: u8 },
    #[error("record of {len} bytes exceeds the limit of {MAX_DECODE} bytes")]
    TooLarge { len: usize },
    #[error("malformed {what}: {message}")]
    Malformed { what: &'static str, message: String },
    #[error("{extra} trailing bytes after the {what}")]
    Trailing { what: &'static str, extra: usize },
}

/// Encode any value (metadata, projections, canonical plan form).
pub fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    let mut v = Vec::new();
    encode_into(value, &mut v);
    v
}

/// Append the encoding of `value` to `buf`.
pub fn encode_into<T: Serialize>(value: &T, buf: &mut Vec<u8>) {
    // Writing into a Vec cannot fail, and every ledger type serializes (no maps with
    // non-string keys in JSON, no unsized sequences): an error here is a bug.
    bincode::serde::encode_into_std_write(value, buf, cfg()).expect("ledger types always encode");
}

/// Decode a whole value from `bytes`: size-limited, trailing bytes rejected.
pub fn decode<T: DeserializeOwned>(bytes: &[u8], what: &'static str) -> Result<T, CodecError> {
    if bytes.len() > MAX_DECODE {
        return Err(CodecError::TooLarge { len: bytes.len() });
    }
    let (v, used) =
        bincode::serde::borrow_decode_from_slice::<T, _>(bytes, cfg()).map_err(|e| {
            CodecError::Malformed {
                what,
                message: e.to_string(),
            }
        })?;
    if used != bytes.len() {
        return Err(CodecError::Trailing {
            what,
            extra: bytes.len() - used,
        });
    }
    Ok(v)
}

/// Append an event's encoding: the format version byte, then `fields` (an event's
/// parent, stage and body, see `ledger::event::encode_event_into`).
pub fn encode_event_fields_into<T: Serialize>(fields: &T, buf: &mut Vec<u8>) {
    buf.push(EVENT_VERSION);
    encode_into(fields, buf);
}

/// Decode bytes written by [`encode_event_fields_into`], checking the version byte.
pub fn decode_event_fields<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CodecError> {
    match bytes.first() {
        None => Err(CodecError::Empty),
        Some(&EVENT_VERSION) => decode(&bytes[1..], "event"),
        Some(&v) => Err(CodecError::UnknownVersion {
            found: v,
            expected: EVENT_VERSION,
        }),
    }
}

/// The parent link of an encoded event without decoding its body.
pub fn event_parent(bytes: &[u8]) -> Result<Option<Hash>, CodecError> {
    match bytes.first() {
        None => return Err(CodecError::Empty),
        Some(&EVENT_VERSION) => {}
        Some(&v) => {
            return Err(CodecError::UnknownVersion {
                found: v,
                expected: EVENT_VERSION,
            })
        }
    }
    let malformed = || CodecError::Malformed {
        what: "event",
        message: "bad parent link".into(),
    };
    match bytes.get(1) {
        Some(0) => Ok(None),
        // A hash encodes as its length (32, one varint byte) and its bytes.
        Some(1) if bytes.get(2) == Some(&32) => {
            let h: [u8; 32] = bytes
                .get(3..35)
                .ok_or_else(malformed)?
                .try_into()
                .map_err(|_| malformed())?;
            Ok(Some(Hash(h)))
        }
        _ => Err(malformed()),
    }
}

#[cfg(test)]
mod tests {
    //! The codec on generic fields; the event model's own round trips are tested in the
    //! application crate (`mapf_ledger::record::event`).
    use super::*;
    use proptest::prelude::*;

    type Fields = (Option<Hash>, u32, Vec<u64>);

    fn sample() -> Fields {
        (Some(Hash::of_blob(b"p")), 3, vec![9, 1 << 40, 7])
    }

    fn encoded(f: &Fields) -> Vec<u8> {
        let mut b = Vec::new();
        encode_event_fields_into(f, &mut b);
        b
    }

    #[test]
    fn fields_round_trip_and_parent_peek() {
        let f = sample();
        let b = encoded(&f);
        assert_eq!(decode_event_fields::<Fields>(&b).unwrap(), f);
        assert_eq!(event_parent(&b).unwrap(), f.0);
        assert_eq!(event_parent(&encoded(&(None, 0, vec![]))).unwrap(), None);
    }

    #[test]
    fn version_and_trailing_bytes_are_errors() {
        let mut b = encoded(&sample());
        b[0] = 9;
        assert_eq!(
            decode_event_fields::<Fields>(&b),
            Err(CodecError::UnknownVersion {
                found: 9,
                expected: 1
            })
        );
        let mut b = encoded(&sample());
        b.push(0);
        assert!(matches!(
            decode_event_fields::<Fields>(&b),
            Err(CodecError::Trailing { extra: 1, .. })
        ));
        assert_eq!(decode_event_fields::<Fields>(&[]), Err(CodecError::Empty));
    }

    #[test]
    fn huge_claimed_lengths_fail_without_allocating() {
        // version, parent None, a u32, then a claimed sequence length of u64::MAX.
        let mut b = vec![EVENT_VERSION, 0, 0, 253];
        b.extend_from_slice(&u64::MAX.to_le_bytes());
        assert!(decode_event_fields::<Fields>(&b).is_err());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = decode_event_fields::<Fields>(&bytes);
            let mut v = vec![EVENT_VERSION];
            v.extend_from_slice(&bytes);
            let _ = decode_event_fields::<Fields>(&v);
            let _ = event_parent(&v);
            let _ = decode::<Vec<(String, Hash)>>(&bytes, "value");
        }
    }
}
