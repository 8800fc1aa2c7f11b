//! The ledger while it trains and over its life: readers answer while `run` writes,
//! `log --follow` streams a run, a bit-exact replay stores (almost) nothing, `gc` is
//! crash-safe, a branch keeps the engineer it was given, and replay explains or avoids
//! a kernel-capability difference.
use crate::common;
use common::{fails, fork, fork_and_run, ledger, ledger_cmd, ok, tiny_ledger};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const TINY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/plans/tiny.toml");

/// Bytes of stored objects: packs (events, small blobs) and blob files. (Not the
/// derived projection cache, nor the REFS log, whose ref records are compacted at
/// `refs::COMPACT_BYTES`.)
fn record_bytes(d: &Path) -> u64 {
    fn walk(p: &Path) -> u64 {
        let m = std::fs::metadata(p).unwrap();
        if m.is_dir() {
            std::fs::read_dir(p)
                .unwrap()
                .map(|e| walk(&e.unwrap().path()))
                .sum()
        } else {
            m.len()
        }
    }
    walk(&d.join("packs")) + walk(&d.join("blobs"))
}

/// The head's (kind, stage), from `log --limit 1 --json`.
fn head_kind(d: &Path) -> Option<(String, u64)> {
    let o = ledger(d, &["log", "--limit", "1", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).ok()?;
    let kind = v[0]["body"].as_object()?.keys().next().cloned()?;
    Some((kind, v[0]["stage"].as_u64()?))
}

#[test]
fn readers_answer_while_run_is_mid_stage_and_follow_streams_it() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("l");
    // The tiny plan with a long stage 1, so the run is surely mid-stage while we read.
    let plan = tmp.path().join("long.toml");
    let text = std::fs::read_to_string(TINY).unwrap();
    // No checkpoint inside it: what --follow sees of the stage is the steps themselves.
    let text = text
        .replace("[grpo]\nsteps = 10", "[grpo]\nsteps = 100000")
        .replace("checkpoint_every = 4", "checkpoint_every = 100000");
    assert!(text.contains("steps = 100000") && text.contains("checkpoint_every = 100000"));
    std::fs::write(&plan, text).unwrap();
    ok(&ledger(&d, &["init", "--plan", plan.to_str().unwrap()]));
    let mut run = ledger_cmd(&d, &["run", "--quiet"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t = Instant::now();
    loop {
        if let Some((kind, 1)) = head_kind(&d) {
            if kind != "stage_completed" {
                break;
            }
        }
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "run never reached stage 1"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut follow = ledger_cmd(&d, &["log", "--follow", "--json"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Steps are durable as they train: --follow prints stage 1's gradient steps while
    // the stage runs (100,000 steps: it is nowhere near its end).
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let stdout = follow.stdout.take().unwrap();
    let lines = std::thread::spawn(move || {
        use std::io::BufRead;
        let mut all = Vec::new();
        for line in std::io::BufReader::new(stdout).lines() {
            let line = line.unwrap();
            let _ = tx.send(line.clone());
            all.push(line);
        }
        all
    });
    let t = Instant::now();
    loop {
        let line = rx
            .recv_timeout(Duration::from_secs(120) - t.elapsed().min(Duration::from_secs(119)))
            .expect("log --follow printed no gradient step of stage 1 while it trained");
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        if v["stage"] == 1 && v["body"].get("gradient_step").is_some() {
            break;
        }
    }
    assert!(
        run.try_wait().unwrap().is_none(),
        "a gradient step was followed while its stage trained"
    );
    // Readers, concurrently with each other and with the writer.
    let reads: Vec<_> = [
        &["audit", "--json"][..],
        &["log", "--limit", "5"],
        &["branches", "--json"],
        &["compare", "main", "--json"],
        &["verify"],
    ]
    .into_iter()
    .map(|args| {
        let d = d.clone();
        std::thread::spawn(move || (args, ledger(&d, args)))
    })
    .collect();
    for r in reads {
        let (args, o) = r.join().unwrap();
        ok(&o);
        let _ = args;
    }
    assert!(
        run.try_wait().unwrap().is_none(),
        "the run was still writing while every reader answered"
    );
    assert_eq!(head_kind(&d).unwrap().1, 1, "still in stage 1");
    // Ctrl-C: the run stops at the end of the step under way.
    // SAFETY: sending a signal to our own child process.
    unsafe { libc::kill(run.id() as i32, libc::SIGINT) };
    let st = run.wait_with_output().unwrap();
    assert_eq!(
        st.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    // --follow ends once the writer is gone, having printed every event in order.
    assert!(follow.wait().unwrap().success());
    let followed: Vec<String> = lines
        .join()
        .unwrap()
        .iter()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["hash"].as_str().unwrap().to_string()
        })
        .collect();
    let log: serde_json::Value =
        serde_json::from_str(&ok(&ledger(&d, &["log", "--json"]))).unwrap();
    let mut all: Vec<String> = log
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["hash"].as_str().unwrap().to_string())
        .collect();
    all.reverse();
    assert_eq!(
        followed, all,
        "follow printed the whole history, oldest first"
    );
}

#[test]
fn a_bit_exact_replay_adds_nothing_and_recorded_under_one_kilobyte() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tiny_ledger(tmp.path());
    let before = record_bytes(&d);
    let events = ok(&ledger(&d, &["log"])).lines().count();
    // A plain replay writes no object (every recomputed event is already stored) and
    // adds nothing to the history.
    ok(&ledger(&d, &["replay", "--stage", "1", "--verify"]));
    assert_eq!(record_bytes(&d), before, "a plain replay wrote objects");
    assert_eq!(ok(&ledger(&d, &["log"])).lines().count(), events);
    ok(&ledger(
        &d,
        &["replay", "--stage", "1", "--verify", "--record"],
    ));
    let added = record_bytes(&d) - before;
    assert!(added < 1024, "replay added {added} bytes");
    eprintln!("replay of stage 1 added {added} bytes of objects");
    assert_eq!(
        ok(&ledger(&d, &["log"])).lines().count(),
        events + 1,
        "only the ReplayVerified event is new"
    );
    ok(&ledger(&d, &["verify"]));
}

/// The branch listing and every export row of every branch (what `branches --json` and
/// `export --branch B` print), read in-process: a comparison per crash point must not
/// pay a process start (libtorch's initialisation) per branch.
fn everything(d: &Path) -> String {
    let mut l = mapf_ledger::ledger::Ledger::open_read_only(d).unwrap();
    let listing = mapf_ledger::views::branches::branches(&mut l).unwrap();
    let mut out = serde_json::to_vec(&listing).unwrap();
    for (b, _) in l.branches().unwrap() {
        mapf_ledger::views::export::export(
            &l,
            Some(&b),
            mapf_ledger::views::export::Format::Jsonl,
            &mut out,
        )
        .unwrap();
    }
    String::from_utf8(out).unwrap()
}

/// `ledger verify` in-process (the CLI's exit codes are tested elsewhere).
fn verifies(d: &Path) {
    let l = mapf_ledger::ledger::Ledger::open_read_only(d).unwrap();
    let r = l.verify(&mapf_ledger::train::TrainState::referenced_blobs);
    assert!(r.ok(), "{}: {:?}", d.display(), r.problems);
}

#[test]
fn gc_removes_what_no_branch_reaches_and_a_crash_anywhere_loses_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tiny_ledger(tmp.path());
    // A fork that is run and then deleted: its stage-2 events and blobs are garbage.
    fork_and_run(&d, "stage2", "random", "scratch");
    fork(&d, "stage2", "heuristic", "kept");
    fails(
        &ledger(&d, &["branch", "delete", "main2"]),
        2,
        "no branch named `main2`",
    );
    fails(
        &ledger(&d, &["branch", "delete", "main"]),
        2,
        "cannot be deleted",
    );
    ok(&ledger(&d, &["branch", "delete", "scratch"]));
    let want = everything(&d);
    let size = record_bytes(&d);
    for point in [
        "gc:packs-written",
        "gc:refs-written",
        "gc:first-old-pack-removed",
        "gc:first-blob-removed",
    ] {
        let c = tmp.path().join(point.replace(':', "-"));
        let st = Command::new("cp")
            .arg("-r")
            .arg(&d)
            .arg(&c)
            .status()
            .unwrap();
        assert!(st.success());
        let o = ledger_cmd(&c, &["gc"])
            .env("MAPF_LEDGER_CRASH_AT", point)
            .output()
            .unwrap();
        assert!(!o.status.success(), "{point}: gc was to be killed there");
        verifies(&c);
        assert_eq!(
            everything(&c),
            want,
            "{point}: what branches reach is unchanged"
        );
        // The next gc (after a writer cleaned up) finishes the job.
        ok(&ledger(&c, &["gc"]));
        ok(&ledger(&c, &["verify"]));
        assert_eq!(everything(&c), want, "{point}: after the second gc");
        assert!(record_bytes(&c) < size, "{point}: gc freed space");
    }
    let r: serde_json::Value = serde_json::from_str(&ok(&ledger(&d, &["gc", "--json"]))).unwrap();
    assert!(r["events_removed"].as_u64().unwrap() > 0, "{r}");
    assert!(r["blobs_removed"].as_u64().unwrap() > 0, "{r}");
    ok(&ledger(&d, &["verify"]));
    assert_eq!(everything(&d), want);
    let again: serde_json::Value =
        serde_json::from_str(&ok(&ledger(&d, &["gc", "--json"]))).unwrap();
    assert_eq!(again["events_removed"], 0);
    assert_eq!(again["blobs_removed"], 0);
    // The surviving fork still runs on what gc kept.
    ok(&ledger(&d, &["run", "--branch", "kept", "--quiet"]));
    ok(&ledger(&d, &["verify"]));
}

fn stage_engineer(d: &Path, stage: u32) -> String {
    let v: serde_json::Value = serde_json::from_str(&ok(&ledger(
        d,
        &["show", &format!("main@stage{stage}"), "--json"],
    )))
    .unwrap();
    v["stage"]["engineer"].as_str().unwrap().to_string()
}

#[test]
fn a_branch_keeps_the_engineer_run_gave_it() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("l");
    ok(&ledger(&d, &["init", "--plan", TINY]));
    // The warm-up only: the choice is recorded before any stage uses it.
    ok(&ledger(
        &d,
        &["run", "--engineer", "random", "--stages", "1", "--quiet"],
    ));
    ok(&ledger(&d, &["run", "--stages", "1", "--quiet"]));
    assert_eq!(stage_engineer(&d, 1), "random");
    ok(&ledger(&d, &["resume", "--quiet"]));
    assert_eq!(stage_engineer(&d, 2), "random");
    let log = ok(&ledger(&d, &["log"]));
    assert_eq!(
        log.matches("engineer_chosen").count(),
        1,
        "the choice is recorded once: {log}"
    );
    assert!(log.contains("engineer random (was fixed)"), "{log}");
}

