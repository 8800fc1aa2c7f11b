//! One stage, start to finish: decide -> generate -> train -> evaluate -> summarise ->
//! append. `run` drives a branch from wherever its history stops (a fresh ledger, a
//! completed stage, or a durable checkpoint inside a stage after a crash) to the plan's
//! last stage.
//!
//! Stage 0 is the supervised warm-up (the base model), evaluated like every stage.
//! Stage N >= 1 is designed by the engineer from stage N-1's evidence, then trained with
//! GRPO. Durable points (ledger flushes) are: after the stage's decision and training
//! instances, at every periodic checkpoint, and at the stage's end. Everything between
//! two durable points is a pure function of the state at the first one, so a run that
//! crashed and resumed ends with the same head hash as one that never stopped.
//!
//! Files: this one holds the [`Pipeline`] and `run`; [`setup`] reads the plan (configs,
//! suites, seeds); [`base`] is stage 0; [`training`] a GRPO stage; [`decision`] the
//! engineer's part; [`oracle`] the oracle engineer's search; [`reuse`] stages another
//! branch already trained on the same inputs; [`end`] the end of every stage; [`corpus`] what a scratch model pretrains on; [`bench`] the workloads `ledger
//! lm bench` times; [`progress`] how a run shows its progress.
use crate::engineer::context::TrainingDetails;
use crate::engineer::{
    BuildError, BuildInputs, Decision, Engineer, EngineerContext, EngineerSpec, HistoryEntry,
};
use crate::env::generator::GenerateError;
use crate::env::suite::{self, Suite, SuiteName, SuiteSpec};
use crate::env::table::ResultTable;
use crate::env::{project, Budget, GeneratorConfig, Solved};
use crate::ledger::recorder::Recorder;
use crate::ledger::{codec, BranchState, Hash, Ledger, LedgerError, Meta};
use crate::plan::LedgerPlan;
use crate::record::event::{
    CheckpointSaved, DecisionStatus, EngineerDecision, EventBody, InstancesGenerated,
    ProposedConfig, StageCompleted, StageStarted,
};
use crate::record::trainer::StepRecord;
use crate::seed::Seed;
use crate::train::adam::AdamConfig;
use crate::train::grpo::{self, StepStats};
use crate::train::warmup::{self, WarmupConfig};
use crate::train::{eval, DeviceSpec, TrainError, TrainState};
use std::sync::atomic::{AtomicBool, Ordering};
use tch::Device;

pub mod base;
pub mod bench;
pub mod corpus;
pub mod decision;
pub mod end;
pub mod load;
pub mod oracle;
pub mod progress;
pub mod reuse;
pub mod setup;
pub mod steps;
pub mod training;

pub use base::warmup_data;
pub use corpus::{engineer_corpus, engineer_examples, engineer_pairs, pretraining_corpus};
pub use decision::decision_event;
use end::{durable_checkpoint, finish_stage};
pub use load::{
    load_checkpoint, load_language_model, load_model_checkpoint, load_policy, load_scored_model,
};
pub use setup::{ledger_plan, ledger_suites, stage_seed, suite_spec, suites, warmup_config};

