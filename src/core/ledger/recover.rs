//! `recover`: bring a damaged ledger back to a state that verifies, losing nothing a ref
//! reached except the damaged bytes themselves (git's reflog and `fsck --lost-found` in
//! one command). Everything runs under the writer's lock:
//!
//! 1. **REFS.** Every record is checked. The newest intact one is the snapshot restored;
//!    a damaged newer record is still read line by line ([`Legible`]) for branch names,
//!    never trusted as history.
//! 2. **Packs.** Every pack file is scanned frame by frame. A frame whose checksum or
//!    content hash fails, or bytes that are no frame, are damage; the scan finds its
//!    footing again at the next offset where a whole, right frame starts. A pack's
//!    committed length becomes the end of its intact prefix; intact frames after damage
//!    (and every frame of later event packs, so parents still precede children) are
//!    copied into a new pack. When REFS itself was damaged, what was committed after
//!    the restored snapshot is found this way too.
//! 3. **Loose blobs** are rehashed; a damaged one is moved out of the store.
//! 4. **Branches.** A head whose history is whole stays. One that damage cut off moves
//!    back to its newest intact ancestor: the parent named in the damaged record (when
//!    that field is legible), else its head in an older REFS record, then forward along
//!    the only intact child no other branch owns.
//! 5. **Lost and found.** Event tips committed after the restored snapshot that no ref
//!    reaches become branches `recovered/<name>` (the name from the damaged record, or
//!    the branch whose older head they continue) or `recovered/tip-<hash>`.
//!
//! Nothing is deleted: every damaged file is copied to `damaged/<n>/` before anything
//! changes (with the report as `report.json`), what is lost is appended to `LOST` (so
//! `verify` names a known loss as a warning, not a failure; a later `fetch` of the same
//! blob from a copy clears it), `REFS` is replaced by one intact record, and the index
//! and projections are rebuilt. Run on a sound ledger, it changes nothing but the
//! derived index and projections, which it remakes.
//!
//! Killed at any instant it leaves a ledger the next `recover` finishes: copies come
//! first, then new packs (unlisted until step 3, so a writer removes them), then the one
//! rename of `REFS`.
use super::codec;
use super::event::decode_event;
use super::hash::Hash;
use super::index::{Index, MISSING_PARENT, NO_PARENT};
use super::lock::LedgerLock;
use super::open::is_ledger;
use super::pack::{self, kind_path, parse_frame, scan, sync_dir, Bad, Good, Pack, PackKind};
use super::refs::{self, Legible, Refs};
use super::{Ledger, LedgerError};
use ledger_store::store::{dropped_by_commit, pack_files};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Name of the file listing what damage took: `event <hex> <where>` / `blob <hex> <where>`.
pub const LOST_FILE: &str = "LOST";
/// Directory (in the ledger) holding copies of damaged files, one numbered folder a run.
pub const DAMAGED_DIR: &str = "damaged";

/// What `ledger recover` found and did (`--json`).
#[derive(Clone, Debug, Default, Serialize, schemars::JsonSchema)]
pub struct RecoverReport {
    /// Whether anything in the ledger's history changed (REFS, packs, blobs).
    pub changed: bool,
    /// Where the damaged files were copied (`<ledger>/damaged/<n>`), when any were.
    pub damaged_copy: Option<String>,
    pub refs: RefsOutcome,
    /// Every pack whose committed length changed, that was damaged, or that was made.
    pub packs: Vec<PackOutcome>,
    /// Every branch before and after.
    pub branches: Vec<BranchOutcome>,
    /// Events whose records lay in damaged bytes (ids read from their headers or from
    /// the links of their children).
    pub lost_events: Vec<Hash>,
    /// Intact events no ref reaches any more because an ancestor was lost (kept only in
    /// the damaged copy, or in the packs until `gc`).
    pub cut_off_events: Vec<Hash>,
    /// Blobs a ref still reaches whose bytes were damaged or are missing.
    pub lost_blobs: Vec<Hash>,
    /// Damaged loose blob files moved out of the store (into the damaged copy).
    pub moved_blob_files: Vec<String>,
    /// Events and projections counted by the rebuild that ends the run.
    pub events: u64,
}

#[derive(Clone, Debug, Default, Serialize, schemars::JsonSchema)]
pub struct RefsOutcome {
    /// Complete records in the file.
    pub records: usize,
    /// Records (1-based) whose check line failed.
    pub damaged_records: Vec<usize>,
    /// The record restored (1-based), when the newest one was damaged or missing.
    pub restored_record: Option<usize>,
    /// Whether the newest record was damaged (or the file had no complete record).
    pub newest_damaged: bool,
}

#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct PackOutcome {
    pub file: String,
    /// Committed length before (from the restored snapshot; none when it did not list
    /// the pack).
    pub committed_before: Option<u64>,
    /// Committed length after (none: no longer listed, its frames live elsewhere).
    pub committed_after: Option<u64>,
    /// Damaged spans `(offset, length)` inside what was committed.
    pub damaged: Vec<(u64, u64)>,
    /// Intact frames copied into a new pack from this one.
    pub moved_frames: usize,
    /// Whether this pack was made by recover (the new home of moved frames).
    pub created: bool,
}

#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct BranchOutcome {
    pub name: String,
    pub before: Option<Hash>,
    pub after: Option<Hash>,
    /// kept, moved (back to an intact ancestor), lost (nothing intact to point at),
    /// recovered (a lost-and-found tip).
    pub action: String,
}

