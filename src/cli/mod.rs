//! The `ledger` command line: argument parsing and dispatch, thin over the library.
//!
//! One file per command family. Every command returns `Result<(), CliError>`; the error
//! carries the exit code of the contract (1 a failed check, 2 usage or input error) and
//! a message naming the bad input.
pub mod audit;
pub mod report;
pub mod store;
pub mod sync;
// The commands that train, or run what trains (the `train` feature: libtorch).
#[cfg(feature = "train")]
pub mod checkpoint;
#[cfg(feature = "train")]
pub mod engineer;
pub mod env;
#[cfg(feature = "train")]
pub mod eval;
#[cfg(feature = "train")]
pub mod lm;
#[cfg(feature = "train")]
pub mod plan;
#[cfg(feature = "train")]
pub mod replay;
#[cfg(feature = "train")]
pub mod run;
#[cfg(feature = "train")]
pub mod study;
pub mod values;

use clap::{Parser, Subcommand};
use std::path::PathBuf;

/// An error that ends the command with a contract exit code.
#[derive(Debug)]
pub struct CliError {
    pub code: i32,
    pub message: String,
}

impl CliError {
    /// Usage or input error (exit 2); the message must name the bad input.
    pub fn input(message: impl Into<String>) -> CliError {
        CliError {
            code: 2,
            message: message.into(),
        }
    }
    /// A check that failed (exit 1): verify or replay mismatch.
    pub fn check(message: impl Into<String>) -> CliError {
        CliError {
            code: 1,
            message: message.into(),
        }
    }
}

impl std::fmt::Display for CliError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

pub type CliResult = Result<(), CliError>;

/// Check, before any work, that an output file can be written where `flag` says: its
/// directory exists and it is not a directory itself (exit 2 naming both otherwise), so
/// a long command never computes everything and then fails on its last line.
pub fn check_output_file(flag: &str, path: &std::path::Path) -> CliResult {
    if path.is_dir() {
        return Err(CliError::input(format!(
            "{flag} {}: is a directory (give a file name)",
            path.display()
        )));
    }
    // Outputs are written to a temporary file renamed over the target: over a device
    // or a pipe (`/dev/null` as root) that would replace the special file itself.
    if let Ok(m) = std::fs::metadata(path) {
        if !m.is_file() {
            return Err(CliError::input(format!(
                "{flag} {}: not a regular file (outputs are written whole and renamed into place)",
                path.display()
            )));
        }
    }
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => std::path::Path::new("."),
    };
    match std::fs::metadata(parent) {
        Ok(m) if m.is_dir() && !m.permissions().readonly() => Ok(()),
        Ok(m) if m.is_dir() => Err(CliError::input(format!(
            "{flag} {}: directory {} is not writable",
            path.display(),
            parent.display()
        ))),
        _ => Err(CliError::input(format!(
            "{flag} {}: directory {} does not exist",
            path.display(),
            parent.display()
        ))),
    }
}

/// The one mapping from library errors to the contract's exit codes: an error that
/// means the ledger is damaged (a record, blob, ref file or projection cache failed its
/// check, or a replay found recorded bytes altered) is a failed check, exit 1; anything
/// else (unknown branch, bad name, a second writer, bad input) is exit 2.
///
/// Every library error takes this path: the message is the error and its causes, each
/// once ([`Chain`]), and the code and repair hint come from the ledger and store errors
/// found in its `source()` chain (library errors keep them as sources, never as text).
///
/// [`Chain`]: mapf_ledger::ledger::Chain
impl<E: std::error::Error + 'static> From<E> for CliError {
    fn from(e: E) -> CliError {
        let diagnosis = Diagnosis::of(&e);
        let message = format!("{}{}", mapf_ledger::ledger::Chain(&e), diagnosis.hint);
        if diagnosis.damaged {
            CliError::check(message)
        } else {
            CliError::input(message)
        }
    }
}

/// What the ledger and store errors in an error's `source()` chain say about it.
pub struct Diagnosis {
    /// The ledger is damaged (exit 1).
    pub damaged: bool,
    /// The `ledger` command that helps, as a suffix of the message ("" if none).
    pub hint: &'static str,
}

