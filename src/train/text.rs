//! The `text` policy: the paper's setting in miniature. This module owns
//!
//! - the testbed tokenizer, built in code with HF `tokenizers` (a WordLevel model over
//!   every word, number and sign the prompt and plan renderers produce, newlines as
//!   `<nl>`), its serialised `tokenizer.json` and the inverse, [`detokenize`];
//! - the compact prompt the policy reads ([`render_compact_prompt`]);
//! - a small decoder-only transformer (token + learned position embeddings, pre-LayerNorm
//!   blocks of causal multi-head self-attention and a 4x MLP, a separate output head);
//! - batched autoregressive generation with a key/value cache, sampling from the
//!   project's seed tree (never torch's generator), and teacher-forced log-probabilities.
//!
//! Action ids are token ids. A rollout's text is parsed by the testbed parser, and a
//! parse error is a real failure of the rollout.
//!
//! Lengths: the sequence (prompt + generated tokens) is at most
//! [`TextShape::max_positions`] tokens (640 by default). A 10x10 map with 5 agents
//! needs at most 168 prompt + 221 plan tokens, with 8 agents 198 + 401; larger maps
//! get a shorter generation budget (a prompt that alone exceeds the limit generates
//! nothing, which parses as a failure). `log_probs` scores only the tokens that fit.
use super::grid::max_steps;
use super::policy::{choose, LogProbs, Policy, Rollout};
use crate::env::text::{parse_plan, render_plan};
use crate::env::{Instance, Plan};
use crate::seed::Seed;
use rand::Rng as _;
use std::collections::BTreeMap;
use std::sync::OnceLock;
use tch::{nn, nn::Module, Device, Kind, Tensor};
use tokenizers::models::wordlevel::WordLevel;
use tokenizers::normalizers::replace::Replace;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::pre_tokenizers::whitespace::WhitespaceSplit;
use tokenizers::{AddedToken, SplitDelimiterBehavior, Tokenizer};

/// Special token ids (fixed: the first entries of the vocabulary).
pub const PAD: u32 = 0;
pub const BOS: u32 = 1;
pub const EOS: u32 = 2;
pub const UNK: u32 = 3;
/// A newline.
pub const NL: u32 = 4;
const SPECIALS: [&str; 5] = ["<pad>", "<bos>", "<eos>", "<unk>", "<nl>"];
/// The five moves come right after the specials.
const MOVES: [&str; 5] = ["U", "D", "L", "R", "W"];
const SIGNS: [&str; 10] = ["(", ")", ",", ":", ";", ".", "-", "+", "=", "<moves>"];
/// Numbers 0..=MAX_NUMBER are single tokens (rows, columns, agent numbers, counts).
const MAX_NUMBER: usize = 32;
/// Map sizes rendered as one `NxN` token.
const SIZES: std::ops::RangeInclusive<usize> = 3..=32;
/// Every word of `render_prompt`, `render_plan` and `render_compact_prompt`.
const WORDS: &[&str] = &[
    "F", "H", "Multi", "agent", "agents", "path", "finding", "on", "a", "frozen", "lake", "with",
    "Grid", "row", "at", "the", "top", "column", "left", "hole", "Agents", "start", "goal",
    "Moves", "wait", "All", "move", "same", "time", "No", "may", "leave", "grid", "enter", "share",
    "cell", "another", "or", "swap", "cells", "one", "An", "whose", "moves", "have", "ended",
    "waits", "where", "it", "is", "every", "must", "end", "its", "Answer", "line", "per",
];
/// Pre-tokenizer pieces (after splitting on whitespace): the newline marker, `<moves>`,
/// `NxN`, words, numbers, and every other character on its own.
const PIECES: &str = r"<nl>|<moves>|[0-9]+x[0-9]+|[A-Za-z]+|[0-9]+|[^A-Za-z0-9]";

