//! The decoder-only transformer itself, with Hugging Face parameter names.
//!
//! What it owns: the parameter layout of a [`LmConfig`] ([`param_shapes`]), where each
//! parameter lives (trainable in a `VarStore`, or frozen), LoRA adapters, and the
//! forward pass with an optional key/value cache. Generation and the policy live in
//! sibling modules.
//!
//! The forward pass follows transformers' eager implementation step by step so that
//! a checkpoint gives the same numbers here and there:
//! - RMSNorm computes its statistics in f32 and casts back before the weight multiply;
//! - RoPE is rotate-half, with frequencies `1 / theta^(2i/d)` (Llama 3 scaled when
//!   configured), cos/sin computed in f32;
//! - attention scores are `q k^T / sqrt(head_dim)` plus an additive mask, softmaxed in
//!   f32; grouped-query attention folds the query heads of one KV head together instead
//!   of copying keys and values;
//! - Qwen3 normalises each query and key head before RoPE;
//! - the MLP is SwiGLU, `down(silu(gate(x)) * up(x))`.
//!
//! Dtypes: weights run in the *compute dtype* (`[train] dtype`: by default bf16 on CUDA,
//! f32 on CPU; `bf16` selects the CUDA path on the CPU too, see `train::compute`). Trainable
//! parameters are f32 master copies in the `VarStore` and are cast on use, so Adam
//! updates at lr 1e-6 are not lost to bf16 rounding; frozen weights (the base under
//! LoRA) are stored directly in the compute dtype.
use super::config::LmConfig;
use std::collections::BTreeMap;
use tch::{nn, Device, Kind, Tensor};

/// `(name, shape)` of every parameter a config implies, in the order checkpoints of
/// transformers list them (embedding, layers, final norm, head).
pub fn param_shapes(cfg: &LmConfig) -> Vec<(String, Vec<i64>)> {
    let (h, i, d) = (cfg.hidden_size, cfg.intermediate_size, cfg.head_dim);
    let q = cfg.num_attention_heads * d;
    let kv = cfg.num_key_value_heads * d;
    let mut v = vec![(
        "model.embed_tokens.weight".to_string(),
        vec![cfg.vocab_size, h],
    )];
    for l in 0..cfg.num_hidden_layers {
        let p = |s: &str| format!("model.layers.{l}.{s}");
        v.push((p("input_layernorm.weight"), vec![h]));
        for (m, out) in [("q_proj", q), ("k_proj", kv), ("v_proj", kv)] {
            v.push((p(&format!("self_attn.{m}.weight")), vec![out, h]));
            if cfg.qkv_bias {
                v.push((p(&format!("self_attn.{m}.bias")), vec![out]));
            }
        }
        v.push((p("self_attn.o_proj.weight"), vec![h, q]));
        if cfg.qk_norm {
            v.push((p("self_attn.q_norm.weight"), vec![d]));
            v.push((p("self_attn.k_norm.weight"), vec![d]));
        }
        v.push((p("post_attention_layernorm.weight"), vec![h]));
        v.push((p("mlp.gate_proj.weight"), vec![i, h]));
        v.push((p("mlp.up_proj.weight"), vec![i, h]));
        v.push((p("mlp.down_proj.weight"), vec![h, i]));
    }
    v.push(("model.norm.weight".to_string(), vec![h]));
    if !cfg.tie_word_embeddings {
        v.push(("lm_head.weight".to_string(), vec![cfg.vocab_size, h]));
    }
    v
}

pub use crate::plan::trainer::{LoraSpec, LORA_MODULES};

/// A `VarStore` variable at a dotted name (tch paths forbid dots inside a component).
fn var_at(vs: &nn::VarStore, name: &str, value: &Tensor) -> Tensor {
    let mut parts: Vec<&str> = name.split('.').collect();
    let last = parts.pop().expect("a parameter name");
    let mut p = vs.root();
    for c in parts {
        p = p / c;
    }
    p.var_copy(last, value)
}

/// One linear layer: weight, optional bias, optional LoRA pair `(A [r, in], B [out, r])`.
struct Lin {
    w: Tensor,
    b: Option<Tensor>,
    lora: Option<(Tensor, Tensor)>,
}

/// A layer's weights as generation reads them (see [`Model::inference_copy`]): the
/// projections that read the same input side by side in one matrix, each stored
/// transposed (`[in, out]`, contiguous), so a decode step makes one matrix product
/// where it made three (q, k, v) or two (gate, up). On the CPU, MKL multiplies a
/// contiguous `[in, out]` matrix 15-20% faster than the `[out, in]` one `linear`
/// transposes on the fly. Each output element is the same dot product, but MKL may
/// block a wider matrix differently, so the products agree with `linear`'s to rounding
/// (`fused_projections_agree_with_linear`: within 1e-6), not always bit for bit; at
/// the shipped base planner's decode shapes they gave the same bits.
struct Fused {
    /// q, k and v: `[hidden, (H + 2 Hkv) D]`, with their biases side by side.
    qkv_t: Tensor,
    qkv_b: Option<Tensor>,
    o_t: Tensor,
    /// gate and up: `[hidden, 2 I]`.
    gate_up_t: Tensor,
    down_t: Tensor,
    /// Qwen3's per-head norms, one row per query head then per key head: `[H + Hkv, D]`,
    /// so the q and k heads are normalised (and rotated) together.
    qk_norm: Option<Tensor>,
}

impl Fused {
    /// `x` `[.., in]` times a transposed weight `[in, out]`, plus a bias: the product
    /// `linear` computes, with the weight already in the layout MKL reads fastest.
    fn product(x: &Tensor, wt: &Tensor, b: Option<&Tensor>) -> Tensor {
        match b {
            // `addmm`, as `linear` with a bias does, so the bias is added in the same
            // place of the computation.
            Some(b) => {
                let size = x.size();
                let rows: i64 = size[..size.len() - 1].iter().product();
                let mut out = size.clone();
                *out.last_mut().expect("a last dim") = wt.size()[1];
                b.addmm(&x.reshape([rows, size[size.len() - 1]]), wt)
                    .view(out.as_slice())
            }
            None => x.matmul(wt),
        }
    }
}

struct Layer {
    fused: Option<Fused>,
    in_norm: Tensor,
    q: Lin,
    k: Lin,
    v: Lin,
    o: Lin,
    q_norm: Option<Tensor>,
    k_norm: Option<Tensor>,
    post_norm: Tensor,
    gate: Lin,
    up: Lin,
    down: Lin,
}

/// Per layer, preallocated keys and values `[B, Hkv, capacity, D]`, filled up to `len`.
/// Where decode steps run in [`super::decode`] (f32 on the CPU), keys are kept
/// transposed, `[B, Hkv, D, capacity]`, the layout it reads.
pub struct KvCache {
    layers: Vec<(Tensor, Tensor)>,
    pub len: i64,
    keys_transposed: bool,
}

