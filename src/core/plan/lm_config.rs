//! The architecture of a decoder-only causal LM, read from (and written back to) a
//! Hugging Face `config.json`.
//!
//! One struct covers the three families the trainer supports, selected by `model_type`:
//!
//! | family | q/k/v bias | per-head q/k RMSNorm | head_dim | RoPE |
//! | --- | --- | --- | --- | --- |
//! | `qwen3` | `attention_bias` (false) | yes | `head_dim` key | plain |
//! | `qwen2` | always | no | hidden / heads | plain |
//! | `llama` | `attention_bias` (false) | no | `head_dim` key or hidden / heads | `llama3` scaling |
//!
//! `rope_theta` is read from the top-level key or from `rope_parameters` (newer
//! transformers write the latter); Llama 3's scaling from `rope_scaling` or
//! `rope_parameters`. Anything else in the file is kept verbatim for export.
use serde_json::{Map, Value};

/// Which code path of the model a config selects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Family {
    Qwen3,
    Qwen2,
    Llama,
}

impl Family {
    pub fn model_type(self) -> &'static str {
        match self {
            Family::Qwen3 => "qwen3",
            Family::Qwen2 => "qwen2",
            Family::Llama => "llama",
        }
    }
    fn architecture(self) -> &'static str {
        match self {
            Family::Qwen3 => "Qwen3ForCausalLM",
            Family::Qwen2 => "Qwen2ForCausalLM",
            Family::Llama => "LlamaForCausalLM",
        }
    }
}

/// Llama 3's frequency-dependent RoPE scaling.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Llama3Scaling {
    pub factor: f64,
    pub low_freq_factor: f64,
    pub high_freq_factor: f64,
    pub original_max_position_embeddings: f64,
}

/// The architecture, as the model code needs it.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LmConfig {
    pub family: Family,
    pub vocab_size: i64,
    pub hidden_size: i64,
    pub intermediate_size: i64,
    pub num_hidden_layers: i64,
    pub num_attention_heads: i64,
    pub num_key_value_heads: i64,
    pub head_dim: i64,
    pub rms_norm_eps: f64,
    pub rope_theta: f64,
    pub rope_scaling: Option<Llama3Scaling>,
    /// q/k/v projections carry biases.
    pub qkv_bias: bool,
    /// Per-head RMSNorm of queries and keys before RoPE (Qwen3).
    pub qk_norm: bool,
    pub tie_word_embeddings: bool,
    pub max_position_embeddings: i64,
    pub bos_token_id: Option<i64>,
    /// Every token id that ends generation (`eos_token_id` may be a list).
    pub eos_token_ids: Vec<i64>,
}

/// Why a `config.json` cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    #[error("config.json is not JSON: {0}")]
    Json(String),
    #[error("config.json: unsupported model_type {0:?} (supported: qwen3, qwen2, llama)")]
    ModelType(String),
    #[error("config.json: missing or invalid key `{0}`")]
    Key(&'static str),
    #[error("config.json: {0}")]
    Invalid(String),
}

fn int(m: &Map<String, Value>, k: &'static str) -> Result<i64, ConfigError> {
    m.get(k)
        .and_then(Value::as_i64)
        .filter(|&v| v > 0)
        .ok_or(ConfigError::Key(k))
}

fn float(v: Option<&Value>) -> Option<f64> {
    v.and_then(Value::as_f64)
}

