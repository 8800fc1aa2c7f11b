//! Trainer throughput (`cargo bench --bench trainer`), torch on 1 thread. Prints
//! figures; asserts nothing.
//!
//! - grid policy: plans sampled per second and GRPO steps per second on the demo's
//!   training distribution (2 agents, sizes 3..6);
//! - lm policy, a tiny scratch model (~0.13M parameters) and one about 10x larger:
//!   decode tokens/s at batch 1 and batch 64 (64 new tokens, no early stop), and GRPO
//!   steps/s (16 instances x 8 samples). Both models are also exported as HF
//!   directories under `target/bench-lm/`; with `HF_PYTHON=/path/to/python` (a Python
//!   with torch 2.11 and transformers), the same checkpoints run through transformers'
//!   `generate()` in this run (`tools/bench_transformers.py`) and the ratio is printed.
use mapf_ledger::env::{generate, Budget, CostMetric, GeneratorConfig, Solved};
use mapf_ledger::ledger::Hash;
use mapf_ledger::seed::Seed;
use mapf_ledger::train::adam::AdamConfig;
use mapf_ledger::train::grpo::{self, GrpoConfig};
use mapf_ledger::train::lm::{self, LmSpec, Sampling};
use mapf_ledger::train::policy::Policy;
use mapf_ledger::train::{new_policy, TrainState};
use std::time::Instant;

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

fn grpo_rate(policy: Box<dyn Policy>, data: &[Solved], secs: f64) -> f64 {
    let blobs = vec![Hash([0; 32]); data.len()];
    let mut state = TrainState::new(policy, AdamConfig::default());
    let g = grpo_config();
    let t0 = Instant::now();
    let mut steps = 0u64;
    while t0.elapsed().as_secs_f64() < secs || steps < 2 {
        let _ = grpo::step(
            &mut state,
            None,
            &g,
            CostMetric::Makespan,
            data,
            &blobs,
            Seed::root(3),
            steps,
        );
        steps += 1;
    }
    steps as f64 / t0.elapsed().as_secs_f64()
}

/// Decode tokens per second: `batch` lanes of one prompt, `new` tokens each.
fn decode_rate(p: &lm::LmPolicy, prompt: &[u32], batch: usize, new: usize) -> f64 {
    let s = Sampling {
        temperature: 1.0,
        top_p: 1.0,
        max_new_tokens: new,
    };
    let run = || {
        lm::generate::generate(
            &p.model,
            &[prompt.to_vec()],
            batch,
            &[new],
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
        assert_eq!(g[0].tokens.len(), new);
        reps += 1;
    }
    (reps * batch * new) as f64 / t0.elapsed().as_secs_f64()
}

fn main() {
    tch::set_num_threads(1);
    let cfg = GeneratorConfig::uniform(2, 3..=6, 0.1, 0.2);
    let data = generate(&cfg, 256, Seed::root(1), Budget::default()).expect("generate");
    let instances: Vec<_> = data.iter().map(|d| d.instance.clone()).collect();

    let grid = new_policy("grid", tch::Device::Cpu, Seed::root(2)).expect("policy");
    let t0 = Instant::now();
    let mut plans = 0;
    while t0.elapsed().as_secs_f64() < 3.0 {
        plans += grid
            .sample(&instances[..64], 8, false, Seed::root(plans as u64))
            .len();
    }
    let sample_rate = plans as f64 / t0.elapsed().as_secs_f64();
    let step_rate = grpo_rate(grid, &data, 5.0);
    println!("grid policy: {sample_rate:>8.0} plans/s sampled (64 instances x 8), {step_rate:>6.2} GRPO steps/s (16 instances x 8 plans)");

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
    let out = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-lm");
    let prompt_text = mapf_ledger::env::text::render_compact_prompt(&instances[0]);
    std::fs::create_dir_all(&out).expect("target/bench-lm");
    std::fs::write(out.join("prompt.txt"), &prompt_text).expect("prompt");
    for (name, spec) in [("tiny", tiny), ("large", large)] {
        let corpus = || mapf_ledger::stage::pretraining_corpus(&spec, &data);
        let p = lm::init(&spec, tch::Device::Cpu, Seed::root(4), corpus).expect("lm");
        let params = p.model.cfg.parameter_count();
        let prompt = p.chat_ids(&prompt_text);
        let b1 = decode_rate(&p, &prompt, 1, 64);
        let b64 = decode_rate(&p, &prompt, 64, 64);
        let dir = out.join(name);
        lm::hf::export(&dir, &p.model, &p.tokenizer_json, p.arch.chat).expect("export");
        let steps = grpo_rate(Box::new(p), &data, 8.0);
        println!(
            "lm {name} ({params} parameters, prompt {} tokens): decode {b1:>8.0} tokens/s at batch 1, {b64:>8.0} tokens/s at batch 64; {steps:.2} GRPO steps/s (16 instances x 8 samples)",
            prompt.len()
        );
        if let Ok(py) = std::env::var("HF_PYTHON") {
            let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tools/bench_transformers.py");
            let o = std::process::Command::new(py)
                .arg(&script)
                .args([
                    "--model",
                    dir.to_str().unwrap(),
                    "--batch",
                    "1,64",
                    "--new-tokens",
                    "64",
                    "--threads",
                    "1",
                ])
                .arg("--prompt-file")
                .arg(out.join("prompt.txt"))
                .output()
                .expect("run HF_PYTHON");
            let text = String::from_utf8_lossy(&o.stdout);
            for line in text.lines().filter(|l| l.starts_with('{')) {
                let v: serde_json::Value = serde_json::from_str(line).expect("json line");
                let (batch, tps) = (
                    v["batch"].as_u64().unwrap_or(0),
                    v["tokens_per_s"].as_f64().unwrap_or(0.0),
                );
                let ours = if batch == 1 { b1 } else { b64 };
                println!("    transformers generate() batch {batch}: {tps:.0} tokens/s; ledger / transformers = {:.2}x", ours / tps);
            }
            if !o.status.success() {
                println!(
                    "    transformers run failed: {}",
                    String::from_utf8_lossy(&o.stderr)
                );
            }
        }
    }
}
