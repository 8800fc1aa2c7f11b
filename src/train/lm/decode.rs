//! One decode step of the model on the CPU in f32, with its elementwise work and its
//! attention written out in Rust around libtorch's matrix products.
//!
//! Why: at the batch sizes generation runs (64 to 128 rows of one token), a step of
//! the shipped base planner is about 30 small torch operations per layer besides its
//! four matrix products, each paying dispatch, allocation and a pass over memory for
//! a few thousand floats; and its attention is two batched products of `B x Hkv` tiny
//! matrices (3 x 32 times 32 x Tk) for which MKL pays its per-product overhead `B x Hkv`
//! times (31% of a step). Here, per layer, the projections stay four products
//! ([`super::model`]'s fused weights), and everything between them is five passes:
//! residual add and norm ([`add_rms_norm`]), q/k norm, rotation and the cache write
//! ([`qk_rope_cache`]), attention ([`attention`]), and the gated activation
//! ([`silu_mul`]). `cargo bench --bench trainer` has the figures.
//!
//! The arithmetic is the model's (transformers' eager order: norms in f32 with the
//! weight applied last, rotate-half RoPE, softmax attention, SwiGLU) and agrees with
//! the torch path to float rounding (`decode_step_matches_torch` in `model.rs`), not
//! bit for bit: sums run in their own fixed order, and the exponential is a polynomial
//! ([`exp`]).
//!
//! Layout: keys are cached transposed, `[B, Hkv, D, capacity]`, so a query's scores are
//! a sum over `D` of rows of keys scaled by one query element (vectorised along the
//! keys); values are `[B, Hkv, capacity, D]` and the output is a sum over keys of value
//! rows (vectorised along `D`).
//!
//! Determinism: every sum runs in one fixed order, and multiply-adds are
//! `f32::mul_add`, fused and rounded once on every machine (an FMA instruction where
//! the CPU has one, the correctly rounded library call where it has not), so the AVX2
//! build of the attention loop computes exactly what the baseline build computes
//! (`avx2_and_baseline_agree`). Rows are independent, so splitting them over threads
//! changes nothing either.
use tch::{Device, Kind, Tensor};

/// Shapes of one decode step's attention.
#[derive(Clone, Copy, Debug)]
struct Shape {
    /// Rows of the batch.
    b: usize,
    /// Query heads, key/value heads, head dim.
    h: usize,
    kvh: usize,
    d: usize,
    /// Cache capacity (the stride of a transposed key row) and positions in use (the
    /// length of a bias row).
    cap: usize,
    tk: usize,
    scale: f32,
}

/// Scores below this exponent are masked positions (their additive bias is
/// `f32::MIN`) or underflow anyway: their weight is exactly 0.
const EXP_LOW: f32 = -87.0;

/// Above this, `e^x` overflows f32.
const EXP_HIGH: f32 = 88.0;

/// `e^x`: `x = n ln 2 + r` with `|r| <= ln 2 / 2`, `e^r` by the minimax polynomial of
/// Cephes' `expf` (its published coefficients), and `2^n` put into the exponent bits.
/// 0 below [`EXP_LOW`]; inputs above [`EXP_HIGH`] are clamped there (silu only asks for
/// `e^-x`, where that is `x / inf` against `x / 1.6e38`, both 0 to f32 precision).
#[inline(always)]
fn exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    // ln 2 split in two so `n * LN2_HI` is exact.
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // Adding 1.5 * 2^23 rounds `x log2 e` to the nearest integer n (|n| < 2^22) and
    // leaves n in the low bits of the sum: its bits minus those of 1.5 * 2^23 are n.
    // Integer arithmetic on the bits, and selects rather than `max`/`as`, keep the
    // loop vectorisable (`f32::max` carries NaN rules, `as i32` saturation).
    const ROUND: f32 = 12_582_912.0;
    let xc = if x > EXP_LOW { x } else { EXP_LOW };
    let xc = if xc < EXP_HIGH { xc } else { EXP_HIGH };
    let shifted = xc * LOG2E + ROUND;
    let n = shifted - ROUND;
    let r = (xc - n * LN2_HI) - n * LN2_LO;
    let mut p = 1.987_569_2e-4_f32;
    p = p.mul_add(r, 1.398_2e-3);
    p = p.mul_add(r, 8.333_452e-3);
    p = p.mul_add(r, 4.166_579_6e-2);
    p = p.mul_add(r, 1.666_666_5e-1);
    p = p.mul_add(r, 0.5); // Cephes' 5.0000001e-1, which rounds to 0.5 in f32
    let e = p.mul_add(r * r, r) + 1.0;
    let n_bits = shifted.to_bits().wrapping_sub(ROUND.to_bits());
    let two_n = f32::from_bits(n_bits.wrapping_add(127) << 23);
    if x < EXP_LOW {
        0.0
    } else {
        e * two_n
    }
}

