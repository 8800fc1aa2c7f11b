//! `ledger export-checkpoint REF --out FILE.safetensors | --hf DIR`: a stage's weights
//! for Python users (`safetensors.torch.load_file`), or for an `lm` policy a whole
//! Hugging Face model directory (LoRA merged) that transformers and vLLM load, so any
//! stage can be served and registered as an HTTP engineer. REF: `BRANCH@stageN` (N >= 0; stage 0 is the
//! base model), a branch (its latest checkpoint), or the hash prefix of a
//! checkpoint_saved or stage_completed event.
use crate::cli::CliResult;
use std::path::Path;

pub fn export(dir: &Path, r: &str, out: Option<&Path>, hf: Option<&Path>) -> CliResult {
    use mapf_ledger::train::export::{export_checkpoint, ExportTo};
    if let Some(o) = out {
        mapf_ledger::output::check_file("--out", o)?;
    }
    let state = mapf_ledger::stage::load_checkpoint(dir, r)?;
    let to = match hf {
        Some(hf) => ExportTo::Hf(hf),
        None => ExportTo::Safetensors(out.expect("clap requires --out or --hf")),
    };
    print!("{}", export_checkpoint(&state, r, to)?.describe());
    Ok(())
}
