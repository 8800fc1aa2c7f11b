//! `ledger lm bench` on the CPU: the figures a GPU run commits (tools/cuda-bench.sh) come
//! out as JSON with their fields, every decode lane runs to the asked length, and bad
//! input is refused naming the flag.
use crate::common;
use common::{cli, fails, json};

const SHAPE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/hf/tiny-qwen3/config.json"
);

/// `lm bench` decoding the tiny shape at batches 1 and 3, 5 prompt and 6 new tokens,
/// with `extra` flags.
fn decode_bench(extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "lm",
        "bench",
        "--shape",
        SHAPE,
        "--batch",
        "1,3",
        "--prompt-tokens",
        "5",
        "--new-tokens",
        "6",
    ];
    args.extend_from_slice(extra);
    cli(&args)
}

/// The tiny Qwen3 fixture's tokenizer (its ids fit the tiny shape's vocabulary).
const TINY_TOKENIZER: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/hf/tiny-qwen3/tokenizer.json"
);

/// `lm bench` timing `plan`'s GRPO step at the tiny shape, with `extra` flags.
fn grpo_bench(plan: &str, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "lm",
        "bench",
        "--shape",
        SHAPE,
        "--batch",
        "--grpo-plan",
        plan,
        "--tokenizer",
        TINY_TOKENIZER,
    ];
    args.extend_from_slice(extra);
    cli(&args)
}

/// The GRPO figure and what was said on stderr of `plan`'s step at the tiny shape with
/// `new_tokens` new tokens and `extra` flags.
fn grpo_figure(plan: &str, new_tokens: &str, extra: &[&str]) -> (serde_json::Value, String) {
    let mut args = vec!["--grpo-new-tokens", new_tokens];
    args.extend_from_slice(extra);
    let out = grpo_bench(plan, &args);
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    (json(&out)["grpo"].clone(), said)
}

