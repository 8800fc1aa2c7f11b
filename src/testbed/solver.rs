//! Reference solver: optimal Conflict-Based Search (Sharon et al. 2015) for
//! MAPF-FrozenLake. This module owns everything the "optimal" label rests on: the
//! per-agent reachability pre-check, the space-time A* low level with its constraint
//! table, the CBS high level (conflict selection cardinal-first via MDD widths, and
//! MA-CBS meta-agents with merge-and-restart, planned by the coupled low level in
//! `joint`), the two searches (optimal sum-of-costs; optimal makespan with
//! sum-of-costs as tie-break, by capped CBS), and the node/time budget that turns a
//! runaway search into [`SolveError::Unknown`].
//!
//! Semantics follow `simulate`: agents move simultaneously, an agent whose sequence has
//! ended waits where it is, vertex and edge (swap) conflicts are failures, holes are
//! obstacles, and an agent's cost is the *last* time it arrives at its goal.
//!
//! Determinism: every priority queue is keyed by a total order that ends in a unique
//! field (a cell index or an insertion counter), conflicts are chosen by a total order
//! too, and hash maps are only used for lookups (never iterated), so results are
//! identical across runs and threads.
// Index loops over agents/cells mirror the maths and the flat buffers; keep them.
#![allow(clippy::needless_range_loop)]
use super::instance::{Cell, Instance, Move, Plan};
use super::simulate::Reference;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Instant;

mod joint;

/// Limits that make the solver give up with [`SolveError::Unknown`] instead of hanging.
/// Node counts are deterministic; the optional wall-clock limit is for interactive use
/// only and must never be set where results are hashed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    /// Most high-level CBS nodes expanded per search.
    pub max_nodes: u64,
    /// Optional wall-clock limit in milliseconds (interactive use only).
    pub max_millis: Option<u64>,
}

impl Default for Budget {
    fn default() -> Self {
        Budget {
            max_nodes: 20_000,
            max_millis: None,
        }
    }
}

/// An instance's optima and one optimal plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Solution {
    pub reference: Reference,
    /// A plan whose makespan equals `reference.makespan` (ties broken by sum-of-costs).
    pub plan: Plan,
    /// A plan whose sum-of-costs equals `reference.sum_of_costs` (for plan files that
    /// choose the sum-of-costs metric). Equal to `plan` when one plan is optimal for both.
    pub soc_plan: Plan,
    /// Sum of the agents' independent shortest-path lengths (ignoring each other).
    pub independent_sum: u32,
    /// High-level nodes expanded by both searches together.
    pub nodes: u64,
}

impl Solution {
    /// "Needs coordination" (the generator's wait_ratio): optimal sum-of-costs exceeds
    /// the sum of independent shortest paths.
    pub fn needs_coordination(&self) -> bool {
        self.reference.sum_of_costs > self.independent_sum
    }
}

/// Why no solution was returned.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SolveError {
    #[error("agent {agent} cannot reach its goal (holes cut it off)")]
    Unreachable { agent: usize },
    #[error("search budget exhausted after {nodes} nodes: solvability unknown")]
    Unknown { nodes: u64 },
    /// The search space was exhausted: no plan exists (e.g. agents that must swap in a
    /// dead-end corridor).
    #[error("no plan exists: the search was exhausted after {nodes} nodes")]
    Unsolvable { nodes: u64 },
}

/// Marks an unreachable cell in a distance table.
pub const UNREACHABLE: u16 = u16::MAX;

/// Breadth-first distances (in moves over frozen cells) from every cell to `target`;
/// [`UNREACHABLE`] for holes and cells cut off from it. Moves are reversible, so this
/// is also the distance from `target` to every cell.
pub fn distances_to(inst: &Instance, target: Cell) -> Vec<u16> {
    let mut dist = vec![UNREACHABLE; inst.cells()];
    let mut queue = std::collections::VecDeque::new();
    dist[target as usize] = 0;
    queue.push_back(target);
    while let Some(c) = queue.pop_front() {
        let d = dist[c as usize] + 1;
        for nb in inst.neighbours(c) {
            if dist[nb as usize] == UNREACHABLE {
                dist[nb as usize] = d;
                queue.push_back(nb);
            }
        }
    }
    dist
}

