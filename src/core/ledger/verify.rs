//! `verify`: recompute every event id from its bytes, check every record checksum,
//! decoding, parent link and ref, and rehash every blob. The report lists problems
//! in storage order; the first names the first bad event, ref or blob.
use super::event::EventBody;
use super::hash::Hash;
use super::index::{Index, MISSING_PARENT, NO_PARENT};
use super::Ledger;
use rayon::prelude::*;
use serde::Serialize;
use std::time::Instant;

/// What verify says of a damaged `REFS`: the command that repairs it.
pub const RECOVER_HINT: &str =
    "`ledger recover` restores the newest intact snapshot and finds the branch tips after it";

/// One thing found wrong.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Problem {
    /// What is bad: `event <id> (<pack> offset N)`, `ref <name>`, `blob <id> (<path>)`.
    pub what: String,
    pub problem: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.what, self.problem)
    }
}

/// The outcome of [`Ledger::verify`].
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct Report {
    pub events: u64,
    pub event_bytes: u64,
    pub blobs: u64,
    pub blob_bytes: u64,
    pub branches: usize,
    pub seconds: f64,
    pub problems: Vec<Problem>,
    /// Damage that leaves history whole: a superseded `REFS` record that fails its check,
    /// blobs `ledger recover` recorded as lost (in `LOST`), intact records no committed
    /// pack holds (past a committed length, or set aside). Exit 0 unless `--strict`.
    pub warnings: Vec<Problem>,
}

impl Report {
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }

    pub fn first(&self) -> Option<&Problem> {
        self.problems.first()
    }

    /// The problem that fails `verify`: the first damage, else with `strict` the first
    /// warning.
    pub fn failure(&self, strict: bool) -> Option<&Problem> {
        self.first().or(self.warnings.first().filter(|_| strict))
    }

    /// Bytes hashed per second.
    pub fn bytes_per_second(&self) -> f64 {
        (self.event_bytes + self.blob_bytes) as f64 / self.seconds.max(1e-9)
    }
}

/// Below this many free bytes, [`verify_dir`] says the filesystem is (nearly) full.
const LOW_SPACE: u64 = 64 << 20;

/// `ledger verify` of the ledger at `dir`: [`Ledger::verify`] as a reader (blobs a
/// checkpoint references included), with the writer's projection cache checked when no
/// writer is using it (derived data, so damage there is a warning: the next writer's
/// open remakes it), and a warning when the filesystem is nearly full (a write that ran
/// out of space is not damage).
pub fn verify_dir(dir: &std::path::Path) -> Result<Report, super::LedgerError> {
    let l = Ledger::open_read_only(dir)?;
    let mut r = l.verify(&crate::record::checkpoint::referenced_blobs);
    drop(l);
    if let Some(ps) = Ledger::check_projection_cache(dir)? {
        r.warnings.extend(ps.into_iter().map(|p| Problem {
            problem: format!(
                "{} (derived data: the next writer's open sets it aside and remakes it)",
                p.problem
            ),
            what: p.what,
        }));
    }
    // A write that ran out of space leaves its uncommitted tail or nothing, which the
    // checks above tell from damaged history.
    if let Some(free) = super::free_space(dir) {
        if free < LOW_SPACE {
            r.warnings.push(Problem {
                what: format!("the filesystem holding {}", dir.display()),
                problem: format!(
                    "{free} bytes free: a write that ran out of space there recorded nothing it could not finish (free space, then run the command again); only BAD lines, if any, are damage"
                ),
            });
        }
    }
    Ok(r)
}

const CHUNK: usize = 1 << 15;

struct FrameCheck {
    problem: Option<String>,
    blobs: Vec<Hash>,
    /// This frame's term of the saved positions' pair digest (0 when not saved).
    digest: u64,
}

/// What the walk of the event packs found, for the phases after it.
struct Walk {
    events: u64,
    event_bytes: u64,
    /// (blob, the event naming it).
    referenced: Vec<(Hash, Hash)>,
    /// Digest of the saved positions met (see `index::pair_mix`).
    walked_digest: u64,
    /// Positions met in storage order.
    next_pos: u32,
    /// chain_ok[pos]: the parent chain reaches a root.
    chain_ok: Vec<bool>,
}

