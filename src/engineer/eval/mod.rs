//! `ledger engineer eval`: environment engineers measured on their own, without a
//! training run. A held-out set of contexts, each with the answer its evidence calls
//! for, is shown to every engineer; each decision is scored on what an engineer
//! controls: does the reply parse, is the proposal legal, does the rationale cite only
//! what the context says, do the edits land on the sizes the evidence names as weak and
//! leave the working ones alone, and does each edit answer the failure that dominates
//! its size.
//!
//! Contexts: [`synthetic`] draws them from a seed with known ground truth (each size
//! either working or weak with one dominant failure kind), and [`ledger_contexts`]
//! reads every decision's recorded context from a ledger (its truth derived by the same
//! rules from its evidence).
//!
//! Two parts: the benchmark runner here (contexts, running engineers on them, paired
//! differences, the report) and its [`rubric`] (the rules a decision is scored by).
pub mod rubric;

pub use rubric::{
    answer, applied, claims, score, summarise, truth, Claim, ContextScore, Field, Summary, Truth,
    RULES_VERSION, WEAK_BELOW,
};

use super::{Decision, EngineerContext};
use crate::env::config::{max_hole_ratio, SizeConfig};
use crate::env::table::{CellCounts, ResultTable};
use crate::env::{FailureKind, GeneratorConfig};
use crate::record::event::{EventBody, FailureBreakdown, SizeFailures};
use crate::seed::Seed;
use rand::Rng as _;
use schemars::JsonSchema;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// The reference probe: instances per size of a configuration, and plans per instance.
pub const PROBE_PER_SIZE: usize = 6;
pub const PROBE_SAMPLES: usize = 4;

/// One context of the benchmark.
#[derive(Clone, Debug)]
pub struct EvalContext {
    /// `synthetic/7`, or `LEDGER branch@stageN`.
    pub id: String,
    pub context: EngineerContext,
}

// ---- contexts ----

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// `n` contexts drawn from `seed`: 2 agents, sizes 3 up to 5..=10, each size working
/// (valid 80-100%) or, two times in three, weak (valid 5-75%) with one failure kind
/// making 60-90% of its failures; suites of 20, 48 or 150 items per size; a current
/// configuration of legal ratios; up to two history entries.
pub fn synthetic(seed: Seed, n: usize) -> Vec<EvalContext> {
    const KINDS: [FailureKind; 5] = [
        FailureKind::VertexConflict,
        FailureKind::EdgeConflict,
        FailureKind::Hole,
        FailureKind::GoalNotReached,
        FailureKind::ParseError,
    ];
    (0..n)
        .map(|i| {
            let mut rng = seed.child("engineer-eval context", i as u64).rng();
            let hi = rng.random_range(5..=10usize);
            let total = [20u32, 48, 150][rng.random_range(0..3usize)];
            let mut current = GeneratorConfig {
                agents: 2,
                sizes: BTreeMap::new(),
            };
            let mut validation = ResultTable::default();
            let mut failures = FailureBreakdown {
                suite: "val".into(),
                sizes: vec![],
            };
            let sizes = hi - 2;
            for size in 3..=hi {
                current.sizes.insert(
                    size,
                    SizeConfig {
                        data_ratio: round2(1.0 / sizes as f64),
                        hole_ratio: round2(
                            rng.random_range(0.05..=max_hole_ratio(size, 2).min(0.3)),
                        ),
                        wait_ratio: round2(rng.random_range(0.0..=0.6)),
                    },
                );
                let weak = rng.random_range(0..3u32) > 0;
                let valid_rate = if weak {
                    rng.random_range(0.05..0.75)
                } else {
                    rng.random_range(0.8..=1.0)
                };
                let valid = ((valid_rate * total as f64).round() as u32).min(total);
                let failed = total - valid;
                let optimal = (valid as f64 * rng.random_range(0.6..=1.0)).round() as u32;
                validation.cells.insert(
                    (2, size),
                    CellCounts {
                        total,
                        valid,
                        optimal,
                    },
                );
                let mut counts: BTreeMap<FailureKind, u32> = BTreeMap::new();
                if failed > 0 {
                    let dominant = KINDS[rng.random_range(0..KINDS.len())];
                    // Rounded up, so the rest (at most 40%) stays below it whoever gets it.
                    let main = if weak {
                        ((failed as f64 * rng.random_range(0.6..=0.9)).ceil() as u32).max(1)
                    } else {
                        (failed as f64 * rng.random_range(0.0..=1.0)).round() as u32
                    };
                    *counts.entry(dominant).or_default() += main;
                    let mut rest = failed - main.min(failed);
                    while rest > 0 {
                        let k = KINDS[rng.random_range(0..KINDS.len())];
                        let c = rng.random_range(1..=rest);
                        *counts.entry(k).or_default() += c;
                        rest -= c;
                    }
                }
                let mut sorted: Vec<(FailureKind, u32)> =
                    counts.into_iter().filter(|c| c.1 > 0).collect();
                sorted.sort_by_key(|c| FailureKind::ALL.iter().position(|k| *k == c.0));
                failures.sizes.push(SizeFailures {
                    size: size as u32,
                    total,
                    counts: sorted,
                    examples: vec![],
                });
            }
            let stage = rng.random_range(1..=4u32);
            EvalContext {
                id: format!("synthetic/{i}"),
                context: EngineerContext {
                    stage,
                    current,
                    validation,
                    failures,
                    history: vec![],
                    training: Default::default(),
                    modules: Default::default(),
                    max_size: 10,
                },
            }
        })
        .collect()
}

