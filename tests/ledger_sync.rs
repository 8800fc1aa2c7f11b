//! Bundles and fetch: a real ledger's prefix bundled, a worker ledger started from it,
//! a branch run there and fetched back with the same head a local run gives; fetch is
//! idempotent and order-independent (property test over generated ledgers); a diverged
//! branch is refused unless namespaced; a corrupted bundle is refused naming the object.
use crate::common;

use common::{fails, fork_and_run, heads, ledger, ok, tiny_ledger};
use mapf_ledger::ledger::bundle::Bundle;
use mapf_ledger::ledger::event::*;
use mapf_ledger::ledger::{Hash, Ledger, LedgerError, Meta};
use proptest::prelude::*;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

const PLAN: &str = include_str!("plans/tiny.toml");

fn head_of(d: &Path, branch: &str) -> String {
    heads(d).into_iter().find(|b| b.0 == branch).unwrap().1
}

#[test]
fn bundle_init_run_fetch_round_trip() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tiny_ledger(tmp.path());

    // The prefix a fork at stage 2 keeps: stages 0 and 1.
    let b = tmp.path().join("prefix.bundle");
    let said = ok(&ledger(
        &d,
        &[
            "bundle",
            "--branch",
            "main@stage1",
            "--out",
            b.to_str().unwrap(),
        ],
    ));
    assert!(said.contains("events") && said.contains("blobs"), "{said}");

    // A worker starts from it, forks and runs; its main is the prefix.
    let w = tmp.path().join("worker");
    ok(&ledger(&w, &["init", "--from-bundle", b.to_str().unwrap()]));
    ok(&ledger(&w, &["verify"]));
    fork_and_run(&w, "stage2", "random", "x");

    // The same fork run in the origin itself ends on the same head.
    fork_and_run(&d, "stage2", "random", "y");
    assert_eq!(
        head_of(&w, "x"),
        head_of(&d, "y"),
        "a worker reproduces a local run"
    );

    // Fetch the worker back: x arrives, main stays ahead of the worker's prefix.
    let before_main = head_of(&d, "main");
    let said = ok(&ledger(&d, &["fetch", w.to_str().unwrap()]));
    assert!(said.contains("x ->"), "{said}");
    assert_eq!(head_of(&d, "x"), head_of(&w, "x"));
    assert_eq!(
        head_of(&d, "main"),
        before_main,
        "main was ahead: unchanged"
    );
    // x and y are the same history (a fork's events do not name the branch), so
    // fetching x stored no event twice: it only added a ref.
    assert!(
        said.starts_with("fetched") && said.contains(": 0 events"),
        "{said}"
    );
    ok(&ledger(&d, &["verify"]));

    // Idempotent: again, nothing.
    let again = ok(&ledger(&d, &["fetch", w.to_str().unwrap()]));
    assert!(
        again.contains("0 events and 0 blobs added; 0 branches updated"),
        "{again}"
    );

    // A bundle of a whole branch fetches the same way, and says what init will.
    let wb = tmp.path().join("x.bundle");
    let wrote = ok(&ledger(
        &w,
        &["bundle", "--branch", "x", "--out", wb.to_str().unwrap()],
    ));
    let fresh = tmp.path().join("fresh");
    let made = ok(&ledger(
        &fresh,
        &["init", "--from-bundle", wb.to_str().unwrap()],
    ));
    let count = |text: &str, what: &str| -> u64 {
        let words: Vec<&str> = text.split_whitespace().collect();
        let i = words
            .iter()
            .position(|w| w.trim_end_matches([',', ';']) == what)
            .unwrap_or_else(|| panic!("no {what} in {text}"));
        words[i - 1].parse().unwrap()
    };
    assert_eq!(
        count(&wrote, "blobs"),
        count(&made, "blobs"),
        "{wrote}\n{made}"
    );
    assert_eq!(
        count(&wrote, "events"),
        count(&made, "events") + 1,
        "{wrote}\n{made}"
    );
    assert_eq!(head_of(&fresh, "x"), head_of(&w, "x"));
    // The bundle held x alone: main is where x left it (its fork point), not a lone
    // genesis.
    let fork_point = Ledger::open_read_only(&w)
        .unwrap()
        .history("x")
        .unwrap()
        .into_iter()
        .find_map(|(_, e)| match e.body {
            EventBody::BranchForked(f) => Some(f.at),
            _ => None,
        })
        .unwrap();
    assert_eq!(head_of(&fresh, "main"), fork_point.to_hex());
    ok(&ledger(&fresh, &["verify"]));
    // A file that is not a bundle is bad input (exit 2), not damage.
    let not = tmp.path().join("not.bundle");
    std::fs::write(&not, b"hello, I am a text file\n").unwrap();
    for args in [
        vec!["fetch", not.to_str().unwrap()],
        vec!["init", "--from-bundle", not.to_str().unwrap()],
    ] {
        let dir = if args[0] == "init" {
            tmp.path().join("n")
        } else {
            d.clone()
        };
        let o = ledger(&dir, &args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", common::text(&o));
        assert!(
            common::text(&o).contains("not a mapf-ledger bundle"),
            "{}",
            common::text(&o)
        );
    }
}

