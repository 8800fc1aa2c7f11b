//! Export: the JSON form of events ([`EventRecord`], one per line) and a flat CSV view.
use super::pct;
use crate::ledger::LedgerError;
use crate::ledger::{BranchState, Ledger};
use crate::record::event::{Event, EventBody};
use crate::record::hash::Hash;
use crate::record::meta::Meta;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::io::Write;

/// The JSON form of a stored event: its id, the event, and its (unhashed) metadata.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EventRecord {
    pub hash: Hash,
    pub parent: Option<Hash>,
    pub stage: u32,
    pub body: EventBody,
    pub meta: Meta,
}

impl EventRecord {
    pub fn new(hash: Hash, event: Event, meta: Meta) -> EventRecord {
        EventRecord {
            hash,
            parent: event.parent,
            stage: event.stage,
            body: event.body,
            meta,
        }
    }

    /// The event itself (without id and metadata).
    pub fn event(&self) -> Event {
        Event {
            parent: self.parent,
            stage: self.stage,
            body: self.body.clone(),
        }
    }
}

/// Export formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Jsonl,
    Csv,
}

/// A CSV writer over `out` (the `csv` crate: fields quoted when they need it).
fn csv_writer(out: &mut dyn Write) -> csv::Writer<&mut dyn Write> {
    csv::Writer::from_writer(out)
}

/// A failed write to the output, as the ledger's error.
fn output_error(e: std::io::Error) -> LedgerError {
    LedgerError::Store(ledger_store::StoreError::Io {
        path: "<output>".into(),
        message: e.to_string(),
    })
}

/// A failed CSV write, as the ledger's output error.
fn csv_error(e: csv::Error) -> LedgerError {
    LedgerError::Store(ledger_store::StoreError::Io {
        path: "<output>".into(),
        message: e.to_string(),
    })
}

/// Write events (a branch's history oldest first, or every stored event in storage
/// order) to `out`. Returns the number written.
pub fn export(
    ledger: &Ledger,
    branch: Option<&str>,
    format: Format,
    out: &mut dyn Write,
) -> Result<u64, LedgerError> {
    let hashes: Vec<Hash> = match branch {
        Some(b) => {
            let mut v = ledger.ancestry(&ledger.head_of(b)?)?;
            v.reverse();
            v
        }
        None => ledger
            .all_events()
            .map(|r| r.map(|(h, _)| h))
            .collect::<Result<_, _>>()?,
    };
    match format {
        Format::Jsonl => {
            for h in &hashes {
                let (event, meta) = ledger.event_with_meta(h)?;
                let rec = EventRecord::new(*h, event, meta);
                serde_json::to_writer(&mut *out, &rec).map_err(|e| output_error(e.into()))?;
                out.write_all(b"\n").map_err(output_error)?;
            }
        }
        Format::Csv => {
            let mut w = csv_writer(out);
            w.write_record(["hash", "parent", "stage", "kind", "summary"])
                .map_err(csv_error)?;
            for h in &hashes {
                let event = ledger.event(h)?;
                w.write_record([
                    h.to_string(),
                    event.parent.map(|p| p.to_hex()).unwrap_or_default(),
                    event.stage.to_string(),
                    event.body.kind().to_string(),
                    event.body.summary(),
                ])
                .map_err(csv_error)?;
            }
            w.flush().map_err(output_error)?;
        }
    }
    Ok(hashes.len() as u64)
}

/// What `ledger export --what` writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum What {
    /// Every event (the default): [`EventRecord`]s.
    Events,
    /// One [`MetricRow`] per (branch, stage, suite, agents, size).
    Metrics,
    /// One [`DecisionRow`] per engineer decision.
    Decisions,
    /// One [`BranchRow`] per branch.
    Branches,
    /// One [`StepRow`](super::steps::StepRow) per GRPO step (sampled batch).
    Steps,
    /// One [`PairedExportRow`] per (branch, suite, agents, subset): each branch paired
    /// item by item with `main` at both final evaluated stages (what `compare main B`
    /// prints).
    Paired,
    /// One [`OutcomeRow`] per (branch, evaluated stage, suite item): the greedy outcome
    /// of every item, with its instance hash and whether it needs coordination, so
    /// that runs in different ledgers (other plans, the same suites) pair item by item.
    Outcomes,
}