/// Solve `inst` optimally for both sum-of-costs and makespan.
///
/// Runs the reachability pre-check, then CBS minimising sum-of-costs, then (unless that
/// plan already meets the makespan lower bound) the makespan search described at
/// `Ctx::makespan_search`. Each of the two searches may expand at most
/// `budget.max_nodes` high-level nodes.
pub fn solve(inst: &Instance, budget: Budget) -> Result<Solution, SolveError> {
    let mut ctx = Ctx::new(inst, budget)?;
    let Some(soc) = ctx.search(None, &mut 0)? else {
        return Err(ctx.unknown());
    };
    let lower_makespan = ctx.dist_start.iter().copied().max().unwrap_or(0) as u32;
    // The sum-of-costs optimum minimises sum-of-costs over *all* plans, so when its
    // makespan already equals the makespan lower bound (the longest independent shortest
    // path) it is makespan-optimal and also the cheapest such plan: no second search.
    let mk = if soc.makespan == lower_makespan {
        soc.clone()
    } else {
        ctx.makespan_search(&soc, lower_makespan)?
    };
    debug_assert!(mk.sum_of_costs >= soc.sum_of_costs && mk.makespan <= soc.makespan);
    Ok(Solution {
        reference: Reference {
            sum_of_costs: soc.sum_of_costs,
            makespan: mk.makespan,
        },
        plan: Plan::from_paths(inst, &mk.paths),
        soc_plan: Plan::from_paths(inst, &soc.paths),
        independent_sum: ctx.dist_start.iter().map(|&d| d as u32).sum(),
        nodes: ctx.total,
    })
}

/// A constraint on one agent. Times are the arrival time of the forbidden state/move.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Constraint {
    /// The agent may not be on `cell` at time `t`.
    Vertex { cell: Cell, t: u16 },
    /// The agent may not move `from` -> `to` arriving at time `t`.
    Edge { from: Cell, to: Cell, t: u16 },
}

impl Constraint {
    fn t(self) -> u16 {
        match self {
            Constraint::Vertex { t, .. } | Constraint::Edge { t, .. } => t,
        }
    }
}

/// One agent's constraints as a flat table over `t * cells + cell` for
/// `t <= tc`: bit 0 forbids the vertex, bit `1 + m` forbids arriving by `Move::ALL[m]`.
#[derive(Clone, Debug, Default)]
struct Table {
    bits: Vec<u8>,
    /// Last constrained time (0 when unconstrained).
    tc: usize,
    /// Last time the agent's own goal is forbidden, or -1.
    last_goal: i32,
}

impl Table {
    fn load(&mut self, cells: usize, adj: &[Cell], goal: Cell, cons: &[Constraint]) {
        let n = cells;
        self.tc = cons.iter().map(|c| c.t() as usize).max().unwrap_or(0);
        self.bits.clear();
        self.bits.resize((self.tc + 1) * n, 0);
        self.last_goal = -1;
        for &c in cons {
            match c {
                Constraint::Vertex { cell, t } => {
                    self.bits[t as usize * n + cell as usize] |= 1;
                    if cell == goal {
                        self.last_goal = self.last_goal.max(t as i32);
                    }
                }
                Constraint::Edge { from, to, t } => {
                    if let Some(m) = (0..4).find(|&m| adj[from as usize * 5 + m] == to) {
                        self.bits[t as usize * n + to as usize] |= 2 << m;
                    }
                }
            }
        }
    }

    /// May the agent arrive on `to` at time `t` by move index `m`?
    #[inline]
    fn allowed(&self, n: usize, to: Cell, t: usize, m: usize) -> bool {
        if t > self.tc {
            return true;
        }
        let bits = self.bits[t * n + to as usize];
        bits & 1 == 0 && (m == 4 || bits & (2 << m) == 0)
    }
}

/// A found plan and its costs.
#[derive(Clone, Debug)]
struct Found {
    paths: Vec<Vec<Cell>>,
    sum_of_costs: u32,
    makespan: u32,
}

/// A high-level node: its constraint is stored as a link to the parent's, so a node's
/// constraint set is the chain up to the root.
struct Node {
    parent: u32,
    agent: u8,
    constraint: Constraint,
    /// The agents' paths (`paths[i][t]`, ending at the last arrival on the goal).
    /// Taken (emptied) once the node is expanded.
    paths: Vec<Vec<Cell>>,
}

const NO_PARENT: u32 = u32::MAX;

/// A conflict between agents `a < b` at time `t`.
#[derive(Clone, Copy, Debug)]
struct Conflict {
    t: u16,
    a: u8,
    b: u8,
    /// Vertex: `a_from == a_to == cell`. Edge: `a` moves `a_from -> a_to`, `b` the reverse.
    a_from: Cell,
    a_to: Cell,
    edge: bool,
}

#[inline]
fn at(path: &[Cell], t: usize) -> Cell {
    path[t.min(path.len() - 1)]
}

/// Every conflict among `paths`, in order of (time, a, b).
fn conflicts(paths: &[Vec<Cell>], out: &mut Vec<Conflict>) {
    out.clear();
    let k = paths.len();
    let horizon = paths.iter().map(Vec::len).max().unwrap_or(1);
    for t in 1..horizon {
        for a in 0..k {
            let (pa0, pa1) = (at(&paths[a], t - 1), at(&paths[a], t));
            for b in a + 1..k {
                let (pb0, pb1) = (at(&paths[b], t - 1), at(&paths[b], t));
                let vertex = pa1 == pb1;
                let edge = pa0 != pa1 && pa0 == pb1 && pa1 == pb0;
                if vertex || edge {
                    out.push(Conflict {
                        t: t as u16,
                        a: a as u8,
                        b: b as u8,
                        a_from: if vertex { pa1 } else { pa0 },
                        a_to: pa1,
                        edge: !vertex,
                    });
                }
            }
        }
    }
}

