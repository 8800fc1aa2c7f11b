//! Study reports: the runs of a counterfactual study (`ledger study`), their test
//! cells aggregated over seeds (mean and 95% t-interval), each engineer's paired
//! differences against `fixed` (replicate r against replicate r: the same fork point and
//! suite items), and the CSV, Markdown and plot series written from them.
//! The application (`mapf_ledger::study`) forks and runs the study; [`study_report`] summarises its runs and
//! [`write_study`] writes the files.
use super::compare::{mean_ci, BranchSummary};
use super::format::{pm, rate};
use super::paired::{self, Interval, McNemar};
use std::collections::BTreeSet;
use std::fmt::Write as _;

/// The engineer every other is paired against, when the study has it.
pub const BASELINE: &str = "fixed";

/// The `action` of a run taken from an earlier report of the same study
/// (`ledger study --reuse`) rather than from this ledger.
pub const REUSED: &str = "reused";

/// One engineer × seed run of a study.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct StudyRun {
    pub engineer: String,
    pub replicate: u32,
    pub branch: String,
    /// ran (forked and run now), resumed (continued a partial run), skipped (already
    /// finished) or reused (taken from an earlier report of the same study; its head is
    /// not in this ledger).
    pub action: String,
    pub head: crate::ledger::Hash,
    pub summary: BranchSummary,
    /// The run's per-instance outcomes, so that a later study reusing this report
    /// (`ledger study --reuse`) still pairs it item by item. Absent from reports written
    /// before they were kept, and for runs that recorded none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub items: Option<StudyItems>,
}

/// What the pooled item bootstraps pair, per run: the outcomes of every suite at the
/// final stage and at stage 0, and which items need coordination. A report keeps them
/// beside the summary (whose JSON has the tables, not the items).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct StudyItems {
    /// The final stage's outcomes, one per suite.
    pub final_stage: Vec<RecordedOutcomes>,
    /// Stage 0's outcomes, one per suite: the other side of the transfer rows.
    pub stage0: Vec<RecordedOutcomes>,
    /// Per suite, whether each item (in suite order) needs coordination.
    pub needs_coordination: std::collections::BTreeMap<String, Vec<bool>>,
}

/// Why a report's [`StudyItems`] cannot be the run's they are stored with.
#[derive(Debug, thiserror::Error)]
pub enum ItemsMismatch {
    #[error("its {suite} outcomes do not match their layout")]
    Layout { suite: String },
    #[error("{flags} coordination flags for {items} {suite} outcomes")]
    Flags {
        suite: String,
        flags: usize,
        items: usize,
    },
    #[error("its test outcomes do not count to its test table")]
    TestTable,
}

/// One suite's per-instance outcomes with the event that recorded them.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct RecordedOutcomes {
    pub event: crate::ledger::Hash,
    pub outcomes: crate::record::event::EvaluationOutcomes,
}

impl StudyItems {
    /// The items of a summary whose outcomes were loaded (`compare::load_outcomes`);
    /// None when it has none.
    pub fn of(summary: &BranchSummary) -> Option<StudyItems> {
        let recorded = |v: &[(
            crate::ledger::Hash,
            crate::record::event::EvaluationOutcomes,
        )]| {
            v.iter()
                .map(|(event, outcomes)| RecordedOutcomes {
                    event: *event,
                    outcomes: outcomes.clone(),
                })
                .collect::<Vec<_>>()
        };
        let items = StudyItems {
            final_stage: recorded(&summary.outcomes),
            stage0: recorded(&summary.stage0_outcomes),
            needs_coordination: summary.coordination_flags.clone(),
        };
        (!items.final_stage.is_empty()).then_some(items)
    }

    /// Put the items back into a summary read from a report, where the pairing
    /// functions look for them. Refused (the summary untouched) when they cannot be
    /// this run's: a layout that does not account for its bytes, coordination flags of
    /// another length than their suite's outcomes, or final test outcomes whose counts
    /// per cell are not the summary's test table.
    pub fn restore(&self, summary: &mut BranchSummary) -> Result<(), ItemsMismatch> {
        use crate::record::event::{OUTCOME_OPTIMAL, OUTCOME_VALID};
        for r in self.final_stage.iter().chain(&self.stage0) {
            let o = &r.outcomes;
            if !o.is_well_formed() {
                return Err(ItemsMismatch::Layout {
                    suite: o.suite.clone(),
                });
            }
            if let Some(f) = self.needs_coordination.get(&o.suite) {
                if f.len() != o.outcomes.len() {
                    return Err(ItemsMismatch::Flags {
                        suite: o.suite.clone(),
                        flags: f.len(),
                        items: o.outcomes.len(),
                    });
                }
            }
        }
        if let Some(t) = self.final_stage.iter().find(|r| r.outcomes.suite == "test") {
            let mut counted = Vec::new();
            let mut items = t.outcomes.outcomes.iter();
            for &(agents, size, n) in &t.outcomes.cells {
                let cell: Vec<u8> = items.by_ref().take(n as usize).copied().collect();
                let valid = cell.iter().filter(|&&b| b >= OUTCOME_VALID).count() as u32;
                let optimal = cell.iter().filter(|&&b| b == OUTCOME_OPTIMAL).count() as u32;
                counted.push((agents as usize, size as usize, n, valid, optimal));
            }
            let mut table = summary.test_cells.clone();
            table.sort();
            counted.sort();
            if counted != table {
                return Err(ItemsMismatch::TestTable);
            }
        }
        let pairs = |v: &[RecordedOutcomes]| {
            v.iter()
                .map(|r| (r.event, r.outcomes.clone()))
                .collect::<Vec<_>>()
        };
        summary.outcomes = pairs(&self.final_stage);
        summary.stage0_outcomes = pairs(&self.stage0);
        summary.coordination_flags = self.needs_coordination.clone();
        Ok(())
    }
}

/// Mean and 95% interval over seeds of one test cell (or Sum row) for one engineer.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct StudyCell {
    pub engineer: String,
    pub agents: usize,
    /// Map size (None: the Sum row, the mean over sizes).
    pub size: Option<usize>,
    /// The wait-ratio subset of a stratified test suite (`wait0.25`, ...; Sum rows only);
    /// None: every item.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subset: Option<String>,
    /// Seeds aggregated.
    pub n: usize,
    pub valid_mean: f64,
    /// Half-width of the 95% t-interval (None with one seed).
    pub valid_ci95: Option<f64>,
    pub optimal_mean: f64,
    pub optimal_ci95: Option<f64>,
}

/// Mean validation rates over seeds of one engineer at one stage.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct StudyCurvePoint {
    pub engineer: String,
    pub stage: u32,
    pub n: usize,
    pub valid_mean: f64,
    pub optimal_mean: f64,
}

/// `ledger study --json`.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct StudyReport {
    pub from: String,
    pub at: u32,
    pub seeds: u32,
    pub engineers: Vec<String>,
    pub runs: Vec<StudyRun>,
    pub cells: Vec<StudyCell>,
    pub validation: Vec<StudyCurvePoint>,
    /// Each engineer against `fixed`, paired seed by seed (empty without `fixed`).
    #[serde(default)]
    pub paired: Vec<StudyPaired>,
    /// The paper's second ordering, `current` against `base`, paired seed by seed the
    /// same way (empty unless the study has both).
    #[serde(default)]
    pub orderings: Vec<StudyPaired>,
    /// What training did per engineer: each run's final stage against its stage 0 on
    /// the same items, every Sum row, paired seed by seed (`baseline` is
    /// [`TRANSFER_BASELINE`]). Trained on 2 agents, the 3-5-agent rows are the transfer.
    #[serde(default)]
    pub transfer: Vec<StudyPaired>,
    /// Seeds needed for 80% power on the study's target row (None: no target row).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power: Option<StudyPower>,
    /// Files written (CSV, markdown, SVG).
    pub files: Vec<String>,
}

