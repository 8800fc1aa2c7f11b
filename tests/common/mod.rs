//! The one home of helpers shared by integration tests (a test file adds `use crate::common;`):
//! the `ledger` binary and its outputs, the tiny ledger, a real headless Chromium
//! ([`browser`]), validation of outputs against the checked-in schemas ([`schema`]), and
//! the crash tests' writer process ([`append_loop`]).
#![allow(dead_code)]
pub mod append_loop;
pub mod browser;
pub mod schema;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Commands of the `ledger` built without the trainer that the tests may run on it: the
/// `train` feature adds the training commands and changes none of these (`src/cli/mod.rs`
/// is the one place the CLI asks which build it is). `init` stays on the full build.
/// `core_binary::` checks the list against both builds' `-h`.
pub const CORE_COMMANDS: &[&str] = &[
    "env", "compare", "audit", "report", "serve", "bundle", "fetch", "log", "cat", "show",
    "branches", "verify", "recover", "export", "gc", "branch", "rebuild",
];

/// The binary to run `args` with. Where `make test` names the build without the
/// trainer (`LEDGER_CORE_BIN`), a command of [`CORE_COMMANDS`] runs on it: it starts in
/// about 5 ms, the full build in 0.3-0.5 s (libtorch registering its operators), and
/// the tests start `ledger` hundreds of times. Anything else (a training command,
/// the top-level `-h`, `--version`) runs on the full build, as does every command under
/// a plain `cargo test`.
pub fn bin(args: &[impl AsRef<OsStr>]) -> PathBuf {
    let full = PathBuf::from(env!("CARGO_BIN_EXE_ledger"));
    let Some(core) = std::env::var_os("LEDGER_CORE_BIN") else {
        return full;
    };
    let mut words = args.iter().map(|a| a.as_ref());
    let command = loop {
        match words.next() {
            Some(w) if w == "--ledger" => {
                words.next();
            }
            Some(w) if w.to_str().is_some_and(|w| w.starts_with("--ledger=")) => {}
            other => break other,
        }
    };
    match command.and_then(OsStr::to_str) {
        Some(c) if CORE_COMMANDS.contains(&c) => PathBuf::from(core),
        _ => full,
    }
}

/// The `ledger` command on the ledger `dir` (never the caller's `$LEDGER`), to add
/// environment or stdio to before running it.
pub fn ledger_cmd(dir: &Path, args: &[&str]) -> Command {
    ledger_cmd_on(&bin(args), dir, args)
}

/// [`ledger_cmd`] on a given build of `ledger` (`core_binary::` compares the two).
pub fn ledger_cmd_on(bin: &Path, dir: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(bin);
    c.arg("--ledger").arg(dir).args(args).env_remove("LEDGER");
    c
}

/// `bin`'s `-h` for the subcommand `path` (the top level when empty); it must succeed.
pub fn help(bin: &Path, path: &[impl AsRef<OsStr> + std::fmt::Debug]) -> String {
    let o = Command::new(bin)
        .args(path)
        .arg("-h")
        .env_remove("LEDGER")
        .output()
        .expect("run ledger");
    assert!(o.status.success(), "{} {path:?} -h: {o:?}", bin.display());
    String::from_utf8(o.stdout).unwrap()
}

/// The entries of a `-h` section (`Commands:`, `Options:`, `Arguments:`): (name, help).
pub fn help_section(text: &str, title: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut inside = false;
    for line in text.lines() {
        let line = line.trim_end();
        if line.ends_with(':') && !line.starts_with(' ') {
            inside = line == title;
            continue;
        }
        if !inside || line.trim().is_empty() {
            continue;
        }
        // An entry starts at indent 2 (or 6: long options without a short one):
        // "  NAME  help", the name (single spaces inside, as in `-h, --help` or
        // `--out <DIR>`), then two or more spaces, then the help; no help, no gap.
        // Where help is long clap puts it on the following lines, indented further.
        let indent = line.len() - line.trim_start().len();
        let rest = line.trim();
        if indent > 6 {
            if let Some((_, h)) = out.last_mut() {
                h.push(' ');
                h.push_str(rest);
            }
            continue;
        }
        let (name, help) = match rest.find("  ") {
            Some(i) => (rest[..i].trim(), rest[i..].trim()),
            None => (rest.trim(), ""),
        };
        out.push((name.to_string(), help.to_string()));
    }
    out
}

