//! The audit view: every engineer decision of a branch with the evidence it read, the
//! configuration change it made (proposed vs applied, per field, against the previous
//! stage's configuration), what the projection onto legal ranges clipped, its
//! rationale and status, whether the applied configuration makes the edits the rationale
//! states, and the outcome: the decided stage's validation per size against the previous
//! stage's, with a verdict on the sizes the decision changed.
use super::pct;
use crate::context::EngineerContext;
use crate::env::config::{ConfigProposal, GeneratorConfig};
use crate::ledger::{BranchState, Hash, Ledger, LedgerError};
use crate::record::event::{DecisionStatus, EvalCell, EventBody, ProposedConfig};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

/// `ledger audit --json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AuditReport {
    pub branch: String,
    pub head: Hash,
    pub decisions: Vec<DecisionAudit>,
}

/// One engineer decision, audited.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DecisionAudit {
    /// The stage the decision designed.
    pub stage: u32,
    /// The decision event.
    pub event: Hash,
    pub engineer: String,
    /// accepted, clipped, rejected or fallback.
    pub status: String,
    /// Why a decision was rejected or fell back.
    pub status_reason: Option<String>,
    /// Key evidence the engineer read: the validation summary and the failure breakdown
    /// per map size, as lines of the rendered context.
    pub evidence: Vec<String>,
    /// Blob of the full rendered context.
    pub context: Hash,
    pub prompt: Option<Hash>,
    pub reply: Option<Hash>,
    /// The proposal's text, verbatim (None: nothing usable was proposed).
    pub proposed: Option<String>,
    /// The configuration in force before the decision (the previous stage's).
    pub previous_config: Option<GeneratorConfig>,
    pub applied_config: GeneratorConfig,
    /// Fields the proposal or the applied configuration changed.
    pub changes: Vec<FieldChange>,
    pub clips: Vec<ClipAudit>,
    /// Keys the engineer may not set, with their values (never applied).
    pub refused: Vec<crate::env::RefusedField>,
    pub rationale: String,
    /// The edits the rationale states (`N: ..., FIELD old -> new`, the evidence-first
    /// answer formats), each set beside the configuration before and after: a rationale
    /// can name an edit its proposal never makes.
    #[serde(default)]
    pub stated_edits: Vec<StatedEdit>,
    /// How GRPO went on the stage this decision designed (None before any step).
    pub training: Option<TrainingSummary>,
    /// Engineer RL on the stage this decision designed (None: the branch does not
    /// train its engineer).
    pub engineer_rl: Option<EngineerRlSummary>,
    pub outcome: Option<DecisionOutcome>,
    /// The `oracle`'s search behind the decision, candidate by candidate (empty for
    /// every other engineer).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub search: Vec<SearchCandidate>,
}

/// One candidate of the oracle's search (an `oracle_candidate` event).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SearchCandidate {
    pub index: u32,
    /// The engineer that proposed it, or `random#K`.
    pub source: String,
    /// The candidate's own decision: its status and rationale.
    pub status: String,
    pub rationale: String,
    pub applied_config: GeneratorConfig,
    /// Some(j): candidate j's configuration, not trained again.
    pub same_as: Option<u32>,
    /// Its validation Sums (valid %, optimal %): the score the oracle ranks by.
    pub valid_sum: f64,
    pub optimal_sum: f64,
    /// The candidate whose configuration the oracle applied.
    pub chosen: bool,
}

/// The oracle candidates recorded just before decision `event` (none for other
/// engineers), in order, the oracle's choice ([`OracleCandidate::best`], when the
/// decision applied its configuration) marked.
///
/// [`OracleCandidate::best`]: crate::record::event::OracleCandidate::best
fn search_of(
    ledger: &Ledger,
    event: &crate::ledger::Event,
    applied: &GeneratorConfig,
) -> Result<Vec<SearchCandidate>, LedgerError> {
    let mut found = Vec::new();
    let mut parent = event.parent;
    while let Some(p) = parent {
        let e = ledger.event(&p)?;
        let EventBody::OracleCandidate(c) = e.body else {
            break;
        };
        found.push(c);
        parent = e.parent;
    }
    found.reverse();
    let f = f64::from_bits;
    // The oracle applies its best candidate's configuration.
    let best = crate::record::event::OracleCandidate::best(&found)
        .filter(|&i| found[i].decision.applied == *applied);
    Ok(found
        .into_iter()
        .enumerate()
        .map(|(i, c)| SearchCandidate {
            index: c.index,
            source: c.source,
            status: c.decision.status.name().into(),
            rationale: c.decision.rationale,
            applied_config: c.decision.applied,
            same_as: c.same_as,
            valid_sum: f(c.valid_sum),
            optimal_sum: f(c.optimal_sum),
            chosen: Some(i) == best,
        })
        .collect())
}

