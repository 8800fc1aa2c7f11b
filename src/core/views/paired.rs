//! Paired statistics: two branches (or two engineers' seed replicates) evaluated on the
//! same suite items, compared item by item from their `evaluation_outcomes` events.
//!
//! Forks share everything before the fork point, their suites included, so each suite
//! item is answered by both sides: the difference of two rates is estimated from the
//! per-item differences, whose spread is much smaller than that of two independent
//! rates. Every rate here is one of the paper's numbers, a *Sum*: the mean over a
//! group's cells (map sizes) of each cell's rate, in %. A group is one agent count of a
//! suite, whole or restricted to one wait-ratio subset.
//!
//! * the **paired bootstrap**: items are resampled with replacement within each cell
//!   (and, pooled over seeds, within each seed's cell), the same draws for both sides;
//!   the 95% percentile interval of the difference of the resampled Sums. Deterministic:
//!   [`RESAMPLES`] resamples from a fixed node of the seed tree per group.
//! * **McNemar's exact test**: the discordant items (only A right, only B right) and the
//!   two-sided binomial p-value of the smaller count under Bin(discordant, 1/2).
//!
//! Each side's own (independent) interval comes from the same resamples, so the two can
//! be read side by side.
use crate::env::suite::subset_label;
use crate::ledger::Hash;
use crate::record::event::{EvaluationOutcomes, OUTCOME_OPTIMAL, OUTCOME_VALID};
use crate::seed::Seed;
use rand::Rng as _;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// Bootstrap resamples per group.
pub const RESAMPLES: u32 = 10_000;
/// Root of the bootstrap's seed nodes (fixed: the same outcomes give the same intervals).
const BOOTSTRAP_SEED: u64 = 2026;

/// A closed interval of percentage points.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Interval {
    pub low: f64,
    pub high: f64,
}

impl Interval {
    pub fn contains(&self, x: f64) -> bool {
        self.low <= x && x <= self.high
    }
}

/// McNemar's exact test on the discordant items of a pairing.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct McNemar {
    /// Items the first side (A, the baseline) gets right and the second does not.
    pub a_only: u32,
    /// Items the second side (B) gets right and the first does not.
    pub b_only: u32,
    /// Two-sided exact p-value: 2 P(X <= min(a_only, b_only)) for X ~ Bin(a_only +
    /// b_only, 1/2), at most 1 (1 when nothing is discordant).
    pub p: f64,
}

impl McNemar {
    pub fn new(a_only: u32, b_only: u32) -> McNemar {
        McNemar {
            a_only,
            b_only,
            p: mcnemar_p(a_only, b_only),
        }
    }
}

/// Two-sided exact McNemar p-value for discordant counts `b` and `c`.
pub fn mcnemar_p(b: u32, c: u32) -> f64 {
    let n = b + c;
    if n == 0 {
        return 1.0;
    }
    let k = b.min(c);
    // P(X <= k), X ~ Bin(n, 1/2): the pmf from 2^-n upward (exact powers of two while
    // they are normal numbers; in logs beyond).
    let tail = if n <= 1000 {
        let mut pmf = 0.5f64.powi(n as i32);
        let mut sum = pmf;
        for i in 1..=k {
            pmf = pmf * (n - i + 1) as f64 / i as f64;
            sum += pmf;
        }
        sum
    } else {
        let ln2 = std::f64::consts::LN_2;
        let mut log_c = 0.0f64;
        let mut sum = (-(n as f64) * ln2).exp();
        for i in 1..=k {
            log_c += ((n - i + 1) as f64).ln() - (i as f64).ln();
            sum += (log_c - n as f64 * ln2).exp();
        }
        sum
    };
    (2.0 * tail).min(1.0)
}

/// Which rate: valid (outcome 1 or 2) or optimal (outcome 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Metric {
    Valid,
    Optimal,
}

