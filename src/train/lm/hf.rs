//! Hugging Face model directories: reading one (`config.json`, `model.safetensors` or
//! the shards named by `model.safetensors.index.json`, memory-mapped, and
//! `tokenizer.json`) and writing one (`export-checkpoint --hf`), which transformers and
//! vLLM load.
//!
//! A directory is identified by the blake3 blob hash of each file it was loaded from;
//! [`check_files`] re-checks them whenever a ledger loads the directory again, so a
//! ledger never silently trains on other weights than the ones it recorded.
use super::chat::ChatFormat;
use super::config::LmConfig;
use super::model::{param_shapes, Model};
use super::LmError;
use crate::record::Hash;
use std::collections::BTreeMap;
use std::path::Path;
use tch::{Device, Kind, Tensor};

/// What [`read_dir`] found (weights are loaded separately by [`load_weights`]).
pub struct HfDir {
    pub config: LmConfig,
    pub tokenizer_json: Vec<u8>,
    /// `(file name, blob hash)` of config.json, tokenizer.json, the index and every shard.
    pub files: Vec<(String, Hash)>,
    /// The chat format `tokenizer_config.json`'s template implies (else the family's).
    pub chat: ChatFormat,
    /// The MAPF prompt format the model was trained on, when the directory says
    /// (`mapf-ledger.json`, written by `export-checkpoint --hf`); None for other models.
    pub prompt: Option<super::PromptStyle>,
}

/// The file beside an exported model that names the MAPF prompt format it reads.
pub const MAPF_FILE: &str = "mapf-ledger.json";

/// Record the prompt format a model was trained on in its exported directory.
pub fn write_prompt_style(out: &Path, prompt: super::PromptStyle) -> Result<(), LmError> {
    let p = out.join(MAPF_FILE);
    let body = serde_json::json!({ "prompt": prompt });
    std::fs::write(
        &p,
        serde_json::to_string_pretty(&body).expect("json") + "\n",
    )
    .map_err(|e| io(&p, e))
}

/// The prompt format a model directory declares (`mapf-ledger.json`), if any.
pub fn read_prompt_style(dir: &Path) -> Result<Option<super::PromptStyle>, LmError> {
    let p = dir.join(MAPF_FILE);
    let Ok(text) = std::fs::read_to_string(&p) else {
        return Ok(None);
    };
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| io(&p, e))?;
    match v.get("prompt") {
        None => Ok(None),
        Some(x) => serde_json::from_value(x.clone())
            .map(Some)
            .map_err(|e| io(&p, format!("\"prompt\": {e}"))),
    }
}

/// Which of the built-in chat formats a Jinja `chat_template` is: the markers of each
/// family's template decide, so a directory exported from a scratch model (plain
/// ChatML) loads back with the format it was trained with.
pub fn chat_format_of(template: Option<&str>, family: super::config::Family) -> ChatFormat {
    match template {
        Some(t) if t.contains("<|start_header_id|>") => ChatFormat::Llama3,
        Some(t) if t.contains("<think>") => ChatFormat::Qwen3,
        Some(t) if t.contains("You are Qwen") => ChatFormat::Qwen2,
        Some(t) if t.contains("<|im_start|>") => ChatFormat::ChatMl,
        _ => ChatFormat::for_family(family),
    }
}

/// A directory's Jinja chat template: `tokenizer_config.json`'s `chat_template`, else
/// `chat_template.jinja`, where recent transformers (5.23 here) save it (a model saved by
/// `save_pretrained` today has only the latter; without reading it a SmolLM2 directory
/// fell back to its family's Llama 3 turns, which its vocabulary has no tokens for).
pub fn chat_template(dir: &Path) -> Option<String> {
    std::fs::read_to_string(dir.join("tokenizer_config.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|v| {
            v.get("chat_template")
                .and_then(|c| c.as_str())
                .map(String::from)
        })
        .or_else(|| std::fs::read_to_string(dir.join("chat_template.jinja")).ok())
}

fn io(path: &Path, e: impl std::fmt::Display) -> LmError {
    LmError::Io {
        path: path.display().to_string(),
        message: e.to_string(),
    }
}

/// The safetensors files of a directory: the shards of the index, or the single file.
fn weight_files(dir: &Path) -> Result<(Option<String>, Vec<String>), LmError> {
    let index = dir.join("model.safetensors.index.json");
    if index.exists() {
        let text = std::fs::read_to_string(&index).map_err(|e| io(&index, e))?;
        let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| io(&index, e))?;
        let map = v
            .get("weight_map")
            .and_then(|m| m.as_object())
            .ok_or_else(|| io(&index, "no weight_map object"))?;
        let mut files: Vec<String> = map
            .values()
            .filter_map(|f| f.as_str().map(String::from))
            .collect();
        files.sort();
        files.dedup();
        for f in &files {
            if f.contains('/') || f.contains("..") {
                return Err(io(&index, format!("shard name {f:?} leaves the directory")));
            }
        }
        Ok((Some("model.safetensors.index.json".into()), files))
    } else if dir.join("model.safetensors").exists() {
        Ok((None, vec!["model.safetensors".into()]))
    } else {
        Err(io(
            dir,
            "no model.safetensors or model.safetensors.index.json",
        ))
    }
}

