//! Trainer throughput (`cargo bench --bench trainer`), torch on 1 thread
//! (`BENCH_THREADS=N` for another count; the Python peers get the same). Prints figures
//! and a closing table; asserts nothing. `cargo bench --bench trainer -- base` runs only
//! the sections whose name contains `base` (sections: hash, grid, tiny, large, base,
//! silent).
//!
//! - the machine's f32 matmul peak on the bench's thread count (best of square matmuls
//!   of 512, 1024, 2048), the yardstick of every "share of peak" below;
//! - grid policy: plans sampled per second and GRPO steps per second on the demo's
//!   training distribution (2 agents, sizes 3..6);
//! - lm policy, a tiny scratch model (~0.13M parameters) and one about 10x larger:
//!   decode tokens/s in three shapes (64 new tokens a lane, no early stop): one prompt
//!   at batch 1, 64 distinct prompts x 1 (evaluation's shape) and one prompt x 64
//!   samples (a GRPO group's), and GRPO steps/s (16 instances x 8 samples). Both models
//!   are also exported as HF directories under `target/bench-lm/`;
//! - the parameter hash every gradient step records (`train::checkpoint::param_hash`),
//!   best of 5, of tensors shaped as Qwen3-4B's rank-32 LoRA adapters on all seven
//!   projections (66.1M f32, what a 4B GRPO step hashes) and as the shipped base
//!   planner's weights (2.6M); section `hash`;
//! - the shipped base planner (`ledgers/models/mapf-base-indep`, 2.6M parameters, cells
//!   prompts of the demo's sizes 3..10): decode as above, and GRPO steps/s (16
//!   instances x 8 samples, temperature 1, plans up to the policy's budget, ending at
//!   `<|im_end|>`, no KL reference).
//! - `[grpo] zero_variance`, `skip` against `drop`, on study v4's own GRPO steps
//!   (`ledgers/study-v4.toml`: `ledgers/models/mapf-reader-v3`, 16 instances x 8 samples
//!   of its initial configuration, the KL reference a second copy of the model, full
//!   fine-tuning): the first steps of its stage 1, each step's seconds, its KL
//!   reference and training phases and its groups with signal, the two settings
//!   alternating step by step from the same start; section `silent`.
//!
//! With `HF_PYTHON=/path/to/python` (a Python with torch 2.11, transformers and trl:
//! `HF_PYTHON=$(tools/hf-venv.sh) cargo bench --bench trainer`), the same checkpoints,
//! prompts and caps run through the Python peers in this run, each doing the same work
//! as the ledger's side: transformers' `generate()` (`tools/bench_transformers.py`) on
//! the same prompt at batch 1, the same 64 distinct prompts left-padded, and the same
//! prompt with `num_return_sequences = 64` (which prefills 64 copies where the ledger
//! prefills one: the printed ratio includes that); TRL's `GRPOTrainer`
//! (`tools/bench_trl.py`, whose doc says what one of its steps does) on the very
//! batches the ledger's steps draw, in order, each row capped at the ledger's budget for
//! its instance, the same group size, sampling and thread count, no reference model on
//! either side.
//!
//! Share of peak: model FLOPs (2 per weight of every linear layer and the head, per
//! token that goes through it; attention 4 x layers x heads x head_dim x context per
//! token; backward 2x forward; padding and recomputation not counted, a prompt
//! prefilled once per instance) divided by time, over the matmul peak.
//!
//! Results: README, "Speed", from the committed output of a run
//! (`ledgers/results/speed-cpu/`).
use mapf_ledger::env::{generate, Budget, CostMetric, GeneratorConfig, Solved};
use mapf_ledger::ledger::Hash;
use mapf_ledger::record::trainer::StepRecord;
use mapf_ledger::seed::Seed;
use mapf_ledger::train::adam::AdamConfig;
use mapf_ledger::train::batches;
use mapf_ledger::train::grpo::{self, GrpoConfig};
use mapf_ledger::train::lm::{self, LmConfig, LmSpec, Sampling};
use mapf_ledger::train::policy::Policy;
use mapf_ledger::train::{new_policy, TrainState};
use std::path::{Path, PathBuf};
use std::time::Instant;
use tch::{Device, Kind, Tensor};

