//! Output files named on the command line (`--out`, `--plot`, `--items`): checked before
//! any work, so a long command never computes everything and then fails on its last
//! line, and written whole (a temporary file beside the target, renamed onto it). The
//! errors name the flag and the path; the CLI ends them with exit 2.
use std::path::{Path, PathBuf};

/// An output file that cannot be written where its flag says.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    #[error("{flag} {}: is a directory (give a file name)", path.display())]
    IsDirectory { flag: &'static str, path: PathBuf },
    /// A device or a pipe: renaming a temporary file over it would replace the special
    /// file itself (`/dev/null` as root).
    #[error("{flag} {}: not a regular file (outputs are written whole and renamed into place)", path.display())]
    NotRegular { flag: &'static str, path: PathBuf },
    #[error("{flag} {}: directory {} is not writable", path.display(), dir.display())]
    ReadOnlyDirectory {
        flag: &'static str,
        path: PathBuf,
        dir: PathBuf,
    },
    #[error("{flag} {}: directory {} does not exist", path.display(), dir.display())]
    NoDirectory {
        flag: &'static str,
        path: PathBuf,
        dir: PathBuf,
    },
    /// What [`check_file_in_directory`] refuses.
    #[error("{flag} {}: expected a file in an existing directory", path.display())]
    NotAFileInADirectory { flag: &'static str, path: PathBuf },
    #[error("{flag} {}: not a file name", path.display())]
    NoFileName { flag: &'static str, path: PathBuf },
    #[error("{}: {source}", path.display())]
    Create {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{flag} {}: {source}", path.display())]
    Write {
        flag: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Check, before any work, that an output file can be written where `flag` says: its
/// directory exists and is writable, and it is not a directory or a special file itself.
pub fn check_file(flag: &'static str, path: &Path) -> Result<(), OutputError> {
    let path_buf = || path.to_path_buf();
    if path.is_dir() {
        return Err(OutputError::IsDirectory {
            flag,
            path: path_buf(),
        });
    }
    // Outputs are written to a temporary file renamed over the target: over a device
    // or a pipe (`/dev/null` as root) that would replace the special file itself.
    if let Ok(m) = std::fs::metadata(path) {
        if !m.is_file() {
            return Err(OutputError::NotRegular {
                flag,
                path: path_buf(),
            });
        }
    }
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let dir = parent.to_path_buf();
    match std::fs::metadata(parent) {
        Ok(m) if m.is_dir() && !m.permissions().readonly() => Ok(()),
        Ok(m) if m.is_dir() => Err(OutputError::ReadOnlyDirectory {
            flag,
            path: path_buf(),
            dir,
        }),
        _ => Err(OutputError::NoDirectory {
            flag,
            path: path_buf(),
            dir,
        }),
    }
}

/// The lighter check of `eval --items`: `path` is not a directory, and its directory
/// (if it names one) exists.
pub fn check_file_in_directory(flag: &'static str, path: &Path) -> Result<(), OutputError> {
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
    if parent.is_some_and(|p| !p.is_dir()) || path.is_dir() {
        return Err(OutputError::NotAFileInADirectory {
            flag,
            path: path.to_path_buf(),
        });
    }
    Ok(())
}

/// Create (or truncate) the file at `path`, buffered, for a command's output.
pub fn create(path: &Path) -> Result<std::io::BufWriter<std::fs::File>, OutputError> {
    let file = std::fs::File::create(path).map_err(|source| OutputError::Create {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(std::io::BufWriter::new(file))
}

/// Write `text` to `path` whole or not at all: a hidden file beside it, renamed onto it
/// (removed again if the write fails).
pub fn write_whole(flag: &'static str, path: &Path, text: &str) -> Result<(), OutputError> {
    let name = path.file_name().ok_or_else(|| OutputError::NoFileName {
        flag,
        path: path.to_path_buf(),
    })?;
    let tmp = path.with_file_name(format!(".{}.tmp", name.to_string_lossy()));
    let written = std::fs::write(&tmp, text).and_then(|()| std::fs::rename(&tmp, path));
    if let Err(source) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(OutputError::Write {
            flag,
            path: path.to_path_buf(),
            source,
        });
    }
    Ok(())
}
