//! The training commands in a `ledger` built without the trainer (`--no-default-features`,
//! no libtorch), in the place of `cli/train/`: every command the full build has and
//! this one lacks lands here and is refused, naming what to install; any other name is
//! an unknown command.
use super::{CliError, CliResult};
use std::path::Path;

/// A training command, in a `ledger` built without the trainer (the command line, as
/// clap's external subcommand of the top level gives it): refused, naming what to
/// install.
pub type TrainCommand = Vec<String>;

/// The commands of the full build that this one lacks.
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

/// Refuse the command: a training command names what to install; anything else is an
/// unknown command.
pub fn run(args: TrainCommand, _dir: &Path) -> CliResult {
    let name = args.first().map(String::as_str).unwrap_or("");
    Err(if TRAINING.contains(&name) {
        CliError::input(format!(
            "`ledger {name}` needs the trainer, and this `ledger` was built without it \
             (--no-default-features: no libtorch). Install the full one from a checkout \
             with `make build` (it provisions libtorch), or `cargo install --path .` with \
             LIBTORCH set (see README.md, \"Without libtorch\")"
        ))
    } else {
        CliError::input(format!("unknown command `{name}` (see `ledger --help`)"))
    })
}
