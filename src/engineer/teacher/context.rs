//! The teacher's synthetic evidence: contexts shaped like a real stage's.
use super::{r2, TeacherSpec};
use crate::context::{EngineerContext, HistoryEntry, TrainingDetails};
use crate::env::config::max_hole_ratio;
use crate::env::table::{CellCounts, ResultTable};
use crate::env::text::render_plan;
use crate::env::{Budget, FailureKind, GeneratorConfig, Instance, Move, Plan, SizeConfig};
use crate::plan::ContextModules;
use crate::record::event::{FailureBreakdown, SizeFailures};
use crate::seed::Seed;
use rand::Rng;
use std::collections::BTreeMap;

/// A random configuration over a contiguous size range (most often 3..=max).
fn random_config(rng: &mut impl Rng, max: usize) -> GeneratorConfig {
    let lo = if rng.random_bool(0.7) {
        3
    } else {
        rng.random_range(3..max)
    };
    let hi = if rng.random_bool(0.7) {
        max
    } else {
        rng.random_range(lo + 1..=max)
    };
    let mut sizes = BTreeMap::new();
    for n in lo..=hi {
        sizes.insert(
            n,
            SizeConfig {
                data_ratio: r2(rng.random_range(0.05..0.3)),
                hole_ratio: r2(rng.random_range(0.0..0.3f64).min(max_hole_ratio(n, 2))),
                wait_ratio: r2(rng.random_range(0.0..0.6)),
            },
        );
    }
    GeneratorConfig { agents: 2, sizes }
}

/// A small random edit of a configuration (the configs of a synthetic history).
fn perturb(rng: &mut impl Rng, c: &GeneratorConfig) -> GeneratorConfig {
    let mut next = c.clone();
    let sizes: Vec<usize> = next.sizes.keys().copied().collect();
    let n = sizes[rng.random_range(0..sizes.len())];
    let s = next.sizes.get_mut(&n).expect("a listed size");
    match rng.random_range(0..3) {
        0 => s.data_ratio = r2((s.data_ratio * rng.random_range(0.5..2.0)).clamp(0.01, 1.0)),
        1 => s.hole_ratio = r2((s.hole_ratio + rng.random_range(-0.1..0.1)).clamp(0.0, 0.3)),
        _ => s.wait_ratio = r2((s.wait_ratio + rng.random_range(-0.2..0.2)).clamp(0.0, 1.0)),
    }
    next
}

/// Validation counts per size around a skill level: success falls with the size when
/// `ranked`, else with a difficulty drawn per size.
fn random_validation(
    rng: &mut impl Rng,
    skill: f64,
    per_cell: u32,
    max: usize,
    ranked: bool,
) -> ResultTable {
    let mut t = ResultTable::default();
    for n in 3..=max {
        // Ranked (revisions 1-3): validity falls with the map size. Then the weakest line
        // of a context was nearly always the largest size, mostly goal_not_reached, and a
        // model imitating the teacher could write its first evidence line from that
        // prior without reading (mapf-base-indep-v4 opened 174 of 200 engineer-eval
        // replies with size 10, whatever the context said). Unranked (revision 4 on):
        // each size's difficulty is drawn on its own, so only reading finds the weakest.
        let difficulty = if ranked {
            (n as f64 - 3.0) / (max as f64 - 3.0).max(1.0)
        } else {
            rng.random_range(0.0..1.0f64)
        };
        let p = (skill * (1.15 - difficulty) + rng.random_range(-0.12..0.12)).clamp(0.0, 1.0);
        let valid = (p * per_cell as f64).round() as u32;
        let optimal = (valid as f64 * rng.random_range(0.6..1.0)).round() as u32;
        t.cells.insert(
            (2, n),
            CellCounts {
                total: per_cell,
                valid,
                optimal,
            },
        );
    }
    t
}