/// Largest meta-agent (MA-CBS group) the coupled low level is asked to plan.
const MAX_GROUP: usize = 8;
/// Merge two groups once CBS has split on conflicts between them this many times.
const MERGE_THRESHOLD: u32 = 8;
/// ... and only while the merged group's joint position space stays this small.
const MAX_JOINT_POSITIONS: f64 = 250_000.0;
/// State limit of one coupled low-level search (beyond it: `Unknown`).
const MAX_JOINT_STATES: usize = 1_000_000;
/// Coupled low-level states allowed per unit of `Budget::max_nodes`, over the whole
/// solve: keeps the total work proportional to the (deterministic) node budget.
const JOINT_STATES_PER_NODE: u64 = 50;

/// Outcome of one CBS run with a fixed grouping.
enum Run {
    /// `None`: the open list ran empty, so no plan exists (within the cap).
    Done(Option<Found>),
    /// Two groups were merged: restart with the new grouping.
    Merged,
}

/// Per-solve state: the map's adjacency, the agents' distance tables, the meta-agent
/// grouping and the reusable low-level buffers.
struct Ctx<'a> {
    inst: &'a Instance,
    budget: Budget,
    started: Instant,
    /// High-level nodes expanded so far, all searches together.
    total: u64,
    cells: usize,
    free_cells: usize,
    /// `adj[cell * 5 + m]`: where move `Move::ALL[m]` leads, or `NONE` (off-grid / hole).
    adj: Vec<Cell>,
    /// `dist[agent][cell]`: true distance to the agent's goal (the A* heuristic).
    dist: Vec<Vec<u16>>,
    dist_start: Vec<u16>,
    /// Meta-agents (ascending member lists) and each agent's group index.
    groups: Vec<Vec<usize>>,
    group_of: Vec<usize>,
    /// `pair_splits[a * k + b]`: splits on conflicts between agents a and b so far.
    pair_splits: Vec<u32>,
    /// Coupled low-level states still allowed (deterministic work budget).
    joint_left: u64,
    low: LowLevel,
    scratch: Vec<Conflict>,
}

const NONE: Cell = Cell::MAX;