impl KvCache {
    pub fn new(cfg: &LmConfig, batch: i64, capacity: i64, kind: Kind, device: Device) -> KvCache {
        let transposed = super::decode::applies(kind, device);
        KvCache::with_layout(cfg, batch, capacity, kind, device, transposed)
    }

    /// A cache whose keys are `[B, Hkv, capacity, D]` on every device: what
    /// [`Model::decode_fixed`] writes and reads.
    pub fn untransposed(
        cfg: &LmConfig,
        batch: i64,
        capacity: i64,
        kind: Kind,
        device: Device,
    ) -> KvCache {
        KvCache::with_layout(cfg, batch, capacity, kind, device, false)
    }

    fn with_layout(
        cfg: &LmConfig,
        batch: i64,
        capacity: i64,
        kind: Kind,
        device: Device,
        keys_transposed: bool,
    ) -> KvCache {
        let (kvh, d) = (cfg.num_key_value_heads, cfg.head_dim);
        let kshape = if keys_transposed {
            [batch, kvh, d, capacity]
        } else {
            [batch, kvh, capacity, d]
        };
        KvCache {
            layers: (0..cfg.num_hidden_layers)
                .map(|_| {
                    (
                        Tensor::zeros(kshape, (kind, device)),
                        Tensor::zeros([batch, kvh, capacity, d], (kind, device)),
                    )
                })
                .collect(),
            len: 0,
            keys_transposed,
        }
    }

    /// Keep (and reorder, or repeat) batch rows: `idx` indexes the current rows.
    pub fn select(&mut self, idx: &Tensor) {
        for (k, v) in self.layers.iter_mut() {
            *k = k.index_select(0, idx);
            *v = v.index_select(0, idx);
        }
    }
}

/// What every layer of one uncached forward shares ([`Model::layer_inputs`]): RoPE's
/// cos and sin for the positions, and the attention mask in the compute dtype (None:
/// causal attention with no mask, for right-padded rows).
pub struct LayerInputs {
    cos: Tensor,
    sin: Tensor,
    mask: Option<Tensor>,
}

/// A kernel of torch's `scaled_dot_product_attention` (its `SDPBackend`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AttentionKernel {
    /// The unfused composition (scores materialised).
    Math,
    Flash,
    /// The memory-efficient kernel (xFormers').
    Efficient,
    Cudnn,
    /// A backend a device extension registers, or none that fits (torch's `error`).
    Other,
}

impl AttentionKernel {
    /// torch's `SDPBackend` number (`math` 0, `flash_attention` 1,
    /// `efficient_attention` 2, `cudnn_attention` 3).
    fn from_torch(n: i64) -> AttentionKernel {
        match n {
            0 => AttentionKernel::Math,
            1 => AttentionKernel::Flash,
            2 => AttentionKernel::Efficient,
            3 => AttentionKernel::Cudnn,
            _ => AttentionKernel::Other,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            AttentionKernel::Math => "math",
            AttentionKernel::Flash => "flash",
            AttentionKernel::Efficient => "efficient",
            AttentionKernel::Cudnn => "cudnn",
            AttentionKernel::Other => "other",
        }
    }
}

/// The model: parameters and the forward pass.
pub struct Model {
    pub cfg: LmConfig,
    /// Trainable parameters (f32 masters): all weights, or only LoRA adapters.
    pub vs: nn::VarStore,
    /// Frozen weights in the compute dtype (the base under LoRA), by name.
    pub frozen: BTreeMap<String, Tensor>,
    pub lora: Option<LoraSpec>,
    /// The compute dtype (f32 or bf16; see `train::compute`).
    pub dtype: Kind,
    embed: Tensor,
    layers: Vec<Layer>,
    norm: Tensor,
    head: Tensor,
    inv_freq: Tensor,
    /// Bytes generation may hold for its key/value caches and decode buffers: lanes
    /// run in waves that fit (see [`super::generate::Decoding`]). None: one wave.
    /// A resource setting of the machine, like the device: never hashed.
    pub generation_memory: Option<u64>,
    /// LoRA adapters' products in the compute dtype rather than f32 (the plan's
    /// `[lm] lora_in_compute_dtype`, set with the policy's settings).
    pub lora_in_compute_dtype: bool,
    /// RMSNorm as one fused `rms_norm` call (a GPU's generation copy,
    /// [`GenerationLayout::fused_norms`], or every forward under the plan's `[lm]
    /// training_norms = "fused"`) rather than transformers' eager eight ops.
    fused_norms: bool,
}

/// Why a set of named tensors does not make a model.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WeightsError {
    #[error("missing tensor {0}")]
    Missing(String),
    #[error("tensor {name} has shape {found:?}, the config implies {expected:?}")]
    Shape {
        name: String,
        found: Vec<i64>,
        expected: Vec<i64>,
    },
    #[error("unexpected tensor {0} (not a parameter of this architecture)")]
    Extra(String),
}

/// The default compute dtype for a device (bf16 on CUDA, f32 on CPU; `[train] dtype =
/// "auto"`).
pub fn compute_dtype(device: Device) -> Kind {
    crate::train::compute::dtype_kind(crate::train::compute::Dtype::Auto, device)
}

/// RoPE inverse frequencies `[head_dim / 2]` (f32), as transformers computes them.
fn inv_freq(cfg: &LmConfig, device: Device) -> Tensor {
    let d = cfg.head_dim;
    let exps = Tensor::arange_start_step(0, d, 2, (Kind::Int64, Device::Cpu)).to_kind(Kind::Float)
        / d as f64;
    let inv = Tensor::ones_like(&exps) / Tensor::pow_scalar(cfg.rope_theta, &exps);
    let inv = match cfg.rope_scaling {
        None => inv,
        Some(s) => {
            let old = s.original_max_position_embeddings;
            let low_wavelen = old / s.low_freq_factor;
            let high_wavelen = old / s.high_freq_factor;
            let wavelen = (Tensor::ones_like(&inv) * (2.0 * std::f64::consts::PI)) / &inv;
            let scaled = (&inv / s.factor).where_self(&wavelen.gt(low_wavelen), &inv);
            let smooth = (wavelen.ones_like() * old / &wavelen - s.low_freq_factor)
                / (s.high_freq_factor - s.low_freq_factor);
            let smoothed = (smooth.ones_like() - &smooth) * &scaled / s.factor + &smooth * &scaled;
            let medium = wavelen
                .lt(high_wavelen)
                .logical_not()
                .logical_and(&wavelen.gt(low_wavelen).logical_not());
            smoothed.where_self(&medium, &scaled)
        }
    };
    inv.to_device(device)
}

/// Models whose weights take more bytes than this generate without [`Fused`]
/// projections (see [`Model::inference_copy`]).
pub const FUSED_BYTES: i64 = 1 << 30;