#[test]
fn diverged_branch_refused_unless_namespaced_and_corrupt_bundle_named() {
    let tmp = tempfile::tempdir().unwrap();
    let a = tmp.path().join("a");
    let b = tmp.path().join("b");
    for (d, k) in [(&a, 1), (&b, 2)] {
        let mut l = Ledger::create(d, PLAN.as_bytes()).unwrap();
        l.append("main", steps(k, 3)).unwrap();
    }
    let dest = tmp.path().join("dest");
    Ledger::create(&dest, PLAN.as_bytes()).unwrap();
    ok(&ledger(&dest, &["fetch", a.to_str().unwrap()]));
    let before = heads(&dest);
    fails(
        &ledger(&dest, &["fetch", b.to_str().unwrap()]),
        2,
        "branch `main` exists here with head",
    );
    assert_eq!(heads(&dest), before, "nothing changed");
    ok(&ledger(
        &dest,
        &["fetch", b.to_str().unwrap(), "--prefix", "b/"],
    ));
    assert_eq!(head_of(&dest, "b/main"), head_of(&b, "main"));
    fails(
        &ledger(&dest, &["fetch", b.to_str().unwrap(), "--prefix", "b"]),
        2,
        "ends with `/`",
    );

    // A corrupted bundle is refused, naming the object; nothing is written.
    let file = tmp.path().join("b.bundle");
    ok(&ledger(
        &b,
        &[
            "bundle",
            "--branch",
            "main",
            "--out",
            file.to_str().unwrap(),
        ],
    ));
    let mut bytes = std::fs::read(&file).unwrap();
    let n = bytes.len();
    bytes[n - 40] ^= 0x20; // inside the last event's record
    let bad = tmp.path().join("bad.bundle");
    std::fs::write(&bad, &bytes).unwrap();
    let fresh = tmp.path().join("fresh");
    fails(
        &ledger(&fresh, &["init", "--from-bundle", bad.to_str().unwrap()]),
        1,
        "bad.bundle: event",
    );
    assert!(!fresh.exists(), "no ledger made from a corrupt bundle");
    std::fs::write(&bad, &bytes[..n / 2]).unwrap();
    fails(
        &ledger(&dest, &["fetch", bad.to_str().unwrap()]),
        1,
        "truncated bundle",
    );
    assert_eq!(heads(&dest).len(), 2);
}

fn steps(seed: u64, n: u64) -> Vec<(EventBody, u32, Meta)> {
    (0..n)
        .map(|i| {
            (
                common::gradient_step(i, Hash::of_blob(&(seed * 1000 + i).to_le_bytes()), seed),
                1,
                Meta::now(),
            )
        })
        .collect()
}

