//! The engineer's side of a stage: which engineer designs it, the context it reads,
//! and the event that records its decision.
use super::*;

impl Pipeline<'_> {
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
    pub fn branch_engineer(&self, state: &BranchState) -> Result<EngineerSpec, StageError> {
        let recorded = state.engineer.as_deref();
        Ok(recorded.unwrap_or(&self.plan.engineer.name).parse()?)
    }

    /// Make `engineer` the branch's engineer from its next stage on: checked, then
    /// recorded as an `EngineerChosen` event when it differs from the current one (so a
    /// later `run` or `resume` without `--engineer` keeps it). Returns whether it changed.
    pub fn choose_engineer(
        &mut self,
        branch: &str,
        engineer: &EngineerSpec,
    ) -> Result<bool, StageError> {
        let state = self.ledger.projection(branch)?;
        let previous = self.branch_engineer(&state)?;
        let next = next_stage(&state);
        if engineer.name != crate::engineer::ORACLE && super::stopped_search(&state, next) {
            return Err(StageError::SearchUnderway {
                branch: branch.to_string(),
                stage: next,
            });
        }
        if previous == *engineer || next > self.plan.engineer.stages {
            return Ok(false);
        }
        crate::engineer::check_spec(engineer, &self.plan, &state)?;
        self.ledger.append(
            branch,
            vec![(
                EventBody::EngineerChosen(crate::record::event::EngineerChosen {
                    engineer: engineer.to_string(),
                    previous: previous.to_string(),
                }),
                next.saturating_sub(1),
                self.base_meta.clone(),
            )],
        )?;
        Ok(true)
    }

    /// Whether the stages a branch runs under engineer `spec` train its engineer
    /// (engineer RL): on every branch when the plan's `[engineer.train]` is enabled,
    /// else on branches whose spec ends in `+engineer-rl`. Returns the settings.
    pub fn engineer_rl(
        &self,
        spec: &EngineerSpec,
    ) -> Result<Option<crate::engineer::rl::Settings>, StageError> {
        let train = self.plan.engineer.train.clone();
        let on = spec.engineer_rl || train.as_ref().is_some_and(|t| t.enabled);
        let lm = &self.plan.lm;
        let text = crate::engineer::text::TextRevision::of_plan(&self.plan)?;
        if !on {
            return Ok(None);
        }
        let train = train.unwrap_or_default();
        let rules = crate::engineer::eval::Rules::of(train.rules)?;
        Ok(Some(crate::engineer::rl::Settings {
            train,
            grpo: self.plan.grpo.clone(),
            sampling: lm.engineer_sampling(),
            max_prompt_tokens: lm.engineer_prompt_tokens,
            text,
            rules,
        }))
    }

    /// The context engineer `spec` reads when designing stage `n` from the branch's
    /// history: the plan's context modules with the spec's switches applied, and every
    /// switched-off module's information removed.
    pub fn context(
        &self,
        state: &BranchState,
        n: u32,
        current: GeneratorConfig,
        spec: &EngineerSpec,
    ) -> Result<EngineerContext, StageError> {
        let modules = spec.modules(&self.plan.engineer.context);
        let prev = state
            .stage(n - 1)
            .ok_or(StageError::Diverged(Divergence::NoStage { stage: n - 1 }))?;
        let table = |s: &crate::ledger::StageState| {
            s.evaluations
                .get("val")
                .map(|cells| {
                    eval::table_of(&crate::record::event::Evaluation {
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
                .unwrap_or(crate::record::event::FailureBreakdown {
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

/// Validate and project an engineer's decision into the event that records it.
pub fn decision_event(
    engineer: &str,
    current: &GeneratorConfig,
    ctx: &EngineerContext,
    max_size: usize,
    d: Decision,
    rec: &mut Recorder<'_>,
) -> Result<EngineerDecision, StageError> {
    // An engineer that never answered made no decision: nothing is recorded.
    if let Some(u) = d.unanswered {
        return Err(StageError::Unanswered(u));
    }
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
