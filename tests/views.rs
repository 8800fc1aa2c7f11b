//! The read views and studies through the real `ledger` binary on a real ledger of the
//! tiny plan (2 stages, seconds to run): audit (text and JSON), export of metrics,
//! decisions and branches, compare --plot, and study (files, rows, resumability). Every
//! JSON output is validated against its checked-in schema under schemas/.
use crate::common;

use common::schema::{errors, validates};
use common::{fails, fork, fork_and_run, heads, ledger, ok, tiny_ledger};
use serde_json::Value;

#[test]
fn schema_checker_rejects_bad_documents() {
    let errs = errors("audit", &serde_json::json!({"branch": 3, "head": "xyz"}));
    assert!(errs.len() >= 3, "{errs:?}");
    // `maximum` (schemars writes it for every u8) is enforced too.
    let agent = |goal: u32| {
        serde_json::json!({"size": 3, "grid": ["FFF", "FFF", "FFF"],
        "agents": [{"start": [0, 0], "goal": [goal, 0]}]})
    };
    assert_eq!(errors("instance", &agent(2)), Vec::<String>::new());
    let errs = errors("instance", &agent(256));
    assert!(
        errs.iter()
            .any(|e| e.contains("$/agents/0/goal/0") && e.contains("255")),
        "{errs:?}"
    );
}