impl Ledger {
    /// Check the whole ledger. Never fails for damage (damage is in the report); only
    /// an I/O error reading sled ends it early. `blob_refs` names the blobs a blob's
    /// bytes reference (as for gc; `|_| Vec::new()` checks only what events name).
    /// The phases below run in this order; each adds what it finds.
    pub fn verify(&self, blob_refs: &(dyn Fn(&[u8]) -> Vec<Hash> + Sync)) -> Report {
        let t = Instant::now();
        let mut problems: Vec<Problem> = self
            .open_problems()
            .iter()
            .map(|p| Problem {
                what: p.what.clone(),
                problem: p.problem.clone(),
            })
            .collect();
        let mut warnings = Vec::new();
        let walk = self.verify_events(&mut problems);
        self.verify_saved_index(&walk, &mut problems);
        let branches = self.verify_branch_refs(&walk.chain_ok, &mut problems);
        self.verify_scratch(&mut warnings);
        self.verify_refs_log(&mut problems, &mut warnings);
        self.verify_unattached(&mut problems, &mut warnings);
        let (events, event_bytes) = (walk.events, walk.event_bytes);
        let (blobs, blob_bytes) =
            self.verify_blobs(walk.referenced, blob_refs, &mut problems, &mut warnings);
        self.verify_small_blobs(&mut problems);
        Report {
            events,
            event_bytes,
            blobs,
            blob_bytes,
            branches,
            seconds: t.elapsed().as_secs_f64(),
            problems,
            warnings,
        }
    }

    /// Phase 1: every event frame of every pack, in storage order and in parallel
    /// chunks: checksum, id, decoding, parent link, index position; the blobs events
    /// name; the parent chains that reach a root.
    fn verify_events(&self, problems: &mut Vec<Problem>) -> Walk {
        let index = self.index();
        let mut event_bytes = 0u64;
        let mut referenced: Vec<(Hash, Hash)> = Vec::new();
        let mut events = 0u64;
        let n = index.len();
        let saved_n = index.saved_len();
        // Digest of the saved positions met in the walk (see `index::pair_mix`).
        let mut walked_digest = 0u64;
        // chain_ok[pos]: the parent chain reaches a root (parents precede children).
        let mut chain_ok = vec![false; n];
        for pos in 0..n {
            let p = index.entry(pos as u32).parent;
            chain_ok[pos] = p == NO_PARENT || (p != MISSING_PARENT && chain_ok[p as usize]);
        }
        let mut next_pos = 0u32;
        for pack in self.packs() {
            event_bytes += pack.committed();
            // Frames in storage order are the index's positions in order; a frame that
            // is not (a duplicate of an earlier event) has no position of its own.
            // A frame that does not parse ends the pack's walk; opening reports it
            // unless a saved index spared the open its scan.
            let mut frame_error = None;
            let mut it = pack
                .frames()
                .filter_map(|(off, f)| match f {
                    Ok(f) => Some((off, f)),
                    Err(e) => {
                        frame_error = Some(Problem {
                            what: format!("record at {} offset {off}", pack.path.display()),
                            problem: e.to_string(),
                        });
                        None
                    }
                })
                .map(|(off, f)| {
                    let here = (next_pos as usize) < n && {
                        let e = index.entry(next_pos);
                        e.pack == pack.id && e.offset == off
                    };
                    let pos = here.then(|| {
                        next_pos += 1;
                        next_pos - 1
                    });
                    (off, f, pos)
                });
            // Checked in chunks so memory stays flat however large the pack.
            let mut frames: Vec<Walked<'_>> = Vec::with_capacity(CHUNK);
            let mut checks: Vec<FrameCheck> = Vec::with_capacity(CHUNK);
            loop {
                frames.clear();
                frames.extend(it.by_ref().take(CHUNK));
                if frames.is_empty() {
                    break;
                }
                events += frames.len() as u64;
                (0..frames.len())
                    .into_par_iter()
                    .with_min_len(1024)
                    .map(|i| check_frame(index, saved_n, &frames, i))
                    .collect_into_vec(&mut checks);
                for ((off, f, _), c) in frames.iter().zip(checks.drain(..)) {
                    if let Some(p) = c.problem {
                        let file = pack
                            .path
                            .file_name()
                            .map(|s| s.to_string_lossy().into_owned())
                            .unwrap_or_default();
                        problems.push(Problem {
                            what: format!("event {} ({file} offset {off})", f.hash.short()),
                            problem: p,
                        });
                    }
                    referenced.extend(c.blobs.into_iter().map(|b| (b, f.hash)));
                    walked_digest = walked_digest.wrapping_add(c.digest);
                }
            }
            drop(it);
            if let Some(p) = frame_error.filter(|p| !problems.contains(p)) {
                problems.push(p);
            }
        }

        Walk {
            events,
            event_bytes,
            referenced,
            walked_digest,
            next_pos,
            chain_ok,
        }
    }

