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
use crate::engineer::context::TrainingDetails;
use crate::engineer::{BuildError, BuildInputs, Decision, Engineer, EngineerContext, HistoryEntry};
use crate::env::suite::{self, Suite, SuiteName, SuiteSpec};
use crate::env::table::ResultTable;
use crate::env::{project, Budget, GeneratorConfig, Solved};
use crate::ledger::event::{
    CheckpointSaved, DecisionStatus, EngineerDecision, EventBody, InstancesGenerated,
    ProposedConfig, StageCompleted, StageStarted,
};
use crate::ledger::plan::LedgerPlan;
use crate::ledger::recorder::Recorder;
use crate::ledger::{codec, BranchState, Hash, Ledger, LedgerError, Meta};
use crate::seed::Seed;
use crate::train::adam::AdamConfig;
use crate::train::grpo::{self, GrpoConfig, StepStats};
use crate::train::warmup::{self, WarmupConfig};
use crate::train::{eval, TrainError, TrainState};
use std::sync::atomic::{AtomicBool, Ordering};
use tch::Device;

/// What can stop a run.
#[derive(Debug, thiserror::Error)]
pub enum StageError {
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    #[error(transparent)]
    Train(#[from] TrainError),
    #[error("the ledger's plan file: {0}")]
    Plan(String),
    #[error("generating instances: {0}")]
    Generate(String),
    #[error(transparent)]
    Engineer(#[from] crate::engineer::EngineerNameError),
    #[error("recorded history disagrees with recomputation: {0}")]
    Diverged(String),
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
    pub engineer: Option<String>,
    /// Device override (None: the plan's).
    pub device: Option<String>,
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

/// The plan recorded in a ledger's genesis.
pub fn ledger_plan(ledger: &Ledger) -> Result<LedgerPlan, StageError> {
    let history = ledger.history(crate::ledger::refs::MAIN)?;
    let genesis = history
        .first()
        .ok_or_else(|| StageError::Plan("the ledger has no genesis".into()))?;
    let EventBody::Genesis(g) = &genesis.1.body else {
        return Err(StageError::Plan("the first event is not a genesis".into()));
    };
    let bytes = ledger.blob(&g.plan_blob)?;
    LedgerPlan::parse(&bytes).map_err(|e| StageError::Plan(e.to_string()))
}

/// The training hyper-parameters named in a plan.
pub fn grpo_config(plan: &LedgerPlan) -> GrpoConfig {
    let g = &plan.grpo;
    GrpoConfig {
        steps: g.steps,
        lr: g.lr,
        group_size: g.group_size as usize,
        batch_size: g.batch_size as usize,
        clip_eps: g.clip_eps,
        kl_coef: g.kl_coef,
        entropy_coef: g.entropy_coef,
        epochs: g.epochs as usize,
        valid_reward: g.valid_reward,
        optimal_bonus: g.optimal_bonus,
        format_reward: g.format_reward,
        agent_reward: g.agent_reward,
        cost_reward: g.cost_reward,
        zero_variance: g.zero_variance,
        metric: plan.train.metric,
        checkpoint_every: g.checkpoint_every,
        micro_batch: g.micro_batch as usize,
    }
}

pub fn warmup_config(plan: &LedgerPlan) -> WarmupConfig {
    let w = &plan.warmup;
    WarmupConfig {
        steps: w.steps,
        lr: w.lr,
        batch_size: w.batch_size as usize,
        instances: w.instances as usize,
    }
}

/// The evaluation suites of a ledger: the instances its stage 0 recorded (no solver
/// work: building the 5-agent test set takes seconds), else generated from the plan.
pub fn ledger_suites(ledger: &Ledger, plan: &LedgerPlan) -> Result<(Suite, Suite), StageError> {
    let history = ledger.history(crate::ledger::refs::MAIN)?;
    let recorded = |split: &str| -> Result<Option<Vec<Solved>>, StageError> {
        let Some(blobs) = history.iter().find_map(|(_, e)| match &e.body {
            EventBody::InstancesGenerated(g) if e.stage == 0 && g.split == split => {
                Some(g.instances.clone())
            }
            _ => None,
        }) else {
            return Ok(None);
        };
        let mut items = Vec::with_capacity(blobs.len());
        for b in &blobs {
            items.push(
                codec::decode(&ledger.blob(b)?, "suite instance").map_err(|e| {
                    LedgerError::Corrupt {
                        what: format!("instance blob {}", b.short()),
                        problem: e.to_string(),
                    }
                })?,
            );
        }
        Ok(Some(items))
    };
    if let (Some(v), Some(t)) = (recorded("val")?, recorded("test")?) {
        let val = suite::from_items(&suite_spec(plan, SuiteName::Val), v);
        let test = suite::from_items(&suite_spec(plan, SuiteName::Test), t);
        if let (Some(val), Some(test)) = (val, test) {
            return Ok((val, test));
        }
    }
    suites(plan)
}

/// The spec of one of a plan's evaluation suites.
pub fn suite_spec(plan: &LedgerPlan, name: SuiteName) -> SuiteSpec {
    let s = &plan.suites;
    SuiteSpec {
        name,
        per_cell: match name {
            SuiteName::Val => s.validation_per_cell,
            SuiteName::Test => s.test_per_cell,
        } as usize,
        max_size: s.max_size as usize,
        seed: s.seed,
        wait_ratios: s.wait_ratios.clone(),
    }
}

/// The evaluation suites of a plan (deterministic from the plan's suite seed).
pub fn suites(plan: &LedgerPlan) -> Result<(Suite, Suite), StageError> {
    let build = |name| {
        suite::build(&suite_spec(plan, name), Budget::default())
            .map_err(|e| StageError::Generate(e.to_string()))
    };
    Ok((build(SuiteName::Val)?, build(SuiteName::Test)?))
}

/// The stage's node of the seed tree. Replicate 0 is the plan's own tree; a study's
/// replicate k > 0 gets an independent tree for the stages it runs.
pub fn stage_seed(plan: &LedgerPlan, stage: u32, replicate: u32) -> Seed {
    let root = Seed::root(plan.seed);
    let root = if replicate == 0 {
        root
    } else {
        root.child("replicate", replicate as u64)
    };
    root.derive(stage, "stage", 0)
}

/// Builds the engineer of a stage from its name (`engineer::build`, or a replay's
/// variant answering from recorded replies).
pub type EngineerFactory<'f> =
    dyn FnMut(&str, &BuildInputs<'_>, &BranchState) -> Result<Box<dyn Engineer>, BuildError> + 'f;

impl From<BuildError> for StageError {
    fn from(e: BuildError) -> StageError {
        match e {
            BuildError::Name(e) => StageError::Engineer(e),
            BuildError::Ledger(e) => StageError::Ledger(e),
            BuildError::Train(e) => StageError::Train(e),
            e @ BuildError::NoCheckpoint { .. } => StageError::Diverged(e.to_string()),
            BuildError::Registry(m) => StageError::Plan(m),
        }
    }
}

/// Everything a run holds on to between stages.
pub struct Pipeline<'a> {
    pub ledger: &'a mut Ledger,
    pub plan: LedgerPlan,
    pub device: Device,
    pub val: Suite,
    pub test: Suite,
    /// Canonical keys of every suite instance: training data never includes them.
    suite_keys: std::collections::BTreeSet<[u8; 32]>,
    base_meta: Meta,
}

impl<'a> Pipeline<'a> {
    /// A pipeline over `ledger`, its evaluation suites read from stage 0's record.
    pub fn new(
        ledger: &'a mut Ledger,
        device_override: Option<&str>,
    ) -> Result<Pipeline<'a>, StageError> {
        Self::open(ledger, device_override, false)
    }

    /// A pipeline whose evaluation suites are rebuilt from the plan, for verification:
    /// a replay of stage 0 must recompute the suites it recorded, not read them back.
    pub fn regenerating_suites(ledger: &'a mut Ledger) -> Result<Pipeline<'a>, StageError> {
        Self::open(ledger, None, true)
    }

    fn open(
        ledger: &'a mut Ledger,
        device_override: Option<&str>,
        regenerate_suites: bool,
    ) -> Result<Pipeline<'a>, StageError> {
        let plan = ledger_plan(ledger)?;
        let device_name = device_override.unwrap_or(&plan.train.device).to_string();
        let device = crate::train::parse_device(&device_name)?;
        tch::set_num_threads(plan.train.torch_threads as i32);
        let (val, test) = if regenerate_suites {
            suites(&plan)?
        } else {
            ledger_suites(ledger, &plan)?
        };
        let mut base_meta = Meta::now();
        base_meta.threads = Some(plan.train.torch_threads);
        base_meta.device = Some(device_name);
        base_meta
            .versions
            .extend(crate::train::kernels::facts(device));
        base_meta.versions.insert(
            "compute_dtype".into(),
            plan.train.compute(device).dtype_name().into(),
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
            val,
            test,
            suite_keys,
            base_meta,
        })
    }

    /// The device and the plan's compute dtype on it.
    pub fn compute(&self) -> crate::train::compute::Compute {
        self.plan.train.compute(self.device)
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

    fn load_state(&self, blob: &Hash) -> Result<TrainState, StageError> {
        load_state(self.ledger, blob, self.compute())
    }

    /// Stage 0's freshly made policy: a grid network, or the plan's language model
    /// (a scratch model's tokenizer is trained on the warm-up corpus).
    fn initial_policy(
        &self,
        seed: Seed,
        data: &[Solved],
    ) -> Result<Box<dyn crate::train::policy::Policy>, StageError> {
        match self.plan.policy {
            crate::ledger::plan::PolicyKind::Lm => {
                let spec = &self.plan.lm;
                let lm =
                    crate::train::lm::init(spec, self.compute(), seed.child("init", 0), || {
                        let mut corpus = pretraining_corpus(spec, data);
                        corpus.extend(engineer_corpus(&engineer_examples(&self.plan, seed)));
                        corpus
                    })
                    .map_err(crate::train::TrainError::from)?;
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

    /// What building the engineer of a branch's next stage reads.
    pub fn engineer_inputs(&self, state: &BranchState) -> BuildInputs<'_> {
        let stage = next_stage(state);
        BuildInputs {
            ledger: self.ledger,
            plan: &self.plan,
            device: self.device,
            stage,
            stage_seed: stage_seed(&self.plan, stage, state.replicate),
        }
    }

    /// The engineer that designs a branch's next stages: its last recorded choice (a
    /// fork's engineer or `run --engineer`), else the plan's.
    pub fn branch_engineer(&self, state: &BranchState) -> String {
        state
            .engineer
            .clone()
            .unwrap_or_else(|| self.plan.engineer.name.clone())
    }

    /// Make `engineer` the branch's engineer from its next stage on: checked, then
    /// recorded as an `EngineerChosen` event when it differs from the current one (so a
    /// later `run` or `resume` without `--engineer` keeps it). Returns whether it changed.
    pub fn choose_engineer(&mut self, branch: &str, engineer: &str) -> Result<bool, StageError> {
        let state = self.ledger.projection(branch)?;
        let previous = self.branch_engineer(&state);
        let next = next_stage(&state);
        if previous == engineer || next > self.plan.engineer.stages {
            return Ok(false);
        }
        crate::engineer::check_spec(engineer, &self.plan, &state)?;
        self.ledger.append(
            branch,
            vec![(
                EventBody::EngineerChosen(crate::ledger::event::EngineerChosen {
                    engineer: engineer.to_string(),
                    previous,
                }),
                next.saturating_sub(1),
                self.base_meta.clone(),
            )],
        )?;
        Ok(true)
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
            let name = opts
                .engineer
                .clone()
                .unwrap_or_else(|| self.branch_engineer(&state));
            crate::engineer::check_spec(&name, &self.plan, &state)?;
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
                let engineer_name = match state.stage(next).and_then(|s| s.engineer.clone()) {
                    Some(name) => name, // resuming a stage that already started
                    None => opts
                        .engineer
                        .clone()
                        .unwrap_or_else(|| self.branch_engineer(&state)),
                };
                self.run_stage(
                    &opts.branch,
                    next,
                    &engineer_name,
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

    /// Stage 0. Returns false when interrupted at a durable point.
    fn run_warmup(
        &mut self,
        branch: &str,
        state: &BranchState,
        progress: &mut dyn Progress,
        stop: &AtomicBool,
    ) -> Result<bool, StageError> {
        let cfg = warmup_config(&self.plan);
        let seed = stage_seed(&self.plan, 0, 0);
        let (data, easy_blob) =
            warmup_data(&self.plan.warmup, cfg.instances, seed, &self.suite_keys)?;
        let resumed = state.stage(0).and_then(|s| s.checkpoint);
        let (ts, start) = match resumed {
            Some((blob, _, _)) => {
                let ts = self.load_state(&blob)?;
                let done = ts.global_step;
                (ts, done)
            }
            None => {
                let policy = self.initial_policy(seed, &data)?;
                let ts = TrainState::new(
                    policy,
                    AdamConfig {
                        lr: cfg.lr,
                        ..AdamConfig::default()
                    },
                );
                // Killed after the stage's first durable batch but before its first
                // checkpoint: the start is recorded already, train from scratch again.
                if state.stage(0).is_some_and(|s| s.started.is_some()) {
                    return self.warmup_steps(branch, ts, 0, &cfg, &data, seed, progress, stop);
                }
                let (val_items, test_items): (Vec<Solved>, Vec<Solved>) = (
                    self.val
                        .cells
                        .iter()
                        .flat_map(|c| c.items.clone())
                        .collect(),
                    self.test
                        .cells
                        .iter()
                        .flat_map(|c| c.items.clone())
                        .collect(),
                );
                let mut rec = self.recorder(branch);
                let val_blobs = Self::instance_blobs(&mut rec, &val_items)?;
                let test_blobs = Self::instance_blobs(&mut rec, &test_items)?;
                let data_blobs = Self::instance_blobs(&mut rec, &data)?;
                let easy_hash = rec.blob(&easy_blob)?;
                rec.push(
                    0,
                    EventBody::StageStarted(StageStarted {
                        engineer: "warmup".into(),
                        from_checkpoint: None,
                        seed: Hash(*seed.bytes()),
                    }),
                );
                for (split, blobs, config) in [
                    ("val", val_blobs, None),
                    ("test", test_blobs, None),
                    ("warmup", data_blobs, Some(easy_hash)),
                ] {
                    rec.push(
                        0,
                        EventBody::InstancesGenerated(InstancesGenerated {
                            split: split.into(),
                            config: config.unwrap_or(Hash([0; 32])),
                            instances: blobs,
                        }),
                    );
                }
                rec.flush()?;
                (ts, 0)
            }
        };
        self.warmup_steps(branch, ts, start, &cfg, &data, seed, progress, stop)
    }

    /// The warm-up's steps from `start`, its checkpoints, evaluation and completion.
    #[allow(clippy::too_many_arguments)]
    fn warmup_steps(
        &mut self,
        branch: &str,
        mut ts: TrainState,
        start: u64,
        cfg: &WarmupConfig,
        data: &[Solved],
        seed: Seed,
        progress: &mut dyn Progress,
        stop: &AtomicBool,
    ) -> Result<bool, StageError> {
        let every = self.plan.grpo.checkpoint_every;
        // Engineer examples as token pairs (scratch lm plans), each prompt as the
        // model engineer will read it.
        let pairs: Vec<(Vec<u32>, Vec<u32>)> = match ts.policy.as_lm() {
            Some(lm) => engineer_pairs(
                lm,
                &engineer_examples(&self.plan, seed),
                self.plan.lm.engineer_prompt_tokens,
            ),
            None => Vec::new(),
        };
        let w = &self.plan.warmup;
        progress.stage_begin(0, "warmup", cfg.steps);
        let mut rec = Recorder::new(self.ledger, branch, self.base_meta.clone());
        for s in start..cfg.steps {
            let engineer_step = !pairs.is_empty()
                && s >= w.engineer_after
                && (s - w.engineer_after) % w.engineer_every as u64 == w.engineer_every as u64 - 1;
            ts.set_lr(w.lr_at(s));
            let (record, loss) = if engineer_step {
                warmup::text_step(&mut ts, &pairs, w.engineer_batch_size as usize, seed, s)
            } else {
                warmup::step(&mut ts, cfg, data, seed, s)
            };
            rec.push(0, EventBody::GradientStep(record));
            progress.step(
                0,
                s + 1,
                &StepStats {
                    step: ts.global_step,
                    loss,
                    ..Default::default()
                },
            );
            if durable_point(&mut rec, &ts, 0, (s + 1, cfg.steps), every, stop)? {
                return Ok(false);
            }
        }
        let validation = finish_stage(
            &mut rec,
            0,
            &ts,
            (&self.val, &self.test),
            (self.plan.train.metric, self.plan.suites.eval_batch as usize),
            cfg.steps,
        )?;
        progress.stage_end(0, &validation);
        Ok(true)
    }

    /// Stage `n` >= 1. Returns false when interrupted at a durable point.
    #[allow(clippy::too_many_arguments)]
    fn run_stage(
        &mut self,
        branch: &str,
        n: u32,
        engineer_name: &str,
        state: &BranchState,
        engineers: &mut EngineerFactory<'_>,
        progress: &mut dyn Progress,
        stop: &AtomicBool,
    ) -> Result<bool, StageError> {
        let cfg = grpo_config(&self.plan);
        let seed = stage_seed(&self.plan, n, state.replicate);
        let prev = state.stage(n - 1).ok_or_else(|| {
            StageError::Diverged(format!("stage {n} has no stage {} before it", n - 1))
        })?;
        let from = prev
            .checkpoint
            .map(|c| c.0)
            .ok_or_else(|| StageError::Diverged(format!("stage {} has no checkpoint", n - 1)))?;
        let this = state.stage(n);
        let started = this.is_some_and(|s| s.started.is_some());

        // 1. Decide (or recover the recorded decision when resuming).
        let applied: GeneratorConfig = if started {
            this.and_then(|s| s.config.clone()).ok_or_else(|| {
                StageError::Diverged(format!("stage {n} started without a configuration"))
            })?
        } else {
            let current = prev
                .config
                .clone()
                .or_else(|| state.initial_config.clone())
                .expect("genesis has a config");
            let ctx = self.context(state, n, current.clone(), engineer_name)?;
            let inputs = BuildInputs {
                ledger: self.ledger,
                plan: &self.plan,
                device: self.device,
                stage: n,
                stage_seed: seed,
            };
            let mut engineer = engineers(engineer_name, &inputs, state)?;
            let decision = engineer.decide(&ctx);
            let event = decision_event(
                engineer_name,
                &current,
                &ctx,
                self.plan.engineer.max_size as usize,
                decision,
                &mut self.recorder(branch),
            )?;
            let applied = event.applied.clone();
            if let DecisionStatus::Rejected { reason } | DecisionStatus::Fallback { reason } =
                &event.status
            {
                progress.note(&format!("stage {n}: engineer {engineer_name}'s proposal was not used ({reason}); keeping the previous configuration"));
            }
            let mut rec = self.recorder(branch);
            rec.push(
                n,
                EventBody::StageStarted(StageStarted {
                    engineer: engineer_name.into(),
                    from_checkpoint: Some(from),
                    seed: Hash(*seed.bytes()),
                }),
            );
            rec.push(n, EventBody::EngineerDecision(event));
            rec.flush()?;
            applied
        };

        // 2. Generate the training instances (recomputed identically on resume).
        let data = crate::env::generator::generate_excluding(
            &applied,
            self.plan.grpo.instances_per_stage as usize,
            seed.child("instances", 0),
            Budget::default(),
            &self.suite_keys,
        )
        .map_err(|e| StageError::Generate(e.to_string()))?;
        let blobs = {
            let mut rec = self.recorder(branch);
            let blobs = Self::instance_blobs(&mut rec, &data)?;
            if this.is_none_or(|s| s.instances == 0) {
                let config = rec.blob(&codec::encode(&applied))?;
                rec.push(
                    n,
                    EventBody::InstancesGenerated(InstancesGenerated {
                        split: "train".into(),
                        config,
                        instances: blobs.clone(),
                    }),
                );
                rec.flush()?;
            }
            blobs
        };

        // 3. Train from the last durable checkpoint of this stage, else the previous stage's.
        let resume_from = this.and_then(|s| s.checkpoint).map(|c| c.0);
        let mut ts = self.load_state(&resume_from.unwrap_or(from))?;
        if resume_from.is_none() {
            ts = self.with_stage_adapters(ts, from, seed)?;
        }
        let stage_start_step = if resume_from.is_some() {
            self.load_state(&from)?.global_step
        } else {
            ts.global_step
        };
        let start = (ts.global_step - stage_start_step) / cfg.epochs as u64;
        ts.set_lr(cfg.lr);
        // The KL reference: under LoRA the policy's own frozen base; otherwise the
        // stage-0 model, loaded beside it.
        let lora = ts.policy.as_lm().is_some_and(|p| p.model.lora.is_some());
        let base = match state.stage(0).and_then(|s| s.checkpoint) {
            Some((b, _, _)) if cfg.kl_coef > 0.0 && !lora => Some(self.load_state(&b)?),
            _ => None,
        };
        progress.stage_begin(n, engineer_name, cfg.steps);
        let mut rec = Recorder::new(self.ledger, branch, self.base_meta.clone());
        for s in start..cfg.steps {
            let (records, stats) = grpo::step(
                &mut ts,
                base.as_ref().map(|b| b.policy.as_ref()),
                &cfg,
                &data,
                &blobs,
                seed,
                s,
            );
            for r in records {
                rec.push(n, r.into());
            }
            progress.step(n, s + 1, &stats);
            if durable_point(
                &mut rec,
                &ts,
                n,
                (s + 1, cfg.steps),
                cfg.checkpoint_every,
                stop,
            )? {
                return Ok(false);
            }
        }

        // 4. Evaluate, summarise, complete.
        let validation = finish_stage(
            &mut rec,
            n,
            &ts,
            (&self.val, &self.test),
            (self.plan.train.metric, self.plan.suites.eval_batch as usize),
            cfg.steps,
        )?;
        progress.stage_end(n, &validation);
        Ok(true)
    }

    /// An `lm` plan with `lora_rank > 0` trains adapters in the GRPO stages: a stage
    /// that starts from a full-weights checkpoint (a scratch model's stage 0) freezes
    /// those weights and adds fresh adapters, with a fresh optimiser over them.
    fn with_stage_adapters(
        &self,
        ts: TrainState,
        from: Hash,
        seed: Seed,
    ) -> Result<TrainState, StageError> {
        let Some(spec) = self.plan.lm.lora() else {
            return Ok(ts);
        };
        let Some(lm) = ts.policy.as_lm() else {
            return Ok(ts);
        };
        if lm.model.lora.is_some() {
            return Ok(ts);
        }
        let TrainState {
            policy,
            adam,
            global_step,
        } = ts;
        let lm = crate::train::lm::downcast(policy).expect("checked above");
        let lm = lm
            .into_lora(spec, from, seed.child("lora", 0))
            .map_err(crate::train::TrainError::from)?;
        let mut next = TrainState::new(Box::new(lm), adam.config);
        next.global_step = global_step;
        Ok(next)
    }

    /// The context engineer `spec` reads when designing stage `n` from the branch's
    /// history: the plan's context modules with the spec's switches applied, and every
    /// switched-off module's information removed.
    pub fn context(
        &self,
        state: &BranchState,
        n: u32,
        current: GeneratorConfig,
        spec: &str,
    ) -> Result<EngineerContext, StageError> {
        let modules =
            crate::engineer::EngineerSpec::parse(spec)?.modules(&self.plan.engineer.context);
        let prev = state
            .stage(n - 1)
            .ok_or_else(|| StageError::Diverged(format!("no stage {}", n - 1)))?;
        let table = |s: &crate::ledger::StageState| {
            s.evaluations
                .get("val")
                .map(|cells| {
                    eval::table_of(&crate::ledger::event::Evaluation {
                        suite: "val".into(),
                        checkpoint: None,
                        cells: cells.clone(),
                    })
                })
                .unwrap_or_default()
        };
        let mut previous = state
            .initial_config
            .clone()
            .unwrap_or_else(|| current.clone());
        let mut history = Vec::new();
        for s in state.stages.iter().filter(|s| (1..n).contains(&s.stage)) {
            let config = s.config.clone().unwrap_or_else(|| previous.clone());
            history.push(HistoryEntry {
                stage: s.stage,
                engineer: s.engineer.clone().unwrap_or_default(),
                previous: std::mem::replace(&mut previous, config.clone()),
                config,
                validation: table(s),
            });
        }
        let trained = prev.trajectories.max(1) as f64;
        let full = EngineerContext {
            stage: n,
            current,
            validation: table(prev),
            failures: prev
                .failures
                .clone()
                .unwrap_or(crate::ledger::event::FailureBreakdown {
                    suite: "val".into(),
                    sizes: vec![],
                }),
            history,
            training: TrainingDetails {
                steps: prev.gradient_steps,
                train_valid_rate: prev.valid as f64 / trained,
                train_optimal_rate: prev.optimal as f64 / trained,
                last_loss: prev.last_loss_bits.map(f64::from_bits).unwrap_or(0.0),
                last_grad_norm: prev.last_grad_norm_bits.map(f64::from_bits).unwrap_or(0.0),
            },
            modules,
            max_size: self.plan.engineer.max_size as usize,
        };
        Ok(full.without_switched_off_modules())
    }
}

/// The next stage a branch has to run (an incomplete stage is resumed).
pub fn next_stage(state: &BranchState) -> u32 {
    match state.stages.iter().max_by_key(|s| s.stage) {
        None => 0,
        Some(s) if s.completed.is_some() => s.stage + 1,
        Some(s) => s.stage,
    }
}

/// After step `done` of `total`: every `every` steps (but not the last, which the stage
/// end covers) save a checkpoint and make everything durable. Returns true when the run
/// must stop there. Ctrl-C takes effect only at these points, so an interrupted and
/// resumed run records exactly the events of an uninterrupted one.
fn durable_point(
    rec: &mut Recorder<'_>,
    ts: &TrainState,
    stage: u32,
    (done, total): (u64, u64),
    every: u64,
    stop: &AtomicBool,
) -> Result<bool, StageError> {
    if done % every != 0 || done >= total {
        return Ok(false);
    }
    checkpoint(rec, ts, stage)?;
    rec.flush()?;
    Ok(stop.load(Ordering::SeqCst))
}

/// Load a checkpoint blob of `ledger` as a training state (the blobs it references
/// come from the same ledger).
pub fn load_state(
    ledger: &Ledger,
    blob: &Hash,
    compute: impl Into<crate::train::compute::Compute>,
) -> Result<TrainState, StageError> {
    let bytes = ledger.blob(blob)?;
    let fetch = |h: &Hash| ledger.blob(h).map_err(|e| e.to_string());
    Ok(TrainState::load(&bytes, compute, &fetch)?)
}

/// Stage 0's training instances and the blob of what they were drawn from.
///
/// A plan with one agent count and no ratio lists draws from one generator
/// configuration (2 agents by default), exactly as before mixing existed. Otherwise the
/// instances are a *mix*, drawn item by item (in parallel, each from its own seed node
/// `instances/item/i`, so the result is independent of thread scheduling): an agent
/// count from `agents` (a count listed twice is drawn twice as often), a size from
/// `sizes` at least that large, a hole ratio from `hole_ratios` capped at what the map
/// leaves room for, and for 2 agents a coordination draw from `wait_ratios`; 3 or more
/// agents leave coordination to chance, as the paper's test sets do (forcing either
/// way on crowded maps can take thousands of attempts). An instance that coincides with
/// a suite instance is redrawn from `retry` nodes.
pub fn warmup_data(
    w: &crate::ledger::plan::Warmup,
    instances: usize,
    seed: Seed,
    excluded: &std::collections::BTreeSet<[u8; 32]>,
) -> Result<(Vec<Solved>, Vec<u8>), StageError> {
    use crate::env::config::max_hole_ratio;
    use crate::env::generator::{generate_one, instance_key, InstanceSpec};
    use rand::Rng as _;
    use rayon::prelude::*;
    let mixed = w.agents != [2] || !w.hole_ratios.is_empty() || !w.wait_ratios.is_empty();
    if !mixed {
        let easy = GeneratorConfig::uniform(
            2,
            w.sizes.iter().map(|&n| n as usize),
            w.hole_ratio,
            w.wait_ratio,
        );
        let data = crate::env::generator::generate_excluding(
            &easy,
            instances,
            seed.child("instances", 0),
            Budget::default(),
            excluded,
        )
        .map_err(|e| StageError::Generate(e.to_string()))?;
        return Ok((data, codec::encode(&easy)));
    }
    let holes = if w.hole_ratios.is_empty() {
        vec![w.hole_ratio]
    } else {
        w.hole_ratios.clone()
    };
    let waits = if w.wait_ratios.is_empty() {
        vec![w.wait_ratio]
    } else {
        w.wait_ratios.clone()
    };
    let root = seed.child("instances", 0);
    let draw = |i: usize| -> Result<Solved, StageError> {
        let node = root.child("item", i as u64);
        for retry in 0..64u64 {
            let mut rng = node.child("retry", retry).rng();
            let a = w.agents[rng.random_range(0..w.agents.len())] as usize;
            let sizes: Vec<usize> = w
                .sizes
                .iter()
                .map(|&n| n as usize)
                .filter(|&n| n >= a)
                .collect();
            let size = sizes[rng.random_range(0..sizes.len())];
            let hole_ratio = holes[rng.random_range(0..holes.len())].min(max_hole_ratio(size, a));
            let wait = waits[rng.random_range(0..waits.len())];
            let coordination = (a == 2).then(|| rng.random_bool(wait));
            let spec = InstanceSpec {
                size,
                agents: a,
                hole_ratio,
                coordination,
            };
            match generate_one(&spec, &mut rng, Budget::default()) {
                Ok(it) if !excluded.contains(&instance_key(&it.instance)) => return Ok(it),
                Ok(_) => continue,
                Err(e) => return Err(StageError::Generate(format!("warm-up item {i}: {e}"))),
            }
        }
        Err(StageError::Generate(format!(
            "warm-up item {i}: 64 draws all coincided with suite instances"
        )))
    };
    let data = (0..instances)
        .into_par_iter()
        .map(draw)
        .collect::<Result<Vec<_>, _>>()?;
    // What the mix was drawn from, recorded as the stage's configuration blob.
    let mix = serde_json::json!({
        "agents": w.agents,
        "sizes": w.sizes,
        "hole_ratios": holes,
        "wait_ratios": waits,
    });
    Ok((data, mix.to_string().into_bytes()))
}

/// The texts a scratch language model's tokenizer is trained on: the prompts and
/// optimal plans of the warm-up data, in the chat format the model will read.
pub fn pretraining_corpus(spec: &crate::train::lm::LmSpec, data: &[Solved]) -> Vec<String> {
    data.iter()
        .map(|it| {
            format!(
                "{}{}<|im_end|>",
                crate::train::lm::ChatFormat::ChatMl.wrap(&spec.prompt.task_text(&it.instance)),
                spec.prompt.plan_text(&it.instance, &it.plan)
            )
        })
        .collect()
}

/// The engineer examples of a scratch `lm` plan's pretraining: teacher contexts shaped
/// like the plan's own (its context modules, validation cell size and size limit) and
/// the teacher's replies. Empty for other plans.
pub fn engineer_examples(plan: &LedgerPlan, seed: Seed) -> Vec<(EngineerContext, String)> {
    use crate::engineer::teacher;
    let n = plan.warmup.engineer_examples;
    if plan.policy != crate::ledger::plan::PolicyKind::Lm || plan.lm.hf_dir().is_some() || n == 0 {
        return Vec::new();
    }
    let spec = teacher::TeacherSpec {
        modules: plan.engineer.context.clone(),
        stages: plan.engineer.stages.max(1),
        per_cell: plan.suites.validation_per_cell,
        max_size: plan.engineer.max_size as usize,
        examples_per_size: eval::EXAMPLES_PER_SIZE,
    };
    (0..n as u64)
        .map(|i| {
            let ctx = teacher::context(
                seed.child("teacher-context", i),
                &spec,
                1 + (i % spec.stages as u64) as u32,
            );
            let reply = teacher::answer(&ctx, seed.child("teacher-answer", i));
            (ctx, reply)
        })
        .collect()
}

/// The engineer examples as chat texts for the tokenizer's corpus (untrimmed prompts).
pub fn engineer_corpus(examples: &[(EngineerContext, String)]) -> Vec<String> {
    use crate::engineer::llm;
    let chat = crate::train::lm::ChatFormat::ChatMl;
    examples
        .iter()
        .map(|(ctx, reply)| {
            let p = crate::engineer::model::prompt(ctx, &llm::TokenCounter::Approximate, u32::MAX);
            format!(
                "{}{reply}<|im_end|>",
                chat.wrap_with_system(&p.system, &p.user)
            )
        })
        .collect()
}

/// The engineer examples as (prompt ids, reply ids) for `lm`: each prompt exactly as
/// the `current`/`base` engineer will read it (trimmed to `max_tokens` with the model's
/// tokenizer), each reply ending the assistant's turn.
pub fn engineer_pairs(
    lm: &crate::train::lm::LmPolicy,
    examples: &[(EngineerContext, String)],
    max_tokens: u32,
) -> Vec<(Vec<u32>, Vec<u32>)> {
    use crate::engineer::model;
    let counter = model::counter(lm);
    examples
        .iter()
        .map(|(ctx, reply)| {
            let p = model::prompt_ids(lm, &model::prompt(ctx, &counter, max_tokens));
            let mut r = lm.encode(reply);
            r.extend(lm.tokenizer.token_to_id(lm.arch.chat.end_token()));
            (p, r)
        })
        .collect()
}

/// Save a checkpoint blob (and the blobs it references) and queue its event.
fn checkpoint(rec: &mut Recorder<'_>, ts: &TrainState, stage: u32) -> Result<Hash, StageError> {
    for side in ts.policy.side_blobs() {
        rec.blob(&side)?;
    }
    let bytes = ts.save(stage);
    let blob = rec.blob(&bytes)?;
    rec.push(
        stage,
        EventBody::CheckpointSaved(CheckpointSaved {
            step: ts.global_step,
            blob,
            params: crate::train::checkpoint::param_hash(ts.policy.vars()),
        }),
    );
    Ok(blob)
}

/// The end of every stage, as one durable batch: the final checkpoint, evaluation on
/// both suites, the failure breakdown and the completion event. Returns the validation
/// table.
fn finish_stage(
    rec: &mut Recorder<'_>,
    stage: u32,
    ts: &TrainState,
    (val, test): (&Suite, &Suite),
    (metric, eval_batch): (crate::env::CostMetric, usize),
    steps: u64,
) -> Result<ResultTable, StageError> {
    let ckpt = checkpoint(rec, ts, stage)?;
    let validation = evaluate(rec, stage, ts, val, test, metric, eval_batch, ckpt)?;
    rec.push(
        stage,
        EventBody::StageCompleted(StageCompleted {
            checkpoint: Some(ckpt),
            steps,
        }),
    );
    rec.flush()?;
    Ok(validation)
}

/// Evaluate on the validation and test suites and queue the events; returns the
/// validation table.
fn evaluate(
    rec: &mut Recorder<'_>,
    stage: u32,
    ts: &TrainState,
    val: &Suite,
    test: &Suite,
    metric: crate::env::CostMetric,
    eval_batch: usize,
    ckpt: Hash,
) -> Result<ResultTable, StageError> {
    let v = eval::score_suite(ts.policy.as_ref(), val, metric, eval_batch);
    let t = eval::score_suite(ts.policy.as_ref(), test, metric, eval_batch);
    // Per suite: its table, its per-instance outcomes (paired statistics), and, when the
    // suite is stratified by wait ratio, one table per subset.
    for (name, suite, scored) in [("val", val, &v), ("test", test, &t)] {
        rec.push(
            stage,
            EventBody::Evaluation(eval::evaluation_event(name, scored, Some(ckpt))),
        );
        rec.push(
            stage,
            EventBody::EvaluationOutcomes(eval::outcomes_event(name, suite, scored, Some(ckpt))),
        );
        for e in eval::subset_evaluations(name, suite, scored, Some(ckpt)) {
            rec.push(stage, EventBody::Evaluation(e));
        }
    }
    rec.push(
        stage,
        EventBody::FailureBreakdown(eval::failure_breakdown("val", val, &v)),
    );
    Ok(eval::table(&v))
}

/// Validate and project an engineer's decision into the event that records it.
pub fn decision_event(
    engineer: &str,
    current: &GeneratorConfig,
    ctx: &EngineerContext,
    max_size: usize,
    d: Decision,
    rec: &mut Recorder<'_>,
) -> Result<EngineerDecision, StageError> {
    // The structured context (the audit reads it as data; the text re-renders from it).
    let context = rec.blob(&codec::encode(ctx))?;
    let prompt = d
        .prompt
        .as_ref()
        .map(|p| rec.blob(p.as_bytes()))
        .transpose()?;
    let reply = d
        .reply
        .as_ref()
        .map(|r| rec.blob(r.as_bytes()))
        .transpose()?;
    let proposed = match &d.proposed_text {
        None => ProposedConfig::None,
        Some(t) if t.len() <= 4096 => ProposedConfig::Json(t.clone()),
        Some(t) => ProposedConfig::Blob(rec.blob(t.as_bytes())?),
    };
    let keep = |status| EngineerDecision {
        engineer: engineer.into(),
        context,
        prompt,
        reply,
        proposed: proposed.clone(),
        applied: current.clone(),
        clips: vec![],
        refused: d.refused.clone(),
        rationale: d.rationale.clone(),
        status,
    };
    if let Some(err) = &d.error {
        return Ok(keep(DecisionStatus::Fallback {
            reason: err.clone(),
        }));
    }
    let Some(proposal) = &d.proposal else {
        // The engineer says why in its rationale (e.g. "reply rejected: no usable JSON").
        let reason = d
            .rationale
            .lines()
            .next()
            .filter(|l| !l.trim().is_empty())
            .unwrap_or("no configuration proposed");
        return Ok(keep(DecisionStatus::Rejected {
            reason: reason.to_string(),
        }));
    };
    let (applied, mut clips) = project(current, proposal);
    // Sizes above the plan's limit (10 in the paper's protocol) are dropped, recorded.
    let applied = applied.and_then(|mut cfg| {
        let above: Vec<usize> = cfg
            .sizes
            .keys()
            .copied()
            .filter(|&n| n > max_size)
            .collect();
        for n in above {
            cfg.sizes.remove(&n);
            clips.push(crate::env::Clip {
                field: format!("sizes.{n}"),
                proposed: n.to_string(),
                applied: "(dropped)".into(),
                reason: format!("map sizes are limited to 3..={max_size} (engineer.max_size)"),
            });
        }
        if cfg.sizes.values().all(|s| s.data_ratio <= 0.0) {
            return Err(crate::env::config::ConfigError::NoData);
        }
        Ok(cfg)
    });
    match applied {
        Err(e) => Ok(keep(DecisionStatus::Rejected {
            reason: e.to_string(),
        })),
        Ok(applied) => Ok(EngineerDecision {
            status: if clips.is_empty() {
                DecisionStatus::Accepted
            } else {
                DecisionStatus::Clipped
            },
            applied,
            clips,
            ..keep(DecisionStatus::Accepted)
        }),
    }
}