impl Metric {
    fn hit(self, outcome: u8) -> bool {
        match self {
            Metric::Valid => outcome >= OUTCOME_VALID,
            Metric::Optimal => outcome == OUTCOME_OPTIMAL,
        }
    }
}

/// The items of a group: per cell, the indices of its items in the outcomes.
#[derive(Clone, Debug, PartialEq)]
pub struct Group {
    pub suite: String,
    pub agents: usize,
    /// The wait-ratio subset (`wait0.25`, ...), None for every item of the cells.
    pub subset: Option<String>,
    pub cells: Vec<Vec<usize>>,
}

impl Group {
    /// `val 2 agents`, `test 3 agents wait0.25`: a name for seeds and messages.
    pub fn label(&self) -> String {
        match &self.subset {
            Some(s) => format!("{} {} agents {s}", self.suite, self.agents),
            None => format!("{} {} agents", self.suite, self.agents),
        }
    }

    pub fn items(&self) -> usize {
        self.cells.iter().map(Vec::len).sum()
    }
}

/// The groups of a suite's outcomes: per agent count, all items, then each wait-ratio
/// subset (when stratified), in the order listed.
pub fn groups(o: &EvaluationOutcomes) -> Vec<Group> {
    let mut start = 0usize;
    // (agents, item range) of each cell, in suite order.
    let cells: Vec<(usize, std::ops::Range<usize>)> = o
        .cells
        .iter()
        .map(|&(k, _, n)| {
            let r = start..start + n as usize;
            start += n as usize;
            (k as usize, r)
        })
        .collect();
    let ratios = o.wait_ratios();
    let agents: BTreeSet<usize> = cells.iter().map(|c| c.0).collect();
    let mut out = Vec::new();
    for k in agents {
        let of_k: Vec<&std::ops::Range<usize>> =
            cells.iter().filter(|c| c.0 == k).map(|c| &c.1).collect();
        out.push(Group {
            suite: o.suite.clone(),
            agents: k,
            subset: None,
            cells: of_k.iter().map(|r| (*r).clone().collect()).collect(),
        });
        for (w, &ratio) in ratios.iter().enumerate() {
            out.push(Group {
                suite: o.suite.clone(),
                agents: k,
                subset: Some(subset_label(ratio)),
                cells: of_k
                    .iter()
                    .map(|r| {
                        let per = r.len() / ratios.len();
                        (r.start + w * per..r.start + (w + 1) * per).collect()
                    })
                    .collect(),
            });
        }
    }
    out
}

/// The subset name of the items that need coordination (`coord`) or do not (`indep`).
pub fn coordination_label(needs: bool) -> &'static str {
    if needs {
        "coord"
    } else {
        "indep"
    }
}

/// [`groups`], then per agent count the items that need coordination (`coord`) and
/// the rest (`indep`) when `flags` gives each item's need (in suite order). These two
/// are pooled over sizes, one cell each, as `views::coordination` reports them.
pub fn groups_with(o: &EvaluationOutcomes, flags: Option<&[bool]>) -> Vec<Group> {
    let mut out = groups(o);
    let Some(flags) = flags.filter(|f| f.len() == o.outcomes.len()) else {
        return out;
    };
    let mut start = 0usize;
    let mut by: std::collections::BTreeMap<(usize, bool), Vec<usize>> = Default::default();
    for &(k, _, n) in &o.cells {
        for (i, &needs) in flags.iter().enumerate().skip(start).take(n as usize) {
            by.entry((k as usize, needs)).or_default().push(i);
        }
        start += n as usize;
    }
    for ((agents, needs), items) in by {
        out.push(Group {
            suite: o.suite.clone(),
            agents,
            subset: Some(coordination_label(needs).to_string()),
            cells: vec![items],
        });
    }
    out
}

