//! The context modules as text: what every engineer that reads text reads, at a
//! [`TextRevision`]. The text is deliberately terse: one table row per map size, rules
//! stated once. Every engineer reads the same text, and an in-process model pays for
//! each token of it. (The context itself, a struct, is what is recorded; this text is
//! always re-renderable from it.)
use super::TextRevision;
use crate::context::{failure_line, EngineerContext};
use crate::env::config::{max_hole_ratio, HOLE_RATIO_MAX};
use crate::env::table::ResultTable;
use crate::env::GeneratorConfig;
use crate::record::event::{FailureBreakdown, SizeFailures};
use std::fmt::Write as _;

/// What a prompt budget cut from a context (see [`super::build`]); the renderers say what was cut.
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

/// The context as text at `text`, with the switched-off modules left out entirely and
/// (from [`TextRevision::says_cuts`]) each module a prompt budget trimmed saying what
/// `cut` took out of it, so a trimmed module never reads as empty. With
/// [`TextRevision::weakest_first`] the evidence is ordered weakest first, so what to
/// act on is where a reader starts: the summary by valid rate (ascending), the failure
/// breakdown by failed count (descending), each line's failure kinds by count
/// (descending), and each breakdown line ends with the size's current settings
/// (`data_ratio 0.20, hole_ratio 0.10, wait_ratio 0.30`, or `not trained on`) in the
/// names the answer uses. Ties: the larger size first (as the teacher ranks), then the
/// simulator's kind order. With [`TextRevision::breakdown_last`] only the breakdown's
/// example plans are rendered here; its lines go last ([`breakdown_last`]).
pub fn render(ctx: &EngineerContext, cut: &Trimmed, text: TextRevision) -> String {
    let none = Trimmed::default();
    let cut = if text.says_cuts { cut } else { &none };
    let m = &ctx.modules;
    let mut s = String::new();
    let _ = writeln!(s, "# Designing stage {} of the curriculum\n", ctx.stage);
    let _ = writeln!(
        s,
        "## Current configuration ({} agents)\n{}",
        ctx.current.agents,
        config_table(&ctx.current)
    );
    if m.guideline {
        s.push_str(&guideline(ctx));
    }
    if m.summary {
        s.push_str(&summary(&ctx.validation, text));
    }
    if m.failure_breakdown {
        if text.breakdown_last {
            // The breakdown's lines close the prompt (`breakdown_last`); here only its
            // example plans.
            let examples = ctx.failures.sizes.iter().any(|x| !x.examples.is_empty());
            if examples || cut.examples > 0 {
                let _ = writeln!(s, "## Failing plans (validation, {})", ctx.failures.suite);
                push_examples(&mut s, weakest_first(&ctx.failures));
            }
        } else if text.weakest_first {
            s.push_str(&failures_weakest_first(&ctx.failures, &ctx.current));
        } else {
            s.push_str(&failures(&ctx.failures));
        }
        if cut.examples > 0 {
            // Before the blank line that ends the module (with `breakdown_last`: the
            // module of example plans).
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
        } else if ctx.history.is_empty() {
            let _ = writeln!(s, "none: this is the first designed stage");
        }
        for h in &ctx.history {
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
        let t = &ctx.training;
        let _ = writeln!(
            s,
            "## Training details (last stage)\nsteps {}, training valid rate {:.3}, optimal rate {:.3}, last loss {:.4}, last gradient norm {:.4}\n",
            t.steps, t.train_valid_rate, t.train_optimal_rate, t.last_loss, t.last_grad_norm
        );
    }
    s
}

/// The last module of a [`TextRevision::breakdown_last`] prompt, after the answer
/// format: the failure breakdown's lines weakest *last*, so the line a reply copies
/// first is the one just above where the reply begins. (A 2.6M-parameter model
/// trained on weakest-first prompts, the breakdown in the middle of a 1,000-token
/// prompt, never learned to fetch that line: it wrote its first evidence line from a
/// prior.) Empty when the module is off.
pub fn breakdown_last(ctx: &EngineerContext) -> String {
    if !ctx.modules.failure_breakdown {
        return String::new();
    }
    let mut s = format!(
        "## Failure breakdown (validation, {}), weakest last\n",
        ctx.failures.suite
    );
    for size in weakest_first(&ctx.failures).into_iter().rev() {
        let _ = writeln!(s, "{}", breakdown_line(size, &ctx.current));
    }
    s
}

/// Rules and ranges only: what may be set, within which limits, and what is fixed.
fn guideline(ctx: &EngineerContext) -> String {
    let k = ctx.current.agents;
    let mut s = String::from("## Guideline\n");
    let _ = writeln!(
        s,
        "Per map size N in 3..{}: data_ratio in [0, 1] (share of training instances, normalised over sizes; 0 drops the size), \
         hole_ratio in [0, {HOLE_RATIO_MAX}] (hole density), wait_ratio in [0, 1] (share of instances whose optimum needs coordination).",
        ctx.max_size
    );
    let tighter: Vec<String> = (3..=ctx.max_size)
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
    crate::context::changes_with(before, after, ratio)
}

fn summary(t: &ResultTable, text: TextRevision) -> String {
    let mut s = String::from(
        "## Summary: validation of the current policy (2 agents)\nsize valid% optimal%\n",
    );
    let mut rows: Vec<(usize, &crate::env::table::CellCounts)> = t
        .cells
        .iter()
        .filter(|(&(k, _), _)| k == 2)
        .map(|(&(_, n), c)| (n, c))
        .collect();
    if text.weakest_first {
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

/// The module's closing part: the example failing plans of `sizes` in that order,
/// then the blank line that ends the module.
fn push_examples<'a>(s: &mut String, sizes: impl IntoIterator<Item = &'a SizeFailures>) {
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
/// first), the order [`TextRevision::weakest_first`] renders and the teacher ranks.
pub fn weakest_first(f: &FailureBreakdown) -> Vec<&SizeFailures> {
    let mut v: Vec<&SizeFailures> = f.sizes.iter().collect();
    let failed = |s: &SizeFailures| -> u32 { s.counts.iter().map(|c| c.1).sum() };
    v.sort_by(|a, b| failed(b).cmp(&failed(a)).then(b.size.cmp(&a.size)));
    v
}

/// A size's failure kinds by count, most first (ties: the simulator's order, which
/// the recorded counts keep), zero counts left out.
pub fn kinds_by_count(size: &SizeFailures) -> Vec<(crate::env::FailureKind, u32)> {
    let mut v: Vec<_> = size.counts.iter().copied().filter(|c| c.1 > 0).collect();
    v.sort_by_key(|c| std::cmp::Reverse(c.1));
    v
}

/// The weakest-first breakdown: weakest first, kinds by count, settings at the end of
/// the line (`5: 7/20 failed (hole 4, vertex_conflict 3); data_ratio 0.20, hole_ratio
/// 0.10, wait_ratio 0.30`).
fn failures_weakest_first(f: &FailureBreakdown, current: &GeneratorConfig) -> String {
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

/// A size's line of the weakest-first breakdown: its counts, kinds by count, and the
/// size's settings (or that it is not trained on).
fn breakdown_line(size: &SizeFailures, current: &GeneratorConfig) -> String {
    let settings = match current.sizes.get(&(size.size as usize)) {
        Some(c) => format!(
            "data_ratio {}, hole_ratio {}, wait_ratio {}",
            ratio(c.data_ratio),
            ratio(c.hole_ratio),
            ratio(c.wait_ratio)
        ),
        None => "not trained on".to_string(),
    };
    let line = failure_line(size, &kinds_by_count(size));
    format!("{line}; {settings}")
}

/// The breakdown as recorded: sizes and kinds in the recorded order.
fn failures(f: &FailureBreakdown) -> String {
    let mut s = format!("## Failure breakdown (validation, {})\n", f.suite);
    for size in &f.sizes {
        let _ = writeln!(s, "{}", failure_line(size, &size.counts));
    }
    push_examples(&mut s, &f.sizes);
    s
}
