//! Pack files: append-only segments of framed event records (as git packfiles hold
//! objects), so one durable batch is one sequential write and one fsync.
//!
//! A pack starts with [`PACK_MAGIC`] (which carries the pack format version). Each
//! record is framed:
//!
//! ```text
//! u8   frame version (1)
//! u32  event length  (LE)
//! u32  meta length   (LE)
//! [32] event id (blake3, event context, over the event bytes)
//! ...  event bytes   (opaque here: the application encodes its events through codec)
//! ...  meta bytes    (codec::encode(Meta); never hashed)
//! u32  crc32 of everything above (LE)
//! ```
//!
//! Only the prefix up to the pack's committed length (recorded in the `REFS` file
//! together with the branch heads, see refs.rs) is history; anything after it is a torn
//! or uncommitted tail, ignored by readers. A writer opening the ledger cuts it, after
//! copying any intact record in it that is stored nowhere else to `set-aside/`
//! (aside.rs): a crash before the commit and a damaged `REFS` record look alike, so
//! nothing intact is ever cut away.
//!
//! Small blobs live in packs of their own kind ([`PackKind::Blobs`], magic
//! [`BLOB_PACK_MAGIC`]) with the same frames: the id is the blob's hash, the "event"
//! bytes are the blob's content and the meta bytes are empty.
use crate::hash::Hash;
use crate::StoreError;
use memmap2::Mmap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// First bytes of every pack: magic and pack format version 1.
pub const PACK_MAGIC: &[u8; 8] = b"MLPACK\0\x01";
/// First bytes of every small-blob pack.
pub const BLOB_PACK_MAGIC: &[u8; 8] = b"MLBLOBS\x01";
/// Version byte of every record frame.
pub const FRAME_VERSION: u8 = 1;
/// Frame bytes before the event bytes.
pub const FRAME_HEADER: usize = 1 + 4 + 4 + 32;
/// Frame bytes after the meta bytes.
pub const FRAME_TRAILER: usize = 4;
/// Largest event or meta payload a frame may hold.
pub const MAX_PAYLOAD: usize = 1 << 28;
/// A writer starts a new pack once the active one exceeds this size.
pub const PACK_ROLL_BYTES: u64 = 1 << 30;

/// Why a frame could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("record header runs past the committed end")]
    Truncated,
    #[error("unknown record frame version {0}")]
    Version(u8),
    #[error("record length {0} exceeds the limit")]
    TooLarge(usize),
    #[error("record checksum mismatch")]
    Checksum,
}

/// A record as it lies in a pack.
#[derive(Debug, Clone, Copy)]
pub struct Frame<'a> {
    pub hash: Hash,
    pub event: &'a [u8],
    pub meta: &'a [u8],
    /// Total frame length in bytes.
    pub len: usize,
    /// The whole frame (for checksum verification).
    raw: &'a [u8],
}

impl Frame<'_> {
    /// Whether the stored checksum matches the frame's bytes.
    pub fn checksum_ok(&self) -> bool {
        let n = self.raw.len() - FRAME_TRAILER;
        let stored = u32::from_le_bytes(self.raw[n..].try_into().expect("4 bytes"));
        crc32fast::hash(&self.raw[..n]) == stored
    }
}

/// Append one framed record to `buf`.
pub fn encode_frame(buf: &mut Vec<u8>, hash: &Hash, event: &[u8], meta: &[u8]) {
    let start = buf.len();
    buf.push(FRAME_VERSION);
    buf.extend_from_slice(&(event.len() as u32).to_le_bytes());
    buf.extend_from_slice(&(meta.len() as u32).to_le_bytes());
    buf.extend_from_slice(&hash.0);
    buf.extend_from_slice(event);
    buf.extend_from_slice(meta);
    let crc = crc32fast::hash(&buf[start..]);
    buf.extend_from_slice(&crc.to_le_bytes());
}

