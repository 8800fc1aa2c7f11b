//! What a ledger holds, read and written through the [`Ledger`]: blobs (stored once per
//! content), branch refs, appends (checked, encoded, chained from their parent and
//! folded into the projection as they are framed, committed durably in one `REFS`
//! record), and reads of events, metadata and histories.
use super::blob::Blobs;
use super::codec;
use super::event::{Event, EventBody};
use super::hash::{is_hex_prefix, Hash};
use super::index::Index;
use super::meta::Meta;
use super::pack::{self, Pack};
use super::projection::{self, BranchState};
use super::Ledger;
use super::LedgerError;
use ledger_store::Location;

impl Ledger {
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
    /// Every command that names a branch comes through here (references, `fork
    /// --from`, `run --branch`), so an unknown name is answered once, with the nearest
    /// branch name where one is close.
    pub fn head(&self, branch: &str) -> Result<Hash, LedgerError> {
        self.store.head(branch).map_err(|e| match e {
            ledger_store::StoreError::UnknownBranch { name } => self.unknown_branch(&name),
            e => e.into(),
        })
    }

    /// Every branch and its head, in name order. Scratch refs (a replay's work, see
    /// [`super::refs::is_scratch`]) are not branches: no listing, report or bundle sees
    /// them.
    pub fn branches(&self) -> Result<Vec<(String, Hash)>, LedgerError> {
        Ok(self.store.branches())
    }

    /// The scratch refs and their heads: a running command's, or left by a killed one.
    pub fn scratch_refs(&self) -> Vec<(String, Hash)> {
        self.store.scratch_refs()
    }

    /// Create branch `name` at the existing event `at`: one durable ref, nothing copied.
    /// A scratch name ([`super::refs::is_scratch`]) is refused: those are made by
    /// [`Ledger::fork_scratch`] alone.
    pub fn fork(&mut self, name: &str, at: &Hash) -> Result<(), LedgerError> {
        if super::refs::is_scratch(name) {
            return Err(LedgerError::ReservedName {
                name: name.to_string(),
            });
        }
        let _busy = self.busy.enter();
        Ok(self.store.fork(name, at)?)
    }

    /// Create the scratch ref `name` (it must start with
    /// [`super::refs::SCRATCH_PREFIX`]) at `at`, for work no reader may see; the caller
    /// deletes it with [`Ledger::delete_branch`] on every way out, and `gc` removes one a
    /// killed process left. An older one of the same name (left by a kill) is replaced.
    pub fn fork_scratch(&mut self, name: &str, at: &Hash) -> Result<(), LedgerError> {
        if !super::refs::is_scratch(name) {
            return Err(LedgerError::Store(ledger_store::StoreError::Invalid(
                format!(
                    "scratch ref `{name}` must start with `{}`",
                    super::refs::SCRATCH_PREFIX
                ),
            )));
        }
        let _busy = self.busy.enter();
        Ok(self.store.set_ref(name, at)?)
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
            return Err(LedgerError::Store(ledger_store::StoreError::ReadOnly));
        }
        // The records and the projection cache's update, as one commit an exit waits for.
        let _commit = ledger_store::commits::Commit::enter();
        let head = self.head(branch)?;
        let mut checked = std::collections::BTreeSet::new();
        for (body, _, _) in &items {
            if matches!(body, EventBody::Genesis(_)) {
                return Err(LedgerError::Store(ledger_store::StoreError::Invalid(
                    "a genesis event can only start a new ledger".into(),
                )));
            }
            if let EventBody::Trajectories(t) = body {
                t.trajectory_hashes().map_err(LedgerError::invalid)?;
            }
            for b in body.blobs() {
                if checked.insert(b) && !self.store.blobs().contains(&b)? {
                    return Err(LedgerError::Store(ledger_store::StoreError::MissingBlob {
                        hash: b,
                    }));
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
    pub(super) fn commit(
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
                return Err(LedgerError::Store(ledger_store::StoreError::Invalid(
                    format!("event of {} bytes exceeds the record limit", ev.len()),
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
        self.projections.put(head, state)?;
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
        decode_frame(&self.frame_of(h)?)
    }

    /// An event's stored bytes and its metadata's, as they lie in the pack.
    pub fn raw_event(&self, h: &Hash) -> Result<(Vec<u8>, Vec<u8>), LedgerError> {
        let f = self.frame_of(h)?;
        Ok((f.event.to_vec(), f.meta.to_vec()))
    }

    /// The event and its metadata.
    pub fn event_with_meta(&self, h: &Hash) -> Result<(Event, Meta), LedgerError> {
        let f = self.frame_of(h)?;
        let e = decode_frame(&f)?;
        let m = Meta::decode(f.meta, "metadata").map_err(|source| LedgerError::Decode {
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
}

/// The event a stored frame holds (a decode error names the event).
pub(super) fn decode_frame(f: &pack::Frame<'_>) -> Result<Event, LedgerError> {
    crate::record::event::decode_event(f.event).map_err(|source| LedgerError::Decode {
        what: format!("event {}", f.hash.short()),
        source,
    })
}
