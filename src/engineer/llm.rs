//! LLM environment engineers: a model behind an OpenAI-compatible chat-completions API
//! (vLLM, llama.cpp server, Ollama, hosted APIs) designs the next stage's configuration.
//!
//! * The prompt ([`prompt_for`]) is a pure function of the engineer context and the
//!   registration at the plan's text revision, built by [`super::text`] (the one prompt
//!   every engineer reads) with the registration's module choice and context window
//!   (without one, the whole context at that revision), counting tokens with the
//!   registered `tokenizer.json` (else about 4 characters per token).
//! * The call ([`LlmEngineer::decide`]) is bounded: a per-attempt timeout
//!   (`MAPF_LEDGER_LLM_TIMEOUT_MS`, default 120 s) and at most
//!   `MAPF_LEDGER_LLM_ATTEMPTS` attempts (default 3), retrying on timeouts, connection
//!   errors and HTTP 5xx. The attempt log (outcomes only, never durations, never the
//!   key) is recorded with the decision.
//! * The reply is read by [`super::reply`], as every engineer's is. An unparseable reply
//!   yields no proposal (the stage records a rejection and keeps the previous
//!   configuration). No reply at all (a refused connection, a timeout or a 5xx on every
//!   attempt, a 4xx, an unset API key variable) is no decision: the decision says
//!   [`Unanswered`], and the stage stops without recording one. Ledgers recorded
//!   before this recorded such calls as fallbacks; their replays replay them verbatim.
//!
//! The API key is read from the registered environment variable at call time and is
//! never stored anywhere.
//!
//! Replays (`ledger replay`) give the engineer the recorded calls
//! ([`RecordedReplies`], keyed by the prompt's blob hash): a prompt that matches gets
//! the recorded reply instead of an HTTP call; one that does not is answered with an
//! error naming the prompt hash, which the replay reports as a mismatch.
use super::text::TextRevision;
pub use super::text::{Prompt, TokenCounter};
use super::{Decision, Engineer, EngineerContext, Unanswered};
use crate::ledger::{BranchState, Hash, Ledger, LedgerError};
use crate::record::event::{EngineerKind, EngineerRegistered, EventBody};
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

// The token counter a registration implies (here, not in `prompt`: it reads the
// registration's tokenizer and reports `LlmError`).
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
}

/// The prompt of a registered engineer at the plan's text revision: its module choice
/// and context window (see [`super::text::build`]).
pub fn build_prompt(
    ctx: &EngineerContext,
    reg: &LlmRegistration,
    counter: &TokenCounter,
    text: TextRevision,
) -> Prompt {
    super::text::build(ctx, &reg.context_modules, reg.max_context, counter, text)
}

/// The exact prompt text for `ctx` and `reg` at `text` (a pure function of the three;
/// replays match recorded replies by its hash). An unloadable tokenizer falls back to
/// the 4-characters-per-token approximation.
pub fn prompt_for(ctx: &EngineerContext, reg: &LlmRegistration, text: TextRevision) -> String {
    let counter = TokenCounter::for_registration(reg).unwrap_or(TokenCounter::Approximate);
    build_prompt(ctx, reg, &counter, text).text()
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
                    Err(e) => (Some(raw), Some(e.to_string())),
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

/// Why a 2xx response is not a chat completion (its text is recorded in the
/// decision's rationale: `reply rejected: ...`).
#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    #[error("the response is not JSON ({0})")]
    NotJson(#[source] serde_json::Error),
    #[error("the response has no choices[0].message.content")]
    NoContent,
}

/// `choices[0].message.content` of a chat-completions response.
pub fn content_of(raw: &str) -> Result<String, ProtocolError> {
    let v: serde_json::Value = serde_json::from_str(raw).map_err(ProtocolError::NotJson)?;
    v.pointer("/choices/0/message/content")
        .and_then(|c| c.as_str())
        .map(str::to_string)
        .ok_or(ProtocolError::NoContent)
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
    /// The plan's engineer text revision (`[engineer] revision`): what the prompt is
    /// rendered at and the reply read at.
    pub text: TextRevision,
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
            .map(|e| e.to_string())
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
    /// An engineer for `registration` at the plan's text revision `text`, with the call
    /// policy from the environment. A
    /// tokenizer that does not load (registration validates it, so only a damaged
    /// blob) falls back to counting 4 characters per token, as [`prompt_for`] does,
    /// and the decision notes it.
    pub fn new(registration: LlmRegistration, text: TextRevision) -> LlmEngineer {
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
            text,
        }
    }

    /// The prompt this engineer sends for `ctx`.
    pub fn prompt(&self, ctx: &EngineerContext) -> Prompt {
        build_prompt(ctx, &self.registration, &self.counter, self.text)
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
            return conclude(d, notes, r.outcome(), self.text);
        }
        let key = match &reg.api_key_env {
            None => None,
            Some(var) => match std::env::var(var) {
                Ok(k) if !k.is_empty() => Some(k),
                _ => {
                    d.unanswered = Some(Unanswered {
                        engineer: reg.name.clone(),
                        url: reg.endpoint(),
                        cause: format!(
                            "the API key variable {var} is not set; the model was not called"
                        ),
                    });
                    d.rationale = notes.join("\n");
                    return d;
                }
            },
        };
        let out = call(reg, &prompt, key.as_deref(), &self.policy);
        if let Some(err) = &out.transport_error {
            // No answer came: not a decision (see `Unanswered`).
            d.unanswered = Some(Unanswered {
                engineer: reg.name.clone(),
                url: reg.endpoint(),
                cause: format!("{err} [llm calls: {}]", out.attempts.join("; ")),
            });
            d.rationale = notes.join("\n");
            return d;
        }
        conclude(d, notes, out, self.text)
    }
}

/// The decision from a call that got a response: the reply, the attempt log in the
/// rationale, and the extracted proposal or why there is none.
fn conclude(
    mut d: Decision,
    mut notes: Vec<String>,
    out: CallOutcome,
    text: TextRevision,
) -> Decision {
    let log = format!("llm calls: {}", out.attempts.join("; "));
    d.reply = out.reply.clone();
    notes.push(log);
    if let Some(err) = out.protocol_error {
        d.rationale = std::iter::once(format!("reply rejected: {err}"))
            .chain(notes)
            .collect::<Vec<_>>()
            .join("\n");
        return d;
    }
    let reply = out.reply.unwrap_or_default();
    super::reply::read_reply(&mut d, &reply, notes, text);
    d
}

#[cfg(test)]
mod tests {
    use super::*;

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
