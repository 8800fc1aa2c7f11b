//! Throughput of the `lm` policy on its device, as `ledger lm bench` prints it: decode
//! tokens per second at chosen batch sizes (beside the memory roofline when the device's
//! bandwidth is given), one GRPO step of a plan's shape with its phase split and model
//! FLOPs utilisation, and imitation (warm-up) steps of a model directory. Wall-clock
//! figures for a person or a results file; nothing here is recorded in a ledger.
//!
//! Like for like with a peer (`tools/bench_decode_hf.py` runs transformers' `generate()`
//! on the same shapes): every lane decodes exactly `new_tokens` (no stop token), the
//! prompts are the same token ids, and decode time is the time of a call minus the time
//! of the same call with one new token (the prefill, the weights' generation layout and
//! the first pick), so both sides are timed over the same `new_tokens - 1` steps.
use super::batches;
use super::grpo::{self, GrpoConfig};
use super::lm::generate::{self, Sampling};
use super::lm::model::{param_shapes, AttentionKernel, LoraSpec, Model};
use super::lm::{LmConfig, LmPolicy};
use super::policy::{LogProbs, Policy, PolicySettings, Rollout};
use super::timing::Phases;
use super::TrainState;
use crate::env::{CostMetric, Instance, Plan, Solved};
use crate::record::timing::StageTiming;
use crate::record::Hash;
use crate::seed::Seed;
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Instant;
use tch::{Device, Kind, Tensor};

/// Random weights of `cfg` made directly on `device` in `dtype` (normal(0, 0.02), unit
/// norms, zero biases): a 4B checkpoint's shape without 16 GB of f32 on the host.
pub fn random_weights_on(
    cfg: &LmConfig,
    device: Device,
    dtype: Kind,
    seed: Seed,
) -> BTreeMap<String, Tensor> {
    let _rng = super::seeded_torch_rng(seed);
    let _guard = tch::no_grad_guard();
    param_shapes(cfg)
        .into_iter()
        .map(|(name, shape)| {
            let t = if name.ends_with("norm.weight") {
                Tensor::ones(&shape, (dtype, device))
            } else if name.ends_with(".bias") {
                Tensor::zeros(&shape, (dtype, device))
            } else {
                Tensor::randn(&shape, (dtype, device)) * 0.02
            };
            (name, t)
        })
        .collect()
}

/// Parameters a decode step reads: every weight but the embedding table, which a step
/// reads one row of (unless the head shares it).
fn weights_read(cfg: &LmConfig) -> u64 {
    param_shapes(cfg)
        .iter()
        .filter(|(n, _)| cfg.tie_word_embeddings || n != "model.embed_tokens.weight")
        .map(|(_, s)| s.iter().product::<i64>() as u64)
        .sum()
}

/// Parameters of the matrix products a token goes through: the linear layers and the
/// head (2 FLOPs each per token forward).
pub fn matmul_parameters(cfg: &LmConfig) -> u64 {
    let head = cfg.vocab_size as u64 * cfg.hidden_size as u64;
    param_shapes(cfg)
        .iter()
        .filter(|(n, s)| s.len() == 2 && n.starts_with("model.layers."))
        .map(|(_, s)| s.iter().product::<i64>() as u64)
        .sum::<u64>()
        + head
}

/// One decode measurement.
#[derive(Clone, Debug, Serialize)]
pub struct DecodeFigure {
    pub batch: usize,
    pub prompt_tokens: usize,
    pub new_tokens: usize,
    /// The whole call, and the same call with one new token.
    pub call_seconds: f64,
    pub prefill_seconds: f64,
    /// `batch * (new_tokens - 1)` over the difference of the two.
    pub decode_tokens_per_s: f64,
    pub step_ms: f64,
    /// A step's bytes (weights in the compute dtype, plus the mean key/value cache it
    /// reads) over the bandwidth, when given.
    pub roofline_step_ms: Option<f64>,
    /// `roofline_step_ms / step_ms`.
    pub roofline_share: Option<f64>,
    /// The decode loop ([`loop_name`]).
    pub decode_loop: &'static str,
    /// For the graphed loop: whether graphs were captured and replayed (false: the
    /// shim was not at hand and the loop ran windowed, as its notice said).
    pub graphs_replayed: Option<bool>,
    /// When graphs were replayed: whether every lane's tokens equal those of the same
    /// fixed-shape step run eagerly on the same device (the same kernels, so they must).
    pub tokens_equal_eager: Option<bool>,
}

