//! The JSON of `show` (a branch, a stage), `replay --json` and `engineer list --json`,
//! as named types with schemas (`schemas/show-branch.json`, `show-stage.json`,
//! `replay.json`, `engineer-list.json`). An event's `show --json` is the export's
//! [`super::export::EventRecord`].
use super::replay::StageReplay;
use crate::env::config::GeneratorConfig;
use crate::env::simulate::FailureKind;
use crate::ledger::{BranchState, Hash, LedgerError, Resolved, StageState};
use crate::record::event::EvalCell;
use crate::record::projection::{AuditRow, EngineerRlTotals, GrpoTotals};
use schemars::JsonSchema;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// `ledger show BRANCH --json`: the branch's head and its projection.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct BranchShow {
    pub branch: String,
    pub head: Hash,
    pub state: BranchView,
}

/// `ledger show BRANCH@stageN --json`: one stage's projected state.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct StageShow {
    pub branch: String,
    pub stage: StageView,
}

impl BranchShow {
    pub fn new(branch: String, head: Hash, state: &BranchState) -> BranchShow {
        BranchShow {
            branch,
            head,
            state: BranchView::from(state),
        }
    }
}

impl StageShow {
    pub fn new(branch: String, stage: &StageState) -> StageShow {
        StageShow {
            branch,
            stage: StageView::from(stage),
        }
    }
}

/// What `ledger show REF` shows: an event, a branch or a stage ([`show`]).
#[derive(Clone, Debug)]
pub enum Shown {
    Event(super::export::EventRecord),
    Branch {
        name: String,
        head: Hash,
        state: BranchState,
    },
    Stage {
        branch: String,
        stage: StageState,
    },
}

/// What `reference` names in `ledger` (see [`crate::ledger::Ledger::resolve`]), for
/// `ledger show`: the event with its metadata, the branch's projection, or the stage's.
pub fn show(ledger: &mut crate::ledger::Ledger, reference: &str) -> Result<Shown, LedgerError> {
    Ok(match ledger.resolve(reference)? {
        Resolved::Event(h) => {
            let (event, meta) = ledger.event_with_meta(&h)?;
            Shown::Event(super::export::EventRecord::new(h, event, meta))
        }
        Resolved::Branch { name, head } => {
            let state = ledger.projection(&name)?;
            Shown::Branch { name, head, state }
        }
        Resolved::Stage { branch, stage } => {
            let s = ledger.projection(&branch)?;
            let has = s.stages.len();
            let stage = s.stage(stage).cloned().ok_or(LedgerError::NoStage {
                branch: branch.clone(),
                stage,
                has,
            })?;
            Shown::Stage { branch, stage }
        }
    })
}

impl Shown {
    /// `show --json`: the event's record, [`BranchShow`] or [`StageShow`], pretty.
    pub fn to_json(&self) -> Result<String, serde_json::Error> {
        match self {
            Shown::Event(rec) => serde_json::to_string_pretty(rec),
            Shown::Branch { name, head, state } => {
                serde_json::to_string_pretty(&BranchShow::new(name.clone(), *head, state))
            }
            Shown::Stage { branch, stage } => {
                serde_json::to_string_pretty(&StageShow::new(branch.clone(), stage))
            }
        }
    }
}

/// A branch's projection as `show --json` writes it: the projection's fields, each
/// tuple as an object with named fields.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct BranchView {
    pub head: Option<Hash>,
    pub genesis: Option<Hash>,
    pub plan_name: String,
    pub seed: u64,
    pub events: u64,
    pub forked_from: Option<ForkedFrom>,
    /// The engineer that designs the branch's next stages, as last chosen (None: the plan's).
    pub engineer: Option<String>,
    /// Seed replicate of the stages run after the latest fork (0: the plan's seeds).
    pub replicate: u32,
    /// Registered engineers, in order.
    pub engineers: Vec<String>,
    /// The configuration stage 1 starts from.
    pub initial_config: Option<GeneratorConfig>,
    pub stages: Vec<StageView>,
    pub audit: Vec<AuditRow>,
    pub replays: Vec<ReplayMark>,
}