/// What can stop a run. An error another module raised stays this one's `source()` (the
/// CLI finds the ledger's and store's errors there, for the exit code and the repair
/// hint), never its text; a variant that shows its source ends with it, so a printed
/// chain ([`crate::ledger::Chain`]) writes it once.
#[derive(Debug, thiserror::Error)]
pub enum StageError {
    #[error("{0}")]
    Ledger(#[from] LedgerError),
    #[error(transparent)]
    Train(#[from] TrainError),
    /// The plan recorded in the ledger's genesis does not read.
    #[error("the ledger's plan file: {0}")]
    Plan(#[source] crate::plan::PlanError),
    /// The ledger's history has no genesis, so no plan.
    #[error("the ledger's plan file: the ledger has no genesis")]
    NoGenesis,
    /// The ledger's first event is not the genesis that records the plan.
    #[error("the ledger's plan file: the first event is not a genesis")]
    NotGenesis,
    /// A registered LLM engineer's record could not be read.
    #[error("the ledger's plan file: {0}")]
    Registry(#[source] crate::engineer::llm::LlmError),
    /// The plan's engineer RL could not take a step.
    #[error("the ledger's plan file: {0}")]
    EngineerRl(#[source] crate::engineer::rl::RlError),
    /// The evaluation suites or a stage's training instances could not be generated.
    #[error("generating instances: {0}")]
    Generate(#[source] GenerateError),
    /// Item `item` of the warm-up's mixed draw could not be generated.
    #[error("generating instances: warm-up item {item}: {source}")]
    WarmupItem {
        item: usize,
        #[source]
        source: GenerateError,
    },
    /// Every one of `draws` draws of warm-up item `item` was a suite instance or
    /// disagreed with the coordination it was drawn for.
    #[error("generating instances: warm-up item {item}: {draws} draws all coincided with suite instances or needed coordination")]
    WarmupDraws { item: usize, draws: u64 },
    #[error(transparent)]
    Engineer(#[from] crate::engineer::EngineerNameError),
    /// The stage's engineer never answered: no decision was recorded, and nothing of
    /// the stage; `run` resumes it once the engineer answers.
    #[error("{0}; nothing of this stage was recorded, and `ledger run` resumes it once the engineer answers")]
    Unanswered(#[source] crate::engineer::Unanswered),
    #[error("the ledger's plan: {0}")]
    Text(#[from] crate::engineer::text::UnknownRevision),
    #[error("the ledger's plan: [engineer.train] rules: {0}")]
    Rules(#[from] crate::engineer::eval::UnknownRules),
    /// What the recorded history lacks that recomputing it needs.
    #[error("recorded history disagrees with recomputation: {0}")]
    Diverged(Divergence),
    /// A stage the run needs a checkpoint of has none (its own error, not a divergence:
    /// the engineer that asked for it is named in the source).
    #[error(transparent)]
    NoCheckpoint(BuildError),
    /// An engineer that reads a policy was given none.
    #[error(transparent)]
    NoModel(BuildError),
    /// The oracle was asked to be built as an engineer (it is the pipeline's search).
    #[error(transparent)]
    Searches(BuildError),
    /// Stage `stage` of `branch` began an oracle search that stopped before its choice,
    /// and the run names another engineer. The search's candidates are recorded and
    /// only the oracle goes on from them: another engineer would train the stage on a
    /// configuration that no decision records. Nothing is recorded.
    #[error(
        "branch {branch}: stage {stage} is an oracle search that stopped before its choice; \
         `ledger run --branch {branch} --engineer oracle` resumes it"
    )]
    SearchUnderway { branch: String, stage: u32 },
    /// Checkpoint reference `reference` names a checkpoint that does not load.
    #[error("{reference}: {source}")]
    Checkpoint {
        reference: String,
        #[source]
        source: Box<StageError>,
    },
    /// A model a command named is neither a model directory nor a checkpoint reference
    /// of the ledger at `ledger`. Both readings are in the text; the ledger's error is
    /// not a source: it is one reading of a mistyped name, not damage or a missing
    /// ledger (the CLI would add `ledger init`'s hint), and the sentence quotes it in
    /// its middle, where a printed chain would write it a second time.
    #[error(
        "model {model}: not a model directory ({}; an HF model directory holds config.json), nor a checkpoint of ledger {} ({as_checkpoint})",
        load::not_a_directory(.model, *.exists),
        .ledger.display()
    )]
    NotAModel {
        model: String,
        /// Whether a file of that name exists (then it is not a directory).
        exists: bool,
        ledger: std::path::PathBuf,
        as_checkpoint: Box<LedgerError>,
    },
    /// An HF model directory that does not load (the error names the file).
    #[error("{0}")]
    HfModel(#[source] crate::train::lm::LmError),
    /// A directory named as a model that has no `config.json`.
    #[error("{model}: a directory without config.json (expected an HF model directory)")]
    NoConfigJson { model: String },
    /// A checkpoint named as a language model that holds another kind of policy.
    #[error("{model}: a {kind} checkpoint, not a language model")]
    NotLm { model: String, kind: &'static str },
    /// A prompt format given for a checkpoint, which uses the one it recorded.
    #[error("--prompt applies to HF directories; a checkpoint uses its recorded format")]
    PromptOfCheckpoint,
}

/// How a branch's recorded history disagrees with what recomputing a stage needs from it.
#[derive(Debug, thiserror::Error)]
pub enum Divergence {
    /// The engineer's context reads stage `stage`, which the branch lacks.
    #[error("no stage {stage}")]
    NoStage { stage: u32 },
    /// Stage `stage` is run, but the branch has no stage before it.
    #[error("stage {stage} has no stage {} before it", .stage - 1)]
    NoStageBefore { stage: u32 },
    /// Stage `stage`, which the next one starts from, recorded no checkpoint.
    #[error("stage {stage} has no checkpoint")]
    NoCheckpoint { stage: u32 },
    /// Stage `stage` recorded its start but no configuration.
    #[error("stage {stage} started without a configuration")]
    NoConfiguration { stage: u32 },
    /// Resuming stage `stage`, step `step` recomputed another record than the branch
    /// holds after the stage's last checkpoint.
    #[error(
        "resuming stage {stage}: step {step} recomputed {recomputed}, but the branch holds \
         {recorded} there (recorded on other kernels or inputs? `ledger replay --verify` \
         compares a stage whole)"
    )]
    Step {
        stage: u32,
        step: u64,
        recorded: String,
        recomputed: String,
    },
}

/// Where the run reports progress (the CLI draws bars; tests stay quiet).
pub trait Progress {
    fn stage_begin(&mut self, _stage: u32, _engineer: &str, _steps: u64) {}
    fn step(&mut self, _stage: u32, _done: u64, _stats: &StepStats) {}
    fn note(&mut self, _message: &str) {}
    fn stage_end(&mut self, _stage: u32, _validation: &ResultTable) {}
}

/// A `Progress` that ignores everything.
pub struct Quiet;
impl Progress for Quiet {}

/// Options of `ledger run`.
#[derive(Clone, Debug)]
pub struct RunOptions {
    pub branch: String,
    /// Run at most this many more stages (None: to the plan's last stage).
    pub stages: Option<u32>,
    /// Engineer for the stages this run designs, not recorded as the branch's choice
    /// (None: the branch's engineer, see [`Pipeline::branch_engineer`]). `ledger run
    /// --engineer` records its choice first with [`Pipeline::choose_engineer`].
    pub engineer: Option<EngineerSpec>,
}

impl RunOptions {
    /// `branch` to the plan's last stage with the branch's engineer (`ledger resume`, a
    /// study task).
    pub fn to_the_end(branch: String) -> RunOptions {
        RunOptions {
            branch,
            stages: None,
            engineer: None,
        }
    }
}

/// How a run ended.
#[derive(Clone, Debug, PartialEq)]
pub struct RunSummary {
    pub branch: String,
    pub head: Hash,
    /// Stages completed by this run.
    pub completed: Vec<u32>,
    /// Stopped by Ctrl-C at a durable point.
    pub interrupted: bool,
}

impl RunSummary {
    /// The line `ledger run` ends with. A run that found nothing to do says why in
    /// words: the branch has run every stage of its plan (stage 0 to `last`), or
    /// `--stages 0` asked for none.
    pub fn describe(&self, last: u32, limit: Option<u32>) -> String {
        let (branch, head) = (&self.branch, self.head.short());
        if !self.completed.is_empty() {
            return format!(
                "branch {branch} at {head} (stages run: {:?})",
                self.completed
            );
        }
        if limit == Some(0) {
            return format!("branch {branch} at {head}: --stages 0, no stage run");
        }
        format!(
            "branch {branch} at {head}: nothing to run, it has run every stage of its plan \
             (stage 0 to stage{last}, the last); `ledger fork --from {branch} --at stageN \
             --engineer E` designs stages 1..{last} anew on a new branch"
        )
    }
}

/// Builds the engineer of a stage from its spec (`engineer::build`, or a replay's
/// variant answering from recorded replies).
pub type EngineerFactory<'f> = dyn FnMut(&EngineerSpec, &BuildInputs<'_>, &BranchState) -> Result<Box<dyn Engineer>, BuildError>
    + 'f;

impl From<BuildError> for StageError {
    fn from(e: BuildError) -> StageError {
        match e {
            BuildError::Name(e) => StageError::Engineer(e),
            BuildError::Ledger(e) => StageError::Ledger(e),
            BuildError::Train(e) => StageError::Train(e),
            e @ BuildError::NoCheckpoint { .. } => StageError::NoCheckpoint(e),
            BuildError::Registry(e) => StageError::Registry(e),
            e @ BuildError::NoModel { .. } => StageError::NoModel(e),
            BuildError::Text(e) => StageError::Text(e),
            e @ BuildError::Searches => StageError::Searches(e),
        }
    }
}

/// Everything a run holds on to between stages.
pub struct Pipeline<'a> {
    pub ledger: &'a mut Ledger,
    pub plan: LedgerPlan,
    pub device: Device,
    /// The device as named (the override, else the plan's), resolved once at open.
    pub device_spec: DeviceSpec,
    pub val: Suite,
    pub test: Suite,
    /// Canonical keys of every suite instance: training data never includes them.
    suite_keys: std::collections::BTreeSet<[u8; 32]>,
    base_meta: Meta,
    /// Whether a stage (or an oracle's candidate) another branch of this ledger trained
    /// on the same inputs is taken from it instead of trained again ([`reuse`]); off
    /// while `replay --verify` recomputes a stage, so a verification trains everything.
    pub reuse_trained_stages: bool,
}

impl<'a> Pipeline<'a> {
    /// A pipeline over `ledger` on `device` (resolved by the caller: the command
    /// line's, else the plan's), its evaluation suites read from stage 0's record.
    pub fn new(ledger: &'a mut Ledger, device: DeviceSpec) -> Result<Pipeline<'a>, StageError> {
        Self::open(ledger, device, false)
    }

    /// A pipeline whose evaluation suites are rebuilt from the plan, for verification:
    /// a replay of stage 0 must recompute the suites it recorded, not read them back.
    pub fn regenerating_suites(
        ledger: &'a mut Ledger,
        device: DeviceSpec,
    ) -> Result<Pipeline<'a>, StageError> {
        Self::open(ledger, device, true)
    }

    /// The device as this pipeline records it in metadata (`cpu`, `cuda`, `cuda:N`).
    pub fn device_name(&self) -> String {
        self.device_spec.to_string()
    }

    fn open(
        ledger: &'a mut Ledger,
        device_spec: DeviceSpec,
        regenerate_suites: bool,
    ) -> Result<Pipeline<'a>, StageError> {
        let plan = ledger_plan(ledger)?;
        let device = crate::train::open_device(device_spec)?;
        tch::set_num_threads(plan.train.torch_threads as i32);
        if device == tch::Device::Cpu {
            crate::train::keep_freed_memory();
        }
        let (val, test) = if regenerate_suites {
            suites(&plan)?
        } else {
            ledger_suites(ledger, &plan)?
        };
        let mut base_meta = Meta::now();
        base_meta.threads = Some(plan.train.torch_threads);
        base_meta.device = Some(device_spec.to_string());
        base_meta
            .versions
            .extend(crate::train::kernels::facts(device));
        base_meta.versions.insert(
            "compute_dtype".into(),
            crate::train::compute::Compute::new(device, plan.train.dtype)
                .dtype_name()
                .into(),
        );
        base_meta.versions.insert(
            "rayon_threads".into(),
            rayon::current_num_threads().to_string(),
        );
        let suite_keys = [&val, &test]
            .iter()
            .flat_map(|s| s.cells.iter().flat_map(|c| c.items.iter()))
            .map(|it| crate::env::generator::instance_key(&it.instance))
            .collect();
        Ok(Pipeline {
            ledger,
            plan,
            device,
            device_spec,
            val,
            test,
            suite_keys,
            base_meta,
            reuse_trained_stages: true,
        })
    }

    /// The device and the plan's compute dtype on it.
    pub fn compute(&self) -> crate::train::compute::Compute {
        crate::train::compute::Compute::new(self.device, self.plan.train.dtype)
    }

    fn recorder(&mut self, branch: &str) -> Recorder<'_> {
        Recorder::new(self.ledger, branch, self.base_meta.clone())
    }

    fn instance_blobs(rec: &mut Recorder<'_>, items: &[Solved]) -> Result<Vec<Hash>, LedgerError> {
        items
            .iter()
            .map(|it| rec.blob(&codec::encode(it)))
            .collect()
    }

    /// A checkpoint as this plan's runs use it: on the device, with the memory bounds
    /// and kernels the plan says (`LedgerPlan::policy_settings`).
    fn load_state(&self, blob: &Hash) -> Result<TrainState, StageError> {
        let mut state = load_state(self.ledger, blob, self.compute())?;
        state.policy.apply_settings(self.plan.policy_settings());
        Ok(state)
    }

    /// Stage 0's freshly made policy: a grid network, or the plan's language model
    /// (a scratch model's tokenizer is trained on the warm-up corpus).
    /// Building a scratch tokenizer's corpus is timed as `example_building` in `phases`.
    fn initial_policy(
        &self,
        seed: Seed,
        data: &[Solved],
        phases: &mut crate::train::timing::Phases,
    ) -> Result<Box<dyn crate::train::policy::Policy>, StageError> {
        match self.plan.policy {
            crate::plan::PolicyKind::Lm => {
                let spec = &self.plan.lm;
                let text = crate::engineer::text::TextRevision::of_plan(&self.plan)?;
                let mut lm =
                    crate::train::lm::init(spec, self.compute(), seed.child("init", 0), || {
                        phases.time(crate::record::timing::phase::EXAMPLE_BUILDING, || {
                            let mut corpus = pretraining_corpus(spec, data);
                            corpus.extend(engineer_corpus(
                                &engineer_examples(&self.plan, text, seed),
                                text,
                            ));
                            corpus
                        })
                    })
                    .map_err(crate::train::TrainError::from)?;
                crate::train::policy::Policy::apply_settings(&mut lm, self.plan.policy_settings());
                Ok(Box::new(lm))
            }
            kind => Ok(crate::train::new_policy(
                kind.name(),
                self.device,
                seed.child("init", 0),
            )?),
        }
    }

    /// The base model (stage 0's final checkpoint) of a branch's history.
    pub fn base_checkpoint(&self, state: &BranchState) -> Option<Hash> {
        state
            .stage(0)
            .filter(|s| s.completed.is_some())
            .and_then(|s| s.checkpoint.map(|c| c.0))
    }

    /// Drive `opts.branch` forward. `stop` is polled between steps (Ctrl-C).
    pub fn run(
        &mut self,
        opts: &RunOptions,
        engineers: &mut EngineerFactory<'_>,
        progress: &mut dyn Progress,
        stop: &AtomicBool,
    ) -> Result<RunSummary, StageError> {
        let mut completed = Vec::new();
        let last = self.plan.engineer.stages;
        // The engineer of the stages this run will design, checked before any work
        // (a grid plan asked for `current` fails here, not after its warm-up).
        let state = self.ledger.projection(&opts.branch)?;
        if next_stage(&state) <= last {
            let spec = match &opts.engineer {
                Some(spec) => spec.clone(),
                None => self.branch_engineer(&state)?,
            };
            crate::engineer::check_spec(&spec, &self.plan, &state)?;
        }
        loop {
            let state = self.ledger.projection(&opts.branch)?;
            let next = next_stage(&state);
            if next > last || opts.stages.is_some_and(|n| completed.len() as u32 >= n) {
                break;
            }
            let done = if next == 0 {
                self.run_warmup(&opts.branch, &state, progress, stop)?
            } else {
                let engineer = match (
                    state.stage(next).and_then(|s| s.engineer.as_deref()),
                    &opts.engineer,
                ) {
                    // resuming a stage that already started: the engineer it recorded
                    (Some(recorded), _) => recorded.parse()?,
                    (None, Some(spec)) => spec.clone(),
                    (None, None) => self.branch_engineer(&state)?,
                };
                self.run_stage(
                    &opts.branch,
                    next,
                    &engineer,
                    &state,
                    engineers,
                    progress,
                    stop,
                )?
            };
            if !done {
                return Ok(RunSummary {
                    branch: opts.branch.clone(),
                    head: self.ledger.head(&opts.branch)?,
                    completed,
                    interrupted: true,
                });
            }
            completed.push(next);
            if stop.load(Ordering::SeqCst) {
                return Ok(RunSummary {
                    branch: opts.branch.clone(),
                    head: self.ledger.head(&opts.branch)?,
                    completed,
                    interrupted: true,
                });
            }
        }
        Ok(RunSummary {
            branch: opts.branch.clone(),
            head: self.ledger.head(&opts.branch)?,
            completed,
            interrupted: false,
        })
    }
}

/// Whether stage `n` of `state` began without a decision: an oracle search that stopped
/// before its choice, the one way a stage's start is recorded before its decision.
pub fn stopped_search(state: &BranchState, n: u32) -> bool {
    state
        .stage(n)
        .is_some_and(|s| s.started.is_some() && s.decision.is_none())
}

/// The next stage a branch has to run (an incomplete stage is resumed).
pub fn next_stage(state: &BranchState) -> u32 {
    match state.stages.iter().max_by_key(|s| s.stage) {
        None => 0,
        Some(s) if s.completed.is_some() => s.stage + 1,
        Some(s) => s.stage,
    }
}

/// Load a checkpoint blob of `ledger` as a training state (the blobs it references
/// come from the same ledger).
pub fn load_state(
    ledger: &Ledger,
    blob: &Hash,
    compute: impl Into<crate::train::compute::Compute>,
) -> Result<TrainState, StageError> {
    let bytes = ledger.blob(blob)?;
    let fetch = |h: &Hash| ledger.blob(h);
    Ok(TrainState::load(&bytes, compute, &fetch)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each error another module raised is kept as a source, and the text is what it
    /// was when these were strings (`Variant(e.to_string())` under the same words); a
    /// printed chain writes each cause once, so it reads as the text does.
    #[test]
    fn causes_are_sources_and_the_text_is_unchanged() {
        use crate::engineer::{llm::LlmError, rl::RlError};
        use crate::ledger::Chain;
        use ledger_store::StoreError;
        let hash = crate::ledger::Hash::of_blob(b"tokenizer");
        let missing = || LedgerError::Store(StoreError::MissingBlob { hash });
        let plan = || LedgerPlan::parse(b"seed = [").unwrap_err();
        let exhausted = || GenerateError::Exhausted {
            size: 5,
            agents: 3,
            hole_ratio: 0.4,
            coordination: Some(true),
            attempts: 100,
        };
        let config = || {
            GenerateError::Config(
                GeneratorConfig::uniform(2, [1usize], 0.2, 0.5)
                    .validate()
                    .unwrap_err(),
            )
        };
        let registry = || LlmError::NotRegistered("gpt".into());
        let lm_blob = || crate::train::lm::LmError::Blob {
            hash,
            source: missing(),
        };
        let cases: Vec<(StageError, String)> = vec![
            (
                StageError::Plan(plan()),
                format!("the ledger's plan file: {}", plan()),
            ),
            (
                StageError::NoGenesis,
                "the ledger's plan file: the ledger has no genesis".into(),
            ),
            (
                StageError::NotGenesis,
                "the ledger's plan file: the first event is not a genesis".into(),
            ),
            (
                StageError::from(BuildError::Registry(registry())),
                format!("the ledger's plan file: {}", registry()),
            ),
            (
                StageError::EngineerRl(RlError::NotLm),
                format!("the ledger's plan file: {}", RlError::NotLm),
            ),
            (
                StageError::Generate(exhausted()),
                format!("generating instances: {}", exhausted()),
            ),
            (
                StageError::Generate(config()),
                format!("generating instances: {}", config()),
            ),
            (
                StageError::WarmupItem {
                    item: 7,
                    source: exhausted(),
                },
                format!("generating instances: warm-up item 7: {}", exhausted()),
            ),
            (
                StageError::WarmupDraws { item: 7, draws: 64 },
                "generating instances: warm-up item 7: 64 draws all coincided with suite \
                 instances or needed coordination"
                    .into(),
            ),
            (
                StageError::Diverged(Divergence::NoStage { stage: 2 }),
                "recorded history disagrees with recomputation: no stage 2".into(),
            ),
            (
                StageError::Diverged(Divergence::NoStageBefore { stage: 3 }),
                "recorded history disagrees with recomputation: stage 3 has no stage 2 \
                 before it"
                    .into(),
            ),
            (
                StageError::Diverged(Divergence::NoCheckpoint { stage: 2 }),
                "recorded history disagrees with recomputation: stage 2 has no checkpoint".into(),
            ),
            (
                StageError::SearchUnderway {
                    branch: "main".into(),
                    stage: 2,
                },
                "branch main: stage 2 is an oracle search that stopped before its choice; \
                 `ledger run --branch main --engineer oracle` resumes it"
                    .into(),
            ),
            (
                StageError::Diverged(Divergence::NoConfiguration { stage: 3 }),
                "recorded history disagrees with recomputation: stage 3 started without a \
                 configuration"
                    .into(),
            ),
            (
                StageError::from(BuildError::NoModel {
                    name: "base".into(),
                }),
                "engineer base: needs a model".into(),
            ),
            (
                StageError::Checkpoint {
                    reference: "main@stage1".into(),
                    source: Box::new(StageError::Ledger(missing())),
                },
                format!("main@stage1: {}", missing()),
            ),
            (
                StageError::Checkpoint {
                    reference: "main@stage1".into(),
                    source: Box::new(StageError::Train(TrainError::Lm(lm_blob()))),
                },
                format!(
                    "main@stage1: checkpoint blob {} is not in the ledger: {}",
                    hash.short(),
                    missing()
                ),
            ),
            (
                StageError::NotAModel {
                    model: "models/x".into(),
                    exists: false,
                    ledger: "ledgers/l".into(),
                    as_checkpoint: Box::new(LedgerError::Store(StoreError::NotALedger {
                        path: "ledgers/l".into(),
                    })),
                },
                "model models/x: not a model directory (no such file or directory models/x; \
                 an HF model directory holds config.json), nor a checkpoint of ledger \
                 ledgers/l (ledgers/l is not a ledger)"
                    .into(),
            ),
            (
                StageError::NotAModel {
                    model: "w.bin".into(),
                    exists: true,
                    ledger: "l".into(),
                    as_checkpoint: Box::new(LedgerError::UnknownBranch {
                        name: "w.bin".into(),
                        nearest: None,
                    }),
                },
                "model w.bin: not a model directory (w.bin is not a directory; an HF model \
                 directory holds config.json), nor a checkpoint of ledger l (no branch named \
                 `w.bin`)"
                    .into(),
            ),
            (
                StageError::NoConfigJson { model: "d".into() },
                "d: a directory without config.json (expected an HF model directory)".into(),
            ),
            (
                StageError::NotLm {
                    model: "main@stage0".into(),
                    kind: "grid",
                },
                "main@stage0: a grid checkpoint, not a language model".into(),
            ),
        ];
        for (e, text) in cases {
            assert_eq!(e.to_string(), text, "{e:?}");
            assert_eq!(Chain(&e).to_string(), text, "{e:?}");
        }
        // The ledger's error under a model's checkpoint stays where the CLI finds it.
        let e = StageError::Checkpoint {
            reference: "main@stage1".into(),
            source: Box::new(StageError::Train(TrainError::Lm(lm_blob()))),
        };
        let found = std::iter::successors(Some(&e as &dyn std::error::Error), |e| e.source())
            .any(|c| matches!(c.downcast_ref(), Some(StoreError::MissingBlob { .. })));
        assert!(found, "{e:?}");
    }

    /// An engineer that needs a checkpoint a stage lacks is its own error, naming the
    /// engineer and the stage, not a "divergence" of the record.
    #[test]
    fn a_missing_checkpoint_is_not_a_divergence() {
        let e = StageError::from(BuildError::NoCheckpoint {
            name: "base".into(),
            stage: 0,
        });
        assert!(matches!(e, StageError::NoCheckpoint(_)), "{e:?}");
        let said = e.to_string();
        assert!(
            said.contains("engineer base")
                && said.contains("stage 0")
                && !said.contains("disagrees"),
            "{said}"
        );
    }
}