/// One engineer against the baseline (`fixed`) on one Sum row of the final stage
/// (validation, a test agent count, or one of their wait-ratio subsets), paired seed by
/// seed: replicate r of the engineer against replicate r of the baseline.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct StudyPaired {
    pub engineer: String,
    pub baseline: String,
    /// `val` or `test`.
    pub suite: String,
    pub agents: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subset: Option<String>,
    /// The replicates paired (both sides finished an evaluated stage).
    pub replicates: Vec<u32>,
    pub valid: StudyPairedMetric,
    pub optimal: StudyPairedMetric,
    /// Why the instance-level statistics are missing, when they are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// How many seeds a paired comparison needs: 80% power to see `effect` points on the
/// target row in a two-sided 5% paired t-test over seeds
/// ([`super::compare::seeds_for_power`]), from the standard deviation of per-seed
/// differences: planned (a pilot's, given to `ledger study --power-sd`) and observed
/// (each engineer against its baseline in this study, once it has 2 seeds).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct StudyPower {
    /// The smallest difference to see, in percentage points (valid %).
    pub effect: f64,
    /// The target row: `test`, its smallest agent count, and the `coord` subset (items
    /// that need coordination) when the suite has one.
    pub suite: String,
    pub agents: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subset: Option<String>,
    /// The planning figure: a pilot's SD of per-seed differences and the seeds it asks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub planned_sd: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub planned_seeds: Option<usize>,
    /// Each comparison of this study on the target row with at least 2 paired seeds.
    pub observed: Vec<StudyPowerObserved>,
}

/// One comparison's observed spread on the power target row.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct StudyPowerObserved {
    pub engineer: String,
    pub baseline: String,
    /// Paired seeds so far.
    pub seeds: usize,
    /// Standard deviation of the per-seed differences (valid %, points).
    pub sd: f64,
    pub seeds_needed: Option<usize>,
}

/// What the power line is asked for: the smallest effect to see (points) and, from a
/// pilot, the SD of per-seed paired differences.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PowerPlan {
    pub effect: f64,
    pub pilot_sd: Option<f64>,
}

impl Default for PowerPlan {
    fn default() -> Self {
        PowerPlan {
            effect: 5.0,
            pilot_sd: None,
        }
    }
}

/// One metric of a [`StudyPaired`], in percentage points.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct StudyPairedMetric {
    /// Engineer − baseline of each paired replicate (from the recorded tables).
    pub per_seed: Vec<f64>,
    /// Their mean, and the half-width of the 95% t-interval over seeds (None with one).
    pub mean: f64,
    pub ci95: Option<f64>,
    /// The instance-level paired bootstrap pooled over seeds (items resampled within
    /// each seed's cells): 95% interval of the mean difference. None without
    /// per-instance outcomes.
    pub bootstrap_ci95: Option<Interval>,
    /// McNemar's exact test on the discordant items pooled over seeds (A: baseline).
    pub mcnemar: Option<McNemar>,
}

impl StudyPairedMetric {
    /// The per-seed differences with their mean and t-interval, and the instance-level
    /// statistics of `pooled` (the bootstrap pooled over seeds) when there are any.
    fn of(per_seed: Vec<f64>, pooled: Option<paired::PairedMetric>) -> StudyPairedMetric {
        let (mean, ci95) = mean_ci(&per_seed);
        StudyPairedMetric {
            per_seed,
            mean,
            ci95,
            bootstrap_ci95: pooled.map(|b| b.diff_ci95),
            mcnemar: pooled.map(|b| b.mcnemar),
        }
    }
}

/// Each engineer against [`BASELINE`] on every Sum row of the final stage, replicate
/// by replicate (empty when the study has no baseline).
pub fn paired_vs_baseline(engineers: &[String], runs: &[StudyRun]) -> Vec<StudyPaired> {
    if !engineers.iter().any(|e| e == BASELINE) {
        return Vec::new();
    }
    engineers
        .iter()
        .filter(|e| *e != BASELINE)
        .flat_map(|e| paired_against(e, BASELINE, runs))
        .collect()
}

/// The `baseline` of a [`StudyReport::transfer`] row: each run's own stage 0.
pub const TRANSFER_BASELINE: &str = "stage 0";

/// Each engineer's final stage against its runs' stage 0 on every Sum row, seed by seed:
/// the per-seed changes with their t-interval, and the instance-level bootstrap pooled
/// over the seeds' items (see [`BranchSummary::transfer`]).
pub fn transfers(engineers: &[String], runs: &[StudyRun]) -> Vec<StudyPaired> {
    let mut out = Vec::new();
    for e in engineers {
        let rs: Vec<&StudyRun> = runs
            .iter()
            .filter(|r| &r.engineer == e)
            .filter(|r| {
                r.summary
                    .transfer
                    .as_ref()
                    .is_some_and(|t| !t.rows.is_empty())
            })
            .collect();
        let Some(first) = rs.first() else { continue };
        let first = first.summary.transfer.as_ref().expect("filtered");
        for key in &first.rows {
            let same = |r: &StudyRun| {
                r.summary.transfer.as_ref().and_then(|t| {
                    t.rows
                        .iter()
                        .find(|x| {
                            x.suite == key.suite && x.agents == key.agents && x.subset == key.subset
                        })
                        .cloned()
                })
            };
            let rows: Vec<(u32, paired::PairedRow)> = rs
                .iter()
                .filter_map(|r| Some((r.replicate, same(r)?)))
                .collect();
            // The pooled bootstrap needs every seed's items at both stages.
            let mut units = Vec::new();
            let mut note = None;
            for r in &rs {
                let outcomes = |v: &[(
                    crate::ledger::Hash,
                    crate::record::event::EvaluationOutcomes,
                )]| {
                    v.iter()
                        .find(|o| o.1.suite == key.suite)
                        .map(|o| o.1.clone())
                };
                let (Some(a), Some(b)) = (
                    outcomes(&r.summary.stage0_outcomes),
                    outcomes(&r.summary.outcomes),
                ) else {
                    note = Some(format!(
                        "no per-instance {} outcomes of replicate {} at both stages{}",
                        key.suite,
                        r.replicate,
                        if r.action == REUSED {
                            " (taken from an earlier report)"
                        } else {
                            ""
                        }
                    ));
                    break;
                };
                if let Some(why) = paired::unpairable(&a, &b) {
                    note = Some(format!("replicate {}: {why}", r.replicate));
                    break;
                }
                let flags = r.summary.coordination_flags.get(&key.suite);
                match paired::groups_with(&a, flags.map(Vec::as_slice))
                    .into_iter()
                    .find(|g| g.agents == key.agents && g.subset == key.subset)
                {
                    Some(g) => units.push(paired::unit(&g, &a, &b)),
                    None => {
                        note = Some(format!("replicate {}: no such group", r.replicate));
                        break;
                    }
                }
            }
            let boot = note.is_none().then(|| {
                let label = format!(
                    "transfer {e} {} {} agents {}",
                    key.suite,
                    key.agents,
                    key.subset.as_deref().unwrap_or("all")
                );
                paired::paired_metrics(&units, &label)
            });
            let diffs: Vec<(u32, f64, f64)> = rows
                .iter()
                .map(|(n, r)| (*n, r.valid.diff, r.optimal.diff))
                .collect();
            out.push(study_paired(
                e,
                TRANSFER_BASELINE,
                (&key.suite, key.agents, &key.subset),
                &diffs,
                boot,
                note,
            ));
        }
    }
    out
}

