//! `ledger lm bench` on the CPU: the figures a GPU run commits (tools/cuda-bench.sh) come
//! out as JSON with their fields, every decode lane runs to the asked length, and bad
//! input is refused naming the flag.
use crate::common;
use common::{cli, fails, json};

const SHAPE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/hf/tiny-qwen3/config.json"
);

#[test]
fn decode_figures_carry_their_rate_and_roofline_share() {
    let o = cli(&[
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
        "--memory-bandwidth",
        "1e10",
    ]);
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
    // `--batch` alone measures no decode.
    let v = json(&cli(&["lm", "bench", "--shape", SHAPE, "--batch"]));
    assert!(v.get("decode").is_none(), "{v}");
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
