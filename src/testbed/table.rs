//! Tables in the paper's layout: rows are map sizes, column groups are agent counts, and
//! a final "Sum" row per agent count is the mean over that count's sizes.
//!
//! `ResultTable` holds valid/optimal rates (what the paper reports); `suite_stats_table`
//! describes a suite's instances (holes, optima, coordination share, solver effort).
use super::suite::Suite;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

/// Valid and optimal counts of one (agents, size) cell.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
pub struct CellCounts {
    pub total: u32,
    pub valid: u32,
    pub optimal: u32,
}

impl CellCounts {
    pub fn valid_rate(&self) -> f64 {
        pct(self.valid, self.total)
    }
    pub fn optimal_rate(&self) -> f64 {
        pct(self.optimal, self.total)
    }
}

/// `x` as % of `n` (0 when `n` is 0): every rate of a table, and of the views above it.
pub fn pct(x: u32, n: u32) -> f64 {
    if n == 0 {
        0.0
    } else {
        100.0 * x as f64 / n as f64
    }
}

/// Valid/optimal results per (agents, size) cell.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ResultTable {
    pub cells: BTreeMap<(usize, usize), CellCounts>,
}

impl ResultTable {
    pub fn agent_counts(&self) -> Vec<usize> {
        self.cells
            .keys()
            .map(|k| k.0)
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect()
    }

    /// The paper's "Sum": for one agent count, the mean over sizes of (valid %, optimal %).
    pub fn sum_row(&self, agents: usize) -> (f64, f64) {
        let rows: Vec<&CellCounts> = self
            .cells
            .iter()
            .filter(|(k, _)| k.0 == agents)
            .map(|(_, v)| v)
            .collect();
        if rows.is_empty() {
            return (0.0, 0.0);
        }
        let n = rows.len() as f64;
        (
            rows.iter().map(|c| c.valid_rate()).sum::<f64>() / n,
            rows.iter().map(|c| c.optimal_rate()).sum::<f64>() / n,
        )
    }

    /// Render with one column group per agent count (valid % / optimal %).
    pub fn render(&self, title: &str) -> String {
        let agents = self.agent_counts();
        let sizes: BTreeSet<usize> = self.cells.keys().map(|k| k.1).collect();
        let mut s = String::new();
        let _ = writeln!(s, "{title}");
        let mut head = format!("{:>6}", "size");
        let mut sub = format!("{:>6}", "");
        for k in &agents {
            head.push_str(&format!(" | {:^15}", format!("{k} agents")));
            sub.push_str(&format!(" | {:>7} {:>7}", "valid", "optimal"));
        }
        let _ = writeln!(s, "{head}\n{sub}");
        let _ = writeln!(s, "{}", "-".repeat(sub.len()));
        for size in &sizes {
            let mut row = format!("{:>6}", format!("{size}x{size}"));
            for k in &agents {
                match self.cells.get(&(*k, *size)) {
                    Some(c) => row.push_str(&format!(
                        " | {:>7.2} {:>7.2}",
                        c.valid_rate(),
                        c.optimal_rate()
                    )),
                    None => row.push_str(&format!(" | {:>7} {:>7}", "-", "-")),
                }
            }
            let _ = writeln!(s, "{row}");
        }
        let mut row = format!("{:>6}", "Sum");
        for k in &agents {
            let (v, o) = self.sum_row(*k);
            row.push_str(&format!(" | {v:>7.2} {o:>7.2}"));
        }
        let _ = writeln!(s, "{}\n{row}", "-".repeat(sub.len()));
        s
    }
}

/// Per-cell statistics of a suite's instances.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct CellStats {
    pub agents: usize,
    pub size: usize,
    pub instances: usize,
    pub mean_hole_ratio: f64,
    pub coordination_share: f64,
    pub mean_optimal_makespan: f64,
    pub mean_optimal_sum_of_costs: f64,
    pub mean_solver_nodes: f64,
    pub max_solver_nodes: u64,
}

pub fn suite_stats(suite: &Suite) -> Vec<CellStats> {
    suite
        .cells
        .iter()
        .map(|c| {
            let n = c.items.len().max(1) as f64;
            let mean = |f: &dyn Fn(&super::generator::Solved) -> f64| {
                c.items.iter().map(f).sum::<f64>() / n
            };
            CellStats {
                agents: c.agents,
                size: c.size,
                instances: c.items.len(),
                mean_hole_ratio: mean(&|i| {
                    i.instance.hole_count() as f64 / i.instance.cells() as f64
                }),
                coordination_share: mean(&|i| i.needs_coordination as u8 as f64),
                mean_optimal_makespan: mean(&|i| i.reference.makespan as f64),
                mean_optimal_sum_of_costs: mean(&|i| i.reference.sum_of_costs as f64),
                mean_solver_nodes: mean(&|i| i.solver_nodes as f64),
                max_solver_nodes: c.items.iter().map(|i| i.solver_nodes).max().unwrap_or(0),
            }
        })
        .collect()
}

/// Render suite statistics: rows are sizes, one column group per agent count.
pub fn render_suite_stats(suite: &Suite) -> String {
    let stats = suite_stats(suite);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "suite {} ({} instances, hash {})",
        suite.name.as_str(),
        suite.len(),
        &suite.hash[..16]
    );
    let _ = writeln!(
        s,
        "{:>6} {:>6} {:>5} {:>7} {:>7} {:>9} {:>9} {:>9} {:>9}",
        "agents", "size", "n", "holes%", "coord%", "makespan", "soc", "cbs-mean", "cbs-max"
    );
    for c in &stats {
        let _ = writeln!(
            s,
            "{:>6} {:>6} {:>5} {:>7.1} {:>7.1} {:>9.2} {:>9.2} {:>9.1} {:>9}",
            c.agents,
            format!("{0}x{0}", c.size),
            c.instances,
            100.0 * c.mean_hole_ratio,
            100.0 * c.coordination_share,
            c.mean_optimal_makespan,
            c.mean_optimal_sum_of_costs,
            c.mean_solver_nodes,
            c.max_solver_nodes
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sum_row_is_the_mean_over_sizes() {
        let mut t = ResultTable::default();
        t.cells.insert(
            (3, 3),
            CellCounts {
                total: 10,
                valid: 10,
                optimal: 5,
            },
        );
        t.cells.insert(
            (3, 4),
            CellCounts {
                total: 10,
                valid: 5,
                optimal: 0,
            },
        );
        t.cells.insert(
            (4, 4),
            CellCounts {
                total: 4,
                valid: 1,
                optimal: 1,
            },
        );
        assert_eq!(t.sum_row(3), (75.0, 25.0));
        assert_eq!(t.sum_row(4), (25.0, 25.0));
        let r = t.render("t");
        assert!(r.contains("Sum"));
        assert!(r.contains("  75.00   25.00 |   25.00   25.00"), "{r}");
    }
}
