//! Coordination rows of recorded evaluations: every evaluated stage's valid and optimal %
//! on the suite items that need coordination and on the rest, per agent count, beside
//! the independent-shortest-paths baseline on the same items (the one definition of
//! [`crate::env::coordination`]). The items come from stage 0's `instances_generated`
//! events (`val`, `test`), the results from each stage's `evaluation_outcomes`; nothing
//! new is recorded, so every ledger with outcomes has these rows.
use crate::env::coordination::{baseline_outcome, split, CoordinationRow};
use crate::env::{CostMetric, Solved};
use crate::ledger::{BranchState, EventBody, Hash, Ledger, LedgerError};
use crate::record::event::{EvaluationOutcomes, OUTCOME_OPTIMAL, OUTCOME_VALID};
use std::collections::BTreeMap;

/// One stage's rows on one suite.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct StageCoordination {
    pub stage: u32,
    /// `val` or `test`.
    pub suite: String,
    /// The `evaluation_outcomes` event the rows were counted from.
    pub event: Hash,
    pub rows: Vec<CoordinationRow>,
}

/// One suite as a branch's stage 0 recorded it: its items in suite order, and the
/// independent-shortest-paths baseline's (valid, optimal) on each, computed once here
/// rather than again for every evaluated stage.
#[derive(Clone, Debug, Default)]
pub struct RecordedSuite {
    pub items: Vec<Solved>,
    /// Each item's blob hash, in suite order.
    pub hashes: Vec<Hash>,
    pub baseline: Vec<(bool, bool)>,
}

/// The suites (`val`, `test`) of the branch whose head is `head`, decoded from the
/// blobs its stage 0 recorded, the baseline scored by the cost its plan calls optimal
/// (none for a ledger whose stage 0 recorded none).
pub fn suite_items(
    ledger: &Ledger,
    head: &Hash,
) -> Result<BTreeMap<String, RecordedSuite>, LedgerError> {
    let mut out = BTreeMap::new();
    let mut metric = CostMetric::default();
    for (_, ev) in ledger.history_to(head)? {
        if ev.stage > 0 {
            break;
        }
        match ev.body {
            // Genesis comes first, so the metric is known before any suite.
            EventBody::Genesis(g) => {
                if let Ok(plan) = crate::plan::LedgerPlan::parse(&ledger.blob(&g.plan_blob)?) {
                    metric = plan.train.metric;
                }
            }
            EventBody::InstancesGenerated(g) if g.split == "val" || g.split == "test" => {
                let items = g
                    .instances
                    .iter()
                    .map(|h| {
                        let bytes = ledger.blob(h)?;
                        crate::record::codec::decode::<Solved>(&bytes, "suite item").map_err(|e| {
                            LedgerError::Corrupt {
                                what: format!("suite item blob {}", h.short()),
                                problem: e.to_string(),
                            }
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                let baseline = items
                    .iter()
                    .map(|it| baseline_outcome(it, metric))
                    .collect();
                out.insert(
                    g.split,
                    RecordedSuite {
                        items,
                        hashes: g.instances.clone(),
                        baseline,
                    },
                );
            }
            _ => {}
        }
    }
    Ok(out)
}

/// The rows of one outcomes event over its suite's items; None when the layout does
/// not match the items (a suite recorded differently).
pub fn rows_of(suite: &RecordedSuite, o: &EvaluationOutcomes) -> Option<Vec<CoordinationRow>> {
    if !o.is_well_formed() || o.outcomes.len() != suite.items.len() {
        return None;
    }
    let mut keyed = Vec::with_capacity(suite.items.len());
    let mut it = suite.items.iter();
    for &(agents, size, n) in &o.cells {
        for _ in 0..n {
            let s = it.next()?;
            if s.instance.size() != size as usize || s.instance.agents() != agents as usize {
                return None;
            }
            keyed.push((agents, s));
        }
    }
    let results: Vec<(bool, bool)> = o
        .outcomes
        .iter()
        .map(|&b| (b >= OUTCOME_VALID, b == OUTCOME_OPTIMAL))
        .collect();
    Some(split(&keyed, &results, &suite.baseline))
}

/// Every evaluated stage of `state` with outcomes: its rows per suite, by stage.
pub fn branch_rows(
    ledger: &Ledger,
    state: &BranchState,
    suites: &BTreeMap<String, RecordedSuite>,
) -> Result<Vec<StageCoordination>, LedgerError> {
    let mut out = Vec::new();
    for st in &state.stages {
        for (suite, h) in &st.outcome_events {
            let Some(recorded) = suites.get(suite) else {
                continue;
            };
            if let EventBody::EvaluationOutcomes(o) = ledger.event(h)?.body {
                if let Some(rows) = rows_of(recorded, &o) {
                    out.push(StageCoordination {
                        stage: st.stage,
                        suite: suite.clone(),
                        event: *h,
                        rows,
                    });
                }
            }
        }
    }
    Ok(out)
}

/// Per branch and suite, the coordination half of each agent count per stage:
/// `valid % (n items)`, then the rest; with the baseline.
pub fn render(branches: &[(String, Vec<StageCoordination>)]) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    if branches.iter().all(|(_, r)| r.is_empty()) {
        return s;
    }
    let _ = writeln!(
        s,
        "Items that need coordination (coord) and the rest (indep), valid % / optimal % per stage; \
         baseline: independent shortest paths on the same items"
    );
    for (branch, rows) in branches {
        let _ = writeln!(s, "  {branch}:");
        for sc in rows {
            let cells: Vec<String> = sc
                .rows
                .iter()
                .map(|r| {
                    format!(
                        "{}a {} {:.1}/{:.1} (n {}, base {:.1})",
                        r.agents,
                        if r.needs_coordination {
                            "coord"
                        } else {
                            "indep"
                        },
                        r.valid_pct,
                        r.optimal_pct,
                        r.items,
                        r.baseline_valid_pct
                    )
                })
                .collect();
            let _ = writeln!(
                s,
                "    stage {} {:<4} {}",
                sc.stage,
                sc.suite,
                cells.join("  ")
            );
        }
    }
    s
}
