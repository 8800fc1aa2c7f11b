//! Refs: the `REFS` file says what the ledger's history is: every branch's head event
//! and every pack's committed length. It is a log of whole snapshots, each a record:
//!
//! ```text
//! mapf-ledger refs 1
//! pack 1 1048576              event pack id, committed length
//! blobs 1 20480               small-blob pack id, committed length
//! ref main <64 hex>           branch, head event
//! check <64 hex>              blake3 of the record's lines above
//! ```
//!
//! The writer commits by appending one record and fsync'ing it (one sync per commit, as
//! a database's log); the last complete record is the truth. A record cut short by a
//! crash (or still being written while a reader reads) has no complete `check` line and
//! is ignored, so the record before it holds; a complete record whose check fails is
//! damage, reported. The file is written full size with zeros after its first record
//! ([`COMPACT_BYTES`]), so a commit overwrites bytes the file already has and its fsync
//! need not journal a new file size (appending made every fork 2-4x slower). When the
//! next record does not fit, the file is replaced by that one record (temporary file,
//! fsync, rename, fsync of the directory, as git replaces a ref through its lockfile).
//! A reader that reads the file once holds a consistent snapshot without any lock. A
//! fork is one new `ref` line: O(1), nothing copied.
use crate::hash::Hash;
use crate::pack::sync_dir;
use crate::{Repair, StoreError};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The default branch genesis is written to.
pub const MAIN: &str = "main";

/// Name of the refs file in a ledger directory.
pub const REFS_FILE: &str = "REFS";

const HEADER: &str = "mapf-ledger refs 1";

/// Size of a fresh refs file: its records are committed into this space; when the next
/// one does not fit, the file is replaced by that record (and zeros up to this size).
pub const COMPACT_BYTES: u64 = 1 << 20;

/// The first character of a scratch ref's name: `_replay-1-…`. A scratch ref holds the
/// work of a command in progress (a replay's recomputation) that no reader should see:
/// [`Refs::visible`] and every listing leave it out, and `gc` removes one a killed
/// command left behind. Users cannot name a branch this way.
pub const SCRATCH_PREFIX: char = '_';

/// Whether `name` is a scratch ref ([`SCRATCH_PREFIX`]).
pub fn is_scratch(name: &str) -> bool {
    name.starts_with(SCRATCH_PREFIX)
}

/// Check a branch name: 1..=100 chars of `[A-Za-z0-9._-]` in `/`-separated components
/// (fetched namespaces, `worker1/main`), no component empty or starting with `-`/`.`.
pub fn validate_branch(name: &str) -> Result<(), StoreError> {
    let ok = !name.is_empty()
        && name.len() <= 100
        && name.split('/').all(|c| {
            !c.is_empty()
                && !c.starts_with(['-', '.'])
                && c.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        });
    if ok {
        Ok(())
    } else {
        Err(StoreError::BadBranchName {
            name: name.to_string(),
        })
    }
}

/// One snapshot of the refs file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Refs {
    /// Event packs `(id, committed length)`, ids increasing.
    pub packs: Vec<(u32, u64)>,
    /// Small-blob packs `(id, committed length)`, ids increasing.
    pub blob_packs: Vec<(u32, u64)>,
    /// Branch -> head event.
    pub branches: BTreeMap<String, Hash>,
}

pub fn path(dir: &Path) -> PathBuf {
    dir.join(REFS_FILE)
}

fn corrupt(dir: &Path, problem: String) -> StoreError {
    StoreError::Damaged {
        what: path(dir).display().to_string(),
        problem,
        repair: Repair::Recover,
    }
}

impl Refs {
    /// The branches readers see: every ref but the scratch ones ([`is_scratch`]).
    pub fn visible(&self) -> impl Iterator<Item = (&String, &Hash)> {
        self.branches.iter().filter(|(n, _)| !is_scratch(n))
    }

    /// The scratch refs ([`is_scratch`]): work in progress, or left by a killed command.
    pub fn scratch(&self) -> impl Iterator<Item = (&String, &Hash)> {
        self.branches.iter().filter(|(n, _)| is_scratch(n))
    }

    /// The file's text.
    pub fn render(&self) -> String {
        let mut s = String::with_capacity(64 + 80 * self.branches.len());
        s.push_str(HEADER);
        s.push('\n');
        for (id, len) in &self.packs {
            s.push_str(&format!("pack {id} {len}\n"));
        }
        for (id, len) in &self.blob_packs {
            s.push_str(&format!("blobs {id} {len}\n"));
        }
        for (name, head) in &self.branches {
            s.push_str(&format!("ref {name} {}\n", head.to_hex()));
        }
        let check = blake3::hash(s.as_bytes()).to_hex();
        s.push_str(&format!("check {check}\n"));
        s
    }