/// How [`Model::inference_copy`] lays out the weights generation reads.
///
/// - **fuse**: the projections that read the same input side by side in one matrix
///   ([`Fused`]), so a step makes one product where it made three (q, k, v) or two
///   (gate, up). The copy holds a second set of weights, so on the CPU only models
///   under [`FUSED_BYTES`] are fused: the small models whose decode step is per-op
///   overhead. On a GPU every model is fused: there a step's time is kernel launches
///   and weight reads, and the copy is what [`crate::train::memory`] counts.
/// - **merge**: LoRA adapters folded into the copy's weights (`W + alpha/r * B A`,
///   summed in f32, rounded once to the compute dtype), as rollout engines serve an
///   adapted model. On a GPU only: the unmerged path runs five more kernels per
///   projection (two f32 products, a scale, two casts) at every decode step. Sampled
///   log-probs then differ from the training forward's (which keeps the adapters
///   apart) by bf16 rounding, as they already do between kernels of different shapes.
///   On the CPU adapters stay apart and the layers unfused, as before.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GenerationLayout {
    /// Generation uses the adapters (`use_lora` and the model has them).
    pub adapters: bool,
    pub merge: bool,
    pub fuse: bool,
    /// RMSNorm as torch's `rms_norm` kernel (statistics in f32, rounded once) and
    /// the weight multiply: two launches where transformers' eager order takes eight,
    /// in the same order of roundings; on a GPU, where 24 of a decode layer's 45 kernel
    /// launches were norms. Agrees with the eager path to rounding of the mean.
    pub fused_norms: bool,
}

impl GenerationLayout {
    pub fn for_model(model: &Model, use_lora: bool) -> GenerationLayout {
        let adapters = use_lora && model.lora.is_some();
        if model.device() != Device::Cpu {
            return GenerationLayout::gpu(adapters);
        }
        let bytes = model.cfg.parameter_count() * model.dtype.elt_size_in_bytes() as i64;
        GenerationLayout {
            adapters,
            merge: false,
            fuse: !adapters && bytes <= FUSED_BYTES,
            fused_norms: false,
        }
    }

    /// The layout on a GPU: adapters merged, every layer fused.
    pub fn gpu(adapters: bool) -> GenerationLayout {
        GenerationLayout {
            adapters,
            merge: adapters,
            fuse: true,
            fused_norms: true,
        }
    }
}

fn rotate_half(x: &Tensor) -> Tensor {
    let half = x.size().last().copied().expect("a last dim") / 2;
    let x1 = x.narrow(-1, 0, half);
    let x2 = x.narrow(-1, half, half);
    Tensor::cat(&[x2.neg(), x1], -1)
}

impl Model {
    /// Build from named tensors (`weights`, on any device and dtype). With `lora`, every
    /// weight is frozen in the compute dtype and fresh adapters are the trainable
    /// parameters (A uniform in ±1/sqrt(in) from `seed`, B zero, so the adapted model
    /// starts equal to the base); without, every weight is a trainable f32 master.
    /// `compute`: a device (its default dtype) or a device and dtype.
    pub fn from_weights(
        cfg: LmConfig,
        mut weights: BTreeMap<String, Tensor>,
        compute: impl Into<crate::train::compute::Compute>,
        lora: Option<LoraSpec>,
        seed: crate::seed::Seed,
    ) -> Result<Model, WeightsError> {
        let crate::train::compute::Compute { device, dtype } = compute.into();
        let shapes = param_shapes(&cfg);
        for (name, shape) in &shapes {
            let t = weights
                .get(name)
                .ok_or_else(|| WeightsError::Missing(name.clone()))?;
            if &t.size() != shape {
                return Err(WeightsError::Shape {
                    name: name.clone(),
                    found: t.size(),
                    expected: shape.clone(),
                });
            }
        }
        if let Some(extra) = weights
            .keys()
            .find(|k| !shapes.iter().any(|(n, _)| n == *k))
        {
            return Err(WeightsError::Extra(extra.clone()));
        }
        let vs = nn::VarStore::new(device);
        let mut frozen = BTreeMap::new();
        let mut handles: BTreeMap<String, Tensor> = BTreeMap::new();
        {
            let _guard = tch::no_grad_guard();
            for (name, _) in &shapes {
                let t = weights.remove(name).expect("checked above");
                let h = if lora.is_some() {
                    let f = t.to_device(device).to_kind(dtype).set_requires_grad(false);
                    frozen.insert(name.clone(), f.shallow_clone());
                    f
                } else {
                    var_at(&vs, name, &t.to_device(device).to_kind(Kind::Float))
                };
                handles.insert(name.clone(), h);
            }
        }
        let mut adapters: BTreeMap<String, (Tensor, Tensor)> = BTreeMap::new();
        if let Some(spec) = &lora {
            let _rng = super::super::seeded_torch_rng(seed);
            for (name, shape) in &shapes {
                let Some(module) = name.strip_suffix(".weight") else {
                    continue;
                };
                let short = module.rsplit('.').next().unwrap_or("");
                if !spec.targets.iter().any(|t| t == short) {
                    continue;
                }
                let (out, inp) = (shape[0], shape[1]);
                let bound = 1.0 / (inp as f64).sqrt();
                let a = Tensor::empty([spec.rank, inp], (Kind::Float, Device::Cpu))
                    .uniform_(-bound, bound);
                let b = Tensor::zeros([out, spec.rank], (Kind::Float, Device::Cpu));
                let a = var_at(
                    &vs,
                    &format!("{module}.lora_A.weight"),
                    &a.to_device(device),
                );
                let b = var_at(
                    &vs,
                    &format!("{module}.lora_B.weight"),
                    &b.to_device(device),
                );
                adapters.insert(module.to_string(), (a, b));
            }
        }
        let take = |n: &str| handles[n].shallow_clone();
        let lin = |module: &str, bias: bool| Lin {
            w: take(&format!("{module}.weight")),
            b: bias.then(|| take(&format!("{module}.bias"))),
            lora: adapters
                .get(module)
                .map(|(a, b)| (a.shallow_clone(), b.shallow_clone())),
        };
        let layers = (0..cfg.num_hidden_layers)
            .map(|l| {
                let p = |s: &str| format!("model.layers.{l}.{s}");
                Layer {
                    fused: None,
                    in_norm: take(&p("input_layernorm.weight")),
                    q: lin(&p("self_attn.q_proj"), cfg.qkv_bias),
                    k: lin(&p("self_attn.k_proj"), cfg.qkv_bias),
                    v: lin(&p("self_attn.v_proj"), cfg.qkv_bias),
                    o: lin(&p("self_attn.o_proj"), false),
                    q_norm: cfg.qk_norm.then(|| take(&p("self_attn.q_norm.weight"))),
                    k_norm: cfg.qk_norm.then(|| take(&p("self_attn.k_norm.weight"))),
                    post_norm: take(&p("post_attention_layernorm.weight")),
                    gate: lin(&p("mlp.gate_proj"), false),
                    up: lin(&p("mlp.up_proj"), false),
                    down: lin(&p("mlp.down_proj"), false),
                }
            })
            .collect();
        let embed = take("model.embed_tokens.weight");
        let head = if cfg.tie_word_embeddings {
            embed.shallow_clone()
        } else {
            take("lm_head.weight")
        };
        Ok(Model {
            generation_memory: None,
            lora_in_compute_dtype: false,
            fused_norms: false,
            inv_freq: inv_freq(&cfg, device),
            norm: take("model.norm.weight"),
            cfg,
            vs,
            frozen,
            lora,
            dtype,
            embed,
            layers,
            head,
        })
    }

