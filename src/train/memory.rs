//! Peak memory of the `lm` policy, estimated from shapes alone (no tensor is made).
//!
//! The model follows what `lm/model.rs`, `lm/generate.rs`, `lm/recompute.rs` and
//! `grpo.rs` allocate:
//! - **resident**: weights in the compute dtype (under LoRA the frozen base; without
//!   LoRA the f32 masters), the trainable tensors' gradients and two Adam moments in
//!   f32 (and the adapters themselves);
//! - **generation** (a GRPO group, an evaluation batch, an engineer reply): the
//!   generation copy of the weights ([`Estimator::generation_copy`]: on a GPU every
//!   projection fused, adapters merged; on the CPU a bf16 cast, or a small f32 model's
//!   fused projections), then per **wave** of lanes: the key/value cache of every lane
//!   for prompt + new tokens, the prefill's largest per-layer temporaries and attention
//!   mask, the decode step's vocabulary-sized f32 buffers and attention scores. Lanes
//!   run in waves that fit a budget ([`lanes_per_wave`]): the plan's `[lm]
//!   generation_memory`, else on CUDA the device's memory less the reserve, what is
//!   resident and the copy ([`Estimator::derived_generation_budget`]);
//! - **training** (one forward and backward of a micro-batch): the tensors autograd
//!   saves per token and layer (norm inputs in f32, projections' inputs, q/k/v after
//!   RoPE, attention output and log-sum-exp, the MLP's gate/up/product, LoRA's f32 input
//!   copies), the attention mask (the f32 bias and its one cast to the compute dtype),
//!   the attention probabilities where the kernel materialises them
//!   ([`AttentionKernel`]), and the loss head: the f32 log-softmax over the vocabulary
//!   at every target token, or with `[grpo] log_prob_chunk` at one chunk's tokens
//!   (`lm/recompute.rs` backpropagates each chunk before the next, from the final
//!   hidden states made a leaf), plus the backward's largest temporary. With `[grpo]
//!   recompute` the forward keeps each layer's input only: what lives is the layer
//!   boundaries, the leaf's gradient, and one layer's saved activations while it is
//!   recomputed. Without LoRA in bf16, the bf16 weight copies the forward casts;
//! - **scoring** (the KL reference, no gradients): one layer's temporaries, the mask,
//!   and the log-softmax of all targets, or of one chunk.
//!
//! The peak is resident + the largest phase. Calibrated against measured peak RSS on
//! the CPU (`tools/dry-run.sh`), where the fused attention kernel given a mask
//! materialises the `[T, T]` probabilities; on an H100 with torch 2.11 a bf16 call with
//! a mask and grouped-query heads runs cuDNN's fused kernel, which does not (measured:
//! one layer's forward and backward at 4,096 tokens, 32 heads, held 241 MiB above its
//! inputs where the math kernel held 8,480 MiB). Allocator caching on a GPU adds to the
//! peak, which [`CUDA_RESERVE`] stands for when a GPU's memory is compared.
use super::lm::config::LmConfig;
use super::lm::model::{param_shapes, LoraSpec, FUSED_BYTES};
pub use crate::plan::size::parse_size;

/// What a CUDA process holds besides tensors (context, kernels, cuBLAS workspace,
/// allocator fragmentation): set aside from a GPU's memory before comparing.
pub const CUDA_RESERVE: u64 = 2 << 30;

/// One generation call: `prompts` distinct prompts of up to `prompt_tokens`, expanded
/// to `lanes` sampled continuations of up to `new_tokens`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Generation {
    pub prompts: u64,
    pub lanes: u64,
    pub prompt_tokens: u64,
    pub new_tokens: u64,
    /// Top-p < 1 sorts the vocabulary (more buffers per lane).
    pub top_p: bool,
}

/// One training forward and backward: `rows` sequences padded to `tokens`, with
/// `targets` scored positions in all.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Training {
    pub rows: u64,
    pub tokens: u64,
    pub targets: u64,
}

/// Where attention's `[T, T]` probabilities go in a training or scoring forward.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttentionKernel {
    /// Kept per layer for the backward pass: the CPU's fused kernel given a mask.
    Materialised,
    /// Streamed by a fused kernel that keeps only the output and the log-sum-exp
    /// (cuDNN's, chosen by torch on a GPU for bf16 with a mask and grouped heads).
    Streamed,
}

