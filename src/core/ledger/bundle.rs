//! Bundles and fetch: moving history between ledgers, as `git bundle` and `git fetch` do.
//!
//! A [`Bundle`] holds refs, the events they reach (oldest first, each with its stored
//! metadata) and the blobs those events reference. It is collected from a ledger
//! ([`Bundle::collect`], only what the destination lacks when one is given), written to
//! one file ([`Bundle::write`]) and read back with every hash checked ([`Bundle::read`]).
//! [`Ledger::fetch`] copies a bundle's missing objects into a ledger, re-deriving every
//! event id from its content before anything is written, then moves refs:
//!
//! * an object that already exists is not written again (fetch is idempotent);
//! * a ref that is new, or behind the incoming head, is set to it (fast-forward); one
//!   that is already at or ahead of it stays; one that diverged is refused, naming it,
//!   before anything is written (`prefix` puts incoming refs under a namespace instead).
//!
//! So fetching A then B gives the same refs, events and blobs as B then A.
//!
//! File layout (all integers little-endian; encoding of refs and metadata through
//! [`codec`]):
//!
//! ```text
//! "MAPFBNDL" u32 version
//! u64 len, codec(Vec<(String, Hash)>)         refs
//! u64 blob count, then per blob:   hash[32] u64 len bytes
//! u64 event count, then per event: hash[32] u32 len event-bytes u32 len meta-bytes
//! ```
use super::codec;
use super::event::{Event, EventBody};
use super::hash::Hash;
use super::meta::Meta;
use super::Ledger;
use super::LedgerError;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 8] = b"MAPFBNDL";
const VERSION: u32 = 1;

/// One event as stored: its id, encoded bytes and encoded metadata.
#[derive(Clone, Debug)]
pub struct BundledEvent {
    pub hash: Hash,
    pub event: Vec<u8>,
    pub meta: Vec<u8>,
}

/// Refs, the events they reach (parents before children) and the blobs they reference.
#[derive(Clone, Debug, Default)]
pub struct Bundle {
    pub refs: Vec<(String, Hash)>,
    pub events: Vec<BundledEvent>,
    pub blobs: BTreeMap<Hash, Vec<u8>>,
}

/// What a fetch did.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct FetchReport {
    pub events_added: usize,
    pub blobs_added: usize,
    /// (branch, head) set or moved forward.
    pub refs_updated: Vec<(String, String)>,
    /// Branches already at (or ahead of) the incoming head.
    pub refs_unchanged: Vec<String>,
}

fn corrupt(what: impl Into<String>, problem: impl Into<String>) -> LedgerError {
    LedgerError::Corrupt {
        what: what.into(),
        problem: problem.into(),
    }
}

impl Bundle {
    /// Collect `refs` from `src`: every event they reach, except those `known` (the
    /// destination's, when fetching), and the blobs of the collected events not
    /// `known_blob`, following `blob_refs` (the blobs a blob's bytes name, such as a
    /// checkpoint's tokenizer: `TrainState::referenced_blobs`; the ledger does not know
    /// blob formats).
    pub fn collect(
        src: &Ledger,
        refs: &[(String, Hash)],
        known: &dyn Fn(&Hash) -> bool,
        known_blob: &dyn Fn(&Hash) -> bool,
        blob_refs: &dyn Fn(&[u8]) -> Vec<Hash>,
    ) -> Result<Bundle, LedgerError> {
        let mut seen = BTreeSet::new();
        let mut events = Vec::new();
        let mut blobs = BTreeMap::new();
        for (_, head) in refs {
            // Walk back to the first event already collected or known, then emit oldest first.
            let mut chain = Vec::new();
            let mut at = Some(*head);
            while let Some(h) = at {
                if seen.contains(&h) || known(&h) {
                    break;
                }
                let (ev, meta) = src.raw_event(&h)?;
                at = codec::event_parent(&ev)
                    .map_err(|e| corrupt(format!("event {}", h.short()), e.to_string()))?;
                chain.push(BundledEvent {
                    hash: h,
                    event: ev,
                    meta,
                });
            }
            for e in chain.into_iter().rev() {
                seen.insert(e.hash);
                let decoded = crate::record::event::decode_event(&e.event).map_err(|source| {
                    LedgerError::Decode {
                        what: format!("event {}", e.hash.short()),
                        source,
                    }
                })?;
                let mut todo = decoded.body.blobs();
                while let Some(b) = todo.pop() {
                    if !blobs.contains_key(&b) && !known_blob(&b) {
                        let bytes = src.blob(&b)?;
                        todo.extend(blob_refs(&bytes));
                        blobs.insert(b, bytes);
                    }
                }
                events.push(e);
            }
        }
        Ok(Bundle {
            refs: refs.to_vec(),
            events,
            blobs,
        })
    }

