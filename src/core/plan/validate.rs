//! A plan's range checks, [`LedgerPlan::validate`]: each section's fields against their
//! legal ranges, then the rules that tie sections together.
//!
//! The first failing check is the plan's error, so the order in which the checks run
//! decides which error a plan with several faults gets, and tests pin those messages.
//! The order is: `name` and `policy`; `[lm]`; `initial_config`; the suites' item counts
//! and wait ratios; `[warmup]` (its boards, then its engineer examples);
//! `suites.max_size`; `[grpo]`; the agent-name counts of `[grpo]` and `[warmup]`;
//! `suites.eval_batch`; `[train]`; `[engineer]` (with `[engineer.train]`); and last
//! `initial_config`'s sizes against `engineer.max_size`.
use super::trainer::{self, GrpoConfig};
use super::{
    EngineerPlan, EngineerTrain, LedgerPlan, PlanError, PolicyKind, Suites, Warmup,
    LATEST_ENGINEER_REVISION,
};

fn range(field: &str, message: impl Into<String>) -> PlanError {
    PlanError::Range {
        field: field.into(),
        message: message.into(),
    }
}

fn check_f(field: &str, v: f64, lo: f64, hi: f64, lo_open: bool) -> Result<(), PlanError> {
    let ok = v.is_finite() && (if lo_open { v > lo } else { v >= lo }) && v <= hi;
    if ok {
        Ok(())
    } else {
        let l = if lo_open { "(" } else { "[" };
        Err(range(field, format!("must be in {l}{lo}, {hi}], got {v}")))
    }
}

fn check_u(field: &str, v: u64, lo: u64, hi: u64) -> Result<(), PlanError> {
    if (lo..=hi).contains(&v) {
        Ok(())
    } else {
        Err(range(field, format!("must be in {lo}..={hi}, got {v}")))
    }
}

/// A list a value is drawn from uniformly (absent: the field's default): 1 to 64
/// values, each in 1..=hi; `what` names them in the error.
fn check_draw(field: &str, list: Option<&[u32]>, hi: u32, what: &str) -> Result<(), PlanError> {
    match list {
        Some(l) if l.is_empty() || l.len() > 64 || l.iter().any(|&n| !(1..=hi).contains(&n)) => {
            Err(range(field, format!("must be 1 to 64 {what}, got {l:?}")))
        }
        _ => Ok(()),
    }
}

impl LedgerPlan {
    /// Check every field's range, in the order the module doc gives (the first failure
    /// is the error).
    pub fn validate(&self) -> Result<(), PlanError> {
        check_name_and_policy(self)?;
        self.lm.validate().map_err(|(f, m)| range(&f, m))?;
        self.initial_config
            .validate()
            .map_err(PlanError::InitialConfig)?;
        check_suite_items(&self.suites)?;
        check_warmup_boards(&self.warmup)?;
        check_warmup_engineer_examples(&self.warmup)?;
        check_u("suites.max_size", self.suites.max_size as u64, 5, 32)?;
        check_grpo(&self.grpo)?;
        check_agent_names(self)?;
        check_u(
            "suites.eval_batch",
            self.suites.eval_batch as u64,
            1,
            1 << 16,
        )?;
        check_u(
            "train.torch_threads",
            self.train.torch_threads as u64,
            1,
            256,
        )?;
        check_engineer(&self.engineer, self.policy)?;
        check_sizes_within_engineer(self)
    }
}

/// A name, and a policy that still exists.
fn check_name_and_policy(plan: &LedgerPlan) -> Result<(), PlanError> {
    if plan.name.trim().is_empty() {
        return Err(range("name", "must not be empty"));
    }
    if plan.policy == PolicyKind::Text {
        return Err(range(
            "policy",
            "\"text\" was replaced by \"lm\" (a language model configured in [lm]); see ledgers/README.md",
        ));
    }
    Ok(())
}

