//! Content-addressed blobs, stored once by hash (blob context): small ones (up to
//! [`INLINE_MAX`]) as frames in append-only small-blob packs (`packs/blobs-N.pack`,
//! committed through `REFS` like event packs, so a reader sees exactly the blobs of its
//! snapshot), large ones as files `blobs/ab/cdef...` written to a temporary file,
//! fsync'ed and renamed, so a blob file either is whole or absent.
use crate::hash::{Hash, PrefixBuild};
use crate::pack::{self, sync_dir, Pack, PackKind, PACK_ROLL_BYTES};
use crate::StoreError;
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Blobs up to this size live in small-blob packs; larger ones are files.
pub const INLINE_MAX: usize = 4096;

static TMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Where a small blob's frame lies.
#[derive(Clone, Copy, Debug)]
struct Small {
    /// Position in `Blobs::packs`.
    pack: usize,
    offset: u64,
    len: u32,
}

/// The blob store of one ledger.
pub struct Blobs {
    dir: PathBuf,
    packs_dir: PathBuf,
    packs: Vec<Pack>,
    small: HashMap<Hash, Small, PrefixBuild>,
    /// Small-blob frames written since the last commit.
    pending: bool,
}

/// A problem met while reading the small-blob packs (verify reports it).
pub type SmallProblem = (String, String);

fn io_err(path: &Path, e: std::io::Error) -> StoreError {
    StoreError::io(path, e)
}

impl Blobs {
    /// Open the blob store: `blob_packs` are the small-blob packs and their committed
    /// lengths from `REFS`. Unreadable frames end a pack's scan and are returned.
    pub fn open(
        ledger: &Path,
        blob_packs: &[(u32, u64)],
        writable: bool,
    ) -> Result<(Blobs, Vec<SmallProblem>), StoreError> {
        let packs_dir = ledger.join("packs");
        let mut b = Blobs {
            dir: ledger.join("blobs"),
            packs_dir: packs_dir.clone(),
            packs: Vec::new(),
            small: HashMap::default(),
            pending: false,
        };
        let mut problems = Vec::new();
        for &(id, len) in blob_packs {
            let p = Pack::open(&packs_dir, PackKind::Blobs, id, len, writable)?;
            for (off, f) in p.frames() {
                match f {
                    Ok(f) => {
                        b.small.entry(f.hash).or_insert(Small {
                            pack: b.packs.len(),
                            offset: off,
                            len: f.len as u32,
                        });
                    }
                    Err(e) => problems.push((
                        format!("small blob record at {} offset {off}", p.path.display()),
                        e.to_string(),
                    )),
                }
            }
            b.packs.push(p);
        }
        Ok((b, problems))
    }

    /// The small-blob packs' `(id, end)` to record in `REFS`: everything written is
    /// made durable first.
    pub fn sync(&mut self) -> Result<Vec<(u32, u64)>, StoreError> {
        let mut out = Vec::with_capacity(self.packs.len());
        for p in &mut self.packs {
            let end = if self.pending {
                p.sync()?
            } else {
                p.committed()
            };
            out.push((p.id, end));
        }
        Ok(out)
    }

    /// `REFS` now records `lens` (from [`Blobs::sync`]): they are history.
    pub fn commit(&mut self, lens: &[(u32, u64)]) -> Result<(), StoreError> {
        for (p, &(_, len)) in self.packs.iter_mut().zip(lens) {
            if p.committed() != len {
                p.commit(len)?;
            }
        }
        self.pending = false;
        Ok(())
    }

    /// Whether small blobs were written since the last commit.
    pub fn has_pending(&self) -> bool {
        self.pending
    }

    /// Number of small blobs (for reports).
    pub fn small_count(&self) -> usize {
        self.small.len()
    }

    /// The small-blob packs (verify reads their frames).
    pub fn small_packs(&self) -> &[Pack] {
        &self.packs
    }

    /// The small-blob packs, for the writer's open (cutting uncommitted tails).
    pub(crate) fn small_packs_mut(&mut self) -> &mut [Pack] {
        &mut self.packs
    }

    /// Whether `h` is a small blob (stored in a pack).
    pub fn is_small(&self, h: &Hash) -> bool {
        self.small.contains_key(h)
    }

    /// Path of a large blob's file.
    pub fn file_path(&self, h: &Hash) -> PathBuf {
        let hex = h.to_hex();
        self.dir.join(&hex[..2]).join(&hex[2..])
    }

