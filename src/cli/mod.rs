//! The `ledger` command line: argument parsing and dispatch, thin over the library.
//!
//! One file per command family. Every command returns `Result<(), CliError>`; the error
//! carries the exit code of the contract (1 a failed check, 2 usage or input error) and
//! a message naming the bad input.
pub mod audit;
pub mod env;
pub mod report;
pub mod store;
pub mod sync;
pub mod values;
// The commands that train, or run what trains (the `train` feature: libtorch), in one
// module; a `ledger` built without it has `refused.rs` in that place, which refuses them
// naming what to install. The one place the CLI asks which build it is.
#[cfg(feature = "train")]
pub mod train;
#[cfg(not(feature = "train"))]
#[path = "refused.rs"]
pub mod train;

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

/// The one mapping from library errors to the contract's exit codes: an error that
/// means the ledger is damaged (a record, blob, ref file or projection cache failed its
/// check, or a replay found recorded bytes altered) is a failed check, exit 1; anything
/// else (unknown branch, bad name, a second writer, bad input) is exit 2.
///
/// Every library error takes this path: the message is the error and its causes, each
/// once ([`Chain`]), and the code and repair hint come from the ledger and store errors
/// found in its `source()` chain ([`diagnose`]).
///
/// [`Chain`]: mapf_ledger::ledger::Chain
/// [`diagnose`]: mapf_ledger::diagnosis::diagnose
impl<E: std::error::Error + 'static> From<E> for CliError {
    fn from(e: E) -> CliError {
        let diagnosis = mapf_ledger::diagnosis::diagnose(&e);
        let message = format!("{}{}", mapf_ledger::ledger::Chain(&e), hint(&diagnosis));
        if diagnosis.damaged {
            CliError::check(message)
        } else {
            CliError::input(message)
        }
    }
}

/// The command that helps with an error, as a suffix of its message ("" if none): the
/// library names the remedy as a type ([`Remedy`]); saying which command performs it is
/// the CLI's job.
///
/// [`Remedy`]: mapf_ledger::diagnosis::Remedy
fn hint(d: &mapf_ledger::diagnosis::Diagnosis) -> &'static str {
    use mapf_ledger::diagnosis::Remedy;
    use mapf_ledger::ledger::Repair;
    match d.remedy {
        Some(Remedy::Repair(Repair::Recover)) => "; `ledger recover` restores the newest intact snapshot and finds the branch tips after it",
        Some(Remedy::Repair(Repair::Rebuild)) => " (derived data: `ledger rebuild` remakes it)",
        Some(Remedy::CreateLedger) => " (create one with `ledger init --plan FILE`)",
        Some(Remedy::FreeSpace) => "; nothing recorded was lost (the ledger keeps everything up to its last durable point, and a write that did not finish is set aside or removed): free space and run the same command again, which resumes from there",
        None => "",
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
    for line in mapf_ledger::views::text::ledger::open_notes(l) {
        eprintln!("{line}");
    }
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

/// `ledger`'s commands. `ledger --help` lists them by display order: `env`, the
/// training commands from 1 on (`train::TrainCommand`), `compare` to `serve`, `study`
/// (14), `bundle`, `fetch`, `engineer` (17), then the store's commands from 18 on.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// The MAPF-FrozenLake testbed on its own (generate, solve, check, suites, import).
    #[command(subcommand)]
    Env(env::EnvCommand),
    /// Per-stage validation curves and final test tables of branches, side by side.
    /// Each is a reference: BRANCH, BRANCH@stageN (the branch through stage N) or an
    /// event's hash prefix; the first is the baseline the others are paired against.
    #[command(display_order = 10)]
    Compare(CompareArgs),
    /// Every engineer decision of a branch: what it saw, the config diff it made
    /// (proposed vs applied), clips, rationale, status, and the outcome on validation.
    #[command(display_order = 11)]
    Audit(AuditArgs),
    /// One self-contained HTML page of the experiment (curves, test tables, heatmaps,
    /// decision timeline, fork tree, study), with its figures as SVG and PNG.
    #[command(display_order = 12)]
    Report(report::ReportArgs),
    /// The report as a live local web page that follows the ledger while a run writes
    /// it (read-only; binds 127.0.0.1 unless told otherwise).
    #[command(display_order = 13)]
    Serve(report::ServeArgs),
    /// Write branches (or branch@stageN prefixes) and everything they reach into one
    /// file, for another machine (`ledger init --from-bundle`, `ledger fetch`).
    #[command(display_order = 15)]
    Bundle(sync::BundleArgs),
    /// Copy missing events, blobs and branches in from a bundle or a ledger directory,
    /// checking every hash; diverged branches are refused unless --prefix is given.
    #[command(display_order = 16)]
    Fetch(sync::FetchArgs),
    #[command(flatten, next_display_order = 18)]
    Store(store::StoreCommand),
    // Last: in a `ledger` without the trainer, it takes every command not named above
    // (clap takes an external subcommand only at the top level, not flattened).
    #[cfg(feature = "train")]
    #[command(flatten, next_display_order = 1)]
    Train(train::TrainCommand),
    #[cfg(not(feature = "train"))]
    #[command(external_subcommand)]
    Train(Vec<String>),
}

