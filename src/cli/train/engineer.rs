//! `ledger engineer`: register LLM engineers (OpenAI-compatible chat endpoints) on a
//! branch and list the registered ones.
//!
//! Registration appends one `EngineerRegistered` event recording the URL, the model,
//! the *name* of the environment variable holding the API key (the key is read at call
//! time and never stored), the tokenizer.json (as a blob) and the context window.
use crate::cli::{CliError, CliResult};
use clap::Subcommand;
use mapf_ledger::engineer::text::TextRevision;
use mapf_ledger::ledger::Ledger;
use mapf_ledger::views::text::engineers as view;
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
    /// rules v5`; `--rules v4` or `v3` scores as earlier reports did); on the oracle searches of
    /// a `--from-ledger` ledger, agreement with the oracle's choice.
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

use mapf_ledger::engineer::eval::session::{self, Progress, Sources};
use mapf_ledger::engineer::registration::{self, NewLlm};

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
        } => {
            let llm = NewLlm {
                name,
                url,
                model,
                api_key_env,
                tokenizer: None,
                max_context,
            };
            add(ledger, &branch, llm, tokenizer.as_deref())
        }
        EngineerCommand::List { branch, json } => {
            let l = Ledger::open_read_only(ledger)?;
            let rows = registration::registered(&l, &branch)?;
            let builtins = mapf_ledger::engineer::builtin_names();
            crate::cli::say(json, &rows, |rows| view::list(&branch, rows, &builtins))
        }
        EngineerCommand::Eval(args) => eval(ledger, args),
    }
}

/// Register `llm` on `branch`, with the tokenizer.json at `tokenizer`.
fn add(dir: &Path, branch: &str, mut llm: NewLlm, tokenizer: Option<&Path>) -> CliResult {
    llm.check()?;
    if let Some(p) = tokenizer {
        llm.read_tokenizer(p)?;
    }
    let mut ledger = crate::cli::open_writer(dir)?;
    let plan =
        mapf_ledger::stage::ledger_plan(&ledger).map_err(|e| CliError::input(e.to_string()))?;
    let name = llm.name.clone();
    let id = registration::register(&mut ledger, branch, llm, &plan.engineer.context)?;
    println!("registered engineer {name} on {branch} ({})", id.to_hex());
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
    /// Also every recorded decision context of this ledger (repeatable); where its
    /// oracle searched, each engineer is scored on agreeing with the oracle's choice.
    #[arg(long = "from-ledger", value_name = "DIR")]
    pub from_ledger: Vec<PathBuf>,
    /// Seed of the synthetic contexts and of sampling.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// The scoring rules (`v5`, the default: a whole-configuration edit judged as one;
    /// `v4` as the reports before rules v5; `v3` scores and draws contexts as the reports
    /// before rules v4 did: see `engineer::eval::rubric`).
    #[arg(long, default_value = "v5", value_name = "VERSION")]
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

fn eval(dir: &Path, args: EvalArgs) -> CliResult {
    use indicatif::ProgressBar;
    use mapf_ledger::stage::progress::counter;
    let (contexts, sources) =
        session::contexts(args.rules, args.seed, args.contexts, &args.from_ledger)?;
    // Build every engineer before running any, so a bad name fails at once.
    let (lm, text) = session::eval_plan(args.plan.as_deref())?;
    let seed = mapf_ledger::seed::Seed::root(args.seed);
    let sources_of = Sources {
        text,
        lm: &lm,
        seed,
        registry: dir,
    };
    // A model of `--model`, `--reference` or `NAME=MODEL`, on --device.
    let mut load = |model: &str, lm_only| -> Result<_, CliError> {
        let device = mapf_ledger::train::open_device(args.device)
            .map_err(|e| CliError::input(e.to_string()))?;
        Ok(mapf_ledger::stage::load_policy(
            dir, model, lm_only, device,
        )?)
    };
    let endpoint = session::HttpEndpoint {
        url: args.url.as_deref(),
        served_model: args.served_model.as_deref(),
        api_key_env: args.api_key_env.as_deref(),
        tokenizer: args.tokenizer.as_deref(),
        max_context: args.max_context,
    };
    let default_model = args.model.as_deref();
    let engineers = session::build_all(
        &args.engineers,
        default_model,
        &endpoint,
        &sources_of,
        &mut load,
    )?;
    let reference = match &args.reference {
        Some(m) => Some(load(m, false)?),
        None => None,
    };
    let mut bar: Option<ProgressBar> = None;
    let mut progress = |p: Progress<'_>| match p {
        Progress::Engineer(label) if !args.json => {
            bar = Some(counter(contexts.len() as u64, label, 14, "contexts"));
        }
        Progress::Engineer(_) => {}
        Progress::Decided => bar.iter().for_each(|b| b.inc(1)),
        Progress::Finished => bar.take().iter().for_each(ProgressBar::finish_and_clear),
    };
    let report = session::run(
        &contexts,
        sources,
        engineers,
        reference.as_deref(),
        (args.rules, args.seed),
        &mut progress,
    )
    // Silence is not a score: an engineer that never answered fails the command.
    .map_err(|u| CliError::check(format!("{u}; no engineer eval was written")))?;
    crate::cli::say(args.json, &report, mapf_ledger::engineer::eval::render)
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
