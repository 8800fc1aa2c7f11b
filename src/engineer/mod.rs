//! Environment engineers: between stages, an engineer reads the evidence (the paper's
//! five context modules) and proposes the next stage's generator configuration.
//!
//! Every engineer answers through the same [`Engineer`] trait with a [`Decision`]; the
//! stage pipeline validates and projects the proposal onto the legal ranges and records
//! what it proposed, what was applied, what was clipped and why.
pub mod builtin;
pub use crate::context;
pub mod eval;
pub mod factory;
pub mod llm;
pub mod model;
pub mod probe;
pub mod registration;
pub mod reply;
pub mod rl;
pub mod teacher;
pub mod text;
/// The prompt builder (in [`text`], with the rest of the engineer text).
pub use text::prompt;

pub use context::{EngineerContext, HistoryEntry};

use crate::env::ConfigProposal;
use crate::ledger::{BranchState, Ledger, LedgerError, LedgerPlan};
use crate::seed::Seed;
use crate::train::TrainError;

/// What building an engineer reads: the ledger (checkpoints, registered LLM engineers),
/// the plan, the device, and the stage it designs with that stage's seed. The stage
/// pipeline fills it in; engineers know nothing of the pipeline.
pub struct BuildInputs<'a> {
    pub ledger: &'a Ledger,
    pub plan: &'a LedgerPlan,
    pub device: tch::Device,
    /// The stage the engineer designs.
    pub stage: u32,
    /// That stage's seed (`stage::stage_seed`).
    pub stage_seed: Seed,
}

/// Why an engineer could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error(transparent)]
    Name(#[from] EngineerNameError),
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    #[error(transparent)]
    Train(#[from] TrainError),
    #[error("engineer {name}: stage {stage} has no checkpoint")]
    NoCheckpoint { name: String, stage: u32 },
    #[error(transparent)]
    Text(#[from] text::UnknownRevision),
    /// A registered LLM engineer's record could not be read.
    #[error(transparent)]
    Registry(llm::LlmError),
    /// An engineer that reads a policy was given none (`engineer eval` without --model).
    #[error("engineer {name}: needs a model")]
    NoModel { name: String },
    /// The oracle asked to answer one context: it decides by training whole stages.
    #[error("engineer oracle decides by training the stage on each candidate; it designs the stages of a run, fork or study, not a single context")]
    Searches,
}

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
    /// The decoding an in-process model engineer did for this decision (tokens, decode
    /// work; every attempt), for the stage's timing; None for other engineers. Never
    /// recorded in an event.
    pub work: Option<crate::train::timing::Work>,
    /// Set when the engineer never answered (see [`Unanswered`]): then this is no
    /// decision, and nothing of it is recorded.
    pub unanswered: Option<Unanswered>,
}

/// An engineer that never answered: its endpoint refused the connection, timed out or
/// failed with a 5xx on every one of its bounded attempts, refused the request (a 4xx),
/// or could not be called at all (its API key variable is unset). An answer that does
/// not parse is the engineer's decision and is recorded; silence is not: a stage that
/// gets this records no decision and stops ([`crate::stage::StageError::Unanswered`]),
/// so `run` can resume it once the endpoint answers, and no study arm quietly becomes
/// `fixed`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("engineer {engineer} did not answer at {url}: {cause}")]
pub struct Unanswered {
    /// The engineer's registered name.
    pub engineer: String,
    /// The endpoint it was called at.
    pub url: String,
    /// Why no answer came (with the attempt log).
    pub cause: String,
}

/// An environment engineer.
pub trait Engineer {
    fn name(&self) -> &str;
    fn decide(&mut self, ctx: &EngineerContext) -> Decision;
    /// The seed of the next decision, for engineers that draw (a benchmark gives each
    /// context its own, so a decision does not depend on the contexts before it; a
    /// stage builds one engineer per decision, seeded by the factory). Others ignore it.
    fn reseed(&mut self, _seed: Seed) {}
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

/// One built-in engineer: its name, what it is, and whether it needs an `lm` policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Builtin {
    pub name: &'static str,
    pub about: &'static str,
    /// Only for `lm` policies: the policy model itself writes the proposal.
    pub lm_only: bool,
    /// Reads a policy: a branch's checkpoint, or `engineer eval`'s --model.
    pub reads_policy: bool,
}

/// The built-in engineers: every list of names (help, errors, reserved names) reads
/// this one.
pub const BUILTINS: [Builtin; 8] = [
    Builtin {
        name: "fixed",
        about: "keeps the configuration (the fixed-environment baseline)",
        lm_only: false,
        reads_policy: false,
    },
    Builtin {
        name: "random",
        about: "a random legal configuration (domain randomisation)",
        lm_only: false,
        reads_policy: false,
    },
    Builtin {
        name: "heuristic",
        about: "a practitioner's rule-based curriculum",
        lm_only: false,
        reads_policy: false,
    },
    Builtin {
        name: "blind",
        about: "more data, fewer holes and more waits on the two sizes with the most failures, reading no failure kind (the benchmark's control)",
        lm_only: false,
        reads_policy: false,
    },
    Builtin {
        name: "learnability",
        about: "probes edits with the policy's own sampled pass rates, picks the highest p(1-p)",
        lm_only: false,
        reads_policy: true,
    },
    Builtin {
        name: "current",
        about: "the current checkpoint writes the proposal (lm policies)",
        lm_only: true,
        reads_policy: true,
    },
    Builtin {
        name: "base",
        about: "the stage-0 base model writes the proposal (lm policies)",
        lm_only: true,
        reads_policy: true,
    },
    Builtin {
        name: "oracle",
        about: "trains the stage on each candidate of [engineer.oracle] (engineers' proposals, random draws) and keeps the best by validation: the hindsight upper bound",
        lm_only: false,
        // It trains from the stage's checkpoint, but reads no policy as an engineer does.
        reads_policy: false,
    },
];

/// The engineer that searches by training ([`crate::stage::oracle`]): the stage
/// pipeline runs its search; it is never built as an [`Engineer`].
pub const ORACLE: &str = "oracle";

/// The built-in engineer called `name`.
pub fn builtin(name: &str) -> Option<&'static Builtin> {
    BUILTINS.iter().find(|b| b.name == name)
}