/// The orderings beyond engineered > fixed, as (claim, engineer, baseline): the paper's
/// second, `current` over `base`, and the trained trainer's, engineer RL's `current`
/// over the plain one.
pub const ORDERINGS: [(&str, &str, &str); 2] = [
    ("current > base", "current", "base"),
    ("engineer RL > current", "current+engineer-rl", "current"),
];

/// Each of [`ORDERINGS`] the study ran both arms of, on every Sum row, replicate by
/// replicate.
pub fn orderings(engineers: &[String], runs: &[StudyRun]) -> Vec<StudyPaired> {
    let has = |e: &str| engineers.iter().any(|x| x == e);
    ORDERINGS
        .iter()
        .filter(|(_, e, b)| has(e) && has(b))
        .flat_map(|(_, e, b)| paired_against(e, b, runs))
        .collect()
}

/// `engineer` against `baseline` on every Sum row of the final stage, replicate by
/// replicate (the replicates both finished).
fn paired_against(e: &str, baseline: &str, runs: &[StudyRun]) -> Vec<StudyPaired> {
    let mut out = Vec::new();
    let run = |e: &str, r: u32| -> Option<&StudyRun> {
        runs.iter()
            .find(|x| x.engineer == e && x.replicate == r && x.summary.final_stage.is_some())
    };
    // (baseline run, engineer run) per replicate both finished.
    let pairs: Vec<(&StudyRun, &StudyRun)> = runs
        .iter()
        .filter(|x| x.engineer == e)
        .filter_map(|x| Some((run(baseline, x.replicate)?, run(e, x.replicate)?)))
        .collect();
    let Some(&(first, _)) = pairs.first() else {
        return out;
    };
    for key in first.summary.sum_rates() {
        let same = |s: &BranchSummary| {
            s.sum_rates()
                .into_iter()
                .find(|x| x.suite == key.suite && x.agents == key.agents && x.subset == key.subset)
        };
        let rows: Vec<(u32, f64, f64)> = pairs
            .iter()
            .filter_map(|(a, b)| {
                let (ra, rb) = (same(&a.summary)?, same(&b.summary)?);
                Some((b.replicate, rb.valid - ra.valid, rb.optimal - ra.optimal))
            })
            .collect();
        if rows.is_empty() {
            continue;
        }
        let (boot, note) = pooled_bootstrap(&pairs, &key);
        out.push(study_paired(
            e,
            baseline,
            (&key.suite, key.agents, &key.subset),
            &rows,
            boot,
            note,
        ));
    }
    out
}

/// One paired row of a study: `rows` are (replicate, valid Δ, optimal Δ) per seed, with
/// the pooled item bootstrap of both metrics or the note saying why there is none.
fn study_paired(
    engineer: &str,
    baseline: &str,
    (suite, agents, subset): (&str, usize, &Option<String>),
    rows: &[(u32, f64, f64)],
    boot: Option<(paired::PairedMetric, paired::PairedMetric)>,
    note: Option<String>,
) -> StudyPaired {
    let (valid, optimal) = match boot {
        Some((v, o)) => (Some(v), Some(o)),
        None => (None, None),
    };
    StudyPaired {
        engineer: engineer.to_string(),
        baseline: baseline.to_string(),
        suite: suite.to_string(),
        agents,
        subset: subset.clone(),
        replicates: rows.iter().map(|r| r.0).collect(),
        valid: StudyPairedMetric::of(rows.iter().map(|r| r.1).collect(), valid),
        optimal: StudyPairedMetric::of(rows.iter().map(|r| r.2).collect(), optimal),
        note,
    }
}

/// The instance-level paired bootstrap of one Sum row pooled over the replicate pairs,
/// or why there is none.
#[allow(clippy::type_complexity)]
fn pooled_bootstrap(
    pairs: &[(&StudyRun, &StudyRun)],
    key: &super::compare::SumRate,
) -> (
    Option<(paired::PairedMetric, paired::PairedMetric)>,
    Option<String>,
) {
    let mut units = Vec::new();
    for (a, b) in pairs {
        if let Some(r) = [a, b]
            .into_iter()
            .find(|r| r.action == REUSED && r.summary.outcomes_of(&key.suite).is_none())
        {
            return (
                None,
                Some(format!(
                    "replicate {} of {} was taken from an earlier report, which holds no per-instance outcomes",
                    r.replicate, r.engineer
                )),
            );
        }
        let (Some((_, oa)), Some((_, ob))) = (
            a.summary.outcomes_of(&key.suite),
            b.summary.outcomes_of(&key.suite),
        ) else {
            return (
                None,
                Some(format!(
                    "no per-instance {} outcomes on replicate {} (runs recorded before evaluation_outcomes events)",
                    key.suite, b.replicate
                )),
            );
        };
        if let Some(why) = paired::unpairable(oa, ob) {
            return (None, Some(format!("replicate {}: {why}", b.replicate)));
        }
        let flags = a.summary.coordination_flags.get(&key.suite);
        let Some(g) = paired::groups_with(oa, flags.map(Vec::as_slice))
            .into_iter()
            .find(|g| g.agents == key.agents && g.subset == key.subset)
        else {
            return (
                None,
                Some(format!("replicate {}: no such group", b.replicate)),
            );
        };
        units.push(paired::unit(&g, oa, ob));
    }
    let label = format!(
        "study {} {} agents {}",
        key.suite,
        key.agents,
        key.subset.as_deref().unwrap_or("all")
    );
    (Some(paired::paired_metrics(&units, &label)), None)
}

pub(crate) fn aggregate(
    engineers: &[String],
    runs: &[StudyRun],
) -> (Vec<StudyCell>, Vec<StudyCurvePoint>) {
    let mut cells = Vec::new();
    let mut curve = Vec::new();
    for e in engineers {
        let rs: Vec<&StudyRun> = runs.iter().filter(|r| &r.engineer == e).collect();
        let keys: BTreeSet<(usize, usize)> = rs
            .iter()
            .flat_map(|r| r.summary.test.cells.keys().copied())
            .collect();
        let agents: BTreeSet<usize> = keys.iter().map(|k| k.0).collect();
        for k in agents {
            let mut push = |size: Option<usize>, vals: Vec<(f64, f64)>| {
                let (vm, vc) = mean_ci(&vals.iter().map(|v| v.0).collect::<Vec<_>>());
                let (om, oc) = mean_ci(&vals.iter().map(|v| v.1).collect::<Vec<_>>());
                cells.push(StudyCell {
                    engineer: e.clone(),
                    agents: k,
                    size,
                    subset: None,
                    n: vals.len(),
                    valid_mean: vm,
                    valid_ci95: vc,
                    optimal_mean: om,
                    optimal_ci95: oc,
                });
            };
            push(
                None,
                rs.iter()
                    .filter(|r| r.summary.test.agent_counts().contains(&k))
                    .map(|r| r.summary.test.sum_row(k))
                    .collect(),
            );
            for &(_, n) in keys.iter().filter(|c| c.0 == k) {
                push(
                    Some(n),
                    rs.iter()
                        .filter_map(|r| r.summary.test.cells.get(&(k, n)))
                        .map(|c| (c.valid_rate(), c.optimal_rate()))
                        .collect(),
                );
            }
        }
        // Sum rows of each test subset (stratified suites).
        let subsets: BTreeSet<(usize, String)> = rs
            .iter()
            .flat_map(|r| r.summary.sum_rates())
            .filter(|x| x.suite == "test")
            .filter_map(|x| Some((x.agents, x.subset?)))
            .collect();
        for (k, subset) in subsets {
            let vals: Vec<(f64, f64)> = rs
                .iter()
                .flat_map(|r| r.summary.sum_rates())
                .filter(|x| {
                    x.suite == "test" && x.agents == k && x.subset.as_ref() == Some(&subset)
                })
                .map(|x| (x.valid, x.optimal))
                .collect();
            let (vm, vc) = mean_ci(&vals.iter().map(|v| v.0).collect::<Vec<_>>());
            let (om, oc) = mean_ci(&vals.iter().map(|v| v.1).collect::<Vec<_>>());
            cells.push(StudyCell {
                engineer: e.clone(),
                agents: k,
                size: None,
                subset: Some(subset),
                n: vals.len(),
                valid_mean: vm,
                valid_ci95: vc,
                optimal_mean: om,
                optimal_ci95: oc,
            });
        }
        let stages: BTreeSet<u32> = rs
            .iter()
            .flat_map(|r| r.summary.validation.iter().map(|v| v.0))
            .collect();
        for st in stages {
            let pts: Vec<(f64, f64)> = rs
                .iter()
                .filter_map(|r| r.summary.validation.iter().find(|v| v.0 == st))
                .map(|v| (v.1, v.2))
                .collect();
            let n = pts.len();
            curve.push(StudyCurvePoint {
                engineer: e.clone(),
                stage: st,
                n,
                valid_mean: pts.iter().map(|p| p.0).sum::<f64>() / n as f64,
                optimal_mean: pts.iter().map(|p| p.1).sum::<f64>() / n as f64,
            });
        }
    }
    (cells, curve)
}

