//! What the model commands print: `ledger eval --json` (a model's scores on the
//! benchmark suites) and `ledger lm generate --json` (one sampled continuation).
use schemars::JsonSchema;
use serde::Serialize;
use std::collections::BTreeMap;

/// One (agents, size) cell of an evaluation.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct EvalCellRow {
    pub agents: usize,
    pub size: usize,
    pub total: u32,
    pub valid: u32,
    pub optimal: u32,
    pub valid_pct: f64,
    pub optimal_pct: f64,
}

/// The paper's "Sum" row of one agent count: the mean over its sizes.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct EvalSumRow {
    pub agents: usize,
    pub valid_pct: f64,
    pub optimal_pct: f64,
}

/// One suite's scores.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct EvalSuite {
    /// `val` or `test`.
    pub suite: String,
    /// The suite's content hash (the same suite as a ledger with the same seed, per
    /// cell and max size).
    pub hash: String,
    pub per_cell: usize,
    pub cells: Vec<EvalCellRow>,
    pub sums: Vec<EvalSumRow>,
    /// First failures by kind (`parse_error`, `hole`, ...), over the whole suite.
    pub failures: BTreeMap<String, u32>,
    /// Per agent count, the items that need coordination and the rest, each beside the
    /// independent-shortest-paths baseline on the same items.
    pub coordination: Vec<crate::env::coordination::CoordinationRow>,
}

/// What `ledger eval --json` prints.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct EvalReport {
    /// The model as given.
    pub model: String,
    /// The policy's kind (`lm` or `grid`) and, for a language model, its parameter count
    /// and prompt format.
    pub policy: String,
    pub parameters: Option<i64>,
    pub prompt: Option<String>,
    pub metric: String,
    pub suites: Vec<EvalSuite>,
}

/// What `lm generate --json` prints.
#[derive(Serialize, JsonSchema)]
pub struct GenerateOutput {
    pub prompt_tokens: Vec<u32>,
    pub tokens: Vec<u32>,
    pub text: String,
    pub logprobs: Vec<f32>,
    /// Ended on a stop token (else on --max-new-tokens).
    pub stopped: bool,
}