/// One pack file as found on disk (or a pack a writer set aside, `aside`).
struct Scanned {
    kind: PackKind,
    id: u32,
    path: PathBuf,
    bytes: Vec<u8>,
    magic_ok: bool,
    good: Vec<Good>,
    bad: Vec<Bad>,
    /// A file in `set-aside/`: none of its records is history; each intact one that no
    /// pack holds is re-attached.
    aside: bool,
}

fn io(path: &Path, e: std::io::Error) -> LedgerError {
    LedgerError::Store(ledger_store::StoreError::Io {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}

/// An event found intact, in final storage order.
struct Node {
    parent: Option<Hash>,
    /// Lies beyond the restored snapshot's committed lengths (committed after it).
    newer: bool,
}

/// What `REFS` holds, read record by record.
struct RefsFound {
    /// The newest intact record (empty when there is none).
    snapshot: Refs,
    /// What damaged records newer than the snapshot (and a torn tail) still say, newest
    /// first.
    legible: Vec<Legible>,
    /// Every intact record, newest first (older heads of each branch: the reflog).
    reflog: Vec<Refs>,
    outcome: RefsOutcome,
}

fn read_refs(dir: &Path) -> Result<RefsFound, LedgerError> {
    let refs_path = refs::path(dir);
    let bytes = match std::fs::read(&refs_path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(io(&refs_path, e)),
    };
    let spans = refs::records(&bytes);
    let parsed: Vec<Option<Refs>> = spans
        .iter()
        .map(|&(s, e)| Refs::parse(dir, &bytes[s..e]).ok())
        .collect();
    let newest_intact = parsed.iter().rposition(Option::is_some);
    // A file shorter than it is always written was cut: its newest records may be gone.
    let newest_damaged = parsed.last().is_none_or(Option::is_none)
        || (bytes.len() as u64) < refs::COMPACT_BYTES
        || Refs::parse_log(dir, &bytes).is_err();
    let after_last = spans.last().map_or(0, |s| s.1);
    // Records writers cut short and set aside, newest first, after those in the file.
    let aside_tails: Vec<Legible> = ledger_store::aside::list(dir)?
        .into_iter()
        .rev()
        .filter(|e| e.kind.is_none())
        .filter_map(|e| std::fs::read(&e.path).ok())
        .map(|b| Legible::read(&b))
        .collect();
    let legible = std::iter::once(Legible::read(&bytes[after_last..]))
        .chain(
            (newest_intact.map_or(0, |i| i + 1)..spans.len())
                .rev()
                .map(|i| Legible::read(&bytes[spans[i].0..spans[i].1])),
        )
        .chain(aside_tails)
        .collect();
    Ok(RefsFound {
        snapshot: newest_intact
            .and_then(|i| parsed[i].clone())
            .unwrap_or_default(),
        legible,
        outcome: RefsOutcome {
            records: spans.len(),
            damaged_records: (0..spans.len())
                .filter(|&i| parsed[i].is_none())
                .map(|i| i + 1)
                .collect(),
            restored_record: newest_intact.filter(|_| newest_damaged).map(|i| i + 1),
            newest_damaged,
        },
        reflog: parsed.into_iter().rev().flatten().collect(),
    })
}

/// Every pack file of the ledger, read and scanned.
fn scan_packs(dir: &Path) -> Result<Vec<Scanned>, LedgerError> {
    let packs_dir = dir.join("packs");
    let mut scanned = Vec::new();
    for kind in [PackKind::Events, PackKind::Blobs] {
        for id in pack_files(&packs_dir, kind)? {
            let path = kind_path(&packs_dir, kind, id);
            let bytes = std::fs::read(&path).map_err(|e| io(&path, e))?;
            let magic = match kind {
                PackKind::Events => &pack::PACK_MAGIC[..],
                PackKind::Blobs => &pack::BLOB_PACK_MAGIC[..],
            };
            let magic_ok = bytes.get(..magic.len()) == Some(magic);
            let (good, bad) = scan(kind, &bytes);
            scanned.push(Scanned {
                kind,
                id,
                path,
                bytes,
                magic_ok,
                good,
                bad,
                aside: false,
            });
        }
    }
    // What writers set aside, after every pack (its records continue their history).
    for e in ledger_store::aside::list(dir)? {
        let Some(kind) = e.kind else { continue };
        let bytes = std::fs::read(&e.path).map_err(|x| io(&e.path, x))?;
        let (good, bad) = scan(kind, &bytes);
        scanned.push(Scanned {
            kind,
            id: 0,
            path: e.path,
            magic_ok: bytes.get(..8) == Some(&kind.magic()[..]),
            bytes,
            good,
            bad,
            aside: true,
        });
    }
    Ok(scanned)
}

/// Rehash every loose blob file: the intact ones, and the damaged ones with their paths.
#[allow(clippy::type_complexity)]
fn check_loose_blobs(dir: &Path) -> Result<(BTreeSet<Hash>, Vec<(Hash, PathBuf)>), LedgerError> {
    let blobs_dir = dir.join("blobs");
    let (mut intact, mut damaged) = (BTreeSet::new(), Vec::new());
    let Ok(rd) = std::fs::read_dir(&blobs_dir) else {
        return Ok((intact, damaged));
    };
    let mut subdirs: Vec<PathBuf> = rd.flatten().map(|e| e.path()).collect();
    subdirs.sort();
    for sub in subdirs.into_iter().filter(|p| p.is_dir()) {
        let prefix = sub
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut files: Vec<PathBuf> = std::fs::read_dir(&sub)
            .map_err(|e| io(&sub, e))?
            .flatten()
            .map(|e| e.path())
            .collect();
        files.sort();
        for f in files {
            let name = f
                .file_name()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            let Some(h) = Hash::from_hex(&format!("{prefix}{name}")) else {
                continue; // a temporary file
            };
            let bytes = std::fs::read(&f).map_err(|e| io(&f, e))?;
            if Hash::of_blob(&bytes) == h {
                intact.insert(h);
            } else {
                damaged.push((h, f));
            }
        }
    }
    Ok((intact, damaged))
}

/// What the write phase of `recover` changes on disk.
struct Rewrite<'a> {
    scanned: &'a [Scanned],
    /// Intact frames that move into a new pack of their kind.
    to_write: &'a [(PackKind, Vec<(usize, Good)>)],
    damaged_files: &'a [PathBuf],
    bad_blob_files: &'a [(Hash, PathBuf)],
}

/// The write phase, in an order a kill at any instant survives: copies of everything
/// damaged (and REFS) into `damaged/<n>/`, damaged blob files moved there, new packs for
/// moved frames (unlisted until REFS names them), `LOST`, then the one rename of REFS.
fn write_recovery(
    dir: &Path,
    report: &mut RecoverReport,
    w: &Rewrite<'_>,
    mut new_refs: Refs,
) -> Result<(), LedgerError> {
    let refs_path = refs::path(dir);
    let packs_dir = dir.join("packs");
    let (scanned, to_write, damaged_files, bad_blob_files) =
        (w.scanned, w.to_write, w.damaged_files, w.bad_blob_files);
    // Copies first: nothing damaged is ever deleted.
    let damaged_root = dir.join(DAMAGED_DIR);
    std::fs::create_dir_all(&damaged_root).map_err(|e| io(&damaged_root, e))?;
    let mut n = 1;
    while damaged_root.join(n.to_string()).exists() {
        n += 1;
    }
    let copy_dir = damaged_root.join(n.to_string());
    std::fs::create_dir(&copy_dir).map_err(|e| io(&copy_dir, e))?;
    report.damaged_copy = Some(copy_dir.display().to_string());
    let copy = |from: &Path| -> Result<(), LedgerError> {
        let to = copy_dir.join(from.file_name().unwrap_or_default());
        std::fs::copy(from, &to).map_err(|e| io(&to, e))?;
        std::fs::File::open(&to)
            .and_then(|f| f.sync_all())
            .map_err(|e| io(&to, e))
    };
    if refs_path.is_file() {
        copy(&refs_path)?;
    }
    for f in damaged_files {
        copy(f)?;
    }
    if !bad_blob_files.is_empty() {
        let bd = copy_dir.join("blobs");
        std::fs::create_dir(&bd).map_err(|e| io(&bd, e))?;
        for (h, f) in bad_blob_files {
            let to = bd.join(h.to_hex());
            std::fs::rename(f, &to).map_err(|e| io(f, e))?;
            report.moved_blob_files.push(f.display().to_string());
        }
        sync_dir(&bd)?;
    }
    sync_dir(&copy_dir)?;
    sync_dir(&damaged_root)?;
    sync_dir(dir)?;

    // New packs for the frames that move (unlisted until REFS names them).
    for (kind, frames) in to_write {
        let next_id = scanned
            .iter()
            .filter(|s| s.kind == *kind)
            .map(|s| s.id)
            .max()
            .unwrap_or(0)
            + 1;
        let mut p = Pack::create(&packs_dir, *kind, next_id)?;
        let mut buf = Vec::new();
        for (si, g) in frames {
            buf.extend_from_slice(
                &scanned[*si].bytes[g.offset as usize..(g.offset + g.len) as usize],
            );
        }
        p.write(&buf)?;
        let end = p.sync()?;
        match kind {
            PackKind::Events => new_refs.packs.push((next_id, end)),
            PackKind::Blobs => new_refs.blob_packs.push((next_id, end)),
        }
        report.packs.push(PackOutcome {
            file: p.path.display().to_string(),
            committed_before: None,
            committed_after: Some(end),
            damaged: Vec::new(),
            moved_frames: frames.len(),
            created: true,
        });
    }
    // What was lost, for verify (a known loss is a warning, not a failure).
    if !report.lost_events.is_empty() || !report.lost_blobs.is_empty() {
        use std::io::Write;
        let lost_path = dir.join(LOST_FILE);
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&lost_path)
            .map_err(|e| io(&lost_path, e))?;
        let mut text = String::new();
        for h in &report.lost_events {
            text.push_str(&format!("event {} recover {n}\n", h.to_hex()));
        }
        for h in &report.lost_blobs {
            text.push_str(&format!("blob {} recover {n}\n", h.to_hex()));
        }
        f.write_all(text.as_bytes())
            .and_then(|_| f.sync_all())
            .map_err(|e| io(&lost_path, e))?;
    }
    let json = serde_json::to_vec_pretty(&report).unwrap_or_default();
    let rp = copy_dir.join("report.json");
    std::fs::write(&rp, json).map_err(|e| io(&rp, e))?;
    // The one step that changes history: REFS becomes one intact record.
    Ok(refs::replace(dir, &new_refs)?)
}

