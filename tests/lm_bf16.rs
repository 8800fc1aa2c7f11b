//! The bf16 path (`[train] dtype = "bf16"`: what CUDA runs, here on the CPU) on tiny
//! models: weights compute in bf16 while what trains stays f32 (masters, adapters, Adam
//! moments), a LoRA base is frozen in bf16, generation takes one bf16 copy per call,
//! sampling log-probs equal training log-probs within bf16's tolerance, a LoRA GRPO step
//! (whole batch and micro-batched) trains the adapters, and micro-batching leaves the f32
//! loss as it was. Bit-exact stop and resume in bf16: tests/train_determinism.rs.
use crate::common;

use mapf_ledger::env::{generate, Budget, CostMetric, GeneratorConfig};
use mapf_ledger::ledger::Hash;
use mapf_ledger::record::trainer::StepRecord;
use mapf_ledger::seed::Seed;
use mapf_ledger::train::adam::AdamConfig;
use mapf_ledger::train::compute::{Compute, Dtype};
use mapf_ledger::train::grpo::{self, GrpoConfig};
use mapf_ledger::train::lm::generate::generate as lm_generate;
use mapf_ledger::train::lm::model::LoraSpec;
use mapf_ledger::train::lm::{self, LmPolicy, LmSpec};
use mapf_ledger::train::TrainState;
use tch::{Device, Kind};

/// The largest |sampled - recomputed| log-prob allowed in bf16. bf16 keeps 8 bits of
/// mantissa (relative step 2^-8 = 0.0039): the cached decode and the full training
/// forward round their bf16 activations at different points (measured here: 2.7e-3 at
/// most over 180 tokens; the f32 path holds 1e-5).
const BF16_LOGPROB_TOL: f32 = 1e-2;

fn spec() -> LmSpec {
    LmSpec {
        temperature: 0.7,
        top_p: 0.9,
        ..common::tiny_lm_spec()
    }
}

fn data() -> Vec<mapf_ledger::env::Solved> {
    let cfg = GeneratorConfig::uniform(2, [3, 4], 0.1, 0.2);
    generate(&cfg, 64, Seed::root(1), Budget::default()).unwrap()
}

fn bf16() -> Compute {
    Compute::new(Device::Cpu, Dtype::Bf16)
}

/// A scratch model in bf16, switched to LoRA (rank 4) on its own weights.
fn lora_policy(seed: u64) -> LmPolicy {
    let d = data();
    let p = lm::init(&spec(), bf16(), Seed::root(seed), || {
        mapf_ledger::stage::pretraining_corpus(&spec(), &d)
    })
    .unwrap();
    assert_eq!(p.model.dtype, Kind::BFloat16);
    // Full weights: f32 masters in the var store.
    assert!(p
        .model
        .vs
        .variables()
        .values()
        .all(|v| v.kind() == Kind::Float));
    let spec = LoraSpec {
        rank: 4,
        alpha: 8.0,
        targets: vec!["q_proj".into(), "v_proj".into(), "down_proj".into()],
    };
    p.into_lora(spec, Hash([0; 32]), Seed::root(seed + 1))
        .unwrap()
}

fn grpo_cfg(micro_batch: u32) -> GrpoConfig {
    GrpoConfig {
        steps: 1,
        lr: 1e-2,
        group_size: 4,
        batch_size: 4,
        clip_eps: 0.2,
        kl_coef: 0.05,
        entropy_coef: 0.001,
        epochs: 1,
        valid_reward: 1.0,
        optimal_bonus: 0.5,
        format_reward: 0.1,
        agent_reward: 0.5,
        cost_reward: 0.0,
        zero_variance: grpo::ZeroVariance::Keep,
        checkpoint_every: 100,
        micro_batch,
        ..GrpoConfig::default()
    }
}

