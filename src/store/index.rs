//! The index from event id to its place in a pack, with each event's parent position.
//! Positions follow storage order (pack by pack, frame by frame), so parents precede
//! children. The index has two parts:
//!
//! - a **saved** part, memory-mapped when a ledger opens so that opening costs no scan
//!   of what it covers (as git keeps a `.idx` next to each pack): the segment
//!   `packs/INDEX` and, on top of it, at most one smaller segment `packs/INDEX.delta`.
//!   Each holds a contiguous range of positions: a 16-bit fan-out table over its ids
//!   sorted, for lookups, and per position the event's place, parent and rank;
//! - a **tail**: the events after what the segments cover, scanned from the packs when
//!   a ledger opens and added by each commit, in a HashMap.
//!
//! A writer closing with many events in the tail saves them (see [`Index::save`]): as a
//! new delta while the delta stays under a quarter of the base, else as a new base
//! holding everything, so the bytes written stay proportional to the events appended.
//!
//! The segments are derived data. Opening checks them against the packs cheaply (the
//! packs covered must be listed in `REFS` in the same order, committed at least as far,
//! with the recorded last frame in place; a delta must name the base it continues) and
//! ignores them otherwise; a lookup checks that the frame it lands on carries the id it
//! looked for; `verify` checks all of it (checksums, order, every entry against the
//! frames); `rebuild` rewrites a damaged one.
//!
//! Segment layout (little-endian):
//!
//! ```text
//! [8]  magic "MLINDEX\x01"
//! u32  number of packs covered P, u32 0 (base) or 1 (delta)
//! u64  first position S, u64 number of events N
//! u32  crc32 of the base this delta continues (0 in a base), u32 0
//! P x: u32 id, u32 0, u64 covered length, u64 offset of its last indexed frame,
//!      [32] that frame's id                                        (56 bytes each)
//! u32 x 65536  fan-out: how many sorted ids have first two bytes <= k
//! [32] x N     ids, sorted
//! u32  x N     position of each sorted id
//! 16   x N     by position S+i: u32 pack, u32 parent position, u64 frame offset
//! u32  x N     by position S+i: rank of its id among the sorted ids
//! u32  crc32 of everything above (checked by verify, not when opening)
//! ```
use crate::hash::{Hash, PrefixBuild};
use memmap2::Mmap;
use rayon::prelude::*;
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Parent position of a root event.
pub const NO_PARENT: u32 = u32::MAX;
/// Parent position of an event whose parent is not in the index (a broken link).
pub const MISSING_PARENT: u32 = u32::MAX - 1;

/// First bytes of an index segment.
const MAGIC: &[u8; 8] = b"MLINDEX\x01";
const HEADER: usize = 8 + 4 + 4 + 8 + 8 + 4 + 4;
const PACK_ROW: usize = 4 + 4 + 8 + 8 + 32;
const FANOUT: usize = 1 << 16;
/// Bytes per event in a segment: sorted id, sorted position, entry, rank.
const PER_EVENT: usize = 32 + 4 + 16 + 4;

/// Where an event lies and who its parent is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub pack: u32,
    pub offset: u64,
    /// Position of the parent in the index, [`NO_PARENT`] or [`MISSING_PARENT`].
    pub parent: u32,
}

/// What a saved segment says it covers of one pack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Covered {
    pub id: u32,
    /// The pack's committed length when the segment was saved.
    pub len: u64,
    /// Offset and id of the last frame of the pack that the index holds (0 and the zero
    /// hash for a pack with none).
    pub last_offset: u64,
    pub last_id: Hash,
}

/// The path of a ledger's base index segment.
pub fn path(ledger_dir: &Path) -> PathBuf {
    ledger_dir.join("packs").join("INDEX")
}

/// The path of a ledger's delta index segment.
pub fn delta_path(ledger_dir: &Path) -> PathBuf {
    ledger_dir.join("packs").join("INDEX.delta")
}

