//! `ledger engineer`: register LLM engineers (OpenAI-compatible chat endpoints) on a
//! branch and list the registered ones.
//!
//! Registration appends one `EngineerRegistered` event recording the URL, the model,
//! the *name* of the environment variable holding the API key (the key is read at call
//! time and never stored), the tokenizer.json (as a blob) and the context window.
use super::{CliError, CliResult};
use clap::Subcommand;
use mapf_ledger::engineer::llm;
use mapf_ledger::engineer::text::TextRevision;
use mapf_ledger::engineer::Engineer;
use mapf_ledger::ledger::{Ledger, Meta};
use mapf_ledger::record::event::{EngineerKind, EngineerRegistered, EventBody};
use mapf_ledger::views::show::EngineerRow;
use std::path::{Path, PathBuf};

#[derive(Subcommand, Debug)]
pub enum EngineerCommand {
    /// Register an LLM engineer behind an OpenAI-compatible chat-completions API.
    Add {
        /// Engineer name ([a-z0-9_-]+, not a built-in name).
        name: String,
        /// Base URL (e.g. http://127.0.0.1:8000/v1) or the full chat-completions URL.
        #[arg(long)]
        url: String,
        /// Model name sent with every request.
        #[arg(long)]
        model: String,
        /// Environment variable holding the API key (read at call time, never stored).
        #[arg(long, value_name = "VAR")]
        api_key_env: Option<String>,
        /// tokenizer.json used to count prompt tokens (stored in the ledger).
        #[arg(long, value_name = "FILE")]
        tokenizer: Option<PathBuf>,
        /// The model's context window in tokens; the context is trimmed to fit.
        #[arg(long, value_name = "N")]
        max_context: Option<u32>,
        /// The branch whose registrations to read or add to.
        #[arg(long, default_value = "main")]
        branch: String,
    },
    /// Score engineers on held-out contexts without a training run: parse and legal
    /// rates, grounded rationales, edits on the weak sizes, working sizes left alone,
    /// acting at all, and moves their sizes' failures call for (rules: `engineer-eval
    /// rules v4`; `--rules v3` scores as earlier reports did).
    Eval(EvalArgs),
    /// The LLM engineers registered on a branch.
    List {
        /// The branch whose registrations to read or add to.
        #[arg(long, default_value = "main")]
        branch: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

use super::ledger_error as err;

pub fn run(cmd: EngineerCommand, ledger: &Path) -> CliResult {
    match cmd {
        EngineerCommand::Add {
            name,
            url,
            model,
            api_key_env,
            tokenizer,
            max_context,
            branch,
        } => add(
            ledger,
            &branch,
            &name,
            &url,
            &model,
            api_key_env,
            tokenizer.as_deref(),
            max_context,
        ),
        EngineerCommand::List { branch, json } => list(ledger, &branch, json),
        EngineerCommand::Eval(args) => eval(ledger, args),
    }
}

/// Why a registration's name or key variable is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistrationError {
    #[error("engineer name {0:?}: use lowercase letters, digits, '_' and '-'")]
    BadName(String),
    #[error("engineer name {0:?} is a built-in engineer")]
    Reserved(String),
    #[error("--api-key-env: give the NAME of the environment variable holding the key (letters, digits, '_'), not the key itself")]
    KeyVariable,
}

/// Check an engineer name: `[a-z0-9_-]+` and not a built-in name.
pub fn validate_name(name: &str) -> Result<(), RegistrationError> {
    if name.is_empty()
        || !name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
    {
        return Err(RegistrationError::BadName(name.to_string()));
    }
    if mapf_ledger::engineer::reserved(name) {
        return Err(RegistrationError::Reserved(name.to_string()));
    }
    Ok(())
}

/// Check an environment variable name (so a key pasted in its place is refused, not stored).
fn validate_var(var: &str) -> Result<(), RegistrationError> {
    let mut bytes = var.bytes();
    let first_ok = bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_');
    if first_ok && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_') && var.len() <= 64 {
        Ok(())
    } else {
        Err(RegistrationError::KeyVariable)
    }
}

