//! Library-level tests of the ledger store: create/open, append, blobs, forks, refs,
//! lookups, the one-writer lock, torn tails, and the trajectory packing budget.
use mapf_ledger::env::config::GeneratorConfig;
use mapf_ledger::env::simulate::FailureKind;
use mapf_ledger::ledger::event::*;
use mapf_ledger::ledger::{Hash, Ledger, LedgerError, Meta, Resolved};
use std::io::Write;

const PLAN: &str = include_str!("../ledgers/demo.toml");

fn step(i: u64) -> EventBody {
    EventBody::GradientStep(GradientStep {
        step: i,
        params: Hash::of_blob(&i.to_le_bytes()),
        loss: (i as f64 * 0.5).to_bits(),
        policy_loss: 1,
        kl: 2,
        entropy: 3,
        grad_norm: 0.1f64.to_bits(),
        reward_mean: 4,
    })
}

fn steps(range: std::ops::Range<u64>, stage: u32) -> Vec<(EventBody, u32, Meta)> {
    range.map(|i| (step(i), stage, Meta::default())).collect()
}

#[test]
fn create_append_reopen_and_walk_history() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("l");
    let genesis;
    let hs;
    {
        let mut l = Ledger::create(&d, PLAN.as_bytes()).unwrap();
        genesis = l.head("main").unwrap();
        let g = l.event(&genesis).unwrap();
        let EventBody::Genesis(gb) = &g.body else {
            panic!("not genesis: {g:?}")
        };
        assert_eq!(
            l.blob(&gb.plan_blob).unwrap(),
            PLAN.as_bytes(),
            "plan bytes stored exactly"
        );
        assert_eq!(gb.seed, 7);
        hs = l.append("main", steps(0..10, 1)).unwrap();
        assert_eq!(hs.len(), 10);
        assert_eq!(l.head("main").unwrap(), hs[9]);
    }
    let l = Ledger::open_read_only(&d).unwrap();
    assert_eq!(l.head("main").unwrap(), hs[9]);
    let hist = l.history("main").unwrap();
    assert_eq!(hist.len(), 11);
    assert_eq!(hist[0].0, genesis);
    for w in hist.windows(2) {
        assert_eq!(w[1].1.parent, Some(w[0].0), "parent links chain the branch");
    }
    assert_eq!(hist[5].1.body, step(4));
    // Ids are content hashes: recomputing one from the event gives the same id.
    let enc = mapf_ledger::ledger::event::encode_event(&hist[3].1);
    assert_eq!(Hash::of_event(&enc), hist[3].0);
    assert!(l
        .verify(&mapf_ledger::train::TrainState::referenced_blobs)
        .ok());
}

#[test]
fn identical_histories_hash_identically_and_metadata_is_not_hashed() {
    let dir = tempfile::tempdir().unwrap();
    let mut heads = Vec::new();
    for (k, meta) in [Meta::default(), Meta::now()].into_iter().enumerate() {
        let mut l = Ledger::create(&dir.path().join(format!("l{k}")), PLAN.as_bytes()).unwrap();
        let items = (0..5).map(|i| (step(i), 1, meta.clone())).collect();
        heads.push(*l.append("main", items).unwrap().last().unwrap());
    }
    assert_eq!(heads[0], heads[1]);
}

