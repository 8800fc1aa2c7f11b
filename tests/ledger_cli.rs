//! The store commands through the real `ledger` binary: init, log, show, branches,
//! export, rebuild, verify, with and without --json, and the contract's exit codes.
use crate::common;

use common::schema::validates;
use common::{fails, ledger, ok};
use mapf_ledger::views::export::EventRecord;

fn plan_path() -> &'static str {
    concat!(env!("CARGO_MANIFEST_DIR"), "/ledgers/demo.toml")
}

#[test]
fn init_log_show_branches_export_rebuild_verify() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("l");
    let out = ok(&ledger(&d, &["init", "--plan", plan_path()]));
    assert!(out.contains("genesis"), "{out}");
    ok(&common::append_loop::run(&d, 4, 2));

    let log: Vec<EventRecord> = serde_json::from_str(&ok(&ledger(&d, &["log", "--json"]))).unwrap();
    assert_eq!(log.len(), 9);
    assert_eq!(log.last().unwrap().body.kind(), "genesis");
    assert_eq!(log[0].parent, Some(log[1].hash));
    let text = ok(&ledger(&d, &["log", "--limit", "2"]));
    assert_eq!(text.lines().count(), 2);
    assert!(text.starts_with(&log[0].hash.short()), "{text}");

    // show: hash prefix, branch, branch@stageN.
    let prefix = &log[3].hash.to_hex()[..8];
    let shown: EventRecord =
        serde_json::from_str(&ok(&ledger(&d, &["show", prefix, "--json"]))).unwrap();
    assert_eq!(shown, log[3]);
    assert!(ok(&ledger(&d, &["show", prefix])).contains(&log[3].hash.to_hex()));
    let b: serde_json::Value =
        serde_json::from_str(&ok(&ledger(&d, &["show", "main", "--json"]))).unwrap();
    validates("show-branch", &b);
    assert_eq!(b["head"], log[0].hash.to_hex());
    assert_eq!(b["state"]["events"], 9);
    let s: serde_json::Value =
        serde_json::from_str(&ok(&ledger(&d, &["show", "main@stage1", "--json"]))).unwrap();
    validates("show-stage", &s);
    assert_eq!(s["stage"]["gradient_steps"], 6);
    assert_eq!(s["stage"]["instances"], 4);
    let o = ledger(&d, &["show", "main@stage9"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("stage 9"));

    let br: serde_json::Value =
        serde_json::from_str(&ok(&ledger(&d, &["branches", "--json"]))).unwrap();
    assert_eq!(br[0]["name"], "main");
    assert_eq!(br[0]["events"], 9);
    assert!(ok(&ledger(&d, &["branches"])).contains("main"));

    let jsonl = ok(&ledger(&d, &["export", "--format", "jsonl"]));
    let recs: Vec<EventRecord> = jsonl
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(recs.len(), 9);
    assert_eq!(recs[0].hash, log[8].hash, "storage order starts at genesis");
    let csv = ok(&ledger(
        &d,
        &["export", "--format", "csv", "--branch", "main"],
    ));
    assert_eq!(csv.lines().next(), Some("hash,parent,stage,kind,summary"));
    assert_eq!(csv.lines().count(), 10);
    let f = tmp.path().join("out.jsonl");
    ok(&ledger(
        &d,
        &["export", "--format", "jsonl", "--out", f.to_str().unwrap()],
    ));
    assert_eq!(std::fs::read_to_string(&f).unwrap(), jsonl);

    let r: serde_json::Value =
        serde_json::from_str(&ok(&ledger(&d, &["rebuild", "--json"]))).unwrap();
    assert_eq!(r["events"], 9);
    let v: serde_json::Value =
        serde_json::from_str(&ok(&ledger(&d, &["verify", "--json"]))).unwrap();
    assert_eq!(v["events"], 9);
    assert_eq!(v["problems"].as_array().unwrap().len(), 0);
    assert!(ok(&ledger(&d, &["verify"])).contains("verified"));
}