impl Diagnosis {
    pub fn of(e: &(dyn std::error::Error + 'static)) -> Diagnosis {
        use ledger_store::StoreError as S;
        use mapf_ledger::ledger::LedgerError as L;
        let mut d = Diagnosis {
            damaged: false,
            hint: "",
        };
        for cause in std::iter::successors(Some(e), |e| e.source()) {
            if let Some(s) = cause.downcast_ref::<S>() {
                d.damaged |= matches!(
                    s,
                    S::Corrupt { .. } | S::Damaged { .. } | S::MissingBlob { .. }
                );
                if d.hint.is_empty() {
                    d.hint = hint(s);
                }
            } else if let Some(l) = cause.downcast_ref::<L>() {
                d.damaged |= matches!(l, L::Corrupt { .. } | L::Decode { .. });
            } else {
                #[cfg(feature = "train")]
                if let Some(r) = cause.downcast_ref::<mapf_ledger::replay::ReplayError>() {
                    d.damaged |= matches!(r, mapf_ledger::replay::ReplayError::Altered { .. });
                }
            }
        }
        d
    }
}

/// The command that helps with a store error, for the errors whose remedy is a
/// `ledger` command. The store names the repair as a type ([`Repair`]); saying which
/// command performs it is the CLI's job.
///
/// [`Repair`]: mapf_ledger::ledger::Repair
fn hint(e: &ledger_store::StoreError) -> &'static str {
    use ledger_store::StoreError as S;
    use mapf_ledger::ledger::Repair;
    match e {
        S::Damaged {
            repair: Repair::Recover,
            ..
        } => "; `ledger recover` restores the newest intact snapshot and finds the branch tips after it",
        S::Damaged {
            repair: Repair::Rebuild,
            ..
        } => " (derived data: `ledger rebuild` remakes it)",
        S::NotALedger { .. } => " (create one with `ledger init --plan FILE`)",
        S::Full { .. } => "; nothing recorded was lost (the ledger keeps everything up to its last durable point, and a write that did not finish is set aside or removed): free space and run the same command again, which resumes from there",
        _ => "",
    }
}

/// Open the ledger at `dir` as its one writer, and say what the open set aside rather
/// than cut (history a damaged `REFS` may have hidden, or a crash's uncommitted batch).
pub fn open_writer(
    dir: &std::path::Path,
) -> Result<mapf_ledger::ledger::Ledger, mapf_ledger::ledger::LedgerError> {
    let l = mapf_ledger::ledger::Ledger::open(dir)?;
    warn_set_aside(&l);
    Ok(l)
}

/// The warning of a writer's open that set records aside (see [`open_writer`]), and
/// its note of derived data it remade.
pub fn warn_set_aside(l: &mapf_ledger::ledger::Ledger) {
    for note in l.healed() {
        eprintln!("note: {note}");
    }
    for a in l.set_aside().iter().filter(|a| a.records > 0) {
        eprintln!(
            "warning: {} held {} intact record(s) in {} bytes past its committed length {} (not history: a crash before its commit, or a damaged last REFS record); set aside as {}; `ledger recover` re-attaches them as recovered/* branches",
            a.from.display(),
            a.records,
            a.bytes,
            a.offset,
            a.to.display()
        );
    }
}

/// A ledger error as a command's error (see [`Diagnosis`]).
pub fn ledger_error(e: mapf_ledger::ledger::LedgerError) -> CliError {
    e.into()
}

