//! The batched step API: B instances stepped at once, with the observation planes a
//! policy reads kept up to date every step. This is the rollout engine's inner loop.
//!
//! Layout: every instance is padded to a common side S (cells beyond its own size are
//! holes). Shared planes, `[B, 3, S, S]` f32: 0 = hole (or padding), 1 = agents present,
//! 2 = goals present. Per agent, `[B, K, S, S]`: the agent's own position (one-hot).
//! A policy gets "others" as (plane 1 - own) and its own goal from `goal_cell`. The planes
//! are updated incrementally (an agent that moves clears one cell and sets another), so
//! a step costs O(agents), not O(S^2).
//!
//! Step semantics are exactly `simulate`'s (simultaneous moves; illegal move, hole,
//! vertex and edge conflicts end the episode as failures); the first failure per
//! instance is recorded. With `auto_reset`, a finished instance restarts from its starts
//! on the next step (as vectorised RL environments do).
use super::instance::{Cell, Instance, Move};
use super::simulate::FailureKind;
use rayon::prelude::*;

/// Shared observation channels per instance.
pub const SHARED_PLANES: usize = 3;

/// Status of one instance in the batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Running,
    /// Every agent on its goal (after the step at which it happened).
    Solved {
        t: u32,
    },
    Failed {
        kind: FailureKind,
        t: u32,
    },
}

/// B instances with padded planes.
pub struct BatchEnv {
    side: usize,
    agents: usize,
    instances: Vec<Instance>,
    pos: Vec<Cell>,
    goals: Vec<Cell>,
    status: Vec<Status>,
    t: Vec<u32>,
    shared: Vec<f32>,
    own: Vec<f32>,
    pub auto_reset: bool,
}

/// One instance's slice of state, borrowed mutably for a step.
struct Lane<'a> {
    inst: &'a Instance,
    side: usize,
    pos: &'a mut [Cell],
    goals: &'a [Cell],
    status: &'a mut Status,
    t: &'a mut u32,
    shared: &'a mut [f32],
    own: &'a mut [f32],
}

impl BatchEnv {
    /// Build a batch; all instances must have the same agent count. `side` >= every size.
    pub fn new(instances: Vec<Instance>, side: usize) -> BatchEnv {
        let agents = instances.first().map_or(0, |i| i.agents());
        assert!(
            instances
                .iter()
                .all(|i| i.agents() == agents && i.size() <= side),
            "uniform agents, side >= sizes"
        );
        let b = instances.len();
        let plane = side * side;
        let mut env = BatchEnv {
            side,
            agents,
            pos: vec![0; b * agents],
            goals: vec![0; b * agents],
            status: vec![Status::Running; b],
            t: vec![0; b],
            shared: vec![0.0; b * SHARED_PLANES * plane],
            own: vec![0.0; b * agents * plane],
            instances,
            auto_reset: false,
        };
        for i in 0..b {
            let goals = env.instances[i].goals().to_vec();
            env.goals[i * agents..(i + 1) * agents].copy_from_slice(&goals);
            env.lane(i).reset();
        }
        env
    }

