//! A checkpoint's weights for use outside the ledger (`ledger export-checkpoint`): for
//! an `lm` policy, a whole Hugging Face model directory (LoRA merged) that transformers
//! and vLLM load, with the content hash of every file written (what a model card
//! states, and what an `hf:` init records and re-checks).
use super::lm::{hf, LmError, LmPolicy};
use std::path::{Path, PathBuf};

/// The files [`export_hf`] writes, in the order their hashes are listed.
pub const HF_FILES: [&str; 6] = [
    "config.json",
    "generation_config.json",
    hf::MAPF_FILE,
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
];

/// Why an HF directory could not be written.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("{0}")]
    Write(#[source] LmError),
    #[error("{}: {error}", path.display())]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
}

/// Write `lm` as an HF model directory at `dir` (its prompt format recorded beside the
/// weights); each file of [`HF_FILES`] with its blake3 hash (hex).
pub fn export_hf(lm: &LmPolicy, dir: &Path) -> Result<Vec<(&'static str, String)>, ExportError> {
    hf::export(dir, &lm.model, &lm.tokenizer_json, lm.arch.chat)
        .and_then(|()| hf::write_prompt_style(dir, lm.arch.prompt))
        .map_err(ExportError::Write)?;
    HF_FILES
        .iter()
        .map(|&name| {
            let path = dir.join(name);
            let bytes = std::fs::read(&path).map_err(|error| ExportError::Read { path, error })?;
            Ok((name, blake3::hash(&bytes).to_hex().to_string()))
        })
        .collect()
}

/// Why `ledger export-checkpoint` wrote nothing.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointExportError {
    #[error(
        "{reference}: a {kind} checkpoint; --hf needs an lm policy (use --out FILE.safetensors)"
    )]
    NotLm {
        reference: String,
        kind: &'static str,
    },
    /// The HF directory could not be written. Its text only, as the command has always
    /// said it: an input error.
    #[error("{0}")]
    Hf(ExportError),
    #[error("{}: {error}", path.display())]
    Safetensors { path: PathBuf, error: tch::TchError },
}

/// What `ledger export-checkpoint` wrote: an HF directory ([`export_hf`]) or a
/// safetensors file of the trained parameters.
pub enum Exported {
    Hf {
        dir: PathBuf,
        files: Vec<(&'static str, String)>,
        parameters: i64,
        lora: bool,
        step: u64,
    },
    Safetensors {
        file: PathBuf,
        kind: &'static str,
        param_hash: crate::record::Hash,
        step: u64,
    },
}

/// Where `ledger export-checkpoint` writes.
pub enum ExportTo<'a> {
    /// An HF model directory (`--hf DIR`).
    Hf(&'a Path),
    /// A safetensors file of the trained parameters (`--out FILE`).
    Safetensors(&'a Path),
}

/// Write checkpoint `state` (of reference `reference`) where `to` says: an HF directory
/// (an `lm` policy only, LoRA merged) or a safetensors file.
pub fn export_checkpoint(
    state: &super::TrainState,
    reference: &str,
    to: ExportTo<'_>,
) -> Result<Exported, CheckpointExportError> {
    let step = state.global_step;
    let out = match to {
        ExportTo::Safetensors(out) => out,
        ExportTo::Hf(dir) => {
            let lm = state
                .policy
                .as_lm()
                .ok_or_else(|| CheckpointExportError::NotLm {
                    reference: reference.to_string(),
                    kind: state.policy.kind(),
                })?;
            let files = export_hf(lm, dir).map_err(CheckpointExportError::Hf)?;
            return Ok(Exported::Hf {
                dir: dir.to_path_buf(),
                files,
                parameters: lm.model.cfg.parameter_count(),
                lora: lm.model.lora.is_some(),
                step,
            });
        }
    };
    let vars = state.policy.vars();
    super::checkpoint::export_safetensors(vars, out).map_err(|error| {
        CheckpointExportError::Safetensors {
            path: out.to_path_buf(),
            error,
        }
    })?;
    Ok(Exported::Safetensors {
        file: out.to_path_buf(),
        kind: state.policy.kind(),
        param_hash: super::checkpoint::param_hash(vars),
        step,
    })
}

impl Exported {
    /// What the command prints: the directory or file, its parameters and step, and for
    /// a directory the blake3 hash of every file.
    pub fn describe(&self) -> String {
        match self {
            Exported::Hf {
                dir,
                files,
                parameters,
                lora,
                step,
            } => {
                let mut s = format!(
                    "wrote {} (config.json, model.safetensors, tokenizer.json; {parameters} parameters{}, step {step})\n",
                    dir.display(),
                    if *lora { ", LoRA merged" } else { "" },
                );
                for (name, hash) in files {
                    s.push_str(&format!("blake3 {hash}  {name}\n"));
                }
                s
            }
            Exported::Safetensors {
                file,
                kind,
                param_hash,
                step,
            } => format!(
                "wrote {} ({kind} policy, parameter hash {}, step {step})\n",
                file.display(),
                param_hash.short()
            ),
        }
    }
}