fn opt(x: Option<f64>) -> String {
    x.map(|v| format!("{v:.4}")).unwrap_or_default()
}

/// One row of study.csv, every value already formatted (empty: not applicable to the
/// row's kind). The fields are the columns, in order.
#[derive(Default, serde::Serialize)]
struct CsvRow {
    kind: &'static str,
    engineer: String,
    replicate: String,
    branch: String,
    final_stage: String,
    agents: String,
    size: String,
    n: String,
    total: String,
    valid: String,
    optimal: String,
    valid_rate: String,
    optimal_rate: String,
    valid_ci95: String,
    optimal_ci95: String,
    suite: String,
    subset: String,
    baseline: String,
    valid_boot_low: String,
    valid_boot_high: String,
    optimal_boot_low: String,
    optimal_boot_high: String,
    valid_a_only: String,
    valid_b_only: String,
    valid_p: String,
    optimal_a_only: String,
    optimal_b_only: String,
    optimal_p: String,
}

/// study.csv: one `cell` row per run and test cell, one `sum` row per run and agent
/// count, one `mean` row per engineer and cell (mean and 95% half-width over seeds; with
/// a `subset` for each wait-ratio subset's Sum of a stratified suite), and against
/// `fixed` one `paired` row per engineer, Sum row and replicate (`valid_rate`,
/// `optimal_rate`: the differences in points) and one `paired_mean` row per engineer and
/// Sum row (the mean difference, its t half-width, the pooled bootstrap interval and
/// McNemar's test); likewise `transfer` and `transfer_mean` rows of each engineer's
/// change from stage 0 (`baseline` "stage 0"). Written with the `csv` crate: a field with a comma or quote (an
/// engineer's or branch's name) is quoted.
pub fn study_csv(r: &StudyReport) -> String {
    let mut rows: Vec<CsvRow> = Vec::new();
    let f4 = |x: f64| format!("{x:.4}");
    for run in &r.runs {
        let fs = run
            .summary
            .final_stage
            .map(|x| x.to_string())
            .unwrap_or_default();
        let of_run = |kind: &'static str, agents: usize, size: String| CsvRow {
            kind,
            engineer: run.engineer.clone(),
            replicate: run.replicate.to_string(),
            branch: run.branch.clone(),
            final_stage: fs.clone(),
            agents: agents.to_string(),
            size,
            n: "1".into(),
            suite: "test".into(),
            ..CsvRow::default()
        };
        for (&(k, n), c) in &run.summary.test.cells {
            rows.push(CsvRow {
                total: c.total.to_string(),
                valid: c.valid.to_string(),
                optimal: c.optimal.to_string(),
                valid_rate: f4(c.valid_rate()),
                optimal_rate: f4(c.optimal_rate()),
                ..of_run("cell", k, n.to_string())
            });
        }
        for k in run.summary.test.agent_counts() {
            let (v, o) = run.summary.test.sum_row(k);
            let cs: Vec<_> = run
                .summary
                .test
                .cells
                .iter()
                .filter(|c| c.0 .0 == k)
                .map(|c| *c.1)
                .collect();
            rows.push(CsvRow {
                total: cs.iter().map(|c| c.total).sum::<u32>().to_string(),
                valid: cs.iter().map(|c| c.valid).sum::<u32>().to_string(),
                optimal: cs.iter().map(|c| c.optimal).sum::<u32>().to_string(),
                valid_rate: f4(v),
                optimal_rate: f4(o),
                ..of_run("sum", k, String::new())
            });
        }
    }
    for c in &r.cells {
        rows.push(CsvRow {
            kind: "mean",
            engineer: c.engineer.clone(),
            agents: c.agents.to_string(),
            size: c.size.map(|n| n.to_string()).unwrap_or_default(),
            n: c.n.to_string(),
            valid_rate: f4(c.valid_mean),
            optimal_rate: f4(c.optimal_mean),
            valid_ci95: opt(c.valid_ci95),
            optimal_ci95: opt(c.optimal_ci95),
            suite: "test".into(),
            subset: c.subset.clone().unwrap_or_default(),
            ..CsvRow::default()
        });
    }
    let branch = |e: &str, rep: u32| {
        r.runs
            .iter()
            .find(|x| x.engineer == e && x.replicate == rep)
            .map(|x| {
                (
                    x.branch.clone(),
                    x.summary
                        .final_stage
                        .map(|n| n.to_string())
                        .unwrap_or_default(),
                )
            })
            .unwrap_or_default()
    };
    // Each engineer against the baseline, then each engineer's transfer from stage 0
    // (`baseline` "stage 0").
    let compared = r.paired.iter().map(|p| (p, "paired", "paired_mean"));
    let transfer = r.transfer.iter().map(|p| (p, "transfer", "transfer_mean"));
    for (p, per_seed_kind, mean_kind) in compared.chain(transfer) {
        let of_pair = |kind: &'static str| CsvRow {
            kind,
            engineer: p.engineer.clone(),
            agents: p.agents.to_string(),
            suite: p.suite.clone(),
            subset: p.subset.clone().unwrap_or_default(),
            baseline: p.baseline.clone(),
            ..CsvRow::default()
        };
        for (i, rep) in p.replicates.iter().enumerate() {
            let (b, fs) = branch(&p.engineer, *rep);
            rows.push(CsvRow {
                replicate: rep.to_string(),
                branch: b,
                final_stage: fs,
                n: "1".into(),
                valid_rate: f4(p.valid.per_seed[i]),
                optimal_rate: f4(p.optimal.per_seed[i]),
                ..of_pair(per_seed_kind)
            });
        }
        let boot = |m: &StudyPairedMetric| match m.bootstrap_ci95 {
            Some(i) => (f4(i.low), f4(i.high)),
            None => Default::default(),
        };
        let mc = |m: &StudyPairedMetric| match m.mcnemar {
            Some(t) => (
                t.a_only.to_string(),
                t.b_only.to_string(),
                format!("{:.6}", t.p),
            ),
            None => Default::default(),
        };
        let (valid_boot_low, valid_boot_high) = boot(&p.valid);
        let (optimal_boot_low, optimal_boot_high) = boot(&p.optimal);
        let (valid_a_only, valid_b_only, valid_p) = mc(&p.valid);
        let (optimal_a_only, optimal_b_only, optimal_p) = mc(&p.optimal);
        rows.push(CsvRow {
            n: p.replicates.len().to_string(),
            valid_rate: f4(p.valid.mean),
            optimal_rate: f4(p.optimal.mean),
            valid_ci95: opt(p.valid.ci95),
            optimal_ci95: opt(p.optimal.ci95),
            valid_boot_low,
            valid_boot_high,
            optimal_boot_low,
            optimal_boot_high,
            valid_a_only,
            valid_b_only,
            valid_p,
            optimal_a_only,
            optimal_b_only,
            optimal_p,
            ..of_pair(mean_kind)
        });
    }
    csv_text(&rows)
}