/// Lanes a block of the inner loops works on: four AVX registers (eight with SSE2).
const BLOCK: usize = 32;

/// `acc[l] += w * x[l]` over a block of `N` lanes (a fixed size, so the compiler keeps
/// `acc` in vector registers).
#[inline(always)]
fn axpy<const N: usize>(acc: &mut [f32; N], w: f32, x: &[f32]) {
    let x: &[f32; N] = x[..N].try_into().expect("a full block");
    for l in 0..N {
        acc[l] = w.mul_add(x[l], acc[l]);
    }
}

/// `sum over i of w[i] * x[i * stride + l]`, `l < N`, into `out[..N]`. The sum runs as
/// two chains, even and odd `i`, added at the end: one chain of dependent adds would
/// wait on each add's latency.
#[inline(always)]
fn weighted_rows<const N: usize>(w: &[f32], x: &[f32], stride: usize, out: &mut [f32]) {
    let (mut even, mut odd) = ([0.0f32; N], [0.0f32; N]);
    let mut pairs = w.chunks_exact(2);
    for (p, wp) in (&mut pairs).enumerate() {
        axpy(&mut even, wp[0], &x[2 * p * stride..]);
        axpy(&mut odd, wp[1], &x[(2 * p + 1) * stride..]);
    }
    if let [wl] = pairs.remainder() {
        axpy(&mut even, *wl, &x[(w.len() - 1) * stride..]);
    }
    for l in 0..N {
        out[l] = even[l] + odd[l];
    }
}

/// `weighted_rows` over `len` lanes: blocks of [`BLOCK`], then of 8, then single lanes.
#[inline(always)]
fn weighted_rows_any(w: &[f32], x: &[f32], stride: usize, len: usize, out: &mut [f32]) {
    let mut l0 = 0;
    while l0 + BLOCK <= len {
        weighted_rows::<BLOCK>(w, &x[l0..], stride, &mut out[l0..]);
        l0 += BLOCK;
    }
    while l0 + 8 <= len {
        weighted_rows::<8>(w, &x[l0..], stride, &mut out[l0..]);
        l0 += 8;
    }
    while l0 < len {
        weighted_rows::<1>(w, &x[l0..], stride, &mut out[l0..]);
        l0 += 1;
    }
}

