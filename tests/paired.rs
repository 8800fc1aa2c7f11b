//! Paired statistics and stratified suites: the statistics on constructed outcomes whose
//! answer is known by hand (a known difference, none, pooling over seeds), then through
//! the real binary on forks of a small stratified ledger (compare's paired and subset
//! sections, the outcomes events they rest on, study's paired rows), a ledger recorded
//! without outcomes (the views say so), and the plan's refusal of a per_cell the wait
//! ratios do not divide.
use crate::common;

use common::schema::validates;
use common::{fails, fork_and_run, json, ledger, ok};
use mapf_ledger::ledger::event::*;
use mapf_ledger::ledger::{Hash, Ledger, Meta};
use mapf_ledger::views::paired::{mcnemar_p, paired_metrics, paired_rows, unpairable, Unit};
use serde_json::Value;
use std::path::{Path, PathBuf};

fn outcomes(cells: &[(u32, u32, u32)], bytes: Vec<u8>) -> EvaluationOutcomes {
    EvaluationOutcomes {
        suite: "test".into(),
        suite_hash: Hash::of_blob(b"the suite"),
        checkpoint: None,
        cells: cells.to_vec(),
        wait_ratios: Vec::new(),
        outcomes: bytes,
    }
}

fn events() -> [Hash; 2] {
    [Hash::of_blob(b"a"), Hash::of_blob(b"b")]
}

/// B is valid on exactly 10 more of 100 items than A and never the other way: the
/// paired difference is exactly 10 points, its bootstrap interval contains 10 and
/// excludes 0, and McNemar's p is the binomial 2 · P(X <= 0), X ~ Bin(10, 1/2).
#[test]
fn a_known_difference_is_found_exactly() {
    // A: items 0..30 valid (the first 20 of them optimal). B: the same, plus 30..40
    // valid, not optimal.
    let a: Vec<u8> = (0..100)
        .map(|i| match i {
            0..20 => OUTCOME_OPTIMAL,
            20..30 => OUTCOME_VALID,
            _ => OUTCOME_INVALID,
        })
        .collect();
    let mut b = a.clone();
    for x in &mut b[30..40] {
        *x = OUTCOME_VALID;
    }
    let (a, b) = (outcomes(&[(3, 5, 100)], a), outcomes(&[(3, 5, 100)], b));
    assert_eq!(unpairable(&a, &b), None);
    let rows = paired_rows(&a, &b, events(), None);
    assert_eq!(rows.len(), 1, "one agent count, not stratified");
    let r = &rows[0];
    assert_eq!((r.suite.as_str(), r.agents, r.instances), ("test", 3, 100));
    let v = r.valid;
    assert_eq!((v.a, v.b, v.diff), (30.0, 40.0, 10.0));
    assert!(v.diff_ci95.contains(10.0), "{:?}", v.diff_ci95);
    assert!(v.diff_ci95.low > 0.0, "excludes 0: {:?}", v.diff_ci95);
    assert_eq!((v.mcnemar.a_only, v.mcnemar.b_only), (0, 10));
    // By hand: C(10, 0) / 2^10, doubled.
    let by_hand = 2.0 * (1.0 / 1024.0);
    assert!((v.mcnemar.p - by_hand).abs() < 1e-15, "{}", v.mcnemar.p);
    // Each side's own interval is wider than the paired one: pairing is the point.
    let own = (v.a_ci95.high - v.a_ci95.low).min(v.b_ci95.high - v.b_ci95.low);
    assert!(v.diff_ci95.high - v.diff_ci95.low < own, "{v:?}");
    // Optimal: unchanged (20 on both), nothing discordant.
    let o = r.optimal;
    assert_eq!((o.a, o.b, o.diff), (20.0, 20.0, 0.0));
    assert_eq!(o.mcnemar.p, 1.0);
    // Deterministic: the same outcomes, the same intervals.
    assert_eq!(paired_rows(&a, &b, events(), None), rows);
}