fn grpo_config() -> GrpoConfig {
    GrpoConfig {
        steps: 0,
        lr: 3e-4,
        group_size: 8,
        batch_size: 16,
        clip_eps: 0.2,
        kl_coef: 0.0,
        entropy_coef: 0.001,
        epochs: 1,
        valid_reward: 1.0,
        optimal_bonus: 0.5,
        format_reward: 0.1,
        agent_reward: 0.0,
        cost_reward: 0.0,
        zero_variance: grpo::ZeroVariance::Keep,
        checkpoint_every: 1000,
        micro_batch: 0,
        ..GrpoConfig::default()
    }
}

/// Timed GRPO steps on each side (after one untimed warm-up step).
const GRPO_TIMED: u64 = 8;

/// The seed of the bench's GRPO steps: it draws their batches and samples.
fn grpo_seed() -> Seed {
    Seed::root(3)
}

/// GRPO steps per second, with the mean sampled tokens and the mean model FLOPs of a
/// step (`flops(batch instance indices, sampled tokens)`).
struct GrpoRate {
    steps_per_s: f64,
    tokens_per_step: f64,
    flops_per_step: f64,
}

/// One untimed warm-up step (step 0: first-touch allocations, MKL's setup), then
/// `timed` steps (1..=timed), always the same ones: every run of the bench times the
/// same batches, so runs differ only by the machine, not by which steps fit a time
/// budget (TRL's side, `tools/bench_trl.py`, also drops its first step).
fn grpo_rate(
    policy: Box<dyn Policy>,
    data: &[Solved],
    timed: u64,
    flops: &dyn Fn(&[usize], u64) -> f64,
) -> GrpoRate {
    let blobs = vec![Hash([0; 32]); data.len()];
    let mut state = TrainState::new(policy, AdamConfig::default());
    let g = grpo_config();
    let seed = grpo_seed();
    let (mut tokens, mut fl) = (0u64, 0.0);
    let mut t0 = Instant::now();
    for step in 0..=timed {
        if step == 1 {
            t0 = Instant::now();
        }
        let (events, _) = grpo::step(
            &mut state,
            None,
            &g,
            CostMetric::Makespan,
            data,
            &blobs,
            &[],
            seed,
            step,
        );
        if step == 0 {
            continue;
        }
        // The step's batch, as `grpo::step` draws it.
        let idx = batches::batch_indices(
            data.len(),
            g.batch_size as usize,
            seed.child("order", 0),
            step,
        );
        for e in &events {
            if let StepRecord::GrpoStats(s) = e {
                tokens += s.tokens;
                fl += flops(&idx, s.tokens);
            }
        }
    }
    let dt = t0.elapsed().as_secs_f64();
    GrpoRate {
        steps_per_s: timed as f64 / dt,
        tokens_per_step: tokens as f64 / timed as f64,
        flops_per_step: fl / timed as f64,
    }
}

/// Per-token model FLOPs of a config: the linear layers, the head, attention per key.
#[derive(Clone, Copy)]
struct Flops {
    layers: f64,
    head: f64,
    attn_per_key: f64,
}

impl Flops {
    fn of(cfg: &LmConfig) -> Flops {
        let mut layers = 0.0;
        for (name, shape) in lm::model::param_shapes(cfg) {
            if name.contains("_proj.weight") {
                layers += 2.0 * shape.iter().product::<i64>() as f64;
            }
        }
        Flops {
            layers,
            head: 2.0 * (cfg.vocab_size * cfg.hidden_size) as f64,
            attn_per_key: 4.0
                * (cfg.num_hidden_layers * cfg.num_attention_heads * cfg.head_dim) as f64,
        }
    }

