//! Evaluation as the paper runs it: greedy decoding on a suite, valid and optimal rate
//! per (agents, size) cell, and the failure breakdown per map size on the validation
//! set (counts by failure type plus a few failing plans rendered as text): the failure
//! evidence environment engineers read.
use super::policy::{Policy, Rollout};
use super::timing::{generation_work, Work};
use crate::env::suite::Suite;
use crate::env::table::{CellCounts, ResultTable};
use crate::env::{simulate, text, CostMetric, FailureKind, Instance, Outcome};
use crate::record::trainer::{
    EvalCell, Evaluation, EvaluationOutcomes, FailureBreakdown, SizeFailures, OUTCOME_INVALID,
    OUTCOME_OPTIMAL, OUTCOME_VALID,
};
use crate::seed::Seed;
use std::collections::BTreeMap;

pub use crate::record::trainer::table_of;

/// Failing examples kept per size in a breakdown.
pub const EXAMPLES_PER_SIZE: usize = 2;

/// One evaluated suite item.
#[derive(Clone, Debug)]
pub struct Scored {
    pub agents: usize,
    pub size: usize,
    pub outcome: Outcome,
    pub optimal: bool,
    pub plan_text: String,
}

/// Greedy-decode every suite item, `batch` at a time (the plan's `suites.eval_batch`),
/// and score it.
pub fn score_suite(
    policy: &dyn Policy,
    suite: &Suite,
    metric: CostMetric,
    batch: usize,
) -> Vec<Scored> {
    score_suite_with(policy, suite, metric, batch, &mut |_| {})
}

/// [`score_suite`], calling `done(n)` after each batch of `n` items (a progress bar).
pub fn score_suite_with(
    policy: &dyn Policy,
    suite: &Suite,
    metric: CostMetric,
    batch: usize,
    done: &mut dyn FnMut(usize),
) -> Vec<Scored> {
    score(policy, suite, metric, batch, done, None)
}

/// [`score_suite`], adding the decoding's tokens and decode work to `work`
/// ([`super::timing::generation_work`] of every batch).
pub fn score_suite_counted(
    policy: &dyn Policy,
    suite: &Suite,
    metric: CostMetric,
    batch: usize,
    work: &mut Work,
) -> Vec<Scored> {
    score(policy, suite, metric, batch, &mut |_| {}, Some(work))
}

fn score(
    policy: &dyn Policy,
    suite: &Suite,
    metric: CostMetric,
    batch: usize,
    done: &mut dyn FnMut(usize),
    mut work: Option<&mut Work>,
) -> Vec<Scored> {
    let items: Vec<(&crate::env::Solved, usize, usize)> = suite
        .cells
        .iter()
        .flat_map(|c| c.items.iter().map(move |it| (it, c.agents, c.size)))
        .collect();
    let mut out = Vec::with_capacity(items.len());
    for chunk in items.chunks(batch.max(1)) {
        let instances: Vec<Instance> = chunk.iter().map(|(it, _, _)| it.instance.clone()).collect();
        let rollouts = policy.sample(&instances, 1, true, Seed::root(0));
        if let Some(w) = work.as_deref_mut() {
            *w += generation_work(policy, &instances, &rollouts);
        }
        for ((it, agents, size), r) in chunk.iter().zip(rollouts) {
            let outcome = outcome_of(&it.instance, &r);
            let optimal = outcome.optimal(&it.reference, metric);
            let plan_text = match &r.plan {
                Ok(p) => text::render_plan(p),
                Err(_) => String::from_utf8_lossy(&r.plan_bytes).into_owned(),
            };
            out.push(Scored {
                agents: *agents,
                size: *size,
                outcome,
                optimal,
                plan_text,
            });
        }
        done(chunk.len());
    }
    out
}

/// Simulate a rollout's plan (a parse error is itself the failure).
pub fn outcome_of(inst: &Instance, r: &Rollout) -> Outcome {
    match &r.plan {
        Ok(p) => simulate(inst, p),
        Err(e) => Outcome::failed(e.to_failure()),
    }
}

pub fn table(scored: &[Scored]) -> ResultTable {
    let mut t = ResultTable::default();
    for s in scored {
        let c: &mut CellCounts = t.cells.entry((s.agents, s.size)).or_default();
        c.total += 1;
        c.valid += s.outcome.valid as u32;
        c.optimal += s.optimal as u32;
    }
    t
}

/// The evaluation event body for a suite.
pub fn evaluation_event(
    suite: &str,
    scored: &[Scored],
    checkpoint: Option<crate::record::Hash>,
) -> Evaluation {
    Evaluation {
        suite: suite.to_string(),
        checkpoint,
        cells: cells_of(&table(scored)),
    }
}