#[test]
fn blobs_small_and_large_round_trip_once() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("l");
    let mut l = Ledger::create(&d, PLAN.as_bytes()).unwrap();
    let small = b"tiny".to_vec();
    let large: Vec<u8> = (0..100_000u32).map(|i| (i % 253) as u8).collect();
    let hs = l.put_blob(&small).unwrap();
    let hl = l.put_blob(&large).unwrap();
    assert_eq!(l.put_blob(&large).unwrap(), hl, "stored once by hash");
    assert_eq!(l.blob(&hs).unwrap(), small);
    assert_eq!(l.blob(&hl).unwrap(), large);
    let hex = hl.to_hex();
    assert!(
        d.join("blobs").join(&hex[..2]).join(&hex[2..]).is_file(),
        "large blob is a file named by hash"
    );
    assert!(matches!(
        l.blob(&Hash::of_blob(b"absent")),
        Err(LedgerError::Store(
            ledger_store::StoreError::MissingBlob { .. }
        ))
    ));
    // An event may not reference a blob that is not stored.
    let missing = Hash::of_blob(b"nope");
    let ev = EventBody::CheckpointSaved(CheckpointSaved {
        step: 1,
        blob: missing,
        params: missing,
    });
    assert!(matches!(
        l.append("main", vec![(ev, 1, Meta::default())]),
        Err(LedgerError::Store(
            ledger_store::StoreError::MissingBlob { .. }
        ))
    ));
    let ev = EventBody::CheckpointSaved(CheckpointSaved {
        step: 1,
        blob: hl,
        params: hl,
    });
    l.append("main", vec![(ev, 1, Meta::default())]).unwrap();
}

#[test]
fn fork_shares_prefix_and_branches_diverge() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = Ledger::create(&dir.path().join("l"), PLAN.as_bytes()).unwrap();
    let a = l.append("main", steps(0..5, 1)).unwrap();
    l.fork("alt", &a[2]).unwrap();
    assert!(matches!(
        l.fork("alt", &a[1]),
        Err(LedgerError::Store(
            ledger_store::StoreError::BranchExists { .. }
        ))
    ));
    assert!(matches!(
        l.fork("bad name", &a[1]),
        Err(LedgerError::Store(
            ledger_store::StoreError::BadBranchName { .. }
        ))
    ));
    assert!(matches!(
        l.fork("x", &Hash::of_blob(b"?")),
        Err(LedgerError::Store(
            ledger_store::StoreError::UnknownEvent { .. }
        ))
    ));
    let b = l.append("alt", steps(100..103, 2)).unwrap();
    assert_eq!(l.event(&b[0]).unwrap().parent, Some(a[2]));
    assert_eq!(l.head("main").unwrap(), a[4]);
    assert_eq!(l.history("alt").unwrap().len(), 1 + 3 + 3);
    let names: Vec<String> = l.branches().unwrap().into_iter().map(|b| b.0).collect();
    assert_eq!(names, ["alt", "main"]);
    // Projections of each branch see only their own history.
    assert_eq!(l.projection("alt").unwrap().events, 7);
    assert_eq!(l.projection("main").unwrap().events, 6);
    assert!(l
        .verify(&mapf_ledger::train::TrainState::referenced_blobs)
        .ok());
}

#[test]
fn resolve_prefix_branch_and_stage() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = Ledger::create(&dir.path().join("l"), PLAN.as_bytes()).unwrap();
    let a = l.append("main", steps(0..3, 1)).unwrap();
    let hex = a[1].to_hex();
    assert_eq!(l.resolve(&hex[..10]).unwrap(), Resolved::Event(a[1]));
    assert_eq!(
        l.resolve(&hex.to_uppercase()[..10]).unwrap(),
        Resolved::Event(a[1])
    );
    assert_eq!(
        l.resolve("main").unwrap(),
        Resolved::Branch {
            name: "main".into(),
            head: a[2]
        }
    );
    assert_eq!(
        l.resolve("main@stage1").unwrap(),
        Resolved::Stage {
            branch: "main".into(),
            stage: 1
        }
    );
    assert_eq!(
        l.resolve("main@stage0").unwrap(),
        Resolved::Stage {
            branch: "main".into(),
            stage: 0
        }
    );
    assert!(l.resolve("nope@stage1").is_err());
    assert!(l.resolve("zzzz").is_err());
}

#[test]
fn second_writer_gets_a_clear_error_naming_the_ledger() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("ledger-under-test");
    let _w = Ledger::create(&d, PLAN.as_bytes()).unwrap();
    let e = Ledger::open(&d)
        .err()
        .expect("must be refused while a writer holds the ledger");
    assert!(
        matches!(
            e,
            LedgerError::Store(ledger_store::StoreError::Locked { .. })
        ),
        "{e}"
    );
    assert!(e.to_string().contains(&d.display().to_string()), "{e}");
    // Readers never wait for the writer.
    let r = Ledger::open_read_only(&d).unwrap();
    assert_eq!(r.head("main").unwrap(), _w.head("main").unwrap());
    drop(_w);
    Ledger::open(&d).unwrap();
}

