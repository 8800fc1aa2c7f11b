//! LLM environment engineers: a model behind an OpenAI-compatible chat-completions API
//! (vLLM, llama.cpp server, Ollama, hosted APIs) designs the next stage's configuration.
//!
//! * The prompt ([`prompt_for`]) is a pure function of the engineer context and the
//!   registration: a system message (the role), then the rendered context modules and
//!   the answer format ([`answer_format`]). When the registration
//!   names a context window, the context is trimmed to fit, counting tokens with the
//!   registered `tokenizer.json` (else about 4 characters per token): first the example
//!   failing plans, then history entries (oldest first), then the training details.
//!   What was cut is noted in the decision's rationale.
//! * The call ([`LlmEngineer::decide`]) is bounded: a per-attempt timeout
//!   (`MAPF_LEDGER_LLM_TIMEOUT_MS`, default 120 s) and at most
//!   `MAPF_LEDGER_LLM_ATTEMPTS` attempts (default 3), retrying on timeouts, connection
//!   errors and HTTP 5xx. The attempt log (outcomes only, never durations, never the
//!   key) is recorded with the decision.
//! * The reply is parsed by [`extract`]: `<think>` blocks are dropped, a fenced JSON
//!   block is preferred, else the first balanced JSON object that reads as a proposal.
//!   An unparseable reply yields no proposal (the stage records a rejection and keeps
//!   the previous configuration); a transport failure yields an error (a fallback).
//!
//! The API key is read from the registered environment variable at call time and is
//! never stored anywhere.
//!
//! Replays (`ledger replay`) give the engineer the recorded calls
//! ([`RecordedReplies`], keyed by the prompt's blob hash): a prompt that matches gets
//! the recorded reply instead of an HTTP call; one that does not is answered with an
//! error naming the prompt hash, which the replay reports as a mismatch.
use super::{Decision, Engineer, EngineerContext};
use crate::env::{ConfigProposal, RefusedField};
use crate::ledger::event::{EngineerKind, EngineerRegistered, EventBody};
use crate::ledger::{BranchState, Hash, Ledger, LedgerError};
use std::collections::BTreeMap;
use std::time::Duration;
use tokenizers::Tokenizer;

/// Per-attempt timeout override, in milliseconds.
pub const TIMEOUT_ENV: &str = "MAPF_LEDGER_LLM_TIMEOUT_MS";
/// Attempt-count override (1..=10).
pub const ATTEMPTS_ENV: &str = "MAPF_LEDGER_LLM_ATTEMPTS";
/// Default per-attempt timeout.
pub const DEFAULT_TIMEOUT_MS: u64 = 120_000;
/// Default number of attempts.
pub const DEFAULT_ATTEMPTS: u32 = 3;
/// Characters per token when no tokenizer is registered.
pub const CHARS_PER_TOKEN: usize = 4;

/// Errors of setting up an LLM engineer.
#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    #[error("engineer {0:?} is not a registered LLM engineer on this branch")]
    NotRegistered(String),
    #[error("tokenizer of engineer {name:?} does not load: {reason}")]
    Tokenizer { name: String, reason: String },
}

/// An LLM engineer's registration, with its tokenizer loaded from the ledger.
#[derive(Clone, Debug, PartialEq)]
pub struct LlmRegistration {
    pub name: String,
    /// Base URL (`.../v1`) or the full chat-completions URL.
    pub url: String,
    pub model: String,
    /// Environment variable holding the API key (read at call time).
    pub api_key_env: Option<String>,
    /// Bytes of the registered tokenizer.json.
    pub tokenizer: Option<Vec<u8>>,
    /// Context window in tokens.
    pub max_context: Option<u32>,
    /// Context modules switched on (empty: the plan's choice stands).
    pub context_modules: Vec<String>,
}

impl LlmRegistration {
    /// The registration recorded by `r`, loading its tokenizer blob from `ledger`.
    /// None when `r` registers a built-in engineer.
    pub fn from_event(
        r: &EngineerRegistered,
        ledger: &Ledger,
    ) -> Result<Option<LlmRegistration>, LlmError> {
        let EngineerKind::Llm {
            url,
            model,
            tokenizer,
            api_key_env,
            max_context,
        } = &r.kind
        else {
            return Ok(None);
        };
        let tokenizer = tokenizer.map(|h| ledger.blob(&h)).transpose()?;
        Ok(Some(LlmRegistration {
            name: r.name.clone(),
            url: url.clone(),
            model: model.clone(),
            api_key_env: api_key_env.clone(),
            tokenizer,
            max_context: *max_context,
            context_modules: r.context_modules.clone(),
        }))
    }

