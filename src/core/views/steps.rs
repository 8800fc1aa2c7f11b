//! GRPO, step by step: one [`StepRow`] per sampled batch of a branch, read from the
//! recorded `grpo_stats` and `trajectories` events. The batch's sampled validity is also
//! split by whether each sampled instance needs coordination (the flag its instance blob
//! carries, `Solved::needs_coordination`): the figure that shows GRPO learning to wait.
//! Nothing here is recorded; old ledgers get the rows too.
use super::pct;
use crate::env::Solved;
use crate::ledger::{EventBody, Hash, Ledger, LedgerError};
use crate::record::trainer::TrajectoryBatch;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One GRPO step (one sampled batch) of a branch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StepRow {
    pub branch: String,
    pub stage: u32,
    /// The global step of the (last) optimiser update the batch fed.
    pub step: u64,
    /// The `grpo_stats` event the row's training figures come from.
    pub event: Hash,
    pub samples: u32,
    pub groups: u32,
    /// Groups whose rewards are all equal (no policy gradient), as a share of groups.
    pub zero_variance_share: f64,
    pub skipped_groups: u32,
    pub reward_mean: f64,
    pub reward_std: f64,
    /// The k3 estimate of KL(policy || reference) over the loss's tokens.
    pub kl: f64,
    /// Share of the loss's tokens whose ratio the clip held back.
    pub clip_fraction: f64,
    /// Sampled plans that are valid / optimal, % of the batch.
    pub valid_pct: f64,
    pub optimal_pct: f64,
    /// Sampled plans on instances that need coordination, and how many were valid.
    pub coordination_samples: u32,
    pub coordination_valid: u32,
    /// `coordination_valid` as % of `coordination_samples` (None when there were none).
    pub coordination_valid_pct: Option<f64>,
}

/// Per-stage means of [`StepRow`]s (the report's table).
#[derive(Clone, Debug, PartialEq)]
pub struct StageSteps {
    pub stage: u32,
    pub steps: usize,
    /// The first and the last step's `grpo_stats` events (what the means cite).
    pub events: Vec<Hash>,
    pub reward_mean: f64,
    pub zero_variance_share: f64,
    pub kl: f64,
    pub clip_fraction: f64,
    pub valid_pct: f64,
    /// Pooled over the stage's batches (None when no sample needed coordination).
    pub coordination_valid_pct: Option<f64>,
    pub coordination_samples: u64,
}

/// Whether each of the batch's instances needs coordination, decoding each instance blob
/// once per call (a stage's batches reuse its few hundred instances).
fn coordination_flags(
    ledger: &Ledger,
    batch: &TrajectoryBatch,
    known: &mut BTreeMap<Hash, bool>,
) -> Result<Vec<bool>, LedgerError> {
    batch
        .instances
        .iter()
        .map(|h| {
            if let Some(&f) = known.get(h) {
                return Ok(f);
            }
            let it: Solved = crate::record::codec::decode(&ledger.blob(h)?, "training instance")
                .map_err(|e| LedgerError::Corrupt {
                    what: format!("training instance blob {}", h.short()),
                    problem: e.to_string(),
                })?;
            known.insert(*h, it.needs_coordination);
            Ok(it.needs_coordination)
        })
        .collect()
}

/// Every GRPO step in the history of `head` (a fork includes the stages it shares with
/// its source), oldest first, labelled `branch`.
pub fn step_rows(ledger: &Ledger, branch: &str, head: &Hash) -> Result<Vec<StepRow>, LedgerError> {
    let mut rows = Vec::new();
    let mut known = BTreeMap::new();
    // The batch recorded before a step's `grpo_stats`: (coordination samples, valid).
    let mut batch: Option<(u32, (u32, u32))> = None;
    for (hash, ev) in ledger.history_to(head)? {
        match ev.body {
            EventBody::Trajectories(t) => {
                let flags = coordination_flags(ledger, &t, &mut known)?;
                let mut n = 0;
                let mut valid = 0;
                for tr in &t.trajectories {
                    if flags.get(tr.instance as usize).copied().unwrap_or(false) {
                        n += 1;
                        valid += tr.valid as u32;
                    }
                }
                batch = Some((ev.stage, (n, valid)));
            }
            EventBody::GrpoStats(g) => {
                let (cn, cv) = match batch.take() {
                    Some((stage, c)) if stage == ev.stage => c,
                    _ => (0, 0),
                };
                let f = f64::from_bits;
                rows.push(StepRow {
                    branch: branch.to_string(),
                    stage: ev.stage,
                    step: g.step,
                    event: hash,
                    samples: g.samples,
                    groups: g.groups,
                    zero_variance_share: 1.0 - g.signal_share(),
                    skipped_groups: g.skipped_groups,
                    reward_mean: f(g.reward_mean),
                    reward_std: f(g.reward_std),
                    kl: f(g.kl),
                    clip_fraction: f(g.clip_fraction),
                    valid_pct: pct(g.valid, g.samples),
                    optimal_pct: pct(g.optimal, g.samples),
                    coordination_samples: cn,
                    coordination_valid: cv,
                    coordination_valid_pct: (cn > 0).then(|| pct(cv, cn)),
                });
            }
            _ => {}
        }
    }
    Ok(rows)
}