impl LmConfig {
    /// Parse a Hugging Face `config.json`.
    pub fn from_hf_json(text: &str) -> Result<LmConfig, ConfigError> {
        let v: Value = serde_json::from_str(text).map_err(|e| ConfigError::Json(e.to_string()))?;
        let m = v
            .as_object()
            .ok_or_else(|| ConfigError::Json("not an object".into()))?;
        let model_type = m
            .get("model_type")
            .and_then(Value::as_str)
            .ok_or(ConfigError::Key("model_type"))?;
        let family = match model_type {
            "qwen3" => Family::Qwen3,
            "qwen2" => Family::Qwen2,
            "llama" => Family::Llama,
            other => return Err(ConfigError::ModelType(other.into())),
        };
        let hidden = int(m, "hidden_size")?;
        let heads = int(m, "num_attention_heads")?;
        let kv = match m.get("num_key_value_heads") {
            None | Some(Value::Null) => heads,
            Some(_) => int(m, "num_key_value_heads")?,
        };
        let head_dim = match (family, m.get("head_dim")) {
            (Family::Qwen2, _) | (_, None) | (_, Some(Value::Null)) => hidden / heads,
            _ => int(m, "head_dim")?,
        };
        let params = m.get("rope_parameters").and_then(Value::as_object);
        let rope_theta = float(m.get("rope_theta"))
            .or_else(|| params.and_then(|p| float(p.get("rope_theta"))))
            .unwrap_or(10_000.0);
        let scaling_obj = m.get("rope_scaling").and_then(Value::as_object).or(params);
        let rope_scaling = match scaling_obj {
            Some(s) => {
                let kind = s
                    .get("rope_type")
                    .or_else(|| s.get("type"))
                    .and_then(Value::as_str)
                    .unwrap_or("default");
                match kind {
                    "default" => None,
                    "llama3" => {
                        let f = |k: &'static str| float(s.get(k)).ok_or(ConfigError::Key(k));
                        Some(Llama3Scaling {
                            factor: f("factor")?,
                            low_freq_factor: f("low_freq_factor")?,
                            high_freq_factor: f("high_freq_factor")?,
                            original_max_position_embeddings: f(
                                "original_max_position_embeddings",
                            )?,
                        })
                    }
                    other => {
                        return Err(ConfigError::Invalid(format!(
                            "unsupported RoPE scaling {other:?} (supported: default, llama3)"
                        )))
                    }
                }
            }
            None => None,
        };
        let eos_token_ids = match m.get("eos_token_id") {
            Some(Value::Number(n)) => n.as_i64().into_iter().collect(),
            Some(Value::Array(a)) => a.iter().filter_map(Value::as_i64).collect(),
            _ => vec![],
        };
        let cfg = LmConfig {
            family,
            vocab_size: int(m, "vocab_size")?,
            hidden_size: hidden,
            intermediate_size: int(m, "intermediate_size")?,
            num_hidden_layers: int(m, "num_hidden_layers")?,
            num_attention_heads: heads,
            num_key_value_heads: kv,
            head_dim,
            rms_norm_eps: float(m.get("rms_norm_eps")).unwrap_or(1e-6),
            rope_theta,
            rope_scaling,
            qkv_bias: family == Family::Qwen2
                || m.get("attention_bias").and_then(Value::as_bool) == Some(true),
            qk_norm: family == Family::Qwen3,
            tie_word_embeddings: m
                .get("tie_word_embeddings")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            max_position_embeddings: m
                .get("max_position_embeddings")
                .and_then(Value::as_i64)
                .unwrap_or(4096),
            bos_token_id: m.get("bos_token_id").and_then(Value::as_i64),
            eos_token_ids,
        };
        cfg.validate()?;
        Ok(cfg)
    }