    /// Total bytes of objects (events, metadata and blobs).
    pub fn object_bytes(&self) -> u64 {
        self.events
            .iter()
            .map(|e| (e.event.len() + e.meta.len()) as u64)
            .sum::<u64>()
            + self.blobs.values().map(|b| b.len() as u64).sum::<u64>()
    }

    /// Write the bundle to `path` durably (a temporary file, fsync'ed, then renamed).
    pub fn write(&self, path: &Path) -> Result<u64, LedgerError> {
        let io = |e: std::io::Error| {
            LedgerError::Store(ledger_store::StoreError::Io {
                path: path.to_path_buf(),
                message: e.to_string(),
            })
        };
        let tmp = path.with_extension("bundle-tmp");
        let file = std::fs::File::create(&tmp).map_err(io)?;
        let mut w = std::io::BufWriter::with_capacity(1 << 20, file);
        w.write_all(MAGIC).map_err(io)?;
        w.write_all(&VERSION.to_le_bytes()).map_err(io)?;
        let refs = codec::encode(&self.refs);
        w.write_all(&(refs.len() as u64).to_le_bytes())
            .map_err(io)?;
        w.write_all(&refs).map_err(io)?;
        w.write_all(&(self.blobs.len() as u64).to_le_bytes())
            .map_err(io)?;
        for (h, b) in &self.blobs {
            w.write_all(&h.0).map_err(io)?;
            w.write_all(&(b.len() as u64).to_le_bytes()).map_err(io)?;
            w.write_all(b).map_err(io)?;
        }
        w.write_all(&(self.events.len() as u64).to_le_bytes())
            .map_err(io)?;
        for e in &self.events {
            w.write_all(&e.hash.0).map_err(io)?;
            w.write_all(&(e.event.len() as u32).to_le_bytes())
                .map_err(io)?;
            w.write_all(&e.event).map_err(io)?;
            w.write_all(&(e.meta.len() as u32).to_le_bytes())
                .map_err(io)?;
            w.write_all(&e.meta).map_err(io)?;
        }
        let file = w.into_inner().map_err(|e| io(e.into_error()))?;
        file.sync_all().map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        drop(file);
        std::fs::rename(&tmp, path).map_err(io)?;
        Ok(len)
    }

    /// Read a bundle file, checking every blob's and event's hash against its content
    /// and that every event's parent comes before it or lies outside the bundle.
    /// Errors name the file and the object.
    /// What `fetch` reads from `src` into `dest`: a ledger directory (only what `dest`
    /// lacks, and the blobs `dest`'s `LOST` file names) or a bundle file. `blob_refs`
    /// names the blobs a blob references (a checkpoint's tokenizer and base).
    pub fn from_source(
        src: &Path,
        dest: &Ledger,
        blob_refs: &(dyn Fn(&[u8]) -> Vec<Hash> + Sync),
    ) -> Result<Bundle, LedgerError> {
        if !src.join("db").is_dir() {
            return Bundle::read(src);
        }
        let s = Ledger::open_read_only(src)?;
        let refs = s.branches()?;
        let mut b = Bundle::collect(
            &s,
            &refs,
            &|h| dest.contains_event(h),
            &|h| dest.has_blob(h).unwrap_or(false),
            blob_refs,
        )?;
        // Blobs `recover` recorded as lost here belong to events `dest` has, so the walk
        // above skips them: the source's copies restore them.
        for (h, kind) in super::recover::read_lost(dest.dir()) {
            if kind == "blob" && !dest.has_blob(&h)? && s.has_blob(&h)? {
                b.blobs.insert(h, s.blob(&h)?);
            }
        }
        Ok(b)
    }

