//! The `lm` policy on small models the tests make themselves: cached generation equals
//! uncached recomputation, sampling log-probs equal training log-probs, loading (single
//! file and shards) with every refusal, LoRA merged equals unmerged, export then load
//! gives identical logits, and GRPO raises the reward on a small task.
use crate::common;

use common::cli;
use mapf_ledger::env::{generate, Budget, GeneratorConfig};
use mapf_ledger::record::trainer::StepRecord;
use mapf_ledger::seed::Seed;
use mapf_ledger::train::adam::AdamConfig;
use mapf_ledger::train::grpo::{self, GrpoConfig};
use mapf_ledger::train::lm::generate::{attention_bias, generate as lm_generate};
use mapf_ledger::train::lm::model::{LoraSpec, Model};
use mapf_ledger::train::lm::{self, hf, LmPolicy, LmSpec, Sampling};
use mapf_ledger::train::warmup::{self, WarmupConfig};
use mapf_ledger::train::TrainState;
use std::collections::BTreeMap;
use tch::{Device, Kind, Tensor};

fn spec() -> LmSpec {
    common::tiny_lm_spec()
}

fn corpus() -> Vec<String> {
    let cfg = GeneratorConfig::uniform(2, [3, 4], 0.1, 0.2);
    let data = generate(&cfg, 64, Seed::root(1), Budget::default()).unwrap();
    mapf_ledger::stage::pretraining_corpus(&spec(), &data)
}

fn scratch(spec: &LmSpec, seed: u64) -> LmPolicy {
    lm::init(spec, Device::Cpu, Seed::root(seed), corpus).unwrap()
}

/// `scratch(sp, 6)` after `steps` imitation steps of `batch_size` plans of `data` (lr
/// 3e-3): a base that half-learns small maps, the same bits each time it is made.
fn warmed_up(
    sp: &LmSpec,
    data: &[mapf_ledger::env::Solved],
    steps: u64,
    batch_size: usize,
) -> TrainState {
    let mut ts = TrainState::new(
        Box::new(scratch(sp, 6)),
        AdamConfig {
            lr: 3e-3,
            ..AdamConfig::default()
        },
    );
    let w = WarmupConfig {
        steps,
        lr: 3e-3,
        batch_size,
        instances: data.len(),
        agent_names: 0,
    };
    for s in 0..w.steps {
        warmup::step(&mut ts, &w, data, Seed::root(3), s);
    }
    ts
}

/// `p` with its weights frozen under LoRA adapters whose B matrices are moved off zero
/// (fixed values: torch's global generator is shared by the tests' threads), so the
/// policy differs from its frozen base and a KL term counts.
fn lora_off_zero(p: LmPolicy) -> LmPolicy {
    let p = p
        .into_lora(
            LoraSpec {
                rank: 4,
                alpha: 8.0,
                targets: vec!["q_proj".into(), "v_proj".into(), "down_proj".into()],
            },
            mapf_ledger::ledger::Hash([0; 32]),
            Seed::root(7),
        )
        .unwrap();
    tch::no_grad(|| {
        for (name, mut v) in p.model.vs.variables() {
            if name.contains("lora_B") {
                let n = v.numel() as i64;
                let g = Tensor::arange(n, (Kind::Float, Device::Cpu)).sin();
                v.copy_(&(g.view(v.size().as_slice()) * 0.02));
            }
        }
    });
    p
}

/// Every variable's gradient after a step, and the parameters' hash.
fn gradients_and_params(ts: &TrainState) -> (BTreeMap<String, Tensor>, mapf_ledger::ledger::Hash) {
    let grads = ts
        .policy
        .vars()
        .variables()
        .into_iter()
        .map(|(n, v)| (n, v.grad()))
        .collect();
    (
        grads,
        mapf_ledger::train::checkpoint::param_hash(ts.policy.vars()),
    )
}