/// One (row, key/value head): the `rep` query heads that share it. `q` `[rep, D]`,
/// `kt` `[D, cap]` (keys, transposed), `v` `[cap, D]`, `bias` `[tk]`; writes `out`
/// `[rep, D]`. `scores` is scratch of `tk` floats.
#[inline(always)]
fn head(
    s: &Shape,
    q: &[f32],
    kt: &[f32],
    v: &[f32],
    bias: &[f32],
    scores: &mut [f32],
    out: &mut [f32],
) {
    let (d, cap, tk) = (s.d, s.cap, s.tk);
    let scores = &mut scores[..tk];
    for (qr, or) in q.chunks_exact(d).zip(out.chunks_exact_mut(d)) {
        // Scores: the keys' rows (transposed keys) weighted by the query's elements.
        weighted_rows_any(qr, kt, cap, tk, scores);
        // Scaled and biased; their max, in eight lanes.
        let mut maxes = [f32::MIN; 8];
        let mut chunks = scores.chunks_exact_mut(8);
        let mut bias8 = bias.chunks_exact(8);
        for (ch, bc) in (&mut chunks).zip(&mut bias8) {
            let ch: &mut [f32; 8] = ch.try_into().expect("8 lanes");
            for l in 0..8 {
                ch[l] = ch[l] * s.scale + bc[l];
                maxes[l] = if ch[l] > maxes[l] { ch[l] } else { maxes[l] };
            }
        }
        for ((m, sj), bj) in maxes
            .iter_mut()
            .zip(chunks.into_remainder())
            .zip(bias8.remainder())
        {
            *sj = *sj * s.scale + bj;
            *m = if *sj > *m { *sj } else { *m };
        }
        let max = maxes
            .iter()
            .fold(f32::MIN, |a, &m| if m > a { m } else { a });
        // Softmax weights, summed in eight lanes (a fixed order) and then across them.
        for sj in scores.iter_mut() {
            *sj = exp(*sj - max);
        }
        let mut lanes = [0.0f32; 8];
        let mut chunks = scores.chunks_exact(8);
        for ch in &mut chunks {
            for (l, &e) in lanes.iter_mut().zip(ch) {
                *l += e;
            }
        }
        for (l, &e) in lanes.iter_mut().zip(chunks.remainder()) {
            *l += e;
        }
        let inv = 1.0 / across(lanes);
        for sj in scores.iter_mut() {
            *sj *= inv;
        }
        // Output: the value rows weighted by the softmax.
        weighted_rows_any(scores, v, d, d, or);
    }
}

/// Rows `first..` of the batch, as many as `out` (`[rows, H * D]`) holds.
#[inline(always)]
fn rows(s: &Shape, first: usize, q: &[f32], kt: &[f32], v: &[f32], bias: &[f32], out: &mut [f32]) {
    let (h, kvh, d, cap) = (s.h, s.kvh, s.d, s.cap);
    let rep = h / kvh;
    let mut scores = vec![0.0f32; s.tk];
    for (i, orow) in out.chunks_exact_mut(h * d).enumerate() {
        let r = first + i;
        for g in 0..kvh {
            let kv = (r * kvh + g) * d * cap;
            let qh = (r * h + g * rep) * d;
            head(
                s,
                &q[qh..qh + rep * d],
                &kt[kv..kv + d * cap],
                &v[kv..kv + cap * d],
                &bias[r * s.tk..(r + 1) * s.tk],
                &mut scores,
                &mut orow[g * rep * d..(g + 1) * rep * d],
            );
        }
    }
}

/// Runs `f` compiled for AVX2 and FMA when the CPU has them (and `baseline` is false):
/// `f`'s body is inlined into a function built with those features, so its loops
/// vectorise to 8 lanes and `f32::mul_add` is one instruction rather than a library
/// call. Both builds compute the same numbers (see the module doc).
#[inline(always)]
fn simd<R>(baseline: bool, f: impl FnOnce() -> R) -> R {
    // Tests run every pass both ways on one thread (`avx2_and_baseline_agree`).
    #[cfg(test)]
    let baseline = baseline || tests::FORCE_BASELINE.with(|b| b.get());
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx2,fma")]
        unsafe fn with_avx2<R>(f: impl FnOnce() -> R) -> R {
            f()
        }
        if !baseline
            && std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma")
        {
            // SAFETY: the CPU supports AVX2 and FMA (checked just above).
            return unsafe { with_avx2(f) };
        }
    }
    let _ = baseline;
    f()
}

