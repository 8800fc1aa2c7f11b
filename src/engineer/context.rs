//! The engineer's context: the paper's five modules (Failure Breakdown, Guideline,
//! History, Summary, Training Details), each switchable for ablations, and their
//! rendering as the text an LLM engineer reads. The rendered text is stored as a blob
//! with every decision, so an audit shows exactly what the engineer saw.
use crate::env::config::{max_hole_ratio, HOLE_RATIO_MAX};
use crate::env::table::ResultTable;
use crate::env::GeneratorConfig;
use crate::ledger::event::FailureBreakdown;
use crate::ledger::plan::ContextModules;
use std::fmt::Write as _;

/// One earlier stage: its configuration and validation outcome.
#[derive(Clone, Debug, PartialEq)]
pub struct HistoryEntry {
    pub stage: u32,
    pub engineer: String,
    pub config: GeneratorConfig,
    pub validation: ResultTable,
}

/// GRPO statistics of the last stage (off by default: the paper found they hurt).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TrainingDetails {
    pub steps: u64,
    pub train_valid_rate: f64,
    pub train_optimal_rate: f64,
    pub last_loss: f64,
    pub last_grad_norm: f64,
}

/// Everything an engineer may read when designing stage `stage`.
#[derive(Clone, Debug, PartialEq)]
pub struct EngineerContext {
    /// The stage being designed (1-based).
    pub stage: u32,
    /// The configuration in force (the previous stage's).
    pub current: GeneratorConfig,
    /// The previous stage's validation results (2 agents, per size).
    pub validation: ResultTable,
    /// The previous stage's failure breakdown on the validation set.
    pub failures: FailureBreakdown,
    /// Earlier stages, oldest first.
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

    /// The context as text, with the switched-off modules left out entirely.
    pub fn render(&self) -> String {
        let m = &self.modules;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "# Designing the training environment of stage {}\n",
            self.stage
        );
        let _ = writeln!(
            s,
            "## Current configuration\n{}\n",
            config_json(&self.current)
        );
        if m.guideline {
            s.push_str(&self.render_guideline());
        }
        if m.summary {
            let _ = writeln!(
                s,
                "## Summary: validation results of the current policy (2 agents, greedy)"
            );
            s.push_str(&self.validation.render("valid % / optimal % per map size"));
            s.push('\n');
        }
        if m.failure_breakdown {
            s.push_str(&render_failures(&self.failures));
        }
        if m.history {
            let _ = writeln!(s, "## History: earlier stages");
            if self.history.is_empty() {
                let _ = writeln!(s, "(none: this is the first designed stage)");
            }
            for h in &self.history {
                let (v, o) = h.validation.sum_row(2);
                let _ = writeln!(
                    s,
                    "- stage {} (engineer {}): validation valid {v:.1}%, optimal {o:.1}%; config {}",
                    h.stage,
                    h.engineer,
                    config_json(&h.config)
                );
            }
            s.push('\n');
        }
        if m.training_details {
            let t = &self.training;
            let _ = writeln!(
                s,
                "## Training details (last stage)\nsteps {}, training valid rate {:.3}, optimal rate {:.3}, last loss {:.4}, last gradient norm {:.4}\n",
                t.steps, t.train_valid_rate, t.train_optimal_rate, t.last_loss, t.last_grad_norm
            );
        }
        s
    }

    fn render_guideline(&self) -> String {
        let mut s = String::new();
        let k = self.current.agents;
        let _ = writeln!(s, "## Guideline");
        let _ = writeln!(
            s,
            "You design the next stage's training distribution for a policy that plans paths for {k} agents on N x N frozen lakes. \
             The objective is the validation and test valid/optimal rates; the reward and the validation set never change."
        );
        let _ = writeln!(s, "Editable, per map size N (3..={}): data_ratio in [0, 1] (share of training instances; normalised over sizes), hole_ratio in [0, {HOLE_RATIO_MAX}] (fewer where agents need room: at most (N^2 - 2k)/N^2), wait_ratio in [0, 1] (share of instances whose optimum needs coordination).", self.max_size);
        let ranges: Vec<String> = (3..=self.max_size)
            .map(|n| format!("{n}: hole_ratio <= {:.3}", max_hole_ratio(n, k)))
            .collect();
        let _ = writeln!(
            s,
            "Hole limits per size: {}. The agent count ({k}), the reward and the validation and test sets are fixed; any other key is refused and recorded.",
            ranges.join(", ")
        );
        let _ = writeln!(
            s,
            "A size is added by naming it and dropped by setting its data_ratio to 0; sizes not named keep their values. \
             Values out of range are clipped and recorded. Answer with a JSON object {{\"sizes\": {{\"N\": {{\"data_ratio\": .., \"hole_ratio\": .., \"wait_ratio\": ..}}}}}} listing only the sizes you change, then one paragraph of rationale.\n"
        );
        s
    }
}

/// A configuration as compact JSON (the form engineers read and write).
pub fn config_json(c: &GeneratorConfig) -> String {
    serde_json::to_string(c).expect("config serialises")
}

fn render_failures(f: &FailureBreakdown) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "## Failure breakdown on the validation set ({})",
        f.suite
    );
    for size in &f.sizes {
        let failed: u32 = size.counts.iter().map(|c| c.1).sum();
        let counts: Vec<String> = size
            .counts
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        let _ = writeln!(
            s,
            "- {0}x{0}: {1} of {2} failed{3}",
            size.size,
            failed,
            size.total,
            if counts.is_empty() {
                String::new()
            } else {
                format!(" ({})", counts.join(", "))
            }
        );
    }
    let examples: Vec<&String> = f.sizes.iter().flat_map(|x| x.examples.iter()).collect();
    if !examples.is_empty() {
        let _ = writeln!(s, "\nExample failing plans:");
        for e in examples {
            let _ = writeln!(s, "{e}\n");
        }
    }
    s
}