    /// Parse the file's text; `dir` names the ledger in errors.
    pub fn parse(dir: &Path, text: &[u8]) -> Result<Refs, StoreError> {
        let text = std::str::from_utf8(text).map_err(|_| corrupt(dir, "not UTF-8 text".into()))?;
        let Some(body_end) = text.rfind("check ") else {
            return Err(corrupt(dir, "no check line (truncated?)".into()));
        };
        let (body, check) = text.split_at(body_end);
        let check = check.trim_end().strip_prefix("check ").unwrap_or("");
        if blake3::hash(body.as_bytes()).to_hex().as_str() != check {
            return Err(corrupt(
                dir,
                "check line does not match the contents (damaged)".into(),
            ));
        }
        let mut lines = body.lines().enumerate();
        match lines.next() {
            Some((_, HEADER)) => {}
            Some((_, other)) => {
                return Err(corrupt(dir, format!("unknown header `{other}`")));
            }
            None => return Err(corrupt(dir, "empty".into())),
        }
        let mut r = Refs::default();
        for (i, line) in lines {
            let bad = || corrupt(dir, format!("line {}: `{line}`", i + 1));
            let mut parts = line.split(' ');
            match (parts.next(), parts.next(), parts.next(), parts.next()) {
                (Some(kind @ ("pack" | "blobs")), Some(id), Some(len), None) => {
                    let id: u32 = id.parse().map_err(|_| bad())?;
                    let len: u64 = len.parse().map_err(|_| bad())?;
                    let list = if kind == "pack" {
                        &mut r.packs
                    } else {
                        &mut r.blob_packs
                    };
                    if list.last().is_some_and(|&(last, _)| last >= id) {
                        return Err(bad());
                    }
                    list.push((id, len));
                }
                (Some("ref"), Some(name), Some(head), None) => {
                    validate_branch(name).map_err(|_| bad())?;
                    let head = Hash::from_hex(head).ok_or_else(bad)?;
                    if r.branches.insert(name.to_string(), head).is_some() {
                        return Err(bad());
                    }
                }
                _ => return Err(bad()),
            }
        }
        Ok(r)
    }

    /// The last committed record of a refs log's bytes and the length of the file up
    /// to its end (what a writer keeps; a torn tail after it is cut).
    pub fn parse_log(dir: &Path, bytes: &[u8]) -> Result<(Refs, usize), StoreError> {
        let spans = records(bytes);
        if tail_is_damaged_record(&bytes[spans.last().map_or(0, |s| s.1)..]) {
            return Err(corrupt(
                dir,
                "the last record's check line is damaged (a whole record, not a torn write)".into(),
            ));
        }
        match spans.last().copied() {
            Some((s, e)) => Refs::parse(dir, &bytes[s..e]).map(|r| (r, e)),
            None => Err(corrupt(dir, "no complete record (truncated?)".into())),
        }
    }

    /// Read the refs file of ledger `dir` (None when there is none: an empty directory
    /// or a ledger of the older sled layout).
    pub fn read(dir: &Path) -> Result<Option<Refs>, StoreError> {
        let p = path(dir);
        match std::fs::read(&p) {
            Ok(b) => Refs::parse_log(dir, &b).map(|r| Some(r.0)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(StoreError::Io {
                path: p,
                message: e.to_string(),
            }),
        }
    }
}

/// Why a refs file shorter than [`COMPACT_BYTES`] is damage: every one is written at
/// least that long, so a shorter one was cut, and the records after the cut (the
/// newest commits) are gone from it though their events are in the packs.
pub fn short_file_problem(len: usize) -> String {
    format!(
        "the file has {len} bytes but is always written at least {COMPACT_BYTES} long: truncated (records after the cut are lost)"
    )
}

/// The records of a refs log's bytes, as `(start, end)`, in order: each runs from its
/// start to the end of its first whole `check <64 hex>` line. What follows the last one
/// is a torn or in-progress record (or the zeros a fresh file is padded with).
pub fn records(bytes: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut pos = 0;
    while let Some(end) = record_end(&bytes[pos..]) {
        out.push((pos, pos + end));
        pos += end;
    }
    out
}

/// Whether what follows the last complete record is a whole record whose check line was
/// damaged (so it no longer reads as one), rather than a write torn by a crash.
///
/// A torn write is a prefix of a record: it ends inside a line, after a whole `ref`
/// line, or (one byte short of whole) after a right check line with no newline. A whole
/// record ends with `\ncheck <64 hex>\n`; one damaged byte in the seven before the hex,
/// or in the final newline, leaves it ending in 64 hex digits (and the damaged byte)
/// one byte away from that shape, which no torn prefix is.
fn tail_is_damaged_record(tail: &[u8]) -> bool {
    let t = &tail[..tail.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1)];
    let terminated = t.ends_with(b"\n");
    let core = &t[..t.len() - usize::from(terminated)];
    let hex_end = |c: &[u8]| c.len() >= 71 && c[c.len() - 64..].iter().all(u8::is_ascii_hexdigit);
    let (core, extra) = if hex_end(core) {
        (core, false)
    } else if !terminated && !core.is_empty() && hex_end(&core[..core.len() - 1]) {
        (&core[..core.len() - 1], true)
    } else {
        return false;
    };
    let n = core.len();
    let differ = core[n - 71..n - 64]
        .iter()
        .zip(b"\ncheck ")
        .filter(|(a, b)| a != b)
        .count();
    if differ == 0 && !extra && !terminated {
        // Whole but for its newline: torn, if the check line is right.
        return blake3::hash(&core[..n - 70]).to_hex().as_bytes() != &core[n - 64..];
    }
    differ + usize::from(extra) == 1 || (differ == 0 && terminated)
}