/// A ledger with `main` extended by `main_steps` and branches `names[i]` forked from
/// main's genesis with `lens[i]` steps each, plus one blob-carrying event per branch.
fn source(dir: &Path, main_steps: u64, branches: &[(String, u64)]) -> PathBuf {
    let mut l = Ledger::create(dir, PLAN.as_bytes()).unwrap();
    let genesis = l.head("main").unwrap();
    l.append("main", steps(7, main_steps)).unwrap();
    for (name, len) in branches {
        l.fork(name, &genesis).unwrap();
        let blob = l.put_blob(name.as_bytes()).unwrap();
        let mut items = steps(name.len() as u64 * 31 + len, *len);
        items.push((
            EventBody::StageCompleted(StageCompleted {
                checkpoint: Some(blob),
                steps: *len,
            }),
            1,
            Meta::now(),
        ));
        l.append(name, items).unwrap();
    }
    dir.to_path_buf()
}

/// Everything a ledger holds: refs, event ids, blob ids.
fn contents(d: &Path) -> (Vec<(String, Hash)>, BTreeSet<Hash>, BTreeSet<Hash>) {
    let l = Ledger::open_read_only(d).unwrap();
    let refs = l.branches().unwrap();
    let mut events = BTreeSet::new();
    let mut blobs = BTreeSet::new();
    for (_, h) in &refs {
        for e in l.ancestry(h).unwrap() {
            for b in l.event(&e).unwrap().body.blobs() {
                blobs.insert(b);
            }
            events.insert(e);
        }
    }
    (refs, events, blobs)
}

fn fetch_dir(dest: &Path, src: &Path) -> mapf_ledger::ledger::bundle::FetchReport {
    let mut l = Ledger::open(dest).unwrap();
    let b = {
        let s = Ledger::open_read_only(src).unwrap();
        let refs = s.branches().unwrap();
        Bundle::collect(
            &s,
            &refs,
            &|h| l.contains_event(h),
            &|h| l.has_blob(h).unwrap(),
            &mapf_ledger::train::TrainState::referenced_blobs,
        )
        .unwrap()
    };
    l.fetch(&b, None).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    #[test]
    fn fetch_is_idempotent_and_order_independent(
        main_a in 0u64..4,
        main_extra in 0u64..4,
        a_branches in prop::collection::vec(1u64..5, 0..3),
        b_branches in prop::collection::vec(1u64..5, 0..3),
        shared in prop::option::of(1u64..4),
    ) {
        let tmp = tempfile::tempdir().unwrap();
        // A and B share a genesis; B's main continues A's (a fast-forward); their other
        // branches have distinct names, except `s`, which both hold at the same head.
        let mut ab: Vec<(String, u64)> = a_branches.iter().enumerate().map(|(i, n)| (format!("a{i}"), *n)).collect();
        let mut bb: Vec<(String, u64)> = b_branches.iter().enumerate().map(|(i, n)| (format!("b{i}"), *n)).collect();
        if let Some(n) = shared {
            ab.push(("s".into(), n));
            bb.push(("s".into(), n));
        }
        let a = source(&tmp.path().join("a"), main_a, &ab);
        let b = source(&tmp.path().join("b"), main_a, &bb);
        {
            let mut l = Ledger::open(&b).unwrap();
            l.append("main", steps(99, main_extra)).unwrap();
        }
        let one = tmp.path().join("one");
        let two = tmp.path().join("two");
        Ledger::create(&one, PLAN.as_bytes()).unwrap();
        Ledger::create(&two, PLAN.as_bytes()).unwrap();
        fetch_dir(&one, &a);
        fetch_dir(&one, &b);
        fetch_dir(&two, &b);
        fetch_dir(&two, &a);
        let c1 = contents(&one);
        prop_assert_eq!(&c1, &contents(&two));
        // Everything of both sources is there.
        let (ra, ea, ba) = contents(&a);
        let (rb, eb, bbl) = contents(&b);
        prop_assert!(ea.is_subset(&c1.1) && eb.is_subset(&c1.1));
        prop_assert!(ba.is_subset(&c1.2) && bbl.is_subset(&c1.2));
        for (n, h) in ra.iter().chain(&rb) {
            if n != "main" {
                prop_assert!(c1.0.contains(&(n.clone(), *h)));
            }
        }
        prop_assert!(c1.0.contains(&("main".to_string(), rb.iter().find(|r| r.0 == "main").unwrap().1)));
        // Idempotent: a second fetch adds nothing and moves nothing.
        let r = fetch_dir(&one, &a);
        prop_assert_eq!((r.events_added, r.blobs_added, r.refs_updated.len()), (0, 0, 0));
        let r = fetch_dir(&one, &b);
        prop_assert_eq!((r.events_added, r.blobs_added, r.refs_updated.len()), (0, 0, 0));
        prop_assert_eq!(c1, contents(&one));
    }
}

