//! The in-memory index from event id to its place in a pack, with each event's parent
//! position, rebuilt from the packs' frames when a ledger opens (each frame carries its
//! event id, so no per-event sled entry is needed). Lookups and history walks are pure
//! memory operations.
use super::hash::{Hash, PrefixBuild};
use std::collections::HashMap;

/// Parent position of a root event.
pub const NO_PARENT: u32 = u32::MAX;
/// Parent position of an event whose parent is not in the index (a broken link).
pub const MISSING_PARENT: u32 = u32::MAX - 1;

/// Where an event lies and who its parent is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub pack: u32,
    pub offset: u64,
    /// Position of the parent in the index, [`NO_PARENT`] or [`MISSING_PARENT`].
    pub parent: u32,
}

/// Event id -> position -> location. (A HashMap keyed by uniformly random hashes; it
/// lives only in memory and never reaches stored or hashed bytes.)
#[derive(Default)]
pub struct Index {
    entries: Vec<Entry>,
    hashes: Vec<Hash>,
    map: HashMap<Hash, u32, PrefixBuild>,
}

impl Index {
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Make room for `n` more events.
    pub fn reserve(&mut self, n: usize) {
        self.entries.reserve(n);
        self.hashes.reserve(n);
        self.map.reserve(n);
    }

    /// Add an event; an id already present keeps its first location. Returns its position.
    pub fn insert(&mut self, hash: Hash, pack: u32, offset: u64, parent: Option<Hash>) -> u32 {
        let parent = match parent {
            None => NO_PARENT,
            Some(h) => self.map.get(&h).copied().unwrap_or(MISSING_PARENT),
        };
        self.insert_at(hash, pack, offset, parent)
    }

    /// Add an event whose parent's position is already known ([`NO_PARENT`] for a root).
    pub fn insert_at(&mut self, hash: Hash, pack: u32, offset: u64, parent: u32) -> u32 {
        let pos = self.entries.len() as u32;
        match self.map.entry(hash) {
            std::collections::hash_map::Entry::Occupied(o) => *o.get(),
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(pos);
                self.entries.push(Entry {
                    pack,
                    offset,
                    parent,
                });
                self.hashes.push(hash);
                pos
            }
        }
    }

    pub fn position(&self, hash: &Hash) -> Option<u32> {
        self.map.get(hash).copied()
    }

    pub fn entry(&self, pos: u32) -> Entry {
        self.entries[pos as usize]
    }

    pub fn hash_at(&self, pos: u32) -> Hash {
        self.hashes[pos as usize]
    }

    pub fn get(&self, hash: &Hash) -> Option<Entry> {
        self.position(hash).map(|p| self.entries[p as usize])
    }

    /// Positions from `pos` back to the root, newest first. Stops at a broken link.
    pub fn ancestry(&self, pos: u32) -> Vec<u32> {
        let mut out = Vec::new();
        let mut p = pos;
        while (p as usize) < self.entries.len() {
            out.push(p);
            p = self.entries[p as usize].parent;
        }
        out
    }

    /// Every event id starting with the hex `prefix` (lowercase).
    pub fn with_prefix(&self, prefix: &str) -> Vec<Hash> {
        self.hashes
            .iter()
            .filter(|h| h.has_prefix(prefix))
            .copied()
            .collect()
    }

    /// All event ids in storage order.
    pub fn hashes(&self) -> &[Hash] {
        &self.hashes
    }
}