impl AttentionKernel {
    /// The kernel a device runs: streamed on CUDA, materialised on the CPU.
    pub fn on(cuda: bool) -> AttentionKernel {
        if cuda {
            AttentionKernel::Streamed
        } else {
            AttentionKernel::Materialised
        }
    }
}

/// How a training micro-batch bounds its memory: the plan's `[grpo] recompute` and
/// `log_prob_chunk` (which `grpo` applies to micro-batches only), the device's
/// attention kernel, and whether rows attend under a mask (the plan's `[lm]
/// training_attention`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TrainingLayout {
    pub recompute: bool,
    /// Target tokens per loss-head chunk; 0: every target at once.
    pub log_prob_chunk: u64,
    pub attention: AttentionKernel,
    /// Left-padded rows under an additive mask (`masked`); false: right-padded rows
    /// under the causal kernel (`causal`), which makes no mask and, on the CPU too,
    /// runs the flash kernel that never materialises the probabilities.
    pub mask: bool,
}

impl TrainingLayout {
    /// Where the probabilities go under this layout: with no mask, streamed on every
    /// device.
    fn kernel(&self) -> AttentionKernel {
        if self.mask {
            self.attention
        } else {
            AttentionKernel::Streamed
        }
    }
}

impl TrainingLayout {
    /// One forward and backward keeping everything, with the CPU's kernel: what
    /// [`Estimator::training`] has always modelled.
    pub const WHOLE: TrainingLayout = TrainingLayout {
        recompute: false,
        log_prob_chunk: 0,
        attention: AttentionKernel::Materialised,
        mask: true,
    };
}

/// How a generation call is cut into waves: lanes a wave holds, and waves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Waves {
    /// Prompts per wave (whole prompts: a prompt is prefilled once for its lanes).
    pub prompts: u64,
    /// Lanes per wave.
    pub lanes: u64,
    pub waves: u64,
}

/// The bytes of each part, and the peak.
#[derive(Clone, Debug, PartialEq)]
pub struct Breakdown {
    pub weights: u64,
    pub trainable: u64,
    /// Gradients and Adam moments (f32).
    pub optimizer: u64,
    /// (phase name, transient bytes on top of the resident ones).
    pub phases: Vec<(String, u64)>,
}

impl Breakdown {
    pub fn resident(&self) -> u64 {
        self.weights + self.trainable + self.optimizer
    }
    /// The largest phase: name and bytes.
    pub fn largest(&self) -> (&str, u64) {
        self.phases
            .iter()
            .max_by_key(|(_, b)| *b)
            .map(|(n, b)| (n.as_str(), *b))
            .unwrap_or(("none", 0))
    }
    pub fn peak(&self) -> u64 {
        self.resident() + self.largest().1
    }
}

/// The model's shape and dtype, and the estimator over it.
pub struct Estimator<'a> {
    pub cfg: &'a LmConfig,
    pub lora: Option<&'a LoraSpec>,
    /// Bytes per element of the compute dtype (2 for bf16, 4 for f32).
    pub bytes: u64,
}