    /// Fresh random weights for a config (scratch models): normal(0, 0.02) for
    /// embeddings and projections, zero biases, unit norms, drawn from `seed`.
    pub fn random_weights(cfg: &LmConfig, seed: crate::seed::Seed) -> BTreeMap<String, Tensor> {
        let _rng = super::super::seeded_torch_rng(seed);
        param_shapes(cfg)
            .into_iter()
            .map(|(name, shape)| {
                let t = if name.ends_with("norm.weight") {
                    Tensor::ones(&shape, (Kind::Float, Device::Cpu))
                } else if name.ends_with(".bias") {
                    Tensor::zeros(&shape, (Kind::Float, Device::Cpu))
                } else {
                    Tensor::randn(&shape, (Kind::Float, Device::Cpu)) * 0.02
                };
                (name, t)
            })
            .collect()
    }

    pub fn device(&self) -> Device {
        self.vs.device()
    }

    /// Every layer carries fused projections (a generation copy that fuses).
    pub fn is_fused(&self) -> bool {
        self.layers.iter().all(|l| l.fused.is_some())
    }

    /// The model generation runs (None: generate with `self`), laid out as
    /// [`GenerationLayout::for_model`] decides. Its weights are in the compute dtype,
    /// cast once instead of at every decode step.
    pub fn inference_copy(&self, use_lora: bool) -> Option<Model> {
        self.inference_copy_as(GenerationLayout::for_model(self, use_lora))
    }

    /// [`Model::inference_copy`] with a chosen layout (tests force the GPU's layout on
    /// the CPU through this).
    pub fn inference_copy_as(&self, layout: GenerationLayout) -> Option<Model> {
        let GenerationLayout {
            adapters,
            merge,
            fuse,
            fused_norms,
        } = layout;
        let cast_needed = !(self.embed.kind() == self.dtype
            && self.layers.iter().all(|l| l.q.w.kind() == self.dtype));
        if !fuse && !merge && !fused_norms && !cast_needed {
            return None;
        }
        let _guard = tch::no_grad_guard();
        let c = |t: &Tensor| self.w(t);
        // The weight a projection computes with: cast, and with its adapter merged in
        // (`W + alpha/r * B A`, summed in f32 and rounded once) under `merge`.
        let weight = |l: &Lin| match (&l.lora, merge) {
            (Some((a, b)), true) => {
                let scale = self.lora.as_ref().expect("adapters have a spec").scale();
                (l.w.to_kind(Kind::Float) + b.matmul(a) * scale).to_kind(self.dtype)
            }
            _ => c(&l.w),
        };
        // Fused layers compute every projection from `Fused`; their `Lin`s are never
        // read, so they stay handles on the original tensors (no second copy).
        let lin = |l: &Lin| Lin {
            w: if fuse { l.w.shallow_clone() } else { weight(l) },
            b: l.b.as_ref().map(c),
            lora: l
                .lora
                .as_ref()
                .filter(|_| adapters && !merge)
                .map(|(a, b)| (a.shallow_clone(), b.shallow_clone())),
        };
        let side_by_side = |ls: &[&Lin]| {
            let wt = Tensor::cat(&ls.iter().map(|l| weight(l)).collect::<Vec<_>>(), 0)
                .transpose(0, 1)
                .contiguous();
            let b = ls[0].b.as_ref().map(|_| {
                Tensor::cat(
                    &ls.iter()
                        .map(|l| c(l.b.as_ref().expect("all or none biased")))
                        .collect::<Vec<_>>(),
                    0,
                )
            });
            (wt, b)
        };
        let (h, kvh) = (self.cfg.num_attention_heads, self.cfg.num_key_value_heads);
        let fused = |l: &Layer| {
            let (qkv_t, qkv_b) = side_by_side(&[&l.q, &l.k, &l.v]);
            Fused {
                qkv_t,
                qkv_b,
                o_t: side_by_side(&[&l.o]).0,
                gate_up_t: side_by_side(&[&l.gate, &l.up]).0,
                down_t: side_by_side(&[&l.down]).0,
                qk_norm: l.q_norm.as_ref().zip(l.k_norm.as_ref()).map(|(qn, kn)| {
                    let d = qn.size()[0];
                    Tensor::cat(
                        &[c(qn).expand([h, d], false), c(kn).expand([kvh, d], false)],
                        0,
                    )
                    .contiguous()
                }),
            }
        };
        Some(Model {
            cfg: self.cfg.clone(),
            vs: nn::VarStore::new(self.device()),
            frozen: BTreeMap::new(),
            lora: self.lora.clone().filter(|_| adapters && !merge),
            dtype: self.dtype,
            embed: c(&self.embed),
            layers: self
                .layers
                .iter()
                .map(|l| Layer {
                    fused: fuse.then(|| fused(l)),
                    in_norm: c(&l.in_norm),
                    q: lin(&l.q),
                    k: lin(&l.k),
                    v: lin(&l.v),
                    o: lin(&l.o),
                    q_norm: l.q_norm.as_ref().map(c),
                    k_norm: l.k_norm.as_ref().map(c),
                    post_norm: c(&l.post_norm),
                    gate: lin(&l.gate),
                    up: lin(&l.up),
                    down: lin(&l.down),
                })
                .collect(),
            norm: c(&self.norm),
            head: c(&self.head),
            inv_freq: self.inv_freq.shallow_clone(),
            generation_memory: self.generation_memory,
            lora_in_compute_dtype: self.lora_in_compute_dtype,
            fused_norms: layout.fused_norms || self.fused_norms,
        })
    }

    /// A weight in the compute dtype (a no-op for f32 on CPU and for frozen weights).
    fn w(&self, t: &Tensor) -> Tensor {
        if t.kind() == self.dtype {
            t.shallow_clone()
        } else {
            t.to_kind(self.dtype)
        }
    }