/// A real failing plan on a real instance of size `n`: the instance's optimal plan,
/// perturbed the way weak policies fail (stopping short, a wrong move, a garbled line),
/// then simulated; None when the perturbation happened to stay valid.
fn failing_example(rng: &mut impl Rng, n: usize, hole_ratio: f64, seed: Seed) -> Option<String> {
    let spec = crate::env::generator::InstanceSpec {
        size: n,
        agents: 2,
        hole_ratio,
        coordination: None,
    };
    let solved =
        crate::env::generator::generate_one(&spec, &mut seed.rng(), Budget::default()).ok()?;
    let inst: &Instance = &solved.instance;
    let mut plan: Plan = solved.plan.clone();
    let a = rng.random_range(0..plan.moves.len());
    let text = match rng.random_range(0..4) {
        0 => {
            // Stops short of the goal.
            let keep = plan.moves[a].len().saturating_sub(rng.random_range(1..=3));
            plan.moves[a].truncate(keep);
            render_plan(&plan)
        }
        1 | 2 => {
            // One wrong move.
            if plan.moves[a].is_empty() {
                plan.moves[a].push(Move::ALL[rng.random_range(0..4)]);
            } else {
                let i = rng.random_range(0..plan.moves[a].len());
                plan.moves[a][i] = Move::ALL[rng.random_range(0..5)];
            }
            render_plan(&plan)
        }
        _ => {
            // A garbled line.
            let mut t = render_plan(&plan);
            let at = rng.random_range(0..t.len());
            t.insert(at, ['X', '?', '7'][rng.random_range(0..3)]);
            t
        }
    };
    let outcome = match crate::env::text::parse_plan(&text, inst.agents()) {
        Ok(p) => crate::env::simulate(inst, &p),
        Err(e) => crate::env::Outcome::failed(e.to_failure()),
    };
    let f = outcome.failure?;
    Some(crate::train::eval::failure_example(inst, &text, &f))
}

/// One synthetic engineer context for designing `stage`: the modules (now and then one
/// ablated), a history of configurations, validation counts around a drawn skill, a
/// failure breakdown with real failing plans, the history's tables and the training
/// details; a compact prompt keeps a window of the trained sizes. Every draw comes from
/// `seed`'s one stream, in that order.
pub fn context(seed: Seed, spec: &TeacherSpec, stage: u32) -> EngineerContext {
    let mut rng = seed.rng();
    let max = spec.max_size.max(4);
    let modules = ablated_modules(&mut rng, spec);
    // Revision 4: the validated sizes end at a random size from 5 up, as plans' suites
    // and engineer eval's contexts do (before, always at `max_size`). Drawn only from
    // revision 4, so earlier revisions' contexts are bit for bit what they were.
    let max = if spec.text.unranked_sizes {
        rng.random_range(5.min(max)..=max)
    } else {
        max
    };
    let configs = config_history(&mut rng, max, stage);
    let current = configs.last().expect("one config").clone();
    let skill = rng.random_range(0.15..1.0f64);
    // Revision 2: suites of the sizes real plans use, so counts are copied from the
    // context rather than remembered (the first base wrote "/20" into 48-item stages).
    let per_cell = if spec.text.teacher_reads_evidence {
        let items = spec.suite_items();
        items[rng.random_range(0..items.len())]
    } else {
        spec.per_cell
    };
    let validation = random_validation(&mut rng, skill, per_cell, max, !spec.text.unranked_sizes);
    let mut failures = Vec::new();
    for (&(_, n), cell) in &validation.cells {
        let holes = current.sizes.get(&n).map_or(0.1, |c| c.hole_ratio);
        failures.push(size_failures(&mut rng, spec, n, cell, holes, seed));
    }
    let history = (1..stage)
        .map(|s| {
            let i = s as usize;
            HistoryEntry {
                stage: s,
                engineer: ["current", "base", "heuristic"][rng.random_range(0..3)].into(),
                previous: configs[i - 1].clone(),
                config: configs[i].clone(),
                // (History tables stay ranked at every revision, as the revision-4 and
                // -5 pilots were trained on.)
                validation: random_validation(&mut rng, skill * 0.9, spec.per_cell, max, true),
            }
        })
        .collect();
    let mut ctx = EngineerContext {
        stage,
        current,
        validation,
        failures: FailureBreakdown {
            suite: "val".into(),
            sizes: failures,
        },
        history,
        training: TrainingDetails {
            steps: 100,
            train_valid_rate: r2(skill * 0.8),
            train_optimal_rate: r2(skill * 0.6),
            last_loss: r2(rng.random_range(-0.2..0.2)),
            last_grad_norm: r2(rng.random_range(0.1..2.0)),
        },
        modules,
        max_size: max,
    };
    if spec.text.compact {
        compact_window(&mut rng, spec, &mut ctx);
    }
    ctx.without_switched_off_modules()
}