#[allow(clippy::too_many_arguments)]
fn add(
    dir: &Path,
    branch: &str,
    name: &str,
    url: &str,
    model: &str,
    api_key_env: Option<String>,
    tokenizer: Option<&Path>,
    max_context: Option<u32>,
) -> CliResult {
    validate_name(name).map_err(|e| CliError::input(e.to_string()))?;
    if !(url.starts_with("http://") || url.starts_with("https://")) || url.len() < 10 {
        return Err(CliError::input(format!(
            "--url {url:?}: expected an http:// or https:// URL"
        )));
    }
    if model.trim().is_empty() {
        return Err(CliError::input("--model: must not be empty"));
    }
    if let Some(v) = &api_key_env {
        validate_var(v).map_err(|e| CliError::input(e.to_string()))?;
    }
    if max_context == Some(0) {
        return Err(CliError::input("--max-context: must be positive"));
    }
    let tok_bytes = match tokenizer {
        None => None,
        Some(p) => {
            let bytes = std::fs::read(p)
                .map_err(|e| CliError::input(format!("--tokenizer {}: {e}", p.display())))?;
            tokenizers::Tokenizer::from_bytes(&bytes).map_err(|e| {
                CliError::input(format!(
                    "--tokenizer {}: not a tokenizer.json ({e})",
                    p.display()
                ))
            })?;
            Some(bytes)
        }
    };
    let mut ledger = super::open_writer(dir).map_err(err)?;
    let state = ledger.projection(branch).map_err(err)?;
    if state.engineers.iter().any(|e| e == name) {
        return Err(CliError::input(format!(
            "engineer {name:?} is already registered on branch {branch}"
        )));
    }
    let plan =
        mapf_ledger::stage::ledger_plan(&ledger).map_err(|e| CliError::input(e.to_string()))?;
    let m = &plan.engineer.context;
    let context_modules: Vec<String> = [
        ("failure_breakdown", m.failure_breakdown),
        ("guideline", m.guideline),
        ("history", m.history),
        ("summary", m.summary),
        ("training_details", m.training_details),
    ]
    .into_iter()
    .filter(|x| x.1)
    .map(|x| x.0.to_string())
    .collect();
    let tokenizer = tok_bytes
        .map(|b| ledger.put_blob(&b))
        .transpose()
        .map_err(err)?;
    let stage = state.stages.iter().map(|s| s.stage).max().unwrap_or(0);
    let body = EventBody::EngineerRegistered(EngineerRegistered {
        name: name.to_string(),
        kind: EngineerKind::Llm {
            url: url.to_string(),
            model: model.to_string(),
            tokenizer,
            api_key_env,
            max_context,
        },
        context_modules,
    });
    let ids = ledger
        .append(branch, vec![(body, stage, Meta::now())])
        .map_err(err)?;
    println!(
        "registered engineer {name} on {branch} ({})",
        ids.first().map(|h| h.to_hex()).unwrap_or_default()
    );
    Ok(())
}

fn list(dir: &Path, branch: &str, as_json: bool) -> CliResult {
    let ledger = Ledger::open_read_only(dir).map_err(err)?;
    let mut rows = Vec::new();
    for (hash, ev) in ledger.history(branch).map_err(err)? {
        let EventBody::EngineerRegistered(r) = &ev.body else {
            continue;
        };
        let EngineerKind::Llm {
            url,
            model,
            tokenizer,
            api_key_env,
            max_context,
        } = &r.kind
        else {
            continue;
        };
        rows.push(EngineerRow {
            name: r.name.clone(),
            kind: "llm".into(),
            url: url.clone(),
            model: model.clone(),
            api_key_env: api_key_env.clone(),
            tokenizer: tokenizer.map(|h| h.to_hex()),
            max_context: *max_context,
            context_modules: r.context_modules.clone(),
            event: hash.to_hex(),
            stage: ev.stage,
        });
    }
    if as_json {
        let s = serde_json::to_string_pretty(&rows).map_err(|e| CliError::input(e.to_string()))?;
        println!("{s}");
        return Ok(());
    }
    if rows.is_empty() {
        println!(
            "no LLM engineers registered on {branch} (built-in: {})",
            mapf_ledger::engineer::builtin_names()
        );
    }
    for r in rows {
        let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
        println!(
            "{}  {}  model {}  key ${}  tokenizer {}  max-context {}",
            r.name,
            r.url,
            r.model,
            opt(r.api_key_env.clone()),
            opt(r.tokenizer.clone())
                .chars()
                .take(12)
                .collect::<String>(),
            opt(r.max_context.map(|m| m.to_string())),
        );
    }
    Ok(())
}