/// A stage's engineer-RL steps in sum (`engineer_training` events).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EngineerRlSummary {
    pub steps: u64,
    pub replies: u64,
    /// Shares of replies, in %.
    pub parsed_pct: f64,
    pub legal_pct: f64,
    pub grounded_pct: f64,
    /// Mean learnability score (4·p(1-p)) over the replies whose proposal was probed.
    pub learnability: Option<f64>,
    /// Mean reward of the first and the last step.
    pub first_reward: f64,
    pub last_reward: f64,
}

impl EngineerRlSummary {
    pub fn of(t: &crate::record::projection::EngineerRlTotals) -> Option<EngineerRlSummary> {
        let pct = |x: u64| 100.0 * x as f64 / t.replies.max(1) as f64;
        Some(EngineerRlSummary {
            steps: t.steps,
            replies: t.replies,
            parsed_pct: pct(t.parsed),
            legal_pct: pct(t.legal),
            grounded_pct: pct(t.grounded),
            learnability: (t.probed > 0).then(|| t.learnability_sum / t.probed as f64),
            first_reward: t.first_reward?,
            last_reward: t.last_reward?,
        })
    }

    /// One line: `4 steps, 32 replies: reward 0.41 -> 0.55, 75% parsed, ...`.
    pub fn line(&self) -> String {
        format!(
            "{} steps, {} replies: reward {:.3} (first step) -> {:.3} (last), {:.0}% parsed, {:.0}% legal, {:.0}% grounded, learnability {}",
            self.steps,
            self.replies,
            self.first_reward,
            self.last_reward,
            self.parsed_pct,
            self.legal_pct,
            self.grounded_pct,
            self.learnability
                .map_or("not probed".to_string(), |l| format!("{l:.3}"))
        )
    }
}

/// One field of the configuration: its previous, proposed and applied value.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FieldChange {
    /// Dotted path, e.g. `sizes.5.hole_ratio`.
    pub field: String,
    pub previous: Option<f64>,
    /// What the engineer proposed for the field (None: not mentioned).
    pub proposed: Option<f64>,
    pub applied: Option<f64>,
    /// Whether the applied value differs from the previous one.
    pub changed: bool,
}

/// An edit a rationale states, `FIELD old -> new` on a line that starts with its size
/// (`N:` or `NxN:`), against the configurations before and after the decision.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StatedEdit {
    /// Dotted path, e.g. `sizes.10.wait_ratio`.
    pub field: String,
    /// The old and new values as the rationale writes them.
    pub stated_from: f64,
    pub stated_to: f64,
    /// The field in the configuration before the decision and in the applied one (None:
    /// the size is not in it).
    pub previous: Option<f64>,
    pub applied: Option<f64>,
    /// Whether the applied value is the stated new value, to the two decimals the
    /// answer formats write.
    pub backed: bool,
}

/// The three per-size fields a rationale may name.
const SIZE_FIELDS: [&str; 3] = ["data_ratio", "hole_ratio", "wait_ratio"];

/// The edits `rationale` states, in the order written: on each line that starts with a
/// size (`10:` or `10x10:`), every `FIELD a -> b` whose FIELD is a size field and whose a
/// and b are numbers. A line without a leading size cannot say which size it edits and
/// is skipped, as is an arrow with anything but a number on either side.
pub fn stated_edits(
    rationale: &str,
    previous: Option<&GeneratorConfig>,
    applied: &GeneratorConfig,
) -> Vec<StatedEdit> {
    let prev = previous.map(flatten).unwrap_or_default();
    let app = flatten(applied);
    let number = |t: &str| -> Option<f64> {
        let t = t.trim_end_matches([',', ';', '.', ')']);
        t.parse::<f64>().ok().filter(|x| x.is_finite())
    };
    let mut out = Vec::new();
    for line in rationale.lines() {
        let tokens: Vec<&str> = line.split_whitespace().collect();
        let Some(size) = tokens.first().and_then(|t| {
            let t = t.strip_suffix(':')?;
            let n = t
                .split_once('x')
                .map_or(t, |(a, b)| if a == b { a } else { "" });
            n.parse::<usize>().ok()
        }) else {
            continue;
        };
        for w in tokens.windows(4) {
            let field = w[0].trim_start_matches(['(', ',']);
            if !SIZE_FIELDS.contains(&field) || w[2] != "->" {
                continue;
            }
            let (Some(from), Some(to)) = (number(w[1]), number(w[3])) else {
                continue;
            };
            let path = format!("sizes.{size}.{field}");
            let applied = app.get(&path).copied();
            out.push(StatedEdit {
                previous: prev.get(&path).copied(),
                backed: applied.is_some_and(|a| (a - to).abs() <= 0.005),
                applied,
                field: path,
                stated_from: from,
                stated_to: to,
            });
        }
    }
    out
}

