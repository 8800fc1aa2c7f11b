//! One `ledger engineer eval` run, start to end: the contexts (synthetic ones drawn from
//! the seed, then every recorded decision of the ledgers named), each engineer the run
//! names built by the one factory ([`build`]), run on every context reseeded per
//! context, the reference policy's size probes shared by every engineer, and the paired
//! rows: the [`EvalReport`]. Loading models is the caller's (they load as stages load
//! them); this module says which model an engineer reads ([`Named::model`]).
use super::{evaluate, ledger_contexts, paired, synthetic_for, EvalContext, EvalReport, Rules};
use super::{PROBE_PER_SIZE, PROBE_SAMPLES};
use crate::engineer::factory::{self, Llms, Policies, Recipe, Scope};
use crate::engineer::llm::LlmRegistration;
use crate::engineer::probe::SizeProbe;
use crate::engineer::text::{TextRevision, UnknownRevision};
use crate::engineer::{BuildError, Engineer};
use crate::ledger::{Ledger, LedgerError};
use crate::seed::Seed;
use crate::train::policy::Policy;
use std::path::{Path, PathBuf};

/// Why an engineer of the run cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("--engineer {name}: needs a model (--model DIR|REF, or {name}=DIR|REF)")]
    NeedsModel { name: String },
    #[error("--engineer {name}: not a built-in engineer ({builtins}, http), and no ledger to find it registered in: {ledger}")]
    NoRegistry {
        name: String,
        builtins: String,
        ledger: LedgerError,
    },
    /// A ledger could not be read: the registry's branch, or one of `--from-ledger`.
    #[error("{0}")]
    Registry(#[from] LedgerError),
    #[error("--engineer {name}: {error}")]
    Build { name: String, error: BuildError },
    #[error("no contexts: --contexts 0 and no --from-ledger with decisions")]
    NoContexts,
    /// The defaults' text revision (a plan that sets none).
    #[error("{0}")]
    Revision(#[source] UnknownRevision),
    #[error("{}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Plan(#[from] crate::plan::PlanFileError),
    #[error("{}: {source}", path.display())]
    PlanRevision {
        path: PathBuf,
        #[source]
        source: UnknownRevision,
    },
    #[error("--engineer http: needs --url URL and --served-model NAME")]
    HttpNeedsEndpoint,
    /// The `http` engineer's tokenizer does not load.
    #[error("{0}")]
    HttpTokenizer(#[source] crate::engineer::llm::LlmError),
}

/// The `[lm]` settings and the engineers' text revision of the plan file at `plan`
/// (`engineer eval --plan`), else the defaults: a plan's `[lm]` and `[engineer]` when it
/// sets none.
pub fn eval_plan(
    plan: Option<&Path>,
) -> Result<(crate::train::lm::LmSpec, TextRevision), SessionError> {
    let Some(p) = plan else {
        let revision = crate::plan::EngineerPlan::default().revision;
        let text = TextRevision::of(revision).map_err(SessionError::Revision)?;
        return Ok((Default::default(), text));
    };
    let plan = crate::plan::LedgerPlan::read(p)?;
    let text = TextRevision::of_plan(&plan).map_err(|source| SessionError::PlanRevision {
        path: p.to_path_buf(),
        source,
    })?;
    Ok((plan.lm, text))
}

/// Where the `http` engineer of a run is (`engineer eval --url --served-model
/// --api-key-env --tokenizer --max-context`).
pub struct HttpEndpoint<'a> {
    pub url: Option<&'a str>,
    pub served_model: Option<&'a str>,
    pub api_key_env: Option<&'a str>,
    pub tokenizer: Option<&'a Path>,
    pub max_context: Option<u32>,
}

/// The `http` engineer's registration: `endpoint`'s URL and served model (both needed),
/// its key variable, context window and tokenizer.json (read, and checked to load).
pub fn http_registration(endpoint: &HttpEndpoint<'_>) -> Result<LlmRegistration, SessionError> {
    let (Some(url), Some(served)) = (endpoint.url, endpoint.served_model) else {
        return Err(SessionError::HttpNeedsEndpoint);
    };
    let tokenizer = match endpoint.tokenizer {
        Some(p) => Some(std::fs::read(p).map_err(|source| SessionError::Read {
            path: p.to_path_buf(),
            source,
        })?),
        None => None,
    };
    let reg = LlmRegistration {
        name: "http".into(),
        url: url.to_string(),
        model: served.to_string(),
        api_key_env: endpoint.api_key_env.map(str::to_string),
        tokenizer,
        max_context: endpoint.max_context,
        context_modules: vec![],
    };
    crate::engineer::llm::TokenCounter::for_registration(&reg)
        .map_err(SessionError::HttpTokenizer)?;
    Ok(reg)
}

/// An engineer as `--engineer` names it: `NAME`, or `NAME=MODEL` with the model a
/// policy-reading one reads.
pub struct Named<'a> {
    pub name: &'a str,
    pub model: Option<&'a str>,
}

