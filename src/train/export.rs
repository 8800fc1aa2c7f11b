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