/// The built-in names, comma-separated (for messages and help).
/// The built-in or registered engineer name nearest to a misspelled `name` (a typo's
/// "did you mean"), if one is near enough.
fn nearest_engineer(name: &str, registered: &[String]) -> Option<String> {
    let builtins = BUILTINS.iter().map(|b| b.name);
    crate::ledger::reference::nearest(name, builtins.chain(registered.iter().map(String::as_str)))
}

pub fn builtin_names() -> String {
    BUILTINS
        .iter()
        .map(|b| b.name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The built-in engineers that only an `lm` plan can run (`lm_only`), or the others,
/// comma-separated in the registry's order (for an `--engineer` option's help).
pub fn builtin_names_where(lm_only: bool) -> String {
    BUILTINS
        .iter()
        .filter(|b| b.lm_only == lm_only)
        .map(|b| b.name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Names that cannot be registered for LLM engineers: the built-ins and `warmup` (the
/// name stage 0 records).
pub fn reserved(name: &str) -> bool {
    builtin(name).is_some() || name == "warmup"
}

/// An engineer as named on the command line and recorded with every stage it designs:
/// `NAME` or `NAME:MODS`, where MODS switches context modules off (`-module`) or on
/// (`+module`) relative to the plan's `[engineer.context]`, e.g.
/// `current:-failure_breakdown` or `current:+training_details`. The switches change
/// the context itself (the struct every engineer reads), so an ablation is one more
/// engineer in a study.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EngineerSpec {
    pub name: String,
    /// (module, on) in the order written.
    pub switches: Vec<(String, bool)>,
    /// The name ended in `+engineer-rl` ([`rl::SUFFIX`]): the branch trains its
    /// engineer (engineer RL) in every stage it runs.
    pub engineer_rl: bool,
}

/// The five context modules, by their names in plans and specs.
pub const MODULES: [&str; 5] = [
    "failure_breakdown",
    "guideline",
    "history",
    "summary",
    "training_details",
];

/// Why an engineer cannot design the stages of a branch.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EngineerNameError {
    #[error("engineer {spec:?}: {problem}")]
    BadSpec { spec: String, problem: String },
    #[error("unknown engineer {name:?}{}: built-in engineers are {}; registered on this branch: {}", crate::ledger::reference::did_you_mean(nearest_engineer(name, registered).as_deref()), builtin_names(), if registered.is_empty() { "none".to_string() } else { registered.join(", ") })]
    Unknown {
        name: String,
        registered: Vec<String>,
    },
    #[error("engineer {name:?} is the policy model writing its own proposal, which needs an `lm` policy; this ledger's policy is `{policy}`. Use `learnability` (the sampling-for-learnability probe of the policy's own pass rates) or an lm plan (policy = \"lm\", e.g. ledgers/demo.toml)")]
    NeedsLm { name: String, policy: String },
}

impl EngineerSpec {
    pub fn parse(spec: &str) -> Result<EngineerSpec, EngineerNameError> {
        let bad = |problem: String| EngineerNameError::BadSpec {
            spec: spec.to_string(),
            problem,
        };
        let (name, mods) = match spec.split_once(':') {
            Some((n, m)) => (n, Some(m)),
            None => (spec, None),
        };
        let (name, engineer_rl) = match name.strip_suffix(rl::SUFFIX) {
            Some(n) => (n, true),
            None => (name, false),
        };
        if name.is_empty() {
            return Err(bad("no engineer name before ':'".into()));
        }
        let mut switches = Vec::new();
        if let Some(m) = mods {
            let mut rest = m;
            if rest.is_empty() {
                return Err(bad(
                    "nothing after ':' (expected e.g. -failure_breakdown)".into()
                ));
            }
            while !rest.is_empty() {
                let on = match rest.as_bytes()[0] {
                    b'+' => true,
                    b'-' => false,
                    _ => {
                        return Err(bad(format!(
                            "expected +module or -module at {rest:?} (modules: {})",
                            MODULES.join(", ")
                        )))
                    }
                };
                let body = &rest[1..];
                let end = body.find(['+', '-']).unwrap_or(body.len());
                let module = &body[..end];
                if !MODULES.contains(&module) {
                    return Err(bad(format!(
                        "unknown context module {module:?} (modules: {})",
                        MODULES.join(", ")
                    )));
                }
                switches.push((module.to_string(), on));
                rest = &body[end..];
            }
        }
        Ok(EngineerSpec {
            name: name.to_string(),
            switches,
            engineer_rl,
        })
    }

    /// The plan's modules with this spec's switches applied.
    pub fn modules(&self, plan: &crate::plan::ContextModules) -> crate::plan::ContextModules {
        let mut m = plan.clone();
        for (module, on) in &self.switches {
            let slot = match module.as_str() {
                "failure_breakdown" => &mut m.failure_breakdown,
                "guideline" => &mut m.guideline,
                "history" => &mut m.history,
                "summary" => &mut m.summary,
                _ => &mut m.training_details,
            };
            *slot = *on;
        }
        m
    }

    /// Check that this engineer can design stages of a ledger whose policy is
    /// `policy`, given the LLM engineers registered on the branch.
    pub fn check(&self, policy: &str, registered: &[String]) -> Result<(), EngineerNameError> {
        if self.engineer_rl && policy != "lm" {
            return Err(EngineerNameError::BadSpec {
                spec: format!("{}{}", self.name, rl::SUFFIX),
                problem: format!("engineer RL trains the policy on engineer prompts, which needs an `lm` policy; this ledger's policy is `{policy}`"),
            });
        }
        match builtin(&self.name) {
            Some(b) if b.lm_only && policy != "lm" => Err(EngineerNameError::NeedsLm {
                name: self.name.clone(),
                policy: policy.to_string(),
            }),
            Some(_) => Ok(()),
            None if registered.iter().any(|r| r == &self.name) => Ok(()),
            None => Err(EngineerNameError::Unknown {
                name: self.name.clone(),
                registered: registered.to_vec(),
            }),
        }
    }
}

impl EngineerSpec {
    /// The switches as written after the `:` (`-history+summary`), empty when none.
    fn mods(&self) -> String {
        self.switches
            .iter()
            .map(|(m, on)| format!("{}{m}", if *on { '+' } else { '-' }))
            .collect()
    }

    /// This spec as a part of a branch name: module switches become readable parts
    /// (`current:-failure_breakdown` -> `current-no-failure_breakdown`, `+x` ->
    /// `-with-x`) and engineer RL a last part (`current+engineer-rl` ->
    /// `current-engineer-rl`). Study branches are named with it, so it never changes
    /// for specs that name no engineer RL.
    pub fn label(&self) -> String {
        let rl = if self.engineer_rl { "-engineer-rl" } else { "" };
        // The name's own hyphens are rewritten too (`gpt-4o` -> `gpt-no-4o`), as study
        // names always were.
        let label = format!("{}{}", self.name, self.mods())
            .replace('-', "-no-")
            .replace('+', "-with-");
        format!("{label}{rl}")
    }
}

/// The spec as written (`NAME[+engineer-rl][:MODS]`): what events record.
impl std::fmt::Display for EngineerSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name)?;
        if self.engineer_rl {
            f.write_str(rl::SUFFIX)?;
        }
        if !self.switches.is_empty() {
            write!(f, ":{}", self.mods())?;
        }
        Ok(())
    }
}

