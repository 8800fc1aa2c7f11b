//! Errors that name the input the user gave (issue 52, item 4): each case a new user met,
//! with its exit code (2 bad input, 1 a failed check) and the words the message must hold.
use crate::common;

use common::{cli, fails, ledger, ledger_cmd, ok, tiny_ledger};
use std::io::Read;
use std::process::{Command, Stdio};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const LM_PLAN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/plans/engineer-rl.toml");

/// (a) A model directory that does not exist is named as such, not reported as a
/// problem of the default ledger.
#[test]
fn eval_names_a_missing_model_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("models/does-not-exist");
    let missing = missing.to_str().unwrap();
    let o = ledger(
        &tmp.path().join("no-ledger"),
        &["eval", "--model", missing, "--suite", "val"],
    );
    fails(&o, 2, &format!("model {missing}: not a model directory"));
    fails(&o, 2, "no such file or directory");
    // A file is not a model directory either.
    let file = tmp.path().join("weights.bin");
    std::fs::write(&file, b"x").unwrap();
    let o = ledger(
        &tmp.path().join("no-ledger"),
        &[
            "lm",
            "generate",
            "--model",
            file.to_str().unwrap(),
            "--prompt-file",
            file.to_str().unwrap(),
        ],
    );
    fails(&o, 2, "is not a directory");
}

/// (b) An unknown branch is said to be one, with the nearest name, wherever a branch
/// is resolved: log, show, compare, fork --from.
#[test]
fn an_unknown_branch_suggests_the_nearest_name() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tiny_ledger(tmp.path());
    for args in [
        &["log", "--branch", "mian"][..],
        &["show", "mian"],
        &["show", "mian@stage1"],
        &["compare", "main", "mian"],
        &["audit", "--branch", "mian"],
        &[
            "fork",
            "--from",
            "mian",
            "--at",
            "stage1",
            "--engineer",
            "fixed",
        ],
    ] {
        let o = ledger(&d, args);
        fails(&o, 2, "no branch named `mian`; did you mean `main`?");
        // `fork` reaches it through ForkError, whose text is its source's: once.
        common::each_cause_once(&o);
        assert_eq!(common::stderr(&o).matches("no branch named").count(), 1);
    }
    // Nothing close: no suggestion.
    let o = ledger(&d, &["log", "--branch", "zzzzzzzzzz"]);
    fails(&o, 2, "no branch named `zzzzzzzzzz`");
    assert!(!common::stderr(&o).contains("did you mean"));
}

/// (c) `LEDGER=` (set, empty) says so and how to name a ledger.
#[test]
fn an_empty_ledger_variable_says_how_to_name_a_ledger() {
    let o = Command::new(env!("CARGO_BIN_EXE_ledger"))
        .arg("log")
        .env("LEDGER", "")
        .output()
        .unwrap();
    fails(&o, 2, "LEDGER is set but empty");
    fails(&o, 2, "--ledger DIR");
    fails(&o, 2, "LEDGER=DIR");
    fails(&o, 2, "ledgers/default");
}

/// (d) A plan's `lm.init = "hf:DIR"` resolves against the directory `ledger` runs in:
/// `init` from elsewhere is refused naming lm.init, the path and that directory, and a
/// `run` from elsewhere says the same instead of "…/config.json: No such file".
#[test]
fn an_hf_init_that_does_not_resolve_names_lm_init_and_the_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let elsewhere = tmp.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    let here = std::env::current_dir().unwrap();
    let o = ledger_cmd(&tmp.path().join("l"), &["init", "--plan", LM_PLAN])
        .current_dir(&elsewhere)
        .output()
        .unwrap();
    fails(&o, 2, "engineer-rl.toml");
    fails(&o, 2, "lm.init = \"hf:ledgers/models/mapf-base-indep\"");
    fails(&o, 2, "ledgers/models/mapf-base-indep does not exist");
    fails(&o, 2, &format!("resolved against {}", elsewhere.display()));
    assert!(
        !tmp.path().join("l").exists(),
        "a refused init creates nothing"
    );
    let _ = here;

    // From the repository root it resolves; a run from elsewhere names it all.
    let l = tmp.path().join("l");
    ok(&ledger_cmd(&l, &["init", "--plan", LM_PLAN])
        .current_dir(ROOT)
        .output()
        .unwrap());
    let o = ledger_cmd(&l, &["run", "--quiet"])
        .current_dir(&elsewhere)
        .output()
        .unwrap();
    fails(&o, 2, "lm.init = \"hf:ledgers/models/mapf-base-indep\"");
    fails(&o, 2, &format!("resolved against {}", elsewhere.display()));
}

