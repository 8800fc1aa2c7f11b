//! The projections: each branch head's folded [`BranchState`], recomputed from the
//! log on demand and cached (recent heads in memory; the writer's in sled, `db/`,
//! keyed by head). The cache is derived data: `rebuild` remakes it, and a reader,
//! which opens no sled, folds from the nearest state it has.
use super::codec;
use super::event::Event;
use super::hash::Hash;
use super::index::{MISSING_PARENT, NO_PARENT};
use super::lock::LedgerLock;
use super::projection::{self, BranchState};
use super::Ledger;
use super::LedgerError;
use ledger_store::StoreError;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

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

/// Bumped whenever `BranchState` changes shape: older cached states are ignored and
/// refolded from the log (2: stage states cite their evaluation events; 3: the branch's
/// chosen engineer; 4: per-stage GRPO statistics; 5: per-instance outcome events;
/// 6: engineer-RL sums; 7: those without an unused reward sum; 8: instance counts per
/// split beside the total; 9: per split only).
const PROJ_VERSION: u8 = 9;

pub(super) fn open_sled(dir: &Path) -> Result<sled::Db, LedgerError> {
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
                    return Err(LedgerError::Store(ledger_store::StoreError::Locked {
                        path: dir.to_path_buf(),
                    }));
                }
                return Err(sled_error(dir, e));
            }
        }
    }
}

/// A sled error of ledger `dir`'s projection cache: corruption is the store's `Damaged`
/// naming the directory (exit 1), anything else an I/O-like storage error.
pub(crate) fn sled_error(dir: &Path, e: sled::Error) -> LedgerError {
    let what = format!("{} (projection cache, sled)", dir.join("db").display());
    match e {
        sled::Error::Corruption { at, .. } => {
            LedgerError::Store(ledger_store::StoreError::Damaged {
                what,
                problem: format!(
                    "sled read corrupted data{} (the cache is derived from the log)",
                    at.map(|p| format!(" at {p:?}")).unwrap_or_default()
                ),
                repair: super::Repair::Rebuild,
            })
        }
        e => LedgerError::Sled(format!("{what}: {e}")),
    }
}

/// The projection cache of one ledger handle.
pub struct Projections {
    dir: PathBuf,
    /// The writer's cache (readers have none: they fold).
    db: Option<(sled::Db, sled::Tree)>,
    /// Projection states of recent heads.
    mem: BTreeMap<Hash, BranchState>,
}

impl Projections {
    /// A reader's: memory only.
    pub(super) fn reader(dir: &Path) -> Projections {
        Projections {
            dir: dir.to_path_buf(),
            db: None,
            mem: BTreeMap::new(),
        }
    }

    /// The writer's: memory and sled (the caller holds the ledger's lock).
    pub(super) fn writer(dir: &Path) -> Result<Projections, LedgerError> {
        let db = open_sled(dir)?;
        let tree = db
            .open_tree("projections")
            .map_err(|e| sled_error(dir, e))?;
        Ok(Projections {
            dir: dir.to_path_buf(),
            db: Some((db, tree)),
            mem: BTreeMap::new(),
        })
    }

    /// The cached state after `h` (None: not cached, or cached by an older shape).
    pub fn get(&self, h: &Hash) -> Option<BranchState> {
        if let Some(s) = self.mem.get(h) {
            return Some(s.clone());
        }
        let v = self.db.as_ref()?.1.get(h.0).ok()??;
        if v.first() != Some(&PROJ_VERSION) {
            return None;
        }
        codec::decode(&v[1..], "projection").ok()
    }

    /// Cache the state after `head`.
    pub(super) fn put(&mut self, head: Hash, state: BranchState) -> Result<(), LedgerError> {
        if let Some((_, tree)) = &self.db {
            let fresh = tree
                .get(head.0)
                .map_err(|e| sled_error(&self.dir, e))?
                .is_some_and(|v| v.first() == Some(&PROJ_VERSION));
            if !fresh {
                let mut v = vec![PROJ_VERSION];
                codec::encode_into(&state, &mut v);
                tree.insert(head.0, v)
                    .map_err(|e| sled_error(&self.dir, e))?;
            }
        }
        if self.mem.len() >= 64 {
            self.mem.clear();
        }
        self.mem.insert(head, state);
        Ok(())
    }