/// Every engineer decision's recorded context in a ledger (each context once, however
/// many branches share it), named `LABEL branch@stageN`, in branch-name order.
pub fn ledger_contexts(
    ledger: &crate::ledger::Ledger,
    label: &str,
) -> Result<Vec<EvalContext>, crate::ledger::LedgerError> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for (branch, head) in ledger.branches()? {
        for (_, ev) in ledger.history_to(&head)? {
            let EventBody::EngineerDecision(d) = ev.body else {
                continue;
            };
            if !seen.insert(d.context) {
                continue;
            }
            let ctx: EngineerContext =
                crate::record::codec::decode(&ledger.blob(&d.context)?, "engineer context")
                    .map_err(|e| crate::ledger::LedgerError::Corrupt {
                        what: format!("engineer context blob {}", d.context.short()),
                        problem: e.to_string(),
                    })?;
            out.push(EvalContext {
                id: format!("{label} {branch}@stage{}", ev.stage),
                context: ctx,
            });
        }
    }
    Ok(out)
}

#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
pub struct EngineerEval {
    pub engineer: String,
    pub summary: Summary,
    pub rows: Vec<ContextScore>,
}

/// A metric of an engineer against the first one, paired over the contexts where both
/// are defined: mean difference in points with a 95% bootstrap interval (10,000
/// resamples of contexts, seeded).
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
pub struct PairedScore {
    pub engineer: String,
    pub against: String,
    pub metric: String,
    pub pairs: usize,
    pub diff: f64,
    pub low: f64,
    pub high: f64,
}

/// `ledger engineer eval --json`.
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
pub struct EvalReport {
    pub rules: String,
    pub seed: u64,
    /// Where the contexts came from: `synthetic (N)` and each ledger read.
    pub sources: Vec<String>,
    pub engineers: Vec<EngineerEval>,
    pub paired: Vec<PairedScore>,
}

/// The reference probe: (context index, configuration) -> (mean p(1-p), mean p).
/// Every engineer's configuration for context i is probed with context i's seed
/// (common random numbers), so paired differences are not sampling noise.
pub type ReferenceProbe<'a> = &'a mut dyn FnMut(usize, &GeneratorConfig) -> Option<(f64, f64)>;

/// Run an engineer on every context, scoring each decision: `decide(i, ctx)` is its
/// decision on context `i` (engineers that sample take the context's own seed from
/// `i`, so a context's decision does not depend on which contexts came before).
pub fn evaluate(
    label: &str,
    contexts: &[EvalContext],
    decide: &mut dyn FnMut(usize, &EngineerContext) -> Decision,
    mut reference: Option<ReferenceProbe<'_>>,
) -> EngineerEval {
    let rows = contexts
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let ctx = c.context.clone().without_switched_off_modules();
            let d = decide(i, &ctx);
            let mut row = score(&c.id, &ctx, &d);
            if let Some(probe) = reference.as_mut() {
                if let Some((l, p)) = probe(i, &applied(&ctx, &d).0) {
                    row.learnability = Some(4.0 * l);
                    row.pass_rate = Some(p);
                }
            }
            row
        })
        .collect::<Vec<_>>();
    EngineerEval {
        engineer: label.to_string(),
        summary: summarise(&rows),
        rows,
    }
}