/// A memory-mapped index segment.
struct Saved {
    map: Mmap,
    path: PathBuf,
    /// First position and number of positions held.
    start: usize,
    n: usize,
    is_delta: bool,
    /// crc32 of the base a delta continues.
    base_sum: u32,
    covered: Vec<Covered>,
    fanout: usize,
    sorted: usize,
    sorted_pos: usize,
    entries: usize,
    ranks: usize,
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

impl Saved {
    /// Map and parse a segment; `None` when absent or not a well-formed segment of this
    /// format (it is derived data: the caller scans the packs instead).
    fn load(path: &Path) -> Option<Saved> {
        let file = std::fs::File::open(path).ok()?;
        // SAFETY: segments are never modified in place: a writer writes a new file and
        // renames it over the old one, so this map's pages stay as they were.
        let map = unsafe { Mmap::map(&file) }.ok()?;
        let b = &map[..];
        if b.len() < HEADER || &b[..8] != MAGIC {
            return None;
        }
        let npacks = u32_at(b, 8) as usize;
        let is_delta = match u32_at(b, 12) {
            0 => false,
            1 => true,
            _ => return None,
        };
        let start = usize::try_from(u64_at(b, 16)).ok()?;
        let n = usize::try_from(u64_at(b, 24)).ok()?;
        if start.checked_add(n)? >= MISSING_PARENT as usize {
            return None;
        }
        let fanout = HEADER.checked_add(npacks.checked_mul(PACK_ROW)?)?;
        let sorted = fanout + FANOUT * 4;
        let sorted_pos = sorted.checked_add(n.checked_mul(32)?)?;
        let entries = sorted_pos + n * 4;
        let ranks = entries + n * 16;
        if b.len() != ranks + n * 4 + 4 {
            return None;
        }
        let covered = (0..npacks)
            .map(|i| {
                let at = HEADER + i * PACK_ROW;
                Covered {
                    id: u32_at(b, at),
                    len: u64_at(b, at + 8),
                    last_offset: u64_at(b, at + 16),
                    last_id: Hash(b[at + 24..at + 56].try_into().expect("32 bytes")),
                }
            })
            .collect();
        if u32_at(b, fanout + (FANOUT - 1) * 4) as usize != n {
            return None;
        }
        Some(Saved {
            path: path.to_path_buf(),
            start,
            n,
            is_delta,
            base_sum: u32_at(b, 32),
            covered,
            fanout,
            sorted,
            sorted_pos,
            entries,
            ranks,
            map,
        })
    }

    /// The stored checksum (the file's last 4 bytes).
    fn sum(&self) -> u32 {
        u32_at(&self.map, self.map.len() - 4)
    }

    fn sorted_id(&self, i: usize) -> &[u8] {
        let at = self.sorted + i * 32;
        &self.map[at..at + 32]
    }

    /// (id, position) of every event held, sorted by id.
    fn sorted_pairs(&self) -> Vec<(Hash, u32)> {
        (0..self.n)
            .map(|i| {
                (
                    Hash(self.sorted_id(i).try_into().expect("32 bytes")),
                    u32_at(&self.map, self.sorted_pos + i * 4),
                )
            })
            .collect()
    }

    /// Range of sorted ids whose first two bytes are `k`.
    fn bucket(&self, k: usize) -> (usize, usize) {
        let lo = if k == 0 {
            0
        } else {
            u32_at(&self.map, self.fanout + (k - 1) * 4) as usize
        };
        let hi = u32_at(&self.map, self.fanout + k * 4) as usize;
        (lo.min(self.n), hi.min(self.n).max(lo.min(self.n)))
    }

    fn position(&self, h: &Hash) -> Option<u32> {
        let (mut lo, mut hi) = self.bucket(((h.0[0] as usize) << 8) | h.0[1] as usize);
        while lo < hi {
            let mid = (lo + hi) / 2;
            match self.sorted_id(mid).cmp(&h.0[..]) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => {
                    return Some(u32_at(&self.map, self.sorted_pos + mid * 4));
                }
            }
        }
        None
    }

    /// The entry at local index `i` (position `start + i`).
    fn entry(&self, i: usize) -> Entry {
        let at = self.entries + i * 16;
        Entry {
            pack: u32_at(&self.map, at),
            parent: u32_at(&self.map, at + 4),
            offset: u64_at(&self.map, at + 8),
        }
    }

    fn hash_at(&self, i: usize) -> Hash {
        let rank = u32_at(&self.map, self.ranks + i * 4) as usize;
        Hash(
            self.sorted_id(rank.min(self.n.saturating_sub(1)))
                .try_into()
                .expect("32 bytes"),
        )
    }

