//! Refs: branch name -> head event, and each pack's committed length, in one sled tree
//! so a batch's ref move and pack growth are one atomic sled batch.
//!
//! Keys: `b/<branch>` -> 32-byte event id; `p/<pack id, u32 BE>` -> committed length
//! (u64 LE). A fork is one new `b/` key: O(1), nothing copied.
use super::hash::Hash;
use super::LedgerError;

pub const BRANCH_PREFIX: &[u8] = b"b/";
pub const PACK_PREFIX: &[u8] = b"p/";

/// The default branch genesis is written to.
pub const MAIN: &str = "main";

/// Check a branch name: 1..=100 chars of `[A-Za-z0-9._-]` in `/`-separated components
/// (fetched namespaces, `worker1/main`), no component empty or starting with `-`/`.`.
pub fn validate_branch(name: &str) -> Result<(), LedgerError> {
    let ok = !name.is_empty()
        && name.len() <= 100
        && name.split('/').all(|c| {
            !c.is_empty()
                && !c.starts_with(['-', '.'])
                && c.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        });
    if ok {
        Ok(())
    } else {
        Err(LedgerError::BadBranchName {
            name: name.to_string(),
        })
    }
}

pub fn branch_key(name: &str) -> Vec<u8> {
    [BRANCH_PREFIX, name.as_bytes()].concat()
}

pub fn pack_key(id: u32) -> Vec<u8> {
    [PACK_PREFIX, &id.to_be_bytes()[..]].concat()
}

/// A ref's stored value as an event id.
pub fn decode_head(name: &str, v: &[u8]) -> Result<Hash, LedgerError> {
    let arr: [u8; 32] = v.try_into().map_err(|_| LedgerError::Corrupt {
        what: format!("ref {name}"),
        problem: format!("value is {} bytes, not a 32-byte event id", v.len()),
    })?;
    Ok(Hash(arr))
}

/// All `(branch, raw value)` pairs in name order.
pub fn list_raw(tree: &sled::Tree) -> Result<Vec<(String, Vec<u8>)>, LedgerError> {
    let mut out = Vec::new();
    for r in tree.scan_prefix(BRANCH_PREFIX) {
        let (k, v) = r?;
        let name = String::from_utf8_lossy(&k[BRANCH_PREFIX.len()..]).into_owned();
        out.push((name, v.to_vec()));
    }
    Ok(out)
}

/// All `(pack id, committed length)` in id order.
pub fn packs(tree: &sled::Tree) -> Result<Vec<(u32, u64)>, LedgerError> {
    let mut out = Vec::new();
    for r in tree.scan_prefix(PACK_PREFIX) {
        let (k, v) = r?;
        let bad = || LedgerError::Corrupt {
            what: "pack table".into(),
            problem: "malformed entry".into(),
        };
        let id = u32::from_be_bytes(k.get(2..6).ok_or_else(bad)?.try_into().map_err(|_| bad())?);
        let len = u64::from_le_bytes(v.as_ref().try_into().map_err(|_| bad())?);
        out.push((id, len));
    }
    Ok(out)
}