    /// The chat-completions endpoint: `url` itself when it already ends in
    /// `/chat/completions`, else `url` + `/chat/completions`.
    pub fn endpoint(&self) -> String {
        let u = self.url.trim_end_matches('/');
        if u.ends_with("/chat/completions") {
            u.to_string()
        } else {
            format!("{u}/chat/completions")
        }
    }
}

/// The registration of the LLM engineer `name` on the branch whose state is `state`
/// (the last `EngineerRegistered` event of that name in its history).
pub fn registered(
    ledger: &Ledger,
    state: &BranchState,
    name: &str,
) -> Result<LlmRegistration, LlmError> {
    let head = state
        .head
        .ok_or_else(|| LlmError::NotRegistered(name.to_string()))?;
    let mut found = None;
    for (_, ev) in ledger.history_to(&head)? {
        if let EventBody::EngineerRegistered(r) = &ev.body {
            if r.name == name {
                found = Some(r.clone());
            }
        }
    }
    let r = found.ok_or_else(|| LlmError::NotRegistered(name.to_string()))?;
    LlmRegistration::from_event(&r, ledger)?.ok_or_else(|| LlmError::NotRegistered(name.into()))
}

/// Counts tokens: with the registered tokenizer, else about 4 characters per token.
pub enum TokenCounter {
    Tokenizer(Box<Tokenizer>),
    Approximate,
}

impl TokenCounter {
    /// The counter of a registration (an unloadable tokenizer is an error).
    pub fn for_registration(reg: &LlmRegistration) -> Result<TokenCounter, LlmError> {
        match &reg.tokenizer {
            None => Ok(TokenCounter::Approximate),
            Some(bytes) => Tokenizer::from_bytes(bytes)
                .map(|t| TokenCounter::Tokenizer(Box::new(t)))
                .map_err(|e| LlmError::Tokenizer {
                    name: reg.name.clone(),
                    reason: e.to_string(),
                }),
        }
    }

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
/// sizes, prose around the JSON and wrapper keys are still read by [`extract`]; the
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

/// The context with the registration's module choice applied (when it names any).
fn with_modules(ctx: &EngineerContext, reg: &LlmRegistration) -> EngineerContext {
    let mut c = ctx.clone();
    if !reg.context_modules.is_empty() {
        let on = |m: &str| reg.context_modules.iter().any(|x| x == m);
        c.modules.failure_breakdown = on("failure_breakdown");
        c.modules.guideline = on("guideline");
        c.modules.history = on("history");
        c.modules.summary = on("summary");
        c.modules.training_details = on("training_details");
    }
    c
}

/// Build the prompt, trimming the context to `reg.max_context` tokens as counted by
/// `counter`: example failing plans first (last example first), then history entries
/// (oldest first), then the training details. If it still does not fit, it is sent as
/// it is and the cut list says so.
pub fn build_prompt(
    ctx: &EngineerContext,
    reg: &LlmRegistration,
    counter: &TokenCounter,
) -> Prompt {
    let system = system_message();
    let mut c = with_modules(ctx, reg);
    let Some(max) = reg.max_context else {
        return Prompt {
            system,
            user: user_message(&c),
            cut: vec![],
            tokens: None,
        };
    };
    let max = max as usize;
    let size = |c: &EngineerContext| counter.count(&system) + counter.count(&user_message(c));
    let mut tokens = size(&c);
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
            tokens = size(&c);
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
        } else if c.modules.history && !c.history.is_empty() {
            history.push(c.history.remove(0).stage);
            tokens = size(&c);
            exact = true;
        } else if c.modules.training_details {
            c.modules.training_details = false;
            training = true;
            tokens = size(&c);
            exact = true;
        } else {
            break;
        }
    }
    if !exact {
        tokens = size(&c);
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
        user: user_message(&c),
        cut,
        tokens: Some(tokens),
    }
}

/// The exact prompt text for `ctx` and `reg` (a pure function of both; replays match
/// recorded replies by its hash). An unloadable tokenizer falls back to the
/// 4-characters-per-token approximation.
pub fn prompt_for(ctx: &EngineerContext, reg: &LlmRegistration) -> String {
    let counter = TokenCounter::for_registration(reg).unwrap_or(TokenCounter::Approximate);
    build_prompt(ctx, reg, &counter).text()
}

