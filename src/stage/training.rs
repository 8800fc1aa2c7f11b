//! A GRPO stage (N >= 1): decide, generate, then train with GRPO from the previous
//! stage's checkpoint (or this stage's last durable one), checkpointing at durable points.
//! Every part is timed as a phase ([`crate::train::timing`]) for the stage's timing.
use super::*;
use crate::record::timing::phase;
use crate::train::timing::Phases;

impl Pipeline<'_> {
    /// Stage `n` >= 1. Returns false when interrupted at a durable point.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn run_stage(
        &mut self,
        branch: &str,
        n: u32,
        spec: &EngineerSpec,
        state: &BranchState,
        engineers: &mut EngineerFactory<'_>,
        progress: &mut dyn Progress,
        stop: &AtomicBool,
    ) -> Result<bool, StageError> {
        // The spec as written: what the stage's events record.
        let engineer_name = &spec.to_string();
        let mut phases = Phases::new(self.device);
        let cfg = self.plan.grpo.clone();
        let seed = stage_seed(&self.plan, n, state.replicate);
        let (from, current) = stage_inputs(state, n)?;
        let this = state.stage(n);
        if this.is_some() {
            phases.set_resumed();
        }

        // 1. Decide (or recover the recorded decision when resuming).
        let inputs = (state, &current, from, seed);
        let decided = self.stage_config(
            (branch, n, spec, engineer_name),
            inputs,
            engineers,
            progress,
            stop,
            &mut phases,
        )?;
        let Some((applied, oracle_params)) = decided else {
            return Ok(false);
        };

        // A stage another branch trained on the same inputs (the chosen candidate of an
        // oracle's search, most often) is copied from it, not trained again
        // ([`super::reuse`]): only before anything of the training is recorded.
        let fresh = this.is_none_or(|s| s.instances() == 0 && s.checkpoint.is_none());
        if fresh && self.engineer_rl(spec)?.is_none() {
            let inputs = super::reuse::StageInputs {
                branch,
                n,
                state,
                from,
                seed,
                applied: &applied,
            };
            if let Some(source) = self.trained_elsewhere(&inputs)? {
                if let Some(events) = self.copy_stage(branch, n, &source)? {
                    progress.note(&format!(
                        "stage {n}: branch {} trained this stage from the same checkpoint and \
                         seed on the same configuration; its {events} events copied, not \
                         trained again",
                        source.branch
                    ));
                    progress.stage_end(n, &source.validation);
                    return Ok(true);
                }
            }
        }

        // 2. Generate the training instances (recomputed identically on resume), recorded
        //    once, with the rehearsal set in the same flush (a resumed stage that has one
        //    has both).
        let record = this.is_none_or(|s| s.instances() == 0);
        let (data, blobs, rehearsal) = phases.time(phase::INSTANCES, || {
            self.training_instances(branch, n, &applied, seed, record)
        })?;

        // The context engineer RL starts from: the one this stage's engineer read.
        let engineer_rl = match self.engineer_rl(spec)? {
            Some(settings) => Some((
                settings,
                phases.time(phase::ENGINEER_RL, || self.context(state, n, current, spec))?,
            )),
            None => None,
        };

        // 3. Train (GRPO's own loop), from this stage's last durable checkpoint or the
        //    previous stage's.
        let start = grpo::StageStart {
            from,
            resume: this.and_then(|s| s.checkpoint).map(|c| c.0),
            base: state.stage(0).and_then(|s| s.checkpoint).map(|c| c.0),
            lora: self.plan.lm.lora(),
        };
        progress.stage_begin(n, engineer_name, cfg.steps);
        let compute = self.compute();
        let steps = super::steps::StepLog::resume(self.ledger, branch, n)?;
        let mut host = Host {
            steps,
            rec: Recorder::new(self.ledger, branch, self.base_meta.clone()),
            compute,
            settings: self.plan.policy_settings(),
            stage: n,
            progress,
            stop,
        };
        let metric = self.plan.train.metric;
        let Some(mut ts) = grpo::train_stage(
            &cfg,
            metric,
            &start,
            &data,
            &blobs,
            &rehearsal,
            seed,
            &mut host,
            &mut phases,
        )?
        else {
            return Ok(false);
        };
        let mut rec = host.rec;

        // 4. Engineer RL, when this branch trains its engineer: steps on engineer prompts
        //    after the plan steps, durable with the stage's end (a crash before it
        //    recomputes them from the last durable checkpoint, bit for bit). Before the
        //    evaluation, or (`after_evaluation`) after it, so that the stage is judged on
        //    its plan steps alone and the next stage takes the engineer steps up.
        let (before, after) = match &engineer_rl {
            Some(rl) if rl.0.train.after_evaluation => (None, Some(rl)),
            rl => (rl.as_ref(), None),
        };
        if let Some(rl) = before {
            engineer_steps(&mut rec, &mut ts, &mut phases, host.progress, rl, seed, n)?;
        }

        // 5. Evaluate, summarise, complete.
        let progress = host.progress;
        let mut hook;
        let after: Option<super::end::AfterEvaluation<'_>> = match after {
            Some(rl) => {
                hook = |rec: &mut Recorder<'_>, ts: &mut TrainState, phases: &mut Phases| {
                    engineer_steps(rec, ts, phases, &mut *progress, rl, seed, n)
                };
                Some(&mut hook)
            }
            None => None,
        };
        let validation = finish_stage(
            &mut rec,
            n,
            &mut ts,
            (&self.val, &self.test),
            (
                self.plan.train.metric,
                self.plan.suites.eval_batch as usize,
                self.plan.suites.keep_plans,
            ),
            cfg.steps,
            &mut phases,
            after,
        )?;
        if let Some(p) = oracle_params {
            repeated_candidate(n, &ts, p, progress);
        }
        progress.stage_end(n, &validation);
        Ok(true)
    }

    /// The configuration stage `n` trains on: the recorded decision's when the stage
    /// has one (resuming), else the engineer's, decided now and timed as the
    /// `engineer` phase (a stopped oracle search goes on). None when a stop ended the
    /// decision. With it, the oracle's chosen model's parameter hash, which the stage
    /// must repeat.
    #[allow(clippy::type_complexity)]
    fn stage_config(
        &mut self,
        (branch, n, spec, engineer_name): (&str, u32, &EngineerSpec, &str),
        inputs: (&BranchState, &GeneratorConfig, Hash, Seed),
        engineers: &mut EngineerFactory<'_>,
        progress: &mut dyn Progress,
        stop: &AtomicBool,
        phases: &mut Phases,
    ) -> Result<Option<(GeneratorConfig, Option<Hash>)>, StageError> {
        let this = inputs.0.stage(n);
        let started = this.is_some_and(|s| s.started.is_some());
        // A stopped oracle search has started the stage without a decision; only the
        // oracle goes on from its candidates.
        let searching = super::stopped_search(inputs.0, n);
        if searching && spec.name != crate::engineer::ORACLE {
            return Err(StageError::SearchUnderway {
                branch: branch.to_string(),
                stage: n,
            });
        }
        if started && !searching {
            let recorded = this
                .and_then(|s| s.config.clone())
                .ok_or(StageError::Diverged(Divergence::NoConfiguration {
                    stage: n,
                }))?;
            return Ok(Some((recorded, None)));
        }
        let decided = phases.time(phase::ENGINEER, || {
            self.decide(
                branch,
                n,
                spec,
                engineer_name,
                (inputs, !searching),
                engineers,
                progress,
                stop,
            )
        })?;
        let Some((applied, work, chosen)) = decided else {
            return Ok(None);
        };
        if let Some(work) = work {
            phases.count(phase::ENGINEER, work);
        }
        Ok(Some((applied, chosen)))
    }

    /// Part 1 of stage `n`: the engineer `spec` (recorded as `engineer_name`) reads the
    /// evidence of the stage before, under `current` (`inputs`: the branch, the
    /// configuration in force, the checkpoint the stage starts from and its seed), and
    /// proposes this stage's configuration. Records the stage's start and the decision
    /// in one flush; returns the configuration applied and the engineer's decoding work
    /// (for its phase).
    /// The oracle ([`super::oracle`]) searches instead: its candidates are durable one
    /// by one between the two, and a stop during its search returns None. `open`: the
    /// stage's start is not recorded yet (false: a stopped search goes on). The third
    /// value is the oracle's chosen model's parameter hash.
    #[allow(clippy::too_many_arguments, clippy::type_complexity)]
    fn decide(
        &mut self,
        branch: &str,
        n: u32,
        spec: &EngineerSpec,
        engineer_name: &str,
        ((state, current, from, seed), open): ((&BranchState, &GeneratorConfig, Hash, Seed), bool),
        engineers: &mut EngineerFactory<'_>,
        progress: &mut dyn Progress,
        stop: &AtomicBool,
    ) -> Result<
        Option<(
            GeneratorConfig,
            Option<crate::train::timing::Work>,
            Option<Hash>,
        )>,
        StageError,
    > {
        let started = StageStarted {
            engineer: engineer_name.into(),
            from_checkpoint: Some(from),
            seed: Hash(*seed.bytes()),
        };
        let (event, work, start, chosen) = if spec.name == crate::engineer::ORACLE {
            let mut inputs = super::oracle::SearchInputs {
                branch,
                n,
                state,
                current,
                from,
                seed,
                start: open.then_some(started),
            };
            let Some(search) = self.oracle_search(&mut inputs, engineers, progress, stop)? else {
                return Ok(None);
            };
            (search.decision, None, inputs.start, Some(search.params))
        } else {
            let ctx = self.context(state, n, current.clone(), spec)?;
            let inputs = BuildInputs {
                ledger: self.ledger,
                plan: &self.plan,
                device: self.device,
                stage: n,
                stage_seed: seed,
            };
            let mut engineer = engineers(spec, &inputs, state)?;
            let decision = engineer.decide(&ctx);
            let work = decision.work;
            let event = decision_event(
                engineer_name,
                current,
                &ctx,
                self.plan.engineer.max_size as usize,
                decision,
                &mut self.recorder(branch),
            )?;
            (event, work, Some(started), None)
        };
        let applied = event.applied.clone();
        if let DecisionStatus::Rejected { reason } | DecisionStatus::Fallback { reason } =
            &event.status
        {
            progress.note(&format!("stage {n}: engineer {engineer_name}'s proposal was not used ({reason}); keeping the previous configuration"));
        }
        let mut rec = self.recorder(branch);
        if let Some(start) = start {
            rec.push(n, EventBody::StageStarted(start));
        }
        rec.push(n, EventBody::EngineerDecision(event));
        rec.flush()?;
        Ok(Some((applied, work, chosen)))
    }

    /// Part 2 of stage `n`: its training instances under `applied` and, with a
    /// rehearsal term, the term's solver plans (fresh draws from the plan's warm-up
    /// mix, the pretraining distribution, from this stage's seed). With `record`, both
    /// sets are recorded in one flush. Returns the instances, their blobs and the
    /// rehearsal plans (empty without the term).
    fn training_instances(
        &mut self,
        branch: &str,
        n: u32,
        applied: &GeneratorConfig,
        seed: Seed,
        record: bool,
    ) -> Result<(Vec<Solved>, Vec<Hash>, Vec<Solved>), StageError> {
        let (data, rehearsal) = self.stage_instances(applied, seed)?;
        let mut rec = self.recorder(branch);
        let blobs = Self::instance_blobs(&mut rec, &data)?;
        if record {
            let config = rec.blob(&codec::encode(applied))?;
            rec.push(
                n,
                EventBody::InstancesGenerated(InstancesGenerated {
                    split: "train".into(),
                    config,
                    instances: blobs.clone(),
                }),
            );
            if let Some((items, mix)) = &rehearsal {
                let instances = Self::instance_blobs(&mut rec, items)?;
                let config = rec.blob(mix)?;
                rec.push(
                    n,
                    EventBody::InstancesGenerated(InstancesGenerated {
                        split: "rehearsal".into(),
                        config,
                        instances,
                    }),
                );
            }
            rec.flush()?;
        }
        let rehearsal = rehearsal.map(|(items, _)| items).unwrap_or_default();
        Ok((data, blobs, rehearsal))
    }
}