/// The vocabulary in id order.
pub fn vocab() -> &'static [String] {
    static V: OnceLock<Vec<String>> = OnceLock::new();
    V.get_or_init(|| {
        let mut v: Vec<String> = SPECIALS.iter().map(|s| s.to_string()).collect();
        v.extend(MOVES.iter().map(|s| s.to_string()));
        v.extend(SIGNS.iter().map(|s| s.to_string()));
        v.extend((0..=MAX_NUMBER).map(|n| n.to_string()));
        v.extend(SIZES.map(|n| format!("{n}x{n}")));
        v.extend(WORDS.iter().map(|s| s.to_string()));
        debug_assert_eq!(
            v.iter().collect::<std::collections::BTreeSet<_>>().len(),
            v.len(),
            "vocabulary entries are distinct"
        );
        v
    })
}

/// The testbed tokenizer: WordLevel over [`vocab`], `\n` normalised to `<nl>`, split on
/// whitespace, then words, numbers and single signs isolated. No download, no files.
pub fn tokenizer() -> Tokenizer {
    let model = WordLevel::builder()
        .vocab(
            vocab()
                .iter()
                .enumerate()
                .map(|(i, t)| (t.clone(), i as u32))
                .collect(),
        )
        .unk_token(SPECIALS[UNK as usize].into())
        .build()
        .expect("the built-in vocabulary is a valid WordLevel model");
    let mut tok = Tokenizer::new(model);
    tok.with_normalizer(Some(
        Replace::new("\n", SPECIALS[NL as usize]).expect("a literal pattern"),
    ))
    .expect("a normalizer can be set");
    let split = Split::new(
        SplitPattern::Regex(PIECES.into()),
        SplitDelimiterBehavior::Isolated,
        false,
    )
    .expect("the piece pattern compiles");
    tok.with_pre_tokenizer(Some(Sequence::new(vec![
        WhitespaceSplit.into(),
        split.into(),
    ])));
    tok.add_special_tokens(
        [PAD, BOS, EOS, UNK]
            .iter()
            .map(|&id| AddedToken::from(SPECIALS[id as usize], true)),
    )
    .expect("special tokens are in the vocabulary");
    tok
}

/// The serialised tokenizer (`tokenizer.json`); deterministic bytes (the vocabulary is
/// written in id order).
pub fn tokenizer_json() -> String {
    tokenizer()
        .to_string(true)
        .expect("the tokenizer serialises")
}

/// Token ids of `text` (no special tokens added).
pub fn encode_text(tok: &Tokenizer, text: &str) -> Vec<u32> {
    tok.encode(text, false)
        .expect("WordLevel encoding cannot fail (unknown pieces become <unk>)")
        .get_ids()
        .to_vec()
}

/// Text of token ids, spaced as the renderers space it: `<nl>` is a newline, no space
/// at a line start, before `)` `,` `:` `;` `.` or after `(`; `<pad>`/`<bos>` are
/// skipped and decoding stops at `<eos>`. Exact inverse of the tokenizer on plans
/// whose agents all move and on compact prompts.
pub fn detokenize(ids: &[u32]) -> String {
    let v = vocab();
    let mut s = String::new();
    let mut line_start = true;
    let mut after_open = false;
    for &id in ids {
        match id {
            PAD | BOS => continue,
            EOS => break,
            NL => {
                s.push('\n');
                line_start = true;
                continue;
            }
            _ => {}
        }
        let t = v.get(id as usize).map_or("<unk>", |t| t.as_str());
        let tight = matches!(t, ")" | "," | ":" | ";" | ".");
        if !(line_start || after_open || tight) {
            s.push(' ');
        }
        s.push_str(t);
        line_start = false;
        after_open = t == "(";
    }
    s
}

