//! `gc`: remove what no ref reaches (events of deleted or scratch branches, the blobs
//! only they named), as `git gc` does, without ever risking what a ref reaches.
//!
//! Crash safety comes from the one commit point every writer already has, the rename of
//! `REFS`:
//! 1. the reachable events and small blobs are copied, frame by frame and byte for byte,
//!    into new packs (ids after every existing one), which are fsync'ed;
//! 2. a new `REFS` listing only the new packs is written (commit point);
//! 3. the old packs and the unreachable blob files are deleted.
//!
//! Killed before 2, the new packs are files `REFS` does not list: the next writer removes
//! them and the old history is untouched. Killed after 2, the old packs are such files.
//! Blob files are deleted only when unreachable, so any instant is safe for them.
//! Readers that opened the old packs keep reading them (an unlinked file stays readable
//! while mapped); a reader that read the old `REFS` but finds a pack gone reads `REFS`
//! again.

use super::hash::Hash;
use super::pack::{self, Pack, PackKind, PACK_ROLL_BYTES};
use super::refs::Refs;
use super::Ledger;
use super::LedgerError;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// What [`Ledger::gc`] did.
#[derive(Clone, Debug, Default, serde::Serialize, schemars::JsonSchema)]
pub struct GcReport {
    pub events_kept: u64,
    pub events_removed: u64,
    pub blobs_kept: u64,
    pub blobs_removed: u64,
    /// Bytes of packs and blob files before and after.
    pub bytes_before: u64,
    pub bytes_after: u64,
    pub seconds: f64,
    /// Scratch refs removed first (left by replays that were killed; gc is a writer, so
    /// no replay runs beside it), each `name at <short head>`.
    pub scratch_removed: Vec<String>,
}

/// Test hook for crash-safety tests: when `MAPF_LEDGER_CRASH_AT` names this point, the
/// process aborts here (as a kill -9 would stop it). Costs one env lookup per point.
pub fn crash_point(name: &str) {
    if std::env::var_os("MAPF_LEDGER_CRASH_AT").is_some_and(|v| v == name) {
        std::process::abort();
    }
}

