//! The `grid` policy: a small convolutional network over each agent's egocentric view
//! of the map, weights shared across agents, choosing every agent's next move at every
//! timestep from the current joint state. One network serves any agent count and any
//! map size (the view is a fixed window around the agent, padded as blocked).
//!
//! View channels (9x9 window centred on the agent):
//! 0 blocked (hole or off the map), 1 other agents, 2 own goal, 3 other agents' goals,
//! 4 own distance-to-goal field (BFS, scaled by 1/(2N); blocked and unreachable = 1),
//! 5 other agents with a lower index (a fixed priority that breaks symmetric deadlocks).
//! Scalars: on-goal flag, row and column offset to the goal (/N), time fraction.
//!
//! The distance field is a feature computed from the map, like the grid an LLM reads; it
//! tells the network where the shortest path goes, and the network must learn the rest:
//! avoiding holes, the grid edge, and the other agents.
use super::policy::{choose, max_steps, LogProbs, Policy, Rollout};
use crate::env::batch::{BatchEnv, Status};
use crate::env::solver::{distances_to, UNREACHABLE};
use crate::env::{Cell, Instance, Move, Plan};
use crate::seed::Seed;
use rand::Rng as _;
use tch::{nn, nn::Module, Device, Kind, Tensor};

/// Window radius: the view is (2R+1) x (2R+1).
pub const RADIUS: usize = 4;
const SIDE: usize = 2 * RADIUS + 1;
const CHANNELS: usize = 6;
const SCALARS: usize = 4;
const ACTIONS: usize = 5;

/// Architecture hyper-parameters (recorded with every checkpoint).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GridShape {
    pub conv_channels: i64,
    pub hidden: i64,
}

impl Default for GridShape {
    fn default() -> Self {
        GridShape {
            conv_channels: 16,
            hidden: 128,
        }
    }
}

#[derive(Debug)]
struct Net {
    conv1: nn::Conv2D,
    conv2: nn::Conv2D,
    fc: nn::Linear,
    head: nn::Linear,
}

pub struct GridPolicy {
    vs: nn::VarStore,
    net: Net,
    pub shape: GridShape,
}

impl GridPolicy {
    /// A freshly initialised policy; initial weights come from `seed` (torch's generator
    /// is seeded here and nowhere else).
    pub fn new(device: Device, shape: GridShape, seed: Seed) -> GridPolicy {
        let _rng = super::seeded_torch_rng(seed);
        let vs = nn::VarStore::new(device);
        let p = vs.root();
        let cfg = nn::ConvConfig {
            padding: 1,
            ..Default::default()
        };
        let c = shape.conv_channels;
        let net = Net {
            conv1: nn::conv2d(&p / "conv1", CHANNELS as i64, c, 3, cfg),
            conv2: nn::conv2d(&p / "conv2", c, c, 3, cfg),
            fc: nn::linear(
                &p / "fc",
                c * (SIDE * SIDE) as i64 + SCALARS as i64,
                shape.hidden,
                Default::default(),
            ),
            head: nn::linear(
                &p / "head",
                shape.hidden,
                ACTIONS as i64,
                Default::default(),
            ),
        };
        GridPolicy { vs, net, shape }
    }

    /// Action logits for a batch of views: planes `[N, C, 9, 9]`, scalars `[N, 4]`.
    fn logits(&self, planes: &Tensor, scalars: &Tensor) -> Tensor {
        let x = self.net.conv1.forward(planes).relu();
        let x = self.net.conv2.forward(&x).relu().flatten(1, -1);
        let x = Tensor::cat(&[x, scalars.shallow_clone()], 1);
        self.net.head.forward(&self.net.fc.forward(&x).relu())
    }

    fn views_to_tensors(&self, planes: Vec<f32>, scalars: Vec<f32>, n: usize) -> (Tensor, Tensor) {
        let d = self.vs.device();
        let p = Tensor::from_slice(&planes)
            .view([n as i64, CHANNELS as i64, SIDE as i64, SIDE as i64])
            .to(d);
        let s = Tensor::from_slice(&scalars)
            .view([n as i64, SCALARS as i64])
            .to(d);
        (p, s)
    }
}

/// Per-instance data the views need: each agent's distance field.
struct Fields {
    dist: Vec<Vec<u16>>,
}

impl Fields {
    fn new(inst: &Instance) -> Fields {
        Fields {
            dist: inst
                .goals()
                .iter()
                .map(|&g| distances_to(inst, g))
                .collect(),
        }
    }
}