/// A kernel variable the run was made under (here one that picks cuDNN's attention
/// order, so that it changes nothing on a CPU) is recorded with the stage; a replay that
/// leaves it unset runs under the recorded value and says nothing, and one that sets
/// another value names both before comparing.
#[test]
fn replay_sets_the_recorded_kernel_variables_and_names_a_difference() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("l");
    ok(&ledger(&d, &["init", "--plan", TINY]));
    let o = ledger_cmd(&d, &["run", "--stages", "2", "--quiet"])
        .env("TORCH_CUDNN_SDPA_DEPRIORITIZED", "1")
        .output()
        .unwrap();
    ok(&o);
    let log: serde_json::Value =
        serde_json::from_str(&ok(&ledger(&d, &["log", "--json"]))).unwrap();
    let started = log
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["body"].get("stage_started").is_some() && e["stage"] == 1)
        .expect("stage 1 started");
    assert_eq!(
        started["meta"]["versions"]["env:TORCH_CUDNN_SDPA_DEPRIORITIZED"],
        "1"
    );
    let o = ledger(&d, &["replay", "--stage", "1", "--verify"]);
    ok(&o);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("TORCH_CUDNN_SDPA_DEPRIORITIZED"), "{err}");
    let o = ledger_cmd(&d, &["replay", "--stage", "1", "--verify"])
        .env("TORCH_CUDNN_SDPA_DEPRIORITIZED", "0")
        .output()
        .unwrap();
    ok(&o);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("stage 1 was recorded with TORCH_CUDNN_SDPA_DEPRIORITIZED=1 and this process runs with TORCH_CUDNN_SDPA_DEPRIORITIZED=0"),
        "{err}"
    );
}

