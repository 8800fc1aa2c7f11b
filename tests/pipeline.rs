//! The stage pipeline with every built-in engineer, ablation switches, and checkpoint
//! export, through the real `ledger` binary on a tiny plan.
use crate::common;

use common::{ledger, ok, param_hashes};
use mapf_ledger::engineer::EngineerContext;
use mapf_ledger::ledger::event::DecisionStatus;
use mapf_ledger::ledger::{codec, EventBody, Hash, Ledger};
use std::path::Path;

const TINY: &str = include_str!("plans/tiny.toml");

fn init_run(dir: &Path, plan: &str, engineer: &str) {
    let plan_file = dir.with_extension("toml");
    std::fs::write(&plan_file, plan).unwrap();
    ok(&ledger(
        dir,
        &["init", "--plan", plan_file.to_str().unwrap()],
    ));
    ok(&ledger(dir, &["run", "--quiet", "--engineer", engineer]));
}

/// The structured context a decision recorded.
/// A context's text as the tiny plans' engineers read it (their text revision, 1).
fn render(ctx: &EngineerContext) -> String {
    use mapf_ledger::engineer::text::{self, TextRevision};
    text::render(ctx, &Default::default(), TextRevision::of(1).unwrap())
}

fn context_of(l: &Ledger, blob: &Hash) -> EngineerContext {
    codec::decode(&l.blob(blob).unwrap(), "engineer context").unwrap()
}

#[test]
fn every_builtin_engineer_of_the_grid_policy_runs_records_its_decisions_and_verifies() {
    let t = tempfile::tempdir().unwrap();
    for engineer in ["fixed", "random", "heuristic", "learnability"] {
        let dir = t.path().join(engineer);
        init_run(&dir, TINY, engineer);
        ok(&ledger(&dir, &["verify"]));
        let l = Ledger::open_read_only(&dir).unwrap();
        let decisions: Vec<_> = l
            .history("main")
            .unwrap()
            .into_iter()
            .filter_map(|(_, e)| match e.body {
                EventBody::EngineerDecision(d) => Some(d),
                _ => None,
            })
            .collect();
        assert_eq!(
            decisions.len(),
            2,
            "{engineer}: one decision per engineered stage"
        );
        for d in &decisions {
            assert_eq!(d.engineer, engineer);
            assert!(
                matches!(d.status, DecisionStatus::Accepted | DecisionStatus::Clipped),
                "{engineer}: {:?}",
                d.status
            );
            assert!(!d.rationale.is_empty());
            let context = context_of(&l, &d.context);
            assert!(
                !context.failures.sizes.is_empty()
                    && render(&context).contains("## Failure breakdown"),
                "{engineer}: context lacks evidence"
            );
        }
        if engineer == "learnability" {
            assert!(
                decisions[0].rationale.contains("learnability"),
                "{}",
                decisions[0].rationale
            );
        }
        if engineer == "fixed" {
            assert!(decisions.iter().all(|d| d.applied == decisions[0].applied));
        }
    }
}

/// `current` and `base` are the policy model writing its proposal: a grid plan refuses
/// them with exit 2 before any training, pointing to `learnability` and to lm plans.
#[test]
fn current_and_base_on_a_grid_plan_exit_2_before_any_work() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("l");
    let plan_file = t.path().join("tiny.toml");
    std::fs::write(&plan_file, TINY).unwrap();
    ok(&ledger(
        &dir,
        &["init", "--plan", plan_file.to_str().unwrap()],
    ));
    for engineer in ["current", "base", "current:-failure_breakdown"] {
        let o = ledger(&dir, &["run", "--quiet", "--engineer", engineer]);
        assert_eq!(o.status.code(), Some(2), "{engineer}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("learnability") && err.contains("lm") && err.contains("grid"),
            "{err}"
        );
    }
    // Nothing was trained or recorded: the branch is still at its genesis.
    let l = Ledger::open_read_only(&dir).unwrap();
    assert_eq!(l.history("main").unwrap().len(), 1);
    drop(l);
    ok(&ledger(&dir, &["run", "--quiet", "--stages", "1"]));
    let o = ledger(&dir, &["fork", "--at", "stage1", "--engineer", "base"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("learnability"));
    let o = ledger(
        &dir,
        &["fork", "--at", "stage1", "--engineer", "current:-histories"],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("unknown context module"));
}