    /// Stored blobs whose hex id starts with `prefix` (lowercase hex), small and file
    /// ones, sorted (for `ledger cat PREFIX`).
    pub fn with_prefix(&self, prefix: &str) -> Vec<Hash> {
        let mut out: Vec<Hash> = self
            .small
            .keys()
            .filter(|h| h.to_hex().starts_with(prefix))
            .copied()
            .collect();
        // Files live under blobs/<2 hex>/<62 hex>.
        let dirs: Vec<PathBuf> = match prefix.get(..2) {
            Some(p2) => vec![self.dir.join(p2)],
            None => std::fs::read_dir(&self.dir)
                .map(|rd| rd.flatten().map(|e| e.path()).collect())
                .unwrap_or_default(),
        };
        for d in dirs {
            let Some(p2) = d.file_name().map(|n| n.to_string_lossy().into_owned()) else {
                continue;
            };
            for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                let name = format!("{p2}{}", e.file_name().to_string_lossy());
                if name.starts_with(prefix) {
                    if let Some(h) = Hash::from_hex(&name) {
                        out.push(h);
                    }
                }
            }
        }
        out.sort();
        out.dedup();
        out
    }

    /// Whether the blob is stored (small or file).
    pub fn contains(&self, h: &Hash) -> Result<bool, StoreError> {
        if self.small.contains_key(h) {
            return Ok(true);
        }
        Ok(self.file_path(h).exists())
    }

    /// Store `bytes` (nothing is written when it is already stored); returns its hash.
    /// A small blob is written but durable only at the next [`Blobs::sync`], which the
    /// ledger runs before any event or ref that could reference it is committed.
    pub fn put(&mut self, bytes: &[u8]) -> Result<Hash, StoreError> {
        let h = Hash::of_blob(bytes);
        if bytes.len() <= INLINE_MAX {
            if self.small.contains_key(&h) {
                return Ok(h);
            }
            let roll = self
                .packs
                .last()
                .is_none_or(|p| p.written() > PACK_ROLL_BYTES);
            if roll {
                let id = self.packs.last().map_or(1, |p| p.id + 1);
                self.packs
                    .push(Pack::create(&self.packs_dir, PackKind::Blobs, id)?);
            }
            let mut frame = Vec::with_capacity(bytes.len() + 48);
            pack::encode_frame(&mut frame, &h, bytes, &[]);
            let at = self.packs.len() - 1;
            let offset = self.packs[at].write(&frame)?;
            self.small.insert(
                h,
                Small {
                    pack: at,
                    offset,
                    len: frame.len() as u32,
                },
            );
            self.pending = true;
            return Ok(h);
        }
        self.put_file(&h, bytes)?;
        Ok(h)
    }

    fn put_file(&self, h: &Hash, bytes: &[u8]) -> Result<(), StoreError> {
        let path = self.file_path(h);
        if path.exists() {
            return Ok(());
        }
        let sub = path.parent().expect("blob path has a parent").to_path_buf();
        let new_sub = !sub.exists();
        std::fs::create_dir_all(&sub).map_err(|e| io_err(&sub, e))?;
        let tmp = self.dir.join(format!(
            "tmp-{}-{}",
            std::process::id(),
            TMP_COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let needed = bytes.len() as u64;
        let written = std::fs::File::create(&tmp)
            .and_then(|mut f| {
                crate::faults::charge(needed)?;
                f.write_all(bytes)?;
                f.sync_all()
            })
            .map_err(|e| StoreError::writing(&tmp, e, needed))
            .and_then(|()| std::fs::rename(&tmp, &path).map_err(|e| io_err(&path, e)));
        if let Err(e) = written {
            // A write that fails leaves no temporary file behind (a full disk's partial
            // blob would otherwise take the space a resumed run needs).
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        sync_dir(&sub)?;
        if new_sub {
            sync_dir(&self.dir)?;
        }
        Ok(())
    }

    /// The stored bytes, unchecked (None when absent).
    pub fn get_raw(&self, h: &Hash) -> Result<Option<Vec<u8>>, StoreError> {
        if let Some(s) = self.small.get(h) {
            let p = &self.packs[s.pack];
            let end = s.offset + s.len as u64;
            let frame;
            let data: &[u8] = if end <= p.committed() {
                p.bytes()
            } else {
                // Written by this writer, not committed yet: read it from the file.
                frame = p.read_at(s.offset, s.len as usize)?;
                &frame
            };
            let off = if end <= p.committed() {
                s.offset as usize
            } else {
                0
            };
            let f = pack::parse_frame(data, off).map_err(|e| StoreError::Corrupt {
                what: format!(
                    "small blob record at {} offset {}",
                    p.path.display(),
                    s.offset
                ),
                problem: e.to_string(),
            })?;
            return Ok(Some(f.event.to_vec()));
        }
        let path = self.file_path(h);
        match std::fs::read(&path) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_err(&path, e)),
        }
    }

    /// The blob's bytes, checked against its hash.
    pub fn get(&self, h: &Hash) -> Result<Vec<u8>, StoreError> {
        let b = self
            .get_raw(h)?
            .ok_or(StoreError::MissingBlob { hash: *h })?;
        let got = Hash::of_blob(&b);
        if got != *h {
            return Err(StoreError::Corrupt {
                what: format!("blob {}", h.short()),
                problem: format!("content hashes to {} ({} bytes)", got.short(), b.len()),
            });
        }
        Ok(b)
    }

    /// Remove leftover temporary files of interrupted writes (writer open only).
    pub fn clean_tmp(&self) {
        if let Ok(rd) = std::fs::read_dir(&self.dir) {
            for e in rd.flatten() {
                if e.file_name().to_string_lossy().starts_with("tmp-") {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
    }

    /// Where a stored blob lies, for messages: its file, or its pack and offset.
    pub fn describe(&self, h: &Hash) -> String {
        match self.small.get(h) {
            Some(s) => format!("{} offset {}", self.packs[s.pack].path.display(), s.offset),
            None => self.file_path(h).display().to_string(),
        }
    }
}
