//! The checkpoint blob's format, as far as reading a ledger needs it: the header
//! (policy kind, architecture record, steps, optimiser settings, tensor shapes) and
//! the `lm` architecture record, which names the other blobs a checkpoint needs (its
//! tokenizer, a frozen LoRA base). The tensors after the header are the trainer's to
//! read and write (`mapf_ledger::train::checkpoint`); bundles, gc and verify follow the
//! references without libtorch.
use crate::plan::lm_config::{Family, LmConfig};
use crate::plan::trainer::{AdamConfig, LoraSpec, PromptStyle, Sampling};
use crate::record::codec;
use crate::record::Hash;
use serde::{Deserialize, Serialize};

/// The first bytes of every checkpoint blob (then the header's length, u64 LE).
pub const MAGIC: &[u8; 8] = b"MLCKPT01";

/// Checkpoint metadata (part of the hashed blob: no floats formatted, no times).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Header {
    /// The policy kind: "grid" or "lm".
    pub policy: String,
    /// The policy's architecture, codec-encoded by the policy itself.
    pub arch: Vec<u8>,
    /// Gradient steps taken in total (warm-up and every stage).
    pub global_step: u64,
    /// The stage that wrote it.
    pub stage: u32,
    pub adam: AdamConfig,
    pub adam_step: u64,
    /// `(name, shape)` of every parameter, in name order.
    pub tensors: Vec<(String, Vec<i64>)>,
}

#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("not a mapf-ledger checkpoint (bad magic)")]
    Magic,
    #[error("checkpoint header: {0}")]
    Header(String),
    #[error("checkpoint is truncated: {0}")]
    Truncated(String),
    #[error("checkpoint does not fit the policy: {0}")]
    Mismatch(String),
}

/// Read just the header (to build the right policy before loading).
pub fn header(bytes: &[u8]) -> Result<(Header, usize), CheckpointError> {
    if bytes.len() < 16 || &bytes[..8] != MAGIC {
        return Err(CheckpointError::Magic);
    }
    let len = u64::from_le_bytes(bytes[8..16].try_into().expect("8 bytes")) as usize;
    let end = 16usize
        .checked_add(len)
        .filter(|&e| e <= bytes.len())
        .ok_or_else(|| CheckpointError::Truncated("header".into()))?;
    let h: Header = codec::decode(&bytes[16..end], "checkpoint header")
        .map_err(|e| CheckpointError::Header(e.to_string()))?;
    Ok((h, end))
}

/// Where a model's weights came from (recorded with every checkpoint).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Origin {
    /// Random weights from the seed tree, then pretraining in stage 0.
    Scratch,
    /// A Hugging Face model directory and the content hash of each of its files.
    Hf {
        dir: String,
        files: Vec<(String, Hash)>,
    },
}

/// Where the frozen base weights of a LoRA checkpoint are loaded from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Frozen {
    /// The origin's model directory (hashes re-checked).
    Origin,
    /// A full-weights checkpoint blob in the ledger (e.g. a scratch model's stage 0).
    Checkpoint(Hash),
}

/// The architecture record of an `lm` checkpoint: enough to rebuild the policy.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LmArch {
    pub config: LmConfig,
    /// Blob hash of `tokenizer.json` (stored in the ledger beside the checkpoint).
    pub tokenizer: Hash,
    pub chat: ChatFormat,
    pub prompt: PromptStyle,
    pub sampling: Sampling,
    pub origin: Origin,
    /// Some under LoRA: the base the adapters sit on.
    pub frozen: Option<Frozen>,
    pub lora: Option<LoraSpec>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ChatFormat {
    ChatMl,
    Qwen3,
    Qwen2,
    Llama3,
    /// Qwen3 in thinking mode (`enable_thinking=True`): the generation prompt is the
    /// open assistant turn, and the model writes `<think>...</think>` before its answer.
    /// (Last: checkpoints encode the variant's index.)
    Qwen3Thinking,
}

impl ChatFormat {
    /// The template an HF model of a family uses.
    pub fn for_family(f: Family) -> ChatFormat {
        match f {
            Family::Qwen3 => ChatFormat::Qwen3,
            Family::Qwen2 => ChatFormat::Qwen2,
            Family::Llama => ChatFormat::Llama3,
        }
    }

