//! The instance generator: turns a `GeneratorConfig` (or one suite cell) and a seed into
//! solved instances.
//!
//! Instance `i` draws everything from its own seed (`seed.child("instance", i)`), so
//! the output is identical whatever the rayon thread count, and generation runs in
//! parallel. Only instances the solver proves solvable are emitted, each with its optima
//! and one optimal plan. `wait_ratio` is met per instance: instance `i` first draws
//! whether it must need coordination (Bernoulli(wait_ratio)), then rejection-samples an
//! instance of that kind, so the realised share is binomial around the request.
use super::config::{hole_count, GeneratorConfig};
use super::instance::{Cell, Instance};
use super::solver::{solve, Budget, Solution, SolveError};
use crate::seed::{Rng, Seed};
use rand::seq::SliceRandom;
use rand::Rng as _;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

/// Attempts per instance before generation gives up with a clear error.
pub const MAX_ATTEMPTS: usize = 4000;

/// Most instances one `env generate` draws (each is solved optimally).
pub const MAX_COUNT: usize = 1_000_000;

/// An instance with its reference optima and one optimal plan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Solved {
    pub instance: Instance,
    pub reference: super::simulate::Reference,
    /// A makespan-optimal plan (ties broken by sum-of-costs).
    pub plan: super::instance::Plan,
    /// Optimal sum-of-costs exceeds the sum of independent shortest paths.
    pub needs_coordination: bool,
    /// High-level CBS nodes spent solving it.
    pub solver_nodes: u64,
}

impl Solved {
    fn new(instance: Instance, s: Solution) -> Solved {
        Solved {
            needs_coordination: s.needs_coordination(),
            reference: s.reference,
            plan: s.plan,
            solver_nodes: s.nodes,
            instance,
        }
    }
}

/// What one instance must look like.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct InstanceSpec {
    pub size: usize,
    pub agents: usize,
    pub hole_ratio: f64,
    /// `Some(true)`: must need coordination; `Some(false)`: must not; `None`: either.
    pub coordination: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GenerateError {
    #[error(
        "no solvable {size}x{size} instance with {agents} agents, hole_ratio {hole_ratio}{} after {attempts} attempts (lower hole_ratio or wait_ratio for this size)",
        match coordination { Some(true) => ", needing coordination", Some(false) => ", not needing coordination", None => "" }
    )]
    Exhausted {
        size: usize,
        agents: usize,
        hole_ratio: f64,
        coordination: Option<bool>,
        attempts: usize,
    },
    #[error("only {found} of {count} {size}x{size} instances could be drawn outside the evaluation suites after {rounds} rounds (that size's instance space is nearly exhausted)")]
    Excluded {
        found: usize,
        count: usize,
        size: usize,
        rounds: u64,
    },
    #[error("invalid generator configuration: {0}")]
    Config(#[from] super::config::ConfigError),
}

/// Generate `count` training instances from `config`, deterministically from `seed`.
/// Instances come in size order (sizes ascending, as allocated by `data_ratio`).
pub fn generate(
    config: &GeneratorConfig,
    count: usize,
    seed: Seed,
    budget: Budget,
) -> Result<Vec<Solved>, GenerateError> {
    config.validate()?;
    let mut specs = Vec::with_capacity(count);
    for (size, n) in config.allocate(count) {
        let c = config.sizes[&size];
        for _ in 0..n {
            specs.push((size, c));
        }
    }
    specs
        .into_par_iter()
        .enumerate()
        .map(|(i, (size, c))| {
            let mut rng = seed.child("instance", i as u64).rng();
            let coordination = if config.agents >= 2 {
                Some(rng.random_bool(c.wait_ratio))
            } else {
                Some(false)
            };
            let spec = InstanceSpec {
                size,
                agents: config.agents,
                hole_ratio: c.hole_ratio,
                coordination,
            };
            generate_one(&spec, &mut rng, budget)
        })
        .collect()
}

/// Rejection-sample one solvable instance matching `spec`.
/// The canonical identity of an instance (blake3 of [`Instance::canonical_bytes`]).
pub fn instance_key(inst: &Instance) -> [u8; 32] {
    *blake3::hash(&inst.canonical_bytes()).as_bytes()
}

/// [`generate`], skipping every instance whose canonical key is in `excluded` (the
/// validation and test suites, so training never sees an evaluation instance: on 3x3
/// and 4x4 maps collisions are common). Each size's dropped instances are replaced by
/// further rounds of that size alone, drawn from `seed.child("excluded-round", r)`, so
/// the size allocation is kept; round 0 is `generate` with `seed` itself, so without
/// collisions the result is exactly `generate`'s. Deterministic.
pub fn generate_excluding(
    config: &GeneratorConfig,
    count: usize,
    seed: Seed,
    budget: Budget,
    excluded: &std::collections::BTreeSet<[u8; 32]>,
) -> Result<Vec<Solved>, GenerateError> {
    const ROUNDS: u64 = 64;
    let keep = |it: &Solved| !excluded.contains(&instance_key(&it.instance));
    let mut by_size: std::collections::BTreeMap<usize, Vec<Solved>> = Default::default();
    for it in generate(config, count, seed, budget)? {
        if keep(&it) {
            by_size.entry(it.instance.size()).or_default().push(it);
        }
    }
    for (size, want) in config.allocate(count) {
        let have = by_size.entry(size).or_default();
        let mut round = 1;
        while have.len() < want {
            if round > ROUNDS {
                return Err(GenerateError::Excluded {
                    found: have.len(),
                    count: want,
                    size,
                    rounds: ROUNDS,
                });
            }
            let mut one = GeneratorConfig {
                agents: config.agents,
                sizes: [(size, config.sizes[&size])].into_iter().collect(),
            };
            one.sizes.get_mut(&size).expect("the size").data_ratio = 1.0;
            let s = seed
                .child("excluded-round", round)
                .child("size", size as u64);
            for it in generate(&one, want - have.len(), s, budget)? {
                if keep(&it) {
                    have.push(it);
                }
            }
            round += 1;
        }
    }
    Ok(by_size.into_values().flatten().collect())
}

