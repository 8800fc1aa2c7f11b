//! The engineer prompt, one function for every engineer that reads text: HTTP LLM
//! engineers (`engineer::llm`, with their registration's window and module choice) and
//! the in-process `current`/`base` checkpoints (`engineer::model`, with the model's
//! prompt budget and tokenizer). A system message (the role), then the rendered context
//! modules and the answer format, at the plan's [`TextRevision`]; trimmed to a token
//! window when one is given: first the example failing plans, then history entries
//! (oldest first), then the training details. What was cut is noted in the decision's
//! rationale.
use super::render::Trimmed;
use super::{answer, render, TextRevision};
use crate::context::EngineerContext;
use tokenizers::Tokenizer;

/// Characters per token when no tokenizer is registered.
pub const CHARS_PER_TOKEN: usize = 4;

/// Counts tokens: with the registered tokenizer, else about 4 characters per token.
pub enum TokenCounter {
    Tokenizer(Box<Tokenizer>),
    Approximate,
}

impl TokenCounter {
    pub fn count(&self, text: &str) -> usize {
        match self {
            TokenCounter::Tokenizer(t) => match t.encode(text, false) {
                Ok(enc) => enc.len(),
                Err(_) => text.chars().count().div_ceil(CHARS_PER_TOKEN),
            },
            TokenCounter::Approximate => text.chars().count().div_ceil(CHARS_PER_TOKEN),
        }
    }
}

/// A built prompt: the two chat messages and what was cut to fit the window.
#[derive(Clone, Debug, PartialEq)]
pub struct Prompt {
    pub system: String,
    pub user: String,
    /// What was cut from the context to fit `max_context` (empty: nothing).
    pub cut: Vec<String>,
    /// Tokens of the final prompt, when a window was given.
    pub tokens: Option<usize>,
}

impl Prompt {
    /// The exact text sent, as stored in the ledger: both messages, labelled.
    pub fn text(&self) -> String {
        format!("[system]\n{}\n\n[user]\n{}", self.system, self.user)
    }

    /// The note recorded with the decision about trimming (None: nothing was cut).
    pub fn cut_note(&self, max_context: Option<u32>) -> Option<String> {
        if self.cut.is_empty() {
            return None;
        }
        Some(format!(
            "context trimmed to fit {} tokens: cut {}",
            max_context.unwrap_or(0),
            self.cut.join(", ")
        ))
    }
}

/// The system message: the engineer's role (with [`TextRevision::compact`], one short
/// line).
pub fn system_message(text: TextRevision) -> String {
    if text.compact {
        return "You design the next training stage of a MAPF curriculum.".to_string();
    }
    "You are the environment engineer of a training curriculum for a multi-agent path-finding \
policy on MAPF-FrozenLake maps. Between training stages you read the evidence about the current \
policy and write the next stage's training-instance generator configuration."
        .to_string()
}

/// The user message of a (trimmed) context: the rendered modules, saying what `cut`
/// took out of them (from [`TextRevision::says_cuts`]; before, the trimmed context is
/// rendered as it is, as ledgers before revision 2 recorded it), then the answer
/// format, then (with [`TextRevision::breakdown_last`]) the breakdown, weakest last.
pub fn user_message(ctx: &EngineerContext, cut: &Trimmed, text: TextRevision) -> String {
    if text.compact {
        // The answer format, then the breakdown weakest last: the line a reply copies
        // first is the prompt's last.
        let mut s = answer::format(text, ctx.modules.failure_breakdown).to_string();
        s.push_str(&render::breakdown_last(ctx));
        return s;
    }
    let mut s = render::render(ctx, cut, text);
    s.push_str(answer::format(text, ctx.modules.failure_breakdown));
    if text.breakdown_last {
        s.push_str(&render::breakdown_last(ctx));
    }
    s
}

/// The context with a module choice applied (an empty list keeps the context's own).
fn with_modules(ctx: &EngineerContext, modules: &[String]) -> EngineerContext {
    let mut c = ctx.clone();
    if !modules.is_empty() {
        let on = |m: &str| modules.iter().any(|x| x == m);
        c.modules.failure_breakdown = on("failure_breakdown");
        c.modules.guideline = on("guideline");
        c.modules.history = on("history");
        c.modules.summary = on("summary");
        c.modules.training_details = on("training_details");
    }
    c
}

