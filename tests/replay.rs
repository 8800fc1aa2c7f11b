//! `ledger replay` and `ledger resume` against the real binary and a real ledger:
//! bit-exact re-verification of every stage under 1 and 2 rayon threads, tampered
//! records and blobs named by `verify` and `replay`, counterfactual replays that leave
//! no branch behind unless kept, and kill -9 at random instants followed by resumes
//! that end on the uninterrupted run's head hash.
use crate::common;

use common::schema::validates;
use common::{ledger, ledger_cmd, ok, text};
use mapf_ledger::ledger::{EventBody, Hash, Ledger};
use rand::{Rng, SeedableRng};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

fn plan(name: &str) -> String {
    format!("{}/tests/plans/{name}.toml", env!("CARGO_MANIFEST_DIR"))
}

/// A ledger of `plan` with every stage run.
fn finished(dir: &Path, plan_name: &str) {
    ok(&ledger(dir, &["init", "--plan", &plan(plan_name)]));
    ok(&ledger(dir, &["run", "--quiet"]));
}

fn head(dir: &Path, branch: &str) -> Hash {
    Ledger::open_read_only(dir).unwrap().head(branch).unwrap()
}

fn branch_names(dir: &Path) -> Vec<String> {
    let l = Ledger::open_read_only(dir).unwrap();
    l.branches().unwrap().into_iter().map(|b| b.0).collect()
}

/// The first recorded event of a kind on `main`.
fn first_of(dir: &Path, pred: impl Fn(&EventBody) -> bool) -> (Hash, EventBody) {
    let l = Ledger::open_read_only(dir).unwrap();
    let h = l.history("main").unwrap();
    let (id, e) = h.into_iter().find(|(_, e)| pred(&e.body)).unwrap();
    (id, e.body)
}

#[test]
fn verify_every_stage_with_one_and_two_threads_appends_replay_verified() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("l");
    finished(&d, "tiny");
    let before = head(&d, "main");
    // A plain verification moves no head.
    let o = ok(&ledger(&d, &["replay", "--verify"]));
    assert!(o.contains("nothing recorded"), "{o}");
    assert_eq!(head(&d, "main"), before);
    for threads in ["1", "2"] {
        let o = ledger_cmd(&d, &["replay", "--verify", "--record"])
            .env("RAYON_NUM_THREADS", threads)
            .output()
            .unwrap();
        let out = ok(&o);
        for n in 0..=2 {
            assert!(
                out.contains(&format!("stage {n}: ")) && out.contains("every hash matches"),
                "{out}"
            );
        }
    }
    // No scratch branch is left; main gained 3 + 3 ReplayVerified events, nothing else.
    assert_eq!(branch_names(&d), vec!["main".to_string()]);
    let l = Ledger::open_read_only(&d).unwrap();
    let h = l.history("main").unwrap();
    let at = h.iter().position(|(id, _)| *id == before).unwrap();
    let added = &h[at + 1..];
    assert_eq!(added.len(), 6);
    let mut threads_seen = Vec::new();
    for (i, (id, e)) in added.iter().enumerate() {
        let EventBody::ReplayVerified(r) = &e.body else {
            panic!("unexpected {}", e.body.kind())
        };
        assert_eq!(r.replayed_stage, (i % 3) as u32);
        assert!(r.mismatch.is_none() && r.events > 0);
        let (_, meta) = l.event_with_meta(id).unwrap();
        threads_seen.push(meta.versions["rayon_threads"].clone());
        assert!(meta.threads.is_some() && meta.host.is_some());
    }
    assert_eq!(threads_seen, ["1", "1", "1", "2", "2", "2"]);
    drop(l);
    // One stage on its own, as `stageN`, with JSON output.
    let out = ok(&ledger(&d, &["replay", "--stage", "stage1", "--json"]));
    let v: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    validates("replay", &v);
    assert_eq!(v["matched"][0]["stage"], 1);
    assert!(v["matched"][0]["mismatch"].is_null());
    ok(&ledger(&d, &["verify"]));
    // A stage that does not exist is an input error naming the stages that do.
    let o = ledger(&d, &["replay", "--stage", "7"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("0, 1, 2"), "{}", text(&o));
}

/// The raw scratch refs in `REFS` (which no listing shows).
fn scratch_refs(dir: &Path) -> Vec<String> {
    mapf_ledger::ledger::refs::Refs::read(dir)
        .unwrap()
        .unwrap()
        .scratch()
        .map(|(n, _)| n.clone())
        .collect()
}