#[test]
fn audit_export_and_compare_plot() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tiny_ledger(tmp.path());
    fork_and_run(&d, "stage1", "heuristic", "h");

    // Audit, JSON: one entry per designed stage, complete, schema-valid.
    let a: Value =
        serde_json::from_str(&ok(&ledger(&d, &["audit", "--branch", "h", "--json"]))).unwrap();
    validates("audit", &a);
    let ds = a["decisions"].as_array().unwrap();
    assert_eq!(ds.len(), 2);
    assert_eq!(
        ds.iter()
            .map(|d| d["stage"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        [1, 2]
    );
    let mut any_change = false;
    for dec in ds {
        assert_eq!(dec["engineer"], "heuristic");
        let ev: Vec<&str> = dec["evidence"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l.as_str().unwrap())
            .collect();
        assert!(ev.iter().any(|l| l.starts_with("validation Sum")), "{ev:?}");
        assert!(ev.iter().any(|l| l.starts_with("failures 3x3:")), "{ev:?}");
        assert!(!dec["rationale"].as_str().unwrap().is_empty());
        // Every change is against the previous stage's config and lands in the applied one.
        for c in dec["changes"].as_array().unwrap() {
            let field = c["field"].as_str().unwrap();
            let parts: Vec<&str> = field.split('.').collect();
            let applied = &dec["applied_config"]["sizes"][parts[1]][parts[2]];
            assert_eq!(&c["applied"], applied, "{field}");
            any_change |= c["changed"].as_bool().unwrap();
        }
        let o = &dec["outcome"];
        assert_eq!(o["stage"], dec["stage"]);
        assert_eq!(
            o["previous_stage"].as_u64().unwrap() + 1,
            dec["stage"].as_u64().unwrap()
        );
        let sizes = o["sizes"].as_array().unwrap();
        assert_eq!(sizes.len(), 4, "validation covers 3x3..6x6");
        for z in sizes {
            let d = z["valid_after"].as_f64().unwrap() - z["valid_before"].as_f64().unwrap();
            assert!((d - z["delta_valid"].as_f64().unwrap()).abs() < 1e-9);
        }
        assert!([
            "improved",
            "worsened",
            "unchanged",
            "no_change",
            "not_covered"
        ]
        .contains(&o["verdict"].as_str().unwrap()));
    }
    assert!(any_change, "the heuristic engineer changed something");

    // The fixed engineer of main changes nothing: no_change.
    let m: Value = serde_json::from_str(&ok(&ledger(&d, &["audit", "--json"]))).unwrap();
    validates("audit", &m);
    for dec in m["decisions"].as_array().unwrap() {
        assert!(dec["changes"].as_array().unwrap().is_empty());
        assert_eq!(dec["outcome"]["verdict"], "no_change");
    }

    // Audit, text: compact and readable.
    let t = ok(&ledger(
        &d,
        &["audit", "--branch", "h", "--stage", "stage2"],
    ));
    for needle in [
        "stage 2 · engineer heuristic",
        "saw:",
        "failures 3x3",
        "config: field",
        "rationale:",
        "training: ",
        "groups with signal",
        "outcome (val set, stage 1 -> 2",
        "verdict:",
    ] {
        assert!(t.contains(needle), "{needle:?} missing in:\n{t}");
    }
    assert!(!t.contains("stage 1 · engineer"), "{t}");
    fails(
        &ledger(&d, &["audit", "--branch", "h", "--stage", "9"]),
        2,
        "no engineer decision at stage 9",
    );
    fails(&ledger(&d, &["audit", "--branch", "nope"]), 2, "nope");

    // Export metrics: one flat row per (branch, stage, suite, agents, size).
    let state: Value = serde_json::from_str(&ok(&ledger(&d, &["show", "h", "--json"]))).unwrap();
    let cells: usize = state["state"]["stages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["evaluations"].as_object().unwrap().values())
        .map(|c| c.as_array().unwrap().len())
        .sum();
    assert_eq!(cells, 3 * (4 + 9), "3 stages x (4 val + 9 test cells)");
    let csv = ok(&ledger(
        &d,
        &[
            "export", "--what", "metrics", "--format", "csv", "--branch", "h",
        ],
    ));
    let mut lines = csv.lines();
    assert_eq!(
        lines.next().unwrap(),
        "branch,stage,engineer,suite,agents,size,total,valid,optimal,valid_rate,optimal_rate,gradient_steps,train_trajectories,train_valid,train_optimal,grpo_reward_mean,grpo_reward_std,grpo_signal_share,grpo_skipped_groups,grpo_kl,grpo_clip_fraction,grpo_tokens,completed"
    );
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), cells);
    assert!(rows.iter().all(|r| r.len() == 23 && r[0] == "h"));
    // GRPO statistics: empty for stage 0 (no GRPO step), a reward mean, a signal share
    // in [0, 1] and sampled tokens for every trained stage.
    for r in &rows {
        if r[1] == "0" {
            assert_eq!((r[15], r[17], r[21]), ("", "", "0"), "{r:?}");
        } else {
            let share: f64 = r[17].parse().unwrap();
            assert!(
                r[15].parse::<f64>().is_ok() && (0.0..=1.0).contains(&share),
                "{r:?}"
            );
            assert!(r[21].parse::<u64>().unwrap() > 0, "{r:?}");
        }
    }
    let jsonl = ok(&ledger(
        &d,
        &["export", "--what", "metrics", "--branch", "h"],
    ));
    assert_eq!(jsonl.lines().count(), cells);
    for l in jsonl.lines() {
        validates("export-metric-row", &serde_json::from_str(l).unwrap());
    }
    // Every branch: main and h.
    let all = ok(&ledger(
        &d,
        &["export", "--what", "metrics", "--format", "csv"],
    ));
    assert_eq!(all.lines().count(), 1 + 2 * cells);

    let dec = ok(&ledger(
        &d,
        &["export", "--what", "decisions", "--branch", "h"],
    ));
    assert_eq!(dec.lines().count(), 2);
    for l in dec.lines() {
        validates("export-decision-row", &serde_json::from_str(l).unwrap());
    }
    let dcsv = ok(&ledger(
        &d,
        &["export", "--what", "decisions", "--format", "csv"],
    ));
    assert!(dcsv.starts_with("branch,stage,event,engineer,status,"));
    let br = ok(&ledger(&d, &["export", "--what", "branches"]));
    assert_eq!(br.lines().count(), 2);
    for l in br.lines() {
        validates("export-branch-row", &serde_json::from_str(l).unwrap());
    }
    // Export steps: one row per GRPO step (10 a stage, stages 1 and 2), schema-valid, in
    // order; the per-stage means agree with the metrics export's GRPO columns (another
    // path through the projection), and the coordination split is a part of the batch.
    let steps = ok(&ledger(&d, &["export", "--what", "steps", "--branch", "h"]));
    let rows: Vec<Value> = steps
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 20, "{steps}");
    for r in &rows {
        validates("export-step-row", r);
    }
    let step_no: Vec<u64> = rows.iter().map(|r| r["step"].as_u64().unwrap()).collect();
    assert!(step_no.windows(2).all(|w| w[0] < w[1]), "{step_no:?}");
    let metrics: Vec<Value> = ok(&ledger(
        &d,
        &["export", "--what", "metrics", "--branch", "h"],
    ))
    .lines()
    .map(|l| serde_json::from_str(l).unwrap())
    .collect();
    let mut coordination_samples = 0;
    for stage in [1u64, 2] {
        let of: Vec<&Value> = rows.iter().filter(|r| r["stage"] == stage).collect();
        assert_eq!(of.len(), 10, "stage {stage}");
        let m = metrics.iter().find(|m| m["stage"] == stage).unwrap();
        let mean = |k: &str| of.iter().map(|r| r[k].as_f64().unwrap()).sum::<f64>() / 10.0;
        assert!((mean("reward_mean") - m["grpo_reward_mean"].as_f64().unwrap()).abs() < 1e-9);
        let signal = m["grpo_signal_share"].as_f64().unwrap();
        assert!(
            (1.0 - mean("zero_variance_share") - signal).abs() < 1e-9,
            "stage {stage}"
        );
        for r in of {
            let (n, c, v) = (
                r["samples"].as_u64().unwrap(),
                r["coordination_samples"].as_u64().unwrap(),
                r["coordination_valid"].as_u64().unwrap(),
            );
            assert_eq!(n, 8 * 4, "8 instances x 4 samples");
            assert!(v <= c && c <= n && c % 4 == 0, "whole groups: {r}");
            assert_eq!(r["coordination_valid_pct"].is_null(), c == 0, "{r}");
            coordination_samples += c;
        }
    }
    // Wait ratio 0.2 at both sizes: some of 160 sampled instances need coordination.
    assert!(coordination_samples > 0);
    let scsv = ok(&ledger(
        &d,
        &["export", "--what", "steps", "--format", "csv"],
    ));
    assert!(
        scsv.starts_with("branch,stage,step,event,samples,"),
        "{scsv}"
    );
    // main (stages 1-2) and h (its stages 1-2, stage 1 shared with main).
    assert_eq!(scsv.lines().count(), 1 + 40);
    // The default stays the event export.
    let ev = ok(&ledger(&d, &["export", "--format", "csv", "--branch", "h"]));
    assert!(ev.starts_with("hash,parent,stage,kind,summary\n"));

    // Compare: JSON valid against its schema, --plot writes an SVG with both curves.
    let c: Value =
        serde_json::from_str(&ok(&ledger(&d, &["compare", "main", "h", "--json"]))).unwrap();
    validates("compare", &c);
    // Coordination rows: every evaluated stage of each suite, the two halves of each
    // agent count adding up to the stage's whole-suite counts, the baseline failing every
    // item that needs coordination (by definition) and passing some of the rest.
    for b in c.as_array().unwrap() {
        let rows = b["coordination"].as_array().unwrap();
        let stages: std::collections::BTreeSet<u64> = rows
            .iter()
            .filter(|r| r["suite"] == "val")
            .map(|r| r["stage"].as_u64().unwrap())
            .collect();
        let evaluated: std::collections::BTreeSet<u64> = b["validation"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["stage"].as_u64().unwrap())
            .collect();
        assert_eq!(stages, evaluated, "{}", b["branch"]);
        let last = rows
            .iter()
            .rfind(|r| r["suite"] == "test")
            .expect("test rows");
        for r in last["rows"].as_array().unwrap() {
            if r["needs_coordination"] == true {
                assert_eq!(r["baseline_valid_pct"], 0.0, "{r}");
            }
        }
        let valid: u64 = last["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["valid"].as_u64().unwrap())
            .sum();
        let recorded: u64 = b["test_cells"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["valid"].as_u64().unwrap())
            .sum();
        assert_eq!(valid, recorded, "the halves add up to the suite");
        let indep_baseline: f64 = last["rows"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["needs_coordination"] == false)
            .map(|r| r["baseline_valid_pct"].as_f64().unwrap())
            .sum();
        assert!(indep_baseline > 0.0);
    }
    // Transfer: each branch's final stage against its own stage 0 on the same items,
    // whose sides are the recorded Sum rows (validation at stage 0 and at the end; the
    // final test table), and whose halves are the coordination rows' own.
    for b in c.as_array().unwrap() {
        let t = &b["transfer"];
        let name = b["branch"].as_str().unwrap();
        assert_eq!(t["against"], format!("{name}@stage0"));
        assert_eq!(
            (t["against_stage"].as_u64(), t["stage"].as_u64()),
            (Some(0), Some(2))
        );
        let row = |suite: &str, k: u64, subset: Option<&str>| {
            t["rows"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["suite"] == suite && r["agents"] == k && r["subset"].as_str() == subset)
                .unwrap_or_else(|| panic!("{name}: no {suite} {k} {subset:?} row: {t}"))
                .clone()
        };
        let v = row("val", 2, None);
        let curve = b["validation"].as_array().unwrap();
        assert_eq!(v["valid"]["a"], curve[0]["valid"], "{name}: stage 0 side");
        assert_eq!(
            v["valid"]["b"],
            curve.last().unwrap()["valid"],
            "{name}: final side"
        );
        let d = v["valid"]["b"].as_f64().unwrap() - v["valid"]["a"].as_f64().unwrap();
        assert!((v["valid"]["diff"].as_f64().unwrap() - d).abs() < 1e-9);
        for k in [3u64, 4, 5] {
            let r = row("test", k, None);
            let (total, valid): (u64, u64) = b["test_cells"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|c| c["agents"] == k)
                .fold((0, 0), |(t, v), c| {
                    (
                        t + c["total"].as_u64().unwrap(),
                        v + c["valid"].as_u64().unwrap(),
                    )
                });
            assert_eq!(r["instances"].as_u64(), Some(total));
            // Equal items per size: the Sum row (mean over sizes) is the pooled rate.
            let pooled = 100.0 * valid as f64 / total as f64;
            assert!(
                (r["valid"]["b"].as_f64().unwrap() - pooled).abs() < 1e-9,
                "{name} {k}: {r}"
            );
            row("test", k, Some("coord"));
            row("test", k, Some("indep"));
        }
    }
    let text = ok(&ledger(&d, &["compare", "main", "h"]));
    assert!(text.contains("Items that need coordination"), "{text}");
    // One transfer line per branch and agent count.
    let transfer = text
        .split("\nTransfer: ")
        .nth(1)
        .expect("a transfer section")
        .split("\n\n")
        .next()
        .unwrap();
    for b in ["main", "h"] {
        for (k, suite) in [(2, "val"), (3, "test"), (4, "test"), (5, "test")] {
            let lines = transfer
                .lines()
                .filter(|l| {
                    let w: Vec<&str> = l.split_whitespace().collect();
                    w.len() > 3 && w[0] == b && w[1] == k.to_string() && w[2] == suite
                })
                .count();
            assert_eq!(lines, 1, "{b} {k} agents: {transfer}");
        }
    }
    let svg = tmp.path().join("curves.svg");
    let out = ok(&ledger(
        &d,
        &["compare", "main", "h", "--plot", svg.to_str().unwrap()],
    ));
    assert!(out.contains("Validation"), "the text output stays: {out}");
    let s = std::fs::read_to_string(&svg).unwrap();
    assert!(s.contains("<svg") && s.contains("</svg>"));
    assert!(s.contains(">\nmain\n<") && s.contains(">\nh\n<"), "legend");
    // Valid % beside optimal %: two panels, each with both branches' curves.
    assert!(s.matches("<polyline").count() >= 4);
    assert!(s.contains("Validation valid %") && s.contains("Validation optimal %"));
    // PNG for papers: a real PNG at print size (two 800-pixel panels, drawn at twice
    // the SVG's size); other extensions are refused, named.
    let png = tmp.path().join("curves.png");
    ok(&ledger(
        &d,
        &["compare", "main", "h", "--plot", png.to_str().unwrap()],
    ));
    let b = std::fs::read(&png).unwrap();
    assert_eq!(&b[..8], b"\x89PNG\r\n\x1a\n");
    assert_eq!(u32::from_be_bytes(b[16..20].try_into().unwrap()), 3200);
    let pdf = tmp.path().join("curves.pdf");
    fails(
        &ledger(&d, &["compare", "main", "--plot", pdf.to_str().unwrap()]),
        2,
        "curves.pdf: plots are written as SVG or PNG",
    );
    assert!(!pdf.exists());
}