    pub fn read(path: &Path) -> Result<Bundle, LedgerError> {
        let name = path.display().to_string();
        let mut bytes = Vec::new();
        std::fs::File::open(path)
            .and_then(|mut f| f.read_to_end(&mut bytes))
            .map_err(|e| {
                LedgerError::Store(ledger_store::StoreError::Io {
                    path: path.to_path_buf(),
                    message: e.to_string(),
                })
            })?;
        let mut r = Reader {
            bytes: &bytes,
            at: 0,
            file: &name,
        };
        // Not a bundle at all (or one of another version) is bad input, not damage.
        if bytes.get(..MAGIC.len()) != Some(&MAGIC[..]) {
            return Err(LedgerError::Store(ledger_store::StoreError::Invalid(format!(
                "{name} is not a mapf-ledger bundle (it does not start with the bundle header; make one with `ledger bundle`)"
            ))));
        }
        r.take(MAGIC.len(), "header")?;
        let version = r.u32("header")?;
        if version != VERSION {
            return Err(LedgerError::Store(ledger_store::StoreError::Invalid(
                format!("{name}: bundle format version {version}, this build reads {VERSION}"),
            )));
        }
        let n = r.u64("refs")? as usize;
        let refs: Vec<(String, Hash)> = codec::decode(r.take(n, "refs")?, "bundle refs")
            .map_err(|e| corrupt(format!("{name}: refs"), e.to_string()))?;
        for (b, _) in &refs {
            super::refs::validate_branch(b)?;
        }
        let mut blobs = BTreeMap::new();
        for _ in 0..r.u64("blob count")? {
            let at = r.at;
            let h = Hash(r.take(32, "blob")?.try_into().expect("32 bytes"));
            let n = r.u64("blob")? as usize;
            let b = r.take(n, "blob")?;
            if Hash::of_blob(b) != h {
                return Err(corrupt(
                    format!("{name}: blob {} at offset {at}", h.short()),
                    "content does not match its hash",
                ));
            }
            blobs.insert(h, b.to_vec());
        }
        let mut events = Vec::new();
        let mut inside = BTreeSet::new();
        for _ in 0..r.u64("event count")? {
            let at = r.at;
            let h = Hash(r.take(32, "event")?.try_into().expect("32 bytes"));
            let n = r.u32("event")? as usize;
            let ev = r.take(n, "event")?.to_vec();
            let m = r.u32("event metadata")? as usize;
            let meta = r.take(m, "event metadata")?.to_vec();
            let what = || format!("{name}: event {} at offset {at}", h.short());
            if Hash::of_event(&ev) != h {
                return Err(corrupt(what(), "content does not match its hash"));
            }
            crate::record::event::decode_event(&ev).map_err(|e| corrupt(what(), e.to_string()))?;
            Meta::decode(&meta, "event metadata").map_err(|e| corrupt(what(), e.to_string()))?;
            inside.insert(h);
            events.push(BundledEvent {
                hash: h,
                event: ev,
                meta,
            });
        }
        if r.at != bytes.len() {
            return Err(corrupt(
                &name,
                format!("{} bytes after the last event", bytes.len() - r.at),
            ));
        }
        // Parents first: a parent inside the bundle must precede its child.
        let mut before = BTreeSet::new();
        for e in &events {
            if let Some(p) = codec::event_parent(&e.event).ok().flatten() {
                if inside.contains(&p) && !before.contains(&p) {
                    return Err(corrupt(
                        format!("{name}: event {}", e.hash.short()),
                        format!("its parent {} comes after it", p.short()),
                    ));
                }
            }
            before.insert(e.hash);
        }
        Ok(Bundle {
            refs,
            events,
            blobs,
        })
    }