#[test]
fn input_errors_exit_2_naming_the_input() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("nothing-here");
    let o = ledger(&d, &["log"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("nothing-here"),
        "{o:?}"
    );

    let bad = tmp.path().join("bad.toml");
    let plan = std::fs::read_to_string(plan_path()).unwrap();
    std::fs::write(&bad, plan.replace("[warmup]", "[warmup]\nwarp_speed = 9")).unwrap();
    let o = ledger(&d, &["init", "--plan", bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("warp_speed") && e.contains("bad.toml"), "{e}");
    let lr = "\nlr = 0.0001\n";
    assert!(
        plan.contains(lr),
        "the demo plan's grpo.lr changed: update this test"
    );
    std::fs::write(&bad, plan.replace(lr, "\nlr = 3.0\n")).unwrap();
    let e = String::from_utf8_lossy(&ledger(&d, &["init", "--plan", bad.to_str().unwrap()]).stderr)
        .into_owned();
    assert!(e.contains("grpo.lr"), "{e}");
    let o = ledger(&d, &["init", "--plan", "/no/such/plan.toml"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("/no/such/plan.toml"));

    ok(&ledger(&d, &["init", "--plan", plan_path()]));
    let o = ledger(&d, &["init", "--plan", plan_path()]);
    assert_eq!(o.status.code(), Some(2), "init twice is refused");
    for args in [
        &["show", "ffff0000"][..],
        &["log", "--branch", "nope"],
        &["show", "main@stagex"],
    ] {
        let o = ledger(&d, args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
    }
}

#[test]
fn readers_work_while_a_writer_holds_the_ledger_and_a_second_writer_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("busy-ledger");
    ok(&ledger(&d, &["init", "--plan", plan_path()]));
    let w = mapf_ledger::ledger::Ledger::open(&d).unwrap();
    for args in [&["log"][..], &["verify"], &["branches"], &["show", "main"]] {
        ok(&ledger(&d, args));
    }
    for args in [
        &["rebuild"][..],
        &["fork", "--at", "stage1", "--engineer", "fixed"],
    ] {
        let o = ledger(&d, args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(
            e.contains("another process") && e.contains("busy-ledger"),
            "{e}"
        );
    }
    drop(w);
    ok(&ledger(&d, &["rebuild"]));
}

#[test]
fn compare_takes_any_reference_and_checks_its_plot_path_before_any_work() {
    let tmp = tempfile::tempdir().unwrap();
    let d = common::tiny_ledger(tmp.path());
    let head = common::heads(&d)
        .into_iter()
        .find(|(n, _)| n == "main")
        .unwrap()
        .1;
    // BRANCH@stageN is the branch through that stage; a hash prefix is the history to it.
    let o = ok(&ledger(
        &d,
        &["compare", "main@stage1", "main", &head[..10], "--json"],
    ));
    let v: serde_json::Value = serde_json::from_str(&o).unwrap();
    let stages: Vec<u64> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["final_stage"].as_u64().unwrap())
        .collect();
    assert_eq!(stages, vec![1, 2, 2], "{o}");
    assert_eq!(v[0]["branch"], "main@stage1");
    // A plot into a directory that does not exist: exit 2 naming it, no tables first.
    let plot = tmp.path().join("no-such-dir/curves.svg");
    let o = ledger(&d, &["compare", "main", "--plot", plot.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        o.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("no-such-dir"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// `BRANCH@stageN` is where stage N ended, also after a replay appended its
/// `replay_verified` record (which carries the stage it checked, an earlier one).
#[test]
fn a_stage_reference_survives_a_replay_record_after_it() {
    let tmp = tempfile::tempdir().unwrap();
    let d = common::tiny_ledger(tmp.path());
    let end = |n| {
        mapf_ledger::ledger::Ledger::open_read_only(&d)
            .unwrap()
            .stage_end("main", n)
            .unwrap()
    };
    let before = (end(0), end(1), end(2));
    ok(&ledger(&d, &["replay", "--stage", "0"]));
    ok(&ledger(&d, &["replay", "--stage", "1"]));
    assert_eq!((end(0), end(1), end(2)), before);
    let b = tmp.path().join("p.bundle");
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
    assert!(said.contains(&before.1.short()), "{said}");
    // Read commands take the reference as --branch: log, audit, export.
    let log: serde_json::Value = serde_json::from_str(&ok(&ledger(
        &d,
        &["log", "--branch", "main@stage1", "--json", "--limit", "1"],
    )))
    .unwrap();
    assert_eq!(log[0]["hash"], before.1.to_hex());
    let audit = ok(&ledger(&d, &["audit", "--branch", "main@stage1", "--json"]));
    let audit: serde_json::Value = serde_json::from_str(&audit).unwrap();
    assert!(audit["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .all(|x| x["stage"].as_u64().unwrap() <= 1));
    let rows = ok(&ledger(
        &d,
        &["export", "--what", "metrics", "--branch", "main@stage1"],
    ));
    assert!(rows.lines().all(|l| !l.contains("\"stage\":2")), "{rows}");
    fails(
        &ledger(&d, &["log", "--branch", "main@stage1", "--follow"]),
        2,
        "--follow",
    );
}

/// A fork whose engineer decides as the source's did trains to the same checkpoint:
/// `compare` says so in a line instead of a table of zeros; an engineer that decides
/// otherwise gets the paired table.
#[test]
fn compare_says_when_a_forks_engineer_agreed_with_the_source() {
    let tmp = tempfile::tempdir().unwrap();
    let d = common::tiny_ledger(tmp.path());
    common::fork_and_run(&d, "stage2", "fixed", "same");
    let out = ok(&ledger(&d, &["compare", "main", "same"]));
    assert!(
        out.contains("same (fixed) agreed with main (fixed) at stage 2: the same configuration, hence the same checkpoint"),
        "{out}"
    );
    assert!(!out.contains("Paired, same"), "{out}");
    common::fork_and_run(&d, "stage1", "random", "other");
    let out = ok(&ledger(&d, &["compare", "main", "other"]));
    assert!(!out.contains("agreed with"), "{out}");
    assert!(out.contains("Paired, other − main"), "{out}");
}