#[derive(clap::Args, Debug)]
pub struct EvalArgs {
    #[arg(
        long = "engineer",
        help = eval_engineer_help(),
        value_delimiter = ',',
        required = true,
        value_name = "ENGINEER"
    )]
    pub engineers: Vec<String>,
    /// The model the learnability probe samples and the base/current engineer is: an HF
    /// model directory, or a checkpoint reference of --ledger (BRANCH, BRANCH@stageN).
    #[arg(long)]
    pub model: Option<String>,
    /// Score each decision's configuration by this policy's learnability on instances
    /// drawn from it (an HF directory or a checkpoint reference; seeded probes of 6
    /// instances x 4 samples per size of the configuration, the same instances for
    /// every engineer wherever they leave a size alike).
    #[arg(long, value_name = "MODEL")]
    pub reference: Option<String>,
    /// Synthetic contexts drawn from --seed (with known ground truth).
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(0..=100_000))]
    pub contexts: u32,
    /// Also every recorded decision context of this ledger (repeatable).
    #[arg(long = "from-ledger", value_name = "DIR")]
    pub from_ledger: Vec<PathBuf>,
    /// Seed of the synthetic contexts and of sampling.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// The scoring rules (`v4`, the default; `v3` scores and draws contexts as the
    /// reports before rules v4 did: see `engineer::eval::rubric`).
    #[arg(long, default_value = "v4", value_name = "VERSION")]
    pub rules: mapf_ledger::engineer::eval::Rules,
    /// Read the model engineer's prompt budget, sampling and attempts from this plan's
    /// [lm], and the engineers' text revision from its [engineer] (default: the
    /// defaults; the shipped base planner was trained with ledgers/demo.toml's 640-token
    /// budget).
    #[arg(long, value_name = "FILE")]
    pub plan: Option<PathBuf>,
    /// For the `http` engineer: an OpenAI-compatible base URL (e.g.
    /// http://127.0.0.1:8000/v1) and the model name it serves.
    #[arg(long)]
    pub url: Option<String>,
    /// For the `http` engineer: the model name the endpoint serves.
    #[arg(long = "served-model", value_name = "NAME")]
    pub served_model: Option<String>,
    /// For the `http` engineer: the environment variable holding its API key (never the key itself).
    #[arg(long, value_name = "VAR")]
    pub api_key_env: Option<String>,
    /// tokenizer.json counting the http engineer's prompt tokens.
    #[arg(long, value_name = "FILE")]
    pub tokenizer: Option<PathBuf>,
    /// For the `http` engineer: its context window in tokens; the prompt is trimmed to fit.
    #[arg(long, value_name = "N")]
    pub max_context: Option<u32>,
    /// cpu, cuda or cuda:N.
    #[arg(long, default_value = "cpu")]
    pub device: mapf_ledger::train::DeviceSpec,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// The plan whose [lm] and [engineer] settings the model and LLM engineers use
/// (`--plan`, else the defaults).
fn eval_plan(args: &EvalArgs) -> Result<(mapf_ledger::train::lm::LmSpec, TextRevision), CliError> {
    let Some(p) = &args.plan else {
        // The defaults: a plan's [lm] and [engineer] when it sets none (revision 1).
        let revision = mapf_ledger::plan::EngineerPlan::default().revision;
        let text = TextRevision::of(revision).map_err(|e| CliError::input(e.to_string()))?;
        return Ok((Default::default(), text));
    };
    let bytes = std::fs::read(p).map_err(|e| CliError::input(format!("{}: {e}", p.display())))?;
    let plan = mapf_ledger::plan::LedgerPlan::parse(&bytes)
        .map_err(|e| CliError::input(format!("{}: {e}", p.display())))?;
    let text = TextRevision::of_plan(&plan)
        .map_err(|e| CliError::input(format!("{}: {e}", p.display())))?;
    Ok((plan.lm, text))
}