/// What [`extract`] found in a reply.
#[derive(Clone, Debug, PartialEq)]
pub struct Extracted {
    pub proposal: ConfigProposal,
    /// Keys the engineer may not set, with their values (recorded, never applied).
    pub refused: Vec<RefusedField>,
    /// The JSON object as the model wrote it.
    pub json: String,
    /// The prose outside the JSON (and outside `<think>` blocks), trimmed.
    pub rationale: String,
}

/// Parse a reply into a proposal (see [`extract`]).
pub fn extract_proposal(reply: &str) -> Result<ConfigProposal, String> {
    extract(reply).map(|e| e.proposal)
}

/// Drop `<think>…</think>` blocks: a `</think>` without an opening tag ends reasoning
/// that started in the prompt (everything before it goes), and an unclosed `<think>`
/// runs to the end of the reply.
pub fn strip_think(reply: &str) -> String {
    let mut s = reply.to_string();
    if let (Some(close), open) = (s.find("</think>"), s.find("<think>")) {
        if open.is_none_or(|o| o > close) {
            s = s[close + "</think>".len()..].to_string();
        }
    }
    let mut out = String::new();
    let mut rest = s.as_str();
    while let Some(o) = rest.find("<think>") {
        out.push_str(&rest[..o]);
        let after = &rest[o + "<think>".len()..];
        match after.find("</think>") {
            Some(c) => rest = &after[c + "</think>".len()..],
            None => {
                rest = "";
                break;
            }
        }
    }
    out.push_str(rest);
    out
}

/// Fenced code blocks: (byte range of the whole fence, language tag, body).
fn fences(text: &str) -> Vec<(std::ops::Range<usize>, String, String)> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(o) = text[from..].find("```") {
        let start = from + o;
        let after = start + 3;
        let line_end = text[after..]
            .find('\n')
            .map(|i| after + i)
            .unwrap_or(text.len());
        let lang = text[after..line_end].trim().to_ascii_lowercase();
        let body_start = (line_end + 1).min(text.len());
        match text[body_start..].find("```") {
            Some(c) => {
                let end = body_start + c + 3;
                out.push((
                    start..end,
                    lang,
                    text[body_start..body_start + c].to_string(),
                ));
                from = end;
            }
            None => break,
        }
    }
    out
}

/// The byte range of the balanced `{...}` starting at `start` (strings and escapes
/// respected), if it closes.
fn balanced(text: &str, start: usize) -> Option<std::ops::Range<usize>> {
    let bytes = text.as_bytes();
    let (mut depth, mut in_str, mut esc) = (0usize, false, false);
    for (i, &b) in bytes.iter().enumerate().skip(start) {
        if in_str {
            match (esc, b) {
                (true, _) => esc = false,
                (false, b'\\') => esc = true,
                (false, b'"') => in_str = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_str = true,
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(start..i + 1);
                }
            }
            _ => {}
        }
    }
    None
}

/// Read a JSON text as a proposal: `{"agents"?, "sizes"?}`, that object wrapped as
/// `{"config": {...}}` or `{"proposal": {...}}`, or a bare map of sizes
/// (`{"5": {...}}`). Other keys make it not a proposal.
pub fn parse_proposal(json: &str) -> Result<(ConfigProposal, Vec<RefusedField>), String> {
    let v: serde_json::Value =
        serde_json::from_str(json.trim()).map_err(|e| format!("not JSON ({e})"))?;
    let mut obj = match v {
        serde_json::Value::Object(o) => o,
        other => return Err(format!("not a JSON object ({other})")),
    };
    for wrapper in ["config", "proposal"] {
        if obj.len() == 1 && obj.get(wrapper).is_some_and(|x| x.is_object()) {
            if let Some(serde_json::Value::Object(inner)) = obj.remove(wrapper) {
                obj = inner;
            }
            break;
        }
    }
    if !obj.is_empty() && obj.keys().all(|k| k.trim().parse::<u32>().is_ok()) {
        let mut wrapped = serde_json::Map::new();
        wrapped.insert("sizes".into(), serde_json::Value::Object(obj));
        obj = wrapped;
    }
    // Keys an engineer may not set (`reward`, `validation_set`, anything else) are
    // taken out and returned as refused fields: recorded with the decision, never
    // applied and never silently dropped. An object with no proposal key at all is not
    // a proposal (prose may quote other JSON).
    if !obj.is_empty() && !obj.contains_key("agents") && !obj.contains_key("sizes") {
        let keys: Vec<String> = obj.keys().map(|k| format!("{k:?}")).collect();
        return Err(format!(
            "no \"sizes\" or \"agents\" key (found {})",
            if keys.is_empty() {
                "an empty object".to_string()
            } else {
                keys.join(", ")
            }
        ));
    }
    let mut refused = Vec::new();
    let unknown: Vec<String> = obj
        .keys()
        .filter(|k| *k != "agents" && *k != "sizes")
        .cloned()
        .collect();
    for k in unknown {
        let v = obj.remove(&k).expect("listed above");
        refused.push(RefusedField {
            field: k,
            value: v.to_string(),
        });
    }
    if let Some(serde_json::Value::Object(sizes)) = obj.get_mut("sizes") {
        for (n, v) in sizes.iter_mut() {
            if let serde_json::Value::Object(fields) = v {
                let bad: Vec<String> = fields
                    .keys()
                    .filter(|f| !["data_ratio", "hole_ratio", "wait_ratio"].contains(&f.as_str()))
                    .cloned()
                    .collect();
                for f in bad {
                    let v = fields.remove(&f).expect("listed above");
                    refused.push(RefusedField {
                        field: format!("sizes.{n}.{f}"),
                        value: v.to_string(),
                    });
                }
            }
        }
    }
    let proposal = serde_json::from_value(serde_json::Value::Object(obj))
        .map_err(|e| format!("not a configuration proposal ({e})"))?;
    Ok((proposal, refused))
}

