//! Stage 0, the warm-up: the supervised base model (or the shipped one loaded and
//! evaluated), and its mixed training instances. Every part is timed as a phase
//! ([`crate::train::timing`]) for the stage's timing.
use super::*;
use crate::record::timing::phase;
use crate::train::timing::Phases;

impl Pipeline<'_> {
    /// Stage 0. Returns false when interrupted at a durable point.
    pub(super) fn run_warmup(
        &mut self,
        branch: &str,
        state: &BranchState,
        progress: &mut dyn Progress,
        stop: &AtomicBool,
    ) -> Result<bool, StageError> {
        let mut phases = Phases::new(self.device);
        if state.stage(0).is_some() {
            phases.set_resumed();
        }
        let cfg = warmup_config(&self.plan);
        let seed = stage_seed(&self.plan, 0, 0);
        let (data, easy_blob) = phases.time(phase::INSTANCES, || {
            warmup_data(&self.plan.warmup, cfg.instances, seed, &self.suite_keys)
        })?;
        let resumed = state.stage(0).and_then(|s| s.checkpoint);
        let (ts, start) = match resumed {
            Some((blob, _, _)) => {
                let ts = phases.time(phase::LOADING, || self.load_state(&blob))?;
                let done = ts.global_step;
                (ts, done)
            }
            None => {
                phases.begin(phase::LOADING);
                let policy = self.initial_policy(seed, &data, &mut phases);
                phases.end();
                let policy = policy?;
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
                    return self.warmup_steps(
                        branch,
                        ts,
                        0,
                        (&cfg, &data, seed),
                        progress,
                        stop,
                        phases,
                    );
                }
                phases.begin(phase::INSTANCES);
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
                phases.end();
                (ts, 0)
            }
        };
        self.warmup_steps(
            branch,
            ts,
            start,
            (&cfg, &data, seed),
            progress,
            stop,
            phases,
        )
    }

    /// The warm-up's steps from `start`, its checkpoints, evaluation and completion
    /// (whose metadata holds `phases`, the stage's timing).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn warmup_steps(
        &mut self,
        branch: &str,
        mut ts: TrainState,
        start: u64,
        (cfg, data, seed): (&WarmupConfig, &[Solved], Seed),
        progress: &mut dyn Progress,
        stop: &AtomicBool,
        mut phases: Phases,
    ) -> Result<bool, StageError> {
        let every = self.plan.grpo.checkpoint_every;
        // Engineer examples as token pairs (lm plans that ask for them), each prompt as
        // the model engineer will read it.
        let text = crate::engineer::text::TextRevision::of_plan(&self.plan)?;
        let pairs: Vec<(Vec<u32>, Vec<u32>)> = match ts.policy.as_lm() {
            Some(lm) => phases.time(phase::EXAMPLE_BUILDING, || {
                engineer_pairs(
                    lm,
                    &engineer_examples(&self.plan, text, seed),
                    self.plan.lm.engineer_prompt_tokens,
                    text,
                )
            }),
            None => Vec::new(),
        };
        let w = &self.plan.warmup;
        progress.stage_begin(0, "warmup", cfg.steps);
        let mut steps = super::steps::StepLog::resume(self.ledger, branch, 0)?;
        let mut rec = Recorder::new(self.ledger, branch, self.base_meta.clone());
        for s in start..cfg.steps {
            let engineer_step = !pairs.is_empty()
                && s >= w.engineer_after
                && (s - w.engineer_after) % w.engineer_every as u64 == w.engineer_every as u64 - 1;
            ts.set_lr(w.lr_at(s));
            let (record, loss) = if engineer_step {
                warmup::text_step_timed(
                    &mut ts,
                    &pairs,
                    w.engineer_batch_size as usize,
                    seed,
                    s,
                    &mut phases,
                )
            } else {
                warmup::step_timed(&mut ts, cfg, data, seed, s, &mut phases)
            };
            steps.record(&mut rec, EventBody::GradientStep(record), s + 1)?;
            progress.step(
                0,
                s + 1,
                &StepStats {
                    step: ts.global_step,
                    loss,
                    ..Default::default()
                },
            );
            let (done, stopping) = (s + 1, stop.load(Ordering::SeqCst));
            checkpoint_point(&mut rec, &ts, (done, cfg.steps), every, &mut phases)?;
            let due = super::steps::Due::Apart(super::steps::WARMUP_FLUSH);
            phases.time(phase::CHECKPOINTING, || {
                steps.flush(&mut rec, due, stopping)
            })?;
            if stopping && done < cfg.steps {
                return Ok(false);
            }
        }
        let validation = finish_stage(
            &mut rec,
            0,
            &mut ts,
            (&self.val, &self.test),
            (
                self.plan.train.metric,
                self.plan.suites.eval_batch as usize,
                self.plan.suites.keep_plans,
            ),
            cfg.steps,
            &mut phases,
            None,
        )?;
        progress.stage_end(0, &validation);
        Ok(true)
    }
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
/// way on crowded maps can take thousands of attempts), unless `wait_all_agents` draws
/// it for them too. An instance that coincides with
/// a suite instance is redrawn from `retry` nodes.
pub fn warmup_data(
    w: &crate::plan::Warmup,
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
        .map_err(StageError::Generate)?;
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
        const DRAWS: u64 = 64;
        for retry in 0..DRAWS {
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
            // One agent never needs coordination: no draw (as before).
            let coordination =
                (a == 2 || (a > 2 && w.wait_all_agents)).then(|| rng.random_bool(wait));
            // Three or more agents on a crowded map rarely avoid each other: forcing "no
            // coordination" there could take thousands of solves. Such a draw is solved
            // as it comes and redrawn (a new size and hole ratio) when it disagrees.
            let redraw = a > 2 && coordination == Some(false);
            let spec = InstanceSpec {
                size,
                agents: a,
                hole_ratio,
                coordination: if redraw { None } else { coordination },
            };
            match generate_one(&spec, &mut rng, Budget::default()) {
                Ok(it) if redraw && it.needs_coordination => continue,
                Ok(it) if !excluded.contains(&instance_key(&it.instance)) => return Ok(it),
                Ok(_) => continue,
                Err(e) => return Err(StageError::WarmupItem { item: i, source: e }),
            }
        }
        Err(StageError::WarmupDraws {
            item: i,
            draws: DRAWS,
        })
    };
    let data = (0..instances)
        .into_par_iter()
        .map(draw)
        .collect::<Result<Vec<_>, _>>()?;
    // What the mix was drawn from, recorded as the stage's configuration blob.
    let mut mix = serde_json::json!({
        "agents": w.agents,
        "sizes": w.sizes,
        "hole_ratios": holes,
        "wait_ratios": waits,
    });
    // Only when set, so the blob (and the ledger head) of older plans stays as it was.
    if w.wait_all_agents {
        mix["wait_all_agents"] = true.into();
    }
    Ok((data, mix.to_string().into_bytes()))
}

/// After step `done` of `total`: every `every` steps (but not the last, which the stage
/// end covers) save a checkpoint and make everything durable. The steps between are
/// durable as they go ([`super::steps`]); a resumed stage starts from the last of these.
fn checkpoint_point(
    rec: &mut Recorder<'_>,
    ts: &TrainState,
    (done, total): (u64, u64),
    every: u64,
    phases: &mut Phases,
) -> Result<(), StageError> {
    if done % every != 0 || done >= total {
        return Ok(());
    }
    phases.time(phase::CHECKPOINTING, || durable_checkpoint(rec, ts, 0))
}
