//! Verdicts against the reference solver: a plan checked against an instance (valid,
//! and optimal under a metric when the solver finds the optimum), and the
//! independent-shortest-paths baseline scored on a suite.
use crate::coordination::baseline_outcome;
use crate::instance::{Instance, Plan};
use crate::simulate::{simulate, CostMetric, Outcome, Reference};
use crate::solver::{solve, Budget};
use crate::suite::Suite;
use crate::table::ResultTable;
use crate::text::ParseError;

/// A plan's verdict: how it ran, the optimum it is compared with, and whether it
/// reaches it (both None when the solver gave up within its default budget).
#[derive(Clone, Debug)]
pub struct Verdict {
    pub outcome: Outcome,
    pub reference: Option<Reference>,
    pub optimal: Option<bool>,
}

/// Simulate `plan` on `inst` (a plan that did not parse fails with its parse error),
/// solve `inst` for its optimum, and compare under `metric`.
pub fn check(inst: &Instance, plan: &Result<Plan, ParseError>, metric: CostMetric) -> Verdict {
    let outcome = match plan {
        Ok(p) => simulate(inst, p),
        Err(pe) => Outcome::failed(pe.to_failure()),
    };
    let reference = solve(inst, Budget::default()).ok().map(|s| s.reference);
    let optimal = reference.map(|r| outcome.optimal(&r, metric));
    Verdict {
        outcome,
        reference,
        optimal,
    }
}

/// The independent-shortest-paths baseline on every item of `s`: valid and optimal
/// (makespan) counts per cell.
pub fn baseline_table(s: &Suite) -> ResultTable {
    let mut t = ResultTable::default();
    for c in &s.cells {
        let e = t.cells.entry((c.agents, c.size)).or_default();
        for it in &c.items {
            e.total += 1;
            let (valid, optimal) = baseline_outcome(it, CostMetric::Makespan);
            e.valid += valid as u32;
            e.optimal += optimal as u32;
        }
    }
    t
}
