//! What a stage reads from the plan: the plan itself (from genesis), the trainer's
//! configs copied from its fields, the evaluation suites and the per-stage seeds.
use super::*;

/// The plan recorded in a ledger's genesis.
pub fn ledger_plan(ledger: &Ledger) -> Result<LedgerPlan, StageError> {
    let history = ledger.history(crate::ledger::refs::MAIN)?;
    let genesis = history.first().ok_or(StageError::NoGenesis)?;
    let EventBody::Genesis(g) = &genesis.1.body else {
        return Err(StageError::NotGenesis);
    };
    let bytes = ledger.blob(&g.plan_blob)?;
    LedgerPlan::parse(&bytes).map_err(StageError::Plan)
}

pub fn warmup_config(plan: &LedgerPlan) -> WarmupConfig {
    let w = &plan.warmup;
    WarmupConfig {
        steps: w.steps,
        lr: w.lr,
        batch_size: w.batch_size as usize,
        instances: w.instances as usize,
        agent_names: w.agent_names,
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
        suite::build(&suite_spec(plan, name), Budget::default()).map_err(StageError::Generate)
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