/// The text around the JSON at `cut`: both sides trimmed, joined by a blank line.
fn prose(text: &str, cut: std::ops::Range<usize>) -> String {
    let parts: Vec<&str> = [text[..cut.start].trim(), text[cut.end..].trim()]
        .into_iter()
        .filter(|p| !p.is_empty())
        .collect();
    parts.join("\n\n")
}

/// Extract a proposal from a model reply: drop `<think>` blocks, prefer a fenced JSON
/// block (```json first, then unlabelled fences), else the first balanced `{...}` that
/// reads as a proposal. The rationale is the remaining prose. The error says why
/// nothing usable was found, quoting the start of the reply.
pub fn extract(reply: &str) -> Result<Extracted, String> {
    let text = strip_think(reply);
    let mut reasons: Vec<String> = Vec::new();
    let fenced = fences(&text);
    let mut ordered: Vec<&(std::ops::Range<usize>, String, String)> =
        fenced.iter().filter(|f| f.1 == "json").collect();
    ordered.extend(fenced.iter().filter(|f| f.1 != "json"));
    for (range, _, body) in ordered {
        match parse_proposal(body) {
            Ok((p, refused)) => {
                return Ok(Extracted {
                    proposal: p,
                    refused,
                    json: body.trim().to_string(),
                    rationale: prose(&text, range.clone()),
                })
            }
            Err(e) => reasons.push(format!("fenced block: {e}")),
        }
    }
    // Every '{' starts a candidate (at most MAX_CANDIDATES, so a pathological reply
    // stays cheap); an unclosed one does not hide a complete object after it.
    const MAX_CANDIDATES: usize = 256;
    let mut from = 0;
    let mut tried = 0;
    while let Some(o) = text[from..].find('{') {
        let start = from + o;
        from = start + 1;
        tried += 1;
        if tried > MAX_CANDIDATES {
            break;
        }
        match balanced(&text, start) {
            Some(r) => match parse_proposal(&text[r.clone()]) {
                Ok((p, refused)) => {
                    return Ok(Extracted {
                        proposal: p,
                        refused,
                        json: text[r.clone()].to_string(),
                        rationale: prose(&text, r),
                    })
                }
                Err(e) => reasons.push(e),
            },
            None => {
                if !reasons.iter().any(|r| r == "an unclosed '{'") {
                    reasons.push("an unclosed '{'".into());
                }
            }
        }
    }
    let excerpt: String = reply.trim().chars().take(120).collect();
    let ellipsis = if reply.trim().chars().count() > 120 {
        "…"
    } else {
        ""
    };
    let why = if text.trim().is_empty() && !reply.trim().is_empty() {
        "the reply has nothing outside <think> blocks".to_string()
    } else if reasons.is_empty() {
        "no JSON object in the reply".to_string()
    } else {
        reasons.truncate(3);
        format!(
            "no usable JSON object in the reply ({})",
            reasons.join("; ")
        )
    };
    Err(format!("{why}; reply began {excerpt:?}{ellipsis}"))
}

/// Transport settings: per-attempt timeout and attempt count.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CallPolicy {
    pub timeout: Duration,
    pub attempts: u32,
    /// Pause before retry k is `backoff * k`.
    pub backoff: Duration,
}

