//! The one-writer rule: an OS file lock (flock) on `<ledger>/LOCK`, taken exclusively
//! by the writer before it opens anything. Readers take no lock (they read a snapshot
//! of `REFS`); a second writer gets [`StoreError::Locked`] naming the ledger.
use crate::StoreError;
use fs4::FileExt;
use std::fs::{File, OpenOptions};
use std::path::Path;
use std::time::{Duration, Instant};

/// A held lock; released when dropped (or when the process dies).
pub struct LedgerLock {
    _file: File,
}

/// Whether a writer holds ledger `ledger` right now (a probe; takes nothing).
pub fn writer_active(ledger: &Path) -> bool {
    let Ok(file) = OpenOptions::new().read(true).open(ledger.join("LOCK")) else {
        return false;
    };
    match FileExt::try_lock_shared(&file) {
        Ok(()) => {
            let _ = FileExt::unlock(&file);
            false
        }
        Err(_) => true,
    }
}

impl LedgerLock {
    /// Take the lock without blocking: exclusive for a writer, shared for a reader.
    pub fn acquire(ledger: &Path, exclusive: bool) -> Result<LedgerLock, StoreError> {
        let path = ledger.join("LOCK");
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| StoreError::Io {
                path: path.clone(),
                message: e.to_string(),
            })?;
        // A lock released a moment ago can linger while a child process spawned by this
        // one is between fork and exec (it shares the open file); retry briefly.
        let deadline = Instant::now() + Duration::from_millis(300);
        loop {
            let r = if exclusive {
                FileExt::try_lock(&file)
            } else {
                FileExt::try_lock_shared(&file)
            };
            match r {
                Ok(()) => return Ok(LedgerLock { _file: file }),
                Err(fs4::TryLockError::WouldBlock) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(fs4::TryLockError::WouldBlock) => {
                    return Err(StoreError::Locked {
                        path: ledger.to_path_buf(),
                    })
                }
                Err(fs4::TryLockError::Error(e)) => {
                    return Err(StoreError::Io {
                        path,
                        message: e.to_string(),
                    })
                }
            }
        }
    }
}
