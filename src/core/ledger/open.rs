//! The [`Ledger`] handle: creating a ledger from a plan (the genesis event), opening it
//! as the one writer or as a reader of a `REFS` snapshot, moving a ledger of the older
//! sled-only layout over, and what the handle says about itself.
//!
//! The Ledger is the application's record on the storage engine's `Store`: the store
//! holds the bytes (packs, blobs, `REFS`, the index, the writer's lock; its module doc
//! has the directory layout and the durable commit protocol); the ledger knows what
//! they mean. Its other parts: [`super::facts`] (blobs, branches, appends, reads),
//! [`super::reference`] (resolving what a command names), [`super::projections`] (the
//! folded branch states and their cache), and verify, gc, bundles and recover beside.
use super::blob::Blobs;
use super::event::{EventBody, Genesis};
use super::hash::Hash;
use super::lock::LedgerLock;
use super::meta::Meta;
use super::plan::LedgerPlan;
use super::projections::{open_sled, sled_error, Projections};
use super::refs::{self, Refs, MAIN};
use super::LedgerError;
use ledger_store::{OpenProblem, Store};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// An open ledger: one writer ([`Ledger::open`], [`Ledger::create`]) or a reader
/// ([`Ledger::open_read_only`]) holding the snapshot of `REFS` it opened.
pub struct Ledger {
    /// Folded branch states: recent heads in memory, and the writer's sled cache.
    pub(super) projections: Projections,
    /// Time spent in this handle's reads and writes (see [`Ledger::busy_time`]).
    pub(super) busy: Busy,
    /// Derived data its open found damaged and remade ([`Ledger::healed`]).
    pub(super) healed: Vec<String>,
    // Declared last: its lock is released after sled is closed.
    pub(super) store: Store,
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

/// Move ledger `dir`'s projection cache (`db/`) to `db.corrupt/`, replacing an older
/// one there; returns where it went. The caller holds the writer's lock.
fn set_cache_aside(dir: &Path) -> Result<PathBuf, LedgerError> {
    let io = |path: &Path, e| LedgerError::Store(ledger_store::StoreError::io(path, e));
    let aside = dir.join("db.corrupt");
    if aside.exists() {
        std::fs::remove_dir_all(&aside).map_err(|e| io(&aside, e))?;
    }
    let db = dir.join("db");
    std::fs::rename(&db, &aside).map_err(|e| io(&db, e))?;
    Ok(aside)
}

/// Wall time spent inside the ledger's public operations; nested calls count once. (The
/// pipeline calls them from one thread; calls overlapping from several threads may be
/// counted twice.)
#[derive(Clone, Default)]
pub(super) struct Busy {
    depth: std::sync::Arc<AtomicU32>,
    nanos: std::sync::Arc<AtomicU64>,
}

/// Counts from its creation to its drop, unless an outer one is already counting.
pub(super) struct BusyGuard {
    busy: Busy,
    start: Instant,
}

impl Busy {
    pub(super) fn enter(&self) -> BusyGuard {
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

/// Why [`Ledger::create_from_plan_file`] made no ledger: the plan file's errors name it.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    #[error("{}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The plan does not parse, is out of range, or names a model directory that is
    /// not there.
    #[error("{}: {source}", path.display())]
    Plan {
        path: PathBuf,
        #[source]
        source: super::plan::PlanError,
    },
    #[error("{0}")]
    Ledger(#[from] LedgerError),
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

    /// Create a ledger in `dir` from the plan file at `plan` (`ledger init --plan`): as
    /// [`Ledger::create`], after checking that a model directory the plan's `lm.init`
    /// names exists, so a run cannot find it missing at its first stage. Errors name
    /// the plan file.
    pub fn create_from_plan_file(dir: &Path, plan: &Path) -> Result<Ledger, InitError> {
        let path = plan.to_path_buf();
        let bytes = std::fs::read(plan).map_err(|source| InitError::Read {
            path: path.clone(),
            source,
        })?;
        let in_plan = |source| InitError::Plan {
            path: path.clone(),
            source,
        };
        if let Ok(p) = LedgerPlan::parse(&bytes) {
            p.lm.check_hf_dir().map_err(in_plan)?;
        }
        Ledger::create(dir, &bytes).map_err(|e| match e {
            LedgerError::Plan(p) => in_plan(p),
            e => InitError::Ledger(e),
        })
    }

    /// Open an existing ledger for writing (the one writer; a second is refused with
    /// [`LedgerError::Store(ledger_store::StoreError::Locked)`]).
    pub fn open(dir: &Path) -> Result<Ledger, LedgerError> {
        Ledger::open_inner(dir, true)
    }

    /// Open for `rebuild`: [`Ledger::open`], which already moves a projection cache
    /// that sled finds corrupt aside (see [`Ledger::healed`]).
    pub fn open_for_rebuild(dir: &Path) -> Result<Ledger, LedgerError> {
        Ledger::open(dir)
    }

    /// What this handle's open found wrong with derived data and remade (a projection
    /// cache sled found corrupt, after a full disk or a crash), one sentence each: derived
    /// data is never a reason to refuse, but the user is told.
    pub fn healed(&self) -> &[String] {
        &self.healed
    }

    /// The branch heads of the ledger at `dir` now (its newest `REFS` record), read
    /// without opening a handle and without waiting for the writer: what `log --follow`
    /// and `serve` poll. Empty for a ledger with no refs yet.
    pub fn current_heads(
        dir: &Path,
    ) -> Result<std::collections::BTreeMap<String, Hash>, LedgerError> {
        Ok(Refs::read(dir)?
            .map(|r| r.visible().map(|(n, h)| (n.clone(), *h)).collect())
            .unwrap_or_default())
    }

    /// Whether a process writes the ledger at `dir` right now (a probe; takes nothing).
    pub fn writer_active(dir: &Path) -> bool {
        super::lock::writer_active(dir)
    }

    /// Open an existing ledger for reading, on a snapshot of its refs: works while a
    /// writer appends (it takes no lock).
    pub fn open_read_only(dir: &Path) -> Result<Ledger, LedgerError> {
        Ledger::open_inner(dir, false)
    }

    fn open_inner(dir: &Path, writable: bool) -> Result<Ledger, LedgerError> {
        if !is_ledger(dir) {
            return Err(LedgerError::Store(ledger_store::StoreError::NotALedger {
                path: dir.to_path_buf(),
            }));
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
            projections: Projections::reader(dir),
            busy: Busy::default(),
            healed: Vec::new(),
            store,
        };
        if writable {
            let mut l = ledger(Store::open_writer(dir)?);
            l.projections = match Projections::writer(dir) {
                Err(LedgerError::Store(ledger_store::StoreError::Damaged {
                    what,
                    problem,
                    ..
                })) if what.contains("projection cache") => {
                    // Derived from the log: set the damaged cache aside (we hold the
                    // writer's lock) and start an empty one, which fills as it is read.
                    let aside = set_cache_aside(dir)?;
                    l.healed.push(format!(
                        "{what} was corrupt ({problem}); it is derived from the log, so it was moved to {} and is being remade",
                        aside.display()
                    ));
                    Projections::writer(dir)?
                }
                r => r?,
            };
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

    /// What this writer's open set aside rather than cut: bytes past a pack's committed
    /// length (a crash before its commit, or a damaged last `REFS` record that reads as
    /// one), moved under `set-aside/` with the intact records they hold. Not history
    /// until `recover` re-attaches them; the CLI says so when it opens a ledger.
    pub fn set_aside(&self) -> &[ledger_store::aside::SetAside] {
        self.store.set_aside()
    }

    /// Intact records no committed pack holds, by file (see `Store::unattached`).
    pub fn unattached(&self) -> Result<Vec<(PathBuf, usize)>, LedgerError> {
        Ok(self.store.unattached()?)
    }
}