#[test]
fn fetch_refuses_another_experiment() {
    let tmp = tempfile::tempdir().unwrap();
    let a = tmp.path().join("a");
    Ledger::create(&a, PLAN.as_bytes()).unwrap();
    let other = PLAN.replace("seed = 3", "seed = 4");
    let b = tmp.path().join("b");
    Ledger::create(&b, other.as_bytes()).unwrap();
    let file = tmp.path().join("b.bundle");
    {
        let l = Ledger::open_read_only(&b).unwrap();
        let refs = l.branches().unwrap();
        Bundle::collect(&l, &refs, &|_| false, &|_| false, &|_| vec![])
            .unwrap()
            .write(&file)
            .unwrap();
    }
    let mut l = Ledger::open(&a).unwrap();
    let e = l.fetch(&Bundle::read(&file).unwrap(), None).unwrap_err();
    assert!(
        matches!(e, LedgerError::Store(ledger_store::StoreError::Invalid(ref m)) if m.contains("different experiments")),
        "{e}"
    );
}

#[test]
fn an_lm_worker_gets_the_blobs_its_checkpoints_name() {
    // LM checkpoints name blobs no event names (the tokenizer, the frozen base under
    // LoRA): a bundle must carry them, or the worker cannot load the checkpoint.
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("origin");
    let plan = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/plans/lm-tiny.toml");
    ok(&ledger(&d, &["init", "--plan", plan]));
    ok(&ledger(&d, &["run", "--stages", "2", "--quiet"]));
    let b = tmp.path().join("base.bundle");
    ok(&ledger(
        &d,
        &[
            "bundle",
            "--branch",
            "main@stage0",
            "--out",
            b.to_str().unwrap(),
        ],
    ));
    let w = tmp.path().join("worker");
    ok(&ledger(&w, &["init", "--from-bundle", b.to_str().unwrap()]));
    for (dir, name) in [(&w, "x"), (&d, "y")] {
        ok(&ledger(
            dir,
            &[
                "fork",
                "--at",
                "stage1",
                "--engineer",
                "fixed",
                "--name",
                name,
            ],
        ));
        ok(&ledger(
            dir,
            &["run", "--branch", name, "--stages", "1", "--quiet"],
        ));
    }
    assert_eq!(head_of(&w, "x"), head_of(&d, "y"));
    // verify checks, and counts, the blobs checkpoints name as gc keeps them: the
    // tokenizer no event names is one of them, so both say the same number.
    let v: serde_json::Value =
        serde_json::from_str(&ok(&ledger(&d, &["verify", "--json"]))).unwrap();
    let g: serde_json::Value = serde_json::from_str(&ok(&ledger(&d, &["gc", "--json"]))).unwrap();
    assert_eq!(v["blobs"], g["blobs_kept"], "verify {v}\ngc {g}");
    // And a missing tokenizer is damage verify names.
    let l = Ledger::open_read_only(&d).unwrap();
    let ckpt = l
        .history("main")
        .unwrap()
        .into_iter()
        .find_map(|(_, e)| match e.body {
            EventBody::CheckpointSaved(c) => Some(c.blob),
            _ => None,
        })
        .unwrap();
    let named = mapf_ledger::train::TrainState::referenced_blobs(&l.blob(&ckpt).unwrap());
    let tokenizer = named[0];
    drop(l);
    // The tokenizer is larger than a packed blob: it is a file, blobs/ab/cdef...
    let hex = tokenizer.to_hex();
    std::fs::remove_file(d.join("blobs").join(&hex[..2]).join(&hex[2..])).unwrap();
    let o = ledger(&d, &["verify"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        common::text(&o).contains(&tokenizer.short())
            && common::text(&o).contains("referenced by blob"),
        "{}",
        common::text(&o)
    );
}