/// Every engineer after the first against the first, per metric.
pub fn paired(evals: &[EngineerEval], seed: Seed) -> Vec<PairedScore> {
    type Get = fn(&ContextScore) -> Option<f64>;
    let metrics: [(&str, Get); 7] = [
        ("parse", |r| Some(r.parsed as u8 as f64)),
        ("legal", |r| Some(r.legal as u8 as f64)),
        ("grounded", |r| {
            (!r.claims.is_empty()).then_some(r.grounded as u8 as f64)
        }),
        ("targeting", |r| r.targeting),
        ("preserve", |r| r.preserve),
        ("direction", |r| r.direction),
        ("learnability", |r| r.learnability),
    ];
    let Some(first) = evals.first() else {
        return vec![];
    };
    let mut out = Vec::new();
    for e in &evals[1..] {
        for (name, get) in metrics {
            let d: Vec<f64> = first
                .rows
                .iter()
                .zip(&e.rows)
                .filter_map(|(a, b)| Some(100.0 * (get(b)? - get(a)?)))
                .collect();
            if d.is_empty() {
                continue;
            }
            let n = d.len();
            let m = d.iter().sum::<f64>() / n as f64;
            let mut rng = seed
                .child(&format!("paired {} {name}", e.engineer), 0)
                .rng();
            let mut means: Vec<f64> = (0..10_000)
                .map(|_| (0..n).map(|_| d[rng.random_range(0..n)]).sum::<f64>() / n as f64)
                .collect();
            means.sort_by(f64::total_cmp);
            out.push(PairedScore {
                engineer: e.engineer.clone(),
                against: first.engineer.clone(),
                metric: name.to_string(),
                pairs: n,
                diff: m,
                low: means[249],
                high: means[9_749],
            });
        }
    }
    out
}

/// The report as a table (one row per engineer, the paper's style), then the paired rows.
pub fn render(r: &EvalReport) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "Engineer evaluation ({}; contexts: {}), % of contexts where each is defined \
         (grounded: of the n rationales that claim something; –: never defined):",
        r.rules,
        r.sources.join(", ")
    );
    let _ = writeln!(
        s,
        "{:<28} {:>8} {:>6} {:>6} {:>13} {:>10} {:>9} {:>10} {:>13}",
        "engineer",
        "contexts",
        "parse",
        "legal",
        "grounded (n)",
        "targeting",
        "preserve",
        "direction",
        "learnability"
    );
    let opt = |x: Option<f64>| x.map_or("–".to_string(), |v| format!("{v:.1}"));
    for e in &r.engineers {
        let m = &e.summary;
        let _ = writeln!(
            s,
            "{:<28} {:>8} {:>6.1} {:>6.1} {:>13} {:>10} {:>9} {:>10} {:>13}",
            e.engineer,
            m.contexts,
            m.parse_pct,
            m.legal_pct,
            format!("{} ({})", opt(m.grounded_pct), m.claiming_contexts),
            opt(m.targeting_pct),
            opt(m.preserve_pct),
            opt(m.direction_pct),
            opt(m.learnability_pct)
        );
    }
    if !r.paired.is_empty() {
        let _ = writeln!(
            s,
            "\nPaired over contexts, points against {} [95% bootstrap]:",
            r.paired[0].against
        );
        for p in &r.paired {
            let _ = writeln!(
                s,
                "  {:<26} {:<10} {:+7.1} [{:+.1}, {:+.1}] over {} contexts",
                p.engineer, p.metric, p.diff, p.low, p.high, p.pairs
            );
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::rubric::failures_of;
    use super::*;

    #[test]
    fn synthetic_contexts_are_seeded_and_their_truth_is_what_was_drawn() {
        let a = synthetic(Seed::root(5), 40);
        let b = synthetic(Seed::root(5), 40);
        assert_eq!(
            a.iter()
                .map(|c| crate::record::codec::encode(&c.context))
                .collect::<Vec<_>>(),
            b.iter()
                .map(|c| crate::record::codec::encode(&c.context))
                .collect::<Vec<_>>()
        );
        let (mut weak, mut working) = (0, 0);
        for c in &a {
            let t = truth(&c.context);
            weak += t.weak.len();
            working += t.working.len();
            for (n, k) in &t.weak {
                let s = failures_of(&c.context, *n).unwrap();
                let failed: u32 = s.counts.iter().map(|x| x.1).sum();
                assert!(
                    failed > 0 && k.is_some(),
                    "{}: weak size {n} has failures",
                    c.id
                );
                let top = s.counts.iter().map(|x| x.1).max().unwrap();
                assert_eq!(
                    s.counts.iter().filter(|x| x.1 == top).count(),
                    1,
                    "{}: one dominant kind",
                    c.id
                );
            }
            // The context renders and its evidence is self-consistent.
            for text in crate::engineer::text::TextRevision::all() {
                let t = crate::engineer::text::render(&c.context, &Default::default(), text);
                assert!(
                    t.contains("Failure breakdown") || text.breakdown_last,
                    "{t}"
                );
            }
        }
        assert!(
            weak > working && working > 0,
            "{weak} weak, {working} working"
        );
    }
}