/// The engineer `spec` of `engineer eval` (`NAME` or `NAME=MODEL`), made by the one
/// engineer factory from what the arguments name: the model a policy-reading built-in
/// reads (`=MODEL`, else --model), the endpoint of `http`, or the ledger whose main
/// branch registers an LLM engineer. Each decision is reseeded per context.
fn decider(
    dir: &Path,
    args: &EvalArgs,
    spec: &str,
    base_seed: mapf_ledger::seed::Seed,
) -> Result<Box<dyn Engineer>, CliError> {
    use mapf_ledger::engineer::factory::{self, Llms, Policies, Recipe, Scope};
    let (name, own_model) = match spec.split_once('=') {
        Some((n, m)) => (n, Some(m.to_string())),
        None => (spec, None),
    };
    let (lm, text) = eval_plan(args)?;
    let builtin = mapf_ledger::engineer::builtin(name);
    let model = match builtin.filter(|b| b.reads_policy) {
        None => None,
        Some(b) => {
            let m = own_model.or_else(|| args.model.clone()).ok_or_else(|| {
                CliError::input(format!(
                    "--engineer {name}: needs a model (--model DIR|REF, or {name}=DIR|REF)"
                ))
            })?;
            let device = mapf_ledger::train::open_device(args.device)
                .map_err(|e| CliError::input(e.to_string()))?;
            Some(load_policy(dir, &m, device, b.lm_only)?)
        }
    };
    let teacher = mapf_ledger::engineer::teacher::Teacher::named(name, base_seed).is_some();
    let registry;
    let llms = if name == "http" {
        Llms::Given(http_registration(args)?)
    } else if builtin.is_some() || teacher {
        Llms::None
    } else {
        let mut ledger = Ledger::open_read_only(dir).map_err(|e| {
            CliError::input(format!(
                "--engineer {name}: not a built-in engineer ({}, http), and no ledger to find it registered in: {e}",
                mapf_ledger::engineer::builtin_names()
            ))
        })?;
        let state = ledger.projection("main").map_err(err)?;
        registry = (ledger, state);
        Llms::Branch {
            ledger: &registry.0,
            state: &registry.1,
        }
    };
    factory::make(
        name,
        Recipe {
            text,
            lm: &lm,
            stage_seed: base_seed,
            policies: Policies::Model(model),
            llms,
            recorded: None,
            scope: Scope::Benchmark,
        },
    )
    .map_err(|e| CliError::input(format!("--engineer {name}: {e}")))
}

/// The model of `--model` (or `NAME=MODEL`): an `lm` model for the engineers only an
/// `lm` policy can be, else an HF directory or any checkpoint reference.
fn load_policy(
    dir: &Path,
    model: &str,
    device: tch::Device,
    lm_only: bool,
) -> Result<Box<dyn mapf_ledger::train::policy::Policy>, CliError> {
    if lm_only || Path::new(model).join("config.json").exists() {
        Ok(Box::new(super::lm::load(dir, model, device)?))
    } else {
        Ok(super::checkpoint::load_ref(dir, model)?.policy)
    }
}

/// The `http` engineer's registration, from --url, --served-model, --api-key-env,
/// --tokenizer and --max-context.
fn http_registration(args: &EvalArgs) -> Result<llm::LlmRegistration, CliError> {
    let (Some(url), Some(served)) = (&args.url, &args.served_model) else {
        return Err(CliError::input(
            "--engineer http: needs --url URL and --served-model NAME".to_string(),
        ));
    };
    let tokenizer = match &args.tokenizer {
        Some(p) => {
            Some(std::fs::read(p).map_err(|e| CliError::input(format!("{}: {e}", p.display())))?)
        }
        None => None,
    };
    let reg = llm::LlmRegistration {
        name: "http".into(),
        url: url.clone(),
        model: served.clone(),
        api_key_env: args.api_key_env.clone(),
        tokenizer,
        max_context: args.max_context,
        context_modules: vec![],
    };
    llm::TokenCounter::for_registration(&reg).map_err(|e| CliError::input(e.to_string()))?;
    Ok(reg)
}

