//! The study's power line: how many seeds 80% power asks on the target row, planned
//! from a pilot's spread and observed in this study's paired comparisons.
use super::model::{PowerPlan, StudyPaired, StudyPower, StudyPowerObserved, StudyRun};
use crate::views::compare;

/// The power line: the target row is the test suite's smallest agent count (3 in the
/// paper: the first that 2-agent training must transfer to), on its coordination items
/// when the suite marks them.
pub(super) fn power(
    runs: &[StudyRun],
    paired: &[StudyPaired],
    orderings: &[StudyPaired],
    plan: PowerPlan,
) -> Option<StudyPower> {
    let rates: Vec<compare::SumRate> = runs
        .iter()
        .flat_map(|r| r.summary.sum_rates())
        .filter(|x| x.suite == "test")
        .collect();
    let agents = rates.iter().map(|x| x.agents).min()?;
    let coord = crate::views::paired::coordination_label(true).to_string();
    let subset = rates
        .iter()
        .any(|x| x.agents == agents && x.subset.as_deref() == Some(coord.as_str()))
        .then_some(coord);
    let observed = paired
        .iter()
        .chain(orderings)
        .filter(|p| p.suite == "test" && p.agents == agents && p.subset == subset)
        .filter(|p| p.valid.per_seed.len() >= 2)
        .map(|p| {
            let sd = compare::sd(&p.valid.per_seed);
            StudyPowerObserved {
                engineer: p.engineer.clone(),
                baseline: p.baseline.clone(),
                seeds: p.valid.per_seed.len(),
                sd,
                seeds_needed: compare::seeds_for_power(sd, plan.effect),
            }
        })
        .collect();
    Some(StudyPower {
        effect: plan.effect,
        suite: "test".into(),
        agents,
        subset,
        planned_sd: plan.pilot_sd,
        planned_seeds: plan
            .pilot_sd
            .and_then(|sd| compare::seeds_for_power(sd, plan.effect)),
        observed,
    })
}