#[test]
fn ablation_switches_change_the_context_and_nothing_else() {
    let t = tempfile::tempdir().unwrap();
    let (a, b) = (t.path().join("all"), t.path().join("ablated"));
    init_run(&a, TINY, "fixed");
    let ablated = format!(
        "{TINY}\n[engineer.context]\nfailure_breakdown = false\nguideline = true\nhistory = false\nsummary = true\ntraining_details = true\n"
    );
    init_run(&b, &ablated, "fixed");
    let contexts = |dir: &Path| -> Vec<String> {
        let l = Ledger::open_read_only(dir).unwrap();
        l.history("main")
            .unwrap()
            .into_iter()
            .filter_map(|(_, e)| match e.body {
                EventBody::EngineerDecision(d) => Some(render(&context_of(&l, &d.context))),
                _ => None,
            })
            .collect()
    };
    let (ca, cb) = (contexts(&a), contexts(&b));
    assert!(ca[0].contains("## Failure breakdown") && !cb[0].contains("## Failure breakdown"));
    assert!(!ca[0].contains("## Training details") && cb[0].contains("## Training details"));
    assert!(ca[1].contains("## History") && !cb[1].contains("## History"));
    assert!(ca[0].contains("## Summary") && cb[0].contains("## Summary"));
    // Same training: identical parameter hashes at every gradient step.
    assert_eq!(param_hashes(&a), param_hashes(&b));
}

#[test]
fn export_checkpoint_writes_safetensors_of_the_stage_weights() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("l");
    init_run(&dir, TINY, "fixed");
    let out = t.path().join("base.safetensors");
    let msg = ok(&ledger(
        &dir,
        &[
            "export-checkpoint",
            "main@stage0",
            "--out",
            out.to_str().unwrap(),
        ],
    ));
    assert!(msg.contains("grid policy"), "{msg}");
    let bytes = std::fs::read(&out).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    assert_eq!(header["head.weight"]["shape"], serde_json::json!([5, 128]));
    assert_eq!(header["conv1.weight"]["dtype"], "F32");
    let o = ledger(
        &dir,
        &[
            "export-checkpoint",
            "main@stage9",
            "--out",
            out.to_str().unwrap(),
        ],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("stage 9"));
}

#[test]
fn shipped_plans_parse_with_the_protocols_they_promise() {
    use mapf_ledger::ledger::plan::{LedgerPlan, PolicyKind};
    let demo = LedgerPlan::parse(include_bytes!("../ledgers/demo.toml")).unwrap();
    assert_eq!(
        (
            demo.policy,
            demo.engineer.stages,
            demo.engineer.name.as_str()
        ),
        (PolicyKind::Lm, 3, "current")
    );
    assert_eq!(
        demo.initial_config
            .sizes
            .keys()
            .copied()
            .collect::<Vec<_>>(),
        (3..=10).collect::<Vec<_>>(),
        "the demo trains on the paper's sizes"
    );
    // The demo starts from the shipped reader, the base planner that leaves
    // coordination to RL (as the paper starts from Qwen3-4B) and reads its failure
    // evidence at the text revision it was taught (its card names the plans that made
    // it from ledgers/base-indep.toml's planner).
    assert_eq!(demo.lm.hf_dir(), Some("ledgers/models/mapf-reader-v3"));
    assert_eq!(demo.engineer.revision, 7);
    // From the paper's initial configuration (ledgers/paper.toml's ratios), where the
    // headroom pilot measured room for an engineer to matter.
    assert!(demo
        .initial_config
        .sizes
        .values()
        .all(|c| (c.hole_ratio, c.wait_ratio) == (0.2, 0.2)));
    assert_eq!(demo.lm.prompt, mapf_ledger::train::lm::PromptStyle::Cells);
    assert_eq!(demo.warmup.steps, 0);
    // Its suites mark coordination: about half their items need it.
    assert_eq!(demo.suites.wait_ratios, vec![0.25, 0.5, 0.75]);
    let base = LedgerPlan::parse(include_bytes!("../ledgers/base-indep.toml")).unwrap();
    assert!(base.lm.hf_dir().is_none() && base.warmup.engineer_examples > 0);
    assert!(base.warmup.wait_all_agents && base.warmup.wait_ratios == vec![0.03]);
    assert_eq!(base.lm.prompt, demo.lm.prompt);
    let mut counts = base.warmup.agents.clone();
    counts.dedup();
    assert_eq!(counts, vec![1, 2, 3, 4, 5]);
    assert_eq!(base.suites.seed, demo.suites.seed);
    // The demo's engineer reads the text the reader was taught: round 9's revision and
    // prompt budget (the round that made `mapf-reader-v3`, `make reader-model`).
    let reader = LedgerPlan::parse(include_bytes!("../ledgers/reader-pilot-9.toml")).unwrap();
    assert_eq!(
        (reader.engineer.revision, reader.lm.engineer_prompt_tokens),
        (demo.engineer.revision, demo.lm.engineer_prompt_tokens)
    );
    assert_eq!(reader.suites.seed, demo.suites.seed);
    let grid = LedgerPlan::parse(include_bytes!("../ledgers/grid-demo.toml")).unwrap();
    assert_eq!(
        (grid.policy, grid.engineer.name.as_str()),
        (PolicyKind::Grid, "learnability")
    );
    let paper = LedgerPlan::parse(include_bytes!("../ledgers/paper.toml")).unwrap();
    assert_eq!(paper.policy, PolicyKind::Lm);
    assert_eq!(paper.lm.hf_dir(), Some("/models/Qwen3-4B"));
    assert!(paper.lm.lora().is_some());
    assert_eq!(
        (
            paper.suites.validation_per_cell,
            paper.suites.test_per_cell,
            paper.suites.max_size
        ),
        (150, 150, 10)
    );
    // The paper's test subsets: 50 instances per cell at each wait ratio.
    assert_eq!(paper.suites.wait_ratios, [0.25, 0.5, 0.75]);
    assert_eq!(paper.initial_config.agents, 2);
    assert_eq!(
        paper
            .initial_config
            .sizes
            .keys()
            .copied()
            .collect::<Vec<_>>(),
        (3..=10).collect::<Vec<_>>()
    );
    assert_eq!(paper.engineer.stages, 3);
}