#[test]
fn bf16_lora_base_is_frozen_in_bf16_and_generation_matches_training_log_probs() {
    let p = lora_policy(2);
    assert_eq!(p.model.dtype, Kind::BFloat16);
    assert!(!p.model.frozen.is_empty());
    assert!(p.model.frozen.values().all(|t| t.kind() == Kind::BFloat16));
    let vars = p.model.vs.variables();
    assert!(vars.keys().all(|k| k.contains(".lora_")));
    assert!(vars.values().all(|v| v.kind() == Kind::Float));
    // Give the adapters an effect, so the f32 adapter path is part of what is compared.
    tch::no_grad(|| {
        for (name, mut v) in p.model.vs.variables() {
            if name.contains("lora_B") {
                v.copy_(&(tch::Tensor::randn(v.size(), (Kind::Float, Device::Cpu)) * 0.05));
            }
        }
    });
    let prompts = vec![p.chat_ids("agent 1:"), p.chat_ids("4x4 2 agents")];
    let s = spec().sampling();
    let sample = || {
        lm_generate(
            &p.model,
            &prompts,
            3,
            &[30, 30],
            &s,
            false,
            &p.stop,
            Seed::root(5),
            true,
        )
    };
    let gens = sample();
    assert!(gens.iter().all(|g| !g.tokens.is_empty()));
    let ps: Vec<&[u32]> = (0..6).map(|l| prompts[l / 3].as_slice()).collect();
    let ts: Vec<&[u32]> = gens.iter().map(|g| g.tokens.as_slice()).collect();
    let lp = tch::no_grad(|| p.token_log_probs(&ps, &ts, 0.7, true));
    assert_eq!(lp.per_action.kind(), Kind::Float);
    let trained = Vec::<f32>::try_from(lp.per_action).unwrap();
    let sampled: Vec<f32> = gens.iter().flat_map(|g| g.logprobs.clone()).collect();
    assert_eq!(trained.len(), sampled.len());
    let worst = trained
        .iter()
        .zip(&sampled)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    eprintln!(
        "bf16: {} tokens, max |sampled - trained| log-prob {worst:.2e}",
        sampled.len()
    );
    assert!(
        worst <= BF16_LOGPROB_TOL,
        "max |sampled - trained| = {worst}"
    );
    // Generation is reproducible in bf16 too.
    assert_eq!(sample(), gens);
}

/// What trains is kept as f32 masters, not rounded to the bf16 compute dtype: every
/// variable is f32, and the LoRA B matrices, which start at zero and are moved by the
/// step, hold values bf16 cannot represent (an update applied to a bf16 copy would
/// leave only bf16 values behind).
fn assert_f32_masters(vars: &tch::nn::VarStore) {
    let all = vars.variables();
    assert!(all.values().all(|v| v.kind() == Kind::Float));
    let b: Vec<_> = all.iter().filter(|(n, _)| n.contains("lora_B")).collect();
    assert!(!b.is_empty(), "no LoRA B matrix among {:?}", all.keys());
    for (name, v) in b {
        assert!(
            v.abs().max().double_value(&[]) > 0.0,
            "{name} did not move from zero"
        );
        let off_bf16 = (v - v.to_kind(Kind::BFloat16).to_kind(Kind::Float))
            .abs()
            .max()
            .double_value(&[]);
        assert!(
            off_bf16 > 0.0,
            "{name} holds only bf16 values: the update was not applied to an f32 master"
        );
    }
}

/// One GRPO step of `policy` (LoRA, bf16) at micro-batches of `micro` rows on the test
/// data: every adapter moved and stayed an f32 master; the step's records, stats and
/// parameter hash after it.
fn lora_step(
    policy: LmPolicy,
    micro: u32,
) -> (Vec<StepRecord>, grpo::StepStats, mapf_ledger::ledger::Hash) {
    let d = data();
    let blobs = vec![Hash([0; 32]); d.len()];
    let mut ts = TrainState::new(
        Box::new(policy),
        AdamConfig {
            lr: 1e-2,
            ..AdamConfig::default()
        },
    );
    let before = mapf_ledger::train::checkpoint::param_hash(ts.policy.vars());
    let (records, stats) = grpo::step(
        &mut ts,
        None,
        &grpo_cfg(micro),
        CostMetric::Makespan,
        &d,
        &blobs,
        &[],
        Seed::root(4),
        0,
    );
    let after = mapf_ledger::train::checkpoint::param_hash(ts.policy.vars());
    assert!(stats.loss.is_finite() && stats.grad_norm > 0.0, "{stats:?}");
    assert_ne!(before, after, "the step changed no adapter");
    assert_f32_masters(ts.policy.vars());
    (records, stats, after)
}