    fn linear(&self, lin: &Lin, x: &Tensor, use_lora: bool) -> Tensor {
        let b = lin.b.as_ref().map(|b| self.w(b));
        let y = x.linear(&self.w(&lin.w), b.as_ref());
        match (&lin.lora, &self.lora, use_lora) {
            (Some((a, bm)), Some(spec), true) => {
                // The adapter's products in f32 (its updates are small), or with
                // `lora_in_compute_dtype` in the compute dtype, as mixed precision runs
                // them; the gradients reach the f32 masters through the casts.
                let kind = if self.lora_in_compute_dtype {
                    self.dtype
                } else {
                    Kind::Float
                };
                // (A cast to the kind a tensor has is an alias, no copy.)
                let z = x
                    .to_kind(kind)
                    .linear::<Tensor>(&a.to_kind(kind), None)
                    .linear::<Tensor>(&bm.to_kind(kind), None)
                    * spec.scale();
                y + self.w(&z)
            }
            _ => y,
        }
    }

    fn rms_norm(&self, x: &Tensor, w: &Tensor) -> Tensor {
        if self.fused_norms {
            let d = x.size().last().copied().expect("a last dim");
            // Normalised and rounded in one kernel, then the weight: transformers'
            // order (which rounds before the weight) in two launches instead of eight.
            return self.w(w) * x.rms_norm([d], None::<Tensor>, self.cfg.rms_norm_eps);
        }
        let xf = x.to_kind(Kind::Float);
        let var = xf.square().mean_dim(-1, true, Kind::Float);
        let normed = (xf * (var + self.cfg.rms_norm_eps).rsqrt()).to_kind(self.dtype);
        self.w(w) * normed
    }

    /// cos and sin `[B, 1, T, D]` for positions `[B, T]`.
    fn rope(&self, positions: &Tensor) -> (Tensor, Tensor) {
        let freqs = positions.to_kind(Kind::Float).unsqueeze(-1) * self.inv_freq.view([1, 1, -1]);
        let emb = Tensor::cat(&[&freqs, &freqs], -1).unsqueeze(1);
        (emb.cos().to_kind(self.dtype), emb.sin().to_kind(self.dtype))
    }

    /// Final hidden states `[B, T, hidden]` of `tokens` `[B, T]` at `positions` `[B, T]`
    /// under the additive f32 attention `bias` `[B, 1, T, Tk]` (Tk = cached + T). With a
    /// cache, the new keys and values are written at `cache.len..` and `len` advances.
    /// `use_lora: false` runs the frozen base alone (the KL reference under LoRA).
    // `x = x + f(x)`, not `x += f(x)`: an in-place add would overwrite a tensor autograd
    // saved for the backward pass.
    #[allow(clippy::assign_op_pattern)]
    pub fn hidden(
        &self,
        tokens: &Tensor,
        positions: &Tensor,
        bias: &Tensor,
        mut cache: Option<&mut KvCache>,
        use_lora: bool,
    ) -> Tensor {
        let (b, t) = tokens.size2().expect("[B, T] tokens");
        if let Some(cache) = cache.as_deref_mut() {
            if t == 1 && cache.keys_transposed && self.layers.iter().all(|l| l.fused.is_some()) {
                return self.decode_step(tokens, positions, bias, cache);
            }
        }
        let c = &self.cfg;
        let (h, d) = (c.num_attention_heads, c.head_dim);
        let scale = 1.0 / (d as f64).sqrt();
        let (cos, sin) = self.rope(positions);
        let mut x = self.embed(tokens);
        let start = cache.as_ref().map_or(0, |c| c.len);
        // One query per row of a batch (a decode step) without the Rust kernel: plain
        // attention. Its scores are only [B, H, 1, Tk], and on the CPU two batched
        // matmuls and a softmax beat the fused kernel, whose blocking is built for long
        // queries (+10-13% decode tokens/s at batch 64; at batch 1 the single fused call
        // is ~5-9% faster): [`Model::one_query_attention`].
        let plain = |q: &Tensor, k: &Tensor, v: &Tensor| {
            let tk = k.size()[2];
            self.one_query_attention(q, k, v, &bias.view([b, 1, 1, tk]))
        };
        // Fused attention (torch's scaled_dot_product_attention): on the CPU its flash
        // kernel never materialises the [T, T] score matrix, which decides whether long
        // engineer prompts fit in memory; grouped-query heads are handled by the kernel
        // (`enable_gqa`), so keys and values are not copied.
        // The mask in the compute dtype, cast once for every layer (a decode step on a
        // GPU is kernel launches: one cast per layer was 36 more for a 4B model).
        let mask = bias.to_kind(self.dtype);
        let sdpa = |q: &Tensor, k: &Tensor, v: &Tensor| self.attention(q, k, v, Some(&mask));
        // The decode kernel's bias rows `[B, Tk]`, made once for all layers.
        let decode_bias = (t == 1 && cache.as_ref().is_some_and(|c| c.keys_transposed))
            .then(|| bias.reshape([b, -1]).contiguous());
        for (l, layer) in self.layers.iter().enumerate() {
            let xin = self.rms_norm(&x, &layer.in_norm);
            let (q, k, v) = self.queries_keys_values(layer, &xin, &cos, &sin, use_lora);
            let y = match cache.as_deref_mut() {
                Some(cache) if cache.keys_transposed => {
                    let (ck, cv) = &cache.layers[l];
                    ck.narrow(3, start, t).copy_(&k.transpose(2, 3));
                    cv.narrow(2, start, t).copy_(&v);
                    if t == 1 {
                        let rows = decode_bias.as_ref().expect("made for decode steps");
                        super::decode::attention(&q.contiguous(), ck, cv, rows, start + 1, scale)
                            .view([b, 1, h * d])
                    } else if start == 0 {
                        // A prefill: the keys just computed are all there is.
                        sdpa(&q, &k, &v)
                    } else {
                        sdpa(
                            &q,
                            &ck.narrow(3, 0, start + t).transpose(2, 3),
                            &cv.narrow(2, 0, start + t),
                        )
                    }
                }
                Some(cache) => {
                    let (ck, cv) = &cache.layers[l];
                    ck.narrow(2, start, t).copy_(&k);
                    cv.narrow(2, start, t).copy_(&v);
                    let (k, v) = (ck.narrow(2, 0, start + t), cv.narrow(2, 0, start + t));
                    if t == 1 && (b >= 8 || self.device() != Device::Cpu) {
                        plain(&q, &k, &v)
                    } else {
                        sdpa(&q, &k, &v)
                    }
                }
                None => sdpa(&q, &k, &v),
            };
            x = self.output_and_mlp(layer, &x, &y, use_lora);
        }
        if let Some(cache) = cache {
            cache.len = start + t;
        }
        self.final_norm(&x)
    }