/// Append the views of every agent of one joint state to `planes` and `scalars`.
fn push_views(
    inst: &Instance,
    f: &Fields,
    pos: &[Cell],
    t: usize,
    planes: &mut Vec<f32>,
    scalars: &mut Vec<f32>,
) {
    let n = inst.size() as isize;
    let k = inst.agents();
    let t_max = max_steps(inst) as f32;
    for a in 0..k {
        let base = planes.len();
        planes.resize(base + CHANNELS * SIDE * SIDE, 0.0);
        let view = &mut planes[base..];
        let (ar, ac) = inst.row_col(pos[a]);
        let (ar, ac) = (ar as isize, ac as isize);
        let at = |ch: usize, wr: usize, wc: usize| ch * SIDE * SIDE + wr * SIDE + wc;
        for wr in 0..SIDE {
            for wc in 0..SIDE {
                let (r, c) = (
                    ar + wr as isize - RADIUS as isize,
                    ac + wc as isize - RADIUS as isize,
                );
                if r < 0 || c < 0 || r >= n || c >= n {
                    view[at(0, wr, wc)] = 1.0;
                    view[at(4, wr, wc)] = 1.0;
                    continue;
                }
                let cell = inst.cell(r as usize, c as usize);
                if inst.is_hole(cell) {
                    view[at(0, wr, wc)] = 1.0;
                }
                let d = f.dist[a][cell as usize];
                view[at(4, wr, wc)] = if d == UNREACHABLE {
                    1.0
                } else {
                    (d as f32 / (2 * n) as f32).min(1.0)
                };
            }
        }
        let mut mark = |ch: usize, cell: Cell| {
            let (r, c) = inst.row_col(cell);
            let (wr, wc) = (
                r as isize - ar + RADIUS as isize,
                c as isize - ac + RADIUS as isize,
            );
            if (0..SIDE as isize).contains(&wr) && (0..SIDE as isize).contains(&wc) {
                view[at(ch, wr as usize, wc as usize)] = 1.0;
            }
        };
        mark(2, inst.goals()[a]);
        for b in (0..k).filter(|&b| b != a) {
            mark(1, pos[b]);
            mark(3, inst.goals()[b]);
            if b < a {
                mark(5, pos[b]);
            }
        }
        let (gr, gc) = inst.row_col(inst.goals()[a]);
        scalars.extend_from_slice(&[
            (pos[a] == inst.goals()[a]) as u8 as f32,
            (gr as f32 - ar as f32) / n as f32,
            (gc as f32 - ac as f32) / n as f32,
            t as f32 / t_max,
        ]);
    }
}

/// Plan bytes: each agent's moves as letters, agents separated by '|'.
fn plan_bytes(plan: &Plan) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, seq) in plan.moves.iter().enumerate() {
        if i > 0 {
            out.push(b'|');
        }
        out.extend(seq.iter().map(|m| m.letter() as u8));
    }
    out
}

/// The plan from per-timestep joint actions (trailing waits trimmed: agents rest anyway).
fn plan_from_actions(k: usize, actions: &[u32]) -> Plan {
    let steps = actions.len() / k;
    let mut moves: Vec<Vec<Move>> = (0..k)
        .map(|a| {
            (0..steps)
                .map(|t| Move::ALL[actions[t * k + a] as usize])
                .collect()
        })
        .collect();
    for seq in &mut moves {
        while seq.last() == Some(&Move::W) {
            seq.pop();
        }
    }
    Plan { moves }
}