/// The suites' items per cell, and their wait ratios, which split each cell into equal
/// subsets.
fn check_suite_items(s: &Suites) -> Result<(), PlanError> {
    check_u(
        "suites.validation_per_cell",
        s.validation_per_cell as u64,
        1,
        100_000,
    )?;
    check_u("suites.test_per_cell", s.test_per_cell as u64, 1, 100_000)?;
    check_u("suites.wait_ratios", s.wait_ratios.len() as u64, 0, 16)?;
    crate::env::suite::check_wait_ratios(&s.wait_ratios, None).map_err(PlanError::WaitRatios)?;
    for (field, per_cell) in [
        ("suites.validation_per_cell", s.validation_per_cell),
        ("suites.test_per_cell", s.test_per_cell),
    ] {
        let n = s.wait_ratios.len() as u32;
        if n > 0 && per_cell % n != 0 {
            return Err(range(
                field,
                format!(
                    "{per_cell} is not a multiple of the {n} suites.wait_ratios (each cell is split into {n} equal subsets)"
                ),
            ));
        }
    }
    Ok(())
}

/// The warm-up's training and the boards it trains on: sizes, hole and wait ratios, and
/// agent counts that fit on those sizes.
fn check_warmup_boards(w: &Warmup) -> Result<(), PlanError> {
    check_u("warmup.steps", w.steps, 0, 100_000_000)?;
    check_f("warmup.lr", w.lr, 0.0, 1.0, true)?;
    check_u("warmup.batch_size", w.batch_size as u64, 1, 1 << 20)?;
    check_u("warmup.instances", w.instances as u64, 1, 10_000_000)?;
    if w.sizes.is_empty() {
        return Err(range("warmup.sizes", "must list at least one map size"));
    }
    for &n in &w.sizes {
        check_u("warmup.sizes", n as u64, 3, 32)?;
    }
    check_f("warmup.hole_ratio", w.hole_ratio, 0.0, 0.5, false)?;
    check_f("warmup.wait_ratio", w.wait_ratio, 0.0, 1.0, false)?;
    for &h in &w.hole_ratios {
        check_f("warmup.hole_ratios", h, 0.0, 0.5, false)?;
    }
    for &r in &w.wait_ratios {
        check_f("warmup.wait_ratios", r, 0.0, 1.0, false)?;
    }
    if w.agents.is_empty() {
        return Err(range("warmup.agents", "must list at least one agent count"));
    }
    for &a in &w.agents {
        check_u(
            "warmup.agents",
            a as u64,
            crate::env::instance::MIN_AGENTS as u64,
            crate::env::instance::MAX_AGENTS as u64,
        )?;
        if !w.sizes.iter().any(|&n| n >= a) {
            return Err(range(
                "warmup.agents",
                format!("{a} agents need a map size of at least {a} in warmup.sizes"),
            ));
        }
    }
    Ok(())
}

/// The engineer replies the warm-up teaches: how many, how often, and the contexts
/// they are drawn from.
fn check_warmup_engineer_examples(w: &Warmup) -> Result<(), PlanError> {
    check_u(
        "warmup.engineer_examples",
        w.engineer_examples as u64,
        0,
        1_000_000,
    )?;
    check_u(
        "warmup.engineer_every",
        w.engineer_every as u64,
        1,
        1_000_000,
    )?;
    check_u("warmup.engineer_after", w.engineer_after, 0, 100_000_000)?;
    check_u(
        "warmup.engineer_batch_size",
        w.engineer_batch_size as u64,
        1,
        1 << 20,
    )?;
    if let Some([least, most]) = w.engineer_context_sizes {
        if least < 1 || least > most || most > 32 {
            return Err(range(
                "warmup.engineer_context_sizes",
                format!(
                    "must be [least, most] with 1 <= least <= most <= 32, got [{least}, {most}]"
                ),
            ));
        }
    }
    check_draw(
        "warmup.engineer_suite_items",
        w.engineer_suite_items.as_deref(),
        10_000,
        "suite sizes, each 1 to 10000 items",
    )?;
    check_draw(
        "warmup.engineer_edits",
        w.engineer_edits.as_deref(),
        8,
        "counts, each 1 to 8 sizes",
    )
}

