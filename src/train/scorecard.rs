//! `ledger eval`: a policy scored on the paper's suites without a run. Each suite is
//! built from its spec, greedily decoded and scored under a metric: valid and optimal %
//! per size, the Sum row per agent count, its failure kinds ([`EvalSuite`]), and on
//! request every item with its decoded plan and first failure, one JSON line each.
use super::eval::{score_suite_with, Scored};
use super::policy::Policy;
use crate::env::suite::{self, SuiteName, SuiteSpec};
use crate::env::{Budget, CostMetric, Suite};
use crate::views::model::{metric_name, EvalItem, EvalReport, EvalSuite, ItemScore};

/// The suites to score: `names` (in order) built with the rest of a suite spec.
pub struct Suites {
    pub names: Vec<SuiteName>,
    pub per_cell: usize,
    pub max_size: usize,
    pub seed: u64,
    pub wait_ratios: Vec<f64>,
}

/// A suite that cannot be built.
#[derive(Debug, thiserror::Error)]
#[error("building the {} suite: {error}", name.as_str())]
pub struct SuiteError {
    pub name: SuiteName,
    pub error: crate::env::generator::GenerateError,
}

/// How far the scoring is, for a progress display.
pub enum Progress<'a> {
    /// A suite of this many items starts.
    Suite(SuiteName, usize),
    /// This many more of its items were scored.
    Scored(usize),
    /// It is scored.
    Done(&'a EvalSuite),
}

/// Score `policy` (given as `model`) on `suites` under `metric`, decoding `batch`
/// items at a time; with `items`, also every item as a JSON line (schema
/// `schemas/eval-item.json`), in suite order.
pub fn score(
    policy: &(dyn Policy + 'static),
    model: &str,
    suites: &Suites,
    (metric, batch): (CostMetric, usize),
    items: Option<&mut String>,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<EvalReport, SuiteError> {
    let lm = policy.as_lm();
    let mut report = EvalReport {
        model: model.to_string(),
        policy: policy.kind().to_string(),
        parameters: lm.map(|l| l.model.cfg.parameter_count()),
        prompt: lm.map(|l| l.arch.prompt.name().to_string()),
        metric: metric_name(metric).to_string(),
        suites: Vec::new(),
    };
    let mut items = items;
    for &name in &suites.names {
        let spec = SuiteSpec {
            name,
            per_cell: suites.per_cell,
            max_size: suites.max_size,
            seed: suites.seed,
            wait_ratios: suites.wait_ratios.clone(),
        };
        let s =
            suite::build(&spec, Budget::default()).map_err(|error| SuiteError { name, error })?;
        progress(Progress::Suite(name, s.len()));
        let scored = score_suite_with(policy, &s, metric, batch, &mut |n| {
            progress(Progress::Scored(n))
        });
        let scores: Vec<ItemScore> = scored
            .iter()
            .map(|sc| ItemScore {
                agents: sc.agents,
                size: sc.size,
                valid: sc.outcome.valid,
                optimal: sc.optimal,
                failure: sc.outcome.failure.as_ref().map(|f| f.kind.name()),
            })
            .collect();
        if let Some(out) = items.as_deref_mut() {
            item_lines(&s, &scored, out);
        }
        let view = EvalSuite::score(&s, suites.per_cell, metric, &scores);
        progress(Progress::Done(&view));
        report.suites.push(view);
    }
    Ok(report)
}

/// The item lines of one scored suite, in suite order.
fn item_lines(suite: &Suite, scored: &[Scored], out: &mut String) {
    let solved = suite.cells.iter().flat_map(|c| c.items.iter().enumerate());
    for ((item, it), sc) in solved.zip(scored) {
        let line = EvalItem {
            suite: suite.name.as_str().to_string(),
            agents: sc.agents,
            size: sc.size,
            item,
            instance_hash: it.instance.content_hash().to_hex().to_string(),
            instance: it.instance.clone(),
            reference: it.reference,
            needs_coordination: it.needs_coordination,
            valid: sc.outcome.valid,
            optimal: sc.optimal,
            failure: sc.outcome.failure.clone(),
            plan: sc.plan_text.clone(),
        };
        out.push_str(&serde_json::to_string(&line).expect("json"));
        out.push('\n');
    }
}