/// The name a decode loop goes by in the figures: `per_token`, `windowed`, `fixed`
/// (the fixed-shape step run eagerly) or `graphed` (that step replayed as CUDA graphs).
pub fn loop_name(host: generate::DecodeLoop) -> &'static str {
    use generate::DecodeLoop::*;
    match host {
        PerToken => "per_token",
        Windowed { .. } => "windowed",
        Fixed { graphs: false, .. } => "fixed",
        Fixed { graphs: true, .. } => "graphed",
    }
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn sync(device: Device) {
    if let Device::Cuda(i) = device {
        tch::Cuda::synchronize(i as i64);
    }
}

/// The bench's prompts: `batch` distinct rows of `len` token ids below `vocab` (the
/// same ids `tools/bench_decode_hf.py` makes: `(31 r + 7 j + 1) mod vocab`).
pub fn prompts(batch: usize, len: usize, vocab: i64) -> Vec<Vec<u32>> {
    (0..batch)
        .map(|r| {
            (0..len)
                .map(|j| ((31 * r + 7 * j + 1) as i64 % vocab) as u32)
                .collect()
        })
        .collect()
}

/// Decode `batch` distinct prompts of `prompt_tokens` for exactly `new_tokens` each,
/// sampled at temperature 1 as GRPO samples, with the adapters (merged on a GPU) when
/// the model has them, in the decode loop `host` (None: the device's own, as training
/// decodes). `bandwidth`: the device's memory bandwidth in bytes/s.
pub fn decode(
    model: &Model,
    batch: usize,
    prompt_tokens: usize,
    new_tokens: usize,
    bandwidth: Option<f64>,
    host: Option<generate::DecodeLoop>,
) -> DecodeFigure {
    let device = model.device();
    let ps = prompts(batch, prompt_tokens, model.cfg.vocab_size);
    let use_lora = model.lora.is_some();
    let own = generate::Decoding::for_model(model, use_lora, prompt_tokens, new_tokens);
    let how = generate::Decoding {
        host: host.unwrap_or(own.host),
        ..own
    };
    let call = |n: usize, how: generate::Decoding| {
        let s = Sampling {
            temperature: 1.0,
            top_p: 1.0,
            max_new_tokens: n,
        };
        sync(device);
        let t = Instant::now();
        let g = generate::generate_as(
            model,
            &ps,
            1,
            &vec![n; batch],
            &s,
            false,
            &[],
            Seed::root(11),
            use_lora,
            how,
        );
        sync(device);
        assert!(g.iter().all(|g| g.tokens.len() == n), "no stop tokens");
        (t.elapsed().as_secs_f64(), g)
    };
    let time = |n: usize| call(n, how).0;
    let prefill = time(1);
    let (call_s, lanes) = call(new_tokens, how);
    let graphs_replayed = match how.host {
        generate::DecodeLoop::Fixed { graphs: true, .. } => {
            Some(super::lm::graph::shim(device).is_ok())
        }
        _ => None,
    };
    let tokens_equal_eager = match (graphs_replayed, how.host) {
        (
            Some(true),
            generate::DecodeLoop::Fixed {
                steps, key_span, ..
            },
        ) => {
            let eager = generate::DecodeLoop::Fixed {
                steps,
                graphs: false,
                key_span,
            };
            let (_, want) = call(new_tokens, generate::Decoding { host: eager, ..how });
            Some(lanes.iter().zip(&want).all(|(a, b)| a.tokens == b.tokens))
        }
        _ => None,
    };
    let call = call_s;
    let steps = new_tokens.saturating_sub(1).max(1) as f64;
    let decode_s = (call - prefill).max(1e-9);
    let c = &model.cfg;
    let elt = model.dtype.elt_size_in_bytes() as f64;
    let kv_per_token =
        2.0 * (c.num_hidden_layers * c.num_key_value_heads * c.head_dim) as f64 * elt;
    let mean_context = prompt_tokens as f64 + new_tokens as f64 / 2.0;
    let step_bytes = weights_read(c) as f64 * elt + kv_per_token * mean_context * batch as f64;
    let step_ms = decode_s / steps * 1e3;
    let roofline = bandwidth.map(|b| step_bytes / b * 1e3);
    DecodeFigure {
        batch,
        prompt_tokens,
        new_tokens,
        call_seconds: call,
        prefill_seconds: prefill,
        decode_tokens_per_s: batch as f64 * steps / decode_s,
        step_ms,
        roofline_step_ms: roofline,
        roofline_share: roofline.map(|r| r / step_ms),
        decode_loop: loop_name(how.host),
        graphs_replayed,
        tokens_equal_eager,
    }
}