pub fn generate_one(
    spec: &InstanceSpec,
    rng: &mut Rng,
    budget: Budget,
) -> Result<Solved, GenerateError> {
    for attempt in 0..MAX_ATTEMPTS {
        // Half the attempts for a coordination instance put the second agent on the
        // first agent's route in the opposite direction: random placement alone rarely
        // makes two agents on a large map need each other, and rejection keeps the
        // result honest either way.
        let biased = spec.coordination == Some(true) && attempt % 2 == 1;
        let Some(inst) = sample(spec, rng, biased) else {
            continue;
        };
        match solve(&inst, budget) {
            Ok(sol) => {
                if spec
                    .coordination
                    .is_none_or(|want| want == sol.needs_coordination())
                {
                    return Ok(Solved::new(inst, sol));
                }
            }
            Err(
                SolveError::Unreachable { .. }
                | SolveError::Unsolvable { .. }
                | SolveError::Unknown { .. },
            ) => {}
        }
    }
    Err(GenerateError::Exhausted {
        size: spec.size,
        agents: spec.agents,
        hole_ratio: spec.hole_ratio,
        coordination: spec.coordination,
        attempts: MAX_ATTEMPTS,
    })
}

/// A random placement where every agent can reach its goal, without solving it (for
/// throughput measurements and random-action rollouts, where optima are not needed).
pub fn sample_reachable(spec: &InstanceSpec, rng: &mut Rng) -> Result<Instance, GenerateError> {
    for _ in 0..MAX_ATTEMPTS {
        if let Some(inst) = sample(spec, rng, false) {
            let n = inst.size();
            let ok = (0..inst.agents())
                .all(|a| bfs_route(n, inst.holes(), inst.starts()[a], inst.goals()[a]).is_some());
            if ok {
                return Ok(inst);
            }
        }
    }
    Err(GenerateError::Exhausted {
        size: spec.size,
        agents: spec.agents,
        hole_ratio: spec.hole_ratio,
        coordination: None,
        attempts: MAX_ATTEMPTS,
    })
}

/// One random placement: holes, then distinct starts and distinct goals on frozen cells.
fn sample(spec: &InstanceSpec, rng: &mut Rng, biased: bool) -> Option<Instance> {
    let n = spec.size;
    let cells = n * n;
    let holes_n = hole_count(n, spec.hole_ratio).min(cells.saturating_sub(2 * spec.agents));
    let mut order: Vec<Cell> = (0..cells as Cell).collect();
    order.shuffle(rng);
    let mut holes = vec![false; cells];
    for &c in &order[..holes_n] {
        holes[c as usize] = true;
    }
    let mut frozen: Vec<Cell> = order[holes_n..].to_vec();
    frozen.shuffle(rng);
    let k = spec.agents;
    let mut starts: Vec<Cell> = frozen[..k].to_vec();
    let mut goal_order = frozen.clone();
    goal_order.shuffle(rng);
    let mut goals: Vec<Cell> = goal_order[..k].to_vec();
    if biased && k >= 2 {
        // Agent 2 travels agent 1's shortest route backwards (a random stretch of it).
        if let Some(route) = bfs_route(n, &holes, starts[0], goals[0]) {
            if route.len() >= 3 {
                let a = rng.random_range(1..route.len());
                let b = rng.random_range(0..a);
                let (s2, g2) = (route[a], route[b]);
                if s2 != starts[0]
                    && g2 != goals[0]
                    && !starts[2..].contains(&s2)
                    && !goals[2..].contains(&g2)
                {
                    starts[1] = s2;
                    goals[1] = g2;
                }
            }
        }
    }
    // An agent that starts on its goal has nothing to do: keep instances non-degenerate.
    if starts.iter().zip(&goals).any(|(s, g)| s == g) {
        return None;
    }
    Instance::new(n, holes, starts, goals).ok()
}

/// A shortest route between two cells over frozen cells (BFS), inclusive of both ends.
fn bfs_route(n: usize, holes: &[bool], from: Cell, to: Cell) -> Option<Vec<Cell>> {
    let mut prev = vec![u16::MAX; n * n];
    let mut queue = std::collections::VecDeque::from([from]);
    prev[from as usize] = from;
    while let Some(c) = queue.pop_front() {
        if c == to {
            let mut route = vec![to];
            let mut x = to;
            while x != from {
                x = prev[x as usize];
                route.push(x);
            }
            route.reverse();
            return Some(route);
        }
        let (r, col) = (c as usize / n, c as usize % n);
        let mut next = [None; 4];
        if r > 0 {
            next[0] = Some(c - n as Cell);
        }
        if r + 1 < n {
            next[1] = Some(c + n as Cell);
        }
        if col > 0 {
            next[2] = Some(c - 1);
        }
        if col + 1 < n {
            next[3] = Some(c + 1);
        }
        for d in next.into_iter().flatten() {
            if !holes[d as usize] && prev[d as usize] == u16::MAX {
                prev[d as usize] = c;
                queue.push_back(d);
            }
        }
    }
    None
}
