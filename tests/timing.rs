//! Where a stage's time went (`ledger show BRANCH@stageN --timing`): every stage records
//! its phases in the unhashed metadata of its completion; the phases cover the stage's
//! wall time; the JSON validates against `schemas/show-timing.json`; nothing timed reaches
//! a hash; TensorBoard gets the phases; and ledgers recorded before timings (the
//! committed fixture bundle, old metadata layout) still read.
use crate::common;

use common::schema::validates;
use common::{fails, json, ledger, ok};
use mapf_ledger::record::timing::phase;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// A ledger of the tiny language-model plan (stage 0 and 2 GRPO stages) at `tmp/name`.
fn lm_tiny(tmp: &Path, name: &str) -> PathBuf {
    let d = tmp.join(name);
    let plan = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/plans/lm-tiny.toml");
    ok(&ledger(&d, &["init", "--plan", plan]));
    ok(&ledger(&d, &["run", "--quiet"]));
    d
}

fn timing(d: &Path, stage: &str) -> Value {
    let v = json(&ledger(d, &["show", stage, "--timing", "--json"]));
    validates("show-timing", &v);
    v
}

fn phases(v: &Value) -> Vec<&Value> {
    v["phases"].as_array().unwrap().iter().collect()
}

fn phase_of<'a>(v: &'a Value, name: &str) -> &'a Value {
    phases(v)
        .into_iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no phase {name}: {v}"))
}

/// The named phases add up to the stage's wall time within 5%, and never to more.
fn covers_the_wall_time(v: &Value) {
    let wall = v["wall_seconds"].as_f64().unwrap();
    let sum: f64 = phases(v)
        .iter()
        .map(|p| p["seconds"].as_f64().unwrap())
        .sum();
    assert!(wall > 0.0, "{v}");
    assert!(
        sum <= wall * (1.0 + 1e-9),
        "phases {sum} s > wall {wall} s: {v}"
    );
    assert!(
        sum >= 0.95 * wall,
        "phases cover {sum} s of {wall} s (< 95%): {v}"
    );
    assert!((v["covered_seconds"].as_f64().unwrap() - sum).abs() < 1e-9);
    for p in phases(v) {
        let name = p["name"].as_str().unwrap();
        assert!(phase::ALL.contains(&name), "unknown phase {name}");
        let share = p["share"].as_f64().unwrap();
        assert!((share - p["seconds"].as_f64().unwrap() / wall).abs() < 1e-9);
    }
}

