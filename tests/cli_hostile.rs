//! No panic on any user input: every subcommand driven with hostile arguments (huge,
//! zero, negative, not-a-number, non-UTF-8 and missing paths, directories where files go)
//! exits 2 with a message, never 101 (a Rust panic) or a signal (an abort in libtorch).
//! Each case is one the tool must refuse before doing any work: none runs long.
use crate::common;

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::Path;
use std::process::Command;

const HUGE: &str = "100000000000000000000"; // past u64
const BIG: &str = "1000000000000"; // fits, but no machine does it

/// Run the binary with `args` (the first `--ledger DIR` included by the caller) and
/// return (exit code, stderr).
fn run(args: &[OsString]) -> (Option<i32>, String) {
    let o = Command::new(common::bin(args))
        .args(args)
        .env_remove("LEDGER")
        .output()
        .expect("run ledger");
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn os(args: &[&str]) -> Vec<OsString> {
    args.iter().map(OsString::from).collect()
}

#[test]
fn hostile_arguments_exit_2_with_a_message_never_a_panic() {
    let tmp = tempfile::tempdir().unwrap();
    let l = common::tiny_ledger(tmp.path());
    let l = l.to_str().unwrap();
    let model = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/ledgers/models/mapf-base-indep"
    );
    let tiny_plan = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/plans/tiny.toml");
    let prompt = tmp.path().join("prompt.txt");
    std::fs::write(&prompt, "Plan the agents' moves.").unwrap();
    let prompt = prompt.to_str().unwrap();
    let missing = tmp.path().join("no/such/dir/file");
    let missing = missing.to_str().unwrap();
    let dir = tmp.path().to_str().unwrap();
    let mut cases: Vec<Vec<OsString>> = Vec::new();
    // Numbers out of any sane range, on every numeric option that sizes work.
    for v in ["0", "-1", HUGE, BIG, "nan", "inf", "", "x"] {
        for (opt, base) in [
            ("--size", &["env", "generate"][..]),
            ("--agents", &["env", "generate"]),
            ("--count", &["env", "generate"]),
            ("--holes", &["env", "generate"]),
            ("--wait", &["env", "generate"]),
            ("--per-cell", &["env", "suite", "--name", "val"]),
            ("--max-size", &["env", "suite", "--name", "val"]),
            ("--max-nodes", &["env", "solve", missing]),
            ("--per-cell", &["eval", "--model", model]),
            ("--batch", &["eval", "--model", model]),
            ("--max-size", &["eval", "--model", model]),
            (
                "--max-new-tokens",
                &["lm", "generate", "--model", model, "--prompt-file", prompt],
            ),
            (
                "--temperature",
                &["lm", "generate", "--model", model, "--prompt-file", prompt],
            ),
            (
                "--top-p",
                &["lm", "generate", "--model", model, "--prompt-file", prompt],
            ),
            ("--gpu-memory", &["plan", "check", tiny_plan]),
            ("--limit", &["--ledger", l, "log", "--branch", "nope"]),
            (
                "--seeds",
                &[
                    "--ledger",
                    l,
                    "study",
                    "--at",
                    "stage1",
                    "--engineers",
                    "fixed",
                ],
            ),
            ("--at", &["--ledger", l, "fork", "--engineer", "fixed"]),
            ("--stage", &["--ledger", l, "audit"]),
            ("--stage", &["--ledger", l, "replay", "--engineer", "fixed"]),
            (
                "--max-context",
                &[
                    "--ledger",
                    l,
                    "engineer",
                    "add",
                    "e",
                    "--url",
                    "http://127.0.0.1:9/v1",
                    "--model",
                    "m",
                ],
            ),
        ] {
            // Values valid for an option are skipped: what is left must be refused.
            let valid = matches!(
                (opt, v),
                ("--holes" | "--wait" | "--temperature", "0")
                    | ("--limit", "0" | BIG)
                    // Any finite temperature samples (a huge one uniformly).
                    | ("--temperature", BIG | HUGE)
            );
            if !valid {
                let mut a = os(base);
                a.push(opt.into());
                a.push(v.into());
                cases.push(a);
            }
        }
        if v != "0" {
            cases.push(os(&["--ledger", l, "show", &format!("main@stage{v}")]));
            cases.push(os(&["--ledger", l, "compare", &format!("main@stage{v}")]));
        }
    }
    // Paths: missing, a directory, not UTF-8, /dev/null.
    // A directory with a name that is not UTF-8, which does not exist.
    let mut not_utf8 = tmp.path().as_os_str().to_owned().into_vec();
    not_utf8.extend_from_slice(b"/\xff\xfe/x");
    let not_utf8 = OsString::from_vec(not_utf8);
    for p in [
        OsString::from(missing),
        OsString::from(dir),
        not_utf8,
        OsString::from("/dev/null"),
    ] {
        let with = |pre: &[&str], post: &[&str]| {
            let mut a = os(pre);
            a.push(p.clone());
            a.extend(os(post));
            a
        };
        cases.push(with(&["env", "solve"], &[]));
        cases.push(with(&["env", "prompt"], &[]));
        cases.push(with(&["env", "check"], &[tiny_plan]));
        cases.push(with(&["plan", "check"], &[]));
        cases.push(with(&["eval", "--model"], &[]));
        cases.push(with(
            &["lm", "generate", "--prompt-file", prompt, "--model"],
            &[],
        ));
        cases.push(with(&["--ledger", l, "fetch"], &[]));
        cases.push(with(&["--ledger", l, "init", "--plan"], &[]));
        // Outputs (writing to /dev/null is a user's right).
        if p != "/dev/null" {
            cases.push(with(
                &["--ledger", l, "bundle", "--branch", "main", "--out"],
                &[],
            ));
            cases.push(with(&["--ledger", l, "export", "--out"], &[]));
            cases.push(with(
                &["--ledger", l, "export-checkpoint", "main", "--out"],
                &[],
            ));
            cases.push(with(
                &["env", "suite", "--name", "val", "--per-cell", "1", "--out"],
                &[],
            ));
        }
        cases.push(with(&["--ledger"], &["verify"]));
        cases.push(with(&["--ledger"], &["log"]));
        cases.push(with(&["--ledger"], &["recover"]));
        cases.push(with(&["--ledger"], &["gc"]));
        cases.push(with(&["--ledger"], &["report", "--out", dir]));
    }
    // A special file as an output (a named pipe here; `/dev/null` as root) is refused,
    // never replaced by the renamed output file.
    let fifo = tmp.path().join("fifo.svg");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let fifo_s = fifo.to_str().unwrap();
    cases.push(os(&[
        "--ledger", l, "bundle", "--branch", "main", "--out", fifo_s,
    ]));
    cases.push(os(&["--ledger", l, "export", "--out", fifo_s]));
    cases.push(os(&["--ledger", l, "compare", "main", "--plot", fifo_s]));
    cases.push(os(&[
        "env",
        "suite",
        "--name",
        "val",
        "--per-cell",
        "1",
        "--out",
        fifo_s,
    ]));
    // A plot into a missing directory is refused before any table is printed.
    cases.push(os(&[
        "--ledger",
        l,
        "compare",
        "main",
        "--plot",
        &format!("{missing}.svg"),
    ]));
    cases.push(os(&["--ledger", l, "compare", "main", "--plot", dir]));
    assert!(cases.len() > 150, "{} cases", cases.len());
    // Three at a time (each is a process; most load libtorch, some a model).
    let failures: Vec<String> = std::thread::scope(|s| {
        let chunks: Vec<_> = cases
            .chunks(cases.len().div_ceil(3))
            .map(|chunk| {
                s.spawn(move || {
                    chunk
                        .iter()
                        .filter_map(|a| {
                            let (code, err) = run(a);
                            let said = err.trim();
                            (code != Some(2) || said.is_empty())
                                .then(|| format!("{a:?}: exit {code:?}: {said}"))
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        chunks.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    assert!(
        failures.is_empty(),
        "{} of {} hostile invocations did not exit 2 with a message:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
    use std::os::unix::fs::FileTypeExt;
    assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo());
    // Nothing was written to the ledger by any of them.
    assert!(!Path::new(missing).exists());
    let v = common::ledger(Path::new(l), &["verify", "--strict"]);
    assert_eq!(v.status.code(), Some(0), "{}", common::text(&v));
}