fn io(path: &Path, e: std::io::Error) -> LedgerError {
    LedgerError::Store(ledger_store::StoreError::Io {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}

impl Ledger {
    /// Every event a ref reaches, as index positions (sorted) and its blobs, following
    /// `blob_refs` (the blobs a blob's bytes name: a checkpoint's tokenizer and frozen
    /// base, `TrainState::referenced_blobs`) through every blob stored as a file.
    pub fn reachable(
        &self,
        blob_refs: &dyn Fn(&[u8]) -> Vec<Hash>,
    ) -> Result<(Vec<u32>, BTreeSet<Hash>), LedgerError> {
        let index = self.index();
        let mut seen = vec![false; index.len()];
        for (_, head) in self.branches()? {
            let Some(pos) = index.position(&head) else {
                return Err(LedgerError::Store(ledger_store::StoreError::UnknownEvent {
                    what: head.to_hex(),
                }));
            };
            for p in index.ancestry(pos) {
                if seen[p as usize] {
                    break;
                }
                seen[p as usize] = true;
            }
        }
        let positions: Vec<u32> = (0..index.len() as u32)
            .filter(|&p| seen[p as usize])
            .collect();
        let mut blobs = BTreeSet::new();
        let mut todo = Vec::new();
        for &p in &positions {
            let e = index.entry(p);
            let f = self.frame_at(e.pack, e.offset)?;
            todo.extend(super::facts::decode_frame(&f)?.body.blobs());
        }
        while let Some(b) = todo.pop() {
            if blobs.insert(b) && !self.blob_store().is_small(&b) {
                if let Some(bytes) = self.blob_store().get_raw(&b)? {
                    todo.extend(blob_refs(&bytes));
                }
            }
        }
        Ok((positions, blobs))
    }

    /// Remove every event and blob no ref reaches (see the module doc for why a crash at
    /// any instant loses nothing reachable). Writer only.
    pub fn gc(&mut self, blob_refs: &dyn Fn(&[u8]) -> Vec<Hash>) -> Result<GcReport, LedgerError> {
        if !self.is_writable() {
            return Err(LedgerError::Store(ledger_store::StoreError::ReadOnly));
        }
        let t = Instant::now();
        let dir = self.dir().to_path_buf();
        let packs_dir = dir.join("packs");
        // Scratch refs first: what only they reach is unreachable below.
        let scratch_removed = self.remove_scratch_refs()?;
        let (keep, keep_blobs) = self.reachable(blob_refs)?;
        let mut report = GcReport {
            scratch_removed,
            ..GcReport::default()
        };
        let total_events = self.index().len() as u64;
        report.events_kept = keep.len() as u64;
        report.events_removed = total_events - keep.len() as u64;
        let pack_bytes = |packs: &[Pack]| packs.iter().map(|p| p.committed()).sum::<u64>();
        let small = self.blob_store().small_packs();
        let small_total = self.blob_store().small_count();
        let small_kept = reachable_small_blobs(small, &keep_blobs);
        let files = BlobFiles::scan(&dir.join("blobs"), &keep_blobs)?;
        report.bytes_before = pack_bytes(self.packs()) + pack_bytes(small) + files.bytes;
        report.blobs_kept = files.kept + small_kept.len() as u64;
        report.blobs_removed = files.doomed.len() as u64 + (small_total - small_kept.len()) as u64;
        let rewrite_events = report.events_removed > 0;
        let rewrite_small = small_kept.len() < small_total;

        // 1. Copy what is reachable into new packs, durably.
        let mut next = self.refs().clone();
        let mut old_packs = Vec::new();
        if rewrite_events {
            next.packs = self.copy_events(&keep, &packs_dir)?;
            old_packs.extend(self.packs().iter().map(|p| p.path.clone()));
        }
        if rewrite_small {
            next.blob_packs = copy_small_blobs(small, &small_kept, &packs_dir)?;
            old_packs.extend(small.iter().map(|p| p.path.clone()));
        }
        crash_point("gc:packs-written");

        // 2. Commit: REFS lists the new packs.
        if rewrite_events || rewrite_small {
            self.commit_refs(&next)?;
        }
        crash_point("gc:refs-written");

        // 3. Delete what is no longer listed or reachable.
        let removed_file_bytes = remove_unlisted(&old_packs, &files.doomed)?;
        pack::sync_dir(&packs_dir)?;
        let refs = Refs::read(&dir)?.expect("REFS exists");
        report.bytes_after = refs
            .packs
            .iter()
            .chain(&refs.blob_packs)
            .map(|p| p.1)
            .sum::<u64>()
            + files.bytes
            - removed_file_bytes;
        self.reload()?;
        self.prune_projection_cache()?;
        report.seconds = t.elapsed().as_secs_f64();
        Ok(report)
    }

    /// Delete every scratch ref, each reported `name at <short head>`. Only for gc: its
    /// process holds the writer's lock, so any scratch ref is a leftover of a killed
    /// replay, and what only it reaches is then unreachable.
    fn remove_scratch_refs(&mut self) -> Result<Vec<String>, LedgerError> {
        let mut removed = Vec::new();
        for (name, head) in self.scratch_refs() {
            self.delete_branch(&name)?;
            removed.push(format!("{name} at {}", head.short()));
        }
        Ok(removed)
    }

    /// Step 1 for events: copy the frames at index positions `keep`, in order and byte
    /// for byte, into new event packs (ids after every existing one, rolled at
    /// [`PACK_ROLL_BYTES`]), written in chunks of about 1 MiB and fsync'ed. Returns the
    /// new packs as `REFS` lists them.
    fn copy_events(&self, keep: &[u32], packs_dir: &Path) -> Result<Vec<(u32, u64)>, LedgerError> {
        let mut id = self.packs().last().map_or(0, |p| p.id);
        let mut out: Vec<Pack> = Vec::new();
        let mut buf = Vec::with_capacity(1 << 20);
        let flush = |out: &mut Vec<Pack>, buf: &mut Vec<u8>| -> Result<(), LedgerError> {
            if !buf.is_empty() {
                out.last_mut().expect("a pack").write(buf)?;
                buf.clear();
            }
            Ok(())
        };
        for &p in keep {
            let e = self.index().entry(p);
            let f = self.frame_at(e.pack, e.offset)?;
            let frame = &self.pack(e.pack)?.bytes()[e.offset as usize..e.offset as usize + f.len];
            if out
                .last()
                .is_none_or(|p| p.written() + buf.len() as u64 > PACK_ROLL_BYTES)
            {
                flush(&mut out, &mut buf)?;
                id += 1;
                out.push(Pack::create(packs_dir, PackKind::Events, id)?);
            }
            buf.extend_from_slice(frame);
            if buf.len() >= 1 << 20 {
                flush(&mut out, &mut buf)?;
            }
        }
        flush(&mut out, &mut buf)?;
        let mut listed = Vec::new();
        for p in &mut out {
            listed.push((p.id, p.sync()?));
        }
        Ok(listed)
    }
}

/// The small blobs (stored in blob packs) a ref reaches: each `(hash, pack index,
/// offset)`, in pack and frame order.
fn reachable_small_blobs(small: &[Pack], keep_blobs: &BTreeSet<Hash>) -> Vec<(Hash, usize, u64)> {
    small
        .iter()
        .enumerate()
        .flat_map(|(i, p)| {
            p.frames()
                .filter_map(|(off, f)| f.ok().map(|f| (f.hash, off)))
                .map(move |(h, off)| (h, i, off))
                .collect::<Vec<_>>()
        })
        .filter(|(h, _, _)| keep_blobs.contains(h))
        .collect()
}

/// The large blobs, stored one file each under `blobs/<2 hex>/<rest>`.
struct BlobFiles {
    /// Files of blobs a ref reaches.
    kept: u64,
    /// Files of blobs no ref reaches, with their lengths.
    doomed: Vec<(PathBuf, u64)>,
    /// Bytes of every file there, blob or not.
    bytes: u64,
}

impl BlobFiles {
    /// Sort the files under `blobs_dir` (absent: none) by whether `keep_blobs` holds
    /// them; a file whose name is not a blob hash is counted in bytes and left alone.
    fn scan(blobs_dir: &Path, keep_blobs: &BTreeSet<Hash>) -> Result<BlobFiles, LedgerError> {
        let mut files = BlobFiles {
            kept: 0,
            doomed: Vec::new(),
            bytes: 0,
        };
        if let Ok(rd) = std::fs::read_dir(blobs_dir) {
            for sub in rd.flatten().filter(|e| e.path().is_dir()) {
                let prefix = sub.file_name().to_string_lossy().into_owned();
                for f in std::fs::read_dir(sub.path())
                    .map_err(|e| io(&sub.path(), e))?
                    .flatten()
                {
                    let name = format!("{prefix}{}", f.file_name().to_string_lossy());
                    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
                    files.bytes += len;
                    match Hash::from_hex(&name) {
                        Some(h) if keep_blobs.contains(&h) => files.kept += 1,
                        Some(_) => files.doomed.push((f.path(), len)),
                        None => {} // not a blob; left alone
                    }
                }
            }
        }
        Ok(files)
    }
}

/// Step 1 for small blobs: copy the frames `kept` of the blob packs `small`, byte for
/// byte, into new blob packs (ids after every existing one, rolled at
/// [`PACK_ROLL_BYTES`]), fsync'ed. Returns the new packs as `REFS` lists them.
fn copy_small_blobs(
    small: &[Pack],
    kept: &[(Hash, usize, u64)],
    packs_dir: &Path,
) -> Result<Vec<(u32, u64)>, LedgerError> {
    let mut id = small.last().map_or(0, |p| p.id);
    let mut out: Vec<Pack> = Vec::new();
    for (_, i, off) in kept {
        let f = pack::parse_frame(small[*i].bytes(), *off as usize).map_err(|e| {
            LedgerError::Corrupt {
                what: format!("{} offset {off}", small[*i].path.display()),
                problem: e.to_string(),
            }
        })?;
        let frame = &small[*i].bytes()[*off as usize..*off as usize + f.len];
        if out.last().is_none_or(|p| p.written() > PACK_ROLL_BYTES) {
            id += 1;
            out.push(Pack::create(packs_dir, PackKind::Blobs, id)?);
        }
        out.last_mut().expect("a pack").write(frame)?;
    }
    let mut listed = Vec::new();
    for p in &mut out {
        listed.push((p.id, p.sync()?));
    }
    Ok(listed)
}

/// Step 3: delete the packs `REFS` no longer lists, then the unreachable blob files.
/// Returns the bytes of blob files removed.
fn remove_unlisted(
    old_packs: &[PathBuf],
    doomed_files: &[(PathBuf, u64)],
) -> Result<u64, LedgerError> {
    for (i, p) in old_packs.iter().enumerate() {
        std::fs::remove_file(p).map_err(|e| io(p, e))?;
        if i == 0 {
            crash_point("gc:first-old-pack-removed");
        }
    }
    let mut removed_file_bytes = 0;
    for (i, (p, len)) in doomed_files.iter().enumerate() {
        std::fs::remove_file(p).map_err(|e| io(p, e))?;
        removed_file_bytes += len;
        if i == 0 {
            crash_point("gc:first-blob-removed");
        }
    }
    Ok(removed_file_bytes)
}