/// The f32 contents of a contiguous CPU tensor, borrowed.
fn floats(t: &Tensor) -> &[f32] {
    check(t);
    // SAFETY: the tensor is contiguous f32 on the CPU (checked), so data_ptr points at
    // numel floats; the slice borrows `t`, which keeps the storage alive, and the
    // callers write to no tensor they are reading.
    unsafe { std::slice::from_raw_parts(t.data_ptr() as *const f32, t.numel()) }
}

/// The f32 contents of a contiguous CPU tensor, to write. Only for tensors this module
/// made ([`fresh`]) or the cache's own, which nothing else holds a view of.
#[allow(clippy::mut_from_ref)]
fn floats_mut(t: &Tensor) -> &mut [f32] {
    check(t);
    // SAFETY: as in `floats`; and the storage is not aliased by any slice alive at the
    // same time (see the function doc).
    unsafe { std::slice::from_raw_parts_mut(t.data_ptr() as *mut f32, t.numel()) }
}

fn check(t: &Tensor) {
    assert!(
        t.device() == Device::Cpu && t.kind() == Kind::Float && t.is_contiguous(),
        "the CPU decode step reads contiguous f32 CPU tensors"
    );
}

/// A new f32 CPU tensor, written before it is read.
fn fresh(shape: &[i64]) -> Tensor {
    Tensor::empty(shape, (Kind::Float, Device::Cpu))
}

/// Whether decode steps of a model in `kind` on `device` run here (and so whether its
/// cache keeps its keys transposed).
pub fn applies(kind: Kind, device: Device) -> bool {
    kind == Kind::Float && device == Device::Cpu
}

/// The sum of squares of a row, in eight lanes (a fixed order), then across them.
#[inline(always)]
fn sum_squares(x: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 8];
    let mut chunks = x.chunks_exact(8);
    for ch in &mut chunks {
        for (l, &v) in lanes.iter_mut().zip(ch) {
            *l = v.mul_add(v, *l);
        }
    }
    for (l, &v) in lanes.iter_mut().zip(chunks.remainder()) {
        *l = v.mul_add(v, *l);
    }
    across(lanes)
}

/// The sum of eight lane sums, in one fixed order (pairs four apart, then pairs).
#[inline(always)]
fn across(lanes: [f32; 8]) -> f32 {
    ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5]))
        + ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7]))
}

/// RMSNorm of `x` into `out`: `w * (x / sqrt(mean(x^2) + eps))`, the weight last.
#[inline(always)]
fn rms_norm_row(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let r = 1.0 / (sum_squares(x) / x.len() as f32 + eps).sqrt();
    for ((o, &v), &wv) in out.iter_mut().zip(x).zip(w) {
        *o = wv * (v * r);
    }
}

/// The residual stream after adding `delta` (when there is one) to `x`, and its RMSNorm
/// under weight `w`: `([B, H], [B, H])` for `x` `[B, H]`.
pub fn add_rms_norm(x: &Tensor, delta: Option<&Tensor>, w: &Tensor, eps: f64) -> (Tensor, Tensor) {
    let size = x.size();
    let hidden = *size.last().expect("[B, H]") as usize;
    let (xs, ws) = (floats(x), floats(w));
    let sum = fresh(&size);
    let normed = fresh(&size);
    simd(
        false,
        #[inline(always)]
        || {
            let (ss, ns) = (floats_mut(&sum), floats_mut(&normed));
            match delta {
                Some(delta) => {
                    for ((o, &a), &b) in ss.iter_mut().zip(xs).zip(floats(delta)) {
                        *o = a + b;
                    }
                }
                None => ss.copy_from_slice(xs),
            }
            for (row, out) in ss.chunks_exact(hidden).zip(ns.chunks_exact_mut(hidden)) {
                rms_norm_row(row, ws, eps as f32, out);
            }
        },
    );
    (sum, normed)
}