/// GRPO's schedule, loss, rewards, memory bounds and optimiser, then rehearsal.
fn check_grpo(g: &GrpoConfig) -> Result<(), PlanError> {
    check_u("grpo.steps", g.steps, 1, 100_000_000)?;
    check_f("grpo.lr", g.lr, 0.0, 1.0, true)?;
    check_u("grpo.group_size", g.group_size as u64, 2, 1024)?;
    check_f("grpo.clip_eps", g.clip_eps, 0.0, 1.0, true)?;
    check_f("grpo.kl_coef", g.kl_coef, 0.0, 10.0, false)?;
    check_u("grpo.batch_size", g.batch_size as u64, 1, 1 << 20)?;
    check_u(
        "grpo.instances_per_stage",
        g.instances_per_stage as u64,
        1,
        10_000_000,
    )?;
    check_f("grpo.entropy_coef", g.entropy_coef, 0.0, 10.0, false)?;
    check_u("grpo.epochs", g.epochs as u64, 1, 64)?;
    check_f("grpo.valid_reward", g.valid_reward, 0.0, 100.0, false)?;
    check_f("grpo.optimal_bonus", g.optimal_bonus, 0.0, 100.0, false)?;
    check_f("grpo.format_reward", g.format_reward, 0.0, 100.0, false)?;
    check_f("grpo.agent_reward", g.agent_reward, 0.0, 100.0, false)?;
    check_f("grpo.cost_reward", g.cost_reward, 0.0, 100.0, false)?;
    check_u("grpo.checkpoint_every", g.checkpoint_every, 1, u64::MAX)?;
    check_u("grpo.micro_batch", g.micro_batch as u64, 0, 1 << 20)?;
    check_u("grpo.log_prob_chunk", g.log_prob_chunk as u64, 0, 1 << 24)?;
    check_u(
        "grpo.micro_batch_tokens",
        g.micro_batch_tokens as u64,
        0,
        1 << 30,
    )?;
    for (field, v) in [("grpo.beta1", g.beta1), ("grpo.beta2", g.beta2)] {
        if !(0.0..1.0).contains(&v) {
            return Err(range(field, format!("must be in [0, 1), got {v}")));
        }
    }
    check_f("grpo.adam_eps", g.adam_eps, 0.0, 1.0, true)?;
    check_f("grpo.weight_decay", g.weight_decay, 0.0, 1.0, false)?;
    check_f("grpo.max_grad_norm", g.max_grad_norm, 0.0, 1e6, false)?;
    check_f("grpo.advantage_eps", g.advantage_eps, 0.0, 1.0, false)?;
    check_f("grpo.signal_eps", g.signal_eps, 0.0, 1.0, false)?;
    check_rehearsal(g)
}

/// Rehearsal needs its batch and instance counts once its coefficient is above 0.
fn check_rehearsal(g: &GrpoConfig) -> Result<(), PlanError> {
    check_f("grpo.rehearsal_coef", g.rehearsal_coef, 0.0, 100.0, false)?;
    if g.rehearsal_coef > 0.0 {
        for (field, v, hi) in [
            ("grpo.rehearsal_batch", g.rehearsal_batch, 1 << 20),
            (
                "grpo.rehearsal_instances",
                g.rehearsal_instances,
                10_000_000,
            ),
        ] {
            if v == 0 {
                return Err(range(
                    field,
                    "must be set (1 or more) when grpo.rehearsal_coef is above 0",
                ));
            }
            check_u(field, v as u64, 1, hi)?;
        }
    }
    Ok(())
}