/// Why two outcomes do not pair item by item (None: they do).
pub fn unpairable(a: &EvaluationOutcomes, b: &EvaluationOutcomes) -> Option<String> {
    if !a.is_well_formed() || !b.is_well_formed() {
        return Some("an outcomes event does not match its own layout".into());
    }
    if a.suite != b.suite {
        return Some(format!("different suites ({} and {})", a.suite, b.suite));
    }
    if a.suite_hash != b.suite_hash || a.cells != b.cells || a.wait_ratios != b.wait_ratios {
        return Some(format!(
            "different {} instances (suite {} and {})",
            a.suite,
            a.suite_hash.short(),
            b.suite_hash.short()
        ));
    }
    None
}

/// One side-by-side pairing unit: a group's cells, each a list of (A, B) outcome bytes.
/// Pooled over seeds, a statistic is the mean over units of each unit's Sum.
pub type Unit = Vec<Vec<(u8, u8)>>;

/// The pairs of `group` between outcomes `a` and `b` (which must pair).
pub fn unit(group: &Group, a: &EvaluationOutcomes, b: &EvaluationOutcomes) -> Unit {
    group
        .cells
        .iter()
        .map(|c| c.iter().map(|&i| (a.outcomes[i], b.outcomes[i])).collect())
        .collect()
}

/// What the bootstrap and McNemar say about one metric over units.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PairedMetric {
    /// A's and B's rate, % (the Sum: mean over cells; pooled: mean over units too).
    pub a: f64,
    pub b: f64,
    /// Each side's own 95% bootstrap interval (resampling its items within each cell):
    /// what an unpaired reading would give.
    pub a_ci95: Interval,
    pub b_ci95: Interval,
    /// b − a, percentage points.
    pub diff: f64,
    /// 95% paired bootstrap interval of the difference (the same resampled items for
    /// both sides).
    pub diff_ci95: Interval,
    pub mcnemar: McNemar,
}

/// Mean over units of the mean over cells of 100 · hits / items, of A and B, for valid
/// then optimal, with `pick(cell, i)` choosing which pair stands at position i.
fn sums(units: &[Unit], pick: &mut dyn FnMut(usize, usize) -> usize) -> [(f64, f64); 2] {
    let mut acc = [(0.0, 0.0); 2];
    let mut cell_no = 0usize;
    for u in units {
        let mut ua = [(0.0, 0.0); 2];
        for cell in u {
            let n = cell.len();
            // Hits of A and B, valid then optimal.
            let mut h = [[0u64; 2]; 2];
            for i in 0..n {
                let (x, y) = cell[pick(cell_no, i)];
                for (m, metric) in [Metric::Valid, Metric::Optimal].into_iter().enumerate() {
                    h[m][0] += metric.hit(x) as u64;
                    h[m][1] += metric.hit(y) as u64;
                }
            }
            if n > 0 {
                for m in 0..2 {
                    ua[m].0 += 100.0 * h[m][0] as f64 / n as f64;
                    ua[m].1 += 100.0 * h[m][1] as f64 / n as f64;
                }
            }
            cell_no += 1;
        }
        let cells = u.iter().filter(|c| !c.is_empty()).count().max(1) as f64;
        for m in 0..2 {
            acc[m].0 += ua[m].0 / cells;
            acc[m].1 += ua[m].1 / cells;
        }
    }
    let k = units.len().max(1) as f64;
    acc.map(|(a, b)| (a / k, b / k))
}

/// The 95% percentile interval of `xs` (sorted in place).
fn percentile95(xs: &mut [f64]) -> Interval {
    xs.sort_by(f64::total_cmp);
    let r = xs.len();
    let lo = ((r as f64) * 0.025).floor() as usize;
    let hi = (((r as f64) * 0.975).ceil() as usize).clamp(1, r) - 1;
    Interval {
        low: xs[lo.min(r - 1)],
        high: xs[hi],
    }
}