/// A language-model policy whose samples are its lanes' whole token budgets of drawn
/// tokens, not decoded ([`LmPolicy::rollouts_at_budget`]); everything else is the
/// policy's own, and `as_lm` still finds it. A GRPO step of it runs the KL reference and
/// the training forward on the rows of random weights' worst case, every lane at its
/// budget, in the time those phases take alone.
struct AtBudget(LmPolicy);

impl Policy for AtBudget {
    fn kind(&self) -> &'static str {
        self.0.kind()
    }
    fn vars(&self) -> &tch::nn::VarStore {
        self.0.vars()
    }
    fn vars_mut(&mut self) -> &mut tch::nn::VarStore {
        self.0.vars_mut()
    }
    fn sample(
        &self,
        instances: &[Instance],
        per_instance: usize,
        greedy: bool,
        seed: Seed,
    ) -> Vec<Rollout> {
        let per = if greedy { 1 } else { per_instance };
        self.0.rollouts_at_budget(instances, per, seed)
    }
    fn log_probs(&self, instances: &[Instance], rollouts: &[Rollout]) -> LogProbs {
        self.0.log_probs(instances, rollouts)
    }
    fn backward_loss(
        &self,
        instances: &[Instance],
        rollouts: &[Rollout],
        loss: &mut dyn FnMut(&LogProbs) -> Tensor,
    ) {
        self.0.backward_loss(instances, rollouts, loss)
    }
    fn row_tokens(&self, instances: &[Instance], rollouts: &[Rollout]) -> Vec<usize> {
        self.0.row_tokens(instances, rollouts)
    }
    fn apply_settings(&mut self, settings: PolicySettings) {
        self.0.apply_settings(settings)
    }
    fn encode_plan(&self, inst: &Instance, plan: &Plan) -> Vec<u32> {
        self.0.encode_plan(inst, plan)
    }
    fn arch(&self) -> Vec<u8> {
        self.0.arch()
    }
    fn reference_log_probs(
        &self,
        instances: &[Instance],
        rollouts: &[Rollout],
    ) -> Option<LogProbs> {
        self.0.reference_log_probs(instances, rollouts)
    }
    fn side_blobs(&self) -> Vec<Vec<u8>> {
        self.0.side_blobs()
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self.0.as_any()
    }
    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any> {
        Box::new(self.0)
    }
}