/// Parse the frame starting at `offset` of `data` (which ends at the committed length).
/// Never panics; the checksum is checked only by [`Frame::checksum_ok`].
pub fn parse_frame(data: &[u8], offset: usize) -> Result<Frame<'_>, FrameError> {
    let rest = data.get(offset..).ok_or(FrameError::Truncated)?;
    if rest.len() < FRAME_HEADER + FRAME_TRAILER {
        return Err(FrameError::Truncated);
    }
    if rest[0] != FRAME_VERSION {
        return Err(FrameError::Version(rest[0]));
    }
    let el = u32::from_le_bytes(rest[1..5].try_into().expect("4 bytes")) as usize;
    let ml = u32::from_le_bytes(rest[5..9].try_into().expect("4 bytes")) as usize;
    if el > MAX_PAYLOAD || ml > MAX_PAYLOAD {
        return Err(FrameError::TooLarge(el.max(ml)));
    }
    let len = FRAME_HEADER + el + ml + FRAME_TRAILER;
    if rest.len() < len {
        return Err(FrameError::Truncated);
    }
    let hash = Hash(rest[9..41].try_into().expect("32 bytes"));
    Ok(Frame {
        hash,
        event: &rest[FRAME_HEADER..FRAME_HEADER + el],
        meta: &rest[FRAME_HEADER + el..FRAME_HEADER + el + ml],
        len,
        raw: &rest[..len],
    })
}

/// Whether a parsed frame is whole: its checksum, and the id its bytes hash to.
pub fn frame_whole(kind: PackKind, f: &Frame<'_>) -> bool {
    f.checksum_ok()
        && match kind {
            PackKind::Events => Hash::of_event(f.event) == f.hash,
            PackKind::Blobs => Hash::of_blob(f.event) == f.hash,
        }
}

/// An intact frame found by [`scan`].
#[derive(Clone, Debug)]
pub struct Good {
    pub offset: u64,
    pub len: u64,
    pub hash: Hash,
}

/// A span `[offset, end)` of bytes [`scan`] could not read as whole frames, with what
/// its header claims when it parses (the record's id, and the frame itself for the
/// caller to read more of it).
#[derive(Clone, Debug)]
pub struct Bad {
    pub offset: u64,
    pub end: u64,
    pub claimed: Option<Hash>,
}

/// Scan every frame of a pack's bytes (magic included), finding its footing again after
/// damage: where a bad frame's header says the next one starts when a whole frame is
/// there, else at the first offset where a whole frame parses.
pub fn scan(kind: PackKind, bytes: &[u8]) -> (Vec<Good>, Vec<Bad>) {
    let start = kind.magic().len();
    let (mut good, mut bad) = (Vec::new(), Vec::new());
    let mut off = start;
    while off < bytes.len() {
        match parse_frame(bytes, off) {
            Ok(f) if frame_whole(kind, &f) => {
                good.push(Good {
                    offset: off as u64,
                    len: f.len as u64,
                    hash: f.hash,
                });
                off += f.len;
            }
            r => {
                let next = r
                    .as_ref()
                    .ok()
                    .map(|f| off + f.len)
                    .filter(|&n| {
                        n >= bytes.len()
                            || parse_frame(bytes, n).is_ok_and(|f| frame_whole(kind, &f))
                    })
                    .or_else(|| {
                        (off + 1..bytes.len()).find(|&o| {
                            bytes[o] == FRAME_VERSION
                                && parse_frame(bytes, o).is_ok_and(|f| frame_whole(kind, &f))
                        })
                    })
                    .unwrap_or(bytes.len())
                    .min(bytes.len());
                bad.push(Bad {
                    offset: off as u64,
                    end: next as u64,
                    claimed: r.ok().map(|f| f.hash),
                });
                off = next;
            }
        }
    }
    (good, bad)
}

/// What a pack holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PackKind {
    /// Event records (`pack-NNNNNNNN.pack`).
    Events,
    /// Small blobs (`blobs-NNNNNNNN.pack`).
    Blobs,
}

impl PackKind {
    /// The first bytes of a pack of this kind.
    pub fn magic(self) -> &'static [u8; 8] {
        match self {
            PackKind::Events => PACK_MAGIC,
            PackKind::Blobs => BLOB_PACK_MAGIC,
        }
    }

    /// The start of a pack file's name of this kind (`pack-`, `blobs-`).
    pub fn prefix(self) -> &'static str {
        match self {
            PackKind::Events => "pack-",
            PackKind::Blobs => "blobs-",
        }
    }

    /// Pack id of a file name of this kind (`pack-00000003.pack` -> 3).
    pub fn id_of(self, file_name: &str) -> Option<u32> {
        file_name
            .strip_prefix(self.prefix())?
            .strip_suffix(".pack")
            .filter(|n| n.len() == 8)?
            .parse()
            .ok()
    }
}

/// Path of event pack `id` under a ledger's `packs/` directory.
pub fn pack_path(packs_dir: &Path, id: u32) -> PathBuf {
    kind_path(packs_dir, PackKind::Events, id)
}