/// Per-stage means of `rows` (stages in order).
pub fn by_stage(rows: &[StepRow]) -> Vec<StageSteps> {
    let mut stages: BTreeMap<u32, Vec<&StepRow>> = BTreeMap::new();
    for r in rows {
        stages.entry(r.stage).or_default().push(r);
    }
    stages
        .into_iter()
        .map(|(stage, rs)| {
            let n = rs.len() as f64;
            let mean = |f: &dyn Fn(&StepRow) -> f64| rs.iter().map(|r| f(r)).sum::<f64>() / n;
            let cn: u64 = rs.iter().map(|r| r.coordination_samples as u64).sum();
            let cv: u64 = rs.iter().map(|r| r.coordination_valid as u64).sum();
            StageSteps {
                stage,
                steps: rs.len(),
                events: if rs.len() == 1 {
                    vec![rs[0].event]
                } else {
                    vec![rs[0].event, rs[rs.len() - 1].event]
                },
                reward_mean: mean(&|r| r.reward_mean),
                zero_variance_share: mean(&|r| r.zero_variance_share),
                kl: mean(&|r| r.kl),
                clip_fraction: mean(&|r| r.clip_fraction),
                valid_pct: mean(&|r| r.valid_pct),
                coordination_valid_pct: (cn > 0).then(|| 100.0 * cv as f64 / cn as f64),
                coordination_samples: cn,
            }
        })
        .collect()
}

/// Moving means of the sampled validity on coordination items over `window` steps, one
/// point per step that had such samples: (global step, %). Pooled counts, so a step with
/// few coordination samples weighs little.
pub fn coordination_curve(rows: &[StepRow], window: usize) -> Vec<(u32, f64)> {
    let with: Vec<&StepRow> = rows.iter().filter(|r| r.coordination_samples > 0).collect();
    (0..with.len())
        .map(|i| {
            let lo = (i + 1).saturating_sub(window.max(1));
            let (n, v) = with[lo..=i].iter().fold((0u64, 0u64), |(n, v), r| {
                (
                    n + r.coordination_samples as u64,
                    v + r.coordination_valid as u64,
                )
            });
            (with[i].step as u32, 100.0 * v as f64 / n as f64)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(stage: u32, step: u64, cn: u32, cv: u32, reward: f64) -> StepRow {
        StepRow {
            branch: "main".into(),
            stage,
            step,
            event: Hash([0; 32]),
            samples: 8,
            groups: 1,
            zero_variance_share: 0.5,
            skipped_groups: 0,
            reward_mean: reward,
            reward_std: 0.0,
            kl: 0.0,
            clip_fraction: 0.0,
            valid_pct: 50.0,
            optimal_pct: 0.0,
            coordination_samples: cn,
            coordination_valid: cv,
            coordination_valid_pct: (cn > 0).then(|| pct(cv, cn)),
        }
    }

    #[test]
    fn stage_means_pool_coordination_counts() {
        let rows = [
            row(1, 1, 2, 2, 1.0),
            row(1, 2, 6, 0, 3.0),
            row(2, 3, 0, 0, 5.0),
        ];
        let s = by_stage(&rows);
        assert_eq!(s.len(), 2);
        assert_eq!((s[0].steps, s[0].reward_mean), (2, 2.0));
        // 2 of 8 pooled, not the mean of 100% and 0%.
        assert_eq!(s[0].coordination_valid_pct, Some(25.0));
        assert_eq!(s[1].coordination_valid_pct, None);
    }

    #[test]
    fn the_curve_skips_steps_without_coordination_samples() {
        let rows = [
            row(1, 1, 4, 4, 0.0),
            row(1, 2, 0, 0, 0.0),
            row(1, 3, 4, 0, 0.0),
        ];
        assert_eq!(coordination_curve(&rows, 2), vec![(1, 100.0), (3, 50.0)]);
        assert_eq!(coordination_curve(&rows, 1), vec![(1, 100.0), (3, 0.0)]);
    }
}
