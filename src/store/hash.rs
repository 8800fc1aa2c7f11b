//! Content addresses: the 32-byte blake3 [`Hash`](struct@Hash) and the domain-separated ways of
//! computing one (events and blobs here; the application derives its own, such as
//! trajectory and plan hashes, with [`Hash::derive`] under contexts it owns).
use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;
use std::sync::OnceLock;

/// Context for event ids: blake3 derive-key mode over an event's encoded bytes.
pub const EVENT_CONTEXT: &str = "mapf-ledger 2026 event v1";
/// Context for blob ids.
pub const BLOB_CONTEXT: &str = "mapf-ledger 2026 blob v1";

/// Length of the short, human form of a hash (hex characters).
pub const SHORT_LEN: usize = 12;

/// A blake3 hash: the address of an event, a blob or a trajectory.
///
/// Printed as 64 lowercase hex characters; its JSON form is that string, its encoded
/// (hashed) form the 32 raw bytes.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Hash(pub [u8; 32]);

impl Hash {
    /// blake3 in derive-key mode under `context`.
    pub fn derive(context: &str, bytes: &[u8]) -> Hash {
        let mut h = blake3::Hasher::new_derive_key(context);
        h.update(bytes);
        Hash(*h.finalize().as_bytes())
    }

    /// The id of an event from its encoded bytes.
    pub fn of_event(encoded: &[u8]) -> Hash {
        static H: OnceLock<blake3::Hasher> = OnceLock::new();
        Hash::with_prepared(&H, EVENT_CONTEXT, encoded)
    }

    /// The id of a blob from its content.
    pub fn of_blob(content: &[u8]) -> Hash {
        static H: OnceLock<blake3::Hasher> = OnceLock::new();
        Hash::with_prepared(&H, BLOB_CONTEXT, content)
    }

    /// Same as [`Hash::derive`], reusing a hasher whose context key is computed once
    /// (saves one compression per small event).
    fn with_prepared(cell: &OnceLock<blake3::Hasher>, context: &str, bytes: &[u8]) -> Hash {
        let mut h = cell
            .get_or_init(|| blake3::Hasher::new_derive_key(context))
            .clone();
        h.update(bytes);
        Hash(*h.finalize().as_bytes())
    }

    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// Full lowercase hex.
    pub fn to_hex(&self) -> String {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut s = String::with_capacity(64);
        for b in self.0 {
            s.push(HEX[(b >> 4) as usize] as char);
            s.push(HEX[(b & 15) as usize] as char);
        }
        s
    }

    /// The first [`SHORT_LEN`] hex characters.
    pub fn short(&self) -> String {
        let mut s = self.to_hex();
        s.truncate(SHORT_LEN);
        s
    }

    /// Parse 64 hex characters (either case).
    pub fn from_hex(s: &str) -> Option<Hash> {
        let b = s.as_bytes();
        if b.len() != 64 {
            return None;
        }
        let mut out = [0u8; 32];
        for (i, o) in out.iter_mut().enumerate() {
            *o = (hex_val(b[2 * i])? << 4) | hex_val(b[2 * i + 1])?;
        }
        Some(Hash(out))
    }

    /// Whether this hash's hex form starts with `prefix` (lowercase hex expected).
    pub fn has_prefix(&self, prefix: &str) -> bool {
        let p = prefix.as_bytes();
        if p.len() > 64 {
            return false;
        }
        p.iter().enumerate().all(|(i, &c)| {
            let b = self.0[i / 2];
            let nib = if i % 2 == 0 { b >> 4 } else { b & 15 };
            hex_val(c) == Some(nib)
        })
    }

    /// The first 8 bytes as an integer (for in-memory hashing of hashes).
    pub fn prefix_u64(&self) -> u64 {
        u64::from_le_bytes(self.0[..8].try_into().expect("8 bytes"))
    }
}

fn hex_val(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// Whether `s` is a non-empty string of hex digits (a candidate hash prefix).
pub fn is_hex_prefix(s: &str) -> bool {
    !s.is_empty() && s.len() <= 64 && s.bytes().all(|c| hex_val(c).is_some())
}

impl std::hash::Hash for Hash {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(self.prefix_u64());
    }
}

impl fmt::Display for Hash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for Hash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Hash({})", self.short())
    }
}

/// Text that is not a hash (64 hex characters).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{text}` is not a 64-character hex hash")]
pub struct NotAHash {
    pub text: String,
}

impl FromStr for Hash {
    type Err = NotAHash;
    fn from_str(s: &str) -> Result<Hash, NotAHash> {
        Hash::from_hex(s).ok_or_else(|| NotAHash { text: s.into() })
    }
}

impl Serialize for Hash {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            s.serialize_str(&self.to_hex())
        } else {
            s.serialize_bytes(&self.0)
        }
    }
}

impl<'de> Deserialize<'de> for Hash {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Hash, D::Error> {
        if d.is_human_readable() {
            let s = String::deserialize(d)?;
            Hash::from_hex(&s).ok_or_else(|| {
                serde::de::Error::custom(format!("`{s}` is not a 64-character hex hash"))
            })
        } else {
            d.deserialize_bytes(BytesVisitor)
        }
    }
}

struct BytesVisitor;

impl<'de> serde::de::Visitor<'de> for BytesVisitor {
    type Value = Hash;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("32 bytes")
    }
    fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Hash, E> {
        let a: [u8; 32] = v
            .try_into()
            .map_err(|_| E::invalid_length(v.len(), &self))?;
        Ok(Hash(a))
    }
}

impl JsonSchema for Hash {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Hash".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "pattern": "^[0-9a-f]{64}$",
            "description": "blake3 hash, 64 lowercase hex characters"
        })
    }
}

/// A `BuildHasher` for maps keyed by [`Hash`](struct@Hash): the key is already uniformly random, so
/// its first 8 bytes are the hash (in-memory only; never reaches stored bytes).
#[derive(Clone, Copy, Default)]
pub struct PrefixHasher(u64);

impl std::hash::Hasher for PrefixHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes.iter().take(8) {
            self.0 = (self.0 << 8) | b as u64;
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

/// Builds [`PrefixHasher`]s.
pub type PrefixBuild = std::hash::BuildHasherDefault<PrefixHasher>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trip_and_prefix() {
        let h = Hash::of_blob(b"abc");
        let hex = h.to_hex();
        assert_eq!(hex.len(), 64);
        assert_eq!(Hash::from_hex(&hex), Some(h));
        assert!(h.has_prefix(&hex[..7]));
        assert!(!h.has_prefix("zz"));
        assert_eq!(h.short(), hex[..12]);
        assert_ne!(
            Hash::of_blob(b"abc"),
            Hash::of_event(b"abc"),
            "contexts separate domains"
        );
        assert!(Hash::from_hex("00").is_none());
        let big = vec![7u8; 300_000];
        assert_eq!(
            Hash::of_blob(&big),
            Hash::derive(BLOB_CONTEXT, &big),
            "prepared hashing agrees"
        );
        assert_eq!(Hash::of_event(b"e"), Hash::derive(EVENT_CONTEXT, b"e"));
    }
}
