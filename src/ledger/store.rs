//! The [`Ledger`]: opening and creating a store, the durable append protocol, forks,
//! lookups and history walks. Layout of a ledger directory:
//!
//! ```text
//! LOCK            flock: exclusive for the one writer, shared for readers
//! db/             sled: refs + pack lengths, small blobs, projection cache
//! packs/          pack-NNNNNNNN.pack: framed event records (see pack.rs)
//! blobs/ab/cd..   large blobs, one file per hash
//! ```
//!
//! Append protocol (a crash at any instant leaves complete history behind every ref):
//! 1. blobs: files are fsync'ed and renamed when put; small blobs in sled are flushed;
//! 2. the batch's frames are written after the pack's committed end and fsync'ed;
//! 3. one atomic sled batch moves the branch ref and the pack's committed length, and
//!    sled is flushed. Until then the new frames are an uncommitted tail that the next
//!    writer cuts off and readers ignore.
use super::blob::Blobs;
use super::codec;
use super::event::{Event, EventBody, Genesis};
use super::hash::{is_hex_prefix, Hash};
use super::index::{Index, MISSING_PARENT, NO_PARENT};
use super::lock::LedgerLock;
use super::meta::Meta;
use super::pack::{self, Pack, PACK_ROLL_BYTES};
use super::plan::LedgerPlan;
use super::projection::{self, BranchState};
use super::refs::{self, MAIN};
use super::LedgerError;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
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

/// Result of [`Ledger::rebuild`].
#[derive(Clone, Debug, serde::Serialize)]
pub struct RebuildReport {
    pub branches: usize,
    pub events: u64,
    pub seconds: f64,
}

/// An open ledger: one writer ([`Ledger::open`], [`Ledger::create`]) or a reader
/// ([`Ledger::open_read_only`]).
pub struct Ledger {
    dir: PathBuf,
    writable: bool,
    db: sled::Db,
    refs: sled::Tree,
    proj: sled::Tree,
    blobs: Blobs,
    packs: Vec<Pack>,
    index: Index,
    problems: Vec<OpenProblem>,
    sled_dirty: bool,
    /// Set when a commit failed after writing: the writer must reopen the ledger
    /// (which cuts any uncommitted tail) before appending again.
    poisoned: bool,
    /// Projection states of recent heads (writer's incremental cache).
    proj_mem: BTreeMap<Hash, BranchState>,
    // Declared last: released after sled is closed.
    _lock: LedgerLock,
}

/// Bumped whenever `BranchState` changes shape: older cached states are ignored and
/// refolded from the log (2: stage states cite their evaluation events).
const PROJ_VERSION: u8 = 2;

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
                return Err(LedgerError::Sled(format!(
                    "{}: {msg}",
                    dir.join("db").display()
                )));
            }
        }
    }
}