/// The plan's context modules, with one flipped a quarter of the time (an ablated
/// prompt).
fn ablated_modules(rng: &mut impl Rng, spec: &TeacherSpec) -> ContextModules {
    let mut modules = spec.modules.clone();
    if rng.random_bool(0.25) {
        match rng.random_range(0..5) {
            // (A compact prompt is the breakdown: it stays.)
            0 => modules.failure_breakdown ^= !spec.text.compact,
            1 => modules.guideline ^= true,
            2 => modules.history ^= true,
            3 => modules.summary ^= true,
            _ => modules.training_details ^= true,
        }
    }
    modules
}

/// A history of configurations for designing `stage` (`stage` of them, at least one),
/// each a small edit of the one before; the last is the configuration in force.
fn config_history(rng: &mut impl Rng, max: usize, stage: u32) -> Vec<GeneratorConfig> {
    let mut configs = vec![random_config(rng, max)];
    for _ in 1..stage {
        let next = perturb(rng, configs.last().expect("one config"));
        configs.push(next);
    }
    configs
}

/// Size `n`'s failure breakdown for validation cell `cell`: a count per failure kind
/// over its failed items, and up to `examples_per_size` real failing plans on boards of
/// hole ratio `holes`.
fn size_failures(
    rng: &mut impl Rng,
    spec: &TeacherSpec,
    n: usize,
    cell: &CellCounts,
    holes: f64,
    seed: Seed,
) -> SizeFailures {
    let failed = cell.total - cell.valid;
    let counts = failure_counts(rng, spec, n, failed);
    let mut examples = Vec::new();
    for e in 0..spec.examples_per_size.min(failed as usize) {
        examples.extend(failing_example(
            rng,
            n,
            holes,
            seed.child("example", (n * 16 + e) as u64),
        ));
    }
    SizeFailures {
        size: n as u32,
        total: cell.total,
        counts: counts.into_iter().collect(),
        examples,
    }
}

/// The kinds of `failed` failures at size `n`. Revision 2 on, one kind dominates (as
/// in real breakdowns), so the answer has something to read; before, larger maps fail
/// more by not reaching the goal and small ones by conflicts.
fn failure_counts(
    rng: &mut impl Rng,
    spec: &TeacherSpec,
    n: usize,
    failed: u32,
) -> BTreeMap<FailureKind, u32> {
    let kinds = [
        FailureKind::VertexConflict,
        FailureKind::EdgeConflict,
        FailureKind::Hole,
        FailureKind::IllegalMove,
        FailureKind::ParseError,
    ];
    let mut counts: BTreeMap<FailureKind, u32> = BTreeMap::new();
    let dominant = spec.text.teacher_reads_evidence.then(|| {
        if spec.text.unranked_sizes {
            // Revision 4: any kind may dominate any size (before, larger maps were
            // mostly goal_not_reached: a prior the model could answer from).
            if rng.random_range(0..=kinds.len()) == kinds.len() {
                FailureKind::GoalNotReached
            } else {
                kinds[rng.random_range(0..kinds.len())]
            }
        } else if rng.random_bool(((n as f64 - 2.0) / 12.0).min(0.6)) {
            FailureKind::GoalNotReached
        } else {
            kinds[rng.random_range(0..kinds.len())]
        }
    });
    for _ in 0..failed {
        if let Some(d) = dominant {
            let k = if rng.random_bool(0.7) {
                d
            } else {
                kinds[rng.random_range(0..kinds.len())]
            };
            *counts.entry(k).or_default() += 1;
            continue;
        }
        let k = if rng.random_bool(((n as f64 - 2.0) / 10.0).min(0.8)) {
            FailureKind::GoalNotReached
        } else {
            kinds[rng.random_range(0..kinds.len())]
        };
        *counts.entry(k).or_default() += 1;
    }
    counts
}

/// A compact prompt is a short reading task: `ctx` keeps the breakdown and summary of
/// a few consecutive sizes the configuration trains on (2 to 4 unless the plan says).
fn compact_window(rng: &mut impl Rng, spec: &TeacherSpec, ctx: &mut EngineerContext) {
    let sizes: Vec<usize> = ctx
        .validation
        .cells
        .keys()
        .map(|k| k.1)
        .filter(|n| ctx.current.sizes.contains_key(n))
        .collect();
    let [least, most] = spec.context_sizes;
    let k = rng.random_range(least..=most).min(sizes.len());
    let from = rng.random_range(0..=sizes.len().saturating_sub(k));
    let window = &sizes[from..from + k];
    ctx.validation
        .cells
        .retain(|key, _| window.contains(&key.1));
    ctx.failures
        .sizes
        .retain(|f| window.contains(&(f.size as usize)));
}