/// (e) A fork past the plan's last stage is refused with the plan's stage count and the
/// valid choices; `run` on a finished branch says so in words.
#[test]
fn a_fork_past_the_plan_is_refused_and_a_finished_run_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tiny_ledger(tmp.path());
    let o = ledger(&d, &["fork", "--at", "stage3", "--engineer", "fixed"]);
    fails(&o, 2, "--at stage3: past the plan's end");
    fails(&o, 2, "it has 2 engineered stages");
    fails(&o, 2, "stages that can be forked: stage1, stage2");
    let out = ok(&ledger(&d, &["run", "--quiet"]));
    assert!(
        out.contains("nothing to run, it has run every stage of its plan (stage 0 to stage2"),
        "{out}"
    );
    assert!(!out.contains("stages run: []"), "{out}");
}

/// Stages, engineer lists and ranged numbers are parsed by the command line (clap) into their types: a
/// bad one is refused naming the option and the value, before any ledger is opened (the
/// ledger named here does not exist, so an error about it would mean the parse came late).
#[test]
fn stages_and_engineer_lists_are_refused_at_the_command_line() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("no-ledger");
    for (args, needle) in [
        (
            &["fork", "--at", "stage0", "--engineer", "fixed"][..],
            "invalid value 'stage0' for '--at <AT>': `stage0`: expected stageN with N >= 1",
        ),
        (
            &[
                "study",
                "--at",
                "1",
                "--engineers",
                "fixed, heuristic,fixed",
            ][..],
            "for '--engineers <ENGINEERS>': fixed is listed twice",
        ),
        (
            &["study", "--at", "1", "--engineers", " , "][..],
            "for '--engineers <ENGINEERS>': name at least one engineer",
        ),
        (
            &["study", "--at", "1", "--engineers", "fixed", "--seeds", "0"][..],
            "invalid value '0' for '--seeds <SEEDS>'",
        ),
        (
            &["audit", "--stage", "two"][..],
            "invalid value 'two' for '--stage <STAGE>': `two`: expected stageN or N",
        ),
        (
            &["replay", "--stage", "stage-1"][..],
            "invalid value 'stage-1' for '--stage <STAGE>'",
        ),
        (
            &["serve", "--bind", "localhost"][..],
            "invalid value 'localhost' for '--bind <ADDR:PORT>'",
        ),
        // Numbers with a fixed range (src/cli/values.rs).
        (
            &["lm", "generate", "--temperature=-1"][..],
            "invalid value '-1' for '--temperature <TEMPERATURE>': expected a finite number of 0 or more",
        ),
        (
            &["lm", "generate", "--top-p", "0"][..],
            "invalid value '0' for '--top-p <TOP_P>': expected a number in (0, 1]",
        ),
        (
            &["study", "--power-effect", "0"][..],
            "invalid value '0' for '--power-effect <POINTS>': expected a finite number above 0",
        ),
        (
            &["lm", "bench", "--peak-flops", "fast"][..],
            "invalid value 'fast' for '--peak-flops <PEAK_FLOPS>': not a number",
        ),
        (
            &["env", "generate", "--count", "0"][..],
            "invalid value '0' for '--count <COUNT>'",
        ),
    ] {
        let o = ledger(&d, args);
        fails(&o, 2, needle);
        assert!(!d.exists(), "{args:?} touched the ledger directory");
    }
}

/// (f) A size past 64 bits is refused naming the value, not capped into "fits".
#[test]
fn an_out_of_range_gpu_memory_is_refused() {
    let plan = format!("{ROOT}/tests/plans/tiny.toml");
    let o = cli(&[
        "plan",
        "check",
        &plan,
        "--device",
        "cuda",
        "--gpu-memory",
        "99999999999999999999GiB",
    ]);
    fails(
        &o,
        2,
        "--gpu-memory \"99999999999999999999GiB\": out of range",
    );
}

/// (g) A reader that leaves early (`ledger cat BLOB | head -c 10`) ends the command
/// quietly with status 0, for every command that streams to standard output. Each
/// command writes into a pipe whose reading end is already closed, so its first write
/// meets the closed pipe whatever its output's size; `cat` of a checkpoint larger than
/// any pipe's buffer also meets it mid-stream, after a reader took 10 bytes and left.
#[test]
fn a_closed_pipe_ends_quietly_with_status_0() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tiny_ledger(tmp.path());
    let mut l = mapf_ledger::ledger::Ledger::open_read_only(&d).unwrap();
    let blob = l.checkpoint_of("main").unwrap();
    let size = l.blob(&blob).unwrap().len();
    drop(l);
    // Past any pipe's buffer, so the write meets the closed pipe.
    assert!(
        size > 1 << 18,
        "checkpoint of {size} bytes: too small for this test"
    );
    let hex = blob.to_hex();
    let commands = [
        &["cat", hex.as_str()][..],
        &["export", "--what", "events"],
        &["log"],
        &["show", "main", "--json"],
    ];
    for args in commands {
        // Closed before the command starts: its first write fails with EPIPE.
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let o = ledger_cmd(&d, args)
            .stdout(writer)
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{args:?} into a closed pipe: {err}"
        );
        assert!(err.is_empty(), "{args:?} into a closed pipe: {err}");
        // The same command into a terminal-less pipe that is read to the end writes
        // something, so the closed pipe above was met by a real write.
        let full = ledger_cmd(&d, args).output().unwrap();
        assert!(
            full.status.success() && !full.stdout.is_empty(),
            "{args:?} writes nothing: the closed pipe was never met"
        );
    }
    // A reader that takes 10 bytes of a checkpoint and leaves, mid-stream.
    let mut child = ledger_cmd(&d, commands[0])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut first = [0u8; 10];
    out.read_exact(&mut first).unwrap();
    drop(out);
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "cat, reader gone: {err}");
    assert!(err.is_empty(), "cat, reader gone: {err}");
}

