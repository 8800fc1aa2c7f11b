//! The trainer's determinism contract, through the real pipeline and ledger:
//! same plan and seed give identical event hashes; the rayon thread count does not
//! matter; stopping at a durable point and resuming records exactly what an
//! uninterrupted run records (parameter hashes and trajectory hashes included).
use crate::common;

use common::{ledger_cmd, ok, param_hashes};
use mapf_ledger::ledger::{Hash, Ledger};
use mapf_ledger::stage::{Pipeline, Progress, RunOptions};
use mapf_ledger::train::grpo::StepStats;
use std::sync::atomic::{AtomicBool, Ordering};

const PLAN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/plans/tiny.toml");

/// `ledger ARGS` on `dir` with `rayon` threads; it must succeed.
fn ledger_with_threads(dir: &std::path::Path, args: &[&str], rayon: &str) {
    ok(&ledger_cmd(dir, args)
        .env("RAYON_NUM_THREADS", rayon)
        .output()
        .unwrap());
}

fn run_cli(dir: &std::path::Path, rayon: &str) -> Hash {
    ledger_with_threads(dir, &["init", "--plan", PLAN], rayon);
    ledger_with_threads(dir, &["run", "--quiet"], rayon);
    Ledger::open_read_only(dir).unwrap().head("main").unwrap()
}

#[test]
fn same_seed_gives_identical_hashes_with_one_or_two_rayon_threads() {
    let t = tempfile::tempdir().unwrap();
    let a = run_cli(&t.path().join("a"), "1");
    let b = run_cli(&t.path().join("b"), "2");
    assert_eq!(a, b, "head hashes differ between RAYON_NUM_THREADS=1 and 2");
    // And the run really trained: gradient steps with changing parameter hashes.
    let params = param_hashes(&t.path().join("a"));
    assert!(params.len() > 40);
    assert_ne!(params.first(), params.last());
}

/// Sets the stop flag after `at` steps of stage `stage`, as Ctrl-C would.
struct StopAt {
    stage: u32,
    at: u64,
    flag: std::sync::Arc<AtomicBool>,
}

impl Progress for StopAt {
    fn step(&mut self, stage: u32, done: u64, _: &StepStats) {
        if stage == self.stage && done == self.at {
            self.flag.store(true, Ordering::SeqCst);
        }
    }
}

fn run_lib(dir: &std::path::Path, stop_at: Option<(u32, u64)>) -> (Hash, bool) {
    let mut l = Ledger::open(dir).unwrap();
    let mut p = Pipeline::new(&mut l, Default::default()).unwrap();
    let flag = std::sync::Arc::new(AtomicBool::new(false));
    let (stage, at) = stop_at.unwrap_or((u32::MAX, 0));
    let mut progress = StopAt {
        stage,
        at,
        flag: flag.clone(),
    };
    let opts = RunOptions {
        branch: "main".into(),
        stages: None,
        engineer: None,
    };
    let s = p
        .run(
            &opts,
            &mut mapf_ledger::engineer::build,
            &mut progress,
            &flag,
        )
        .unwrap();
    (s.head, s.interrupted)
}

#[test]
fn stop_and_resume_records_what_an_uninterrupted_run_records() {
    stop_and_resume(PLAN);
}

/// The same contract for the language-model policy (scratch model, LoRA stages):
/// stage 1 has 6 steps with checkpoints every 4.
#[test]
fn stop_and_resume_inside_an_lm_stage_records_what_an_uninterrupted_run_records() {
    stop_and_resume(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/plans/lm-tiny.toml"
    ));
}

/// And in bf16 (the CUDA dtype path, on the CPU), with GRPO in micro-batches: the
/// resumed run ends on the same head, bit for bit, as the f32 path's test asks.
#[test]
fn stop_and_resume_in_bf16_records_what_an_uninterrupted_run_records() {
    stop_and_resume(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/plans/lm-tiny-bf16.toml"
    ));
}

fn stop_and_resume(plan: &str) {
    let t = tempfile::tempdir().unwrap();
    let plan = std::fs::read(plan).unwrap();
    let (a, b) = (t.path().join("straight"), t.path().join("resumed"));
    Ledger::create(&a, &plan).unwrap();
    Ledger::create(&b, &plan).unwrap();
    if plan.ends_with(b"dtype = \"bf16\"\n") {
        let mut l = Ledger::open(&a).unwrap();
        let p = Pipeline::new(&mut l, Default::default()).unwrap();
        assert_eq!(p.compute().dtype, tch::Kind::BFloat16);
    }
    let (straight, interrupted) = run_lib(&a, None);
    assert!(!interrupted);
    // Stop inside stage 1 (checkpoints every 4 steps): stops at step 4's checkpoint.
    let (mid, interrupted) = run_lib(&b, Some((1, 3)));
    assert!(interrupted);
    assert_ne!(mid, straight);
    // A reopened ledger resumes from the checkpoint (new process state, same history).
    let (resumed, interrupted) = run_lib(&b, None);
    assert!(!interrupted);
    assert_eq!(
        resumed, straight,
        "resumed run diverged from the uninterrupted one"
    );
}
