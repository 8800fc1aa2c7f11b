//! Coupled low level for a meta-agent (MA-CBS, Sharon et al. 2015): A* over the joint
//! states of a group of agents that CBS decided to plan together, minimising the
//! group's sum-of-costs under the members' CBS constraints.
//!
//! Cost accounting ("done" flags): a state is (member positions, done mask, time). A
//! member on its goal may be declared *done* at no cost, after which it never moves
//! again; each move step costs the number of members not yet done. A member's payment is
//! the time it was declared done, which at the optimum equals its last arrival on the
//! goal, so the minimum is exactly the group's optimal sum of last-arrival costs. A
//! member may only be declared done after the last vertex constraint on its goal
//! (the same goal rule as the single-agent search).
//!
//! Termination: after `tstar` (past every constraint) the members' problem no longer
//! depends on time, so times are clamped to `tstar` in the state key and the state space
//! is finite; with a makespan cap the time is bounded by the cap instead.
use super::{at, Table, MAX_GROUP, NONE};
use crate::instance::Cell;
use foldhash::fast::FixedState;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::time::Instant;

pub(super) struct JointTask<'t> {
    pub cells: usize,
    pub adj: &'t [Cell],
    /// Agent indices of the members, ascending.
    pub members: &'t [usize],
    pub starts: Vec<Cell>,
    pub goals: Vec<Cell>,
    pub h: Vec<&'t [u16]>,
    pub tables: Vec<Table>,
    /// Largest time any member may still be moving (makespan cap), if any.
    pub cap: Option<usize>,
    /// Every agent's current path (members' own are ignored): conflict-avoidance table.
    pub others: &'t [Vec<Cell>],
    /// Give up (Err) after this many stored states.
    pub max_states: usize,
    /// Wall-clock deadline (interactive budgets only): give up (Err) after it.
    pub deadline: Option<Instant>,
}

/// See [`joint_search`].
pub(super) type JointResult = Result<Option<Vec<Vec<Cell>>>, ()>;
/// (f, conflicts, deeper first, insertion order): a total order.
type OpenKey = (u32, u32, Reverse<u32>, u32);

#[derive(Clone)]
struct State {
    pos: [Cell; MAX_GROUP],
    done: u8,
    t: u16,
    g: u32,
    conf: u32,
    parent: u32,
    closed: bool,
}

fn key(pos: &[Cell], done: u8, t: u16) -> u128 {
    let mut k: u128 = t as u128;
    k = (k << 8) | done as u128;
    for &p in pos {
        k = (k << 11) | p as u128;
    }
    k
}

/// `Ok(Some(paths))` (members' paths, each ending at its last arrival), `Ok(None)` when
/// no joint plan satisfies the constraints, `Err(())` when the state limit or the
/// deadline was hit; plus the number of states stored (the work done).
pub(super) fn joint_search(task: &JointTask) -> (JointResult, usize) {
    let mut states: Vec<State> = Vec::new();
    let r = run(task, &mut states);
    (r, states.len())
}

/// The A* loop: pop the best open state, close it, stop at the goal (every member
/// done), else push its successors: first the zero-cost "done" declarations, then
/// every joint move without a conflict among the members.
fn run(task: &JointTask, states: &mut Vec<State>) -> JointResult {
    let mut search = Search::new(task, states);
    let m = search.m;
    let mut start_pos = [0 as Cell; MAX_GROUP];
    start_pos[..m].copy_from_slice(&task.starts);
    let start = State {
        pos: start_pos,
        done: 0,
        t: 0,
        g: 0,
        conf: 0,
        parent: u32::MAX,
        closed: false,
    };
    if task
        .starts
        .iter()
        .zip(&task.h)
        .any(|(&s, h)| h[s as usize] as usize > search.tmax)
    {
        return Ok(None);
    }
    search.push(start, |_| 0)?;

    let mut choices: Vec<Vec<(Cell, usize)>> = vec![Vec::new(); m];
    let mut pops = 0u32;
    while let Some(Reverse((_, _, _, id))) = search.open.pop() {
        pops = pops.wrapping_add(1);
        if pops % 4096 == 0 && task.deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(());
        }
        let s = search.states[id as usize].clone();
        if s.closed || search.index.get(&search.key_of(&s)) != Some(&id) {
            continue;
        }
        search.states[id as usize].closed = true;
        if s.done == search.all {
            return Ok(Some(reconstruct(search.states, id, task)));
        }
        search.declare_done(&s, id)?;
        if s.t as usize >= search.tmax || !search.member_moves(&s, &mut choices) {
            continue;
        }
        search.push_joint_moves(&s, id, &choices)?;
    }
    Ok(None)
}