/// Paired statistics of `units` for both metrics (valid, optimal), the bootstrap
/// seeded by `label`.
pub fn paired_metrics(units: &[Unit], label: &str) -> (PairedMetric, PairedMetric) {
    let point = sums(units, &mut |_, i| i);
    let metrics = [Metric::Valid, Metric::Optimal];
    let mut out = [0, 1].map(|m| {
        let (a, b) = point[m];
        let (mut a_only, mut b_only) = (0u32, 0u32);
        for (x, y) in units.iter().flatten().flatten() {
            match (metrics[m].hit(*x), metrics[m].hit(*y)) {
                (true, false) => a_only += 1,
                (false, true) => b_only += 1,
                _ => {}
            }
        }
        let none = Interval { low: a, high: a };
        PairedMetric {
            a,
            b,
            a_ci95: none,
            b_ci95: none,
            diff: b - a,
            diff_ci95: none,
            mcnemar: McNemar::new(a_only, b_only),
        }
    });
    // One set of resampled indices per resample serves both metrics and both sides.
    let mut rng = Seed::named("paired-bootstrap", BOOTSTRAP_SEED)
        .child(label, 0)
        .rng();
    let sizes: Vec<usize> = units.iter().flatten().map(Vec::len).collect();
    let mut draws: Vec<Vec<usize>> = sizes.iter().map(|&n| vec![0; n]).collect();
    let resampled: Vec<[(f64, f64); 2]> = (0..RESAMPLES)
        .map(|_| {
            for (d, &n) in draws.iter_mut().zip(&sizes) {
                for x in d.iter_mut() {
                    *x = rng.random_range(0..n);
                }
            }
            sums(units, &mut |c, i| draws[c][i])
        })
        .collect();
    // [metric][a, b, b - a][resample]
    let mut stats: Vec<[Vec<f64>; 3]> = (0..2)
        .map(|m| {
            [
                resampled.iter().map(|x| x[m].0).collect(),
                resampled.iter().map(|x| x[m].1).collect(),
                resampled.iter().map(|x| x[m].1 - x[m].0).collect(),
            ]
        })
        .collect();
    for (m, st) in stats.iter_mut().enumerate() {
        out[m].a_ci95 = percentile95(&mut st[0]);
        out[m].b_ci95 = percentile95(&mut st[1]);
        out[m].diff_ci95 = percentile95(&mut st[2]);
    }
    let [valid, optimal] = out;
    (valid, optimal)
}

/// One group of a paired comparison of two branches.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PairedRow {
    /// `val` or `test`.
    pub suite: String,
    pub agents: usize,
    /// The wait-ratio subset (`wait0.25`, ...); None: every item of the agent count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subset: Option<String>,
    /// Items paired.
    pub instances: usize,
    pub valid: PairedMetric,
    pub optimal: PairedMetric,
    /// The two `evaluation_outcomes` events (A's, then B's).
    pub events: Vec<Hash>,
}

