//! [`Store`]: an open ledger directory at the storage level, the bytes under the
//! application's `Ledger`. It opens what `REFS` lists (packs, small-blob packs, the saved
//! index), holds the writer's lock, and commits batches of framed records durably; it
//! never decodes an event (only the parent link in its first bytes, for the index).
//!
//! Layout of a ledger directory (the application adds `db/`, its projection cache):
//!
//! ```text
//! LOCK            flock, held exclusively by the one writer (readers take no lock)
//! REFS            branch heads + committed pack lengths, a log of snapshots (refs.rs)
//! packs/          pack-NNNNNNNN.pack: framed event records (see pack.rs)
//!                 blobs-NNNNNNNN.pack: small blobs, same frames
//!                 INDEX, INDEX.delta: the saved index (index.rs)
//! blobs/ab/cd..   large blobs, one file per hash
//! set-aside/      intact records a writer found past the committed lengths (aside.rs)
//! ```
//!
//! Commit protocol (a crash at any instant leaves complete history behind every ref):
//! 1. blobs: files are fsync'ed and renamed when put; small-blob pack frames are
//!    fsync'ed before step 3;
//! 2. the batch's frames are written after the pack's committed end and fsync'ed;
//! 3. a `REFS` record (branch moved, pack lengths grown) is appended and fsync'ed. Until
//!    then the new frames are an uncommitted tail that readers ignore and the next
//!    writer cuts off, after setting its intact records aside (a damaged last `REFS`
//!    record reads like a crash before step 3, so nothing intact is cut away).
//!
//! Readers read `REFS` once when they open: that snapshot (heads, and the committed pack
//! prefixes that hold everything the heads reach) stays consistent however the writer
//! goes on, so read commands never wait for a run.
use crate::aside::{self, SetAside};
use crate::blob::Blobs;
use crate::codec;
use crate::hash::Hash;
use crate::index::{Covered, Index, MISSING_PARENT, NO_PARENT};
use crate::lock::LedgerLock;
use crate::pack::{self, Pack, PackKind, PACK_ROLL_BYTES};
use crate::refs::{self, Refs, RefsLog, MAIN};
use crate::StoreError;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Something wrong found while opening (reported by verify; reads avoid it).
#[derive(Clone, Debug)]
pub struct OpenProblem {
    pub what: String,
    pub problem: String,
}

/// Where an event's record lies (for tools and tests).
#[derive(Clone, Debug)]
pub struct Location {
    pub pack: PathBuf,
    /// Offset of the frame in the pack file.
    pub offset: u64,
    /// Offset of the event's encoded bytes in the pack file, and their length.
    pub event_offset: u64,
    pub event_len: usize,
}

/// A writer saves its index when closing once this many events are not in `INDEX`
/// (scanning fewer at open costs a few milliseconds).
const SAVE_INDEX_TAIL: usize = 50_000;

/// Ids of the pack files of `kind` in `packs_dir`.
pub fn pack_files(packs_dir: &Path, kind: PackKind) -> Result<Vec<u32>, StoreError> {
    let rd = std::fs::read_dir(packs_dir).map_err(|e| StoreError::Io {
        path: packs_dir.to_path_buf(),
        message: e.to_string(),
    })?;
    let mut ids: Vec<u32> = rd
        .flatten()
        .filter_map(|e| kind.id_of(&e.file_name().to_string_lossy()))
        .collect();
    ids.sort_unstable();
    Ok(ids)
}

/// Whether pack `id` of `kind`, which `current` does not list, was dropped by a commit:
/// gc copies what is reachable into packs with higher ids and commits a record without
/// the old ones, so a pack an earlier record (`log`) lists, or whose id precedes the first
/// listed one, is one gc replaced (its records are garbage or copies). Any other unlisted
/// pack is one no commit reached, or whose commit was lost.
pub fn dropped_by_commit(current: &Refs, log: &[Refs], kind: PackKind, id: u32) -> bool {
    let listed = |r: &Refs| match kind {
        PackKind::Events => r.packs.clone(),
        PackKind::Blobs => r.blob_packs.clone(),
    };
    listed(current)
        .first()
        .is_some_and(|&(first, _)| id < first)
        || log.iter().any(|r| listed(r).iter().any(|&(i, _)| i == id))
}

/// Every intact record of ledger `dir`'s `REFS` log, newest first.
pub fn refs_log(dir: &Path) -> Vec<Refs> {
    let bytes = std::fs::read(refs::path(dir)).unwrap_or_default();
    let mut out: Vec<Refs> = refs::records(&bytes)
        .iter()
        .filter_map(|&(s, e)| Refs::parse(dir, &bytes[s..e]).ok())
        .collect();
    out.reverse();
    out
}