    /// Tokens at contexts `c0 + 1 ..= c0 + n` through the layers (attention included).
    fn run(&self, c0: f64, n: f64) -> f64 {
        n * self.layers + self.attn_per_key * (n * c0 + n * (n + 1.0) / 2.0)
    }

    /// One generation: a `prompt`-token prefill (logits of its last position only),
    /// then `lanes` lanes of `new - 1` decode steps.
    fn generation(&self, prompt: f64, lanes: f64, new: f64) -> f64 {
        let decode = (new - 1.0).max(0.0);
        self.run(0.0, prompt) + self.head + lanes * (self.run(prompt, decode) + decode * self.head)
    }

    /// One GRPO step: the generation of `group` samples of `completion` tokens per
    /// prompt, then a forward (logits at the completion's positions only) and a
    /// backward (2x) over prompt + completion of every sample.
    fn grpo_step(&self, prompts: &[f64], group: f64, completion: f64) -> f64 {
        prompts
            .iter()
            .map(|&p| {
                let train = self.run(0.0, p + completion - 1.0) + completion * self.head;
                self.generation(p, group, completion) + group * 3.0 * train
            })
            .sum()
    }
}

/// Decode tokens per second: `per_prompt` lanes of each of `prompts`, `new` tokens
/// each, no early stop.
fn decode_rate(p: &lm::LmPolicy, prompts: &[Vec<u32>], per_prompt: usize, new: usize) -> f64 {
    let s = Sampling {
        temperature: 1.0,
        top_p: 1.0,
        max_new_tokens: new,
    };
    let budgets = vec![new; prompts.len()];
    let run = || {
        lm::generate::generate(
            &p.model,
            prompts,
            per_prompt,
            &budgets,
            &s,
            false,
            &[],
            Seed::root(9),
            true,
        )
    };
    run(); // warm-up
    let t0 = Instant::now();
    let mut reps = 0;
    while t0.elapsed().as_secs_f64() < 3.0 || reps < 2 {
        let g = run();
        assert!(g.iter().all(|g| g.tokens.len() == new));
        reps += 1;
    }
    (reps * prompts.len() * per_prompt * new) as f64 / t0.elapsed().as_secs_f64()
}

/// f32 matmul GFLOP/s on the current torch thread count: the best of square sizes.
fn matmul_peak() -> f64 {
    let _guard = tch::no_grad_guard();
    let mut best: f64 = 0.0;
    for n in [512i64, 1024, 2048] {
        let a = Tensor::randn([n, n], (Kind::Float, Device::Cpu));
        let b = Tensor::randn([n, n], (Kind::Float, Device::Cpu));
        let _ = a.mm(&b); // warm-up
        let t0 = Instant::now();
        let mut reps = 0;
        while t0.elapsed().as_secs_f64() < 1.5 || reps < 3 {
            let _ = a.mm(&b);
            reps += 1;
        }
        let gflops = 2.0 * (n as f64).powi(3) * reps as f64 / t0.elapsed().as_secs_f64() / 1e9;
        best = best.max(gflops);
    }
    best
}

/// The JSON lines a Python peer prints (stderr shown when it fails).
fn python_peer(py: &str, script: &str, args: &[String]) -> Vec<serde_json::Value> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tools")
        .join(script);
    // The allocator setting `train::keep_freed_memory` gives this process, through
    // glibc's environment tunables, so both sides reuse freed activations.
    let o = std::process::Command::new(py)
        .env(
            "GLIBC_TUNABLES",
            "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=2147483647",
        )
        .arg(&script)
        .args(args)
        .output()
        .expect("run HF_PYTHON");
    if !o.status.success() {
        println!(
            "    {} failed: {}",
            script.display(),
            String::from_utf8_lossy(&o.stderr)
        );
    }
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| l.starts_with("{\""))
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect()
}