/// Paired rows of every group of two suites' outcomes (which must pair; see
/// [`unpairable`]).
pub fn paired_rows(
    a: &EvaluationOutcomes,
    b: &EvaluationOutcomes,
    events: [Hash; 2],
    coordination: Option<&[bool]>,
) -> Vec<PairedRow> {
    groups_with(a, coordination)
        .into_iter()
        .map(|g| {
            let (valid, optimal) = paired_metrics(&[unit(&g, a, b)], &g.label());
            PairedRow {
                suite: g.suite.clone(),
                agents: g.agents,
                subset: g.subset.clone(),
                instances: g.items(),
                valid,
                optimal,
                events: events.to_vec(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcomes(cells: &[(u32, u32, u32)], bytes: Vec<u8>) -> EvaluationOutcomes {
        EvaluationOutcomes {
            suite: "test".into(),
            suite_hash: Hash::of_blob(b"suite"),
            checkpoint: None,
            cells: cells.to_vec(),
            wait_ratios: Vec::new(),
            outcomes: bytes,
        }
    }

    #[test]
    fn coordination_groups_pool_each_agent_count_by_need() {
        let o = outcomes(&[(3, 4, 4), (3, 5, 4)], vec![2, 0, 1, 0, 2, 2, 0, 0]);
        let flags = [true, false, true, false, false, false, true, true];
        let g = groups_with(&o, Some(&flags));
        let coord = g
            .iter()
            .find(|g| g.subset.as_deref() == Some("coord"))
            .unwrap();
        let indep = g
            .iter()
            .find(|g| g.subset.as_deref() == Some("indep"))
            .unwrap();
        assert_eq!(coord.cells, vec![vec![0, 2, 6, 7]]);
        assert_eq!(indep.cells, vec![vec![1, 3, 4, 5]]);
        // Flags that do not cover the outcomes add nothing.
        assert_eq!(groups_with(&o, Some(&flags[..3])), groups(&o));
        let rows = paired_rows(
            &o,
            &o,
            [Hash::of_blob(b"a"), Hash::of_blob(b"b")],
            Some(&flags),
        );
        let r = rows
            .iter()
            .find(|r| r.subset.as_deref() == Some("coord"))
            .unwrap();
        assert_eq!(r.instances, 4);
        assert_eq!(r.valid.a, 50.0);
    }

    #[test]
    fn mcnemar_matches_the_binomial() {
        assert_eq!(mcnemar_p(0, 0), 1.0);
        assert_eq!(mcnemar_p(3, 3), 1.0);
        // 2 * 2^-10
        assert_eq!(mcnemar_p(0, 10), 0.001953125);
        // 2 * (1 + 10 + 45) / 1024
        assert!((mcnemar_p(8, 2) - 112.0 / 1024.0).abs() < 1e-15);
        // Symmetric, and the log branch agrees with the direct one where both apply.
        assert_eq!(mcnemar_p(2, 8), mcnemar_p(8, 2));
        let big = mcnemar_p(480, 540);
        assert!(big > 0.0 && big < 1.0, "{big}");
    }

    #[test]
    fn groups_follow_cells_and_subsets() {
        let mut o = outcomes(&[(3, 3, 4), (3, 4, 4), (4, 4, 4)], vec![0; 12]);
        o.wait_ratios = vec![0.25f64.to_bits(), 0.75f64.to_bits()];
        let g = groups(&o);
        let names: Vec<String> = g.iter().map(Group::label).collect();
        assert_eq!(
            names,
            [
                "test 3 agents",
                "test 3 agents wait0.25",
                "test 3 agents wait0.75",
                "test 4 agents",
                "test 4 agents wait0.25",
                "test 4 agents wait0.75"
            ]
        );
        assert_eq!(g[0].cells, [vec![0, 1, 2, 3], vec![4, 5, 6, 7]]);
        assert_eq!(g[2].cells, [vec![2, 3], vec![6, 7]]);
        assert_eq!(g[4].cells, [vec![8, 9]]);
    }

    #[test]
    fn sums_are_means_over_cells() {
        // Cell 1: A 1/2, B 2/2; cell 2: A 0/4, B 1/4 -> A 25, B 62.5.
        let a = outcomes(&[(3, 3, 2), (3, 4, 4)], vec![1, 0, 0, 0, 0, 0]);
        let b = outcomes(&[(3, 3, 2), (3, 4, 4)], vec![2, 1, 0, 2, 0, 0]);
        let rows = paired_rows(&a, &b, [Hash::of_blob(b"a"), Hash::of_blob(b"b")], None);
        assert_eq!(rows.len(), 1);
        let v = rows[0].valid;
        assert_eq!((v.a, v.b, v.diff), (25.0, 62.5, 37.5));
        assert_eq!((v.mcnemar.a_only, v.mcnemar.b_only), (0, 2));
        let o = rows[0].optimal;
        assert_eq!((o.a, o.b), (0.0, 37.5));
        assert!(v.diff_ci95.contains(v.diff) && v.a_ci95.contains(v.a));
    }
}