impl Estimator<'_> {
    fn bf16(&self) -> bool {
        self.bytes < 4
    }

    /// Parameters of the model (every weight).
    pub fn parameters(&self) -> u64 {
        param_shapes(self.cfg)
            .iter()
            .map(|(_, s)| s.iter().product::<i64>() as u64)
            .sum()
    }

    /// Trainable parameters: the LoRA adapters, or every weight.
    pub fn trainable(&self) -> u64 {
        match self.lora {
            None => self.parameters(),
            Some(spec) => param_shapes(self.cfg)
                .iter()
                .filter(|(n, s)| {
                    s.len() == 2
                        && n.strip_suffix(".weight")
                            .and_then(|m| m.rsplit('.').next())
                            .is_some_and(|m| spec.targets.iter().any(|t| t == m))
                })
                .map(|(_, s)| (spec.rank * (s[0] + s[1])) as u64)
                .sum(),
        }
    }

    /// Resident bytes: weights, trainable tensors, gradients and Adam moments.
    pub fn resident(&self) -> (u64, u64, u64) {
        let p = self.parameters();
        let t = self.trainable();
        match self.lora {
            Some(_) => (p * self.bytes, 4 * t, 12 * t),
            // Full fine-tuning: the weights are the f32 masters.
            None => (4 * p, 0, 12 * t),
        }
    }

    /// A bf16 copy of every weight (taken by the training forward's casts) when the
    /// trainable weights are f32 masters.
    fn cast_copy(&self) -> u64 {
        if self.lora.is_none() && self.bf16() {
            self.parameters() * self.bytes
        } else {
            0
        }
    }

    /// Parameters of the layers' projections (q, k, v, o, gate, up, down, biases).
    fn projection_parameters(&self) -> u64 {
        param_shapes(self.cfg)
            .iter()
            .filter(|(n, _)| n.contains("_proj."))
            .map(|(_, s)| s.iter().product::<i64>() as u64)
            .sum()
    }

    /// The copy of the weights a generation call makes (`Model::inference_copy`): on
    /// CUDA every projection fused (adapters merged) in the compute dtype, and without
    /// LoRA the rest cast from the f32 masters too; on the CPU the cast of f32 masters
    /// in bf16, or a small f32 model's fused projections, and nothing under LoRA.
    pub fn generation_copy(&self, cuda: bool) -> u64 {
        let all = self.parameters() * self.bytes;
        match (self.lora.is_some(), cuda) {
            (true, true) => self.projection_parameters() * self.bytes,
            (true, false) => 0,
            (false, true) => all,
            (false, false) if self.bf16() => all,
            (false, false) if all <= FUSED_BYTES as u64 => self.projection_parameters() * 4,
            (false, false) => 0,
        }
    }

    fn dims(&self) -> (u64, u64, u64, u64, u64, u64) {
        let c = self.cfg;
        (
            c.hidden_size as u64,
            c.intermediate_size as u64,
            (c.num_attention_heads * c.head_dim) as u64,
            (c.num_key_value_heads * c.head_dim) as u64,
            c.num_hidden_layers as u64,
            c.vocab_size as u64,
        )
    }

    /// Key/value cache bytes of one lane of `tokens` positions (every layer).
    fn cache_per_lane(&self, tokens: u64) -> u64 {
        let (_, _, _, kd, layers, _) = self.dims();
        tokens * layers * 2 * kd * self.bytes
    }

    /// One prompt's prefill temporaries: one layer's (MLP gate, up and product; the
    /// residual, norm and q/k/v) for every prompt token, the f32 mask with its cast,
    /// and where the kernel materialises them (the CPU's) the attention scores.
    fn prefill_per_prompt(&self, prompt_tokens: u64, attention: AttentionKernel) -> u64 {
        let (h, i, qd, kd, _, _) = self.dims();
        let b = self.bytes;
        let scores = match attention {
            AttentionKernel::Materialised => self.scores(1, prompt_tokens, 4),
            AttentionKernel::Streamed => 0,
        };
        prompt_tokens * (3 * i * b + 4 * h * 4 + 3 * qd * b + 2 * kd * b)
            + prompt_tokens * prompt_tokens * (4 + b)
            + scores
    }

    /// One lane's decode-step buffers at `cap` positions: f32 logits, scaled logits,
    /// log-softmax, probabilities, cumulative sum (top-p adds the sort's values, int64
    /// order and the kept mass), the step's attention scores (plain attention: bf16
    /// scores, f32 with the bias, f32 softmax, its cast), the bias row, and the
    /// windowed loop's uniforms for `new_tokens`.
    fn decode_per_lane(&self, cap: u64, new_tokens: u64, top_p: bool) -> u64 {
        let (_, _, _, _, _, v) = self.dims();
        let heads = self.cfg.num_attention_heads as u64;
        let per_vocab = if top_p { 9 } else { 5 };
        v * 4 * per_vocab + heads * cap * (2 * self.bytes + 8) + cap * 4 + new_tokens * 4
    }

    /// What a lane adds to a wave at most: its cache, one layer of its prompt's cache
    /// while the cache is expanded from prompt rows to lanes, and the larger of its
    /// prompt's prefill (counted whole for every lane: exact for greedy lanes, an upper
    /// bound when lanes share a prompt; its attention scores counted as the CPU's
    /// kernel makes them, an upper bound on a GPU) and its decode buffers.
    fn lane_bytes(&self, prompt_tokens: u64, new_tokens: u64, top_p: bool) -> u64 {
        let cap = prompt_tokens + new_tokens;
        let layers = self.cfg.num_hidden_layers as u64;
        let cache = self.cache_per_lane(cap);
        cache
            + cache / layers.max(1)
            + self
                .prefill_per_prompt(prompt_tokens, AttentionKernel::Materialised)
                .max(self.decode_per_lane(cap, new_tokens, top_p))
    }

    /// Lanes of prompts up to `prompt_tokens` and `new_tokens` new ones whose bytes
    /// ([`Self::lane_bytes`]) fit `budget`; at least 1.
    pub fn lanes_within(
        &self,
        prompt_tokens: u64,
        new_tokens: u64,
        top_p: bool,
        budget: u64,
    ) -> u64 {
        (budget / self.lane_bytes(prompt_tokens, new_tokens, top_p).max(1)).max(1)
    }

    /// The budget of a generation call on a device of `device_memory` bytes when the
    /// plan names none: what is left after the CUDA reserve, the resident parts and the
    /// generation copy.
    pub fn derived_generation_budget(&self, device_memory: u64) -> u64 {
        let (w, t, o) = self.resident();
        device_memory.saturating_sub(CUDA_RESERVE + w + t + o + self.generation_copy(true))
    }

    /// How `g` runs under `budget` bytes (None: one wave): whole prompts per wave,
    /// as `generate` cuts them, from [`lanes_per_wave`]'s count.
    pub fn waves(&self, g: &Generation, budget: Option<u64>) -> Waves {
        let per_prompt = (g.lanes / g.prompts.max(1)).max(1);
        let lanes = budget.map_or(g.lanes, |b| {
            self.lanes_within(g.prompt_tokens, g.new_tokens, true, b)
        });
        let prompts = (lanes / per_prompt).clamp(1, g.prompts.max(1));
        Waves {
            prompts,
            lanes: (prompts * per_prompt).min(g.lanes),
            waves: g.prompts.max(1).div_ceil(prompts),
        }
    }

    /// Transient bytes of one generation call on the CPU, all lanes in one wave.
    pub fn generation(&self, g: &Generation) -> u64 {
        self.generation_on(g, false)
    }

    /// Transient bytes of one generation call (or one wave of it): the generation copy
    /// of the weights, and the lanes' caches, prefill and decode buffers.
    pub fn generation_on(&self, g: &Generation, cuda: bool) -> u64 {
        let cap = g.prompt_tokens + g.new_tokens;
        let (_, _, _, kd, _, _) = self.dims();
        let cache = g.lanes * self.cache_per_lane(cap);
        let prefill =
            g.prompts * self.prefill_per_prompt(g.prompt_tokens, AttentionKernel::on(cuda));
        let decode = g.lanes * self.decode_per_lane(cap, g.new_tokens, g.top_p);
        // The cache is expanded from the prompts' rows to the lanes a layer at a time:
        // one layer of the prompts' rows is there twice.
        let expand = g.prompts.min(g.lanes) * cap * 2 * kd * self.bytes;
        cache + prefill.max(decode) + expand + self.generation_copy(cuda)
    }

    /// One layer's attention scores `[rows, heads, T, T]` at `bytes` per element: the
    /// CPU's fused attention with an explicit mask materialises them (measured).
    fn scores(&self, rows: u64, tokens: u64, bytes: u64) -> u64 {
        rows * self.cfg.num_attention_heads as u64 * tokens * tokens * bytes
    }

    /// Bytes autograd saves per token of one layer in the training forward.
    fn saved_per_token_layer(&self) -> u64 {
        let (h, i, qd, kd, _, _) = self.dims();
        let b = self.bytes;
        let norms = 2 * (4 * h + b * h);
        let qk_norm = if self.cfg.qk_norm {
            (4 + b) * (qd + kd)
        } else {
            0
        };
        let rope = 2 * b * (qd + kd);
        let attention = b * (2 * qd + 2 * kd) + 4 * self.cfg.num_attention_heads as u64;
        let o_input = b * qd;
        let mlp = 4 * b * i;
        let lora = self.lora.map_or(0, |spec| {
            let r = spec.rank as u64;
            spec.targets
                .iter()
                .map(|t| {
                    let input = match t.as_str() {
                        "o_proj" => qd,
                        "down_proj" => i,
                        _ => h,
                    };
                    4 * input + 4 * r
                })
                .sum()
        });
        norms + qk_norm + rope + attention + o_input + mlp + lora
    }

    /// The attention mask of a forward of `rows` x `tokens` under `how`: the f32 bias
    /// and, in bf16, its one cast for every layer; nothing without a mask.
    fn mask(&self, rows: u64, tokens: u64, how: TrainingLayout) -> u64 {
        if !how.mask {
            return 0;
        }
        let cast = if self.bf16() { self.bytes } else { 0 };
        rows * tokens * tokens * (4 + cast)
    }

    /// The loss head's forward over `targets` tokens at once, with gradients: the
    /// selected hidden states, the logits in the compute dtype and in f32 (cast, scaled,
    /// log-softmax and its exponential).
    fn head_forward(&self, targets: u64) -> u64 {
        let (h, _, _, _, _, v) = self.dims();
        targets * (v * (self.bytes + 4 * 4) + h * self.bytes)
    }

    /// The loss head's backward: two f32 `[tokens, vocabulary]` gradients.
    fn head_backward(&self, targets: u64) -> u64 {
        targets * self.cfg.vocab_size as u64 * 4 * 2
    }

    /// Transient bytes of one training forward and backward, everything kept at once
    /// with the CPU's kernel (see [`Self::training_with`]).
    pub fn training(&self, t: &Training) -> u64 {
        self.training_with(t, TrainingLayout::WHOLE)
    }

    /// Transient bytes of one training forward and backward under `how`.
    pub fn training_with(&self, t: &Training, how: TrainingLayout) -> u64 {
        let (h, i, qd, kd, layers, _) = self.dims();
        let b = self.bytes;
        let tokens = t.rows * t.tokens;
        let scores = match how.kernel() {
            AttentionKernel::Materialised => self.scores(t.rows, t.tokens, b),
            AttentionKernel::Streamed => 0,
        };
        // Per layer: the saved activations and the attention probabilities.
        let per_layer = tokens * self.saved_per_token_layer() + scores;
        let chunk = match how.log_prob_chunk {
            0 => t.targets,
            c => c.min(t.targets),
        };
        // The final hidden states in the compute dtype; where the loss head is cut from
        // the layers, they and their leaf's gradient live while it runs.
        let hidden = tokens * h * b;
        if !how.recompute {
            let cut = if how.log_prob_chunk == 0 {
                0
            } else {
                2 * hidden
            };
            return layers * per_layer
                + self.mask(t.rows, t.tokens, how)
                + cut
                + self.head_forward(chunk)
                + self.head_backward(chunk).max(per_layer)
                + self.cast_copy();
        }
        // Recomputed layers: the mask is cast once and the f32 bias dropped (made
        // before anything else of the micro-batch lives); the boundaries stay.
        let mask = if how.mask {
            t.rows * t.tokens * t.tokens * b
        } else {
            0
        };
        let boundaries = (layers + 1) * hidden;
        let forward = tokens * (3 * i * b + 4 * h * 4 + 3 * qd * b + 2 * kd * b)
            + match how.kernel() {
                AttentionKernel::Materialised => self.scores(t.rows, t.tokens, 4),
                AttentionKernel::Streamed => 0,
            };
        // The final norm's saved f32 input and output over the top leaf, the hidden
        // states and their leaf's gradient, and one chunk of the loss head.
        let head = tokens * (4 * h + b * h)
            + 2 * hidden
            + self.head_forward(chunk)
            + self.head_backward(chunk);
        // A layer recomputed: the gradient coming down and its input's, its saved
        // activations and the backward's largest temporary (counted as large).
        let layer_backward = 2 * hidden + 2 * per_layer;
        // Without LoRA in bf16: one layer's cast weights and the embedding's at a time.
        let cast = if self.cast_copy() > 0 {
            let (embed, other): (Vec<_>, Vec<_>) = param_shapes(self.cfg)
                .into_iter()
                .partition(|(n, _)| n.contains("embed_tokens") || n.starts_with("lm_head"));
            let count = |v: &[(String, Vec<i64>)]| -> u64 {
                v.iter()
                    .map(|(_, s)| s.iter().product::<i64>() as u64)
                    .sum()
            };
            (count(&embed) + count(&other) / layers.max(1)) * b
        } else {
            0
        };
        (self.mask(t.rows, t.tokens, how))
            .max(mask + boundaries + forward.max(head).max(layer_backward))
            + cast
    }

    /// Transient bytes of a no-grad scoring forward (the KL reference), all targets at
    /// once with the CPU's kernel.
    pub fn scoring(&self, t: &Training) -> u64 {
        self.scoring_with(t, TrainingLayout::WHOLE)
    }

    /// Transient bytes of a no-grad scoring forward under `how` (chunks and kernel).
    pub fn scoring_with(&self, t: &Training, how: TrainingLayout) -> u64 {
        let (h, i, qd, kd, _, v) = self.dims();
        let b = self.bytes;
        let tokens = t.rows * t.tokens;
        let chunk = match how.log_prob_chunk {
            0 => t.targets,
            c => c.min(t.targets),
        };
        let scores = match how.kernel() {
            AttentionKernel::Materialised => self.scores(t.rows, t.tokens, 4),
            AttentionKernel::Streamed => 0,
        };
        tokens * (3 * i * b + 4 * h * 4 + 3 * qd * b + 2 * kd * b)
            + self.mask(t.rows, t.tokens, how)
            + scores
            + chunk * v * 4 * 3
            + self.cast_copy()
    }

    /// Resident parts and the given phases.
    pub fn breakdown(&self, phases: Vec<(String, u64)>) -> Breakdown {
        let (weights, trainable, optimizer) = self.resident();
        Breakdown {
            weights,
            trainable,
            optimizer,
            phases,
        }
    }
}