/// One suite item's outcome at one evaluated stage of a branch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct OutcomeRow {
    pub branch: String,
    pub stage: u32,
    /// `val` or `test`.
    pub suite: String,
    /// The suite's hash: rows of two ledgers pair only when it is the same.
    pub suite_hash: Hash,
    /// The item's place in its suite (0-based, suite order).
    pub item: u32,
    /// The instance's blob hash (the same instance has the same hash in every ledger).
    pub instance: Hash,
    pub agents: u32,
    pub size: u32,
    /// The optimal sum of costs exceeds the sum of the agents' independent shortest paths.
    pub needs_coordination: bool,
    pub valid: bool,
    pub optimal: bool,
}

/// The columns of `--what outcomes`, in order.
pub const OUTCOME_COLUMNS: [&str; 11] = [
    "branch",
    "stage",
    "suite",
    "suite_hash",
    "item",
    "instance",
    "agents",
    "size",
    "needs_coordination",
    "valid",
    "optimal",
];

/// Every item's outcome at every evaluated stage of the branch `name` (state `st`, head
/// `head`), in stage, suite and item order. An outcomes event whose layout does not
/// match its suite's items (a suite recorded differently) is left out.
fn outcome_rows(
    ledger: &Ledger,
    name: &str,
    head: &Hash,
    st: &BranchState,
) -> Result<Vec<OutcomeRow>, LedgerError> {
    use crate::record::event::{OUTCOME_OPTIMAL, OUTCOME_VALID};
    let suites = super::coordination::suite_items(ledger, head)?;
    let mut rows = Vec::new();
    for s in &st.stages {
        for (suite, h) in &s.outcome_events {
            let (Some(items), EventBody::EvaluationOutcomes(o)) =
                (suites.get(suite), ledger.event(h)?.body)
            else {
                continue;
            };
            if o.outcomes.len() != items.items.len() {
                continue;
            }
            for (i, (&b, it)) in o.outcomes.iter().zip(&items.items).enumerate() {
                rows.push(OutcomeRow {
                    branch: name.to_string(),
                    stage: s.stage,
                    suite: suite.clone(),
                    suite_hash: o.suite_hash,
                    item: i as u32,
                    instance: items.hashes[i],
                    agents: it.instance.agents() as u32,
                    size: it.instance.size() as u32,
                    needs_coordination: it.needs_coordination,
                    valid: b >= OUTCOME_VALID,
                    optimal: b == OUTCOME_OPTIMAL,
                });
            }
        }
    }
    Ok(rows)
}

/// One paired comparison row, flat: `branch` − `against` on the same suite items.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PairedExportRow {
    pub branch: String,
    pub against: String,
    /// The final evaluated stages compared (the branch's, then the baseline's).
    pub stage: Option<u32>,
    pub against_stage: Option<u32>,
    pub suite: String,
    pub agents: usize,
    /// `wait0.25`, `coord`, `indep`, ...; empty: every item of the agent count.
    pub subset: String,
    pub instances: usize,
    /// Valid % of the baseline and the branch, the difference (points) with its 95%
    /// paired bootstrap interval, and McNemar's exact p on the discordant items.
    pub valid_against: f64,
    pub valid: f64,
    pub valid_diff: f64,
    pub valid_diff_low: f64,
    pub valid_diff_high: f64,
    pub valid_p: f64,
    pub optimal_against: f64,
    pub optimal: f64,
    pub optimal_diff: f64,
    pub optimal_diff_low: f64,
    pub optimal_diff_high: f64,
    pub optimal_p: f64,
}

/// One evaluation cell of one stage of one branch, flat (loads straight into pandas).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MetricRow {
    pub branch: String,
    pub stage: u32,
    /// Engineer that designed the stage (empty for the warm-up).
    pub engineer: String,
    /// `val` or `test`.
    pub suite: String,
    pub agents: u32,
    pub size: u32,
    pub total: u32,
    pub valid: u32,
    pub optimal: u32,
    /// Percentages.
    pub valid_rate: f64,
    pub optimal_rate: f64,
    /// Stage-level training facts, repeated on each of the stage's rows.
    pub gradient_steps: u64,
    pub train_trajectories: u64,
    pub train_valid: u64,
    pub train_optimal: u64,
    /// The stage's GRPO statistics (means over its steps of the `grpo_stats` events;
    /// empty for stages without them): reward mean and spread, share of groups with a
    /// reward difference, groups left out of the loss, KL, clip fraction, sampled tokens.
    pub grpo_reward_mean: Option<f64>,
    pub grpo_reward_std: Option<f64>,
    pub grpo_signal_share: Option<f64>,
    pub grpo_skipped_groups: u64,
    pub grpo_kl: Option<f64>,
    pub grpo_clip_fraction: Option<f64>,
    pub grpo_tokens: u64,
    pub completed: bool,
}