/// Path of pack `id` of `kind` under a ledger's `packs/` directory.
pub fn kind_path(packs_dir: &Path, kind: PackKind, id: u32) -> PathBuf {
    packs_dir.join(format!("{}{id:08}.pack", kind.prefix()))
}

/// One pack file: its committed prefix mapped for reading, appended by the writer.
pub struct Pack {
    pub id: u32,
    pub kind: PackKind,
    pub path: PathBuf,
    file: File,
    map: Option<Mmap>,
    /// Bytes of history (the committed length recorded in `REFS`).
    committed: u64,
    /// End of what the writer has written (>= committed; the rest is not yet history).
    written: u64,
}

fn io_err(path: &Path, e: std::io::Error) -> StoreError {
    StoreError::io(path, e)
}

/// fsync a directory so a created or renamed entry in it is durable.
pub fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    File::open(dir)
        .and_then(|f| f.sync_all())
        .map_err(|e| io_err(dir, e))
}

impl Pack {
    /// Create a new, empty pack (magic only), durably.
    pub fn create(packs_dir: &Path, kind: PackKind, id: u32) -> Result<Pack, StoreError> {
        let path = kind_path(packs_dir, kind, id);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .map_err(|e| io_err(&path, e))?;
        file.write_all_at(kind.magic(), 0)
            .map_err(|e| io_err(&path, e))?;
        file.sync_all().map_err(|e| io_err(&path, e))?;
        sync_dir(packs_dir)?;
        let n = kind.magic().len() as u64;
        let mut p = Pack {
            id,
            kind,
            path,
            file,
            map: None,
            committed: n,
            written: n,
        };
        p.remap()?;
        Ok(p)
    }

    /// Open pack `id` whose committed length is `committed`. Bytes past it (a torn or
    /// uncommitted batch, or history a damaged `REFS` record no longer counts) are left
    /// alone: the writer sets intact records among them aside before cutting them
    /// ([`crate::aside`], [`Pack::cut_tail`]); a reader ignores them.
    pub fn open(
        packs_dir: &Path,
        kind: PackKind,
        id: u32,
        committed: u64,
        writable: bool,
    ) -> Result<Pack, StoreError> {
        let path = kind_path(packs_dir, kind, id);
        let file = OpenOptions::new()
            .read(true)
            .write(writable)
            .open(&path)
            .map_err(|e| io_err(&path, e))?;
        let len = file.metadata().map_err(|e| io_err(&path, e))?.len();
        if len < committed {
            return Err(StoreError::Damaged {
                what: format!("pack {}", path.display()),
                problem: format!("file has {len} bytes but {committed} are committed (truncated)"),
                repair: crate::Repair::Recover,
            });
        }
        let mut p = Pack {
            id,
            kind,
            path,
            file,
            map: None,
            committed,
            written: committed,
        };
        p.remap()?;
        if p.bytes().get(..PACK_MAGIC.len()) != Some(&kind.magic()[..]) {
            return Err(StoreError::Damaged {
                what: format!("pack {}", p.path.display()),
                problem: "bad magic or unknown pack format version".into(),
                repair: crate::Repair::Recover,
            });
        }
        Ok(p)
    }

    fn remap(&mut self) -> Result<(), StoreError> {
        // SAFETY: the map is read-only and covers only the committed prefix. Pack files
        // are append-only; the one writer (holding the ledger's exclusive lock) never
        // rewrites or shrinks a committed prefix: it truncates only an uncommitted tail
        // (in `open`), which no reader maps, and gc replaces packs by new files and
        // unlinks the old ones, which keeps the pages of a reader's map alive.
        let map = unsafe {
            memmap2::MmapOptions::new()
                .len(self.committed as usize)
                .map(&self.file)
        }
        .map_err(|e| io_err(&self.path, e))?;
        self.map = Some(map);
        Ok(())
    }

    /// The committed bytes (magic included).
    pub fn bytes(&self) -> &[u8] {
        self.map.as_deref().unwrap_or(&[])
    }

    pub fn committed(&self) -> u64 {
        self.committed
    }

    /// Write `buf` after what was written so far (not yet durable, not yet history);
    /// returns the offset it starts at.
    pub fn write(&mut self, buf: &[u8]) -> Result<u64, StoreError> {
        let at = self.written;
        let needed = buf.len() as u64;
        crate::faults::charge(needed)
            .and_then(|()| self.file.write_all_at(buf, at))
            .map_err(|e| StoreError::writing(&self.path, e, needed))?;
        self.written += buf.len() as u64;
        Ok(at)
    }