impl Ledger {
    /// Create a ledger in `dir` from a plan file's bytes: the plan is validated, stored
    /// as a blob, and the genesis event starts branch `main`.
    pub fn create(dir: &Path, plan_bytes: &[u8]) -> Result<Ledger, LedgerError> {
        let plan = LedgerPlan::parse(plan_bytes)?;
        if dir.join("db").exists() {
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
        let mut l = Ledger::open_inner(dir, true, true)?;
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

    /// Open an existing ledger for writing (the one writer).
    pub fn open(dir: &Path) -> Result<Ledger, LedgerError> {
        Ledger::open_inner(dir, true, false)
    }

    /// Open an existing ledger for reading; fails with `Locked` while a writer is active.
    pub fn open_read_only(dir: &Path) -> Result<Ledger, LedgerError> {
        Ledger::open_inner(dir, false, false)
    }

    fn open_inner(dir: &Path, writable: bool, creating: bool) -> Result<Ledger, LedgerError> {
        if !creating && !dir.join("db").is_dir() {
            return Err(LedgerError::NotALedger {
                path: dir.to_path_buf(),
            });
        }
        let lock = LedgerLock::acquire(dir, writable)?;
        let db = open_sled(dir)?;
        let refs = db.open_tree("refs")?;
        let proj = db.open_tree("projections")?;
        let blobs = Blobs::new(dir.join("blobs"), db.open_tree("blobs")?);
        if writable {
            blobs.clean_tmp();
        }
        let packs_dir = dir.join("packs");
        let mut packs = Vec::new();
        let mut index = Index::default();
        let mut problems = Vec::new();
        for (i, (id, len)) in refs::packs(&refs)?.into_iter().enumerate() {
            if id as usize != i + 1 {
                return Err(LedgerError::Corrupt {
                    what: "pack table".into(),
                    problem: format!("pack ids are not 1..n (found {id} at position {})", i + 1),
                });
            }
            let p = match Pack::open(&packs_dir, id, len, writable) {
                Ok(p) => p,
                Err(e @ LedgerError::Corrupt { .. }) if !writable => {
                    problems.push(OpenProblem {
                        what: pack::pack_path(&packs_dir, id).display().to_string(),
                        problem: e.to_string(),
                    });
                    continue;
                }
                Err(e) => return Err(e),
            };
            for (off, f) in p.frames() {
                match f {
                    Ok(f) => {
                        let parent = codec::event_parent(f.event).ok().flatten();
                        index.insert(f.hash, id, off, parent);
                    }
                    Err(e) => problems.push(OpenProblem {
                        what: format!("record at {} offset {off}", p.path.display()),
                        problem: e.to_string(),
                    }),
                }
            }
            packs.push(p);
        }
        if writable && !problems.is_empty() {
            let p = &problems[0];
            return Err(LedgerError::Corrupt {
                what: p.what.clone(),
                problem: p.problem.clone(),
            });
        }
        Ok(Ledger {
            dir: dir.to_path_buf(),
            writable,
            db,
            refs,
            proj,
            blobs,
            packs,
            index,
            problems,
            sled_dirty: false,
            poisoned: false,
            proj_mem: BTreeMap::new(),
            _lock: lock,
        })
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
        if !self.writable {
            return Err(LedgerError::ReadOnly);
        }
        let (h, dirty) = self.blobs.put(bytes)?;
        self.sled_dirty |= dirty;
        Ok(h)
    }

    /// A blob's bytes, checked against its hash.
    pub fn blob(&self, h: &Hash) -> Result<Vec<u8>, LedgerError> {
        self.blobs.get(h)
    }

    pub fn has_blob(&self, h: &Hash) -> Result<bool, LedgerError> {
        self.blobs.contains(h)
    }

    pub(crate) fn blob_store(&self) -> &Blobs {
        &self.blobs
    }

    // ---- refs ----

    /// The head event of `branch`.
    pub fn head(&self, branch: &str) -> Result<Hash, LedgerError> {
        match self.refs.get(refs::branch_key(branch))? {
            Some(v) => refs::decode_head(branch, &v),
            None => Err(LedgerError::UnknownBranch {
                name: branch.to_string(),
            }),
        }
    }

    /// Every branch and its head, in name order.
    pub fn branches(&self) -> Result<Vec<(String, Hash)>, LedgerError> {
        refs::list_raw(&self.refs)?
            .into_iter()
            .map(|(n, v)| Ok((n.clone(), refs::decode_head(&n, &v)?)))
            .collect()
    }

    pub(crate) fn raw_refs(&self) -> Result<Vec<(String, Vec<u8>)>, LedgerError> {
        refs::list_raw(&self.refs)
    }

    /// Create branch `name` at the existing event `at`: one durable ref, nothing copied.
    pub fn fork(&mut self, name: &str, at: &Hash) -> Result<(), LedgerError> {
        if !self.writable {
            return Err(LedgerError::ReadOnly);
        }
        refs::validate_branch(name)?;
        if self.index.get(at).is_none() {
            return Err(LedgerError::UnknownEvent { what: at.to_hex() });
        }
        let r =
            self.refs
                .compare_and_swap(refs::branch_key(name), None::<&[u8]>, Some(&at.0[..]))?;
        if r.is_err() {
            return Err(LedgerError::BranchExists {
                name: name.to_string(),
            });
        }
        self.db.flush()?;
        Ok(())
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
        self.refs.insert(refs::branch_key(name), &at.0[..])?;
        self.db.flush()?;
        Ok(())
    }

    /// Remove branch `name`'s ref and flush. Its events stay in the packs (shared with
    /// other branches, or unreachable). `main` cannot be deleted.
    pub fn delete_branch(&mut self, name: &str) -> Result<(), LedgerError> {
        if !self.writable {
            return Err(LedgerError::ReadOnly);
        }
        if name == MAIN {
            return Err(LedgerError::Invalid(format!(
                "branch `{MAIN}` cannot be deleted"
            )));
        }
        if self.refs.remove(refs::branch_key(name))?.is_none() {
            return Err(LedgerError::UnknownBranch {
                name: name.to_string(),
            });
        }
        self.db.flush()?;
        Ok(())
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
        if self.sled_dirty {
            self.db.flush()?;
            self.sled_dirty = false;
        }
        let need_new = match self.packs.last() {
            None => true,
            Some(p) => p.committed() > PACK_ROLL_BYTES,
        };
        if need_new {
            let id = self.packs.len() as u32 + 1;
            let p = Pack::create(&self.dir.join("packs"), id)?;
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
        let mut added = Vec::with_capacity(items.len());
        let mut prev = parent;
        for (body, stage, meta) in items {
            let event = Event {
                parent: prev,
                stage,
                body,
            };
            ev.clear();
            codec::encode_event_into(event.parent.as_ref(), stage, &event.body, &mut ev);
            mb.clear();
            codec::encode_into(&meta, &mut mb);
            if ev.len() > pack::MAX_PAYLOAD || mb.len() > pack::MAX_PAYLOAD {
                return Err(LedgerError::Invalid(format!(
                    "event of {} bytes exceeds the record limit",
                    ev.len()
                )));
            }
            let h = Hash::of_event(&ev);
            added.push((h, base + buf.len() as u64, prev));
            pack::encode_frame(&mut buf, &h, &ev, &mb);
            projection::apply_in_place(&mut state, &h, &event);
            prev = Some(h);
        }
        let head = prev.expect("batch is not empty");
        self.poisoned = true;
        let new_len = pack.write_durable(&buf)?;
        let mut batch = sled::Batch::default();
        batch.insert(refs::branch_key(branch), &head.0[..]);
        batch.insert(refs::pack_key(pack.id), &new_len.to_le_bytes()[..]);
        self.refs.apply_batch(batch)?;
        self.db.flush()?;
        pack.commit(new_len)?;
        self.poisoned = false;
        let id = pack.id;
        self.index.reserve(added.len());
        let mut parent_pos = match parent {
            None => NO_PARENT,
            Some(p) => self.index.position(&p).unwrap_or(MISSING_PARENT),
        };
        for (h, off, _) in &added {
            parent_pos = self.index.insert_at(*h, id, *off, parent_pos);
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
        self.frame_at(e.pack, e.offset)
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
        codec::decode_event(f.event).map_err(|source| LedgerError::Decode {
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
        let e = codec::decode_event(f.event).map_err(|source| LedgerError::Decode {
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
        let mut hs = self.ancestry(head)?;
        hs.reverse();
        hs.into_iter().map(|h| Ok((h, self.event(&h)?))).collect()
    }

    /// Every stored event in storage (append) order.
    pub fn all_events(&self) -> impl Iterator<Item = Result<(Hash, Event), LedgerError>> + '_ {
        self.index
            .hashes()
            .iter()
            .map(move |h| Ok((*h, self.event(h)?)))
    }

    /// Resolve a `show` reference: `branch@stageN`, a branch name, or a hash prefix.
    pub fn resolve(&self, r: &str) -> Result<Resolved, LedgerError> {
        if let Some((b, s)) = r.split_once('@') {
            let n = s
                .strip_prefix("stage")
                .and_then(|n| n.parse::<u32>().ok())
                .filter(|&n| n >= 1)
                .ok_or_else(|| LedgerError::UnknownEvent {
                    what: format!("{r} (expected BRANCH@stageN, N >= 1)"),
                })?;
            self.head(b)?;
            return Ok(Resolved::Stage {
                branch: b.to_string(),
                stage: n,
            });
        }
        if let Ok(head) = self.head(r) {
            return Ok(Resolved::Branch {
                name: r.to_string(),
                head,
            });
        }
        let p = r.to_ascii_lowercase();
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
        let v = self.proj.get(h.0).ok()??;
        if v.first() != Some(&PROJ_VERSION) {
            return None;
        }
        codec::decode(&v[1..], "projection").ok()
    }

    /// The projection state after event `h`: from the cache, else folded from the
    /// nearest cached ancestor (forks reuse their shared prefix).
    pub fn state_at(&self, h: &Hash) -> Result<BranchState, LedgerError> {
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
        if self.writable {
            let mut v = vec![PROJ_VERSION];
            codec::encode_into(&state, &mut v);
            self.proj.insert(head.0, v)?;
        }
        if self.proj_mem.len() >= 64 {
            self.proj_mem.clear();
        }
        self.proj_mem.insert(head, state);
        Ok(())
    }

    /// The projection of a branch at its head.
    pub fn projection(&mut self, branch: &str) -> Result<BranchState, LedgerError> {
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
        let t = Instant::now();
        self.proj.clear()?;
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
                        let ev =
                            codec::decode_event(f.event).map_err(|source| LedgerError::Decode {
                                what: format!("event {}", f.hash.short()),
                                source,
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
        self.db.flush()?;
        Ok(RebuildReport {
            branches: branches.len(),
            events,
            seconds: t.elapsed().as_secs_f64(),
        })
    }

    /// The cached projection stored for `head`, if any (tests compare it to a rebuild).
    pub fn cached_projection(&self, head: &Hash) -> Option<BranchState> {
        self.cached_state(head)
    }
}