#[test]
fn every_stage_records_phases_that_cover_its_wall_time() {
    let tmp = tempfile::tempdir().unwrap();
    let d = lm_tiny(tmp.path(), "a");

    // A GRPO stage: every phase of a step, with tokens where it decodes or scores.
    let s1 = timing(&d, "main@stage1");
    covers_the_wall_time(&s1);
    assert_eq!(s1["branch"], "main");
    assert_eq!(s1["stage"], 1);
    assert_eq!(s1["device"], "cpu");
    assert_eq!(s1["resumed"], false);
    // On the CPU there is no GPU and no roofline.
    assert!(s1["gpu"].is_null() && s1["bandwidth_bytes_per_second"].is_null());
    let names: Vec<&str> = phases(&s1)
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    for want in [
        phase::ENGINEER,
        phase::INSTANCES,
        phase::LOADING,
        phase::GENERATION,
        phase::REWARD,
        phase::TRAINING,
        phase::KL_REFERENCE,
        phase::OPTIMISER,
        phase::PARAMETER_HASH,
        phase::CHECKPOINTING,
        phase::EVALUATION,
    ] {
        assert!(names.contains(&want), "{want} missing from {names:?}");
    }
    // lm-tiny: 6 GRPO steps of 4 prompts x 4 samples, a durable point at step 4.
    let gen = phase_of(&s1, phase::GENERATION);
    assert_eq!(gen["calls"], 6);
    assert_eq!(phase_of(&s1, phase::OPTIMISER)["calls"], 6);
    assert_eq!(phase_of(&s1, phase::TRAINING)["calls"], 6);
    // Each step's commit (6), the durable point at step 4 and the stage's last checkpoint.
    assert_eq!(phase_of(&s1, phase::CHECKPOINTING)["calls"], 8);
    let sampled = gen["sampled_tokens"].as_u64().unwrap();
    assert!(sampled > 0 && gen["prefilled_tokens"].as_u64().unwrap() > 0);
    assert!(gen["decode_steps"].as_u64().unwrap() > 0);
    assert!(gen["decode_bytes"].as_u64().unwrap() > 0);
    assert!(gen["tokens_per_second"].as_f64().unwrap() > 0.0);
    assert!(gen["roofline_share"].is_null());
    // The training forward scores exactly the tokens generation sampled.
    assert_eq!(phase_of(&s1, phase::TRAINING)["sampled_tokens"], sampled);
    assert_eq!(
        phase_of(&s1, phase::KL_REFERENCE)["sampled_tokens"],
        sampled
    );
    // The sampled tokens are the trajectories' tokens the stage's GRPO stats recorded.
    let stage: Value = json(&ledger(&d, &["show", "main@stage1", "--json"]));
    assert_eq!(stage["stage"]["grpo"]["tokens"], sampled, "{stage}");
    assert!(
        phase_of(&s1, phase::EVALUATION)["sampled_tokens"]
            .as_u64()
            .unwrap()
            > 0
    );

    // Stage 0, the warm-up: its examples, training steps and evaluation.
    let s0 = timing(&d, "main@stage0");
    covers_the_wall_time(&s0);
    assert_eq!(phase_of(&s0, phase::OPTIMISER)["calls"], 12);
    assert!(
        phase_of(&s0, phase::EXAMPLE_BUILDING)["calls"]
            .as_u64()
            .unwrap()
            > 0
    );
    assert!(
        phase_of(&s0, phase::TRAINING)["prefilled_tokens"]
            .as_u64()
            .unwrap()
            > 0
    );
    covers_the_wall_time(&timing(&d, "main@stage2"));

    // The text table: every phase with its share.
    let text = ok(&ledger(&d, &["show", "main@stage1", "--timing"]));
    assert!(text.starts_with("main@stage1 timing (cpu, f32;"), "{text}");
    for p in phases(&s1) {
        assert!(text.contains(p["name"].as_str().unwrap()), "{text}");
    }
    assert!(
        text.contains("tokens/s") && !text.contains("roofline"),
        "{text}"
    );

    // Bad input: a branch or event instead of a stage, a stage that does not exist.
    fails(
        &ledger(&d, &["show", "main", "--timing"]),
        2,
        "name a stage, as in main@stage1",
    );
    fails(
        &ledger(&d, &["show", "main@stage9", "--timing"]),
        2,
        "stage 9",
    );
    fails(
        &ledger(&d, &["show", "main@stage1", "--timing", "--samples", "2"]),
        2,
        "--samples",
    );

    // Nothing timed is hashed: a second run of the plan has other timings and the
    // same heads, event for event.
    let d2 = lm_tiny(tmp.path(), "b");
    assert_eq!(common::heads(&d2), common::heads(&d));
    let again = timing(&d2, "main@stage1");
    assert_eq!(again["event"], s1["event"]);
    assert_ne!(again["wall_seconds"], s1["wall_seconds"]);

    // TensorBoard: the phases as scalars at the stage's step.
    let tb = tmp.path().join("tb");
    ok(&ledger(
        &d,
        &[
            "export",
            "--format",
            "tensorboard",
            "--out",
            tb.to_str().unwrap(),
        ],
    ));
    use mapf_ledger::views::tensorboard::{read_scalars, FILE_NAME};
    let scalars = read_scalars(&std::fs::read(tb.join("main").join(FILE_NAME)).unwrap()).unwrap();
    let series = |tag: &str| -> Vec<f32> {
        scalars
            .iter()
            .filter(|s| s.tag == tag)
            .map(|s| s.value)
            .collect()
    };
    assert_eq!(series("timing/wall_seconds").len(), 3, "stages 0-2");
    assert_eq!(
        series("timing/wall_seconds")[1],
        s1["wall_seconds"].as_f64().unwrap() as f32
    );
    assert_eq!(
        series("timing/generation/seconds"),
        [1, 2]
            .iter()
            .map(
                |n| phase_of(&timing(&d, &format!("main@stage{n}")), phase::GENERATION)["seconds"]
                    .as_f64()
                    .unwrap() as f32
            )
            .collect::<Vec<_>>()
    );
    assert_eq!(series("timing/generation/tokens_per_second").len(), 2);
    assert_eq!(series("timing/optimiser/share").len(), 3);

    // A bundle carries the timings (metadata layout 2) to another ledger.
    let bundle = tmp.path().join("main.bundle");
    ok(&ledger(
        &d,
        &[
            "bundle",
            "--branch",
            "main",
            "--out",
            bundle.to_str().unwrap(),
        ],
    ));
    let copy = tmp.path().join("copy");
    ok(&ledger(
        &copy,
        &["init", "--from-bundle", bundle.to_str().unwrap()],
    ));
    ok(&ledger(&copy, &["verify"]));
    assert_eq!(timing(&copy, "main@stage1"), s1);
}