/// Start `replay --verify` of every stage, wait until it is computing stage 1's steps,
/// then send `signals`. Returns the exit status, stderr and the time from the first
/// signal to the exit, or None when the replay ended first.
fn replay_signalled(
    dir: &Path,
    signals: &[i32],
) -> Option<(std::process::ExitStatus, String, Duration)> {
    common::signalled_at(dir, &["replay", "--verify"], "stage 1: step", signals)
}

/// What readers show of a ledger: `branches`, the report's count and `compare`.
fn assert_readers_see_only_main(dir: &Path, out: &Path) {
    let b = ok(&ledger(dir, &["branches"]));
    assert!(!b.contains("_replay"), "{b}");
    assert_eq!(branch_names(dir), vec!["main".to_string()]);
    let r = ok(&ledger(dir, &["report", "--out", out.to_str().unwrap()]));
    assert!(r.contains("(1 branch,"), "{r}");
    assert_eq!(
        mapf_ledger::ledger::Ledger::current_heads(dir)
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn a_replay_stopped_by_sigint_sigterm_or_killed_leaves_nothing_a_reader_sees() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("l");
    finished(&d, "small");
    let before = head(&d, "main");
    let refs_before = std::fs::read(d.join("REFS")).unwrap();
    let visible = |bytes: &[u8]| {
        let r = mapf_ledger::ledger::refs::Refs::parse_log(&d, bytes)
            .unwrap()
            .0;
        r.visible()
            .map(|(n, h)| (n.clone(), *h))
            .collect::<Vec<_>>()
    };

    // Ctrl-C, SIGTERM, two Ctrl-Cs and kill -9, mid-step: a replay's work is scratch,
    // so it ends at once (not at the stage's end, minutes later), exit 130, and its
    // scratch ref never reached REFS: nothing is left that a reader or verify sees.
    let rounds: [(&str, &[i32]); 4] = [
        ("SIGINT", &[libc::SIGINT]),
        ("SIGTERM", &[libc::SIGTERM]),
        ("SIGINT twice", &[libc::SIGINT, libc::SIGINT]),
        ("SIGKILL", &[libc::SIGKILL]),
    ];
    for (name, signals) in rounds {
        let (status, err, took) =
            replay_signalled(&d, signals).expect("the replay was still running");
        if signals[0] == libc::SIGKILL {
            assert_eq!(status.code(), None, "{name}: {err}");
        } else {
            assert_eq!(status.code(), Some(130), "{name}: {err}");
            assert!(err.contains("interrupted"), "{name}: {err}");
            assert!(
                took < Duration::from_secs(30),
                "{name}: the replay took {took:?} to stop"
            );
        }
        assert_eq!(scratch_refs(&d), Vec::<String>::new(), "{name}");
        assert_eq!(head(&d, "main"), before);
        assert_eq!(
            visible(&std::fs::read(d.join("REFS")).unwrap()),
            visible(&refs_before)
        );
        assert_readers_see_only_main(&d, &tmp.path().join(format!("report-{signals:?}")));
        let v = ok(&ledger(&d, &["verify", "--strict"]));
        assert!(!v.contains("scratch"), "{name}: {v}");
    }

    // A scratch ref in REFS (a killed replay of an older version left it): hidden from
    // readers, named by verify, removed by gc.
    let mut refs = mapf_ledger::ledger::refs::Refs::read(&d).unwrap().unwrap();
    let left = format!("_replay-1-{}", before.short());
    refs.branches.insert(left.clone(), before);
    mapf_ledger::ledger::refs::replace(&d, &refs).unwrap();
    assert_eq!(scratch_refs(&d), vec![left.clone()]);
    assert_readers_see_only_main(&d, &tmp.path().join("report-left"));
    // Referring to it is an input error that says what it is.
    let o = ledger(&d, &["compare", "main", &left]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("scratch work"), "{}", text(&o));
    // verify names it and gc; --strict fails on it.
    let v = ok(&ledger(&d, &["verify"]));
    assert!(v.contains(&left) && v.contains("ledger gc"), "{v}");
    assert_eq!(ledger(&d, &["verify", "--strict"]).status.code(), Some(1));
    // gc removes it and what only it reached; verify is then clean.
    let g = ok(&ledger(&d, &["gc"]));
    assert!(g.contains(&left), "{g}");
    assert!(scratch_refs(&d).is_empty());
    let v = ok(&ledger(&d, &["verify", "--strict"]));
    assert!(!v.contains("scratch") && !v.contains("WARN"), "{v}");
    assert_eq!(head(&d, "main"), before);
    // A user cannot name a branch in the scratch namespace.
    let o = ledger(
        &d,
        &[
            "fork",
            "--at",
            "stage2",
            "--engineer",
            "fixed",
            "--name",
            "_mine",
        ],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("reserved"), "{}", text(&o));
}

#[test]
fn tampered_trajectories_and_checkpoint_blob_are_named() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("l");
    finished(&d, "tiny");
    let (traj, _) = first_of(&d, |b| matches!(b, EventBody::Trajectories(_)));
    let loc = Ledger::open_read_only(&d).unwrap().location(&traj).unwrap();
    let pristine = std::fs::read(&loc.pack).unwrap();

    // 1. A flipped bit inside the event bytes (the last trajectory's reward): the
    //    record's checksum no longer matches. verify names the record; replay refuses.
    let mut bytes = pristine.clone();
    let last = (loc.event_offset + loc.event_len as u64 - 1) as usize;
    bytes[last] ^= 1;
    std::fs::write(&loc.pack, &bytes).unwrap();
    let o = ledger(&d, &["verify"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let named =
        |s: &str| s.contains(&traj.short()) || s.contains(&format!("offset {}", loc.offset));
    assert!(
        named(&text(&o)),
        "verify does not name {traj}: {}",
        text(&o)
    );
    let o = ledger(&d, &["replay", "--verify"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        named(&text(&o)),
        "replay does not name {traj}: {}",
        text(&o)
    );

    // 2. The same flip with the checksum recomputed (a deliberate forgery): the ledger
    //    opens, and both verify and replay name the altered event by id.
    let frame_end = {
        let header = 1 + 4 + 4 + 32;
        let off = loc.offset as usize;
        let ev = u32::from_le_bytes(bytes[off + 1..off + 5].try_into().unwrap()) as usize;
        let meta = u32::from_le_bytes(bytes[off + 5..off + 9].try_into().unwrap()) as usize;
        off + header + ev + meta
    };
    let crc = crc32fast::hash(&bytes[loc.offset as usize..frame_end]);
    bytes[frame_end..frame_end + 4].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&loc.pack, &bytes).unwrap();
    let o = ledger(&d, &["verify"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains(&traj.short()), "{}", text(&o));
    let o = ledger(&d, &["replay", "--verify"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains(&traj.to_hex()) && text(&o).contains("trajectories"),
        "{}",
        text(&o)
    );
    assert_eq!(branch_names(&d), vec!["main".to_string()]);

    // Replay failed before recomputing anything: the pack did not grow.
    assert_eq!(
        std::fs::metadata(&loc.pack).unwrap().len(),
        bytes.len() as u64
    );

    // 3. Restore the pack; corrupt a checkpoint blob file instead.
    std::fs::write(&loc.pack, &pristine).unwrap();
    ok(&ledger(&d, &["verify"]));
    let (_, body) = first_of(&d, |b| matches!(b, EventBody::CheckpointSaved(_)));
    let EventBody::CheckpointSaved(c) = body else {
        unreachable!()
    };
    let hex = c.blob.to_hex();
    let path = d.join("blobs").join(&hex[..2]).join(&hex[2..]);
    let mut blob = std::fs::read(&path).unwrap();
    let mid = blob.len() / 2;
    blob[mid] ^= 0x40;
    std::fs::write(&path, &blob).unwrap();
    let o = ledger(&d, &["verify"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains(&c.blob.short()), "{}", text(&o));
}

#[test]
fn counterfactual_leaves_no_branch_unless_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("l");
    finished(&d, "tiny");
    let before = head(&d, "main");
    let out = ok(&ledger(
        &d,
        &["replay", "--stage", "2", "--engineer", "fixed"],
    ));
    assert!(out.contains("replayed with engineer fixed"), "{out}");
    assert_eq!(branch_names(&d), vec!["main".to_string()]);
    assert_eq!(head(&d, "main"), before);

    ok(&ledger(
        &d,
        &[
            "replay",
            "--stage",
            "2",
            "--engineer",
            "fixed",
            "--keep",
            "cf",
        ],
    ));
    assert_eq!(branch_names(&d), vec!["cf".to_string(), "main".to_string()]);
    let mut l = Ledger::open(&d).unwrap();
    let cf = l.projection("cf").unwrap();
    assert!(cf.stage(2).is_some_and(|s| s.completed.is_some()));
    assert_eq!(cf.forked_from.as_ref().unwrap().2, "fixed");
    drop(l);
    // The kept branch is an ordinary branch: it replays and verifies.
    ok(&ledger(&d, &["replay", "--branch", "cf", "--stage", "2"]));
    // Usage errors.
    for args in [
        &["replay", "--engineer", "fixed"][..],
        &["replay", "--stage", "0", "--engineer", "fixed"],
        &["replay", "--stage", "2", "--keep", "x"],
        &["replay", "--stage", "2", "--engineer", "nobody"],
    ] {
        let o = ledger(&d, args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
    }
}

#[test]
fn kill_9_at_random_instants_then_resume_ends_on_the_uninterrupted_head() {
    let tmp = tempfile::tempdir().unwrap();
    let reference = tmp.path().join("reference");
    let t = Instant::now();
    finished(&reference, "small");
    let uninterrupted = t.elapsed();

    let d = tmp.path().join("killed");
    ok(&ledger(&d, &["init", "--plan", &plan("small")]));
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(6);
    let mut killed_running = 0;
    // Kill at random instants until four kills have hit a running writer (or the run
    // finished first: then the kills so far must do). Short delays keep the run from
    // finishing between kills on a fast machine.
    for round in 0..12 {
        let mut child = ledger_cmd(&d, &[if round % 2 == 0 { "run" } else { "resume" }])
            .arg("--quiet")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let ms = rng.random_range(300..1500);
        std::thread::sleep(Duration::from_millis(ms));
        let running = child.try_wait().unwrap().is_none();
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        // Every kill leaves a ledger that verifies.
        ok(&ledger(&d, &["verify"]));
        if !running {
            break;
        }
        killed_running += 1;
        if killed_running == 4 {
            break;
        }
    }
    assert!(
        killed_running >= 2,
        "only {killed_running} kills hit a running process (uninterrupted run: {uninterrupted:?})"
    );
    ok(&ledger(&d, &["resume", "--quiet"]));
    assert_eq!(head(&d, "main"), head(&reference, "main"));
    ok(&ledger(&d, &["verify"]));
}

/// A chat-completions endpoint that answers every request with the current reply and
/// counts the requests.
struct FakeLlm {
    port: u16,
    reply: std::sync::Arc<std::sync::Mutex<String>>,
    calls: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl FakeLlm {
    fn start(reply: &str) -> FakeLlm {
        use std::io::{BufRead, BufReader, Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let fake = FakeLlm {
            port,
            reply: std::sync::Arc::new(std::sync::Mutex::new(reply.to_string())),
            calls: Default::default(),
        };
        let (reply, calls) = (fake.reply.clone(), fake.calls.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let mut r = BufReader::new(stream.try_clone().unwrap());
                let mut len = 0usize;
                loop {
                    let mut line = String::new();
                    if r.read_line(&mut line).unwrap_or(0) == 0 {
                        break;
                    }
                    let line = line.trim_end().to_ascii_lowercase();
                    if line.is_empty() {
                        break;
                    }
                    if let Some(v) = line.strip_prefix("content-length:") {
                        len = v.trim().parse().unwrap_or(0);
                    }
                }
                let mut body = vec![0u8; len];
                let _ = r.read_exact(&mut body);
                calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let content = reply.lock().unwrap().clone();
                let body = serde_json::json!({
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": content}}]
                })
                .to_string();
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        fake
    }

    fn calls(&self) -> usize {
        self.calls.load(std::sync::atomic::Ordering::SeqCst)
    }
}

#[test]
fn llm_decisions_replay_from_recorded_replies_unless_live() {
    let server = FakeLlm::start(
        "Size 4 fails on holes.\n```json\n{\"sizes\": {\"4\": {\"hole_ratio\": 0.15}}}\n```",
    );
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("l");
    ok(&ledger(&d, &["init", "--plan", &plan("tiny")]));
    let url = format!("http://127.0.0.1:{}/v1", server.port);
    ok(&ledger(
        &d,
        &["engineer", "add", "gpt", "--url", &url, "--model", "fake"],
    ));
    ok(&ledger(&d, &["run", "--quiet", "--engineer", "gpt"]));
    assert_eq!(server.calls(), 2, "one call per engineered stage");

    // Stage 0 follows the EngineerRegistered event; stages 1-2 answer from the record.
    let out = ok(&ledger(&d, &["replay", "--verify"]));
    assert!(
        out.contains("stage 2: ") && out.contains("engineer gpt"),
        "{out}"
    );
    assert_eq!(server.calls(), 2, "a recorded replay never calls the model");

    // The model now answers differently: a live replay calls it and reports the
    // decision as the mismatch; the recorded replay still matches.
    *server.reply.lock().unwrap() = "{\"sizes\": {\"4\": {\"hole_ratio\": 0.3}}}".into();
    let o = ledger(&d, &["replay", "--stage", "1", "--live"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("stage 1") && text(&o).contains("engineer_decision"),
        "{}",
        text(&o)
    );
    assert_eq!(server.calls(), 3);
    ok(&ledger(&d, &["replay", "--stage", "1"]));
    assert_eq!(server.calls(), 3);
    assert_eq!(branch_names(&d), vec!["main".to_string()]);
}

/// A ledger recorded on an H100 (`tests/fixtures/lm-tiny-cuda.bundle`: tests/plans/lm-tiny
/// run for 2 stages with `run --device cuda`, in bf16, and verified there by `replay
/// --verify`: `tools/cuda-bench.sh` part 4, ledgers/results/cuda-bench-h100; two H100s gave
/// the same head) read on a machine without CUDA:
/// it verifies, and `replay --verify` replays where the stages ran, so here it refuses
/// (exit 2) naming the device and the way out, and `--device cpu` recomputes on the CPU
/// and reports the mismatch with the reason (exit 1). The branch is untouched by both.
#[test]
fn a_cuda_recorded_ledger_replays_where_it_ran() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("l");
    let bundle = format!(
        "{}/tests/fixtures/lm-tiny-cuda.bundle",
        env!("CARGO_MANIFEST_DIR")
    );
    ok(&ledger(&d, &["init", "--from-bundle", &bundle]));
    ok(&ledger(&d, &["verify"]));
    let before = head(&d, "main");
    let o = ledger(&d, &["replay", "--verify"]);
    if o.status.code() == Some(0) {
        // This machine has CUDA: the replay ran where the stages were recorded.
        assert!(text(&o).contains("every hash matches"), "{}", text(&o));
        return;
    }
    common::fails(&o, 2, "recorded on cuda");
    assert!(text(&o).contains("give --device"), "{}", text(&o));
    assert_eq!(head(&d, "main"), before);
    let o = ledger(&d, &["replay", "--verify", "--device", "cpu"]);
    common::fails(&o, 1, "replay mismatch on main: stage 0");
    assert!(
        text(&o).contains("stage 0 was recorded on cuda and this replay runs on cpu"),
        "{}",
        text(&o)
    );
    assert_eq!(head(&d, "main"), before);
}

/// A stage with rehearsal (`grpo.rehearsal_coef`) records the solver plans it rehearsed
/// (split `rehearsal`, beside its training instances) and replays bit for bit: the plans
/// and their batches are a pure function of the plan and the stage's seed.
#[test]
fn a_rehearsing_stage_records_its_plans_and_replays() {
    let tmp = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(plan("lm-tiny")).unwrap().replace(
        "[grpo]\n",
        "[grpo]\nrehearsal_coef = 0.5\nrehearsal_batch = 8\nrehearsal_instances = 24\n",
    );
    let p = tmp.path().join("rehearse.toml");
    std::fs::write(&p, text).unwrap();
    let d = tmp.path().join("l");
    ok(&ledger(&d, &["init", "--plan", p.to_str().unwrap()]));
    ok(&ledger(&d, &["run", "--quiet", "--stages", "2"]));
    let l = Ledger::open_read_only(&d).unwrap();
    let splits: Vec<(u32, String, usize)> = l
        .history("main")
        .unwrap()
        .into_iter()
        .filter_map(|(_, e)| match e.body {
            EventBody::InstancesGenerated(g) if e.stage == 1 => {
                Some((e.stage, g.split, g.instances.len()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        splits,
        [
            (1, "train".to_string(), 32),
            (1, "rehearsal".to_string(), 24)
        ]
    );
    drop(l);
    // `show` counts the stage's instances per split, so the rehearsal plans do not pass
    // for training instances.
    let s: serde_json::Value =
        serde_json::from_str(&ok(&ledger(&d, &["show", "main@stage1", "--json"]))).unwrap();
    assert_eq!(s["stage"]["instances"], 56, "{s}");
    assert_eq!(
        s["stage"]["instances_by_split"],
        serde_json::json!({"rehearsal": 24, "train": 32})
    );
    let text = ok(&ledger(&d, &["show", "main@stage1"]));
    assert!(
        text.contains("instances  56 (24 rehearsal, 32 train)"),
        "{text}"
    );
    let o = ok(&ledger(&d, &["replay", "--verify", "--stage", "1"]));
    assert!(o.contains("every hash matches"), "{o}");
}