#[test]
fn torn_tail_beyond_the_committed_length_is_ignored_then_cut() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("l");
    let head = {
        let mut l = Ledger::create(&d, PLAN.as_bytes()).unwrap();
        *l.append("main", steps(0..4, 1)).unwrap().last().unwrap()
    };
    let pack = d.join("packs/pack-00000001.pack");
    let len = std::fs::metadata(&pack).unwrap().len();
    // A half-written frame from a crashed batch.
    std::fs::OpenOptions::new()
        .append(true)
        .open(&pack)
        .unwrap()
        .write_all(&[1, 200, 0, 0, 0, 9, 9])
        .unwrap();
    {
        let l = Ledger::open_read_only(&d).unwrap();
        assert_eq!(l.head("main").unwrap(), head);
        assert!(
            l.verify(&mapf_ledger::train::TrainState::referenced_blobs)
                .ok(),
            "{:?}",
            l.verify(&mapf_ledger::train::TrainState::referenced_blobs)
                .problems
        );
    }
    let mut l = Ledger::open(&d).unwrap();
    assert_eq!(
        std::fs::metadata(&pack).unwrap().len(),
        len,
        "writer cut the tail"
    );
    l.append("main", steps(4..6, 1)).unwrap();
    assert!(l
        .verify(&mapf_ledger::train::TrainState::referenced_blobs)
        .ok());
}

fn trajectory_batch(instances: &[Hash], group: usize, seed: u64) -> TrajectoryBatch {
    let mut trajectories = Vec::new();
    for (i, _) in instances.iter().enumerate() {
        for g in 0..group {
            let x = (i * 131 + g * 17 + seed as usize) as u32;
            let valid = x % 3 != 0;
            trajectories.push(Trajectory {
                instance: i as u32,
                // 2 agents x ~12 moves, packed 2 moves per byte.
                plan: (0..12).map(|k| ((x + k) % 251) as u8).collect(),
                valid,
                optimal: valid && x % 2 == 0,
                failure: if valid {
                    None
                } else {
                    Some(FailureKind::VertexConflict)
                },
                cost: if valid { 10 + x % 7 } else { 0 },
                optimal_cost: 10,
                reward_bits: if valid {
                    1.0f32.to_bits()
                } else {
                    (-0.5f32).to_bits()
                },
            });
        }
    }
    TrajectoryBatch {
        step: seed,
        instances: instances.to_vec(),
        trajectories,
    }
}

#[test]
fn trajectory_events_cost_at_most_64_stored_bytes_each() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("l");
    let mut l = Ledger::create(&d, PLAN.as_bytes()).unwrap();
    let instances: Vec<Hash> = (0..64u32)
        .map(|i| l.put_blob(format!("instance {i}").as_bytes()).unwrap())
        .collect();
    let pack = d.join("packs/pack-00000001.pack");
    let before = std::fs::metadata(&pack).unwrap().len();
    let mut n = 0;
    for s in 0..8 {
        let b = trajectory_batch(&instances, 8, s);
        let hashes = b.trajectory_hashes().unwrap();
        assert_eq!(hashes.len(), 512);
        let mut uniq = hashes.clone();
        uniq.sort();
        uniq.dedup();
        assert_eq!(
            uniq.len(),
            hashes.len(),
            "every trajectory has its own content hash"
        );
        n += b.trajectories.len();
        l.append("main", vec![(EventBody::Trajectories(b), 1, Meta::now())])
            .unwrap();
    }
    let bytes = std::fs::metadata(&pack).unwrap().len() - before;
    let per = bytes as f64 / n as f64;
    assert!(per <= 64.0, "{per:.1} stored bytes per trajectory");
    // A batch naming a missing instance index is refused.
    let mut bad = trajectory_batch(&instances[..1], 1, 0);
    bad.trajectories[0].instance = 5;
    assert!(matches!(
        l.append(
            "main",
            vec![(EventBody::Trajectories(bad), 1, Meta::default())]
        ),
        Err(LedgerError::Store(ledger_store::StoreError::Invalid(_)))
    ));
}

