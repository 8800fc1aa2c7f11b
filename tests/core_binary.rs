//! The `ledger` built without the trainer (`--no-default-features`): it links no
//! libtorch, and on a ledger the full build made it verifies, audits, compares, shows,
//! exports, reports, bundles, fetches and gc's exactly as the full one does; the
//! training commands refuse with exit 2, naming what to install.
//!
//! `make test` builds that binary first (in the tests' profile, copied to
//! `target/core/ledger`) and names it in `LEDGER_CORE_BIN`; a plain `cargo test` builds
//! it here, in the `core` profile, whose output cannot replace the binary the other tests
//! run while they run.
use crate::common;

use common::{fails, ok};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The libtorch-free binary: `$LEDGER_CORE_BIN`, else built with the `core` profile.
fn core_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("LEDGER_CORE_BIN") {
        return PathBuf::from(p);
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(option_env!("CARGO").unwrap_or("cargo"))
        .current_dir(root)
        .args([
            "build",
            "--profile",
            "core",
            "--no-default-features",
            "--bin",
            "ledger",
        ])
        .output()
        .expect("run cargo");
    assert!(
        out.status.success(),
        "cargo build --no-default-features: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    root.join("target/core/ledger")
}

/// Run the libtorch-free `ledger` on `dir`, with no libtorch anywhere in its
/// environment (no `LIBTORCH`, no `LD_LIBRARY_PATH`).
fn core(bin: &Path, dir: &Path, args: &[&str]) -> Output {
    common::ledger_cmd_on(bin, dir, args)
        .env_remove("LIBTORCH")
        .env_remove("LD_LIBRARY_PATH")
        .env_remove("LIBTORCH_CUDA_LIB")
        .output()
        .expect("run the libtorch-free ledger")
}

/// Run the full `ledger` (the one with the trainer) on `dir`: never the core build
/// `common::ledger` may pick for a read command, since this file compares the two.
fn full(dir: &Path, args: &[&str]) -> Output {
    common::ledger_cmd_on(Path::new(env!("CARGO_BIN_EXE_ledger")), dir, args)
        .output()
        .expect("run the full ledger")
}

/// The shared libraries an ELF binary names (its DT_NEEDED entries, read by `ldd`'s
/// loader-free cousin: the dynamic string table is plain text in the file).
fn mentions(bin: &Path, needle: &str) -> bool {
    let bytes = std::fs::read(bin).unwrap();
    bytes.windows(needle.len()).any(|w| w == needle.as_bytes())
}

#[test]
fn reads_and_keeps_a_ledger_without_libtorch() {
    let bin = core_bin();
    // The full binary names libtorch among its libraries; this one does not.
    assert!(mentions(
        Path::new(env!("CARGO_BIN_EXE_ledger")),
        "libtorch_cpu.so"
    ));
    assert!(
        !mentions(&bin, "libtorch_cpu.so"),
        "{} links libtorch",
        bin.display()
    );
    assert!(!mentions(&bin, "libc10.so"));

    // A real ledger, made and forked by the full build: an lm policy, so checkpoints
    // reference tokenizer blobs that bundles and gc must follow.
    let t = tempfile::tempdir().unwrap();
    let d = t.path().join("l");
    let plan = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/plans/lm-tiny.toml");
    ok(&full(&d, &["init", "--plan", plan]));
    ok(&full(&d, &["run", "--quiet"]));
    common::fork(&d, "stage2", "heuristic", "h");
    ok(&full(&d, &["branch", "delete", "h"]));

    // verify counts the same (its timing aside), and read commands print what the full
    // build prints, byte for byte.
    let counts = |o: &Output| ok(o).split(" in ").next().unwrap().to_string();
    assert_eq!(
        counts(&core(&bin, &d, &["verify"])),
        counts(&full(&d, &["verify"]))
    );
    for args in [
        &["log", "--branch", "main"][..],
        &["branches", "--json"],
        &["show", "main@stage1", "--json"],
        &["show", "main@stage1", "--timing", "--json"],
        &["audit", "--branch", "main", "--json"],
        &["compare", "main", "main@stage1", "--json"],
        &["export", "--what", "metrics"],
        &["export", "--what", "decisions", "--format", "csv"],
    ] {
        let full = ok(&full(&d, args));
        let lean = ok(&core(&bin, &d, args));
        assert_eq!(lean, full, "ledger {args:?} differs without libtorch");
    }

    // Storage commands: a bundle carries the tokenizer the checkpoints reference; a
    // fetched copy verifies; gc keeps everything a branch reaches.
    let bundle = t.path().join("main.bundle");
    ok(&core(
        &bin,
        &d,
        &[
            "bundle",
            "--branch",
            "main",
            "--out",
            bundle.to_str().unwrap(),
        ],
    ));
    let copy = t.path().join("copy");
    ok(&core(
        &bin,
        &copy,
        &["init", "--from-bundle", bundle.to_str().unwrap()],
    ));
    ok(&core(&bin, &copy, &["verify"]));
    assert_eq!(
        ok(&full(&copy, &["show", "main", "--json"])),
        ok(&full(&d, &["show", "main", "--json"]))
    );
    ok(&core(&bin, &d, &["gc"]));
    ok(&core(&bin, &d, &["verify"]));
    // The full build still loads the stage-2 model after the lean gc.
    ok(&full(
        &d,
        &[
            "export-checkpoint",
            "main@stage2",
            "--out",
            t.path().join("w.safetensors").to_str().unwrap(),
        ],
    ));

    // The report is written whole.
    let report = t.path().join("report");
    ok(&core(
        &bin,
        &d,
        &["report", "--out", report.to_str().unwrap()],
    ));
    assert!(report.join("index.html").is_file());

    // The testbed on its own needs no trainer: `env` generates, solves and renders
    // prompts as the full build does, byte for byte.
    let generate = [
        "env", "generate", "--size", "5", "--agents", "2", "--count", "2", "--seed", "3",
    ];
    let json = ok(&core(&bin, &d, &[&generate[..], &["--json"]].concat()));
    assert_eq!(json, ok(&full(&d, &[&generate[..], &["--json"]].concat())));
    let inst = t.path().join("instances.json");
    std::fs::write(&inst, &json).unwrap();
    let inst = inst.to_str().unwrap();
    for args in [
        &generate[..],
        &["env", "solve", inst, "--index", "1"],
        &["env", "prompt", inst, "--index", "0", "--format", "cells"],
    ] {
        let lean = ok(&core(&bin, &d, args));
        assert!(!lean.trim().is_empty(), "ledger {args:?} printed nothing");
        assert_eq!(
            lean,
            ok(&full(&d, args)),
            "ledger {args:?} differs without libtorch"
        );
    }

    // Training commands refuse (exit 2), naming what to install; the ledger is as it was.
    let before = ok(&core(&bin, &d, &["branches", "--json"]));
    for args in [
        &["run"][..],
        &["fork", "--at", "stage1", "--engineer", "fixed"],
        &["replay", "--verify"],
        &["study", "--at", "stage1", "--engineers", "fixed"],
        &["eval", "--model", "main"],
    ] {
        let o = core(&bin, &d, args);
        fails(&o, 2, "needs the trainer");
        fails(&o, 2, "make build");
    }
    assert_eq!(ok(&core(&bin, &d, &["branches", "--json"])), before);
    fails(
        &core(&bin, &d, &["frobnicate"]),
        2,
        "unknown command `frobnicate`",
    );
}

/// The commands the tests run on this build where `make test` names it
/// (`common::CORE_COMMANDS`) are exactly this build's commands besides `init` and
/// `help`, each one the full build has with the same `-h`: the same code, so a test of
/// either build's command tests both.
#[test]
fn the_commands_tests_run_without_libtorch_are_the_full_builds_own() {
    let core = core_bin();
    let full = Path::new(env!("CARGO_BIN_EXE_ledger"));
    let commands = |bin: &Path| -> Vec<String> {
        common::help_section(&common::help(bin, &[] as &[&str]), "Commands:")
            .into_iter()
            .map(|(name, _)| name)
            .collect()
    };
    let mut listed: Vec<String> = common::CORE_COMMANDS
        .iter()
        .map(|c| c.to_string())
        .collect();
    listed.sort();
    let mut own: Vec<String> = commands(&core)
        .into_iter()
        .filter(|c| c != "init" && c != "help")
        .collect();
    own.sort();
    assert_eq!(
        listed, own,
        "common::CORE_COMMANDS against the core build's commands"
    );
    let full_commands = commands(full);
    for c in common::CORE_COMMANDS {
        assert!(
            full_commands.iter().any(|f| f == c),
            "the full build lacks {c}"
        );
        assert_eq!(
            common::help(&core, &[c]),
            common::help(full, &[c]),
            "`{c} -h` differs between the builds"
        );
    }
}