/// `lm-tiny.toml` with `from` replaced by `to`, written into `dir` as `name`.
fn tiny_plan(dir: &std::path::Path, name: &str, from: &str, to: &str) -> String {
    let tiny = include_str!("plans/lm-tiny.toml");
    assert!(tiny.contains(from), "lm-tiny.toml has no {from:?}");
    let path = dir.join(name);
    std::fs::write(&path, tiny.replace(from, to)).unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn decode_figures_carry_their_rate_and_roofline_share() {
    let o = decode_bench(&["--memory-bandwidth", "1e10"]);
    let v = json(&o);
    let decode = v["decode"].as_array().expect("decode figures");
    assert_eq!(decode.len(), 2);
    for (f, batch) in decode.iter().zip([1, 3]) {
        assert_eq!(f["batch"], batch);
        assert_eq!(f["new_tokens"], 6);
        let rate = f["decode_tokens_per_s"].as_f64().unwrap();
        let step = f["step_ms"].as_f64().unwrap();
        assert!(rate > 0.0 && step > 0.0, "{f}");
        // tokens/s is batch x steps over the decode time, steps a step apart.
        assert!(
            (rate * step / 1e3 - batch as f64).abs() < 1e-6 * batch as f64,
            "{f}"
        );
        let share = f["roofline_share"].as_f64().unwrap();
        let roof = f["roofline_step_ms"].as_f64().unwrap();
        assert!((share - roof / step).abs() < 1e-9, "{f}");
    }
    // `--batch` alone measures no decode. The figures say which kernels ran, as a
    // ledger's metadata does: the kernel variables set among them (a bench under
    // cuDNN's attention moved last names it).
    let o = std::process::Command::new(common::bin(&["lm"]))
        .args(["lm", "bench", "--shape", SHAPE, "--batch"])
        .env_remove("LEDGER")
        .env("TORCH_CUDNN_SDPA_DEPRIORITIZED", "1")
        .output()
        .unwrap();
    let v = json(&o);
    assert!(v.get("decode").is_none(), "{v}");
    assert_eq!(v["kernels"]["libtorch"], "2.11.0", "{v}");
    assert_eq!(
        v["kernels"]["env:TORCH_CUDNN_SDPA_DEPRIORITIZED"], "1",
        "{v}"
    );
}

/// Without the CUDA graph shim (on the CPU there are no graphs at all) a graphed
/// decode falls back to the windowed loop and says so once, however many batches it
/// decodes, and its figures say it replayed nothing; the fixed-shape step run eagerly
/// and the device's own loop are named as what they are.
#[test]
fn a_graphed_decode_without_graphs_says_so_once_and_decodes_windowed() {
    let bench = |how: &str| decode_bench(&["--decode-loop", how]);
    let o = bench("graphed");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(
        stderr.matches("decode: no CUDA graphs (").count(),
        1,
        "said once: {stderr}"
    );
    assert!(
        stderr.contains("decoding with the windowed loop instead"),
        "{stderr}"
    );
    assert!(stderr.contains("tools/cuda-graph.sh"), "{stderr}");
    for f in json(&o)["decode"].as_array().expect("decode figures") {
        assert_eq!(f["decode_loop"], "graphed", "{f}");
        assert_eq!(f["graphs_replayed"], false, "{f}");
        assert!(f["tokens_equal_eager"].is_null(), "{f}");
        assert_eq!(f["new_tokens"], 6);
    }
    for (how, name) in [("fixed", "fixed"), ("device", "per_token")] {
        let o = bench(how);
        assert!(
            !String::from_utf8_lossy(&o.stderr).contains("no CUDA graphs"),
            "{how}: no graphs asked for, none missed"
        );
        for f in json(&o)["decode"].as_array().expect("decode figures") {
            assert_eq!(f["decode_loop"], name, "{f}");
            assert!(f["graphs_replayed"].is_null(), "{f}");
        }
    }
}

#[test]
fn bad_bench_input_names_the_flag() {
    fails(
        &cli(&["lm", "bench", "--shape", SHAPE, "--new-tokens", "1"]),
        2,
        "--new-tokens",
    );
    fails(
        &cli(&["lm", "bench", "--shape", "/nonexistent/config.json"]),
        2,
        "/nonexistent/config.json",
    );
    fails(
        &cli(&[
            "lm",
            "bench",
            "--batch",
            "--grpo-plan",
            "ledgers/paper.toml",
        ]),
        2,
        "--grpo-plan needs --shape",
    );
}

/// `--grpo-as-committed` times the plan's own step: its thinking mode (Qwen3's open
/// assistant turn, so no empty think block in the prompt) and its max_new_tokens, not
/// thinking off at `--grpo-new-tokens`. A tokenizer with ids past the shape's vocabulary,
/// or thinking on a template without it, is refused naming the flag.
#[test]
fn the_grpo_step_as_committed_takes_the_plans_thinking_and_budget() {
    let tmp = tempfile::tempdir().unwrap();
    let plan = tiny_plan(
        tmp.path(),
        "thinking.toml",
        "\nmax_new_tokens = 40\n",
        "\nmax_new_tokens = 6\nthinking = true\n",
    );
    let plan = plan.as_str();
    let bench = |extra: &[&str]| grpo_bench(plan, extra);
    let step = |extra: &[&str]| json(&bench(extra))["grpo"].clone();
    // The plan's 4 prompts x 4 samples.
    let committed = step(&["--grpo-as-committed"]);
    // Each phase's end is on stderr as it happens, so a step its time limit cuts short
    // still says how far it got.
    let out = bench(&["--grpo-new-tokens", "2"]);
    let err = String::from_utf8_lossy(&out.stderr);
    for phase in ["generation", "training", "optimiser"] {
        assert!(
            err.lines()
                .any(|l| l.starts_with(&format!("phase {phase}: ")) && l.ends_with(" s in")),
            "no line for {phase}: {err}"
        );
    }
    let plain = step(&["--grpo-new-tokens", "2"]);
    let sampled = |g: &serde_json::Value| g["sampled_tokens"].as_u64().unwrap();
    assert!(sampled(&plain) <= 16 * 2, "{plain}");
    assert!(
        sampled(&committed) > 16 * 2 && sampled(&committed) <= 16 * 6,
        "{committed}"
    );
    let prompts = |g: &serde_json::Value| g["prompt_tokens"].as_u64().unwrap();
    let block = prompts(&plain) - prompts(&committed);
    assert!(block > 0 && block % 4 == 0, "{plain} {committed}");
    // Part of the step: 2 of the plan's 4 prompts, each with its 4 samples.
    let part = step(&["--grpo-new-tokens", "2", "--grpo-prompts", "2"]);
    assert!(sampled(&part) <= 8 * 2, "{part}");
    assert!(prompts(&part) < prompts(&plain), "{part} {plain}");
    let zero = bench(&["--grpo-prompts", "0"]);
    assert_eq!(zero.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&zero.stderr).contains("--grpo-prompts"));

    let llama = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/hf/tiny-llama3/config.json"
    );
    fails(
        &cli(&[
            "lm",
            "bench",
            "--shape",
            llama,
            "--batch",
            "--grpo-plan",
            plan,
            "--tokenizer",
            TINY_TOKENIZER,
            "--grpo-as-committed",
        ]),
        2,
        "--grpo-as-committed",
    );
    // The default tokenizer (1,024 ids) does not fit the tiny shape's 400.
    fails(
        &cli(&[
            "lm",
            "bench",
            "--shape",
            SHAPE,
            "--batch",
            "--grpo-plan",
            plan,
        ]),
        2,
        "--tokenizer",
    );
}