/// What can still be read from a record that failed its check: its `ref` lines that
/// parse on their own (`recover` uses them only to name recovered tips; nothing here is
/// trusted as history).
#[derive(Clone, Debug, Default)]
pub struct Legible {
    pub branches: Vec<(String, Hash)>,
}

impl Legible {
    pub fn read(bytes: &[u8]) -> Legible {
        let mut l = Legible::default();
        for line in bytes.split(|&b| b == b'\n') {
            let Ok(line) = std::str::from_utf8(line) else {
                continue;
            };
            if let ["ref", name, head] = line.split(' ').collect::<Vec<_>>().as_slice() {
                if let (Ok(()), Some(h)) = (validate_branch(name), Hash::from_hex(head)) {
                    l.branches.push((name.to_string(), h));
                }
            }
        }
        l
    }
}

/// The length of the first record of `bytes`: up to and including its first whole
/// `check <64 hex>` line (None: no complete record).
fn record_end(bytes: &[u8]) -> Option<usize> {
    let mut line_start = 0;
    while line_start < bytes.len() {
        let nl = bytes[line_start..].iter().position(|&b| b == b'\n')?;
        let line = &bytes[line_start..line_start + nl];
        if line.len() == 70 && line.starts_with(b"check ") {
            return Some(line_start + nl + 1);
        }
        line_start += nl + 1;
    }
    None
}

fn io(path: &Path, e: std::io::Error) -> StoreError {
    StoreError::io(path, e)
}

/// The writer's handle on the refs log: appends one record per commit.
pub struct RefsLog {
    dir: PathBuf,
    file: std::fs::File,
    /// End of the last record.
    len: u64,
    /// The file's size.
    capacity: u64,
}

impl RefsLog {
    /// Open (or create, with `initial`) the log for writing; a torn tail is zeroed, after
    /// it is set aside (`set-aside/`; returned): a damaged last record can read as one.
    pub fn open(
        dir: &Path,
        initial: Option<&Refs>,
    ) -> Result<(RefsLog, Refs, Option<crate::aside::SetAside>), StoreError> {
        let p = path(dir);
        if !p.exists() {
            let r = initial.cloned().unwrap_or_default();
            replace(dir, &r)?;
        }
        let bytes = std::fs::read(&p).map_err(|e| io(&p, e))?;
        // A writer must not go on from a cut file: committing would cut the packs back
        // to the older lengths it holds, deleting what the lost records committed.
        if (bytes.len() as u64) < COMPACT_BYTES {
            return Err(StoreError::Corrupt {
                what: p.display().to_string(),
                problem: short_file_problem(bytes.len()),
            });
        }
        let (refs, end) = Refs::parse_log(dir, &bytes)?;
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&p)
            .map_err(|e| io(&p, e))?;
        // A torn record after the last complete one is zeroed (the file keeps its size),
        // once its bytes are kept aside.
        let mut kept = None;
        if let Some(last) = bytes[end..].iter().rposition(|&b| b != 0) {
            use std::os::unix::fs::FileExt;
            let torn = &bytes[end..end + last + 1];
            let to = crate::aside::keep(dir, &format!("REFS.at-{end}"), "tail", torn)?;
            kept = Some(crate::aside::SetAside {
                from: p.clone(),
                offset: end as u64,
                bytes: torn.len() as u64,
                records: 0,
                to,
            });
            file.write_all_at(&vec![0u8; last + 1], end as u64)
                .map_err(|e| io(&p, e))?;
            file.sync_data().map_err(|e| io(&p, e))?;
        }
        Ok((
            RefsLog {
                dir: dir.to_path_buf(),
                file,
                len: end as u64,
                capacity: bytes.len() as u64,
            },
            refs,
            kept,
        ))
    }

    /// Commit `r`: write its record after the last one and fsync (or, when it does not
    /// fit, replace the file by this one record).
    pub fn commit(&mut self, r: &Refs) -> Result<(), StoreError> {
        use std::os::unix::fs::FileExt;
        let p = path(&self.dir);
        let text = r.render();
        if self.len + text.len() as u64 > self.capacity {
            replace(&self.dir, r)?;
            let (fresh, _, _) = RefsLog::open(&self.dir, None)?;
            *self = fresh;
            return Ok(());
        }
        self.file
            .write_all_at(text.as_bytes(), self.len)
            .map_err(|e| io(&p, e))?;
        self.file.sync_data().map_err(|e| io(&p, e))?;
        self.len += text.len() as u64;
        Ok(())
    }
}