/// Whether a saved index's coverage fits the packs of this snapshot: the packs it covers
/// are the first ones, in order, each committed at least as far as covered and with the
/// recorded last frame where the index says (a pack replaced by gc fails this).
fn saved_index_fits(covered: &[Covered], packs: &[Pack]) -> bool {
    covered.len() <= packs.len()
        && covered.iter().zip(packs).all(|(c, p)| {
            c.id == p.id
                && c.len <= p.committed()
                && (c.last_offset == 0
                    || pack::parse_frame(p.bytes(), c.last_offset as usize)
                        .is_ok_and(|f| f.hash == c.last_id))
        })
}

/// The frames of one commit, built by the application record by record
/// ([`Store::begin_batch`], [`Batch::push_new`], [`Batch::push_stored`]) and made
/// durable by [`Store::commit_batch`].
pub struct Batch {
    /// The committed length of the pack the frames go after.
    base: u64,
    buf: Vec<u8>,
    /// (id, offset of a new frame or None when the record is already stored)
    added: Vec<(Hash, Option<u64>)>,
}

impl Batch {
    /// Frame a record not stored yet (its id, event bytes and metadata bytes).
    pub fn push_new(&mut self, id: &Hash, event: &[u8], meta: &[u8]) -> Result<(), StoreError> {
        for (what, len) in [("event", event.len()), ("metadata", meta.len())] {
            if len > pack::MAX_PAYLOAD {
                return Err(StoreError::Invalid(format!(
                    "{what} of {len} bytes exceeds the record limit"
                )));
            }
        }
        self.added
            .push((*id, Some(self.base + self.buf.len() as u64)));
        pack::encode_frame(&mut self.buf, id, event, meta);
        Ok(())
    }

    /// A record already stored (content-addressed: stored once), which the branch now
    /// reaches again.
    pub fn push_stored(&mut self, id: &Hash) {
        self.added.push((*id, None));
    }
}

/// An open ledger directory: one writer ([`Store::open_writer`]) or a reader
/// ([`Store::open_reader`]) holding the snapshot of `REFS` it opened.
pub struct Store {
    dir: PathBuf,
    writable: bool,
    refs: Refs,
    /// The writer's handle on the `REFS` log (None for readers).
    refs_log: Option<RefsLog>,
    blobs: Blobs,
    packs: Vec<Pack>,
    index: Index,
    problems: Vec<OpenProblem>,
    /// Set when a commit failed after writing: the writer must reopen the ledger (which
    /// cuts any uncommitted tail) before appending again.
    poisoned: bool,
    lock: Option<LedgerLock>,
    /// What the writer set aside while opening.
    set_aside: Vec<SetAside>,
    /// The scratch refs of this handle's command ([`refs::is_scratch`]), in memory only:
    /// never written to `REFS`, so a command stopped in any way (a signal, `kill -9`,
    /// power loss) leaves no ref behind, only unreachable records for `gc`. Writer only.
    scratch: BTreeMap<String, Hash>,
}

