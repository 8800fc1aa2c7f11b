//! The engineer's context: the paper's five modules (Failure Breakdown, Guideline,
//! History, Summary, Training Details), each switchable for ablations, and their
//! rendering as the text an LLM engineer reads.
//!
//! The struct itself is what is recorded (codec-encoded, a blob per decision), so an
//! audit reads the evidence as data and the text is always re-renderable. The text is
//! deliberately terse: one table row per map size, rules stated once. Every engineer
//! reads the same text, and an in-process model pays for each token of it.
use crate::env::config::{max_hole_ratio, HOLE_RATIO_MAX};
use crate::env::table::ResultTable;
use crate::env::GeneratorConfig;
use crate::plan::ContextModules;
use crate::record::event::FailureBreakdown;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

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

/// What a prompt budget cut from a context (see `prompt::build`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Trimmed {
    /// Example failing plans dropped.
    pub examples: usize,
    /// Stages whose history entries were dropped.
    pub history: Vec<u32>,
    /// The training-details module was dropped.
    pub training_details: bool,
}

/// Two decimals: how ratios are written in prompts and teacher answers.
pub fn ratio(x: f64) -> String {
    format!("{x:.2}")
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
        self.render_trimmed(&Trimmed::default())
    }

    /// [`Self::render`] of a context a prompt budget trimmed, saying in each module what
    /// `cut` took out of it (engineer revision 2): a trimmed module never reads as
    /// empty.
    pub fn render_trimmed(&self, cut: &Trimmed) -> String {
        self.render_at(cut, 2)
    }

    /// Revision 5's last module, after the answer format: the failure breakdown's lines
    /// weakest *last*, so the line a reply copies first is the one just above where
    /// the reply begins. (A 2.6M-parameter model trained on revisions 3-4, weakest
    /// first in the middle of a 1,000-token prompt, never learned to fetch that line:
    /// it wrote its first evidence line from a prior.) Empty when the module is off.
    pub fn render_breakdown_last(&self) -> String {
        if !self.modules.failure_breakdown {
            return String::new();
        }
        let mut s = format!(
            "## Failure breakdown (validation, {}), weakest last\n",
            self.failures.suite
        );
        for size in weakest_first(&self.failures).into_iter().rev() {
            let _ = writeln!(s, "{}", breakdown_line(size, &self.current));
        }
        s
    }

    /// [`Self::render_trimmed`] at an engineer text revision. Revision 3 orders the
    /// evidence weakest first, so what to act on is where a reader starts: the summary
    /// by valid rate (ascending), the failure breakdown by failed count (descending),
    /// each line's failure kinds by count (descending), and each breakdown line ends
    /// with the size's current settings (`data_ratio 0.20, hole_ratio 0.10, wait_ratio
    /// 0.30`, or `not trained on`) in the names the answer uses. Ties: the larger size
    /// first (as the teacher ranks), then the simulator's kind order.
    /// Revision 5 renders only the breakdown's example plans here; its lines go last
    /// ([`Self::render_breakdown_last`]).
    pub fn render_at(&self, cut: &Trimmed, revision: u32) -> String {
        let m = &self.modules;
        let mut s = String::new();
        let _ = writeln!(s, "# Designing stage {} of the curriculum\n", self.stage);
        let _ = writeln!(
            s,
            "## Current configuration ({} agents)\n{}",
            self.current.agents,
            config_table(&self.current)
        );
        if m.guideline {
            s.push_str(&self.render_guideline());
        }
        if m.summary {
            s.push_str(&render_summary(&self.validation, revision));
        }
        if m.failure_breakdown {
            if revision >= 5 {
                // Revision 5: the breakdown's lines close the prompt
                // (`render_breakdown_last`); here only its example plans.
                let examples = self.failures.sizes.iter().any(|x| !x.examples.is_empty());
                if examples || cut.examples > 0 {
                    let _ = writeln!(s, "## Failing plans (validation, {})", self.failures.suite);
                    push_examples(&mut s, weakest_first(&self.failures));
                }
            } else if revision >= 3 {
                s.push_str(&render_failures_weakest_first(
                    &self.failures,
                    &self.current,
                ));
            } else {
                s.push_str(&render_failures(&self.failures));
            }
            if cut.examples > 0 {
                // Before the blank line that ends the module (revision 5: the module of
                // example plans).
                s.pop();
                let _ = writeln!(
                    s,
                    "({} example failing plan(s) omitted to fit the prompt)\n",
                    cut.examples
                );
            }
        }
        if m.history {
            let _ = writeln!(s, "## History");
            if !cut.history.is_empty() {
                let stages: Vec<String> = cut.history.iter().map(|x| x.to_string()).collect();
                let _ = writeln!(
                    s,
                    "{} earlier designed stage(s) omitted to fit the prompt (stage {})",
                    cut.history.len(),
                    stages.join(", ")
                );
            } else if self.history.is_empty() {
                let _ = writeln!(s, "none: this is the first designed stage");
            }
            for h in &self.history {
                let (v, o) = h.validation.sum_row(2);
                let changes = config_changes(&h.previous, &h.config);
                let _ = writeln!(
                    s,
                    "stage {} ({}): {}; then validation valid {v:.1}%, optimal {o:.1}%",
                    h.stage,
                    h.engineer,
                    if changes.is_empty() {
                        "no change".to_string()
                    } else {
                        changes.join(", ")
                    }
                );
            }
            s.push('\n');
        }
        if cut.training_details {
            let _ = writeln!(
                s,
                "## Training details (last stage)\nomitted to fit the prompt\n"
            );
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

    /// Rules and ranges only: what may be set, within which limits, and what is fixed.
    fn render_guideline(&self) -> String {
        let k = self.current.agents;
        let mut s = String::from("## Guideline\n");
        let _ = writeln!(
            s,
            "Per map size N in 3..{}: data_ratio in [0, 1] (share of training instances, normalised over sizes; 0 drops the size), \
             hole_ratio in [0, {HOLE_RATIO_MAX}] (hole density), wait_ratio in [0, 1] (share of instances whose optimum needs coordination).",
            self.max_size
        );
        let tighter: Vec<String> = (3..=self.max_size)
            .filter(|&n| max_hole_ratio(n, k) < HOLE_RATIO_MAX)
            .map(|n| format!("{n}: {:.3}", max_hole_ratio(n, k)))
            .collect();
        if !tighter.is_empty() {
            let _ = writeln!(
                s,
                "Tighter hole limits (room for {k} agents): {}.",
                tighter.join(", ")
            );
        }
        let _ = writeln!(
            s,
            "A size not named keeps its values; naming a new size adds it. Out-of-range values are clipped and recorded. \
             Fixed: the agent count ({k}), the reward, the validation and test sets; any other key is refused and recorded.\n"
        );
        s
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
            out.push(format!("failures {}x{}", size.size, failure_line(size)));
        }
        out
    }
}