impl Policy for GridPolicy {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any> {
        self
    }
    fn kind(&self) -> &'static str {
        "grid"
    }
    fn vars(&self) -> &nn::VarStore {
        &self.vs
    }
    fn vars_mut(&mut self) -> &mut nn::VarStore {
        &mut self.vs
    }

    fn sample(
        &self,
        instances: &[Instance],
        per_instance: usize,
        greedy: bool,
        seed: Seed,
    ) -> Vec<Rollout> {
        let _guard = tch::no_grad_guard();
        let fields: Vec<Fields> = instances.iter().map(Fields::new).collect();
        // Lanes are (instance, sample) pairs; each draws from its own stream, so a
        // lane's rollout does not depend on which other lanes share the batch.
        let lanes: Vec<usize> = (0..instances.len())
            .flat_map(|i| std::iter::repeat_n(i, per_instance))
            .collect();
        let mut rngs: Vec<_> = (0..lanes.len())
            .map(|l| seed.child("lane", l as u64).rng())
            .collect();
        // Group lanes by agent count (BatchEnv needs a uniform count).
        let mut actions: Vec<Vec<u32>> = vec![Vec::new(); lanes.len()];
        let mut counts: Vec<usize> = instances.iter().map(Instance::agents).collect();
        counts.sort_unstable();
        counts.dedup();
        for k in counts {
            let group: Vec<usize> = (0..lanes.len())
                .filter(|&l| instances[lanes[l]].agents() == k)
                .collect();
            if group.is_empty() {
                continue;
            }
            let side = group
                .iter()
                .map(|&l| instances[lanes[l]].size())
                .max()
                .unwrap_or(3);
            let mut env = BatchEnv::new(
                group.iter().map(|&l| instances[lanes[l]].clone()).collect(),
                side,
            );
            let mut t = 0;
            loop {
                let running: Vec<usize> = (0..group.len())
                    .filter(|&g| {
                        env.status()[g] == Status::Running
                            && t < max_steps(&instances[lanes[group[g]]])
                    })
                    .collect();
                if running.is_empty() {
                    break;
                }
                let mut planes = Vec::with_capacity(running.len() * k * CHANNELS * SIDE * SIDE);
                let mut scalars = Vec::with_capacity(running.len() * k * SCALARS);
                for &g in &running {
                    let i = lanes[group[g]];
                    push_views(
                        &instances[i],
                        &fields[i],
                        &env.positions()[g * k..(g + 1) * k],
                        t,
                        &mut planes,
                        &mut scalars,
                    );
                }
                let (p, s) = self.views_to_tensors(planes, scalars, running.len() * k);
                let probs = self.logits(&p, &s).softmax(-1, Kind::Float).to(Device::Cpu);
                let probs: Vec<f32> =
                    Vec::<f32>::try_from(probs.flatten(0, -1)).expect("f32 probs");
                let mut step_actions = vec![Move::W; group.len() * k];
                for (j, &g) in running.iter().enumerate() {
                    let lane = group[g];
                    for a in 0..k {
                        let row = &probs[(j * k + a) * ACTIONS..(j * k + a + 1) * ACTIONS];
                        let u = (!greedy).then(|| rngs[lane].random::<f32>());
                        let act = choose(row, u);
                        actions[lane].push(act);
                        step_actions[g * k + a] = Move::ALL[act as usize];
                    }
                }
                // Lanes that are not running keep their status (BatchEnv ignores them).
                env.step(&step_actions);
                t += 1;
            }
        }
        lanes
            .iter()
            .enumerate()
            .map(|(l, &i)| {
                let plan = plan_from_actions(instances[i].agents(), &actions[l]);
                Rollout {
                    instance: i,
                    plan_bytes: plan_bytes(&plan),
                    logprobs: Vec::new(),
                    actions: std::mem::take(&mut actions[l]),
                    plan: Ok(plan),
                }
            })
            .collect()
    }

    fn log_probs(&self, instances: &[Instance], rollouts: &[Rollout]) -> LogProbs {
        let fields: Vec<Option<Fields>> = {
            let mut used = vec![false; instances.len()];
            for r in rollouts {
                used[r.instance] = true;
            }
            instances
                .iter()
                .zip(used)
                .map(|(inst, u)| u.then(|| Fields::new(inst)))
                .collect()
        };
        let mut planes = Vec::new();
        let mut scalars = Vec::new();
        let mut taken: Vec<i64> = Vec::new();
        let mut rollout_of: Vec<i64> = Vec::new();
        for (ri, r) in rollouts.iter().enumerate() {
            let inst = &instances[r.instance];
            let f = fields[r.instance]
                .as_ref()
                .expect("fields for used instances");
            let k = inst.agents();
            let mut pos: Vec<Cell> = inst.starts().to_vec();
            for (t, acts) in r.actions.chunks(k).enumerate() {
                push_views(inst, f, &pos, t, &mut planes, &mut scalars);
                for (a, &act) in acts.iter().enumerate() {
                    taken.push(act as i64);
                    rollout_of.push(ri as i64);
                    // The state after the last step is never viewed, so an illegal move
                    // (which ends the rollout) can leave `pos` as it is.
                    if let Some(c) = inst.step(pos[a], Move::ALL[act as usize]) {
                        pos[a] = c;
                    }
                }
            }
        }
        let n = taken.len();
        let d = self.vs.device();
        if n == 0 {
            let z = Tensor::zeros([0], (Kind::Float, d));
            return LogProbs {
                per_action: z.shallow_clone(),
                entropy: z,
                rollout_of: Tensor::zeros([0], (Kind::Int64, d)),
            };
        }
        let (p, s) = self.views_to_tensors(planes, scalars, n);
        let logp = self.logits(&p, &s).log_softmax(-1, Kind::Float);
        let entropy = -(logp.exp() * &logp).sum_dim_intlist(-1, false, Kind::Float);
        let idx = Tensor::from_slice(&taken).to(d).unsqueeze(1);
        LogProbs {
            per_action: logp.gather(1, &idx, false).squeeze_dim(1),
            entropy,
            rollout_of: Tensor::from_slice(&rollout_of).to(d),
        }
    }

    fn arch(&self) -> Vec<u8> {
        crate::record::codec::encode(&self.shape)
    }

    fn encode_plan(&self, inst: &Instance, plan: &Plan) -> Vec<u32> {
        let k = inst.agents();
        let steps = plan.len();
        let mut out = Vec::with_capacity(steps * k);
        for t in 0..steps {
            for a in 0..k {
                out.push(plan.moves[a].get(t).copied().unwrap_or(Move::W).index() as u32);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inst() -> Instance {
        serde_json::from_str(
            r#"{"size":4,"grid":["FFFF","FHFF","FFFF","FFFH"],"agents":[{"start":[0,0],"goal":[2,3]},{"start":[3,0],"goal":[0,3]}]}"#,
        )
        .unwrap()
    }

    #[test]
    fn sampling_is_deterministic_and_plans_match_actions() {
        let pol = GridPolicy::new(Device::Cpu, GridShape::default(), Seed::root(1));
        let insts = vec![inst()];
        let a = pol.sample(&insts, 4, false, Seed::root(2));
        let b = pol.sample(&insts, 4, false, Seed::root(2));
        assert_eq!(a, b);
        let c = pol.sample(&insts, 4, false, Seed::root(3));
        assert_ne!(a, c);
        for r in &a {
            let plan = r.plan.as_ref().unwrap();
            let again = plan_from_actions(2, &pol.encode_plan(&insts[0], plan));
            assert_eq!(&again, plan);
        }
    }

    #[test]
    fn log_probs_cover_every_action_and_match_sampling_distribution() {
        let pol = GridPolicy::new(Device::Cpu, GridShape::default(), Seed::root(1));
        let insts = vec![inst()];
        let rs = pol.sample(&insts, 3, false, Seed::root(5));
        let lp = pol.log_probs(&insts, &rs);
        let total: usize = rs.iter().map(|r| r.actions.len()).sum();
        assert_eq!(lp.per_action.size(), [total as i64]);
        let max = lp.per_action.max().double_value(&[]);
        assert!(max <= 0.0);
        // An untrained net is near uniform over 5 moves: entropy close to ln 5.
        let h = lp.entropy.mean(Kind::Float).double_value(&[]);
        assert!(h > 1.3 && h <= 5f64.ln() + 1e-6, "{h}");
    }

    #[test]
    fn views_mark_blocked_goal_and_others() {
        let i = inst();
        let f = Fields::new(&i);
        let (mut p, mut s) = (Vec::new(), Vec::new());
        push_views(&i, &f, i.starts(), 0, &mut p, &mut s);
        assert_eq!(p.len(), 2 * CHANNELS * SIDE * SIDE);
        let at = |ch: usize, r: usize, c: usize| p[ch * SIDE * SIDE + r * SIDE + c];
        // Agent 1 at [0,0]: the row above is off the map, [1,1] (offset +1,+1) a hole.
        assert_eq!(at(0, RADIUS - 1, RADIUS), 1.0);
        assert_eq!(at(0, RADIUS + 1, RADIUS + 1), 1.0);
        // Its goal [2,3] at offset (+2,+3); agent 2 at [3,0] at offset (+3, 0).
        assert_eq!(at(2, RADIUS + 2, RADIUS + 3), 1.0);
        assert_eq!(at(1, RADIUS + 3, RADIUS), 1.0);
        assert_eq!(at(4, RADIUS, RADIUS), 5.0 / 8.0);
        assert_eq!(s[..4], [0.0, 0.5, 0.75, 0.0]);
    }
}