    /// The genesis event's id and plan bytes, if the bundle holds the genesis.
    pub fn genesis(&self) -> Option<(Hash, Vec<u8>)> {
        let e = self.events.first()?;
        match crate::record::event::decode_event(&e.event).ok()?.body {
            EventBody::Genesis(g) => Some((e.hash, self.blobs.get(&g.plan_blob)?.clone())),
            _ => None,
        }
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
    file: &'a str,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], LedgerError> {
        if self.bytes.len() - self.at < n {
            return Err(corrupt(
                format!("{}: {what} at offset {}", self.file, self.at),
                "the file ends early (truncated bundle)",
            ));
        }
        let s = &self.bytes[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }
    fn u32(&mut self, what: &str) -> Result<u32, LedgerError> {
        Ok(u32::from_le_bytes(
            self.take(4, what)?.try_into().expect("4"),
        ))
    }
    fn u64(&mut self, what: &str) -> Result<u64, LedgerError> {
        Ok(u64::from_le_bytes(
            self.take(8, what)?.try_into().expect("8"),
        ))
    }
}

/// What [`Ledger::write_bundle`] wrote: the refs, how many events and blobs, and the
/// file's size in bytes.
pub struct BundleWritten {
    pub refs: Vec<(String, Hash)>,
    pub events: usize,
    pub blobs: usize,
    pub bytes: u64,
}

/// Why `ledger fetch` fetched nothing.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("--prefix {0}: a namespace ends with `/` (e.g. `{0}/`)")]
    Prefix(String),
    /// `path` reads as neither a bundle nor a ledger. The error of reading it is in the
    /// text, not a source: a mistyped source, not a missing or damaged ledger.
    #[error("{}: not a bundle file or ledger directory ({error})", path.display())]
    NotASource { path: PathBuf, error: LedgerError },
    #[error("{0}")]
    Ledger(#[from] LedgerError),
}

/// Check a `--prefix` before anything is fetched: a namespace ends with `/`.
pub fn check_prefix(prefix: Option<&str>) -> Result<(), FetchError> {
    match prefix {
        Some(p) if !p.ends_with('/') => Err(FetchError::Prefix(p.to_string())),
        _ => Ok(()),
    }
}

impl Ledger {
    /// Whether `ancestor` is `h` or one of its ancestors.
    pub fn is_ancestor(&self, ancestor: &Hash, h: &Hash) -> Result<bool, LedgerError> {
        Ok(self.ancestry(h)?.contains(ancestor))
    }

    /// Copy a bundle's missing objects into this ledger and move its refs (see the
    /// module doc). Refs are checked first, then every incoming event is re-encoded
    /// from its decoded content and must give its id; nothing is written unless all
    /// of that holds.
    pub fn fetch(&mut self, b: &Bundle, prefix: Option<&str>) -> Result<FetchReport, LedgerError> {
        let by_hash: BTreeMap<Hash, &BundledEvent> = b.events.iter().map(|e| (e.hash, e)).collect();
        let target = |name: &str| format!("{}{name}", prefix.unwrap_or(""));
        // 1. Same experiment: the genesis must match ours.
        if let Some((g, _)) = b.genesis() {
            let ours = self.ancestry(&self.head(super::refs::MAIN)?)?;
            if ours.last() != Some(&g) {
                return Err(LedgerError::Store(ledger_store::StoreError::Invalid(format!(
                    "the incoming history starts from genesis {}, this ledger from {}: they are different experiments",
                    g.short(),
                    ours.last().map(|h| h.short()).unwrap_or_default()
                ))));
            }
        }
        // 2. Refs: decide every move before writing anything.
        let mut plan = Vec::new();
        let mut report = FetchReport::default();
        for (name, head) in &b.refs {
            let name = target(name);
            super::refs::validate_branch(&name)?;
            if super::refs::is_scratch(&name) {
                return Err(LedgerError::ReservedName { name });
            }
            let reachable = self.contains_event(head) || by_hash.contains_key(head);
            if !reachable {
                return Err(LedgerError::Store(ledger_store::StoreError::UnknownEvent {
                    what: format!(
                        "{} (head of incoming branch {name}, not in the bundle)",
                        head.to_hex()
                    ),
                }));
            }
            match self.head(&name) {
                Ok(ours) if ours == *head => report.refs_unchanged.push(name),
                Ok(ours) => {
                    if self.contains_event(head) && self.is_ancestor(head, &ours)? {
                        // Ours is ahead of the incoming head: keep it.
                        report.refs_unchanged.push(name);
                    } else if self.chain_reaches(&by_hash, head, &ours)? {
                        plan.push((name, *head));
                    } else {
                        return Err(LedgerError::BranchConflict {
                            name,
                            ours: ours.short(),
                            theirs: head.short(),
                        });
                    }
                }
                Err(LedgerError::UnknownBranch { .. }) => plan.push((name, *head)),
                Err(e) => return Err(e),
            }
        }
        // 3. Every incoming event must re-encode to its id, and its blobs must be here
        //    or in the bundle.
        let mut decoded: BTreeMap<Hash, (Event, Meta)> = BTreeMap::new();
        for e in &b.events {
            if self.contains_event(&e.hash) {
                continue;
            }
            let what = format!("incoming event {}", e.hash.short());
            let ev = crate::record::event::decode_event(&e.event).map_err(|source| {
                LedgerError::Decode {
                    what: what.clone(),
                    source,
                }
            })?;
            if Hash::of_event(&crate::record::event::encode_event(&ev)) != e.hash {
                return Err(corrupt(what, "its content does not re-encode to its id"));
            }
            if matches!(ev.body, EventBody::Genesis(_)) {
                return Err(LedgerError::Store(ledger_store::StoreError::Invalid(format!(
                    "{what} is a genesis: start a new ledger from the bundle with `ledger init --from-bundle`"
                ))));
            }
            for blob in ev.body.blobs() {
                if !b.blobs.contains_key(&blob) && !self.has_blob(&blob)? {
                    return Err(LedgerError::Store(ledger_store::StoreError::MissingBlob {
                        hash: blob,
                    }));
                }
            }
            let meta = Meta::decode(&e.meta, "event metadata")
                .map_err(|e2| corrupt(what.clone(), e2.to_string()))?;
            decoded.insert(e.hash, (ev, meta));
        }
        // 4. Blobs, then each moved ref's missing chain, parents first.
        for (h, bytes) in &b.blobs {
            if !self.has_blob(h)? {
                if Hash::of_blob(bytes) != *h {
                    return Err(corrupt(
                        format!("incoming blob {}", h.short()),
                        "content does not match its hash",
                    ));
                }
                self.put_blob(bytes)?;
                report.blobs_added += 1;
            }
        }
        for (name, head) in plan {
            let mut chain = Vec::new();
            let mut at = Some(head);
            while let Some(h) = at {
                if self.contains_event(&h) {
                    break;
                }
                let (ev, _) = decoded.get(&h).ok_or_else(|| {
                    LedgerError::Store(ledger_store::StoreError::UnknownEvent {
                        what: format!(
                            "{} (an ancestor of incoming branch {name}, in neither ledger)",
                            h.to_hex()
                        ),
                    })
                })?;
                at = ev.parent;
                chain.push(h);
            }
            chain.reverse();
            if chain.is_empty() {
                self.set_ref(&name, &head)?;
            } else {
                let parent = decoded[&chain[0]].0.parent;
                let items = chain
                    .iter()
                    .map(|h| {
                        let (ev, meta) = &decoded[h];
                        (ev.body.clone(), ev.stage, meta.clone())
                    })
                    .collect();
                let ids = self.commit_at(&name, parent, items)?;
                if ids != chain {
                    // Cannot happen after step 3; a guard against a codec change.
                    return Err(corrupt(
                        format!("incoming branch {name}"),
                        "re-derived ids differ",
                    ));
                }
                report.events_added += chain.len();
            }
            report.refs_updated.push((name, head.to_hex()));
        }
        Ok(report)
    }