/// One GRPO step of a plan's shape.
#[derive(Clone, Debug, Serialize)]
pub struct GrpoFigure {
    pub seconds: f64,
    pub timing: StageTiming,
    pub sampled_tokens: u64,
    pub prompt_tokens: u64,
    /// Groups of the batch, and those with signal (rewards that differ). Random
    /// weights write no plan that parses, so every reward is 0 and no group has signal:
    /// under `zero_variance = "drop"` such a step trains no row, and only `keep` or
    /// `skip` time the training of every row.
    pub groups: u32,
    pub signal_groups: u32,
    /// Tokens the training forward runs (prompt and sample of every row it trains).
    pub trained_tokens: u64,
    /// Where the samples came from (decoded, or drawn at their budget without a decode).
    pub rollouts: Rollouts,
    /// Model FLOPs of the step (matrix products only, attention not counted):
    /// generation 2P per prompt and sampled token (none for samples not decoded), the
    /// KL reference's forward 2P and the training forward and backward 4P (LoRA: no
    /// weight gradients) or 6P per trained token. Recomputation is not counted, as MFU
    /// does not count it.
    pub model_flops: f64,
    pub tflops_per_s: f64,
    pub mfu: Option<f64>,
    /// When the step began and ended (ms since the Unix epoch).
    pub window_unix_ms: (u64, u64),
    /// The attention kernel torch picks for the training forward of a row of the
    /// step's mean length (prompt and sample).
    pub attention_kernel: AttentionKernel,
}

/// Where a timed GRPO step's samples come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Rollouts {
    /// Decoded by the policy, as a run samples them.
    Decoded,
    /// Every lane its whole budget of drawn tokens, not decoded
    /// ([`LmPolicy::rollouts_at_budget`]): the step times its KL reference and training
    /// alone, and its FLOPs count no generation.
    AtBudget,
}

/// One GRPO step (`cfg`'s batch and group, step 0) of `policy` on `data` with its
/// phases timed, its samples as `rollouts` says; `peak_flops`: the device's dense bf16
/// peak, for MFU.
pub fn grpo_step(
    policy: LmPolicy,
    rollouts: Rollouts,
    cfg: &GrpoConfig,
    data: &[Solved],
    seed: Seed,
    peak_flops: Option<f64>,
) -> GrpoFigure {
    let device = policy.model.device();
    let lora = policy.model.lora.is_some();
    let p = matmul_parameters(&policy.model.cfg) as f64;
    let prompt_of = |s: &Solved| policy.chat_ids(&policy.task_text(&s.instance)).len() as u64;
    let idx = batches::batch_indices(
        data.len(),
        cfg.batch_size as usize,
        seed.child("order", 0),
        0,
    );
    let prompt_tokens: u64 = idx.iter().map(|&i| prompt_of(&data[i])).sum();
    let policy: Box<dyn Policy> = match rollouts {
        Rollouts::Decoded => Box::new(policy),
        Rollouts::AtBudget => Box::new(AtBudget(policy)),
    };
    let mut state = TrainState::new(policy, cfg.adam());
    let blobs = vec![Hash([0; 32]); data.len()];
    // Each phase's end on stderr as it happens: a step cut short by a time limit (the
    // paper's own, cuda-bench part 5) still says how far it got.
    let mut phases = Phases::new(device).echoing();
    sync(device);
    let t = Instant::now();
    let begun = unix_ms();
    let (records, _) = grpo::step_timed(
        &mut state,
        None,
        cfg,
        CostMetric::Makespan,
        data,
        &blobs,
        &[],
        seed,
        0,
        &mut phases,
    );
    sync(device);
    let seconds = t.elapsed().as_secs_f64();
    let stats = grpo::recorded_stats(&records);
    let sampled = stats.tokens;
    let timing = phases.timing();
    // The training phase counts the rows it trained (every row but under `drop`).
    let trained = timing
        .phases
        .iter()
        .find(|p| p.name == crate::record::timing::phase::TRAINING)
        .map_or(0, |p| {
            p.sampled_tokens.unwrap_or(0) + p.prefilled_tokens.unwrap_or(0)
        })
        / cfg.epochs.max(1) as u64;
    let train_factor = if lora { 4.0 } else { 6.0 };
    let kl = if cfg.kl_coef > 0.0 { 2.0 } else { 0.0 };
    let generated = match rollouts {
        Rollouts::Decoded => 2.0 * p * (prompt_tokens + sampled) as f64,
        Rollouts::AtBudget => 0.0,
    };
    let flops = generated + (kl + train_factor) * p * trained as f64;
    let rows = (idx.len() as u64 * cfg.group_size as u64).max(1);
    let mean_row = (prompt_tokens * cfg.group_size as u64 + sampled) / rows;
    let attention_kernel = state
        .policy
        .as_lm()
        .expect("the bench times an lm policy")
        .attention_kernel(mean_row as i64);
    GrpoFigure {
        seconds,
        timing,
        sampled_tokens: sampled,
        prompt_tokens,
        rollouts,
        groups: stats.groups,
        signal_groups: stats.signal_groups,
        trained_tokens: trained,
        model_flops: flops,
        tflops_per_s: flops / seconds / 1e12,
        mfu: peak_flops.map(|peak| flops / seconds / peak),
        window_unix_ms: (begun, unix_ms()),
        attention_kernel,
    }
}

