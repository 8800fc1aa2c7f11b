//! The JSON the testbed commands print (`env solve --json`, `env check --json`,
//! `env suite --json`), as named types with schemas (`schemas/env-solve.json`,
//! `env-check.json`, `env-suite.json`).
use crate::env::simulate::{Failure, Reference};
use crate::env::suite::SuiteName;
use crate::env::table::CellStats;
use crate::env::Plan;
use crate::record::event::EvalCell;
use schemars::JsonSchema;
use serde::Serialize;

/// `ledger env solve --json`: the optimal plan, or why there is none.
#[derive(Clone, Debug, Serialize, JsonSchema)]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum SolveReport {
    Solved {
        /// Optimal sum of costs and optimal makespan.
        sum_of_costs: u32,
        makespan: u32,
        /// Sum of the agents' independent shortest paths.
        independent_sum: u32,
        /// Whether the optimum needs the agents to coordinate (it exceeds the
        /// independent sum).
        needs_coordination: bool,
        /// CBS nodes expanded.
        nodes: u64,
        plan: Plan,
    },
    /// Proved impossible (an unreachable goal, or no conflict-free plan).
    Unsolvable { reason: String },
    /// The search gave up within its budget.
    Unknown { reason: String },
}

/// `ledger env check --json`: a plan checked against an instance.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct CheckReport {
    pub valid: bool,
    /// Whether it is optimal under the metric (None when the reference solver gave up).
    pub optimal: Option<bool>,
    pub failure: Option<Failure>,
    pub sum_of_costs: u32,
    pub makespan: u32,
    /// The optima it is compared with.
    pub reference: Option<Reference>,
}

/// `ledger env suite --json`: a built evaluation suite.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct SuiteReport {
    pub name: SuiteName,
    /// The suite's content hash.
    pub hash: String,
    pub instances: usize,
    pub cells: Vec<CellStats>,
    /// With `--baseline`: the independent-shortest-paths baseline's scores per cell.
    pub baseline: Option<Vec<EvalCell>>,
}

impl SolveReport {
    /// The report of a solve's outcome.
    pub fn of(sol: &Result<crate::env::Solution, crate::env::SolveError>) -> SolveReport {
        use crate::env::SolveError;
        match sol {
            Ok(sol) => SolveReport::Solved {
                sum_of_costs: sol.reference.sum_of_costs,
                makespan: sol.reference.makespan,
                independent_sum: sol.independent_sum,
                needs_coordination: sol.needs_coordination(),
                nodes: sol.nodes,
                plan: sol.plan.clone(),
            },
            Err(e @ (SolveError::Unreachable { .. } | SolveError::Unsolvable { .. })) => {
                SolveReport::Unsolvable {
                    reason: e.to_string(),
                }
            }
            Err(e @ SolveError::Unknown { .. }) => SolveReport::Unknown {
                reason: e.to_string(),
            },
        }
    }
}

impl CheckReport {
    /// The report of a plan's verdict.
    pub fn of(v: &crate::env::verdict::Verdict) -> CheckReport {
        CheckReport {
            valid: v.outcome.valid,
            optimal: v.optimal,
            failure: v.outcome.failure.clone(),
            sum_of_costs: v.outcome.sum_of_costs,
            makespan: v.outcome.makespan,
            reference: v.reference,
        }
    }
}

impl SuiteReport {
    /// The report of suite `s`, with the baseline's table when it was scored.
    pub fn of(
        s: &crate::env::Suite,
        baseline: Option<&crate::env::table::ResultTable>,
    ) -> SuiteReport {
        SuiteReport {
            name: s.name,
            hash: s.hash.clone(),
            instances: s.len(),
            cells: crate::env::table::suite_stats(s),
            baseline: baseline.map(EvalCell::cells_of),
        }
    }
}
