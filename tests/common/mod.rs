//! Helpers shared by integration tests: the `ledger` binary, and a real headless
//! Chromium ([`browser`]).
#![allow(dead_code)]
pub mod browser;

use std::path::Path;
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