/// The compact prompt the policy reads: size and agent count, the grid rows (`F`/`H`
/// separated by spaces), each agent's start and goal as row and column, then `Answer:`.
///
/// ```text
/// 4x4 2 agents
/// F F F F
/// F H F F
/// F F F F
/// F F F H
/// agent 1: start 0 0 goal 2 3
/// agent 2: start 3 0 goal 0 3
/// Answer:
/// ```
pub fn render_compact_prompt(inst: &Instance) -> String {
    let n = inst.size();
    let mut s = format!("{n}x{n} {} agents\n", inst.agents());
    for row in inst.grid_rows() {
        let cells: Vec<String> = row.chars().map(String::from).collect();
        s.push_str(&cells.join(" "));
        s.push('\n');
    }
    for a in 0..inst.agents() {
        let (sr, sc) = inst.row_col(inst.starts()[a]);
        let (gr, gc) = inst.row_col(inst.goals()[a]);
        s.push_str(&format!(
            "agent {}: start {sr} {sc} goal {gr} {gc}\n",
            a + 1
        ));
    }
    s.push_str("Answer:\n");
    s
}

/// The most tokens a plan for `inst` may take: `agent k :` + moves + `<nl>` per agent,
/// with `max_steps` moves each, and the final `<eos>`.
pub fn plan_budget(inst: &Instance) -> usize {
    inst.agents() * (3 + max_steps(inst) + 1) + 1
}

/// Architecture hyper-parameters (recorded with every checkpoint).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TextShape {
    /// Must equal this build's vocabulary size.
    pub vocab: i64,
    pub d_model: i64,
    pub heads: i64,
    pub layers: i64,
    /// MLP hidden width = `mlp_ratio * d_model`.
    pub mlp_ratio: i64,
    /// Longest sequence (prompt + generated tokens).
    pub max_positions: i64,
}

impl Default for TextShape {
    fn default() -> Self {
        TextShape {
            vocab: vocab().len() as i64,
            d_model: 64,
            heads: 4,
            layers: 2,
            mlp_ratio: 4,
            max_positions: 640,
        }
    }
}

/// Why an architecture cannot be built.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TextError {
    #[error("architecture has a {found}-token vocabulary, this build's tokenizer has {expected}")]
    Vocab { found: i64, expected: i64 },
    #[error("{0} must be positive")]
    NonPositive(&'static str),
    #[error("d_model {d_model} is not a multiple of heads {heads}")]
    Heads { d_model: i64, heads: i64 },
}

impl TextShape {
    pub fn validate(&self) -> Result<(), TextError> {
        let expected = vocab().len() as i64;
        if self.vocab != expected {
            return Err(TextError::Vocab {
                found: self.vocab,
                expected,
            });
        }
        for (name, v) in [
            ("d_model", self.d_model),
            ("heads", self.heads),
            ("layers", self.layers),
            ("mlp_ratio", self.mlp_ratio),
            ("max_positions", self.max_positions),
        ] {
            if v <= 0 {
                return Err(TextError::NonPositive(name));
            }
        }
        if self.d_model % self.heads != 0 {
            return Err(TextError::Heads {
                d_model: self.d_model,
                heads: self.heads,
            });
        }
        Ok(())
    }
}

#[derive(Debug)]
struct Block {
    ln1: nn::LayerNorm,
    qkv: nn::Linear,
    proj: nn::Linear,
    ln2: nn::LayerNorm,
    fc1: nn::Linear,
    fc2: nn::Linear,
}

#[derive(Debug)]
struct Net {
    tok: nn::Embedding,
    pos: nn::Embedding,
    blocks: Vec<Block>,
    ln_f: nn::LayerNorm,
    head: nn::Linear,
}

/// Per layer, the cached keys and values `[B, H, T, dh]`.
type Cache = Vec<Option<(Tensor, Tensor)>>;

pub struct TextPolicy {
    vs: nn::VarStore,
    net: Net,
    pub shape: TextShape,
    tokenizer: Tokenizer,
}