/// Lanes a generation wave may hold: how many lanes of a model of shape `cfg` (under
/// `lora`, in a compute dtype of `dtype_bytes` per element) with prompts of up to
/// `prompt_tokens` and up to `new_tokens` new tokens fit `budget_bytes`. A lane counts
/// its key/value cache for prompt + new tokens (every layer), one more layer of it
/// (the cache is expanded from prompt rows to lanes a layer at a time), and the larger
/// of its prompt's prefill temporaries and its decode-step buffers (vocabulary-sized
/// f32 buffers with top-p's sort, attention scores, the bias row, the uniforms); the
/// weights and their generation copy are not in the budget. At least 1, so a budget
/// smaller than one lane still generates, one lane at a time.
///
/// `generate` runs whole prompts per wave: `max(1, lanes / samples per prompt)`
/// prompts. `ledger plan check` cuts its generation phases with the same count.
pub fn lanes_per_wave(
    cfg: &LmConfig,
    lora: Option<&LoraSpec>,
    dtype_bytes: u64,
    prompt_tokens: u64,
    new_tokens: u64,
    budget_bytes: u64,
) -> usize {
    let est = Estimator {
        cfg,
        lora,
        bytes: dtype_bytes,
    };
    est.lanes_within(prompt_tokens, new_tokens, true, budget_bytes) as usize
}