/// Under `[grpo] zero_variance = "drop"` the timed step trains only the groups with
/// signal, and random weights write no plan that parses, so no group has any: the
/// figure says so and counts no trained token. `--grpo-every-row` times the worst case
/// instead, every row trained as `skip` trains them, and counts their tokens.
#[test]
fn a_drop_plan_on_random_weights_trains_nothing_unless_every_row_is_asked_for() {
    let tmp = tempfile::tempdir().unwrap();
    let plan = tiny_plan(
        tmp.path(),
        "drop.toml",
        "[grpo]\n",
        "[grpo]\nzero_variance = \"drop\"\n",
    );
    let step = |extra: &[&str]| grpo_figure(&plan, "3", extra);
    let (dropped, said) = step(&[]);
    assert_eq!(dropped["signal_groups"], 0, "{dropped}");
    assert_eq!(dropped["groups"], 4, "{dropped}");
    assert_eq!(dropped["trained_tokens"], 0, "{dropped}");
    assert!(
        said.contains("0 of 4 groups with signal, 0 tokens trained (zero_variance drop)"),
        "{said}"
    );
    let (every, said) = step(&["--grpo-every-row"]);
    let u = |g: &serde_json::Value, k: &str| g[k].as_u64().unwrap();
    assert_eq!(
        u(&every, "trained_tokens"),
        4 * u(&every, "prompt_tokens") + u(&every, "sampled_tokens"),
        "{every}"
    );
    assert!(said.contains("(zero_variance skip)"), "{said}");
}