/// `grpo.agent_names` and `warmup.agent_names` (0: off): enough names for the most
/// agents each trains with, and a prompt style that writes agent lines.
fn check_agent_names(plan: &LedgerPlan) -> Result<(), PlanError> {
    let most_warmed = plan.warmup.agents.iter().copied().max().unwrap_or(2) as u64;
    for (field, names, k) in [
        (
            "grpo.agent_names",
            plan.grpo.agent_names,
            plan.initial_config.agents as u64,
        ),
        ("warmup.agent_names", plan.warmup.agent_names, most_warmed),
    ] {
        if names == 0 {
            continue;
        }
        check_u(field, names as u64, k.max(2), 99)?;
        if plan.lm.prompt == trainer::PromptStyle::Steps {
            return Err(range(
                field,
                "applies to the agent-line styles; the steps style tags agents by position",
            ));
        }
    }
    Ok(())
}

/// The engineer's name, stages, sizes and text revision, then its RL settings.
fn check_engineer(e: &EngineerPlan, policy: PolicyKind) -> Result<(), PlanError> {
    if e.name.trim().is_empty() {
        return Err(range("engineer.name", "must not be empty"));
    }
    check_u("engineer.stages", e.stages as u64, 1, 1000)?;
    check_u("engineer.max_size", e.max_size as u64, 3, 32)?;
    check_u(
        "engineer.revision",
        e.revision as u64,
        1,
        LATEST_ENGINEER_REVISION as u64,
    )?;
    if let Some(o) = &e.oracle {
        check_u(
            "engineer.oracle.candidates",
            o.candidates.len() as u64,
            1,
            64,
        )?;
        if o.candidates.iter().any(|c| c.trim().is_empty()) {
            return Err(range(
                "engineer.oracle.candidates",
                "a candidate name is empty",
            ));
        }
    }
    match &e.train {
        Some(t) => check_engineer_train(t, policy),
        None => Ok(()),
    }
}

/// `[engineer.train]`: engineer RL's steps, probes, reward weights and rules; it
/// trains a language model, so it needs `policy = "lm"`.
fn check_engineer_train(t: &EngineerTrain, policy: PolicyKind) -> Result<(), PlanError> {
    check_u("engineer.train.steps", t.steps as u64, 1, 10_000)?;
    check_u("engineer.train.prompts", t.prompts as u64, 1, 256)?;
    check_u("engineer.train.group_size", t.group_size as u64, 2, 256)?;
    check_u(
        "engineer.train.probe_per_size",
        t.probe_per_size as u64,
        1,
        4096,
    )?;
    check_u(
        "engineer.train.probe_samples",
        t.probe_samples as u64,
        1,
        256,
    )?;
    for (field, w) in [
        ("engineer.train.learnability_weight", t.learnability_weight),
        ("engineer.train.format_weight", t.format_weight),
        ("engineer.train.grounding_weight", t.grounding_weight),
    ] {
        check_f(field, w, 0.0, 100.0, false)?;
    }
    if let Some(lr) = t.lr {
        check_f("engineer.train.lr", lr, 0.0, 1.0, true)?;
    }
    check_u("engineer.train.rules", t.rules as u64, 3, 4)?;
    if t.enabled && policy != PolicyKind::Lm {
        return Err(range(
            "engineer.train",
            "engineer RL trains the policy on engineer prompts, which needs policy = \"lm\"",
        ));
    }
    Ok(())
}

/// Every size of the first stage's configuration is one the engineer may edit.
fn check_sizes_within_engineer(plan: &LedgerPlan) -> Result<(), PlanError> {
    let max_size = plan.engineer.max_size;
    if let Some(&n) = plan
        .initial_config
        .sizes
        .keys()
        .find(|&&n| n > max_size as usize)
    {
        return Err(range(
            "initial_config",
            format!("size {n} is above engineer.max_size {max_size}"),
        ));
    }
    Ok(())
}
