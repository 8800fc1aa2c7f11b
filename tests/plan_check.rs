//! `ledger plan check` (the memory plan) and the checks `ledger run --device cuda` makes
//! before it starts: the memory plan against the GPU (refused with exit 2 unless
//! `--force`), and a device that is not there (exit 2 naming what is missing and the
//! README section that says how to provide it).
use crate::common;
use common::schema::validates;
use common::{fails, ledger, ledger_cmd, ok};
use std::path::Path;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn paper() -> String {
    format!("{ROOT}/ledgers/paper.toml")
}

fn shape_4b() -> String {
    format!("{ROOT}/ledgers/models/shapes/qwen3-4b.config.json")
}

fn check(dir: &Path, args: &[&str]) -> std::process::Output {
    let mut a = vec!["plan", "check"];
    a.extend_from_slice(args);
    ledger(dir, &a)
}

/// A copy of the paper plan, with each `(from, to)` text replaced.
fn paper_variant(dir: &Path, name: &str, edits: &[(&str, String)]) -> String {
    paper_variant_of(&paper(), dir, name, edits)
}

/// A copy of plan `base`, with each `(from, to)` text replaced.
fn paper_variant_of(base: &str, dir: &Path, name: &str, edits: &[(&str, String)]) -> String {
    let mut text = std::fs::read_to_string(base).unwrap();
    for (from, to) in edits {
        assert!(text.contains(from), "paper.toml has no `{from}`");
        text = text.replace(from, to);
    }
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_string()
}

/// The paper plan answering without thinking, in at most 512 tokens (the micro-batching
/// story below is about that budget; as shipped it thinks for up to 8,192).
fn short_answers(dir: &Path) -> String {
    paper_variant(
        dir,
        "short.toml",
        &[
            ("thinking = true", "thinking = false".into()),
            ("max_new_tokens = 8192", "max_new_tokens = 512".into()),
        ],
    )
}

#[test]
fn thinking_budgets_the_whole_reply_and_needs_qwen3() {
    let t = tempfile::tempdir().unwrap();
    let json = |args: &[&str]| -> serde_json::Value {
        let o = check(t.path(), args);
        serde_json::from_slice(&o.stdout).unwrap()
    };
    let v = json(&[&paper(), "--model-config", &shape_4b(), "--json"]);
    // Reasoning spends the whole budget before the plan: every sampled row is 8,192 new
    // tokens long, where a plan alone stops at its own length.
    assert_eq!(v["tokens"]["train_new"], 8192, "{v}");
    assert_eq!(v["tokens"]["eval_new"], 8192, "{v}");
    let short = short_answers(t.path());
    let s = json(&[&short, "--model-config", &shape_4b(), "--json"]);
    assert!(s["tokens"]["train_new"].as_u64().unwrap() < 512, "{s}");
    // The thinking template leaves the assistant turn open: shorter by the empty think
    // block that Qwen3's non-thinking template appends.
    assert!(v["tokens"]["train_prompt"].as_u64() < s["tokens"]["train_prompt"].as_u64());
    // A model without a thinking mode is refused by name.
    let qwen2 = t.path().join("qwen2.json");
    let cfg = std::fs::read_to_string(shape_4b())
        .unwrap()
        .replace("\"qwen3\"", "\"qwen2\"")
        .replace("Qwen3ForCausalLM", "Qwen2ForCausalLM");
    std::fs::write(&qwen2, cfg).unwrap();
    fails(
        &check(
            t.path(),
            &[&paper(), "--model-config", qwen2.to_str().unwrap()],
        ),
        2,
        "lm.thinking = true needs a Qwen3 model",
    );
}