/// What the pack phase decided for every pack, and what its scan learned about events.
struct PackPlan {
    /// Event packs listed after the run, with their committed lengths.
    new_packs: Vec<(u32, u64)>,
    /// Blob packs listed after the run, with their committed lengths.
    new_blob_packs: Vec<(u32, u64)>,
    /// Intact frames that leave their pack, by kind (`PackKind as u8`): (scanned index,
    /// frame), before deduplication.
    moved: BTreeMap<u8, Vec<(usize, Good)>>,
    /// Files with damage inside what was committed.
    damaged_files: Vec<PathBuf>,
    /// Events whose records lay in damaged bytes (ids from their headers so far).
    lost_events: BTreeSet<Hash>,
    /// Every intact event in scan order: (id, scanned index, offset).
    order: Vec<(Hash, usize, u64)>,
    /// Intact events that lie beyond the snapshot's committed lengths.
    newer: BTreeSet<Hash>,
    /// The parent field of each damaged event record whose header still reads.
    claimed_parent: BTreeMap<Hash, Hash>,
    /// Damaged spans `(offset, length)` of each event pack, by id.
    damaged_spans: BTreeMap<u32, Vec<(u64, u64)>>,
    /// The scanned file of each pack outcome pushed.
    outcome_of: Vec<usize>,
}