/// Run the `ledger` binary on the ledger `dir` (never the caller's `$LEDGER`).
pub fn ledger(dir: &Path, args: &[&str]) -> Output {
    ledger_cmd(dir, args).output().expect("run ledger")
}

/// Run the `ledger` binary with no ledger (`env ...`, `eval`, `plan check`, ...).
pub fn cli(args: &[&str]) -> Output {
    Command::new(bin(args))
        .args(args)
        .env_remove("LEDGER")
        .output()
        .expect("run ledger")
}

/// A command's stdout, lossily decoded.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A command's stderr, lossily decoded.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Everything a command printed: stdout, then stderr.
pub fn text(o: &Output) -> String {
    format!("{}{}", stdout(o), stderr(o))
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

/// The JSON a command that must succeed printed.
pub fn json(o: &Output) -> serde_json::Value {
    let out = ok(o);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
}

/// Every file under `dir`, recursively.
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(files_under(&p));
        } else {
            out.push(p);
        }
    }
    out
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

/// `ledger fork --at AT --engineer ENGINEER --name NAME` on `dir`, which must succeed.
pub fn fork(dir: &Path, at: &str, engineer: &str, name: &str) {
    ok(&ledger(
        dir,
        &["fork", "--at", at, "--engineer", engineer, "--name", name],
    ));
}

/// [`fork`], then run the new branch to the plan's end.
pub fn fork_and_run(dir: &Path, at: &str, engineer: &str, name: &str) {
    fork(dir, at, engineer, name);
    ok(&ledger(dir, &["run", "--branch", name, "--quiet"]));
}

