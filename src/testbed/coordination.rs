//! Coordination as a number: a suite item *needs coordination* when its optimal
//! sum-of-costs exceeds the sum of the agents' independent shortest paths
//! ([`Solved::needs_coordination`], the generator's `wait_ratio`). Then no choice of
//! independent shortest paths is conflict-free, so the independent-shortest-paths
//! baseline ([`crate::baseline`]) fails every such item by construction; on the other
//! items it succeeds whenever its own choice of paths happens not to collide.
//!
//! [`split`] scores a policy's per-item results per agent count on the two halves,
//! beside that baseline on the same items: the paper's "multi-agent reasoning" as a
//! figure. Every view (`ledger eval`, `compare`, `study`, the report) uses this one
//! definition.
use crate::baseline::independent_plan;
use crate::generator::Solved;
use crate::simulate::{simulate, CostMetric};
use serde::{Deserialize, Serialize};

/// One (agent count, half) row: the policy and the baseline on the same items.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CoordinationRow {
    pub agents: u32,
    /// true: the items that need coordination; false: the rest.
    pub needs_coordination: bool,
    pub items: u32,
    pub valid: u32,
    pub optimal: u32,
    pub valid_pct: f64,
    pub optimal_pct: f64,
    /// The independent-shortest-paths baseline on the same items.
    pub baseline_valid_pct: f64,
    pub baseline_optimal_pct: f64,
}

impl CoordinationRow {
    /// "coordination" or "independent" (the items that need none).
    pub fn half(&self) -> &'static str {
        if self.needs_coordination {
            "coordination"
        } else {
            "independent"
        }
    }
}

/// Whether the independent-shortest-paths baseline solves `it`: (valid, optimal).
pub fn baseline_outcome(it: &Solved, metric: CostMetric) -> (bool, bool) {
    match independent_plan(&it.instance) {
        Some(p) => {
            let o = simulate(&it.instance, &p);
            (o.valid, o.optimal(&it.reference, metric))
        }
        None => (false, false),
    }
}

/// Rows per agent count (ascending), coordination half after the other, halves with no
/// item left out. `items[i]` is a suite item with its agent count, `results[i]` the
/// policy's (valid, optimal) on it and `baseline[i]` [`baseline_outcome`]'s; all in the
/// same order.
pub fn split(
    items: &[(u32, &Solved)],
    results: &[(bool, bool)],
    baseline: &[(bool, bool)],
) -> Vec<CoordinationRow> {
    assert_eq!(items.len(), results.len(), "one result per item");
    assert_eq!(items.len(), baseline.len(), "one baseline outcome per item");
    // (agents, needs) -> [items, valid, optimal, baseline valid, baseline optimal]
    let mut acc: std::collections::BTreeMap<(u32, bool), [u32; 5]> = Default::default();
    for ((&(agents, it), &(valid, optimal)), &(bv, bo)) in items.iter().zip(results).zip(baseline) {
        let a = acc.entry((agents, it.needs_coordination)).or_default();
        a[0] += 1;
        a[1] += valid as u32;
        a[2] += (valid && optimal) as u32;
        a[3] += bv as u32;
        a[4] += bo as u32;
    }
    let pct = |k: u32, n: u32| 100.0 * k as f64 / n.max(1) as f64;
    acc.into_iter()
        .map(|((agents, needs), [n, v, o, bv, bo])| CoordinationRow {
            agents,
            needs_coordination: needs,
            items: n,
            valid: v,
            optimal: o,
            valid_pct: pct(v, n),
            optimal_pct: pct(o, n),
            baseline_valid_pct: pct(bv, n),
            baseline_optimal_pct: pct(bo, n),
        })
        .collect()
}

/// The rows as a text table: per agent count and half, valid / optimal % of the policy
/// and of the baseline on the same items.
pub fn render(rows: &[CoordinationRow], title: &str) -> String {
    let mut s = format!("{title}\n");
    s.push_str(&format!(
        "{:>6}  {:<12}  {:>5}  {:>15}  {:>15}\n",
        "agents", "items", "n", "valid / opt %", "baseline v / o %"
    ));
    for r in rows {
        s.push_str(&format!(
            "{:>6}  {:<12}  {:>5}  {:>6.1} / {:>6.1}  {:>6.1} / {:>6.1}\n",
            r.agents,
            r.half(),
            r.items,
            r.valid_pct,
            r.optimal_pct,
            r.baseline_valid_pct,
            r.baseline_optimal_pct
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generator::{generate_one, InstanceSpec};
    use crate::seed::Seed;
    use crate::solver::Budget;

    fn solved(coordination: bool, i: u64) -> Solved {
        let spec = InstanceSpec {
            size: 4,
            agents: 2,
            hole_ratio: 0.1,
            coordination: Some(coordination),
        };
        let mut rng = Seed::root(9).child("coord", i).rng();
        generate_one(&spec, &mut rng, Budget::default()).unwrap()
    }

    #[test]
    fn baseline_fails_every_coordination_item_and_rows_split_by_need() {
        let items: Vec<Solved> = (0..6).map(|i| solved(i % 2 == 0, i)).collect();
        let refs: Vec<(u32, &Solved)> = items.iter().map(|s| (2, s)).collect();
        // The policy: valid and optimal on the first two items only.
        let results: Vec<(bool, bool)> = (0..6).map(|i| (i < 2, i < 2)).collect();
        let baseline: Vec<(bool, bool)> = items
            .iter()
            .map(|it| baseline_outcome(it, CostMetric::Makespan))
            .collect();
        let rows = split(&refs, &results, &baseline);
        assert_eq!(rows.len(), 2);
        let (indep, coord) = (&rows[0], &rows[1]);
        assert!(!indep.needs_coordination && coord.needs_coordination);
        assert_eq!((indep.items, coord.items), (3, 3));
        // Item 0 needs coordination, item 1 does not: one valid item in each half.
        assert_eq!((indep.valid, coord.valid), (1, 1));
        assert_eq!(coord.baseline_valid_pct, 0.0);
        assert!(indep.baseline_valid_pct > 0.0);
        assert!(render(&rows, "t").contains("coordination"));
    }
}