/// Build the prompt from `ctx` at `text` with the `modules` choice applied (empty: the
/// context's own), trimming the context to `max_context` tokens as counted by `counter`:
/// example failing plans first (last example first), then history entries (oldest
/// first), then the training details (from [`TextRevision::says_cuts`] the notes a
/// trimmed module gets are counted in the budget). If it still does not fit, it is sent
/// as it is and the cut list says so. Without a window the whole context is rendered,
/// at `text` as with one.
pub fn build(
    ctx: &EngineerContext,
    modules: &[String],
    max_context: Option<u32>,
    counter: &TokenCounter,
    text: TextRevision,
) -> Prompt {
    let system = system_message(text);
    let mut c = with_modules(ctx, modules);
    if text.compact {
        // Not shown in a compact prompt, so nothing to trim and nothing cut.
        for s in &mut c.failures.sizes {
            s.examples.clear();
        }
        c.history.clear();
        c.modules.training_details = false;
    }
    let Some(max) = max_context else {
        return Prompt {
            system,
            user: user_message(&c, &Trimmed::default(), text),
            cut: vec![],
            tokens: None,
        };
    };
    let max = max as usize;
    let mut trimmed = Trimmed::default();
    let size = |c: &EngineerContext, t: &Trimmed| {
        counter.count(&system) + counter.count(&user_message(c, t, text))
    };
    let mut tokens = size(&c, &trimmed);
    let (mut examples, mut history, mut training) = (0usize, Vec::<u32>::new(), false);
    // Cutting an example subtracts its own token count (an estimate: tokens rarely
    // straddle a line break); the whole prompt is counted again whenever the estimate
    // says it fits, so the result is exact and a long context costs a few full counts
    // instead of one per cut.
    let mut exact = true;
    loop {
        if tokens <= max {
            if exact {
                break;
            }
            tokens = size(&c, &trimmed);
            exact = true;
            if tokens <= max {
                break;
            }
        }
        if let Some(s) = c
            .failures
            .sizes
            .iter_mut()
            .rev()
            .find(|s| !s.examples.is_empty())
        {
            let e = s.examples.pop().expect("a non-empty list");
            tokens = tokens.saturating_sub(counter.count(&format!("{e}\n")));
            exact = false;
            examples += 1;
            trimmed.examples = examples;
        } else if c.modules.history && !c.history.is_empty() {
            history.push(c.history.remove(0).stage);
            trimmed.history = history.clone();
            tokens = size(&c, &trimmed);
            exact = true;
        } else if c.modules.training_details {
            c.modules.training_details = false;
            training = true;
            trimmed.training_details = true;
            tokens = size(&c, &trimmed);
            exact = true;
        } else {
            break;
        }
    }
    if !exact {
        tokens = size(&c, &trimmed);
    }
    let mut cut = Vec::new();
    if examples > 0 {
        cut.push(format!("{examples} example failing plan(s)"));
    }
    if !history.is_empty() {
        let stages: Vec<String> = history.iter().map(|s| s.to_string()).collect();
        cut.push(format!(
            "{} history entr{} (stage {})",
            history.len(),
            if history.len() == 1 { "y" } else { "ies" },
            stages.join(", ")
        ));
    }
    if training {
        cut.push("training details".into());
    }
    if tokens > max {
        cut.push(format!(
            "nothing more to cut: the prompt is {tokens} tokens"
        ));
    }
    Prompt {
        system,
        user: user_message(&c, &trimmed, text),
        cut,
        tokens: Some(tokens),
    }
}

/// The prompt of a teacher example as a scratch model's tokenizer corpus holds it:
/// untrimmed, at [`TextRevision::corpus_text`] (for every revision so far revision
/// 1's text: what the tokenizers of recorded scratch models were trained on).
pub fn corpus_prompt(ctx: &EngineerContext, text: TextRevision) -> Prompt {
    build(
        ctx,
        &[],
        Some(u32::MAX),
        &TokenCounter::Approximate,
        text.corpus_text(),
    )
}
