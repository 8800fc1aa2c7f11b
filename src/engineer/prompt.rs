//! The engineer prompt, one function for every engineer that reads text: HTTP LLM
//! engineers (`super::llm`, with their registration's window and module choice) and the
//! in-process `current`/`base` checkpoints (`super::model`, with the model's prompt
//! budget and tokenizer). A system message (the role), then the rendered context modules
//! and the answer format; trimmed to a token window when one is given: first the example
//! failing plans, then history entries (oldest first), then the training details. What
//! was cut is noted in the decision's rationale.
use super::EngineerContext;
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

/// The system message: the engineer's role.
pub fn system_message() -> String {
    "You are the environment engineer of a training curriculum for a multi-agent path-finding \
policy on MAPF-FrozenLake maps. Between training stages you read the evidence about the current \
policy and write the next stage's training-instance generator configuration."
        .to_string()
}

/// The answer format every engineer prompt ends with (whatever modules are on). One
/// regular shape: each size changed with its three values, in a fenced block. Partial
/// sizes, prose around the JSON and wrapper keys are still read by [`super::reply::extract`]; the
/// JSON Schema of a proposal is in `schemas/config-proposal.json`, not in the prompt (a
/// small in-process model pays for every token of it and large models need no schema
/// for three numbers).
pub fn answer_format() -> &'static str {
    "## Answer\nA ```json block {\"sizes\": {\"N\": {\"data_ratio\": x, \"hole_ratio\": y, \"wait_ratio\": z}}} \
with each size you change and its three values, then one short paragraph of rationale.\n"
}

fn user_message(ctx: &EngineerContext) -> String {
    let mut s = ctx.render();
    s.push_str(answer_format());
    s
}

/// The newest engineer text revision (a plan's `[engineer] revision`).
pub const LATEST_REVISION: u32 = crate::plan::LATEST_ENGINEER_REVISION;

/// The user message of a trimmed context: revision 1 renders the trimmed struct as it
/// is (as ledgers before revision 2 recorded it), revision 2 says what was cut,
/// revision 3 also orders the evidence weakest first and asks for it before the JSON,
/// revision 5 puts the breakdown last, weakest last, after the answer format.
fn user_message_rev(ctx: &EngineerContext, cut: &super::context::Trimmed, revision: u32) -> String {
    if revision < 2 {
        return user_message(ctx);
    }
    let mut s = ctx.render_at(cut, revision);
    if revision >= 5 {
        s.push_str(answer_format_evidence_last(ctx.modules.failure_breakdown));
        s.push_str(&ctx.render_breakdown_last());
        return s;
    }
    s.push_str(if revision >= 3 {
        answer_format_evidence_first()
    } else {
        answer_format()
    });
    s
}

/// Revision 5's answer format, followed by the breakdown (weakest last): revision 3's
/// answer, its lines taken from the breakdown below it.
pub fn answer_format_evidence_last(breakdown: bool) -> &'static str {
    if breakdown {
        "## Answer\nFor each size you change, one line: `N: failed/total failed, mostly KIND: the change, FIELD old -> new`, \
taken from its line of the failure breakdown below (the weakest size is its last line). Then a ```json block {\"sizes\": {\"N\": {\"FIELD\": new}}} with only the values you change.\n\n"
    } else {
        answer_format_evidence_first()
    }
}

/// Revision 3's answer format: the evidence first, then the proposal. Each changed size
/// gets one line copied from its breakdown line (size, failed count, main failure) with
/// the change, and the JSON names only the values that change (a size not named, and a
/// value not named, keeps its setting). Reasoning before the answer is how LLMs are
/// asked to work, and for a small in-process model every decision it writes is then a
/// copy of text it has just read.
pub fn answer_format_evidence_first() -> &'static str {
    "## Answer\nFor each size you change, one line: `N: failed/total failed, mostly KIND: the change, FIELD old -> new`, \
taken from its breakdown line. Then a ```json block {\"sizes\": {\"N\": {\"FIELD\": new}}} with only the values you change.\n"
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

/// Build the prompt from `ctx` with the `modules` choice applied (empty: the context's
/// own), trimming the context to `max_context` tokens as counted by `counter`: example failing plans first (last example first), then history entries
/// (oldest first), then the training details. If it still does not fit, it is sent as
/// it is and the cut list says so.
pub fn build(
    ctx: &EngineerContext,
    modules: &[String],
    max_context: Option<u32>,
    counter: &TokenCounter,
) -> Prompt {
    build_revision(ctx, modules, max_context, counter, 1)
}

/// [`build`] at an engineer text revision (see [`LATEST_REVISION`]): from revision 2 a
/// trimmed module says what was cut ("2 earlier designed stage(s) omitted"), and the
/// notes it adds are counted in the budget.
pub fn build_revision(
    ctx: &EngineerContext,
    modules: &[String],
    max_context: Option<u32>,
    counter: &TokenCounter,
    revision: u32,
) -> Prompt {
    let system = system_message();
    let mut c = with_modules(ctx, modules);
    let Some(max) = max_context else {
        return Prompt {
            system,
            user: user_message(&c),
            cut: vec![],
            tokens: None,
        };
    };
    let max = max as usize;
    let mut trimmed = super::context::Trimmed::default();
    let size = |c: &EngineerContext, t: &super::context::Trimmed| {
        counter.count(&system) + counter.count(&user_message_rev(c, t, revision))
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
        user: user_message_rev(&c, &trimmed, revision),
        cut,
        tokens: Some(tokens),
    }
}