impl CallPolicy {
    /// From `MAPF_LEDGER_LLM_TIMEOUT_MS` and `MAPF_LEDGER_LLM_ATTEMPTS` (defaults 120 s,
    /// 3 attempts; attempts clamped to 1..=10).
    pub fn from_env() -> CallPolicy {
        let num = |k: &str| {
            std::env::var(k)
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
        };
        CallPolicy {
            timeout: Duration::from_millis(num(TIMEOUT_ENV).unwrap_or(DEFAULT_TIMEOUT_MS).max(1)),
            attempts: num(ATTEMPTS_ENV)
                .map(|a| a.clamp(1, 10) as u32)
                .unwrap_or(DEFAULT_ATTEMPTS),
            backoff: Duration::from_millis(250),
        }
    }
}

/// The outcome of one call: the message content, or why there is none, plus the log.
#[derive(Clone, Debug, PartialEq)]
pub struct CallOutcome {
    /// The reply text (`choices[0].message.content`), or the raw body when the
    /// response is not the chat-completions shape.
    pub reply: Option<String>,
    /// Set when the response is a 2xx that is not a chat completion.
    pub protocol_error: Option<String>,
    /// Set when no 2xx response came back.
    pub transport_error: Option<String>,
    /// One entry per attempt, e.g. `attempt 1: HTTP 500`, `attempt 2: ok`.
    pub attempts: Vec<String>,
}

enum Attempt {
    Ok(String),
    Retry(String),
    Fail(String),
}

fn attempt(agent: &ureq::Agent, url: &str, key: Option<&str>, body: &str) -> Attempt {
    let mut req = agent.post(url).header("Content-Type", "application/json");
    if let Some(k) = key {
        req = req.header("Authorization", format!("Bearer {k}"));
    }
    match req.send(body) {
        Ok(mut resp) => {
            let status = resp.status().as_u16();
            let text = resp.body_mut().read_to_string();
            match (status, text) {
                (200..=299, Ok(t)) => Attempt::Ok(t),
                (200..=299, Err(e)) => {
                    Attempt::Retry(format!("reading the body failed ({})", short_err(&e)))
                }
                (s @ 500..=599, _) => Attempt::Retry(format!("HTTP {s}")),
                (s, t) => {
                    let excerpt: String = t.unwrap_or_default().trim().chars().take(200).collect();
                    Attempt::Fail(format!("HTTP {s}: {excerpt}"))
                }
            }
        }
        Err(e) => match &e {
            ureq::Error::Timeout(_) => Attempt::Retry("timed out".into()),
            ureq::Error::ConnectionFailed | ureq::Error::HostNotFound | ureq::Error::Io(_) => {
                Attempt::Retry(format!("connection failed ({})", short_err(&e)))
            }
            _ => Attempt::Fail(format!("request failed ({})", short_err(&e))),
        },
    }
}

/// An error's message without durations (the ledger hashes it).
fn short_err(e: &ureq::Error) -> String {
    match e {
        ureq::Error::Timeout(_) => "timed out".into(),
        ureq::Error::Io(io) => format!("{:?}", io.kind()),
        other => other.to_string().chars().take(160).collect(),
    }
}

/// POST the chat request, retrying per `policy`, and read `choices[0].message.content`.
pub fn call(
    reg: &LlmRegistration,
    prompt: &Prompt,
    key: Option<&str>,
    policy: &CallPolicy,
) -> CallOutcome {
    let body = serde_json::json!({
        "model": reg.model,
        "messages": [
            {"role": "system", "content": prompt.system},
            {"role": "user", "content": prompt.user},
        ],
        "temperature": 0,
        "stream": false,
    })
    .to_string();
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(policy.timeout))
        .http_status_as_error(false)
        .build()
        .into();
    let url = reg.endpoint();
    let mut log = Vec::new();
    let mut last = String::new();
    for k in 1..=policy.attempts.max(1) {
        if k > 1 {
            std::thread::sleep(policy.backoff * (k - 1));
        }
        match attempt(&agent, &url, key, &body) {
            Attempt::Ok(raw) => {
                log.push(format!("attempt {k}: ok"));
                let (reply, protocol_error) = match content_of(&raw) {
                    Ok(c) => (Some(c), None),
                    Err(e) => (Some(raw), Some(e)),
                };
                return CallOutcome {
                    reply,
                    protocol_error,
                    transport_error: None,
                    attempts: log,
                };
            }
            Attempt::Retry(why) => {
                log.push(format!("attempt {k}: {why}"));
                last = why;
            }
            Attempt::Fail(why) => {
                log.push(format!("attempt {k}: {why} (not retried)"));
                return CallOutcome {
                    reply: None,
                    protocol_error: None,
                    transport_error: Some(format!("{} at {url}: {why}", reg.model)),
                    attempts: log,
                };
            }
        }
    }
    CallOutcome {
        reply: None,
        protocol_error: None,
        transport_error: Some(format!(
            "no reply from {url} after {} attempt(s): {last}",
            log.len()
        )),
        attempts: log,
    }
}