#[test]
fn the_paper_plan_fits_80_gib_because_it_trains_in_micro_batches() {
    let t = tempfile::tempdir().unwrap();
    let cfg = shape_4b();
    let short = short_answers(t.path());
    let json = |plan: &str, mem: &str| {
        let o = check(
            t.path(),
            &[plan, "--model-config", &cfg, "--gpu-memory", mem, "--json"],
        );
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        validates("plan-check", &v);
        (o.status.code(), v)
    };
    // Micro-batches within 65,536 tokens: fits, exit 0.
    let (code, v) = json(&short, "80GiB");
    assert_eq!(
        (code, &v["fits"]),
        (Some(0), &serde_json::json!(true)),
        "{v}"
    );
    assert_eq!(v["dtype"], "bf16");
    assert_eq!(v["model"]["parameters"], 4_022_468_096u64);
    // LoRA: the frozen base in bf16 (2 bytes a parameter) dominates what is resident.
    assert_eq!(v["resident"][0]["bytes"], 2 * 4_022_468_096u64);

    // The whole batch of 256 rows at once does not fit, and micro-batching is named.
    let whole = paper_variant_of(
        &short,
        t.path(),
        "whole.toml",
        &[("micro_batch_tokens = 65536", "micro_batch = 0".into())],
    );
    let (code, w) = json(&whole, "80GiB");
    assert_eq!(
        (code, &w["fits"]),
        (Some(1), &serde_json::json!(false)),
        "{w}"
    );
    let micro = w["changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["setting"] == "grpo.micro_batch")
        .expect("micro-batching is named as a fix");
    assert_eq!(micro["from"], 256);
    assert!(w["peak_bytes"].as_u64().unwrap() > v["peak_bytes"].as_u64().unwrap());
    // With the micro-batch it names, the plan fits, and the text says so (exit 0).
    let to = micro["to"].as_u64().unwrap();
    let fixed = paper_variant_of(
        &short,
        t.path(),
        "fixed.toml",
        &[("micro_batch_tokens = 65536", format!("micro_batch = {to}"))],
    );
    let out = ok(&check(
        t.path(),
        &[&fixed, "--model-config", &cfg, "--gpu-memory", "80GiB"],
    ));
    assert!(out.contains("fits in 80.00 GiB"), "{out}");

    // On 24 GiB, with the micro-batch keeping its activations and a generation budget
    // (64 GiB) the GPU cannot give, no single setting fits; the settings it names
    // together do.
    let unbounded = paper_variant_of(
        &short,
        t.path(),
        "unbounded.toml",
        &[
            ("recompute = true\n", String::new()),
            ("log_prob_chunk = 1024\n", String::new()),
            ("[lm]\n", "[lm]\ngeneration_memory = \"64GiB\"\n".into()),
        ],
    );
    let (code, s) = json(&unbounded, "24GiB");
    assert_eq!(code, Some(1));
    let together = s["together"].as_array().unwrap();
    assert!(together.len() >= 2, "{s}");
    let mut edits = Vec::new();
    for c in together {
        let (section, key) = c["setting"].as_str().unwrap().split_once('.').unwrap();
        edits.push((
            section.to_string(),
            key.to_string(),
            c["from"].as_u64().unwrap(),
            c["to"].as_u64().unwrap(),
        ));
    }
    let mut text = std::fs::read_to_string(&unbounded).unwrap();
    for (section, key, from, to) in &edits {
        let line = format!("\n{key} = {from}\n");
        if text.contains(&line) {
            text = text.replace(&line, &format!("\n{key} = {to}\n"));
        } else {
            // A setting at its default: add it to its section.
            let header = format!("[{section}]\n");
            assert!(text.contains(&header), "no [{section}] in paper.toml");
            text = text.replace(&header, &format!("{header}{key} = {to}\n"));
        }
    }
    let small = t.path().join("small.toml");
    std::fs::write(&small, text).unwrap();
    let out = ok(&check(
        t.path(),
        &[
            small.to_str().unwrap(),
            "--model-config",
            &cfg,
            "--gpu-memory",
            "24GiB",
        ],
    ));
    assert!(out.contains("fits in 24.00 GiB"), "{out}");
}

/// Issue 50's target: `ledgers/paper.toml` exactly as committed (thinking, 8,192 new
/// tokens) fits 80 GiB, because its micro-batches recompute their layers, its log-probs
/// come in chunks and generation runs in waves within what the GPU leaves; without the
/// first two it does not, and the check names them.
#[test]
fn the_paper_plan_fits_80_gib_at_its_thinking_length() {
    let t = tempfile::tempdir().unwrap();
    let cfg = shape_4b();
    let json = |plan: &str| {
        let o = check(
            t.path(),
            &[
                plan,
                "--model-config",
                &cfg,
                "--gpu-memory",
                "80GiB",
                "--json",
            ],
        );
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        validates("plan-check", &v);
        (o.status.code(), v)
    };
    let (code, v) = json(&paper());
    assert_eq!(
        (code, &v["fits"]),
        (Some(0), &serde_json::json!(true)),
        "{v}"
    );
    assert_eq!(v["tokens"]["train_new"], 8192);
    // The budget is what 80 GiB leaves after the reserve, the resident parts and the
    // generation copy; every phase is within the GPU.
    let budget = &v["generation_budget"];
    assert_eq!(budget["source"], "derived", "{v}");
    let resident: u64 = v["resident"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["bytes"].as_u64().unwrap())
        .sum();
    let b = budget["bytes"].as_u64().unwrap();
    assert!(resident + b + (2 << 30) < 80 << 30);
    let phase = |prefix: &str| {
        v["phases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"].as_str().unwrap().starts_with(prefix))
            .unwrap_or_else(|| panic!("no phase {prefix}: {v}"))
            .clone()
    };
    let generation = phase("GRPO generation");
    assert!(
        generation["name"].as_str().unwrap().contains("waves of"),
        "{generation}"
    );
    let training = phase("GRPO training");
    assert!(
        training["name"]
            .as_str()
            .unwrap()
            .contains("recomputed, log-probs by 1024"),
        "{training}"
    );
    // Without recomputation and chunks the same micro-batch is hundreds of GiB, and the
    // check names the settings that bound it, with a peak that fits.
    let kept = paper_variant(
        t.path(),
        "kept.toml",
        &[
            ("recompute = true\n", String::new()),
            ("log_prob_chunk = 1024\n", String::new()),
        ],
    );
    let (code, k) = json(&kept);
    assert_eq!(code, Some(1), "{k}");
    assert!(k["peak_bytes"].as_u64().unwrap() > 500 << 30, "{k}");
    let bounded = &k["bounded_training"];
    // 65,536 tokens are 7 rows of the thinking budget's 8,417.
    assert_eq!(bounded["micro_batch"], 7);
    assert_eq!(bounded["log_prob_chunk"], 1024);
    assert_eq!(bounded["fits"], true);
    assert_eq!(bounded["peak_bytes"], v["peak_bytes"]);
    // A plan's own generation budget is used as given: half of it, twice the waves.
    let half = b / 2;
    let named = paper_variant(
        t.path(),
        "named.toml",
        &[("[lm]\n", format!("[lm]\ngeneration_memory = \"{half}B\"\n"))],
    );
    let (_, n) = json(&named);
    assert_eq!(n["generation_budget"]["source"], "lm.generation_memory");
    assert_eq!(n["generation_budget"]["bytes"], half);
    let waves = |v: &serde_json::Value| -> u64 {
        let name = v["phases"][0]["name"].as_str().unwrap().to_string();
        let w = name.split("; ").nth(1).unwrap();
        w.split(' ').next().unwrap().parse().unwrap()
    };
    assert!(waves(&n) > waves(&v), "{n}");
    // Causal training rows make no [B, 1, T, T] mask: the training and KL reference
    // phases say so and hold less (7 rows x 8,417^2 x 2 bytes of bf16 cast at least).
    let causal = paper_variant(
        t.path(),
        "causal.toml",
        &[(
            "[lm]\n",
            "[lm]\ntraining_attention = \"causal\"\n".to_string(),
        )],
    );
    let (code, c) = json(&causal);
    assert_eq!(code, Some(0), "{c}");
    let bytes = |v: &serde_json::Value, prefix: &str| -> u64 {
        let p = v["phases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"].as_str().unwrap().starts_with(prefix))
            .unwrap_or_else(|| panic!("no phase {prefix}: {v}"));
        p["bytes"].as_u64().unwrap()
    };
    let trained = c["phases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"].as_str().unwrap().starts_with("GRPO training"))
        .unwrap()["name"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(trained.ends_with("causal, no mask)"), "{trained}");
    let mask: u64 = 7 * 8417 * 8417 * 2;
    for prefix in ["GRPO training", "KL reference"] {
        assert!(
            bytes(&c, prefix) + mask <= bytes(&v, prefix),
            "{prefix}: {c} {v}"
        );
    }
}

