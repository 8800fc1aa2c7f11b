//! Projections are pure folds: for random event sequences appended in random batches
//! to random branches (with forks), the incrementally maintained state equals the one
//! `rebuild` recomputes from the log and a plain fold of the branch's history.
use crate::common;

use mapf_ledger::env::config::GeneratorConfig;
use mapf_ledger::env::simulate::FailureKind;
use mapf_ledger::ledger::event::*;
use mapf_ledger::ledger::projection;
use mapf_ledger::ledger::{Hash, Ledger, Meta};
use proptest::prelude::*;

const PLAN: &str = include_str!("../ledgers/demo.toml");

/// One event of kind `kind % 20` (every kind but genesis, which every generated ledger
/// starts with; gradient steps twice as often), its fields drawn from `x`.
fn body(kind: u8, x: u32, blob: Hash) -> EventBody {
    match kind % 20 {
        19 => EventBody::OracleCandidate(OracleCandidate {
            index: x % 4,
            source: format!("e{}", x % 3),
            decision: match body(1, x, blob) {
                EventBody::EngineerDecision(d) => d,
                _ => unreachable!("kind 1 is a decision"),
            },
            same_as: (x % 3 == 0).then_some(0),
            validation: vec![],
            valid_sum: (x as f64 / 3.0).to_bits(),
            optimal_sum: 0f64.to_bits(),
            params: blob,
        }),
        10 => EventBody::EngineerRegistered(EngineerRegistered {
            name: format!("llm{}", x % 3),
            kind: if x % 2 == 0 {
                EngineerKind::Builtin
            } else {
                EngineerKind::Llm {
                    url: "http://127.0.0.1:9/v1".into(),
                    model: "m".into(),
                    tokenizer: Some(blob),
                    api_key_env: None,
                    max_context: Some(x % 9000),
                }
            },
            context_modules: vec!["guideline".into(), "history".into()],
        }),
        11 => EventBody::BranchForked(BranchForked {
            from_branch: "main".into(),
            at: blob,
            engineer: format!("e{}", x % 3),
            replicate: x % 4,
        }),
        12 => EventBody::ReplayVerified(ReplayVerified {
            replayed_stage: x % 3,
            events: x as u64,
            head: blob,
            mismatch: (x % 2 == 0).then(|| format!("stage {} step 3", x % 3)),
        }),
        13 => EventBody::EngineerChosen(EngineerChosen {
            engineer: format!("e{}", x % 3),
            previous: format!("e{}", (x + 1) % 3),
        }),
        14 => EventBody::GrpoStats(GrpoStats {
            step: x as u64,
            samples: 16,
            groups: 2,
            signal_groups: x % 3,
            skipped_groups: 2 - (x % 3).min(2),
            valid: x % 17,
            optimal: x % 5,
            reward_mean: (x as f64 / 7.0).to_bits(),
            reward_std: 0.5f64.to_bits(),
            kl: 0.01f64.to_bits(),
            clip_fraction: 0.0f64.to_bits(),
            tokens: 300 + x as u64 % 50,
        }),
        15 => EventBody::EvaluationOutcomes(EvaluationOutcomes {
            suite: if x % 2 == 0 {
                "val".into()
            } else {
                "test".into()
            },
            suite_hash: blob,
            checkpoint: None,
            cells: vec![(2, 3, 2)],
            wait_ratios: vec![],
            outcomes: vec![(x % 3) as u8, (x / 3 % 3) as u8],
        }),
        18 => EventBody::EngineerTraining(EngineerTraining {
            step: x as u64,
            contexts: vec![blob],
            context_ids: vec!["stage1".into()],
            replies: (0..2)
                .map(|i| EngineerReply {
                    context: 0,
                    reply: blob,
                    parsed: (x + i) % 2 == 0,
                    legal: (x + i) % 3 == 0,
                    claims: x % 4,
                    grounded: x % 5 == 0,
                    learnability: ((x + i) % 2 == 0).then(|| (x as f64 / 9.0).to_bits()),
                    pass_rate: None,
                    reward: (x as f64 / 11.0 + i as f64).to_bits(),
                })
                .collect(),
            signal_groups: x % 2,
            tokens: x as u64,
            params: blob,
            loss: 0,
            kl: 0,
            clip_fraction: 0,
            grad_norm: 1,
        }),
        17 => EventBody::EvaluationPlans(EvaluationPlans {
            suite: "test".into(),
            suite_hash: blob,
            checkpoint: None,
            items: 2,
            plans: blob,
        }),
        16 => EventBody::GradientStep(GradientStep {
            step: x as u64,
            params: blob,
            loss: x as u64,
            policy_loss: 0,
            kl: 0,
            entropy: 0,
            grad_norm: 1,
            reward_mean: 0,
        }),
        0 => EventBody::StageStarted(StageStarted {
            engineer: format!("e{}", x % 3),
            from_checkpoint: None,
            seed: blob,
        }),
        1 => EventBody::EngineerDecision(EngineerDecision {
            engineer: format!("e{}", x % 3),
            context: blob,
            prompt: None,
            reply: None,
            proposed: ProposedConfig::None,
            applied: GeneratorConfig::uniform(
                1 + (x % 3) as usize,
                3..=4 + (x % 3) as usize,
                0.1,
                0.0,
            ),
            clips: vec![],
            refused: vec![],
            rationale: String::new(),
            status: if x % 4 == 0 {
                DecisionStatus::Rejected {
                    reason: "bad".into(),
                }
            } else {
                DecisionStatus::Accepted
            },
        }),
        2 => EventBody::InstancesGenerated(InstancesGenerated {
            split: "train".into(),
            config: blob,
            instances: vec![blob; (x % 4) as usize],
        }),
        3 => EventBody::Trajectories(TrajectoryBatch {
            step: x as u64,
            instances: vec![blob],
            trajectories: (0..x % 5)
                .map(|i| Trajectory {
                    instance: 0,
                    plan: vec![i as u8],
                    valid: i % 2 == 0,
                    optimal: i % 4 == 0,
                    failure: (i % 2 == 1).then_some(FailureKind::Hole),
                    cost: i,
                    optimal_cost: 1,
                    reward_bits: i,
                })
                .collect(),
        }),
        4 => EventBody::GradientStep(GradientStep {
            step: x as u64,
            params: blob,
            loss: x as u64,
            policy_loss: 0,
            kl: 0,
            entropy: 0,
            grad_norm: 1,
            reward_mean: 0,
        }),
        6 => EventBody::CheckpointSaved(CheckpointSaved {
            step: x as u64,
            blob,
            params: blob,
        }),
        7 => EventBody::Evaluation(Evaluation {
            suite: if x % 2 == 0 {
                "val".into()
            } else {
                "test".into()
            },
            checkpoint: None,
            cells: vec![EvalCell {
                agents: 2,
                size: 3 + x % 3,
                total: 10,
                valid: x % 11,
                optimal: x % 5,
            }],
        }),
        8 => EventBody::FailureBreakdown(FailureBreakdown {
            suite: "val".into(),
            sizes: vec![],
        }),
        5 => EventBody::StageCompleted(StageCompleted {
            checkpoint: None,
            steps: x as u64,
        }),
        _ => EventBody::StageCompleted(StageCompleted {
            checkpoint: Some(blob),
            steps: x as u64,
        }),
    }
}

