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
use tokenizers::models::bpe::{BpeTrainerBuilder, BPE};
use tokenizers::normalizers::unicode::NFC;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{AddedToken, SplitDelimiterBehavior, Tokenizer, TokenizerBuilder};

pub use crate::plan::trainer::{CELLS_SPLIT, QWEN_SPLIT};
pub use crate::record::checkpoint::ChatFormat;

/// Special tokens of a scratch tokenizer, in id order (ids 0, 1, 2).
pub const SPECIALS: [&str; 3] = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"];

/// A tokenizer from `tokenizer.json` bytes.
pub fn tokenizer_from_bytes(bytes: &[u8]) -> tokenizers::Result<Tokenizer> {
    Tokenizer::from_bytes(bytes)
}

/// Train a byte-level BPE tokenizer in Qwen's style (NFC, a split regex (`split`: Qwen's or [`CELLS_SPLIT`]), byte
/// level, the ChatML specials as ids 0..3) on `corpus`, with `vocab_size` entries in
/// all. Deterministic: the same corpus gives the same bytes (the trainer breaks count
/// ties by pair ids, which come from the sorted byte alphabet). Returns `tokenizer.json`.
pub fn train_bpe(corpus: &[String], vocab_size: usize, split: &str) -> tokenizers::Result<Vec<u8>> {
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
    )?;
    let mut tok = TokenizerBuilder::<BPE, NFC, Sequence, ByteLevel, ByteLevel>::new()
        .with_model(BPE::default())
        .with_normalizer(Some(NFC))
        .with_pre_tokenizer(Some(Sequence::new(vec![
            split.into(),
            ByteLevel::new(false, false, false).into(),
        ])))
        .with_post_processor(Some(ByteLevel::new(false, false, false)))
        .with_decoder(Some(ByteLevel::default()))
        .build()?;
    tok.train(&mut trainer, corpus.iter())?;
    tok.add_special_tokens(SPECIALS.iter().map(|s| AddedToken::from(*s, true)))?;
    let json = tok.to_string(false)?;
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