#[derive(Parser, Debug)]
#[command(
    name = "ledger",
    version,
    about = "Event-sourced experiment ledger for LLM-designed MAPF-FrozenLake curricula"
)]
pub struct Cli {
    /// Ledger directory (default: $LEDGER, else ledgers/default).
    #[arg(long, global = true, env = "LEDGER", value_name = "DIR")]
    pub ledger: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    pub fn ledger_dir(&self) -> PathBuf {
        self.ledger
            .clone()
            .unwrap_or_else(|| PathBuf::from("ledgers/default"))
    }
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// The MAPF-FrozenLake testbed on its own (generate, solve, check, suites, import).
    #[command(subcommand)]
    Env(env::EnvCommand),
    #[cfg(feature = "train")]
    /// Write the JSON Schemas of every interchange format into a directory.
    Schemas {
        /// Directory to write the schemas into (created if missing).
        #[arg(long, default_value = "schemas")]
        out: PathBuf,
    },
    #[cfg(feature = "train")]
    /// Run the branch's stages (warm-up, then engineered GRPO stages) from where it stops.
    Run {
        /// The branch to run (created at the genesis if new).
        #[arg(long, default_value = "main")]
        branch: String,
        /// Run at most N more stages.
        #[arg(long)]
        stages: Option<u32>,
        #[arg(long, help = engineer_help("Engineer for the stages this run designs"))]
        engineer: Option<mapf_ledger::engineer::EngineerSpec>,
        /// cpu, cuda or cuda:N (default: the plan's).
        #[arg(long)]
        device: Option<mapf_ledger::train::DeviceSpec>,
        /// On CUDA: the GPU memory the memory check compares with (default: the
        /// device's own), e.g. 80GiB.
        #[arg(long, value_name = "SIZE")]
        gpu_memory: Option<String>,
        /// Run even when the memory check says the plan cannot fit.
        #[arg(long)]
        force: bool,
        /// No progress bars.
        #[arg(long)]
        quiet: bool,
    },
    #[cfg(feature = "train")]
    /// Continue a branch after a crash or Ctrl-C (same as `run`).
    Resume {
        /// The branch to run (created at the genesis if new).
        #[arg(long, default_value = "main")]
        branch: String,
        /// cpu, cuda or cuda:N (default: the plan's).
        #[arg(long)]
        device: Option<mapf_ledger::train::DeviceSpec>,
        /// On CUDA: the GPU memory the memory check compares with (default: the device's own), e.g. 80GiB.
        #[arg(long, value_name = "SIZE")]
        gpu_memory: Option<String>,
        /// Run even when the memory check says the plan cannot fit.
        #[arg(long)]
        force: bool,
        /// No progress bars.
        #[arg(long)]
        quiet: bool,
    },
    #[cfg(feature = "train")]
    /// Fork a branch at a stage: the new branch keeps stages before N and lets the
    /// engineer design stage N onward (`ledger run --branch NEW` continues it).
    Fork {
        /// stageN (N >= 1).
        #[arg(long, value_parser = mapf_ledger::replay::parse_stage)]
        at: u32,
        /// The branch to fork from.
        #[arg(long, default_value = "main")]
        from: String,
        /// The engineer of stage N onward (as for `run --engineer`, module switches included).
        #[arg(long)]
        engineer: mapf_ledger::engineer::EngineerSpec,
        /// Name of the new branch (default FROM-ENGINEER-atN).
        #[arg(long)]
        name: Option<String>,
    },
    #[cfg(feature = "train")]
    /// Write a stage's policy weights as a safetensors file (REF: BRANCH@stageN, a
    /// branch, or a checkpoint event hash prefix).
    ExportCheckpoint {
        /// The checkpoint: BRANCH@stageN, a branch (its latest), or a checkpoint event's hash prefix.
        #[arg(value_name = "REF")]
        reference: String,
        /// A safetensors file of the trained parameters.
        #[arg(long, required_unless_present = "hf", conflicts_with = "hf")]
        out: Option<PathBuf>,
        /// An HF model directory (lm policy; LoRA merged) that transformers and vLLM load.
        #[arg(long, value_name = "DIR")]
        hf: Option<PathBuf>,
    },
    #[cfg(feature = "train")]
    /// Plan files on their own: `plan check` estimates a run's peak device memory.
    #[command(subcommand)]
    Plan(plan::PlanCommand),
    #[cfg(feature = "train")]
    /// The language model on its own: `lm generate` samples from a model directory or
    /// a ledger checkpoint (a sanity check of a loaded model).
    #[command(subcommand)]
    Lm(lm::LmCommand),
    #[cfg(feature = "train")]
    /// Score a checkpoint (an HF model directory or a ledger reference) on the paper's
    /// suites without a run: valid and optimal % per size, Sum per agent count, failure
    /// kinds.
    Eval(eval::EvalArgs),
    #[cfg(feature = "train")]
    /// Recompute recorded stages and compare every event hash (`--verify`, the
    /// default), or re-run a stage with another engineer (`--engineer E [--keep NAME]`).
    Replay(replay::ReplayArgs),
    /// Per-stage validation curves and final test tables of branches, side by side.
    /// Each is a reference: BRANCH, BRANCH@stageN (the branch through stage N) or an
    /// event's hash prefix; the first is the baseline the others are paired against.
    Compare {
        /// The references to compare; the first is the baseline.
        #[arg(required = true, value_name = "REFERENCE")]
        branches: Vec<String>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Also plot the validation curves into this file (SVG or PNG, by extension).
        #[arg(long, value_name = "FILE.svg|FILE.png")]
        plot: Option<PathBuf>,
        /// Also list each branch's engineer decisions (what each stage's engineer
        /// changed) and say where branches made the same change.
        #[arg(long)]
        decisions: bool,
    },
    /// Every engineer decision of a branch: what it saw, the config diff it made
    /// (proposed vs applied), clips, rationale, status, and the outcome on validation.
    Audit {
        /// A branch, BRANCH@stageN (the decisions through stage N) or an event's hash prefix.
        #[arg(long, default_value = "main", value_name = "REFERENCE")]
        branch: String,
        /// Only the decision of this stage (stageN or N).
        #[arg(long, value_parser = mapf_ledger::ledger::parse_stage)]
        stage: Option<u32>,
        /// Also print the exact prompt each engineer read (LLM and model engineers;
        /// with --json, as `prompt_text`).
        #[arg(long)]
        prompt: bool,
        /// Also print the reply each engineer wrote, verbatim (`reply_text` in --json).
        #[arg(long)]
        reply: bool,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// One self-contained HTML page of the experiment (curves, test tables, heatmaps,
    /// decision timeline, fork tree, study), with its figures as SVG and PNG.
    Report(report::ReportArgs),
    /// The report as a live local web page that follows the ledger while a run writes
    /// it (read-only; binds 127.0.0.1 unless told otherwise).
    Serve(report::ServeArgs),
    #[cfg(feature = "train")]
    /// Counterfactual study: fork at stageN once per engineer x seed, run each to the
    /// plan's end (resumable; here, in local processes, or on Slurm), write study.csv,
    /// study.md, study.json and the plot.
    Study(study::StudyArgs),
    #[cfg(feature = "train")]
    /// One study run in a worker ledger (what `study --executor local:N|slurm` starts):
    /// create the ledger from the bundle if needed, run the branch, write `done`.
    #[command(hide = true)]
    StudyTask(study::TaskArgs),
    /// Write branches (or branch@stageN prefixes) and everything they reach into one
    /// file, for another machine (`ledger init --from-bundle`, `ledger fetch`).
    Bundle(sync::BundleArgs),
    /// Copy missing events, blobs and branches in from a bundle or a ledger directory,
    /// checking every hash; diverged branches are refused unless --prefix is given.
    Fetch(sync::FetchArgs),
    #[cfg(feature = "train")]
    /// Register and list LLM engineers (OpenAI-compatible chat endpoints).
    #[command(subcommand)]
    Engineer(engineer::EngineerCommand),
    #[command(flatten)]
    Store(store::StoreCommand),
    /// A training command, in a `ledger` built without the trainer: refused, naming
    /// what to install.
    #[cfg(not(feature = "train"))]
    #[command(external_subcommand)]
    Trainer(Vec<String>),
}

/// Standard output for commands that stream: when the reading end goes away
/// (`ledger export | head`), the command ends quietly with status 0, as `git log` and
/// `rg` do (read commands have nothing to finish or undo).
pub struct Stdout(std::io::Stdout);

pub fn stdout() -> std::io::BufWriter<Stdout> {
    std::io::BufWriter::with_capacity(1 << 16, Stdout(std::io::stdout()))
}

fn quiet_on_broken_pipe(r: std::io::Result<usize>) -> std::io::Result<usize> {
    match r {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        r => r,
    }
}

impl std::io::Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        quiet_on_broken_pipe(self.0.write(buf))
    }
    fn flush(&mut self) -> std::io::Result<()> {
        quiet_on_broken_pipe(self.0.flush().map(|_| 0)).map(|_| ())
    }
}