/// A configuration as a table: `size data hole wait`, one row per size.
pub fn config_table(c: &GeneratorConfig) -> String {
    let mut s = String::from("size data hole wait\n");
    for (n, sc) in &c.sizes {
        let _ = writeln!(
            s,
            "{n} {} {} {}",
            ratio(sc.data_ratio),
            ratio(sc.hole_ratio),
            ratio(sc.wait_ratio)
        );
    }
    s
}

/// What changed from `before` to `after`, per size and field (`4 wait 0.20->0.35`), in
/// the prompt's two decimals ([`ratio`]; prompts are hashed into recorded events).
pub fn config_changes(before: &GeneratorConfig, after: &GeneratorConfig) -> Vec<String> {
    changes_with(before, after, ratio)
}

/// [`config_changes`] with `f` formatting each value (views print every digit a value
/// has: `crate::views::config_changes`).
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

fn render_summary(t: &ResultTable, revision: u32) -> String {
    let mut s = String::from(
        "## Summary: validation of the current policy (2 agents)\nsize valid% optimal%\n",
    );
    let mut rows: Vec<(usize, &crate::env::table::CellCounts)> = t
        .cells
        .iter()
        .filter(|(&(k, _), _)| k == 2)
        .map(|(&(_, n), c)| (n, c))
        .collect();
    if revision >= 3 {
        // Weakest first; ties: the larger size first. Counts, not rates, so equal
        // totals compare exactly.
        rows.sort_by(|a, b| {
            (a.1.valid as u64 * b.1.total.max(1) as u64)
                .cmp(&(b.1.valid as u64 * a.1.total.max(1) as u64))
                .then(b.0.cmp(&a.0))
        });
    }
    for (n, c) in rows {
        let _ = writeln!(s, "{n} {:.0} {:.0}", c.valid_rate(), c.optimal_rate());
    }
    let (v, o) = t.sum_row(2);
    let _ = writeln!(s, "mean {v:.1} {o:.1}\n");
    s
}

