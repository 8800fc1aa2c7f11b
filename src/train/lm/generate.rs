//! Batched generation with a key/value cache: each distinct prompt is prefilled once
//! and its cache expanded to the group of samples drawn from it; rows that stop leave
//! the batch. Sampling is temperature plus top-p (nucleus), computed on the model's
//! device from uniform numbers drawn on the host from the seed tree, one stream per
//! lane (prompt, sample), so a lane's tokens do not depend on which other lanes share
//! the batch and a replay on the same machine is bit-exact.
//!
//! Every generated token comes with its log-probability under the sampling
//! distribution *before* top-p truncation, `log_softmax(logits / temperature)`: the
//! quantity GRPO's ratio uses, recomputed by [`super::LmPolicy::token_log_probs`] in
//! the training forward.
//!
//! Two decode loops share the prefill, the sampler and the lanes' random streams
//! ([`DecodeLoop`]): on the CPU the host reads every step's tokens and prunes rows that
//! stopped at once (the Rust decode kernel's loop, unchanged); on a GPU the tokens stay
//! on the device for a window of steps, so the host queues a whole window of kernels
//! without waiting, and only then reads the window, ends rows that stopped and drops
//! them from the batch. A lane's uniforms are drawn up front from its own stream, one
//! per token as the CPU loop draws them, so both loops feed the sampler the same
//! numbers. Lanes run in waves of at most [`Decoding::max_lanes`] (whole prompts per
//! wave), which bounds the key/value cache.
use super::model::{GenerationLayout, KvCache, Model};
use crate::seed::Seed;
use tch::{Device, Kind, Tensor};

pub use crate::plan::trainer::Sampling;

/// One lane's output.
#[derive(Clone, Debug, PartialEq)]
pub struct Generated {
    /// The tokens, including the stop token when one was generated.
    pub tokens: Vec<u32>,
    /// Per token, its log-probability (see the module doc).
    pub logprobs: Vec<f32>,
    /// Ended on a stop token (rather than on the length cap).
    pub stopped: bool,
}

/// Additive f32 attention bias `[B, 1, Tq, Tk]` for left-padded rows: query `i` (at
/// key position `Tk - Tq + i`) sees keys `j <= it` that are not padding; a padding
/// query sees itself only (its output is never used, but stays finite).
///
/// Made on `device` from the pads alone: a training micro-batch's bias is `B Tq Tk`
/// floats (310 MB for 64 rows of 1,100 tokens), which the host used to build and copy
/// at every forward while a GPU waited. The values are comparisons and one fill, the
/// same bits on every device.
pub fn attention_bias(pads: &[i64], tq: i64, tk: i64, device: Device) -> Tensor {
    let b = pads.len() as i64;
    let pad = Tensor::from_slice(pads).to(device).view([b, 1, 1, 1]);
    let j = Tensor::arange(tk, (Kind::Int64, device)).view([1, 1, 1, tk]);
    let i = (Tensor::arange(tq, (Kind::Int64, device)) + (tk - tq)).view([1, 1, tq, 1]);
    let allowed = j
        .le_tensor(&i)
        .logical_and(&j.ge_tensor(&pad).logical_or(&j.eq_tensor(&i)));
    Tensor::zeros([b, 1, tq, tk], (Kind::Float, device))
        .masked_fill(&allowed.logical_not(), f32::MIN as f64)
}

/// Pick one token per row of `logits` `[B, V]` (f32). `uniforms` is None for greedy
/// decoding (argmax, lowest id on ties). Returns the tokens and their log-probs.
pub fn pick(
    logits: &Tensor,
    sampling: &Sampling,
    uniforms: Option<&[f32]>,
) -> (Vec<i64>, Vec<f32>) {
    let u = uniforms.map(|u| Tensor::from_slice(u).to(logits.device()).unsqueeze(-1));
    let (tokens, lp) = pick_on_device(logits, sampling, u.as_ref());
    let tokens = Vec::<i64>::try_from(tokens.to_device(Device::Cpu)).expect("i64 tokens");
    let lp = Vec::<f32>::try_from(lp.to_device(Device::Cpu)).expect("f32 log-probs");
    (tokens, lp)
}

