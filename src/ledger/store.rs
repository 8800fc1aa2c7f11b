//! The [`Ledger`]: opening and creating a store, the durable append protocol, forks,
//! lookups and history walks. Layout of a ledger directory:
//!
//! ```text
//! LOCK            flock, held exclusively by the one writer (readers take no lock)
//! REFS            branch heads + committed pack lengths, replaced whole (refs.rs)
//! packs/          pack-NNNNNNNN.pack: framed event records (see pack.rs)
//!                 blobs-NNNNNNNN.pack: small blobs, same frames
//! blobs/ab/cd..   large blobs, one file per hash
//! db/             sled, the writer's projection cache (derived; `rebuild` remakes it)
//! ```
//!
//! Append protocol (a crash at any instant leaves complete history behind every ref):
//! 1. blobs: files are fsync'ed and renamed when put; small-blob pack frames are
//!    fsync'ed before step 3;
//! 2. the batch's frames are written after the pack's committed end and fsync'ed;
//! 3. a new `REFS` (branch moved, pack lengths grown) is written, fsync'ed and renamed
//!    over the old one. Until then the new frames are an uncommitted tail that the next
//!    writer cuts off and readers ignore.
//!
//! Readers read `REFS` once when they open: that snapshot (heads, and the committed
//! pack prefixes that hold everything the heads reach) stays consistent however the
//! writer goes on, so read commands never wait for a run.
use super::blob::Blobs;
use super::codec;
use super::event::{Event, EventBody, Genesis};
use super::hash::{is_hex_prefix, Hash};
use super::index::{Covered, Index, MISSING_PARENT, NO_PARENT};
use super::lock::LedgerLock;
use super::meta::Meta;
use super::pack::{self, Pack, PackKind, PACK_ROLL_BYTES};
use super::plan::LedgerPlan;
use super::projection::{self, BranchState};
use super::refs::{self, Refs, MAIN};
use super::LedgerError;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

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

/// What a `show` reference names.
#[derive(Clone, Debug, PartialEq)]
pub enum Resolved {
    Event(Hash),
    Branch { name: String, head: Hash },
    Stage { branch: String, stage: u32 },
}

/// Result of [`Ledger::rebuild`] (and, from `ledger rebuild`, [`Ledger::reindex`]).
#[derive(Clone, Debug, serde::Serialize, schemars::JsonSchema)]
pub struct RebuildReport {
    pub branches: usize,
    pub events: u64,
    /// Seconds spent recomputing the projections.
    pub seconds: f64,
    /// Seconds spent scanning the packs into a fresh index (0 when the saved one was
    /// kept).
    pub index_seconds: f64,
}

/// An open ledger: one writer ([`Ledger::open`], [`Ledger::create`]) or a reader
/// ([`Ledger::open_read_only`]) holding the snapshot of `REFS` it opened.
pub struct Ledger {
    dir: PathBuf,
    writable: bool,
    /// The writer's projection cache (readers have none: they fold).
    db: Option<(sled::Db, sled::Tree)>,
    refs: Refs,
    /// The writer's handle on the `REFS` log (None for readers).
    refs_log: Option<refs::RefsLog>,
    blobs: Blobs,
    packs: Vec<Pack>,
    index: Index,
    problems: Vec<OpenProblem>,
    /// Set when a commit failed after writing: the writer must reopen the ledger
    /// (which cuts any uncommitted tail) before appending again.
    poisoned: bool,
    /// Projection states of recent heads (incremental cache in memory).
    proj_mem: BTreeMap<Hash, BranchState>,
    /// Time spent in this handle's reads and writes (see [`Ledger::busy_time`]).
    busy: Busy,
    // Declared last: released after sled is closed.
    _lock: Option<LedgerLock>,
}

/// Bumped whenever `BranchState` changes shape: older cached states are ignored and
/// refolded from the log (2: stage states cite their evaluation events; 3: the branch's
/// chosen engineer; 4: per-stage GRPO statistics; 5: per-instance outcome events).
const PROJ_VERSION: u8 = 5;

fn open_sled(dir: &Path) -> Result<sled::Db, LedgerError> {
    // We hold the ledger's LOCK, so no other ledger process uses sled; a sled lock still
    // held is a leftover that clears by itself (a just-closed handle whose sled threads
    // are finishing in this process, or a process that is exiting). Wait for it.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match sled::Config::new().path(dir.join("db")).open() {
            Ok(db) => return Ok(db),
            Err(e) => {
                let msg = e.to_string();
                if msg.contains("could not acquire lock") {
                    if Instant::now() < deadline {
                        std::thread::sleep(Duration::from_millis(10));
                        continue;
                    }
                    return Err(LedgerError::Locked {
                        path: dir.to_path_buf(),
                    });
                }
                return Err(sled_error(dir, e));
            }
        }
    }
}

/// A sled error of ledger `dir`'s projection cache: corruption is [`LedgerError::Corrupt`]
/// naming the directory (exit 1), anything else an I/O-like storage error.
pub(crate) fn sled_error(dir: &Path, e: sled::Error) -> LedgerError {
    let what = format!("{} (projection cache, sled)", dir.join("db").display());
    match e {
        sled::Error::Corruption { at, .. } => LedgerError::Corrupt {
            what,
            problem: format!(
                "sled read corrupted data{} (the cache is derived from the log: `ledger rebuild` remakes it)",
                at.map(|p| format!(" at {p:?}")).unwrap_or_default()
            ),
        },
        e => LedgerError::Sled(format!("{what}: {e}")),
    }
}