/// The CSV text of `rows`, the header (CsvRow's field names) first; the header alone
/// when there is no row.
fn csv_text(rows: &[CsvRow]) -> String {
    let blank = [CsvRow::default()];
    let mut w = csv::Writer::from_writer(Vec::new());
    for row in if rows.is_empty() { &blank[..] } else { rows } {
        w.serialize(row).expect("CSV into memory");
    }
    let text = w.into_inner().expect("CSV into memory");
    let text = String::from_utf8(text).expect("CSV of UTF-8 fields");
    match rows.is_empty() {
        true => text
            .lines()
            .next()
            .map(|h| format!("{h}\n"))
            .unwrap_or_default(),
        false => text,
    }
}

/// study.md: the paper's layout (rows: Sum and sizes per agent count; columns:
/// engineers), mean ± 95% t-interval over seeds, plus the validation curves.
pub fn study_markdown(r: &StudyReport) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# Study: {} forked at stage {}, {} seed{}\n",
        r.from,
        r.at,
        r.seeds,
        if r.seeds == 1 { "" } else { "s" }
    );
    let _ = writeln!(
        s,
        "Final-stage test results, valid % / optimal %: mean over {} seed{}{}.\n",
        r.seeds,
        if r.seeds == 1 { "" } else { "s" },
        if r.seeds > 1 {
            " ± half-width of the 95% t-interval"
        } else {
            " (one seed: no interval)"
        }
    );
    let mut head = String::from("| Agents | Size |");
    let mut rule = String::from("|---|---|");
    for e in &r.engineers {
        head.push_str(&format!(" {e} |"));
        rule.push_str("---|");
    }
    let _ = writeln!(s, "{head}\n{rule}");
    let whole = |c: &&StudyCell| c.subset.is_none();
    let agents: BTreeSet<usize> = r.cells.iter().filter(whole).map(|c| c.agents).collect();
    for k in agents {
        let mut sizes: Vec<Option<usize>> = vec![None];
        sizes.extend(
            r.cells
                .iter()
                .filter(|c| c.agents == k)
                .filter_map(|c| c.size)
                .collect::<BTreeSet<_>>()
                .into_iter()
                .map(Some),
        );
        for size in sizes {
            let mut row = format!(
                "| {k} | {} |",
                size.map(|n| format!("{n}x{n}"))
                    .unwrap_or_else(|| "**Sum**".into())
            );
            for e in &r.engineers {
                match r
                    .cells
                    .iter()
                    .filter(whole)
                    .find(|c| &c.engineer == e && c.agents == k && c.size == size)
                {
                    Some(c) => row.push_str(&format!(
                        " {} / {} |",
                        pm(c.valid_mean, c.valid_ci95),
                        pm(c.optimal_mean, c.optimal_ci95)
                    )),
                    None => row.push_str(" - |"),
                }
            }
            let _ = writeln!(s, "{row}");
        }
    }
    s.push_str(&transfer_markdown(r));
    s.push_str(&subset_markdown(r));
    s.push_str(&paired_markdown(r));
    s.push_str(&orderings_markdown(r));
    s.push_str(&power_markdown(r));
    let _ = writeln!(
        s,
        "\nValidation (2 agents, mean over sizes), valid % / optimal %, mean over seeds:\n"
    );
    let mut head = String::from("| Stage |");
    let mut rule = String::from("|---|");
    for e in &r.engineers {
        head.push_str(&format!(" {e} |"));
        rule.push_str("---|");
    }
    let _ = writeln!(s, "{head}\n{rule}");
    let stages: BTreeSet<u32> = r.validation.iter().map(|v| v.stage).collect();
    for st in stages {
        let mut row = format!("| {st} |");
        for e in &r.engineers {
            match r
                .validation
                .iter()
                .find(|v| &v.engineer == e && v.stage == st)
            {
                Some(v) => row.push_str(&format!(
                    " {} / {} |",
                    rate(v.valid_mean),
                    rate(v.optimal_mean)
                )),
                None => row.push_str(" - |"),
            }
        }
        let _ = writeln!(s, "{row}");
    }
    let _ = writeln!(s, "\nRuns:\n");
    for run in &r.runs {
        let _ = writeln!(
            s,
            "- `{}`: engineer {}, replicate {}, head {}{}",
            run.branch,
            run.engineer,
            run.replicate,
            run.head.short(),
            if run.action == REUSED {
                " (from an earlier report)"
            } else {
                ""
            }
        );
    }
    s
}

/// The Sum rows of each wait-ratio subset of a stratified test suite (empty when the
/// suite is not stratified): rows (agents, subset), a column per engineer.
fn subset_markdown(r: &StudyReport) -> String {
    let mut s = String::new();
    let rows: BTreeSet<(usize, String)> = r
        .cells
        .iter()
        .filter_map(|c| Some((c.agents, c.subset.clone()?)))
        .collect();
    if rows.is_empty() {
        return s;
    }
    let _ = writeln!(
        s,
        "\nFinal-stage test results per wait-ratio subset (Sum: mean over sizes), valid % / optimal %:\n"
    );
    let mut head = String::from("| Agents | Subset |");
    let mut rule = String::from("|---|---|");
    for e in &r.engineers {
        head.push_str(&format!(" {e} |"));
        rule.push_str("---|");
    }
    let _ = writeln!(s, "{head}\n{rule}");
    for (k, subset) in rows {
        let mut row = format!("| {k} | {subset} |");
        for e in &r.engineers {
            match r
                .cells
                .iter()
                .find(|c| &c.engineer == e && c.agents == k && c.subset.as_ref() == Some(&subset))
            {
                Some(c) => row.push_str(&format!(
                    " {} / {} |",
                    pm(c.valid_mean, c.valid_ci95),
                    pm(c.optimal_mean, c.optimal_ci95)
                )),
                None => row.push_str(" - |"),
            }
        }
        let _ = writeln!(s, "{row}");
    }
    s
}

/// One paired cell: `+2.50 [-1.20, +6.20]; boot [-0.80, +5.10]; p 0.2100`.
pub fn paired_cell(m: &StudyPairedMetric) -> String {
    let (main, detail) = paired_cell_parts(m);
    match detail {
        Some(d) => format!("{main}; {d}"),
        None => main,
    }
}