    /// Everything `verify` can check of the file alone: its checksum, the ids strictly
    /// sorted and the fan-out right, sorted positions and ranks inverse of each other,
    /// parents before children. Returns the digest of the (position, id) pairs it holds
    /// (see [`pair_mix`]), for `verify` to compare with the frames it walks.
    fn check(&self) -> Result<u64, IndexFault> {
        if crc32fast::hash(&self.map[..self.map.len() - 4]) != self.sum() {
            return Err(IndexFault::Checksum);
        }
        // In parallel chunks: the ids sorted, each sorted position's rank pointing back,
        // and per chunk the counts behind the fan-out table.
        const CH: usize = 1 << 16;
        let per_chunk: Vec<(Vec<u32>, u64)> = (0..self.n.div_ceil(CH))
            .into_par_iter()
            .map(|c| {
                let mut counts = vec![0u32; FANOUT];
                let mut digest = 0u64;
                for i in c * CH..self.n.min((c + 1) * CH) {
                    let id = self.sorted_id(i);
                    if i > 0 && self.sorted_id(i - 1) >= id {
                        return Err(IndexFault::Order(i));
                    }
                    counts[((id[0] as usize) << 8) | id[1] as usize] += 1;
                    let abs = u32_at(&self.map, self.sorted_pos + i * 4);
                    let pos = (abs as usize).wrapping_sub(self.start);
                    if pos >= self.n || u32_at(&self.map, self.ranks + pos * 4) as usize != i {
                        return Err(IndexFault::Position(i));
                    }
                    digest = digest.wrapping_add(pair_mix(abs, id));
                }
                Ok((counts, digest))
            })
            .collect::<Result<_, IndexFault>>()?;
        let mut counts = vec![0u32; FANOUT];
        let mut digest = 0u64;
        for (c, d) in &per_chunk {
            for (t, x) in counts.iter_mut().zip(c) {
                *t += x;
            }
            digest = digest.wrapping_add(*d);
        }
        let mut acc = 0u32;
        for (k, c) in counts.iter().enumerate() {
            acc += c;
            if u32_at(&self.map, self.fanout + k * 4) != acc {
                return Err(IndexFault::Fanout(k));
            }
        }
        for i in 0..self.n {
            let p = self.entry(i).parent;
            if p != NO_PARENT && p != MISSING_PARENT && p as usize >= self.start + i {
                return Err(IndexFault::Parent(self.start + i));
            }
        }
        Ok(digest)
    }
}

/// What a saved segment's own check found wrong (see `Saved::check`); the file is named
/// beside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum IndexFault {
    #[error("checksum mismatch")]
    Checksum,
    /// The sorted ids are not strictly increasing at this sorted position.
    #[error("ids out of order at {0}")]
    Order(usize),
    /// Sorted position and rank tables are not inverse at this sorted position.
    #[error("position table inconsistent at {0}")]
    Position(usize),
    #[error("fan-out entry {0} is wrong")]
    Fanout(usize),
    #[error("parent of position {0} does not precede it")]
    Parent(usize),
}

