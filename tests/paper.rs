//! `ledgers/paper.toml`, the paper's protocol, cut to what a CPU runs in seconds: a tiny
//! Qwen3 checkpoint with the thinking template, short budgets, 3 items a cell, sizes of
//! the suites up to 5, 2 GRPO steps of 2 prompts x 2 samples, one stage. Every other
//! setting is the committed plan's: thinking mode, LoRA rank 32 on every projection, the
//! adapters in the compute dtype, `drop`, micro-batches bounded in tokens, recomputed
//! layers, log-probs in chunks, and the `current` engineer at text revision 2. It runs a
//! stage and replays bit for bit, so the paper's configuration cannot fail only once a
//! GPU and 4B weights are at hand.
use crate::common::{self, ledger, ok, text};

#[test]
fn the_papers_plan_cut_to_cpu_size_runs_a_thinking_stage_and_replays() {
    let tmp = tempfile::tempdir().unwrap();
    let q3 = common::qwen3_thinking_copy(tmp.path());
    let mut plan = include_str!("../ledgers/paper.toml").to_string();
    let init = format!("init = \"hf:{}\"", q3.display());
    for (old, new) in [
        ("init = \"hf:/models/Qwen3-4B\"", init.as_str()),
        (
            "max_new_tokens = 8192\nengineer_max_new_tokens = 8192",
            "max_new_tokens = 160\nengineer_max_new_tokens = 48",
        ),
        ("validation_per_cell = 150", "validation_per_cell = 3"),
        ("test_per_cell = 150", "test_per_cell = 3"),
        ("max_size = 10\nseed = 2026", "max_size = 5\nseed = 2026"),
        ("steps = 500", "steps = 2"),
        ("group_size = 8", "group_size = 2"),
        ("batch_size = 32", "batch_size = 2"),
        ("instances_per_stage = 8000", "instances_per_stage = 16"),
        ("checkpoint_every = 50", "checkpoint_every = 1"),
        ("stages = 3", "stages = 1"),
        ("device = \"cuda\"", "device = \"cpu\""),
    ] {
        assert!(
            plan.contains(old),
            "ledgers/paper.toml no longer says {old:?}"
        );
        plan = plan.replace(old, new);
    }
    for kept in [
        "thinking = true",
        "lora_in_compute_dtype = true",
        "recompute = true",
        "zero_variance = \"drop\"",
        "name = \"current\"",
    ] {
        assert!(
            plan.contains(kept),
            "ledgers/paper.toml no longer says {kept:?}"
        );
    }
    let path = tmp.path().join("paper-cpu.toml");
    std::fs::write(&path, plan).unwrap();
    let d = tmp.path().join("ledger");
    ok(&ledger(&d, &["init", "--plan", path.to_str().unwrap()]));
    let run = ledger(&d, &["run", "--stages", "2"]);
    ok(&run);
    let out = text(&run);
    assert!(out.contains("stage 1: engineer current, 2 steps"), "{out}");
    assert!(out.contains("stage 1 done: validation"), "{out}");
    let replay = ledger(&d, &["replay", "--verify", "--branch", "main"]);
    ok(&replay);
    let said = text(&replay);
    assert!(
        said.contains("stage 1: ") && said.contains("every hash matches"),
        "{said}"
    );
}
