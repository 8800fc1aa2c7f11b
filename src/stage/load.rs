//! Loading what a command names as a model: a checkpoint reference of a ledger
//! (`BRANCH@stageN`, a branch, a checkpoint event) as a training state, or a language
//! model from an HF directory or a checkpoint reference.
use super::{ledger_plan, load_state, StageError};
use crate::ledger::Ledger;
use crate::seed::Seed;
use crate::train::compute::Compute;
use crate::train::lm::{LmPolicy, PromptStyle, Sampling};
use crate::train::TrainState;
use std::path::Path;

/// The training state of checkpoint reference `r` in the ledger at `dir`, on the CPU in
/// the compute dtype the ledger's plan trains in (a bf16-trained LoRA model is its
/// adapters on the bf16-rounded base it was trained on).
pub fn load_checkpoint(dir: &Path, r: &str) -> Result<TrainState, StageError> {
    let mut ledger = Ledger::open_read_only(dir)?;
    let blob = ledger.checkpoint_of(r)?;
    let plan = ledger_plan(&ledger)?;
    load_state(
        &ledger,
        &blob,
        Compute::new(tch::Device::Cpu, plan.train.dtype),
    )
    .map_err(|e| StageError::Checkpoint {
        reference: r.to_string(),
        source: Box::new(e),
    })
}

/// What a command's `--model` names when it is not a model directory: a checkpoint
/// reference in the ledger at `dir`. When it is not that either (no ledger there, no
/// such branch or event), the error says both readings failed and names `model` as
/// given, so a mistyped directory is not reported as a problem of the ledger. A
/// damaged ledger stays a ledger error (a failed check).
pub fn load_model_checkpoint(dir: &Path, model: &str) -> Result<TrainState, StageError> {
    use crate::ledger::LedgerError as L;
    use ledger_store::StoreError as S;
    load_checkpoint(dir, model).map_err(|e| match e {
        StageError::Ledger(
            e @ (L::Store(S::NotALedger { .. } | S::UnknownBranch { .. } | S::UnknownEvent { .. })
            | L::UnknownBranch { .. }
            | L::BadReference { .. }
            | L::Ambiguous { .. }),
        ) => StageError::NotAModel {
            model: model.to_string(),
            exists: Path::new(model).exists(),
            ledger: dir.to_path_buf(),
            as_checkpoint: Box::new(e),
        },
        e => e,
    })
}

/// A language model: from an HF directory (`model` holds `config.json`; its MAPF
/// prompt format from `mapf-ledger.json` where it says, else the paper's prompt), or
/// from checkpoint reference `model` in the ledger at `dir`.
pub fn load_language_model(
    dir: &Path,
    model: &str,
    device: tch::Device,
) -> Result<LmPolicy, StageError> {
    let p = Path::new(model);
    if p.join("config.json").exists() {
        let prompt = crate::train::lm::hf::read_prompt_style(p)
            .map_err(StageError::HfModel)?
            .unwrap_or(PromptStyle::Paper);
        return LmPolicy::from_hf_dir(p, device, None, prompt, Sampling::default(), Seed::root(0))
            .map_err(StageError::HfModel);
    }
    if p.is_dir() {
        return Err(StageError::NoConfigJson {
            model: model.to_string(),
        });
    }
    let state = load_model_checkpoint(dir, model)?;
    let kind = state.policy.kind();
    crate::train::lm::downcast(state.policy).ok_or_else(|| StageError::NotLm {
        model: model.to_string(),
        kind,
    })
}

/// A policy that `model` names, on `device`: a language model ([`load_language_model`])
/// when `lm_only` or when `model` is an HF directory, else any checkpoint reference of
/// the ledger at `dir` ([`load_checkpoint`]), which loads on the CPU.
pub fn load_policy(
    dir: &Path,
    model: &str,
    lm_only: bool,
    device: tch::Device,
) -> Result<Box<dyn crate::train::policy::Policy>, StageError> {
    if lm_only || Path::new(model).join("config.json").exists() {
        Ok(Box::new(load_language_model(dir, model, device)?))
    } else {
        Ok(load_checkpoint(dir, model)?.policy)
    }
}

/// The model `ledger eval` scores: a language model from a directory (its MAPF prompt
/// format `prompt` when given), or any checkpoint reference of the ledger at `dir`,
/// which keeps the format it recorded ([`StageError::PromptOfCheckpoint`] if `prompt`
/// is given).
pub fn load_scored_model(
    dir: &Path,
    model: &str,
    prompt: Option<PromptStyle>,
    device: tch::Device,
) -> Result<Box<dyn crate::train::policy::Policy>, StageError> {
    let p = Path::new(model);
    if p.join("config.json").exists() || p.is_dir() {
        let mut lm = load_language_model(dir, model, device)?;
        if let Some(style) = prompt {
            lm.arch.prompt = style;
        }
        return Ok(Box::new(lm));
    }
    if prompt.is_some() {
        return Err(StageError::PromptOfCheckpoint);
    }
    Ok(load_model_checkpoint(dir, model)?.policy)
}

/// How a model name that is not a directory reads as a path (in
/// [`StageError::NotAModel`]): a file of that name, or nothing at all.
pub(super) fn not_a_directory(model: &str, exists: bool) -> String {
    if exists {
        format!("{model} is not a directory")
    } else {
        format!("no such file or directory {model}")
    }
}