/// One engineer decision, flat.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DecisionRow {
    pub branch: String,
    pub stage: u32,
    pub event: String,
    pub engineer: String,
    pub status: String,
    /// Why a decision was rejected or fell back (empty otherwise).
    pub status_reason: String,
    /// Clipped fields, `;`-separated.
    pub clipped_fields: String,
    /// The proposal text (empty: none).
    pub proposed: String,
    /// The applied configuration as compact JSON.
    pub applied: String,
    pub rationale: String,
    pub context: String,
}

/// One branch, flat.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct BranchRow {
    pub branch: String,
    pub head: String,
    pub plan: String,
    pub seed: u64,
    pub events: u64,
    pub stages: u64,
    pub completed_stages: u64,
    /// Source branch, fork point and engineer of the latest fork (empty: not a fork).
    pub forked_from: String,
    pub fork_at: String,
    pub fork_engineer: String,
    pub replicate: u32,
}

/// CSV columns of [`MetricRow`], in order.
pub const METRIC_COLUMNS: [&str; 23] = [
    "branch",
    "stage",
    "engineer",
    "suite",
    "agents",
    "size",
    "total",
    "valid",
    "optimal",
    "valid_rate",
    "optimal_rate",
    "gradient_steps",
    "train_trajectories",
    "train_valid",
    "train_optimal",
    "grpo_reward_mean",
    "grpo_reward_std",
    "grpo_signal_share",
    "grpo_skipped_groups",
    "grpo_kl",
    "grpo_clip_fraction",
    "grpo_tokens",
    "completed",
];

/// CSV columns of [`DecisionRow`], in order.
pub const DECISION_COLUMNS: [&str; 11] = [
    "branch",
    "stage",
    "event",
    "engineer",
    "status",
    "status_reason",
    "clipped_fields",
    "proposed",
    "applied",
    "rationale",
    "context",
];

/// CSV columns of [`BranchRow`], in order.
pub const BRANCH_COLUMNS: [&str; 11] = [
    "branch",
    "head",
    "plan",
    "seed",
    "events",
    "stages",
    "completed_stages",
    "forked_from",
    "fork_at",
    "fork_engineer",
    "replicate",
];

/// CSV columns of [`StepRow`](super::steps::StepRow), in order.
pub const STEP_COLUMNS: [&str; 17] = [
    "branch",
    "stage",
    "step",
    "event",
    "samples",
    "groups",
    "zero_variance_share",
    "skipped_groups",
    "reward_mean",
    "reward_std",
    "kl",
    "clip_fraction",
    "valid_pct",
    "optimal_pct",
    "coordination_samples",
    "coordination_valid",
    "coordination_valid_pct",
];

/// CSV columns of [`PairedExportRow`], in order.
pub const PAIRED_COLUMNS: [&str; 20] = [
    "branch",
    "against",
    "stage",
    "against_stage",
    "suite",
    "agents",
    "subset",
    "instances",
    "valid_against",
    "valid",
    "valid_diff",
    "valid_diff_low",
    "valid_diff_high",
    "valid_p",
    "optimal_against",
    "optimal",
    "optimal_diff",
    "optimal_diff_low",
    "optimal_diff_high",
    "optimal_p",
];

/// `ledger export --what WHAT`: the events ([`export`]) or the table `what` names
/// ([`export_table`]) of `branch` (or every branch), in `fmt`, to `w`. Returns the
/// number of rows written.
pub fn write(
    ledger: &Ledger,
    branch: Option<&str>,
    what: What,
    fmt: Format,
    w: &mut dyn Write,
) -> Result<u64, LedgerError> {
    match what {
        What::Events => export(ledger, branch, fmt, w),
        t => export_table(ledger, branch, t, fmt, w),
    }
}

impl EventRecord {
    /// The record of event `hash` as one JSON line (`ledger log --follow --json`).
    pub fn json_line(hash: Hash, event: Event, meta: Meta) -> Result<String, serde_json::Error> {
        Ok(serde_json::to_string(&EventRecord::new(hash, event, meta))? + "\n")
    }
}

/// The records of events `hs` with their metadata (`ledger log --json`).
pub fn event_records(ledger: &Ledger, hs: &[Hash]) -> Result<Vec<EventRecord>, LedgerError> {
    hs.iter()
        .map(|h| {
            ledger
                .event_with_meta(h)
                .map(|(event, meta)| EventRecord::new(*h, event, meta))
        })
        .collect()
}

