//! A real-size dry run of the paper's setting on the CPU, in bf16 (`tools/dry-run.sh`;
//! `cargo bench --bench dry_run -- SHAPE [--group G] [--new-tokens N] ...`). Not a test:
//! it prints what it measured and asserts only that each phase ran.
//!
//! A randomly initialised model of a published shape (`qwen3-0.6b`, `qwen3-4b`, or the
//! small `tiny` and `10m` used to check the memory estimate) goes through, with LoRA
//! (rank 32 on every projection, as `ledgers/paper.toml`) and torch on 2 threads:
//! 1. one generation round of a GRPO group on a paper-style prompt (10x10 map, 5 agents);
//! 2. one LoRA GRPO step on that instance (the group sampled again, then the clipped
//!    objective with the KL term through the frozen bf16 base, and an Adam update);
//! 3. the `current` engineer's reply to a prompt with all five context modules;
//! 4. a checkpoint (adapters and their Adam state only) and an HF export (LoRA merged).
//!
//! Per phase: wall time, peak resident memory above the baseline (RSS before the model
//! was made; the kernel's high-water mark is reset between phases through
//! `/proc/self/clear_refs`), and `train::memory`'s estimate of the same workload.
//!
//! What is shortened: the prompts are tokenised by a byte-level BPE trained here (1,024
//! tokens; no Qwen tokenizer is available offline), and new tokens are capped by
//! `--new-tokens` (default 32; the paper plan allows 512), `--engineer-new-tokens` (16).
use mapf_ledger::engineer::text::TextRevision;
use mapf_ledger::engineer::{model as engineer_model, teacher};
use mapf_ledger::env::{generate, Budget, CostMetric, GeneratorConfig};
use mapf_ledger::ledger::plan::ContextModules;
use mapf_ledger::ledger::Hash;
use mapf_ledger::seed::Seed;
use mapf_ledger::train::adam::AdamConfig;
use mapf_ledger::train::compute::{Compute, Dtype};
use mapf_ledger::train::grpo::{self, GrpoConfig};
use mapf_ledger::train::lm::config::LmConfig;
use mapf_ledger::train::lm::model::{param_shapes, LoraSpec, Model, LORA_MODULES};
use mapf_ledger::train::lm::{
    self, chat, ChatFormat, LmArch, LmPolicy, Origin, PromptStyle, Sampling,
};
use mapf_ledger::train::memory::{human, Estimator, Generation, Training};
use mapf_ledger::train::policy::Policy;
use mapf_ledger::train::TrainState;
use std::collections::BTreeMap;
use std::time::Instant;
use tch::{Device, Kind, Tensor};

/// A published shape (the config files under `ledgers/models/shapes/`), or a small one.
/// End-of-sequence ids are cleared so random weights decode every requested token.
fn shape(name: &str) -> LmConfig {
    let published = |file: &str| {
        let path = format!(
            "{}/ledgers/models/shapes/{file}",
            env!("CARGO_MANIFEST_DIR")
        );
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        LmConfig::from_hf_json(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
    };
    let small = |(h, i, l, heads, kv, d, v)| LmConfig {
        hidden_size: h,
        intermediate_size: i,
        num_hidden_layers: l,
        num_attention_heads: heads,
        num_key_value_heads: kv,
        head_dim: d,
        vocab_size: v,
        ..published("qwen3-0.6b.config.json")
    };
    let cfg = match name {
        "qwen3-0.6b" => published("qwen3-0.6b.config.json"),
        "qwen3-4b" => published("qwen3-4b.config.json"),
        "10m" => small((256, 768, 6, 8, 4, 32, 16_384)),
        "tiny" => small((64, 192, 2, 4, 2, 16, 1_024)),
        other => panic!("unknown shape {other:?} (qwen3-0.6b, qwen3-4b, 10m, tiny)"),
    };
    LmConfig {
        eos_token_ids: vec![],
        ..cfg
    }
}

fn status_kib(key: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    s.lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|n| n.parse().ok())
        .expect("a kB figure")
}