    /// The thinking-mode template of this one, where the family has one (Qwen3).
    pub fn thinking(self) -> Option<ChatFormat> {
        match self {
            ChatFormat::Qwen3 | ChatFormat::Qwen3Thinking => Some(ChatFormat::Qwen3Thinking),
            _ => None,
        }
    }

    /// Whether a reply thinks before it answers (Qwen3's thinking mode): its reasoning,
    /// not its answer, decides how many tokens it takes.
    pub fn thinks(self) -> bool {
        self == ChatFormat::Qwen3Thinking
    }

    /// The answer in a reply: in thinking mode what follows the last `</think>` (empty
    /// when the reasoning never ended: the budget ran out before an answer), else all.
    pub fn answer<'a>(&self, reply: &'a str) -> &'a str {
        match self {
            ChatFormat::Qwen3Thinking => match reply.rfind("</think>") {
                Some(i) => &reply[i + "</think>".len()..],
                None => "",
            },
            _ => reply,
        }
    }

    /// One user turn and the assistant's generation prompt.
    pub fn wrap(&self, user: &str) -> String {
        match self {
            ChatFormat::ChatMl | ChatFormat::Qwen3Thinking => {
                format!("<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n")
            }
            ChatFormat::Qwen3 => format!(
                "<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
            ),
            ChatFormat::Qwen2 => format!(
                "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"
            ),
            ChatFormat::Llama3 => format!(
                "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n{user}<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
            ),
        }
    }

    /// A system turn, one user turn and the assistant's generation prompt.
    pub fn wrap_with_system(&self, system: &str, user: &str) -> String {
        match self {
            ChatFormat::ChatMl | ChatFormat::Qwen2 | ChatFormat::Qwen3Thinking => format!(
                "<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"
            ),
            ChatFormat::Qwen3 => format!(
                "<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
            ),
            ChatFormat::Llama3 => format!(
                "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n{system}<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n{user}<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
            ),
        }
    }

    /// The token that ends the assistant's turn.
    pub fn end_token(&self) -> &'static str {
        match self {
            ChatFormat::Llama3 => "<|eot_id|>",
            _ => "<|im_end|>",
        }
    }

    /// Tokens that end generation (those the tokenizer knows are used).
    pub fn stop_tokens(&self) -> &'static [&'static str] {
        match self {
            ChatFormat::Llama3 => &["<|eot_id|>", "<|end_of_text|>"],
            _ => &["<|im_end|>", "<|endoftext|>"],
        }
    }

    /// A Jinja `chat_template` equivalent to [`ChatFormat::wrap`], for exported
    /// `tokenizer_config.json` files (so vLLM and transformers format prompts alike).
    pub fn jinja(&self) -> &'static str {
        match self {
            ChatFormat::ChatMl
            | ChatFormat::Qwen3
            | ChatFormat::Qwen2
            | ChatFormat::Qwen3Thinking => concat!(
                "{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}{%- endfor %}",
                "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
            ),
            ChatFormat::Llama3 => concat!(
                "{{- '<|begin_of_text|>' }}{%- for message in messages %}{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] + '<|eot_id|>' }}{%- endfor %}",
                "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"
            ),
        }
    }
}

/// The blobs a checkpoint's bytes reference besides itself (an `lm` tokenizer, a
/// frozen base checkpoint); empty for other bytes. Bundles, gc and verify follow
/// these, since no event names them.
pub fn referenced_blobs(bytes: &[u8]) -> Vec<Hash> {
    let Ok((h, _)) = header(bytes) else {
        return Vec::new();
    };
    if h.policy != "lm" {
        return Vec::new();
    }
    match codec::decode::<LmArch>(&h.arch, "lm architecture") {
        Ok(arch) => {
            let mut v = vec![arch.tokenizer];
            if let Some(Frozen::Checkpoint(f)) = arch.frozen {
                v.push(f);
            }
            v
        }
        Err(_) => Vec::new(),
    }
}
