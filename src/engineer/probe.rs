//! `learnability`: a sampling-for-learnability baseline that works with any policy. It
//! builds candidate configurations by local edits of the current one (data, hole and
//! wait ratios of the sizes the evidence implicates, keeping the sizes that work),
//! probes each candidate by sampling the current checkpoint's own plans on instances
//! drawn from it, and picks the candidate with the highest learnability, mean p(1-p)
//! over probe instances where p is the checkpoint's pass rate (as in
//! sampling-for-learnability curricula).
//!
//! It reads the context struct, so ablations reach it: the failure breakdown decides
//! which sizes are implicated (most failures first) and which edits are tried (the
//! dominant failure kinds: conflicts -> coordination, holes -> hole density, the rest
//! -> data and holes); without it the validation summary ranks the sizes and every
//! edit is tried; without both, the smallest sizes are probed. Everything is drawn
//! from the seed tree, so a decision is reproducible.
use super::{Decision, Engineer, EngineerContext};
use crate::env::config::{max_hole_ratio, SizeProposal};
use crate::env::{
    generate, project, simulate, Budget, ConfigProposal, FailureKind, GeneratorConfig,
};
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

/// Which edits of a size the evidence calls for.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Edits {
    /// No failure kinds known: every edit.
    All,
    /// Conflicts dominate: coordination up or down.
    Coordination,
    /// Holes dominate: hole density up or down.
    Holes,
    /// The plan goes wrong on its own (goal not reached, illegal moves, parse errors):
    /// more or less data, fewer holes.
    Data,
}

/// One implicated size: its size, the evidence as cited, and the edits to try.
struct Focus {
    size: usize,
    evidence: String,
    edits: Edits,
}

/// The sizes the evidence implicates, weakest first, working sizes excluded: by failure
/// count when the breakdown is shown (with its dominant kinds), else by validation
/// valid rate, else the smallest sizes.
fn implicated(ctx: &EngineerContext) -> Vec<Focus> {
    let valid = |n: usize| ctx.validation.cells.get(&(2, n)).map(|c| c.valid_rate());
    let mut v: Vec<(f64, Focus)> = ctx
        .current
        .sizes
        .keys()
        .filter(|&&n| valid(n).is_none_or(|v| v < WORKING))
        .map(|&n| {
            if let Some(f) = ctx.failures.sizes.iter().find(|s| s.size as usize == n) {
                let count = |ks: &[FailureKind]| {
                    f.counts
                        .iter()
                        .filter(|c| ks.contains(&c.0))
                        .map(|c| c.1)
                        .sum::<u32>()
                };
                let conflicts = count(&[FailureKind::VertexConflict, FailureKind::EdgeConflict]);
                let holes = count(&[FailureKind::Hole]);
                let failed = count(&FailureKind::ALL);
                let own = failed - conflicts - holes;
                let edits = if conflicts >= holes.max(own) && conflicts > 0 {
                    Edits::Coordination
                } else if holes >= own && holes > 0 {
                    Edits::Holes
                } else {
                    Edits::Data
                };
                let evidence = format!("{n}x{n}: {failed} of {} validation plans failed", f.total);
                (
                    -(failed as f64),
                    Focus {
                        size: n,
                        evidence,
                        edits,
                    },
                )
            } else if let Some(v) = valid(n) {
                let evidence = format!("{n}x{n}: validation valid {v:.0}%");
                (
                    v,
                    Focus {
                        size: n,
                        evidence,
                        edits: Edits::All,
                    },
                )
            } else {
                let evidence = format!("{n}x{n}: no evidence shown");
                (
                    n as f64,
                    Focus {
                        size: n,
                        evidence,
                        edits: Edits::All,
                    },
                )
            }
        })
        .collect();
    // Weakest first; ties: the smaller size first.
    v.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.size.cmp(&b.1.size)));
    v.into_iter().take(FOCUS_SIZES).map(|x| x.1).collect()
}

