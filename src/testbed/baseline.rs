//! A planning baseline that ignores the other agents: each agent follows one shortest
//! path of its own (BFS over frozen cells, moves tried in U D L R order). Valid exactly
//! when those paths happen not to collide, so its valid rate on a suite measures how
//! much coordination the suite demands. Used by the demo and as a sanity floor for
//! trained policies.
use super::instance::{Cell, Instance, Move, Plan};
use std::collections::VecDeque;

/// Independent shortest paths, or `None` when some agent cannot reach its goal.
pub fn independent_plan(inst: &Instance) -> Option<Plan> {
    let mut moves = Vec::with_capacity(inst.agents());
    for (&s, &g) in inst.starts().iter().zip(inst.goals()) {
        moves.push(shortest_moves(inst, s, g)?);
    }
    Some(Plan { moves })
}

fn shortest_moves(inst: &Instance, from: Cell, to: Cell) -> Option<Vec<Move>> {
    let mut prev: Vec<Option<(Cell, Move)>> = vec![None; inst.cells()];
    let mut seen = vec![false; inst.cells()];
    seen[from as usize] = true;
    let mut q = VecDeque::from([from]);
    while let Some(c) = q.pop_front() {
        if c == to {
            let mut out = Vec::new();
            let mut x = to;
            while let Some((p, m)) = prev[x as usize] {
                out.push(m);
                x = p;
            }
            out.reverse();
            return Some(out);
        }
        for m in [Move::U, Move::D, Move::L, Move::R] {
            if let Some(d) = inst.step(c, m) {
                if !inst.is_hole(d) && !seen[d as usize] {
                    seen[d as usize] = true;
                    prev[d as usize] = Some((c, m));
                    q.push_back(d);
                }
            }
        }
    }
    None
}