/// Parse the command line, run it, and exit with the contract's code.
pub fn main() {
    // `println!` panics when stdout is a closed pipe; that is the reader leaving, not
    // a failure: end quietly with status 0 (see [`Stdout`]).
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let msg = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if msg.contains("failed printing to stdout") && msg.contains("Broken pipe") {
            std::process::exit(0);
        }
        default_hook(info)
    }));
    let cli = Cli::try_parse().unwrap_or_else(|e| {
        if let Some(message) = empty_ledger_variable(&e) {
            eprintln!("ledger: {message}");
            std::process::exit(2);
        }
        e.exit()
    });
    let ledger_dir = cli.ledger_dir();
    let result = match cli.command {
        Command::Env(cmd) => env::run(cmd),
        #[cfg(feature = "train")]
        Command::Schemas { out } => write_schemas(&out),
        #[cfg(feature = "train")]
        Command::Run {
            branch,
            stages,
            engineer,
            device,
            gpu_memory,
            force,
            quiet,
        } => run::run(
            &ledger_dir,
            mapf_ledger::stage::RunOptions {
                branch,
                stages,
                engineer,
            },
            device,
            run::MemoryCheck { gpu_memory, force },
            quiet,
        ),
        #[cfg(feature = "train")]
        Command::Resume {
            branch,
            device,
            gpu_memory,
            force,
            quiet,
        } => run::run(
            &ledger_dir,
            mapf_ledger::stage::RunOptions {
                branch,
                stages: None,
                engineer: None,
            },
            device,
            run::MemoryCheck { gpu_memory, force },
            quiet,
        ),
        #[cfg(feature = "train")]
        Command::Plan(cmd) => plan::run(cmd),
        #[cfg(feature = "train")]
        Command::Fork {
            at,
            from,
            engineer,
            name,
        } => fork(&ledger_dir, at, &from, &engineer, name.as_deref()),
        #[cfg(feature = "train")]
        Command::ExportCheckpoint { reference, out, hf } => {
            checkpoint::export(&ledger_dir, &reference, out.as_deref(), hf.as_deref())
        }
        #[cfg(feature = "train")]
        Command::Lm(cmd) => lm::run(&ledger_dir, cmd),
        #[cfg(feature = "train")]
        Command::Eval(args) => eval::run(&ledger_dir, args),
        #[cfg(feature = "train")]
        Command::Replay(args) => replay::run(&ledger_dir, args),
        Command::Compare {
            branches,
            json,
            plot,
            decisions,
        } => compare(&ledger_dir, &branches, json, plot.as_deref(), decisions),
        Command::Report(args) => report::run(&ledger_dir, args),
        Command::Serve(args) => report::serve(&ledger_dir, args),
        Command::Audit {
            branch,
            stage,
            prompt,
            reply,
            json,
        } => audit::run(&ledger_dir, &branch, stage, (prompt, reply), json),
        #[cfg(feature = "train")]
        Command::Study(args) => study::run(&ledger_dir, args),
        #[cfg(feature = "train")]
        Command::StudyTask(args) => study::task(&ledger_dir, args),
        Command::Bundle(args) => sync::bundle(&ledger_dir, args),
        Command::Fetch(args) => sync::fetch(&ledger_dir, args),
        #[cfg(feature = "train")]
        Command::Engineer(cmd) => engineer::run(cmd, &ledger_dir),
        Command::Store(cmd) => store::run(cmd, &ledger_dir),
        #[cfg(not(feature = "train"))]
        Command::Trainer(args) => Err(without_trainer(&args)),
    };
    if let Err(e) = result {
        eprintln!("ledger: {}", e.message);
        std::process::exit(e.code);
    }
}