/// [`pick`] without leaving the device: `uniforms` `[B, 1]` (f32, on the logits'
/// device) or None for greedy; returns tokens `[B]` (i64) and log-probs `[B]` (f32).
pub fn pick_on_device(
    logits: &Tensor,
    sampling: &Sampling,
    uniforms: Option<&Tensor>,
) -> (Tensor, Tensor) {
    let (tokens, logp) = match uniforms {
        None => {
            let logp = logits.log_softmax(-1, Kind::Float);
            (logits.argmax(-1, false), logp)
        }
        Some(u) => {
            // Dividing by 1 changes nothing: skip the op (and its [B, V] copy).
            let logp = if sampling.temperature == 1.0 {
                logits.log_softmax(-1, Kind::Float)
            } else {
                (logits / sampling.temperature).log_softmax(-1, Kind::Float)
            };
            let probs = logp.exp();
            let tok = if sampling.top_p >= 1.0 {
                // Inverse CDF over token ids; the last token absorbs rounding.
                let cdf = probs.cumsum(-1, Kind::Float);
                let total = cdf.narrow(-1, cdf.size()[1] - 1, 1);
                let n = cdf
                    .le_tensor(&(u * &total))
                    .sum_dim_intlist(-1, false, Kind::Int64);
                n.clamp_max(probs.size()[1] - 1)
            } else {
                let (sorted, order) = probs.sort_stable(true, -1, true);
                let before = sorted.cumsum(-1, Kind::Float) - &sorted;
                let kept = sorted.masked_fill(&before.ge(sampling.top_p), 0.0);
                let cdf = kept.cumsum(-1, Kind::Float);
                let total = cdf.narrow(-1, cdf.size()[1] - 1, 1);
                let n = cdf
                    .le_tensor(&(u * &total))
                    .sum_dim_intlist(-1, false, Kind::Int64)
                    .clamp_max(probs.size()[1] - 1);
                order.gather(-1, &n.unsqueeze(-1), false).squeeze_dim(-1)
            };
            (tok, logp)
        }
    };
    let lp = logp
        .gather(-1, &tokens.unsqueeze(-1), false)
        .squeeze_dim(-1);
    (tokens, lp)
}

/// How the decode loop and the host meet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeLoop {
    /// The host reads every step's tokens and drops stopped rows at once (the CPU's
    /// loop: a step there is host work anyway).
    PerToken,
    /// The tokens stay on the device for `steps` decode steps; the host then reads the
    /// window in one transfer, ends the rows that stopped or spent their budget inside
    /// it (discarding what they generated after), and drops them from the batch. A
    /// row generates at most `steps - 1` tokens nobody reads.
    Windowed { steps: usize },
    /// One decode step of fixed shapes ([`Model::decode_fixed`]: the cache's first
    /// `span` keys attended under a mask, cache writes and positions at a device-side
    /// index, the sampler on the device), read every `steps` steps like the windowed
    /// loop; rows stay in the batch until every row has ended. The span is the step's
    /// position rounded up to a multiple of `key_span` keys (at most the cache's
    /// capacity), so a step never reads more than `key_span - 1` keys past its own,
    /// where attending over the whole capacity would read all of a long budget's cache
    /// from the first token. With `graphs`, on a GPU with the shim ([`super::graph`]),
    /// the step is captured as a CUDA graph once per span and wave and replayed once a
    /// token, so the host issues one launch a token instead of every kernel; where
    /// graphs are not at hand it says why once and decodes windowed. Without `graphs`
    /// the same step runs eagerly (what a graph's replay is checked against on a GPU,
    /// and the CPU's tests against the other loops).
    Fixed {
        steps: usize,
        graphs: bool,
        key_span: usize,
    },
}

/// Keys a fixed-shape step's span grows by ([`DecodeLoop::Fixed`]): a paper-length
/// budget (8,192 new tokens) takes 9 spans, each captured once a wave.
pub const KEY_SPAN: usize = 1024;

/// Steps a GPU decodes between two reads of its tokens.
pub const GPU_WINDOW: usize = 16;

/// How one `generate` call decodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decoding {
    /// The weights' layout for generation (fused, adapters merged or apart).
    pub layout: GenerationLayout,
    pub host: DecodeLoop,
    /// Lanes a wave holds at most (at least one prompt's samples run together).
    pub max_lanes: usize,
}

impl Decoding {
    /// The loop for a model's device (windowed on a GPU, per token on the CPU), and the
    /// lanes a wave of prompts up to `prompt_tokens` and `new_tokens` new ones may hold
    /// under the model's [`Model::generation_memory`] (unbounded when it has none).
    pub fn for_model(
        model: &Model,
        use_lora: bool,
        prompt_tokens: usize,
        new_tokens: usize,
    ) -> Decoding {
        Decoding {
            layout: GenerationLayout::for_model(model, use_lora),
            host: match model.device() {
                Device::Cpu => DecodeLoop::PerToken,
                _ => DecodeLoop::Windowed { steps: GPU_WINDOW },
            },
            max_lanes: model.generation_memory.map_or(usize::MAX, |budget| {
                lanes_within(model, budget, prompt_tokens, new_tokens)
            }),
        }
    }
}