    /// Attention of one query per row, `q` `[B, H, 1, D]`, over keys and values `[B,
    /// Hkv, Tk, D]` under the f32 additive `bias` `[B, 1, 1, Tk]`, as `[B, 1, H D]`:
    /// two batched matmuls and a softmax (see [`Model::hidden`] for why not the fused
    /// kernel). The `rep` query heads sharing a KV head are stacked along the query
    /// axis (a view: the `[B, H, 1, D]` queries are contiguous), so keys and values are
    /// never copied.
    fn one_query_attention(&self, q: &Tensor, k: &Tensor, v: &Tensor, bias: &Tensor) -> Tensor {
        let c = &self.cfg;
        let (h, kvh, d) = (c.num_attention_heads, c.num_key_value_heads, c.head_dim);
        let b = q.size()[0];
        let scale = 1.0 / (d as f64).sqrt();
        let qg = q.reshape([b, kvh, h / kvh, d]);
        let scores = qg.matmul(&k.transpose(-2, -1)) * scale + bias;
        scores
            .softmax(-1, Kind::Float)
            .to_kind(self.dtype)
            .matmul(v)
            .reshape([b, 1, h * d])
    }

    /// One decode step whose shapes never change, for a step captured once and
    /// replayed ([`super::graph`]): `tokens` `[B, 1]` at `positions` `[B, 1]` write
    /// their keys and values at cache index `at` (`[1]`, i64, on the device) and attend
    /// over the cache's first `span` keys under `mask` `[B, 1, 1, span]` (f32 additive;
    /// `at < span <= capacity`, and the caller masks every key past `at`). Nothing
    /// depends on how many tokens were decoded within a span and nothing is read back
    /// to the host; the cache's `len` is not moved.
    /// Needs a cache from [`KvCache::untransposed`]. Returns the final hidden states
    /// `[B, 1, hidden]`.
    // `x = x + f(x)`: see `hidden`.
    #[allow(clippy::assign_op_pattern)]
    pub fn decode_fixed(
        &self,
        tokens: &Tensor,
        positions: &Tensor,
        mask: &Tensor,
        cache: &KvCache,
        at: &Tensor,
        use_lora: bool,
    ) -> Tensor {
        assert!(
            !cache.keys_transposed,
            "decode_fixed reads [B, Hkv, capacity, D] keys"
        );
        let span = mask.size().last().copied().expect("a key dim");
        let (cos, sin) = self.rope(positions);
        let mut x = self.embed(tokens);
        for (layer, (ck, cv)) in self.layers.iter().zip(&cache.layers) {
            let xin = self.rms_norm(&x, &layer.in_norm);
            let (q, k, v) = self.queries_keys_values(layer, &xin, &cos, &sin, use_lora);
            let _ = ck.shallow_clone().index_copy_(2, at, &k);
            let _ = cv.shallow_clone().index_copy_(2, at, &v);
            let (k, v) = (ck.narrow(2, 0, span), cv.narrow(2, 0, span));
            let y = self.one_query_attention(&q, &k, &v, mask);
            x = self.output_and_mlp(layer, &x, &y, use_lora);
        }
        self.final_norm(&x)
    }

    /// Queries, keys and values `[B, heads, T, D]` of one layer's normed input `xin`
    /// `[B, T, hidden]`, q and k normed (Qwen3) and rotated by `cos`/`sin`.
    fn queries_keys_values(
        &self,
        layer: &Layer,
        xin: &Tensor,
        cos: &Tensor,
        sin: &Tensor,
        use_lora: bool,
    ) -> (Tensor, Tensor, Tensor) {
        let c = &self.cfg;
        let (h, kvh, d) = (c.num_attention_heads, c.num_key_value_heads, c.head_dim);
        let size = xin.size();
        let (b, t) = (size[0], size[1]);
        let heads = |z: Tensor, n: i64| z.view([b, t, n, d]);
        match &layer.fused {
            Some(f) => {
                // The query and key heads side by side: one norm, one rotation.
                let qkv = heads(Fused::product(xin, &f.qkv_t, f.qkv_b.as_ref()), h + 2 * kvh);
                let mut qk = qkv.narrow(2, 0, h + kvh);
                if let Some(w) = &f.qk_norm {
                    qk = self.rms_norm(&qk, w);
                }
                let qk = qk.transpose(1, 2);
                let qk = &qk * cos + rotate_half(&qk) * sin;
                (
                    qk.narrow(1, 0, h),
                    qk.narrow(1, h, kvh),
                    qkv.narrow(2, h + kvh, kvh).transpose(1, 2),
                )
            }
            None => {
                let mut q = heads(self.linear(&layer.q, xin, use_lora), h);
                let mut k = heads(self.linear(&layer.k, xin, use_lora), kvh);
                let v = heads(self.linear(&layer.v, xin, use_lora), kvh).transpose(1, 2);
                if let (Some(qn), Some(kn)) = (&layer.q_norm, &layer.k_norm) {
                    q = self.rms_norm(&q, qn);
                    k = self.rms_norm(&k, kn);
                }
                let q = q.transpose(1, 2);
                let k = k.transpose(1, 2);
                let q = &q * cos + rotate_half(&q) * sin;
                let k = &k * cos + rotate_half(&k) * sin;
                (q, k, v)
            }
        }
    }

    /// Fused attention (torch's `scaled_dot_product_attention`) of queries `[B, H, Tq,
    /// D]` over keys and values `[B, Hkv, Tk, D]` under `mask` (the additive bias in the
    /// compute dtype; None: causal, `Tq == Tk`), as `[B, Tq, H D]`. Grouped-query heads
    /// are handled by the kernel (`enable_gqa`), so keys and values are not copied. On
    /// the CPU its flash kernel never materialises the `[Tq, Tk]` scores without a mask;
    /// with one it does (what `train::memory` counts there). On an H100 with torch 2.11
    /// a bf16 call with a mask and grouped heads runs cuDNN's kernel, which does not.
    fn attention(&self, q: &Tensor, k: &Tensor, v: &Tensor, mask: Option<&Tensor>) -> Tensor {
        let c = &self.cfg;
        let (h, kvh, d) = (c.num_attention_heads, c.num_key_value_heads, c.head_dim);
        let scale = 1.0 / (d as f64).sqrt();
        let size = q.size();
        let (b, t) = (size[0], size[2]);
        let causal = mask.is_none();
        Tensor::scaled_dot_product_attention(q, k, v, mask, 0.0, causal, scale, h > kvh)
            .transpose(1, 2)
            .reshape([b, t, h * d])
    }