    fn lane(&mut self, i: usize) -> Lane<'_> {
        let (k, plane) = (self.agents, self.side * self.side);
        Lane {
            inst: &self.instances[i],
            side: self.side,
            pos: &mut self.pos[i * k..(i + 1) * k],
            goals: &self.goals[i * k..(i + 1) * k],
            status: &mut self.status[i],
            t: &mut self.t[i],
            shared: &mut self.shared[i * SHARED_PLANES * plane..(i + 1) * SHARED_PLANES * plane],
            own: &mut self.own[i * k * plane..(i + 1) * k * plane],
        }
    }

    pub fn len(&self) -> usize {
        self.instances.len()
    }
    pub fn is_empty(&self) -> bool {
        self.instances.is_empty()
    }
    pub fn agents(&self) -> usize {
        self.agents
    }
    pub fn side(&self) -> usize {
        self.side
    }
    pub fn status(&self) -> &[Status] {
        &self.status
    }
    /// Agent positions as each instance's own cell indices (`row * size + col`), `[B, K]`.
    pub fn positions(&self) -> &[Cell] {
        &self.pos
    }
    /// Goals as each instance's own cell indices, `[B, K]`.
    pub fn goal_cells(&self) -> &[Cell] {
        &self.goals
    }
    /// Shared planes `[B, 3, S, S]`.
    pub fn shared_planes(&self) -> &[f32] {
        &self.shared
    }
    /// Own-position planes `[B, K, S, S]`.
    pub fn own_planes(&self) -> &[f32] {
        &self.own
    }
    pub fn instances(&self) -> &[Instance] {
        &self.instances
    }

    /// Step every instance with `actions` (`[B, K]`, row-major), on this thread.
    pub fn step(&mut self, actions: &[Move]) {
        assert_eq!(actions.len(), self.len() * self.agents);
        let k = self.agents;
        for i in 0..self.len() {
            let auto = self.auto_reset;
            self.lane(i).step(&actions[i * k..(i + 1) * k], auto);
        }
    }

    /// Step every instance with `actions` in parallel (rayon), same results as `step`.
    pub fn par_step(&mut self, actions: &[Move]) {
        assert_eq!(actions.len(), self.len() * self.agents);
        let (k, plane, side, auto) = (
            self.agents,
            self.side * self.side,
            self.side,
            self.auto_reset,
        );
        self.instances
            .par_iter()
            .zip(self.pos.par_chunks_mut(k))
            .zip(self.goals.par_chunks(k))
            .zip(self.status.par_iter_mut())
            .zip(self.t.par_iter_mut())
            .zip(self.shared.par_chunks_mut(SHARED_PLANES * plane))
            .zip(self.own.par_chunks_mut(k * plane))
            .zip(actions.par_chunks(k))
            // A lane's step is tens of nanoseconds: hand rayon chunks, not single lanes.
            .with_min_len(64)
            .for_each(
                |(((((((inst, pos), goals), status), t), shared), own), acts)| {
                    Lane {
                        inst,
                        side,
                        pos,
                        goals,
                        status,
                        t,
                        shared,
                        own,
                    }
                    .step(acts, auto)
                },
            );
    }
}

impl Lane<'_> {
    fn pad(&self, c: Cell) -> usize {
        let (r, col) = self.inst.row_col(c);
        r * self.side + col
    }

    fn reset(&mut self) {
        let plane = self.side * self.side;
        self.shared.fill(0.0);
        self.own.fill(0.0);
        for r in 0..self.side {
            for c in 0..self.side {
                let hole = r >= self.inst.size()
                    || c >= self.inst.size()
                    || self.inst.is_hole(self.inst.cell(r, c));
                self.shared[r * self.side + c] = hole as u8 as f32;
            }
        }
        for a in 0..self.pos.len() {
            self.pos[a] = self.inst.starts()[a];
            let p = self.pad(self.pos[a]);
            let g = self.pad(self.goals[a]);
            self.shared[plane + p] += 1.0;
            self.shared[2 * plane + g] = 1.0;
            self.own[a * plane + p] = 1.0;
        }
        *self.status = Status::Running;
        *self.t = 0;
    }

    fn step(&mut self, acts: &[Move], auto_reset: bool) {
        if *self.status != Status::Running {
            if auto_reset {
                self.reset();
            } else {
                return;
            }
        }
        let k = self.pos.len();
        *self.t += 1;
        let t = *self.t;
        let mut next = [0 as Cell; super::instance::MAX_AGENTS];
        let mut fail = None;
        for a in 0..k {
            match self.inst.step(self.pos[a], acts[a]) {
                Some(c) => next[a] = c,
                None => {
                    fail = Some(FailureKind::IllegalMove);
                    next[a] = self.pos[a];
                }
            }
        }
        if fail.is_none() && (0..k).any(|a| self.inst.is_hole(next[a])) {
            fail = Some(FailureKind::Hole);
        }
        if fail.is_none() {
            'v: for a in 0..k {
                for b in a + 1..k {
                    if next[a] == next[b] {
                        fail = Some(FailureKind::VertexConflict);
                        break 'v;
                    }
                    if next[a] == self.pos[b] && next[b] == self.pos[a] {
                        fail = Some(FailureKind::EdgeConflict);
                    }
                }
            }
        }
        if fail.is_none() && t as usize > self.inst.horizon() {
            fail = Some(FailureKind::TooLong);
        }
        if let Some(kind) = fail {
            *self.status = Status::Failed { kind, t };
            return;
        }
        let plane = self.side * self.side;
        let mut all_home = true;
        for (a, &to) in next[..k].iter().enumerate() {
            if to != self.pos[a] {
                let (old, new) = (self.pad(self.pos[a]), self.pad(to));
                self.shared[plane + old] -= 1.0;
                self.shared[plane + new] += 1.0;
                self.own[a * plane + old] = 0.0;
                self.own[a * plane + new] = 1.0;
                self.pos[a] = to;
            }
            all_home &= self.pos[a] == self.goals[a];
        }
        if all_home {
            *self.status = Status::Solved { t };
        }
    }
}

