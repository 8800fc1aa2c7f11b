//! One completion of a prompt from a loaded language model, as `ledger lm generate`
//! samples it (a check that a model loaded as it should): the prompt encoded, in the
//! model's chat template unless raw; the new tokens bounded by the positions the model
//! reads (past them RoPE extrapolates and the KV cache grows without bound: 1e8 tokens
//! once asked libtorch for 25 GB and aborted); decoded greedily at temperature 0, else
//! sampled from a seeded nucleus.
use super::{LmError, LmPolicy, Sampling};
use crate::seed::Seed;
use crate::views::model::GenerateOutput;

/// What to complete and how.
pub struct Request<'a> {
    /// The user message (wrapped in the chat template unless `raw`).
    pub text: &'a str,
    pub raw: bool,
    pub max_new_tokens: usize,
    /// 0 decodes greedily.
    pub temperature: f64,
    pub top_p: f64,
    /// The sampler's seed (with a temperature above 0).
    pub seed: u64,
}

/// Why a prompt cannot be completed.
#[derive(Debug, thiserror::Error)]
pub enum CompleteError {
    /// The prompt's text does not encode.
    #[error("{0}")]
    Encode(#[source] LmError),
    #[error("the prompt encodes to no tokens")]
    Empty,
    #[error("--max-new-tokens {max_new_tokens}: must be in 1..={limit} (the model's max_position_embeddings {positions} less the prompt's {prompt} tokens)")]
    Length {
        max_new_tokens: usize,
        limit: usize,
        positions: i64,
        prompt: usize,
    },
    /// The completion does not decode.
    #[error("{0}")]
    Decode(#[source] LmError),
}

/// A completion's failure naming what is at fault (`ledger lm generate`): the prompt
/// file, or for a completion that does not decode the model; a length out of range
/// names its flag.
#[derive(Debug, thiserror::Error)]
pub enum NamedCompleteError {
    #[error("{}: {source}", path.display())]
    Read {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Length(#[source] Box<CompleteError>),
    #[error("{model}: {source}")]
    Model {
        model: String,
        #[source]
        source: Box<CompleteError>,
    },
    #[error("{}: {source}", path.display())]
    Prompt {
        path: std::path::PathBuf,
        #[source]
        source: Box<CompleteError>,
    },
}

/// The prompt file at `path`.
pub fn read_prompt(path: &std::path::Path) -> Result<String, NamedCompleteError> {
    std::fs::read_to_string(path).map_err(|source| NamedCompleteError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// [`complete`], its error naming `model` (a completion that does not decode) or the
/// `prompt` file it read (anything else but a length out of range).
pub fn complete_named(
    lm: &LmPolicy,
    r: &Request<'_>,
    model: &str,
    prompt: &std::path::Path,
) -> Result<Completion, NamedCompleteError> {
    complete(lm, r).map_err(|e| match e {
        CompleteError::Length { .. } => NamedCompleteError::Length(Box::new(e)),
        CompleteError::Decode(_) => NamedCompleteError::Model {
            model: model.to_string(),
            source: Box::new(e),
        },
        _ => NamedCompleteError::Prompt {
            path: prompt.to_path_buf(),
            source: Box::new(e),
        },
    })
}

/// A completion and each of its tokens' own text (decoded alone).
pub struct Completion {
    pub output: GenerateOutput,
    pub pieces: Vec<String>,
}

/// Complete `r` with `lm`.
pub fn complete(lm: &LmPolicy, r: &Request<'_>) -> Result<Completion, CompleteError> {
    let prompt = if r.raw {
        lm.try_encode(r.text)
    } else {
        lm.try_encode(&lm.arch.chat.wrap(r.text))
    }
    .map_err(CompleteError::Encode)?;
    if prompt.is_empty() {
        return Err(CompleteError::Empty);
    }
    let positions = lm.model.cfg.max_position_embeddings;
    let limit = (positions.max(0) as usize).saturating_sub(prompt.len());
    if r.max_new_tokens == 0 || r.max_new_tokens > limit {
        return Err(CompleteError::Length {
            max_new_tokens: r.max_new_tokens,
            limit,
            positions,
            prompt: prompt.len(),
        });
    }
    let sampling = Sampling {
        temperature: if r.temperature > 0.0 {
            r.temperature
        } else {
            1.0
        },
        top_p: r.top_p,
        max_new_tokens: r.max_new_tokens,
    };
    let g = super::generate::generate(
        &lm.model,
        std::slice::from_ref(&prompt),
        1,
        &[r.max_new_tokens],
        &sampling,
        r.temperature == 0.0,
        &lm.stop,
        Seed::root(r.seed).child("lm-generate", 0),
        true,
    )
    .remove(0);
    let text = lm.try_decode(&g.tokens).map_err(CompleteError::Decode)?;
    let pieces = g.tokens.iter().map(|t| lm.decode(&[*t])).collect();
    Ok(Completion {
        output: GenerateOutput {
            text,
            prompt_tokens: prompt,
            tokens: g.tokens,
            logprobs: g.logprobs,
            stopped: g.stopped,
        },
        pieces,
    })
}