#[test]
fn a_bf16_lora_grpo_step_trains_the_f32_adapters_whole_or_in_micro_batches() {
    let step = |micro: u32| {
        let (records, stats, _) = lora_step(lora_policy(3), micro);
        assert!(matches!(records.last(), Some(StepRecord::GrpoStats(_))));
        stats
    };
    let whole = step(0);
    let micro = step(3);
    // The same samples (same seeds), the same loss up to bf16 rounding.
    assert_eq!(whole.reward_mean, micro.reward_mean);
    assert!(
        (whole.loss - micro.loss).abs() <= 1e-2 * whole.loss.abs().max(0.1),
        "whole {} vs micro-batched {}",
        whole.loss,
        micro.loss
    );
}

/// `[lm] lora_in_compute_dtype`: the adapters' products in bf16 give the f32 path's
/// loss to bf16 rounding, and the adapters still train as f32 masters.
#[test]
fn lora_products_in_bf16_train_the_f32_adapters_to_the_f32_paths_loss() {
    let step = |in_bf16: bool| {
        let mut p = lora_policy(3);
        mapf_ledger::train::policy::Policy::apply_settings(
            &mut p,
            mapf_ledger::plan::trainer::PolicySettings {
                lora_in_compute_dtype: in_bf16,
                ..Default::default()
            },
        );
        let (_, stats, params) = lora_step(p, 3);
        (stats, params)
    };
    let (f32_path, f32_params) = step(false);
    let (bf16_path, bf16_params) = step(true);
    assert_eq!(f32_path.reward_mean, bf16_path.reward_mean);
    assert!(
        (f32_path.loss - bf16_path.loss).abs() <= 1e-2 * f32_path.loss.abs().max(0.1),
        "f32 {} vs bf16 {}",
        f32_path.loss,
        bf16_path.loss
    );
    assert!(
        (f32_path.grad_norm - bf16_path.grad_norm).abs() <= 5e-2 * f32_path.grad_norm,
        "grad norm f32 {} vs bf16 {}",
        f32_path.grad_norm,
        bf16_path.grad_norm
    );
    // A different computation, by a rounding: the parameters after the step differ.
    assert_ne!(f32_params, bf16_params);
}

#[test]
fn micro_batches_give_the_whole_batch_loss_in_f32() {
    let d = data();
    let blobs = vec![Hash([0; 32]); d.len()];
    let run = |cfg: GrpoConfig| {
        let p = lm::init(&spec(), Device::Cpu, Seed::root(6), || {
            mapf_ledger::stage::pretraining_corpus(&spec(), &d)
        })
        .unwrap();
        assert_eq!(p.model.dtype, Kind::Float);
        let mut ts = TrainState::new(Box::new(p), AdamConfig::default());
        let (_, stats) = grpo::step(
            &mut ts,
            None,
            &cfg,
            CostMetric::Makespan,
            &d,
            &blobs,
            &[],
            Seed::root(4),
            0,
        );
        stats
    };
    let whole = run(grpo_cfg(0));
    let by_tokens = |micro_batch_tokens| GrpoConfig {
        micro_batch_tokens,
        ..grpo_cfg(0)
    };
    // Rows; a token budget (uneven micro-batches of consecutive rows); a budget under
    // every row (each row alone); one that holds the batch (one micro-batch).
    for (what, cfg) in [
        ("5 rows", grpo_cfg(5)),
        ("120 tokens", by_tokens(120)),
        ("1 token", by_tokens(1)),
        ("1M tokens", by_tokens(1 << 20)),
    ] {
        let micro = run(cfg);
        assert_eq!(whole.reward_mean, micro.reward_mean, "{what}");
        assert!(
            (whole.loss - micro.loss).abs() <= 1e-5 * whole.loss.abs().max(1e-3),
            "{what}: whole {} vs micro-batched {}",
            whole.loss,
            micro.loss
        );
        assert!(
            (whole.grad_norm - micro.grad_norm).abs() <= 1e-4 * whole.grad_norm.max(1e-6),
            "{what}: grad norm whole {} vs micro-batched {}",
            whole.grad_norm,
            micro.grad_norm
        );
    }
}