/// Additive attention bias `[B, 1, Tq, Tk]` for left-padded rows: query `i` (at key
/// position `Tk - Tq + i`) sees keys `j <= it` that are not padding; a padding query
/// sees itself only (its output is never used, but stays finite).
fn attention_bias(pads: &[i64], tq: i64, tk: i64, device: Device) -> Tensor {
    let b = pads.len() as i64;
    let pad = Tensor::from_slice(pads).view([b, 1, 1, 1]);
    let j = Tensor::arange(tk, (Kind::Int64, Device::Cpu)).view([1, 1, 1, tk]);
    let i = (Tensor::arange(tq, (Kind::Int64, Device::Cpu)) + (tk - tq)).view([1, 1, tq, 1]);
    let allowed = j
        .le_tensor(&i)
        .logical_and(&j.ge_tensor(&pad).logical_or(&j.eq_tensor(&i)));
    Tensor::zeros([b, 1, tq, tk], (Kind::Float, Device::Cpu))
        .masked_fill(&allowed.logical_not(), -1e9)
        .to(device)
}

impl TextPolicy {
    /// A freshly initialised policy; initial weights come from `seed` (torch's generator
    /// is seeded here and nowhere else). Panics on an invalid shape: check it with
    /// [`TextShape::validate`] first when it comes from outside.
    pub fn new(device: Device, shape: TextShape, seed: Seed) -> TextPolicy {
        shape.validate().expect("a valid text architecture");
        let _rng = super::seeded_torch_rng(seed);
        let vs = nn::VarStore::new(device);
        let p = vs.root();
        let d = shape.d_model;
        let emb = nn::EmbeddingConfig {
            ws_init: nn::Init::Randn {
                mean: 0.0,
                stdev: 0.1,
            },
            ..Default::default()
        };
        let ln = nn::LayerNormConfig::default();
        let blocks = (0..shape.layers)
            .map(|l| {
                let b = &p / format!("block{l}");
                Block {
                    ln1: nn::layer_norm(&b / "ln1", vec![d], ln),
                    qkv: nn::linear(&b / "qkv", d, 3 * d, Default::default()),
                    proj: nn::linear(&b / "proj", d, d, Default::default()),
                    ln2: nn::layer_norm(&b / "ln2", vec![d], ln),
                    fc1: nn::linear(&b / "fc1", d, shape.mlp_ratio * d, Default::default()),
                    fc2: nn::linear(&b / "fc2", shape.mlp_ratio * d, d, Default::default()),
                }
            })
            .collect();
        let net = Net {
            tok: nn::embedding(&p / "tok", shape.vocab, d, emb),
            pos: nn::embedding(&p / "pos", shape.max_positions, d, emb),
            blocks,
            ln_f: nn::layer_norm(&p / "ln_f", vec![d], ln),
            head: nn::linear(
                &p / "head",
                d,
                shape.vocab,
                nn::LinearConfig {
                    bias: false,
                    ..Default::default()
                },
            ),
        };
        TextPolicy {
            vs,
            net,
            shape,
            tokenizer: tokenizer(),
        }
    }

    /// `<bos>` + the compact prompt's tokens.
    pub fn prompt_ids(&self, inst: &Instance) -> Vec<u32> {
        let mut ids = vec![BOS];
        ids.extend(encode_text(&self.tokenizer, &render_compact_prompt(inst)));
        ids
    }

