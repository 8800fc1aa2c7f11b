//! The shipped base planner (`ledgers/models/mapf-reader-v3`, the demo's) and `ledger eval`: the
//! directory loads as an HF model, its files hash to what its README states, it reads
//! the cells prompt and writes a plan the cells parser accepts; `ledger eval` scores an
//! HF directory and a ledger checkpoint in the paper's layout, with a schema'd `--json`
//! and clear refusals.
use crate::common;
use common::{fails, ledger, ok, schema::validates};
use mapf_ledger::env::{generate, simulate, Budget, GeneratorConfig};
use mapf_ledger::seed::Seed;
use mapf_ledger::train::lm::{hf, LmPolicy, PromptStyle, Sampling};
use mapf_ledger::train::policy::Policy;
use std::path::Path;

const SHIPPED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/ledgers/models/mapf-reader-v3");

/// `(file, blake3 hex)` rows of the README's file table: lines `| name | blake3 |`.
fn stated_hashes(readme: &str) -> Vec<(String, String)> {
    readme
        .lines()
        .filter_map(|l| {
            let cols: Vec<&str> = l.split('|').map(str::trim).collect();
            (cols.len() >= 4
                && cols[2].len() == 64
                && cols[2].bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| (cols[1].trim_matches('`').to_string(), cols[2].to_string()))
        })
        .collect()
}

/// Every file hash the shipped model's README states matches the file, and the README
/// states one for each file a model directory needs.
fn assert_files_match_readme(dir: &Path) {
    let readme = std::fs::read_to_string(dir.join("README.md")).expect("README.md");
    let stated = stated_hashes(&readme);
    let names: Vec<&str> = stated.iter().map(|(n, _)| n.as_str()).collect();
    for needed in [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    ] {
        assert!(
            names.contains(&needed),
            "README states no hash for {needed}: {names:?}"
        );
    }
    for (name, hex) in &stated {
        let bytes = std::fs::read(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            &blake3::hash(&bytes).to_hex().to_string(),
            hex,
            "{name} changed"
        );
    }
}

