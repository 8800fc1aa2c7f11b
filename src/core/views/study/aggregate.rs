//! Test cells and validation curves aggregated over seeds: per engineer, the mean and
//! 95% t-interval of every final-stage test cell and Sum row (and each wait-ratio
//! subset's Sum row), and the mean validation rates per stage.
use super::model::{StudyCell, StudyCurvePoint, StudyRun};
use crate::views::compare::mean_ci;
use std::collections::BTreeSet;

/// Per engineer (in `engineers` order): the mean and t-interval over its runs of every
/// final-stage test cell, of each agent count's Sum row (first) and of each wait-ratio
/// subset's Sum row, and its mean validation rates per stage.
pub(super) fn aggregate(
    engineers: &[String],
    runs: &[StudyRun],
) -> (Vec<StudyCell>, Vec<StudyCurvePoint>) {
    let mut cells = Vec::new();
    let mut curve = Vec::new();
    for e in engineers {
        let rs: Vec<&StudyRun> = runs.iter().filter(|r| &r.engineer == e).collect();
        let keys: BTreeSet<(usize, usize)> = rs
            .iter()
            .flat_map(|r| r.summary.test.cells.keys().copied())
            .collect();
        let agents: BTreeSet<usize> = keys.iter().map(|k| k.0).collect();
        for k in agents {
            let mut push = |size: Option<usize>, vals: Vec<(f64, f64)>| {
                let (vm, vc) = mean_ci(&vals.iter().map(|v| v.0).collect::<Vec<_>>());
                let (om, oc) = mean_ci(&vals.iter().map(|v| v.1).collect::<Vec<_>>());
                cells.push(StudyCell {
                    engineer: e.clone(),
                    agents: k,
                    size,
                    subset: None,
                    n: vals.len(),
                    valid_mean: vm,
                    valid_ci95: vc,
                    optimal_mean: om,
                    optimal_ci95: oc,
                });
            };
            push(
                None,
                rs.iter()
                    .filter(|r| r.summary.test.agent_counts().contains(&k))
                    .map(|r| r.summary.test.sum_row(k))
                    .collect(),
            );
            for &(_, n) in keys.iter().filter(|c| c.0 == k) {
                push(
                    Some(n),
                    rs.iter()
                        .filter_map(|r| r.summary.test.cells.get(&(k, n)))
                        .map(|c| (c.valid_rate(), c.optimal_rate()))
                        .collect(),
                );
            }
        }
        // Sum rows of each test subset (stratified suites).
        let subsets: BTreeSet<(usize, String)> = rs
            .iter()
            .flat_map(|r| r.summary.sum_rates())
            .filter(|x| x.suite == "test")
            .filter_map(|x| Some((x.agents, x.subset?)))
            .collect();
        for (k, subset) in subsets {
            let vals: Vec<(f64, f64)> = rs
                .iter()
                .flat_map(|r| r.summary.sum_rates())
                .filter(|x| {
                    x.suite == "test" && x.agents == k && x.subset.as_ref() == Some(&subset)
                })
                .map(|x| (x.valid, x.optimal))
                .collect();
            let (vm, vc) = mean_ci(&vals.iter().map(|v| v.0).collect::<Vec<_>>());
            let (om, oc) = mean_ci(&vals.iter().map(|v| v.1).collect::<Vec<_>>());
            cells.push(StudyCell {
                engineer: e.clone(),
                agents: k,
                size: None,
                subset: Some(subset),
                n: vals.len(),
                valid_mean: vm,
                valid_ci95: vc,
                optimal_mean: om,
                optimal_ci95: oc,
            });
        }
        let stages: BTreeSet<u32> = rs
            .iter()
            .flat_map(|r| r.summary.validation.iter().map(|v| v.0))
            .collect();
        for st in stages {
            let pts: Vec<(f64, f64)> = rs
                .iter()
                .filter_map(|r| r.summary.validation.iter().find(|v| v.0 == st))
                .map(|v| (v.1, v.2))
                .collect();
            let n = pts.len();
            curve.push(StudyCurvePoint {
                engineer: e.clone(),
                stage: st,
                n,
                valid_mean: pts.iter().map(|p| p.0).sum::<f64>() / n as f64,
                optimal_mean: pts.iter().map(|p| p.1).sum::<f64>() / n as f64,
            });
        }
    }
    (cells, curve)
}
