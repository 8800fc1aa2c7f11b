//! Set-aside: intact bytes a writer would otherwise cut or remove, kept under
//! `<ledger>/set-aside/` (as git keeps what `fsck` finds in `lost-found`, and never
//! deletes on open).
//!
//! A writer opening a ledger cuts each pack back to the committed length `REFS` records
//! and removes pack files `REFS` does not list. Usually what goes is a batch a crash cut
//! before its commit. But a damaged last `REFS` record can read exactly like such a torn
//! write, and then the bytes past the older record's lengths are committed, intact
//! history. The two cannot be told apart at open, so whenever those bytes hold an intact
//! record stored nowhere else, they are first copied here, durably:
//!
//! ```text
//! set-aside/000001.pack-00000001.at-1048584.<16 hex>.pack   magic + the tail's bytes
//! set-aside/000002.blobs-00000002.whole.<16 hex>.pack       a whole unlisted pack
//! set-aside/000003.REFS.at-2311.<16 hex>.tail                a REFS record cut short
//! ```
//!
//! Pack entries are pack files themselves (their kind's magic, then frames), so
//! `recover` scans them like packs and re-attaches their intact records; `verify` warns
//! while any of their records is stored nowhere in the packs. The number in front keeps
//! the order they were set aside in (parents before children); the hex is the content's
//! blake3, so the same bytes are never kept twice. Nothing here is ever deleted by the
//! tool.
use crate::pack::{self, PackKind};
use crate::StoreError;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Directory (in the ledger) holding set-aside bytes.
pub const DIR: &str = "set-aside";

/// One set-aside file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub path: PathBuf,
    /// The kind of pack it holds; None for a `REFS` tail.
    pub kind: Option<PackKind>,
}

/// What a writer set aside while opening (for its report).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetAside {
    /// The file the bytes came from.
    pub from: PathBuf,
    /// Where in it they started (0 for a whole file).
    pub offset: u64,
    pub bytes: u64,
    /// Intact records among them that no committed pack holds.
    pub records: usize,
    /// Where they are now.
    pub to: PathBuf,
}

fn io(path: &Path, e: std::io::Error) -> StoreError {
    StoreError::io(path, e)
}

/// The set-aside files of ledger `dir`, in the order they were set aside.
pub fn list(dir: &Path) -> Result<Vec<Entry>, StoreError> {
    let d = dir.join(DIR);
    let rd = match std::fs::read_dir(&d) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io(&d, e)),
    };
    let mut out: Vec<Entry> = rd
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let label = name.split_once('.')?.1;
            let kind = if label.starts_with(PackKind::Events.prefix()) && name.ends_with(".pack") {
                Some(PackKind::Events)
            } else if label.starts_with(PackKind::Blobs.prefix()) && name.ends_with(".pack") {
                Some(PackKind::Blobs)
            } else if label.starts_with("REFS.") && name.ends_with(".tail") {
                None
            } else {
                return None; // a temporary file, or something a person put there
            };
            Some(Entry {
                path: e.path(),
                kind,
            })
        })
        .collect();
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// The content tag of a set-aside file's name.
fn tag(content: &[u8]) -> String {
    blake3::hash(content).to_hex()[..16].to_string()
}

/// Keep `content` as `set-aside/<seq>.<label>.<hash>.<ext>`, durably (temporary file,
/// fsync, rename, fsync of the directory); the same bytes already kept are not kept
/// again. Returns the file's path.
pub fn keep(dir: &Path, label: &str, ext: &str, content: &[u8]) -> Result<PathBuf, StoreError> {
    let d = dir.join(DIR);
    std::fs::create_dir_all(&d).map_err(|e| io(&d, e))?;
    let tag = tag(content);
    let mut n = 0;
    for e in std::fs::read_dir(&d).map_err(|e| io(&d, e))?.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.ends_with(&format!(".{tag}.{ext}")) {
            return Ok(e.path());
        }
        n += 1;
    }
    let to = d.join(format!("{:06}.{label}.{tag}.{ext}", n + 1));
    let tmp = d.join(format!(".{label}.{tag}.tmp"));
    let mut f = std::fs::File::create(&tmp).map_err(|e| io(&tmp, e))?;
    f.write_all(content)
        .and_then(|_| f.sync_all())
        .map_err(|e| io(&tmp, e))?;
    drop(f);
    std::fs::rename(&tmp, &to).map_err(|e| io(&to, e))?;
    pack::sync_dir(&d)?;
    pack::sync_dir(dir)?;
    Ok(to)
}

/// Move a whole pack file into `set-aside/` (a rename: the same filesystem), durably.
pub fn move_pack(
    dir: &Path,
    from: &Path,
    label: &str,
    tag_of: &[u8],
) -> Result<PathBuf, StoreError> {
    let d = dir.join(DIR);
    std::fs::create_dir_all(&d).map_err(|e| io(&d, e))?;
    let n = std::fs::read_dir(&d).map_err(|e| io(&d, e))?.count();
    let to = d.join(format!("{:06}.{label}.{}.pack", n + 1, tag(tag_of)));
    std::fs::rename(from, &to).map_err(|e| io(from, e))?;
    pack::sync_dir(&d)?;
    pack::sync_dir(&dir.join("packs"))?;
    Ok(to)
}

/// The intact records of pack bytes (magic included) that `stored` says no committed
/// pack holds.
pub fn unstored(kind: PackKind, bytes: &[u8], stored: impl Fn(&crate::Hash) -> bool) -> usize {
    pack::scan(kind, bytes)
        .0
        .iter()
        .filter(|g| !stored(&g.hash))
        .count()
}