/// Decide, pack by pack, the committed limit, the intact prefix kept in place and the
/// frames moved into a new pack (every frame of an event pack after one that moves,
/// so parents still precede children); push an outcome for each pack that changes.
fn plan_packs(scanned: &[Scanned], found: &RefsFound, outcomes: &mut Vec<PackOutcome>) -> PackPlan {
    let (snapshot, newest_damaged) = (&found.snapshot, found.outcome.newest_damaged);
    let reflog = &found.reflog;
    let listed = |kind: PackKind, id: u32| -> Option<u64> {
        let l = match kind {
            PackKind::Events => &snapshot.packs,
            PackKind::Blobs => &snapshot.blob_packs,
        };
        l.iter().find(|&&(i, _)| i == id).map(|&(_, n)| n)
    };
    // Per pack: the committed limit, the intact prefix kept in place, the frames moved.
    let mut new_packs: Vec<(u32, u64)> = Vec::new();
    let mut new_blob_packs: Vec<(u32, u64)> = Vec::new();
    let mut moved: BTreeMap<u8, Vec<(usize, Good)>> = BTreeMap::new(); // kind -> frames
    let mut damaged_files: Vec<PathBuf> = Vec::new();
    let mut lost_events: BTreeSet<Hash> = BTreeSet::new();
    // Every intact event in final storage order, and which are newer than the snapshot.
    let mut order: Vec<(Hash, usize, u64)> = Vec::new(); // (id, scanned index, offset)
    let mut newer: BTreeSet<Hash> = BTreeSet::new();
    let mut moving_events = false;
    let mut claimed_parent: BTreeMap<Hash, Hash> = BTreeMap::new();
    let mut damaged_spans: BTreeMap<u32, Vec<(u64, u64)>> = BTreeMap::new();
    // The scanned file of each pack outcome.
    let mut outcome_of: Vec<usize> = Vec::new();
    for (si, s) in scanned.iter().enumerate() {
        let before = listed(s.kind, s.id).filter(|_| !s.aside);
        // What was committed: the snapshot's length; when REFS was damaged, the whole
        // file (what the lost records committed after the snapshot is in it, and a
        // damaged record's lengths are not trusted). Intact records past it (a crash
        // before the commit, or a damaged last record that reads like one), in a pack
        // no commit reached, or set aside by a writer, are not history but are
        // re-attached below: nothing intact is left behind.
        let limit = if s.aside {
            0
        } else if newest_damaged {
            (s.bytes.len() as u64).max(before.unwrap_or(0))
        } else {
            match before {
                Some(n) => n,
                // A pack a commit dropped (gc's old packs): its records are garbage.
                None if dropped_by_commit(snapshot, reflog, s.kind, s.id) => continue,
                None => 0,
            }
        };
        let kind_key = s.kind as u8;
        let in_limit = |g: &Good| g.offset + g.len <= limit;
        // Damage inside what was committed (a file shorter than its committed length
        // lost the bytes after its end).
        let mut damage: Vec<(u64, u64)> = s
            .bad
            .iter()
            .filter(|b| b.offset < limit)
            .map(|b| (b.offset, b.end.min(limit) - b.offset))
            .collect();
        if (s.bytes.len() as u64) < limit {
            damage.push((s.bytes.len() as u64, limit - s.bytes.len() as u64));
        }
        if !s.magic_ok {
            damage.insert(0, (0, pack::PACK_MAGIC.len() as u64));
        }
        for b in s.bad.iter().filter(|b| b.offset < limit) {
            if let Some(h) = b.claimed {
                match s.kind {
                    PackKind::Events => {
                        lost_events.insert(h);
                        // The damaged record's own parent field, when its header reads.
                        let parent = parse_frame(&s.bytes, b.offset as usize)
                            .ok()
                            .and_then(|f| codec::event_parent(f.event).ok().flatten());
                        if let Some(p) = parent {
                            claimed_parent.insert(h, p);
                        }
                    }
                    // A damaged small blob that a kept event names is listed below.
                    PackKind::Blobs => {}
                }
            }
        }
        let first_damage = damage.iter().map(|d| d.0).min();
        let move_all = s.kind == PackKind::Events && moving_events;
        let keep_end = if move_all || !s.magic_ok || before.is_none() && !newest_damaged {
            None
        } else {
            let cut = first_damage.unwrap_or(u64::MAX);
            Some(
                s.good
                    .iter()
                    .take_while(|g| g.offset < cut && in_limit(g))
                    .last()
                    .map_or(pack::PACK_MAGIC.len() as u64, |g| g.offset + g.len),
            )
        };
        let mut moved_here = 0;
        for g in &s.good {
            let stays = keep_end.is_some_and(|e| g.offset + g.len <= e);
            if s.kind == PackKind::Events {
                order.push((g.hash, si, g.offset));
                if before.is_none_or(|b| g.offset >= b) {
                    newer.insert(g.hash);
                }
            }
            if !stays {
                moved.entry(kind_key).or_default().push((si, g.clone()));
                moved_here += 1;
            }
        }
        if moved_here > 0 && s.kind == PackKind::Events {
            // Later event packs move too, so that parents still precede children.
            moving_events = true;
        }
        if let Some(e) = keep_end {
            match s.kind {
                PackKind::Events => new_packs.push((s.id, e)),
                PackKind::Blobs => new_blob_packs.push((s.id, e)),
            }
        }
        let changed = keep_end != before || !damage.is_empty() || moved_here > 0;
        if !damage.is_empty() {
            damaged_files.push(s.path.clone());
            if s.kind == PackKind::Events {
                damaged_spans.insert(s.id, damage.clone());
            }
        }
        if changed {
            outcome_of.push(si);
            outcomes.push(PackOutcome {
                file: s.path.display().to_string(),
                committed_before: before,
                committed_after: keep_end,
                damaged: damage,
                moved_frames: moved_here,
                created: false,
            });
        }
    }
    PackPlan {
        new_packs,
        new_blob_packs,
        moved,
        damaged_files,
        lost_events,
        order,
        newer,
        claimed_parent,
        damaged_spans,
        outcome_of,
    }
}

