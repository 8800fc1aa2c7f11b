//! The `oracle` engineer's search, the hindsight upper bound every engineer is measured
//! against. At a stage it designs, it asks each candidate of the plan's
//! `[engineer.oracle]` (named engineers, and fresh random draws) for its proposal from
//! the same evidence, trains the whole stage on each distinct applied configuration
//! from the stage's starting checkpoint with the stage's own seed (so each candidate's
//! training is the stage the pipeline would run on it), scores each model on the
//! validation suite, never the test suite, and keeps the best.
//!
//! What it records, after the stage's `StageStarted` and in the same batch as its
//! decision: one `OracleCandidate` event per candidate (its decision, its validation
//! table and score, its model's parameter hash), then the oracle's own
//! `EngineerDecision`, which applies the chosen candidate's configuration and names the
//! search in its rationale. The stage then trains on that configuration as on any
//! other, which repeats the chosen candidate's training bit for bit: its final
//! checkpoint has the candidate's parameter hash. `replay --verify` recomputes the
//! search with the stage.
//!
//! A candidate another branch of the ledger already trained (a study's `fixed` arm
//! beside its oracle arm, [`super::reuse`]) is taken from that branch instead of
//! trained again, and so is the chosen candidate's stage; the events are the same.
//!
//! A search is as long as K stages, so each candidate is durable as it ends: the first
//! one's batch opens the stage (`StageStarted`), each later one is its own. A stopped
//! search resumes where it stopped: the candidates the stage holds are taken as
//! recorded (as a recorded decision is), and only the others are trained.
use super::*;
use crate::engineer::ORACLE;
use crate::record::event::OracleCandidate;
use crate::train::timing::{Phases, Work};

/// The oracle's choice at a stage (its candidates are recorded by then).
pub(super) struct Search {
    pub decision: EngineerDecision,
    /// The chosen candidate's model (the stage's own final checkpoint repeats it).
    pub params: Hash,
}

/// Stage `n`'s search, as one set of arguments.
pub(super) struct SearchInputs<'s> {
    pub branch: &'s str,
    pub n: u32,
    pub state: &'s BranchState,
    pub current: &'s GeneratorConfig,
    pub from: Hash,
    pub seed: Seed,
    /// The stage's start, when the branch has not recorded it yet: recorded with the
    /// first candidate.
    pub start: Option<StageStarted>,
}

/// The oracle candidates the branch holds at stage `n` (a stopped search's), in order.
pub(super) fn recorded_candidates(
    ledger: &Ledger,
    branch: &str,
    n: u32,
) -> Result<Vec<OracleCandidate>, StageError> {
    Ok(ledger
        .history(branch)?
        .into_iter()
        .filter(|(_, e)| e.stage == n)
        .filter_map(|(_, e)| match e.body {
            EventBody::OracleCandidate(c) => Some(c),
            _ => None,
        })
        .collect())
}