#[test]
fn bad_inputs_are_refused_by_name() {
    let t = tempfile::tempdir().unwrap();
    let plan = paper();
    // The plan's model directory is not on this machine and no --model-config is given.
    fails(
        &check(t.path(), &[&plan]),
        2,
        "/models/Qwen3-4B/config.json: not found",
    );
    fails(
        &check(
            t.path(),
            &[&plan, "--model-config", &shape_4b(), "--gpu-memory", "80XB"],
        ),
        2,
        "--gpu-memory",
    );
    fails(
        &check(
            t.path(),
            &[&plan, "--model-config", &shape_4b(), "--device", "tpu"],
        ),
        2,
        "expected cpu, cuda or cuda:N",
    );
    let grid = format!("{ROOT}/tests/plans/tiny.toml");
    fails(&check(t.path(), &[&grid]), 2, "lm plans");
}

/// `ledger run` with LIBTORCH_CUDA_LIB pointing where there is no libtorch_cuda.
fn run_cuda(dir: &Path, args: &[&str]) -> std::process::Output {
    ledger_cmd(dir, &["run"])
        .args(args)
        .env("LIBTORCH_CUDA_LIB", dir.join("no-cuda-here"))
        .output()
        .unwrap()
}

#[test]
fn run_on_cuda_checks_memory_first_and_names_what_is_missing() {
    if tch::Cuda::is_available() {
        eprintln!("this machine has CUDA: the refusals cannot be observed here");
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let l = t.path().join("l");
    let plan = format!("{ROOT}/tests/plans/lm-tiny.toml");
    ok(&ledger(&l, &["init", "--plan", &plan]));
    let before = ok(&ledger(&l, &["log"]));
    // No CUDA: exit 2 naming libtorch_cuda and the README's section.
    for device in ["cuda", "cuda:3"] {
        let o = run_cuda(&l, &["--device", device, "--quiet"]);
        fails(&o, 2, "libtorch_cuda is missing");
        fails(&o, 2, "README.md, \"Using a GPU\"");
    }
    // A memory the plan cannot fit in: refused before any device is touched, with the
    // memory plan in the message.
    let o = run_cuda(&l, &["--device", "cuda", "--gpu-memory", "1MiB", "--quiet"]);
    fails(&o, 2, "the plan cannot fit on cuda");
    fails(&o, 2, "--force");
    // --force runs anyway, up to the missing device.
    let o = run_cuda(
        &l,
        &[
            "--device",
            "cuda",
            "--gpu-memory",
            "1MiB",
            "--force",
            "--quiet",
        ],
    );
    fails(&o, 2, "libtorch_cuda is missing");
    // Nothing was recorded by the refused runs.
    assert_eq!(ok(&ledger(&l, &["log"])), before);
}

/// The README's memory-plan figures are the tool's, not typed: its quoted `plan check`
/// output is what the command prints today, and every figure and setting a table row
/// quotes for 24, 40 or 80 GiB is in the tool's output for that memory.
#[test]
fn the_readme_quotes_what_plan_check_prints() {
    let readme = std::fs::read_to_string(format!("{ROOT}/README.md")).unwrap();
    let cmd = "$ ledger plan check ledgers/paper.toml --model-config ledgers/models/shapes/qwen3-4b.config.json --gpu-memory ";
    let at = readme
        .find(cmd)
        .expect("the README quotes a plan check of paper.toml")
        + cmd.len();
    let line_end = at + readme[at..].find('\n').unwrap();
    let quoted_mem = &readme[at..line_end];
    let at = line_end + 1;
    let quoted = &readme[at..at + readme[at..].find("```").unwrap()];
    let t = tempfile::tempdir().unwrap();
    let run = |mem: &str| {
        let o = ledger_cmd(
            t.path(),
            &[
                "plan",
                "check",
                "ledgers/paper.toml",
                "--model-config",
                "ledgers/models/shapes/qwen3-4b.config.json",
                "--gpu-memory",
                mem,
            ],
        )
        .current_dir(ROOT)
        .output()
        .unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    assert_eq!(
        run(quoted_mem),
        quoted,
        "README's quoted plan check is stale"
    );
    for mem in ["24", "40", "80"] {
        let Some(row) = readme
            .lines()
            .find(|l| l.starts_with(&format!("| {mem} GiB |")))
        else {
            continue;
        };
        let out = run(&format!("{mem}GiB"));
        // Every "peak N GiB" and every `setting = value` of the row.
        for w in row.split("peak ").skip(1) {
            let fig: String = w
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == '.')
                .collect();
            assert!(
                out.contains(&format!("{fig} GiB")),
                "{mem} GiB row quotes peak {fig} GiB; the tool says:\n{out}"
            );
        }
        for setting in row.split('`').skip(1).step_by(2) {
            assert!(
                out.contains(setting),
                "{mem} GiB row quotes `{setting}`; the tool says:\n{out}"
            );
        }
    }
}

/// Rehearsal (`grpo.rehearsal_coef`) is one more training forward and backward, on plans
/// of the warm-up mix: the memory plan shows it sized by the mix's longest plan and its
/// batch (the whole batch at once on a GPU), and leaves it out of a plan without it.
#[test]
fn rehearsal_is_a_phase_of_the_memory_plan() {
    let t = tempfile::tempdir().unwrap();
    let json = |plan: &str| -> serde_json::Value {
        let o = check(
            t.path(),
            &[
                plan,
                "--model-config",
                &shape_4b(),
                "--device",
                "cuda",
                "--gpu-memory",
                "80GiB",
                "--json",
            ],
        );
        serde_json::from_slice(&o.stdout).unwrap()
    };
    let phase = |v: &serde_json::Value| -> Option<(String, u64)> {
        v["phases"].as_array().unwrap().iter().find_map(|p| {
            let name = p["name"].as_str().unwrap();
            name.starts_with("rehearsal")
                .then(|| (name.to_string(), p["bytes"].as_u64().unwrap()))
        })
    };
    let short = short_answers(t.path());
    let plain = json(&short);
    assert_eq!(phase(&plain), None, "{plain}");
    assert!(plain["tokens"].get("rehearsal_prompt").is_none(), "{plain}");
    let with = |name: &str, batch: u32, agents: &str| {
        let p = paper_variant_of(
            &short,
            t.path(),
            name,
            &[
                (
                    "micro_batch_tokens = 65536",
                    format!("micro_batch_tokens = 65536\nrehearsal_coef = 0.5\nrehearsal_batch = {batch}\nrehearsal_instances = 64"),
                ),
                ("sizes = [3, 4, 5, 6]", format!("sizes = [3, 4, 5, 6]\nagents = {agents}")),
            ],
        );
        json(&p)
    };
    let small = with("r8.toml", 8, "[2]");
    let (name, bytes) = phase(&small).expect("a rehearsal phase");
    assert!(name.starts_with("rehearsal (8 rows x "), "{name}");
    let big = with("r32.toml", 32, "[2]");
    assert!(phase(&big).unwrap().1 > bytes, "{big}");
    // Five agents on the mix's largest map: a longer prompt and plan than two.
    let five = with("r5.toml", 8, "[2, 5]");
    assert!(
        five["tokens"]["rehearsal_prompt"].as_u64() > small["tokens"]["rehearsal_prompt"].as_u64()
            && phase(&five).unwrap().1 > bytes,
        "{five}"
    );
    validates("plan-check", &five);
    // Where rehearsal sets the peak past the GPU, its batch is the fix named.
    let over = with("r16.toml", 16, "[2, 5]");
    assert_eq!(over["fits"], false, "{over}");
    assert!(
        over["changes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["setting"] == "grpo.rehearsal_batch"),
        "{over}"
    );
}