impl std::str::FromStr for EngineerSpec {
    type Err = EngineerNameError;
    fn from_str(s: &str) -> Result<EngineerSpec, EngineerNameError> {
        EngineerSpec::parse(s)
    }
}

/// A study's engineers as a command line names them (`--engineers`): specs separated by
/// commas (spaces around them ignored), at least one, each once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EngineerList(pub Vec<EngineerSpec>);

/// Why an engineer list is refused.
#[derive(Debug, thiserror::Error)]
pub enum BadEngineerList {
    #[error("name at least one engineer")]
    Empty,
    #[error("{0} is listed twice")]
    Twice(String),
    #[error(transparent)]
    Spec(#[from] EngineerNameError),
}

impl std::str::FromStr for EngineerList {
    type Err = BadEngineerList;
    fn from_str(s: &str) -> Result<EngineerList, BadEngineerList> {
        let names: Vec<&str> = s
            .split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .collect();
        if names.is_empty() {
            return Err(BadEngineerList::Empty);
        }
        let mut seen = std::collections::BTreeSet::new();
        if let Some(d) = names.iter().find(|e| !seen.insert(**e)) {
            return Err(BadEngineerList::Twice(d.to_string()));
        }
        Ok(EngineerList(
            names.iter().map(|e| e.parse()).collect::<Result<_, _>>()?,
        ))
    }
}

/// Check an engineer spec (parsed at the edge) for a ledger (the plan's policy) and
/// branch (its registered LLM engineers).
pub fn check_spec(
    spec: &EngineerSpec,
    plan: &crate::plan::LedgerPlan,
    state: &BranchState,
) -> Result<(), EngineerNameError> {
    spec.check(plan.policy.name(), &state.engineers)?;
    if spec.name == ORACLE {
        for c in oracle_candidates(plan)? {
            c.check(plan.policy.name(), &state.engineers)?;
        }
    }
    Ok(())
}

/// The oracle's candidate engineers, as the plan's `[engineer.oracle]` lists them
/// (`random` stands for a fresh draw each time it is listed). None may be the oracle
/// itself or train its engineer.
pub fn oracle_candidates(
    plan: &crate::plan::LedgerPlan,
) -> Result<Vec<EngineerSpec>, EngineerNameError> {
    let settings = plan.engineer.oracle.clone().unwrap_or_default();
    settings
        .candidates
        .iter()
        .map(|c| {
            let spec: EngineerSpec = c.trim().parse()?;
            let problem = if spec.name == ORACLE {
                Some("the oracle cannot be its own candidate")
            } else if spec.engineer_rl {
                Some("a candidate does not train its engineer")
            } else {
                None
            };
            match problem {
                Some(p) => Err(EngineerNameError::BadSpec {
                    spec: format!("engineer.oracle.candidates: {c}"),
                    problem: p.into(),
                }),
                None => Ok(spec),
            }
        })
        .collect()
}

/// Build the engineer `spec` for stage `inputs.stage` of a branch.
pub fn build(
    spec: &EngineerSpec,
    inputs: &BuildInputs<'_>,
    state: &BranchState,
) -> Result<Box<dyn Engineer>, BuildError> {
    build_replaying(spec, inputs, state, None)
}

/// [`build`] for a replay: an LLM engineer answers from `recorded` (the branch's
/// recorded replies, by prompt hash) instead of calling its endpoint.
pub fn build_replaying(
    spec: &EngineerSpec,
    inputs: &BuildInputs<'_>,
    state: &BranchState,
    recorded: Option<&llm::RecordedReplies>,
) -> Result<Box<dyn Engineer>, BuildError> {
    check_spec(spec, inputs.plan, state)?;
    factory::make(
        &spec.name,
        factory::Recipe {
            text: text::TextRevision::of_plan(inputs.plan)?,
            lm: &inputs.plan.lm,
            stage_seed: inputs.stage_seed,
            policies: factory::Policies::Checkpoints { inputs, state },
            llms: factory::Llms::Branch {
                ledger: inputs.ledger,
                state,
            },
            recorded,
            scope: factory::Scope::Stage,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_write_back_as_read_and_label_as_before() {
        for s in [
            "current",
            "current:-failure_breakdown+training_details",
            "current+engineer-rl:-history",
            "gpt-4o",
        ] {
            assert_eq!(EngineerSpec::parse(s).unwrap().to_string(), s);
        }
        let label = |s: &str| EngineerSpec::parse(s).unwrap().label();
        assert_eq!(label("current:-history"), "current-no-history");
        assert_eq!(label("current+engineer-rl"), "current-engineer-rl");
        assert_eq!(label("gpt-4o:+summary"), "gpt-no-4o-with-summary");
    }

    #[test]
    fn specs_parse_switch_modules_and_name_bad_input() {
        let s = EngineerSpec::parse("current:-failure_breakdown+training_details").unwrap();
        assert_eq!(s.name, "current");
        let m = s.modules(&crate::plan::ContextModules::default());
        assert!(!m.failure_breakdown && m.training_details && m.summary);
        assert_eq!(EngineerSpec::parse("fixed").unwrap().switches, vec![]);
        let rl = EngineerSpec::parse("current+engineer-rl:-history").unwrap();
        assert!(rl.engineer_rl && rl.name == "current" && rl.switches.len() == 1);
        assert!(!EngineerSpec::parse("current").unwrap().engineer_rl);
        let e = rl.check("grid", &[]).unwrap_err().to_string();
        assert!(e.contains("current+engineer-rl") && e.contains("lm"), "{e}");
        assert!(rl.check("lm", &[]).is_ok());
        for bad in [
            "current:",
            ":-history",
            "current:history",
            "current:-histories",
        ] {
            let e = EngineerSpec::parse(bad).unwrap_err().to_string();
            assert!(e.contains(bad), "{e}");
        }
        let e = EngineerSpec::parse("current")
            .unwrap()
            .check("grid", &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("learnability") && e.contains("lm"), "{e}");
        assert!(EngineerSpec::parse("learnability")
            .unwrap()
            .check("grid", &[])
            .is_ok());
        let e = EngineerSpec::parse("gpt")
            .unwrap()
            .check("lm", &[])
            .unwrap_err();
        assert!(e
            .to_string()
            .contains("fixed, random, heuristic, blind, learnability, current, base"));
        assert!(EngineerSpec::parse("gpt")
            .unwrap()
            .check("lm", &["gpt".into()])
            .is_ok());
    }
}