impl<'a> Ctx<'a> {
    fn new(inst: &'a Instance, budget: Budget) -> Result<Ctx<'a>, SolveError> {
        let cells = inst.cells();
        let mut adj = vec![NONE; cells * 5];
        for c in 0..cells {
            if inst.is_hole(c as Cell) {
                continue;
            }
            for (m, mv) in Move::ALL.into_iter().enumerate() {
                if let Some(nb) = inst.step(c as Cell, mv) {
                    if !inst.is_hole(nb) {
                        adj[c * 5 + m] = nb;
                    }
                }
            }
        }
        let k = inst.agents();
        let mut dist = Vec::with_capacity(k);
        let mut dist_start = Vec::with_capacity(k);
        for (a, (&s, &g)) in inst.starts().iter().zip(inst.goals()).enumerate() {
            let d = distances_to(inst, g);
            if d[s as usize] == UNREACHABLE {
                return Err(SolveError::Unreachable { agent: a + 1 });
            }
            dist_start.push(d[s as usize]);
            dist.push(d);
        }
        Ok(Ctx {
            inst,
            budget,
            started: Instant::now(),
            total: 0,
            cells,
            free_cells: cells - inst.hole_count(),
            adj,
            dist,
            dist_start,
            groups: (0..k).map(|a| vec![a]).collect(),
            group_of: (0..k).collect(),
            pair_splits: vec![0; k * k],
            joint_left: budget.max_nodes.saturating_mul(JOINT_STATES_PER_NODE),
            low: LowLevel::default(),
            scratch: Vec::new(),
        })
    }

    fn unknown(&self) -> SolveError {
        SolveError::Unknown { nodes: self.total }
    }

    /// Optimal makespan, ties broken by sum-of-costs.
    ///
    /// Why this is optimal: for a cap M, CBS whose low levels only accept paths that end
    /// by time M is an ordinary optimal CBS over the plans of makespan <= M (each node's
    /// cost is still a lower bound, because under a node's constraints the groups are
    /// independent and each minimises its own sum within the cap; with the cap every
    /// agent's space-time graph is finite, so an exhausted open list proves that no
    /// plan of makespan <= M exists). Trying M = lower bound, lower bound + 1, ... the
    /// first M with a plan is the optimal makespan and that plan has the least
    /// sum-of-costs among those of makespan M. The sum-of-costs optimum has makespan UB,
    /// so if no M < UB works, it is the answer (cheapest overall, hence cheapest at UB).
    /// All caps together count as one search against the node budget.
    fn makespan_search(&mut self, soc: &Found, lower: u32) -> Result<Found, SolveError> {
        let mut expanded = 0u64;
        for cap in lower..soc.makespan {
            if let Some(found) = self.search(Some(cap as usize), &mut expanded)? {
                return Ok(found);
            }
        }
        Ok(soc.clone())
    }

    /// One optimal CBS search for sum-of-costs (within `cap` if given), restarting after
    /// each meta-agent merge. `expanded` counts this search's nodes against the budget.
    /// `Ok(None)`: proven that no plan exists within the cap; without a cap an
    /// exhausted search proves the instance unsolvable (`SolveError::Unsolvable`).
    fn search(
        &mut self,
        cap: Option<usize>,
        expanded: &mut u64,
    ) -> Result<Option<Found>, SolveError> {
        loop {
            match self.cbs(cap, expanded)? {
                Run::Done(Some(f)) => return Ok(Some(f)),
                Run::Done(None) if cap.is_some() => return Ok(None),
                Run::Done(None) => return Err(SolveError::Unsolvable { nodes: self.total }),
                Run::Merged => continue,
            }
        }
    }

    /// The constraints on `agent` along the chain from `node` to the root, plus `extra`.
    fn constraints_of(
        nodes: &[Node],
        mut node: u32,
        agent: usize,
        extra: Option<(usize, Constraint)>,
    ) -> Vec<Constraint> {
        let mut out: Vec<Constraint> = extra
            .filter(|&(a, _)| a == agent)
            .map(|(_, c)| c)
            .into_iter()
            .collect();
        while node != NO_PARENT {
            let n = &nodes[node as usize];
            if n.parent != NO_PARENT && n.agent as usize == agent {
                out.push(n.constraint);
            }
            node = n.parent;
        }
        out
    }

    /// Plan group `g` under the constraints of the chain at `node` (plus `extra`) into
    /// `paths`. `Ok(false)`: no plan for the group exists under those constraints.
    fn plan_group(
        &mut self,
        g: usize,
        nodes: &[Node],
        node: u32,
        extra: Option<(usize, Constraint)>,
        cap: Option<usize>,
        paths: &mut [Vec<Cell>],
    ) -> Result<bool, SolveError> {
        let inst = self.inst;
        let members = self.groups[g].clone();
        if let [agent] = members[..] {
            let cons = Self::constraints_of(nodes, node, agent, extra);
            let task = Task {
                cells: self.cells,
                adj: &self.adj,
                start: inst.starts()[agent],
                goal: inst.goals()[agent],
                h: &self.dist[agent],
                agent,
                others: paths,
            };
            let mut out = Vec::new();
            let ok = self
                .low
                .search(&task, &cons, cap.unwrap_or(usize::MAX), &mut out);
            if ok {
                paths[agent] = out;
            }
            return Ok(ok);
        }
        let tables = members
            .iter()
            .map(|&a| {
                let mut t = Table::default();
                t.load(
                    self.cells,
                    &self.adj,
                    inst.goals()[a],
                    &Self::constraints_of(nodes, node, a, extra),
                );
                t
            })
            .collect();
        let task = joint::JointTask {
            cells: self.cells,
            adj: &self.adj,
            members: &members,
            starts: members.iter().map(|&a| inst.starts()[a]).collect(),
            goals: members.iter().map(|&a| inst.goals()[a]).collect(),
            h: members.iter().map(|&a| &self.dist[a][..]).collect(),
            tables,
            cap,
            others: paths,
            max_states: MAX_JOINT_STATES.min(self.joint_left.min(usize::MAX as u64) as usize),
            deadline: self
                .budget
                .max_millis
                .map(|ms| self.started + std::time::Duration::from_millis(ms)),
        };
        let (result, used) = joint::joint_search(&task);
        self.joint_left = self.joint_left.saturating_sub(used as u64);
        match result {
            Ok(Some(found)) => {
                for (&a, p) in members.iter().zip(found) {
                    paths[a] = p;
                }
                Ok(true)
            }
            Ok(None) => Ok(false),
            Err(()) => Err(self.unknown()),
        }
    }

    /// One CBS run with the current grouping.
    fn cbs(&mut self, cap: Option<usize>, expanded: &mut u64) -> Result<Run, SolveError> {
        let k = self.inst.agents();
        let mut nodes: Vec<Node> = Vec::new();
        // Open list: (sum-of-costs, conflicts, insertion order). Fewer conflicts first
        // among equal costs is the standard tie-break; the counter makes the order total.
        let mut open: BinaryHeap<Reverse<(u32, u32, u32)>> = BinaryHeap::new();

        let mut root_paths: Vec<Vec<Cell>> = vec![Vec::new(); k];
        for g in 0..self.groups.len() {
            if !self.plan_group(g, &nodes, NO_PARENT, None, cap, &mut root_paths)? {
                return Ok(Run::Done(None));
            }
        }
        conflicts(&root_paths, &mut self.scratch);
        let key = (costs(&root_paths).0, self.scratch.len() as u32, 0);
        nodes.push(Node {
            parent: NO_PARENT,
            agent: 0,
            constraint: Constraint::Vertex { cell: 0, t: 0 },
            paths: root_paths,
        });
        open.push(Reverse(key));

        let mut all = Vec::new();
        let mut mdd_cache: Vec<Option<Vec<u16>>> = vec![None; k];
        while let Some(Reverse((_, _, id))) = open.pop() {
            if *expanded >= self.budget.max_nodes
                || self
                    .budget
                    .max_millis
                    .is_some_and(|ms| self.started.elapsed().as_millis() as u64 >= ms)
            {
                return Err(self.unknown());
            }
            *expanded += 1;
            self.total += 1;
            let paths = std::mem::take(&mut nodes[id as usize].paths);
            conflicts(&paths, &mut all);
            if all.is_empty() {
                let (soc, makespan) = costs(&paths);
                return Ok(Run::Done(Some(Found {
                    paths,
                    sum_of_costs: soc,
                    makespan,
                })));
            }
            let chosen = self.choose_conflict(&nodes, id, &paths, &all, &mut mdd_cache);
            let (a, b) = (chosen.a as usize, chosen.b as usize);
            self.pair_splits[a * k + b] += 1;
            if self.try_merge(a, b) {
                return Ok(Run::Merged);
            }
            let children = if chosen.edge {
                [
                    (
                        a,
                        Constraint::Edge {
                            from: chosen.a_from,
                            to: chosen.a_to,
                            t: chosen.t,
                        },
                    ),
                    (
                        b,
                        Constraint::Edge {
                            from: chosen.a_to,
                            to: chosen.a_from,
                            t: chosen.t,
                        },
                    ),
                ]
            } else {
                [
                    (
                        a,
                        Constraint::Vertex {
                            cell: chosen.a_to,
                            t: chosen.t,
                        },
                    ),
                    (
                        b,
                        Constraint::Vertex {
                            cell: chosen.a_to,
                            t: chosen.t,
                        },
                    ),
                ]
            };
            for (agent, con) in children {
                let mut child_paths = paths.clone();
                let g = self.group_of[agent];
                if !self.plan_group(g, &nodes, id, Some((agent, con)), cap, &mut child_paths)? {
                    continue; // no plan under these constraints: prune
                }
                conflicts(&child_paths, &mut self.scratch);
                let key = (
                    costs(&child_paths).0,
                    self.scratch.len() as u32,
                    nodes.len() as u32,
                );
                nodes.push(Node {
                    parent: id,
                    agent: agent as u8,
                    constraint: con,
                    paths: child_paths,
                });
                open.push(Reverse(key));
            }
        }
        Ok(Run::Done(None))
    }

    /// MA-CBS merge rule: once the splits between two groups exceed the threshold, plan
    /// them together (if the joint space stays small). Merging changes only how fast the
    /// search is, never its result: a meta-agent's low level is optimal for its members.
    fn try_merge(&mut self, a: usize, b: usize) -> bool {
        let k = self.inst.agents();
        let (ga, gb) = (self.group_of[a], self.group_of[b]);
        if ga == gb {
            return false;
        }
        let splits: u32 = self.groups[ga]
            .iter()
            .flat_map(|&x| self.groups[gb].iter().map(move |&y| (x.min(y), x.max(y))))
            .map(|(x, y)| self.pair_splits[x * k + y])
            .sum();
        let size = self.groups[ga].len() + self.groups[gb].len();
        if splits <= MERGE_THRESHOLD
            || size > MAX_GROUP
            || (self.free_cells as f64).powi(size as i32) > MAX_JOINT_POSITIONS
        {
            return false;
        }
        let mut merged = [self.groups[ga].clone(), self.groups[gb].clone()].concat();
        merged.sort_unstable();
        let mut groups: Vec<Vec<usize>> = self
            .groups
            .iter()
            .enumerate()
            .filter(|&(g, _)| g != ga && g != gb)
            .map(|(_, m)| m.clone())
            .collect();
        groups.push(merged);
        groups.sort(); // by smallest member: a deterministic order
        for (g, members) in groups.iter().enumerate() {
            for &m in members {
                self.group_of[m] = g;
            }
        }
        self.groups = groups;
        true
    }

    /// Pick the conflict to split on: cardinal before semi-cardinal before
    /// non-cardinal (Boyarski et al.'s ICBS prioritisation; any choice keeps CBS
    /// optimal, this one just shrinks the tree), then earliest, then by agent pair.
    /// Members of meta-agents are treated as non-cardinal (no MDD is built for them).
    fn choose_conflict(
        &mut self,
        nodes: &[Node],
        id: u32,
        paths: &[Vec<Cell>],
        all: &[Conflict],
        mdd_cache: &mut [Option<Vec<u16>>],
    ) -> Conflict {
        for m in mdd_cache.iter_mut() {
            *m = None;
        }
        let mut best: Option<(u8, Conflict)> = None;
        for &c in all {
            let mut class = 2u8;
            for agent in [c.a, c.b] {
                let ag = agent as usize;
                if self.groups[self.group_of[ag]].len() > 1 {
                    continue;
                }
                let cost = paths[ag].len() - 1;
                let t = c.t as usize;
                let cardinal = if !c.edge && t > cost {
                    // The agent already sits on its goal: any constraint there forces
                    // it to arrive again later, so its cost must rise.
                    true
                } else {
                    if mdd_cache[ag].is_none() {
                        let cons = Self::constraints_of(nodes, id, ag, None);
                        let inst = self.inst;
                        let task = Task {
                            cells: self.cells,
                            adj: &self.adj,
                            start: inst.starts()[ag],
                            goal: inst.goals()[ag],
                            h: &self.dist[ag],
                            agent: ag,
                            others: paths,
                        };
                        mdd_cache[ag] = Some(self.low.mdd_widths(&task, &cons, cost));
                    }
                    let w = mdd_cache[ag].as_ref().unwrap();
                    w[t] == 1 && (!c.edge || w[t - 1] == 1)
                };
                if cardinal {
                    class -= 1;
                }
            }
            if best.as_ref().is_none_or(|(bc, _)| class < *bc) {
                best = Some((class, c));
                if class == 0 {
                    break; // `all` is sorted by time: the earliest cardinal conflict
                }
            }
        }
        best.unwrap().1
    }
}

fn costs(paths: &[Vec<Cell>]) -> (u32, u32) {
    let mut soc = 0u32;
    let mut mk = 0u32;
    for p in paths {
        let c = (p.len() - 1) as u32;
        soc += c;
        mk = mk.max(c);
    }
    (soc, mk)
}

/// One agent's low-level problem.
struct Task<'t> {
    cells: usize,
    adj: &'t [Cell],
    start: Cell,
    goal: Cell,
    h: &'t [u16],
    agent: usize,
    /// All agents' current paths (the agent's own is ignored): the conflict-avoidance
    /// table used to break ties among equally short paths.
    others: &'t [Vec<Cell>],
}