impl Pipeline<'_> {
    /// A stage's training instances under `applied` from its seed, and with a rehearsal
    /// term its solver plans and their mix (what [`Pipeline::training_instances`]
    /// records, and what the oracle's candidates train on).
    #[allow(clippy::type_complexity)]
    pub(super) fn stage_instances(
        &self,
        applied: &GeneratorConfig,
        seed: Seed,
    ) -> Result<(Vec<Solved>, Option<(Vec<Solved>, Vec<u8>)>), StageError> {
        let cfg = &self.plan.grpo;
        let data = crate::env::generator::generate_excluding(
            applied,
            cfg.instances_per_stage as usize,
            seed.child("instances", 0),
            Budget::default(),
            &self.suite_keys,
        )
        .map_err(StageError::Generate)?;
        let rehearsal = if cfg.rehearsal_coef > 0.0 {
            Some(super::base::warmup_data(
                &self.plan.warmup,
                cfg.rehearsal_instances as usize,
                seed.child("rehearsal", 0),
                &self.suite_keys,
            )?)
        } else {
            None
        };
        Ok((data, rehearsal))
    }
}

/// What a GRPO stage `n` starts from: the checkpoint the stage before ended with, and
/// the configuration in force (what the engineer, and engineer RL, read).
fn stage_inputs(state: &BranchState, n: u32) -> Result<(Hash, GeneratorConfig), StageError> {
    let prev = state
        .stage(n - 1)
        .ok_or(StageError::Diverged(Divergence::NoStageBefore { stage: n }))?;
    let from =
        prev.checkpoint
            .map(|c| c.0)
            .ok_or(StageError::Diverged(Divergence::NoCheckpoint {
                stage: n - 1,
            }))?;
    let current = prev
        .config
        .clone()
        .or_else(|| state.initial_config.clone())
        .expect("genesis has a config");
    Ok((from, current))
}