/// One (position, id) pair's term in a pair digest: the pair mixed into 64 bits
/// (splitmix64's finalizer over the position and the id's four words).
///
/// A pair digest is the wrapping sum of these terms over a set of pairs. Why: the saved
/// segments hold ids sorted, so "the id at position p" is a random read (two cache
/// misses per event, once the largest cost of `verify`). Summing over the sorted table
/// and over the frames in storage order reads both sequentially; equal sets give equal
/// sums, and a wrong id at any position changes the sum except with probability about
/// 2^-64. `verify` looks positions up one by one only after a mismatch, to name the
/// first wrong one.
pub fn pair_mix(pos: u32, id: &[u8]) -> u64 {
    fn mix(mut z: u64) -> u64 {
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    let mut h = mix(pos as u64 ^ 0x9e37_79b9_7f4a_7c15);
    for w in id.chunks_exact(8) {
        h = mix(h ^ u64::from_le_bytes(w.try_into().expect("8 bytes")));
    }
    h
}

/// Merge two lists sorted by id.
fn merge_sorted(a: Vec<(Hash, u32)>, b: Vec<(Hash, u32)>) -> Vec<(Hash, u32)> {
    let mut out = Vec::with_capacity(a.len() + b.len());
    let mut b = b.into_iter().peekable();
    for x in a {
        while b.peek().is_some_and(|y| y.0 < x.0) {
            out.push(b.next().expect("peeked"));
        }
        out.push(x);
    }
    out.extend(b);
    out
}

/// Event id -> position -> location. (The tail's HashMap is keyed by uniformly random
/// hashes; it lives only in memory and never reaches stored or hashed bytes.)
#[derive(Default)]
pub struct Index {
    /// Saved segments in position order: a base, then at most one delta.
    segs: Vec<Saved>,
    /// Number of positions the segments hold.
    saved_n: usize,
    entries: Vec<Entry>,
    hashes: Vec<Hash>,
    map: HashMap<Hash, u32, PrefixBuild>,
}

impl Index {
    /// The saved segments of the ledger in `ledger_dir` that fit together (a base, and
    /// the delta when it continues that base), with what they say they cover; `fits`
    /// decides whether a segment's coverage matches the packs.
    pub fn load(ledger_dir: &Path, fits: impl Fn(&[Covered]) -> bool) -> (Index, Vec<Covered>) {
        let Some(base) = Saved::load(&path(ledger_dir))
            .filter(|b| !b.is_delta && b.start == 0 && fits(&b.covered))
        else {
            return (Index::default(), Vec::new());
        };
        let mut segs = vec![base];
        if let Some(d) = Saved::load(&delta_path(ledger_dir)).filter(|d| {
            d.is_delta && d.start == segs[0].n && d.base_sum == segs[0].sum() && fits(&d.covered)
        }) {
            segs.push(d);
        }
        let last = segs.last().expect("a base");
        let covered = last.covered.clone();
        let saved_n = last.start + last.n;
        (
            Index {
                segs,
                saved_n,
                ..Index::default()
            },
            covered,
        )
    }

    pub fn len(&self) -> usize {
        self.saved_n + self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Events not in the saved segments (scanned at open or added since).
    pub fn tail_len(&self) -> usize {
        self.entries.len()
    }

    /// The saved segment files this index reads.
    pub fn saved_paths(&self) -> Vec<&Path> {
        self.segs.iter().map(|s| s.path.as_path()).collect()
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
            Some(h) => self.position(&h).unwrap_or(MISSING_PARENT),
        };
        self.insert_at(hash, pack, offset, parent)
    }

    /// Add an event whose parent's position is already known ([`NO_PARENT`] for a root).
    pub fn insert_at(&mut self, hash: Hash, pack: u32, offset: u64, parent: u32) -> u32 {
        if let Some(p) = self.saved_position(&hash) {
            return p;
        }
        let pos = self.len() as u32;
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

    fn saved_position(&self, hash: &Hash) -> Option<u32> {
        self.segs.iter().find_map(|s| s.position(hash))
    }

    pub fn position(&self, hash: &Hash) -> Option<u32> {
        if let Some(p) = self.saved_position(hash) {
            return Some(p);
        }
        self.map.get(hash).copied()
    }

    /// The segment holding saved position `pos`.
    fn seg(&self, pos: usize) -> &Saved {
        match self.segs.as_slice() {
            [one] => one,
            [base, delta] => {
                if pos < delta.start {
                    base
                } else {
                    delta
                }
            }
            _ => unreachable!("a base and at most one delta"),
        }
    }

    pub fn entry(&self, pos: u32) -> Entry {
        let pos = pos as usize;
        if pos < self.saved_n {
            let s = self.seg(pos);
            return s.entry(pos - s.start);
        }
        self.entries[pos - self.saved_n]
    }

    pub fn hash_at(&self, pos: u32) -> Hash {
        let pos = pos as usize;
        if pos < self.saved_n {
            let s = self.seg(pos);
            return s.hash_at(pos - s.start);
        }
        self.hashes[pos - self.saved_n]
    }

    pub fn get(&self, hash: &Hash) -> Option<Entry> {
        self.position(hash).map(|p| self.entry(p))
    }

    /// Positions from `pos` back to the root, newest first. Stops at a broken link.
    pub fn ancestry(&self, pos: u32) -> Vec<u32> {
        let mut out = Vec::new();
        let mut p = pos;
        while (p as usize) < self.len() {
            out.push(p);
            p = self.entry(p).parent;
        }
        out
    }

    /// Every event id starting with the hex `prefix` (lowercase; with 4 digits or more
    /// a saved segment is searched in one fan-out bucket).
    pub fn with_prefix(&self, prefix: &str) -> Vec<Hash> {
        let mut out = Vec::new();
        for s in &self.segs {
            let (lo, hi) = match u16::from_str_radix(prefix.get(..4).unwrap_or(""), 16) {
                Ok(k) => s.bucket(k as usize),
                Err(_) => (0, s.n),
            };
            for i in lo..hi {
                let h = Hash(s.sorted_id(i).try_into().expect("32 bytes"));
                if h.has_prefix(prefix) {
                    out.push(h);
                }
            }
        }
        out.extend(self.hashes.iter().filter(|h| h.has_prefix(prefix)).copied());
        out
    }

    /// All event ids in storage order.
    pub fn hashes(&self) -> impl Iterator<Item = Hash> + '_ {
        (0..self.len() as u32).map(|p| self.hash_at(p))
    }

    /// Whether every saved segment's stored checksum matches its bytes (the cheap part
    /// of [`Index::check_saved`], for `rebuild`).
    pub fn checksums_ok(&self) -> bool {
        self.segs
            .iter()
            .all(|s| crc32fast::hash(&s.map[..s.map.len() - 4]) == s.sum())
    }

    /// Saved segment files of the ledger in `ledger_dir` that exist but do not load
    /// (bad magic, header, size or tables): damage that opening skips silently, since
    /// the index is derived, but `verify` names.
    pub fn unreadable_saved(ledger_dir: &Path) -> Vec<PathBuf> {
        [path(ledger_dir), delta_path(ledger_dir)]
            .into_iter()
            .filter(|p| p.is_file() && Saved::load(p).is_none())
            .collect()
    }

    /// Check each saved segment on its own (see `Saved::check`): the first problem,
    /// naming the file.
    pub fn check_saved(&self) -> Result<u64, (PathBuf, IndexFault)> {
        let mut digest = 0u64;
        for s in &self.segs {
            digest = digest.wrapping_add(s.check().map_err(|e| (s.path.clone(), e))?);
        }
        Ok(digest)
    }

    /// Number of positions the saved segments hold (positions `0..saved_len()`).
    pub fn saved_len(&self) -> usize {
        self.saved_n
    }

    /// Save what the segments do not hold yet, for packs `covered` (id and committed
    /// length, in storage order): as a new delta (the old delta and the tail) while
    /// that stays under a quarter of the base, else as a new base holding everything.
    /// Each file is written to a temporary name, fsync'ed and renamed; a reader that
    /// mapped an old segment keeps reading it, and a delta names its base by checksum,
    /// so a reader never pairs a delta with the wrong base.
    pub fn save(&self, ledger_dir: &Path, covered: &[(u32, u64)]) -> std::io::Result<()> {
        let mut tail: Vec<(Hash, u32)> = self
            .hashes
            .iter()
            .enumerate()
            .map(|(i, h)| (*h, (self.saved_n + i) as u32))
            .collect();
        // Ids are uniformly random: ordering by the first 8 bytes almost always decides,
        // and comparing a u64 is much cheaper than comparing 32 bytes.
        let key = |h: &Hash| u64::from_be_bytes(h.0[..8].try_into().expect("8 bytes"));
        tail.par_sort_unstable_by(|a, b| key(&a.0).cmp(&key(&b.0)).then_with(|| a.0.cmp(&b.0)));
        let delta_n = self.segs.get(1).map_or(0, |d| d.n);
        match self.segs.first() {
            Some(base) if (delta_n + tail.len()) * 4 < base.n => {
                let sorted = match self.segs.get(1) {
                    Some(d) => merge_sorted(d.sorted_pairs(), tail),
                    None => tail,
                };
                let bytes = self.segment(base.n, sorted, Some(base.sum()), covered);
                write_durably(&delta_path(ledger_dir), &bytes)
            }
            _ => {
                let mut sorted = tail;
                for s in &self.segs {
                    sorted = merge_sorted(s.sorted_pairs(), sorted);
                }
                let bytes = self.segment(0, sorted, None, covered);
                write_durably(&path(ledger_dir), &bytes)?;
                match std::fs::remove_file(delta_path(ledger_dir)) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
                    _ => Ok(()),
                }
            }
        }
    }

    /// The bytes of a segment holding positions `start..` (`sorted`: their ids sorted,
    /// with positions).
    fn segment(
        &self,
        start: usize,
        sorted: Vec<(Hash, u32)>,
        base_sum: Option<u32>,
        covered: &[(u32, u64)],
    ) -> Vec<u8> {
        let n = sorted.len();
        debug_assert_eq!(start + n, self.len());
        let mut ranks = vec![0u32; n];
        for (r, (_, pos)) in sorted.iter().enumerate() {
            ranks[*pos as usize - start] = r as u32;
        }
        // The last indexed frame of each covered pack (frames of one pack have
        // increasing offsets and positions, so the last position per pack wins).
        // Positions before `start` are described by the base's own table.
        let mut last: HashMap<u32, (u64, Hash)> = HashMap::new();
        if start > 0 {
            for c in &self.segs[0].covered {
                if c.last_offset != 0 {
                    last.insert(c.id, (c.last_offset, c.last_id));
                }
            }
        }
        let mut last_pos: HashMap<u32, u32> = HashMap::new();
        for pos in start as u32..self.len() as u32 {
            last_pos.insert(self.entry(pos).pack, pos);
        }
        for (id, pos) in last_pos {
            last.insert(id, (self.entry(pos).offset, self.hash_at(pos)));
        }
        let mut buf: Vec<u8> =
            Vec::with_capacity(HEADER + covered.len() * PACK_ROW + FANOUT * 4 + n * PER_EVENT + 4);
        buf.extend_from_slice(MAGIC);
        buf.extend_from_slice(&(covered.len() as u32).to_le_bytes());
        buf.extend_from_slice(&u32::from(base_sum.is_some()).to_le_bytes());
        buf.extend_from_slice(&(start as u64).to_le_bytes());
        buf.extend_from_slice(&(n as u64).to_le_bytes());
        buf.extend_from_slice(&base_sum.unwrap_or(0).to_le_bytes());
        buf.extend_from_slice(&0u32.to_le_bytes());
        for &(id, len) in covered {
            let (off, h) = last.get(&id).copied().unwrap_or_default();
            buf.extend_from_slice(&id.to_le_bytes());
            buf.extend_from_slice(&0u32.to_le_bytes());
            buf.extend_from_slice(&len.to_le_bytes());
            buf.extend_from_slice(&off.to_le_bytes());
            buf.extend_from_slice(&h.0);
        }
        let mut counts = vec![0u32; FANOUT];
        for (h, _) in &sorted {
            counts[((h.0[0] as usize) << 8) | h.0[1] as usize] += 1;
        }
        let mut acc = 0u32;
        for c in counts {
            acc += c;
            buf.extend_from_slice(&acc.to_le_bytes());
        }
        for (h, _) in &sorted {
            buf.extend_from_slice(&h.0);
        }
        for (_, pos) in &sorted {
            buf.extend_from_slice(&pos.to_le_bytes());
        }
        for pos in start..start + n {
            let e = self.entry(pos as u32);
            buf.extend_from_slice(&e.pack.to_le_bytes());
            buf.extend_from_slice(&e.parent.to_le_bytes());
            buf.extend_from_slice(&e.offset.to_le_bytes());
        }
        for r in ranks {
            buf.extend_from_slice(&r.to_le_bytes());
        }
        let sum = crc32fast::hash(&buf);
        buf.extend_from_slice(&sum.to_le_bytes());
        buf
    }
}

