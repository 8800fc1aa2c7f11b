//! The teacher of a scratch base model's engineer answers.
//!
//! A scratch `lm` model has never seen an engineer prompt, so stage 0 pretrains it on
//! two kinds of example: MAPF prompts -> optimal plans, and engineer prompts -> JSON
//! proposals. The second kind comes from here: varied synthetic evidence (validation
//! results and failure breakdowns over sizes 3..10, configurations, history) rendered
//! through the real prompt builder, answered by a teacher that is deliberately *not*
//! any built-in engineer (else `base` would collapse into it): it picks one to three of
//! the sizes the evidence names as failing most, applies a randomly varied legal edit
//! to each (more or less data, fewer or more holes, more or less coordination, adding
//! a missing size, dropping a mastered one), and writes a short rationale that cites
//! the numbers it acted on. Everything is drawn from the seed tree.
use super::context::{EngineerContext, HistoryEntry, TrainingDetails};
use crate::env::config::max_hole_ratio;
use crate::env::table::{CellCounts, ResultTable};
use crate::env::{FailureKind, GeneratorConfig, SizeConfig};
use crate::ledger::event::{FailureBreakdown, SizeFailures};
use crate::ledger::plan::ContextModules;
use crate::seed::Seed;
use rand::Rng;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Map sizes the teacher's contexts cover (the paper's protocol).
pub const SIZES: std::ops::RangeInclusive<usize> = 3..=10;

fn r2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// One synthetic engineer context for designing `stage`.
pub fn context(seed: Seed, modules: &ContextModules, stage: u32) -> EngineerContext {
    let mut rng = seed.rng();
    let all: Vec<usize> = SIZES.collect();
    // The current configuration: most often every size, sometimes a contiguous subset.
    let lo = if rng.random_bool(0.7) {
        3
    } else {
        rng.random_range(3..=6)
    };
    let hi = if rng.random_bool(0.7) {
        10
    } else {
        rng.random_range(lo + 1..=10)
    };
    let mut sizes = BTreeMap::new();
    for n in lo..=hi {
        sizes.insert(
            n,
            SizeConfig {
                data_ratio: r2(rng.random_range(0.05..0.3)),
                hole_ratio: r2(rng.random_range(0.0..0.3f64).min(max_hole_ratio(n, 2))),
                wait_ratio: r2(rng.random_range(0.0..0.6)),
            },
        );
    }
    let current = GeneratorConfig { agents: 2, sizes };
    // Validation: success falls with size, with a random skill level and noise.
    let skill = rng.random_range(0.2..1.0f64);
    let total = 20u32;
    let mut validation = ResultTable::default();
    let mut failures = Vec::new();
    for &n in &all {
        let p =
            (skill * (1.15 - (n as f64 - 3.0) / 7.0) + rng.random_range(-0.1..0.1)).clamp(0.0, 1.0);
        let valid = (p * total as f64).round() as u32;
        let optimal = (valid as f64 * rng.random_range(0.6..1.0)).round() as u32;
        validation.cells.insert(
            (2, n),
            CellCounts {
                total,
                valid,
                optimal,
            },
        );
        let failed = total - valid;
        let mut counts: BTreeMap<FailureKind, u32> = BTreeMap::new();
        let kinds = [
            FailureKind::GoalNotReached,
            FailureKind::VertexConflict,
            FailureKind::EdgeConflict,
            FailureKind::Hole,
            FailureKind::IllegalMove,
            FailureKind::ParseError,
        ];
        for _ in 0..failed {
            // Larger maps fail more by not reaching the goal; small ones by conflicts.
            let k = if rng.random_bool(((n as f64 - 2.0) / 10.0).min(0.8)) {
                FailureKind::GoalNotReached
            } else {
                kinds[rng.random_range(1..kinds.len())]
            };
            *counts.entry(k).or_default() += 1;
        }
        failures.push(SizeFailures {
            size: n as u32,
            total,
            counts: counts.into_iter().collect(),
            examples: vec![],
        });
    }
    let history = (1..stage)
        .map(|s| HistoryEntry {
            stage: s,
            engineer: "current".into(),
            config: current.clone(),
            validation: validation.clone(),
        })
        .collect();
    EngineerContext {
        stage,
        current,
        validation,
        failures: FailureBreakdown {
            suite: "val".into(),
            sizes: failures,
        },
        history,
        training: TrainingDetails {
            steps: 100,
            train_valid_rate: r2(skill * 0.8),
            train_optimal_rate: r2(skill * 0.6),
            last_loss: r2(rng.random_range(-0.2..0.2)),
            last_grad_norm: r2(rng.random_range(0.1..2.0)),
        },
        modules: modules.clone(),
        max_size: *SIZES.end(),
    }
}

