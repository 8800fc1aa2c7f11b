//! `ledger engineer`: register LLM engineers (OpenAI-compatible chat endpoints) on a
//! branch and list the registered ones.
//!
//! Registration appends one `EngineerRegistered` event recording the URL, the model,
//! the *name* of the environment variable holding the API key (the key is read at call
//! time and never stored), the tokenizer.json (as a blob) and the context window.
use super::{CliError, CliResult};
use crate::ledger::{Ledger, Meta};
use crate::record::event::{EngineerKind, EngineerRegistered, EventBody};
use crate::views::show::EngineerRow;
use clap::Subcommand;
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
        #[arg(long, default_value = "main")]
        branch: String,
    },
    /// The LLM engineers registered on a branch.
    List {
        #[arg(long, default_value = "main")]
        branch: String,
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
    }
}

/// Check an engineer name: `[a-z0-9_-]+` and not a built-in name.
pub fn validate_name(name: &str) -> Result<(), String> {
    if name.is_empty()
        || !name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
    {
        return Err(format!(
            "engineer name {name:?}: use lowercase letters, digits, '_' and '-'"
        ));
    }
    if crate::engineer::reserved(name) {
        return Err(format!("engineer name {name:?} is a built-in engineer"));
    }
    Ok(())
}

/// Check an environment variable name (so a key pasted in its place is refused, not stored).
fn validate_var(var: &str) -> Result<(), String> {
    let mut bytes = var.bytes();
    let first_ok = bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_');
    if first_ok && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_') && var.len() <= 64 {
        Ok(())
    } else {
        Err(
            "--api-key-env: give the NAME of the environment variable holding the key \
             (letters, digits, '_'), not the key itself"
                .to_string(),
        )
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
    validate_name(name).map_err(CliError::input)?;
    if !(url.starts_with("http://") || url.starts_with("https://")) || url.len() < 10 {
        return Err(CliError::input(format!(
            "--url {url:?}: expected an http:// or https:// URL"
        )));
    }
    if model.trim().is_empty() {
        return Err(CliError::input("--model: must not be empty"));
    }
    if let Some(v) = &api_key_env {
        validate_var(v).map_err(CliError::input)?;
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
    let mut ledger = Ledger::open(dir).map_err(err)?;
    let state = ledger.projection(branch).map_err(err)?;
    if state.engineers.iter().any(|e| e == name) {
        return Err(CliError::input(format!(
            "engineer {name:?} is already registered on branch {branch}"
        )));
    }
    let plan = crate::stage::ledger_plan(&ledger).map_err(|e| CliError::input(e.to_string()))?;
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
            crate::engineer::builtin_names()
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