/// Give freed heap back to the kernel, then reset its peak-RSS mark to the current RSS,
/// so a phase's peak is not an earlier phase's freed but retained memory.
fn reset_peak() {
    // SAFETY: malloc_trim only releases free memory of glibc's heaps.
    unsafe {
        libc::malloc_trim(0);
    }
    std::fs::write("/proc/self/clear_refs", "5").expect("write /proc/self/clear_refs");
}

struct Phase {
    name: &'static str,
    secs: f64,
    peak: u64,
    estimate: Option<u64>,
}

fn measure<T>(
    name: &'static str,
    baseline: u64,
    phases: &mut Vec<Phase>,
    f: impl FnOnce() -> T,
) -> T {
    reset_peak();
    let t0 = Instant::now();
    let out = f();
    let secs = t0.elapsed().as_secs_f64();
    let peak = (status_kib("VmHWM:") * 1024).saturating_sub(baseline);
    eprintln!("  {name}: {secs:.1} s, peak {} above baseline", human(peak));
    phases.push(Phase {
        name,
        secs,
        peak,
        estimate: None,
    });
    out
}

fn arg(args: &[String], key: &str, default: usize) -> usize {
    args.iter()
        .position(|a| a == key)
        .and_then(|i| args.get(i + 1))
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{key}: not a number: {v}"))
        })
        .unwrap_or(default)
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let name = args.first().cloned().unwrap_or_else(|| "qwen3-0.6b".into());
    let group = arg(&args, "--group", 8);
    let new_tokens = arg(&args, "--new-tokens", 32);
    let engineer_new = arg(&args, "--engineer-new-tokens", 16);
    let rank = arg(&args, "--lora-rank", 32) as i64;
    let micro = arg(&args, "--micro-batch", 0);
    let skip_export = args.iter().any(|a| a == "--no-export");
    tch::set_num_threads(2);
    let cfg = shape(&name);

    // The paper's prompts: a 10x10 map with 5 agents, and an engineer context with all
    // five modules (the longest of a few teacher contexts).
    let inst_cfg = GeneratorConfig::uniform(5, [10], 0.2, 0.2);
    let data = generate(&inst_cfg, 4, Seed::root(11), Budget::default()).expect("instances");
    let tspec = teacher::TeacherSpec {
        modules: ContextModules {
            training_details: true,
            ..ContextModules::default()
        },
        stages: 3,
        per_cell: 150,
        max_size: 10,
        examples_per_size: 2,
        text: TextRevision::of(1).expect("revision 1"),
        context_sizes: teacher::CONTEXT_SIZES,
        suite_items: None,
        edits: None,
    };
    let engineer_prompt = (0..8)
        .map(|i| {
            let ctx = teacher::context(Seed::root(12).child("ctx", i), &tspec, 3);
            // Untrimmed, as a scratch tokenizer's corpus holds it.
            mapf_ledger::engineer::text::corpus_prompt(&ctx, tspec.text)
        })
        .max_by_key(|p| p.system.len() + p.user.len())
        .expect("a prompt");
    let mut corpus: Vec<String> = data
        .iter()
        .map(|d| {
            PromptStyle::Paper.task_text(&d.instance)
                + &PromptStyle::Paper.plan_text(&d.instance, &d.plan)
        })
        .collect();
    corpus.push(engineer_prompt.system.clone() + &engineer_prompt.user);
    let corpus: Vec<String> = corpus.iter().cycle().take(64).cloned().collect();
    let tokenizer_json = chat::train_bpe(&corpus, 1024, chat::QWEN_SPLIT).expect("bpe");

    // Baseline: torch initialised (its thread pool started by a parallel bf16 matmul and
    // a fused attention call), nothing of the model made.
    {
        let a = Tensor::randn([256, 256], (Kind::Float, Device::Cpu)).to_kind(Kind::BFloat16);
        let _ = a.matmul(&a).sum(Kind::Float);
        let q = a.view([1, 4, 128, 128]);
        let _ = Tensor::scaled_dot_product_attention(
            &q,
            &q,
            &q,
            None::<&Tensor>,
            0.0,
            true,
            None,
            false,
        );
    }
    reset_peak();
    let baseline = status_kib("VmRSS:") * 1024;
    let mut phases = Vec::new();
    let lora = LoraSpec {
        rank,
        alpha: 2.0 * rank as f64,
        targets: LORA_MODULES.iter().map(|s| s.to_string()).collect(),
    };
    let compute = Compute::new(Device::Cpu, Dtype::Bf16);
    let policy = measure("load", baseline, &mut phases, || {
        // Random weights made one tensor at a time directly in bf16 (an f32 copy of a 4B
        // model would not fit beside it).
        tch::manual_seed(1);
        let weights: BTreeMap<String, Tensor> = param_shapes(&cfg)
            .into_iter()
            .map(|(n, s)| {
                let t = if n.ends_with("norm.weight") {
                    Tensor::ones(&s, (Kind::BFloat16, Device::Cpu))
                } else {
                    (Tensor::randn(&s, (Kind::Float, Device::Cpu)) * 0.02).to_kind(Kind::BFloat16)
                };
                (n, t)
            })
            .collect();
        let model = Model::from_weights(
            cfg.clone(),
            weights,
            compute,
            Some(lora.clone()),
            Seed::root(2),
        )
        .expect("shapes");
        let arch = LmArch {
            config: cfg.clone(),
            tokenizer: Hash::of_blob(&tokenizer_json),
            chat: ChatFormat::Qwen3,
            prompt: PromptStyle::Paper,
            sampling: Sampling {
                temperature: 1.0,
                top_p: 1.0,
                max_new_tokens: new_tokens,
            },
            origin: Origin::Scratch,
            frozen: None,
            lora: Some(lora.clone()),
        };
        LmPolicy::new(model, tokenizer_json.clone(), arch).expect("policy")
    });
    let prompt_tokens = policy.chat_ids(&policy.task_text(&data[0].instance)).len() as u64;
    let engineer_ids = engineer_model::prompt_ids(&policy, &engineer_prompt);
    let est = Estimator {
        cfg: &cfg,
        lora: Some(&lora),
        bytes: 2,
    };
    // Loading also holds, for a moment, the largest weight in f32 (drawn, then cast).
    let largest = param_shapes(&cfg)
        .iter()
        .map(|(_, s)| s.iter().product::<i64>() as u64)
        .max()
        .unwrap_or(0);
    phases[0].estimate = Some(est.resident().0 + est.resident().1 + 4 * largest);
    println!(
        "{name}: {} parameters ({} trainable, LoRA rank {rank}), bf16; paper prompt {prompt_tokens} tokens, engineer prompt {} tokens; group {group}, new tokens <= {new_tokens}",
        est.parameters(),
        est.trainable(),
        engineer_ids.len()
    );

    let instances = vec![data[0].instance.clone()];
    let rollouts = measure("generation", baseline, &mut phases, || {
        policy.sample(&instances, group, false, Seed::root(3))
    });
    let new = rollouts.iter().map(|r| r.actions.len()).max().unwrap_or(0) as u64;
    let gen = Generation {
        prompts: 1,
        lanes: group as u64,
        prompt_tokens,
        new_tokens: new_tokens as u64,
        top_p: false,
    };
    let resident = est.resident();
    let resident = resident.0 + resident.1 + resident.2;
    phases[1].estimate = Some(resident + est.generation(&gen));

    let mut ts = TrainState::new(
        Box::new(policy),
        AdamConfig {
            lr: 1e-5,
            ..AdamConfig::default()
        },
    );
    let g = GrpoConfig {
        steps: 1,
        lr: 1e-5,
        group_size: group as u32,
        batch_size: 1,
        clip_eps: 0.2,
        kl_coef: 0.01,
        entropy_coef: 0.0,
        epochs: 1,
        valid_reward: 1.0,
        optimal_bonus: 0.5,
        format_reward: 0.1,
        agent_reward: 0.5,
        cost_reward: 0.5,
        zero_variance: grpo::ZeroVariance::Keep,
        checkpoint_every: 100,
        micro_batch: micro as u32,
        ..GrpoConfig::default()
    };
    let blobs = vec![Hash([0; 32]); 1];
    let (_, stats) = measure("grpo step", baseline, &mut phases, || {
        grpo::step(
            &mut ts,
            None,
            &g,
            CostMetric::Makespan,
            &data[..1],
            &blobs,
            &[],
            Seed::root(3),
            0,
        )
    });
    assert!(stats.loss.is_finite(), "loss {}", stats.loss);
    let rows = if micro > 0 { micro.min(group) } else { group } as u64;
    let train = Training {
        rows,
        tokens: prompt_tokens + new - 1,
        targets: rows * new,
    };
    phases[2].estimate = Some(
        resident
            + est
                .generation(&gen)
                .max(est.training(&train))
                .max(est.scoring(&train)),
    );

    let lm_policy = ts.policy.as_lm().expect("lm");
    let s = Sampling {
        temperature: 0.7,
        top_p: 0.9,
        max_new_tokens: engineer_new,
    };
    let reply = measure("engineer reply", baseline, &mut phases, || {
        lm::generate::generate(
            &lm_policy.model,
            std::slice::from_ref(&engineer_ids),
            1,
            &[engineer_new],
            &s,
            false,
            &lm_policy.stop,
            Seed::root(4),
            true,
        )
    });
    assert!(!reply[0].tokens.is_empty());
    phases[3].estimate = Some(
        resident
            + est.generation(&Generation {
                prompts: 1,
                lanes: 1,
                prompt_tokens: engineer_ids.len() as u64,
                new_tokens: engineer_new as u64,
                top_p: true,
            }),
    );

    let bytes = measure("checkpoint", baseline, &mut phases, || ts.save(1));
    let out =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("target/dry-run/{name}"));
    let export_bytes = if skip_export {
        None
    } else {
        let lm_policy = ts.policy.as_lm().expect("lm");
        measure("export", baseline, &mut phases, || {
            lm::hf::export(
                &out,
                &lm_policy.model,
                &lm_policy.tokenizer_json,
                lm_policy.arch.chat,
            )
            .expect("export")
        });
        std::fs::metadata(out.join("model.safetensors"))
            .ok()
            .map(|m| m.len())
    };

    println!("| phase | time | peak RSS above baseline | estimate | estimate / measured |");
    println!("| --- | ---: | ---: | ---: | ---: |");
    for p in &phases {
        let (e, r) = match p.estimate {
            Some(e) => (human(e), format!("{:.2}", e as f64 / p.peak.max(1) as f64)),
            None => ("".into(), "".into()),
        };
        println!(
            "| {} | {:.1} s | {} | {e} | {r} |",
            p.name,
            p.secs,
            human(p.peak)
        );
    }
    println!(
        "checkpoint {} ({} trainable parameters x (f32 value + 2 Adam moments) + header); export model.safetensors {}; baseline RSS {}",
        human(bytes.len() as u64),
        est.trainable(),
        export_bytes.map_or("skipped".into(), human),
        human(baseline)
    );
    println!(
        "{}",
        serde_json::json!({
            "shape": name, "parameters": est.parameters(), "trainable": est.trainable(),
            "prompt_tokens": prompt_tokens, "engineer_prompt_tokens": engineer_ids.len(),
            "group": group, "new_tokens": new_tokens, "generated_max": new,
            "checkpoint_bytes": bytes.len(), "export_bytes": export_bytes, "baseline_rss": baseline,
            "phases": phases.iter().map(|p| serde_json::json!({
                "phase": p.name, "seconds": p.secs, "peak_above_baseline": p.peak, "estimate": p.estimate,
            })).collect::<Vec<_>>(),
        })
    );
}