    /// Whether the incoming history of `head` (in the bundle, then here) reaches `ours`.
    fn chain_reaches(
        &self,
        by_hash: &BTreeMap<Hash, &BundledEvent>,
        head: &Hash,
        ours: &Hash,
    ) -> Result<bool, LedgerError> {
        let mut at = Some(*head);
        while let Some(h) = at {
            if h == *ours {
                return Ok(true);
            }
            if self.contains_event(&h) {
                return self.is_ancestor(ours, &h);
            }
            at = match by_hash.get(&h) {
                Some(e) => codec::event_parent(&e.event).ok().flatten(),
                None => None,
            };
        }
        Ok(false)
    }
}

impl Ledger {
    /// The last event of `branch` in stage `n` before any later stage began (the end of
    /// `BRANCH@stageN`): what a bundle of a fork prefix carries. Walked from the root:
    /// events appended after later stages with an earlier stage number (a replay's
    /// `replay_verified`, which carries the stage it checked) are annotations, not the
    /// stage's end.
    pub fn stage_end(&self, branch: &str, n: u32) -> Result<Hash, LedgerError> {
        let mut end = None;
        for h in self.ancestry(&self.head(branch)?)?.into_iter().rev() {
            let stage = self.event(&h)?.stage;
            if stage > n {
                break;
            }
            if stage == n {
                end = Some(h);
            }
        }
        end.ok_or_else(|| {
            LedgerError::Store(ledger_store::StoreError::UnknownEvent {
                what: format!("{branch}@stage{n} (branch {branch} has no stage {n})"),
            })
        })
    }

