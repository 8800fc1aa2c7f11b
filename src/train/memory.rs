//! Peak memory of the `lm` policy, estimated from shapes alone (no tensor is made).
//!
//! The model follows what `lm/model.rs`, `lm/generate.rs` and `grpo.rs` allocate:
//! - **resident**: weights in the compute dtype (under LoRA the frozen base; without
//!   LoRA the f32 masters), the trainable tensors' gradients and two Adam moments in
//!   f32 (and the adapters themselves);
//! - **generation** (a GRPO group, an evaluation batch, an engineer reply): the
//!   key/value cache of every lane for prompt + new tokens, the prefill's largest
//!   per-layer temporaries and attention mask, the decode step's vocabulary-sized
//!   f32 buffers, and in bf16 without LoRA the per-call bf16 copy of the weights;
//! - **training** (one forward and backward of a micro-batch): the tensors autograd
//!   saves per token and layer (norm inputs in f32, projections' inputs, q/k/v after
//!   RoPE, attention output, the MLP's gate/up/product, LoRA's f32 input copies), the
//!   attention mask (one per layer in bf16, where it is cast), the attention
//!   probabilities (the CPU kernel materialises them with a mask), and the f32 log-softmax
//!   over the vocabulary at every target token, plus the backward's largest temporary;
//!   without LoRA in bf16, the bf16 weight copies the forward casts.
//!
//! The peak is resident + the largest phase. Calibrated against measured peak RSS on
//! the CPU (`tools/dry-run.sh`); allocator caching on a GPU adds to it, which
//! [`CUDA_RESERVE`] stands for when a GPU's memory is compared.
use super::lm::config::LmConfig;
use super::lm::model::{param_shapes, LoraSpec};

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

    /// A bf16 copy of every weight (taken per generation call, and by the training
    /// forward's casts) when the trainable weights are f32 masters.
    fn cast_copy(&self) -> u64 {
        if self.lora.is_none() && self.bf16() {
            self.parameters() * self.bytes
        } else {
            0
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

    /// Transient bytes of one generation call.
    pub fn generation(&self, g: &Generation) -> u64 {
        let (h, i, qd, kd, layers, v) = self.dims();
        let b = self.bytes;
        let cap = g.prompt_tokens + g.new_tokens;
        let cache = g.lanes * cap * layers * 2 * kd * b;
        // Prefill: one layer's temporaries for every prompt token (MLP gate, up and
        // product; the residual, norm and q/k/v), and the f32 mask with its cast.
        let tokens = g.prompts * g.prompt_tokens;
        let prefill = tokens * (3 * i * b + 4 * h * 4 + 3 * qd * b + 2 * kd * b)
            + g.prompts * g.prompt_tokens * g.prompt_tokens * (4 + b)
            + self.scores(g.prompts, g.prompt_tokens, 4);
        // Decode: f32 logits, scaled logits, log-softmax, probabilities, cumulative sum
        // (top-p adds the sort's values, int64 order and the kept mass).
        let per_lane = if g.top_p { 9 } else { 5 };
        let decode = g.lanes * v * 4 * per_lane + g.lanes * cap * 4;
        // The cache is expanded from the prompts' rows to the lanes: both exist then.
        let expand = g.prompts.min(g.lanes) * cap * 2 * kd * b;
        cache + prefill.max(decode) + expand + self.cast_copy()
    }

    /// One layer's attention scores `[rows, heads, T, T]` at `bytes` per element: the
    /// CPU's fused attention with an explicit mask materialises them (measured; a CUDA
    /// kernel that streams them makes this term an overestimate there).
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

    /// Transient bytes of one training forward and backward.
    pub fn training(&self, t: &Training) -> u64 {
        let (h, _, _, _, layers, v) = self.dims();
        let b = self.bytes;
        let tokens = t.rows * t.tokens;
        // Per layer: the saved activations and the attention probabilities.
        let per_layer = tokens * self.saved_per_token_layer() + self.scores(t.rows, t.tokens, b);
        let mask_layers = if self.bf16() { layers } else { 0 };
        let mask = t.rows * t.tokens * t.tokens * (4 + b * mask_layers);
        let logits = t.targets * (v * (b + 4 * 4) + h * b);
        let backward = (t.targets * v * 4 * 2).max(per_layer);
        layers * per_layer + mask + logits + backward + self.cast_copy()
    }

    /// Transient bytes of a no-grad scoring forward (the KL reference).
    pub fn scoring(&self, t: &Training) -> u64 {
        let (h, i, qd, kd, _, v) = self.dims();
        let b = self.bytes;
        let tokens = t.rows * t.tokens;
        tokens * (3 * i * b + 4 * h * 4 + 3 * qd * b + 2 * kd * b)
            + t.rows * t.tokens * t.tokens * (4 + b)
            + self.scores(t.rows, t.tokens, 4)
            + t.targets * v * 4 * 3
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

/// Parse `80GiB`, `40GB`, `24g`, `512MiB`, `1073741824B` (binary units; `GB` = GiB,
/// as GPU memory is quoted). A number needs its unit.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let x: f64 = num
        .parse()
        .map_err(|_| format!("{s:?}: expected a size such as 80GiB, 40GB or 512MiB"))?;
    let scale = match unit.trim().to_ascii_lowercase().as_str() {
        // A bare number is almost always meant in GiB (`--gpu-memory 80`); reading it as
        // bytes would make every plan "not fit". The unit is asked for instead.
        "" => {
            return Err(format!(
                "{s:?}: give a unit, such as {num}GiB (or {num}MiB, or {num}B for bytes)"
            ))
        }
        "b" => 1u64,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        u => {
            return Err(format!(
                "{s:?}: unknown unit {u:?} (use KiB, MiB, GiB or TiB)"
            ))
        }
    };
    if !(x.is_finite() && x > 0.0) {
        return Err(format!("{s:?}: must be positive"));
    }
    Ok((x * scale as f64) as u64)
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

    #[test]
    fn sizes_parse_in_binary_units_and_bad_ones_are_named() {
        assert_eq!(parse_size("80GiB").unwrap(), 80 << 30);
        let e = parse_size("80").unwrap_err();
        assert!(e.contains("80GiB"), "{e}");
        assert_eq!(parse_size("4096B").unwrap(), 4096);
        assert_eq!(parse_size("40GB").unwrap(), 40 << 30);
        assert_eq!(parse_size("512MiB").unwrap(), 512 << 20);
        assert_eq!(parse_size("1.5g").unwrap(), 3 << 29);
        assert!(parse_size("80XB").unwrap_err().contains("unknown unit"));
        assert!(parse_size("lots").unwrap_err().contains("expected a size"));
    }
}