/// transformers' generate() tokens/s on `dir`, per shape (`single`, `distinct`,
/// `shared`; `tools/bench_transformers.py` says what each is).
fn hf_generate(py: &str, dir: &Path, prompts_file: &Path, threads: i32) -> Vec<(String, f64)> {
    let args = [
        "--model".to_string(),
        dir.display().to_string(),
        "--prompts-file".into(),
        prompts_file.display().to_string(),
        "--lanes".into(),
        LANES.to_string(),
        "--new-tokens".into(),
        "64".into(),
        "--threads".into(),
        threads.to_string(),
    ];
    python_peer(py, "bench_transformers.py", &args)
        .iter()
        .map(|v| {
            (
                v["shape"].as_str().unwrap_or("").to_string(),
                v["tokens_per_s"].as_f64().unwrap_or(0.0),
            )
        })
        .collect()
}

/// One line of the closing table.
struct Row {
    what: String,
    ours: String,
    peer: String,
    ratio: String,
    share: String,
}

fn row(what: &str, ours: String, peer: Option<(String, f64)>, ours_v: f64, share: f64) -> Row {
    Row {
        what: what.into(),
        ours,
        ratio: peer
            .as_ref()
            .map_or("-".into(), |(_, p)| format!("{:.2}x", ours_v / p)),
        peer: peer.map_or("(no HF_PYTHON)".into(), |(s, _)| s),
        share: if share > 0.0 {
            format!("{:.1}%", 100.0 * share)
        } else {
            "-".into()
        },
    }
}

/// Lanes of the batched decode rows: 64 distinct prompts, or one prompt sampled 64 times.
const LANES: usize = 64;

/// Decode of a policy against transformers on its HF directory, in three shapes, each
/// the same work on both sides: one prompt at batch 1; [`LANES`] distinct prompts, one
/// sample each (evaluation's shape: each side prefills every prompt); one prompt,
/// [`LANES`] samples (a GRPO group's shape: the ledger prefills it once and copies its
/// cache to the lanes, `generate(num_return_sequences)` prefills every copy, as its API
/// does). `prompt_texts` holds at least [`LANES`] task texts.
#[allow(clippy::too_many_arguments)]
fn decode_section(
    name: &str,
    p: &lm::LmPolicy,
    prompt_texts: &[String],
    dir: &Path,
    out: &Path,
    py: Option<&str>,
    threads: i32,
    peak: f64,
    rows: &mut Vec<Row>,
) {
    assert!(prompt_texts.len() >= LANES);
    let prompts: Vec<Vec<u32>> = prompt_texts[..LANES]
        .iter()
        .map(|t| p.chat_ids(t))
        .collect();
    let f = Flops::of(&p.model.cfg);
    let prompts_file = out.join(format!("{name}-prompts.jsonl"));
    let lines: Vec<String> = prompt_texts[..LANES]
        .iter()
        .map(|t| serde_json::json!({ "text": t }).to_string())
        .collect();
    std::fs::write(&prompts_file, lines.join("\n")).expect("prompts");
    let hf = py.map(|py| hf_generate(py, dir, &prompts_file, threads));
    let mean_len = prompts.iter().map(Vec::len).sum::<usize>() as f64 / LANES as f64;
    for (shape, what, rust_prompts, per_prompt) in [
        ("single", "1 prompt, batch 1".to_string(), &prompts[..1], 1),
        (
            "distinct",
            format!("{LANES} distinct prompts x 1"),
            &prompts[..],
            1,
        ),
        (
            "shared",
            format!("1 prompt x {LANES} samples"),
            &prompts[..1],
            LANES,
        ),
    ] {
        let rate = decode_rate(p, rust_prompts, per_prompt, 64);
        // FLOPs per generated token, each prompt's prefill shared out over its lanes.
        let lanes = rust_prompts.len() * per_prompt;
        let total: f64 = rust_prompts
            .iter()
            .map(|q| f.generation(q.len() as f64, per_prompt as f64, 64.0))
            .sum();
        let per_tok = total / (lanes * 64) as f64;
        let peer = hf.as_ref().and_then(|h| {
            h.iter()
                .find(|(s, _)| s == shape)
                .map(|&(_, t)| (format!("generate() {t:.0} tok/s"), t))
        });
        let prompt_len = if shape == "distinct" {
            format!("prompts {mean_len:.0} tokens on average")
        } else {
            format!("prompt {} tokens", rust_prompts[0].len())
        };
        println!(
            "lm {name}: decode {rate:>8.0} tokens/s, {what} ({prompt_len}){}",
            peer.as_ref().map_or(String::new(), |(s, t)| format!(
                "; transformers {s}: ledger / transformers = {:.2}x",
                rate / t
            ))
        );
        rows.push(row(
            &format!("{name} decode, {what}"),
            format!("{rate:.0} tok/s"),
            peer,
            rate,
            rate * per_tok / 1e9 / peak,
        ));
    }
}

