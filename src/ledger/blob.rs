//! Content-addressed blobs, stored once by hash (blob context): small ones in a sled
//! tree, large ones (over [`INLINE_MAX`]) as files `blobs/ab/cdef...` written to a
//! temporary file, fsync'ed and renamed, so a blob file either is whole or absent.
use super::hash::Hash;
use super::pack::sync_dir;
use super::LedgerError;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Blobs up to this size live in sled; larger ones are files.
pub const INLINE_MAX: usize = 4096;

static TMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// The blob store of one ledger.
pub struct Blobs {
    dir: PathBuf,
    tree: sled::Tree,
}

fn io_err(path: &Path, e: std::io::Error) -> LedgerError {
    LedgerError::Io {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

impl Blobs {
    pub fn new(dir: PathBuf, tree: sled::Tree) -> Blobs {
        Blobs { dir, tree }
    }

    /// Path of a large blob's file.
    pub fn file_path(&self, h: &Hash) -> PathBuf {
        let hex = h.to_hex();
        self.dir.join(&hex[..2]).join(&hex[2..])
    }

    /// Whether the blob is stored (file or sled).
    pub fn contains(&self, h: &Hash) -> Result<bool, LedgerError> {
        if self.tree.contains_key(h.0)? {
            return Ok(true);
        }
        Ok(self.file_path(h).exists())
    }

    /// Store `bytes`; returns its hash and whether the sled tree was written (the caller
    /// flushes sled before any event referencing it is committed).
    pub fn put(&self, bytes: &[u8]) -> Result<(Hash, bool), LedgerError> {
        let h = Hash::of_blob(bytes);
        if bytes.len() <= INLINE_MAX {
            if self.tree.contains_key(h.0)? {
                return Ok((h, false));
            }
            self.tree.insert(h.0, bytes)?;
            return Ok((h, true));
        }
        let path = self.file_path(&h);
        if path.exists() {
            return Ok((h, false));
        }
        let sub = path.parent().expect("blob path has a parent").to_path_buf();
        let new_sub = !sub.exists();
        std::fs::create_dir_all(&sub).map_err(|e| io_err(&sub, e))?;
        let tmp = self.dir.join(format!(
            "tmp-{}-{}",
            std::process::id(),
            TMP_COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let mut f = std::fs::File::create(&tmp).map_err(|e| io_err(&tmp, e))?;
        f.write_all(bytes).map_err(|e| io_err(&tmp, e))?;
        f.sync_all().map_err(|e| io_err(&tmp, e))?;
        drop(f);
        std::fs::rename(&tmp, &path).map_err(|e| io_err(&path, e))?;
        sync_dir(&sub)?;
        if new_sub {
            sync_dir(&self.dir)?;
        }
        Ok((h, false))
    }

    /// The stored bytes, unchecked (None when absent).
    pub fn get_raw(&self, h: &Hash) -> Result<Option<Vec<u8>>, LedgerError> {
        if let Some(v) = self.tree.get(h.0)? {
            return Ok(Some(v.to_vec()));
        }
        let path = self.file_path(h);
        match std::fs::read(&path) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_err(&path, e)),
        }
    }

    /// The blob's bytes, checked against its hash.
    pub fn get(&self, h: &Hash) -> Result<Vec<u8>, LedgerError> {
        let b = self
            .get_raw(h)?
            .ok_or(LedgerError::MissingBlob { hash: *h })?;
        let got = Hash::of_blob(&b);
        if got != *h {
            return Err(LedgerError::Corrupt {
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

    /// Number of blobs in the sled tree (for reports).
    pub fn inline_count(&self) -> usize {
        self.tree.len()
    }

    /// Every inline blob (key, bytes).
    pub fn inline_iter(
        &self,
    ) -> impl Iterator<Item = Result<(Vec<u8>, Vec<u8>), LedgerError>> + '_ {
        self.tree.iter().map(|r| {
            r.map(|(k, v)| (k.to_vec(), v.to_vec()))
                .map_err(LedgerError::from)
        })
    }
}