    /// The kernel torch's `scaled_dot_product_attention` picks for a training forward's
    /// attention (queries with gradients, in the layout [`Model::attention`] gets them)
    /// of one row of `len` tokens on this model's device and compute dtype, under a mask
    /// (`masked`: left-padded rows) or causal. torch chooses by device, dtype, layout,
    /// mask and head shapes, not by the number of rows. Asked of torch
    /// (`_fused_sdp_choice`), so a GPU run can say which kernel its steps ran: on sm90
    /// torch 2.11 puts cuDNN's first, which builds an execution graph for every new
    /// shape, and `TORCH_CUDNN_SDPA_DEPRIORITIZED=1` moves it last.
    pub fn attention_kernel(&self, len: i64, masked: bool) -> AttentionKernel {
        let c = &self.cfg;
        let (h, kvh, d) = (c.num_attention_heads, c.num_key_value_heads, c.head_dim);
        let opts = (self.dtype, self.device());
        let heads = |n: i64| {
            Tensor::empty([1, len, n, d], opts)
                .set_requires_grad(true)
                .transpose(1, 2)
        };
        let (q, k, v) = (heads(h), heads(kvh), heads(kvh));
        let mask = masked.then(|| Tensor::zeros([1, 1, len, len], opts));
        let scale = 1.0 / (d as f64).sqrt();
        AttentionKernel::from_torch(Tensor::internal_fused_sdp_choice(
            &q,
            &k,
            &v,
            mask.as_ref(),
            0.0,
            !masked,
            scale,
            h > kvh,
        ))
    }

    /// The rest of a layer after attention: the output projection of `y` added to the
    /// stream `x`, then the SwiGLU MLP of its norm added too.
    // `x = x + f(x)`, not `x += f(x)`: an in-place add would overwrite a tensor autograd
    // saved for the backward pass.
    #[allow(clippy::assign_op_pattern)]
    fn output_and_mlp(&self, layer: &Layer, x: &Tensor, y: &Tensor, use_lora: bool) -> Tensor {
        match &layer.fused {
            Some(f) => {
                let x = x + Fused::product(y, &f.o_t, None);
                let xm = self.rms_norm(&x, &layer.post_norm);
                let gu = Fused::product(&xm, &f.gate_up_t, None);
                let i = self.cfg.intermediate_size;
                let g = gu.narrow(-1, 0, i).silu();
                x + Fused::product(&(g * gu.narrow(-1, i, i)), &f.down_t, None)
            }
            None => {
                let x = x + self.linear(&layer.o, y, use_lora);
                let xm = self.rms_norm(&x, &layer.post_norm);
                let g = self.linear(&layer.gate, &xm, use_lora).silu();
                let u = self.linear(&layer.up, &xm, use_lora);
                x + self.linear(&layer.down, &(g * u), use_lora)
            }
        }
    }

    /// Token embeddings `[B, T, hidden]` of `tokens` `[B, T]`, in the compute dtype: the
    /// first step of [`Model::hidden`].
    pub fn embed(&self, tokens: &Tensor) -> Tensor {
        Tensor::embedding(&self.w(&self.embed), tokens, -1, false, false)
    }

    /// What every layer of one uncached forward shares (see [`Model::layer`]).
    /// `bias`: the additive f32 bias `[B, 1, T, T]` of left-padded rows, or None for
    /// right-padded rows under causal attention.
    pub fn layer_inputs(&self, positions: &Tensor, bias: Option<&Tensor>) -> LayerInputs {
        let (cos, sin) = self.rope(positions);
        LayerInputs {
            cos,
            sin,
            mask: bias.map(|b| b.to_kind(self.dtype)),
        }
    }

    /// Final hidden states `[B, T, hidden]` of an uncached forward (a training or
    /// scoring forward) of `tokens` `[B, T]` under `inputs`: embedding, every
    /// [`Model::layer`], the final norm. With a mask, the ops (and bits) of
    /// [`Model::hidden`] without a cache.
    pub fn uncached(&self, tokens: &Tensor, inputs: &LayerInputs, use_lora: bool) -> Tensor {
        let mut x = self.embed(tokens);
        for l in 0..self.layers.len() {
            x = self.layer(l, &x, inputs, use_lora);
        }
        self.final_norm(&x)
    }

    /// RMSNorm as torch's one fused kernel (`true`) or in transformers' eager order:
    /// the plan's `[lm] training_norms`, set on a loaded policy. Generation copies made
    /// afterwards inherit it.
    pub fn set_fused_norms(&mut self, fused: bool) {
        self.fused_norms = fused;
    }

    /// Decoder layer `l` of an uncached forward (a training or scoring forward) on the
    /// stream `x` `[B, T, hidden]`: what [`Model::hidden`] computes for that layer, op
    /// for op, so recomputing a layer from its input gives the same bits.
    pub fn layer(&self, l: usize, x: &Tensor, inputs: &LayerInputs, use_lora: bool) -> Tensor {
        let layer = &self.layers[l];
        let xin = self.rms_norm(x, &layer.in_norm);
        let (q, k, v) = self.queries_keys_values(layer, &xin, &inputs.cos, &inputs.sin, use_lora);
        let y = self.attention(&q, &k, &v, inputs.mask.as_ref());
        self.output_and_mlp(layer, x, &y, use_lora)
    }

    /// The final norm of the stream: the last step of [`Model::hidden`].
    pub fn final_norm(&self, x: &Tensor) -> Tensor {
        self.rms_norm(x, &self.norm)
    }

    /// [`Model::hidden`] for a decode step on the CPU in f32 with fused weights: the
    /// four products of each layer in libtorch, everything between them in
    /// [`super::decode`].
    fn decode_step(
        &self,
        tokens: &Tensor,
        positions: &Tensor,
        bias: &Tensor,
        cache: &mut KvCache,
    ) -> Tensor {
        use super::decode;
        let c = &self.cfg;
        let b = tokens.size()[0];
        let heads = decode::Heads {
            h: c.num_attention_heads as usize,
            kvh: c.num_key_value_heads as usize,
            d: c.head_dim as usize,
        };
        let eps = c.rms_norm_eps;
        let scale = 1.0 / (c.head_dim as f64).sqrt();
        let start = cache.len;
        let (cos, sin) = self.rope(positions);
        let rows = bias.reshape([b, -1]).contiguous();
        let mut x = Tensor::embedding(&self.embed, tokens, -1, false, false).view([b, -1]);
        // The last layer's MLP output, added to the stream by the next norm.
        let mut delta: Option<Tensor> = None;
        for (layer, (kt, v)) in self.layers.iter().zip(&cache.layers) {
            let f = layer.fused.as_ref().expect("checked by the caller");
            let (stream, xin) = decode::add_rms_norm(&x, delta.as_ref(), &layer.in_norm, eps);
            let qkv = Fused::product(&xin, &f.qkv_t, f.qkv_b.as_ref());
            let q = decode::qk_rope_cache(
                &qkv,
                f.qk_norm.as_ref(),
                &cos,
                &sin,
                eps,
                heads,
                kt,
                v,
                start,
            );
            let y = decode::attention(&q, kt, v, &rows, start + 1, scale);
            let o = Fused::product(&y, &f.o_t, None);
            let (stream, xm) = decode::add_rms_norm(&stream, Some(&o), &layer.post_norm, eps);
            let act = decode::silu_mul(&Fused::product(&xm, &f.gate_up_t, None));
            delta = Some(Fused::product(&act, &f.down_t, None));
            x = stream;
        }
        cache.len = start + 1;
        let (_, out) = decode::add_rms_norm(&x, delta.as_ref(), &self.norm, eps);
        out.view([b, 1, -1])
    }

