//! The stage pipeline with every built-in engineer, ablation switches, and checkpoint
//! export, through the real `ledger` binary on a tiny plan.
use mapf_ledger::ledger::event::DecisionStatus;
use mapf_ledger::ledger::{EventBody, Hash, Ledger};
use std::path::Path;
use std::process::{Command, Output};

const TINY: &str = include_str!("plans/tiny.toml");

fn ledger(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ledger"))
        .arg("--ledger")
        .arg(dir)
        .args(args)
        .output()
        .unwrap()
}

fn ok(o: Output) -> String {
    assert!(
        o.status.success(),
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn init_run(dir: &Path, plan: &str, engineer: &str) {
    let plan_file = dir.with_extension("toml");
    std::fs::write(&plan_file, plan).unwrap();
    ok(ledger(
        dir,
        &["init", "--plan", plan_file.to_str().unwrap()],
    ));
    ok(ledger(dir, &["run", "--quiet", "--engineer", engineer]));
}

#[test]
fn every_builtin_engineer_runs_records_its_decisions_and_verifies() {
    let t = tempfile::tempdir().unwrap();
    for engineer in ["fixed", "random", "heuristic", "current", "base"] {
        let dir = t.path().join(engineer);
        init_run(&dir, TINY, engineer);
        ok(ledger(&dir, &["verify"]));
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
            let context = String::from_utf8(l.blob(&d.context).unwrap()).unwrap();
            assert!(
                context.contains("Failure breakdown on the validation set"),
                "{engineer}: context lacks evidence"
            );
        }
        if engineer == "current" || engineer == "base" {
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

fn param_hashes(dir: &Path) -> Vec<Hash> {
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
                EventBody::EngineerDecision(d) => {
                    Some(String::from_utf8(l.blob(&d.context).unwrap()).unwrap())
                }
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
    let msg = ok(ledger(
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
        (PolicyKind::Grid, 3, "current")
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
/// built-in engineer (here the learnability probe, `current` on a grid plan) no longer
/// sees it, not only an LLM that reads the text.
#[test]
fn switching_failure_breakdown_off_takes_the_evidence_from_builtin_engineers() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("l");
    let plan_file = t.path().join("tiny.toml");
    // Four sizes, so the probe must choose which two the evidence implicates.
    let plan = format!(
        "{TINY}\n[initial_config.sizes.5]\ndata_ratio = 0.5\nhole_ratio = 0.1\nwait_ratio = 0.2\n[initial_config.sizes.6]\ndata_ratio = 0.5\nhole_ratio = 0.1\nwait_ratio = 0.2\n"
    );
    std::fs::write(&plan_file, plan).unwrap();
    ok(ledger(
        &dir,
        &["init", "--plan", plan_file.to_str().unwrap()],
    ));
    ok(ledger(&dir, &["run", "--quiet", "--stages", "1"]));
    let mut l = Ledger::open(&dir).unwrap();
    let state = l.projection("main").unwrap();
    let p = mapf_ledger::stage::Pipeline::new(&mut l, None).unwrap();
    let on = p
        .context(&state, 1, state.initial_config.clone().unwrap())
        .unwrap();
    assert!(!on.failures.sizes.is_empty());
    let mut off = on.clone();
    off.modules.failure_breakdown = false;
    let off = off.without_switched_off_modules();
    assert!(
        off.failures.sizes.is_empty(),
        "the struct still holds the failures"
    );
    assert!(!off.render().contains("Failure breakdown"));
    let decide = |ctx| {
        let mut e = mapf_ledger::engineer::build("current", &p, &state).unwrap();
        e.decide(ctx)
    };
    let (a, b) = (decide(&on), decide(&off));
    // The probe's evidence (which sizes it implicates, by how many failures) comes from
    // the struct: without the breakdown it has no failure counts to cite.
    let evidence = |r: &str| r.split(". Probed").next().unwrap_or("").to_string();
    assert_ne!(evidence(&a.rationale), evidence(&b.rationale));
    assert!(
        b.rationale.contains("0 of 0 validation plans failed"),
        "{}",
        b.rationale
    );
}