/// What to say when clap refuses an empty `--ledger` that came from `LEDGER=` (set
/// but empty) rather than from the command line: name the variable and how to name a
/// ledger, instead of "a value is required for '--ledger'".
fn empty_ledger_variable(e: &clap::Error) -> Option<String> {
    let from_command_line = std::env::args_os().any(|a| {
        a.to_str()
            .is_some_and(|a| a == "--ledger" || a.starts_with("--ledger="))
    });
    (e.kind() == clap::error::ErrorKind::InvalidValue
        && std::env::var_os("LEDGER").is_some_and(|v| v.is_empty())
        && !from_command_line)
        .then(|| {
            "LEDGER is set but empty: name a ledger directory with `--ledger DIR` or \
             `LEDGER=DIR`, or unset LEDGER for the default, ledgers/default"
                .to_string()
        })
}

#[cfg(feature = "train")]
fn fork(
    dir: &std::path::Path,
    at: u32,
    from: &str,
    engineer: &mapf_ledger::engineer::EngineerSpec,
    name: Option<&str>,
) -> CliResult {
    let mut ledger = open_writer(dir)?;
    let (name, head) = mapf_ledger::replay::fork(&mut ledger, from, at, engineer, name, 0)?;
    println!(
        "branch {name} forked from {from} before stage {at} (engineer {engineer}), head {}",
        head.short()
    );
    Ok(())
}