impl Named<'_> {
    pub fn parse(spec: &str) -> Named<'_> {
        match spec.split_once('=') {
            Some((name, model)) => Named {
                name,
                model: Some(model),
            },
            None => Named {
                name: spec,
                model: None,
            },
        }
    }

    /// The model this engineer reads (its own, else `default`) and whether it must be an
    /// `lm` model; None when it reads none.
    pub fn model(&self, default: Option<&str>) -> Result<Option<(String, bool)>, SessionError> {
        let Some(b) = crate::engineer::builtin(self.name).filter(|b| b.reads_policy) else {
            return Ok(None);
        };
        let m = self
            .model
            .or(default)
            .ok_or_else(|| SessionError::NeedsModel {
                name: self.name.to_string(),
            })?;
        Ok(Some((m.to_string(), b.lm_only)))
    }
}

/// What every engineer of a run is made from.
pub struct Sources<'a> {
    /// The engineers' text revision and the model engineer's `[lm]` settings.
    pub text: TextRevision,
    pub lm: &'a crate::train::lm::LmSpec,
    pub seed: Seed,
    /// The ledger whose main branch registers the LLM engineers named.
    pub registry: &'a Path,
}

/// Build `named` from `sources`: with `model` (what [`Named::model`] asked for,
/// loaded), `http` (the `http` engineer's registration), or the LLM engineer of that
/// name registered on the registry's main branch.
pub fn build(
    named: &Named<'_>,
    model: Option<Box<dyn Policy>>,
    http: Option<LlmRegistration>,
    sources: &Sources<'_>,
) -> Result<Box<dyn Engineer>, SessionError> {
    let name = named.name;
    let known = factory::needs_no_registration(name, sources.seed);
    let registry;
    let llms = match http {
        Some(reg) => Llms::Given(reg),
        None if known => Llms::None,
        None => {
            let mut ledger =
                Ledger::open_read_only(sources.registry).map_err(|e| SessionError::NoRegistry {
                    name: name.to_string(),
                    builtins: crate::engineer::builtin_names(),
                    ledger: e,
                })?;
            let state = ledger.projection("main")?;
            registry = (ledger, state);
            Llms::Branch {
                ledger: &registry.0,
                state: &registry.1,
            }
        }
    };
    let recipe = Recipe {
        text: sources.text,
        lm: sources.lm,
        stage_seed: sources.seed,
        policies: Policies::Model(model),
        llms,
        recorded: None,
        scope: Scope::Benchmark,
    };
    factory::make(name, recipe).map_err(|error| SessionError::Build {
        name: name.to_string(),
        error,
    })
}

/// Engineers with their labels, in the order a run names them.
pub type Labelled = Vec<(String, Box<dyn Engineer>)>;

/// What makes a model of a name (and whether it must be an `lm` model).
pub type LoadModel<'a, E> = dyn FnMut(&str, bool) -> Result<Box<dyn Policy>, E> + 'a;