#[derive(clap::Args, Debug)]
pub struct CompareArgs {
    /// The references to compare; the first is the baseline.
    #[arg(required = true, value_name = "REFERENCE")]
    pub branches: Vec<String>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// Also plot the validation curves into this file (SVG or PNG, by extension).
    #[arg(long, value_name = "FILE.svg|FILE.png")]
    pub plot: Option<PathBuf>,
    /// Also list each branch's engineer decisions (what each stage's engineer
    /// changed) and say where branches made the same change.
    #[arg(long)]
    pub decisions: bool,
}

#[derive(clap::Args, Debug)]
pub struct AuditArgs {
    /// A branch, BRANCH@stageN (the decisions through stage N) or an event's hash prefix.
    #[arg(long, default_value = "main", value_name = "REFERENCE")]
    pub branch: String,
    /// Only the decision of this stage (stageN or N).
    #[arg(long, value_parser = mapf_ledger::ledger::parse_stage)]
    pub stage: Option<u32>,
    /// Also print the exact prompt each engineer read (LLM and model engineers;
    /// with --json, as `prompt_text`).
    #[arg(long)]
    pub prompt: bool,
    /// Also print the reply each engineer wrote, verbatim (`reply_text` in --json).
    #[arg(long)]
    pub reply: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// An error writing a command's output. A closed pipe (`ledger cat BLOB | head`) is the
/// reader leaving, not a failure: the command ends quietly with status 0 (see
/// [`Stdout`]), whichever writer met it.
pub fn out_err(e: std::io::Error) -> CliError {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        std::process::exit(0);
    }
    CliError::input(format!("writing output: {e}"))
}

/// `v` as pretty JSON, and a newline, to standard output.
pub fn print_json(v: &impl serde::Serialize) -> CliResult {
    let s = serde_json::to_string_pretty(v).map_err(|e| CliError::input(e.to_string()))?;
    println!("{s}");
    Ok(())
}

/// Write `bytes` to standard output (see [`out_err`]).
pub fn write_out(bytes: &[u8]) -> CliResult {
    use std::io::Write;
    let mut w = stdout();
    w.write_all(bytes).and_then(|_| w.flush()).map_err(out_err)
}

/// `value` as JSON, or as the text `render` makes of it, to standard output.
pub fn say<T: serde::Serialize>(
    json: bool,
    value: &T,
    render: impl FnOnce(&T) -> String,
) -> CliResult {
    match json {
        true => print_json(value),
        false => write_out(render(value).as_bytes()),
    }
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
        Command::Compare(a) => compare(&ledger_dir, a),
        Command::Report(args) => report::run(&ledger_dir, args),
        Command::Serve(args) => report::serve(&ledger_dir, args),
        Command::Audit(a) => audit::run(&ledger_dir, a),
        Command::Bundle(args) => sync::bundle(&ledger_dir, args),
        Command::Fetch(args) => sync::fetch(&ledger_dir, args),
        Command::Store(cmd) => store::run(cmd, &ledger_dir),
        Command::Train(cmd) => train::run(cmd, &ledger_dir),
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

fn compare(dir: &std::path::Path, a: CompareArgs) -> CliResult {
    use mapf_ledger::views::compare::{check_plot, compare_dir, plot_compare};
    let (json, plot) = (a.json, a.plot.as_deref());
    if let Some(p) = plot {
        check_plot(p)?;
    }
    let summaries = compare_dir(dir, &a.branches)?;
    say(json, &summaries, |s| {
        mapf_ledger::views::text::compare::compare(s, a.decisions)
    })?;
    if let Some(p) = plot {
        plot_compare(p, &summaries)?;
        if !json {
            println!("wrote {}", p.display());
        }
    }
    Ok(())
}