/// Lanes whose key/value cache (prompt + new tokens, every layer, keys and values in
/// the compute dtype) and per-step f32 vocabulary buffers (logits, log-probs,
/// probabilities, their cumulative sum and the sort's copies: 8 a lane) fit `budget`
/// bytes; at least 1.
pub fn lanes_within(model: &Model, budget: u64, prompt_tokens: usize, new_tokens: usize) -> usize {
    let c = &model.cfg;
    let kv = 2
        * c.num_hidden_layers as u64
        * c.num_key_value_heads as u64
        * c.head_dim as u64
        * model.dtype.elt_size_in_bytes() as u64
        * (prompt_tokens + new_tokens) as u64;
    let vocab = 8 * 4 * c.vocab_size as u64;
    (budget / (kv + vocab).max(1)).max(1) as usize
}

/// Generate `per_prompt` continuations of every prompt (lanes in prompt-major order).
/// `budgets[p]` caps prompt `p`'s new tokens (at most `sampling.max_new_tokens`);
/// generation of a lane ends at a token in `stop`. Greedy when `greedy` (then one
/// sample per prompt is enough; `seed` is unused). Decodes as
/// [`Decoding::for_model`] says.
#[allow(clippy::too_many_arguments)]
pub fn generate(
    model: &Model,
    prompts: &[Vec<u32>],
    per_prompt: usize,
    budgets: &[usize],
    sampling: &Sampling,
    greedy: bool,
    stop: &[u32],
    seed: Seed,
    use_lora: bool,
) -> Vec<Generated> {
    let longest = prompts.iter().map(Vec::len).max().unwrap_or(0);
    let how = Decoding::for_model(model, use_lora, longest, sampling.max_new_tokens);
    generate_as(
        model, prompts, per_prompt, budgets, sampling, greedy, stop, seed, use_lora, how,
    )
}

/// What one wave decodes: its prompts (indices into the call's prompts, each with a
/// budget > 0) and the lanes' outputs and random streams.
struct Wave<'a> {
    prompts: &'a [Vec<u32>],
    live: &'a [usize],
    per_prompt: usize,
    budget: &'a dyn Fn(usize) -> usize,
    sampling: &'a Sampling,
    greedy: bool,
    stop: &'a [u32],
    use_lora: bool,
}

/// [`generate`] with a chosen [`Decoding`].
#[allow(clippy::too_many_arguments)]
pub fn generate_as(
    model: &Model,
    prompts: &[Vec<u32>],
    per_prompt: usize,
    budgets: &[usize],
    sampling: &Sampling,
    greedy: bool,
    stop: &[u32],
    seed: Seed,
    use_lora: bool,
    how: Decoding,
) -> Vec<Generated> {
    let _guard = tch::no_grad_guard();
    let cast = model.inference_copy_as(how.layout);
    let model = cast.as_ref().unwrap_or(model);
    let lanes = prompts.len() * per_prompt;
    let mut out: Vec<Generated> = vec![
        Generated {
            tokens: vec![],
            logprobs: vec![],
            stopped: false
        };
        lanes
    ];
    let budget = |p: usize| budgets[p].min(sampling.max_new_tokens);
    let live: Vec<usize> = (0..prompts.len())
        .filter(|&p| budget(p) > 0 && !prompts[p].is_empty())
        .collect();
    let mut rngs: Vec<_> = (0..lanes)
        .map(|l| seed.child("lane", l as u64).rng())
        .collect();
    // Whole prompts per wave: a prompt is prefilled once and expanded to its lanes.
    let per_wave = (how.max_lanes / per_prompt.max(1)).max(1);
    for wave in live.chunks(per_wave) {
        let w = Wave {
            prompts,
            live: wave,
            per_prompt,
            budget: &budget,
            sampling,
            greedy,
            stop,
            use_lora,
        };
        match how.host {
            DecodeLoop::PerToken => decode_per_token(model, &w, &mut rngs, &mut out),
            DecodeLoop::Windowed { steps } => {
                decode_windowed(model, &w, steps.max(1), &mut rngs, &mut out)
            }
            DecodeLoop::Fixed {
                steps,
                graphs: false,
                key_span,
            } => {
                let every = (steps.max(1), key_span.max(1));
                decode_fixed_shape(model, &w, every, None, &mut rngs, &mut out)
            }
            DecodeLoop::Fixed {
                steps,
                graphs: true,
                key_span,
            } => match super::graph::shim(model.device()) {
                Ok(shim) => {
                    let every = (steps.max(1), key_span.max(1));
                    decode_fixed_shape(model, &w, every, Some(shim), &mut rngs, &mut out)
                }
                Err(why) => {
                    super::graph::say_fallback_once(&why);
                    decode_windowed(model, &w, steps.max(1), &mut rngs, &mut out)
                }
            },
        }
    }
    out
}