/// Space-time A* with reusable flat buffers indexed by `t * cells + cell`. A "stamp"
/// equal to the current generation marks an entry as written in this call, so nothing
/// is cleared between calls.
#[derive(Default)]
struct LowLevel {
    gen: u32,
    seen: Vec<u32>,
    closed: Vec<u32>,
    conf: Vec<u16>,
    parent: Vec<Cell>,
    table: Table,
    heap: BinaryHeap<Reverse<u64>>,
}

impl LowLevel {
    /// Load `cons` into the table; returns (last constraint time, last time the goal
    /// itself is forbidden or -1).
    fn load(&mut self, task: &Task, cons: &[Constraint]) -> (usize, i32) {
        self.table.load(task.cells, task.adj, task.goal, cons);
        (self.table.tc, self.table.last_goal)
    }

    #[inline]
    fn allowed(&self, n: usize, _tc: usize, to: Cell, t: usize, m: usize) -> bool {
        self.table.allowed(n, to, t, m)
    }

    fn prepare(&mut self, size: usize) {
        if self.seen.len() < size {
            self.seen.resize(size, 0);
            self.closed.resize(size, 0);
            self.conf.resize(size, 0);
            self.parent.resize(size, 0);
        }
        self.gen = self.gen.wrapping_add(1);
        if self.gen == 0 {
            // Stamps wrapped: clear once so stale stamps cannot match.
            self.seen.iter_mut().for_each(|s| *s = 0);
            self.closed.iter_mut().for_each(|s| *s = 0);
            self.gen = 1;
        }
        self.heap.clear();
    }

