//! The testbed's input files as the `env` commands read them: an instance file (one
//! instance, one generated item, or a list of either, as `env generate --json`
//! writes), and a plan file (JSON `{"moves": …}` or plan text). This module turns
//! their text into typed values once ([`instance`], [`plan`]), and reads and writes the
//! files of the `env` commands with errors that name them ([`FileError`]).
use crate::instance::{Instance, Plan};
use crate::text::{self, ParseError};
use std::path::{Path, PathBuf};

/// A file of an `env` command that does not read or write, or whose text does not hold
/// what it should: the path, then why.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: {source}", path.display())]
    Instance {
        path: PathBuf,
        #[source]
        source: InstanceFileError,
    },
    #[error("{}: {source}", path.display())]
    Json {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    /// A MovingAI pair that does not import (its message names the file).
    #[error("{0}")]
    MovingAi(#[source] crate::movingai::MovingAiError),
}

/// The instance of the MovingAI `.map` file at `map` and the first `agents` lines of the
/// `.scen` file at `scen` (see [`crate::movingai::import`]).
pub fn import_movingai(map: &Path, scen: &Path, agents: usize) -> Result<Instance, FileError> {
    let (map_text, scen_text) = (read_text(map)?, read_text(scen)?);
    let (map_name, scen_name) = (map.display().to_string(), scen.display().to_string());
    crate::movingai::import(&map_name, &map_text, &scen_name, &scen_text, agents)
        .map_err(FileError::MovingAi)
}

/// The text of the file at `path`.
pub fn read_text(path: &Path) -> Result<String, FileError> {
    std::fs::read_to_string(path).map_err(|source| FileError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// The instance of the instance file at `path` (see [`instance`]).
pub fn read_instance(path: &Path, index: Option<usize>) -> Result<Instance, FileError> {
    instance(&read_text(path)?, index).map_err(|source| FileError::Instance {
        path: path.to_path_buf(),
        source,
    })
}

/// The JSON value of type `T` in the file at `path`.
pub fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, FileError> {
    serde_json::from_str(&read_text(path)?).map_err(|source| FileError::Json {
        path: path.to_path_buf(),
        source,
    })
}

/// The plan file at `path`, against `inst` (see [`plan`]).
pub fn read_plan(path: &Path, inst: &Instance) -> Result<Result<Plan, ParseError>, FileError> {
    plan(&read_text(path)?, inst).map_err(|source| FileError::Json {
        path: path.to_path_buf(),
        source,
    })
}

/// Write `value` as (compact) JSON to the file at `path`.
pub fn write_json(path: &Path, value: &impl serde::Serialize) -> Result<(), FileError> {
    let text = serde_json::to_string(value).expect("serializes");
    std::fs::write(path, text).map_err(|source| FileError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Why an instance file's text holds no instance (the caller names the file).
#[derive(Debug, thiserror::Error)]
pub enum InstanceFileError {
    #[error("{0}")]
    Json(#[from] serde_json::Error),
    #[error("--index {index} but the file holds {count} instance(s)")]
    IndexOutOfRange { index: usize, count: usize },
    #[error("the file holds {count} instances; pick one with --index N (0..{})", count.saturating_sub(1))]
    Ambiguous { count: usize },
    #[error("--index {0} but the file holds one instance")]
    NotAList(usize),
    #[error("not an instance: {0}")]
    NotAnInstance(serde_json::Error),
}

/// The instance of an instance file's `text`: the one it holds (`index`, when given,
/// must be 0), or the `index`th of a list (needed when the list has several); a
/// generated item (`{"instance": …, "reference": …, …}`) gives its instance.
pub fn instance(text: &str, index: Option<usize>) -> Result<Instance, InstanceFileError> {
    let value: serde_json::Value = serde_json::from_str(text)?;
    let item = match value {
        serde_json::Value::Array(items) => {
            let n = items.len();
            let i = match (index, n) {
                (Some(i), _) if i < n => i,
                (Some(i), _) => {
                    return Err(InstanceFileError::IndexOutOfRange { index: i, count: n })
                }
                (None, 1) => 0,
                (None, _) => return Err(InstanceFileError::Ambiguous { count: n }),
            };
            items.into_iter().nth(i).expect("in range")
        }
        v => {
            if let Some(i) = index.filter(|&i| i > 0) {
                return Err(InstanceFileError::NotAList(i));
            }
            v
        }
    };
    let item = match item {
        serde_json::Value::Object(mut m) if m.contains_key("instance") => {
            m.remove("instance").expect("present")
        }
        v => v,
    };
    serde_json::from_value(item).map_err(InstanceFileError::NotAnInstance)
}

/// A plan file's `text`: JSON when its first non-blank character is `{` (a JSON error
/// is the outer error: bad input), else plan text parsed against `inst` (the cells it
/// states, in the cells format, are checked; a parse error is the plan's failure).
pub fn plan(text: &str, inst: &Instance) -> Result<Result<Plan, ParseError>, serde_json::Error> {
    if text.trim_start().starts_with('{') {
        serde_json::from_str::<Plan>(text).map(Ok)
    } else {
        Ok(text::parse_plan_in(text, inst))
    }
}