/// Say so when stage `n`'s model `ts` is not the oracle candidate (parameters
/// `chosen`) it trained on: the search and the stage ran the same training, so only
/// another machine's kernels or a changed input can part them.
fn repeated_candidate(n: u32, ts: &TrainState, chosen: Hash, progress: &mut dyn Progress) {
    if crate::train::checkpoint::param_hash(ts.policy.vars()) != chosen {
        progress.note(&format!(
            "stage {n}: the stage's model differs from the oracle candidate it trained on \
             (parameters {} in the search): this machine did not repeat the candidate's \
             training bit for bit",
            chosen.short()
        ));
    }
}

/// Engineer RL's steps on the context `own` its settings start from, timed as the
/// `engineer_rl` phase.
fn engineer_steps(
    rec: &mut Recorder<'_>,
    ts: &mut TrainState,
    phases: &mut Phases,
    progress: &mut dyn Progress,
    (settings, own): &(crate::engineer::rl::Settings, EngineerContext),
    seed: Seed,
    n: u32,
) -> Result<(), StageError> {
    phases.time(phase::ENGINEER_RL, || {
        train_engineer(
            rec,
            ts,
            settings,
            own,
            seed.child("engineer-rl", 0),
            n,
            progress,
        )
    })
}

/// Engineer RL's steps ([`crate::engineer::rl`]), each recorded as an
/// `engineer_training` event with its contexts and replies as blobs.
fn train_engineer(
    rec: &mut Recorder<'_>,
    ts: &mut TrainState,
    settings: &crate::engineer::rl::Settings,
    own: &EngineerContext,
    seed: Seed,
    stage: u32,
    progress: &mut dyn Progress,
) -> Result<(), StageError> {
    use crate::engineer::rl;
    use crate::record::event::{EngineerReply, EngineerTraining};
    let steps = settings.train.steps as u64;
    if let Some(lr) = settings.train.lr {
        ts.set_lr(lr);
    }
    for k in 0..steps {
        let contexts = rl::contexts(own, &settings.train, settings.rules, seed, k);
        let out = rl::step(ts, settings, &contexts, seed.child("step", k))
            .map_err(StageError::EngineerRl)?;
        let blobs = contexts
            .iter()
            .map(|(_, c)| rec.blob(&codec::encode(c)))
            .collect::<Result<Vec<_>, _>>()?;
        let mut replies = Vec::with_capacity(out.replies.len());
        for r in &out.replies {
            replies.push(EngineerReply {
                context: r.context as u32,
                reply: rec.blob(r.text.as_bytes())?,
                parsed: r.parsed,
                legal: r.legal,
                claims: r.claims,
                grounded: r.grounded,
                learnability: r.learnability.map(f64::to_bits),
                pass_rate: r.pass_rate.map(f64::to_bits),
                reward: r.reward.to_bits(),
            });
        }
        let body = EventBody::EngineerTraining(EngineerTraining {
            step: ts.global_step,
            context_ids: contexts.iter().map(|(id, _)| id.clone()).collect(),
            contexts: blobs,
            replies,
            signal_groups: out.signal_groups,
            tokens: out.tokens,
            params: out.params,
            loss: out.loss.to_bits(),
            kl: out.kl.to_bits(),
            clip_fraction: out.clip_fraction.to_bits(),
            grad_norm: out.grad_norm.to_bits(),
        });
        progress.note(&format!(
            "stage {stage}: engineer RL step {}/{steps}: {}",
            k + 1,
            body.summary()
        ));
        rec.push(stage, body);
    }
    Ok(())
}

