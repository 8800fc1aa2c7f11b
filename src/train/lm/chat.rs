//! Chat templates, written in code (no Jinja), and tokenizers: loading a
//! `tokenizer.json` and training the byte-level BPE tokenizer of a scratch model.
//!
//! Templates (one user turn, the generation prompt appended):
//! - `qwen3`: `<|im_start|>user\n{u}<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n`
//!   (Qwen3's non-thinking mode, `enable_thinking=False`);
//! - `qwen3-thinking`: the same turns with the assistant's turn left open
//!   (`enable_thinking=True`: the model writes its `<think>` block, then the answer);
//! - `qwen2`: Qwen2.5's default system turn, then the same turns without the think block;
//! - `chatml`: the plain ChatML turns (scratch models);
//! - `llama3`: `<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n{u}<|eot_id|>`
//!   `<|start_header_id|>assistant<|end_header_id|>\n\n`.
use super::config::Family;
use serde::{Deserialize, Serialize};
use tokenizers::models::bpe::{BpeTrainerBuilder, BPE};
use tokenizers::normalizers::unicode::NFC;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{AddedToken, SplitDelimiterBehavior, Tokenizer, TokenizerBuilder};

/// Qwen2/Qwen3's pre-tokenizer split pattern (needs look-ahead: the `fancy-regex`
/// feature of `tokenizers`).
pub const QWEN_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// The cells format's split: a ` (row,col)` cell is one piece (so BPE makes it one
/// token: a map's cells are matched by token, never counted), numbers stay whole, and
/// the rest is Qwen's pattern.
pub const CELLS_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)| ?\(\p{N}+,\p{N}+\)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Special tokens of a scratch tokenizer, in id order (ids 0, 1, 2).
pub const SPECIALS: [&str; 3] = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"];

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

/// A tokenizer from `tokenizer.json` bytes.
pub fn tokenizer_from_bytes(bytes: &[u8]) -> Result<Tokenizer, String> {
    Tokenizer::from_bytes(bytes).map_err(|e| e.to_string())
}

/// Train a byte-level BPE tokenizer in Qwen's style (NFC, a split regex (`split`: Qwen's or [`CELLS_SPLIT`]), byte
/// level, the ChatML specials as ids 0..3) on `corpus`, with `vocab_size` entries in
/// all. Deterministic: the same corpus gives the same bytes (the trainer breaks count
/// ties by pair ids, which come from the sorted byte alphabet). Returns `tokenizer.json`.
pub fn train_bpe(corpus: &[String], vocab_size: usize, split: &str) -> Result<Vec<u8>, String> {
    let mut trainer = BpeTrainerBuilder::new()
        .vocab_size(vocab_size)
        .min_frequency(2)
        .show_progress(false)
        .special_tokens(
            SPECIALS
                .iter()
                .map(|s| AddedToken::from(*s, true))
                .collect(),
        )
        .initial_alphabet(ByteLevel::alphabet().into_iter().collect())
        .build();
    let split = Split::new(
        SplitPattern::Regex(split.into()),
        SplitDelimiterBehavior::Isolated,
        false,
    )
    .map_err(|e| e.to_string())?;
    let mut tok = TokenizerBuilder::<BPE, NFC, Sequence, ByteLevel, ByteLevel>::new()
        .with_model(BPE::default())
        .with_normalizer(Some(NFC))
        .with_pre_tokenizer(Some(Sequence::new(vec![
            split.into(),
            ByteLevel::new(false, false, false).into(),
        ])))
        .with_post_processor(Some(ByteLevel::new(false, false, false)))
        .with_decoder(Some(ByteLevel::default()))
        .build()
        .map_err(|e| e.to_string())?;
    tok.train(&mut trainer, corpus.iter())
        .map_err(|e| e.to_string())?;
    tok.add_special_tokens(SPECIALS.iter().map(|s| AddedToken::from(*s, true)))
        .map_err(|e| e.to_string())?;
    let json = tok.to_string(false).map_err(|e| e.to_string())?;
    Ok(json.into_bytes())
}

#[cfg(test)]
mod tests {

    #[test]
    fn thinking_mode_leaves_the_turn_open_and_answers_after_the_think_block() {
        let t = ChatFormat::Qwen3.thinking().unwrap();
        assert_eq!(t, ChatFormat::Qwen3Thinking);
        assert_eq!(
            t.wrap("hi"),
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
        );
        assert!(ChatFormat::Qwen3
            .wrap("hi")
            .ends_with("<think>\n\n</think>\n\n"));
        assert_eq!(ChatFormat::Llama3.thinking(), None);
        assert_eq!(ChatFormat::Qwen2.thinking(), None);
        let reply = "<think>agent 1: D? no, agent 2 waits</think>\n\nagent 1: R\nagent 2: W R";
        assert_eq!(t.answer(reply), "\n\nagent 1: R\nagent 2: W R");
        // Still thinking when the budget ran out: no answer at all, never the reasoning.
        assert_eq!(t.answer("<think>agent 1: R R and then"), "");
        // Without thinking, the reply is the answer.
        assert_eq!(ChatFormat::Qwen3.answer("agent 1: R"), "agent 1: R");
        assert_eq!(t.stop_tokens(), ChatFormat::Qwen3.stop_tokens());
    }
    use super::*;

    #[test]
    fn bpe_training_is_deterministic_and_round_trips() {
        let corpus: Vec<String> = (0..200)
            .map(|i| {
                format!(
                    "agent {}: R R D W U L\n{{\"sizes\": {{\"{}\": {{\"data_ratio\": 0.{i}}}}}}}",
                    i % 5,
                    i % 8 + 3
                )
            })
            .collect();
        let a = train_bpe(&corpus, 320, QWEN_SPLIT).unwrap();
        let b = train_bpe(&corpus, 320, QWEN_SPLIT).unwrap();
        assert_eq!(a, b);
        let tok = tokenizer_from_bytes(&a).unwrap();
        assert_eq!(tok.token_to_id("<|im_end|>"), Some(2));
        let text = "<|im_start|>user\nagent 1: R D é → {\"x\": 1}<|im_end|>";
        let ids = tok.encode(text, false).unwrap().get_ids().to_vec();
        assert!(ids.contains(&1) && ids.contains(&2));
        assert_eq!(tok.decode(&ids, false).unwrap(), text);
        assert!(tok.get_vocab_size(true) <= 320);
    }
}