/// Result of [`measure_throughput`].
#[derive(Clone, Debug, serde::Serialize, schemars::JsonSchema)]
pub struct Throughput {
    pub agents: usize,
    pub size: usize,
    pub batch: usize,
    pub steps: usize,
    pub threads: usize,
    pub agent_steps_per_sec: f64,
    pub env_steps_per_sec: f64,
    /// Episodes that ended (solved or failed) and were reset.
    pub episodes: u64,
}

/// Step a batch of random instances (every goal reachable) with uniformly random actions (drawn up front, so
/// only stepping is timed) and report agent-steps per second. Wall-clock timing: this is
/// a measurement, never part of anything hashed.
pub fn measure_throughput(
    cfg: &super::GeneratorConfig,
    batch: usize,
    steps: usize,
    parallel: bool,
) -> Result<Throughput, super::generator::GenerateError> {
    use rand::Rng as _;
    let size = *cfg.sizes.keys().next().expect("one size");
    let spec = super::generator::InstanceSpec {
        size,
        agents: cfg.agents,
        hole_ratio: cfg.sizes[&size].hole_ratio,
        coordination: None,
    };
    let root = crate::seed::Seed::root(1);
    let instances = (0..batch)
        .map(|i| {
            super::generator::sample_reachable(&spec, &mut root.child("instance", i as u64).rng())
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut env = BatchEnv::new(instances, size);
    env.auto_reset = true;
    let k = env.agents();
    let mut rng = crate::seed::Seed::root(2).rng();
    // A pool of random action rows, cycled, so drawing randomness is not timed.
    let pool: Vec<Move> = (0..(batch * k * 64))
        .map(|_| Move::ALL[rng.random_range(0..5)])
        .collect();
    let row = batch * k;
    let mut episodes = 0u64;
    let start = std::time::Instant::now();
    for s in 0..steps {
        let off = (s % 64) * row;
        let acts = &pool[off..off + row];
        if parallel {
            env.par_step(acts);
        } else {
            env.step(acts);
        }
        episodes += env
            .status()
            .iter()
            .filter(|s| **s != Status::Running)
            .count() as u64;
    }
    let secs = start.elapsed().as_secs_f64();
    Ok(Throughput {
        agents: k,
        size,
        batch,
        steps,
        threads: if parallel {
            rayon::current_num_threads()
        } else {
            1
        },
        agent_steps_per_sec: (steps * batch * k) as f64 / secs,
        env_steps_per_sec: (steps * batch) as f64 / secs,
        episodes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{simulate, Plan};

    fn inst(json: &str) -> Instance {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn batch_agrees_with_simulate_and_keeps_planes_consistent() {
        let a = inst(
            r#"{"size":3,"grid":["FFF","FHF","FFF"],"agents":[{"start":[0,0],"goal":[0,2]},{"start":[2,0],"goal":[2,2]}]}"#,
        );
        let b = inst(
            r#"{"size":4,"grid":["FFFF","FFFF","FFFF","FFFF"],"agents":[{"start":[0,0],"goal":[0,1]},{"start":[0,1],"goal":[0,0]}]}"#,
        );
        let plans = [
            Plan {
                moves: vec![vec![Move::R, Move::R], vec![Move::R, Move::R]],
            },
            Plan {
                moves: vec![vec![Move::R], vec![Move::L]],
            },
        ];
        let mut env = BatchEnv::new(vec![a.clone(), b.clone()], 4);
        for t in 0..2 {
            let acts: Vec<Move> = plans
                .iter()
                .flat_map(|p| {
                    p.moves
                        .iter()
                        .map(move |m| m.get(t).copied().unwrap_or(Move::W))
                })
                .collect();
            env.par_step(&acts);
        }
        assert_eq!(env.status()[0], Status::Solved { t: 2 });
        assert!(simulate(&a, &plans[0]).valid);
        assert_eq!(
            env.status()[1],
            Status::Failed {
                kind: FailureKind::EdgeConflict,
                t: 1
            }
        );
        assert_eq!(
            simulate(&b, &plans[1]).failure.unwrap().kind,
            FailureKind::EdgeConflict
        );
        // Instance 0: agents on their goals (padded cells 2 and 10); padding is holes.
        let p = &env.shared_planes()[..3 * 16];
        assert_eq!(p[16 + 2] + p[16 + 10], 2.0);
        assert_eq!(p[16..32].iter().sum::<f32>(), 2.0);
        assert_eq!(p[3], 1.0, "padding column is a hole");
        assert_eq!(p[5], 1.0, "the hole at [1,1]");
        assert_eq!(env.own_planes()[2], 1.0);
    }
}