/// A paired cell in two parts: the mean difference with its t-interval over seeds, and
/// the instance-level statistics (`boot [-0.80, +5.10]; p 0.2100`) when there are any.
pub fn paired_cell_parts(m: &StudyPairedMetric) -> (String, Option<String>) {
    let mut main = format!("{:+.2}", m.mean);
    if let Some(h) = m.ci95 {
        main.push_str(&format!(" [{:+.2}, {:+.2}]", m.mean - h, m.mean + h));
    }
    let mut detail = Vec::new();
    if let Some(b) = m.bootstrap_ci95 {
        detail.push(format!("boot [{:+.2}, {:+.2}]", b.low, b.high));
    }
    if let Some(mc) = m.mcnemar {
        detail.push(format!("p {:.4}", mc.p));
    }
    (main, (!detail.is_empty()).then(|| detail.join("; ")))
}

/// Each engineer against `fixed` in the paper's layout: one row per engineer (and per
/// engineer and wait-ratio subset), a column per Sum row (validation, 3, 4, 5 agents).
impl StudyReport {
    /// The paired table's layout, shared by study.md and the report: columns (suite,
    /// agents) with validation first; rows (engineer, subset) in study order, each
    /// engineer's whole suite before its subsets.
    #[allow(clippy::type_complexity)]
    pub fn paired_layout(&self) -> (Vec<(String, usize)>, Vec<(String, Option<String>)>) {
        let cols: BTreeSet<(bool, String, usize)> = self
            .paired
            .iter()
            .map(|p| (p.suite != "val", p.suite.clone(), p.agents))
            .collect();
        let mut rows: Vec<(String, Option<String>)> = Vec::new();
        for p in &self.paired {
            let key = (p.engineer.clone(), p.subset.clone());
            if !rows.contains(&key) {
                rows.push(key);
            }
        }
        rows.sort_by_key(|(e, sub)| {
            (
                self.engineers.iter().position(|x| x == e),
                sub.is_some(),
                sub.clone(),
            )
        });
        (cols.into_iter().map(|(_, s, k)| (s, k)).collect(), rows)
    }
}

fn paired_markdown(r: &StudyReport) -> String {
    let mut s = String::new();
    if r.paired.is_empty() {
        return s;
    }
    let seeds = r
        .paired
        .iter()
        .map(|p| p.replicates.len())
        .max()
        .unwrap_or(0);
    let _ = writeln!(
        s,
        "\nPaired differences vs {BASELINE}: replicate r of each engineer against replicate r of {BASELINE} \
         (the same fork point and suite items). Δ = engineer − {BASELINE} in percentage points, \
         mean over {seeds} seed{}{}; boot: 95% paired bootstrap over items pooled over seeds \
         ({} resamples, items resampled within each seed's cells); p: McNemar's exact test on the \
         discordant items pooled over seeds.",
        if seeds == 1 { "" } else { "s" },
        if seeds > 1 {
            " [95% t-interval of the per-seed differences]"
        } else {
            " (one seed: no t-interval)"
        },
        paired::RESAMPLES
    );
    let (cols, rows) = r.paired_layout();
    for (title, pick) in [("Valid %", 0usize), ("Optimal %", 1usize)] {
        let _ = writeln!(s, "\n{title}, Δ vs {BASELINE} [95% paired CI]:\n");
        let mut head = String::from("| Engineer |");
        let mut rule = String::from("|---|");
        for (suite, k) in &cols {
            head.push_str(&if suite == "val" {
                format!(" Validation ({k} agents) |")
            } else {
                format!(" {k} agents |")
            });
            rule.push_str("---|");
        }
        let _ = writeln!(s, "{head}\n{rule}");
        for (e, sub) in &rows {
            let mut row = match sub {
                Some(w) => format!("| {e} @ {w} |"),
                None => format!("| {e} |"),
            };
            for (suite, k) in &cols {
                match r.paired.iter().find(|p| {
                    &p.engineer == e && &p.suite == suite && p.agents == *k && &p.subset == sub
                }) {
                    Some(p) => {
                        let m = if pick == 0 { &p.valid } else { &p.optimal };
                        row.push_str(&format!(" {} |", paired_cell(m)));
                    }
                    None => row.push_str(" - |"),
                }
            }
            let _ = writeln!(s, "{row}");
        }
    }
    let notes: BTreeSet<String> = r.paired.iter().filter_map(|p| p.note.clone()).collect();
    for n in notes {
        let _ = writeln!(s, "\nNo instance-level statistics: {n}.");
    }
    s
}

/// What training did per engineer ([`StudyReport::transfer`]): a row per engineer and
/// half (all items, then those that need no coordination and those that do), a column
/// per Sum row, valid then optimal (empty when no run has a transfer).
fn transfer_markdown(r: &StudyReport) -> String {
    let mut s = String::new();
    if r.transfer.is_empty() {
        return s;
    }
    let seeds = r
        .transfer
        .iter()
        .map(|p| p.replicates.len())
        .max()
        .unwrap_or(0);
    let _ = writeln!(
        s,
        "\nTransfer: each run's final stage against its own stage 0 on the same suite items. \
         Δ = final − stage 0 in percentage points, mean over {seeds} seed{}{}; boot: 95% paired \
         bootstrap over items pooled over seeds ({} resamples); p: McNemar's exact test. \
         Rows `indep` and `coord`: the items that need no coordination and those that do.",
        if seeds == 1 { "" } else { "s" },
        if seeds > 1 {
            " [95% t-interval of the per-seed changes]"
        } else {
            " (one seed: no t-interval)"
        },
        paired::RESAMPLES
    );
    let cols: BTreeSet<(bool, String, usize)> = r
        .transfer
        .iter()
        .map(|p| (p.suite != "val", p.suite.clone(), p.agents))
        .collect();
    let halves = [None, Some("indep"), Some("coord")];
    for (title, pick) in [("Valid %", 0usize), ("Optimal %", 1usize)] {
        let _ = writeln!(s, "\n{title}, Δ from stage 0 [95% paired CI]:\n");
        let mut head = String::from("| Engineer |");
        let mut rule = String::from("|---|");
        for (_, suite, k) in &cols {
            head.push_str(&if suite == "val" {
                format!(" Validation ({k} agents) |")
            } else {
                format!(" {k} agents |")
            });
            rule.push_str("---|");
        }
        let _ = writeln!(s, "{head}\n{rule}");
        for e in &r.engineers {
            for half in halves {
                let found = |suite: &str, k: usize| {
                    r.transfer.iter().find(|p| {
                        &p.engineer == e
                            && p.suite == suite
                            && p.agents == k
                            && p.subset.as_deref() == half
                    })
                };
                if !cols.iter().any(|(_, suite, k)| found(suite, *k).is_some()) {
                    continue;
                }
                let mut row = match half {
                    Some(h) => format!("| {e} @ {h} |"),
                    None => format!("| {e} |"),
                };
                for (_, suite, k) in &cols {
                    match found(suite, *k) {
                        Some(p) => {
                            let m = if pick == 0 { &p.valid } else { &p.optimal };
                            row.push_str(&format!(" {} |", paired_cell(m)));
                        }
                        None => row.push_str(" - |"),
                    }
                }
                let _ = writeln!(s, "{row}");
            }
        }
    }
    let notes: BTreeSet<String> = r.transfer.iter().filter_map(|p| p.note.clone()).collect();
    for n in notes {
        let _ = writeln!(s, "\nNo instance-level statistics of the transfer: {n}.");
    }
    s
}

/// What a paired interval says about "engineer > baseline".
fn verdict(m: &StudyPairedMetric) -> &'static str {
    let (low, high) = match (m.ci95, m.bootstrap_ci95) {
        (Some(h), _) => (m.mean - h, m.mean + h),
        (None, Some(b)) => (b.low, b.high),
        (None, None) => return "one seed, no interval",
    };
    if low > 0.0 {
        "holds"
    } else if high < 0.0 {
        "reversed"
    } else {
        "not resolved"
    }
}

