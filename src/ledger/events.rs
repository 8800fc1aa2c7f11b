//! The [`Ledger`]: the application's record on the storage engine's [`Store`]. The store
//! holds the bytes (packs, blobs, `REFS`, the index, the writer's lock; its module doc
//! has the directory layout and the durable commit protocol); the ledger knows what they
//! mean: creating a ledger from a plan (the genesis event), appending events (checked,
//! encoded, chained and folded into the projection as they are framed), decoding,
//! history walks, references, and the projection cache in `db/` (sled, the writer's;
//! derived: `rebuild` remakes it).
use super::blob::Blobs;
use super::codec;
use super::event::{Event, EventBody, Genesis};
use super::hash::{is_hex_prefix, Hash};
use super::index::{Index, MISSING_PARENT, NO_PARENT};
use super::lock::LedgerLock;
use super::meta::Meta;
use super::pack::{self, Pack};
use super::plan::LedgerPlan;
use super::projection::{self, BranchState};
use super::refs::{self, Refs, MAIN};
use super::LedgerError;
use ledger_store::Store;
pub use ledger_store::{Location, OpenProblem};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

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
    /// The writer's projection cache (readers have none: they fold).
    db: Option<(sled::Db, sled::Tree)>,
    /// Projection states of recent heads (incremental cache in memory).
    proj_mem: BTreeMap<Hash, BranchState>,
    /// Time spent in this handle's reads and writes (see [`Ledger::busy_time`]).
    busy: Busy,
    // Declared last: its lock is released after sled is closed.
    store: Store,
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
        Store::init(dir)?;
        let mut l = Ledger::open_inner(dir, true)?;
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
        let ledger = |store: Store| Ledger {
            db: None,
            proj_mem: BTreeMap::new(),
            busy: Busy::default(),
            store,
        };
        if writable {
            let mut l = ledger(Store::open_writer(dir)?);
            // The report of what the open set aside rather than cut (aside.rs): the one
            // thing a writer's open says, as it may be history a damaged REFS hid.
            for a in l.store.set_aside().iter().filter(|a| a.records > 0) {
                eprintln!(
                    "warning: {} held {} intact record(s) in {} bytes past its committed length {} (not history: a crash before its commit, or a damaged last REFS record); set aside as {}; `ledger recover` re-attaches them as recovered/* branches",
                    a.from.display(),
                    a.records,
                    a.bytes,
                    a.offset,
                    a.to.display()
                );
            }
            let db = open_sled(dir)?;
            let proj = db
                .open_tree("projections")
                .map_err(|e| sled_error(dir, e))?;
            l.db = Some((db, proj));
            return Ok(l);
        }
        Ok(ledger(Store::open_reader(dir)?))
    }

    /// Read `REFS` again and reopen what it lists, keeping the lock and the cache (after
    /// gc replaced packs). Writer only.
    pub(super) fn reload(&mut self) -> Result<(), LedgerError> {
        Ok(self.store.reload()?)
    }

    /// Save the index as `INDEX` for the committed packs (writer only; a later open then
    /// scans only what was appended after). Best effort is enough for callers that
    /// ignore the error: the index is derived, and a missing one means a scan.
    pub fn save_index(&self) -> Result<(), LedgerError> {
        Ok(self.store.save_index()?)
    }

    /// Drop cached projections of events no longer stored (after gc).
    pub(super) fn prune_projection_cache(&mut self) -> Result<(), LedgerError> {
        self.proj_mem.clear();
        let Some((db, proj)) = &self.db else {
            return Ok(());
        };
        let se = |e| sled_error(self.store.dir(), e);
        let mut gone = Vec::new();
        for k in proj.iter().keys() {
            let k = k.map_err(se)?;
            let stored =
                <[u8; 32]>::try_from(k.as_ref()).is_ok_and(|h| self.store.contains(&Hash(h)));
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

    /// Append `next` to the `REFS` log durably (the commit point). Writer only.
    pub(super) fn commit_refs(&mut self, next: &Refs) -> Result<(), LedgerError> {
        Ok(self.store.commit_refs(next)?)
    }

    /// Wall time spent so far inside this handle's appends, forks, blob reads and writes,
    /// history walks and projections (nested calls counted once): what the ledger costs
    /// a run. Only reported, never recorded.
    pub fn busy_time(&self) -> Duration {
        self.busy.total()
    }

    /// The refs snapshot this handle reads (a writer's is always current).
    pub fn refs(&self) -> &Refs {
        self.store.refs()
    }

    pub fn dir(&self) -> &Path {
        self.store.dir()
    }

    pub fn is_writable(&self) -> bool {
        self.store.is_writable()
    }

    /// Number of events stored (all branches).
    pub fn event_count(&self) -> usize {
        self.store.index().len()
    }

    /// Problems found while opening (a reader opens a damaged ledger so verify can say
    /// what is wrong).
    pub fn open_problems(&self) -> &[OpenProblem] {
        self.store.problems()
    }

    /// Intact records no committed pack holds, by file (see `Store::unattached`).
    pub fn unattached(&self) -> Result<Vec<(PathBuf, usize)>, LedgerError> {
        Ok(self.store.unattached()?)
    }

    // ---- blobs ----

    /// Store a blob (once per content); returns its hash. Durable before any event
    /// that references it is committed.
    pub fn put_blob(&mut self, bytes: &[u8]) -> Result<Hash, LedgerError> {
        let _busy = self.busy.enter();
        Ok(self.store.put_blob(bytes)?)
    }

    /// A blob's bytes, checked against its hash.
    pub fn blob(&self, h: &Hash) -> Result<Vec<u8>, LedgerError> {
        let _busy = self.busy.enter();
        Ok(self.store.blobs().get(h)?)
    }

    /// The stored blob a hash or a prefix of 4+ hex digits names (unique, or an error
    /// naming how many match).
    pub fn blob_by_prefix(&self, prefix: &str) -> Result<Hash, LedgerError> {
        let p = prefix.to_ascii_lowercase();
        if p.len() < 4 || !is_hex_prefix(&p) {
            return Err(LedgerError::BadReference {
                text: prefix.to_string(),
                expected: "a blob's hash or a prefix of 4+ hex digits".into(),
            });
        }
        let m = self.store.blobs().with_prefix(&p);
        match m.len() {
            0 => Err(LedgerError::BadReference {
                text: prefix.to_string(),
                expected: "the hash of a stored blob (none starts so)".into(),
            }),
            1 => Ok(m[0]),
            n => Err(LedgerError::Ambiguous {
                what: prefix.to_string(),
                count: n,
            }),
        }
    }

    pub fn has_blob(&self, h: &Hash) -> Result<bool, LedgerError> {
        Ok(self.store.blobs().contains(h)?)
    }

    pub(crate) fn blob_store(&self) -> &Blobs {
        self.store.blobs()
    }

    // ---- refs ----

    /// The head event of `branch`.
    pub fn head(&self, branch: &str) -> Result<Hash, LedgerError> {
        Ok(self.store.head(branch)?)
    }

    /// Every branch and its head, in name order.
    pub fn branches(&self) -> Result<Vec<(String, Hash)>, LedgerError> {
        Ok(self.store.branches())
    }

    /// Create branch `name` at the existing event `at`: one durable ref, nothing copied.
    pub fn fork(&mut self, name: &str, at: &Hash) -> Result<(), LedgerError> {
        let _busy = self.busy.enter();
        Ok(self.store.fork(name, at)?)
    }

    /// Point branch `name` at the existing event `at` (created or moved), durably.
    pub(super) fn set_ref(&mut self, name: &str, at: &Hash) -> Result<(), LedgerError> {
        Ok(self.store.set_ref(name, at)?)
    }

    /// Remove branch `name`'s ref, durably. Its events stay in the packs (shared with
    /// other branches, or unreachable until `gc`). `main` cannot be deleted.
    pub fn delete_branch(&mut self, name: &str) -> Result<(), LedgerError> {
        Ok(self.store.delete_branch(name)?)
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
        if !self.store.is_writable() {
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
                if checked.insert(b) && !self.store.blobs().contains(&b)? {
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

    /// Encode `items` as events chained from `parent`, fold them into the projection,
    /// and commit them through the store with `branch` pointing at the last one.
    fn commit(
        &mut self,
        branch: &str,
        parent: Option<Hash>,
        items: Vec<(EventBody, u32, Meta)>,
    ) -> Result<Vec<Hash>, LedgerError> {
        let mut batch = self.store.begin_batch()?;
        let mut state = match parent {
            Some(h) => self.state_at(&h)?,
            None => BranchState::default(),
        };
        let mut ev = Vec::with_capacity(256);
        let mut mb = Vec::with_capacity(64);
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
            if maybe_stored && self.store.contains(&h) {
                batch.push_stored(&h);
            } else {
                mb.clear();
                codec::encode_into(&meta, &mut mb);
                maybe_stored = false;
                batch.push_new(&h, &ev, &mb)?;
            }
            projection::apply_in_place(&mut state, &h, &event);
            prev = Some(h);
        }
        let head = prev.expect("batch is not empty");
        let ids = self.store.commit_batch(branch, parent, batch)?;
        self.cache_state(head, state)?;
        Ok(ids)
    }

    // ---- reads ----

    fn frame_of(&self, h: &Hash) -> Result<pack::Frame<'_>, LedgerError> {
        Ok(self.store.frame_of(h)?)
    }

    pub(crate) fn frame_at(
        &self,
        pack_id: u32,
        offset: u64,
    ) -> Result<pack::Frame<'_>, LedgerError> {
        Ok(self.store.frame_at(pack_id, offset)?)
    }

    pub(crate) fn pack(&self, id: u32) -> Result<&Pack, LedgerError> {
        Ok(self.store.pack(id)?)
    }

    pub(crate) fn packs(&self) -> &[Pack] {
        self.store.packs()
    }

    pub(crate) fn index(&self) -> &Index {
        self.store.index()
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
        self.store.contains(h)
    }

    /// Where an event's record lies on disk.
    pub fn location(&self, h: &Hash) -> Option<Location> {
        self.store.location(h)
    }

    /// Ids from `from` back to genesis, newest first (stops at a broken link; verify
    /// reports those).
    pub fn ancestry(&self, from: &Hash) -> Result<Vec<Hash>, LedgerError> {
        Ok(self.store.ancestry(from)?)
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
        self.index().hashes().map(move |h| Ok((h, self.event(&h)?)))
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
            let m = self.index().with_prefix(&p);
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

    /// The event a reference names: a branch's head, where `BRANCH@stageN` ended, or the
    /// event of a hash prefix (read commands take any of them as `--branch`).
    pub fn head_of(&self, r: &str) -> Result<Hash, LedgerError> {
        match self.resolve(r)? {
            Resolved::Branch { head, .. } => Ok(head),
            Resolved::Stage { branch, stage } => self.stage_end(&branch, stage),
            Resolved::Event(h) => Ok(h),
        }
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
            .index()
            .position(h)
            .ok_or_else(|| LedgerError::UnknownEvent { what: h.to_hex() })?;
        let mut chain = Vec::new();
        let mut p = pos;
        let mut state = BranchState::default();
        loop {
            let hh = self.index().hash_at(p);
            if p != pos {
                if let Some(s) = self.cached_state(&hh) {
                    state = s;
                    break;
                }
            }
            chain.push(hh);
            let parent = self.index().entry(p).parent;
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
                .map_err(|e| sled_error(self.store.dir(), e))?
                .is_some_and(|v| v.first() == Some(&PROJ_VERSION));
            if !fresh {
                let mut v = vec![PROJ_VERSION];
                codec::encode_into(&state, &mut v);
                proj.insert(head.0, v)
                    .map_err(|e| sled_error(self.store.dir(), e))?;
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
        if !self.store.is_writable() {
            return Err(LedgerError::ReadOnly);
        }
        // The saved index is derived too: a segment whose checksum fails is dropped and
        // the packs scanned afresh. Only checksums are compared here; `verify` checks the
        // tables in full, and `ledger rebuild` remakes the index whatever they say
        // ([`Ledger::reindex`]).
        let index_seconds = if self.index().checksums_ok() {
            0.0
        } else {
            self.reindex()?
        };
        let t = Instant::now();
        if let Some((_, proj)) = &self.db {
            proj.clear().map_err(|e| sled_error(self.store.dir(), e))?;
        }
        self.proj_mem.clear();
        let branches = self.branches()?;
        let n = self.index().len();
        // Phase 1: walk each head back until history already claimed by an earlier
        // head; where walks meet, the state is saved for reuse (shared prefixes are
        // folded once).
        let mut visited = vec![false; n];
        let mut save = vec![false; n];
        let mut plans: Vec<(Hash, Option<u32>, Vec<u32>)> = Vec::new();
        for (_, head) in &branches {
            let pos = self
                .index()
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
                let parent = self.index().entry(p).parent;
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
                    what: format!("event {}", self.index().hash_at(p).short()),
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
                        let e = self.index().entry(p);
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
            if saved.contains_key(&self.index().position(&head).expect("indexed")) {
                state = saved[&self.index().position(&head).expect("indexed")].clone();
            }
            self.cache_state(head, state)?;
        }
        if let Some((db, _)) = &self.db {
            db.flush().map_err(|e| sled_error(self.store.dir(), e))?;
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
        let t = Instant::now();
        self.store.reindex()?;
        Ok(t.elapsed().as_secs_f64())
    }

    /// The cached projection stored for `head`, if any (tests compare it to a rebuild).
    pub fn cached_projection(&self, head: &Hash) -> Option<BranchState> {
        self.cached_state(head)
    }
}
