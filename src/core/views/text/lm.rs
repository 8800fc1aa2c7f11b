//! `lm generate` as text: the prompt's length, the completion, then each token with its
//! log-prob and its own text, and why it ended.
use crate::views::model::GenerateOutput;
use std::fmt::Write as _;

/// The completion `out`, whose tokens decode alone to `pieces`.
pub fn generated(out: &GenerateOutput, pieces: &[String]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "prompt tokens: {}", out.prompt_tokens.len());
    let _ = writeln!(s, "{}", out.text);
    let _ = writeln!(s, "--");
    for ((t, lp), piece) in out.tokens.iter().zip(&out.logprobs).zip(pieces) {
        let _ = writeln!(s, "{t}\t{lp:.6}\t{piece:?}");
    }
    let _ = writeln!(
        s,
        "{} tokens, {}",
        out.tokens.len(),
        if out.stopped {
            "stopped on a stop token"
        } else {
            "hit --max-new-tokens"
        }
    );
    s
}
