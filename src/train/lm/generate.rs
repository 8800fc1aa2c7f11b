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
use super::model::{KvCache, Model};
use crate::seed::Seed;
use rand::Rng as _;
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
pub fn attention_bias(pads: &[i64], tq: i64, tk: i64, device: Device) -> Tensor {
    let b = pads.len() as i64;
    let pad = Tensor::from_slice(pads).view([b, 1, 1, 1]);
    let j = Tensor::arange(tk, (Kind::Int64, Device::Cpu)).view([1, 1, 1, tk]);
    let i = (Tensor::arange(tq, (Kind::Int64, Device::Cpu)) + (tk - tq)).view([1, 1, tq, 1]);
    let allowed = j
        .le_tensor(&i)
        .logical_and(&j.ge_tensor(&pad).logical_or(&j.eq_tensor(&i)));
    Tensor::zeros([b, 1, tq, tk], (Kind::Float, Device::Cpu))
        .masked_fill(&allowed.logical_not(), f32::MIN as f64)
        .to(device)
}

/// Pick one token per row of `logits` `[B, V]` (f32). `uniforms` is None for greedy
/// decoding (argmax, lowest id on ties). Returns the tokens and their log-probs.
pub fn pick(
    logits: &Tensor,
    sampling: &Sampling,
    uniforms: Option<&[f32]>,
) -> (Vec<i64>, Vec<f32>) {
    let device = logits.device();
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
            let u = Tensor::from_slice(u).to(device).unsqueeze(-1);
            let tok = if sampling.top_p >= 1.0 {
                // Inverse CDF over token ids; the last token absorbs rounding.
                let cdf = probs.cumsum(-1, Kind::Float);
                let total = cdf.narrow(-1, cdf.size()[1] - 1, 1);
                let n = cdf
                    .le_tensor(&(&u * &total))
                    .sum_dim_intlist(-1, false, Kind::Int64);
                n.clamp_max(probs.size()[1] - 1)
            } else {
                let (sorted, order) = probs.sort_stable(true, -1, true);
                let before = sorted.cumsum(-1, Kind::Float) - &sorted;
                let kept = sorted.masked_fill(&before.ge(sampling.top_p), 0.0);
                let cdf = kept.cumsum(-1, Kind::Float);
                let total = cdf.narrow(-1, cdf.size()[1] - 1, 1);
                let n = cdf
                    .le_tensor(&(&u * &total))
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
    let tokens = Vec::<i64>::try_from(tokens.to_device(Device::Cpu)).expect("i64 tokens");
    let lp = Vec::<f32>::try_from(lp.to_device(Device::Cpu)).expect("f32 log-probs");
    (tokens, lp)
}

/// Generate `per_prompt` continuations of every prompt (lanes in prompt-major order).
/// `budgets[p]` caps prompt `p`'s new tokens (at most `sampling.max_new_tokens`);
/// generation of a lane ends at a token in `stop`. Greedy when `greedy` (then one
/// sample per prompt is enough; `seed` is unused).
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
    let _guard = tch::no_grad_guard();
    let cast = model.inference_copy(use_lora);
    let model = cast.as_ref().unwrap_or(model);
    let device = model.device();
    let lanes: Vec<usize> = (0..prompts.len())
        .flat_map(|p| std::iter::repeat_n(p, per_prompt))
        .collect();
    let mut out: Vec<Generated> = vec![
        Generated {
            tokens: vec![],
            logprobs: vec![],
            stopped: false
        };
        lanes.len()
    ];
    let budget = |p: usize| budgets[p].min(sampling.max_new_tokens);
    let live: Vec<usize> = (0..prompts.len())
        .filter(|&p| budget(p) > 0 && !prompts[p].is_empty())
        .collect();
    if live.is_empty() {
        return out;
    }
    let mut rngs: Vec<_> = (0..lanes.len())
        .map(|l| seed.child("lane", l as u64).rng())
        .collect();

    // 1. Prefill the distinct prompts, left-padded to a common length.
    let t0 = live.iter().map(|&p| prompts[p].len()).max().unwrap_or(0) as i64;
    let pads: Vec<i64> = live.iter().map(|&p| t0 - prompts[p].len() as i64).collect();
    let mut toks = Vec::with_capacity(live.len() * t0 as usize);
    let mut pos = Vec::with_capacity(live.len() * t0 as usize);
    for (r, &p) in live.iter().enumerate() {
        toks.extend(std::iter::repeat_n(0i64, pads[r] as usize));
        toks.extend(prompts[p].iter().map(|&t| t as i64));
        pos.extend((0..t0).map(|j| (j - pads[r]).max(0)));
    }
    let max_new = live.iter().map(|&p| budget(p)).max().unwrap_or(0) as i64;
    let n = live.len() as i64;
    let mut cache = KvCache::new(&model.cfg, n, t0 + max_new, model.dtype, device);
    let hid = model.hidden(
        &Tensor::from_slice(&toks).view([n, t0]).to(device),
        &Tensor::from_slice(&pos).view([n, t0]).to(device),
        &attention_bias(&pads, t0, t0, device),
        Some(&mut cache),
        use_lora,
    );
    let mut logits = model.logits(&hid.select(1, t0 - 1));

    // 2. Expand each prompt to its lanes: row r of the running batch is lane rows[r].
    let mut rows: Vec<usize> = (0..lanes.len())
        .filter(|&l| live.contains(&lanes[l]))
        .collect();
    let expand: Vec<i64> = rows
        .iter()
        .map(|&l| live.iter().position(|&p| p == lanes[l]).expect("live") as i64)
        .collect();
    let expand = Tensor::from_slice(&expand).to(device);
    cache.select(&expand);
    logits = logits.index_select(0, &expand);
    let mut row_pads: Vec<i64> = rows
        .iter()
        .map(|&l| pads[live.iter().position(|&p| p == lanes[l]).expect("live")])
        .collect();
    // The decode steps' attention bias, made once: a step's query sits at the last key,
    // so its row of `attention_bias` masks exactly the row's left padding, and each
    // step reads the first `len + 1` keys of this [B, 1, 1, capacity] bias.
    let mut bias = attention_bias(&row_pads, 1, t0 + max_new, device);

    // 3. Decode.
    loop {
        let uniforms: Option<Vec<f32>> =
            (!greedy).then(|| rows.iter().map(|&l| rngs[l].random::<f32>()).collect());
        let (next, lps) = pick(&logits, sampling, uniforms.as_deref());
        let mut keep = Vec::with_capacity(rows.len());
        for (r, &l) in rows.iter().enumerate() {
            let tok = next[r] as u32;
            let g = &mut out[l];
            g.tokens.push(tok);
            g.logprobs.push(lps[r]);
            if stop.contains(&tok) {
                g.stopped = true;
            } else if g.tokens.len() < budget(lanes[l]) {
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
            use_lora,
        );
        logits = model.logits(&hid.select(1, 0));
    }
    out
}
