//! LLM engineers registered on a branch (`ledger engineer add`, `engineer list`): the
//! rules a registration keeps (a name of `[a-z0-9_-]+` that no built-in has, an http(s)
//! URL, a model, the NAME of the environment variable holding the key and never the key,
//! a tokenizer.json that loads, a positive context window), the one
//! `EngineerRegistered` event that records it with the plan's context modules, and the
//! registrations a branch holds.
use crate::ledger::{Hash, Ledger, LedgerError, Meta};
use crate::plan::ContextModules;
use crate::record::event::{EngineerKind, EngineerRegistered, EventBody};
use crate::views::show::EngineerRow;

/// Why a registration is refused.
#[derive(Debug, thiserror::Error)]
pub enum RegistrationError {
    #[error("engineer name {0:?}: use lowercase letters, digits, '_' and '-'")]
    BadName(String),
    #[error("engineer name {0:?} is a built-in engineer")]
    Reserved(String),
    #[error("--url {0:?}: expected an http:// or https:// URL")]
    Url(String),
    #[error("--model: must not be empty")]
    EmptyModel,
    #[error("--api-key-env: give the NAME of the environment variable holding the key (letters, digits, '_'), not the key itself")]
    KeyVariable,
    #[error("--max-context: must be positive")]
    NoContext,
    #[error("not a tokenizer.json ({0})")]
    Tokenizer(String),
    #[error("--tokenizer {}: {source}", path.display())]
    TokenizerFile {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file [`NewLlm::read_tokenizer`] read is not a tokenizer.json ([`Self::Tokenizer`]).
    #[error("--tokenizer {}: {source}", path.display())]
    TokenizerAt {
        path: std::path::PathBuf,
        #[source]
        source: Box<RegistrationError>,
    },
    #[error("engineer {name:?} is already registered on branch {branch}")]
    Registered { name: String, branch: String },
    #[error("{0}")]
    Ledger(#[from] LedgerError),
}

/// An LLM engineer to register, as `ledger engineer add` names it.
pub struct NewLlm {
    pub name: String,
    /// Base URL (e.g. http://127.0.0.1:8000/v1) or the full chat-completions URL.
    pub url: String,
    pub model: String,
    pub api_key_env: Option<String>,
    /// The tokenizer.json counting its prompt tokens (checked by [`check_tokenizer`]).
    pub tokenizer: Option<Vec<u8>>,
    pub max_context: Option<u32>,
}

impl NewLlm {
    /// The rules of the name, URL, model, key variable and context window, in that order.
    pub fn check(&self) -> Result<(), RegistrationError> {
        validate_name(&self.name)?;
        let url = &self.url;
        if !(url.starts_with("http://") || url.starts_with("https://")) || url.len() < 10 {
            return Err(RegistrationError::Url(url.clone()));
        }
        if self.model.trim().is_empty() {
            return Err(RegistrationError::EmptyModel);
        }
        if let Some(v) = &self.api_key_env {
            validate_var(v)?;
        }
        if self.max_context == Some(0) {
            return Err(RegistrationError::NoContext);
        }
        Ok(())
    }
}

impl NewLlm {
    /// Take the tokenizer.json at `path` (`engineer add --tokenizer`), checked to load
    /// ([`check_tokenizer`]).
    pub fn read_tokenizer(&mut self, path: &std::path::Path) -> Result<(), RegistrationError> {
        let bytes = std::fs::read(path).map_err(|source| RegistrationError::TokenizerFile {
            path: path.to_path_buf(),
            source,
        })?;
        check_tokenizer(&bytes).map_err(|e| RegistrationError::TokenizerAt {
            path: path.to_path_buf(),
            source: Box::new(e),
        })?;
        self.tokenizer = Some(bytes);
        Ok(())
    }
}

/// Check an engineer name: `[a-z0-9_-]+` and not a built-in name.
pub fn validate_name(name: &str) -> Result<(), RegistrationError> {
    if name.is_empty()
        || !name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
    {
        return Err(RegistrationError::BadName(name.to_string()));
    }
    if super::reserved(name) {
        return Err(RegistrationError::Reserved(name.to_string()));
    }
    Ok(())
}

/// Check an environment variable name (so a key pasted in its place is refused, not stored).
fn validate_var(var: &str) -> Result<(), RegistrationError> {
    let mut bytes = var.bytes();
    let first_ok = bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_');
    if first_ok && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_') && var.len() <= 64 {
        Ok(())
    } else {
        Err(RegistrationError::KeyVariable)
    }
}

/// Check that `bytes` are a tokenizer.json that loads.
pub fn check_tokenizer(bytes: &[u8]) -> Result<(), RegistrationError> {
    tokenizers::Tokenizer::from_bytes(bytes)
        .map(|_| ())
        .map_err(|e| RegistrationError::Tokenizer(e.to_string()))
}

/// Record `llm` (checked) on `branch` with the plan's context `modules`, at the branch's
/// latest stage: its tokenizer as a blob, one `EngineerRegistered` event. Refused when
/// the branch registers the name already. Returns the event's id.
pub fn register(
    ledger: &mut Ledger,
    branch: &str,
    llm: NewLlm,
    modules: &ContextModules,
) -> Result<Hash, RegistrationError> {
    let state = ledger.projection(branch)?;
    if state.engineers.contains(&llm.name) {
        return Err(RegistrationError::Registered {
            name: llm.name,
            branch: branch.to_string(),
        });
    }
    let m = modules;
    let context_modules: Vec<String> = [
        ("failure_breakdown", m.failure_breakdown),
        ("guideline", m.guideline),
        ("history", m.history),
        ("summary", m.summary),
        ("training_details", m.training_details),
    ]
    .into_iter()
    .filter(|x| x.1)
    .map(|x| x.0.to_string())
    .collect();
    let tokenizer = llm.tokenizer.map(|b| ledger.put_blob(&b)).transpose()?;
    let stage = state.stages.iter().map(|s| s.stage).max().unwrap_or(0);
    let body = EventBody::EngineerRegistered(EngineerRegistered {
        name: llm.name,
        kind: EngineerKind::Llm {
            url: llm.url,
            model: llm.model,
            tokenizer,
            api_key_env: llm.api_key_env,
            max_context: llm.max_context,
        },
        context_modules,
    });
    let ids = ledger.append(branch, vec![(body, stage, Meta::now())])?;
    Ok(*ids.first().expect("one event appended"))
}

/// The LLM engineers registered on `branch`, oldest first.
pub fn registered(ledger: &Ledger, branch: &str) -> Result<Vec<EngineerRow>, LedgerError> {
    let mut rows = Vec::new();
    for (hash, ev) in ledger.history(branch)? {
        let EventBody::EngineerRegistered(r) = &ev.body else {
            continue;
        };
        let EngineerKind::Llm {
            url,
            model,
            tokenizer,
            api_key_env,
            max_context,
        } = &r.kind
        else {
            continue;
        };
        rows.push(EngineerRow {
            name: r.name.clone(),
            kind: "llm".into(),
            url: url.clone(),
            model: model.clone(),
            api_key_env: api_key_env.clone(),
            tokenizer: tokenizer.map(|h| h.to_hex()),
            max_context: *max_context,
            context_modules: r.context_modules.clone(),
            event: hash.to_hex(),
            stage: ev.stage,
        });
    }
    Ok(rows)
}