#[test]
fn study_forks_runs_writes_and_resumes() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tiny_ledger(tmp.path());
    // A partial run left behind (as by a kill): the study resumes it.
    fork(&d, "stage1", "fixed", "study-at1-fixed-s0");
    ok(&ledger(
        &d,
        &[
            "run",
            "--branch",
            "study-at1-fixed-s0",
            "--stages",
            "1",
            "--quiet",
        ],
    ));
    let out = tmp.path().join("study");
    let args = [
        "study",
        "--at",
        "stage1",
        "--engineers",
        "fixed,learnability",
        "--seeds",
        "2",
        "--out",
        out.to_str().unwrap(),
        "--power-sd",
        "3.59",
        "--json",
    ];
    let first = ledger(&d, &args);
    let r: Value = serde_json::from_str(&ok(&first)).unwrap();
    validates("study", &r);
    let err = String::from_utf8_lossy(&first.stderr);
    assert!(err.contains("[1/4] study-at1-fixed-s0"), "progress: {err}");
    assert!(err.contains("stage 2 done"), "progress: {err}");
    let runs = r["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 4);
    let actions: Vec<(&str, &str)> = runs
        .iter()
        .map(|x| (x["branch"].as_str().unwrap(), x["action"].as_str().unwrap()))
        .collect();
    assert_eq!(
        actions,
        [
            ("study-at1-fixed-s0", "resumed"),
            ("study-at1-fixed-s1", "ran"),
            ("study-at1-learnability-s0", "ran"),
            ("study-at1-learnability-s1", "ran"),
        ]
    );
    for x in runs {
        assert_eq!(x["summary"]["final_stage"], 2, "ran to the plan's end");
    }
    // Replicate 0 uses the plan's seeds: the fixed fork repeats main's fixed stages.
    let main: Value =
        serde_json::from_str(&ok(&ledger(&d, &["compare", "main", "--json"]))).unwrap();
    assert_eq!(runs[0]["summary"]["validation"], main[0]["validation"]);
    assert_eq!(runs[0]["summary"]["test_cells"], main[0]["test_cells"]);

    // Cells: per engineer, Sum + sizes for 3 (4 sizes), 4 (3) and 5 (2) agents, and
    // the items that need coordination and the rest of each agent count.
    let cells = r["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 2 * (3 + 9 + 3 * 2));
    assert_eq!(
        cells.iter().filter(|c| c["subset"] == "coord").count(),
        2 * 3
    );
    for c in cells {
        assert_eq!(c["n"], 2);
        assert!(c["valid_ci95"].is_number(), "two seeds give an interval");
    }

    // Files.
    let csv = std::fs::read_to_string(out.join("study.csv")).unwrap();
    let mut lines = csv.lines();
    assert!(lines
        .next()
        .unwrap()
        .starts_with("kind,engineer,replicate,branch,"));
    let kinds: Vec<&str> = lines.map(|l| l.split(',').next().unwrap()).collect();
    assert_eq!(kinds.iter().filter(|k| **k == "cell").count(), 4 * 9);
    assert_eq!(kinds.iter().filter(|k| **k == "sum").count(), 4 * 3);
    // A mean row per study cell: 2 engineers x (Sum + sizes + coord/indep halves).
    assert_eq!(kinds.iter().filter(|k| **k == "mean").count(), 2 * 18);
    // Per engineer, a transfer_mean row per Sum row that has one in the JSON.
    assert_eq!(
        kinds.iter().filter(|k| **k == "transfer_mean").count(),
        r["transfer"].as_array().unwrap().len()
    );
    // Transfer per engineer: each Sum row's change from stage 0, seed by seed, whose
    // per-seed values are the runs' own transfer rows.
    let tr = r["transfer"].as_array().unwrap();
    for e in ["fixed", "learnability"] {
        for k in [2u64, 3, 4, 5] {
            let suite = if k == 2 { "val" } else { "test" };
            let row = tr
                .iter()
                .find(|p| {
                    p["engineer"] == e
                        && p["suite"] == suite
                        && p["agents"] == k
                        && p["subset"].is_null()
                })
                .unwrap_or_else(|| panic!("no transfer of {e} on {suite} {k}"));
            assert_eq!(row["baseline"], "stage 0");
            let per_seed: Vec<f64> = runs
                .iter()
                .filter(|x| x["engineer"] == e)
                .map(|x| {
                    x["summary"]["transfer"]["rows"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .find(|t| t["suite"] == suite && t["agents"] == k && t["subset"].is_null())
                        .unwrap()["valid"]["diff"]
                        .as_f64()
                        .unwrap()
                })
                .collect();
            assert_eq!(row["valid"]["per_seed"], serde_json::json!(per_seed));
            assert!(row["valid"]["bootstrap_ci95"].is_object(), "{row}");
        }
    }
    let md = std::fs::read_to_string(out.join("study.md")).unwrap();
    assert!(md.contains("Transfer: each run's final stage"), "{md}");
    assert!(
        md.contains("| Agents | Size | fixed | learnability |"),
        "{md}"
    );
    assert!(
        md.contains("| 3 | **Sum** |") && md.contains("| 5 | 6x6 |"),
        "{md}"
    );
    assert!(md.contains(" ± "), "{md}");
    // The power line: target row test, 3 agents, coordination items; planned from the
    // pilot's SD given (3.59 points: 7 seeds for 5 points), observed from this study's
    // two paired seeds (the SD of the paired row's per-seed differences).
    let pw = &r["power"];
    assert_eq!(
        (pw["suite"].as_str(), pw["agents"].as_u64()),
        (Some("test"), Some(3))
    );
    assert_eq!(
        (pw["subset"].as_str(), pw["planned_seeds"].as_u64()),
        (Some("coord"), Some(7))
    );
    let row = r["paired"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["suite"] == "test" && p["agents"] == 3 && p["subset"] == "coord")
        .unwrap();
    let xs: Vec<f64> = row["valid"]["per_seed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    assert_eq!(xs.len(), 2);
    let obs = &pw["observed"][0];
    assert_eq!(
        (obs["engineer"].as_str(), obs["seeds"].as_u64()),
        (Some("learnability"), Some(2))
    );
    let sd = (xs[0] - xs[1]).abs() / 2f64.sqrt();
    assert!(
        (obs["sd"].as_f64().unwrap() - sd).abs() < 1e-9,
        "{obs} vs {xs:?}"
    );
    assert!(
        md.contains("Power: to see 5 points on test 3-agent `coord` items with 80% power")
            && md.contains("3.59 points: **7 seeds**")
            && md.contains("learnability − fixed: SD "),
        "{md}"
    );
    // The paper's ordering, stated with its interval and what the interval says.
    let claim = md
        .lines()
        .find(|l| l.starts_with("- engineered > fixed: learnability − fixed, test 3 agents:"))
        .unwrap_or_else(|| panic!("{md}"));
    assert!(
        ["**holds**", "**reversed**", "**not resolved**"]
            .iter()
            .any(|v| claim.ends_with(v)),
        "{claim}"
    );
    assert!(
        r["orderings"].as_array().unwrap().is_empty(),
        "no current/base arms"
    );
    let svg = std::fs::read_to_string(out.join("study.svg")).unwrap();
    assert!(svg.contains("<svg") && svg.contains(">\nlearnability\n<"));
    assert!(std::fs::read(out.join("study.png"))
        .unwrap()
        .starts_with(b"\x89PNG"));
    // study.json reads back as the report `--json` printed (what `ledger report --study` uses).
    let saved: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("study.json")).unwrap()).unwrap();
    assert_eq!(saved["cells"], r["cells"]);
    assert_eq!(saved["runs"], r["runs"]);

    // Resumable: a second call runs nothing and leaves every head where it was.
    let before = heads(&d);
    let second = ledger(&d, &args);
    let r2: Value = serde_json::from_str(&ok(&second)).unwrap();
    assert!(r2["runs"]
        .as_array()
        .unwrap()
        .iter()
        .all(|x| x["action"] == "skipped"));
    assert!(
        !String::from_utf8_lossy(&second.stderr).contains("stage"),
        "nothing ran: {}",
        String::from_utf8_lossy(&second.stderr)
    );
    assert_eq!(heads(&d), before);
    assert_eq!(r2["cells"], r["cells"]);

    // One seed: no interval. Default output directory under the ledger.
    let one: Value = serde_json::from_str(&ok(&ledger(
        &d,
        &[
            "study",
            "--at",
            "stage1",
            "--engineers",
            "fixed",
            "--seeds",
            "1",
            "--json",
            "--quiet",
        ],
    )))
    .unwrap();
    assert!(one["cells"][0]["valid_ci95"].is_null());
    assert!(d.join("study-at1/study.md").exists());

    // Power figures that are not numbers of points are refused before anything runs.
    for (flag, v) in [("--power-sd", "nan"), ("--power-effect", "0")] {
        fails(
            &ledger(
                &d,
                &["study", "--at", "stage1", "--engineers", "fixed", flag, v],
            ),
            2,
            flag,
        );
    }
    // A branch with a study name that is not the study's run is a clear input error.
    fork(&d, "stage1", "fixed", "study-at1-random-s0");
    fails(
        &ledger(
            &d,
            &[
                "study",
                "--at",
                "stage1",
                "--engineers",
                "random",
                "--quiet",
            ],
        ),
        2,
        "study-at1-random-s0 exists but is not this study's run",
    );
    fails(
        &ledger(&d, &["study", "--at", "stage9", "--engineers", "fixed"]),
        2,
        "stage",
    );
}

/// A study whose worker ledgers are gone keeps its finished runs through its report:
/// `--reuse study.json` counts them (each checked to fork from this ledger's `main`),
/// pairs them item by item through the outcomes the report kept, and runs only the
/// replicates the report lacks; a report of another fork point, or
/// whose runs did not fork from this `main`, is refused before anything runs.
#[test]
fn study_reuses_the_finished_runs_of_an_earlier_report() {
    let tmp = tempfile::tempdir().unwrap();
    let a = tiny_ledger(&tmp.path().join("a"));
    let out_a = tmp.path().join("study-a");
    let study = |d: &std::path::Path, seeds: &str, out: &std::path::Path, extra: &[&str]| {
        let mut args = vec![
            "study",
            "--at",
            "stage1",
            "--engineers",
            "fixed,learnability",
            "--seeds",
            seeds,
            "--out",
            out.to_str().unwrap(),
            "--json",
            "--quiet",
        ];
        args.extend_from_slice(extra);
        ledger(d, &args)
    };
    let first: Value = serde_json::from_str(&ok(&study(&a, "1", &out_a, &[]))).unwrap();
    // The same plan run again elsewhere: the same main, bit for bit.
    let b = tiny_ledger(&tmp.path().join("b"));
    let main_of = |d: &std::path::Path| heads(d).into_iter().find(|h| h.0 == "main").unwrap();
    assert_eq!(main_of(&a), main_of(&b));
    let report = out_a.join("study.json");
    let reuse = ["--reuse", report.to_str().unwrap()];
    let out_b = tmp.path().join("study-b");
    let r: Value = serde_json::from_str(&ok(&study(&b, "2", &out_b, &reuse))).unwrap();
    validates("study", &r);
    let actions: Vec<(&str, &str)> = r["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| (x["branch"].as_str().unwrap(), x["action"].as_str().unwrap()))
        .collect();
    assert_eq!(
        actions,
        [
            ("study-at1-fixed-s0", "reused"),
            ("study-at1-fixed-s1", "ran"),
            ("study-at1-learnability-s0", "reused"),
            ("study-at1-learnability-s1", "ran"),
        ]
    );
    // Only the new replicates were forked here.
    let names: Vec<String> = heads(&b).into_iter().map(|h| h.0).collect();
    assert!(
        !names.contains(&"study-at1-fixed-s0".to_string()),
        "{names:?}"
    );
    assert!(
        names.contains(&"study-at1-fixed-s1".to_string()),
        "{names:?}"
    );
    // The reused runs are the report's, and their Sum rows are the report's: replicate
    // 0's paired differences (from test tables rebuilt out of the report's cells) are
    // the ones the first study computed from its ledger.
    for (old, new) in first["runs"].as_array().unwrap().iter().zip([0, 2]) {
        let new = &r["runs"][new];
        assert_eq!(new["head"], old["head"]);
        assert_eq!(new["summary"]["test_cells"], old["summary"]["test_cells"]);
        assert_eq!(new["summary"]["validation"], old["summary"]["validation"]);
    }
    let row = |rep: &Value, subset: Option<&str>| -> Value {
        rep["paired"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["suite"] == "test" && p["agents"] == 3 && p["subset"].as_str() == subset)
            .unwrap()
            .clone()
    };
    // The report kept each run's per-instance outcomes, so the reused replicate still
    // pairs item by item: the pooled bootstraps (orderings and transfer) are the ones a
    // study that ran both replicates in one ledger computes.
    let whole: Value =
        serde_json::from_str(&ok(&study(&a, "2", &tmp.path().join("study-a2"), &[]))).unwrap();
    for subset in [None, Some("coord")] {
        let (old, new) = (row(&first, subset), row(&r, subset));
        assert_eq!(new["replicates"], serde_json::json!([0, 1]));
        assert_eq!(new["valid"]["per_seed"][0], old["valid"]["per_seed"][0]);
        assert_eq!(new["optimal"]["per_seed"][0], old["optimal"]["per_seed"][0]);
        assert!(new["note"].is_null(), "{new}");
        assert_eq!(new, row(&whole, subset));
        assert!(new["valid"]["bootstrap_ci95"].is_object(), "{new}");
    }
    assert_eq!(r["transfer"], whole["transfer"]);
    assert!(
        r["transfer"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["valid"]["bootstrap_ci95"].is_object()),
        "{}",
        r["transfer"]
    );
    // A report written before reports kept outcomes still counts, with the seed-level
    // interval alone and a note saying why.
    let mut old_report = first.clone();
    for run in old_report["runs"].as_array_mut().unwrap() {
        run.as_object_mut().unwrap().remove("items");
    }
    let old_path = tmp.path().join("old.json");
    std::fs::write(&old_path, serde_json::to_string(&old_report).unwrap()).unwrap();
    let d = tempfile::tempdir().unwrap();
    let d = tiny_ledger(d.path());
    let from_old: Value = serde_json::from_str(&ok(&study(
        &d,
        "1",
        &tmp.path().join("study-d"),
        &["--reuse", old_path.to_str().unwrap()],
    )))
    .unwrap();
    let new = row(&from_old, None);
    assert!(new["valid"]["bootstrap_ci95"].is_null(), "{new}");
    assert!(
        new["note"]
            .as_str()
            .unwrap()
            .contains("taken from an earlier report"),
        "{new}"
    );
    let md = std::fs::read_to_string(out_b.join("study.md")).unwrap();
    assert!(
        md.contains("replicate 0, head ") && md.contains(" (from an earlier report)"),
        "{md}"
    );

    // Refused, and nothing forked or run: a report of another fork point, and one whose
    // run inherited an evaluation this main never recorded.
    let before = heads(&b);
    let other = study(&b, "3", &out_b, &reuse);
    assert_eq!(
        other.status.code(),
        Some(0),
        "the same report again is fine"
    );
    let before_bad = heads(&b);
    assert_ne!(before, before_bad, "replicate 2 ran");
    let at2 = ledger(
        &b,
        &[
            "study",
            "--at",
            "stage2",
            "--engineers",
            "fixed",
            "--reuse",
            report.to_str().unwrap(),
        ],
    );
    fails(
        &at2,
        2,
        "a study of main forked at stage1, not of main at stage2",
    );
    let mut bad = first.clone();
    bad["runs"][0]["summary"]["coordination"][0]["event"] = Value::String("ab".repeat(32));
    let bad_path = tmp.path().join("bad.json");
    std::fs::write(&bad_path, serde_json::to_string(&bad).unwrap()).unwrap();
    let c = tempfile::tempdir().unwrap();
    let c = tiny_ledger(c.path());
    // A refused reuse exits 2 naming why, and forks nothing.
    let refused = |report: &str, why: &str| {
        fails(
            &study(&c, "1", &tmp.path().join("study-c"), &["--reuse", report]),
            2,
            why,
        );
        assert_eq!(heads(&c).len(), 1, "nothing forked: {:?}", heads(&c));
    };
    refused(
        bad_path.to_str().unwrap(),
        "did not fork from this ledger's main",
    );
    // Outcomes that do not count to the run's own test table are not this run's.
    let mut bad = first.clone();
    let items = &mut bad["runs"][0]["items"]["final_stage"];
    let test = items
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|o| o["outcomes"]["suite"] == "test")
        .unwrap();
    let bytes = test["outcomes"]["outcomes"].as_array_mut().unwrap();
    bytes[0] = Value::from(if bytes[0] == 0 { 2 } else { 0 });
    std::fs::write(&bad_path, serde_json::to_string(&bad).unwrap()).unwrap();
    refused(bad_path.to_str().unwrap(), "do not count to its test table");
    refused("/nonexistent/study.json", "--reuse /nonexistent/study.json");
    assert_eq!(heads(&b), before_bad);
}

/// What a researcher reads without the codec: floats as numbers in every JSON, sampled
/// plans drawn on their grids (`show --samples`), and TensorBoard event files whose
/// scalars are the same numbers `export --what steps` and `export --what metrics` give.
#[test]
fn decoded_floats_samples_and_tensorboard() {
    use mapf_ledger::views::tensorboard::{read_scalars, FILE_NAME};
    let tmp = tempfile::tempdir().unwrap();
    let d = tiny_ledger(tmp.path());
    fork_and_run(&d, "stage1", "heuristic", "h");

    // Events: losses and rewards are numbers, plans text; the schema says so.
    let events: Vec<Value> = ok(&ledger(&d, &["export", "--branch", "h"]))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let step = events
        .iter()
        .find_map(|e| e["body"].get("gradient_step"))
        .expect("a gradient step");
    for k in [
        "loss",
        "policy_loss",
        "kl",
        "entropy",
        "grad_norm",
        "reward_mean",
    ] {
        let x = step[k].as_f64().unwrap();
        assert!(step[k].is_f64() && x.abs() < 1e6, "{k}: {}", step[k]);
    }
    let batch = events
        .iter()
        .find_map(|e| e["body"].get("trajectories"))
        .expect("a batch");
    let t = &batch["trajectories"][0];
    assert!(t["plan"].is_string(), "{t}");
    assert!(t["reward"].as_f64().unwrap().abs() <= 10.0, "{t}");
    for e in &events {
        validates("ledger-event", e);
    }
    let stage: Value =
        serde_json::from_str(&ok(&ledger(&d, &["show", "h@stage2", "--json"]))).unwrap();
    validates("show-stage", &stage);
    assert!(stage["stage"]["last_loss"].is_f64(), "{stage}");

    // Samples: spread over the stage, drawn from each instance's starts, filtered by kind.
    let s: Value = serde_json::from_str(&ok(&ledger(
        &d,
        &["show", "h@stage2", "--samples", "5", "--json"],
    )))
    .unwrap();
    validates("show-samples", &s);
    assert_eq!(s["recorded"], 10 * 32, "10 steps of 32 samples");
    let samples = s["samples"].as_array().unwrap();
    assert_eq!(samples.len(), 5);
    let steps: Vec<u64> = samples
        .iter()
        .map(|x| x["step"].as_u64().unwrap())
        .collect();
    assert!(
        steps.windows(2).all(|w| w[0] <= w[1]) && steps[0] < steps[4],
        "{steps:?}"
    );
    for x in samples {
        let n = x["drawing"]["size"].as_u64().unwrap() as usize;
        assert_eq!(x["drawing"]["rows"].as_array().unwrap().len(), n);
        assert_eq!(
            x["drawing"]["paths"].as_array().unwrap().len() as u64,
            x["agents"].as_u64().unwrap()
        );
        // A valid plan's paths end on the goals; a failed one is marked where it failed.
        if x["valid"] == true {
            for (p, g) in x["drawing"]["paths"]
                .as_array()
                .unwrap()
                .iter()
                .zip(x["drawing"]["goals"].as_array().unwrap())
            {
                assert_eq!(p.as_array().unwrap().last().unwrap(), g, "{x}");
            }
        } else if x["failure"] != "parse_error" {
            assert!(
                !x["drawing"]["failure_cells"].as_array().unwrap().is_empty(),
                "{x}"
            );
        }
    }
    let invalid: Value = serde_json::from_str(&ok(&ledger(
        &d,
        &[
            "show",
            "h@stage2",
            "--samples",
            "50",
            "--kind",
            "invalid",
            "--json",
        ],
    )))
    .unwrap();
    let m = invalid["matching"].as_u64().unwrap();
    assert!(m > 0 && m < 320, "some but not all samples fail: {m}");
    assert!(invalid["samples"]
        .as_array()
        .unwrap()
        .iter()
        .all(|x| x["valid"] == false));
    let text = ok(&ledger(
        &d,
        &["show", "h@stage2", "--samples", "2", "--kind", "invalid"],
    ));
    assert!(
        text.contains("invalid: ") && text.contains("X: where it failed"),
        "{text}"
    );
    fails(
        &ledger(&d, &["show", "h", "--samples", "2"]),
        2,
        "name a stage, as in h@stage1",
    );
    fails(
        &ledger(
            &d,
            &["show", "h@stage2", "--samples", "2", "--kind", "holes"],
        ),
        2,
        "not a kind of sample",
    );

    // TensorBoard: one run per branch; the scalars are the exports' numbers.
    let tb = tmp.path().join("tb");
    let said = ok(&ledger(
        &d,
        &[
            "export",
            "--format",
            "tensorboard",
            "--out",
            tb.to_str().unwrap(),
        ],
    ));
    assert!(said.contains("2 runs"), "{said}");
    let scalars = read_scalars(&std::fs::read(tb.join("h").join(FILE_NAME)).unwrap()).unwrap();
    let series = |tag: &str| -> Vec<(i64, f32)> {
        scalars
            .iter()
            .filter(|s| s.tag == tag)
            .map(|s| (s.step, s.value))
            .collect()
    };
    let rows: Vec<Value> = ok(&ledger(&d, &["export", "--what", "steps", "--branch", "h"]))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let want: Vec<(i64, f32)> = rows
        .iter()
        .map(|r| {
            (
                r["step"].as_i64().unwrap(),
                r["reward_mean"].as_f64().unwrap() as f32,
            )
        })
        .collect();
    assert_eq!(series("train/reward_mean"), want);
    // One loss per optimiser step, warm-up included, at the steps the events name.
    let grad_steps: Vec<(u64, i64)> = events
        .iter()
        .filter_map(|e| {
            Some((
                e["stage"].as_u64()?,
                e["body"].get("gradient_step")?["step"].as_i64()?,
            ))
        })
        .collect();
    let loss = series("train/loss");
    assert_eq!(
        loss.iter().map(|l| l.0).collect::<Vec<_>>(),
        grad_steps.iter().map(|g| g.1).collect::<Vec<_>>()
    );
    let last_step = |stage: u64| {
        grad_steps
            .iter()
            .filter(|g| g.0 <= stage)
            .map(|g| g.1)
            .max()
            .unwrap_or(0)
    };
    assert!(
        scalars.iter().all(|s| s.wall_time > 1.6e9),
        "recorded wall times"
    );
    // Validation valid % of 2 agents per stage, at the stage's last optimiser step,
    // against the metrics export's cells pooled over sizes.
    let metrics: Vec<Value> = ok(&ledger(
        &d,
        &["export", "--what", "metrics", "--branch", "h"],
    ))
    .lines()
    .map(|l| serde_json::from_str(l).unwrap())
    .collect();
    let val = series("val/2_agents/valid");
    assert_eq!(val.len(), 3, "stages 0-2: {val:?}");
    assert_eq!(
        val.iter().map(|v| v.0).collect::<Vec<_>>(),
        (0..3).map(last_step).collect::<Vec<_>>()
    );
    for (stage, &(_, v)) in val.iter().enumerate() {
        let cells: Vec<&Value> = metrics
            .iter()
            .filter(|m| m["stage"] == stage as u64 && m["suite"] == "val" && m["agents"] == 2)
            .collect();
        let sum = |k: &str| cells.iter().map(|c| c[k].as_u64().unwrap()).sum::<u64>() as f64;
        assert_eq!(
            v,
            (100.0 * sum("valid") / sum("total")) as f32,
            "stage {stage}"
        );
    }
    for tag in [
        "test/3_agents/valid",
        "test/3_agents/coord/optimal",
        "stage",
    ] {
        assert!(!series(tag).is_empty(), "{tag}");
    }
    // --what has no meaning here; --out is required and must be a directory.
    fails(
        &ledger(&d, &["export", "--format", "tensorboard"]),
        2,
        "--out DIR",
    );
    fails(
        &ledger(
            &d,
            &[
                "export",
                "--format",
                "tensorboard",
                "--what",
                "steps",
                "--out",
                "x",
            ],
        ),
        2,
        "--what steps does not apply",
    );
    let file = tmp.path().join("file");
    std::fs::write(&file, "keep").unwrap();
    fails(
        &ledger(
            &d,
            &[
                "export",
                "--format",
                "tensorboard",
                "--out",
                file.to_str().unwrap(),
            ],
        ),
        2,
        "not a directory",
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep");

    // Evaluation plans: not kept by plans without suites.keep_plans (named in the error) ...
    fails(
        &ledger(
            &d,
            &["show", "h@stage2", "--samples", "2", "--suite", "test"],
        ),
        2,
        "suites.keep_plans = true",
    );
    // ... and kept, one blob per suite evaluation, by a plan that sets it: every failed
    // test item can be drawn, its outcome the recorded one, and replay reproduces them.
    let tiny = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/plans/tiny.toml"
    ))
    .unwrap();
    let plan = tmp.path().join("keep.toml");
    std::fs::write(
        &plan,
        tiny.replace("[suites]\n", "[suites]\nkeep_plans = true\n"),
    )
    .unwrap();
    let k = tmp.path().join("keep");
    ok(&ledger(&k, &["init", "--plan", plan.to_str().unwrap()]));
    ok(&ledger(&k, &["run", "--stages", "1", "--quiet"]));
    let kinds: Vec<String> = ok(&ledger(&k, &["export", "--format", "csv"]))
        .lines()
        .filter_map(|l| l.split(',').nth(3).map(String::from))
        .collect();
    assert_eq!(
        kinds.iter().filter(|k| *k == "evaluation_plans").count(),
        2,
        "val and test"
    );
    let all: Value = serde_json::from_str(&ok(&ledger(
        &k,
        &[
            "show",
            "main@stage0",
            "--samples",
            "1000",
            "--suite",
            "test",
            "--json",
        ],
    )))
    .unwrap();
    validates("show-samples", &all);
    let outcomes = events_of(&k, "evaluation_outcomes")
        .into_iter()
        .find(|o| o["suite"] == "test")
        .unwrap();
    let bytes = outcomes["outcomes"].as_array().unwrap();
    let items = all["samples"].as_array().unwrap();
    assert_eq!(items.len(), bytes.len(), "every test item");
    for (x, b) in items.iter().zip(bytes) {
        assert_eq!(x["valid"], b.as_u64().unwrap() >= 1, "{x}");
        assert_eq!(x["optimal"], b.as_u64().unwrap() == 2, "{x}");
        assert!(x["reward"].is_null() && x["step"].is_null() && x["suite"] == "test");
    }
    let failed = ok(&ledger(
        &k,
        &[
            "show",
            "main@stage0",
            "--samples",
            "1",
            "--suite",
            "test",
            "--kind",
            "invalid",
        ],
    ));
    assert!(
        failed.contains("test item") && failed.contains("invalid: "),
        "{failed}"
    );
    ok(&ledger(&k, &["replay", "--verify"]));
    // The report draws the failed test items (no GRPO samples at stage 0).
    let rep = tmp.path().join("keep-report");
    ok(&ledger(&k, &["report", "--out", rep.to_str().unwrap()]));
    let page = std::fs::read_to_string(rep.join("index.html")).unwrap();
    let drawn = page.matches("data-suite=\"test\"").count();
    assert!(drawn > 0 && drawn <= 4, "{drawn} failed test items drawn");

    // Paired statistics as rows: h against main, per suite, agent count and subset, the
    // numbers compare --json gives.
    let rows: Vec<Value> = ok(&ledger(&d, &["export", "--what", "paired"]))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(!rows.is_empty());
    for r in &rows {
        validates("export-paired-row", r);
        assert_eq!(
            (r["branch"].as_str(), r["against"].as_str()),
            (Some("h"), Some("main"))
        );
    }
    let c: Value =
        serde_json::from_str(&ok(&ledger(&d, &["compare", "main", "h", "--json"]))).unwrap();
    let want = &c[1]["paired"]["rows"][0];
    let got = rows
        .iter()
        .find(|r| r["suite"] == want["suite"] && r["agents"] == want["agents"] && r["subset"] == "")
        .unwrap();
    assert_eq!(got["valid_diff"], want["valid"]["diff"]);
    assert_eq!(got["valid_diff_low"], want["valid"]["diff_ci95"]["low"]);
    assert_eq!(got["optimal_p"], want["optimal"]["mcnemar"]["p"]);
    let csv = ok(&ledger(
        &d,
        &["export", "--what", "paired", "--format", "csv"],
    ));
    assert!(csv.starts_with("branch,against,stage,against_stage,suite,agents,subset,instances,valid_against,valid,valid_diff,"), "{csv}");
    assert_eq!(csv.lines().count(), rows.len() + 1);
}