/// A library error inside another (a fork's ledger error, the store's error inside the
/// ledger's) is written once, with its repair hint once: the CLI walks the `source()`
/// chain and prints each cause once.
#[test]
fn a_wrapped_error_is_written_once() {
    let tmp = tempfile::tempdir().unwrap();
    let not_a_ledger = tmp.path().join("empty");
    std::fs::create_dir_all(&not_a_ledger).unwrap();
    for args in [
        &["log"][..],
        &["verify"],
        &["fork", "--at", "stage1", "--engineer", "fixed"],
    ] {
        let o = ledger(&not_a_ledger, args);
        fails(
            &o,
            2,
            "is not a ledger (create one with `ledger init --plan FILE`)",
        );
        common::each_cause_once(&o);
        let err = common::stderr(&o);
        assert_eq!(err.matches("is not a ledger").count(), 1, "{err}");
        assert_eq!(err.matches("ledger init").count(), 1, "{err}");
    }
}

/// The small things a new user met (issue 76 item 7): each message names the input.
#[test]
fn small_inputs_get_messages_that_name_them() {
    // A board too small for its agents says so, not a hole-ratio range of [0, 0].
    let o = cli(&["env", "generate", "--size", "3", "--agents", "8"]);
    fails(&o, 2, "too many agents for a 3x3 board: 8 agents need 16 distinct start and goal cells, and it has 9");

    let tmp = tempfile::tempdir().unwrap();
    let d = tiny_ledger(tmp.path());
    // `main` cannot be deleted, and the message says why.
    let o = ledger(&d, &["branch", "delete", "main"]);
    fails(
        &o,
        2,
        "branch `main` cannot be deleted: every branch descends from its genesis",
    );
    assert!(!String::from_utf8_lossy(&o.stderr).contains("invalid event"));
    // A misspelled engineer gets the nearest name.
    let o = ledger(
        &d,
        &[
            "fork",
            "--at",
            "stage1",
            "--engineer",
            "heuristc",
            "--name",
            "h",
        ],
    );
    fails(&o, 2, "did you mean `heuristic`?");
    // One of a thing is not "1 things"; losses read as numbers, not 17 digits.
    let v = ok(&ledger(&d, &["verify"]));
    assert!(v.contains(" 1 branch in "), "{v}");
    let log = ok(&ledger(&d, &["log"]));
    let losses: Vec<&str> = log
        .split_whitespace()
        .skip_while(|w| *w != "loss")
        .collect::<Vec<_>>()
        .windows(2)
        .filter(|w| w[0] == "loss")
        .map(|w| w[1])
        .collect();
    assert!(!losses.is_empty(), "{log}");
    for l in losses {
        let digits = l.split(['.', 'e']).nth(1).map_or(0, str::len);
        assert!(digits <= 4, "loss {l} in: {log}");
    }
    // `run` names the branches it runs: main or a fork, never "created if new".
    let help = ok(&ledger(&d, &["run", "--help"]));
    assert!(!help.contains("created at the genesis"), "{help}");
    let o = ledger(&d, &["run", "--branch", "nobody"]);
    fails(&o, 2, "nobody");

    // `serve --bind` takes a host name; a value without a port is named.
    let o = ledger(&d, &["serve", "--bind", "localhost"]);
    fails(&o, 2, "expected HOST:PORT or ADDR:PORT");
    let mut serve = ledger_cmd(&d, &["serve", "--bind", "localhost:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    {
        use std::io::BufRead;
        let mut r = std::io::BufReader::new(serve.stdout.take().unwrap());
        r.read_line(&mut first).unwrap();
    }
    serve.kill().unwrap();
    serve.wait().unwrap();
    assert!(
        first.starts_with("serving ") && first.contains("at http://127.0.0.1:"),
        "{first}"
    );
}
