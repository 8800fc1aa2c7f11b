//! What the model commands print: `ledger eval --json` (a model's scores on the
//! benchmark suites) and `ledger lm generate --json` (one sampled continuation).
use crate::env::coordination;
use crate::env::suite::Suite;
use crate::env::table::{CellCounts, ResultTable};
use crate::env::{CostMetric, Solved};
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

/// One line of `ledger eval --items FILE`: a suite item, the plan the model wrote for it
/// and what the simulator found, so a failure can be read item by item (which agents
/// collided, at which step) rather than only counted.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct EvalItem {
    /// `val` or `test`.
    pub suite: String,
    pub agents: usize,
    pub size: usize,
    /// The item's index within its (agents, size) cell, in suite order.
    pub item: usize,
    /// The instance's content hash (blake3, hex).
    pub instance_hash: String,
    /// The instance itself (schemas/instance.json), so the line can be read alone.
    pub instance: crate::env::Instance,
    /// Its optima, from the reference solver.
    pub reference: crate::env::Reference,
    /// The optimal sum-of-costs exceeds the sum of independent shortest paths.
    pub needs_coordination: bool,
    pub valid: bool,
    pub optimal: bool,
    /// The first failure (kind, timestep, the agents involved, a readable line).
    pub failure: Option<crate::env::Failure>,
    /// The model's plan: in the plain `agent N: MOVES` form when it parsed (whatever the
    /// prompt format), as the raw decoded text when it did not (the failure says where).
    pub plan: String,
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

/// One scored suite item, in suite order: what the view needs of the trainer's score.
#[derive(Clone, Copy, Debug)]
pub struct ItemScore {
    pub agents: usize,
    pub size: usize,
    pub valid: bool,
    pub optimal: bool,
    /// The first failure's kind (`hole`, `edge_conflict`, ...), if the plan failed.
    pub failure: Option<&'static str>,
}

/// The name `ledger eval` reports a cost metric by.
pub fn metric_name(metric: CostMetric) -> &'static str {
    match metric {
        CostMetric::Makespan => "makespan",
        CostMetric::SumOfCosts => "sum_of_costs",
    }
}

impl EvalSuite {
    /// A suite's scores: the (agents, size) table with the paper's Sum rows, the first
    /// failures by kind, and the coordination split beside the independent-shortest-paths
    /// baseline. `scores` are the suite's items in order.
    pub fn score(suite: &Suite, per_cell: usize, metric: CostMetric, scores: &[ItemScore]) -> Self {
        let mut table = ResultTable::default();
        for s in scores {
            let c: &mut CellCounts = table.cells.entry((s.agents, s.size)).or_default();
            c.total += 1;
            c.valid += s.valid as u32;
            c.optimal += s.optimal as u32;
        }
        let items: Vec<(u32, &Solved)> = suite
            .cells
            .iter()
            .flat_map(|c| c.items.iter().map(move |it| (c.agents as u32, it)))
            .collect();
        let results: Vec<(bool, bool)> = scores.iter().map(|s| (s.valid, s.optimal)).collect();
        let baseline: Vec<(bool, bool)> = items
            .iter()
            .map(|(_, it)| coordination::baseline_outcome(it, metric))
            .collect();
        let mut failures: BTreeMap<String, u32> = BTreeMap::new();
        for kind in scores.iter().filter_map(|s| s.failure) {
            *failures.entry(kind.to_string()).or_default() += 1;
        }
        EvalSuite {
            suite: suite.name.as_str().to_string(),
            hash: suite.hash.clone(),
            per_cell,
            cells: table
                .cells
                .iter()
                .map(|(&(agents, size), c)| EvalCellRow {
                    agents,
                    size,
                    total: c.total,
                    valid: c.valid,
                    optimal: c.optimal,
                    valid_pct: c.valid_rate(),
                    optimal_pct: c.optimal_rate(),
                })
                .collect(),
            sums: table
                .agent_counts()
                .into_iter()
                .map(|a| {
                    let (v, o) = table.sum_row(a);
                    EvalSumRow {
                        agents: a,
                        valid_pct: v,
                        optimal_pct: o,
                    }
                })
                .collect(),
            failures,
            coordination: coordination::split(&items, &results, &baseline),
        }
    }

    /// The suite as `ledger eval` prints it: the paper's table, the coordination rows
    /// and the first failures, then a blank line.
    pub fn render(&self) -> String {
        let table = ResultTable {
            cells: self
                .cells
                .iter()
                .map(|c| {
                    let counts = CellCounts {
                        total: c.total,
                        valid: c.valid,
                        optimal: c.optimal,
                    };
                    ((c.agents, c.size), counts)
                })
                .collect(),
        };
        let title = format!(
            "{} suite ({} per cell, valid % / optimal %)",
            self.suite, self.per_cell
        );
        let kinds: Vec<String> = self
            .failures
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        format!(
            "{}{}first failures: {}\n\n",
            table.render(&title),
            coordination::render(
                &self.coordination,
                "items that need coordination and the rest (baseline: independent shortest paths)"
            ),
            if kinds.is_empty() {
                "none".to_string()
            } else {
                kinds.join(", ")
            }
        )
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The text `ledger eval` prints for a suite, pinned (the CLI's `print!` of
    /// [`EvalSuite::render`]; it was built inline in the CLI before).
    #[test]
    fn an_eval_suite_renders_as_the_paper_table() {
        let cell = |size| EvalCellRow {
            agents: 2,
            size,
            total: 2,
            valid: 1,
            optimal: 1,
            valid_pct: 50.0,
            optimal_pct: 50.0,
        };
        let suite = EvalSuite {
            suite: "val".into(),
            hash: "h".into(),
            per_cell: 2,
            cells: vec![cell(3), cell(4), cell(5)],
            sums: vec![EvalSumRow {
                agents: 2,
                valid_pct: 50.0,
                optimal_pct: 50.0,
            }],
            failures: [("edge_conflict".to_string(), 1), ("hole".to_string(), 2)].into(),
            coordination: vec![coordination::CoordinationRow {
                agents: 2,
                needs_coordination: false,
                items: 6,
                valid: 3,
                optimal: 3,
                valid_pct: 50.0,
                optimal_pct: 50.0,
                baseline_valid_pct: 100.0,
                baseline_optimal_pct: 100.0,
            }],
        };
        let expected = "\
val suite (2 per cell, valid % / optimal %)
  size |    2 agents    
       |   valid optimal
------------------------
   3x3 |   50.00   50.00
   4x4 |   50.00   50.00
   5x5 |   50.00   50.00
------------------------
   Sum |   50.00   50.00
items that need coordination and the rest (baseline: independent shortest paths)
agents  items             n    valid / opt %  baseline v / o %
     2  independent       6    50.0 /   50.0   100.0 /  100.0
first failures: edge_conflict 1, hole 2

";
        assert_eq!(suite.render(), expected);
        let none = EvalSuite {
            failures: BTreeMap::new(),
            ..suite
        };
        assert!(none.render().ends_with("first failures: none\n\n"));
    }
}
