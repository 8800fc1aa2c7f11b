//! `ledger export-checkpoint REF --out FILE.safetensors | --hf DIR`: a stage's weights
//! for Python users (`safetensors.torch.load_file`), or for an `lm` policy a whole
//! Hugging Face model directory (LoRA merged) that transformers and vLLM load, so any
//! stage can be served and registered as an HTTP engineer. REF: `BRANCH@stageN` (N >= 0; stage 0 is the
//! base model), a branch (its latest checkpoint), or the hash prefix of a
//! checkpoint_saved or stage_completed event.
use crate::cli::{CliError, CliResult};
use mapf_ledger::train::TrainState;
use std::path::Path;

/// The training state of a checkpoint reference (see `stage::load_checkpoint`).
pub fn load_ref(dir: &Path, r: &str) -> Result<TrainState, CliError> {
    Ok(mapf_ledger::stage::load_checkpoint(dir, r)?)
}

pub fn export(dir: &Path, r: &str, out: Option<&Path>, hf: Option<&Path>) -> CliResult {
    if let Some(o) = out {
        mapf_ledger::output::check_file("--out", o)?;
    }
    let state = load_ref(dir, r)?;
    if let Some(hf) = hf {
        let lm = state.policy.as_lm().ok_or_else(|| {
            CliError::input(format!(
                "{r}: a {} checkpoint; --hf needs an lm policy (use --out FILE.safetensors)",
                state.policy.kind()
            ))
        })?;
        let files = mapf_ledger::train::export::export_hf(lm, hf)
            .map_err(|e| CliError::input(e.to_string()))?;
        println!(
            "wrote {} (config.json, model.safetensors, tokenizer.json; {} parameters{}, step {})",
            hf.display(),
            lm.model.cfg.parameter_count(),
            if lm.model.lora.is_some() {
                ", LoRA merged"
            } else {
                ""
            },
            state.global_step
        );
        for (name, hash) in files {
            println!("blake3 {hash}  {name}");
        }
        return Ok(());
    }
    let out = out.expect("clap requires --out or --hf");
    mapf_ledger::train::checkpoint::export_safetensors(state.policy.vars(), out)
        .map_err(|e| CliError::input(format!("{}: {e}", out.display())))?;
    println!(
        "wrote {} ({} policy, parameter hash {}, step {})",
        out.display(),
        state.policy.kind(),
        mapf_ledger::train::checkpoint::param_hash(state.policy.vars()).short(),
        state.global_step
    );
    Ok(())
}
