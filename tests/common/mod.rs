//! Helpers shared by integration tests: the `ledger` binary, a real headless Chromium
//! ([`browser`]), and a checker of outputs against the checked-in schemas ([`schema`]).
#![allow(dead_code)]
pub mod browser;
pub mod schema;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Run the `ledger` binary on the ledger `dir` (never the caller's `$LEDGER`).
pub fn ledger(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ledger"))
        .arg("--ledger")
        .arg(dir)
        .args(args)
        .env_remove("LEDGER")
        .output()
        .expect("run ledger")
}

/// The stdout of a command that must succeed (else its outputs, in the panic).
pub fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "exit {:?}\nstdout: {}\nstderr: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout.clone()).unwrap()
}

/// Assert an exit code and a phrase of stderr.
pub fn fails(o: &Output, code: i32, needle: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(code), "stderr: {err}");
    assert!(err.contains(needle), "expected {needle:?} in: {err}");
}

/// A ledger of the tiny grid plan (2 designed stages, seconds to run) at `tmp/l`, run to
/// the plan's end.
pub fn tiny_ledger(tmp: &Path) -> PathBuf {
    let d = tmp.join("l");
    let plan = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/plans/tiny.toml");
    ok(&ledger(&d, &["init", "--plan", plan]));
    ok(&ledger(&d, &["run", "--quiet"]));
    d
}

/// Every branch and its head (full hex), in name order, from `ledger branches --json`.
pub fn heads(d: &Path) -> Vec<(String, String)> {
    let b: serde_json::Value =
        serde_json::from_str(&ok(&ledger(d, &["branches", "--json"]))).unwrap();
    b.as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["name"].as_str().unwrap().to_string(),
                r["head"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}
