//! `engineer list`: the LLM engineers registered on a branch, one line each.
use crate::views::show::EngineerRow;
use std::fmt::Write as _;

/// The rows registered on `branch` (`builtins`: the built-in engineers' names, named
/// when there are no rows).
pub fn list(branch: &str, rows: &[EngineerRow], builtins: &str) -> String {
    let mut out = String::new();
    if rows.is_empty() {
        let _ = writeln!(
            out,
            "no LLM engineers registered on {branch} (built-in: {builtins})"
        );
    }
    for r in rows {
        let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
        let _ = writeln!(
            out,
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
    out
}