    /// Shortest constrained path into `out` (cells at t = 0..=cost); false if none.
    ///
    /// Goal rule: the search may only stop on the goal at a time after the last vertex
    /// constraint on the goal, because the agent stays there forever once its path ends;
    /// stopping earlier would hide a conflict the constraint was added to resolve. That
    /// is how an agent gets forced off its goal and pays its cost again.
    ///
    /// Bound: after the last constraint time `tc` the problem is time-independent, so an
    /// optimal path is on some cell at `tc + 1` and then needs fewer than `cells` more
    /// moves; states beyond `tc + cells` are never needed and the search space is finite.
    /// `cap` (the makespan search) lowers that bound further.
    fn search(
        &mut self,
        task: &Task,
        cons: &[Constraint],
        cap: usize,
        out: &mut Vec<Cell>,
    ) -> bool {
        let n = task.cells;
        let (tc, last_goal) = self.load(task, cons);
        let tmax = (tc + n).min(cap);
        self.prepare((tmax + 1) * n);
        let gen = self.gen;
        let h0 = task.h[task.start as usize] as usize;
        if h0 > tmax {
            return false;
        }
        let key = |f: usize, conf: u16, t: usize, cell: Cell| -> u64 {
            // Lower f, then fewer conflicts, then deeper (larger t), then cell index.
            ((f as u64) << 48) | ((conf as u64) << 32) | (((0xFFFF - t) as u64) << 16) | cell as u64
        };
        let s = task.start as usize;
        self.seen[s] = gen;
        self.conf[s] = 0;
        self.heap.push(Reverse(key(h0, 0, 0, task.start)));
        while let Some(Reverse(k)) = self.heap.pop() {
            let cell = (k & 0xFFFF) as Cell;
            let t = 0xFFFF - ((k >> 16) & 0xFFFF) as usize;
            let idx = t * n + cell as usize;
            if self.closed[idx] == gen {
                continue;
            }
            self.closed[idx] = gen;
            if cell == task.goal && t as i32 > last_goal {
                out.clear();
                out.resize(t + 1, 0);
                let mut c = cell;
                for tt in (0..=t).rev() {
                    out[tt] = c;
                    if tt > 0 {
                        c = self.parent[tt * n + c as usize];
                    }
                }
                return true;
            }
            if t >= tmax {
                continue;
            }
            let conf = self.conf[idx];
            let t1 = t + 1;
            for m in 0..5 {
                let v = task.adj[cell as usize * 5 + m];
                if v == NONE {
                    continue;
                }
                let hv = task.h[v as usize] as usize;
                if t1 + hv > tmax || !self.table.allowed(n, v, t1, m) {
                    continue;
                }
                let j = t1 * n + v as usize;
                if self.closed[j] == gen {
                    continue;
                }
                let c2 = conf.saturating_add(cat(task, cell, v, t1));
                if self.seen[j] != gen || c2 < self.conf[j] {
                    self.seen[j] = gen;
                    self.conf[j] = c2;
                    self.parent[j] = cell;
                    self.heap.push(Reverse(key(t1 + hv, c2, t1, v)));
                }
            }
        }
        false
    }