/// No difference: the same outcomes on both sides, and discordances that cancel (5
/// each way); both give an interval containing 0 and p = 1.
#[test]
fn no_difference_gives_an_interval_around_zero_and_p_one() {
    let a: Vec<u8> = (0..60).map(|i| (i % 3) as u8).collect();
    let same = paired_rows(
        &outcomes(&[(4, 6, 60)], a.clone()),
        &outcomes(&[(4, 6, 60)], a.clone()),
        events(),
        None,
    );
    let v = same[0].valid;
    assert_eq!(v.diff, 0.0);
    assert!(v.diff_ci95.contains(0.0));
    assert_eq!(v.mcnemar.p, 1.0);
    // Swap 5 valid-for-invalid one way and 5 the other.
    let mut b = a.clone();
    let valid: Vec<usize> = (0..60).filter(|&i| a[i] >= OUTCOME_VALID).take(5).collect();
    let invalid: Vec<usize> = (0..60)
        .filter(|&i| a[i] == OUTCOME_INVALID)
        .take(5)
        .collect();
    for i in valid {
        b[i] = OUTCOME_INVALID;
    }
    for i in invalid {
        b[i] = OUTCOME_VALID;
    }
    let rows = paired_rows(
        &outcomes(&[(4, 6, 60)], a),
        &outcomes(&[(4, 6, 60)], b),
        events(),
        None,
    );
    let v = rows[0].valid;
    assert_eq!(v.diff, 0.0);
    assert!(v.diff_ci95.contains(0.0), "{:?}", v.diff_ci95);
    assert!(v.diff_ci95.low < 0.0 && v.diff_ci95.high > 0.0);
    assert_eq!((v.mcnemar.a_only, v.mcnemar.b_only), (5, 5));
    assert_eq!(v.mcnemar.p, 1.0);
    assert_eq!(mcnemar_p(5, 5), 1.0);
    // Different instance lists never pair.
    let mut other = outcomes(&[(4, 6, 60)], vec![0; 60]);
    other.suite_hash = Hash::of_blob(b"another suite");
    assert!(unpairable(&outcomes(&[(4, 6, 60)], vec![0; 60]), &other)
        .unwrap()
        .contains("different test instances"));
}

/// Pooled over seeds, the statistic is the mean of the per-seed differences (+10 and 0
/// here: +5), and McNemar pools the discordant items of both seeds.
#[test]
fn pooling_over_seeds_averages_the_per_seed_differences() {
    let unit = |extra: usize| -> Unit {
        vec![(0..50)
            .map(|i| {
                let a = if i < 10 {
                    OUTCOME_VALID
                } else {
                    OUTCOME_INVALID
                };
                let b = if i < 10 + extra {
                    OUTCOME_VALID
                } else {
                    OUTCOME_INVALID
                };
                (a, b)
            })
            .collect()]
    };
    let (v, _) = paired_metrics(&[unit(5), unit(0)], "pooled");
    assert_eq!((v.a, v.b, v.diff), (20.0, 25.0, 5.0));
    assert_eq!((v.mcnemar.a_only, v.mcnemar.b_only), (0, 5));
    assert!(v.diff_ci95.contains(5.0) && v.diff_ci95.low >= 0.0);
}

/// The tiny grid plan with both suites split into two wait-ratio subsets (validation 10
/// per cell: 5 + 5; test 4: 2 + 2).
fn stratified_ledger(tmp: &Path) -> PathBuf {
    let plan = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/plans/tiny.toml"
    ))
    .unwrap()
    .replace(
        "test_per_cell = 5",
        "test_per_cell = 4\nwait_ratios = [0.5, 1.0]",
    );
    let p = tmp.join("stratified.toml");
    std::fs::write(&p, plan).unwrap();
    let d = tmp.join("l");
    ok(&ledger(&d, &["init", "--plan", p.to_str().unwrap()]));
    ok(&ledger(&d, &["run", "--quiet"]));
    d
}