impl Store {
    /// Make `dir` (new, or without a ledger) an empty ledger: its directories and a
    /// `REFS` with no branch, durable before anything is written into them.
    pub fn init(dir: &Path) -> Result<(), StoreError> {
        for d in [dir.to_path_buf(), dir.join("packs"), dir.join("blobs")] {
            std::fs::create_dir_all(&d).map_err(|e| StoreError::Io {
                path: d.clone(),
                message: e.to_string(),
            })?;
        }
        let lock = LedgerLock::acquire(dir, true)?;
        refs::replace(dir, &Refs::default())?;
        drop(lock);
        pack::sync_dir(dir)?;
        if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
            pack::sync_dir(parent)?;
        }
        Ok(())
    }

    /// Open for writing: take the one writer's lock (a second writer gets
    /// [`StoreError::Locked`]), cut a torn last `REFS` record, open the snapshot and
    /// clear what no commit reached (temporary blob files, pack tails past the committed
    /// lengths, unlisted packs), setting aside first every intact record among them that
    /// no committed pack holds ([`Store::set_aside`] says what was).
    pub fn open_writer(dir: &Path) -> Result<Store, StoreError> {
        let lock = LedgerLock::acquire(dir, true)?;
        let (log, _, refs_tail) = RefsLog::open(dir, None)?;
        let mut s = Store::open_snapshot(dir, true)?;
        s.lock = Some(lock);
        s.refs_log = Some(log);
        s.set_aside.extend(refs_tail);
        s.blobs.clean_tmp();
        s.clear_uncommitted()?;
        Ok(s)
    }

    /// Open for reading (no lock). A reader may meet a pack that gc has just replaced:
    /// it reads `REFS` again.
    pub fn open_reader(dir: &Path) -> Result<Store, StoreError> {
        let mut tries = 0;
        loop {
            match Store::open_snapshot(dir, false) {
                Err(StoreError::Io { path, .. }) if tries < 20 && !path.exists() => {
                    tries += 1;
                    std::thread::sleep(Duration::from_millis(5));
                }
                r => return r,
            }
        }
    }

    /// Read `REFS` and open what it lists.
    fn open_snapshot(dir: &Path, writable: bool) -> Result<Store, StoreError> {
        let refs = Refs::read(dir)?.ok_or_else(|| StoreError::NotALedger {
            path: dir.to_path_buf(),
        })?;
        let (blobs, blob_problems) = Blobs::open(dir, &refs.blob_packs, writable)?;
        let packs_dir = dir.join("packs");
        let mut packs = Vec::new();
        let mut problems: Vec<OpenProblem> = blob_problems
            .into_iter()
            .map(|(what, problem)| OpenProblem { what, problem })
            .collect();
        for &(id, len) in &refs.packs {
            match Pack::open(&packs_dir, PackKind::Events, id, len, writable) {
                Ok(p) => packs.push(p),
                Err(e @ (StoreError::Corrupt { .. } | StoreError::Damaged { .. })) if !writable => {
                    problems.push(OpenProblem {
                        what: pack::pack_path(&packs_dir, id).display().to_string(),
                        problem: e.to_string(),
                    });
                }
                Err(e) => return Err(e),
            }
        }
        // The saved index covers a prefix of each pack it lists; only the rest is scanned.
        let (mut index, covered) = Index::load(dir, |c| saved_index_fits(c, &packs));
        for p in &packs {
            let from = covered.iter().find(|c| c.id == p.id).map(|c| c.len);
            for (off, f) in p.frames_from(from) {
                match f {
                    Ok(f) => {
                        let parent = codec::event_parent(f.event).ok().flatten();
                        index.insert(f.hash, p.id, off, parent);
                    }
                    Err(e) => problems.push(OpenProblem {
                        what: format!("record at {} offset {off}", p.path.display()),
                        problem: e.to_string(),
                    }),
                }
            }
        }
        if writable && !problems.is_empty() {
            let p = &problems[0];
            return Err(StoreError::Damaged {
                what: p.what.clone(),
                problem: p.problem.clone(),
                repair: crate::Repair::Recover,
            });
        }
        Ok(Store {
            dir: dir.to_path_buf(),
            writable,
            refs,
            refs_log: None,
            blobs,
            packs,
            index,
            problems,
            poisoned: false,
            lock: None,
            set_aside: Vec::new(),
            scratch: BTreeMap::new(),
        })
    }

    /// Whether a committed pack (or, for blobs, the blob store) holds record `h`.
    fn stores(&self, kind: PackKind, h: &Hash) -> bool {
        match kind {
            PackKind::Events => self.index.get(h).is_some(),
            PackKind::Blobs => self.blobs.is_small(h) || self.blobs.contains(h).unwrap_or(false),
        }
    }

    /// A pack's bytes past its committed length as a pack of their own (its magic, then
    /// the tail), with how many intact records in them nothing committed holds; None
    /// when there is no tail.
    fn tail_of(&self, p: &Pack) -> Result<Option<(Vec<u8>, usize)>, StoreError> {
        let tail = p.tail()?;
        if tail.is_empty() {
            return Ok(None);
        }
        let mut bytes = p.kind.magic().to_vec();
        bytes.extend_from_slice(&tail);
        let n = aside::unstored(p.kind, &bytes, |h| self.stores(p.kind, h));
        Ok(Some((bytes, n)))
    }

    /// Pack files `REFS` does not list, each with whether a commit dropped it (gc's old
    /// packs: garbage or copies, removable).
    fn unlisted_packs(&self) -> Result<Vec<(PackKind, u32, bool)>, StoreError> {
        let packs_dir = self.dir.join("packs");
        let log = refs_log(&self.dir);
        let mut out = Vec::new();
        for (kind, listed) in [
            (PackKind::Events, &self.refs.packs),
            (PackKind::Blobs, &self.refs.blob_packs),
        ] {
            for id in pack_files(&packs_dir, kind)? {
                if !listed.iter().any(|&(l, _)| l == id) {
                    out.push((kind, id, dropped_by_commit(&self.refs, &log, kind, id)));
                }
            }
        }
        Ok(out)
    }

    /// Cut every pack's tail past its committed length and remove the pack files `REFS`
    /// does not list (a pack a batch made that never committed, or the old packs of an
    /// interrupted gc): what holds an intact record no committed pack holds is set aside
    /// first (aside.rs), never deleted. Writer only.
    fn clear_uncommitted(&mut self) -> Result<(), StoreError> {
        let packs_dir = self.dir.join("packs");
        // Tails past the committed lengths.
        let listed: Vec<(PackKind, u32)> = self
            .packs
            .iter()
            .chain(self.blobs.small_packs())
            .map(|p| (p.kind, p.id))
            .collect();
        for (kind, id) in listed {
            let p = self.any_pack(kind, id);
            let Some((bytes, records)) = self.tail_of(p)? else {
                continue;
            };
            let (from, offset) = (p.path.clone(), p.committed());
            if records > 0 {
                let label = format!("{}{id:08}.at-{offset}", kind.prefix());
                let to = aside::keep(&self.dir, &label, "pack", &bytes)?;
                self.set_aside.push(SetAside {
                    from,
                    offset,
                    bytes: (bytes.len() - kind.magic().len()) as u64,
                    records,
                    to,
                });
            }
            self.any_pack_mut(kind, id).cut_tail()?;
        }
        // Unlisted packs: gc's old ones are removed; others are set aside first.
        for (kind, id, dropped) in self.unlisted_packs()? {
            let p = pack::kind_path(&packs_dir, kind, id);
            let io = |e: std::io::Error| StoreError::Io {
                path: p.clone(),
                message: e.to_string(),
            };
            if dropped {
                std::fs::remove_file(&p).map_err(io)?;
                continue;
            }
            let file = std::fs::File::open(&p).map_err(io)?;
            // SAFETY: an unlisted pack has no writer (this one holds the lock) and no
            // reader (readers open only what REFS lists); mapped read-only.
            let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
            let records = aside::unstored(kind, &map, |h| self.stores(kind, h));
            if records > 0 {
                let label = format!("{}{id:08}.whole", kind.prefix());
                let to = aside::move_pack(&self.dir, &p, &label, &map)?;
                self.set_aside.push(SetAside {
                    from: p.clone(),
                    offset: 0,
                    bytes: map.len() as u64,
                    records,
                    to,
                });
            } else {
                std::fs::remove_file(&p).map_err(io)?;
            }
        }
        Ok(())
    }

    fn any_pack(&self, kind: PackKind, id: u32) -> &Pack {
        let list = match kind {
            PackKind::Events => &self.packs[..],
            PackKind::Blobs => self.blobs.small_packs(),
        };
        list.iter().find(|p| p.id == id).expect("a listed pack")
    }

    fn any_pack_mut(&mut self, kind: PackKind, id: u32) -> &mut Pack {
        let list = match kind {
            PackKind::Events => &mut self.packs[..],
            PackKind::Blobs => self.blobs.small_packs_mut(),
        };
        list.iter_mut().find(|p| p.id == id).expect("a listed pack")
    }

    /// What this writer set aside while opening (aside.rs): intact records past the
    /// committed lengths, or in unlisted packs, and a `REFS` record cut short.
    pub fn set_aside(&self) -> &[SetAside] {
        &self.set_aside
    }

    /// Intact records the packs hold that history does not: in tails past the committed
    /// lengths, in unlisted pack files and in `set-aside/`, each file with the number of
    /// its intact records no committed pack holds (verify warns of them; `recover`
    /// re-attaches them). Empty while a writer holds the ledger, whose batch in progress
    /// is such a tail.
    pub fn unattached(&self) -> Result<Vec<(PathBuf, usize)>, StoreError> {
        let mut out = Vec::new();
        if crate::lock::writer_active(&self.dir) {
            return Ok(out);
        }
        for p in self.packs.iter().chain(self.blobs.small_packs()) {
            if let Some((_, n)) = self.tail_of(p)?.filter(|t| t.1 > 0) {
                out.push((p.path.clone(), n));
            }
        }
        let packs_dir = self.dir.join("packs");
        let mut files: Vec<(PackKind, PathBuf)> = self
            .unlisted_packs()?
            .into_iter()
            .filter(|u| !u.2)
            .map(|(kind, id, _)| (kind, pack::kind_path(&packs_dir, kind, id)))
            .collect();
        files.extend(
            aside::list(&self.dir)?
                .into_iter()
                .filter_map(|e| Some((e.kind?, e.path))),
        );
        for (kind, path) in files {
            let bytes = std::fs::read(&path).map_err(|e| StoreError::Io {
                path: path.clone(),
                message: e.to_string(),
            })?;
            let n = aside::unstored(kind, &bytes, |h| self.stores(kind, h));
            if n > 0 {
                out.push((path, n));
            }
        }
        Ok(out)
    }

    /// Read `REFS` again and reopen what it lists, keeping the lock (after gc replaced
    /// packs, or the index files were removed). Writer only.
    pub fn reload(&mut self) -> Result<(), StoreError> {
        let mut fresh = Store::open_snapshot(&self.dir, true)?;
        fresh.lock = self.lock.take();
        fresh.refs_log = self.refs_log.take();
        fresh.set_aside = std::mem::take(&mut self.set_aside);
        // The old handle's index describes the packs before the reload: not saved.
        let mut old = std::mem::replace(self, fresh);
        old.writable = false;
        Ok(())
    }

    /// Save the index as `INDEX` for the committed packs (writer only; a later open then
    /// scans only what was appended after). Best effort is enough for callers that
    /// ignore the error: the index is derived, and a missing one means a scan.
    pub fn save_index(&self) -> Result<(), StoreError> {
        if !self.writable || self.poisoned {
            return Err(StoreError::ReadOnly);
        }
        let covered: Vec<(u32, u64)> = self.packs.iter().map(|p| (p.id, p.committed())).collect();
        self.index
            .save(&self.dir, &covered)
            .map_err(|e| StoreError::Io {
                path: crate::index::path(&self.dir),
                message: e.to_string(),
            })
    }

    /// Remake the index from the packs: remove the saved segments and scan every
    /// committed frame (closing the writer saves them again). Writer only.
    pub fn reindex(&mut self) -> Result<(), StoreError> {
        if !self.writable {
            return Err(StoreError::ReadOnly);
        }
        for f in [
            crate::index::path(&self.dir),
            crate::index::delta_path(&self.dir),
        ] {
            match std::fs::remove_file(&f) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(StoreError::Io {
                        path: f,
                        message: e.to_string(),
                    })
                }
                _ => {}
            }
        }
        self.reload()
    }

    /// Write `next` as the new `REFS` (small blobs made durable first) and adopt it.
    fn write_refs(&mut self, mut next: Refs) -> Result<(), StoreError> {
        let _commit = crate::commits::Commit::enter();
        next.blob_packs = self.blobs.sync()?;
        self.commit_refs(&next)?;
        self.blobs.commit(&next.blob_packs)?;
        self.refs = next;
        Ok(())
    }

    /// Append `next` to the `REFS` log durably (the commit point). Writer only.
    pub fn commit_refs(&mut self, next: &Refs) -> Result<(), StoreError> {
        self.refs_log
            .as_mut()
            .ok_or(StoreError::ReadOnly)?
            .commit(next)
    }

    /// The refs snapshot this handle reads (a writer's is always current).
    pub fn refs(&self) -> &Refs {
        &self.refs
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn is_writable(&self) -> bool {
        self.writable
    }

    /// Problems found while opening (a reader opens a damaged ledger so verify can say
    /// what is wrong).
    pub fn problems(&self) -> &[OpenProblem] {
        &self.problems
    }

    pub fn blobs(&self) -> &Blobs {
        &self.blobs
    }

    pub fn packs(&self) -> &[Pack] {
        &self.packs
    }

    pub fn index(&self) -> &Index {
        &self.index
    }

    // ---- blobs ----

    /// Store a blob (once per content); returns its hash. Durable before any record
    /// committed after it.
    pub fn put_blob(&mut self, bytes: &[u8]) -> Result<Hash, StoreError> {
        if !self.writable {
            return Err(StoreError::ReadOnly);
        }
        self.blobs.put(bytes)
    }

    // ---- refs ----

    /// The head of `branch` (or of one of this handle's scratch refs).
    pub fn head(&self, branch: &str) -> Result<Hash, StoreError> {
        self.scratch
            .get(branch)
            .or_else(|| self.refs.branches.get(branch))
            .copied()
            .ok_or_else(|| StoreError::UnknownBranch {
                name: branch.to_string(),
            })
    }

    /// Every branch and its head, in name order; scratch refs ([`refs::is_scratch`])
    /// are not branches and are left out.
    pub fn branches(&self) -> Vec<(String, Hash)> {
        self.refs.visible().map(|(n, h)| (n.clone(), *h)).collect()
    }

    /// The scratch refs `REFS` holds, and their heads, in name order: left by a command
    /// of an older version that was killed (scratch refs are in memory now, see
    /// [`Store::set_ref`]); `gc` removes them.
    pub fn scratch_refs(&self) -> Vec<(String, Hash)> {
        self.refs.scratch().map(|(n, h)| (n.clone(), *h)).collect()
    }

    /// Create branch `name` at the stored record `at`: one durable ref, nothing copied.
    pub fn fork(&mut self, name: &str, at: &Hash) -> Result<(), StoreError> {
        if !self.writable {
            return Err(StoreError::ReadOnly);
        }
        refs::validate_branch(name)?;
        if self.index.get(at).is_none() {
            return Err(StoreError::UnknownEvent { what: at.to_hex() });
        }
        if self.refs.branches.contains_key(name) {
            return Err(StoreError::BranchExists {
                name: name.to_string(),
            });
        }
        self.set_ref(name, at)
    }

    /// Point branch `name` at the stored record `at` (created or moved), durably. A
    /// scratch ref ([`refs::is_scratch`]) is set in this handle's memory alone; one of the
    /// same name that `REFS` holds (left by a killed command of an older version) is
    /// removed from it.
    pub fn set_ref(&mut self, name: &str, at: &Hash) -> Result<(), StoreError> {
        if !self.writable {
            return Err(StoreError::ReadOnly);
        }
        refs::validate_branch(name)?;
        if self.index.get(at).is_none() {
            return Err(StoreError::UnknownEvent { what: at.to_hex() });
        }
        if refs::is_scratch(name) {
            if self.refs.branches.contains_key(name) {
                let mut next = self.refs.clone();
                next.branches.remove(name);
                self.write_refs(next)?;
            }
            self.scratch.insert(name.to_string(), *at);
            return Ok(());
        }
        let mut next = self.refs.clone();
        next.branches.insert(name.to_string(), *at);
        self.write_refs(next)
    }

    /// Remove branch `name`'s ref, durably. Its records stay in the packs (shared with
    /// other branches, or unreachable until gc). `main` cannot be deleted.
    pub fn delete_branch(&mut self, name: &str) -> Result<(), StoreError> {
        if !self.writable {
            return Err(StoreError::ReadOnly);
        }
        if name == MAIN {
            return Err(StoreError::MainUndeletable);
        }
        if self.scratch.remove(name).is_some() {
            return Ok(());
        }
        let mut next = self.refs.clone();
        if next.branches.remove(name).is_none() {
            return Err(StoreError::UnknownBranch {
                name: name.to_string(),
            });
        }
        self.write_refs(next)
    }

    // ---- commits ----

    /// Start a batch of frames after the current pack's committed end (a new pack once
    /// the current one passed [`PACK_ROLL_BYTES`]).
    pub fn begin_batch(&mut self) -> Result<Batch, StoreError> {
        if self.poisoned {
            return Err(StoreError::Invalid(format!(
                "an earlier append to {} failed midway; reopen the ledger before appending",
                self.dir.display()
            )));
        }
        let need_new = match self.packs.last() {
            None => true,
            Some(p) => p.committed() > PACK_ROLL_BYTES,
        };
        if need_new {
            let id = self.packs.last().map_or(1, |p| p.id + 1);
            let p = Pack::create(&self.dir.join("packs"), PackKind::Events, id)?;
            self.packs.push(p);
        }
        let base = self.packs.last().expect("a pack exists").committed();
        Ok(Batch {
            base,
            buf: Vec::new(),
            added: Vec::new(),
        })
    }

    /// Make `batch` durable (the protocol of the module doc) and point `branch` at its
    /// last record, whose chain starts at `parent`. Returns the records' ids in order.
    pub fn commit_batch(
        &mut self,
        branch: &str,
        parent: Option<Hash>,
        batch: Batch,
    ) -> Result<Vec<Hash>, StoreError> {
        let _commit = crate::commits::Commit::enter();
        let Batch { base, buf, added } = batch;
        let head = added.last().expect("batch is not empty").0;
        let pack = self.packs.last_mut().expect("a pack exists");
        self.poisoned = true;
        let new_len = if buf.is_empty() {
            base
        } else {
            pack.write_durable(&buf)?
        };
        let id = pack.id;
        let mut next = self.refs.clone();
        match self.scratch.get_mut(branch) {
            Some(h) => *h = head,
            None => {
                next.branches.insert(branch.to_string(), head);
            }
        }
        match next.packs.iter_mut().find(|p| p.0 == id) {
            Some(p) => p.1 = new_len,
            None => next.packs.push((id, new_len)),
        }
        if next != self.refs || self.blobs.has_pending() {
            self.write_refs(next)?;
        }
        let pack = self.packs.last_mut().expect("a pack exists");
        pack.commit(new_len)?;
        self.poisoned = false;
        self.index.reserve(added.len());
        let mut parent_pos = match parent {
            None => NO_PARENT,
            Some(p) => self.index.position(&p).unwrap_or(MISSING_PARENT),
        };
        for (h, off) in &added {
            parent_pos = match off {
                Some(off) => self.index.insert_at(*h, id, *off, parent_pos),
                None => self.index.position(h).expect("stored events are indexed"),
            };
        }
        Ok(added.into_iter().map(|a| a.0).collect())
    }

    // ---- reads ----

    /// The frame of record `id`, checked to carry that id.
    pub fn frame_of(&self, id: &Hash) -> Result<pack::Frame<'_>, StoreError> {
        let e = self
            .index
            .get(id)
            .ok_or_else(|| StoreError::UnknownEvent { what: id.to_hex() })?;
        let f = self.frame_at(e.pack, e.offset)?;
        if f.hash != *id {
            // Only a damaged saved index can send a lookup to another record.
            return Err(StoreError::Damaged {
                what: crate::index::path(&self.dir).display().to_string(),
                problem: format!(
                    "it places event {} at pack {} offset {}, which holds {}",
                    id.short(),
                    e.pack,
                    e.offset,
                    f.hash.short()
                ),
                repair: crate::Repair::Rebuild,
            });
        }
        Ok(f)
    }

    pub fn frame_at(&self, pack_id: u32, offset: u64) -> Result<pack::Frame<'_>, StoreError> {
        let p = self.pack(pack_id)?;
        pack::parse_frame(p.bytes(), offset as usize).map_err(|e| StoreError::Corrupt {
            what: format!("record at {} offset {offset}", p.path.display()),
            problem: e.to_string(),
        })
    }

    pub fn pack(&self, id: u32) -> Result<&Pack, StoreError> {
        self.packs
            .iter()
            .find(|p| p.id == id)
            .ok_or_else(|| StoreError::Corrupt {
                what: format!("pack {id}"),
                problem: "missing".into(),
            })
    }

    pub fn contains(&self, id: &Hash) -> bool {
        self.index.get(id).is_some()
    }

    /// Where a record lies on disk.
    pub fn location(&self, id: &Hash) -> Option<Location> {
        let e = self.index.get(id)?;
        let p = self.pack(e.pack).ok()?;
        let f = pack::parse_frame(p.bytes(), e.offset as usize).ok()?;
        Some(Location {
            pack: p.path.clone(),
            offset: e.offset,
            event_offset: e.offset + pack::FRAME_HEADER as u64,
            event_len: f.event.len(),
        })
    }

    /// Ids from `from` back to the root, newest first, along the index's parent links
    /// (stops at a broken link; verify reports those).
    pub fn ancestry(&self, from: &Hash) -> Result<Vec<Hash>, StoreError> {
        let pos = self
            .index
            .position(from)
            .ok_or_else(|| StoreError::UnknownEvent {
                what: from.to_hex(),
            })?;
        Ok(self
            .index
            .ancestry(pos)
            .into_iter()
            .map(|p| self.index.hash_at(p))
            .collect())
    }
}