/// The frames that really move, and where events lie once they have.
struct Moves {
    /// Frames for a new pack of each kind: (scanned index, frame).
    to_write: Vec<(PackKind, Vec<(usize, Good)>)>,
    /// Storage order of events after the move: what stays, then the new pack's frames.
    new_event_order: Vec<Hash>,
}

/// Deduplicate the moved frames against what stays (a recover killed after making its
/// pack, run again, finds them twice) and against each other, and decide the storage
/// order of events after the move.
fn plan_moves(scanned: &[Scanned], plan: &mut PackPlan) -> Moves {
    let (new_packs, new_blob_packs) = (&plan.new_packs, &plan.new_blob_packs);
    let staying: BTreeSet<(u8, Hash)> = scanned
        .iter()
        .flat_map(|s| {
            let end = match s.kind {
                PackKind::Events => new_packs.iter(),
                PackKind::Blobs => new_blob_packs.iter(),
            }
            .find(|&&(i, _)| i == s.id && !s.aside)
            .map(|&(_, e)| e);
            s.good
                .iter()
                .filter(move |g| end.is_some_and(|e| g.offset + g.len <= e))
                .map(move |g| (s.kind as u8, g.hash))
        })
        .collect();
    let mut to_write: Vec<(PackKind, Vec<(usize, Good)>)> = Vec::new();
    for kind in [PackKind::Events, PackKind::Blobs] {
        let mut seen = BTreeSet::new();
        let frames: Vec<(usize, Good)> = plan
            .moved
            .remove(&(kind as u8))
            .unwrap_or_default()
            .into_iter()
            .filter(|(_, g)| !staying.contains(&(kind as u8, g.hash)) && seen.insert(g.hash))
            .collect();
        if !frames.is_empty() {
            to_write.push((kind, frames));
        }
    }
    // Storage order of events after the move: what stays, then the new pack's frames.
    let new_event_order: Vec<Hash> = {
        let stays: Vec<Hash> = plan
            .order
            .iter()
            .filter(|(h, _, _)| staying.contains(&(PackKind::Events as u8, *h)))
            .map(|x| x.0)
            .collect();
        let moved_ev = to_write
            .iter()
            .filter(|(k, _)| *k == PackKind::Events)
            .flat_map(|(_, f)| f.iter().map(|(_, g)| g.hash));
        let mut seen = BTreeSet::new();
        stays
            .into_iter()
            .chain(moved_ev)
            .filter(|h| seen.insert(*h))
            .collect()
    };
    Moves {
        to_write,
        new_event_order,
    }
}

/// The saved index, when its checks pass (none otherwise). It names the events whose
/// records lay in the damaged spans (their headers may be gone): they are added to
/// `lost_events`.
fn load_saved_index(
    dir: &Path,
    damaged_spans: &BTreeMap<u32, Vec<(u64, u64)>>,
    lost_events: &mut BTreeSet<Hash>,
) -> Option<Index> {
    let (saved, _) = Index::load(dir, |_| true);
    let saved = saved.check_saved().is_ok().then_some(saved);
    if let Some(saved) = &saved {
        for pos in 0..saved.saved_len() as u32 {
            let e = saved.entry(pos);
            let hit = damaged_spans.get(&e.pack).is_some_and(|spans| {
                spans
                    .iter()
                    .any(|&(o, n)| e.offset >= o && e.offset < o.saturating_add(n))
            });
            if hit {
                lost_events.insert(saved.hash_at(pos));
            }
        }
    }
    saved
}

/// The intact events after the move, linked: each one's parent, whether its chain
/// reaches a root, and its children in storage order.
struct EventGraph<'a> {
    nodes: BTreeMap<Hash, Node>,
    /// Whether each event's chain of parents reaches a root.
    chain_ok: BTreeMap<Hash, bool>,
    /// Each event's intact children, in storage order.
    children: BTreeMap<Hash, Vec<Hash>>,
    /// Where each event's first intact frame lies: (scanned index, offset).
    locate: BTreeMap<Hash, (usize, u64)>,
    scanned: &'a [Scanned],
}