/// Imitation steps of a model on text pairs, as the base planner's warm-up runs them.
#[derive(Clone, Debug, Serialize)]
pub struct WarmupFigure {
    pub steps: u64,
    pub batch: usize,
    pub mean_tokens: f64,
    /// The first step (allocator warm-up) is not counted.
    pub seconds_per_step: f64,
    pub tokens_per_s: f64,
    /// When the timed steps began and ended (ms since the Unix epoch), so a sampler of
    /// the GPU's utilisation can average over the steps alone.
    pub window_unix_ms: (u64, u64),
    /// The timed steps' phases (example building, training, optimiser, parameter
    /// hash), the device synchronised at each boundary.
    pub timing: StageTiming,
    /// The attention kernel torch picks for the forward of a row of the mean length.
    pub attention_kernel: AttentionKernel,
}

/// `steps + 1` warm-up steps of `batch` pairs; the first is not timed.
pub fn warmup_steps(
    policy: LmPolicy,
    pairs: &[(Vec<u32>, Vec<u32>)],
    batch: usize,
    steps: u64,
    seed: Seed,
) -> WarmupFigure {
    let device = policy.model.device();
    let mean_tokens = pairs
        .iter()
        .map(|(p, t)| (p.len() + t.len()) as f64)
        .sum::<f64>()
        / pairs.len().max(1) as f64;
    let attention_kernel = policy.attention_kernel(mean_tokens.round() as i64);
    let mut state = TrainState::new(Box::new(policy), super::adam::AdamConfig::default());
    let _ = super::warmup::text_step(&mut state, pairs, batch, seed, 0);
    sync(device);
    let mut phases = Phases::new(device);
    let t = Instant::now();
    let begun = unix_ms();
    for s in 1..=steps {
        let _ = super::warmup::text_step_timed(&mut state, pairs, batch, seed, s, &mut phases);
    }
    sync(device);
    let dt = t.elapsed().as_secs_f64() / steps.max(1) as f64;
    WarmupFigure {
        steps,
        batch,
        mean_tokens,
        seconds_per_step: dt,
        tokens_per_s: batch as f64 * mean_tokens / dt,
        window_unix_ms: (begun, unix_ms()),
        timing: phases.timing(),
        attention_kernel,
    }
}

/// A random model of `cfg` on `device`, under `lora` when given (adapters with B not
/// zero, so merging them is real work), with the generation layout a run would use.
pub fn random_model(
    cfg: &LmConfig,
    device: Device,
    dtype: Kind,
    lora: Option<LoraSpec>,
    seed: Seed,
) -> Model {
    let w = random_weights_on(cfg, device, dtype, seed.child("weights", 0));
    let m = Model::from_weights(
        cfg.clone(),
        w,
        crate::train::compute::Compute { device, dtype },
        lora,
        seed.child("adapters", 0),
    )
    .expect("weights made from the config's own shapes");
    if m.lora.is_some() {
        let _rng = super::seeded_torch_rng(seed.child("lora-b", 0));
        tch::no_grad(|| {
            for (name, mut t) in m.vs.variables() {
                if name.contains("lora_B") {
                    t.copy_(&(t.randn_like() * 1e-3));
                }
            }
        });
    }
    m
}