    /// Widths of the multi-valued decision diagram of all constrained paths of exactly
    /// `cost` moves ending on the goal: `w[t]` = number of cells some such path uses at
    /// time `t`. Width 1 at a conflict means every optimal path hits it (cardinal).
    fn mdd_widths(&mut self, task: &Task, cons: &[Constraint], cost: usize) -> Vec<u16> {
        let n = task.cells;
        let (tc, _) = self.load(task, cons);
        self.prepare((cost + 1) * n);
        let gen = self.gen;
        // Forward reachability (`seen`), pruned by the distance still affordable.
        self.seen[task.start as usize] = gen;
        for t in 0..cost {
            let left = cost - t - 1;
            for u in 0..n {
                if self.seen[t * n + u] != gen {
                    continue;
                }
                for m in 0..5 {
                    let v = task.adj[u * 5 + m];
                    if v != NONE
                        && task.h[v as usize] as usize <= left
                        && self.allowed(n, tc, v, t + 1, m)
                    {
                        self.seen[(t + 1) * n + v as usize] = gen;
                    }
                }
            }
        }
        // Backward pass (`closed`): cells that also lead to the goal at `cost`.
        let mut w = vec![0u16; cost + 1];
        let g = cost * n + task.goal as usize;
        if self.seen[g] == gen {
            self.closed[g] = gen;
            w[cost] = 1;
        }
        for t in (0..cost).rev() {
            for u in 0..n {
                if self.seen[t * n + u] != gen {
                    continue;
                }
                let ok = (0..5).any(|m| {
                    let v = task.adj[u * 5 + m];
                    v != NONE
                        && self.closed[(t + 1) * n + v as usize] == gen
                        && self.allowed(n, tc, v, t + 1, m)
                });
                if ok {
                    self.closed[t * n + u] = gen;
                    w[t] += 1;
                }
            }
        }
        w
    }
}