fn hash_file(path: &Path) -> Result<Hash, LmError> {
    let f = std::fs::File::open(path).map_err(|e| io(path, e))?;
    // SAFETY: read-only map of a file we only read; a concurrent writer could change
    // the bytes under us, which the recorded hash then reveals on the next check.
    let map = unsafe { memmap2::Mmap::map(&f) }.map_err(|e| io(path, e))?;
    Ok(Hash::of_blob(&map))
}

/// Read a model directory's config and tokenizer and hash its files.
pub fn read_dir(dir: &Path) -> Result<HfDir, LmError> {
    let cpath = dir.join("config.json");
    let text = std::fs::read_to_string(&cpath).map_err(|e| io(&cpath, e))?;
    let config = LmConfig::from_hf_json(&text).map_err(|e| LmError::Config {
        path: cpath.display().to_string(),
        source: e,
    })?;
    let tpath = dir.join("tokenizer.json");
    let tokenizer_json = std::fs::read(&tpath).map_err(|e| io(&tpath, e))?;
    super::chat::tokenizer_from_bytes(&tokenizer_json).map_err(|m| LmError::Tokenizer {
        path: tpath.display().to_string(),
        source: m,
    })?;
    let chat = chat_format_of(chat_template(dir).as_deref(), config.family);
    let (index, shards) = weight_files(dir)?;
    let mut names = vec!["config.json".to_string(), "tokenizer.json".to_string()];
    names.extend(index);
    names.extend(shards);
    let files = names
        .into_iter()
        .map(|n| hash_file(&dir.join(&n)).map(|h| (n, h)))
        .collect::<Result<_, _>>()?;
    Ok(HfDir {
        config,
        tokenizer_json,
        files,
        chat,
        prompt: read_prompt_style(dir)?,
    })
}

/// Check that a directory still holds the files a ledger recorded.
pub fn check_files(dir: &Path, files: &[(String, Hash)]) -> Result<(), LmError> {
    for (name, expected) in files {
        let found = hash_file(&dir.join(name))?;
        if &found != expected {
            return Err(LmError::Changed {
                dir: dir.display().to_string(),
                file: name.clone(),
                expected: expected.short(),
                found: found.short(),
            });
        }
    }
    Ok(())
}

fn kind_of(d: safetensors::Dtype) -> Option<Kind> {
    use safetensors::Dtype as D;
    Some(match d {
        D::F32 => Kind::Float,
        D::BF16 => Kind::BFloat16,
        D::F16 => Kind::Half,
        D::F64 => Kind::Double,
        _ => return None,
    })
}