#[test]
fn replay_pins_the_recorded_cpu_capability_and_explains_a_difference() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("l");
    ok(&ledger(&d, &["init", "--plan", TINY]));
    let o = ledger_cmd(&d, &["run", "--stages", "2", "--quiet"])
        .env("ATEN_CPU_CAPABILITY", "default")
        .output()
        .unwrap();
    ok(&o);
    let log: serde_json::Value =
        serde_json::from_str(&ok(&ledger(&d, &["log", "--json"]))).unwrap();
    let started = log
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["body"].get("stage_started").is_some() && e["stage"] == 1)
        .expect("stage 1 started");
    assert_eq!(
        started["meta"]["versions"]["aten_cpu_capability"],
        "DEFAULT"
    );
    assert_eq!(started["meta"]["versions"]["libtorch"], "2.11.0");
    // Without the variable, replay pins the recorded capability itself: it matches and
    // says nothing about kernels.
    let o = ledger(&d, &["replay", "--stage", "1", "--verify"]);
    ok(&o);
    assert!(!String::from_utf8_lossy(&o.stderr).contains("capability"));
    // Told to use this CPU's own kernels, it says so before comparing anything; the
    // outcome (match or mismatch) is then explained, never silent.
    let native = mapf_ledger::train::kernels::cpu_capability();
    let o = ledger_cmd(&d, &["replay", "--stage", "1", "--verify"])
        .env("ATEN_CPU_CAPABILITY", native.to_ascii_lowercase())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    if native != "DEFAULT" {
        assert!(
            err.contains(&format!(
                "recorded with ATen CPU capability DEFAULT, this process runs {native}"
            )),
            "{err}"
        );
    }
    match o.status.code() {
        Some(0) => {}
        Some(1) => assert!(
            err.contains("replay mismatch") && err.contains("capability"),
            "{err}"
        ),
        c => panic!("exit {c:?}: {err}"),
    }
    eprintln!(
        "capability replay: recorded DEFAULT, replayed {native}: exit {:?}",
        o.status.code()
    );
}