/// A ledger recorded before stage timings still reads, verifies and shows its events;
/// `--timing` says the stage has none (exit 2) rather than failing to decode. The
/// fixture is `tests/fixtures/lm-tiny-cuda.bundle` as an H200 recorded it at 72be5d4
/// (tests/plans/lm-tiny, 2 stages on CUDA in bf16), every metadata record in the layout
/// of builds before timings (the same git blob, so it costs the repository nothing).
#[test]
fn ledgers_recorded_before_timings_still_read() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("l");
    let bundle = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/lm-tiny-cuda-h200-pre-timing.bundle"
    );
    ok(&ledger(&d, &["init", "--from-bundle", bundle]));
    ok(&ledger(&d, &["verify"]));
    let stage = json(&ledger(&d, &["show", "main@stage1", "--json"]));
    let completed = stage["stage"]["completed"].as_str().unwrap().to_string();
    let event = json(&ledger(&d, &["show", &completed, "--json"]));
    validates("ledger-event", &event);
    assert_eq!(event["meta"]["device"], "cuda", "{event}");
    assert!(event["meta"].get("timing").is_none(), "{event}");
    fails(
        &ledger(&d, &["show", "main@stage1", "--timing"]),
        2,
        "main@stage1 has no timing: it was recorded by a build before stage timings",
    );
    // Every event's metadata decodes (export reads them all).
    let lines = ok(&ledger(&d, &["export", "--branch", "main"]));
    assert!(lines.lines().count() > 10);
}

/// The GPU path, as recorded on an H100 (`tests/fixtures/lm-tiny-cuda.bundle`, recorded
/// by `tools/cuda-bench.sh` with stage timings): the GPU's name was read from its
/// driver, and every decoding phase has its share of the memory roofline.
#[test]
fn a_cuda_recorded_stage_shows_its_roofline() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("l");
    let bundle = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/lm-tiny-cuda.bundle"
    );
    ok(&ledger(&d, &["init", "--from-bundle", bundle]));
    let v = timing(&d, "main@stage1");
    covers_the_wall_time(&v);
    assert!(v["device"].as_str().unwrap().starts_with("cuda"), "{v}");
    let gpu = v["gpu"].as_str().expect("the GPU's name was recorded");
    assert!(gpu.starts_with("NVIDIA "), "{gpu}");
    let bw = v["bandwidth_bytes_per_second"]
        .as_f64()
        .expect("a GPU in the table");
    for name in [phase::GENERATION, phase::EVALUATION] {
        let p = phase_of(&v, name);
        let bytes = p["decode_bytes"].as_u64().unwrap() as f64;
        let roofline = p["roofline_seconds"].as_f64().unwrap();
        assert!(
            (roofline - bytes / bw).abs() <= 1e-12 * roofline.max(1.0),
            "{p}"
        );
        let share = p["roofline_share"].as_f64().unwrap();
        assert!(share > 0.0 && share < 1.0, "{p}");
    }
    // Phases that decode nothing have no roofline.
    assert!(phase_of(&v, phase::OPTIMISER)["roofline_share"].is_null());
    let text = ok(&ledger(&d, &["show", "main@stage1", "--timing"]));
    assert!(
        text.contains(&format!("GPU {gpu}; memory bandwidth")),
        "{text}"
    );
    assert!(text.contains("roofline"), "{text}");
}