/// A wave's prefill: the distinct prompts left-padded to a common length, run once,
/// then expanded to their lanes. Returns the cache (room for every new token), the
/// last position's logits per lane row, the lanes in row order, and each row's left
/// padding.
fn prefill(model: &Model, w: &Wave, fixed: bool) -> (KvCache, Tensor, Vec<usize>, Vec<i64>, i64) {
    let device = model.device();
    let live = w.live;
    let t0 = live.iter().map(|&p| w.prompts[p].len()).max().unwrap_or(0) as i64;
    let pads: Vec<i64> = live
        .iter()
        .map(|&p| t0 - w.prompts[p].len() as i64)
        .collect();
    let mut toks = Vec::with_capacity(live.len() * t0 as usize);
    let mut pos = Vec::with_capacity(live.len() * t0 as usize);
    for (r, &p) in live.iter().enumerate() {
        toks.extend(std::iter::repeat_n(0i64, pads[r] as usize));
        toks.extend(w.prompts[p].iter().map(|&t| t as i64));
        pos.extend((0..t0).map(|j| (j - pads[r]).max(0)));
    }
    let max_new = live.iter().map(|&p| (w.budget)(p)).max().unwrap_or(0) as i64;
    let n = live.len() as i64;
    let mut cache = if fixed {
        KvCache::untransposed(&model.cfg, n, t0 + max_new, model.dtype, device)
    } else {
        KvCache::new(&model.cfg, n, t0 + max_new, model.dtype, device)
    };
    let hid = model.hidden(
        &Tensor::from_slice(&toks).view([n, t0]).to(device),
        &Tensor::from_slice(&pos).view([n, t0]).to(device),
        &attention_bias(&pads, t0, t0, device),
        Some(&mut cache),
        w.use_lora,
    );
    let logits = model.logits(&hid.select(1, t0 - 1));
    // Row r of the running batch is lane rows[r] (lanes in prompt-major order).
    let rows: Vec<usize> = live
        .iter()
        .flat_map(|&p| p * w.per_prompt..(p + 1) * w.per_prompt)
        .collect();
    let expand: Vec<i64> = (0..live.len() as i64)
        .flat_map(|r| std::iter::repeat_n(r, w.per_prompt))
        .collect();
    let row_pads: Vec<i64> = expand.iter().map(|&r| pads[r as usize]).collect();
    let expand = Tensor::from_slice(&expand).to(device);
    cache.select(&expand);
    (
        cache,
        logits.index_select(0, &expand),
        rows,
        row_pads,
        t0 + max_new,
    )
}

/// The CPU's loop: every step's tokens to the host, stopped rows dropped at once.
fn decode_per_token(model: &Model, w: &Wave, rngs: &mut [impl rand::Rng], out: &mut [Generated]) {
    let device = model.device();
    let lane_prompt = |l: usize| l / w.per_prompt;
    let (mut cache, mut logits, mut rows, mut row_pads, capacity) = prefill(model, w, false);
    // The decode steps' attention bias, made once: a step's query sits at the last key,
    // so its row of `attention_bias` masks exactly the row's left padding, and each
    // step reads the first `len + 1` keys of this [B, 1, 1, capacity] bias.
    let mut bias = attention_bias(&row_pads, 1, capacity, device);
    loop {
        let uniforms: Option<Vec<f32>> =
            (!w.greedy).then(|| rows.iter().map(|&l| rngs[l].random::<f32>()).collect());
        let (next, lps) = pick(&logits, w.sampling, uniforms.as_deref());
        let mut keep = Vec::with_capacity(rows.len());
        for (r, &l) in rows.iter().enumerate() {
            let cap = (w.budget)(lane_prompt(l));
            if extend_lane(&mut out[l], &next[r..=r], &lps[r..=r], w.stop, cap) {
                keep.push(r);
            }
        }
        if keep.is_empty() {
            break;
        }
        let feed: Vec<i64> = keep.iter().map(|&r| next[r]).collect();
        if keep.len() < rows.len() {
            let idx =
                Tensor::from_slice(&keep.iter().map(|&r| r as i64).collect::<Vec<_>>()).to(device);
            cache.select(&idx);
            bias = bias.index_select(0, &idx);
            rows = keep.iter().map(|&r| rows[r]).collect();
            row_pads = keep.iter().map(|&r| row_pads[r]).collect();
        }
        let b = rows.len() as i64;
        let len = cache.len;
        let pos: Vec<i64> = row_pads.iter().map(|&p| len - p).collect();
        let hid = model.hidden(
            &Tensor::from_slice(&feed).view([b, 1]).to(device),
            &Tensor::from_slice(&pos).view([b, 1]).to(device),
            &bias.narrow(3, 0, len + 1),
            Some(&mut cache),
            w.use_lora,
        );
        logits = model.logits(&hid.select(1, 0));
    }
}