/// The stage's side of [`grpo::train_stage`]: checkpoints come from the ledger, step
/// records go to the branch (durable as each step ends, see [`super::steps`]), durable
/// points save a checkpoint and commit.
struct Host<'r, 'p> {
    steps: super::steps::StepLog,
    rec: Recorder<'r>,
    compute: crate::train::compute::Compute,
    /// How the plan bounds memory and which kernels it runs, given to every state
    /// loaded.
    settings: crate::plan::trainer::PolicySettings,
    stage: u32,
    progress: &'p mut dyn Progress,
    stop: &'p AtomicBool,
}

impl grpo::StageHost for Host<'_, '_> {
    type Error = StageError;

    fn load(&self, checkpoint: &Hash) -> Result<TrainState, StageError> {
        let mut state = load_state(self.rec.ledger(), checkpoint, self.compute)?;
        state.policy.apply_settings(self.settings);
        Ok(state)
    }

    fn stepped(
        &mut self,
        done: u64,
        records: Vec<StepRecord>,
        stats: &StepStats,
    ) -> Result<bool, StageError> {
        for r in records {
            self.steps.record(&mut self.rec, r.into(), done)?;
        }
        self.progress.step(self.stage, done, stats);
        let stop = self.stop.load(Ordering::SeqCst);
        self.steps
            .flush(&mut self.rec, super::steps::Due::EveryStep, stop)?;
        Ok(stop)
    }

    fn durable_point(&mut self, state: &TrainState, _done: u64) -> Result<(), StageError> {
        durable_checkpoint(&mut self.rec, state, self.stage)
    }
}
