//! Signals, as a user sends them: `run` stops at the end of the gradient step under
//! way, whose records are durable by then; a second signal ends it at once. Every way
//! ends with exit 130, no scratch ref and a ledger that verifies, and `run` again
//! reaches the head of an uninterrupted run. (The replay's side: tests/replay.rs.)
use crate::common;
use common::{ledger, ok, signalled_at, text};
use mapf_ledger::ledger::{EventBody, Hash, Ledger};
use std::path::{Path, PathBuf};

const SMALL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/plans/small.toml");

/// The small plan with two stages of 60 steps and no checkpoint inside a stage: a stop
/// mid-stage leaves steps past the last checkpoint, which a resume recomputes and must
/// meet again as recorded.
fn plan(tmp: &Path) -> PathBuf {
    let text = std::fs::read_to_string(SMALL).unwrap();
    let text = text
        .replace("[grpo]\nsteps = 40", "[grpo]\nsteps = 60")
        .replace("checkpoint_every = 4", "checkpoint_every = 1000")
        .replace("stages = 3", "stages = 2");
    assert!(text.contains("steps = 60") && text.contains("checkpoint_every = 1000"));
    let p = tmp.join("long.toml");
    std::fs::write(&p, text).unwrap();
    p
}

fn head(dir: &Path) -> Hash {
    Ledger::open_read_only(dir).unwrap().head("main").unwrap()
}

fn scratch_refs(dir: &Path) -> usize {
    mapf_ledger::ledger::refs::Refs::read(dir)
        .unwrap()
        .unwrap()
        .scratch()
        .count()
}

/// The head event, and whether its stage is complete.
fn head_event(dir: &Path) -> (EventBody, bool) {
    let mut l = Ledger::open_read_only(dir).unwrap();
    let e = l.event(&l.head("main").unwrap()).unwrap();
    let done = l
        .projection("main")
        .unwrap()
        .stage(e.stage)
        .is_some_and(|s| s.completed.is_some());
    (e.body, done)
}

#[test]
fn run_stopped_by_sigint_sigterm_or_two_signals_resumes_to_the_uninterrupted_head() {
    let tmp = tempfile::tempdir().unwrap();
    let plan = plan(tmp.path());
    let plan = plan.to_str().unwrap();
    let reference = tmp.path().join("reference");
    ok(&ledger(&reference, &["init", "--plan", plan]));
    ok(&ledger(&reference, &["run", "--quiet"]));

    let d = tmp.path().join("l");
    ok(&ledger(&d, &["init", "--plan", plan]));
    let rounds: [(&str, &[i32]); 3] = [
        ("SIGINT", &[libc::SIGINT]),
        ("SIGTERM", &[libc::SIGTERM]),
        ("SIGINT twice", &[libc::SIGINT, libc::SIGINT]),
    ];
    for (stage, (name, signals)) in [1, 1, 2].into_iter().zip(rounds) {
        let at = format!("stage {stage}: step");
        let (status, err, _) =
            signalled_at(&d, &["run"], &at, signals).expect("the run was still running");
        assert_eq!(status.code(), Some(130), "{name}: {err}");
        assert_eq!(scratch_refs(&d), 0, "{name}");
        let v = ok(&ledger(&d, &["verify", "--strict"]));
        assert!(!v.contains("scratch"), "{name}: {v}");
        if signals.len() == 1 {
            // Stopped after the step under way, inside the stage, its steps durable.
            assert!(err.contains("interrupted"), "{name}: {err}");
            let (body, complete) = head_event(&d);
            assert!(
                matches!(
                    body,
                    EventBody::GrpoStats(_)
                        | EventBody::GradientStep(_)
                        | EventBody::Trajectories(_)
                ) && !complete,
                "{name}: the run stopped at a step, not at the stage's end: head {}",
                body.kind()
            );
        } else {
            // The second signal ends it at once, unless the first had already stopped it
            // at the end of a short step.
            assert!(
                err.contains("aborted: nothing recorded is lost") || err.contains("interrupted"),
                "{name}: {err}"
            );
        }
    }
    // Resumed: the steps recorded past the stage's start are recomputed and met again,
    // not appended twice.
    let o = ledger(&d, &["run", "--quiet"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(head(&d), head(&reference));
    ok(&ledger(&d, &["verify", "--strict"]));
}