/// Forks of a stratified ledger: each stage records per-instance outcomes in suite order
/// that agree with its tables, one table per subset, and `compare` pairs the branches
/// (text and JSON), with differences that are those of the recorded tables; `study`
/// pairs an engineer against `fixed` in study.md, study.csv and its JSON.
#[test]
fn compare_and_study_pair_forks_of_a_stratified_ledger() {
    let tmp = tempfile::tempdir().unwrap();
    let d = stratified_ledger(tmp.path());
    fork_and_run(&d, "stage1", "heuristic", "h");

    // The events behind it, read with the library.
    {
        let mut l = Ledger::open_read_only(&d).unwrap();
        let st = l.projection("h").unwrap();
        let s2 = st.stage(2).unwrap();
        for (suite, per_cell, cells) in [("val", 10, 4), ("test", 4, 9)] {
            let EventBody::EvaluationOutcomes(o) = l.event(&s2.outcome_events[suite]).unwrap().body
            else {
                panic!("not an outcomes event");
            };
            assert_eq!(o.wait_ratios(), [0.5, 1.0]);
            assert_eq!(o.cells.len(), cells);
            assert!(o.cells.iter().all(|c| c.2 == per_cell));
            assert!(o.is_well_formed());
            // The outcomes count what the evaluation counted, cell by cell, and the two
            // subsets' tables add up to it.
            let whole = &s2.evaluations[suite];
            let halves = [
                &s2.evaluations[&format!("{suite}@wait0.50")],
                &s2.evaluations[&format!("{suite}@wait1.00")],
            ];
            for (i, c) in whole.iter().enumerate() {
                let items = &o.outcomes[i * per_cell as usize..(i + 1) * per_cell as usize];
                let valid = items.iter().filter(|&&x| x >= OUTCOME_VALID).count() as u32;
                let optimal = items.iter().filter(|&&x| x == OUTCOME_OPTIMAL).count() as u32;
                assert_eq!((c.total, c.valid, c.optimal), (per_cell, valid, optimal));
                assert_eq!(
                    halves.map(|h| (h[i].total, h[i].valid)),
                    [
                        (
                            per_cell / 2,
                            items[..per_cell as usize / 2]
                                .iter()
                                .filter(|&&x| x >= OUTCOME_VALID)
                                .count() as u32
                        ),
                        (
                            per_cell / 2,
                            items[per_cell as usize / 2..]
                                .iter()
                                .filter(|&&x| x >= OUTCOME_VALID)
                                .count() as u32
                        )
                    ]
                );
            }
        }
    }

    // compare, text: the subset tables and the paired section.
    let text = ok(&ledger(&d, &["compare", "main", "h"]));
    for needle in [
        "By wait-ratio subset (final stage, mean over sizes)",
        "  val      2  wait0.50 |",
        " test      5  wait1.00 |",
        "Paired, h − main (A = main, B = h; final stages 2 and 2;",
        "10000 resamples",
        "  val      2       all    40 valid   |",
        " test      3  wait0.50     8 valid   |",
        "                            optimal |",
    ] {
        assert!(text.contains(needle), "{needle:?} missing in:\n{text}");
    }

    // compare, JSON: schema-valid; the paired differences are those of the tables.
    let c = json(&ledger(&d, &["compare", "main", "h", "--json"]));
    validates("compare", &c);
    assert!(
        c[0].get("paired").is_none(),
        "the first branch is the baseline"
    );
    let p = &c[1]["paired"];
    assert_eq!(p["against"], "main");
    assert_eq!(p["missing"].as_array().unwrap().len(), 0);
    let rows = p["rows"].as_array().unwrap();
    // val: 2 agents x (all + 2 subsets + coord + indep); test: 3 agent counts x 5.
    assert_eq!(rows.len(), 5 + 15);
    // The coordination halves of each agent count partition its items.
    for r in rows.iter().filter(|r| r["subset"].is_null()) {
        let halves: u64 = rows
            .iter()
            .filter(|h| {
                h["suite"] == r["suite"]
                    && h["agents"] == r["agents"]
                    && (h["subset"] == "coord" || h["subset"] == "indep")
            })
            .map(|h| h["instances"].as_u64().unwrap())
            .sum();
        assert_eq!(halves, r["instances"].as_u64().unwrap(), "{r}");
    }
    let last_val = |b: &Value| b["validation"].as_array().unwrap().last().unwrap()["valid"].clone();
    let val = &rows[0];
    assert_eq!(
        (val["suite"].as_str(), val["instances"].as_u64()),
        (Some("val"), Some(40))
    );
    let diff = last_val(&c[1]).as_f64().unwrap() - last_val(&c[0]).as_f64().unwrap();
    assert!((val["valid"]["diff"].as_f64().unwrap() - diff).abs() < 1e-9);
    let ci = &val["valid"]["diff_ci95"];
    assert!(ci["low"].as_f64().unwrap() <= diff && diff <= ci["high"].as_f64().unwrap());
    // Subset rows: the differences of the subset tables' Sum rows.
    let sub = |b: &Value, suite: &str, subset: &str| -> f64 {
        let t = b["subsets"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["suite"] == suite && t["subset"] == subset)
            .unwrap();
        let cells = t["cells"].as_array().unwrap();
        cells
            .iter()
            .map(|c| 100.0 * c["valid"].as_f64().unwrap() / c["total"].as_f64().unwrap())
            .sum::<f64>()
            / cells.len() as f64
    };
    let row = rows
        .iter()
        .find(|r| r["suite"] == "val" && r["subset"] == "wait0.50")
        .unwrap();
    let d50 = sub(&c[1], "val", "wait0.50") - sub(&c[0], "val", "wait0.50");
    assert!((row["valid"]["diff"].as_f64().unwrap() - d50).abs() < 1e-9);
    assert_eq!(row["instances"], 20);
    let mc = &row["valid"]["mcnemar"];
    let (b, cc) = (
        mc["a_only"].as_u64().unwrap(),
        mc["b_only"].as_u64().unwrap(),
    );
    assert!((mc["p"].as_f64().unwrap() - mcnemar_p(b as u32, cc as u32)).abs() < 1e-15);

    // study: heuristic against fixed, one seed (the fork of stage 2 alone runs).
    let out = tmp.path().join("study");
    let r = json(&ledger(
        &d,
        &[
            "study",
            "--at",
            "stage2",
            "--engineers",
            "fixed,heuristic",
            "--out",
            out.to_str().unwrap(),
            "--json",
            "--quiet",
        ],
    ));
    validates("study", &r);
    let paired = r["paired"].as_array().unwrap();
    assert_eq!(
        paired.len(),
        5 + 15,
        "val and test 3/4/5 agents, each whole + 2 subsets + coord + indep"
    );
    assert!(paired
        .iter()
        .any(|x| x["suite"] == "test" && x["agents"] == 3 && x["subset"] == "coord"));
    for x in paired {
        assert_eq!(
            (x["engineer"].as_str(), x["baseline"].as_str()),
            (Some("heuristic"), Some("fixed"))
        );
        assert_eq!(x["replicates"], serde_json::json!([0]));
        let v = &x["valid"];
        assert_eq!(v["per_seed"][0], v["mean"]);
        assert!(v["ci95"].is_null(), "one seed: no t-interval");
        let b = &v["bootstrap_ci95"];
        let m = v["mean"].as_f64().unwrap();
        assert!(
            b["low"].as_f64().unwrap() <= m && m <= b["high"].as_f64().unwrap(),
            "{x}"
        );
    }
    let sums: Vec<&Value> = r["cells"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["subset"].is_string())
        .collect();
    assert_eq!(
        sums.len(),
        2 * 3 * 4,
        "engineers x agent counts x subsets (2 wait ratios, coord, indep)"
    );
    let md = std::fs::read_to_string(out.join("study.md")).unwrap();
    for needle in [
        "Paired differences vs fixed",
        "Valid %, Δ vs fixed [95% paired CI]:",
        "| Engineer | Validation (2 agents) | 3 agents | 4 agents | 5 agents |",
        "| heuristic @ wait0.50 |",
        "Final-stage test results per wait-ratio subset",
        "| 3 | wait1.00 |",
        "| heuristic @ coord |",
    ] {
        assert!(md.contains(needle), "{needle:?} missing in:\n{md}");
    }
    let csv = std::fs::read_to_string(out.join("study.csv")).unwrap();
    let head = csv.lines().next().unwrap();
    let width = head.split(',').count();
    assert!(csv.lines().all(|l| l.split(',').count() == width), "{csv}");
    assert_eq!(csv.lines().filter(|l| l.starts_with("paired,")).count(), 20);
    assert_eq!(
        csv.lines()
            .filter(|l| l.starts_with("paired_mean,"))
            .count(),
        20
    );
}