/// The gated activation of the MLP: `silu(g) * u` for `gu` `[B, 2I]` holding gate and up
/// side by side; `[B, I]`. `silu(g) = g / (1 + e^-g)`.
pub fn silu_mul(gu: &Tensor) -> Tensor {
    let size = gu.size();
    let two_i = *size.last().expect("[B, 2I]") as usize;
    let i = two_i / 2;
    let mut out_size = size.clone();
    *out_size.last_mut().expect("[B, 2I]") = i as i64;
    let out = fresh(&out_size);
    simd(
        false,
        #[inline(always)]
        || {
            let os = floats_mut(&out);
            for (row, o) in floats(gu).chunks_exact(two_i).zip(os.chunks_exact_mut(i)) {
                let (g, u) = row.split_at(i);
                for ((ov, &gv), &uv) in o.iter_mut().zip(g).zip(u) {
                    *ov = gv / (1.0 + exp(-gv)) * uv;
                }
            }
        },
    );
    out
}

/// Head sizes of a model.
#[derive(Clone, Copy, Debug)]
pub struct Heads {
    /// Query heads, key/value heads, head dim.
    pub h: usize,
    pub kvh: usize,
    pub d: usize,
}

/// The projections `qkv` `[B, (H + 2 Hkv) D]` of one token per row, made ready for
/// attention: query and key heads normalised (`qk_norm` `[H + Hkv, D]`, Qwen3) and
/// rotated by `cos`, `sin` `[B, D]` (rotate-half RoPE: `x cos + rotate_half(x) sin`);
/// keys written to column `pos` of the transposed key cache `kt` `[B, Hkv, D, cap]`,
/// values to row `pos` of `v` `[B, Hkv, cap, D]`. Returns the queries `[B, H, 1, D]`.
#[allow(clippy::too_many_arguments)]
pub fn qk_rope_cache(
    qkv: &Tensor,
    qk_norm: Option<&Tensor>,
    cos: &Tensor,
    sin: &Tensor,
    eps: f64,
    heads: Heads,
    kt: &Tensor,
    v: &Tensor,
    pos: i64,
) -> Tensor {
    let Heads { h, kvh, d } = heads;
    let b = qkv.size()[0] as usize;
    let cap = kt.size()[3] as usize;
    let pos = pos as usize;
    let width = (h + 2 * kvh) * d;
    let (xs, cs, ss) = (floats(qkv), floats(cos), floats(sin));
    let norm = qk_norm.map(floats);
    let q = fresh(&[b as i64, h as i64, 1, d as i64]);
    let (qs, kts, vs) = (floats_mut(&q), floats_mut(kt), floats_mut(v));
    assert!(xs.len() == b * width && cs.len() == b * d && kts.len() == b * kvh * d * cap);
    let half = d / 2;
    let mut normed = vec![0.0f32; d];
    let mut rotated = vec![0.0f32; d];
    simd(
        false,
        #[inline(always)]
        || {
            for r in 0..b {
                let row = &xs[r * width..(r + 1) * width];
                let (c, s) = (&cs[r * d..(r + 1) * d], &ss[r * d..(r + 1) * d]);
                for hd in 0..h + kvh {
                    let x = &row[hd * d..(hd + 1) * d];
                    let x = match norm {
                        Some(w) => {
                            rms_norm_row(x, &w[hd * d..(hd + 1) * d], eps as f32, &mut normed);
                            &normed[..]
                        }
                        None => x,
                    };
                    for i in 0..d {
                        let other = if i < half { -x[i + half] } else { x[i - half] };
                        rotated[i] = x[i] * c[i] + other * s[i];
                    }
                    if hd < h {
                        qs[(r * h + hd) * d..(r * h + hd + 1) * d].copy_from_slice(&rotated);
                    } else {
                        let base = (r * kvh + hd - h) * d * cap;
                        for (i, &kv) in rotated.iter().enumerate() {
                            kts[base + i * cap + pos] = kv;
                        }
                    }
                }
                for g in 0..kvh {
                    let src = &row[(h + kvh + g) * d..(h + kvh + g + 1) * d];
                    let base = ((r * kvh + g) * cap + pos) * d;
                    vs[base..base + d].copy_from_slice(src);
                }
            }
        },
    );
    q
}