    /// `ledger bundle`: the bundle of `specs` (each `BRANCH` or `BRANCH@stageN`, see
    /// [`Ledger::refs_named`]) with everything they reach, blobs a checkpoint references
    /// included, written to `out`.
    pub fn write_bundle(&self, specs: &[String], out: &Path) -> Result<BundleWritten, LedgerError> {
        let refs = self.refs_named(specs)?;
        let b = Bundle::collect(
            self,
            &refs,
            &|_| false,
            &|_| false,
            &crate::record::checkpoint::referenced_blobs,
        )?;
        let bytes = b.write(out)?;
        Ok(BundleWritten {
            events: b.events.len(),
            blobs: b.blobs.len(),
            bytes,
            refs,
        })
    }

    /// `ledger fetch SRC`: what the bundle file or ledger directory `src` has and this
    /// ledger lacks ([`Bundle::from_source`]), fetched under `prefix` ([`Ledger::fetch`]).
    /// A source that is neither is [`FetchError::NotASource`].
    pub fn fetch_from(
        &mut self,
        src: &Path,
        prefix: Option<&str>,
    ) -> Result<FetchReport, FetchError> {
        let b = Bundle::from_source(src, self, &crate::record::checkpoint::referenced_blobs)
            .map_err(|e| match e {
                LedgerError::Store(ledger_store::StoreError::Io { .. })
                | LedgerError::Store(ledger_store::StoreError::NotALedger { .. }) => {
                    FetchError::NotASource {
                        path: src.to_path_buf(),
                        error: e,
                    }
                }
                e => FetchError::Ledger(e),
            })?;
        Ok(self.fetch(&b, prefix)?)
    }

    /// The refs a bundle of `specs` carries: each `BRANCH` at its head, each
    /// `BRANCH@stageN` at that stage's end ([`Ledger::stage_end`]).
    pub fn refs_named(&self, specs: &[String]) -> Result<Vec<(String, Hash)>, LedgerError> {
        specs
            .iter()
            .map(|s| match super::Reference::parse_branch(s)? {
                (b, Some(n)) => Ok((b.clone(), self.stage_end(&b, n)?)),
                (b, None) => Ok((b.clone(), self.head(&b)?)),
            })
            .collect()
    }

    /// A new ledger in `dir` from a bundle that holds its genesis: created from the
    /// bundled plan (the genesis must come out identical), then fetched into. When the
    /// bundle does not carry `main`, main points at the furthest point its forks left it.
    pub fn create_from_bundle(
        dir: &Path,
        b: &Bundle,
    ) -> Result<(Ledger, FetchReport), LedgerError> {
        let (genesis, plan) = b.genesis().ok_or_else(|| {
            LedgerError::Store(ledger_store::StoreError::Invalid(
                "the bundle does not start at a genesis (it was made for fetching into an existing ledger)".into(),
            ))
        })?;
        let mut l = Ledger::create(dir, &plan)?;
        let ours = l.head(super::refs::MAIN)?;
        if ours != genesis {
            return Err(corrupt(
                format!("bundled genesis {}", genesis.short()),
                format!("recreating it from its plan gives {}", ours.short()),
            ));
        }
        let mut report = l.fetch(b, None)?;
        // Creating the ledger stored the plan blob the bundle carries: it came from the
        // bundle too, so the count says what `ledger bundle` said it wrote.
        if b.blobs.contains_key(&Hash::of_blob(&plan)) {
            report.blobs_added += 1;
        }
        // A bundle of forks without `main` holds main's history only as far as they
        // left it: main points there (not at a lone genesis), the furthest fork point.
        if !b.refs.iter().any(|(n, _)| n == super::refs::MAIN) {
            let mut furthest: Option<(usize, Hash)> = None;
            for e in &b.events {
                let Ok(ev) = crate::record::event::decode_event(&e.event) else {
                    continue;
                };
                if let super::event::EventBody::BranchForked(f) = &ev.body {
                    if f.from_branch == super::refs::MAIN && l.contains_event(&f.at) {
                        let depth = l.ancestry(&f.at)?.len();
                        if furthest.is_none_or(|(d, _)| depth > d) {
                            furthest = Some((depth, f.at));
                        }
                    }
                }
            }
            if let Some((_, at)) = furthest {
                l.set_ref(super::refs::MAIN, &at)?;
                report
                    .refs_updated
                    .push((super::refs::MAIN.to_string(), at.to_hex()));
            }
        }
        Ok((l, report))
    }
}