#[test]
fn every_event_kind_round_trips_through_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = Ledger::create(&dir.path().join("l"), PLAN.as_bytes()).unwrap();
    let blob = l.put_blob(b"context").unwrap();
    let cfg = GeneratorConfig::uniform(2, 3..=5, 0.1, 0.2);
    let bodies = vec![
        EventBody::EngineerRegistered(EngineerRegistered {
            name: "llm".into(),
            kind: EngineerKind::Llm {
                url: "http://x".into(),
                model: "m".into(),
                tokenizer: Some(blob),
                api_key_env: None,
                max_context: None,
            },
            context_modules: vec!["history".into()],
        }),
        EventBody::StageStarted(StageStarted {
            engineer: "llm".into(),
            from_checkpoint: None,
            seed: blob,
        }),
        EventBody::EngineerDecision(EngineerDecision {
            engineer: "llm".into(),
            context: blob,
            prompt: Some(blob),
            reply: Some(blob),
            proposed: ProposedConfig::Json("{\"agents\": 9}".into()),
            applied: cfg.clone(),
            clips: vec![mapf_ledger::env::config::Clip {
                field: "agents".into(),
                proposed: "9".into(),
                applied: "8".into(),
                reason: "range".into(),
            }],
            refused: vec![],
            rationale: "more agents".into(),
            status: DecisionStatus::Clipped,
        }),
        EventBody::InstancesGenerated(InstancesGenerated {
            split: "train".into(),
            config: blob,
            instances: vec![blob],
        }),
        EventBody::Trajectories(trajectory_batch(&[blob], 2, 1)),
        step(1),
        EventBody::CheckpointSaved(CheckpointSaved {
            step: 1,
            blob,
            params: blob,
        }),
        EventBody::Evaluation(Evaluation {
            suite: "val".into(),
            checkpoint: Some(blob),
            cells: vec![EvalCell {
                agents: 2,
                size: 3,
                total: 10,
                valid: 8,
                optimal: 5,
            }],
        }),
        EventBody::FailureBreakdown(FailureBreakdown {
            suite: "val".into(),
            sizes: vec![SizeFailures {
                size: 3,
                total: 2,
                counts: vec![(FailureKind::Hole, 2)],
                examples: vec!["rr\ndd".into()],
            }],
        }),
        EventBody::StageCompleted(StageCompleted {
            checkpoint: Some(blob),
            steps: 1,
        }),
        EventBody::BranchForked(BranchForked {
            from_branch: "main".into(),
            at: blob,
            engineer: "base".into(),
            replicate: 0,
        }),
        EventBody::ReplayVerified(ReplayVerified {
            replayed_stage: 1,
            events: 9,
            head: blob,
            mismatch: None,
        }),
    ];
    let items = bodies
        .iter()
        .cloned()
        .map(|b| (b, 1, Meta::now()))
        .collect();
    let hs = l.append("main", items).unwrap();
    for (h, b) in hs.iter().zip(&bodies) {
        assert_eq!(&l.event(h).unwrap().body, b);
    }
    let s = l.projection("main").unwrap();
    let st = s.stage(1).unwrap();
    assert_eq!(st.config.as_ref(), Some(&cfg));
    assert_eq!(st.decision_status.as_deref(), Some("clipped"));
    assert_eq!(st.clipped_fields, ["agents"]);
    assert_eq!(st.evaluations["val"][0].valid, 8);
    assert!(st.completed.is_some());
    assert!(l
        .verify(&mapf_ledger::train::TrainState::referenced_blobs)
        .ok());
    assert!(l
        .append("main", vec![(step(9), 1, Meta::default())])
        .is_ok());
}