impl<'a> EventGraph<'a> {
    /// Link the events of `order` (storage order after the move): an event's chain is
    /// whole when it has no parent, or its parent came before it with a whole chain.
    fn build(scanned: &'a [Scanned], plan: &PackPlan, order: &[Hash]) -> Self {
        let locate: BTreeMap<Hash, (usize, u64)> = plan
            .order
            .iter()
            .rev()
            .map(|&(h, si, off)| (h, (si, off)))
            .collect();
        let mut g = EventGraph {
            nodes: BTreeMap::new(),
            chain_ok: BTreeMap::new(),
            children: BTreeMap::new(),
            locate,
            scanned,
        };
        for h in order {
            let parent = g
                .event_bytes(h)
                .and_then(|b| codec::event_parent(b).ok().flatten());
            let ok = match parent {
                None => true,
                Some(p) => g.chain_ok.get(&p).copied().unwrap_or(false),
            };
            g.chain_ok.insert(*h, ok);
            g.nodes.insert(
                *h,
                Node {
                    parent,
                    newer: plan.newer.contains(h),
                },
            );
        }
        for h in order {
            if let Some(p) = g.nodes[h].parent {
                g.children.entry(p).or_default().push(*h);
            }
        }
        g
    }

    /// The record of an intact event, from its first intact frame.
    fn event_bytes(&self, h: &Hash) -> Option<&'a [u8]> {
        let scanned = self.scanned;
        self.locate.get(h).and_then(|&(si, off)| {
            parse_frame(&scanned[si].bytes, off as usize)
                .ok()
                .map(|f| f.event)
        })
    }

    /// Whether the event is intact and its whole history too.
    fn ok(&self, h: &Hash) -> bool {
        self.chain_ok.get(h).copied().unwrap_or(false)
    }

    /// The event and its ancestors, newest first, as far as they are intact.
    fn ancestry(&self, from: &Hash) -> Vec<Hash> {
        let mut out = Vec::new();
        let mut at = Some(*from);
        while let Some(h) = at {
            match self.nodes.get(&h) {
                Some(n) => {
                    out.push(h);
                    at = n.parent;
                }
                None => break,
            }
        }
        out
    }

    /// Every event the heads of `branches` reach.
    fn reachable(&self, branches: &BTreeMap<String, Hash>) -> BTreeSet<Hash> {
        branches.values().flat_map(|h| self.ancestry(h)).collect()
    }
}

/// Moved events whose history is broken cannot be history again: they stay only in the
/// damaged copy (and the report names those a ref reached). Each file's outcome then
/// counts the frames that really move (not those another copy already holds); a file
/// nothing happens to is left out.
fn trim_moves(
    graph: &EventGraph<'_>,
    moves: &mut Moves,
    outcome_of: &[usize],
    packs: &mut Vec<PackOutcome>,
) {
    let to_write = &mut moves.to_write;
    for (kind, frames) in to_write.iter_mut() {
        if *kind == PackKind::Events {
            frames.retain(|(_, g)| graph.ok(&g.hash));
        }
    }
    to_write.retain(|(_, f)| !f.is_empty());
    let mut moving: BTreeMap<usize, usize> = BTreeMap::new();
    for (_, frames) in to_write.iter() {
        for (si, _) in frames {
            *moving.entry(*si).or_default() += 1;
        }
    }
    let mut keep_outcome = Vec::new();
    for (o, &si) in packs.iter_mut().zip(outcome_of) {
        o.moved_frames = moving.get(&si).copied().unwrap_or(0);
        keep_outcome.push(
            o.committed_before != o.committed_after || !o.damaged.is_empty() || o.moved_frames > 0,
        );
    }
    let mut keep_outcome = keep_outcome.into_iter();
    packs.retain(|_| keep_outcome.next().unwrap_or(true));
}

/// Where the branches point after the run.
struct Placed {
    branches: BTreeMap<String, Hash>,
    /// One outcome a branch, in the order decided.
    outcomes: Vec<BranchOutcome>,
    /// Intact events walked past because their history is broken.
    cut_off: BTreeSet<Hash>,
}

