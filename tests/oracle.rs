//! The `oracle` engineer on a tiny plan, through the real `ledger` binary: its search is
//! recorded (every candidate's decision, validation table and score, between the stage's
//! start and the oracle's decision), its choice is the candidate with the best
//! validation score, the stage it designs repeats that candidate's training bit for
//! bit, `replay --verify` recomputes the search, `audit` shows it, a study with an
//! oracle arm reports each arm's regret, and its search takes the stages the study's
//! other arms trained.
use crate::common;

use common::{ledger, ledger_cmd, ok};
use mapf_ledger::ledger::event::{DecisionStatus, OracleCandidate};
use mapf_ledger::ledger::{EventBody, Ledger};

const TINY: &str = include_str!("plans/tiny.toml");

/// The tiny plan with four oracle candidates: two named engineers and two random draws.
fn plan() -> String {
    format!(
        "{TINY}\n[engineer.oracle]\ncandidates = [\"fixed\", \"heuristic\", \"random\", \"random\"]\n"
    )
}

#[test]
fn the_oracle_keeps_the_best_candidate_by_validation_records_its_search_and_replays() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("l");
    let plan_file = t.path().join("oracle.toml");
    std::fs::write(&plan_file, plan()).unwrap();
    ok(&ledger(
        &dir,
        &["init", "--plan", plan_file.to_str().unwrap()],
    ));
    ok(&ledger(&dir, &["run", "--quiet", "--engineer", "oracle"]));

    let l = Ledger::open_read_only(&dir).unwrap();
    let history = l.history("main").unwrap();
    let mut distinct_scores = std::collections::BTreeSet::new();
    for n in 1..=2u32 {
        let events: Vec<&EventBody> = history
            .iter()
            .filter(|(_, e)| e.stage == n)
            .map(|(_, e)| &e.body)
            .collect();
        // StageStarted, the four candidates, then the oracle's decision.
        assert!(matches!(events[0], EventBody::StageStarted(s) if s.engineer == "oracle"));
        let candidates: Vec<&OracleCandidate> = events[1..5]
            .iter()
            .map(|b| match b {
                EventBody::OracleCandidate(c) => c,
                other => panic!("stage {n}: expected a candidate, got {}", other.kind()),
            })
            .collect();
        let EventBody::EngineerDecision(d) = events[5] else {
            panic!("stage {n}: no decision after the candidates");
        };
        let sources: Vec<&str> = candidates.iter().map(|c| c.source.as_str()).collect();
        assert_eq!(sources, ["fixed", "heuristic", "random#1", "random#2"]);
        assert_eq!(d.engineer, "oracle");
        assert!(matches!(
            d.status,
            DecisionStatus::Accepted | DecisionStatus::Clipped
        ));
        // The two random draws are two configurations, and `fixed` keeps the one in force.
        assert_ne!(
            candidates[2].decision.applied,
            candidates[3].decision.applied
        );

        // The choice: the highest validation valid Sum, then optimal Sum, then the
        // earliest candidate.
        let f = f64::from_bits;
        let key = |c: &OracleCandidate| (f(c.valid_sum), f(c.optimal_sum));
        let mut best = 0;
        for (i, c) in candidates.iter().enumerate() {
            if key(c) > key(candidates[best]) {
                best = i;
            }
        }
        assert_eq!(
            d.applied, candidates[best].decision.applied,
            "stage {n}: {}",
            d.rationale
        );
        assert!(
            d.rationale.contains(&format!("kept #{best} ")),
            "{}",
            d.rationale
        );
        for c in &candidates {
            distinct_scores.insert((c.valid_sum, c.optimal_sum));
            if let Some(j) = c.same_as {
                assert_eq!(c.decision.applied, candidates[j as usize].decision.applied);
            }
        }

        // The stage trained on the chosen configuration repeats the candidate: the
        // same final model, and the same validation table.
        let checkpoint = events.iter().rev().find_map(|b| match b {
            EventBody::CheckpointSaved(c) => Some(c),
            _ => None,
        });
        assert_eq!(
            checkpoint.unwrap().params,
            candidates[best].params,
            "stage {n}"
        );
        let val = events.iter().find_map(|b| match b {
            EventBody::Evaluation(e) if e.suite == "val" => Some(e),
            _ => None,
        });
        assert_eq!(val.unwrap().cells, candidates[best].validation, "stage {n}");
    }
    // The candidates' models differ: a search whose candidates all score alike would
    // test no choice.
    assert!(distinct_scores.len() > 1, "{distinct_scores:?}");
    drop(l);

    // Replay recomputes the search with each stage, event by event.
    let o = ok(&ledger(&dir, &["replay", "--verify"]));
    assert!(o.contains("match"), "{o}");
    ok(&ledger(&dir, &["verify"]));

    // The audit shows the search, the chosen candidate marked.
    let o = ok(&ledger(&dir, &["audit", "--json"]));
    let audit: serde_json::Value = serde_json::from_str(&o).unwrap();
    for d in audit["decisions"].as_array().unwrap() {
        let search = d["search"].as_array().unwrap();
        assert_eq!(search.len(), 4, "{d}");
        assert_eq!(
            search.iter().filter(|c| c["chosen"] == true).count(),
            1,
            "{d}"
        );
    }
    let o = ok(&ledger(&dir, &["audit"]));
    assert!(o.contains("random#2"), "{o}");

    // The engineer benchmark reads the searches as contexts with the oracle's choice:
    // `fixed` keeps the configuration in force, so the candidate nearest its decision is
    // the `fixed` candidate, and it agrees exactly where the oracle kept that one's
    // configuration.
    let o = ok(&ledger(
        &dir,
        &[
            "engineer",
            "eval",
            "--engineer",
            "fixed,random",
            "--contexts",
            "0",
            "--from-ledger",
            dir.to_str().unwrap(),
            "--json",
        ],
    ));
    let eval: serde_json::Value = serde_json::from_str(&o).unwrap();
    let l = Ledger::open_read_only(&dir).unwrap();
    let history = l.history("main").unwrap();
    let fixed = &eval["engineers"][0];
    assert_eq!(fixed["summary"]["oracle_contexts"], 2, "{fixed}");
    let mut agreed = 0;
    for (n, row) in (1..=2u32).zip(fixed["rows"].as_array().unwrap()) {
        let candidates: Vec<&OracleCandidate> = history
            .iter()
            .filter(|(_, e)| e.stage == n)
            .filter_map(|(_, e)| match &e.body {
                EventBody::OracleCandidate(c) => Some(c),
                _ => None,
            })
            .collect();
        let owned: Vec<OracleCandidate> = candidates.iter().map(|c| (*c).clone()).collect();
        let best = OracleCandidate::best(&owned).unwrap();
        assert_eq!(row["oracle"]["nearest"], "fixed", "{row}");
        assert_eq!(row["oracle"]["chosen"], candidates[best].source, "{row}");
        let agrees = candidates[best].decision.applied == candidates[0].decision.applied;
        assert_eq!(row["oracle"]["agrees"], agrees, "stage {n}: {row}");
        agreed += agrees as u32;
    }
    assert_eq!(
        fixed["summary"]["oracle_pct"].as_f64().unwrap(),
        50.0 * agreed as f64
    );
    assert!(eval["paired"]
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p["metric"] == "oracle" && p["pairs"] == 2));
    let o = ok(&ledger(
        &dir,
        &[
            "engineer",
            "eval",
            "--engineer",
            "fixed",
            "--contexts",
            "0",
            "--from-ledger",
            dir.to_str().unwrap(),
        ],
    ));
    assert!(o.contains("Agreement with the oracle's choice"), "{o}");
}

