//! Rule-based built-in engineers: `random` (domain randomisation), `heuristic` (a
//! practitioner's curriculum driven by the validation results and failure breakdown)
//! and `blind` (the benchmark's control that reads no failure kind).
use super::{Decision, Engineer, EngineerContext};
use crate::env::config::max_hole_ratio;
use crate::env::config::SizeProposal;
use crate::env::{ConfigProposal, FailureKind};
use crate::seed::Seed;
use rand::Rng as _;

/// `random`: a random legal configuration over the current sizes, from the seed tree.
pub struct Random {
    pub seed: Seed,
}

impl Engineer for Random {
    fn name(&self) -> &str {
        "random"
    }

    fn reseed(&mut self, seed: Seed) {
        self.seed = seed;
    }

    fn decide(&mut self, ctx: &EngineerContext) -> Decision {
        let mut rng = self.seed.child("random-engineer", ctx.stage as u64).rng();
        let mut p = ConfigProposal::default();
        for &n in ctx.current.sizes.keys() {
            let hmax = max_hole_ratio(n, ctx.current.agents);
            p.sizes.insert(
                n.to_string(),
                SizeProposal {
                    data_ratio: Some(round3(rng.random_range(0.05..1.0))),
                    hole_ratio: Some(round3(rng.random::<f64>() * hmax)),
                    wait_ratio: Some(round3(rng.random::<f64>())),
                },
            );
        }
        Decision {
            proposed_text: Some(serde_json::to_string(&p).expect("serialises")),
            proposal: Some(p),
            rationale: "domain randomisation: every knob drawn uniformly from its legal range"
                .into(),
            ..Decision::default()
        }
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// `heuristic`: raise difficulty where the policy is strong, ease off where a size
/// collapses, add coordination where conflicts dominate, and grow the map range when
/// every size is mastered.
pub struct Heuristic;

/// Valid rate at which a size counts as mastered, and below which it has collapsed.
const MASTERED: f64 = 80.0;
const COLLAPSED: f64 = 30.0;

impl Engineer for Heuristic {
    fn name(&self) -> &str {
        "heuristic"
    }
    fn decide(&mut self, ctx: &EngineerContext) -> Decision {
        let mut p = ConfigProposal::default();
        let mut why = Vec::new();
        let k = ctx.current.agents;
        let mut all_mastered = true;
        for (&n, c) in &ctx.current.sizes {
            let Some(cell) = ctx.validation.cells.get(&(2, n)) else {
                continue;
            };
            let v = cell.valid_rate();
            let conflicts = ctx
                .failures
                .sizes
                .iter()
                .find(|s| s.size as usize == n)
                .map(|s| {
                    let count = |k: FailureKind| {
                        s.counts
                            .iter()
                            .filter(|c| c.0 == k)
                            .map(|c| c.1)
                            .sum::<u32>()
                    };
                    let conflict =
                        count(FailureKind::VertexConflict) + count(FailureKind::EdgeConflict);
                    let total: u32 = s.counts.iter().map(|c| c.1).sum();
                    total > 0 && conflict * 2 >= total
                })
                .unwrap_or(false);
            let mut sp = SizeProposal::default();
            if v >= MASTERED {
                sp.hole_ratio = Some(round3((c.hole_ratio + 0.05).min(max_hole_ratio(n, k))));
                sp.wait_ratio = Some(round3((c.wait_ratio + 0.1).min(1.0)));
                sp.data_ratio = Some(round3(c.data_ratio * 0.8));
                why.push(format!("{n}x{n} valid {v:.0}% >= {MASTERED}%: harder (more holes and coordination), less data"));
            } else if v < COLLAPSED {
                all_mastered = false;
                sp.hole_ratio = Some(round3((c.hole_ratio - 0.05).max(0.0)));
                sp.wait_ratio = Some(round3((c.wait_ratio - 0.1).max(0.0)));
                sp.data_ratio = Some(round3((c.data_ratio * 1.3).min(1.0)));
                why.push(format!(
                    "{n}x{n} valid {v:.0}% < {COLLAPSED}%: easier and more data"
                ));
            } else {
                all_mastered = false;
                if conflicts {
                    sp.wait_ratio = Some(round3((c.wait_ratio + 0.15).min(1.0)));
                    sp.data_ratio = Some(round3((c.data_ratio * 1.1).min(1.0)));
                    why.push(format!("{n}x{n} valid {v:.0}%, conflicts dominate its failures: more coordination instances"));
                } else {
                    sp.data_ratio = Some(round3((c.data_ratio * 1.1).min(1.0)));
                    why.push(format!(
                        "{n}x{n} valid {v:.0}%: a little more data, same difficulty"
                    ));
                }
            }
            p.sizes.insert(n.to_string(), sp);
        }
        let largest = ctx.current.sizes.keys().max().copied().unwrap_or(3);
        if all_mastered && largest < 10 {
            let n = largest + 1;
            p.sizes.insert(
                n.to_string(),
                SizeProposal {
                    data_ratio: Some(0.2),
                    hole_ratio: Some(0.1),
                    wait_ratio: Some(0.2),
                },
            );
            why.push(format!("every size mastered: add {n}x{n}"));
        }
        Decision {
            proposed_text: Some(serde_json::to_string(&p).expect("serialises")),
            proposal: Some(p),
            rationale: why.join("; "),
            ..Decision::default()
        }
    }
}

/// `blind`: the rule that passes engineer-eval rules v3 without reading a failure kind,
/// written down as a control. On the two sizes with the most failures (ties: the larger
/// size) it raises data (x1.25), lowers holes (-0.05) and raises waits (+0.1) at once,
/// within the legal ranges, and cites nothing. It reads only the failed counts.
pub struct Blind;

impl Engineer for Blind {
    fn name(&self) -> &str {
        "blind"
    }
    fn decide(&mut self, ctx: &EngineerContext) -> Decision {
        let mut failed: Vec<(u32, usize)> = ctx
            .failures
            .sizes
            .iter()
            .map(|s| (s.counts.iter().map(|c| c.1).sum::<u32>(), s.size as usize))
            .filter(|(f, n)| *f > 0 && ctx.current.sizes.contains_key(n))
            .collect();
        failed.sort_by(|a, b| b.cmp(a));
        let mut p = ConfigProposal::default();
        for &(_, n) in failed.iter().take(2) {
            let c = &ctx.current.sizes[&n];
            p.sizes.insert(
                n.to_string(),
                SizeProposal {
                    data_ratio: Some(round3((c.data_ratio * 1.25).min(1.0))),
                    hole_ratio: Some(round3((c.hole_ratio - 0.05).max(0.0))),
                    wait_ratio: Some(round3((c.wait_ratio + 0.1).min(1.0))),
                },
            );
        }
        Decision {
            proposed_text: Some(serde_json::to_string(&p).expect("serialises")),
            proposal: Some(p),
            rationale: "the sizes with the most failures: more data, fewer holes, more waits"
                .into(),
            ..Decision::default()
        }
    }
}