fn eval(dir: &Path, args: EvalArgs) -> CliResult {
    use indicatif::{ProgressBar, ProgressStyle};
    use mapf_ledger::engineer::eval as ev;
    let seed = mapf_ledger::seed::Seed::root(args.seed);
    let mut contexts = ev::synthetic_for(
        args.rules,
        seed.child("contexts", 0),
        args.contexts as usize,
    );
    let mut sources = vec![format!("{} synthetic (seed {})", args.contexts, args.seed)];
    for l in &args.from_ledger {
        let ledger = Ledger::open_read_only(l).map_err(err)?;
        let found = ev::ledger_contexts(&ledger, &l.display().to_string()).map_err(err)?;
        sources.push(format!("{} from {}", found.len(), l.display()));
        contexts.extend(found);
    }
    if contexts.is_empty() {
        return Err(CliError::input(
            "no contexts: --contexts 0 and no --from-ledger with decisions".to_string(),
        ));
    }
    // Build every engineer before running any, so a bad name fails at once.
    let mut deciders = Vec::new();
    for spec in &args.engineers {
        deciders.push((spec.clone(), decider(dir, &args, spec, seed)?));
    }
    let reference = match &args.reference {
        Some(m) => {
            let device = mapf_ledger::train::open_device(args.device)
                .map_err(|e| CliError::input(e.to_string()))?;
            let policy: Box<dyn mapf_ledger::train::policy::Policy> =
                if Path::new(m).join("config.json").exists() {
                    Box::new(super::lm::load(dir, m, device)?)
                } else {
                    super::checkpoint::load_ref(dir, m)?.policy
                };
            Some(policy)
        }
        None => None,
    };
    // One size-by-size probe per context, shared by every engineer: a size two
    // engineers leave alike is scored on the same instances for both.
    let mut probes: Vec<mapf_ledger::engineer::probe::SizeProbe> = (0..contexts.len())
        .map(|i| {
            mapf_ledger::engineer::probe::SizeProbe::new(
                seed.child("reference", i as u64),
                ev::PROBE_PER_SIZE,
                ev::PROBE_SAMPLES,
            )
        })
        .collect();
    let mut evals = Vec::new();
    for (label, mut engineer) in deciders {
        let purpose = format!("engineer-eval {label}");
        let bar = if args.json {
            ProgressBar::hidden()
        } else {
            let b = ProgressBar::new(contexts.len() as u64);
            b.set_style(
                ProgressStyle::with_template(
                    "{prefix:>14} [{bar:30}] {pos}/{len} contexts  {elapsed_precise} (eta {eta})",
                )
                .expect("template")
                .progress_chars("=> "),
            );
            b.set_prefix(label.clone());
            b
        };
        let mut probe = |i: usize, cfg: &mapf_ledger::env::GeneratorConfig| {
            let policy = reference.as_ref()?;
            probes[i].probe(policy.as_ref(), cfg)
        };
        let with_reference: Option<ev::ReferenceProbe<'_>> = if args.reference.is_some() {
            Some(&mut probe)
        } else {
            None
        };
        evals.push(ev::evaluate(
            &label,
            &contexts,
            args.rules,
            &mut |i, ctx| {
                engineer.reseed(seed.child(&purpose, i as u64));
                let d = engineer.decide(ctx);
                bar.inc(1);
                d
            },
            with_reference,
        ));
        bar.finish_and_clear();
    }
    let report = ev::EvalReport {
        rules: args.rules.name().to_string(),
        seed: args.seed,
        sources,
        paired: ev::paired(&evals, seed.child("paired", 0)),
        engineers: evals,
    };
    if args.json {
        let s =
            serde_json::to_string_pretty(&report).map_err(|e| CliError::input(e.to_string()))?;
        println!("{s}");
    } else {
        print!("{}", ev::render(&report));
    }
    Ok(())
}

/// The help of `engineer eval --engineer`: the registry's built-ins
/// (`engineer::BUILTINS`), then what only an evaluation can name.
fn eval_engineer_help() -> String {
    format!(
        "Engineers, comma-separated, the first the baseline of the paired rows (blind and random, when named, are baselines too): {} (the learnability probe and the policy-written ones read --model, or their own after `=`, as in `current=main@stage3`), http (the endpoint of --url), teacher-v1 to teacher-v{} (the base models' pretraining teacher at that text revision), or an LLM engineer registered on --ledger's main branch",
        mapf_ledger::engineer::builtin_names(),
        TextRevision::LATEST
    )
}