impl Pipeline<'_> {
    /// The oracle's search at stage `s.n` (see the module's doc). None when `stop` was
    /// set before it ended: the candidates finished by then are recorded.
    pub(super) fn oracle_search(
        &mut self,
        s: &mut SearchInputs<'_>,
        engineers: &mut EngineerFactory<'_>,
        progress: &mut dyn Progress,
        stop: &AtomicBool,
    ) -> Result<Option<Search>, StageError> {
        let specs = crate::engineer::oracle_candidates(&self.plan)?;
        let mut recorded = recorded_candidates(self.ledger, s.branch, s.n)?.into_iter();
        let k = specs.len();
        let mut candidates: Vec<OracleCandidate> = Vec::with_capacity(k);
        let mut draws = 0u64;
        for (i, spec) in specs.iter().enumerate() {
            // Where it comes from; the first random draw is the `random` engineer's own
            // for this stage.
            let (source, stage_seed) = if spec.name == "random" {
                draws += 1;
                let seed = match draws {
                    1 => s.seed,
                    d => s.seed.child("oracle-random", d - 1),
                };
                (format!("random#{draws}"), seed)
            } else {
                (spec.to_string(), s.seed)
            };
            // A stopped search's candidate is taken as recorded (no engineer is asked
            // again, nothing is trained again).
            if let Some(c) = recorded.next() {
                candidates.push(c);
                continue;
            }
            // 1. The candidate's decision, from the evidence the stage's engineer reads.
            let ctx = self.context(s.state, s.n, s.current.clone(), spec)?;
            let inputs = BuildInputs {
                ledger: self.ledger,
                plan: &self.plan,
                device: self.device,
                stage: s.n,
                stage_seed,
            };
            let decision = engineers(spec, &inputs, s.state)?.decide(&ctx);
            let decision = decision_event(
                &spec.to_string(),
                s.current,
                &ctx,
                self.plan.engineer.max_size as usize,
                decision,
                &mut self.recorder(s.branch),
            )?;
            // 2. The stage trained on its configuration (once per distinct one), scored
            //    on validation, and recorded.
            let same = candidates
                .iter()
                .find(|c| c.same_as.is_none() && c.decision.applied == decision.applied);
            let candidate = match same {
                Some(c) => OracleCandidate {
                    index: i as u32,
                    source,
                    same_as: Some(c.index),
                    validation: c.validation.clone(),
                    valid_sum: c.valid_sum,
                    optimal_sum: c.optimal_sum,
                    params: c.params,
                    decision,
                },
                None => {
                    let elsewhere = self.trained_elsewhere(&super::reuse::StageInputs {
                        branch: s.branch,
                        n: s.n,
                        state: s.state,
                        from: s.from,
                        seed: s.seed,
                        applied: &decision.applied,
                    })?;
                    let (table, params) = match elsewhere {
                        Some(t) => {
                            progress.note(&format!(
                                "stage {}: oracle candidate {}/{k} ({source}): branch {} trained \
                                 this stage from the same checkpoint and seed on the same \
                                 configuration; its validation and model taken, not trained again",
                                s.n,
                                i + 1,
                                t.branch
                            ));
                            (t.validation, t.params)
                        }
                        None => {
                            if stop.load(Ordering::SeqCst) {
                                return Ok(None);
                            }
                            progress.note(&format!(
                                "stage {}: oracle candidate {}/{k} ({source}): training the stage",
                                s.n,
                                i + 1
                            ));
                            match self.train_candidate(s, &decision.applied, stop)? {
                                Some(trained) => trained,
                                None => return Ok(None),
                            }
                        }
                    };
                    let (valid, optimal) = table.sum_row(s.current.agents);
                    OracleCandidate {
                        index: i as u32,
                        source,
                        same_as: None,
                        validation: eval::cells_of(&table),
                        valid_sum: valid.to_bits(),
                        optimal_sum: optimal.to_bits(),
                        params,
                        decision,
                    }
                }
            };
            let event = EventBody::OracleCandidate(candidate.clone());
            progress.note(&format!(
                "stage {}: oracle candidate {}/{k}: {}",
                s.n,
                i + 1,
                event.summary()
            ));
            let mut rec = self.recorder(s.branch);
            if let Some(start) = s.start.take() {
                rec.push(s.n, EventBody::StageStarted(start));
            }
            rec.push(s.n, event);
            rec.flush()?;
            candidates.push(candidate);
        }

        // 3. The best by validation, recorded as the oracle's own decision.
        let best =
            OracleCandidate::best(&candidates).expect("the plan lists at least one candidate");
        let ctx = self.context(s.state, s.n, s.current.clone(), &ORACLE.parse()?)?;
        let context = self.recorder(s.branch).blob(&codec::encode(&ctx))?;
        let chosen = &candidates[best];
        let decision = EngineerDecision {
            engineer: ORACLE.into(),
            context,
            prompt: None,
            reply: None,
            proposed: chosen.decision.proposed.clone(),
            applied: chosen.decision.applied.clone(),
            clips: chosen.decision.clips.clone(),
            refused: vec![],
            rationale: rationale(&candidates, best),
            status: match chosen.decision.status {
                DecisionStatus::Clipped => DecisionStatus::Clipped,
                _ => DecisionStatus::Accepted,
            },
        };
        Ok(Some(Search {
            params: chosen.params,
            decision,
        }))
    }

    /// The stage trained on `applied` from its starting checkpoint with its seed, as
    /// the pipeline would train it, recording nothing; the model's validation table and
    /// parameter hash. None when `stop` was set during the training.
    fn train_candidate(
        &self,
        s: &SearchInputs<'_>,
        applied: &GeneratorConfig,
        stop: &AtomicBool,
    ) -> Result<Option<(ResultTable, Hash)>, StageError> {
        let (data, rehearsal) = self.stage_instances(applied, s.seed)?;
        let blobs: Vec<Hash> = data
            .iter()
            .map(|it| Hash::of_blob(&codec::encode(it)))
            .collect();
        let start = grpo::StageStart {
            from: s.from,
            resume: None,
            base: s.state.stage(0).and_then(|x| x.checkpoint).map(|c| c.0),
            lora: self.plan.lm.lora(),
        };
        let mut host = Unrecorded {
            ledger: self.ledger,
            compute: self.compute(),
            settings: self.plan.policy_settings(),
            stop,
        };
        // Its time is the engineer phase's (the caller's); this one is dropped.
        let mut phases = Phases::new(self.device);
        let rehearsal = rehearsal.map(|(items, _)| items).unwrap_or_default();
        let metric = self.plan.train.metric;
        let trained = grpo::train_stage(
            &self.plan.grpo,
            metric,
            &start,
            &data,
            &blobs,
            &rehearsal,
            s.seed,
            &mut host,
            &mut phases,
        )?;
        let Some(ts) = trained else {
            return Ok(None);
        };
        let batch = self.plan.suites.eval_batch as usize;
        let scored = eval::score_suite_counted(
            ts.policy.as_ref(),
            &self.val,
            metric,
            batch,
            &mut Work::default(),
        );
        let params = crate::train::checkpoint::param_hash(ts.policy.vars());
        Ok(Some((eval::table(&scored), params)))
    }
}