/// A study with an oracle arm reports each arm's regret. The oracle arm runs after the
/// others, and its search takes each candidate an arm of its replicate trained (the
/// same stage from the same checkpoint and seed, on the same configuration) from that
/// arm's branch instead of training it again; a stage the ledger already holds on the
/// same inputs is copied. What either records is what training records: `replay
/// --verify` trains every candidate and stage itself and matches, and the oracle arm
/// run through worker processes ends on the same head.
#[test]
fn a_study_with_an_oracle_arm_reports_regret_and_trains_nothing_twice() {
    let t = tempfile::tempdir().unwrap();
    let plan_file = t.path().join("oracle.toml");
    std::fs::write(&plan_file, plan()).unwrap();
    let forked = |name: &str| {
        let dir = t.path().join(name);
        ok(&ledger(
            &dir,
            &["init", "--plan", plan_file.to_str().unwrap()],
        ));
        ok(&ledger(&dir, &["run", "--quiet", "--stages", "1"]));
        dir
    };
    let head = |dir: &std::path::Path, branch: &str| {
        Ledger::open_read_only(dir).unwrap().head(branch).unwrap()
    };
    let branch = "study-at1-oracle-s0";
    let dir = forked("l");
    let out = t.path().join("study");
    // Listed first, the oracle still runs after `fixed` and `random`.
    let o = ledger(
        &dir,
        &[
            "study",
            "--json",
            "--at",
            "stage1",
            "--engineers",
            "oracle,fixed,random",
            "--out",
            out.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{o:?}");
    let said = String::from_utf8_lossy(&o.stderr).into_owned();
    let at = |needle: &str| {
        said.find(needle)
            .unwrap_or_else(|| panic!("no {needle:?} in:\n{said}"))
    };
    assert!(at("study-at1-fixed-s0: engineer fixed") < at("study-at1-oracle-s0: engineer oracle"));
    // It takes the arms' stages as its `fixed` and first random candidates (the first
    // random draw is the `random` engineer's own; `main` trained stage 1 with `fixed`
    // too, and comes first by name), and trains `heuristic` and the second draw.
    at("oracle candidate 1/4 (fixed): branch ");
    at("oracle candidate 3/4 (random#1): branch study-at1-random-s0 trained this stage");
    for (k, source) in [(2, "heuristic"), (4, "random#2")] {
        at(&format!(
            "oracle candidate {k}/4 ({source}): training the stage"
        ));
    }

    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let regret = report["regret"].as_array().unwrap();
    let arms: std::collections::BTreeSet<&str> = regret
        .iter()
        .map(|p| {
            assert_eq!(p["engineer"], "oracle");
            p["baseline"].as_str().unwrap()
        })
        .collect();
    assert_eq!(arms, ["fixed", "random"].into_iter().collect());
    // Regret is oracle − arm, from the two runs' recorded tables.
    let runs = report["runs"].as_array().unwrap();
    let sum = |engineer: &str| {
        let run = runs.iter().find(|r| r["engineer"] == engineer).unwrap();
        let rates = &run["summary"]["validation"];
        rates.as_array().unwrap().last().unwrap()["valid"]
            .as_f64()
            .unwrap()
    };
    let val = regret
        .iter()
        .find(|p| p["baseline"] == "fixed" && p["suite"] == "val" && p["subset"].is_null())
        .unwrap();
    let d = val["valid"]["per_seed"][0].as_f64().unwrap();
    assert!((d - (sum("oracle") - sum("fixed"))).abs() < 1e-9, "{val}");
    let md = std::fs::read_to_string(out.join("study.md")).unwrap();
    assert!(
        md.contains("Regret:") && md.contains("oracle − arm"),
        "{md}"
    );
    let csv = std::fs::read_to_string(out.join("study.csv")).unwrap();
    assert!(
        csv.lines().any(|l| l.starts_with("regret,oracle,")),
        "{csv}"
    );
    assert!(
        csv.lines().any(|l| l.starts_with("regret_mean,oracle,")),
        "{csv}"
    );
    // The report's study section shows the same regret: a table with a row per arm.
    let page = t.path().join("report");
    ok(&ledger(
        &dir,
        &[
            "report",
            "--study",
            out.to_str().unwrap(),
            "--out",
            page.to_str().unwrap(),
        ],
    ));
    let html = std::fs::read_to_string(page.join("index.html")).unwrap();
    let at = html
        .find("<table class=\"study-regret\"")
        .unwrap_or_else(|| panic!("the report has no regret table"));
    let table = &html[at..at + html[at..].find("</table>").unwrap()];
    for arm in ["oracle − fixed", "oracle − random"] {
        assert!(table.contains(arm), "no {arm} row: {table}");
    }

    // Replay recomputes: it trains every candidate, and matches event by event.
    let o = ledger(&dir, &["replay", "--verify", "--branch", branch]);
    assert!(o.status.success(), "{o:?}");
    let said = String::from_utf8_lossy(&o.stderr);
    assert!(
        said.contains("oracle candidate 1/4 (fixed): training the stage")
            && !said.contains("not trained again"),
        "{said}"
    );
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("match"),
        "{o:?}"
    );

    // A stage the ledger holds on the same inputs is copied, not trained: a second
    // `fixed` fork ends on the study's `fixed` arm's head (the same events, fork
    // included), and `replay --verify` trains it again and matches.
    ok(&ledger(
        &dir,
        &[
            "fork",
            "--at",
            "stage1",
            "--engineer",
            "fixed",
            "--name",
            "again",
        ],
    ));
    let o = ledger(&dir, &["run", "--branch", "again"]);
    assert!(o.status.success(), "{o:?}");
    let said = String::from_utf8_lossy(&o.stderr);
    for n in [1, 2] {
        assert!(
            said.contains(&format!("stage {n}: branch "))
                && said.contains("copied, not trained again"),
            "stage {n}: {said}"
        );
    }
    assert_eq!(head(&dir, "again"), head(&dir, "study-at1-fixed-s0"));
    let o = ledger(&dir, &["replay", "--verify", "--branch", "again"]);
    assert!(o.status.success(), "{o:?}");
    assert!(
        !String::from_utf8_lossy(&o.stderr).contains("copied"),
        "{o:?}"
    );
    // Under a kernel variable the study's arms were not trained with (one that changes
    // nothing on a CPU), the same fork trains its stage: where kernels may differ, a
    // copy would not be what training records.
    ok(&ledger(
        &dir,
        &[
            "fork",
            "--at",
            "stage1",
            "--engineer",
            "fixed",
            "--name",
            "elsewhere",
        ],
    ));
    let o = ledger_cmd(&dir, &["run", "--branch", "elsewhere"])
        .env("TORCH_CUDNN_SDPA_DEPRIORITIZED", "1")
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    let said = String::from_utf8_lossy(&o.stderr);
    assert!(!said.contains("copied, not trained again"), "{said}");

    // Through two worker processes: the oracle's worker ledger holds the finished arms
    // of its replicate, and the branch fetched back is the same.
    let workers = forked("workers");
    let args = [
        "study",
        "--quiet",
        "--at",
        "stage1",
        "--engineers",
        "oracle,fixed,random",
    ];
    ok(&ledger(
        &workers,
        &[&args[..], &["--executor", "local:2"]].concat(),
    ));
    assert_eq!(head(&workers, branch), head(&dir, branch));
    let worker = workers
        .join("study-at1/work/tasks")
        .join(branch)
        .join("ledger");
    for arm in ["study-at1-fixed-s0", "study-at1-random-s0"] {
        assert_eq!(head(&worker, arm), head(&workers, arm), "{arm}");
    }
}

/// A search is as long as K stages, so its candidates are durable one by one: a run
/// stopped inside the search keeps the candidates it finished, the next `run` trains only
/// the others, and the branch ends on the head of a search that never stopped.
#[test]
fn a_stopped_search_keeps_its_candidates_and_resumes_to_the_uninterrupted_head() {
    let t = tempfile::tempdir().unwrap();
    let plan_file = t.path().join("oracle.toml");
    // One engineered stage (the search under test), long enough (75 steps, about 2 s
    // on 2 idle cores, no checkpoint inside) for a stop sent as its third candidate
    // starts to land inside that candidate's training.
    let long = plan()
        .replace("[grpo]\nsteps = 10", "[grpo]\nsteps = 75")
        .replace("checkpoint_every = 4", "checkpoint_every = 1000")
        .replace(
            "[engineer]\nname = \"fixed\"\nstages = 2",
            "[engineer]\nname = \"fixed\"\nstages = 1",
        );
    assert!(long.contains("steps = 75") && long.contains("stages = 1"));
    std::fs::write(&plan_file, long).unwrap();
    let plan = plan_file.to_str().unwrap();
    let reference = t.path().join("reference");
    ok(&ledger(&reference, &["init", "--plan", plan]));
    ok(&ledger(
        &reference,
        &["run", "--quiet", "--engineer", "oracle"],
    ));
    let expected = Ledger::open_read_only(&reference)
        .unwrap()
        .head("main")
        .unwrap();

    let dir = t.path().join("l");
    ok(&ledger(&dir, &["init", "--plan", plan]));
    let args = ["run", "--engineer", "oracle"];
    let at = "stage 1: oracle candidate 3/4 (random#1): training";
    let (status, _, _) = common::signalled_at(&dir, &args, at, &[libc::SIGINT])
        .expect("the run reached its third candidate");
    assert_eq!(status.code(), Some(130));
    let l = Ledger::open_read_only(&dir).unwrap();
    let kept = l
        .history("main")
        .unwrap()
        .iter()
        .filter(|(_, e)| matches!(e.body, EventBody::OracleCandidate(_)))
        .count();
    drop(l);
    assert_eq!(
        kept, 2,
        "the two candidates before the stop are durable, the third was stopped"
    );
    ok(&ledger(&dir, &["verify"]));
    // Another engineer cannot take over a stopped search (it would train the stage on
    // a configuration no decision records): refused, naming the command that resumes
    // it, and nothing is recorded.
    let before = Ledger::open_read_only(&dir).unwrap().head("main").unwrap();
    let o = common::ledger(&dir, &["run", "--quiet", "--engineer", "fixed"]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    let said = String::from_utf8_lossy(&o.stderr);
    assert!(
        said.contains("stage 1 is an oracle search that stopped before its choice")
            && said.contains("--engineer oracle"),
        "{said}"
    );
    assert_eq!(
        Ledger::open_read_only(&dir).unwrap().head("main").unwrap(),
        before
    );

    let o = common::ledger(&dir, &["run", "--engineer", "oracle"]);
    assert!(o.status.success(), "{o:?}");
    let said = String::from_utf8_lossy(&o.stderr);
    assert!(
        !said.contains("stage 1: oracle candidate 1/4 (fixed): training")
            && said.contains("stage 1: oracle candidate 3/4 (random#1): training"),
        "the resumed search trains the candidates it lacks, and only those:\n{said}"
    );
    let head = Ledger::open_read_only(&dir).unwrap().head("main").unwrap();
    assert_eq!(head, expected);
}
