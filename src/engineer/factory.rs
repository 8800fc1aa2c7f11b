//! The one engineer factory: every engineer is built here, for a stage (and so for
//! replays, forks and studies, which run stages) and for `ledger engineer eval`. What
//! differs between them is only where an engineer's policy ([`Policies`]) and an LLM
//! engineer's registration ([`Llms`]) come from; the names are the registry's
//! ([`super::BUILTINS`]), then LLM engineers, and for the benchmark the teacher.
use super::text::TextRevision;
use super::{builtin, llm, model, probe, teacher, BuildError, BuildInputs, Engineer};
use super::{EngineerNameError, Fixed};
use crate::ledger::{BranchState, Hash, Ledger};
use crate::seed::Seed;
use crate::train::policy::Policy;
use crate::train::TrainState;

/// Where the policy of an engineer that reads one comes from.
pub enum Policies<'a> {
    /// A branch's stage checkpoints: `current` and `learnability` read the checkpoint
    /// of the stage before the one designed, `base` stage 0's.
    Checkpoints {
        inputs: &'a BuildInputs<'a>,
        state: &'a BranchState,
    },
    /// A loaded model (`ledger engineer eval --model`), for the one engineer being
    /// built; None when none was named.
    Model(Option<Box<dyn Policy>>),
}

/// Where an LLM engineer's registration comes from.
pub enum Llms<'a> {
    /// The engineers registered on a branch.
    Branch {
        ledger: &'a Ledger,
        state: &'a BranchState,
    },
    /// One registration given directly (`ledger engineer eval --engineer http`).
    Given(llm::LlmRegistration),
    /// None: a name that is no built-in is unknown.
    None,
}

/// Which names are built: a stage's (the built-ins and LLM engineers), or the
/// benchmark's, which also knows the pretraining teacher (`teacher-vN`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    Stage,
    Benchmark,
}

/// Everything an engineer is made from.
pub struct Recipe<'a> {
    /// The plan's engineer text revision.
    pub text: TextRevision,
    /// The plan's `[lm]`: a model engineer's sampling, prompt budget and attempts.
    pub lm: &'a crate::train::lm::LmSpec,
    /// The designed stage's seed: `random` draws from it, the engineers that sample
    /// from its `engineer` child. (A benchmark reseeds each decision:
    /// [`Engineer::reseed`].)
    pub stage_seed: Seed,
    pub policies: Policies<'a>,
    pub llms: Llms<'a>,
    /// A replay's recorded LLM replies, answered instead of calling the endpoint.
    pub recorded: Option<&'a llm::RecordedReplies>,
    pub scope: Scope,
}

/// Which checkpoint a policy-reading engineer reads.
#[derive(Clone, Copy)]
enum Which {
    /// The stage before the one designed.
    Current,
    /// Stage 0.
    Base,
}

impl Policies<'_> {
    fn take(&mut self, name: &str, which: Which) -> Result<Box<dyn Policy>, BuildError> {
        match self {
            Policies::Checkpoints { inputs, state } => {
                let stage = match which {
                    Which::Current => inputs.stage.saturating_sub(1),
                    Which::Base => 0,
                };
                Ok(checkpoint_state(inputs, state, name, stage)?.policy)
            }
            Policies::Model(m) => m
                .take()
                .ok_or_else(|| BuildError::NoModel { name: name.into() }),
        }
    }

    /// The policy kind an `lm`-only engineer needs and did not get.
    fn kind(&self) -> String {
        match self {
            Policies::Checkpoints { inputs, .. } => inputs.plan.policy.name().to_string(),
            Policies::Model(m) => m.as_ref().map_or("none".into(), |p| p.kind().to_string()),
        }
    }
}

/// The training state of stage `stage`'s checkpoint on a branch.
fn checkpoint_state(
    inputs: &BuildInputs<'_>,
    state: &BranchState,
    name: &str,
    stage: u32,
) -> Result<TrainState, BuildError> {
    let blob = state
        .stage(stage)
        .and_then(|s| s.checkpoint)
        .map(|c| c.0)
        .ok_or_else(|| BuildError::NoCheckpoint {
            name: name.into(),
            stage,
        })?;
    let bytes = inputs.ledger.blob(&blob)?;
    let fetch = |h: &Hash| inputs.ledger.blob(h);
    let compute = crate::train::compute::Compute::new(inputs.device, inputs.plan.train.dtype);
    let mut state = TrainState::load(&bytes, compute, &fetch)?;
    state.policy.apply_settings(inputs.plan.policy_settings());
    Ok(state)
}

/// Whether `name` is made without a registration: a built-in engineer, or (for the
/// benchmark) the pretraining teacher `teacher-vN` (`seed`: the stage's seed).
pub fn needs_no_registration(name: &str, seed: Seed) -> bool {
    builtin(name).is_some() || teacher::Teacher::named(name, seed).is_some()
}

/// The engineer called `name`, made from `r`.
pub fn make(name: &str, mut r: Recipe<'_>) -> Result<Box<dyn Engineer>, BuildError> {
    let seed = r.stage_seed.child("engineer", 0);
    let Some(b) = super::builtin(name) else {
        if r.scope == Scope::Benchmark {
            if let Some(t) = teacher::Teacher::named(name, seed) {
                return Ok(Box::new(t?));
            }
        }
        let reg = match r.llms {
            Llms::Branch { ledger, state } => match llm::registered(ledger, state, name) {
                Ok(reg) => reg,
                Err(llm::LlmError::Ledger(e)) => return Err(BuildError::Ledger(e)),
                Err(e) => return Err(BuildError::Registry(e)),
            },
            Llms::Given(reg) => reg,
            Llms::None => {
                return Err(BuildError::Name(EngineerNameError::Unknown {
                    name: name.into(),
                    registered: vec![],
                }))
            }
        };
        let mut engineer = llm::LlmEngineer::new(reg, r.text);
        engineer.recorded = r.recorded.cloned();
        return Ok(Box::new(engineer));
    };
    if b.lm_only {
        let which = if name == "base" {
            Which::Base
        } else {
            Which::Current
        };
        let kind = r.policies.kind();
        let policy =
            crate::train::lm::downcast(r.policies.take(name, which)?).ok_or_else(|| {
                BuildError::Name(EngineerNameError::NeedsLm {
                    name: name.into(),
                    policy: kind,
                })
            })?;
        return Ok(Box::new(model::ModelEngineer {
            name: name.to_string(),
            policy,
            seed,
            sampling: r.lm.engineer_sampling(),
            max_prompt_tokens: r.lm.engineer_prompt_tokens,
            attempts: r.lm.engineer_attempts,
            text: r.text,
        }));
    }
    match name {
        "random" => Ok(Box::new(builtin::Random { seed: r.stage_seed })),
        "heuristic" => Ok(Box::new(builtin::Heuristic)),
        "blind" => Ok(Box::new(builtin::Blind)),
        "learnability" => Ok(Box::new(probe::Probe {
            name: name.into(),
            policy: r.policies.take(name, Which::Current)?,
            seed,
        })),
        "fixed" => Ok(Box::new(Fixed)),
        super::ORACLE => Err(BuildError::Searches),
        // A built-in this factory does not know yet.
        _ => Err(BuildError::Name(EngineerNameError::Unknown {
            name: name.into(),
            registered: vec![],
        })),
    }
}