/// The oracle's rationale: the choice, then every candidate's score and edit.
fn rationale(candidates: &[OracleCandidate], best: usize) -> String {
    let f = f64::from_bits;
    let c = &candidates[best];
    let mut out = format!(
        "oracle: trained the stage on {} distinct of {} candidates and kept #{} {} (validation Sum {:.2} valid, {:.2} optimal; chosen by validation, never by test)",
        candidates.iter().filter(|c| c.same_as.is_none()).count(),
        candidates.len(),
        c.index,
        c.source,
        f(c.valid_sum),
        f(c.optimal_sum)
    );
    out.push_str("; candidates (validation Sum, valid/optimal %):");
    for c in candidates {
        out.push_str(&format!(
            " #{} {} {:.2}/{:.2}{};",
            c.index,
            c.source,
            f(c.valid_sum),
            f(c.optimal_sum),
            c.same_as_note()
        ));
    }
    out.pop();
    out
}

/// The host of a candidate's training: checkpoints come from the ledger, nothing is
/// recorded, and a stop asked for ends the training after the step under way.
struct Unrecorded<'l> {
    ledger: &'l Ledger,
    compute: crate::train::compute::Compute,
    settings: crate::plan::trainer::PolicySettings,
    stop: &'l AtomicBool,
}

impl grpo::StageHost for Unrecorded<'_> {
    type Error = StageError;

    fn load(&self, checkpoint: &Hash) -> Result<TrainState, StageError> {
        let mut state = load_state(self.ledger, checkpoint, self.compute)?;
        state.policy.apply_settings(self.settings);
        Ok(state)
    }

    fn stepped(&mut self, _: u64, _: Vec<StepRecord>, _: &StepStats) -> Result<bool, StageError> {
        Ok(self.stop.load(Ordering::SeqCst))
    }

    fn durable_point(&mut self, _: &TrainState, _: u64) -> Result<(), StageError> {
        Ok(())
    }
}