/// `choices[0].message.content` of a chat-completions response.
pub fn content_of(raw: &str) -> Result<String, String> {
    let v: serde_json::Value =
        serde_json::from_str(raw).map_err(|e| format!("the response is not JSON ({e})"))?;
    v.pointer("/choices/0/message/content")
        .and_then(|c| c.as_str())
        .map(str::to_string)
        .ok_or_else(|| "the response has no choices[0].message.content".to_string())
}

/// An LLM engineer: a registration, its token counter and its call policy.
pub struct LlmEngineer {
    pub registration: LlmRegistration,
    counter: TokenCounter,
    /// Why the registered tokenizer is not used, when it does not load.
    counter_note: Option<String>,
    pub policy: CallPolicy,
    /// Replay mode: the recorded calls, used instead of the endpoint.
    pub recorded: Option<RecordedReplies>,
}

/// Recorded LLM calls of a branch, keyed by the blob hash of the exact prompt text.
pub type RecordedReplies = BTreeMap<Hash, RecordedCall>;

/// What one recorded decision got back from the model.
#[derive(Clone, Debug, PartialEq)]
pub struct RecordedCall {
    /// The raw reply (None when no reply came back).
    pub reply: Option<String>,
    /// The recorded rationale (holds the attempt log).
    pub rationale: String,
    /// The recorded failure (a fallback's reason), when there was one.
    pub error: Option<String>,
}

impl RecordedCall {
    /// The call outcome the recorded decision saw, rebuilt from the record: the reply,
    /// the attempt log (the rationale's `llm calls:` line) and, for a reply that was
    /// not a chat completion, the same protocol error `content_of` gave then.
    fn outcome(&self) -> CallOutcome {
        let attempts = self
            .rationale
            .lines()
            .find_map(|l| l.strip_prefix("llm calls: "))
            .map(|l| l.split("; ").map(str::to_string).collect())
            .unwrap_or_default();
        let protocol_error = self
            .reply
            .as_deref()
            .and_then(|r| content_of(r).err())
            .filter(|e| self.rationale.starts_with(&format!("reply rejected: {e}")));
        CallOutcome {
            reply: self.reply.clone(),
            protocol_error,
            transport_error: None,
            attempts,
        }
    }
}

impl LlmEngineer {
    /// An engineer for `registration` with the call policy from the environment. A
    /// tokenizer that does not load (registration validates it, so only a damaged
    /// blob) falls back to counting 4 characters per token, as [`prompt_for`] does,
    /// and the decision notes it.
    pub fn new(registration: LlmRegistration) -> LlmEngineer {
        let (counter, counter_note) = match TokenCounter::for_registration(&registration) {
            Ok(c) => (c, None),
            Err(e) => (
                TokenCounter::Approximate,
                Some(format!("{e}; counted 4 characters per token")),
            ),
        };
        LlmEngineer {
            registration,
            counter,
            counter_note,
            policy: CallPolicy::from_env(),
            recorded: None,
        }
    }

    /// The prompt this engineer sends for `ctx`.
    pub fn prompt(&self, ctx: &EngineerContext) -> Prompt {
        build_prompt(ctx, &self.registration, &self.counter)
    }
}

impl Engineer for LlmEngineer {
    fn name(&self) -> &str {
        &self.registration.name
    }