/// Every engineer of `specs` (each `NAME` or `NAME=MODEL`, see [`Named`]), labelled by
/// its spec: a policy-reading one with the model `load` makes of its own or
/// `default_model` (and whether it must be an `lm` model), `http` with `endpoint`'s
/// registration, any other from `sources` ([`build`]). The first error ends it, so a
/// bad name fails before any engineer runs.
pub fn build_all<E: From<SessionError>>(
    specs: &[String],
    default_model: Option<&str>,
    endpoint: &HttpEndpoint<'_>,
    sources: &Sources<'_>,
    load: &mut LoadModel<'_, E>,
) -> Result<Labelled, E> {
    let mut engineers = Vec::new();
    for spec in specs {
        let named = Named::parse(spec);
        let model = match named.model(default_model)? {
            Some((m, lm_only)) => Some(load(&m, lm_only)?),
            None => None,
        };
        let http = (named.name == "http")
            .then(|| http_registration(endpoint))
            .transpose()?;
        engineers.push((spec.clone(), build(&named, model, http, sources)?));
    }
    Ok(engineers)
}

/// The run's contexts and where they came from: `synthetic` drawn from `seed` under
/// `rules`, then every recorded decision context of each ledger in `ledgers`. None at
/// all is [`SessionError::NoContexts`].
pub fn contexts(
    rules: Rules,
    seed: u64,
    synthetic: u32,
    ledgers: &[PathBuf],
) -> Result<(Vec<EvalContext>, Vec<String>), SessionError> {
    let root = Seed::root(seed);
    let mut contexts = synthetic_for(rules, root.child("contexts", 0), synthetic as usize);
    let mut sources = vec![format!("{synthetic} synthetic (seed {seed})")];
    for l in ledgers {
        let ledger = Ledger::open_read_only(l)?;
        let found = ledger_contexts(&ledger, &l.display().to_string())?;
        sources.push(format!("{} from {}", found.len(), l.display()));
        contexts.extend(found);
    }
    if contexts.is_empty() {
        return Err(SessionError::NoContexts);
    }
    Ok((contexts, sources))
}

/// How far a run is, for a progress display.
pub enum Progress<'a> {
    /// An engineer (its label) starts on the contexts.
    Engineer(&'a str),
    /// It decided one more context.
    Decided,
    /// It is done with every context.
    Finished,
}

/// Run each of `engineers` (label, engineer) on every context, reseeded per context
/// from `seed`; with a `reference` policy, score each decision's configuration by its
/// learnability (one size-by-size probe per context, shared by every engineer: a size
/// two engineers leave alike is scored on the same instances for both); then pair every
/// engineer with the first and the baselines. An engineer that never answers stops the
/// run with no report ([`super::evaluate`]): silence is not a score.
pub fn run(
    contexts: &[EvalContext],
    sources: Vec<String>,
    engineers: Vec<(String, Box<dyn Engineer>)>,
    reference: Option<&dyn Policy>,
    (rules, seed): (Rules, u64),
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<EvalReport, crate::engineer::Unanswered> {
    let root = Seed::root(seed);
    let mut probes: Vec<SizeProbe> = (0..contexts.len())
        .map(|i| {
            SizeProbe::new(
                root.child("reference", i as u64),
                PROBE_PER_SIZE,
                PROBE_SAMPLES,
            )
        })
        .collect();
    let mut evals = Vec::new();
    for (label, mut engineer) in engineers {
        let purpose = format!("engineer-eval {label}");
        progress(Progress::Engineer(&label));
        let mut probe = |i: usize, cfg: &crate::env::GeneratorConfig| {
            let policy = reference?;
            probes[i].probe(policy, cfg)
        };
        let with_reference: Option<super::ReferenceProbe<'_>> = if reference.is_some() {
            Some(&mut probe)
        } else {
            None
        };
        let mut decide = |i: usize, ctx: &_| {
            engineer.reseed(root.child(&purpose, i as u64));
            let d = engineer.decide(ctx);
            progress(Progress::Decided);
            d
        };
        let scored = evaluate(&label, contexts, rules, &mut decide, with_reference);
        progress(Progress::Finished);
        evals.push(scored?);
    }
    Ok(EvalReport {
        rules: rules.name().to_string(),
        seed,
        sources,
        paired: paired(&evals, root.child("paired", 0)),
        engineers: evals,
    })
}