/// Conflicts the move `u -> v` arriving at `t` has with the other agents' paths.
#[inline]
fn cat(task: &Task, u: Cell, v: Cell, t: usize) -> u16 {
    let mut c = 0;
    for (j, p) in task.others.iter().enumerate() {
        if j == task.agent || p.is_empty() {
            continue;
        }
        let q1 = at(p, t);
        if q1 == v || (u != v && q1 == u && at(p, t - 1) == v) {
            c += 1;
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::instance::{AgentSpec, InstanceJson};
    use crate::simulate::simulate;

    fn inst(grid: &[&str], agents: &[([u8; 2], [u8; 2])]) -> Instance {
        Instance::try_from(InstanceJson {
            size: grid.len(),
            grid: grid.iter().map(|s| s.to_string()).collect(),
            agents: agents
                .iter()
                .map(|&(s, g)| AgentSpec { start: s, goal: g })
                .collect(),
        })
        .unwrap()
    }

    fn check(i: &Instance, s: &Solution) {
        let o = simulate(i, &s.plan);
        assert!(o.valid, "{o:?}");
        assert_eq!(o.makespan, s.reference.makespan);
        let o = simulate(i, &s.soc_plan);
        assert!(o.valid, "{o:?}");
        assert_eq!(o.sum_of_costs, s.reference.sum_of_costs);
    }

    #[test]
    fn swap_in_a_corridor_with_a_bay_needs_a_wait() {
        // Row 0 is a corridor; (1,1) is the only bay. The agents swap ends.
        let i = inst(
            &["FFF", "HFH", "HHH"],
            &[([0, 0], [0, 2]), ([0, 2], [0, 0])],
        );
        let s = solve(&i, Budget::default()).unwrap();
        check(&i, &s);
        assert_eq!(s.independent_sum, 4);
        // One agent ducks into the bay (4 moves), the other waits once (3): 7, makespan 4.
        assert_eq!(
            s.reference,
            Reference {
                sum_of_costs: 7,
                makespan: 4
            }
        );
        assert!(s.needs_coordination());
    }

    #[test]
    fn agent_is_forced_off_its_goal() {
        // Agent 2 starts on its goal in the middle of the only corridor agent 1 needs.
        let i = inst(
            &["FFF", "HFH", "HFH"],
            &[([0, 0], [0, 2]), ([0, 1], [0, 1])],
        );
        let s = solve(&i, Budget::default()).unwrap();
        check(&i, &s);
        // Agent 2 steps down and back (cost 2), agent 1 walks through (cost 2).
        assert_eq!(
            s.reference,
            Reference {
                sum_of_costs: 4,
                makespan: 2
            }
        );
        assert_eq!(s.independent_sum, 2);
    }

    #[test]
    fn unreachable_agent_is_reported_one_based() {
        let i = inst(
            &["FHF", "HHF", "FFF"],
            &[([2, 0], [2, 2]), ([0, 0], [0, 2])],
        );
        assert_eq!(
            solve(&i, Budget::default()),
            Err(SolveError::Unreachable { agent: 2 })
        );
    }

    #[test]
    fn budget_exhaustion_is_unknown_not_a_hang() {
        // Solvable, but the budget allows no expansion at all.
        let i = inst(
            &["FFF", "HFH", "HHH"],
            &[([0, 0], [0, 2]), ([0, 2], [0, 0])],
        );
        let r = solve(
            &i,
            Budget {
                max_nodes: 0,
                max_millis: None,
            },
        );
        assert_eq!(r, Err(SolveError::Unknown { nodes: 0 }));
        // A long corridor swap with two bays: plain CBS needs thousands of nodes.
        let i = inst(
            &[
                "FFFFFFFFFF",
                "HFHHHHHHFH",
                "HHHHHHHHHH",
                "HHHHHHHHHH",
                "HHHHHHHHHH",
                "HHHHHHHHHH",
                "HHHHHHHHHH",
                "HHHHHHHHHH",
                "HHHHHHHHHH",
                "HHHHHHHHHH",
            ],
            &[([0, 0], [0, 9]), ([0, 9], [0, 0])],
        );
        assert_eq!(
            solve(
                &i,
                Budget {
                    max_nodes: 5,
                    max_millis: None
                }
            ),
            Err(SolveError::Unknown { nodes: 5 })
        );
        let s = solve(&i, Budget::default()).unwrap();
        check(&i, &s);
        // Two agents swapping in a dead-end corridor: unsolvable. CBS keeps splitting
        // until the merged pair's joint search proves it (Unsolvable), or the budget /
        // clock stops it (Unknown): never a plan and never a hang.
        let i = inst(
            &["FFF", "HHH", "HHH"],
            &[([0, 0], [0, 2]), ([0, 2], [0, 0])],
        );
        let r = solve(
            &i,
            Budget {
                max_nodes: 500,
                max_millis: None,
            },
        );
        assert!(
            matches!(r, Err(SolveError::Unknown { nodes } | SolveError::Unsolvable { nodes }) if nodes <= 500),
            "{r:?}"
        );
        let r = solve(
            &i,
            Budget {
                max_nodes: u64::MAX,
                max_millis: Some(50),
            },
        );
        assert!(
            matches!(
                r,
                Err(SolveError::Unknown { .. } | SolveError::Unsolvable { .. })
            ),
            "{r:?}"
        );
    }

    #[test]
    fn makespan_and_sum_of_costs_optima_need_different_plans() {
        // Found by the brute force of tests/solver_props.rs: the cheapest plan overall
        // (SoC 8) has makespan > 4, the best makespan-4 plan costs SoC 11.
        let i = inst(
            &["FFFH", "FHFF", "FFFF", "FFFF"],
            &[([0, 1], [2, 3]), ([3, 3], [1, 3]), ([0, 2], [0, 2])],
        );
        let s = solve(&i, Budget::default()).unwrap();
        check(&i, &s);
        assert_eq!(
            s.reference,
            Reference {
                sum_of_costs: 8,
                makespan: 4
            }
        );
        let o = simulate(&i, &s.plan);
        assert_eq!((o.makespan, o.sum_of_costs), (4, 11));
        assert!(simulate(&i, &s.soc_plan).makespan > 4);
    }

    #[test]
    fn deterministic_across_runs() {
        let i = inst(
            &["FFFF", "FHFF", "FFFF", "FFHF"],
            &[([0, 0], [3, 3]), ([3, 3], [0, 0]), ([0, 3], [3, 0])],
        );
        let a = solve(&i, Budget::default()).unwrap();
        let b = std::thread::spawn({
            let i = i.clone();
            move || solve(&i, Budget::default()).unwrap()
        })
        .join()
        .unwrap();
        assert_eq!(a, b);
    }
}