/// The paper's orderings stated plainly, each with its paired interval, on the items
/// that need coordination (validation, and the power line's test row) or, in a suite
/// that does not mark them, on every item.
fn orderings_markdown(r: &StudyReport) -> String {
    let mut s = String::new();
    let Some(pw) = &r.power else { return s };
    let coord = pw.subset.clone();
    let val_agents = r
        .paired
        .iter()
        .chain(&r.orderings)
        .filter(|p| p.suite == "val")
        .map(|p| p.agents)
        .min();
    let mut rows: Vec<(String, usize)> = vec![];
    if let Some(k) = val_agents {
        rows.push(("val".into(), k));
    }
    rows.push((pw.suite.clone(), pw.agents));
    let find = |e: &str, b: &str, suite: &str, k: usize| {
        r.paired.iter().chain(&r.orderings).find(|p| {
            p.engineer == e
                && p.baseline == b
                && p.suite == suite
                && p.agents == k
                && p.subset == coord
        })
    };
    let mut claims: Vec<(String, &str, &str)> = r
        .engineers
        .iter()
        .filter(|e| *e != BASELINE)
        .map(|e| ("engineered > fixed".to_string(), e.as_str(), BASELINE))
        .collect();
    for (claim, e, b) in ORDERINGS {
        if r.orderings
            .iter()
            .any(|p| p.engineer == e && p.baseline == b)
        {
            claims.push((claim.into(), e, b));
        }
    }
    if claims
        .iter()
        .all(|(_, e, b)| rows.iter().all(|(su, k)| find(e, b, su, *k).is_none()))
    {
        return s;
    }
    let items = match &coord {
        Some(c) => format!("items that need coordination (`{c}`)"),
        None => "every item".into(),
    };
    let _ = writeln!(
        s,
        "
The paper's orderings, final stage, valid % on {items}: Δ = engineer − baseline \
         [95% t-interval over seeds]; boot: pooled paired bootstrap over items. \
         \"holds\": the interval is above 0; \"reversed\": below; \"not resolved\": it spans 0.\n"
    );
    for (claim, e, b) in &claims {
        for (suite, k) in &rows {
            let Some(p) = find(e, b, suite, *k) else {
                continue;
            };
            let _ = writeln!(
                s,
                "- {claim}: {e} − {b}, {} {k} agents: {} over {} seed{}: **{}**",
                if suite == "val" {
                    "validation"
                } else {
                    suite.as_str()
                },
                paired_cell(&p.valid),
                p.replicates.len(),
                if p.replicates.len() == 1 { "" } else { "s" },
                verdict(&p.valid)
            );
        }
    }
    s
}

/// The power line: the seeds 80% power asks on the target row, planned and observed.
fn power_markdown(r: &StudyReport) -> String {
    let mut s = String::new();
    let Some(pw) = &r.power else { return s };
    let row = format!(
        "{} {}-agent {}",
        pw.suite,
        pw.agents,
        match &pw.subset {
            Some(c) => format!("`{c}` items"),
            None => "items".into(),
        }
    );
    let n = |x: Option<usize>| x.map(|n| n.to_string()).unwrap_or_else(|| "-".into());
    let _ = write!(
        s,
        "\nPower: to see {} points on {row} with 80% power (two-sided 5% paired t-test over seeds):",
        pw.effect
    );
    if let Some(sd) = pw.planned_sd {
        let _ = write!(
            s,
            " planned from the pilot's SD of per-seed differences, {sd:.2} points: **{} seeds**;",
            n(pw.planned_seeds)
        );
    }
    if pw.observed.is_empty() {
        let _ = write!(s, " observed: not yet (a comparison needs 2 paired seeds).");
    } else {
        let _ = write!(s, " observed here:");
        for (i, o) in pw.observed.iter().enumerate() {
            let _ = write!(
                s,
                "{} {} − {}: SD {:.2} over {} seeds, {} seeds needed",
                if i == 0 { "" } else { ";" },
                o.engineer,
                o.baseline,
                o.sd,
                o.seeds,
                n(o.seeds_needed)
            );
        }
        s.push('.');
    }
    let _ = writeln!(
        s,
        " This study has {} seed{}.",
        r.seeds,
        if r.seeds == 1 { "" } else { "s" }
    );
    s
}

/// A study's mean validation valid-% curve per engineer (plot series).
pub fn study_series(r: &StudyReport) -> Vec<crate::figures::Series> {
    r.engineers
        .iter()
        .map(|e| {
            (
                e.clone(),
                r.validation
                    .iter()
                    .filter(|v| &v.engineer == e)
                    .map(|v| (v.stage, v.valid_mean))
                    .collect(),
            )
        })
        .collect()
}

/// What a study compares: engineer x seed forks of `from` before stage `at`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StudyDesign {
    pub from: String,
    /// Fork before this stage (>= 1).
    pub at: u32,
    /// Seed replicates 0..seeds.
    pub seeds: u32,
    /// The first is the baseline of every paired difference.
    pub engineers: Vec<String>,
}

/// One engineer × seed run of a study, once the study has forked and run it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StudyRunRecord {
    pub engineer: String,
    pub replicate: u32,
    pub branch: String,
    /// `ran` (forked and run now), `resumed` or `skipped` (already finished).
    pub action: &'static str,
}

/// The study's report from its runs (as the application's `run_study` returns them): each
/// run's summary and outcomes, the per-engineer aggregates and the paired differences
/// against the first engineer.
///
/// `reused` are finished runs taken from an earlier report of the same study (see the
/// application's `reusable_runs`): they count like the others, and pair item by item
/// through the outcomes the report kept ([`StudyItems`]). A report written before it
/// kept them has none, so the pooled bootstrap of a row that pairs such a run is left
/// out with a note and the seed-level t-interval stands alone.
pub fn study_report(
    ledger: &mut crate::ledger::Ledger,
    spec: &StudyDesign,
    records: Vec<StudyRunRecord>,
    reused: Vec<StudyRun>,
    plan: PowerPlan,
) -> Result<StudyReport, crate::ledger::LedgerError> {
    let mut runs = reused;
    for rec in records {
        let st = ledger.projection(&rec.branch)?;
        let mut summary = super::compare::summarise(&rec.branch, &st);
        super::compare::load_outcomes(ledger, &st, &mut summary)?;
        runs.push(StudyRun {
            engineer: rec.engineer,
            replicate: rec.replicate,
            head: ledger.head(&rec.branch)?,
            items: StudyItems::of(&summary),
            summary,
            branch: rec.branch,
            action: rec.action.into(),
        });
    }
    // Engineer by engineer (the design's order), seed by seed, wherever a run came from.
    let rank = |e: &str| spec.engineers.iter().position(|x| x == e);
    runs.sort_by_key(|r| (rank(&r.engineer), r.replicate));
    let (cells, validation) = aggregate(&spec.engineers, &runs);
    let paired = paired_vs_baseline(&spec.engineers, &runs);
    let orderings = orderings(&spec.engineers, &runs);
    let transfer = transfers(&spec.engineers, &runs);
    let power = power(&runs, &paired, &orderings, plan);
    Ok(StudyReport {
        from: spec.from.clone(),
        at: spec.at,
        seeds: spec.seeds,
        engineers: spec.engineers.clone(),
        runs,
        cells,
        validation,
        paired,
        orderings,
        transfer,
        power,
        files: vec![],
    })
}

