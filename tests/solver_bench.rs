//! Solver timing (not a timed assertion): `cargo test --release --test solver_bench --
//! --ignored --nocapture`. Prints the time to solve batches of random instances.
use mapf_ledger::env::instance::{Cell, Instance};
use mapf_ledger::env::solver::{solve, Budget, SolveError};
use std::time::{Duration, Instant};

struct Mix(u64);
impl Mix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn random_instance(rng: &mut Mix, size: usize, agents: usize, hole_ratio: f64) -> Option<Instance> {
    let cells = size * size;
    let holes: Vec<bool> = (0..cells)
        .map(|_| (rng.next() % 10_000) as f64 / 10_000.0 < hole_ratio)
        .collect();
    let free: Vec<Cell> = (0..cells as Cell).filter(|&c| !holes[c as usize]).collect();
    if free.len() < agents {
        return None;
    }
    let mut pick = || {
        let mut pool = free.clone();
        (0..agents)
            .map(|_| pool.swap_remove(rng.below(pool.len())))
            .collect::<Vec<_>>()
    };
    let starts = pick();
    let goals = pick();
    Instance::new(size, holes, starts, goals).ok()
}

/// Solve random instances until `want` are solved; print the time spent on the solved
/// ones, on the rest, and the node statistics.
fn batch(label: &str, size: usize, agents: usize, hole_ratio: f64, want: usize, seed: u64) {
    let mut rng = Mix(seed);
    let budget = Budget::default();
    let (mut solved, mut unreachable, mut unknown, mut coordinated) = (0, 0, 0, 0);
    let (mut t_solved, mut t_other) = (Duration::ZERO, Duration::ZERO);
    let mut times = Vec::new();
    let mut max_nodes = 0;
    while solved < want {
        let Some(inst) = random_instance(&mut rng, size, agents, hole_ratio) else {
            continue;
        };
        let t = Instant::now();
        let r = solve(&inst, budget);
        let dt = t.elapsed();
        match r {
            Ok(s) => {
                solved += 1;
                coordinated += s.needs_coordination() as usize;
                max_nodes = max_nodes.max(s.nodes);
                t_solved += dt;
                times.push(dt);
            }
            Err(SolveError::Unreachable { .. }) => {
                unreachable += 1;
                t_other += dt;
            }
            Err(SolveError::Unknown { .. }) => {
                unknown += 1;
                t_other += dt;
            }
        }
    }
    times.sort();
    let pct = |p: f64| times[((times.len() - 1) as f64 * p) as usize];
    println!(
        "{label}: {solved} solved in {t_solved:.2?} (median {:.2?}, p99 {:.2?}, max {:.2?}, max nodes {max_nodes}, \
         {coordinated} need coordination); {unreachable} unreachable + {unknown} unknown took {t_other:.2?}",
        pct(0.5),
        pct(0.99),
        times[times.len() - 1],
    );
}

#[test]
#[ignore]
fn solver_timings() {
    batch("8x8, 2 agents, 20% holes", 8, 2, 0.2, 1000, 1);
    batch("10x10, 5 agents, 20% holes", 10, 5, 0.2, 100, 2);
    batch("10x10, 5 agents, 35% holes", 10, 5, 0.35, 100, 3);
    batch("10x10, 5 agents, 50% holes", 10, 5, 0.5, 100, 4);
    batch("10x10, 2 agents, 50% holes", 10, 2, 0.5, 1000, 5);
}