/// Switching a module off removes its evidence from the context struct itself, so a
/// built-in engineer (here `learnability`) no longer sees it and decides differently,
/// not only an LLM that reads the text.
#[test]
fn switching_failure_breakdown_off_changes_a_learnability_decision() {
    use mapf_ledger::env::table::CellCounts;
    use mapf_ledger::env::FailureKind;
    use mapf_ledger::ledger::event::SizeFailures;
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("l");
    let plan_file = t.path().join("tiny.toml");
    // Four sizes, so the probe must choose which two the evidence implicates.
    let plan = format!(
        "{TINY}\n[initial_config.sizes.5]\ndata_ratio = 0.5\nhole_ratio = 0.1\nwait_ratio = 0.2\n[initial_config.sizes.6]\ndata_ratio = 0.5\nhole_ratio = 0.1\nwait_ratio = 0.2\n"
    );
    std::fs::write(&plan_file, plan).unwrap();
    ok(&ledger(
        &dir,
        &["init", "--plan", plan_file.to_str().unwrap()],
    ));
    ok(&ledger(&dir, &["run", "--quiet", "--stages", "1"]));
    let mut l = Ledger::open(&dir).unwrap();
    let state = l.projection("main").unwrap();
    let p = mapf_ledger::stage::Pipeline::new(&mut l, Default::default()).unwrap();
    let initial = state.initial_config.clone().unwrap();
    let mut on = p
        .context(&state, 1, initial.clone(), &"learnability".parse().unwrap())
        .unwrap();
    // A fixed picture of the evidence: 5x5 fails on conflicts, 6x6 on holes.
    for (n, valid, kind) in [
        (3, 16, FailureKind::GoalNotReached),
        (4, 14, FailureKind::GoalNotReached),
        (5, 6, FailureKind::VertexConflict),
        (6, 4, FailureKind::Hole),
    ] {
        on.validation.cells.insert(
            (2, n),
            CellCounts {
                total: 20,
                valid,
                optimal: valid,
            },
        );
        on.failures.sizes.retain(|s| s.size != n as u32);
        on.failures.sizes.push(SizeFailures {
            size: n as u32,
            total: 20,
            counts: vec![(kind, 20 - valid)],
            examples: vec![],
        });
    }
    on.failures.sizes.sort_by_key(|s| s.size);
    // The same evidence through the ablation switch: the struct loses the breakdown.
    let mut off = on.clone();
    off.modules.failure_breakdown = false;
    let off = off.without_switched_off_modules();
    assert!(
        off.failures.sizes.is_empty(),
        "the struct still holds the failures"
    );
    assert!(!render(&off).contains("Failure breakdown"));
    let decide = |ctx| {
        let mut e = mapf_ledger::engineer::build(
            &"learnability".parse().unwrap(),
            &p.engineer_inputs(&state),
            &state,
        )
        .unwrap();
        e.decide(ctx)
    };
    let (a, b) = (decide(&on), decide(&off));
    assert!(
        a.rationale
            .contains("6x6: 16 of 20 validation plans failed"),
        "{}",
        a.rationale
    );
    assert!(
        b.rationale.contains("6x6: validation valid 20%"),
        "{}",
        b.rationale
    );
    assert_ne!(
        a.proposal, b.proposal,
        "the decision did not change: {}\n{}",
        a.rationale, b.rationale
    );
    // And the plan-level switch reaches the context the pipeline builds.
    let spec_off = p
        .context(
            &state,
            1,
            initial,
            &"learnability:-failure_breakdown".parse().unwrap(),
        )
        .unwrap();
    assert!(spec_off.failures.sizes.is_empty() && !spec_off.modules.failure_breakdown);
}