/// The coordination miniature's shipped models (`ledgers/models/mapf-base-indep`, the
/// tests' base planner, and `mapf-reader-v2`, the study's reader; `mapf-reader-v3` is
/// [`SHIPPED`]): their files are
/// what their model cards state, and they read the cells prompt. Every retired model
/// keeps its card under `ledgers/cards/`, and each card names a recipe that exists.
#[test]
fn shipped_coordination_base_matches_its_readme() {
    for dir in [
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/ledgers/models/mapf-base-indep"
        ),
        concat!(env!("CARGO_MANIFEST_DIR"), "/ledgers/models/mapf-reader-v2"),
    ] {
        let dir = Path::new(dir);
        assert_files_match_readme(dir);
        assert_eq!(
            hf::read_prompt_style(dir).unwrap(),
            Some(PromptStyle::Cells)
        );
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let cards: Vec<_> = std::fs::read_dir(root.join("ledgers/cards"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(cards.len() >= 7, "{cards:?}");
    for card in &cards {
        let text = std::fs::read_to_string(card).unwrap();
        let recipes: Vec<&str> = text
            .split('`')
            .filter(|w| w.starts_with("ledgers/") && w.ends_with(".toml"))
            .collect();
        assert!(!recipes.is_empty(), "{} names no recipe", card.display());
        for r in recipes {
            assert!(
                root.join(r).is_file(),
                "{} names {r}, which is gone",
                card.display()
            );
        }
    }
}

#[test]
fn shipped_base_planner_matches_its_readme_and_plans_in_the_cells_format() {
    let dir = Path::new(SHIPPED);
    assert_files_match_readme(dir);
    assert_eq!(
        hf::read_prompt_style(dir).unwrap(),
        Some(PromptStyle::Cells)
    );
    let lm = LmPolicy::from_hf_dir(
        dir,
        tch::Device::Cpu,
        None,
        PromptStyle::Cells,
        Sampling::default(),
        Seed::root(0),
    )
    .expect("the shipped directory loads");
    // Every cell of a 10x10 map is one token of its tokenizer.
    for r in 0..10 {
        for c in 0..10 {
            let ids = lm.encode(&format!(" ({r},{c})"));
            assert_eq!(ids.len(), 1, "cell ({r},{c}) is {} tokens", ids.len());
        }
    }
    // Greedy plans for easy 2-agent instances parse (stated cells checked), and most
    // are valid: a base model that can attempt the task.
    let cfg = GeneratorConfig::uniform(2, [4, 5], 0.1, 0.2);
    let data = generate(&cfg, 16, Seed::root(99), Budget::default()).unwrap();
    let instances: Vec<_> = data.iter().map(|s| s.instance.clone()).collect();
    let rollouts = lm.sample(&instances, 1, true, Seed::root(0));
    let parsed = rollouts.iter().filter(|r| r.plan.is_ok()).count();
    let valid = rollouts
        .iter()
        .zip(&instances)
        .filter(|(r, i)| r.plan.as_ref().is_ok_and(|p| simulate(i, p).valid))
        .count();
    assert!(parsed >= 14, "{parsed}/16 plans parse");
    assert!(valid >= 8, "{valid}/16 plans valid");
}

const TINY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/hf/tiny-qwen3");

#[test]
fn eval_scores_an_hf_directory_and_a_checkpoint_in_the_paper_layout() {
    let tmp = tempfile::tempdir().unwrap();
    let none = tmp.path().join("no-ledger");
    let out = ok(&ledger(
        &none,
        &[
            "eval",
            "--model",
            TINY,
            "--suite",
            "all",
            "--per-cell",
            "1",
            "--max-size",
            "5",
            "--json",
        ],
    ));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    validates("eval", &v);
    assert_eq!(v["policy"], "lm");
    assert_eq!(
        v["prompt"], "paper",
        "an HF directory without mapf-ledger.json"
    );
    let suites = v["suites"].as_array().unwrap();
    assert_eq!(suites.len(), 2);
    // val: 2 agents on 3..5; test: 3 agents on 3..5, 4 on 4..5, 5 on 5.
    let cells = |i: usize| suites[i]["cells"].as_array().unwrap().len();
    assert_eq!((cells(0), cells(1)), (3, 6));
    let sums: Vec<u64> = suites[1]["sums"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["agents"].as_u64().unwrap())
        .collect();
    assert_eq!(sums, vec![3, 4, 5]);
    // Random weights: every instance fails, and the failures are counted by kind.
    let failed: u64 = suites[0]["failures"]
        .as_object()
        .unwrap()
        .values()
        .map(|n| n.as_u64().unwrap())
        .sum();
    let valid: u64 = suites[0]["cells"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["valid"].as_u64().unwrap())
        .sum();
    assert_eq!(failed + valid, 3);
    // The same suite as a ledger's: the text table prints the Sum row.
    let text = ok(&ledger(
        &none,
        &[
            "eval",
            "--model",
            TINY,
            "--suite",
            "val",
            "--per-cell",
            "1",
            "--max-size",
            "5",
        ],
    ));
    assert!(text.contains("Sum"), "{text}");
    assert!(text.contains("first failures:"), "{text}");

    // A ledger checkpoint (the tiny grid plan's base model).
    let d = common::tiny_ledger(tmp.path());
    let out = ok(&ledger(
        &d,
        &[
            "eval",
            "--model",
            "main@stage0",
            "--suite",
            "val",
            "--per-cell",
            "2",
            "--max-size",
            "5",
            "--json",
        ],
    ));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    validates("eval", &v);
    assert_eq!(v["policy"], "grid");
    let total: u64 = v["suites"][0]["cells"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["total"].as_u64().unwrap())
        .sum();
    assert_eq!(total, 6);
    // Coordination rows cover every item, each half beside the baseline on it.
    let rows = v["suites"][0]["coordination"].as_array().unwrap();
    let items: u64 = rows.iter().map(|r| r["items"].as_u64().unwrap()).sum();
    assert_eq!(items, 6);
    assert!(rows.iter().all(|r| r["agents"] == 2));

    // Stratified suites: a stratified cell holds both kinds of item; a per-cell count
    // the ratios cannot split is refused.
    let out = ok(&ledger(
        &d,
        &[
            "eval",
            "--model",
            "main@stage0",
            "--suite",
            "val",
            "--per-cell",
            "4",
            "--max-size",
            "5",
            "--wait-ratios",
            "0,1",
            "--json",
        ],
    ));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let rows = v["suites"][0]["coordination"].as_array().unwrap();
    let count = |need: bool| -> u64 {
        rows.iter()
            .filter(|r| r["needs_coordination"] == need)
            .map(|r| r["items"].as_u64().unwrap())
            .sum()
    };
    assert_eq!((count(false), count(true)), (6, 6), "{rows:?}");
    fails(
        &ledger(
            &d,
            &[
                "eval",
                "--model",
                "main@stage0",
                "--per-cell",
                "3",
                "--wait-ratios",
                "0,1",
            ],
        ),
        2,
        "--wait-ratios",
    );

    // Refusals name the bad input, exit 2.
    fails(
        &ledger(&d, &["eval", "--model", TINY, "--suite", "train"]),
        2,
        "'train' for '--suite",
    );
    fails(
        &ledger(&d, &["eval", "--model", TINY, "--per-cell", "0"]),
        2,
        "--per-cell",
    );
    fails(
        &ledger(&d, &["eval", "--model", TINY, "--prompt", "poem"]),
        2,
        "'poem' for '--prompt",
    );
    fails(
        &ledger(&d, &["eval", "--model", "main@stage0", "--prompt", "cells"]),
        2,
        "--prompt applies",
    );
    fails(
        &ledger(&d, &["eval", "--model", "nosuch@stage0"]),
        2,
        "nosuch",
    );
    let empty = tmp.path().join("empty-dir");
    std::fs::create_dir_all(&empty).unwrap();
    fails(
        &ledger(&d, &["eval", "--model", empty.to_str().unwrap()]),
        2,
        "without config.json",
    );
}

#[test]
fn pretraining_mix_covers_every_agent_count_and_never_a_suite_instance() {
    use mapf_ledger::env::generator::instance_key;
    use mapf_ledger::ledger::plan::Warmup;
    let w = Warmup {
        sizes: vec![3, 4, 5, 6],
        agents: vec![1, 2, 2, 3, 5],
        hole_ratios: vec![0.1, 0.5],
        wait_ratios: vec![0.2, 0.5],
        ..Warmup::default()
    };
    // Exclude the first few instances the mix would draw: they are redrawn.
    let (first, _) =
        mapf_ledger::stage::warmup_data(&w, 200, Seed::root(5), &Default::default()).unwrap();
    let excluded: std::collections::BTreeSet<[u8; 32]> = first
        .iter()
        .take(20)
        .map(|s| instance_key(&s.instance))
        .collect();
    let (data, blob) = mapf_ledger::stage::warmup_data(&w, 200, Seed::root(5), &excluded).unwrap();
    assert_eq!(data.len(), 200);
    assert!(data
        .iter()
        .all(|s| !excluded.contains(&instance_key(&s.instance))));
    assert_eq!(
        &data[20..],
        &first[20..],
        "items are drawn independently of each other"
    );
    let mut per_agents = std::collections::BTreeMap::new();
    for s in &data {
        let (a, n) = (s.instance.agents(), s.instance.size());
        assert!(n >= a && [3, 4, 5, 6].contains(&n), "{a} agents on {n}x{n}");
        // At most the largest listed ratio (hole counts round to the nearest cell).
        assert!(s.instance.hole_count() <= mapf_ledger::env::config::hole_count(n, 0.5));
        *per_agents.entry(a).or_insert(0) += 1;
    }
    assert_eq!(
        per_agents.keys().copied().collect::<Vec<_>>(),
        vec![1, 2, 3, 5]
    );
    // 2 agents are listed twice: drawn about twice as often as 1 or 3.
    assert!(
        per_agents[&2] > per_agents[&1] && per_agents[&2] > per_agents[&3],
        "{per_agents:?}"
    );
    let mix: serde_json::Value = serde_json::from_slice(&blob).unwrap();
    assert_eq!(mix["agents"], serde_json::json!([1, 2, 2, 3, 5]));
    // The same on one thread: scheduling never reaches the data.
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    let (again, _) = pool
        .install(|| mapf_ledger::stage::warmup_data(&w, 200, Seed::root(5), &excluded))
        .unwrap();
    assert_eq!(again, data);
}

/// A card's `## Scores` heading: `(suite, eval arguments)` for `val` and `test`.
fn card_suites(card: &str) -> Vec<(String, Vec<String>)> {
    let heading = card
        .lines()
        .find(|l| l.starts_with("## Scores (`ledger eval"))
        .expect("the card has a `## Scores` heading");
    ["val", "test"]
        .iter()
        .map(|suite| {
            let tag = format!("{suite}: `");
            let at = heading.find(&tag).expect("the heading names both suites") + tag.len();
            let args = heading[at..].split('`').next().unwrap();
            (
                suite.to_string(),
                args.split_whitespace().map(str::to_string).collect(),
            )
        })
        .collect()
}

/// The block `ledger eval` prints for one suite: from `SUITE suite (` to its `first
/// failures:` line.
fn suite_block(text: &str, suite: &str) -> Option<String> {
    let start = text.find(&format!("{suite} suite ("))?;
    let rest = &text[start..];
    let end = rest.find("first failures:")?;
    let line_end = rest[end..].find('\n').map_or(rest.len(), |i| end + i);
    Some(rest[..line_end].to_string())
}

/// `make test` re-scores every shipped model on each suite its card states (the
/// 2-agent `val` suite and the 3-5-agent `test` suite) and compares line by line with
/// the scores the card states (per size, Sum, the coordination split and the first
/// failures). The `test` suites cost most: their optimal references for 3-5 agents take
/// the solver about 5x as long as decoding the suite (25 s against 4 s for `val`, per
/// model, on 2 cores). Two scorings at a time, as the cores allow.
#[test]
fn every_shipped_model_scores_what_its_card_states() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("ledgers/models");
    let mut models: Vec<_> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("model.safetensors").is_file())
        .collect();
    models.sort();
    assert!(models.len() >= 3, "{models:?}");
    let suites = |dir: &Path| card_suites(&std::fs::read_to_string(dir.join("README.md")).unwrap());
    let jobs: Vec<(std::path::PathBuf, String, Vec<String>)> = models
        .iter()
        .flat_map(|d| suites(d).into_iter().map(|(s, a)| (d.clone(), s, a)))
        .collect();
    for suite in ["val", "test"] {
        assert_eq!(
            jobs.iter().filter(|(_, s, _)| s == suite).count(),
            models.len(),
            "every card states a {suite} suite"
        );
    }
    let check =
        |(dir, suite, args): &(std::path::PathBuf, String, Vec<String>)| -> Result<(), String> {
            let card = std::fs::read_to_string(dir.join("README.md")).unwrap();
            let stated = suite_block(&card, suite)
                .ok_or_else(|| format!("{}: the card has no {suite} block", dir.display()))?;
            let mut cmd: Vec<&str> =
                vec!["eval", "--model", dir.to_str().unwrap(), "--suite", suite];
            cmd.extend(args.iter().map(String::as_str));
            let out = ok(&common::cli(&cmd));
            let got = suite_block(&out, suite).ok_or_else(|| format!("no {suite} block: {out}"))?;
            if got.trim_end() == stated.trim_end() {
                Ok(())
            } else {
                Err(format!(
                "{} on its {suite} suite ({}) no longer scores what its card states:\n--- card\n{stated}\n--- now\n{got}",
                dir.display(),
                args.join(" ")
            ))
            }
        };
    // Two workers take the next job from a shared counter.
    let next = std::sync::atomic::AtomicUsize::new(0);
    let failures: Vec<String> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    let mut failed = vec![];
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(job) = jobs.get(i) else { break failed };
                        failed.extend(check(job).err());
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap())
            .collect()
    });
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// `eval --items FILE`: one line per suite item, in suite order, each with its instance,
/// the plan the model wrote and the first failure with the agents involved; the plan
/// simulates to the recorded outcome, and the lines add up to the printed report.
#[test]
fn eval_items_writes_every_item_with_its_plan_and_failure() {
    let tmp = tempfile::tempdir().unwrap();
    let d = common::tiny_ledger(tmp.path());
    let items = tmp.path().join("items.jsonl");
    std::fs::write(&items, "an older file\n").unwrap();
    let out = ok(&ledger(
        &d,
        &[
            "eval",
            "--model",
            "main@stage0",
            "--suite",
            "all",
            "--per-cell",
            "4",
            "--max-size",
            "5",
            "--wait-ratios",
            "0,1",
            "--items",
            items.to_str().unwrap(),
            "--json",
        ],
    ));
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&items)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // val: 3 cells, test: 6 cells, 4 items each; the older file is replaced whole.
    assert_eq!(lines.len(), 36);
    let mut failed_with_agents = 0;
    for line in &lines {
        validates("eval-item", line);
        let inst: mapf_ledger::env::Instance =
            serde_json::from_value(line["instance"].clone()).unwrap();
        assert_eq!(inst.agents(), line["agents"].as_u64().unwrap() as usize);
        assert_eq!(
            inst.content_hash().to_hex().as_str(),
            line["instance_hash"].as_str().unwrap()
        );
        let plan = line["plan"].as_str().unwrap();
        let outcome = match mapf_ledger::env::text::parse_plan(plan, inst.agents()) {
            Ok(p) => simulate(&inst, &p),
            Err(e) => mapf_ledger::env::Outcome::failed(e.to_failure()),
        };
        assert_eq!(line["valid"], outcome.valid, "{line}");
        assert_eq!(
            line["failure"],
            serde_json::to_value(&outcome.failure).unwrap(),
            "{line}"
        );
        if outcome
            .failure
            .as_ref()
            .is_some_and(|f| !f.agents.is_empty())
        {
            failed_with_agents += 1;
        }
    }
    assert!(failed_with_agents > 0, "some failure names its agents");
    // Item indices run within each cell; both halves of every stratified cell are there.
    let first = &lines[..4];
    let idx: Vec<u64> = first.iter().map(|l| l["item"].as_u64().unwrap()).collect();
    assert_eq!(idx, [0, 1, 2, 3]);
    let coordination = lines
        .iter()
        .filter(|l| l["needs_coordination"] == true)
        .count();
    assert_eq!(coordination, 18);
    // The lines add up to the report: valid items per suite.
    for (i, suite) in ["val", "test"].iter().enumerate() {
        let from_lines = lines
            .iter()
            .filter(|l| l["suite"] == *suite && l["valid"] == true)
            .count() as u64;
        let from_report: u64 = report["suites"][i]["cells"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["valid"].as_u64().unwrap())
            .sum();
        assert_eq!(from_lines, from_report, "{suite}");
    }
    // A FILE that cannot be written is refused before any decoding, naming --items, and
    // nothing is left behind.
    let missing = tmp.path().join("no-such-dir").join("items.jsonl");
    for bad in [missing.as_path(), tmp.path()] {
        let args = [
            "eval",
            "--model",
            "main@stage0",
            "--items",
            bad.to_str().unwrap(),
        ];
        fails(&ledger(&d, &args), 2, "--items");
    }
    let stray: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(stray.is_empty(), "{stray:?}");
}