/// Load every tensor the config implies from the directory's safetensors files
/// (memory-mapped; each tensor is copied once into a CPU tensor of its stored dtype).
/// A missing tensor, a wrong shape or an extra tensor is an error naming it. Tensors
/// transformers may save but this model derives are skipped: rotary `inv_freq` buffers,
/// and `lm_head.weight` of a tied model.
pub fn load_weights(dir: &Path, cfg: &LmConfig) -> Result<BTreeMap<String, Tensor>, LmError> {
    let (_, shards) = weight_files(dir)?;
    let expected: BTreeMap<String, Vec<i64>> = param_shapes(cfg).into_iter().collect();
    let mut out = BTreeMap::new();
    for shard in shards {
        let path = dir.join(&shard);
        let f = std::fs::File::open(&path).map_err(|e| io(&path, e))?;
        // SAFETY: as in `hash_file`.
        let map = unsafe { memmap2::Mmap::map(&f) }.map_err(|e| io(&path, e))?;
        let st = safetensors::SafeTensors::deserialize(&map).map_err(|e| LmError::Safetensors {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        let mut names: Vec<String> = st.names().into_iter().map(String::from).collect();
        names.sort();
        for name in names {
            if name.ends_with("rotary_emb.inv_freq")
                || (cfg.tie_word_embeddings && name == "lm_head.weight")
            {
                continue;
            }
            let view = st.tensor(&name).map_err(|e| LmError::Safetensors {
                path: path.display().to_string(),
                message: e.to_string(),
            })?;
            let shape: Vec<i64> = view.shape().iter().map(|&d| d as i64).collect();
            let weights_err = |e| LmError::Weights {
                path: path.display().to_string(),
                source: e,
            };
            match expected.get(&name) {
                None => return Err(weights_err(super::model::WeightsError::Extra(name))),
                Some(s) if *s != shape => {
                    return Err(weights_err(super::model::WeightsError::Shape {
                        name,
                        found: shape,
                        expected: s.clone(),
                    }))
                }
                Some(_) => {}
            }
            let kind = kind_of(view.dtype()).ok_or_else(|| LmError::Safetensors {
                path: path.display().to_string(),
                message: format!("tensor {name} has unsupported dtype {:?}", view.dtype()),
            })?;
            out.insert(name, Tensor::from_data_size(view.data(), &shape, kind));
        }
    }
    if let Some(missing) = expected.keys().find(|k| !out.contains_key(*k)) {
        return Err(LmError::Weights {
            path: dir.display().to_string(),
            source: super::model::WeightsError::Missing(missing.clone()),
        });
    }
    Ok(out)
}

/// Write `model` (LoRA merged, f32) as an HF model directory: `config.json`,
/// `model.safetensors`, `tokenizer.json`, `tokenizer_config.json` (with the chat
/// template) and `generation_config.json`.
pub fn export(
    out: &Path,
    model: &Model,
    tokenizer_json: &[u8],
    chat: ChatFormat,
) -> Result<(), LmError> {
    std::fs::create_dir_all(out).map_err(|e| io(out, e))?;
    let write = |name: &str, bytes: &[u8]| {
        let p = out.join(name);
        std::fs::write(&p, bytes).map_err(|e| io(&p, e))
    };
    write("config.json", model.cfg.to_hf_json().as_bytes())?;
    let weights = model.merged_weights();
    let named: Vec<(&str, Tensor)> = weights
        .iter()
        .map(|(n, t)| (n.as_str(), t.to_device(Device::Cpu)))
        .collect();
    let st = out.join("model.safetensors");
    Tensor::write_safetensors(&named, &st).map_err(|e| io(&st, e))?;
    write("tokenizer.json", tokenizer_json)?;
    let tok =
        super::chat::tokenizer_from_bytes(tokenizer_json).map_err(|m| LmError::Tokenizer {
            path: "tokenizer.json".into(),
            source: m,
        })?;
    let eos = chat.end_token();
    let pad = ["<|endoftext|>", "<|end_of_text|>"]
        .into_iter()
        .find(|t| tok.token_to_id(t).is_some())
        .unwrap_or(eos);
    let tc = serde_json::json!({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "chat_template": chat.jinja(),
        "eos_token": eos,
        "pad_token": pad,
        "model_max_length": model.cfg.max_position_embeddings,
    });
    write(
        "tokenizer_config.json",
        serde_json::to_string_pretty(&tc).expect("json").as_bytes(),
    )?;
    let eos_ids: Vec<i64> = model
        .cfg
        .eos_token_ids
        .iter()
        .copied()
        .chain(tok.token_to_id(eos).map(|i| i as i64))
        .collect();
    let gc = serde_json::json!({ "eos_token_id": eos_ids, "do_sample": false });
    write(
        "generation_config.json",
        serde_json::to_string_pretty(&gc).expect("json").as_bytes(),
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::lm::config::Family;

    /// SmolLM2-135M-Instruct's template, verbatim (its GGUF's `tokenizer.chat_template`).
    const SMOLLM2: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

    /// A Llama-architecture model with ChatML turns (SmolLM2) gets ChatML, not its
    /// family's Llama 3 turns, whichever file transformers put the template in; and a
    /// system turn renders as transformers renders this template (what
    /// `apply_chat_template` gave for system "S", user "U").
    #[test]
    fn smollm2_template_is_chatml_from_either_file() {
        assert_eq!(
            chat_format_of(Some(SMOLLM2), Family::Llama),
            ChatFormat::ChatMl
        );
        assert_eq!(chat_format_of(None, Family::Llama), ChatFormat::Llama3);
        let tmp = tempfile::tempdir().unwrap();
        assert_eq!(chat_template(tmp.path()), None);
        // transformers 5: the template in chat_template.jinja only.
        std::fs::write(
            tmp.path().join("tokenizer_config.json"),
            r#"{"eos_token": "<|im_end|>"}"#,
        )
        .unwrap();
        std::fs::write(tmp.path().join("chat_template.jinja"), SMOLLM2).unwrap();
        assert_eq!(chat_template(tmp.path()).as_deref(), Some(SMOLLM2));
        // tokenizer_config.json's own template comes first.
        let tc = serde_json::json!({ "chat_template": ChatFormat::Llama3.jinja() });
        std::fs::write(tmp.path().join("tokenizer_config.json"), tc.to_string()).unwrap();
        let t = chat_template(tmp.path()).unwrap();
        assert_eq!(chat_format_of(Some(&t), Family::Llama), ChatFormat::Llama3);
        let chat = ChatFormat::ChatMl;
        assert_eq!(
            chat.wrap_with_system("S", "U"),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n"
        );
        assert_eq!(chat.end_token(), "<|im_end|>");
        assert!(chat.stop_tokens().contains(&"<|im_end|>"));
    }
}