fn candidates(ctx: &EngineerContext, focus: &[Focus]) -> Vec<Candidate> {
    let mut out = vec![Candidate {
        label: "keep the current configuration".into(),
        proposal: ConfigProposal::default(),
    }];
    let k = ctx.current.agents;
    for f in focus {
        let n = f.size;
        let c = ctx.current.sizes[&n];
        let hmax = max_hole_ratio(n, k);
        let mut push =
            |label: String, p: ConfigProposal| out.push(Candidate { label, proposal: p });
        if matches!(f.edits, Edits::All | Edits::Data) {
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
        }
        if matches!(f.edits, Edits::All | Edits::Data | Edits::Holes) {
            push(
                format!("{n}x{n}: holes -0.05"),
                edit(n, |s| {
                    s.hole_ratio = Some(round3((c.hole_ratio - 0.05).max(0.0)))
                }),
            );
        }
        if matches!(f.edits, Edits::All | Edits::Holes) {
            push(
                format!("{n}x{n}: holes +0.05"),
                edit(n, |s| {
                    s.hole_ratio = Some(round3((c.hole_ratio + 0.05).min(hmax)))
                }),
            );
        }
        if matches!(f.edits, Edits::All | Edits::Coordination) {
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
    }
    out
}

impl Probe {
    /// Mean learnability p(1-p) and mean pass rate of the policy on instances drawn
    /// from `config` (None when the generator cannot draw them).
    pub fn probe(&self, config: &GeneratorConfig) -> Option<(f64, f64)> {
        // Common random numbers: every candidate is probed with the same seeds, so
        // candidates that share a size see the same instances and sampling noise
        // largely cancels out of the comparison.
        probe(
            self.policy.as_ref(),
            config,
            self.seed.child("probe", 0),
            PROBE_INSTANCES,
            PROBE_SAMPLES,
        )
    }
}

/// Mean p(1-p) and mean p, where p is `policy`'s pass rate (valid plans among
/// `samples` sampled ones) on each of `instances` instances drawn from `config` with
/// `seed`; None when the generator cannot draw them. The `learnability` engineer, the
/// engineer benchmark's reference probe and engineer RL's reward all use it.
pub fn probe(
    policy: &dyn Policy,
    config: &GeneratorConfig,
    seed: Seed,
    instances: usize,
    samples: usize,
) -> Option<(f64, f64)> {
    let items = generate(
        config,
        instances,
        seed.child("instances", 0),
        Budget::default(),
    )
    .ok()?;
    let instances: Vec<_> = items.iter().map(|i| i.instance.clone()).collect();
    let rollouts = policy.sample(&instances, samples, false, seed.child("rollouts", 0));
    let mut pass = vec![0u32; instances.len()];
    for r in &rollouts {
        if let Ok(plan) = &r.plan {
            pass[r.instance] += simulate(&instances[r.instance], plan).valid as u32;
        }
    }
    let ps: Vec<f64> = pass.iter().map(|&x| x as f64 / samples as f64).collect();
    let n = ps.len().max(1) as f64;
    Some((
        ps.iter().map(|p| p * (1.0 - p)).sum::<f64>() / n,
        ps.iter().sum::<f64>() / n,
    ))
}

/// A size's settings as the probe caches them: (agents, size, the hole and wait
/// ratios' bits).
type SizeKey = (usize, usize, u64, u64);

/// Learnability of configurations estimated size by size, for comparing proposals: per
/// size of a configuration, `per_size` instances drawn from that size's own settings
/// with a seed of the size alone (`seed` / "size" / n), `samples` plans each; the
/// configuration's score is the data-ratio-weighted mean over its sizes. Results are
/// cached per (agents, size, hole and wait ratio), so two proposals that leave a size as
/// it is score it identically, and their difference is the effect of their edits and
/// reweighting, not of drawing other instances (the pooled [`probe`] draws every
/// instance anew when any ratio changes). Engineer RL's reward and `engineer eval
/// --reference` use it; the `learnability` engineer keeps the pooled probe it records
/// with.
pub struct SizeProbe {
    pub seed: Seed,
    pub per_size: usize,
    pub samples: usize,
    /// Each size's (mean p(1-p), mean p), None where its settings generate no instance.
    cache: std::collections::BTreeMap<SizeKey, Option<(f64, f64)>>,
}

impl SizeProbe {
    pub fn new(seed: Seed, per_size: usize, samples: usize) -> SizeProbe {
        SizeProbe {
            seed,
            per_size,
            samples,
            cache: Default::default(),
        }
    }

    /// (mean p(1-p), mean p) of `policy` on `config`, sizes weighted by data ratio;
    /// None when no size has data or the generator cannot draw one of them.
    pub fn probe(&mut self, policy: &dyn Policy, config: &GeneratorConfig) -> Option<(f64, f64)> {
        let total: f64 = config.sizes.values().map(|s| s.data_ratio.max(0.0)).sum();
        if total <= 0.0 {
            return None;
        }
        let (mut learn, mut pass) = (0.0, 0.0);
        for (&n, size) in &config.sizes {
            if size.data_ratio <= 0.0 {
                continue;
            }
            let key = (
                config.agents,
                n,
                size.hole_ratio.to_bits(),
                size.wait_ratio.to_bits(),
            );
            let (seed, per_size, samples) = (self.seed, self.per_size, self.samples);
            let r = *self.cache.entry(key).or_insert_with(|| {
                let one = GeneratorConfig {
                    agents: config.agents,
                    sizes: [(
                        n,
                        crate::env::config::SizeConfig {
                            data_ratio: 1.0,
                            ..*size
                        },
                    )]
                    .into(),
                };
                probe(
                    policy,
                    &one,
                    seed.child("size", n as u64),
                    per_size,
                    samples,
                )
            });
            let (l, p) = r?;
            let w = size.data_ratio / total;
            learn += w * l;
            pass += w * p;
        }
        Some((learn, pass))
    }
}

impl Engineer for Probe {
    fn name(&self) -> &str {
        &self.name
    }

    fn reseed(&mut self, seed: Seed) {
        self.seed = seed;
    }

    fn decide(&mut self, ctx: &EngineerContext) -> Decision {
        let focus = implicated(ctx);
        let mut evidence: Vec<String> = focus.iter().map(|f| f.evidence.clone()).collect();
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
            "{} (the current checkpoint's own pass rates). Evidence: {}. Probed {} candidates with {} instances x {} samples each: {}. \
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