/// The GPU's loop: `window` steps queued without reading anything back, then one read
/// of the window's tokens and log-probs, which ends rows and drops them from the batch
/// ([`DecodeLoop::Windowed`]). Tokens, positions and uniforms stay on the device.
fn decode_windowed(
    model: &Model,
    w: &Wave,
    window: usize,
    rngs: &mut [impl rand::Rng],
    out: &mut [Generated],
) {
    let device = model.device();
    let lane_prompt = |l: usize| l / w.per_prompt;
    let (mut cache, mut logits, mut rows, row_pads, capacity) = prefill(model, w, false);
    let max_new = w.live.iter().map(|&p| (w.budget)(p)).max().unwrap_or(0);
    let mut bias = attention_bias(&row_pads, 1, capacity, device);
    // A row's position is `len - pad`: the negated pads, plus `len` at each step.
    let mut neg_pads =
        Tensor::from_slice(&row_pads.iter().map(|p| -p).collect::<Vec<_>>()).to(device);
    let mut uniforms = lane_uniforms(w, &rows, max_new, rngs, device);
    let (mut toks, mut lps): (Vec<Tensor>, Vec<Tensor>) = (vec![], vec![]);
    let mut emitted = 0usize;
    loop {
        let u = uniforms.as_ref().map(|u| u.narrow(1, emitted as i64, 1));
        let (tok, lp) = pick_on_device(&logits, w.sampling, u.as_ref());
        toks.push(tok);
        lps.push(lp);
        emitted += 1;
        // The token each row feeds the next step: the one just picked, unless the
        // window ends here and rows are dropped (see below).
        let mut feed = toks.last().expect("just picked").shallow_clone();
        if toks.len() == window || emitted == max_new {
            // The window, read once: each row's tokens up to its stop or its budget.
            let t =
                Vec::<i64>::try_from(Tensor::stack(&toks, 1).reshape([-1]).to_device(Device::Cpu))
                    .expect("i64 tokens");
            let p =
                Vec::<f32>::try_from(Tensor::stack(&lps, 1).reshape([-1]).to_device(Device::Cpu))
                    .expect("f32 log-probs");
            let span = toks.len();
            toks.clear();
            lps.clear();
            let mut keep = Vec::with_capacity(rows.len());
            for (r, &l) in rows.iter().enumerate() {
                let row = r * span..(r + 1) * span;
                let cap = (w.budget)(lane_prompt(l));
                if extend_lane(&mut out[l], &t[row.clone()], &p[row], w.stop, cap) {
                    keep.push(r);
                }
            }
            if keep.is_empty() {
                break;
            }
            if keep.len() < rows.len() {
                let idx = Tensor::from_slice(&keep.iter().map(|&r| r as i64).collect::<Vec<_>>())
                    .to(device);
                cache.select(&idx);
                bias = bias.index_select(0, &idx);
                neg_pads = neg_pads.index_select(0, &idx);
                uniforms = uniforms.map(|u| u.index_select(0, &idx));
                rows = keep.iter().map(|&r| rows[r]).collect();
            }
            // The window's last tokens, from the host's copy: the device's tensor
            // still has the dropped rows.
            let last: Vec<i64> = keep.iter().map(|&r| t[r * span + span - 1]).collect();
            feed = Tensor::from_slice(&last).to(device);
        }
        let b = rows.len() as i64;
        let len = cache.len;
        let hid = model.hidden(
            &feed.view([b, 1]),
            &(&neg_pads + len).view([b, 1]),
            &bias.narrow(3, 0, len + 1),
            Some(&mut cache),
            w.use_lora,
        );
        logits = model.logits(&hid.select(1, 0));
    }
}

/// Append one lane's window of `tokens` and their `logprobs` to `g`, up to a token in
/// `stop` (kept, and the lane marked stopped) or the lane's budget `cap`; what it
/// generated after either is discarded. Returns whether the lane is still open.
fn extend_lane(
    g: &mut Generated,
    tokens: &[i64],
    logprobs: &[f32],
    stop: &[u32],
    cap: usize,
) -> bool {
    for (&tok, &lp) in tokens.iter().zip(logprobs) {
        let tok = tok as u32;
        g.tokens.push(tok);
        g.logprobs.push(lp);
        if stop.contains(&tok) {
            g.stopped = true;
            return false;
        }
        if g.tokens.len() >= cap {
            return false;
        }
    }
    true
}

/// Every lane's uniforms for its whole budget, in the order the CPU loop draws them
/// (one per token it emits), `[B, max_new]` on `device` with zeros past a lane's
/// budget; None when decoding greedily.
fn lane_uniforms(
    w: &Wave,
    rows: &[usize],
    max_new: usize,
    rngs: &mut [impl rand::Rng],
    device: Device,
) -> Option<Tensor> {
    (!w.greedy).then(|| {
        let mut u = vec![0f32; rows.len() * max_new];
        for (r, &l) in rows.iter().enumerate() {
            for k in 0..(w.budget)(l / w.per_prompt) {
                u[r * max_new + k] = rngs[l].random::<f32>();
            }
        }
        Tensor::from_slice(&u)
            .view([rows.len() as i64, max_new as i64])
            .to(device)
    })
}