/// One joint search's state: the task, its bounds, every state stored (`states`, by
/// id), the open list and the index of the best state per key.
struct Search<'s, 't> {
    task: &'s JointTask<'t>,
    /// Members.
    m: usize,
    /// The done mask of the goal: every member done.
    all: u8,
    /// Past `tstar` no constraint applies (see the module comment), so the time in the
    /// state key is clamped there. The real time is kept in the state for the
    /// conflict-avoidance count, which only breaks ties.
    tstar: usize,
    /// The makespan cap (unbounded without one).
    tmax: usize,
    states: &'s mut Vec<State>,
    /// (f, conflicts, deeper first, insertion order): a total order.
    open: BinaryHeap<Reverse<OpenKey>>,
    /// Only looked up, never iterated, so its hasher reaches no result: foldhash, where
    /// std's SipHash took 7% of a 3-5-agent suite's solving.
    index: HashMap<u128, u32, FixedState>,
}

impl<'s, 't> Search<'s, 't> {
    fn new(task: &'s JointTask<'t>, states: &'s mut Vec<State>) -> Search<'s, 't> {
        let m = task.members.len();
        let max_tc = task.tables.iter().map(|t| t.tc).max().unwrap_or(0);
        Search {
            task,
            m,
            all: ((1u16 << m) - 1) as u8,
            tstar: match task.cap {
                Some(c) => c + 1,
                None => max_tc + 1,
            },
            tmax: task.cap.unwrap_or(usize::MAX),
            states,
            open: BinaryHeap::new(),
            index: HashMap::default(),
        }
    }

    /// The state's key: its members' positions, done mask and clamped time.
    fn key_of(&self, s: &State) -> u128 {
        key(&s.pos[..self.m], s.done, s.t.min(self.tstar as u16))
    }

    /// The heuristic: the sum of the members' not yet done distances to their goals.
    fn h(&self, pos: &[Cell], done: u8) -> u32 {
        (0..self.m)
            .filter(|&i| done >> i & 1 == 0)
            .map(|i| self.task.h[i][pos[i] as usize] as u32)
            .sum()
    }

    /// Store `s` with the conflict count `conf(self)` and open it, unless its key holds
    /// a closed state or one at least as good (g, then conflicts); Err when the state
    /// limit is reached. The count is made only where the stored state keeps it or the
    /// comparison needs it (an equal g): the same decisions as counting every successor.
    fn push(&mut self, mut s: State, conf: impl FnOnce(&Self) -> u32) -> Result<(), ()> {
        let k = self.key_of(&s);
        let old = self.index.get(&k).map(|&i| {
            let old = &self.states[i as usize];
            (old.closed, old.g, old.conf)
        });
        if old.is_some_and(|(closed, g, _)| closed || g < s.g) {
            return Ok(());
        }
        s.conf = conf(self);
        if old.is_some_and(|(_, g, c)| (g, c) <= (s.g, s.conf)) {
            return Ok(());
        }
        if self.states.len() >= self.task.max_states {
            return Err(());
        }
        let id = self.states.len() as u32;
        self.index.insert(k, id);
        let f = s.g + self.h(&s.pos[..self.m], s.done);
        self.open.push(Reverse((f, s.conf, Reverse(s.g), id)));
        self.states.push(s);
        Ok(())
    }

    /// Zero-cost transitions of `s` (state `id`): declare a member on its goal done,
    /// past the last vertex constraint on that goal.
    fn declare_done(&mut self, s: &State, id: u32) -> Result<(), ()> {
        let t = s.t as usize;
        for i in 0..self.m {
            if s.done >> i & 1 == 0
                && s.pos[i] == self.task.goals[i]
                && t as i32 > self.task.tables[i].last_goal
            {
                let mut d = s.clone();
                d.done |= 1 << i;
                d.parent = id;
                d.closed = false;
                self.push(d, |_| s.conf)?;
            }
        }
        Ok(())
    }