fn compare(
    dir: &std::path::Path,
    branches: &[String],
    json: bool,
    plot: Option<&std::path::Path>,
    decisions: bool,
) -> CliResult {
    if let Some(p) = plot {
        mapf_ledger::figures::format_of(p)?;
        check_output_file("--plot", p)?;
    }
    let mut ledger = mapf_ledger::ledger::Ledger::open_read_only(dir)?;
    let summaries = mapf_ledger::views::compare::compare(&mut ledger, branches)?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&summaries).expect("serialises")
        );
    } else {
        print!("{}", mapf_ledger::views::compare::render(&summaries));
        let coordination: Vec<(String, Vec<_>)> = summaries
            .iter()
            .map(|b| (b.branch.clone(), b.coordination.clone()))
            .collect();
        let text = mapf_ledger::views::coordination::render(&coordination);
        if !text.is_empty() {
            println!();
            print!("{text}");
        }
        if decisions {
            println!();
            print!(
                "{}",
                mapf_ledger::views::compare::render_decisions(&summaries)
            );
        }
    }
    if let Some(p) = plot {
        mapf_ledger::views::compare::plot_compare(p, &summaries)?;
        if !json {
            println!("wrote {}", p.display());
        }
    }
    Ok(())
}

#[cfg(feature = "train")]
fn write_schemas(out: &std::path::Path) -> CliResult {
    std::fs::create_dir_all(out).map_err(|e| CliError::input(format!("{}: {e}", out.display())))?;
    for (name, text) in mapf_ledger::schemas::all() {
        let path = out.join(format!("{name}.json"));
        std::fs::write(&path, text)
            .map_err(|e| CliError::input(format!("{}: {e}", path.display())))?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

/// What a `ledger` built without the trainer says of a command it does not have: the
/// training commands name what to install; anything else is an unknown command.
#[cfg(not(feature = "train"))]
fn without_trainer(args: &[String]) -> CliError {
    const TRAINING: &[&str] = &[
        "schemas",
        "run",
        "resume",
        "fork",
        "export-checkpoint",
        "plan",
        "lm",
        "eval",
        "replay",
        "study",
        "study-task",
        "engineer",
    ];
    let name = args.first().map(String::as_str).unwrap_or("");
    if TRAINING.contains(&name) {
        CliError::input(format!(
            "`ledger {name}` needs the trainer, and this `ledger` was built without it \
             (--no-default-features: no libtorch). Install the full one from a checkout \
             with `make build` (it provisions libtorch), or `cargo install --path .` with \
             LIBTORCH set (see README.md, \"Without libtorch\")"
        ))
    } else {
        CliError::input(format!("unknown command `{name}` (see `ledger --help`)"))
    }
}

/// The help of an `--engineer` option: `lead`, then the built-in engineers as the
/// registry (`engineer::BUILTINS`) lists them, and the spec's grammar.
#[cfg(feature = "train")]
pub(crate) fn engineer_help(lead: &str) -> String {
    use mapf_ledger::engineer::BUILTINS;
    let names = |lm: bool| {
        BUILTINS
            .iter()
            .filter(|b| b.lm_only == lm)
            .map(|b| b.name)
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!(
        "{lead}: {}, {} (lm plans), or a registered LLM; `NAME:-module+module` switches context modules (e.g. `current:-failure_breakdown`)",
        names(false),
        names(true)
    )
}