/// Place each branch of the snapshot: kept when its history is whole; else moved back to
/// its newest intact ancestor (from the saved index; else the lost record's parent
/// field, or an older head of this branch, then forward along the only intact child no
/// other branch owns, by `plan`'s claimed parents and the reflog); else lost. The intact
/// events walked past are cut off, and the first missing one joins `plan`'s lost events.
fn place_branches(
    found: &RefsFound,
    graph: &EventGraph<'_>,
    saved: Option<&Index>,
    plan: &mut PackPlan,
) -> Placed {
    let (claimed_parent, lost_events) = (&plan.claimed_parent, &mut plan.lost_events);
    let (snapshot, reflog) = (&found.snapshot, &found.reflog);
    let mut branches: BTreeMap<String, Hash> = BTreeMap::new();
    let mut outcomes: Vec<BranchOutcome> = Vec::new();
    let mut cut_off: BTreeSet<Hash> = BTreeSet::new();
    let whole: BTreeMap<String, Hash> = snapshot
        .branches
        .iter()
        .filter(|(_, h)| graph.ok(h))
        .map(|(n, h)| (n.clone(), *h))
        .collect();
    let owned: BTreeSet<Hash> = whole.values().flat_map(|h| graph.ancestry(h)).collect();
    for (name, head) in &snapshot.branches {
        if graph.ok(head) {
            branches.insert(name.clone(), *head);
            outcomes.push(BranchOutcome {
                name: name.clone(),
                before: Some(*head),
                after: Some(*head),
                action: "kept".into(),
            });
            continue;
        }
        // Walk back from the head to the first link into missing history.
        let mut gap = *head;
        let mut walked = Vec::new();
        while let Some(n) = graph.nodes.get(&gap) {
            walked.push(gap);
            match n.parent {
                Some(p) => gap = p,
                None => break,
            }
        }
        cut_off.extend(walked.iter().copied());
        lost_events.insert(gap);
        // The newest intact ancestor. Exactly, from the saved index, which holds every
        // event's parent (lost ones included); else the lost record's own parent field,
        // or an older head of this branch, then forward along the only intact child no
        // other branch owns.
        if let Some(s) =
            saved.and_then(|ix| saved_ancestor(ix, &gap, graph, &mut cut_off, lost_events))
        {
            branches.insert(name.clone(), s);
            outcomes.push(BranchOutcome {
                name: name.clone(),
                before: Some(*head),
                after: Some(s),
                action: "moved".into(),
            });
            continue;
        }
        let mut start = claimed_parent
            .get(&gap)
            .copied()
            .filter(|h| graph.ok(h))
            .or_else(|| {
                reflog
                    .iter()
                    .filter_map(|r| r.branches.get(name))
                    .find(|h| graph.ok(h) && !walked.contains(h))
                    .copied()
            });
        if let Some(mut s) = start {
            loop {
                let next: Vec<Hash> = graph
                    .children
                    .get(&s)
                    .into_iter()
                    .flatten()
                    .filter(|c| graph.ok(c) && !owned.contains(c))
                    .copied()
                    .collect();
                match next.as_slice() {
                    [only] => s = *only,
                    _ => break,
                }
            }
            start = Some(s);
        }
        match start {
            Some(s) => {
                branches.insert(name.clone(), s);
                outcomes.push(BranchOutcome {
                    name: name.clone(),
                    before: Some(*head),
                    after: Some(s),
                    action: "moved".into(),
                });
            }
            None => outcomes.push(BranchOutcome {
                name: name.clone(),
                before: Some(*head),
                after: None,
                action: "lost".into(),
            }),
        }
    }
    Placed {
        branches,
        outcomes,
        cut_off,
    }
}

/// The newest intact ancestor of `gap` by the saved index (none when the index does not
/// hold it or the chain ends first). Each event passed on the way is cut off when
/// intact, else lost.
fn saved_ancestor(
    ix: &Index,
    gap: &Hash,
    graph: &EventGraph<'_>,
    cut_off: &mut BTreeSet<Hash>,
    lost_events: &mut BTreeSet<Hash>,
) -> Option<Hash> {
    let mut pos = ix.position(gap)?;
    loop {
        let h = ix.hash_at(pos);
        if graph.ok(&h) {
            return Some(h);
        }
        if graph.nodes.contains_key(&h) {
            cut_off.insert(h);
        } else {
            lost_events.insert(h);
        }
        match ix.entry(pos).parent {
            NO_PARENT | MISSING_PARENT => return None,
            p => pos = p,
        }
    }
}

/// Lost and found: each intact tip committed after the snapshot that no branch reaches
/// (in storage order) becomes a branch `recovered/...` (see [`tip_name`]). Events the
/// branches placed so far reach are no longer cut off.
fn recover_tips(found: &RefsFound, graph: &EventGraph<'_>, order: &[Hash], placed: &mut Placed) {
    let reachable = graph.reachable(&placed.branches);
    placed.cut_off.retain(|h| !reachable.contains(h));
    let tips: Vec<Hash> = order
        .iter()
        .filter(|h| {
            graph.nodes[*h].newer
                && graph.ok(h)
                && !reachable.contains(*h)
                && !graph
                    .children
                    .get(*h)
                    .is_some_and(|c| c.iter().any(|c| graph.ok(c)))
        })
        .copied()
        .collect();
    for &tip in &tips {
        let name = tip_name(found, graph, &tip, &tips, &placed.branches);
        placed.branches.insert(name.clone(), tip);
        placed.outcomes.push(BranchOutcome {
            name,
            before: None,
            after: Some(tip),
            action: "recovered".into(),
        });
    }
}

/// The branch a recovered tip becomes: `recovered/<n>`, with `n` the name a damaged
/// record gives the tip, else the branch an older record had at one of its ancestors,
/// else `main` when the snapshot had no branch and this is the only tip whose history
/// holds no fork; else `recovered/tip-<hash>`. A name taken or invalid gets a number.
fn tip_name(
    found: &RefsFound,
    graph: &EventGraph<'_>,
    tip: &Hash,
    tips: &[Hash],
    branches: &BTreeMap<String, Hash>,
) -> String {
    let tip = *tip;
    let anc = graph.ancestry(&tip);
    let named = found
        .legible
        .iter()
        .flat_map(|l| l.branches.iter())
        .find(|(_, h)| *h == tip)
        .map(|(n, _)| n.clone())
        .or_else(|| {
            anc.iter().find_map(|a| {
                found
                    .reflog
                    .iter()
                    .flat_map(|r| r.branches.iter())
                    .find(|(_, h)| *h == a)
                    .map(|(n, _)| n.clone())
            })
        });
    // With no record to go by: a tip whose history holds no fork event continues
    // genesis' branch, when it is the only one.
    let named = named.or_else(|| {
        let unforked = |t: &Hash| {
            !graph.ancestry(t).iter().any(|a| {
                graph
                    .event_bytes(a)
                    .and_then(|b| decode_event(b).ok())
                    .is_some_and(|e| matches!(e.body, super::event::EventBody::BranchForked(_)))
            })
        };
        (found.snapshot.branches.is_empty()
            && unforked(&tip)
            && tips.iter().filter(|t| unforked(t)).count() == 1)
            .then(|| refs::MAIN.to_string())
    });
    let base = match named {
        Some(n) => format!("recovered/{n}"),
        None => format!("recovered/tip-{}", tip.short()),
    };
    let mut name = base.clone();
    let mut k = 2;
    while branches.contains_key(&name) || refs::validate_branch(&name).is_err() {
        name = if refs::validate_branch(&base).is_err() {
            format!("recovered/tip-{}", tip.short())
        } else {
            format!("{base}-{k}")
        };
        k += 1;
    }
    name
}