/// What one fixed-shape decode step reads and writes ([`DecodeLoop::Fixed`]): made
/// before the first step, alive as long as a graph captured from it.
struct FixedStep {
    /// The logits the next pick reads, `[B, V]` f32: the prefill's, then each step's.
    logits: Tensor,
    /// The token each step feeds the model, `[B, 1]`.
    feed: Tensor,
    /// Each row's negated left padding, `[B, 1]`: a row's position is `at - pad`.
    neg_pads: Tensor,
    /// The padding mask of a query that sees the whole cache, `[B, 1, 1, capacity]`
    /// (a step narrows it to its span).
    pad_bias: Tensor,
    /// Key indices `0..capacity`, `[1, 1, 1, capacity]`.
    keys: Tensor,
    /// The cache index this step writes, `[1]` (the cache's length before it).
    at: Tensor,
    /// The prefilled length: `at - prompt_len` tokens have been emitted, the column
    /// this step's pick fills.
    prompt_len: i64,
    uniforms: Option<Tensor>,
    /// Every row's tokens and log-probs, `[B, max_new]`, filled a column a step.
    tokens: Tensor,
    logprobs: Tensor,
    cache: KvCache,
}

impl FixedStep {
    /// Pick each row's next token from `logits`, record it, and run the model on it
    /// attending over the cache's first `span` keys: tensor ops only, the same shapes
    /// every step of a span, nothing read back.
    fn run(&self, model: &Model, w: &Wave, span: i64) {
        let column = &self.at - self.prompt_len;
        let u = self.uniforms.as_ref().map(|u| u.index_select(1, &column));
        let (tok, lp) = pick_on_device(&self.logits, w.sampling, u.as_ref());
        let _ = self
            .tokens
            .shallow_clone()
            .index_copy_(1, &column, &tok.unsqueeze(1));
        let _ = self
            .logprobs
            .shallow_clone()
            .index_copy_(1, &column, &lp.unsqueeze(1));
        self.feed.shallow_clone().copy_(&tok.unsqueeze(1));
        let mask = self.pad_bias.narrow(3, 0, span).masked_fill(
            &self.keys.narrow(3, 0, span).gt_tensor(&self.at),
            f32::MIN as f64,
        );
        let positions = &self.neg_pads + &self.at;
        let hid = model.decode_fixed(
            &self.feed,
            &positions,
            &mask,
            &self.cache,
            &self.at,
            w.use_lora,
        );
        self.logits
            .shallow_clone()
            .copy_(&model.logits(&hid.select(1, 0)));
        let _ = self.at.shallow_clone().g_add_scalar_(1);
    }
}