/// `5: 7/20 failed (vertex_conflict 3, hole 4)`.
fn failure_line(size: &crate::record::event::SizeFailures) -> String {
    failure_line_counts(size, &size.counts)
}

/// [`failure_line`] with the kinds in the order of `counts` (revision 3: by count).
fn failure_line_counts(
    size: &crate::record::event::SizeFailures,
    counts: &[(crate::env::FailureKind, u32)],
) -> String {
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

/// The module's closing part: the example failing plans of `sizes` in that order,
/// then the blank line that ends the module.
fn push_examples<'a>(
    s: &mut String,
    sizes: impl IntoIterator<Item = &'a crate::record::event::SizeFailures>,
) {
    let examples: Vec<&String> = sizes.into_iter().flat_map(|x| x.examples.iter()).collect();
    if !examples.is_empty() {
        let _ = writeln!(s, "Example failing plans:");
        for e in examples {
            let _ = writeln!(s, "{e}");
        }
    }
    s.push('\n');
}

/// The sizes of a breakdown weakest first (most failures; ties: the larger size
/// first), the order revision 3 renders and the teacher ranks.
pub fn weakest_first(f: &FailureBreakdown) -> Vec<&crate::record::event::SizeFailures> {
    let mut v: Vec<&crate::record::event::SizeFailures> = f.sizes.iter().collect();
    let failed =
        |s: &crate::record::event::SizeFailures| -> u32 { s.counts.iter().map(|c| c.1).sum() };
    v.sort_by(|a, b| failed(b).cmp(&failed(a)).then(b.size.cmp(&a.size)));
    v
}

/// A size's failure kinds by count, most first (ties: the simulator's order, which
/// the recorded counts keep), zero counts left out.
pub fn kinds_by_count(
    size: &crate::record::event::SizeFailures,
) -> Vec<(crate::env::FailureKind, u32)> {
    let mut v: Vec<_> = size.counts.iter().copied().filter(|c| c.1 > 0).collect();
    v.sort_by(|a, b| b.1.cmp(&a.1));
    v
}

/// Revision 3's breakdown: weakest first, kinds by count, settings at the end of the
/// line (`5: 7/20 failed (hole 4, vertex_conflict 3); data_ratio 0.20, hole_ratio 0.10,
/// wait_ratio 0.30`).
fn render_failures_weakest_first(f: &FailureBreakdown, current: &GeneratorConfig) -> String {
    let mut s = format!(
        "## Failure breakdown (validation, {}), weakest first\n",
        f.suite
    );
    for size in weakest_first(f) {
        let _ = writeln!(s, "{}", breakdown_line(size, current));
    }
    push_examples(&mut s, weakest_first(f));
    s
}

/// A size's line of the breakdown from revision 3: its counts, kinds by count, and the
/// size's settings (or that it is not trained on).
fn breakdown_line(size: &crate::record::event::SizeFailures, current: &GeneratorConfig) -> String {
    let settings = match current.sizes.get(&(size.size as usize)) {
        Some(c) => format!(
            "data_ratio {}, hole_ratio {}, wait_ratio {}",
            ratio(c.data_ratio),
            ratio(c.hole_ratio),
            ratio(c.wait_ratio)
        ),
        None => "not trained on".to_string(),
    };
    let line = failure_line_counts(size, &kinds_by_count(size));
    format!("{line}; {settings}")
}

fn render_failures(f: &FailureBreakdown) -> String {
    let mut s = format!("## Failure breakdown (validation, {})\n", f.suite);
    for size in &f.sizes {
        let _ = writeln!(s, "{}", failure_line(size));
    }
    push_examples(&mut s, &f.sizes);
    s
}