    /// Each member's moves from `s` into `choices` (cell, move): a done member stays;
    /// the others take the moves their constraints allow that can still reach the goal
    /// within the cap. False when some member has none (then the later members' lists
    /// are left as they were).
    fn member_moves(&self, s: &State, choices: &mut [Vec<(Cell, usize)>]) -> bool {
        let task = self.task;
        let t1 = s.t as usize + 1;
        let left = self.tmax - t1;
        for i in 0..self.m {
            choices[i].clear();
            let u = s.pos[i];
            if s.done >> i & 1 == 1 {
                choices[i].push((u, 4));
                continue;
            }
            for mv in 0..5 {
                let v = task.adj[u as usize * 5 + mv];
                if v == NONE || task.h[i][v as usize] as usize > left {
                    continue;
                }
                if task.tables[i].allowed(task.cells, v, t1, mv) {
                    choices[i].push((v, mv));
                }
            }
            if choices[i].is_empty() {
                return false;
            }
        }
        true
    }

    /// Push every joint move of `s` (state `id`) from the product of the members'
    /// `choices`, enumerated with an odometer (the first member fastest), that has no
    /// vertex or edge conflict among the members.
    fn push_joint_moves(
        &mut self,
        s: &State,
        id: u32,
        choices: &[Vec<(Cell, usize)>],
    ) -> Result<(), ()> {
        let m = self.m;
        let t1 = s.t as usize + 1;
        let active = m as u32 - s.done.count_ones();
        let mut next = [0 as Cell; MAX_GROUP];
        let mut idx = vec![0usize; m];
        'odometer: loop {
            let mut ok = true;
            'check: for i in 0..m {
                next[i] = choices[i][idx[i]].0;
                for j in 0..i {
                    let vertex = next[i] == next[j];
                    let edge = next[i] == s.pos[j] && next[j] == s.pos[i] && next[i] != s.pos[i];
                    if vertex || edge {
                        ok = false;
                        break 'check;
                    }
                }
            }
            if ok {
                let child = State {
                    pos: next,
                    done: s.done,
                    t: t1.min(u16::MAX as usize - 1) as u16,
                    g: s.g + active,
                    conf: 0,
                    parent: id,
                    closed: false,
                };
                self.push(child, |search| s.conf + search.conflicts(s, &next))?;
            }
            for i in 0..m {
                idx[i] += 1;
                if idx[i] < choices[i].len() {
                    continue 'odometer;
                }
                idx[i] = 0;
            }
            return Ok(());
        }
    }

    /// The conflicts of the joint move `s` -> `next` with the other agents' current
    /// paths (the conflict-avoidance table): a vertex or edge conflict per moving
    /// member and other agent.
    fn conflicts(&self, s: &State, next: &[Cell]) -> u32 {
        let (t, t1) = (s.t as usize, s.t as usize + 1);
        let mut conf = 0;
        for i in 0..self.m {
            if s.done >> i & 1 == 1 {
                continue;
            }
            let (u, v) = (s.pos[i], next[i]);
            for (j, p) in self.task.others.iter().enumerate() {
                if p.is_empty() || self.task.members.contains(&j) {
                    continue;
                }
                let q1 = at(p, t1);
                if q1 == v || (u != v && q1 == u && at(p, t) == v) {
                    conf += 1;
                }
            }
        }
        conf
    }
}

fn reconstruct(states: &[State], goal: u32, task: &JointTask) -> Vec<Vec<Cell>> {
    let mut chain = Vec::new();
    let mut id = goal;
    while id != u32::MAX {
        chain.push(id);
        id = states[id as usize].parent;
    }
    chain.reverse();
    // One joint position per time step: done transitions keep the positions and time.
    let mut timeline: Vec<&[Cell]> = vec![&states[chain[0] as usize].pos];
    for w in chain.windows(2) {
        let (a, b) = (&states[w[0] as usize], &states[w[1] as usize]);
        if a.done == b.done {
            timeline.push(&b.pos);
        }
    }
    let m = task.members.len();
    (0..m)
        .map(|i| {
            let mut p: Vec<Cell> = timeline.iter().map(|pos| pos[i]).collect();
            // End each path at its last arrival: trailing waits on the goal are implicit.
            while p.len() >= 2 && p[p.len() - 1] == task.goals[i] && p[p.len() - 2] == task.goals[i]
            {
                p.pop();
            }
            p
        })
        .collect()
}