/// Where a branch was forked from.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct ForkedFrom {
    pub branch: String,
    /// The fork point: the event the new branch continues.
    pub at: Hash,
    pub engineer: String,
}

/// A replay recorded on the branch.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct ReplayMark {
    pub stage: u32,
    /// Every event hash matched.
    pub matched: bool,
}

/// One stage's projected state, as `show --json` writes it.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct StageView {
    pub stage: u32,
    pub started: Option<Hash>,
    pub engineer: Option<String>,
    /// The configuration in force (the decision's applied config, else inherited).
    pub config: Option<GeneratorConfig>,
    pub decision: Option<Hash>,
    pub decision_status: Option<String>,
    pub clipped_fields: Vec<String>,
    /// Instances generated in the stage, every split together.
    pub instances: u64,
    /// The same count per split (`train`, `val`, `test`, `rehearsal`, ...).
    pub instances_by_split: BTreeMap<String, u64>,
    pub trajectories: u64,
    pub valid: u64,
    pub optimal: u64,
    pub gradient_steps: u64,
    pub last_step: Option<u64>,
    #[serde(rename = "last_loss", with = "crate::record::readable::opt_f64_bits")]
    #[schemars(with = "Option<crate::record::readable::JsonFloat>")]
    pub last_loss_bits: Option<u64>,
    #[serde(
        rename = "last_grad_norm",
        with = "crate::record::readable::opt_f64_bits"
    )]
    #[schemars(with = "Option<crate::record::readable::JsonFloat>")]
    pub last_grad_norm_bits: Option<u64>,
    pub params: Option<Hash>,
    pub checkpoint: Option<CheckpointView>,
    /// Latest evaluation per suite.
    pub evaluations: BTreeMap<String, Vec<EvalCell>>,
    /// The event each of those evaluations came from.
    pub evaluation_events: BTreeMap<String, Hash>,
    /// Latest per-instance outcomes event per suite.
    pub outcome_events: BTreeMap<String, Hash>,
    pub failures: Option<FailuresView>,
    pub completed: Option<Hash>,
    /// Sums of the stage's per-step GRPO statistics.
    pub grpo: GrpoTotals,
    /// Sums of the stage's engineer-RL steps.
    pub engineer_rl: EngineerRlTotals,
}

/// A stage's checkpoint.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct CheckpointView {
    /// The checkpoint blob (`ledger cat`, `ledger export-checkpoint`).
    pub blob: Hash,
    /// The parameter hash it holds.
    pub params: Hash,
    /// The gradient step it was saved at.
    pub step: u64,
}

/// A stage's failure breakdown on one suite.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct FailuresView {
    pub suite: String,
    pub sizes: Vec<SizeFailuresView>,
}

/// The failures at one map size.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct SizeFailuresView {
    pub size: u32,
    pub total: u32,
    pub counts: Vec<FailureCount>,
    /// Example failing plans, as text.
    pub examples: Vec<String>,
}

/// How many plans failed one way.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct FailureCount {
    pub kind: FailureKind,
    pub count: u32,
}

impl From<&BranchState> for BranchView {
    fn from(s: &BranchState) -> BranchView {
        BranchView {
            head: s.head,
            genesis: s.genesis,
            plan_name: s.plan_name.clone(),
            seed: s.seed,
            events: s.events,
            forked_from: s.forked_from.as_ref().map(|(b, at, e)| ForkedFrom {
                branch: b.clone(),
                at: *at,
                engineer: e.clone(),
            }),
            engineer: s.engineer.clone(),
            replicate: s.replicate,
            engineers: s.engineers.clone(),
            initial_config: s.initial_config.clone(),
            stages: s.stages.iter().map(StageView::from).collect(),
            audit: s.audit.clone(),
            replays: s
                .replays
                .iter()
                .map(|&(stage, matched)| ReplayMark { stage, matched })
                .collect(),
        }
    }
}