/// A ledger recorded before outcomes events existed (events made directly, as older
/// versions wrote them): compare still prints both branches and says there is no paired
/// data and why.
#[test]
fn ledgers_without_outcomes_say_there_is_no_paired_data() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("old");
    let plan = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/plans/tiny.toml"
    ))
    .unwrap();
    let mut l = Ledger::create(&d, &plan).unwrap();
    let stage = |s: u32, valid: u32| -> Vec<(EventBody, u32, Meta)> {
        let cells = |agents: u32, sizes: std::ops::RangeInclusive<u32>| -> Vec<EvalCell> {
            sizes
                .map(|size| EvalCell {
                    agents,
                    size,
                    total: 10,
                    valid,
                    optimal: valid / 2,
                })
                .collect()
        };
        [
            EventBody::StageStarted(StageStarted {
                engineer: "fixed".into(),
                from_checkpoint: None,
                seed: Hash::of_blob(&[s as u8]),
            }),
            EventBody::Evaluation(Evaluation {
                suite: "val".into(),
                checkpoint: None,
                cells: cells(2, 3..=6),
            }),
            EventBody::Evaluation(Evaluation {
                suite: "test".into(),
                checkpoint: None,
                cells: cells(3, 3..=6),
            }),
            EventBody::StageCompleted(StageCompleted {
                checkpoint: None,
                steps: 1,
            }),
        ]
        .into_iter()
        .map(|e| (e, s, Meta::now()))
        .collect()
    };
    l.append("main", stage(0, 4)).unwrap();
    let at = l.head("main").unwrap();
    l.fork("b", &at).unwrap();
    let mut events = vec![(
        EventBody::BranchForked(BranchForked {
            from_branch: "main".into(),
            at,
            engineer: "fixed".into(),
            replicate: 0,
        }),
        0,
        Meta::now(),
    )];
    events.extend(stage(1, 6));
    l.append("b", events).unwrap();
    drop(l);
    let text = ok(&ledger(&d, &["compare", "main", "b"]));
    assert!(text.contains("Test, 3 agents"), "{text}");
    assert!(text.contains("Paired, b − main"), "{text}");
    assert!(text.contains("  no paired data"), "{text}");
    assert!(
        text.contains("val: no per-instance outcomes on main and b"),
        "{text}"
    );
    let c = json(&ledger(&d, &["compare", "main", "b", "--json"]));
    validates("compare", &c);
    assert_eq!(c[1]["paired"]["rows"].as_array().unwrap().len(), 0);
    assert_eq!(c[1]["paired"]["missing"].as_array().unwrap().len(), 2);
}

/// `[suites] wait_ratios` must split both per_cell counts into equal subsets: `init`
/// refuses another plan with exit 2, naming the field.
#[test]
fn init_refuses_a_per_cell_the_wait_ratios_do_not_divide() {
    let tmp = tempfile::tempdir().unwrap();
    let plan = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/plans/tiny.toml"
    ))
    .unwrap()
    .replace(
        "test_per_cell = 5",
        "test_per_cell = 6\nwait_ratios = [0.25, 0.5, 0.75]",
    );
    let p = tmp.path().join("bad.toml");
    std::fs::write(&p, plan).unwrap();
    fails(
        &ledger(
            &tmp.path().join("l"),
            &["init", "--plan", p.to_str().unwrap()],
        ),
        2,
        "suites.validation_per_cell",
    );
}