/// The bodies of every `kind` event of `main`, oldest first.
fn events_of(d: &std::path::Path, kind: &str) -> Vec<Value> {
    ok(&ledger(d, &["export", "--branch", "main"]))
        .lines()
        .filter_map(|l| {
            serde_json::from_str::<Value>(l).ok()?["body"]
                .get(kind)
                .cloned()
        })
        .collect()
}

/// `engineer eval` on a real ledger: its recorded decision contexts join the synthetic
/// ones, the learnability probe engineer and the reference policy are checkpoints of
/// the ledger (a grid policy here), and every decision's configuration is scored by the
/// reference's learnability with the same seeds for every engineer.
#[test]
fn engineer_eval_reads_a_ledgers_contexts_and_probes_with_a_reference() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tiny_ledger(tmp.path());
    let out = ok(&ledger(
        &d,
        &[
            "engineer",
            "eval",
            "--engineer",
            "fixed,learnability,heuristic",
            "--model",
            "main@stage1",
            "--reference",
            "main@stage1",
            "--contexts",
            "3",
            "--from-ledger",
            d.to_str().unwrap(),
            "--json",
        ],
    ));
    let r: Value = serde_json::from_str(&out).unwrap();
    validates("engineer-eval", &r);
    let sources = r["sources"].as_array().unwrap();
    assert!(
        sources[1].as_str().unwrap().starts_with("2 from"),
        "main's 2 decisions: {sources:?}"
    );
    for e in r["engineers"].as_array().unwrap() {
        let rows = e["rows"].as_array().unwrap();
        assert_eq!(rows.len(), 5);
        assert!(
            rows[3]["context"]
                .as_str()
                .unwrap()
                .ends_with("main@stage1"),
            "{}",
            rows[3]["context"]
        );
        for row in rows {
            let l = row["learnability"].as_f64().unwrap();
            let p = row["pass_rate"].as_f64().unwrap();
            assert!(
                (0.0..=1.0).contains(&l) && (0.0..=1.0).contains(&p),
                "{row}"
            );
        }
    }
    // fixed leaves every configuration as it is, so the reference sees the same
    // instances for it on every run: its scores are reproducible to the bit.
    let again: Value = serde_json::from_str(&ok(&ledger(
        &d,
        &[
            "engineer",
            "eval",
            "--engineer",
            "fixed",
            "--reference",
            "main@stage1",
            "--contexts",
            "3",
            "--from-ledger",
            d.to_str().unwrap(),
            "--json",
        ],
    )))
    .unwrap();
    assert_eq!(again["engineers"][0]["rows"], r["engineers"][0]["rows"]);
    assert!(r["paired"]
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p["metric"] == "learnability"));
}