/// The scenarios draw every kind of event there is (genesis starts each ledger).
#[test]
fn the_generator_covers_every_event_kind() {
    let blob = Hash::of_blob(b"x");
    let drawn: std::collections::BTreeSet<&str> =
        (0..=255u8).map(|k| body(k, 7, blob).kind()).collect();
    let want: std::collections::BTreeSet<String> = common::event_kinds()
        .into_iter()
        .filter(|k| k != "genesis")
        .collect();
    let want: std::collections::BTreeSet<&str> = want.iter().map(String::as_str).collect();
    assert_eq!(
        drawn, want,
        "a kind the projection property test never generates"
    );
}

/// One step of a scenario: append a batch to a branch, or fork a branch.
#[derive(Debug, Clone)]
enum Op {
    Append {
        branch: u8,
        events: Vec<(u8, u32, u8)>,
    },
    Fork {
        from: u8,
        back: u8,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..3, proptest::collection::vec((any::<u8>(), any::<u32>(), 0u8..4), 1..12))
            .prop_map(|(branch, events)| Op::Append { branch, events }),
        1 => (0u8..3, 0u8..6).prop_map(|(from, back)| Op::Fork { from, back }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
    #[test]
    fn incremental_equals_rebuilt(ops in proptest::collection::vec(op(), 1..12)) {
        let dir = tempfile::tempdir().unwrap();
        let mut l = Ledger::create(&dir.path().join("l"), PLAN.as_bytes()).unwrap();
        let blob = l.put_blob(b"x").unwrap();
        let mut branches = vec!["main".to_string()];
        for op in ops {
            match op {
                Op::Append { branch, events } => {
                    let b = branches[branch as usize % branches.len()].clone();
                    let items = events.into_iter().map(|(k, x, st)| (body(k, x, blob), st as u32 + 1, Meta::default())).collect();
                    l.append(&b, items).unwrap();
                }
                Op::Fork { from, back } => {
                    let b = &branches[from as usize % branches.len()];
                    let anc = l.ancestry(&l.head(b).unwrap()).unwrap();
                    let at = anc[(back as usize).min(anc.len() - 1)];
                    let name = format!("f{}", branches.len());
                    l.fork(&name, &at).unwrap();
                    branches.push(name);
                }
            }
        }
        let mut incremental = Vec::new();
        for b in &branches {
            incremental.push(l.projection(b).unwrap());
        }
        l.rebuild().unwrap();
        for (b, inc) in branches.iter().zip(&incremental) {
            let head = l.head(b).unwrap();
            let rebuilt = l.cached_projection(&head).expect("rebuild cached every head");
            prop_assert_eq!(&rebuilt, inc);
            let hist = l.history(b).unwrap();
            let folded = projection::fold(hist.iter().map(|(h, e)| (h, e)));
            prop_assert_eq!(&folded, inc);
        }
        // A reopened ledger (cache only in sled) answers the same.
        drop(l);
        let mut l = Ledger::open(&dir.path().join("l")).unwrap();
        for (b, inc) in branches.iter().zip(&incremental) {
            prop_assert_eq!(&l.projection(b).unwrap(), inc);
        }
    }
}
