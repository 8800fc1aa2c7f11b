//! `current` and `base` on an `lm` plan: the checkpoint writes the proposal itself.
//! A decision carries the prompt and the generated reply as blobs (an unparseable
//! reply is a recorded rejection); `current` and `base` answer differently once the two
//! checkpoints differ; replay regenerates the replies bit for bit.
use crate::common;

use common::{fork_and_run, ledger, ok};
use mapf_ledger::ledger::{EventBody, Ledger};

const PLAN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/plans/lm-engineer.toml");

/// (stage, prompt text, reply text, rationale) of every decision on a branch.
fn decisions(dir: &std::path::Path, branch: &str) -> Vec<(u32, String, String, String)> {
    let l = Ledger::open_read_only(dir).unwrap();
    l.history(branch)
        .unwrap()
        .into_iter()
        .filter_map(|(_, e)| match e.body {
            EventBody::EngineerDecision(d) => Some((e.stage, d)),
            _ => None,
        })
        .map(|(stage, d)| {
            let text = |h: Option<mapf_ledger::ledger::Hash>| {
                String::from_utf8_lossy(&l.blob(&h.expect("a blob")).unwrap()).into_owned()
            };
            (stage, text(d.prompt), text(d.reply), d.rationale)
        })
        .collect()
}

#[test]
fn the_checkpoint_writes_the_proposal_and_base_differs_from_current() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("l");
    ok(&ledger(&dir, &["init", "--plan", PLAN]));
    ok(&ledger(&dir, &["run", "--quiet"]));
    let main = decisions(&dir, "main");
    assert_eq!(main.iter().map(|d| d.0).collect::<Vec<_>>(), vec![1, 2]);
    for (stage, prompt, reply, rationale) in &main {
        // The same prompt an HTTP engineer reads: context modules and answer format.
        assert!(
            prompt.contains("[system]") && prompt.contains("## Answer"),
            "stage {stage}: {prompt}"
        );
        assert!(prompt.contains("## Failure breakdown"), "stage {stage}");
        assert!(!reply.is_empty(), "stage {stage}: empty reply");
        assert!(
            rationale.contains("current checkpoint wrote"),
            "stage {stage}: {rationale}"
        );
    }
    // Fork at stage 2 with the base model as engineer: stage 1's checkpoint has trained
    // away from stage 0, so the base model answers the same evidence differently.
    fork_and_run(&dir, "stage2", "base", "b");
    let b = decisions(&dir, "b");
    assert_eq!(b[0].1, main[0].1, "the fork keeps stage 1's decision");
    let (cur, base) = (&main[1], &b[1]);
    assert!(base.3.contains("base checkpoint wrote"), "{}", base.3);
    assert_ne!(cur.2, base.2, "current and base wrote the same reply");
    // The ablation switch reaches the prompt the model reads: a fork whose engineer is
    // `current:-failure_breakdown` gets a prompt without the breakdown.
    fork_and_run(&dir, "stage2", "current:-failure_breakdown", "ablated");
    let ablated = decisions(&dir, "ablated");
    assert!(cur.1.contains("## Failure breakdown"), "{}", cur.1);
    assert!(
        !ablated[1].1.contains("Failure breakdown"),
        "{}",
        ablated[1].1
    );
    assert!(ablated[1].1.contains("## Summary"), "{}", ablated[1].1);
    // Replay regenerates every reply: the recomputed hashes match.
    let out = ok(&ledger(&dir, &["replay", "--branch", "b", "--verify"]));
    assert!(out.contains("every hash matches"), "{out}");
}
