//! `ledger export-checkpoint REF --out FILE.safetensors`: a stage's weights for Python
//! users (`safetensors.torch.load_file`). REF: `BRANCH@stageN` (N >= 0; stage 0 is the
//! base model), a branch (its latest checkpoint), or the hash prefix of a
//! checkpoint_saved or stage_completed event.
use super::{CliError, CliResult};
use crate::ledger::{EventBody, Hash, Ledger, Resolved};
use crate::train::TrainState;
use std::path::Path;

fn checkpoint_of(ledger: &mut Ledger, r: &str) -> Result<Hash, String> {
    let stage_ref = r
        .split_once('@')
        .and_then(|(b, s)| Some((b, s.strip_prefix("stage")?.parse::<u32>().ok()?)));
    if let Some((branch, n)) = stage_ref {
        let state = ledger.projection(branch).map_err(|e| e.to_string())?;
        return state
            .stage(n)
            .and_then(|s| s.checkpoint)
            .map(|c| c.0)
            .ok_or_else(|| format!("{r}: stage {n} of {branch} has no checkpoint"));
    }
    match ledger.resolve(r).map_err(|e| e.to_string())? {
        Resolved::Branch { name, .. } => {
            let state = ledger.projection(&name).map_err(|e| e.to_string())?;
            state
                .stages
                .iter()
                .rev()
                .find_map(|s| s.checkpoint.map(|c| c.0))
                .ok_or_else(|| format!("{r}: branch {name} has no checkpoint yet"))
        }
        Resolved::Event(h) => match ledger.event(&h).map_err(|e| e.to_string())?.body {
            EventBody::CheckpointSaved(c) => Ok(c.blob),
            EventBody::StageCompleted(c) => c
                .checkpoint
                .ok_or_else(|| format!("{r}: the stage has no checkpoint")),
            other => Err(format!("{r}: a {} event, not a checkpoint", other.kind())),
        },
        Resolved::Stage { .. } => unreachable!("BRANCH@stageN handled above"),
    }
}

pub fn export(dir: &Path, r: &str, out: &Path) -> CliResult {
    let mut ledger = Ledger::open_read_only(dir).map_err(|e| CliError::input(e.to_string()))?;
    let blob = checkpoint_of(&mut ledger, r).map_err(CliError::input)?;
    let bytes = ledger
        .blob(&blob)
        .map_err(|e| CliError::input(e.to_string()))?;
    let state = TrainState::load(&bytes, tch::Device::Cpu)
        .map_err(|e| CliError::input(format!("{r}: {e}")))?;
    crate::train::checkpoint::export_safetensors(state.policy.vars(), out)
        .map_err(|e| CliError::input(format!("{}: {e}", out.display())))?;
    println!(
        "wrote {} ({} policy, parameter hash {}, step {})",
        out.display(),
        state.policy.kind(),
        crate::train::checkpoint::param_hash(state.policy.vars()).short(),
        state.global_step
    );
    Ok(())
}