/// The teacher's reply to a context: a fenced JSON proposal and a short rationale.
pub fn answer(ctx: &EngineerContext, seed: Seed) -> String {
    let mut rng = seed.rng();
    // Sizes by failures, most first (ties: the larger size first).
    let mut by_fail: Vec<(u32, usize, String)> = ctx
        .failures
        .sizes
        .iter()
        .map(|s| {
            let failed: u32 = s.counts.iter().map(|c| c.1).sum();
            let top = s
                .counts
                .iter()
                .max_by_key(|c| c.1)
                .map(|c| format!("{} {}", c.0.name(), c.1))
                .unwrap_or_default();
            (failed, s.size as usize, top)
        })
        .collect();
    by_fail.sort_by(|a, b| b.0.cmp(&a.0).then(b.1.cmp(&a.1)));
    let picks = rng.random_range(1..=3usize).min(by_fail.len());
    let mut edits: BTreeMap<usize, Vec<(&str, f64)>> = BTreeMap::new();
    let mut why = Vec::new();
    for (failed, n, top) in by_fail.iter().take(picks) {
        let total = ctx
            .failures
            .sizes
            .iter()
            .find(|s| s.size as usize == *n)
            .map_or(0, |s| s.total);
        let evidence = format!("{n}x{n}: {failed} of {total} failed ({top})");
        match ctx.current.sizes.get(n) {
            None => {
                let d = r2(rng.random_range(0.1..0.3));
                edits.entry(*n).or_default().push(("data_ratio", d));
                why.push(format!("{evidence}, not in training: add it with data {d}"));
            }
            Some(c) => match rng.random_range(0..4) {
                0 => {
                    let d = r2((c.data_ratio * rng.random_range(1.3..2.0)).min(1.0));
                    edits.entry(*n).or_default().push(("data_ratio", d));
                    why.push(format!("{evidence}: more data ({} -> {d})", c.data_ratio));
                }
                1 => {
                    let h = r2((c.hole_ratio - rng.random_range(0.03..0.1)).max(0.0));
                    edits.entry(*n).or_default().push(("hole_ratio", h));
                    why.push(format!("{evidence}: fewer holes ({} -> {h})", c.hole_ratio));
                }
                2 => {
                    let w = r2((c.wait_ratio + rng.random_range(0.1..0.3)).min(1.0));
                    edits.entry(*n).or_default().push(("wait_ratio", w));
                    why.push(format!(
                        "{evidence}: more coordination ({} -> {w})",
                        c.wait_ratio
                    ));
                }
                _ => {
                    let d = r2((c.data_ratio * rng.random_range(1.2..1.6)).min(1.0));
                    let h = r2((c.hole_ratio - rng.random_range(0.02..0.06)).max(0.0));
                    edits
                        .entry(*n)
                        .or_default()
                        .extend([("data_ratio", d), ("hole_ratio", h)]);
                    why.push(format!("{evidence}: more data and fewer holes"));
                }
            },
        }
    }
    // Sometimes drop a size that is already solved.
    if rng.random_bool(0.3) {
        if let Some((n, _)) = ctx.validation.cells.iter().find(|(k, c)| {
            c.valid == c.total && ctx.current.sizes.contains_key(&k.1) && !edits.contains_key(&k.1)
        }) {
            edits.entry(n.1).or_default().push(("data_ratio", 0.0));
            why.push(format!(
                "{0}x{0}: every validation plan valid: drop it",
                n.1
            ));
        }
    }
    let mut json = String::from("{\"sizes\": {");
    for (i, (n, fields)) in edits.iter().enumerate() {
        let _ = write!(json, "{}\"{n}\": {{", if i > 0 { ", " } else { "" });
        for (j, (k, v)) in fields.iter().enumerate() {
            let _ = write!(json, "{}\"{k}\": {v}", if j > 0 { ", " } else { "" });
        }
        json.push('}');
    }
    json.push_str("}}");
    format!("```json\n{json}\n```\n{}.", why.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn teacher_answers_parse_and_cite_the_evidence() {
        let m = ContextModules::default();
        let mut distinct = std::collections::BTreeSet::new();
        for i in 0..50 {
            let ctx = context(Seed::root(i), &m, 1 + (i % 3) as u32);
            let a = answer(&ctx, Seed::root(100 + i));
            let e = crate::engineer::llm::extract(&a).unwrap_or_else(|e| panic!("{a}: {e}"));
            assert!(!e.proposal.sizes.is_empty(), "{a}");
            assert!(
                e.rationale.contains("failed") || e.rationale.contains("drop"),
                "{a}"
            );
            distinct.insert(e.json);
        }
        assert!(
            distinct.len() > 40,
            "the teacher is not varied: {}",
            distinct.len()
        );
        assert_eq!(
            answer(&context(Seed::root(1), &m, 1), Seed::root(2)),
            answer(&context(Seed::root(1), &m, 1), Seed::root(2))
        );
    }
}