/// A bf16-trained LoRA model exports as transformers writes a Qwen3 directory: the
/// committed fixture `tests/fixtures/hf/tiny-qwen3` (written by transformers 5.23) is the
/// reference for the config's keys and the tensor names, every tensor is f32 with the
/// adapters merged, and loaded back by the loader tests/hf_parity.rs holds to
/// transformers' own outputs, it gives the trained model's logits within bf16 rounding.
#[test]
fn a_bf16_trained_lora_export_is_a_transformers_qwen3_directory() {
    let d = data();
    let blobs = vec![Hash([0; 32]); d.len()];
    let mut ts = TrainState::new(
        Box::new(lora_policy(8)),
        AdamConfig {
            lr: 1e-2,
            ..AdamConfig::default()
        },
    );
    let before = mapf_ledger::train::checkpoint::param_hash(ts.policy.vars());
    grpo::step(
        &mut ts,
        None,
        &grpo_cfg(0),
        CostMetric::Makespan,
        &d,
        &blobs,
        &[],
        Seed::root(4),
        0,
    );
    assert_ne!(
        before,
        mapf_ledger::train::checkpoint::param_hash(ts.policy.vars())
    );
    let p = lm::downcast(ts.policy).expect("an LM policy");
    assert_eq!(p.model.dtype, Kind::BFloat16);
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("export");
    lm::hf::export(&out, &p.model, &p.tokenizer_json, p.arch.chat).unwrap();

    // The config carries every key transformers writes for a Qwen3 model.
    let read = |p: &std::path::Path| -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
    };
    let fixture =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf/tiny-qwen3");
    let reference = read(&fixture.join("config.json"));
    let ours = read(&out.join("config.json"));
    for key in [
        "architectures",
        "model_type",
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "rms_norm_eps",
        "vocab_size",
        "tie_word_embeddings",
        "hidden_act",
    ] {
        assert!(reference.get(key).is_some(), "the fixture names {key}");
        assert!(ours.get(key).is_some(), "export config lacks {key}: {ours}");
    }
    assert_eq!(ours["model_type"], "qwen3");
    assert_eq!(ours["architectures"], reference["architectures"]);

    // Tensor names as transformers names them (the fixture's index), all f32, no adapters.
    let index = read(&fixture.join("model.safetensors.index.json"));
    let fixture_names: std::collections::BTreeSet<String> = index["weight_map"]
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.replace(|c: char| c.is_ascii_digit(), "N"))
        .collect();
    let tensors = tch::Tensor::read_safetensors(out.join("model.safetensors")).unwrap();
    for (name, tensor) in &tensors {
        assert_eq!(
            tensor.kind(),
            Kind::Float,
            "{name} exported as {:?}",
            tensor.kind()
        );
        let shape = name.replace(|c: char| c.is_ascii_digit(), "N");
        assert!(
            fixture_names.contains(&shape) || name == "lm_head.weight",
            "{name} is not a transformers Qwen3 tensor name"
        );
    }

    // Loaded back in f32, the logits of the bf16 model it was trained as.
    let back = LmPolicy::from_hf_dir(
        &out,
        Device::Cpu,
        None,
        p.arch.prompt,
        p.arch.sampling,
        Seed::root(0),
    )
    .unwrap();
    let ids = p.chat_ids("agent 1: R R D");
    let logits = |m: &lm::model::Model| {
        let n = ids.len() as i64;
        let toks = tch::Tensor::from_slice(&ids.iter().map(|&x| x as i64).collect::<Vec<_>>())
            .view([1, n]);
        let pos = tch::Tensor::arange(n, (Kind::Int64, Device::Cpu)).view([1, n]);
        let bias = lm::generate::attention_bias(&[0], n, n, Device::Cpu);
        tch::no_grad(|| {
            let h = m.hidden(&toks, &pos, &bias, None, true);
            m.logits(&h.squeeze_dim(0)).to_kind(Kind::Float)
        })
    };
    let (a, b) = (logits(&p.model), logits(&back.model));
    let diff = (&a - &b).abs().max().double_value(&[]);
    let scale = a.abs().max().double_value(&[]);
    assert!(
        diff <= 0.05 * scale.max(1.0),
        "exported logits differ by {diff} (scale {scale})"
    );
}
