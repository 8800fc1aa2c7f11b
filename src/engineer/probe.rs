//! `current` and `base`: a policy checkpoint acts as the engineer. It builds candidate
//! configurations by local edits of the current one (data, hole and wait ratios of the
//! sizes the failure breakdown implicates, keeping the sizes that work), probes each
//! candidate by sampling its own plans on instances drawn from it, and picks the
//! candidate with the highest learnability, mean p(1-p) over probe instances where p
//! is the checkpoint's pass rate (as in sampling-for-learnability curricula). `current`
//! uses the latest checkpoint; `base` the stage-0 weights. Everything is drawn from the
//! seed tree, so a decision is reproducible.
use super::{Decision, Engineer, EngineerContext};
use crate::env::config::{max_hole_ratio, SizeProposal};
use crate::env::{generate, project, simulate, Budget, ConfigProposal, GeneratorConfig};
use crate::seed::Seed;
use crate::train::policy::Policy;

/// Probe budget: instances per candidate and samples per instance.
pub const PROBE_INSTANCES: usize = 24;
pub const PROBE_SAMPLES: usize = 4;
/// How many implicated sizes get candidate edits.
const FOCUS_SIZES: usize = 2;
/// A size at or above this validation valid rate is kept as it is.
const WORKING: f64 = 80.0;

pub struct Probe {
    pub name: String,
    pub policy: Box<dyn Policy>,
    pub seed: Seed,
}

/// One candidate: a label for the rationale and the proposal that makes it.
struct Candidate {
    label: String,
    proposal: ConfigProposal,
}