/// The parameter hash after every gradient step on `main`, oldest first.
pub fn param_hashes(dir: &Path) -> Vec<mapf_ledger::ledger::Hash> {
    use mapf_ledger::ledger::{EventBody, Ledger};
    Ledger::open_read_only(dir)
        .unwrap()
        .history("main")
        .unwrap()
        .into_iter()
        .filter_map(|(_, e)| match e.body {
            EventBody::GradientStep(g) => Some(g.params),
            _ => None,
        })
        .collect()
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

/// A gradient-step event for store tests (what the fields hold does not matter there;
/// `params` names a blob when the test wants one referenced).
pub fn gradient_step(
    step: u64,
    params: mapf_ledger::ledger::Hash,
    loss: u64,
) -> mapf_ledger::ledger::EventBody {
    use mapf_ledger::ledger::event::{EventBody, GradientStep};
    EventBody::GradientStep(GradientStep {
        step,
        params,
        loss,
        policy_loss: 0,
        kl: 0,
        entropy: 0,
        grad_norm: 0,
        reward_mean: 0,
    })
}

/// The tiny language model the LM tests train in seconds (2 layers, hidden 32).
pub fn tiny_lm_spec() -> mapf_ledger::train::lm::LmSpec {
    mapf_ledger::train::lm::LmSpec {
        hidden_size: 32,
        intermediate_size: 64,
        layers: 2,
        heads: 4,
        kv_heads: 2,
        head_dim: 8,
        vocab_size: 320,
        max_new_tokens: 40,
        ..mapf_ledger::train::lm::LmSpec::default()
    }
}

/// Every event kind, in encoding order (the variant tag), as the JSON schema generated
/// from `EventBody` lists them: a new kind appears here without editing any test, so
/// tests that must cover every kind fail until they do.
pub fn event_kinds() -> Vec<String> {
    let (_, text) = mapf_ledger::schemas::all()
        .into_iter()
        .find(|(n, _)| *n == "ledger-event")
        .expect("the ledger-event schema");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["$defs"]["EventBody"]["oneOf"]
        .as_array()
        .expect("EventBody is a oneOf")
        .iter()
        .map(|k| k["required"][0].as_str().unwrap().to_string())
        .collect()
}

/// The error line of a failed command writes each cause once (issue 52, item 3): split
/// at ": ", no part of it comes twice (a wrapper whose text is its source's, or a
/// message that embeds its source, would otherwise print that text again).
pub fn each_cause_once(o: &Output) {
    let err = String::from_utf8_lossy(&o.stderr);
    for line in err.lines().filter(|l| l.starts_with("ledger: ")) {
        let parts: Vec<&str> = line["ledger: ".len()..].split(": ").collect();
        for (i, p) in parts.iter().enumerate() {
            assert!(
                p.len() < 8 || !parts[i + 1..].contains(p),
                "`{p}` is written twice in: {line}"
            );
        }
    }
}

/// Start `ledger ARGS` on `dir` (stderr is a pipe, so progress comes as plain lines),
/// wait until a progress line starts with `line_start` (e.g. `stage 1: step`: it is
/// computing), then send each of `signals`, 20 ms apart. Returns the exit status, the
/// whole stderr, and the time from the first signal to the exit; None when the command
/// ended before such a line, or printed none within 120 s.
pub fn signalled_at(
    dir: &Path,
    args: &[&str],
    line_start: &str,
    signals: &[i32],
) -> Option<(std::process::ExitStatus, String, std::time::Duration)> {
    use std::io::BufRead;
    use std::time::{Duration, Instant};
    let mut child = ledger_cmd(dir, args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run ledger");
    let err = child.stderr.take().expect("piped");
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut all = String::new();
        for line in std::io::BufReader::new(err).lines() {
            let Ok(line) = line else { break };
            let _ = tx.send(line.clone());
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    let t = Instant::now();
    let found = loop {
        match rx.recv_timeout(Duration::from_millis(50)) {
            Ok(line) if line.starts_with(line_start) => break true,
            Ok(_) => {}
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break false,
            Err(_) if t.elapsed() > Duration::from_secs(120) => break false,
            Err(_) => {}
        }
    };
    if !found {
        child.kill().ok();
        child.wait().ok();
        reader.join().ok();
        return None;
    }
    let signalled = Instant::now();
    for (k, &s) in signals.iter().enumerate() {
        if k > 0 {
            std::thread::sleep(Duration::from_millis(20));
        }
        // SAFETY: sending a signal to our own child process.
        unsafe { libc::kill(child.id() as i32, s) };
    }
    let status = child.wait().expect("wait for ledger");
    let took = signalled.elapsed();
    Some((status, reader.join().expect("stderr reader"), took))
}

/// A copy in `dir` of the tiny Qwen3 fixture (`tests/fixtures/hf/tiny-qwen3`) whose
/// tokenizer_config carries a Qwen3 chat template with the think block, which is what
/// marks a checkpoint as Qwen3's (the fixture's own template is plain ChatML): a model
/// `lm.thinking = true` accepts.
pub fn qwen3_thinking_copy(dir: &Path) -> PathBuf {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf/tiny-qwen3");
    let q3 = dir.join("qwen3");
    std::fs::create_dir(&q3).unwrap();
    for e in std::fs::read_dir(fixture).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), q3.join(e.file_name())).unwrap();
    }
    let cfg_path = q3.join("tokenizer_config.json");
    let mut cfg: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&cfg_path).unwrap()).unwrap();
    cfg["chat_template"] = serde_json::Value::String(
        "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\n\n</think>\n\n' }}{%- endif %}".into(),
    );
    std::fs::write(&cfg_path, cfg.to_string()).unwrap();
    q3
}