    /// Final hidden states `[B, T, d]` of tokens `[B, T]` at positions `[B, T]` under the
    /// additive `bias`; with a cache, the new keys and values are appended to it.
    // `x = x + f(x)`, not `x += f(x)`: an in-place add would overwrite a tensor autograd
    // saved for the backward pass.
    #[allow(clippy::assign_op_pattern)]
    fn hidden(
        &self,
        tokens: &Tensor,
        positions: &Tensor,
        bias: &Tensor,
        mut cache: Option<&mut Cache>,
    ) -> Tensor {
        let (b, t) = tokens.size2().expect("[B, T] tokens");
        let d = self.shape.d_model;
        let h = self.shape.heads;
        let dh = d / h;
        let scale = 1.0 / (dh as f64).sqrt();
        let mut x = self.net.tok.forward(tokens) + self.net.pos.forward(positions);
        for (l, blk) in self.net.blocks.iter().enumerate() {
            let qkv = blk.qkv.forward(&blk.ln1.forward(&x));
            let parts = qkv.split(d, -1);
            let heads = |z: &Tensor| z.view([b, t, h, dh]).transpose(1, 2);
            let q = heads(&parts[0]);
            let mut k = heads(&parts[1]);
            let mut v = heads(&parts[2]);
            if let Some(c) = cache.as_deref_mut() {
                if let Some((pk, pv)) = c[l].take() {
                    k = Tensor::cat(&[pk, k], 2);
                    v = Tensor::cat(&[pv, v], 2);
                }
                c[l] = Some((k.shallow_clone(), v.shallow_clone()));
            }
            let att = (q.matmul(&k.transpose(-2, -1)) * scale + bias).softmax(-1, Kind::Float);
            let y = att.matmul(&v).transpose(1, 2).contiguous().view([b, t, d]);
            x = x + blk.proj.forward(&y);
            let m = blk.fc1.forward(&blk.ln2.forward(&x)).gelu("none");
            x = x + blk.fc2.forward(&m);
        }
        self.net.ln_f.forward(&x)
    }

    fn to_tensor(&self, v: &[i64], shape: [i64; 2]) -> Tensor {
        Tensor::from_slice(v).view(shape).to(self.vs.device())
    }
}