    /// Forget every cached state.
    fn clear(&mut self) -> Result<(), LedgerError> {
        if let Some((_, tree)) = &self.db {
            tree.clear().map_err(|e| sled_error(&self.dir, e))?;
        }
        self.mem.clear();
        Ok(())
    }

    /// Make the sled cache durable.
    fn flush(&self) -> Result<(), LedgerError> {
        if let Some((db, _)) = &self.db {
            db.flush().map_err(|e| sled_error(&self.dir, e))?;
        }
        Ok(())
    }

    /// Drop cached states of events `stored` says are gone (after gc).
    fn retain(&mut self, stored: impl Fn(&Hash) -> bool) -> Result<(), LedgerError> {
        self.mem.clear();
        let Some((db, tree)) = &self.db else {
            return Ok(());
        };
        let se = |e| sled_error(&self.dir, e);
        let mut gone = Vec::new();
        for k in tree.iter().keys() {
            let k = k.map_err(se)?;
            if !<[u8; 32]>::try_from(k.as_ref()).is_ok_and(|h| stored(&Hash(h))) {
                gone.push(k);
            }
        }
        for k in gone {
            tree.remove(k).map_err(se)?;
        }
        db.flush().map_err(se)?;
        Ok(())
    }
}

impl Ledger {
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
            LedgerError::Corrupt { what, problem }
            | LedgerError::Store(
                StoreError::Corrupt { what, problem } | StoreError::Damaged { what, problem, .. },
            ) => super::Problem { what, problem },
            e => super::Problem {
                what: format!("{} (projection cache, sled)", dir.join("db").display()),
                problem: ledger_store::Chain(&e).to_string(),
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

    /// Drop cached projections of events no longer stored (after gc).
    pub(super) fn prune_projection_cache(&mut self) -> Result<(), LedgerError> {
        let store = &self.store;
        self.projections.retain(|h| store.contains(h))
    }

    /// The projection state after event `h`: from the cache, else folded from the
    /// nearest cached ancestor (forks reuse their shared prefix).
    pub fn state_at(&self, h: &Hash) -> Result<BranchState, LedgerError> {
        let _busy = self.busy.enter();
        if let Some(s) = self.projections.get(h) {
            return Ok(s);
        }
        let pos = self.index().position(h).ok_or_else(|| {
            LedgerError::Store(ledger_store::StoreError::UnknownEvent { what: h.to_hex() })
        })?;
        let mut chain = Vec::new();
        let mut p = pos;
        let mut state = BranchState::default();
        loop {
            let hh = self.index().hash_at(p);
            if p != pos {
                if let Some(s) = self.projections.get(&hh) {
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

    /// The projection of a branch at its head.
    pub fn projection(&mut self, branch: &str) -> Result<BranchState, LedgerError> {
        let _busy = self.busy.enter();
        let head = self.head(branch)?;
        let s = self.state_at(&head)?;
        self.projections.put(head, s.clone())?;
        Ok(s)
    }

    /// Remake everything derived (`ledger rebuild`): the index from the packs (a saved
    /// one can be wrong with right checksums), then the projections ([`Ledger::rebuild`]).
    pub fn rebuild_all(&mut self) -> Result<RebuildReport, LedgerError> {
        let index_seconds = self.reindex()?;
        Ok(RebuildReport {
            index_seconds,
            ..self.rebuild()?
        })
    }

    /// Drop every cached projection and recompute each branch's from the log.
    pub fn rebuild(&mut self) -> Result<RebuildReport, LedgerError> {
        if !self.store.is_writable() {
            return Err(LedgerError::Store(ledger_store::StoreError::ReadOnly));
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
        self.projections.clear()?;
        let branches = self.branches()?;
        let n = self.index().len();
        // Phase 1: walk each head back until history already claimed by an earlier
        // head; where walks meet, the state is saved for reuse (shared prefixes are
        // folded once).
        let mut visited = vec![false; n];
        let mut save = vec![false; n];
        let mut plans: Vec<(Hash, Option<u32>, Vec<u32>)> = Vec::new();
        for (_, head) in &branches {
            let pos = self.index().position(head).ok_or_else(|| {
                LedgerError::Store(ledger_store::StoreError::UnknownEvent {
                    what: head.to_hex(),
                })
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
                        Ok((f.hash, super::facts::decode_frame(&f)?))
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
            self.projections.put(head, state)?;
        }
        self.projections.flush()?;
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
        self.projections.get(head)
    }
}