/// Write `bytes` to `dest` through a temporary file, fsync'ed, then renamed.
fn write_durably(dest: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = dest.with_extension("tmp");
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, dest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(i: u32) -> Hash {
        Hash::of_blob(&i.to_le_bytes())
    }

    /// A chain of `n` events in pack 1 (offsets 8, 108, ...), each the parent of the next.
    fn chain(ix: &mut Index, from: u32, to: u32) {
        for i in from..to {
            let parent = (i > 0).then(|| h(i - 1));
            ix.insert(h(i), 1, 8 + 100 * i as u64, parent);
        }
    }

    #[test]
    fn a_saved_index_answers_like_the_one_it_was_saved_from() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("packs")).unwrap();
        let mut mem = Index::default();
        chain(&mut mem, 0, 3000);
        mem.save(dir.path(), &[(1, 8 + 100 * 3000)]).unwrap();
        let (mut ix, covered) = Index::load(dir.path(), |_| true);
        assert_eq!(covered[0].id, 1);
        assert_eq!(covered[0].last_offset, 8 + 100 * 2999);
        assert_eq!(covered[0].last_id, h(2999));
        ix.check_saved().unwrap();
        assert_eq!(ix.len(), 3000);
        for i in (0..3000).step_by(7) {
            let p = ix.position(&h(i)).unwrap();
            assert_eq!(p, mem.position(&h(i)).unwrap());
            assert_eq!(ix.entry(p), mem.entry(p));
            assert_eq!(ix.hash_at(p), h(i));
        }
        assert_eq!(ix.position(&h(5000)), None);
        // A tail on top: positions continue, lookups span both parts, re-inserting a
        // saved id keeps its place.
        chain(&mut ix, 3000, 3100);
        assert_eq!(ix.tail_len(), 100);
        assert_eq!(ix.insert_at(h(10), 9, 9, NO_PARENT), 10);
        assert_eq!(ix.ancestry(3099).len(), 3100);
        let hx = h(3050).to_hex();
        assert_eq!(ix.with_prefix(&hx[..8]), vec![h(3050)]);
        let hx = h(17).to_hex();
        assert_eq!(ix.with_prefix(&hx[..8]), vec![h(17)]);
        // Saving again writes the small tail as a delta on top of the base.
        ix.save(dir.path(), &[(1, 8 + 100 * 3100)]).unwrap();
        assert!(delta_path(dir.path()).is_file());
        let (ix2, covered) = Index::load(dir.path(), |_| true);
        assert_eq!(ix2.saved_paths().len(), 2);
        assert_eq!(covered[0].last_id, h(3099));
        ix2.check_saved().unwrap();
        assert_eq!(ix2.tail_len(), 0);
        assert_eq!(
            ix2.hashes().collect::<Vec<_>>(),
            ix.hashes().collect::<Vec<_>>()
        );
        assert_eq!(ix2.position(&h(3050)), Some(3050));
        assert_eq!(ix2.entry(3050).parent, 3049);
        // A tail as large as a quarter of the base folds everything into a new base and
        // removes the delta.
        let mut ix3 = ix2;
        chain(&mut ix3, 3100, 4000);
        ix3.save(dir.path(), &[(1, 8 + 100 * 4000)]).unwrap();
        assert!(!delta_path(dir.path()).exists());
        let (ix4, _) = Index::load(dir.path(), |_| true);
        assert_eq!(
            (ix4.len(), ix4.tail_len(), ix4.saved_paths().len()),
            (4000, 0, 1)
        );
        ix4.check_saved().unwrap();
        for i in (0..4000).step_by(13) {
            assert_eq!(ix4.hash_at(i), h(i));
        }
    }

    #[test]
    fn a_delta_of_another_base_is_ignored_and_coverage_is_the_callers_call() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("packs")).unwrap();
        let mut a = Index::default();
        chain(&mut a, 0, 400);
        a.save(dir.path(), &[(1, 40_008)]).unwrap();
        let (mut a, _) = Index::load(dir.path(), |_| true);
        chain(&mut a, 400, 410);
        a.save(dir.path(), &[(1, 41_008)]).unwrap();
        // Another writer history replaced the base (as after gc): the old delta must not
        // be read on top of it.
        let mut b = Index::default();
        chain(&mut b, 1000, 1400);
        std::fs::copy(delta_path(dir.path()), dir.path().join("delta.keep")).unwrap();
        b.save(dir.path(), &[(2, 40_008)]).unwrap();
        std::fs::copy(dir.path().join("delta.keep"), delta_path(dir.path())).unwrap();
        let (ix, covered) = Index::load(dir.path(), |_| true);
        assert_eq!(
            (ix.len(), ix.saved_paths().len(), covered[0].id),
            (400, 1, 2)
        );
        // Coverage that does not fit the packs: nothing is used.
        let (ix, covered) = Index::load(dir.path(), |c| c[0].id == 1);
        assert_eq!((ix.len(), covered.len()), (0, 0));
    }

    #[test]
    fn a_damaged_saved_index_is_refused_or_caught_by_its_check() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("packs")).unwrap();
        let mut mem = Index::default();
        chain(&mut mem, 0, 500);
        mem.save(dir.path(), &[(1, 50_008)]).unwrap();
        let p = path(dir.path());
        let good = std::fs::read(&p).unwrap();
        // Truncated: not loaded at all.
        std::fs::write(&p, &good[..good.len() - 1]).unwrap();
        assert_eq!(Index::load(dir.path(), |_| true).0.len(), 0);
        // A flipped id byte: loads (opening does not hash the file), check says so.
        let mut bad = good.clone();
        let at = bad.len() - 4 - 500 * 56;
        bad[at] ^= 1;
        std::fs::write(&p, &bad).unwrap();
        let (ix, _) = Index::load(dir.path(), |_| true);
        assert_eq!(ix.check_saved().unwrap_err().1, IndexFault::Checksum);
    }
}