/// Blobs the reachable events reference whose bytes are nowhere intact: neither a loose
/// file that rehashes (`loose`) nor a frame of a blob pack.
fn find_lost_blobs(
    scanned: &[Scanned],
    graph: &EventGraph<'_>,
    reachable: &BTreeSet<Hash>,
    loose: &BTreeSet<Hash>,
) -> Vec<Hash> {
    let small: BTreeSet<Hash> = scanned
        .iter()
        .filter(|s| s.kind == PackKind::Blobs)
        .flat_map(|s| s.good.iter().map(|g| g.hash))
        .collect();
    let mut referenced: BTreeSet<Hash> = BTreeSet::new();
    for h in reachable {
        if let Some(ev) = graph.event_bytes(h).and_then(|b| decode_event(b).ok()) {
            referenced.extend(ev.body.blobs());
        }
    }
    referenced
        .iter()
        .filter(|b| !loose.contains(b) && !small.contains(b))
        .copied()
        .collect()
}

/// Recover the ledger in `dir` (see the module doc). Errors only when it cannot work at
/// all (not a ledger, another writer, I/O); damage is what it handles.
pub fn recover(dir: &Path) -> Result<RecoverReport, LedgerError> {
    if !is_ledger(dir) {
        return Err(LedgerError::Store(ledger_store::StoreError::NotALedger {
            path: dir.to_path_buf(),
        }));
    }
    let lock = LedgerLock::acquire(dir, true)?;
    let mut report = RecoverReport::default();

    // 1. REFS: the newest intact record, and what newer damaged ones still say.
    let found = read_refs(dir)?;
    report.refs = found.outcome.clone();

    // 2. Packs: scan every file; decide each one's committed length and what moves, then
    // link the events as they will be stored and drop moved ones with broken history.
    let scanned = scan_packs(dir)?;
    let mut plan = plan_packs(&scanned, &found, &mut report.packs);
    let mut moves = plan_moves(&scanned, &mut plan);
    let saved = load_saved_index(dir, &plan.damaged_spans, &mut plan.lost_events);
    let graph = EventGraph::build(&scanned, &plan, &moves.new_event_order);
    trim_moves(&graph, &mut moves, &plan.outcome_of, &mut report.packs);

    // 4. Branches.
    let mut placed = place_branches(&found, &graph, saved.as_ref(), &mut plan);

    // 5. Lost and found: tips committed after the snapshot that no ref reaches.
    recover_tips(&found, &graph, &moves.new_event_order, &mut placed);
    let reachable = graph.reachable(&placed.branches);
    placed.cut_off.retain(|h| !reachable.contains(h));
    plan.lost_events.retain(|h| !reachable.contains(h));

    // 3. Loose blobs: rehash each file; blobs the kept events reference must exist.
    let (loose, bad_blob_files) = check_loose_blobs(dir)?;
    let lost_blobs = find_lost_blobs(&scanned, &graph, &reachable, &loose);

    // What changed in history.
    let new_refs = Refs {
        packs: plan.new_packs,
        blob_packs: plan.new_blob_packs,
        branches: placed.branches,
    };
    let refs_history_damaged = !report.refs.damaged_records.is_empty();
    report.changed = new_refs != found.snapshot
        || found.outcome.newest_damaged
        || refs_history_damaged
        || !moves.to_write.is_empty()
        || !bad_blob_files.is_empty()
        || !plan.damaged_files.is_empty();
    report.branches = placed.outcomes;
    report.lost_events = plan.lost_events.into_iter().collect();
    report.cut_off_events = placed.cut_off.into_iter().collect();
    report.lost_blobs = lost_blobs;

    if report.changed {
        let rewrite = Rewrite {
            scanned: &scanned,
            to_write: &moves.to_write,
            damaged_files: &plan.damaged_files,
            bad_blob_files: &bad_blob_files,
        };
        write_recovery(dir, &mut report, &rewrite, new_refs)?;
    }
    drop(saved);
    drop(lock);

    // Everything derived is remade from the recovered history.
    let mut l = Ledger::open_for_rebuild(dir)?;
    l.reindex()?;
    let r = l.rebuild()?;
    report.events = r.events;
    Ok(report)
}

/// The hashes `LOST` records as lost, by kind (`"event"`, `"blob"`).
pub fn read_lost(dir: &Path) -> BTreeMap<Hash, String> {
    let mut out = BTreeMap::new();
    if let Ok(text) = std::fs::read_to_string(dir.join(LOST_FILE)) {
        for line in text.lines() {
            let mut p = line.split(' ');
            if let (Some(kind), Some(h)) = (p.next(), p.next().and_then(Hash::from_hex)) {
                out.insert(h, kind.to_string());
            }
        }
    }
    out
}