    /// Logits (f32) of hidden states `[.., hidden]`.
    pub fn logits(&self, hidden: &Tensor) -> Tensor {
        hidden
            .linear::<Tensor>(&self.w(&self.head), None)
            .to_kind(Kind::Float)
    }

    /// Every weight by HF name, in f32 on the CPU, with LoRA merged
    /// (`W + alpha/r * B A`): what an exported checkpoint holds.
    pub fn merged_weights(&self) -> BTreeMap<String, Tensor> {
        let _guard = tch::no_grad_guard();
        let vars = self.vs.variables();
        let mut out = BTreeMap::new();
        for (name, _) in param_shapes(&self.cfg) {
            let t = match self.frozen.get(&name) {
                Some(f) => f.shallow_clone(),
                None => vars[&name].shallow_clone(),
            };
            let mut t = t.to_kind(Kind::Float).to_device(Device::Cpu);
            if let (Some(module), Some(spec)) = (name.strip_suffix(".weight"), &self.lora) {
                let a = vars.get(&format!("{module}.lora_A.weight"));
                let b = vars.get(&format!("{module}.lora_B.weight"));
                if let (Some(a), Some(b)) = (a, b) {
                    let delta =
                        b.to_device(Device::Cpu).matmul(&a.to_device(Device::Cpu)) * spec.scale();
                    // Not `+=`: `t` may share storage with the weight itself (to_kind
                    // and to_device return the same tensor when nothing changes), and
                    // an in-place add would merge the adapter into it.
                    #[allow(clippy::assign_op_pattern)]
                    {
                        t = t + delta;
                    }
                }
            }
            out.insert(name, t.contiguous());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seed::Seed;
    use crate::train::lm::generate::attention_bias;

    /// A random model of `family` with grouped-query heads, and norms that are not all
    /// ones (so a norm weight applied in the wrong place would show).
    fn model(json: &str) -> Model {
        let cfg = LmConfig::from_hf_json(json).unwrap();
        let mut w = Model::random_weights(&cfg, Seed::root(3));
        tch::manual_seed(4);
        for (name, t) in w.iter_mut() {
            if name.ends_with("norm.weight") || name.ends_with(".bias") {
                *t = Tensor::rand_like(t) + 0.5;
            }
        }
        Model::from_weights(cfg, w, Device::Cpu, None, Seed::root(5)).unwrap()
    }

    /// The Rust decode step (fused weights, transposed key cache) against the torch
    /// path without a cache, on left-padded rows: prefill, then eight decode steps,
    /// each step's hidden states equal to the full-sequence forward's at that position.
    #[test]
    fn decode_step_matches_torch() {
        let base = r#""vocab_size":50,"hidden_size":48,"intermediate_size":80,
            "num_hidden_layers":2,"num_attention_heads":6,"num_key_value_heads":2,"head_dim":8"#;
        for json in [
            format!(r#"{{"model_type":"qwen3",{base}}}"#),
            format!(r#"{{"model_type":"qwen2",{base}}}"#),
        ] {
            let m = model(&json);
            assert!(crate::train::lm::decode::applies(m.dtype, Device::Cpu));
            let fast = m.inference_copy(false).expect("a small f32 model is fused");
            let pads = [0i64, 3, 1];
            let (b, t0, steps) = (3i64, 6i64, 8i64);
            let total = t0 + steps;
            tch::manual_seed(6);
            let toks = Tensor::randint(50, [b, total], (Kind::Int64, Device::Cpu));
            let pos: Vec<i64> = pads
                .iter()
                .flat_map(|&p| (0..total).map(move |j| (j - p).max(0)))
                .collect();
            let pos = Tensor::from_slice(&pos).view([b, total]);
            let want = tch::no_grad(|| {
                m.hidden(
                    &toks,
                    &pos,
                    &attention_bias(&pads, total, total, Device::Cpu),
                    None,
                    false,
                )
            });
            let mut cache = KvCache::new(&fast.cfg, b, total, Kind::Float, Device::Cpu);
            assert!(cache.keys_transposed);
            let bias = attention_bias(&pads, 1, total, Device::Cpu);
            tch::no_grad(|| {
                let _prefill = fast.hidden(
                    &toks.narrow(1, 0, t0),
                    &pos.narrow(1, 0, t0),
                    &attention_bias(&pads, t0, t0, Device::Cpu),
                    Some(&mut cache),
                    false,
                );
                for s in t0..total {
                    let got = fast.hidden(
                        &toks.narrow(1, s, 1),
                        &pos.narrow(1, s, 1),
                        &bias.narrow(3, 0, s + 1),
                        Some(&mut cache),
                        false,
                    );
                    let err = f64::try_from((&got - want.narrow(1, s, 1)).abs().max()).unwrap();
                    assert!(err < 2e-5, "{json}: step {s}: max error {err}");
                }
            });
            assert_eq!(cache.len, total);
        }
    }

    /// The fused copy's torch path (a prefill, or any device but the CPU in f32) agrees
    /// with the unfused model to rounding, with q/k norms (Qwen3) and biases (Qwen2).
    #[test]
    fn fused_projections_agree_with_linear() {
        let base = r#""vocab_size":50,"hidden_size":48,"intermediate_size":80,
            "num_hidden_layers":2,"num_attention_heads":6,"num_key_value_heads":2,"head_dim":8"#;
        for json in [
            format!(r#"{{"model_type":"qwen3",{base}}}"#),
            format!(r#"{{"model_type":"qwen2",{base}}}"#),
        ] {
            let m = model(&json);
            let fused = m.inference_copy(false).expect("a small f32 model is fused");
            assert!(fused.layers.iter().all(|l| l.fused.is_some()));
            let pads = [0i64, 2];
            tch::manual_seed(8);
            let toks = Tensor::randint(50, [2, 9], (Kind::Int64, Device::Cpu));
            let pos: Vec<i64> = pads
                .iter()
                .flat_map(|&p| (0..9).map(move |j| (j - p).max(0)))
                .collect();
            let pos = Tensor::from_slice(&pos).view([2, 9]);
            let bias = attention_bias(&pads, 9, 9, Device::Cpu);
            let (a, b) = tch::no_grad(|| {
                (
                    m.hidden(&toks, &pos, &bias, None, false),
                    fused.hidden(&toks, &pos, &bias, None, false),
                )
            });
            let err = f64::try_from((&a - &b).abs().max()).unwrap();
            assert!(err < 1e-6, "{json}: max error {err}");
        }
    }
}