    /// Shape checks the model code relies on.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |m: String| Err(ConfigError::Invalid(m));
        if self.num_attention_heads % self.num_key_value_heads != 0 {
            return bad(format!(
                "num_attention_heads {} is not a multiple of num_key_value_heads {}",
                self.num_attention_heads, self.num_key_value_heads
            ));
        }
        if self.head_dim % 2 != 0 {
            return bad(format!(
                "head_dim {} is odd (RoPE needs pairs)",
                self.head_dim
            ));
        }
        if !(self.rms_norm_eps > 0.0 && self.rope_theta > 0.0) {
            return bad("rms_norm_eps and rope_theta must be positive".into());
        }
        Ok(())
    }

    /// A `config.json` that transformers and vLLM load (f32 weights).
    pub fn to_hf_json(&self) -> String {
        let mut m = Map::new();
        let mut put = |k: &str, v: Value| {
            m.insert(k.to_string(), v);
        };
        put(
            "architectures",
            Value::from(vec![self.family.architecture()]),
        );
        put("model_type", self.family.model_type().into());
        put("vocab_size", self.vocab_size.into());
        put("hidden_size", self.hidden_size.into());
        put("intermediate_size", self.intermediate_size.into());
        put("num_hidden_layers", self.num_hidden_layers.into());
        put("num_attention_heads", self.num_attention_heads.into());
        put("num_key_value_heads", self.num_key_value_heads.into());
        put("head_dim", self.head_dim.into());
        put("hidden_act", "silu".into());
        put("rms_norm_eps", self.rms_norm_eps.into());
        put("rope_theta", self.rope_theta.into());
        if let Some(s) = self.rope_scaling {
            let mut r = Map::new();
            r.insert("rope_type".into(), "llama3".into());
            r.insert("factor".into(), s.factor.into());
            r.insert("low_freq_factor".into(), s.low_freq_factor.into());
            r.insert("high_freq_factor".into(), s.high_freq_factor.into());
            r.insert(
                "original_max_position_embeddings".into(),
                (s.original_max_position_embeddings as i64).into(),
            );
            put("rope_scaling", Value::Object(r));
        }
        if self.family != Family::Qwen2 {
            put("attention_bias", self.qkv_bias.into());
        }
        put("tie_word_embeddings", self.tie_word_embeddings.into());
        put(
            "max_position_embeddings",
            self.max_position_embeddings.into(),
        );
        if let Some(b) = self.bos_token_id {
            put("bos_token_id", b.into());
        }
        match self.eos_token_ids.as_slice() {
            [] => {}
            [one] => put("eos_token_id", (*one).into()),
            many => put("eos_token_id", Value::from(many.to_vec())),
        }
        put("torch_dtype", "float32".into());
        put("use_cache", true.into());
        serde_json::to_string_pretty(&Value::Object(m)).expect("a JSON object serialises")
    }

    /// The number of parameters (for progress messages and benchmarks).
    pub fn parameter_count(&self) -> i64 {
        let (h, i, l) = (
            self.hidden_size,
            self.intermediate_size,
            self.num_hidden_layers,
        );
        let q = self.num_attention_heads * self.head_dim;
        let kv = self.num_key_value_heads * self.head_dim;
        let attn = h * q + 2 * h * kv + q * h;
        let per_layer = attn + 3 * h * i + 2 * h;
        let head = if self.tie_word_embeddings {
            0
        } else {
            self.vocab_size * h
        };
        self.vocab_size * h + l * per_layer + h + head
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_rope_theta_from_either_place_and_refuses_unknown_types() {
        let base = r#"{"model_type":"qwen3","vocab_size":10,"hidden_size":8,"intermediate_size":16,
            "num_hidden_layers":1,"num_attention_heads":2,"num_key_value_heads":1,"head_dim":4"#;
        let a = LmConfig::from_hf_json(&format!("{base},\"rope_theta\":5.0}}")).unwrap();
        assert_eq!(a.rope_theta, 5.0);
        let b = LmConfig::from_hf_json(&format!(
            "{base},\"rope_parameters\":{{\"rope_type\":\"default\",\"rope_theta\":7.0}}}}"
        ))
        .unwrap();
        assert_eq!((b.rope_theta, b.rope_scaling), (7.0, None));
        assert!(b.qk_norm && !b.qkv_bias);
        let e =
            LmConfig::from_hf_json(&format!("{}}}", base.replace("qwen3", "mistral"))).unwrap_err();
        assert!(e.to_string().contains("\"mistral\""), "{e}");
        // Round trip through the exported form.
        let again = LmConfig::from_hf_json(&a.to_hf_json()).unwrap();
        assert_eq!(again, a);
    }
}
