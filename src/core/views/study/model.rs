//! What a study report is made of: the types of `study.json` and `ledger study --json`
//! (schema'd: `schemas/study.json`), the study's design as the application hands it
//! over, and the names every part of a study agrees on ([`BASELINE`], [`REUSED`],
//! [`TRANSFER_BASELINE`], [`ORDERINGS`]). No computation lives here.
use crate::views::compare::BranchSummary;
use crate::views::paired::{Interval, McNemar};

/// The engineer every other is paired against, when the study has it.
pub const BASELINE: &str = "fixed";

/// The hindsight upper bound, whose gap to each arm is that arm's regret.
pub const ORACLE: &str = "oracle";

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
    /// The stages of this run (from the fork on) whose engineer made no decision: its
    /// decision fell back or its reply was rejected, so the configuration stayed as it
    /// was. An arm with any is in part `fixed`; study.md and the CSV say so.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub undecided: Vec<UndecidedStage>,
}

/// A stage whose engineer kept the configuration without deciding to.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct UndecidedStage {
    pub stage: u32,
    /// `fallback` (the engineer failed) or `rejected` (no usable proposal).
    pub status: String,
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
    /// The orderings beyond engineered > fixed: `current` against `base`,
    /// `current+engineer-rl` against `current`, `current` against `blind`, paired seed
    /// by seed the same way (each only where the study has both arms).
    #[serde(default)]
    pub orderings: Vec<StudyPaired>,
    /// What training did per engineer: each run's final stage against its stage 0 on
    /// the same items, every Sum row, paired seed by seed (`baseline` is
    /// [`TRANSFER_BASELINE`]). Trained on 2 agents, the 3-5-agent rows are the transfer.
    #[serde(default)]
    pub transfer: Vec<StudyPaired>,
    /// Each arm's regret when the study has the [`ORACLE`] arm: the oracle against the
    /// arm on every Sum row, paired seed by seed (`engineer` is the oracle and
    /// `baseline` the arm, so Δ = oracle − arm). Empty without an oracle arm.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub regret: Vec<StudyPaired>,
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

/// The `baseline` of a [`StudyReport::transfer`] row: each run's own stage 0.
pub const TRANSFER_BASELINE: &str = "stage 0";

/// The orderings beyond engineered > fixed, as (claim, engineer, baseline): the paper's
/// second, `current` over `base`; the trained trainer's, engineer RL's `current` over
/// the plain one; and whether reading the evidence is what helps, `current` over
/// `blind` (the rule that edits without reading a failure kind).
pub const ORDERINGS: [(&str, &str, &str); 3] = [
    ("current > base", "current", "base"),
    ("engineer RL > current", "current+engineer-rl", "current"),
    ("reading > blind", "current", "blind"),
];

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

/// An empty one-seed report of `cells` (where the unit tests start).
#[cfg(test)]
pub(super) fn report(cells: Vec<StudyCell>) -> StudyReport {
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
        regret: vec![],
        power: None,
        files: vec![],
    }
}