/// `lm bench --warmup-model`: imitation steps of a model on a plan's engineer examples,
/// as the base planner's warm-up runs them, with the steps' phases and the attention
/// kernel torch picks for their forward. On the CPU that is torch's flash kernel under
/// either layout (left-padded rows under a mask, or causal rows): the kernel that never
/// materialises a causal row's `[T, T]` scores, as `plan check` counts them. A GPU run
/// says which kernel its steps ran (tools/cuda-bench.sh part 3).
#[test]
fn warmup_steps_say_their_phases_and_attention_kernel() {
    let tmp = tempfile::tempdir().unwrap();
    let model = std::path::Path::new(TINY_TOKENIZER).parent().unwrap();
    let causal = tiny_plan(
        tmp.path(),
        "causal.toml",
        "[lm]\n",
        "[lm]\ntraining_attention = \"causal\"\n",
    );
    let masked = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/plans/lm-tiny.toml");
    for (plan, layout) in [(masked, "masked"), (causal.as_str(), "causal")] {
        let out = cli(&[
            "lm",
            "bench",
            "--batch",
            "--warmup-model",
            model.to_str().unwrap(),
            "--warmup-plan",
            plan,
            "--warmup-steps",
            "2",
            "--warmup-batch",
            "4",
        ]);
        let figure = json(&out)["warmup"].clone();
        assert_eq!(figure["steps"], 2, "{layout}: {figure}");
        assert_eq!(figure["batch"], 4, "{layout}: {figure}");
        assert!(
            figure["seconds_per_step"].as_f64().unwrap() > 0.0,
            "{figure}"
        );
        let phases: Vec<&str> = figure["timing"]["phases"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap())
            .collect();
        for phase in ["training", "optimiser", "parameter_hash"] {
            assert!(
                phases.contains(&phase),
                "{layout}: no {phase} in {phases:?}"
            );
        }
        assert_eq!(figure["attention_kernel"], "flash", "{layout}: {figure}");
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(
            said.contains("rows of") && said.contains("; attention kernel flash"),
            "{layout}: {said}"
        );
    }
}

/// `--grpo-at-budget`: the timed step does not decode its samples; every lane is its
/// whole token budget of drawn tokens (what random weights decode to anyway), so the
/// step times the KL reference and the training of that worst case alone, the part of
/// a step too long to decode in one lease. The figure says which it timed.
#[test]
fn a_step_at_budget_trains_every_lane_at_its_whole_budget_without_decoding() {
    let plan = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/plans/lm-tiny.toml");
    let step = |extra: &[&str]| grpo_figure(plan, "7", extra);
    let u = |g: &serde_json::Value, k: &str| g[k].as_u64().unwrap();
    let (at_budget, said) = step(&["--grpo-at-budget"]);
    assert_eq!(at_budget["rollouts"], "at_budget", "{at_budget}");
    // The plan's 4 prompts x 4 samples, every one 7 tokens, every row trained.
    assert_eq!(u(&at_budget, "sampled_tokens"), 16 * 7, "{at_budget}");
    assert_eq!(
        u(&at_budget, "trained_tokens"),
        4 * u(&at_budget, "prompt_tokens") + 16 * 7,
        "{at_budget}"
    );
    assert!(
        said.contains("GRPO step (samples at their budget, not decoded): "),
        "{said}"
    );
    let (decoded, said) = step(&[]);
    assert_eq!(decoded["rollouts"], "decoded", "{decoded}");
    assert_eq!(decoded["prompt_tokens"], at_budget["prompt_tokens"]);
    assert!(said.contains("GRPO step: "), "{said}");
    // As committed with thinking on, every lane is the plan's whole budget: a thinking
    // reply is not cut at its plan's length (here at most 82 tokens).
    let tmp = tempfile::tempdir().unwrap();
    let thinking = tiny_plan(
        tmp.path(),
        "thinking.toml",
        "\nmax_new_tokens = 40\n",
        "\nmax_new_tokens = 120\nthinking = true\n",
    );
    let out = grpo_bench(&thinking, &["--grpo-as-committed", "--grpo-at-budget"]);
    assert_eq!(u(&json(&out)["grpo"], "sampled_tokens"), 16 * 120);
    // Only the decoded step counts generation's FLOPs (2 per parameter and token).
    let per_trained =
        |g: &serde_json::Value| g["model_flops"].as_f64().unwrap() / u(g, "trained_tokens") as f64;
    assert!(
        per_trained(&decoded) > per_trained(&at_budget),
        "{decoded} {at_budget}"
    );
}