    /// Make everything written durable; returns the end to commit.
    pub fn sync(&mut self) -> Result<u64, StoreError> {
        if self.written > self.committed {
            self.file.sync_data().map_err(|e| io_err(&self.path, e))?;
        }
        Ok(self.written)
    }

    /// Write `buf` after the committed end and fsync it. History only grows once the
    /// caller records the new length in `REFS` and calls [`Pack::commit`].
    pub fn write_durable(&mut self, buf: &[u8]) -> Result<u64, StoreError> {
        self.written = self.committed;
        self.write(buf)?;
        self.sync()
    }

    /// The end of what was written (committed or not).
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Read `len` bytes at `offset`, committed or not (the writer's own reads).
    pub fn read_at(&self, offset: u64, len: usize) -> Result<Vec<u8>, StoreError> {
        let mut b = vec![0u8; len];
        self.file
            .read_exact_at(&mut b, offset)
            .map_err(|e| io_err(&self.path, e))?;
        Ok(b)
    }

    /// The bytes past the committed length (what a torn or uncommitted batch left, or
    /// history a damaged `REFS` record no longer counts).
    pub fn tail(&self) -> Result<Vec<u8>, StoreError> {
        let len = self
            .file
            .metadata()
            .map_err(|e| io_err(&self.path, e))?
            .len();
        if len <= self.committed {
            return Ok(Vec::new());
        }
        self.read_at(self.committed, (len - self.committed) as usize)
    }

    /// Cut the file back to its committed length, durably (writer only; the caller has
    /// set aside whatever intact records the tail held).
    pub fn cut_tail(&mut self) -> Result<(), StoreError> {
        self.file
            .set_len(self.committed)
            .and_then(|_| self.file.sync_all())
            .map_err(|e| io_err(&self.path, e))?;
        self.written = self.committed;
        Ok(())
    }

    /// Extend the committed prefix to `len` (after `REFS` recorded it).
    pub fn commit(&mut self, len: u64) -> Result<(), StoreError> {
        self.committed = len;
        self.written = self.written.max(len);
        self.remap()
    }

    /// Iterate the frames of the committed prefix: `(offset, frame)`, stopping with the
    /// error at the first unreadable frame.
    pub fn frames(&self) -> Frames<'_> {
        self.frames_from(None)
    }

    /// Like [`Pack::frames`], starting at frame offset `from` (the first frame when None).
    pub fn frames_from(&self, from: Option<u64>) -> Frames<'_> {
        Frames {
            data: self.bytes(),
            offset: from.map_or(self.kind.magic().len(), |o| o as usize),
            failed: false,
        }
    }
}

/// Iterator over a pack's frames.
pub struct Frames<'a> {
    data: &'a [u8],
    offset: usize,
    failed: bool,
}

impl<'a> Iterator for Frames<'a> {
    type Item = (u64, Result<Frame<'a>, FrameError>);
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.offset >= self.data.len() {
            return None;
        }
        let off = self.offset;
        match parse_frame(self.data, off) {
            Ok(f) => {
                self.offset += f.len;
                Some((off as u64, Ok(f)))
            }
            Err(e) => {
                self.failed = true;
                Some((off as u64, Err(e)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn frame_round_trip_and_checksum() {
        let mut buf = vec![0u8; 3];
        let h = Hash::of_event(b"ev");
        encode_frame(&mut buf, &h, b"ev", b"m");
        let f = parse_frame(&buf, 3).unwrap();
        assert_eq!(
            (f.hash, f.event, f.meta, f.len),
            (h, &b"ev"[..], &b"m"[..], buf.len() - 3)
        );
        assert!(f.checksum_ok());
        for i in 3..buf.len() {
            let mut b = buf.clone();
            b[i] ^= 0x10;
            if let Ok(f) = parse_frame(&b, 3) {
                assert!(!f.checksum_ok(), "flip at {i} undetected");
            }
        }
        assert_eq!(
            parse_frame(&buf[..buf.len() - 1], 3).unwrap_err(),
            FrameError::Truncated
        );
    }

    proptest! {
        #[test]
        fn arbitrary_pack_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300), off in 0usize..300) {
            let _ = parse_frame(&bytes, off).map(|f| f.checksum_ok());
            let it = Frames { data: &bytes, offset: 0, failed: false };
            prop_assert!(it.count() <= bytes.len() / (FRAME_HEADER + FRAME_TRAILER) + 1);
        }
    }
}