/// Each variable's gradient in `a` and `b` agrees to 1e-5 of the gradient norm.
fn assert_gradients_agree(
    a: &BTreeMap<String, Tensor>,
    b: &BTreeMap<String, Tensor>,
    norm: f64,
    what: &str,
) {
    for (name, x) in a {
        let d = (x - &b[name]).abs().max().double_value(&[]);
        assert!(d <= 1e-5 * norm, "{what}: {name} gradient differs by {d}");
    }
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// Logits `[T, V]` of a whole sequence, no cache.
fn full_logits(m: &Model, ids: &[u32]) -> Tensor {
    let t = ids.len() as i64;
    let toks = Tensor::from_slice(&ids.iter().map(|&x| x as i64).collect::<Vec<_>>()).view([1, t]);
    let pos = Tensor::arange(t, (Kind::Int64, Device::Cpu)).view([1, t]);
    let h = m.hidden(
        &toks,
        &pos,
        &attention_bias(&[0], t, t, Device::Cpu),
        None,
        true,
    );
    tch::no_grad(|| m.logits(&h.squeeze_dim(0)))
}

#[test]
fn cached_generation_equals_uncached_recomputation() {
    let p = scratch(&spec(), 1);
    let prompts = vec![
        p.chat_ids("4x4 2 agents\nF F F F"),
        p.chat_ids("3x3 2 agents\nF H F\nagent 1: start 0 0 goal 2 2"),
    ];
    let s = Sampling {
        max_new_tokens: 24,
        ..Sampling::default()
    };
    let gens = lm_generate(
        &p.model,
        &prompts,
        1,
        &[24, 24],
        &s,
        true,
        &[],
        Seed::root(0),
        true,
    );
    for (prompt, g) in prompts.iter().zip(&gens) {
        assert_eq!(g.tokens.len(), 24);
        let mut ids = prompt.clone();
        ids.extend(&g.tokens);
        let logits = full_logits(&p.model, &ids);
        let logp = logits.log_softmax(-1, Kind::Float);
        for (k, (&tok, &lp)) in g.tokens.iter().zip(&g.logprobs).enumerate() {
            let row = logits.get((prompt.len() + k - 1) as i64);
            assert_eq!(
                row.argmax(-1, false).int64_value(&[]),
                tok as i64,
                "greedy token {k}"
            );
            let full = logp
                .get((prompt.len() + k - 1) as i64)
                .double_value(&[tok as i64]) as f32;
            assert!(
                (full - lp).abs() < 1e-5,
                "token {k}: cached {lp}, full {full}"
            );
        }
    }
}

#[test]
fn sampling_log_probs_equal_training_log_probs() {
    let mut sp = spec();
    sp.temperature = 0.7;
    sp.top_p = 0.9;
    let p = scratch(&sp, 2);
    let prompts = vec![p.chat_ids("agent 1:"), p.chat_ids("4x4 2 agents")];
    let s = sp.sampling();
    let gens = lm_generate(
        &p.model,
        &prompts,
        3,
        &[30, 30],
        &s,
        false,
        &p.stop,
        Seed::root(5),
        true,
    );
    let ps: Vec<&[u32]> = (0..6).map(|l| prompts[l / 3].as_slice()).collect();
    let ts: Vec<&[u32]> = gens.iter().map(|g| g.tokens.as_slice()).collect();
    let lp = tch::no_grad(|| p.token_log_probs(&ps, &ts, 0.7, true));
    let trained = Vec::<f32>::try_from(lp.per_action).unwrap();
    let sampled: Vec<f32> = gens.iter().flat_map(|g| g.logprobs.clone()).collect();
    let d = max_abs_diff(&trained, &sampled);
    assert!(d < 1e-5, "max |sampled - trained| = {d}");
    let again = lm_generate(
        &p.model,
        &prompts,
        3,
        &[30, 30],
        &s,
        false,
        &p.stop,
        Seed::root(5),
        true,
    );
    assert_eq!(again, gens, "generation is not reproducible");
}

fn save_shards(dir: &std::path::Path, weights: &BTreeMap<String, Tensor>, shards: usize) {
    let names: Vec<&String> = weights.keys().collect();
    let per = names.len().div_ceil(shards);
    let mut map = serde_json::Map::new();
    for (i, chunk) in names.chunks(per).enumerate() {
        let file = format!("model-{:05}-of-{:05}.safetensors", i + 1, shards);
        let named: Vec<(&str, Tensor)> = chunk
            .iter()
            .map(|n| (n.as_str(), weights[*n].shallow_clone()))
            .collect();
        Tensor::write_safetensors(&named, dir.join(&file)).unwrap();
        for n in chunk {
            map.insert((*n).clone(), file.clone().into());
        }
    }
    let index = serde_json::json!({"metadata": {}, "weight_map": map});
    std::fs::write(dir.join("model.safetensors.index.json"), index.to_string()).unwrap();
}

#[test]
fn export_then_load_gives_identical_logits_and_sharded_loading_works() {
    let p = scratch(&spec(), 3);
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("export");
    hf::export(&dir, &p.model, &p.tokenizer_json, p.arch.chat).unwrap();
    let back = LmPolicy::from_hf_dir(
        &dir,
        Device::Cpu,
        None,
        p.arch.prompt,
        p.arch.sampling,
        Seed::root(0),
    )
    .unwrap();
    let ids = p.chat_ids("agent 1: R R D");
    let a = full_logits(&p.model, &ids);
    let b = full_logits(&back.model, &ids);
    assert!(a.equal(&b), "logits differ after export and load");
    assert_eq!(back.chat_ids("agent 1: R R D"), ids);

    // The same weights split over three shards with an index.
    let sharded = t.path().join("sharded");
    std::fs::create_dir_all(&sharded).unwrap();
    for f in ["config.json", "tokenizer.json"] {
        std::fs::copy(dir.join(f), sharded.join(f)).unwrap();
    }
    let weights = p.model.merged_weights();
    save_shards(&sharded, &weights, 3);
    let c = LmPolicy::from_hf_dir(
        &sharded,
        Device::Cpu,
        None,
        p.arch.prompt,
        p.arch.sampling,
        Seed::root(0),
    )
    .unwrap();
    assert!(full_logits(&c.model, &ids).equal(&a));
    match &c.arch.origin {
        lm::Origin::Hf { files, .. } => assert_eq!(files.len(), 6, "{files:?}"),
        o => panic!("{o:?}"),
    }
}

fn refusal(dir: &std::path::Path) -> String {
    match LmPolicy::from_hf_dir(
        dir,
        Device::Cpu,
        None,
        lm::PromptStyle::Compact,
        Sampling::default(),
        Seed::root(0),
    ) {
        Ok(_) => panic!("{} loaded", dir.display()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn missing_wrong_shape_extra_tensors_and_unknown_model_types_are_refused_by_name() {
    let p = scratch(&spec(), 4);
    let t = tempfile::tempdir().unwrap();
    let good = t.path().join("good");
    hf::export(&good, &p.model, &p.tokenizer_json, p.arch.chat).unwrap();
    let weights = p.model.merged_weights();
    let variant = |name: &str, edit: &dyn Fn(&mut BTreeMap<String, Tensor>)| {
        let d = t.path().join(name);
        std::fs::create_dir_all(&d).unwrap();
        for f in ["config.json", "tokenizer.json"] {
            std::fs::copy(good.join(f), d.join(f)).unwrap();
        }
        let mut w: BTreeMap<String, Tensor> = weights
            .iter()
            .map(|(k, v)| (k.clone(), v.shallow_clone()))
            .collect();
        edit(&mut w);
        save_shards(&d, &w, 2);
        d
    };
    let missing = variant("missing", &|w| {
        w.remove("model.layers.1.mlp.up_proj.weight");
    });
    let e = refusal(&missing);
    assert!(
        e.contains("missing tensor model.layers.1.mlp.up_proj.weight"),
        "{e}"
    );
    let shape = variant("shape", &|w| {
        w.insert(
            "model.norm.weight".into(),
            Tensor::ones([7], (Kind::Float, Device::Cpu)),
        );
    });
    let e = refusal(&shape);
    assert!(e.contains("model.norm.weight") && e.contains("[7]"), "{e}");
    let extra = variant("extra", &|w| {
        w.insert(
            "model.layers.9.mlp.up_proj.weight".into(),
            Tensor::ones([2], (Kind::Float, Device::Cpu)),
        );
    });
    let e = refusal(&extra);
    assert!(
        e.contains("unexpected tensor model.layers.9.mlp.up_proj.weight"),
        "{e}"
    );
    let cfg = std::fs::read_to_string(good.join("config.json")).unwrap();
    std::fs::write(
        good.join("config.json"),
        cfg.replace("\"qwen3\"", "\"mixtral\""),
    )
    .unwrap();
    let e = refusal(&good);
    assert!(
        e.contains("config.json") && e.contains("\"mixtral\""),
        "{e}"
    );
}

#[test]
fn lora_merged_equals_lora_unmerged() {
    let p = scratch(&spec(), 5);
    let lora = LoraSpec {
        rank: 4,
        alpha: 8.0,
        targets: vec!["q_proj".into(), "v_proj".into(), "down_proj".into()],
    };
    let base = p.model.merged_weights();
    let m = Model::from_weights(
        p.model.cfg.clone(),
        base,
        Device::Cpu,
        Some(lora),
        Seed::root(9),
    )
    .unwrap();
    // Adapters start at zero effect; give B random values so the test can fail.
    tch::no_grad(|| {
        for (name, mut v) in m.vs.variables() {
            if name.contains("lora_B") {
                v.copy_(&(Tensor::randn(v.size(), (Kind::Float, Device::Cpu)) * 0.1));
            }
        }
    });
    let ids = p.chat_ids("agent 2: U U");
    let unmerged = full_logits(&m, &ids);
    let base_only = {
        let t = ids.len() as i64;
        let toks =
            Tensor::from_slice(&ids.iter().map(|&x| x as i64).collect::<Vec<_>>()).view([1, t]);
        let pos = Tensor::arange(t, (Kind::Int64, Device::Cpu)).view([1, t]);
        tch::no_grad(|| {
            m.logits(&m.hidden(
                &toks,
                &pos,
                &attention_bias(&[0], t, t, Device::Cpu),
                None,
                false,
            ))
        })
    };
    assert!(
        !base_only
            .squeeze_dim(0)
            .allclose(&unmerged, 1e-6, 1e-6, false),
        "adapters had no effect"
    );
    let merged = Model::from_weights(
        m.cfg.clone(),
        m.merged_weights(),
        Device::Cpu,
        None,
        Seed::root(0),
    )
    .unwrap();
    let d = (full_logits(&merged, &ids) - &unmerged)
        .abs()
        .max()
        .double_value(&[]);
    assert!(d < 1e-4, "merged vs unmerged max |diff| {d}");
    // Only the adapters are trainable.
    assert!(m.vs.variables().keys().all(|k| k.contains(".lora_")));
}

#[test]
fn grpo_raises_the_mean_reward_on_small_maps() {
    // Pretrain briefly on 3x3 plans so some samples are valid, then GRPO.
    let sp = LmSpec {
        temperature: 1.0,
        ..spec()
    };
    // One agent on 3x3 maps: a task a tiny model half-learns in a short warm-up.
    let cfg = GeneratorConfig::uniform(1, [3], 0.2, 0.0);
    let data = generate(&cfg, 256, Seed::root(2), Budget::default()).unwrap();
    let mut ts = warmed_up(&sp, &data, 100, 32);
    let g = GrpoConfig {
        steps: 40,
        lr: 2e-3,
        group_size: 8,
        batch_size: 16,
        clip_eps: 0.2,
        kl_coef: 0.0,
        entropy_coef: 0.0,
        epochs: 1,
        valid_reward: 1.0,
        optimal_bonus: 0.5,
        format_reward: 0.1,
        agent_reward: 0.0,
        cost_reward: 0.0,
        zero_variance: grpo::ZeroVariance::Keep,
        checkpoint_every: 100,
        micro_batch: 0,
        ..GrpoConfig::default()
    };
    ts.set_lr(g.lr);
    // The mean reward of 8 samples on each of 64 held-out instances, same seed each time.
    let probe = generate(&cfg, 64, Seed::root(77), Budget::default()).unwrap();
    let mean_reward = |ts: &TrainState| -> f64 {
        let inst: Vec<_> = probe.iter().map(|p| p.instance.clone()).collect();
        let rollouts = ts.policy.sample(&inst, 8, false, Seed::root(78));
        let total: f64 = rollouts
            .iter()
            .map(|r| {
                let o = mapf_ledger::train::eval::outcome_of(&inst[r.instance], r);
                grpo::reward(
                    &g,
                    mapf_ledger::env::CostMetric::Makespan,
                    &inst[r.instance],
                    r.plan.as_ref().ok(),
                    &o,
                    &probe[r.instance].reference,
                )
            })
            .sum();
        total / rollouts.len() as f64
    };
    let before = mean_reward(&ts);
    let blobs = vec![mapf_ledger::ledger::Hash([0; 32]); data.len()];
    // Every step ends with its statistics, which agree with the trajectories it recorded:
    // groups whose rewards differ are the ones with signal; `keep` skips none.
    let check = |records: &[StepRecord], skip: bool| {
        let (Some(StepRecord::Trajectories(t)), Some(StepRecord::GrpoStats(st))) =
            (records.first(), records.last())
        else {
            panic!("a step records trajectories first and its statistics last");
        };
        let rewards: Vec<f32> = t
            .trajectories
            .iter()
            .map(|x| f32::from_bits(x.reward_bits))
            .collect();
        let signal = rewards
            .chunks(g.group_size as usize)
            .filter(|c| c.iter().any(|&r| r != c[0]))
            .count() as u32;
        assert_eq!((st.samples, st.groups), (128, 16));
        assert_eq!(st.signal_groups, signal);
        assert_eq!(st.skipped_groups, if skip { 16 - signal } else { 0 });
        assert_eq!(
            st.valid as usize,
            t.trajectories.iter().filter(|x| x.valid).count()
        );
    };
    let step = |ts: &mut TrainState, cfg: &GrpoConfig, s: u64| {
        let metric = mapf_ledger::env::CostMetric::Makespan;
        grpo::step(ts, None, cfg, metric, &data, &blobs, &[], Seed::root(4), s).0
    };
    for s in 0..g.steps {
        check(&step(&mut ts, &g, s), false);
    }
    let after = mean_reward(&ts);
    // 512 samples: the standard error of each mean is about 0.02.
    assert!(
        after > before + 0.05,
        "mean reward {before:.3} -> {after:.3}"
    );
    let skip = GrpoConfig {
        zero_variance: grpo::ZeroVariance::Skip,
        ..g.clone()
    };
    check(&step(&mut ts, &skip, g.steps), true);
}

/// Rehearsal (PPO-ptx, `grpo.rehearsal_coef`): GRPO on one-agent boards from a base that
/// has seen two-agent plans too. Without rehearsal nothing in the steps asks the policy to
/// keep the two-agent plans; with it, every update also imitates a batch of them, and the
/// policy ends nearer them (held-out plans of the same mix) than the run without.
#[test]
fn rehearsal_keeps_the_pretraining_mix_that_grpo_does_not_train() {
    let sp = LmSpec {
        temperature: 1.0,
        ..spec()
    };
    let one = GeneratorConfig::uniform(1, [3], 0.2, 0.0);
    let two = GeneratorConfig::uniform(2, [3, 4], 0.1, 0.2);
    let data = generate(&one, 128, Seed::root(2), Budget::default()).unwrap();
    let mix = generate(&two, 128, Seed::root(5), Budget::default()).unwrap();
    let held = generate(&two, 32, Seed::root(6), Budget::default()).unwrap();
    // The base, the same bits each time it is made: warmed up on both.
    let both: Vec<_> = data.iter().chain(&mix).cloned().collect();
    let base = || warmed_up(&sp, &both, 20, 16);
    // The mean negative log-likelihood of the held-out two-agent plans.
    let nll = |ts: &TrainState| -> f64 {
        tch::no_grad(|| {
            let inst: Vec<_> = held.iter().map(|d| d.instance.clone()).collect();
            let rollouts: Vec<_> = held
                .iter()
                .enumerate()
                .map(|(j, d)| mapf_ledger::train::policy::Rollout {
                    instance: j,
                    actions: ts.policy.encode_plan(&d.instance, &d.plan),
                    plan: Ok(d.plan.clone()),
                    plan_bytes: Vec::new(),
                    logprobs: Vec::new(),
                })
                .collect();
            -ts.policy
                .log_probs(&inst, &rollouts)
                .per_action
                .mean(Kind::Float)
                .double_value(&[])
        })
    };
    let blobs = vec![mapf_ledger::ledger::Hash([0; 32]); data.len()];
    let run = |coef: f64| -> (f64, Vec<u64>) {
        let mut ts = base();
        let g = GrpoConfig {
            steps: 8,
            lr: 3e-3,
            group_size: 4,
            batch_size: 8,
            kl_coef: 0.0,
            format_reward: 0.1,
            rehearsal_coef: coef,
            rehearsal_batch: 16,
            rehearsal_instances: mix.len() as u32,
            ..GrpoConfig::default()
        };
        ts.set_lr(g.lr);
        let mut losses = Vec::new();
        for s in 0..g.steps {
            let metric = mapf_ledger::env::CostMetric::Makespan;
            let (records, _) = grpo::step(
                &mut ts,
                None,
                &g,
                metric,
                &data,
                &blobs,
                &mix,
                Seed::root(4),
                s,
            );
            for r in records {
                if let StepRecord::GradientStep(gs) = r {
                    losses.push(gs.loss);
                }
            }
        }
        (nll(&ts), losses)
    };
    let (plain, plain_losses) = run(0.0);
    let (rehearsed, rehearsed_losses) = run(1.0);
    assert!(
        rehearsed < plain - 0.05,
        "held-out two-agent NLL: GRPO {plain:.3}, GRPO with rehearsal {rehearsed:.3}"
    );
    // The recorded loss carries the rehearsal term: the runs' first steps start from one
    // state and sample alike, so their losses differ by the weighted imitation loss alone.
    assert!(f64::from_bits(rehearsed_losses[0]) > f64::from_bits(plain_losses[0]) + 0.1);
}

#[test]
fn an_lm_ledger_trains_exports_and_generates_through_the_cli() {
    let t = tempfile::tempdir().unwrap();
    let l = t.path().join("l");
    let l = l.to_str().unwrap();
    let plan = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/plans/lm-tiny.toml");
    for args in [
        vec!["--ledger", l, "init", "--plan", plan],
        vec!["--ledger", l, "run", "--quiet"],
    ] {
        let o = cli(&args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let prompt = t.path().join("p.txt");
    std::fs::write(&prompt, "3x3 2 agents\nF F F\nF H F\nF F F\n").unwrap();
    let gen = |model: &str| -> serde_json::Value {
        let o = cli(&[
            "--ledger",
            l,
            "lm",
            "generate",
            "--model",
            model,
            "--prompt-file",
            prompt.to_str().unwrap(),
            "--max-new-tokens",
            "6",
            "--json",
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice(&o.stdout).unwrap()
    };
    let from_ledger = gen("main@stage2");
    assert_eq!(
        from_ledger["tokens"].as_array().unwrap().len(),
        from_ledger["logprobs"].as_array().unwrap().len()
    );
    // Export the LoRA stage merged as an HF directory; it loads and gives the same
    // greedy continuation (merging changes float rounding only).
    let hf = t.path().join("hf");
    let o = cli(&[
        "--ledger",
        l,
        "export-checkpoint",
        "main@stage2",
        "--hf",
        hf.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for f in [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    ] {
        assert!(hf.join(f).exists(), "{f} missing");
    }
    let from_dir = gen(hf.to_str().unwrap());
    assert_eq!(from_dir["prompt_tokens"], from_ledger["prompt_tokens"]);
    assert_eq!(from_dir["tokens"], from_ledger["tokens"]);
    // A grid checkpoint cannot be exported as an HF directory.
    let g = t.path().join("g");
    let g = g.to_str().unwrap();
    let grid = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/plans/tiny.toml");
    assert!(cli(&["--ledger", g, "init", "--plan", grid])
        .status
        .success());
    let o = cli(&["--ledger", g, "run", "--quiet", "--stages", "1"]);
    assert!(o.status.success());
    let o = cli(&[
        "--ledger",
        g,
        "export-checkpoint",
        "main@stage0",
        "--hf",
        hf.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("needs an lm policy"));
}

#[test]
fn a_text_plan_is_refused_with_a_pointer_to_lm() {
    let t = tempfile::tempdir().unwrap();
    let plan = t.path().join("old.toml");
    let grid = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/plans/tiny.toml"
    ))
    .unwrap();
    std::fs::write(
        &plan,
        grid.replace("policy = \"grid\"", "policy = \"text\""),
    )
    .unwrap();
    let o = cli(&[
        "--ledger",
        t.path().join("l").to_str().unwrap(),
        "init",
        "--plan",
        plan.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("policy") && e.contains("replaced by \"lm\""),
        "{e}"
    );
}

/// `[grpo] zero_variance = "drop"`: the groups without signal leave the batch before the
/// KL reference and the training forward, and the update is `skip`'s. On a LoRA policy
/// (its KL reference the frozen base, the adapters moved off zero so the KL term
/// counts) that half-learned one-agent 3x3 plans, one step's batch has groups with and
/// without signal; whole and in micro-batches, `drop` records the same rollouts and
/// statistics as `skip`, and the same loss terms and gradients to f32 rounding. A batch
/// without signal trains nothing under either: the parameters stay where they were.
#[test]
fn dropping_silent_groups_trains_as_skipping_them() {
    let sp = LmSpec {
        temperature: 1.0,
        ..spec()
    };
    let cfg = GeneratorConfig::uniform(1, [3], 0.2, 0.0);
    let data = generate(&cfg, 64, Seed::root(2), Budget::default()).unwrap();
    let blobs = vec![mapf_ledger::ledger::Hash([0; 32]); data.len()];
    let warmed = lm::downcast(warmed_up(&sp, &data, 40, 32).policy).unwrap();
    let weights = warmed.model.merged_weights();
    // The same LoRA policy each time: the warmed weights frozen, adapters moved off zero.
    let policy = || {
        let model = Model::from_weights(
            warmed.model.cfg.clone(),
            weights.iter().map(|(k, v)| (k.clone(), v.copy())).collect(),
            Device::Cpu,
            None,
            Seed::root(0),
        )
        .unwrap();
        lora_off_zero(
            LmPolicy::new(model, warmed.tokenizer_json.clone(), warmed.arch.clone()).unwrap(),
        )
    };
    let g = GrpoConfig {
        lr: 1e-3,
        group_size: 4,
        batch_size: 12,
        kl_coef: 0.05,
        entropy_coef: 0.001,
        format_reward: 0.1,
        agent_reward: 0.5,
        ..GrpoConfig::default()
    };
    // One step: its records, and every variable's gradient after it.
    let step = |p: LmPolicy, cfg: &GrpoConfig| {
        let mut ts = TrainState::new(Box::new(p), cfg.adam());
        let (records, _) = grpo::step(
            &mut ts,
            None,
            cfg,
            mapf_ledger::env::CostMetric::Makespan,
            &data,
            &blobs,
            &[],
            Seed::root(4),
            0,
        );
        let (grads, params) = gradients_and_params(&ts);
        (records, grads, params)
    };
    let parts = |records: &[StepRecord]| {
        let update = records.iter().find_map(|r| match r {
            StepRecord::GradientStep(s) => Some(s.clone()),
            _ => None,
        });
        let stats = grpo::recorded_stats(records).clone();
        (records[0].clone(), stats, update.unwrap())
    };
    let close = |what: &str, a: u64, b: u64| {
        let (a, b) = (f64::from_bits(a), f64::from_bits(b));
        assert!(
            (a - b).abs() <= 1e-5 * a.abs().max(1e-4),
            "{what}: skip {a} vs drop {b}"
        );
    };
    for micro_batch_tokens in [0, 150] {
        let with = |zero_variance| GrpoConfig {
            zero_variance,
            micro_batch_tokens,
            ..g.clone()
        };
        let (skip, skip_grads, _) = step(policy(), &with(grpo::ZeroVariance::Skip));
        let (drop, drop_grads, _) = step(policy(), &with(grpo::ZeroVariance::Drop));
        let (skip_rollouts, skip_stats, skip_update) = parts(&skip);
        let (drop_rollouts, drop_stats, drop_update) = parts(&drop);
        assert!(
            0 < skip_stats.signal_groups && skip_stats.signal_groups < skip_stats.groups,
            "the batch needs groups with and without signal: {skip_stats:?}"
        );
        assert_eq!(skip_rollouts, drop_rollouts);
        assert_eq!(
            (skip_stats.signal_groups, skip_stats.skipped_groups),
            (drop_stats.signal_groups, drop_stats.skipped_groups)
        );
        let what = format!("micro_batch_tokens {micro_batch_tokens}");
        assert!(f64::from_bits(skip_update.kl) > 1e-6, "{what}: no KL term");
        close(&format!("{what}: loss"), skip_update.loss, drop_update.loss);
        close(&format!("{what}: kl"), skip_update.kl, drop_update.kl);
        close(
            &format!("{what}: entropy"),
            skip_update.entropy,
            drop_update.entropy,
        );
        close(
            &format!("{what}: grad norm"),
            skip_update.grad_norm,
            drop_update.grad_norm,
        );
        close(
            &format!("{what}: clip fraction"),
            skip_stats.clip_fraction,
            drop_stats.clip_fraction,
        );
        let norm = f64::from_bits(skip_update.grad_norm);
        assert_gradients_agree(&skip_grads, &drop_grads, norm, &what);
    }
    // An untrained scratch model: no plan parses, no group has signal.
    let silent = |zero_variance| {
        let p = lm::init(&sp, Device::Cpu, Seed::root(9), corpus).unwrap();
        let start = mapf_ledger::train::checkpoint::param_hash(&p.model.vs);
        let (records, _, params) = step(
            p,
            &GrpoConfig {
                zero_variance,
                ..g.clone()
            },
        );
        let (_, stats, update) = parts(&records);
        assert_eq!(stats.signal_groups, 0, "{stats:?}");
        assert_eq!(params, start, "{zero_variance:?} moved the parameters");
        f64::from_bits(update.loss)
    };
    assert_eq!(silent(grpo::ZeroVariance::Skip).abs(), 0.0);
    assert_eq!(silent(grpo::ZeroVariance::Drop), 0.0);
}

/// Engineer RL's update under `zero_variance = "drop"` scores only the replies of groups
/// whose rewards differ, and gives what scoring every reply with the others weighted
/// away gives (`skip`, and engineer RL's own objective under `keep`): the loss, KL, clip
/// fraction and gradient norm to f32 rounding, every gradient too. A batch without
/// signal changes nothing under either.
#[test]
fn engineer_rl_dropping_silent_groups_updates_as_weighting_them_away() {
    use mapf_ledger::engineer::rl;
    let policy = || lora_off_zero(scratch(&spec(), 6));
    let p = policy();
    let prompts: Vec<Vec<u32>> = ["3x3 2 agents", "4x4 2 agents\nF F F F", "agent 1:"]
        .iter()
        .map(|t| p.chat_ids(t))
        .collect();
    let sampling = Sampling {
        max_new_tokens: 10,
        temperature: 1.0,
        ..Sampling::default()
    };
    let gens = lm_generate(
        &p.model,
        &prompts,
        4,
        &[10, 10, 10],
        &sampling,
        false,
        &p.stop,
        Seed::root(11),
        true,
    );
    // Groups 1 and 3 differ, group 2 does not.
    let rewards = [1.0, 0.0, 0.0, 1.0, 0.5, 0.5, 0.5, 0.5, 0.0, 1.0, 2.0, 3.0];
    let g = GrpoConfig {
        group_size: 4,
        kl_coef: 0.05,
        entropy_coef: 0.001,
        ..GrpoConfig::default()
    };
    let update = |zero_variance, rewards: &[f64]| {
        let cfg = GrpoConfig {
            zero_variance,
            ..g.clone()
        };
        let mut ts = TrainState::new(Box::new(policy()), cfg.adam());
        let u = rl::update(&mut ts, &prompts, &gens, rewards, &cfg, 1.0).unwrap();
        let (grads, params) = gradients_and_params(&ts);
        (u, grads, params)
    };
    let start = mapf_ledger::train::checkpoint::param_hash(&policy().model.vs);
    let (skip, skip_grads, _) = update(grpo::ZeroVariance::Skip, &rewards);
    let (keep, _, keep_params) = update(grpo::ZeroVariance::Keep, &rewards);
    let (drop, drop_grads, drop_params) = update(grpo::ZeroVariance::Drop, &rewards);
    let (skip, drop) = (skip.unwrap(), drop.unwrap());
    assert_eq!(keep, Some(skip), "keep and skip score every reply alike");
    assert!(skip.kl > 1e-6, "no KL term: {skip:?}");
    let close = |what: &str, a: f64, b: f64| {
        assert!(
            (a - b).abs() <= 1e-5 * a.abs().max(1e-4),
            "{what}: skip {a} vs drop {b}"
        );
    };
    close("loss", skip.loss, drop.loss);
    close("kl", skip.kl, drop.kl);
    close("clip fraction", skip.clip_fraction, drop.clip_fraction);
    close("grad norm", skip.grad_norm, drop.grad_norm);
    assert_gradients_agree(&skip_grads, &drop_grads, skip.grad_norm, "engineer RL");
    assert!(
        keep_params != start && drop_params != start,
        "no update moved anything"
    );
    for zero_variance in [grpo::ZeroVariance::Skip, grpo::ZeroVariance::Drop] {
        let (u, _, params) = update(zero_variance, &[0.5; 12]);
        assert_eq!(u, None, "{zero_variance:?}");
        assert_eq!(params, start, "{zero_variance:?} moved the parameters");
    }
}

/// In Qwen3's thinking mode (the paper's setting) a reply reasons before it writes its
/// plan, so a lane may spend the plan's whole `max_new_tokens`, as `plan check` counts
/// it; cut at the plan's own length it would stop inside its `<think>` block and never
/// answer. Without thinking a lane stops at the longest sensible plan.
#[test]
fn a_thinking_reply_may_take_the_whole_budget() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf/tiny-qwen3");
    let sampling = Sampling {
        max_new_tokens: 500,
        ..Sampling::default()
    };
    let mut p = LmPolicy::from_hf_dir(
        &dir,
        Device::Cpu,
        None,
        lm::PromptStyle::Paper,
        sampling,
        Seed::root(0),
    )
    .unwrap();
    let cfg = GeneratorConfig::uniform(2, [4], 0.1, 0.2);
    let inst = generate(&cfg, 1, Seed::root(1), Budget::default()).unwrap()[0]
        .instance
        .clone();
    let plain = p.plan_budget(&inst);
    assert!(plain > 0 && plain < 500, "{plain}");
    p.arch.chat = lm::ChatFormat::Qwen3Thinking;
    assert_eq!(p.plan_budget(&inst), 500);
}