impl From<&StageState> for StageView {
    fn from(s: &StageState) -> StageView {
        StageView {
            stage: s.stage,
            started: s.started,
            engineer: s.engineer.clone(),
            config: s.config.clone(),
            decision: s.decision,
            decision_status: s.decision_status.clone(),
            clipped_fields: s.clipped_fields.clone(),
            instances: s.instances(),
            instances_by_split: s.instances_by_split.clone(),
            trajectories: s.trajectories,
            valid: s.valid,
            optimal: s.optimal,
            gradient_steps: s.gradient_steps,
            last_step: s.last_step,
            last_loss_bits: s.last_loss_bits,
            last_grad_norm_bits: s.last_grad_norm_bits,
            params: s.params,
            checkpoint: s.checkpoint.map(|(blob, params, step)| CheckpointView {
                blob,
                params,
                step,
            }),
            evaluations: s.evaluations.clone(),
            evaluation_events: s.evaluation_events.clone(),
            outcome_events: s.outcome_events.clone(),
            failures: s.failures.as_ref().map(|f| FailuresView {
                suite: f.suite.clone(),
                sizes: f
                    .sizes
                    .iter()
                    .map(|z| SizeFailuresView {
                        size: z.size,
                        total: z.total,
                        counts: z
                            .counts
                            .iter()
                            .map(|&(kind, count)| FailureCount { kind, count })
                            .collect(),
                        examples: z.examples.clone(),
                    })
                    .collect(),
            }),
            completed: s.completed,
            grpo: s.grpo.clone(),
            engineer_rl: s.engineer_rl.clone(),
        }
    }
}