/// A field the projection onto legal ranges changed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ClipAudit {
    pub field: String,
    pub proposed: String,
    pub applied: String,
    pub reason: String,
}

/// Validation of the decided stage against the previous stage (2 agents, per size).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DecisionOutcome {
    pub suite: String,
    pub previous_stage: u32,
    pub stage: u32,
    /// Map sizes whose configuration the decision changed.
    pub changed_sizes: Vec<usize>,
    pub sizes: Vec<SizeOutcome>,
    /// Mean change of the valid rate (percentage points) over the changed sizes that
    /// the validation set covers (None: none of them is covered or nothing changed).
    pub changed_delta_valid: Option<f64>,
    /// Mean change of the valid rate over all sizes (the "Sum" row).
    pub sum_delta_valid: f64,
    pub sum_delta_optimal: f64,
    /// improved, worsened, unchanged (on the changed sizes), no_change (the decision
    /// kept the configuration), not_covered (changed sizes outside the validation set).
    pub verdict: String,
}

/// One validation size: rates before (previous stage) and after (decided stage).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SizeOutcome {
    pub size: usize,
    /// The decision changed this size's configuration.
    pub changed: bool,
    pub valid_before: f64,
    pub valid_after: f64,
    pub delta_valid: f64,
    pub optimal_before: f64,
    pub optimal_after: f64,
    pub delta_optimal: f64,
}

/// The configuration as (dotted field, value) pairs.
pub fn flatten(c: &GeneratorConfig) -> BTreeMap<String, f64> {
    let mut m = BTreeMap::new();
    m.insert("agents".to_string(), c.agents as f64);
    for (n, s) in &c.sizes {
        m.insert(format!("sizes.{n}.data_ratio"), s.data_ratio);
        m.insert(format!("sizes.{n}.hole_ratio"), s.hole_ratio);
        m.insert(format!("sizes.{n}.wait_ratio"), s.wait_ratio);
    }
    m
}

/// A proposal's fields by dotted path; its `all` entry stands at each of `sizes` (the
/// sizes of the configuration it edits), under a size's own entry.
fn flatten_proposal(p: &ConfigProposal, sizes: &[usize]) -> BTreeMap<String, f64> {
    let mut m = BTreeMap::new();
    if let Some(a) = p.agents {
        m.insert("agents".to_string(), a);
    }
    let all = p
        .all
        .iter()
        .flat_map(|s| sizes.iter().map(move |n| (n.to_string(), s)));
    for (n, s) in all.chain(p.sizes.iter().map(|(n, s)| (n.clone(), s))) {
        let n = n.trim();
        for (k, v) in [
            ("data_ratio", s.data_ratio),
            ("hole_ratio", s.hole_ratio),
            ("wait_ratio", s.wait_ratio),
        ] {
            if let Some(v) = v {
                m.insert(format!("sizes.{n}.{k}"), v);
            }
        }
    }
    m
}

fn field_order(f: &str) -> (usize, String) {
    // agents first, then sizes numerically.
    match f.split('.').nth(1).and_then(|n| n.parse::<usize>().ok()) {
        Some(n) => (n + 1, f.to_string()),
        None => (0, f.to_string()),
    }
}