fn main() {
    let threads: i32 = std::env::var("BENCH_THREADS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    tch::set_num_threads(threads);
    mapf_ledger::train::keep_freed_memory();
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let want = |s: &str| filter.is_empty() || filter.iter().any(|f| s.contains(f.as_str()));
    let py = std::env::var("HF_PYTHON").ok();
    let py = py.as_deref();
    let mut rows: Vec<Row> = Vec::new();

    let peak = matmul_peak();
    println!("f32 matmul peak: {peak:.1} GFLOP/s on {threads} torch thread(s)");

    if want("hash") {
        hash_section();
    }

    let cfg = GeneratorConfig::uniform(2, 3..=6, 0.1, 0.2);
    let data = generate(&cfg, 256, Seed::root(1), Budget::default()).expect("generate");
    let instances: Vec<_> = data.iter().map(|d| d.instance.clone()).collect();

    if want("grid") {
        let grid = new_policy("grid", Device::Cpu, Seed::root(2)).expect("policy");
        let t0 = Instant::now();
        let mut plans = 0;
        while t0.elapsed().as_secs_f64() < 3.0 {
            plans += grid
                .sample(&instances[..64], 8, false, Seed::root(plans as u64))
                .len();
        }
        let sample_rate = plans as f64 / t0.elapsed().as_secs_f64();
        let step_rate = grpo_rate(grid, &data, 100, &|_, _| 0.0).steps_per_s;
        println!("grid policy: {sample_rate:>8.0} plans/s sampled (64 instances x 8), {step_rate:>6.2} GRPO steps/s (16 instances x 8 plans)");
    }

    let tiny = LmSpec::default();
    let large = LmSpec {
        hidden_size: 192,
        intermediate_size: 512,
        layers: 3,
        heads: 6,
        kv_heads: 2,
        head_dim: 32,
        ..LmSpec::default()
    };
    let out = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-lm");
    std::fs::create_dir_all(&out).expect("target/bench-lm");
    let prompt_texts: Vec<String> = instances[..LANES]
        .iter()
        .map(mapf_ledger::env::text::render_compact_prompt)
        .collect();
    for (name, spec) in [("tiny", tiny), ("large", large)] {
        if !want(name) {
            continue;
        }
        let corpus = || mapf_ledger::stage::pretraining_corpus(&spec, &data);
        let p = lm::init(&spec, Device::Cpu, Seed::root(4), corpus).expect("lm");
        let params = p.model.cfg.parameter_count();
        let dir = out.join(name);
        lm::hf::export(&dir, &p.model, &p.tokenizer_json, p.arch.chat).expect("export");
        println!("lm {name}: {params} parameters");
        decode_section(
            name,
            &p,
            &prompt_texts,
            &dir,
            &out,
            py,
            threads,
            peak,
            &mut rows,
        );
        let steps = grpo_rate(Box::new(p), &data, 8, &|_, _| 0.0).steps_per_s;
        println!("lm {name}: {steps:.2} GRPO steps/s (16 instances x 8 samples)");
    }

    if want("silent") {
        silent_section();
    }

    let base_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("ledgers/models/mapf-base-indep");
    if want("base") && base_dir.join("config.json").exists() {
        base_section(&base_dir, &out, py, threads, peak, &mut rows);
    }

    println!();
    println!(
        "{:<44} {:>30} {:>34} {:>8} {:>10}",
        "", "ours", "peer (same run)", "ratio", "ours/peak"
    );
    for r in &rows {
        println!(
            "{:<44} {:>30} {:>34} {:>8} {:>10}",
            r.what, r.ours, r.peer, r.ratio, r.share
        );
    }
    println!("(peak: f32 matmul {peak:.1} GFLOP/s, {threads} thread(s))");
}

/// The shipped base planner: decode and GRPO against transformers and TRL.
fn base_section(
    dir: &Path,
    out: &Path,
    py: Option<&str>,
    threads: i32,
    peak: f64,
    rows: &mut Vec<Row>,
) {
    // The demo's training distribution: 2 agents, sizes 3..10.
    let cfg = GeneratorConfig::uniform(2, 3..=10, 0.1, 0.2);
    let data = generate(&cfg, 256, Seed::root(5), Budget::default()).expect("generate");
    let cap = 400; // ledgers/demo.toml's max_new_tokens
    let sampling = Sampling {
        temperature: 1.0,
        top_p: 1.0,
        max_new_tokens: cap,
    };
    let load = || {
        lm::LmPolicy::from_hf_dir(
            dir,
            Device::Cpu,
            None,
            lm::PromptStyle::Cells,
            sampling,
            Seed::root(4),
        )
        .expect("ledgers/models/mapf-base-indep")
    };
    let p = load();
    println!(
        "lm base (ledgers/models/mapf-base-indep): {} parameters",
        p.model.cfg.parameter_count()
    );
    let f = Flops::of(&p.model.cfg);
    let prompt_texts: Vec<String> = data[..LANES]
        .iter()
        .map(|d| p.task_text(&d.instance))
        .collect();
    decode_section("base", &p, &prompt_texts, dir, out, py, threads, peak, rows);

    // GRPO: TRL gets the very batches the ledger's steps draw (step 0, the untimed
    // warm-up, then the timed ones), in order, each row with the new-token cap the
    // ledger gives its instance (`plan_budget`), so both sides sample the same prompts
    // under the same caps.
    let g = grpo_config();
    let prompt_lens: Vec<f64> = data
        .iter()
        .map(|d| p.chat_ids(&p.task_text(&d.instance)).len() as f64)
        .collect();
    let prompts_file: PathBuf = out.join("base-grpo-prompts.jsonl");
    let lines: Vec<String> = (0..=GRPO_TIMED)
        .flat_map(|step| {
            batches::batch_indices(
                data.len(),
                g.batch_size as usize,
                grpo_seed().child("order", 0),
                step,
            )
        })
        .map(|i| {
            let inst = &data[i].instance;
            serde_json::json!({
                "prompt": p.arch.chat.wrap(&p.task_text(inst)),
                "cap": p.plan_budget(inst),
            })
            .to_string()
        })
        .collect();
    std::fs::write(&prompts_file, lines.join("\n")).expect("prompts");
    let max_budget = data
        .iter()
        .map(|d| p.plan_budget(&d.instance))
        .max()
        .unwrap_or(cap);
    let flops = |idx: &[usize], tokens: u64| {
        let prompts: Vec<f64> = idx.iter().map(|&i| prompt_lens[i]).collect();
        let per = tokens as f64 / (idx.len() * g.group_size as usize) as f64;
        f.grpo_step(&prompts, g.group_size as f64, per)
    };
    let r = grpo_rate(Box::new(p), &data, GRPO_TIMED, &flops);
    let share = r.flops_per_step * r.steps_per_s / 1e9 / peak;
    println!(
        "lm base: {:.3} GRPO steps/s ({:.2} s/step; 16 instances x 8 samples, {:.0} sampled tokens/step, {:.1} GFLOP/step: {:.1}% of peak)",
        r.steps_per_s,
        1.0 / r.steps_per_s,
        r.tokens_per_step,
        r.flops_per_step / 1e9,
        100.0 * share
    );
    let mut peer = None;
    if let Some(py) = py {
        let args: Vec<String> = [
            "--model",
            &dir.display().to_string(),
            "--prompts",
            &prompts_file.display().to_string(),
            "--group",
            &g.group_size.to_string(),
            "--batch",
            &g.batch_size.to_string(),
            "--steps",
            &GRPO_TIMED.to_string(),
            "--threads",
            &threads.to_string(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        if let Some(v) = python_peer(py, "bench_trl.py", &args).first() {
            let sps = v["steps_per_s"].as_f64().unwrap_or(0.0);
            let toks = v["completion_tokens_per_step"].as_f64().unwrap_or(0.0);
            println!(
                "    TRL GRPOTrainer: {sps:.3} steps/s ({:.2} s/step, {toks:.0} sampled tokens/step: {:.0} tokens/s; the same batches, each row capped as the ledger caps it, at most {max_budget}); ledger / TRL = {:.2}x in steps/s, {:.2}x in sampled tokens/s",
                1.0 / sps,
                toks * sps,
                r.steps_per_s / sps,
                (r.tokens_per_step * r.steps_per_s) / (toks * sps).max(1e-9)
            );
            peer = Some((
                format!("TRL {sps:.3} steps/s, {:.0} tok/s", toks * sps),
                sps,
            ));
        }
    }
    rows.push(row(
        "base GRPO step (16 x 8)",
        format!(
            "{:.3} steps/s, {:.0} tok/s",
            r.steps_per_s,
            r.tokens_per_step * r.steps_per_s
        ),
        peer,
        r.steps_per_s,
        share,
    ));
}

/// `zero_variance = "skip"` against `"drop"` on study v4's GRPO steps (see the module
/// doc): both start from the same model and take the same steps, alternating, so the
/// machine's drift falls on both; each step's rows (the same samples under both until
/// the updates' rounding parts them) and what it cost.
fn silent_section() {
    use mapf_ledger::record::timing::phase;
    use mapf_ledger::train::timing::Phases;
    const STEPS: u64 = 6;
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let plan = mapf_ledger::plan::LedgerPlan::read(&root.join("ledgers/study-v4.toml"))
        .expect("ledgers/study-v4.toml");
    let data = generate(
        &plan.initial_config,
        plan.grpo.instances_per_stage as usize,
        Seed::root(plan.seed).child("bench-silent", 0),
        Budget::default(),
    )
    .expect("generate");
    let blobs = vec![Hash([0; 32]); data.len()];
    let load = || {
        let mut p = lm::init(&plan.lm, Device::Cpu, Seed::root(plan.seed), Vec::new)
            .expect("ledgers/models/mapf-reader-v3 (the study's [lm] init)");
        p.apply_settings(plan.policy_settings());
        p
    };
    let base = load();
    let mut states: Vec<(grpo::ZeroVariance, TrainState)> =
        [grpo::ZeroVariance::Skip, grpo::ZeroVariance::Drop]
            .into_iter()
            .map(|z| (z, TrainState::new(Box::new(load()), plan.grpo.adam())))
            .collect();
    println!(
        "zero_variance on study v4's GRPO steps ({} x {} samples, KL {}, full fine-tuning):",
        plan.grpo.batch_size, plan.grpo.group_size, plan.grpo.kl_coef
    );
    let mut total = [(0.0f64, 0.0f64); 2];
    for step in 0..STEPS {
        for (k, (z, state)) in states.iter_mut().enumerate() {
            let cfg = GrpoConfig {
                zero_variance: *z,
                ..plan.grpo.clone()
            };
            let mut phases = Phases::new(Device::Cpu);
            let t = Instant::now();
            let (records, _) = grpo::step_timed(
                state,
                Some(&base),
                &cfg,
                CostMetric::Makespan,
                &data,
                &blobs,
                &[],
                Seed::root(plan.seed).child("bench-silent-stage", 1),
                step,
                &mut phases,
            );
            let seconds = t.elapsed().as_secs_f64();
            let timing = phases.timing();
            let of = |name: &str| {
                timing
                    .phases
                    .iter()
                    .find(|p| p.name == name)
                    .map_or(0.0, |p| p.seconds)
            };
            let trained = of(phase::KL_REFERENCE) + of(phase::TRAINING);
            let stats = grpo::recorded_stats(&records);
            println!(
                "  step {step} {:<4}: {seconds:6.2} s (generation {:5.2} s, KL reference {:5.2} s, training {:5.2} s), {:>2} of {} groups with signal, {} tokens sampled",
                z.name(),
                of(phase::GENERATION),
                of(phase::KL_REFERENCE),
                of(phase::TRAINING),
                stats.signal_groups,
                stats.groups,
                stats.tokens
            );
            if step > 0 {
                total[k].0 += seconds;
                total[k].1 += trained;
            }
        }
    }
    let n = (STEPS - 1) as f64;
    println!(
        "  steps 1..{}: skip {:.2} s a step (KL reference + training {:.2} s), drop {:.2} s ({:.2} s): drop / skip = {:.2} a step, {:.2} for KL reference + training",
        STEPS - 1,
        total[0].0 / n,
        total[0].1 / n,
        total[1].0 / n,
        total[1].1 / n,
        total[1].0 / total[0].0,
        total[1].1 / total[0].1
    );
}

/// Best of 5 [`mapf_ledger::train::checkpoint::param_hash`] calls on `vs`, in seconds.
fn hash_time(vs: &tch::nn::VarStore) -> f64 {
    (0..5)
        .map(|_| {
            let t0 = Instant::now();
            std::hint::black_box(mapf_ledger::train::checkpoint::param_hash(vs));
            t0.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

/// The parameter hash of a 4B GRPO step's adapters and of the base planner's weights.
fn hash_section() {
    let _rng = mapf_ledger::train::seeded_torch_rng(Seed::root(9));
    // Qwen3-4B: hidden 2560, 32 query and 8 key/value heads of 128, MLP 9728, 36 layers.
    let (h, q, kv, i, r) = (2560, 4096, 1024, 9728, 32);
    let adapters = tch::nn::VarStore::new(Device::Cpu);
    for l in 0..36 {
        for (name, inp, out) in [
            ("q_proj", h, q),
            ("k_proj", h, kv),
            ("v_proj", h, kv),
            ("o_proj", q, h),
            ("gate_proj", h, i),
            ("up_proj", h, i),
            ("down_proj", i, h),
        ] {
            let root = adapters.root();
            let _ = root.var(
                &format!("l{l}_{name}_lora_A"),
                &[r, inp],
                tch::nn::Init::Randn {
                    mean: 0.0,
                    stdev: 0.02,
                },
            );
            let _ = root.var(
                &format!("l{l}_{name}_lora_B"),
                &[out, r],
                tch::nn::Init::Randn {
                    mean: 0.0,
                    stdev: 0.02,
                },
            );
        }
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("ledgers/models/mapf-base-indep");
    let sampling = Sampling {
        temperature: 1.0,
        top_p: 1.0,
        max_new_tokens: 1,
    };
    let base = lm::LmPolicy::from_hf_dir(
        &dir,
        Device::Cpu,
        None,
        lm::PromptStyle::Cells,
        sampling,
        Seed::root(4),
    )
    .expect("ledgers/models/mapf-base-indep");
    for (what, vs) in [
        ("4B LoRA adapters", &adapters),
        ("base planner", base.vars()),
    ] {
        let n: i64 = vs
            .trainable_variables()
            .iter()
            .map(|t| t.numel() as i64)
            .sum();
        let s = hash_time(vs);
        println!(
            "parameter hash, {what} ({:.1}M f32): {:.1} ms ({:.2} GB/s)",
            n as f64 / 1e6,
            s * 1e3,
            n as f64 * 4.0 / s / 1e9
        );
    }
}