    fn decide(&mut self, ctx: &EngineerContext) -> Decision {
        let reg = &self.registration;
        let prompt = self.prompt(ctx);
        let mut notes: Vec<String> = Vec::new();
        notes.extend(self.counter_note.clone());
        notes.extend(prompt.cut_note(reg.max_context));
        let mut d = Decision {
            prompt: Some(prompt.text()),
            ..Decision::default()
        };
        if let Some(recorded) = &self.recorded {
            let hash = Hash::of_blob(prompt.text().as_bytes());
            let Some(r) = recorded.get(&hash) else {
                d.error = Some(format!(
                    "replay: no recorded reply for prompt {} (the prompt differs from the recorded one)",
                    hash.short()
                ));
                d.rationale = notes.join("\n");
                return d;
            };
            if r.reply.is_none() {
                // The recorded call failed: replay the recorded failure verbatim.
                d.error = r.error.clone();
                d.rationale = r.rationale.clone();
                return d;
            }
            return conclude(d, notes, r.outcome());
        }
        let key = match &reg.api_key_env {
            None => None,
            Some(var) => match std::env::var(var) {
                Ok(k) if !k.is_empty() => Some(k),
                _ => {
                    d.error = Some(format!(
                        "the API key variable {var} is not set; the model was not called"
                    ));
                    d.rationale = notes.join("\n");
                    return d;
                }
            },
        };
        let out = call(reg, &prompt, key.as_deref(), &self.policy);
        conclude(d, notes, out)
    }
}

/// The decision from a call's outcome: the reply, the attempt log in the rationale,
/// and the extracted proposal or why there is none.
fn conclude(mut d: Decision, mut notes: Vec<String>, out: CallOutcome) -> Decision {
    let log = format!("llm calls: {}", out.attempts.join("; "));
    d.reply = out.reply.clone();
    if let Some(err) = out.transport_error {
        d.error = Some(format!("{err} [{log}]"));
        notes.push(log);
        d.rationale = notes.join("\n");
        return d;
    }
    notes.push(log);
    if let Some(err) = out.protocol_error {
        d.rationale = std::iter::once(format!("reply rejected: {err}"))
            .chain(notes)
            .collect::<Vec<_>>()
            .join("\n");
        return d;
    }
    let reply = out.reply.unwrap_or_default();
    read_reply(&mut d, &reply, notes);
    d
}