    /// Phase 2: the saved index: whole and sorted, every entry met in the walk, and the
    /// id it holds for each position the one stored there.
    fn verify_saved_index(&self, walk: &Walk, problems: &mut Vec<Problem>) {
        let index = self.index();
        let (n, saved_n, next_pos) = (index.len(), index.saved_len(), walk.next_pos);
        let saved_digest = index.check_saved();
        for file in Index::unreadable_saved(self.dir()) {
            problems.push(Problem {
                what: file.display().to_string(),
                problem: "does not load (bad header, size or tables; the index is derived: `ledger rebuild` remakes it)".into(),
            });
        }
        if let Err((file, e)) = &saved_digest {
            problems.push(Problem {
                what: file.display().to_string(),
                problem: format!("{e} (the index is derived: `ledger rebuild` remakes it)"),
            });
        } else if next_pos as usize != n {
            problems.push(Problem {
                what: format!("index position {next_pos}"),
                problem: format!(
                    "does not name the record stored there ({}; the index is derived: `ledger rebuild` remakes it)",
                    index
                        .saved_paths()
                        .iter()
                        .map(|p| p.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            });
        } else if saved_digest != Ok(walk.walked_digest) {
            // Some saved position names another id than the frame stored there: find
            // the first (lookups one by one, only on this path).
            let bad = (0..saved_n as u32).find_map(|pos| {
                let e = index.entry(pos);
                let f = self.frame_at(e.pack, e.offset).ok()?;
                let held = index.hash_at(pos);
                (held != f.hash).then_some((pos, held, f.hash, e))
            });
            problems.push(match bad {
                Some((pos, held, stored, e)) => Problem {
                    what: format!("index position {pos}"),
                    problem: format!(
                        "holds id {} but pack {} offset {} stores {} (the index is derived: `ledger rebuild` remakes it)",
                        held.short(),
                        e.pack,
                        e.offset,
                        stored.short()
                    ),
                },
                None => Problem {
                    what: "index".into(),
                    problem: "its (position, id) digest does not match the stored frames (the index is derived: `ledger rebuild` remakes it)".into(),
                },
            });
        }
    }

    /// Phase 3: the refs (parsed and checked when the ledger opened): each points at a
    /// stored event whose chain reaches genesis. Returns the number of branches.
    fn verify_branch_refs(&self, chain_ok: &[bool], problems: &mut Vec<Problem>) -> usize {
        let index = self.index();
        let branches = self.refs().visible().count();
        if branches == 0 {
            problems.push(Problem {
                what: "refs".into(),
                problem: "no branches (no genesis)".into(),
            });
        }
        for (name, h) in &self.refs().branches {
            let what = format!("ref {name}");
            match index.position(h) {
                None => problems.push(Problem {
                    what,
                    problem: format!("points at unknown event {}", h.short()),
                }),
                Some(pos) => {
                    if !chain_ok[pos as usize] {
                        problems.push(Problem {
                            what,
                            problem: "history has a broken parent link".into(),
                        });
                    }
                }
            }
        }
        branches
    }

    /// Phase 3b: scratch refs (a replay's recomputation, which readers do not see). With
    /// no writer at work, one is a leftover of a killed command: a warning naming it and
    /// `gc`, which removes it with what only it reaches.
    fn verify_scratch(&self, warnings: &mut Vec<Problem>) {
        let running = Ledger::writer_active(self.dir());
        for (name, head) in self.refs().scratch() {
            warnings.push(Problem {
                what: format!("ref {name}"),
                problem: if running {
                    format!(
                        "scratch work at {} of a command writing this ledger now (a replay); it goes when that command ends",
                        head.short()
                    )
                } else {
                    format!(
                        "scratch work at {} left by a replay that was killed (no reader sees it); `ledger gc` removes it",
                        head.short()
                    )
                },
            });
        }
    }

    /// Phase 4: `REFS`' history: every record's check line, not only the last one's
    /// (which the open checked). A damaged superseded record loses nothing; it is a
    /// warning.
    fn verify_refs_log(&self, problems: &mut Vec<Problem>, warnings: &mut Vec<Problem>) {
        let mut superseded = Vec::new();
        let refs_path = super::refs::path(self.dir());
        if let Ok(bytes) = std::fs::read(&refs_path) {
            if (bytes.len() as u64) < super::refs::COMPACT_BYTES {
                problems.push(Problem {
                    what: refs_path.display().to_string(),
                    problem: format!(
                        "{}; {RECOVER_HINT}",
                        super::refs::short_file_problem(bytes.len())
                    ),
                });
            }
            let spans = super::refs::records(&bytes);
            for (i, &(s, e)) in spans.iter().enumerate().rev().skip(1) {
                if let Err(err) = super::refs::Refs::parse(self.dir(), &bytes[s..e]) {
                    let problem = match err {
                        ledger_store::StoreError::Corrupt { problem, .. }
                        | ledger_store::StoreError::Damaged { problem, .. } => problem,
                        e => e.to_string(),
                    };
                    superseded.push(Problem {
                        what: format!("{} record {} (offset {s})", refs_path.display(), i + 1),
                        problem: format!(
                            "superseded record damaged; the current one is intact: {problem}"
                        ),
                    });
                }
            }
            superseded.reverse();
        }
        warnings.extend(superseded);
    }

    /// Phase 5: intact records that are not history: past a pack's committed length, in
    /// a pack no commit reached, or set aside by a writer. A crash before a commit
    /// leaves them; so does a damaged last REFS record that reads like that crash, when
    /// they are committed history. Nothing is lost while they are there.
    fn verify_unattached(&self, problems: &mut Vec<Problem>, warnings: &mut Vec<Problem>) {
        match self.unattached() {
            Ok(found) => {
                for (path, n) in found {
                    warnings.push(Problem {
                        what: path.display().to_string(),
                        problem: format!(
                            "{n} intact record(s) that no committed pack holds (past the committed length: a crash before a commit, or a damaged last REFS record that reads as one); `ledger recover` re-attaches them as recovered/* branches"
                        ),
                    });
                }
            }
            Err(e) => problems.push(Problem {
                what: self.dir().display().to_string(),
                problem: ledger_store::Chain(&e).to_string(),
            }),
        }
    }

    /// Phase 6: blobs: every referenced one present and whole. A blob's bytes may name
    /// blobs too (a checkpoint its tokenizer and frozen base, through `blob_refs`, as gc
    /// follows them): those are checked in rounds, so verify and gc count the same
    /// blobs. A loss `recover` recorded is a warning. Returns (blobs, bytes).
    fn verify_blobs(
        &self,
        mut referenced: Vec<(Hash, Hash)>,
        blob_refs: &(dyn Fn(&[u8]) -> Vec<Hash> + Sync),
        problems: &mut Vec<Problem>,
        warnings: &mut Vec<Problem>,
    ) -> (u64, u64) {
        let lost = super::recover::read_lost(self.dir());
        referenced.sort();
        referenced.dedup_by(|a, b| a.0 == b.0);
        let store = self.blob_store();
        let mut seen: std::collections::BTreeSet<Hash> = referenced.iter().map(|r| r.0).collect();
        let mut round: Vec<(Hash, String)> = referenced
            .iter()
            .map(|(b, ev)| (*b, format!("event {}", ev.short())))
            .collect();
        let mut blob_bytes = 0;
        let mut blobs = 0u64;
        while !round.is_empty() {
            let checks: Vec<(Option<Problem>, u64, Vec<Hash>)> = round
                .par_iter()
                .map(|(b, by)| match store.get_raw(b) {
                    Err(e) => (
                        Some(Problem {
                            what: format!("blob {}", b.short()),
                            problem: e.to_string(),
                        }),
                        0,
                        Vec::new(),
                    ),
                    Ok(None) => (
                        Some(Problem {
                            what: format!("blob {} ({})", b.short(), store.describe(b)),
                            problem: format!("missing (referenced by {by})"),
                        }),
                        0,
                        Vec::new(),
                    ),
                    Ok(Some(bytes)) => {
                        let got = Hash::of_blob(&bytes);
                        let p = (got != *b).then(|| Problem {
                            what: format!("blob {} ({})", b.short(), store.describe(b)),
                            problem: format!(
                                "content ({} bytes) hashes to {} (altered or truncated; referenced by {by})",
                                bytes.len(),
                                got.short()
                            ),
                        });
                        let named = if p.is_none() { blob_refs(&bytes) } else { Vec::new() };
                        (p, bytes.len() as u64, named)
                    }
                })
                .collect();
            let mut next = Vec::new();
            for ((p, n, named), (b, _)) in checks.into_iter().zip(&round) {
                blob_bytes += n;
                blobs += 1;
                for h in named {
                    if seen.insert(h) {
                        next.push((h, format!("blob {}", b.short())));
                    }
                }
                match p {
                    // A loss `recover` recorded: known, named, and not a failure.
                    Some(p) if n == 0 && lost.contains_key(b) => warnings.push(Problem {
                        what: p.what,
                        problem: format!(
                            "lost to damage (recorded in {} by `ledger recover`; fetching it from a copy of the ledger restores it)",
                            super::recover::LOST_FILE
                        ),
                    }),
                    p => problems.extend(p),
                }
            }
            next.sort();
            round = next;
        }
        (blobs, blob_bytes)
    }

    /// Phase 7: every small blob, referenced or not: record checksum and content hash.
    fn verify_small_blobs(&self, problems: &mut Vec<Problem>) {
        let store = self.blob_store();
        for p in store.small_packs() {
            for (off, f) in p.frames() {
                let what =
                    |h: &Hash| format!("blob {} ({} offset {off})", h.short(), p.path.display());
                match f {
                    Err(_) => {} // reported when the ledger opened
                    Ok(f) => {
                        if !f.checksum_ok() {
                            problems.push(Problem {
                                what: what(&f.hash),
                                problem: "record checksum mismatch".into(),
                            });
                        } else if Hash::of_blob(f.event) != f.hash {
                            problems.push(Problem {
                                what: what(&f.hash),
                                problem: "content does not match its hash".into(),
                            });
                        }
                    }
                }
            }
        }
    }
}

/// A frame met in the walk: its offset, the frame, and the index position it holds
/// (`None` for a duplicate of an earlier event).
type Walked<'a> = (u64, super::pack::Frame<'a>, Option<u32>);

/// Everything checked of one frame alone: checksum, id, decoding, parent link, index
/// position (saved positions only contribute their digest term), blobs it names.
fn check_frame(index: &Index, saved_n: usize, frames: &[Walked<'_>], i: usize) -> FrameCheck {
    let (_, f, pos) = &frames[i];
    let mut c = FrameCheck {
        problem: None,
        blobs: Vec::new(),
        digest: 0,
    };
    if !f.checksum_ok() {
        c.problem = Some("record checksum mismatch".into());
    }
    match *pos {
        // Saved positions are checked all at once by their digest.
        Some(p) if (p as usize) < saved_n => {
            c.digest = super::index::pair_mix(p, &f.hash.0);
        }
        Some(p) if index.hash_at(p) != f.hash => {
            c.problem = Some(
                "the index holds another id at its position (the index is derived: `ledger rebuild` remakes it)"
                    .into(),
            );
        }
        _ => {}
    }
    // The id at a position: the frame before this one when it holds that position (a
    // parent usually directly precedes its child), else the index's.
    let id_at = |pp: u32| match i.checked_sub(1).map(|j| &frames[j]) {
        Some((_, prev, Some(q))) if *q == pp => prev.hash,
        _ => index.hash_at(pp),
    };
    let got = Hash::of_event(f.event);
    if got != f.hash {
        c.problem
            .get_or_insert(format!("content hashes to {} (bytes altered)", got.short()));
        return c;
    }
    match crate::record::event::decode_event(f.event) {
        Err(e) => {
            c.problem.get_or_insert(format!("does not decode: {e}"));
        }
        Ok(ev) => {
            let parent_pos = match pos {
                Some(p) => match index.entry(*p).parent {
                    NO_PARENT | MISSING_PARENT => None,
                    pp => Some(pp),
                },
                None => ev.parent.and_then(|p| index.position(&p)),
            };
            match ev.parent {
                None if !matches!(ev.body, EventBody::Genesis(_)) => {
                    c.problem
                        .get_or_insert("has no parent but is not a genesis event".into());
                }
                Some(p) => match parent_pos {
                    Some(pp) if id_at(pp) == p => {}
                    _ => {
                        c.problem
                            .get_or_insert(format!("parent {} is missing", p.short()));
                    }
                },
                None => {}
            }
            c.blobs = ev.body.blobs();
        }
    }
    if super::meta::Meta::decode(f.meta, "metadata").is_err() {
        c.problem.get_or_insert("metadata does not decode".into());
    }
    c
}