/// The fixed-shape loop ([`DecodeLoop::Fixed`]), reading the tokens every `window`
/// steps and growing the keys attended by `key_span`. With `shim` (a GPU), the first
/// step of each span runs eagerly, which also initialises what libtorch sets up lazily
/// for its shapes and a capture must not see; the next is captured and every step of
/// the span from then on replays it. Spans only grow, so one graph lives at a time.
fn decode_fixed_shape(
    model: &Model,
    w: &Wave,
    (window, key_span): (usize, usize),
    shim: Option<&'static super::graph::Shim>,
    rngs: &mut [impl rand::Rng],
    out: &mut [Generated],
) {
    let device = model.device();
    let (cache, logits, rows, row_pads, capacity) = prefill(model, w, true);
    let max_new = w.live.iter().map(|&p| (w.budget)(p)).max().unwrap_or(0);
    let b = rows.len() as i64;
    let neg_pads: Vec<i64> = row_pads.iter().map(|p| -p).collect();
    let s = FixedStep {
        logits,
        feed: Tensor::zeros([b, 1], (Kind::Int64, device)),
        neg_pads: Tensor::from_slice(&neg_pads).to(device).view([b, 1]),
        pad_bias: attention_bias(&row_pads, 1, capacity, device),
        keys: Tensor::arange(capacity, (Kind::Int64, device)).view([1, 1, 1, capacity]),
        at: Tensor::from_slice(&[cache.len]).to(device),
        prompt_len: cache.len,
        uniforms: lane_uniforms(w, &rows, max_new, rngs, device),
        tokens: Tensor::zeros([b, max_new as i64], (Kind::Int64, device)),
        logprobs: Tensor::zeros([b, max_new as i64], (Kind::Float, device)),
        cache,
    };
    let index = match device {
        Device::Cuda(i) => i,
        _ => 0,
    };
    // The keys step `emitted` attends: its position rounded up to the span, at most
    // the capacity (the host knows `at` without reading it: prompt + steps run).
    let span_of = |emitted: usize| {
        let keys = s.prompt_len as usize + emitted + 1;
        (keys.div_ceil(key_span) * key_span).min(capacity as usize) as i64
    };
    // Declared after `s`, so it drops first: a graph never outlives the buffers it
    // replays on. The span it replays is beside it.
    let mut graph: Option<(i64, super::graph::Graph)> = None;
    let mut uncaptured = false;
    let mut open = vec![true; rows.len()];
    let (mut emitted, mut read) = (0usize, 0usize);
    while emitted < max_new {
        let span = span_of(emitted);
        match &graph {
            Some((at, g)) if *at == span => g
                .replay()
                .unwrap_or_else(|e| panic!("decode: the captured step's {e}")),
            _ => {
                // A new span: its first step eagerly (a smaller span's graph is never
                // replayed again).
                graph = None;
                s.run(model, w, span);
            }
        }
        emitted += 1;
        let capture = emitted < max_new && span_of(emitted) == span && !uncaptured;
        if let (Some(shim), None, true) = (shim, &graph, capture) {
            match super::graph::Graph::capture(shim, index, || s.run(model, w, span)) {
                Ok(g) => graph = Some((span, g)),
                Err(why) => {
                    eprintln!("decode: {why}; this wave decodes without a graph");
                    uncaptured = true;
                }
            }
        }
        if emitted - read == window || emitted == max_new {
            let span = emitted - read;
            // The window's columns, row-major, on the host.
            let window_of = |x: &Tensor| {
                x.narrow(1, read as i64, span as i64)
                    .reshape([-1])
                    .to_device(Device::Cpu)
            };
            let t = Vec::<i64>::try_from(window_of(&s.tokens)).expect("i64 tokens");
            let p = Vec::<f32>::try_from(window_of(&s.logprobs)).expect("f32 log-probs");
            for (r, &l) in rows.iter().enumerate() {
                if open[r] {
                    let row = r * span..(r + 1) * span;
                    let cap = (w.budget)(l / w.per_prompt);
                    open[r] = extend_lane(&mut out[l], &t[row.clone()], &p[row], w.stop, cap);
                }
            }
            read = emitted;
            if !open.contains(&true) {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::lm::model::LoraSpec;
    use crate::train::lm::LmConfig;

    /// A random model (vocabulary 64, grouped-query heads), f32 on the CPU, with
    /// adapters whose B is not zero when `lora`, so a merge that dropped them would show.
    fn model(lora: bool) -> Model {
        let cfg = LmConfig::from_hf_json(
            r#"{"model_type":"qwen3","vocab_size":64,"hidden_size":48,"intermediate_size":80,
            "num_hidden_layers":2,"num_attention_heads":6,"num_key_value_heads":2,"head_dim":8}"#,
        )
        .unwrap();
        let w = Model::random_weights(&cfg, Seed::root(3));
        let spec = lora.then(|| LoraSpec {
            rank: 4,
            alpha: 8.0,
            targets: crate::train::lm::model::LORA_MODULES
                .iter()
                .map(|s| s.to_string())
                .collect(),
        });
        let m = Model::from_weights(cfg, w, Device::Cpu, spec, Seed::root(4)).unwrap();
        if lora {
            tch::no_grad(|| {
                tch::manual_seed(5);
                for (name, mut t) in m.vs.variables() {
                    if name.contains("lora_B") {
                        t.copy_(&(Tensor::randn_like(&t) * 0.05));
                    }
                }
            });
        }
        m
    }

    fn prompts() -> Vec<Vec<u32>> {
        vec![
            vec![1, 2, 3, 4, 5],
            vec![7, 8],
            vec![9, 10, 11, 12, 13, 14, 15],
            vec![20],
        ]
    }

    fn run(m: &Model, how: Decoding, greedy: bool, stop: &[u32], use_lora: bool) -> Vec<Generated> {
        let s = Sampling {
            temperature: 0.8,
            top_p: 0.95,
            max_new_tokens: 30,
        };
        generate_as(
            m,
            &prompts(),
            3,
            &[30, 7, 19, 0],
            &s,
            greedy,
            stop,
            Seed::root(9),
            use_lora,
            how,
        )
    }

    /// The stop tokens that end many lanes early: the three most frequent tokens of a
    /// run without stops.
    fn frequent_tokens(gens: &[Generated]) -> Vec<u32> {
        let mut count = std::collections::BTreeMap::<u32, usize>::new();
        for g in gens {
            for &t in &g.tokens {
                *count.entry(t).or_default() += 1;
            }
        }
        let mut by: Vec<(usize, u32)> = count.into_iter().map(|(t, n)| (n, t)).collect();
        by.sort_unstable_by(|a, b| b.cmp(a));
        by.iter().take(3).map(|&(_, t)| t).collect()
    }

    fn assert_same(a: &[Generated], b: &[Generated], tolerance: f32, what: &str) {
        assert_eq!(a.len(), b.len());
        for (l, (x, y)) in a.iter().zip(b).enumerate() {
            assert_eq!(x.tokens, y.tokens, "{what}: lane {l}'s tokens");
            assert_eq!(x.stopped, y.stopped, "{what}: lane {l} stopped");
            let d = x
                .logprobs
                .iter()
                .zip(&y.logprobs)
                .map(|(p, q)| (p - q).abs())
                .fold(0.0, f32::max);
            assert!(d < tolerance, "{what}: lane {l}: log-probs differ by {d}");
        }
    }

    /// The GPU's windowed loop, the fixed-shape step a CUDA graph captures (the whole
    /// cache attended under a mask, writes at a device-side index, rows kept until all
    /// have ended), and waves of one prompt, give every lane the tokens and log-probs of
    /// the CPU's per-token loop, sampled and greedy, with stop tokens that end lanes at
    /// different steps inside a window, budgets that end others, and a prompt with no
    /// budget. Asked for graphs on the CPU, the fixed loop decodes windowed: the same.
    #[test]
    fn every_loop_and_wave_gives_the_per_token_loops_lanes() {
        let m = model(false);
        let per_token = Decoding {
            host: DecodeLoop::PerToken,
            max_lanes: usize::MAX,
            ..Decoding::for_model(&m, false, 0, 0)
        };
        let mut loops = vec![];
        for steps in [1, 3, 16] {
            for max_lanes in [usize::MAX, 3, 5] {
                loops.push((DecodeLoop::Windowed { steps }, max_lanes));
            }
        }
        // Key spans of 4 and 9 grow the keys attended every few steps (prompts of up to
        // 7 tokens and 30 new ones); KEY_SPAN attends over the whole (short) capacity.
        for (steps, max_lanes, graphs, key_span) in [
            (1, usize::MAX, false, KEY_SPAN),
            (3, 5, false, 4),
            (16, usize::MAX, false, 9),
            (5, 3, false, 1),
            (4, 3, true, 4),
        ] {
            loops.push((
                DecodeLoop::Fixed {
                    steps,
                    graphs,
                    key_span,
                },
                max_lanes,
            ));
        }
        for greedy in [false, true] {
            let stop = frequent_tokens(&run(&m, per_token, greedy, &[], false));
            let want = run(&m, per_token, greedy, &stop, false);
            assert!(
                want.iter().filter(|g| g.stopped).count() >= 2,
                "the stop tokens end some lanes early"
            );
            assert!(want[9..].iter().all(|g| g.tokens.is_empty()), "no budget");
            for &(host, max_lanes) in &loops {
                let how = Decoding {
                    host,
                    max_lanes,
                    ..per_token
                };
                let got = run(&m, how, greedy, &stop, false);
                assert_same(&want, &got, 1e-5, &format!("{how:?} greedy={greedy}"));
            }
        }
    }

    /// The fixed-shape step under LoRA: with the adapters apart (unfused weights) and
    /// merged into fused ones (a GPU's layout), it samples what the per-token loop does.
    #[test]
    fn the_fixed_shape_step_applies_adapters_apart_and_merged() {
        let m = model(true);
        let apart = Decoding::for_model(&m, true, 0, 0);
        let want = run(&m, apart, false, &[], true);
        for layout in [apart.layout, GenerationLayout::gpu(true)] {
            let how = Decoding {
                layout,
                host: DecodeLoop::Fixed {
                    steps: 8,
                    graphs: false,
                    key_span: 6,
                },
                ..apart
            };
            assert_same(
                &want,
                &run(&m, how, false, &[], true),
                1e-4,
                &format!("{layout:?}"),
            );
        }
    }

    /// A GPU lays generation out with adapters merged into fused weights; on the CPU
    /// (where the same call keeps them apart) that layout gives the same tokens and,
    /// in f32, the same log-probs to rounding.
    #[test]
    fn merged_adapters_generate_what_adapters_apart_generate() {
        let m = model(true);
        let gpu = m
            .inference_copy_as(GenerationLayout::gpu(true))
            .expect("a merged copy");
        assert!(gpu.lora.is_none(), "the adapters are merged, not applied");
        assert!(gpu.is_fused());
        let cpu = Decoding::for_model(&m, true, 0, 0);
        assert!(
            !cpu.layout.merge && !cpu.layout.fuse,
            "the CPU keeps adapters apart"
        );
        let apart = run(&m, cpu, false, &[], true);
        let merged = run(
            &m,
            Decoding {
                layout: GenerationLayout::gpu(true),
                ..cpu
            },
            false,
            &[],
            true,
        );
        assert_same(&apart, &merged, 1e-4, "merged");
        // And the adapters matter: the base alone samples something else.
        let base = run(&m, Decoding::for_model(&m, false, 0, 0), false, &[], false);
        assert_ne!(
            apart.iter().map(|g| &g.tokens).collect::<Vec<_>>(),
            base.iter().map(|g| &g.tokens).collect::<Vec<_>>()
        );
    }
}