/// Fill a decision from a reply: the extracted proposal and its rationale followed by
/// `notes`, or a rejection naming why nothing usable was found. Every engineer that
/// writes text (HTTP or in-process) goes through here.
pub fn read_reply(d: &mut Decision, reply: &str, notes: Vec<String>) {
    match extract(reply) {
        Ok(e) => {
            d.proposal = Some(e.proposal);
            d.refused = e.refused;
            d.proposed_text = Some(e.json);
            d.rationale = std::iter::once(e.rationale)
                .filter(|r| !r.is_empty())
                .chain(notes)
                .collect::<Vec<_>>()
                .join("\n\n");
        }
        Err(e) => {
            d.rationale = std::iter::once(format!("reply rejected: {e}"))
                .chain(notes)
                .collect::<Vec<_>>()
                .join("\n");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sizes(p: &ConfigProposal) -> Vec<(String, Option<f64>)> {
        p.sizes
            .iter()
            .map(|(k, v)| (k.clone(), v.hole_ratio))
            .collect()
    }

    #[test]
    fn plain_json_object() {
        let e = extract(r#"{"sizes": {"5": {"hole_ratio": 0.2}}}"#).unwrap();
        assert_eq!(sizes(&e.proposal), vec![("5".into(), Some(0.2))]);
        assert_eq!(e.rationale, "");
    }

    #[test]
    fn think_then_fenced_json_then_prose() {
        let r = "<think>maybe {\"sizes\": {\"3\": {\"hole_ratio\": 0.4}}}? no.</think>\n```json\n{\"sizes\": {\"6\": {\"hole_ratio\": 0.05}}}\n```\nSize 6 fails on holes.";
        let e = extract(r).unwrap();
        assert_eq!(sizes(&e.proposal), vec![("6".into(), Some(0.05))]);
        assert_eq!(e.rationale, "Size 6 fails on holes.");
        assert!(e.json.starts_with('{'));
    }

    #[test]
    fn closing_think_without_opening_and_unclosed_think() {
        let r = "reasoning {\"sizes\":{\"3\":{}}} ...</think>{\"agents\": 2}";
        assert_eq!(extract_proposal(r).unwrap().agents, Some(2.0));
        let r = "<think>I think {\"agents\": 3} but I ran out of tokens";
        let err = extract(r).unwrap_err();
        assert!(err.contains("outside <think>"), "{err}");
    }

    #[test]
    fn prose_around_json_and_braces_in_strings() {
        let r =
            "Here is my plan: {\"sizes\": {\"4\": {\"wait_ratio\": 0.5}}} because {waits} matter.";
        let e = extract(r).unwrap();
        assert_eq!(e.proposal.sizes["4"].wait_ratio, Some(0.5));
        assert!(e.rationale.starts_with("Here is my plan:"));
        assert!(e.rationale.ends_with("because {waits} matter."));
        let r = "{\"note\": \"}\"} then {\"sizes\": {\"4\": {\"hole_ratio\": 0.1}}}";
        assert_eq!(
            extract_proposal(r).unwrap().sizes["4"].hole_ratio,
            Some(0.1)
        );
    }

    #[test]
    fn wrapped_and_bare_size_maps() {
        let p = extract_proposal(r#"{"config": {"sizes": {"5": {"data_ratio": 0.3}}}}"#).unwrap();
        assert_eq!(p.sizes["5"].data_ratio, Some(0.3));
        let p = extract_proposal(r#"{"proposal": {"agents": 2}}"#).unwrap();
        assert_eq!(p.agents, Some(2.0));
        let p = extract_proposal(r#"{"5": {"hole_ratio": 0.3}, "6": {}}"#).unwrap();
        assert_eq!(p.sizes.len(), 2);
        assert_eq!(extract_proposal("{}").unwrap(), ConfigProposal::default());
    }

    #[test]
    fn fence_preference_and_unlabelled_fences() {
        let r = "```\n{\"agents\": 3}\n```\n```json\n{\"agents\": 2}\n```";
        assert_eq!(extract_proposal(r).unwrap().agents, Some(2.0));
        let r = "```\n{\"agents\": 3}\n```";
        assert_eq!(extract_proposal(r).unwrap().agents, Some(3.0));
        let r = "```JSON\n{\"sizes\": {\"3\": {\"hole_ratio\": 0}}}\n```";
        assert_eq!(
            extract_proposal(r).unwrap().sizes["3"].hole_ratio,
            Some(0.0)
        );
        // A broken fence falls through to a balanced object in the prose.
        let r = "```json\n{\"sizes\": \n```\nso: {\"agents\": 2}";
        assert_eq!(extract_proposal(r).unwrap().agents, Some(2.0));
    }

    #[test]
    fn forbidden_keys_are_refused_with_their_values_and_the_rest_is_used() {
        let e = extract(
            "```json\n{\"reward\": 2, \"sizes\": {\"5\": {\"hole_ratio\": 0.1, \"agents\": 4}}, \"validation_set\": [1]}\n```",
        )
        .unwrap();
        assert_eq!(sizes(&e.proposal), vec![("5".to_string(), Some(0.1))]);
        let refused: Vec<(&str, &str)> = e
            .refused
            .iter()
            .map(|r| (r.field.as_str(), r.value.as_str()))
            .collect();
        assert_eq!(
            refused,
            [
                ("reward", "2"),
                ("validation_set", "[1]"),
                ("sizes.5.agents", "4")
            ]
        );
        // A misspelt field is refused, not guessed.
        let e = extract("{\"sizes\": {\"5\": {\"holes\": 0.2}}}").unwrap();
        assert_eq!(e.refused[0].field, "sizes.5.holes");
        // An object with no proposal key is prose, not a proposal.
        assert!(extract("As {\"note\": 1} says, nothing.").is_err());
    }

    #[test]
    fn garbage_is_an_error_naming_the_reply() {
        for r in [
            "I cannot help with that.",
            "",
            "{not json}",
            "{\"foo\": 1}",
            "{\"sizes\": {\"5\": {\"hole_ratio\": \"lots\"}}}",
            "[1, 2, 3]",
            "{\"sizes\": {",
        ] {
            let err = extract_proposal(r).unwrap_err();
            assert!(err.contains("reply began"), "{r:?}: {err}");
        }
        let err = extract_proposal("The weather is nice").unwrap_err();
        assert!(err.contains("The weather is nice"), "{err}");
    }

    #[test]
    fn endpoint_joins_base_urls() {
        let mut r = LlmRegistration {
            name: "x".into(),
            url: "http://h:1/v1/".into(),
            model: "m".into(),
            api_key_env: None,
            tokenizer: None,
            max_context: None,
            context_modules: vec![],
        };
        assert_eq!(r.endpoint(), "http://h:1/v1/chat/completions");
        r.url = "http://h:1/v1/chat/completions".into();
        assert_eq!(r.endpoint(), "http://h:1/v1/chat/completions");
    }

    #[test]
    fn content_of_reads_the_first_choice() {
        let raw = r#"{"choices":[{"message":{"role":"assistant","content":"hi"}}]}"#;
        assert_eq!(content_of(raw).unwrap(), "hi");
        assert!(content_of("{}").is_err());
        assert!(content_of("nope").is_err());
    }
}