/// The power line: the target row is the test suite's smallest agent count (3 in the
/// paper: the first that 2-agent training must transfer to), on its coordination items
/// when the suite marks them.
fn power(
    runs: &[StudyRun],
    paired: &[StudyPaired],
    orderings: &[StudyPaired],
    plan: PowerPlan,
) -> Option<StudyPower> {
    let rates: Vec<super::compare::SumRate> = runs
        .iter()
        .flat_map(|r| r.summary.sum_rates())
        .filter(|x| x.suite == "test")
        .collect();
    let agents = rates.iter().map(|x| x.agents).min()?;
    let coord = crate::views::paired::coordination_label(true).to_string();
    let subset = rates
        .iter()
        .any(|x| x.agents == agents && x.subset.as_deref() == Some(coord.as_str()))
        .then_some(coord);
    let observed = paired
        .iter()
        .chain(orderings)
        .filter(|p| p.suite == "test" && p.agents == agents && p.subset == subset)
        .filter(|p| p.valid.per_seed.len() >= 2)
        .map(|p| {
            let sd = super::compare::sd(&p.valid.per_seed);
            StudyPowerObserved {
                engineer: p.engineer.clone(),
                baseline: p.baseline.clone(),
                seeds: p.valid.per_seed.len(),
                sd,
                seeds_needed: super::compare::seeds_for_power(sd, plan.effect),
            }
        })
        .collect();
    Some(StudyPower {
        effect: plan.effect,
        suite: "test".into(),
        agents,
        subset,
        planned_sd: plan.pilot_sd,
        planned_seeds: plan
            .pilot_sd
            .and_then(|sd| super::compare::seeds_for_power(sd, plan.effect)),
        observed,
    })
}

/// Why the study's files could not be written (rendered with its causes, [`Chain`],
/// as `path: cause`).
///
/// [`Chain`]: crate::ledger::Chain
#[derive(Debug, thiserror::Error)]
pub enum StudyWriteError {
    /// Creating `dir` or writing the file at `path` failed.
    #[error("{}", path.display())]
    Io {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Figure(#[from] crate::figures::FigureError),
}

/// Write study.csv, study.md, study.svg, study.png and study.json into `dir` (listed in
/// `r.files`).
pub fn write_study(r: &mut StudyReport, dir: &std::path::Path) -> Result<(), StudyWriteError> {
    let io = |p: &std::path::Path, source: std::io::Error| StudyWriteError::Io {
        path: p.to_path_buf(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    let csv = dir.join("study.csv");
    std::fs::write(&csv, study_csv(r)).map_err(|e| io(&csv, e))?;
    let md = dir.join("study.md");
    std::fs::write(&md, study_markdown(r)).map_err(|e| io(&md, e))?;
    let svg = dir.join("study.svg");
    let series = study_series(r);
    let title = format!(
        "Validation valid % per stage (fork of {} at stage {}, mean over {} seeds)",
        r.from, r.at, r.seeds
    );
    let curves = crate::figures::Curves {
        x_label: "stage",
        title: &title,
        y_label: "valid %",
        series: &series,
        bands: &[],
        percent: true,
    };
    crate::figures::write_curves(&svg, &curves)?;
    let png = dir.join("study.png");
    crate::figures::write_curves(&png, &curves)?;
    let json = dir.join("study.json");
    r.files = [&csv, &md, &svg, &png, &json]
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    // study.json is what `ledger report --study DIR` reads back.
    std::fs::write(
        &json,
        serde_json::to_string_pretty(&*r).expect("a study report serialises"),
    )
    .map_err(|e| io(&json, e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(cells: Vec<StudyCell>) -> StudyReport {
        StudyReport {
            from: "main".into(),
            at: 1,
            seeds: 1,
            engineers: vec![],
            runs: vec![],
            cells,
            validation: vec![],
            paired: vec![],
            orderings: vec![],
            transfer: vec![],
            power: None,
            files: vec![],
        }
    }

    #[test]
    fn study_csv_has_its_header_and_quotes_fields_that_need_it() {
        let text = study_csv(&report(vec![]));
        assert_eq!(text.lines().count(), 1, "the header alone: {text}");
        assert!(text.starts_with("kind,engineer,replicate,branch,final_stage,agents,size,n,"));
        assert!(text.ends_with(",optimal_a_only,optimal_b_only,optimal_p\n"));
        let cell = StudyCell {
            engineer: "llm \"a\", b".into(),
            agents: 3,
            size: None,
            subset: None,
            n: 2,
            valid_mean: 50.0,
            valid_ci95: Some(1.5),
            optimal_mean: 25.0,
            optimal_ci95: None,
        };
        let text = study_csv(&report(vec![cell]));
        let header = text.lines().next().unwrap().split(',').count();
        assert_eq!(header, 28);
        let row = text.lines().nth(1).unwrap();
        assert_eq!(
            row,
            "mean,\"llm \"\"a\"\", b\",,,,3,,2,,,,50.0000,25.0000,1.5000,,test,,,,,,,,,,,,"
        );
        let mut read = csv::Reader::from_reader(text.as_bytes());
        let rec = read.records().next().unwrap().unwrap();
        assert_eq!(rec.len(), 28);
        assert_eq!(&rec[1], "llm \"a\", b");
    }

    #[test]
    fn orderings_state_what_each_paired_interval_shows() {
        let metric = |per_seed: Vec<f64>| {
            let (mean, ci95) = super::super::compare::mean_ci(&per_seed);
            StudyPairedMetric {
                per_seed,
                mean,
                ci95,
                bootstrap_ci95: None,
                mcnemar: None,
            }
        };
        let pair = |e: &str, b: &str, xs: Vec<f64>| StudyPaired {
            engineer: e.into(),
            baseline: b.into(),
            suite: "test".into(),
            agents: 3,
            subset: Some("coord".into()),
            replicates: vec![0, 1, 2],
            valid: metric(xs.clone()),
            optimal: metric(xs),
            note: None,
        };
        let mut r = report(vec![]);
        r.seeds = 3;
        r.engineers = vec!["fixed".into(), "base".into(), "current".into()];
        // 11 ± 2.48: above 0; -1..2: spans 0; current below base: reversed.
        r.paired = vec![
            pair("base", "fixed", vec![-1.0, 2.0, 0.0]),
            pair("current", "fixed", vec![10.0, 11.0, 12.0]),
        ];
        r.orderings = vec![
            pair("current", "base", vec![-5.0, -6.0, -7.0]),
            pair("current+engineer-rl", "current", vec![5.0, 6.0, 7.0]),
        ];
        r.power = Some(StudyPower {
            effect: 5.0,
            suite: "test".into(),
            agents: 3,
            subset: Some("coord".into()),
            planned_sd: Some(3.59),
            planned_seeds: Some(7),
            observed: vec![],
        });
        let md = study_markdown(&r);
        let line = |start: &str| {
            md.lines()
                .find(|l| l.starts_with(start))
                .unwrap_or_else(|| panic!("{start:?} in {md}"))
                .to_string()
        };
        assert!(line("- engineered > fixed: base − fixed, test 3 agents:")
            .ends_with("**not resolved**"));
        assert!(line(
            "- engineered > fixed: current − fixed, test 3 agents: +11.00 [+8.52, +13.48]"
        )
        .ends_with("over 3 seeds: **holds**"));
        assert!(
            line("- current > base: current − base, test 3 agents: -6.00")
                .ends_with("**reversed**")
        );
        assert!(line(
            "- engineer RL > current: current+engineer-rl − current, test 3 agents: +6.00"
        )
        .ends_with("**holds**"));
        assert!(
            line("Power: to see 5 points on test 3-agent `coord` items")
                .contains("3.59 points: **7 seeds**; observed: not yet"),
            "{md}"
        );
    }
}