/// The generation budget of a model as a run sets it: `model.generation_memory` (the
/// plan's `[lm] generation_memory`, given to the policy by `Policy::apply_settings`), else
/// on a CUDA device its total memory less the CUDA reserve, the model's resident parts
/// and its generation copy ([`Estimator::derived_generation_budget`]); None on the CPU
/// without a plan budget (one wave), or when the device's memory cannot be read.
pub fn generation_budget(model: &super::lm::model::Model) -> Option<u64> {
    if let Some(b) = model.generation_memory {
        return Some(b);
    }
    let tch::Device::Cuda(index) = model.device() else {
        return None;
    };
    let total = super::cuda_total_memory(index)?;
    let est = Estimator {
        cfg: &model.cfg,
        lora: model.lora.as_ref(),
        bytes: model.dtype.elt_size_in_bytes() as u64,
    };
    Some(est.derived_generation_budget(total))
}

/// `1.50 GiB`, `320.0 MiB`, `12.0 KiB`.
pub fn human(bytes: u64) -> String {
    let b = bytes as f64;
    if b >= (1u64 << 30) as f64 {
        format!("{:.2} GiB", b / (1u64 << 30) as f64)
    } else if b >= (1u64 << 20) as f64 {
        format!("{:.1} MiB", b / (1u64 << 20) as f64)
    } else {
        format!("{:.1} KiB", b / 1024.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Qwen3-0.6B's shape, from the config file the project ships for it.
    fn qwen3_0_6b() -> LmConfig {
        LmConfig::from_hf_json(include_str!(
            "../../ledgers/models/shapes/qwen3-0.6b.config.json"
        ))
        .expect("the shipped Qwen3-0.6B shape parses")
    }

    #[test]
    fn counts_match_the_published_qwen3_0_6b_and_lora_counts_adapters_only() {
        let cfg = qwen3_0_6b();
        let e = Estimator {
            cfg: &cfg,
            lora: None,
            bytes: 2,
        };
        // 0.6B: 596M parameters with the (tied) embedding, 0.44B without.
        assert_eq!(e.parameters(), 596_049_920);
        assert_eq!(e.parameters() - 151_936 * 1024, 440_467_456);
        let spec = LoraSpec {
            rank: 32,
            alpha: 64.0,
            targets: vec!["q_proj".into(), "down_proj".into()],
        };
        let l = Estimator {
            cfg: &cfg,
            lora: Some(&spec),
            bytes: 2,
        };
        // q: 32 x (1024 + 2048); down: 32 x (3072 + 1024); 28 layers.
        assert_eq!(l.trainable(), 28 * 32 * ((1024 + 2048) + (3072 + 1024)));
        let (w, t, o) = l.resident();
        assert_eq!(w, 2 * 596_049_920);
        assert_eq!((t, o), (4 * l.trainable(), 12 * l.trainable()));
        // Halving the micro-batch lowers the training phase; the KV cache grows with lanes.
        let big = l.training(&Training {
            rows: 16,
            tokens: 600,
            targets: 16 * 200,
        });
        let small = l.training(&Training {
            rows: 8,
            tokens: 600,
            targets: 8 * 200,
        });
        // Under LoRA every training term scales with the rows of the micro-batch.
        assert_eq!(2 * small, big);
        let g = |lanes| Generation {
            prompts: 1,
            lanes,
            prompt_tokens: 500,
            new_tokens: 500,
            top_p: false,
        };
        assert!(l.generation(&g(16)) > l.generation(&g(8)));
    }

    /// Qwen3-4B's shape, LoRA rank 32 on every projection, bf16.
    fn qwen3_4b() -> LmConfig {
        LmConfig::from_hf_json(include_str!(
            "../../ledgers/models/shapes/qwen3-4b.config.json"
        ))
        .expect("the shipped Qwen3-4B shape parses")
    }

    fn every_projection() -> LoraSpec {
        LoraSpec {
            rank: 32,
            alpha: 64.0,
            targets: crate::train::lm::model::LORA_MODULES
                .iter()
                .map(|s| s.to_string())
                .collect(),
        }
    }

    #[test]
    fn a_wave_of_lanes_per_wave_lanes_fits_its_budget_and_one_more_does_not() {
        let cfg = qwen3_4b();
        let spec = every_projection();
        let e = Estimator {
            cfg: &cfg,
            lora: Some(&spec),
            bytes: 2,
        };
        // A lane of 226 + 8,192 tokens holds 144 KiB a token of keys and values.
        assert_eq!(e.cache_per_lane(1), 36 * 2 * 8 * 128 * 2);
        let budget = 60u64 << 30;
        let lanes = lanes_per_wave(&cfg, Some(&spec), 2, 226, 8192, budget) as u64;
        assert!((30..60).contains(&lanes), "{lanes}");
        // The wave's transient bytes, without the weights' copy, are within the budget
        // for `lanes` greedy lanes of their own prompts, and over it for one more.
        let wave = |n: u64| {
            e.generation_on(
                &Generation {
                    prompts: n,
                    lanes: n,
                    prompt_tokens: 226,
                    new_tokens: 8192,
                    top_p: true,
                },
                true,
            ) - e.generation_copy(true)
        };
        assert!(wave(lanes) <= budget, "{} > {budget}", wave(lanes));
        assert!(wave(lanes + 1) > budget);
        // A budget below one lane still runs one.
        assert_eq!(lanes_per_wave(&cfg, Some(&spec), 2, 226, 8192, 1), 1);
        // 32 prompts x 8 samples: whole prompts per wave, every prompt once.
        let w = e.waves(
            &Generation {
                prompts: 32,
                lanes: 256,
                prompt_tokens: 226,
                new_tokens: 8192,
                top_p: false,
            },
            Some(budget),
        );
        assert_eq!(w.lanes, w.prompts * 8);
        assert!(w.lanes <= lanes && w.prompts * w.waves >= 32 && (w.waves - 1) * w.prompts < 32);
        // On a GPU the generation copy holds every projection once more (merged).
        assert_eq!(e.generation_copy(false), 0);
        assert!(e.generation_copy(true) > 6 << 30 && e.generation_copy(true) < e.parameters() * 2);
        // Derived from an 80 GiB GPU: what the reserve, weights, adapters, Adam and the
        // copy leave.
        let (w8, t8, o8) = e.resident();
        assert_eq!(
            e.derived_generation_budget(80 << 30),
            (80u64 << 30) - CUDA_RESERVE - w8 - t8 - o8 - e.generation_copy(true)
        );
    }

    #[test]
    fn recomputed_layers_and_chunked_log_probs_hold_less_than_keeping_everything() {
        let cfg = qwen3_4b();
        let spec = every_projection();
        let e = Estimator {
            cfg: &cfg,
            lora: Some(&spec),
            bytes: 2,
        };
        let t = Training {
            rows: 8,
            tokens: 8417,
            targets: 8 * 8192,
        };
        let at = |recompute, log_prob_chunk, attention| {
            e.training_with(
                &t,
                TrainingLayout {
                    recompute,
                    log_prob_chunk,
                    attention,
                    mask: true,
                },
            )
        };
        use AttentionKernel::{Materialised, Streamed};
        // The CPU's kernel keeps every layer's [T, T] probabilities; a streaming one
        // does not.
        assert!(
            at(false, 0, Materialised) > at(false, 0, Streamed) + 36 * e.scores(8, 8417, 2) / 2
        );
        // Chunks cut the loss head's [targets, vocabulary] tensors to one chunk's.
        let head = e.head_forward(t.targets) + e.head_backward(t.targets);
        assert!(at(false, 1024, Streamed) + head / 2 < at(false, 0, Streamed));
        // Recomputed layers keep 37 boundaries instead of 36 layers' activations.
        let recomputed = at(true, 1024, Streamed);
        assert!(recomputed < at(false, 1024, Streamed) / 4, "{recomputed}");
        let boundaries = 37 * 8 * 8417 * 2560 * 2;
        assert!(recomputed > boundaries);
        // The whole-batch CPU model is the calibrated one, unchanged by the layout.
        assert_eq!(e.training(&t), at(false, 0, Materialised));
        // Scoring in chunks holds one chunk's f32 log-softmax, not every target's.
        let s = |c| {
            e.scoring_with(
                &t,
                TrainingLayout {
                    recompute: false,
                    log_prob_chunk: c,
                    attention: Streamed,
                    mask: true,
                },
            )
        };
        assert_eq!(s(0) - s(1024), (t.targets - 1024) * 151_936 * 4 * 3);
        // Causal rows make no mask: its f32 bias and bf16 cast are gone from every
        // layout, and on the CPU the probabilities are not kept either.
        let mask = 8 * 8417 * 8417 * (4 + 2);
        for recompute in [false, true] {
            let masked = at(recompute, 1024, Streamed);
            let causal = e.training_with(
                &t,
                TrainingLayout {
                    recompute,
                    log_prob_chunk: 1024,
                    attention: Streamed,
                    mask: false,
                },
            );
            assert!(
                causal + mask / 3 <= masked,
                "{recompute}: {causal} vs {masked}"
            );
        }
        let causal_cpu = TrainingLayout {
            mask: false,
            ..TrainingLayout::WHOLE
        };
        assert_eq!(
            e.training_with(&t, causal_cpu),
            at(false, 0, Streamed) - mask
        );
    }
}