/// The per-instance outcomes of a scored suite (`scored` in suite order, as
/// [`score_suite`] returns it).
pub fn outcomes_event(
    suite_name: &str,
    suite: &Suite,
    scored: &[Scored],
    checkpoint: Option<crate::record::Hash>,
) -> EvaluationOutcomes {
    debug_assert_eq!(scored.len(), suite.len());
    EvaluationOutcomes {
        suite: suite_name.to_string(),
        suite_hash: crate::record::Hash::from_hex(&suite.hash).expect("a suite hash is hex"),
        checkpoint,
        cells: suite
            .cells
            .iter()
            .map(|c| (c.agents as u32, c.size as u32, c.items.len() as u32))
            .collect(),
        wait_ratios: suite.wait_ratios.iter().map(|w| w.to_bits()).collect(),
        outcomes: scored
            .iter()
            .map(|s| match (s.outcome.valid, s.optimal) {
                (false, _) => OUTCOME_INVALID,
                (true, false) => OUTCOME_VALID,
                (true, true) => OUTCOME_OPTIMAL,
            })
            .collect(),
    }
}

/// One evaluation per wait-ratio subset of a stratified suite, named
/// `SUITE@wait0.25`, ... in the suite's ratio order (none when it is not stratified).
pub fn subset_evaluations(
    suite_name: &str,
    suite: &Suite,
    scored: &[Scored],
    checkpoint: Option<crate::record::Hash>,
) -> Vec<Evaluation> {
    let subsets = suite.item_subsets();
    suite
        .wait_ratios
        .iter()
        .enumerate()
        .map(|(w, &ratio)| {
            let part: Vec<Scored> = scored
                .iter()
                .zip(&subsets)
                .filter(|(_, &sw)| sw == w)
                .map(|(s, _)| s.clone())
                .collect();
            evaluation_event(
                &format!("{suite_name}@{}", crate::env::suite::subset_label(ratio)),
                &part,
                checkpoint,
            )
        })
        .collect()
}

/// A result table as evaluation cells, by (agents, size).
pub fn cells_of(t: &ResultTable) -> Vec<EvalCell> {
    EvalCell::cells_of(t)
}

/// Failure counts per size with a few failing plans as text.
pub fn failure_breakdown(suite_name: &str, suite: &Suite, scored: &[Scored]) -> FailureBreakdown {
    // Per size: (items, failures per kind, a few failing plans).
    type Tally = (u32, BTreeMap<FailureKind, u32>, Vec<String>);
    let mut by_size: BTreeMap<usize, Tally> = BTreeMap::new();
    let items = suite.cells.iter().flat_map(|c| c.items.iter());
    for (it, s) in items.zip(scored) {
        let e = by_size.entry(s.size).or_default();
        e.0 += 1;
        if let Some(f) = &s.outcome.failure {
            *e.1.entry(f.kind).or_default() += 1;
            if e.2.len() < EXAMPLES_PER_SIZE {
                e.2.push(failure_example(&it.instance, &s.plan_text, f));
            }
        }
    }
    FailureBreakdown {
        suite: suite_name.to_string(),
        sizes: by_size
            .into_iter()
            .map(|(size, (total, counts, examples))| SizeFailures {
                size: size as u32,
                total,
                counts: counts.into_iter().collect(),
                examples,
            })
            .collect(),
    }
}

/// One failing plan as the engineer reads it: the map, the agents, the plan and its
/// first failure. Rows are the grid (`F` frozen, `H` hole); plan lines are joined by
/// ` | ` so the example stays a few lines long.
pub fn failure_example(inst: &Instance, plan_text: &str, f: &crate::env::Failure) -> String {
    let n = inst.size();
    let mut s = format!("{n}x{n}, {} agents: ", inst.agents());
    s.push_str(&inst.grid_rows().join("/"));
    for a in 0..inst.agents() {
        let (sr, sc) = inst.row_col(inst.starts()[a]);
        let (gr, gc) = inst.row_col(inst.goals()[a]);
        s.push_str(&format!("; agent {} ({sr},{sc})->({gr},{gc})", a + 1));
    }
    let plan: Vec<&str> = plan_text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    s.push_str(&format!(
        "\n  plan: {}\n  failure: {} at t={}: {}",
        if plan.is_empty() {
            "(empty)".to_string()
        } else {
            clip_chars(&plan.join(" | "), 160)
        },
        f.kind,
        f.t,
        f.detail
    ));
    s
}

/// At most `max` characters of `s`, with an ellipsis when cut (a model's garbled plan
/// must not flood the engineer's prompt).
fn clip_chars(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}
