//! What `replay --verify` (and `show --verify`) report: the stages that matched their
//! recomputation and the first difference where one did not. The recomputation itself
//! is the application's (`mapf_ledger::replay`); these are its results, as values.
use crate::ledger::Hash;

/// The first difference between a recorded stage and its recomputation.
#[derive(Clone, Debug, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct Mismatch {
    pub stage: u32,
    /// The gradient step of the nearest step-carrying event at or before the mismatch
    /// (None: before the stage's first gradient step).
    pub step: Option<u64>,
    /// Position of the event within the stage (0 = its `StageStarted`).
    pub index: usize,
    pub kind: String,
    /// None when the recomputation produced more events than were recorded.
    pub recorded: Option<Hash>,
    /// None when the recomputation produced fewer events than were recorded.
    pub recomputed: Option<Hash>,
    /// What else is known (e.g. that an LLM prompt changed).
    pub note: Option<String>,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hash = |h: &Option<Hash>| h.map_or("(none)".to_string(), |h| h.to_hex());
        write!(
            f,
            "stage {}, gradient step {}, event {} ({}): recorded {}, recomputed {}",
            self.stage,
            self.step
                .map_or("(before the first step)".to_string(), |s| s.to_string()),
            self.index,
            self.kind,
            hash(&self.recorded),
            hash(&self.recomputed)
        )?;
        if let Some(n) = &self.note {
            write!(f, "; {n}")?;
        }
        Ok(())
    }
}

/// The outcome of replaying one stage.
#[derive(Clone, Debug, serde::Serialize, schemars::JsonSchema)]
pub struct StageReplay {
    pub stage: u32,
    /// Recorded events compared.
    pub events: u64,
    /// The recorded stage's last event (its `StageCompleted`).
    pub head: Hash,
    pub engineer: String,
    /// Wall time of the recomputation, in seconds.
    pub seconds: f64,
    pub mismatch: Option<Mismatch>,
}

impl StageReplay {
    /// The line `ledger replay` prints for a stage that matched.
    pub fn matched_line(&self) -> String {
        format!(
            "stage {}: {} events recomputed, every hash matches (engineer {}, {:.1} s)",
            self.stage, self.events, self.engineer, self.seconds
        )
    }
}
