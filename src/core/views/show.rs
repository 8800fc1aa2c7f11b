//! The JSON of `show` (a branch, a stage), `replay --json` and `engineer list --json`,
//! as named types with schemas (`schemas/show-branch.json`, `show-stage.json`,
//! `replay.json`, `engineer-list.json`). An event's `show --json` is the export's
//! [`super::export::EventRecord`].
use super::replay::StageReplay;
use crate::ledger::{BranchState, Hash, StageState};
use schemars::JsonSchema;
use serde::Serialize;

/// `ledger show BRANCH --json`: the branch's head and its projection.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct BranchShow {
    pub branch: String,
    pub head: Hash,
    pub state: BranchState,
}

/// `ledger show BRANCH@stageN --json`: one stage's projected state.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct StageShow {
    pub branch: String,
    pub stage: StageState,
}

/// `ledger replay --verify --json`: the stages recomputed and, on success, the
/// `replay_verified` events recorded (hex ids); on a mismatch, what differed.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct ReplayReport {
    pub branch: String,
    /// The stages that matched, in order.
    pub matched: Vec<StageReplay>,
    /// The first mismatch (the branch was not changed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mismatch: Option<String>,
    /// Ids of the `replay_verified` events appended (absent on a mismatch).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replay_verified: Option<Vec<String>>,
}

/// One row of `ledger engineer list --json`: an LLM engineer registered on a branch.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct EngineerRow {
    pub name: String,
    /// Always `llm` (built-in engineers need no registration).
    pub kind: String,
    pub url: String,
    pub model: String,
    /// The environment variable holding the API key (never the key).
    pub api_key_env: Option<String>,
    /// The tokenizer blob (hex) used to count prompt tokens, if any.
    pub tokenizer: Option<String>,
    pub max_context: Option<u32>,
    pub context_modules: Vec<String>,
    /// The `engineer_registered` event (hex) and its stage.
    pub event: String,
    pub stage: u32,
}