fn edit(n: usize, f: impl FnOnce(&mut SizeProposal)) -> ConfigProposal {
    let mut sp = SizeProposal::default();
    f(&mut sp);
    let mut p = ConfigProposal::default();
    p.sizes.insert(n.to_string(), sp);
    p
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// The sizes the evidence implicates: most failures first, working sizes excluded.
fn implicated(ctx: &EngineerContext) -> Vec<(usize, u32, u32)> {
    let mut v: Vec<(usize, u32, u32)> = ctx
        .current
        .sizes
        .keys()
        .filter_map(|&n| {
            let cell = ctx.validation.cells.get(&(2, n));
            let valid = cell.map(|c| c.valid_rate()).unwrap_or(0.0);
            if valid >= WORKING {
                return None;
            }
            let failed = ctx
                .failures
                .sizes
                .iter()
                .find(|s| s.size as usize == n)
                .map(|s| (s.counts.iter().map(|c| c.1).sum::<u32>(), s.total))
                .unwrap_or((0, 0));
            Some((n, failed.0, failed.1))
        })
        .collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    v.truncate(FOCUS_SIZES);
    v
}

fn candidates(ctx: &EngineerContext, focus: &[(usize, u32, u32)]) -> Vec<Candidate> {
    let mut out = vec![Candidate {
        label: "keep the current configuration".into(),
        proposal: ConfigProposal::default(),
    }];
    let k = ctx.current.agents;
    for &(n, _, _) in focus {
        let c = ctx.current.sizes[&n];
        let hmax = max_hole_ratio(n, k);
        let mut push =
            |label: String, p: ConfigProposal| out.push(Candidate { label, proposal: p });
        push(
            format!("{n}x{n}: data x1.5"),
            edit(n, |s| {
                s.data_ratio = Some(round3((c.data_ratio * 1.5).min(1.0)))
            }),
        );
        push(
            format!("{n}x{n}: data x0.67"),
            edit(n, |s| s.data_ratio = Some(round3(c.data_ratio / 1.5))),
        );
        push(
            format!("{n}x{n}: holes -0.05"),
            edit(n, |s| {
                s.hole_ratio = Some(round3((c.hole_ratio - 0.05).max(0.0)))
            }),
        );
        push(
            format!("{n}x{n}: holes +0.05"),
            edit(n, |s| {
                s.hole_ratio = Some(round3((c.hole_ratio + 0.05).min(hmax)))
            }),
        );
        push(
            format!("{n}x{n}: wait -0.15"),
            edit(n, |s| {
                s.wait_ratio = Some(round3((c.wait_ratio - 0.15).max(0.0)))
            }),
        );
        push(
            format!("{n}x{n}: wait +0.15"),
            edit(n, |s| {
                s.wait_ratio = Some(round3((c.wait_ratio + 0.15).min(1.0)))
            }),
        );
    }
    out
}

impl Probe {
    /// Mean learnability p(1-p) and mean pass rate of the policy on instances drawn
    /// from `config`.
    fn probe(&self, config: &GeneratorConfig) -> Option<(f64, f64)> {
        // Common random numbers: every candidate is probed with the same seeds, so
        // candidates that share a size see the same instances and sampling noise
        // largely cancels out of the comparison.
        let seed = self.seed.child("probe", 0);
        let items = generate(
            config,
            PROBE_INSTANCES,
            seed.child("instances", 0),
            Budget::default(),
        )
        .ok()?;
        let instances: Vec<_> = items.iter().map(|i| i.instance.clone()).collect();
        let rollouts =
            self.policy
                .sample(&instances, PROBE_SAMPLES, false, seed.child("rollouts", 0));
        let mut pass = vec![0u32; instances.len()];
        for r in &rollouts {
            if let Ok(plan) = &r.plan {
                pass[r.instance] += simulate(&instances[r.instance], plan).valid as u32;
            }
        }
        let ps: Vec<f64> = pass
            .iter()
            .map(|&x| x as f64 / PROBE_SAMPLES as f64)
            .collect();
        let n = ps.len() as f64;
        Some((
            ps.iter().map(|p| p * (1.0 - p)).sum::<f64>() / n,
            ps.iter().sum::<f64>() / n,
        ))
    }
}

impl Engineer for Probe {
    fn name(&self) -> &str {
        &self.name
    }

    fn decide(&mut self, ctx: &EngineerContext) -> Decision {
        let focus = implicated(ctx);
        let mut evidence: Vec<String> = focus
            .iter()
            .map(|&(n, failed, total)| {
                format!("{n}x{n}: {failed} of {total} validation plans failed")
            })
            .collect();
        if evidence.is_empty() {
            evidence.push(format!("every size is at or above {WORKING}% valid"));
        }
        let mut scored = Vec::new();
        for cand in candidates(ctx, &focus) {
            let (cfg, _) = project(&ctx.current, &cand.proposal);
            let Ok(cfg) = cfg else { continue };
            if let Some((learn, pass)) = self.probe(&cfg) {
                scored.push((learn, pass, cand));
            }
        }
        // Highest learnability wins; ties keep the earlier (more conservative) candidate.
        let best = scored
            .iter()
            .enumerate()
            .fold(None::<usize>, |best, (i, s)| match best {
                Some(b) if scored[b].0 >= s.0 => Some(b),
                _ => Some(i),
            });
        let Some(best) = best else {
            return Decision {
                error: Some("no candidate could be probed".into()),
                ..Decision::default()
            };
        };
        let probes: Vec<String> = scored
            .iter()
            .map(|(l, p, c)| format!("{} (pass {:.2}, learnability {:.3})", c.label, p, l))
            .collect();
        let (learn, pass, chosen) = &scored[best];
        let rationale = format!(
            "{} checkpoint as engineer. Evidence: {}. Probed {} candidates with {} instances x {} samples each: {}. \
             Chose \"{}\": the highest learnability {:.3} (pass rate {:.2}); sizes not implicated are kept.",
            self.name,
            evidence.join("; "),
            scored.len(),
            PROBE_INSTANCES,
            PROBE_SAMPLES,
            probes.join("; "),
            chosen.label,
            learn,
            pass
        );
        Decision {
            proposed_text: Some(serde_json::to_string(&chosen.proposal).expect("serialises")),
            proposal: Some(chosen.proposal.clone()),
            rationale,
            ..Decision::default()
        }
    }
}