impl Policy for TextPolicy {
    fn kind(&self) -> &'static str {
        "text"
    }
    fn vars(&self) -> &nn::VarStore {
        &self.vs
    }
    fn vars_mut(&mut self) -> &mut nn::VarStore {
        &mut self.vs
    }

    fn sample(
        &self,
        instances: &[Instance],
        per_instance: usize,
        greedy: bool,
        seed: Seed,
    ) -> Vec<Rollout> {
        let _guard = tch::no_grad_guard();
        let max_pos = self.shape.max_positions as usize;
        let prompts: Vec<Vec<u32>> = instances.iter().map(|i| self.prompt_ids(i)).collect();
        let budgets: Vec<usize> = instances
            .iter()
            .zip(&prompts)
            .map(|(inst, p)| plan_budget(inst).min(max_pos.saturating_sub(p.len())))
            .collect();
        // Lanes are (instance, sample) pairs, each with its own random stream, so a
        // lane's draws do not depend on which other lanes share the batch.
        let lanes: Vec<usize> = (0..instances.len())
            .flat_map(|i| std::iter::repeat_n(i, per_instance))
            .collect();
        let mut rngs: Vec<_> = (0..lanes.len())
            .map(|l| seed.child("lane", l as u64).rng())
            .collect();
        let mut generated: Vec<Vec<u32>> = vec![Vec::new(); lanes.len()];
        // Rows of the running batch, as lane indices.
        let mut rows: Vec<usize> = (0..lanes.len())
            .filter(|&l| budgets[lanes[l]] > 0)
            .collect();
        if !rows.is_empty() {
            // Prefill the left-padded prompts.
            let t0 = rows
                .iter()
                .map(|&l| prompts[lanes[l]].len())
                .max()
                .unwrap_or(0) as i64;
            let mut pads: Vec<i64> = rows
                .iter()
                .map(|&l| t0 - prompts[lanes[l]].len() as i64)
                .collect();
            let mut toks = Vec::with_capacity(rows.len() * t0 as usize);
            let mut pos = Vec::with_capacity(rows.len() * t0 as usize);
            for (r, &l) in rows.iter().enumerate() {
                toks.extend(std::iter::repeat_n(PAD as i64, pads[r] as usize));
                toks.extend(prompts[lanes[l]].iter().map(|&t| t as i64));
                pos.extend((0..t0).map(|j| (j - pads[r]).max(0)));
            }
            let b = rows.len() as i64;
            let mut cache: Cache = (0..self.shape.layers).map(|_| None).collect();
            let bias = attention_bias(&pads, t0, t0, self.vs.device());
            let hid = self.hidden(
                &self.to_tensor(&toks, [b, t0]),
                &self.to_tensor(&pos, [b, t0]),
                &bias,
                Some(&mut cache),
            );
            let mut logits = self.net.head.forward(&hid.select(1, t0 - 1));
            let mut len = t0;
            loop {
                let probs = logits.softmax(-1, Kind::Float).to(Device::Cpu);
                let probs: Vec<f32> =
                    Vec::<f32>::try_from(probs.flatten(0, -1)).expect("f32 probs");
                let v = self.shape.vocab as usize;
                let mut keep = Vec::with_capacity(rows.len());
                let mut next = Vec::with_capacity(rows.len());
                for (r, &l) in rows.iter().enumerate() {
                    let u = (!greedy).then(|| rngs[l].random::<f32>());
                    let tok = choose(&probs[r * v..(r + 1) * v], u);
                    generated[l].push(tok);
                    if tok != EOS && generated[l].len() < budgets[lanes[l]] {
                        keep.push(r);
                        next.push(tok as i64);
                    }
                }
                if keep.is_empty() {
                    break;
                }
                if keep.len() < rows.len() {
                    let idx =
                        Tensor::from_slice(&keep.iter().map(|&r| r as i64).collect::<Vec<_>>())
                            .to(self.vs.device());
                    for (k, v) in cache.iter_mut().flatten() {
                        *k = k.index_select(0, &idx);
                        *v = v.index_select(0, &idx);
                    }
                    rows = keep.iter().map(|&r| rows[r]).collect();
                    pads = keep.iter().map(|&r| pads[r]).collect();
                }
                let b = rows.len() as i64;
                let pos: Vec<i64> = pads.iter().map(|&p| len - p).collect();
                let bias = attention_bias(&pads, 1, len + 1, self.vs.device());
                let hid = self.hidden(
                    &self.to_tensor(&next, [b, 1]),
                    &self.to_tensor(&pos, [b, 1]),
                    &bias,
                    Some(&mut cache),
                );
                logits = self.net.head.forward(&hid.select(1, 0));
                len += 1;
            }
        }
        lanes
            .iter()
            .enumerate()
            .map(|(l, &i)| {
                let text = detokenize(&generated[l]);
                Rollout {
                    instance: i,
                    plan: parse_plan(&text, instances[i].agents()),
                    plan_bytes: text.into_bytes(),
                    actions: std::mem::take(&mut generated[l]),
                }
            })
            .collect()
    }

    fn log_probs(&self, instances: &[Instance], rollouts: &[Rollout]) -> LogProbs {
        let d = self.vs.device();
        let max_pos = self.shape.max_positions as usize;
        let mut prompts: BTreeMap<usize, Vec<u32>> = BTreeMap::new();
        // (rollout, prompt length, scored actions) for rollouts with something to score:
        // the input is prompt + actions[..n-1], at most max_positions tokens.
        let mut rows: Vec<(usize, usize, usize)> = Vec::new();
        for (ri, r) in rollouts.iter().enumerate() {
            let p = prompts
                .entry(r.instance)
                .or_insert_with(|| self.prompt_ids(&instances[r.instance]));
            let n = r.actions.len().min((max_pos + 1).saturating_sub(p.len()));
            if n > 0 {
                rows.push((ri, p.len(), n));
            }
        }
        if rows.is_empty() {
            let z = Tensor::zeros([0], (Kind::Float, d));
            return LogProbs {
                per_action: z.shallow_clone(),
                entropy: z,
                rollout_of: Tensor::zeros([0], (Kind::Int64, d)),
            };
        }
        let t = rows.iter().map(|&(_, lp, n)| lp + n - 1).max().unwrap_or(0) as i64;
        let b = rows.len() as i64;
        let mut toks = Vec::with_capacity((b * t) as usize);
        let mut pos = Vec::with_capacity((b * t) as usize);
        let mut pads = Vec::with_capacity(rows.len());
        let mut pick = Vec::new();
        let mut targets = Vec::new();
        let mut rollout_of = Vec::new();
        for (row, &(ri, lp, n)) in rows.iter().enumerate() {
            let r = &rollouts[ri];
            let pad = t - (lp + n - 1) as i64;
            pads.push(pad);
            toks.extend(std::iter::repeat_n(PAD as i64, pad as usize));
            toks.extend(prompts[&r.instance].iter().map(|&x| x as i64));
            toks.extend(r.actions[..n - 1].iter().map(|&x| x as i64));
            pos.extend((0..t).map(|j| (j - pad).max(0)));
            for k in 0..n {
                pick.push(row as i64 * t + pad + (lp - 1 + k) as i64);
                targets.push(r.actions[k] as i64);
                rollout_of.push(ri as i64);
            }
        }
        let bias = attention_bias(&pads, t, t, d);
        let hid = self.hidden(
            &self.to_tensor(&toks, [b, t]),
            &self.to_tensor(&pos, [b, t]),
            &bias,
            None,
        );
        let sel = hid
            .view([b * t, self.shape.d_model])
            .index_select(0, &Tensor::from_slice(&pick).to(d));
        let logp = self.net.head.forward(&sel).log_softmax(-1, Kind::Float);
        let entropy = -(logp.exp() * &logp).sum_dim_intlist(-1, false, Kind::Float);
        let idx = Tensor::from_slice(&targets).to(d).unsqueeze(1);
        LogProbs {
            per_action: logp.gather(1, &idx, false).squeeze_dim(1),
            entropy,
            rollout_of: Tensor::from_slice(&rollout_of).to(d),
        }
    }

    fn encode_plan(&self, _inst: &Instance, plan: &Plan) -> Vec<u32> {
        let mut ids = encode_text(&self.tokenizer, &render_plan(plan));
        ids.push(EOS);
        ids
    }

    fn arch(&self) -> Vec<u8> {
        crate::ledger::codec::encode(&self.shape)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::text::render_prompt;
    use crate::env::Move;

    fn inst() -> Instance {
        serde_json::from_str(
            r#"{"size":4,"grid":["FFFF","FHFF","FFFF","FFFH"],"agents":[{"start":[0,0],"goal":[2,3]},{"start":[3,0],"goal":[0,3]}]}"#,
        )
        .unwrap()
    }

    #[test]
    fn compact_prompt_and_plan_round_trip_exactly() {
        let tok = tokenizer();
        let p = render_compact_prompt(&inst());
        let ids = encode_text(&tok, &p);
        assert!(!ids.contains(&UNK));
        assert_eq!(detokenize(&ids), p);
        let plan = Plan {
            moves: vec![vec![Move::R, Move::D, Move::W], vec![Move::U, Move::U]],
        };
        let text = render_plan(&plan);
        let ids = encode_text(&tok, &text);
        assert_eq!(detokenize(&ids), text);
        let id = |t: &str| tok.token_to_id(t).unwrap();
        assert_eq!(ids[..5], [id("agent"), id("1"), id(":"), id("R"), id("D")]);
        assert_eq!((id("<nl>"), id("<eos>"), id("R")), (NL, EOS, 8));
        // The full prompt has no unknown pieces and re-encodes to the same ids.
        let full = render_prompt(&inst());
        let ids = encode_text(&tok, &full);
        assert!(!ids.contains(&UNK), "{:?}", tok.decode(&ids, false));
        assert_eq!(encode_text(&tok, &detokenize(&ids)), ids);
    }

    #[test]
    fn attention_bias_masks_padding_and_future() {
        let b = attention_bias(&[1, 0], 3, 3, Device::Cpu);
        let v: Vec<f32> = Vec::try_from(b.flatten(0, -1)).unwrap();
        let ok: Vec<bool> = v.iter().map(|&x| x == 0.0).collect();
        // Row 0 (pad 1): query 0 sees itself; query 1 sees key 1; query 2 keys 1..=2.
        assert_eq!(
            ok[..9],
            [true, false, false, false, true, false, false, true, true]
        );
        assert_eq!(
            ok[9..],
            [true, false, false, true, true, false, true, true, true]
        );
    }
}