/// Per-field diff of previous vs proposed vs applied.
pub fn diff(
    previous: Option<&GeneratorConfig>,
    proposed: Option<&ConfigProposal>,
    applied: &GeneratorConfig,
) -> Vec<FieldChange> {
    let prev = previous.map(flatten).unwrap_or_default();
    let sizes: Vec<usize> = previous.unwrap_or(applied).sizes.keys().copied().collect();
    let prop = proposed
        .map(|p| flatten_proposal(p, &sizes))
        .unwrap_or_default();
    let app = flatten(applied);
    let mut fields: Vec<&String> = prev
        .keys()
        .chain(prop.keys())
        .chain(app.keys())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    fields.sort_by_key(|f| field_order(f));
    fields
        .into_iter()
        .filter_map(|f| {
            let (p, q, a) = (
                prev.get(f).copied(),
                prop.get(f).copied(),
                app.get(f).copied(),
            );
            let changed = p != a;
            let proposed_change = q.is_some_and(|q| Some(q) != p);
            (changed || proposed_change).then(|| FieldChange {
                field: f.clone(),
                previous: p,
                proposed: q,
                applied: a,
                changed,
            })
        })
        .collect()
}

fn val_rates(cells: Option<&Vec<EvalCell>>, agents: u32) -> BTreeMap<usize, (f64, f64)> {
    cells
        .map(|cs| {
            cs.iter()
                .filter(|c| c.agents == agents)
                .map(|c| {
                    (
                        c.size as usize,
                        (pct(c.valid, c.total), pct(c.optimal, c.total)),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn outcome(state: &BranchState, stage: u32, changes: &[FieldChange]) -> Option<DecisionOutcome> {
    let before = state.stage(stage.checked_sub(1)?)?.evaluations.get("val")?;
    let after = state.stage(stage)?.evaluations.get("val")?;
    let agents = before.first().map(|c| c.agents).unwrap_or(2);
    let (b, a) = (
        val_rates(Some(before), agents),
        val_rates(Some(after), agents),
    );
    let changed_sizes: Vec<usize> = changes
        .iter()
        .filter(|c| c.changed)
        .filter_map(|c| c.field.split('.').nth(1)?.parse().ok())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let agents_changed = changes.iter().any(|c| c.changed && c.field == "agents");
    let sizes: Vec<SizeOutcome> = b
        .iter()
        .filter_map(|(&n, &(vb, ob))| {
            let &(va, oa) = a.get(&n)?;
            Some(SizeOutcome {
                size: n,
                changed: changed_sizes.contains(&n),
                valid_before: vb,
                valid_after: va,
                delta_valid: va - vb,
                optimal_before: ob,
                optimal_after: oa,
                delta_optimal: oa - ob,
            })
        })
        .collect();
    let mean = |xs: Vec<f64>| (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64);
    let changed_delta_valid = mean(
        sizes
            .iter()
            .filter(|s| s.changed || agents_changed)
            .map(|s| s.delta_valid)
            .collect(),
    );
    let sum_delta_valid = mean(sizes.iter().map(|s| s.delta_valid).collect()).unwrap_or(0.0);
    let sum_delta_optimal = mean(sizes.iter().map(|s| s.delta_optimal).collect()).unwrap_or(0.0);
    let verdict = if changed_sizes.is_empty() && !agents_changed {
        "no_change"
    } else {
        match changed_delta_valid {
            None => "not_covered",
            Some(d) if d > 1e-9 => "improved",
            Some(d) if d < -1e-9 => "worsened",
            Some(_) => "unchanged",
        }
    };
    Some(DecisionOutcome {
        suite: "val".into(),
        previous_stage: stage - 1,
        stage,
        changed_sizes,
        sizes,
        changed_delta_valid,
        sum_delta_valid,
        sum_delta_optimal,
        verdict: verdict.into(),
    })
}

/// A stage's GRPO statistics, averaged over its steps (`grpo_stats` events).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TrainingSummary {
    pub steps: u64,
    pub reward_mean: f64,
    /// Mean over steps of the batch's reward standard deviation.
    pub reward_std: f64,
    /// Share of groups with a reward difference (the ones that carry a gradient).
    pub signal_share: f64,
    pub skipped_groups: u64,
    pub kl: f64,
    pub clip_fraction: f64,
    pub tokens: u64,
}

impl TrainingSummary {
    pub fn of(t: &crate::record::projection::GrpoTotals) -> Option<TrainingSummary> {
        Some(TrainingSummary {
            steps: t.steps,
            reward_mean: t.reward_mean()?,
            reward_std: t.reward_std_mean()?,
            signal_share: t.signal_share()?,
            skipped_groups: t.skipped_groups,
            kl: t.kl_mean()?,
            clip_fraction: t.clip_fraction_mean()?,
            tokens: t.tokens,
        })
    }

    /// One line: `12 steps, reward 1.23 ± 0.41, 64% of groups with signal, ...`.
    pub fn line(&self) -> String {
        format!(
            "{} steps, reward {:.3} ± {:.3}, {:.0}% of groups with signal ({} skipped), kl {:.4}, clipped {:.1}%, {} tokens",
            self.steps,
            self.reward_mean,
            self.reward_std,
            100.0 * self.signal_share,
            self.skipped_groups,
            self.kl,
            100.0 * self.clip_fraction,
            self.tokens
        )
    }
}

/// Why `ledger audit` has nothing to show.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error("`--stage {stage}`: branch {branch} has no engineer decision at stage {stage}")]
    NoDecision { branch: String, stage: u32 },
    #[error("{0}")]
    Ledger(#[from] LedgerError),
}

/// `ledger audit`: [`audit`], where a `stage` asked for must hold a decision.
pub fn audit_of(
    ledger: &Ledger,
    branch: &str,
    stage: Option<u32>,
) -> Result<AuditReport, AuditError> {
    let report = audit(ledger, branch, stage)?;
    match stage {
        Some(stage) if report.decisions.is_empty() => Err(AuditError::NoDecision {
            branch: branch.to_string(),
            stage,
        }),
        _ => Ok(report),
    }
}

/// Audit the decisions of `branch` (all stages, or only `stage`).
pub fn audit(
    ledger: &Ledger,
    branch: &str,
    stage: Option<u32>,
) -> Result<AuditReport, LedgerError> {
    let head = ledger.head_of(branch)?;
    let state = ledger.state_at(&head)?;
    let mut decisions = Vec::new();
    for st in &state.stages {
        if stage.is_some_and(|n| n != st.stage) {
            continue;
        }
        let Some(h) = st.decision else { continue };
        let event = ledger.event(&h)?;
        let EventBody::EngineerDecision(d) = &event.body else {
            continue;
        };
        let search = search_of(ledger, &event, &d.applied)?;
        let d = d.clone();
        let context: EngineerContext =
            crate::record::codec::decode(&ledger.blob(&d.context)?, "engineer context").map_err(
                |e| LedgerError::Corrupt {
                    what: format!(
                        "context blob {} of decision {}",
                        d.context.short(),
                        h.short()
                    ),
                    problem: e.to_string(),
                },
            )?;
        let proposed = match &d.proposed {
            ProposedConfig::None => None,
            ProposedConfig::Json(t) => Some(t.clone()),
            ProposedConfig::Blob(b) => Some(String::from_utf8_lossy(&ledger.blob(b)?).into_owned()),
        };
        let proposal: Option<ConfigProposal> = proposed
            .as_deref()
            .and_then(|t| serde_json::from_str::<ConfigProposal>(t).ok())
            .map(|mut p| {
                // Before text revision 7 `all` was a refused key, never proposed.
                if d.refused.iter().any(|r| r.field == "all") {
                    p.all = None;
                }
                p
            });
        let previous_config = st
            .stage
            .checked_sub(1)
            .and_then(|p| state.stage(p))
            .and_then(|p| p.config.clone())
            .or_else(|| state.initial_config.clone());
        let changes = diff(previous_config.as_ref(), proposal.as_ref(), &d.applied);
        let stated = stated_edits(&d.rationale, previous_config.as_ref(), &d.applied);
        let status = d.status.name();
        let status_reason = match &d.status {
            DecisionStatus::Rejected { reason } | DecisionStatus::Fallback { reason } => {
                Some(reason.clone())
            }
            DecisionStatus::Accepted | DecisionStatus::Clipped => None,
        };
        let outcome = outcome(&state, st.stage, &changes);
        decisions.push(DecisionAudit {
            stage: st.stage,
            event: h,
            engineer: d.engineer.clone(),
            status: status.into(),
            status_reason,
            evidence: context.evidence(),
            context: d.context,
            prompt: d.prompt,
            reply: d.reply,
            proposed,
            previous_config,
            applied_config: d.applied.clone(),
            changes,
            clips: d
                .clips
                .iter()
                .map(|c| ClipAudit {
                    field: c.field.clone(),
                    proposed: c.proposed.clone(),
                    applied: c.applied.clone(),
                    reason: c.reason.clone(),
                })
                .collect(),
            refused: d.refused.clone(),
            rationale: d.rationale.clone(),
            stated_edits: stated,
            training: TrainingSummary::of(&st.grpo),
            engineer_rl: EngineerRlSummary::of(&st.engineer_rl),
            outcome,
            search,
        });
    }
    Ok(AuditReport {
        branch: branch.to_string(),
        head,
        decisions,
    })
}

fn num(x: Option<f64>) -> String {
    x.map_or_else(|| "-".into(), super::number)
}

/// Compact terminal rendering.
pub fn render(r: &AuditReport) -> String {
    let mut s = String::new();
    let unbacked = r
        .decisions
        .iter()
        .filter(|d| d.stated_edits.iter().any(|e| !e.backed))
        .count();
    let _ = writeln!(
        s,
        "audit of branch {} (head {}): {} decision{}{}",
        r.branch,
        r.head.short(),
        r.decisions.len(),
        if r.decisions.len() == 1 { "" } else { "s" },
        if unbacked == 0 {
            String::new()
        } else {
            format!(", {unbacked} stating an edit the stage did not make")
        }
    );
    for d in &r.decisions {
        let _ = writeln!(
            s,
            "\n== stage {} · engineer {} · {}{} · decision {}",
            d.stage,
            d.engineer,
            d.status,
            d.status_reason
                .as_deref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default(),
            d.event.short()
        );
        let _ = writeln!(s, "  saw:");
        if d.evidence.is_empty() {
            let _ = writeln!(s, "    (no summary or failure breakdown in its context)");
        }
        for l in &d.evidence {
            let _ = writeln!(s, "    {l}");
        }
        if d.changes.is_empty() {
            let _ = writeln!(s, "  config: unchanged");
        } else {
            let w = d
                .changes
                .iter()
                .map(|c| c.field.len())
                .max()
                .unwrap_or(5)
                .max(5);
            let _ = writeln!(
                s,
                "  config: {:<w$}  {:>9} {:>9} {:>9}",
                "field", "previous", "proposed", "applied"
            );
            for c in &d.changes {
                let clip = d.clips.iter().find(|k| k.field == c.field);
                let _ = writeln!(
                    s,
                    "          {:<w$}  {:>9} {:>9} {:>9}{}",
                    c.field,
                    num(c.previous),
                    num(c.proposed),
                    num(c.applied),
                    if clip.is_some() { "  clipped" } else { "" }
                );
            }
        }
        for c in &d.clips {
            let _ = writeln!(
                s,
                "  clipped: {} proposed {} applied {} ({})",
                c.field, c.proposed, c.applied, c.reason
            );
        }
        for r in &d.refused {
            let _ = writeln!(
                s,
                "  refused: {} = {} (not an engineer's to set)",
                r.field, r.value
            );
        }
        let _ = writeln!(s, "  rationale: {}", d.rationale.trim());
        for e in d.stated_edits.iter().filter(|e| !e.backed) {
            let _ = writeln!(
                s,
                "  not made: the rationale states {} {} -> {}; previous {}, applied {}",
                e.field,
                super::number(e.stated_from),
                super::number(e.stated_to),
                num(e.previous),
                num(e.applied)
            );
        }
        if let Some(t) = &d.training {
            let _ = writeln!(s, "  training: {}", t.line());
        }
        if let Some(t) = &d.engineer_rl {
            let _ = writeln!(s, "  engineer RL: {}", t.line());
        }
        match &d.outcome {
            None => {
                let _ = writeln!(
                    s,
                    "  outcome: pending (no validation of stage {} yet)",
                    d.stage
                );
            }
            Some(o) => {
                let _ = writeln!(
                    s,
                    "  outcome ({} set, stage {} -> {}; * = size the decision changed):",
                    o.suite, o.previous_stage, o.stage
                );
                let _ = writeln!(
                    s,
                    "      {:>7}  {:>23}  {:>23}",
                    "size", "valid % before->after", "optimal % before->after"
                );
                for z in &o.sizes {
                    let _ = writeln!(
                        s,
                        "    {:1} {:>3}x{:<3}  {:>5.1} -> {:>5.1} ({:>+6.1})  {:>5.1} -> {:>5.1} ({:>+6.1})",
                        if z.changed { "*" } else { "" },
                        z.size,
                        z.size,
                        z.valid_before,
                        z.valid_after,
                        z.delta_valid,
                        z.optimal_before,
                        z.optimal_after,
                        z.delta_optimal
                    );
                }
                let _ = writeln!(
                    s,
                    "  verdict: {}{} (all sizes: valid {:+.1}, optimal {:+.1})",
                    o.verdict,
                    o.changed_delta_valid
                        .map(|d| format!(" on changed sizes (valid {d:+.1})"))
                        .unwrap_or_default(),
                    o.sum_delta_valid,
                    o.sum_delta_optimal
                );
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::config::SizeConfig;

    fn config(hole3: f64) -> GeneratorConfig {
        let size = |h| SizeConfig {
            data_ratio: 0.5,
            hole_ratio: h,
            wait_ratio: 0.2,
        };
        GeneratorConfig {
            agents: 2,
            sizes: [(3, size(hole3)), (10, size(0.1))].into_iter().collect(),
        }
    }

    #[test]
    fn a_stated_edit_the_configuration_does_not_make_is_flagged() {
        // Study v3's stage-1 decision: the rationale raises size 10's wait ratio, the
        // JSON keeps it, so the stage trains on the old value.
        let prev = config(0.1);
        let stated = stated_edits(
            "10: 36/48 failed, mostly vertex_conflict: more coordination, wait_ratio 0.20 -> 0.40",
            Some(&prev),
            &prev,
        );
        assert_eq!(
            stated,
            vec![StatedEdit {
                field: "sizes.10.wait_ratio".into(),
                stated_from: 0.2,
                stated_to: 0.4,
                previous: Some(0.2),
                applied: Some(0.2),
                backed: false,
            }]
        );
    }

    #[test]
    fn stated_edits_are_read_per_sized_line_and_backed_when_applied() {
        let prev = config(0.1);
        let applied = config(0.3);
        let rationale = "3x3: 9/20 failed, mostly hole: fewer holes, hole_ratio 0.10 -> 0.30.\n\
            Overall the maps need wait_ratio 0.2 -> 0.9 (no size: not read)\n\
            10: 5/20 failed, mostly hole: data_ratio 0.5 -> more, hole_ratio 0.1 -> 0.05\n\
            7: 1/20 failed: wait_ratio 0.2 -> 0.3";
        let got = stated_edits(rationale, Some(&prev), &applied);
        let fields: Vec<(&str, bool)> = got.iter().map(|e| (e.field.as_str(), e.backed)).collect();
        // Size 3's edit was made; size 10's was not (0.1 stays); size 7 is in neither
        // configuration; the unsized line and the non-number are skipped.
        assert_eq!(
            fields,
            vec![
                ("sizes.3.hole_ratio", true),
                ("sizes.10.hole_ratio", false),
                ("sizes.7.wait_ratio", false),
            ]
        );
        assert_eq!((got[2].previous, got[2].applied), (None, None));
    }

    #[test]
    fn diff_lists_changed_and_proposed_fields_in_size_order() {
        let prev = config(0.1);
        let applied = config(0.3);
        let proposal: ConfigProposal = serde_json::from_str(
            r#"{"sizes": {"3": {"hole_ratio": 0.9}, "10": {"wait_ratio": 0.2}}}"#,
        )
        .unwrap();
        let d = diff(Some(&prev), Some(&proposal), &applied);
        // 10's wait_ratio was proposed unchanged: not listed.
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].field, "sizes.3.hole_ratio");
        assert_eq!(
            (d[0].previous, d[0].proposed, d[0].applied, d[0].changed),
            (Some(0.1), Some(0.9), Some(0.3), true)
        );
        // `all` stands at every size of the configuration edited, under a size's own.
        let whole: ConfigProposal = serde_json::from_str(
            r#"{"all": {"hole_ratio": 0.3}, "sizes": {"10": {"hole_ratio": 0.9}}}"#,
        )
        .unwrap();
        let d = diff(Some(&prev), Some(&whole), &applied);
        let proposed: Vec<(&str, Option<f64>)> = d
            .iter()
            .filter(|c| c.field.ends_with("hole_ratio"))
            .map(|c| (c.field.as_str(), c.proposed))
            .collect();
        assert_eq!(proposed.len(), prev.sizes.len());
        assert_eq!(proposed[0], ("sizes.3.hole_ratio", Some(0.3)));
        assert_eq!(proposed[1], ("sizes.10.hole_ratio", Some(0.9)));
        let all = diff(None, None, &applied);
        assert_eq!(all[0].field, "agents");
        assert_eq!(all[1].field, "sizes.3.data_ratio");
        assert_eq!(all.last().unwrap().field, "sizes.10.wait_ratio");
    }
}
