//! `ledger plan check` (the memory plan) and the checks `ledger run --device cuda` makes
//! before it starts: the memory plan against the GPU (refused with exit 2 unless
//! `--force`), and a device that is not there (exit 2 naming what is missing and the
//! README section that says how to provide it).
mod common;
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

#[test]
fn the_paper_plan_does_not_fit_80_gib_until_it_trains_in_micro_batches() {
    let t = tempfile::tempdir().unwrap();
    let (plan, cfg) = (paper(), shape_4b());
    let o = check(
        t.path(),
        &[
            &plan,
            "--model-config",
            &cfg,
            "--gpu-memory",
            "80GiB",
            "--json",
        ],
    );
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    validates("plan-check", &v);
    assert_eq!(v["fits"], false);
    assert_eq!(v["dtype"], "bf16");
    assert_eq!(v["model"]["parameters"], 4_022_468_096u64);
    // LoRA: the frozen base in bf16 (2 bytes a parameter) dominates what is resident.
    assert_eq!(v["resident"][0]["bytes"], 2 * 4_022_468_096u64);
    let micro = v["changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["setting"] == "grpo.micro_batch")
        .expect("micro-batching is named as a fix");
    assert_eq!(micro["from"], 256);
    let to = micro["to"].as_u64().unwrap();
    // With that micro-batch the plan fits, and the text says so (exit 0).
    let fixed = t.path().join("paper-micro.toml");
    let text = std::fs::read_to_string(&plan).unwrap().replace(
        "checkpoint_every = 50",
        &format!("checkpoint_every = 50\nmicro_batch = {to}"),
    );
    std::fs::write(&fixed, text).unwrap();
    let out = ok(&check(
        t.path(),
        &[
            fixed.to_str().unwrap(),
            "--model-config",
            &cfg,
            "--gpu-memory",
            "80GiB",
        ],
    ));
    assert!(out.contains("fits in 80.00 GiB"), "{out}");
    // A larger micro-batch needs more memory: the estimate moves with the setting.
    let o = check(
        t.path(),
        &[fixed.to_str().unwrap(), "--model-config", &cfg, "--json"],
    );
    let small: serde_json::Value = serde_json::from_slice(&ok(&o).into_bytes()).unwrap();
    assert!(small["peak_bytes"].as_u64().unwrap() < v["peak_bytes"].as_u64().unwrap());
    assert!(small["fits"].is_null());
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
