//! Engineer RL (`[engineer.train]`, or a spec ending in `+engineer-rl`): after a stage's
//! plan steps the policy takes GRPO steps on engineer prompts, each recorded as an
//! `engineer_training` event whose first context is the very context the stage's
//! engineer read; an update changes the parameters only when a group's rewards differ;
//! replay recomputes every reply, reward and update; audit and TensorBoard report it; a plan or spec
//! that asks for it without a language model is refused, naming the key.
use crate::common;

use common::{fails, ledger, ok};
use mapf_ledger::ledger::{EventBody, Hash, Ledger};

const PLAN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/plans/engineer-rl.toml");

#[test]
fn engineer_rl_is_recorded_replayed_and_audited() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("l");
    ok(&ledger(&dir, &["init", "--plan", PLAN]));
    ok(&ledger(&dir, &["run", "--quiet"]));

    let l = Ledger::open_read_only(&dir).unwrap();
    let history = l.history("main").unwrap();
    let decision_context = history
        .iter()
        .find_map(|(_, e)| match &e.body {
            EventBody::EngineerDecision(d) if e.stage == 1 => Some(d.context),
            _ => None,
        })
        .expect("stage 1's decision");
    // The parameters before engineer RL: the plan steps' last update.
    let mut params: Option<Hash> = None;
    let mut steps = Vec::new();
    for (_, e) in &history {
        match &e.body {
            EventBody::GradientStep(g) => params = Some(g.params),
            EventBody::EngineerTraining(t) => {
                assert_eq!(e.stage, 1);
                steps.push((params, t.clone()));
                params = Some(t.params);
            }
            _ => {}
        }
    }
    assert_eq!(steps.len(), 2, "[engineer.train] steps = 2");
    let mut updated = 0;
    for (before, t) in &steps {
        assert_eq!(t.contexts.len(), 2);
        assert_eq!(t.context_ids[0], "stage1");
        assert!(t.context_ids[1].starts_with("synthetic/"));
        assert_eq!(
            t.contexts[0], decision_context,
            "the stage's own context first"
        );
        assert_eq!(t.replies.len(), 8, "2 contexts x group_size 4");
        for r in &t.replies {
            let text = l.blob(&r.reply).unwrap();
            assert!(!text.is_empty());
            // A reply's learnability is probed exactly when it proposed something.
            assert_eq!(r.learnability.is_some(), r.parsed);
        }
        if t.signal_groups == 0 {
            assert_eq!(Some(t.params), *before, "no signal, no update");
        } else {
            assert_ne!(Some(t.params), *before);
            updated += 1;
        }
    }
    assert!(updated > 0, "the shipped base's replies differ in reward");
    // The stage's checkpoint is the model after engineer RL.
    let state = l.state_at(&l.head("main").unwrap()).unwrap();
    assert_eq!(
        state.stage(1).unwrap().checkpoint.unwrap().1,
        steps.last().unwrap().1.params
    );
    assert_eq!(state.stage(1).unwrap().engineer_rl.steps, 2);
    drop(l);

    let audit = ok(&ledger(&dir, &["audit", "--branch", "main"]));
    assert!(
        audit.contains("engineer RL: 2 steps, 16 replies"),
        "{audit}"
    );
    // TensorBoard plots it: one point per step at its global step.
    let tb = t.path().join("tb");
    ok(&ledger(
        &dir,
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
    let series: Vec<(i64, f32)> = scalars
        .iter()
        .filter(|s| s.tag == "engineer/reward_mean")
        .map(|s| (s.step, s.value))
        .collect();
    let want: Vec<(i64, f32)> = steps
        .iter()
        .map(|(_, t)| {
            let n = t.replies.len() as f64;
            let mean = t
                .replies
                .iter()
                .map(|r| f64::from_bits(r.reward))
                .sum::<f64>()
                / n;
            (t.step as i64, mean as f32)
        })
        .collect();
    assert_eq!(series, want);
    let replay = ok(&ledger(&dir, &["replay", "--verify", "--stage", "1"]));
    assert!(replay.contains("every hash matches"), "{replay}");
}

#[test]
fn engineer_rl_needs_a_language_model() {
    let t = tempfile::tempdir().unwrap();
    let plan = t.path().join("grid.toml");
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/plans/tiny.toml"
    ))
    .unwrap();
    std::fs::write(&plan, format!("{text}\n[engineer.train]\nenabled = true\n")).unwrap();
    let o = ledger(
        &t.path().join("l"),
        &["init", "--plan", plan.to_str().unwrap()],
    );
    fails(&o, 2, "engineer.train");
    assert!(!t.path().join("l").exists(), "nothing created");
}
