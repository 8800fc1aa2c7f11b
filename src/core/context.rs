//! The engineer's context: the paper's five modules (Failure Breakdown, Guideline,
//! History, Summary, Training Details), each switchable for ablations, and the
//! evidence lines an audit shows.
//!
//! The struct itself is what is recorded (codec-encoded, a blob per decision), so an
//! audit reads the evidence as data. Its rendering as the text an engineer reads, at
//! the plan's engineer text revision, is the application's (`engineer::text`): this
//! crate knows no revision.
use crate::env::table::ResultTable;
use crate::env::GeneratorConfig;
use crate::plan::ContextModules;
use crate::record::event::{FailureBreakdown, SizeFailures};
use serde::{Deserialize, Serialize};

/// One earlier stage: the configuration it replaced, the one it trained on, and its
/// validation outcome.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HistoryEntry {
    pub stage: u32,
    pub engineer: String,
    /// The configuration in force before this stage's decision.
    pub previous: GeneratorConfig,
    pub config: GeneratorConfig,
    pub validation: ResultTable,
}

/// GRPO statistics of the last stage (off by default: the paper found they hurt).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TrainingDetails {
    pub steps: u64,
    pub train_valid_rate: f64,
    pub train_optimal_rate: f64,
    pub last_loss: f64,
    pub last_grad_norm: f64,
}

/// Everything an engineer may read when designing stage `stage`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EngineerContext {
    /// The stage being designed (1-based).
    pub stage: u32,
    /// The configuration in force (the previous stage's).
    pub current: GeneratorConfig,
    /// The previous stage's validation results (2 agents, per size).
    pub validation: ResultTable,
    /// The previous stage's failure breakdown on the validation set.
    pub failures: FailureBreakdown,
    /// Earlier designed stages, oldest first.
    pub history: Vec<HistoryEntry>,
    pub training: TrainingDetails,
    /// Which modules this engineer may use.
    pub modules: ContextModules,
    /// Largest map size the engineer may train on (the plan's `engineer.max_size`).
    pub max_size: usize,
}

impl EngineerContext {
    /// The context with every switched-off module's information removed from the
    /// struct itself (not only from the rendered text), so an ablation takes the
    /// evidence away from every engineer, built-in ones included.
    pub fn without_switched_off_modules(mut self) -> EngineerContext {
        let m = self.modules.clone();
        if !m.failure_breakdown {
            self.failures.sizes.clear();
        }
        if !m.summary {
            self.validation = ResultTable::default();
        }
        if !m.history {
            self.history.clear();
        }
        if !m.training_details {
            self.training = TrainingDetails::default();
        }
        self
    }

    /// The evidence lines an audit shows: the validation Sum and the failures per size.
    pub fn evidence(&self) -> Vec<String> {
        let mut out = Vec::new();
        if !self.validation.cells.is_empty() {
            let (v, o) = self.validation.sum_row(2);
            out.push(format!(
                "validation Sum (2 agents): valid {v:.2}%, optimal {o:.2}%"
            ));
        }
        for size in &self.failures.sizes {
            // Humans read `3x3`; the prompt keeps the shorter `3:` (token budget).
            out.push(format!(
                "failures {}x{}",
                size.size,
                failure_line(size, &size.counts)
            ));
        }
        out
    }
}

/// What changed from `before` to `after`, per size and field (`4 wait 0.20->0.35`),
/// with `f` formatting each value (views print every digit a value has:
/// `crate::views::config_changes`; prompts two decimals).
pub fn changes_with(
    before: &GeneratorConfig,
    after: &GeneratorConfig,
    f: fn(f64) -> String,
) -> Vec<String> {
    let mut out = Vec::new();
    let sizes: std::collections::BTreeSet<usize> = before
        .sizes
        .keys()
        .chain(after.sizes.keys())
        .copied()
        .collect();
    for n in sizes {
        match (before.sizes.get(&n), after.sizes.get(&n)) {
            (None, Some(_)) => out.push(format!("{n} added")),
            (Some(_), None) => out.push(format!("{n} dropped")),
            (Some(b), Some(a)) => {
                for (name, x, y) in [
                    ("data", b.data_ratio, a.data_ratio),
                    ("hole", b.hole_ratio, a.hole_ratio),
                    ("wait", b.wait_ratio, a.wait_ratio),
                ] {
                    if f(x) != f(y) {
                        out.push(format!("{n} {name} {}->{}", f(x), f(y)));
                    }
                }
            }
            (None, None) => {}
        }
    }
    out
}

/// A size's line of failures, its kinds in the order of `counts`: `5: 7/20 failed
/// (vertex_conflict 3, hole 4)`.
pub fn failure_line(size: &SizeFailures, counts: &[(crate::env::FailureKind, u32)]) -> String {
    let failed: u32 = size.counts.iter().map(|c| c.1).sum();
    let counts: Vec<String> = counts.iter().map(|(k, n)| format!("{k} {n}")).collect();
    format!(
        "{}: {failed}/{} failed{}",
        size.size,
        size.total,
        if counts.is_empty() {
            String::new()
        } else {
            format!(" ({})", counts.join(", "))
        }
    )
}