/// Ids of the pack files of `kind` in `packs_dir`.
pub(crate) fn pack_files(packs_dir: &Path, kind: PackKind) -> Result<Vec<u32>, LedgerError> {
    let rd = std::fs::read_dir(packs_dir).map_err(|e| LedgerError::Io {
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

/// Whether `dir` holds a ledger (of this layout, or of the older sled-only one).
pub(crate) fn is_ledger(dir: &Path) -> bool {
    refs::path(dir).is_file() || dir.join("db").is_dir()
}

/// Move a ledger of the older layout (refs, pack lengths and small blobs in sled) to
/// `REFS` and small-blob packs. Runs under the writer's lock; `REFS` is written last,
/// so an interrupted migration simply runs again.
fn migrate_from_sled(dir: &Path) -> Result<(), LedgerError> {
    let db = open_sled(dir)?;
    let se = |e| sled_error(dir, e);
    let old_refs = db.open_tree("refs").map_err(se)?;
    let mut r = Refs::default();
    for kv in old_refs.iter() {
        let (k, v) = kv.map_err(se)?;
        let bad = || LedgerError::Corrupt {
            what: format!("{} (refs tree)", dir.join("db").display()),
            problem: format!("malformed entry {:?}", String::from_utf8_lossy(&k)),
        };
        if let Some(name) = k.strip_prefix(b"b/") {
            let name = String::from_utf8(name.to_vec()).map_err(|_| bad())?;
            let head: [u8; 32] = v.as_ref().try_into().map_err(|_| bad())?;
            r.branches.insert(name, Hash(head));
        } else if let Some(id) = k.strip_prefix(b"p/") {
            let id = u32::from_be_bytes(id.try_into().map_err(|_| bad())?);
            let len = u64::from_le_bytes(v.as_ref().try_into().map_err(|_| bad())?);
            r.packs.push((id, len));
        }
    }
    let old_blobs = db.open_tree("blobs").map_err(se)?;
    let (mut blobs, _) = Blobs::open(dir, &[], true)?;
    for kv in old_blobs.iter() {
        let (_, v) = kv.map_err(se)?;
        blobs.put(&v)?;
    }
    r.blob_packs = blobs.sync()?;
    refs::replace(dir, &r)?;
    db.drop_tree("refs").map_err(se)?;
    db.drop_tree("blobs").map_err(se)?;
    db.flush().map_err(se)?;
    Ok(())
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

/// Wall time spent inside the ledger's public operations; nested calls count once. (The
/// pipeline calls them from one thread; calls overlapping from several threads may be
/// counted twice.)
#[derive(Clone, Default)]
struct Busy {
    depth: std::sync::Arc<AtomicU32>,
    nanos: std::sync::Arc<AtomicU64>,
}

/// Counts from its creation to its drop, unless an outer one is already counting.
struct BusyGuard {
    busy: Busy,
    start: Instant,
}

impl Busy {
    fn enter(&self) -> BusyGuard {
        self.depth.fetch_add(1, Ordering::Relaxed);
        BusyGuard {
            busy: self.clone(),
            start: Instant::now(),
        }
    }

    fn total(&self) -> Duration {
        Duration::from_nanos(self.nanos.load(Ordering::Relaxed))
    }
}

impl Drop for BusyGuard {
    fn drop(&mut self) {
        if self.busy.depth.fetch_sub(1, Ordering::Relaxed) == 1 {
            let ns = self.start.elapsed().as_nanos() as u64;
            self.busy.nanos.fetch_add(ns, Ordering::Relaxed);
        }
    }
}

/// A writer saves its index when closing once this many events are not in `INDEX`
/// (scanning fewer at open costs a few milliseconds).
const SAVE_INDEX_TAIL: usize = 50_000;

impl Ledger {
    /// Create a ledger in `dir` from a plan file's bytes: the plan is validated, stored
    /// as a blob, and the genesis event starts branch `main`.
    pub fn create(dir: &Path, plan_bytes: &[u8]) -> Result<Ledger, LedgerError> {
        let plan = LedgerPlan::parse(plan_bytes)?;
        if is_ledger(dir) {
            return Err(LedgerError::AlreadyExists {
                path: dir.to_path_buf(),
            });
        }
        for d in [dir.to_path_buf(), dir.join("packs"), dir.join("blobs")] {
            std::fs::create_dir_all(&d).map_err(|e| LedgerError::Io {
                path: d.clone(),
                message: e.to_string(),
            })?;
        }
        let lock = LedgerLock::acquire(dir, true)?;
        refs::replace(dir, &Refs::default())?;
        drop(lock);
        let mut l = Ledger::open_inner(dir, true)?;
        // Make the new directory entries durable before history is written into them.
        pack::sync_dir(dir)?;
        if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
            pack::sync_dir(parent)?;
        }
        let plan_blob = l.put_blob(plan_bytes)?;
        let body = EventBody::Genesis(Genesis {
            plan_blob,
            plan_hash: plan.hash(),
            name: plan.name.clone(),
            seed: plan.seed,
            policy: plan.policy.name().to_string(),
            initial_config: plan.initial_config.clone(),
        });
        l.commit(MAIN, None, vec![(body, 0, Meta::now())])?;
        Ok(l)
    }

    /// Open an existing ledger for writing (the one writer; a second is refused with
    /// [`LedgerError::Locked`]).
    pub fn open(dir: &Path) -> Result<Ledger, LedgerError> {
        Ledger::open_inner(dir, true)
    }

    /// Open for `rebuild`: like [`Ledger::open`], but a projection cache that sled
    /// finds corrupt is moved aside to `db.corrupt` (it is derived data) and remade.
    pub fn open_for_rebuild(dir: &Path) -> Result<Ledger, LedgerError> {
        match Ledger::open(dir) {
            Err(LedgerError::Corrupt { what, .. }) if what.contains("projection cache") => {
                let lock = LedgerLock::acquire(dir, true)?;
                let aside = dir.join("db.corrupt");
                if aside.exists() {
                    std::fs::remove_dir_all(&aside).map_err(|e| LedgerError::Io {
                        path: aside.clone(),
                        message: e.to_string(),
                    })?;
                }
                std::fs::rename(dir.join("db"), &aside).map_err(|e| LedgerError::Io {
                    path: dir.join("db"),
                    message: e.to_string(),
                })?;
                drop(lock);
                Ledger::open(dir)
            }
            r => r,
        }
    }

    /// Check the writer's projection cache (sled) when no writer holds the ledger:
    /// every entry must read back and decode. `Ok(None)` when a writer is active (the
    /// cache is its private state then).
    pub fn check_projection_cache(dir: &Path) -> Result<Option<Vec<super::Problem>>, LedgerError> {
        let lock = match LedgerLock::acquire(dir, true) {
            Ok(l) => l,
            Err(ledger_store::StoreError::Locked { .. }) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let problem = |e: LedgerError| match e {
            LedgerError::Corrupt { what, problem } => super::Problem { what, problem },
            e => super::Problem {
                what: format!("{} (projection cache, sled)", dir.join("db").display()),
                problem: e.to_string(),
            },
        };
        let db = match open_sled(dir) {
            Ok(db) => db,
            Err(e) => return Ok(Some(vec![problem(e)])),
        };
        let mut problems = Vec::new();
        match db.open_tree("projections") {
            Err(e) => problems.push(problem(sled_error(dir, e))),
            Ok(t) => {
                for kv in t.iter() {
                    match kv {
                        Err(e) => {
                            problems.push(problem(sled_error(dir, e)));
                            break;
                        }
                        Ok((k, v)) => {
                            let ok = k.len() == 32
                                && (v.first() != Some(&PROJ_VERSION)
                                    || codec::decode::<BranchState>(&v[1..], "projection").is_ok());
                            if !ok {
                                problems.push(super::Problem {
                                    what: format!(
                                        "{} (projection cache, sled) entry {}",
                                        dir.join("db").display(),
                                        k.get(..32)
                                            .map(|x| Hash(x.try_into().expect("32")).short())
                                            .unwrap_or_default()
                                    ),
                                    problem: "does not decode (run `ledger rebuild`)".into(),
                                });
                            }
                        }
                    }
                }
            }
        }
        drop(db);
        drop(lock);
        Ok(Some(problems))
    }

    /// Open an existing ledger for reading, on a snapshot of its refs: works while a
    /// writer appends (it takes no lock).
    pub fn open_read_only(dir: &Path) -> Result<Ledger, LedgerError> {
        Ledger::open_inner(dir, false)
    }

    fn open_inner(dir: &Path, writable: bool) -> Result<Ledger, LedgerError> {
        if !is_ledger(dir) {
            return Err(LedgerError::NotALedger {
                path: dir.to_path_buf(),
            });
        }
        if !refs::path(dir).is_file() {
            // The older layout: move it over once (as the writer), then open.
            let lock = LedgerLock::acquire(dir, true)?;
            if !refs::path(dir).is_file() {
                migrate_from_sled(dir)?;
            }
            drop(lock);
        }
        if writable {
            let lock = LedgerLock::acquire(dir, true)?;
            // Cuts a torn last record of REFS before the snapshot is read.
            let (log, _) = refs::RefsLog::open(dir, None)?;
            let mut l = Ledger::open_snapshot(dir, true)?;
            l._lock = Some(lock);
            l.refs_log = Some(log);
            l.blobs.clean_tmp();
            l.remove_orphan_packs()?;
            let db = open_sled(dir)?;
            let proj = db
                .open_tree("projections")
                .map_err(|e| sled_error(dir, e))?;
            l.db = Some((db, proj));
            return Ok(l);
        }
        // A reader may meet a pack that gc has just replaced: read REFS again.
        let mut tries = 0;
        loop {
            match Ledger::open_snapshot(dir, false) {
                Err(LedgerError::Io { path, .. }) if tries < 20 && !path.exists() => {
                    tries += 1;
                    std::thread::sleep(Duration::from_millis(5));
                }
                r => return r,
            }
        }
    }

    /// Read `REFS` and open what it lists (no lock, no projection cache).
    fn open_snapshot(dir: &Path, writable: bool) -> Result<Ledger, LedgerError> {
        let refs = Refs::read(dir)?.ok_or_else(|| LedgerError::NotALedger {
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
                Err(e @ ledger_store::StoreError::Corrupt { .. }) if !writable => {
                    problems.push(OpenProblem {
                        what: pack::pack_path(&packs_dir, id).display().to_string(),
                        problem: e.to_string(),
                    });
                }
                Err(e) => return Err(e.into()),
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
            return Err(LedgerError::Corrupt {
                what: p.what.clone(),
                problem: format!("{}; {}", p.problem, refs::RECOVER_HINT),
            });
        }
        Ok(Ledger {
            dir: dir.to_path_buf(),
            writable,
            db: None,
            refs,
            refs_log: None,
            blobs,
            packs,
            index,
            problems,
            poisoned: false,
            proj_mem: BTreeMap::new(),
            busy: Busy::default(),
            _lock: None,
        })
    }

    /// Remove pack files `REFS` does not list (a pack created by a batch that never
    /// committed, or the old packs of an interrupted gc). Writer only.
    fn remove_orphan_packs(&self) -> Result<(), LedgerError> {
        let packs_dir = self.dir.join("packs");
        for (kind, listed) in [
            (PackKind::Events, &self.refs.packs),
            (PackKind::Blobs, &self.refs.blob_packs),
        ] {
            for id in pack_files(&packs_dir, kind)? {
                if !listed.iter().any(|&(l, _)| l == id) {
                    let p = pack::kind_path(&packs_dir, kind, id);
                    std::fs::remove_file(&p).map_err(|e| LedgerError::Io {
                        path: p.clone(),
                        message: e.to_string(),
                    })?;
                }
            }
        }
        Ok(())
    }

    /// Read `REFS` again and reopen what it lists, keeping the lock and the cache (after
    /// gc replaced packs). Writer only.
    pub(super) fn reload(&mut self) -> Result<(), LedgerError> {
        let mut fresh = Ledger::open_snapshot(&self.dir, true)?;
        fresh._lock = self._lock.take();
        fresh.db = self.db.take();
        fresh.refs_log = self.refs_log.take();
        // The old handle's index describes the packs before the reload: not saved.
        let mut old = std::mem::replace(self, fresh);
        old.writable = false;
        Ok(())
    }

    /// Save the index as `INDEX` for the committed packs (writer only; a later open then
    /// scans only what was appended after). Best effort is enough for callers that
    /// ignore the error: the index is derived, and a missing one means a scan.
    pub fn save_index(&self) -> Result<(), LedgerError> {
        if !self.writable || self.poisoned {
            return Err(LedgerError::ReadOnly);
        }
        let covered: Vec<(u32, u64)> = self.packs.iter().map(|p| (p.id, p.committed())).collect();
        self.index
            .save(&self.dir, &covered)
            .map_err(|e| LedgerError::Io {
                path: super::index::path(&self.dir),
                message: e.to_string(),
            })
    }

    /// Drop cached projections of events no longer stored (after gc).
    pub(super) fn prune_projection_cache(&mut self) -> Result<(), LedgerError> {
        self.proj_mem.clear();
        let Some((db, proj)) = &self.db else {
            return Ok(());
        };
        let se = |e| sled_error(&self.dir, e);
        let mut gone = Vec::new();
        for k in proj.iter().keys() {
            let k = k.map_err(se)?;
            let stored =
                <[u8; 32]>::try_from(k.as_ref()).is_ok_and(|h| self.index.get(&Hash(h)).is_some());
            if !stored {
                gone.push(k);
            }
        }
        for k in gone {
            proj.remove(k).map_err(se)?;
        }
        db.flush().map_err(se)?;
        Ok(())
    }

    /// Write `next` as the new `REFS` (small blobs made durable first) and adopt it.
    fn write_refs(&mut self, mut next: Refs) -> Result<(), LedgerError> {
        next.blob_packs = self.blobs.sync()?;
        self.commit_refs(&next)?;
        self.blobs.commit(&next.blob_packs)?;
        self.refs = next;
        Ok(())
    }

    /// Append `next` to the `REFS` log durably (the commit point). Writer only.
    pub(super) fn commit_refs(&mut self, next: &Refs) -> Result<(), LedgerError> {
        self.refs_log
            .as_mut()
            .ok_or(LedgerError::ReadOnly)?
            .commit(next)?;
        Ok(())
    }

    /// Wall time spent so far inside this handle's appends, forks, blob reads and writes,
    /// history walks and projections (nested calls counted once): what the ledger costs
    /// a run. Only reported, never recorded.
    pub fn busy_time(&self) -> Duration {
        self.busy.total()
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

    /// Number of events stored (all branches).
    pub fn event_count(&self) -> usize {
        self.index.len()
    }

    /// Problems found while opening (a reader opens a damaged ledger so verify can say
    /// what is wrong).
    pub fn open_problems(&self) -> &[OpenProblem] {
        &self.problems
    }

    // ---- blobs ----

    /// Store a blob (once per content); returns its hash. Durable before any event
    /// that references it is committed.
    pub fn put_blob(&mut self, bytes: &[u8]) -> Result<Hash, LedgerError> {
        let _busy = self.busy.enter();
        if !self.writable {
            return Err(LedgerError::ReadOnly);
        }
        Ok(self.blobs.put(bytes)?)
    }

    /// A blob's bytes, checked against its hash.
    pub fn blob(&self, h: &Hash) -> Result<Vec<u8>, LedgerError> {
        let _busy = self.busy.enter();
        Ok(self.blobs.get(h)?)
    }

    pub fn has_blob(&self, h: &Hash) -> Result<bool, LedgerError> {
        Ok(self.blobs.contains(h)?)
    }

    pub(crate) fn blob_store(&self) -> &Blobs {
        &self.blobs
    }

    // ---- refs ----

    /// The head event of `branch`.
    pub fn head(&self, branch: &str) -> Result<Hash, LedgerError> {
        self.refs
            .branches
            .get(branch)
            .copied()
            .ok_or_else(|| LedgerError::UnknownBranch {
                name: branch.to_string(),
            })
    }

    /// Every branch and its head, in name order.
    pub fn branches(&self) -> Result<Vec<(String, Hash)>, LedgerError> {
        Ok(self
            .refs
            .branches
            .iter()
            .map(|(n, h)| (n.clone(), *h))
            .collect())
    }

    /// Create branch `name` at the existing event `at`: one durable ref, nothing copied.
    pub fn fork(&mut self, name: &str, at: &Hash) -> Result<(), LedgerError> {
        let _busy = self.busy.enter();
        if !self.writable {
            return Err(LedgerError::ReadOnly);
        }
        refs::validate_branch(name)?;
        if self.index.get(at).is_none() {
            return Err(LedgerError::UnknownEvent { what: at.to_hex() });
        }
        if self.refs.branches.contains_key(name) {
            return Err(LedgerError::BranchExists {
                name: name.to_string(),
            });
        }
        let mut next = self.refs.clone();
        next.branches.insert(name.to_string(), *at);
        self.write_refs(next)
    }

    /// Point branch `name` at the existing event `at` (created or moved), durably.
    pub(super) fn set_ref(&mut self, name: &str, at: &Hash) -> Result<(), LedgerError> {
        if !self.writable {
            return Err(LedgerError::ReadOnly);
        }
        refs::validate_branch(name)?;
        if self.index.get(at).is_none() {
            return Err(LedgerError::UnknownEvent { what: at.to_hex() });
        }
        let mut next = self.refs.clone();
        next.branches.insert(name.to_string(), *at);
        self.write_refs(next)
    }

    /// Remove branch `name`'s ref, durably. Its events stay in the packs (shared with
    /// other branches, or unreachable until `gc`). `main` cannot be deleted.
    pub fn delete_branch(&mut self, name: &str) -> Result<(), LedgerError> {
        if !self.writable {
            return Err(LedgerError::ReadOnly);
        }
        if name == MAIN {
            return Err(LedgerError::Invalid(format!(
                "branch `{MAIN}` cannot be deleted"
            )));
        }
        let mut next = self.refs.clone();
        if next.branches.remove(name).is_none() {
            return Err(LedgerError::UnknownBranch {
                name: name.to_string(),
            });
        }
        self.write_refs(next)
    }

    // ---- append ----

    /// Append a batch of events to `branch`, chained from its head, and move the ref:
    /// durable (pack fsync'ed, then the ref and pack length committed and flushed)
    /// before it returns. Returns the new events' ids in order.
    pub fn append(
        &mut self,
        branch: &str,
        items: Vec<(EventBody, u32, Meta)>,
    ) -> Result<Vec<Hash>, LedgerError> {
        let busy = self.busy.clone();
        let _busy = busy.enter();
        if !self.writable {
            return Err(LedgerError::ReadOnly);
        }
        let head = self.head(branch)?;
        let mut checked = std::collections::BTreeSet::new();
        for (body, _, _) in &items {
            if matches!(body, EventBody::Genesis(_)) {
                return Err(LedgerError::Invalid(
                    "a genesis event can only start a new ledger".into(),
                ));
            }
            if let EventBody::Trajectories(t) = body {
                t.trajectory_hashes().map_err(LedgerError::Invalid)?;
            }
            for b in body.blobs() {
                if checked.insert(b) && !self.blobs.contains(&b)? {
                    return Err(LedgerError::MissingBlob { hash: b });
                }
            }
        }
        if items.is_empty() {
            return Ok(Vec::new());
        }
        self.commit(branch, Some(head), items)
    }

    /// Write `items` chained from `parent` and point `branch` at the last one (the
    /// durable protocol of the module doc). Callers check blobs and genesis rules.
    pub(super) fn commit_at(
        &mut self,
        branch: &str,
        parent: Option<Hash>,
        items: Vec<(EventBody, u32, Meta)>,
    ) -> Result<Vec<Hash>, LedgerError> {
        self.commit(branch, parent, items)
    }

    fn commit(
        &mut self,
        branch: &str,
        parent: Option<Hash>,
        items: Vec<(EventBody, u32, Meta)>,
    ) -> Result<Vec<Hash>, LedgerError> {
        if self.poisoned {
            return Err(LedgerError::Invalid(format!(
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
        let mut state = match parent {
            Some(h) => self.state_at(&h)?,
            None => BranchState::default(),
        };
        let pack = self.packs.last_mut().expect("a pack exists");
        let base = pack.committed();
        let mut buf = Vec::with_capacity(items.len() * 160);
        let mut ev = Vec::with_capacity(256);
        let mut mb = Vec::with_capacity(64);
        // (id, offset of a new frame or None when the event is already stored)
        let mut added: Vec<(Hash, Option<u64>)> = Vec::with_capacity(items.len());
        let mut prev = parent;
        // Whether the next event may already be stored. Parents are stored before their
        // children, so once an event is new, every later one in the batch (whose bytes
        // name a new parent) is new too: only the leading run of a batch is looked up,
        // which spares a normal append one index probe per event.
        let mut maybe_stored = true;
        for (body, stage, meta) in items {
            let event = Event {
                parent: prev,
                stage,
                body,
            };
            ev.clear();
            crate::record::event::encode_event_into(
                event.parent.as_ref(),
                stage,
                &event.body,
                &mut ev,
            );
            if ev.len() > pack::MAX_PAYLOAD {
                return Err(LedgerError::Invalid(format!(
                    "event of {} bytes exceeds the record limit",
                    ev.len()
                )));
            }
            let h = Hash::of_event(&ev);
            // Content-addressed means stored once: an event already stored (a replay
            // that reproduced it, a branch re-walking shared history) writes nothing.
            // Its parent is part of its bytes, so the whole chain below it is stored too.
            // (A batch cannot repeat an event: each one names the previous as parent.)
            if maybe_stored && self.index.get(&h).is_some() {
                added.push((h, None));
            } else {
                mb.clear();
                codec::encode_into(&meta, &mut mb);
                if mb.len() > pack::MAX_PAYLOAD {
                    return Err(LedgerError::Invalid(format!(
                        "metadata of {} bytes exceeds the record limit",
                        mb.len()
                    )));
                }
                maybe_stored = false;
                added.push((h, Some(base + buf.len() as u64)));
                pack::encode_frame(&mut buf, &h, &ev, &mb);
            }
            projection::apply_in_place(&mut state, &h, &event);
            prev = Some(h);
        }
        let head = prev.expect("batch is not empty");
        self.poisoned = true;
        let new_len = if buf.is_empty() {
            base
        } else {
            pack.write_durable(&buf)?
        };
        let id = pack.id;
        let mut next = self.refs.clone();
        next.branches.insert(branch.to_string(), head);
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
        self.cache_state(head, state)?;
        Ok(added.into_iter().map(|a| a.0).collect())
    }

    // ---- reads ----

    fn frame_of(&self, h: &Hash) -> Result<pack::Frame<'_>, LedgerError> {
        let e = self
            .index
            .get(h)
            .ok_or_else(|| LedgerError::UnknownEvent { what: h.to_hex() })?;
        let f = self.frame_at(e.pack, e.offset)?;
        if f.hash != *h {
            // Only a damaged saved index can send a lookup to another record.
            return Err(LedgerError::Corrupt {
                what: super::index::path(&self.dir).display().to_string(),
                problem: format!(
                    "it places event {} at pack {} offset {}, which holds {} (the index is derived: `ledger rebuild` remakes it)",
                    h.short(),
                    e.pack,
                    e.offset,
                    f.hash.short()
                ),
            });
        }
        Ok(f)
    }

    pub(crate) fn frame_at(
        &self,
        pack_id: u32,
        offset: u64,
    ) -> Result<pack::Frame<'_>, LedgerError> {
        let p = self.pack(pack_id)?;
        pack::parse_frame(p.bytes(), offset as usize).map_err(|e| LedgerError::Corrupt {
            what: format!("record at {} offset {offset}", p.path.display()),
            problem: e.to_string(),
        })
    }

    pub(crate) fn pack(&self, id: u32) -> Result<&Pack, LedgerError> {
        self.packs
            .iter()
            .find(|p| p.id == id)
            .ok_or_else(|| LedgerError::Corrupt {
                what: format!("pack {id}"),
                problem: "missing".into(),
            })
    }

    pub(crate) fn packs(&self) -> &[Pack] {
        &self.packs
    }

    pub(crate) fn index(&self) -> &Index {
        &self.index
    }

    /// The event with id `h`.
    pub fn event(&self, h: &Hash) -> Result<Event, LedgerError> {
        let f = self.frame_of(h)?;
        crate::record::event::decode_event(f.event).map_err(|source| LedgerError::Decode {
            what: format!("event {}", h.short()),
            source,
        })
    }

    /// An event's stored bytes and its metadata's, as they lie in the pack.
    pub fn raw_event(&self, h: &Hash) -> Result<(Vec<u8>, Vec<u8>), LedgerError> {
        let f = self.frame_of(h)?;
        Ok((f.event.to_vec(), f.meta.to_vec()))
    }

    /// The event and its metadata.
    pub fn event_with_meta(&self, h: &Hash) -> Result<(Event, Meta), LedgerError> {
        let f = self.frame_of(h)?;
        let e =
            crate::record::event::decode_event(f.event).map_err(|source| LedgerError::Decode {
                what: format!("event {}", h.short()),
                source,
            })?;
        let m = codec::decode(f.meta, "metadata").map_err(|source| LedgerError::Decode {
            what: format!("metadata of {}", h.short()),
            source,
        })?;
        Ok((e, m))
    }

    pub fn contains_event(&self, h: &Hash) -> bool {
        self.index.get(h).is_some()
    }

    /// Where an event's record lies on disk.
    pub fn location(&self, h: &Hash) -> Option<Location> {
        let e = self.index.get(h)?;
        let p = self.pack(e.pack).ok()?;
        let f = pack::parse_frame(p.bytes(), e.offset as usize).ok()?;
        Some(Location {
            pack: p.path.clone(),
            offset: e.offset,
            event_offset: e.offset + pack::FRAME_HEADER as u64,
            event_len: f.event.len(),
        })
    }

    /// Ids from `from` back to genesis, newest first (stops at a broken link; verify
    /// reports those).
    pub fn ancestry(&self, from: &Hash) -> Result<Vec<Hash>, LedgerError> {
        let pos = self
            .index
            .position(from)
            .ok_or_else(|| LedgerError::UnknownEvent {
                what: from.to_hex(),
            })?;
        Ok(self
            .index
            .ancestry(pos)
            .into_iter()
            .map(|p| self.index.hash_at(p))
            .collect())
    }

    /// A branch's whole history, oldest first.
    pub fn history(&self, branch: &str) -> Result<Vec<(Hash, Event)>, LedgerError> {
        let head = self.head(branch)?;
        self.history_to(&head)
    }

    /// The history ending at `head`, oldest first.
    pub fn history_to(&self, head: &Hash) -> Result<Vec<(Hash, Event)>, LedgerError> {
        let _busy = self.busy.enter();
        let mut hs = self.ancestry(head)?;
        hs.reverse();
        hs.into_iter().map(|h| Ok((h, self.event(&h)?))).collect()
    }

    /// Every stored event in storage (append) order.
    pub fn all_events(&self) -> impl Iterator<Item = Result<(Hash, Event), LedgerError>> + '_ {
        self.index.hashes().map(move |h| Ok((h, self.event(&h)?)))
    }

    /// Resolve a reference (the grammar of [`super::Reference`]): `BRANCH@stageN` (the
    /// stage must exist on the branch), a branch name, or a hash prefix.
    pub fn resolve(&self, r: &str) -> Result<Resolved, LedgerError> {
        let name = match super::Reference::parse(r)? {
            super::Reference::Stage { branch, stage } => {
                self.stage_end(&branch, stage)?;
                return Ok(Resolved::Stage { branch, stage });
            }
            super::Reference::Name(n) => n,
        };
        if let Ok(head) = self.head(&name) {
            return Ok(Resolved::Branch { name, head });
        }
        let p = name.to_ascii_lowercase();
        if p.len() >= 4 && is_hex_prefix(&p) {
            let m = self.index.with_prefix(&p);
            return match m.len() {
                0 => Err(LedgerError::UnknownEvent {
                    what: r.to_string(),
                }),
                1 => Ok(Resolved::Event(m[0])),
                n => Err(LedgerError::Ambiguous {
                    what: r.to_string(),
                    count: n,
                }),
            };
        }
        Err(LedgerError::UnknownEvent {
            what: format!("{r} (not a branch, BRANCH@stageN, or hash prefix of 4+ hex digits)"),
        })
    }

    // ---- projections ----

    fn cached_state(&self, h: &Hash) -> Option<BranchState> {
        if let Some(s) = self.proj_mem.get(h) {
            return Some(s.clone());
        }
        let v = self.db.as_ref()?.1.get(h.0).ok()??;
        if v.first() != Some(&PROJ_VERSION) {
            return None;
        }
        codec::decode(&v[1..], "projection").ok()
    }

    /// The projection state after event `h`: from the cache, else folded from the
    /// nearest cached ancestor (forks reuse their shared prefix).
    pub fn state_at(&self, h: &Hash) -> Result<BranchState, LedgerError> {
        let _busy = self.busy.enter();
        if let Some(s) = self.cached_state(h) {
            return Ok(s);
        }
        let pos = self
            .index
            .position(h)
            .ok_or_else(|| LedgerError::UnknownEvent { what: h.to_hex() })?;
        let mut chain = Vec::new();
        let mut p = pos;
        let mut state = BranchState::default();
        loop {
            let hh = self.index.hash_at(p);
            if p != pos {
                if let Some(s) = self.cached_state(&hh) {
                    state = s;
                    break;
                }
            }
            chain.push(hh);
            let parent = self.index.entry(p).parent;
            if parent == NO_PARENT || parent == MISSING_PARENT {
                break;
            }
            p = parent;
        }
        for hh in chain.iter().rev() {
            projection::apply_in_place(&mut state, hh, &self.event(hh)?);
        }
        Ok(state)
    }

    fn cache_state(&mut self, head: Hash, state: BranchState) -> Result<(), LedgerError> {
        if let Some((_, proj)) = &self.db {
            let fresh = proj
                .get(head.0)
                .map_err(|e| sled_error(&self.dir, e))?
                .is_some_and(|v| v.first() == Some(&PROJ_VERSION));
            if !fresh {
                let mut v = vec![PROJ_VERSION];
                codec::encode_into(&state, &mut v);
                proj.insert(head.0, v)
                    .map_err(|e| sled_error(&self.dir, e))?;
            }
        }
        if self.proj_mem.len() >= 64 {
            self.proj_mem.clear();
        }
        self.proj_mem.insert(head, state);
        Ok(())
    }

    /// The projection of a branch at its head.
    pub fn projection(&mut self, branch: &str) -> Result<BranchState, LedgerError> {
        let _busy = self.busy.enter();
        let head = self.head(branch)?;
        let s = self.state_at(&head)?;
        self.cache_state(head, s.clone())?;
        Ok(s)
    }

    /// Drop every cached projection and recompute each branch's from the log.
    pub fn rebuild(&mut self) -> Result<RebuildReport, LedgerError> {
        if !self.writable {
            return Err(LedgerError::ReadOnly);
        }
        // The saved index is derived too: a segment whose checksum fails is dropped and
        // the packs scanned afresh. Only checksums are compared here; `verify` checks the
        // tables in full, and `ledger rebuild` remakes the index whatever they say
        // ([`Ledger::reindex`]).
        let index_seconds = if self.index.checksums_ok() {
            0.0
        } else {
            self.reindex()?
        };
        let t = Instant::now();
        if let Some((_, proj)) = &self.db {
            proj.clear().map_err(|e| sled_error(&self.dir, e))?;
        }
        self.proj_mem.clear();
        let branches = self.branches()?;
        let n = self.index.len();
        // Phase 1: walk each head back until history already claimed by an earlier
        // head; where walks meet, the state is saved for reuse (shared prefixes are
        // folded once).
        let mut visited = vec![false; n];
        let mut save = vec![false; n];
        let mut plans: Vec<(Hash, Option<u32>, Vec<u32>)> = Vec::new();
        for (_, head) in &branches {
            let pos = self
                .index
                .position(head)
                .ok_or_else(|| LedgerError::UnknownEvent {
                    what: head.to_hex(),
                })?;
            let mut seg = Vec::new();
            let mut p = pos;
            let mut start = None;
            loop {
                if visited[p as usize] {
                    save[p as usize] = true;
                    start = Some(p);
                    break;
                }
                visited[p as usize] = true;
                seg.push(p);
                let parent = self.index.entry(p).parent;
                if parent == NO_PARENT || parent == MISSING_PARENT {
                    break;
                }
                p = parent;
            }
            seg.reverse();
            plans.push((*head, start, seg));
        }
        // Phase 2: fold each segment; events are decoded in parallel chunks.
        let mut saved: BTreeMap<u32, BranchState> = BTreeMap::new();
        let mut events = 0u64;
        for (head, start, seg) in plans {
            let mut state = match start {
                Some(p) => saved.get(&p).cloned().ok_or_else(|| LedgerError::Corrupt {
                    what: format!("event {}", self.index.hash_at(p).short()),
                    problem: "shared history was not folded".into(),
                })?,
                None => BranchState::default(),
            };
            for chunk in seg.chunks(1 << 16) {
                use rayon::prelude::*;
                let decoded: Vec<Result<(Hash, Event), LedgerError>> = chunk
                    .par_iter()
                    .with_min_len(4096)
                    .map(|&p| {
                        let e = self.index.entry(p);
                        let f = self.frame_at(e.pack, e.offset)?;
                        let ev = crate::record::event::decode_event(f.event).map_err(|source| {
                            LedgerError::Decode {
                                what: format!("event {}", f.hash.short()),
                                source,
                            }
                        })?;
                        Ok((f.hash, ev))
                    })
                    .collect();
                for (&p, r) in chunk.iter().zip(decoded) {
                    let (h, ev) = r?;
                    projection::apply_in_place(&mut state, &h, &ev);
                    events += 1;
                    if save[p as usize] {
                        saved.insert(p, state.clone());
                    }
                }
            }
            if saved.contains_key(&self.index.position(&head).expect("indexed")) {
                state = saved[&self.index.position(&head).expect("indexed")].clone();
            }
            self.cache_state(head, state)?;
        }
        if let Some((db, _)) = &self.db {
            db.flush().map_err(|e| sled_error(&self.dir, e))?;
        }
        Ok(RebuildReport {
            branches: branches.len(),
            events,
            seconds: t.elapsed().as_secs_f64(),
            index_seconds,
        })
    }

    /// Remake the index from the packs: remove the saved segments and scan every
    /// committed frame (closing the writer saves them again). For an index that
    /// `verify` found wrong however consistent its own checksums are. Returns the
    /// seconds it took. Writer only.
    pub fn reindex(&mut self) -> Result<f64, LedgerError> {
        if !self.writable {
            return Err(LedgerError::ReadOnly);
        }
        let t = Instant::now();
        for f in [
            super::index::path(&self.dir),
            super::index::delta_path(&self.dir),
        ] {
            match std::fs::remove_file(&f) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(LedgerError::Io {
                        path: f,
                        message: e.to_string(),
                    })
                }
                _ => {}
            }
        }
        self.reload()?;
        Ok(t.elapsed().as_secs_f64())
    }

    /// The cached projection stored for `head`, if any (tests compare it to a rebuild).
    pub fn cached_projection(&self, head: &Hash) -> Option<BranchState> {
        self.cached_state(head)
    }
}

impl Drop for Ledger {
    /// A writer that appended many events since `INDEX` was saved saves it again, so the
    /// next open does not scan them (errors are ignored: the index is derived data).
    fn drop(&mut self) {
        if self.writable && !self.poisoned && self.index.tail_len() >= SAVE_INDEX_TAIL {
            let _ = self.save_index();
        }
    }
}