/// `ledger show BRANCH@stageN`: a summary a person reads (the whole projection is
/// `--json`). Engineer and decision, training, checkpoint, the configuration in force,
/// validation and test in the paper's layout (valid % / optimal % per size, the Sum
/// row per agent count), and failure kinds.
pub fn render_stage(branch: &str, s: &StageState) -> String {
    let mut o = String::new();
    let short = |h: &Option<Hash>| h.map_or("-".to_string(), |h| h.short());
    let _ = writeln!(o, "{branch}@stage{}", s.stage);
    let status = if s.completed.is_some() {
        format!("completed ({})", short(&s.completed))
    } else if s.started.is_some() {
        "started, not completed".to_string()
    } else {
        "not started".to_string()
    };
    let _ = writeln!(o, "{:<11}{status}", "status");
    if s.stage > 0 {
        let mut d = s.engineer.clone().unwrap_or_else(|| "-".into());
        if let Some(st) = &s.decision_status {
            let _ = write!(d, ", decision {st} ({})", short(&s.decision));
        }
        if !s.clipped_fields.is_empty() {
            let _ = write!(d, ", clipped: {}", s.clipped_fields.join(", "));
        }
        let _ = writeln!(o, "{:<11}{d}", "engineer");
    }
    let mut t = format!(
        "{} gradient steps, {} trajectories ({} valid, {} optimal)",
        s.gradient_steps, s.trajectories, s.valid, s.optimal
    );
    if let Some(r) = s.grpo.reward_mean() {
        let _ = write!(t, ", mean reward {}", super::number(r));
    }
    if let Some(l) = s.last_loss_bits.map(f64::from_bits) {
        let _ = write!(t, ", last loss {}", super::number(l));
    }
    let _ = writeln!(o, "{:<11}{t}", "training");
    if s.instances() > 0 {
        let splits: Vec<String> = s
            .instances_by_split
            .iter()
            .map(|(split, n)| format!("{n} {split}"))
            .collect();
        let _ = writeln!(
            o,
            "{:<11}{} ({})",
            "instances",
            s.instances(),
            splits.join(", ")
        );
    }
    if let Some((blob, params, step)) = &s.checkpoint {
        let _ = writeln!(
            o,
            "{:<11}{} (parameters {}, step {step}; `ledger cat`/`export-checkpoint` it)",
            "checkpoint",
            blob.short(),
            params.short()
        );
    }
    if let Some(c) = &s.config {
        let _ = writeln!(o, "{:<11}{} agents", "config", c.agents);
        let _ = writeln!(
            o,
            "{:>17} {:>6} {:>6} {:>6}",
            "size", "data", "hole", "wait"
        );
        for (n, sc) in &c.sizes {
            let _ = writeln!(
                o,
                "{:>17} {:>6} {:>6} {:>6}",
                format!("{n}x{n}"),
                super::number(sc.data_ratio),
                super::number(sc.hole_ratio),
                super::number(sc.wait_ratio)
            );
        }
    }
    for (suite, title) in [
        ("val", "validation (valid % / optimal %)"),
        ("test", "test (valid % / optimal %)"),
    ] {
        if let Some(t) = super::compare::table(s, suite) {
            o.push('\n');
            o.push_str(&t.render(title));
        }
    }
    let others: Vec<&String> = s
        .evaluations
        .keys()
        .filter(|k| *k != "val" && *k != "test")
        .collect();
    if !others.is_empty() {
        let _ = writeln!(
            o,
            "\nalso evaluated: {} (`--json` has every table)",
            others
                .iter()
                .map(|k| k.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    if let Some(f) = &s.failures {
        let _ = writeln!(o, "\nfailures on {}:", f.suite);
        for z in &f.sizes {
            let kinds: Vec<String> = z
                .counts
                .iter()
                .map(|(k, n)| {
                    let name = serde_json::to_value(k)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_string))
                        .unwrap_or_else(|| format!("{k:?}"));
                    format!("{name} {n}")
                })
                .collect();
            let _ = writeln!(
                o,
                "  {}x{}: {} of {} failed ({})",
                z.size,
                z.size,
                z.counts.iter().map(|c| c.1).sum::<u32>(),
                z.total,
                if kinds.is_empty() {
                    "-".into()
                } else {
                    kinds.join(", ")
                }
            );
        }
    }
    o
}

/// `ledger replay --verify --json`: the stages recomputed and, on success, the
/// `replay_verified` events recorded (hex ids); on a mismatch, what differed.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct ReplayReport {
    pub branch: String,
    /// The stages that matched, in order.
    pub matched: Vec<StageReplay>,
    /// The first mismatch (the branch was not changed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mismatch: Option<String>,
    /// Ids of the `replay_verified` events appended (absent on a mismatch).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replay_verified: Option<Vec<String>>,
}

impl ReplayReport {
    /// The report of `branch`'s verification: the stages that `matched`, the first
    /// `mismatch`, and the ids of the `replay_verified` events recorded, if any.
    pub fn new(
        branch: &str,
        matched: Vec<StageReplay>,
        mismatch: Option<String>,
        ids: Option<&[Hash]>,
    ) -> ReplayReport {
        ReplayReport {
            branch: branch.to_string(),
            matched,
            mismatch,
            replay_verified: ids.map(|ids| ids.iter().map(|h| h.to_hex()).collect()),
        }
    }
}

/// One row of `ledger engineer list --json`: an LLM engineer registered on a branch.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct EngineerRow {
    pub name: String,
    /// Always `llm` (built-in engineers need no registration).
    pub kind: String,
    pub url: String,
    pub model: String,
    /// The environment variable holding the API key (never the key).
    pub api_key_env: Option<String>,
    /// The tokenizer blob (hex) used to count prompt tokens, if any.
    pub tokenizer: Option<String>,
    pub max_context: Option<u32>,
    pub context_modules: Vec<String>,
    /// The `engineer_registered` event (hex) and its stage.
    pub event: String,
    pub stage: u32,
}