/// Write one table (`what` other than events) of `branch`, or of every branch, as
/// JSON lines or CSV (header first, one flat row per line). Returns the rows written.
pub fn export_table(
    ledger: &Ledger,
    branch: Option<&str>,
    what: What,
    format: Format,
    out: &mut dyn Write,
) -> Result<u64, LedgerError> {
    let branches: Vec<(String, Hash)> = match branch {
        Some(b) => vec![(b.to_string(), ledger.head_of(b)?)],
        None => ledger.branches()?,
    };
    let header: &[&str] = match what {
        What::Events => unreachable!("events go through export()"),
        What::Metrics => &METRIC_COLUMNS,
        What::Decisions => &DECISION_COLUMNS,
        What::Branches => &BRANCH_COLUMNS,
        What::Steps => &STEP_COLUMNS,
        What::Paired => &PAIRED_COLUMNS,
        What::Outcomes => &OUTCOME_COLUMNS,
    };
    // The baseline every branch is paired with.
    let baseline = if what == What::Paired {
        let head = ledger.head_of("main")?;
        let st = ledger.state_at(&head)?;
        let mut a = super::compare::summarise("main", &st);
        super::compare::load_outcomes(ledger, &st, &mut a)?;
        Some(a)
    } else {
        None
    };
    let mut rows: Vec<serde_json::Value> = Vec::new();
    for (name, head) in &branches {
        let st = ledger.state_at(head)?;
        match what {
            What::Events => {}
            What::Metrics => rows.extend(values(metric_rows(name, &st))),
            What::Decisions => rows.extend(values(decision_rows(ledger, name, &st)?)),
            What::Steps => rows.extend(values(super::steps::step_rows(ledger, name, head)?)),
            What::Paired => {
                let a = baseline.as_ref().expect("built above for paired");
                if name == "main" {
                    continue;
                }
                rows.extend(values(paired_rows(ledger, name, &st, a)?));
            }
            What::Branches => rows.extend(values([branch_row(name, head, &st)])),
            What::Outcomes => rows.extend(values(outcome_rows(ledger, name, head, &st)?)),
        }
    }
    write_rows(&rows, header, format, out)?;
    Ok(rows.len() as u64)
}

/// Rows as JSON values, the form [`write_rows`] writes either format from.
fn values<T: Serialize>(rows: impl IntoIterator<Item = T>) -> Vec<serde_json::Value> {
    rows.into_iter()
        .map(|r| serde_json::to_value(&r).expect("row"))
        .collect()
}

/// Every evaluation cell of every stage of the branch `name` (state `st`).
fn metric_rows(name: &str, st: &BranchState) -> Vec<MetricRow> {
    let mut rows = Vec::new();
    for s in &st.stages {
        for (suite, cells) in &s.evaluations {
            for c in cells {
                rows.push(MetricRow {
                    branch: name.to_string(),
                    stage: s.stage,
                    engineer: s.engineer.clone().unwrap_or_default(),
                    suite: suite.clone(),
                    agents: c.agents,
                    size: c.size,
                    total: c.total,
                    valid: c.valid,
                    optimal: c.optimal,
                    valid_rate: pct(c.valid, c.total),
                    optimal_rate: pct(c.optimal, c.total),
                    gradient_steps: s.gradient_steps,
                    train_trajectories: s.trajectories,
                    train_valid: s.valid,
                    train_optimal: s.optimal,
                    grpo_reward_mean: s.grpo.reward_mean(),
                    grpo_reward_std: s.grpo.reward_std_mean(),
                    grpo_signal_share: s.grpo.signal_share(),
                    grpo_skipped_groups: s.grpo.skipped_groups,
                    grpo_kl: s.grpo.kl_mean(),
                    grpo_clip_fraction: s.grpo.clip_fraction_mean(),
                    grpo_tokens: s.grpo.tokens,
                    completed: s.completed.is_some(),
                });
            }
        }
    }
    rows
}