/// Attention of one decode step: queries `q` `[B, H, 1, D]`, the cache's transposed keys
/// `kt` `[B, Hkv, D, cap]` and values `v` `[B, Hkv, cap, D]` (the first `tk` positions
/// in use), and the additive bias of those positions `[B, tk]`. Returns `[B, H * D]`.
/// Rows are split over `tch::get_num_threads()` threads.
pub fn attention(
    q: &Tensor,
    kt: &Tensor,
    v: &Tensor,
    bias: &Tensor,
    tk: i64,
    scale: f64,
) -> Tensor {
    attention_with(q, kt, v, bias, tk, scale, false)
}

fn attention_with(
    q: &Tensor,
    kt: &Tensor,
    v: &Tensor,
    bias: &Tensor,
    tk: i64,
    scale: f64,
    baseline: bool,
) -> Tensor {
    let [b, h, t, d] = q.size()[..] else {
        panic!("[B, H, 1, D] queries")
    };
    let [_, kvh, _, cap] = kt.size()[..] else {
        panic!("[B, Hkv, D, cap] keys")
    };
    assert!(t == 1 && tk <= cap && h % kvh == 0);
    let s = Shape {
        b: b as usize,
        h: h as usize,
        kvh: kvh as usize,
        d: d as usize,
        cap: cap as usize,
        tk: tk as usize,
        scale: scale as f32,
    };
    let (qs, kts, vs, bs) = (floats(q), floats(kt), floats(v), floats(bias));
    assert!(
        qs.len() == s.b * s.h * s.d
            && kts.len() == s.b * s.kvh * s.d * s.cap
            && vs.len() == kts.len()
            && bs.len() == s.b * s.tk,
        "decode attention shapes"
    );
    let out = fresh(&[b, h * d]);
    let os = floats_mut(&out);
    let threads = (tch::get_num_threads().max(1) as usize).min(s.b);
    if threads <= 1 {
        simd(
            baseline,
            #[inline(always)]
            || rows(&s, 0, qs, kts, vs, bs, os),
        );
    } else {
        let per = s.b.div_ceil(threads);
        rayon::scope(|sc| {
            for (i, chunk) in os.chunks_mut(per * s.h * s.d).enumerate() {
                let s = &s;
                sc.spawn(move |_| {
                    simd(
                        baseline,
                        #[inline(always)]
                        || rows(s, i * per, qs, kts, vs, bs, chunk),
                    )
                });
            }
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Random queries, a cache with `tk` of `cap` positions in use, and a bias that
    /// masks each row's first `pad[r]` positions.
    fn case(b: i64, h: i64, kvh: i64, d: i64, cap: i64, tk: i64, pads: &[i64]) -> [Tensor; 4] {
        tch::manual_seed(11);
        let q = Tensor::randn([b, h, 1, d], (Kind::Float, Device::Cpu));
        let k = Tensor::randn([b, kvh, cap, d], (Kind::Float, Device::Cpu)) * 2.0;
        let v = Tensor::randn([b, kvh, cap, d], (Kind::Float, Device::Cpu));
        let bias = crate::train::lm::generate::attention_bias(pads, 1, cap, Device::Cpu);
        // attention_bias masks keys after the query (at cap - 1); unmask up to tk.
        let j = Tensor::arange(cap, (Kind::Int64, Device::Cpu)).view([1, 1, 1, cap]);
        let pad = Tensor::from_slice(pads).view([b, 1, 1, 1]);
        let bias = bias
            .zeros_like()
            .masked_fill(&j.lt_tensor(&pad).logical_or(&j.ge(tk)), f32::MIN as f64);
        [q, k, v, bias]
    }

    /// The `[B, tk]` bias rows `decode` reads.
    fn rows_of(bias: &Tensor, tk: i64) -> Tensor {
        let b = bias.size()[0];
        bias.narrow(3, 0, tk).reshape([b, tk]).contiguous()
    }

    /// The same attention in torch ops (plain softmax attention over `tk` keys).
    fn reference(q: &Tensor, k: &Tensor, v: &Tensor, bias: &Tensor, tk: i64, scale: f64) -> Tensor {
        let (b, h, _, d) = q.size4().unwrap();
        let kvh = k.size()[1];
        let rep = h / kvh;
        let k = k.narrow(2, 0, tk).repeat_interleave_self_int(rep, 1, None);
        let v = v.narrow(2, 0, tk).repeat_interleave_self_int(rep, 1, None);
        let s = q.matmul(&k.transpose(-2, -1)) * scale + bias.narrow(3, 0, tk);
        s.softmax(-1, Kind::Float).matmul(&v).view([b, 1, h * d])
    }

    #[test]
    fn attention_matches_torch() {
        for &(b, h, kvh, d, cap, tk) in &[
            (5, 6, 2, 32, 50, 37),
            (3, 4, 4, 8, 9, 9),
            (2, 8, 1, 16, 20, 1),
        ] {
            let pads: Vec<i64> = (0..b).map(|r| (r * 3).min(tk - 1)).collect();
            let [q, k, v, bias] = case(b, h, kvh, d, cap, tk, &pads);
            let kt = k.transpose(2, 3).contiguous();
            let scale = 1.0 / (d as f64).sqrt();
            let ours = attention(&q, &kt, &v, &rows_of(&bias, tk), tk, scale).view([b, 1, h * d]);
            let want = reference(&q, &k, &v, &bias, tk, scale);
            let err = f64::try_from((&ours - &want).abs().max()).unwrap();
            assert!(
                err < 2e-6,
                "shape {:?}: max error {err}",
                (b, h, kvh, d, cap, tk)
            );
        }
    }

    #[test]
    fn masked_positions_get_no_weight() {
        // Values at masked positions are huge: any weight on them would show.
        let (b, h, kvh, d, cap, tk) = (2, 2, 1, 8, 10, 10);
        let [q, k, v, bias] = case(b, h, kvh, d, cap, tk, &[4, 0]);
        let _ = v.narrow(2, 0, 4).narrow(0, 0, 1).fill_(1e30);
        let kt = k.transpose(2, 3).contiguous();
        let ours = attention(&q, &kt, &v, &rows_of(&bias, tk), tk, 0.35).view([b, 1, h * d]);
        assert!(bool::try_from(ours.isfinite().all()).unwrap());
        let want = reference(&q, &k, &v, &bias, tk, 0.35);
        let row0 = (&ours - &want).narrow(0, 0, 1).abs().max();
        assert!(f64::try_from(row0).unwrap() < 1e-5);
    }

    thread_local! {
        /// Set by a test to run every pass of this thread on the baseline build.
        pub(super) static FORCE_BASELINE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }

    /// `f` on the baseline build (every `simd` call of this thread).
    fn on_baseline<R>(f: impl FnOnce() -> R) -> R {
        FORCE_BASELINE.with(|b| b.set(true));
        let r = f();
        FORCE_BASELINE.with(|b| b.set(false));
        r
    }

    /// Every pass of the decode step, AVX2 build against baseline build: the same bits
    /// (what makes a run's hashes independent of the CPU's vector extensions).
    #[test]
    fn avx2_and_baseline_agree() {
        #[cfg(target_arch = "x86_64")]
        let avx2 = std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma");
        #[cfg(not(target_arch = "x86_64"))]
        let avx2 = false;
        if !avx2 {
            eprintln!(
                "avx2_and_baseline_agree: this CPU has no AVX2+FMA, so both runs take the baseline build and the AVX2 path is NOT checked here"
            );
        }
        let same = |what: &str, fast: &Tensor, base: &Tensor| {
            assert!(
                fast.equal(base),
                "{what}: the AVX2 build rounds differently"
            );
        };
        tch::manual_seed(7);
        // Attention (rows over threads: the flag is its argument).
        let (b, h, kvh, d, cap, tk) = (4, 6, 2, 32, 70, 61);
        let [q, k, v, bias] = case(b, h, kvh, d, cap, tk, &[0, 5, 9, 2]);
        let kt = k.transpose(2, 3).contiguous();
        let bias = rows_of(&bias, tk);
        let fast = attention_with(&q, &kt, &v, &bias, tk, 0.2, false);
        let base = attention_with(&q, &kt, &v, &bias, tk, 0.2, true);
        same("attention", &fast, &base);
        // Residual add + RMSNorm, with and without the residual.
        let x = Tensor::randn([5, 67], (Kind::Float, Device::Cpu));
        let delta = Tensor::randn([5, 67], (Kind::Float, Device::Cpu));
        let w = Tensor::randn([67], (Kind::Float, Device::Cpu));
        for dl in [Some(&delta), None] {
            let (s1, n1) = add_rms_norm(&x, dl, &w, 1e-6);
            let (s2, n2) = on_baseline(|| add_rms_norm(&x, dl, &w, 1e-6));
            same("add_rms_norm sum", &s1, &s2);
            same("add_rms_norm norm", &n1, &n2);
        }
        // The gated MLP activation.
        let gu = Tensor::randn([3, 2 * 77], (Kind::Float, Device::Cpu)) * 4.0;
        same("silu_mul", &silu_mul(&gu), &on_baseline(|| silu_mul(&gu)));
        // Query/key norm, RoPE and the cache writes.
        let heads = Heads {
            h: 4,
            kvh: 2,
            d: 16,
        };
        let (bq, capq) = (3i64, 9i64);
        let qkv = Tensor::randn([bq, (4 + 2 * 2) * 16], (Kind::Float, Device::Cpu));
        let norm = Tensor::randn([4 + 2, 16], (Kind::Float, Device::Cpu));
        let cos = Tensor::randn([bq, 16], (Kind::Float, Device::Cpu));
        let sin = Tensor::randn([bq, 16], (Kind::Float, Device::Cpu));
        let run = |base: bool| {
            let kt = Tensor::zeros([bq, 2, 16, capq], (Kind::Float, Device::Cpu));
            let v = Tensor::zeros([bq, 2, capq, 16], (Kind::Float, Device::Cpu));
            let go = || qk_rope_cache(&qkv, Some(&norm), &cos, &sin, 1e-6, heads, &kt, &v, 4);
            let q = if base { on_baseline(go) } else { go() };
            (q, kt, v)
        };
        let (q1, k1, v1) = run(false);
        let (q2, k2, v2) = run(true);
        same("qk_rope_cache queries", &q1, &q2);
        same("qk_rope_cache keys", &k1, &k2);
        same("qk_rope_cache values", &v1, &v2);
    }

    #[test]
    fn exp_is_close_to_libm() {
        let mut worst = 0.0f64;
        for i in 0..=200_000 {
            let x = -87.0 + 87.0 * i as f32 / 200_000.0;
            let (ours, exact) = (exp(x) as f64, (x as f64).exp());
            worst = worst.max(((ours - exact) / exact).abs());
        }
        assert!(worst < 3.0 * f32::EPSILON as f64, "relative error {worst}");
        assert_eq!(exp(f32::MIN), 0.0);
        assert_eq!(exp(-100.0), 0.0);
        assert_eq!(exp(0.0), 1.0);
    }
}
