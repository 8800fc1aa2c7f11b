//! Environment engineers: between stages, an engineer reads the evidence (the paper's
//! five context modules) and proposes the next stage's generator configuration.
//!
//! Every engineer answers through the same [`Engineer`] trait with a [`Decision`]; the
//! stage pipeline validates and projects the proposal onto the legal ranges and records
//! what it proposed, what was applied, what was clipped and why.
pub mod builtin;
pub mod context;
pub mod llm;
pub mod model;
pub mod probe;
pub mod teacher;

pub use context::{EngineerContext, HistoryEntry};

use crate::env::ConfigProposal;
use crate::ledger::BranchState;
use crate::stage::{next_stage, stage_seed, Pipeline, StageError};

/// What an engineer answers.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Decision {
    /// The proposed configuration, or None when the engineer produced nothing usable.
    pub proposal: Option<ConfigProposal>,
    /// The proposal as the engineer wrote it (JSON text), for the record.
    pub proposed_text: Option<String>,
    pub rationale: String,
    /// The exact prompt and raw reply (LLM engineers).
    pub prompt: Option<String>,
    pub reply: Option<String>,
    /// Why the engineer failed, when it did (the stage then keeps the previous config).
    pub error: Option<String>,
    /// Keys of the reply no engineer may set, with their values (recorded, not applied).
    pub refused: Vec<crate::env::RefusedField>,
}

/// An environment engineer.
pub trait Engineer {
    fn name(&self) -> &str;
    fn decide(&mut self, ctx: &EngineerContext) -> Decision;
}

/// `fixed`: keeps the configuration (the fixed-environment baseline).
pub struct Fixed;

impl Engineer for Fixed {
    fn name(&self) -> &str {
        "fixed"
    }
    fn decide(&mut self, ctx: &EngineerContext) -> Decision {
        Decision {
            proposal: Some(ConfigProposal::default()),
            proposed_text: Some("{}".into()),
            rationale: format!(
                "fixed environment: stage {} keeps the current configuration",
                ctx.stage
            ),
            ..Decision::default()
        }
    }
}

/// Build the engineer `name` for the next stage of a branch.
pub fn build(
    name: &str,
    pipeline: &Pipeline<'_>,
    state: &BranchState,
) -> Result<Box<dyn Engineer>, StageError> {
    build_replaying(name, pipeline, state, None)
}

/// [`build`] for a replay: an LLM engineer answers from `recorded` (the branch's
/// recorded replies, by prompt hash) instead of calling its endpoint.
pub fn build_replaying(
    name: &str,
    pipeline: &Pipeline<'_>,
    state: &BranchState,
    recorded: Option<&llm::RecordedReplies>,
) -> Result<Box<dyn Engineer>, StageError> {
    match name {
        "fixed" => Ok(Box::new(Fixed)),
        "random" => Ok(Box::new(builtin::Random {
            seed: stage_seed(&pipeline.plan, next_stage(state), state.replicate),
        })),
        "heuristic" => Ok(Box::new(builtin::Heuristic)),
        "current" | "base" => {
            let next = next_stage(state);
            let stage = if name == "base" {
                0
            } else {
                next.saturating_sub(1)
            };
            let blob = state
                .stage(stage)
                .and_then(|s| s.checkpoint)
                .map(|c| c.0)
                .ok_or_else(|| {
                    StageError::Diverged(format!(
                        "engineer {name}: stage {stage} has no checkpoint"
                    ))
                })?;
            let ts = crate::stage::load_state(pipeline.ledger, &blob, pipeline.device)?;
            let seed = stage_seed(&pipeline.plan, next, state.replicate).child("engineer", 0);
            if ts.policy.as_lm().is_some() {
                // The checkpoint writes the proposal itself.
                let policy = crate::train::lm::downcast(ts.policy).expect("an lm policy");
                let spec = &pipeline.plan.lm;
                return Ok(Box::new(model::ModelEngineer {
                    name: name.to_string(),
                    policy,
                    seed,
                    sampling: spec.engineer_sampling(),
                    max_prompt_tokens: spec.engineer_prompt_tokens,
                }));
            }
            Ok(Box::new(probe::Probe {
                name: name.to_string(),
                policy: ts.policy,
                seed,
            }))
        }
        // A registered LLM engineer on this branch.
        other if state.engineers.iter().any(|e| e == other) => {
            match llm::registered(pipeline.ledger, state, other) {
                Ok(reg) => {
                    let mut engineer = llm::LlmEngineer::new(reg);
                    engineer.recorded = recorded.cloned();
                    Ok(Box::new(engineer))
                }
                Err(llm::LlmError::Ledger(e)) => Err(StageError::Ledger(e)),
                Err(_) => Err(StageError::UnknownEngineer(other.to_string())),
            }
        }
        other => Err(StageError::UnknownEngineer(other.to_string())),
    }
}