/// The engineer decision of every stage of the branch `name` that has one.
fn decision_rows(
    ledger: &Ledger,
    name: &str,
    st: &BranchState,
) -> Result<Vec<DecisionRow>, LedgerError> {
    use crate::record::event::{DecisionStatus, ProposedConfig};
    let mut rows = Vec::new();
    for s in &st.stages {
        let Some(h) = s.decision else { continue };
        let EventBody::EngineerDecision(d) = ledger.event(&h)?.body else {
            continue;
        };
        let (status, reason) = match &d.status {
            DecisionStatus::Accepted => ("accepted", String::new()),
            DecisionStatus::Clipped => ("clipped", String::new()),
            DecisionStatus::Rejected { reason } => ("rejected", reason.clone()),
            DecisionStatus::Fallback { reason } => ("fallback", reason.clone()),
        };
        rows.push(DecisionRow {
            branch: name.to_string(),
            stage: s.stage,
            event: h.to_hex(),
            engineer: d.engineer.clone(),
            status: status.into(),
            status_reason: reason,
            clipped_fields: d
                .clips
                .iter()
                .map(|c| c.field.as_str())
                .collect::<Vec<_>>()
                .join(";"),
            proposed: match &d.proposed {
                ProposedConfig::None => String::new(),
                ProposedConfig::Json(t) => t.clone(),
                ProposedConfig::Blob(b) => String::from_utf8_lossy(&ledger.blob(b)?).into_owned(),
            },
            applied: serde_json::to_string(&d.applied).expect("config"),
            rationale: d.rationale.clone(),
            context: d.context.to_hex(),
        });
    }
    Ok(rows)
}

/// The branch `name` paired item by item with `baseline` (main), one row per suite,
/// agent count and subset.
fn paired_rows(
    ledger: &Ledger,
    name: &str,
    st: &BranchState,
    baseline: &super::compare::BranchSummary,
) -> Result<Vec<PairedExportRow>, LedgerError> {
    let mut b = super::compare::summarise(name, st);
    super::compare::load_outcomes(ledger, st, &mut b)?;
    let c = super::compare::pair(baseline, &b);
    Ok(c.rows
        .iter()
        .map(|p| PairedExportRow {
            branch: name.to_string(),
            against: c.against.clone(),
            stage: c.stage,
            against_stage: c.against_stage,
            suite: p.suite.clone(),
            agents: p.agents,
            subset: p.subset.clone().unwrap_or_default(),
            instances: p.instances,
            valid_against: p.valid.a,
            valid: p.valid.b,
            valid_diff: p.valid.diff,
            valid_diff_low: p.valid.diff_ci95.low,
            valid_diff_high: p.valid.diff_ci95.high,
            valid_p: p.valid.mcnemar.p,
            optimal_against: p.optimal.a,
            optimal: p.optimal.b,
            optimal_diff: p.optimal.diff,
            optimal_diff_low: p.optimal.diff_ci95.low,
            optimal_diff_high: p.optimal.diff_ci95.high,
            optimal_p: p.optimal.mcnemar.p,
        })
        .collect())
}

/// The branch `name` at `head` (state `st`) as one row.
fn branch_row(name: &str, head: &Hash, st: &BranchState) -> BranchRow {
    let (fb, fa, fe) = st
        .forked_from
        .as_ref()
        .map(|(b, at, e)| (b.clone(), at.to_hex(), e.clone()))
        .unwrap_or_default();
    BranchRow {
        branch: name.to_string(),
        head: head.to_hex(),
        plan: st.plan_name.clone(),
        seed: st.seed,
        events: st.events,
        stages: st.stages.len() as u64,
        completed_stages: st.stages.iter().filter(|s| s.completed.is_some()).count() as u64,
        forked_from: fb,
        fork_at: fa,
        fork_engineer: fe,
        replicate: st.replicate,
    }
}

/// Write `rows` as JSON lines, or as CSV under `header` (a string as itself, a null as
/// an empty field, anything else as its JSON text).
fn write_rows(
    rows: &[serde_json::Value],
    header: &[&str],
    format: Format,
    out: &mut dyn Write,
) -> Result<(), LedgerError> {
    match format {
        Format::Jsonl => {
            for r in rows {
                serde_json::to_writer(&mut *out, r).map_err(|e| output_error(e.into()))?;
                out.write_all(b"\n").map_err(output_error)?;
            }
        }
        Format::Csv => {
            let mut w = csv_writer(out);
            w.write_record(header).map_err(csv_error)?;
            for r in rows {
                w.write_record(header.iter().map(|k| match &r[*k] {
                    serde_json::Value::String(s) => s.clone(),
                    serde_json::Value::Null => String::new(),
                    v => v.to_string(),
                }))
                .map_err(csv_error)?;
            }
            w.flush().map_err(output_error)?;
        }
    }
    Ok(())
}