/// Replace the refs file by one record, durably: temporary file, fsync, rename, fsync
/// of the directory.
pub fn replace(dir: &Path, r: &Refs) -> Result<(), StoreError> {
    let p = path(dir);
    let tmp = dir.join(format!("{REFS_FILE}.tmp"));
    let mut f = std::fs::File::create(&tmp).map_err(|e| io(&tmp, e))?;
    let text = r.render();
    f.write_all(text.as_bytes()).map_err(|e| io(&tmp, e))?;
    // Real zeros, not a hole: later commits then overwrite allocated blocks.
    let room = (COMPACT_BYTES as usize).max(2 * text.len()) - text.len();
    f.write_all(&vec![0u8; room]).map_err(|e| io(&tmp, e))?;
    f.sync_data().map_err(|e| io(&tmp, e))?;
    drop(f);
    std::fs::rename(&tmp, &p).map_err(|e| io(&p, e))?;
    sync_dir(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_damage_is_named() {
        let mut r = Refs {
            packs: vec![(1, 100), (3, 8)],
            blob_packs: vec![(1, 8)],
            ..Refs::default()
        };
        r.branches.insert("main".into(), Hash::of_event(b"a"));
        r.branches.insert("w1/main".into(), Hash::of_event(b"b"));
        let d = Path::new("/x");
        let text = r.render();
        assert_eq!(Refs::parse(d, text.as_bytes()).unwrap(), r);
        let mut bad = text.clone().into_bytes();
        bad[25] ^= 1;
        let e = Refs::parse(d, &bad).unwrap_err().to_string();
        assert!(e.contains("/x/REFS") && e.contains("damaged"), "{e}");
        let e = Refs::parse(d, &text.as_bytes()[..text.len() - 10]).unwrap_err();
        assert!(e.to_string().contains("/x/REFS"), "{e}");
    }

    #[test]
    fn the_log_keeps_the_last_complete_record_and_reports_damage() {
        let d = Path::new("/x");
        let mut a = Refs::default();
        a.branches.insert("main".into(), Hash::of_event(b"a"));
        let mut b = a.clone();
        b.branches.insert("f".into(), Hash::of_event(b"b"));
        let log = format!("{}{}", a.render(), b.render());
        assert_eq!(
            Refs::parse_log(d, log.as_bytes()).unwrap(),
            (b.clone(), log.len())
        );
        // A torn last record (any prefix of it) leaves the one before.
        let whole = a.render().len();
        for cut in whole..log.len() {
            let (r, end) = Refs::parse_log(d, &log.as_bytes()[..cut]).unwrap();
            assert_eq!((r, end), (a.clone(), whole), "cut at {cut}");
        }
        // The zeros a fresh file is padded with are not a record.
        let mut padded = log.clone().into_bytes();
        padded.extend(std::iter::repeat_n(0u8, 4096));
        assert_eq!(Refs::parse_log(d, &padded).unwrap(), (b.clone(), log.len()));
        // A complete last record with any bit of any byte flipped (its check line's
        // prefix and newline included, which make it no longer read as a record) is
        // damage, not a torn write, also with the file's zero padding after it.
        for at in whole..log.len() {
            for bit in 0..8 {
                let mut bad = log.clone().into_bytes();
                bad[at] ^= 1 << bit;
                bad.extend(std::iter::repeat_n(0u8, 64));
                let e = Refs::parse_log(d, &bad);
                assert!(e.is_err(), "flip of bit {bit} at {at} read as {e:?}");
                assert!(matches!(
                    e.unwrap_err(),
                    StoreError::Damaged {
                        repair: Repair::Recover,
                        ..
                    }
                ));
            }
        }
    }
}