impl Drop for Store {
    /// A writer that appended many records since `INDEX` was saved saves it again, so
    /// the next open does not scan them (errors are ignored: the index is derived data).
    fn drop(&mut self) {
        if self.writable && !self.poisoned && self.index.tail_len() >= SAVE_INDEX_TAIL {
            let _ = self.save_index();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A record the index can read its parent from (as the application's events are).
    fn record(parent: Option<Hash>, n: u32) -> Vec<u8> {
        let mut b = Vec::new();
        codec::encode_event_fields_into(&(parent, n), &mut b);
        b
    }

    #[test]
    fn commits_are_durable_snapshots_readable_without_the_writer() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("l");
        Store::init(&dir).unwrap();
        let mut w = Store::open_writer(&dir).unwrap();
        assert!(matches!(
            Store::open_writer(&dir),
            Err(StoreError::Locked { .. })
        ));
        let blob = w.put_blob(b"hello").unwrap();
        let mut batch = w.begin_batch().unwrap();
        let (mut prev, mut ids) = (None, Vec::new());
        for n in 0..3 {
            let ev = record(prev, n);
            let h = Hash::of_event(&ev);
            batch.push_new(&h, &ev, b"meta").unwrap();
            ids.push(h);
            prev = Some(h);
        }
        assert_eq!(w.commit_batch(MAIN, None, batch).unwrap(), ids);
        w.fork("side", &ids[1]).unwrap();
        assert!(matches!(
            w.fork("side", &ids[0]),
            Err(StoreError::BranchExists { .. })
        ));
        assert!(matches!(
            w.fork("x", &Hash::of_blob(b"none")),
            Err(StoreError::UnknownEvent { .. })
        ));
        // A reader holds the snapshot it opened, however the writer goes on.
        let r = Store::open_reader(&dir).unwrap();
        let mut batch = w.begin_batch().unwrap();
        batch.push_stored(&ids[2]);
        w.commit_batch("side", Some(ids[1]), batch).unwrap();
        assert_eq!(w.head("side").unwrap(), ids[2]);
        assert_eq!(r.head("side").unwrap(), ids[1]);
        assert_eq!(r.ancestry(&ids[2]).unwrap(), vec![ids[2], ids[1], ids[0]]);
        let f = r.frame_of(&ids[1]).unwrap();
        assert_eq!(
            (f.event, f.meta),
            (&record(Some(ids[0]), 1)[..], &b"meta"[..])
        );
        assert_eq!(r.blobs().get(&blob).unwrap(), b"hello");
        assert!(matches!(
            Store::open_reader(&dir).unwrap().put_blob(b"x"),
            Err(StoreError::ReadOnly)
        ));
        drop((w, r));
        // Reopened, with the index scanned afresh: everything committed is there.
        let mut w = Store::open_writer(&dir).unwrap();
        w.reindex().unwrap();
        let heads = vec![("main".to_string(), ids[2]), ("side".to_string(), ids[2])];
        assert_eq!(w.branches(), heads);
        assert_eq!(w.ancestry(&ids[2]).unwrap().len(), 3);
        w.delete_branch("side").unwrap();
        assert!(matches!(
            w.delete_branch(MAIN),
            Err(StoreError::MainUndeletable)
        ));
        assert_eq!(w.branches().len(), 1);
    }

    #[test]
    fn a_batch_cut_before_its_refs_record_is_not_history() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("l");
        Store::init(&dir).unwrap();
        let mut w = Store::open_writer(&dir).unwrap();
        let ev = record(None, 0);
        let root = Hash::of_event(&ev);
        let mut batch = w.begin_batch().unwrap();
        batch.push_new(&root, &ev, b"").unwrap();
        w.commit_batch(MAIN, None, batch).unwrap();
        // Frames written after the committed end, as a writer killed before its REFS
        // record leaves them: readers ignore them, the next writer cuts them.
        let pack = w.packs()[0].path.clone();
        let committed = w.packs()[0].committed();
        drop(w);
        let mut tail = Vec::new();
        let orphan = record(Some(root), 1);
        pack::encode_frame(&mut tail, &Hash::of_event(&orphan), &orphan, b"");
        std::fs::OpenOptions::new()
            .append(true)
            .open(&pack)
            .unwrap()
            .write_all(&tail)
            .unwrap();
        let r = Store::open_reader(&dir).unwrap();
        assert!(!r.contains(&Hash::of_event(&orphan)));
        assert_eq!(r.index().len(), 1);
        // A reader says what lies there, intact but not history.
        assert_eq!(r.unattached().unwrap(), vec![(pack.clone(), 1)]);
        // The next writer cuts the tail, but only after setting the intact record aside
        // (a damaged last REFS record reads like this crash): nothing intact is lost.
        let w = Store::open_writer(&dir).unwrap();
        assert_eq!(std::fs::metadata(&pack).unwrap().len(), committed);
        let kept = w.set_aside().to_vec();
        assert_eq!(kept.len(), 1);
        assert_eq!((kept[0].offset, kept[0].records), (committed, 1));
        let mut expect = pack::PACK_MAGIC.to_vec();
        expect.extend_from_slice(&tail);
        assert_eq!(std::fs::read(&kept[0].to).unwrap(), expect);
        assert_eq!(
            aside::list(&dir).unwrap(),
            vec![aside::Entry {
                path: kept[0].to.clone(),
                kind: Some(PackKind::Events)
            }]
        );
        // Still not history, and still named until something stores it again.
        assert_eq!(w.unattached().unwrap(), vec![]); // the writer holds the lock
        drop(w);
        let r = Store::open_reader(&dir).unwrap();
        assert_eq!(r.unattached().unwrap(), vec![(kept[0].to.clone(), 1)]);
        // A tail that holds no whole record (a frame torn mid-write) is cut and not kept;
        // one that holds only records already stored is not kept either.
        let mut torn = Vec::new();
        pack::encode_frame(&mut torn, &Hash::of_event(&orphan), &orphan, b"");
        torn.truncate(torn.len() - 3);
        let mut dup = Vec::new();
        pack::encode_frame(&mut dup, &root, &ev, b"");
        for extra in [torn, dup] {
            std::fs::OpenOptions::new()
                .append(true)
                .open(&pack)
                .unwrap()
                .write_all(&extra)
                .unwrap();
            let w = Store::open_writer(&dir).unwrap();
            assert!(w.set_aside().is_empty());
            assert_eq!(std::fs::metadata(&pack).unwrap().len(), committed);
        }
        assert_eq!(aside::list(&dir).unwrap().len(), 1);
    }

    #[test]
    fn an_unlisted_pack_with_records_stored_nowhere_else_is_set_aside_not_removed() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("l");
        Store::init(&dir).unwrap();
        let mut w = Store::open_writer(&dir).unwrap();
        let ev = record(None, 0);
        let root = Hash::of_event(&ev);
        let mut batch = w.begin_batch().unwrap();
        batch.push_new(&root, &ev, b"").unwrap();
        w.commit_batch(MAIN, None, batch).unwrap();
        drop(w);
        let packs = dir.join("packs");
        // Pack 2 holds a new record (a batch that rolled to a new pack, whose REFS
        // record was lost); pack 3 only a copy of a stored one (an interrupted gc).
        let child = record(Some(root), 1);
        for (id, (h, bytes)) in [(2, (Hash::of_event(&child), &child)), (3, (root, &ev))] {
            let mut b = pack::PACK_MAGIC.to_vec();
            pack::encode_frame(&mut b, &h, bytes, b"");
            std::fs::write(pack::pack_path(&packs, id), b).unwrap();
        }
        let whole2 = std::fs::read(pack::pack_path(&packs, 2)).unwrap();
        let w = Store::open_writer(&dir).unwrap();
        assert!(!pack::pack_path(&packs, 2).exists() && !pack::pack_path(&packs, 3).exists());
        let kept = w.set_aside();
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].records, 1);
        assert_eq!(std::fs::read(&kept[0].to).unwrap(), whole2);
    }
}
