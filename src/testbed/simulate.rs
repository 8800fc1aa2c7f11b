//! Plan simulation and validation: the verifiable reward every policy is judged by.
//!
//! Semantics (MAPF-FrozenLake, as the paper defines it): agents move simultaneously; an agent whose
//! sequence has ended waits where it is; a plan is valid when nobody leaves the grid,
//! enters a hole, shares a cell (vertex conflict) or swaps cells (edge conflict) with
//! another agent, and everyone ends on their goal. The first failure is reported with
//! its timestep (1-based: the move made at step t) and the agents involved. Within one
//! timestep the order of checks is illegal_move, hole, vertex_conflict, edge_conflict.
use super::instance::{Cell, Instance, Plan};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The classified failure types (parse_error comes from text plans).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    ParseError,
    IllegalMove,
    Hole,
    VertexConflict,
    EdgeConflict,
    GoalNotReached,
    TooLong,
    /// The plan's agent count differs from the instance's.
    WrongAgentCount,
}

impl FailureKind {
    pub const ALL: [FailureKind; 8] = [
        FailureKind::ParseError,
        FailureKind::IllegalMove,
        FailureKind::Hole,
        FailureKind::VertexConflict,
        FailureKind::EdgeConflict,
        FailureKind::GoalNotReached,
        FailureKind::TooLong,
        FailureKind::WrongAgentCount,
    ];

    pub fn name(self) -> &'static str {
        match self {
            FailureKind::ParseError => "parse_error",
            FailureKind::IllegalMove => "illegal_move",
            FailureKind::Hole => "hole",
            FailureKind::VertexConflict => "vertex_conflict",
            FailureKind::EdgeConflict => "edge_conflict",
            FailureKind::GoalNotReached => "goal_not_reached",
            FailureKind::TooLong => "too_long",
            FailureKind::WrongAgentCount => "wrong_agent_count",
        }
    }
}

impl std::fmt::Display for FailureKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The first thing that went wrong with a plan.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub struct Failure {
    pub kind: FailureKind,
    /// Timestep of the failing move (1-based); 0 for parse errors and agent-count errors,
    /// the plan's length for goal_not_reached.
    pub t: u32,
    /// The agents involved, 1-based, ascending.
    pub agents: Vec<u8>,
    /// One line a human (or an engineer) can read.
    pub detail: String,
}

/// The optima a plan is compared with (from the reference solver).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub struct Reference {
    pub sum_of_costs: u32,
    pub makespan: u32,
}

/// Which cost "optimal" refers to (the paper's ground truth uses makespan).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CostMetric {
    #[default]
    Makespan,
    SumOfCosts,
}

/// The result of simulating a plan.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub struct Outcome {
    pub valid: bool,
    pub failure: Option<Failure>,
    /// Sum over agents of the last timestep at which each arrived at its goal for good
    /// (valid plans only; 0 otherwise).
    pub sum_of_costs: u32,
    /// The largest of those arrival times (valid plans only; 0 otherwise).
    pub makespan: u32,
}

impl Outcome {
    pub fn failed(failure: Failure) -> Outcome {
        Outcome {
            valid: false,
            failure: Some(failure),
            sum_of_costs: 0,
            makespan: 0,
        }
    }

    /// Valid and as cheap as the reference under `metric`.
    pub fn optimal(&self, reference: &Reference, metric: CostMetric) -> bool {
        self.valid
            && match metric {
                CostMetric::Makespan => self.makespan == reference.makespan,
                CostMetric::SumOfCosts => self.sum_of_costs == reference.sum_of_costs,
            }
    }

    pub fn failure_kind(&self) -> Option<FailureKind> {
        self.failure.as_ref().map(|f| f.kind)
    }
}

fn agents_list(a: &[usize]) -> Vec<u8> {
    let mut v: Vec<u8> = a.iter().map(|&i| (i + 1) as u8).collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// Simulate `plan` on `inst` and classify the first failure.
pub fn simulate(inst: &Instance, plan: &Plan) -> Outcome {
    let k = inst.agents();
    if plan.moves.len() != k {
        return Outcome::failed(Failure {
            kind: FailureKind::WrongAgentCount,
            t: 0,
            agents: vec![],
            detail: format!("the plan has {} agents, the instance {k}", plan.moves.len()),
        });
    }
    let horizon = inst.horizon();
    let steps = plan.len();
    let mut pos: Vec<Cell> = inst.starts().to_vec();
    let mut next: Vec<Cell> = pos.clone();
    // arrived[i]: the timestep from which agent i has stayed on its goal.
    let mut arrived: Vec<u32> = vec![0; k];
    for t in 1..=steps {
        if t > horizon {
            let long: Vec<usize> = (0..k).filter(|&i| plan.moves[i].len() > horizon).collect();
            return Outcome::failed(Failure {
                kind: FailureKind::TooLong,
                t: t as u32,
                agents: agents_list(&long),
                detail: format!("plan longer than the horizon of {horizon} steps"),
            });
        }
        // Moves: illegal moves (leaving the grid) first.
        let mut illegal = Vec::new();
        for i in 0..k {
            let mv = plan.moves[i].get(t - 1).copied().unwrap_or(super::Move::W);
            match inst.step(pos[i], mv) {
                Some(c) => next[i] = c,
                None => illegal.push(i),
            }
        }
        if !illegal.is_empty() {
            let (r, c) = inst.row_col(pos[illegal[0]]);
            let mv = plan.moves[illegal[0]][t - 1];
            return Outcome::failed(Failure {
                kind: FailureKind::IllegalMove,
                t: t as u32,
                agents: agents_list(&illegal),
                detail: format!(
                    "agent {} moves {mv} off the grid from [{r}, {c}]",
                    illegal[0] + 1
                ),
            });
        }
        let holes: Vec<usize> = (0..k).filter(|&i| inst.is_hole(next[i])).collect();
        if !holes.is_empty() {
            let (r, c) = inst.row_col(next[holes[0]]);
            return Outcome::failed(Failure {
                kind: FailureKind::Hole,
                t: t as u32,
                agents: agents_list(&holes),
                detail: format!("agent {} falls into the hole at [{r}, {c}]", holes[0] + 1),
            });
        }
        // Vertex conflicts: k <= 8, so the quadratic scan is the fast option.
        for i in 0..k {
            for j in i + 1..k {
                if next[i] == next[j] {
                    let (r, c) = inst.row_col(next[i]);
                    return Outcome::failed(Failure {
                        kind: FailureKind::VertexConflict,
                        t: t as u32,
                        agents: agents_list(&[i, j]),
                        detail: format!("agents {} and {} both at [{r}, {c}]", i + 1, j + 1),
                    });
                }
            }
        }
        for i in 0..k {
            for j in i + 1..k {
                if next[i] == pos[j] && next[j] == pos[i] {
                    let (r1, c1) = inst.row_col(pos[i]);
                    let (r2, c2) = inst.row_col(pos[j]);
                    return Outcome::failed(Failure {
                        kind: FailureKind::EdgeConflict,
                        t: t as u32,
                        agents: agents_list(&[i, j]),
                        detail: format!(
                            "agents {} and {} swap [{r1}, {c1}] and [{r2}, {c2}]",
                            i + 1,
                            j + 1
                        ),
                    });
                }
            }
        }
        for i in 0..k {
            if next[i] == inst.goals()[i] && pos[i] != inst.goals()[i] {
                arrived[i] = t as u32;
            }
        }
        std::mem::swap(&mut pos, &mut next);
    }
    let missing: Vec<usize> = (0..k).filter(|&i| pos[i] != inst.goals()[i]).collect();
    if !missing.is_empty() {
        let (r, c) = inst.row_col(pos[missing[0]]);
        return Outcome::failed(Failure {
            kind: FailureKind::GoalNotReached,
            t: steps as u32,
            agents: agents_list(&missing),
            detail: format!(
                "agent {} ends at [{r}, {c}], not on its goal",
                missing[0] + 1
            ),
        });
    }
    // `arrived[i]` is the last step at which agent i entered its goal (or 0 if it never
    // left it): exactly its cost.
    Outcome {
        valid: true,
        failure: None,
        sum_of_costs: arrived.iter().sum(),
        makespan: arrived.iter().copied().max().unwrap_or(0),
    }
}

/// Which agents of `plan` did their own part: an agent is credited when its path stays on
/// the grid, never enters a hole, is in no vertex or edge conflict with another agent
/// still on the board, and ends on its goal within the horizon. Unlike [`simulate`],
/// which stops at the first failure, this plays the whole plan (an agent that fails is
/// taken off the board at that step), so a plan whose agents 1 and 2 collide still
/// credits agent 3. A plan with the wrong agent count credits nobody. GRPO's per-agent
/// reward term reads it; a valid plan credits every agent.
pub fn agent_credit(inst: &Instance, plan: &Plan) -> Vec<bool> {
    let k = inst.agents();
    if plan.moves.len() != k {
        return vec![false; k];
    }
    let horizon = inst.horizon();
    let steps = plan.len();
    let mut ok = vec![true; k];
    let mut pos: Vec<Cell> = inst.starts().to_vec();
    let mut next = pos.clone();
    for t in 1..=steps {
        for i in 0..k {
            if !ok[i] {
                continue;
            }
            if t > horizon && plan.moves[i].len() >= t {
                ok[i] = false;
                continue;
            }
            let mv = plan.moves[i].get(t - 1).copied().unwrap_or(super::Move::W);
            match inst.step(pos[i], mv) {
                Some(c) if !inst.is_hole(c) => next[i] = c,
                _ => ok[i] = false,
            }
        }
        let alive: Vec<usize> = (0..k).filter(|&i| ok[i]).collect();
        let mut clash = vec![false; k];
        for (a, &i) in alive.iter().enumerate() {
            for &j in &alive[a + 1..] {
                let vertex = next[i] == next[j];
                let edge = next[i] == pos[j] && next[j] == pos[i];
                if vertex || edge {
                    clash[i] = true;
                    clash[j] = true;
                }
            }
        }
        for i in alive {
            if clash[i] {
                ok[i] = false;
            } else {
                pos[i] = next[i];
            }
        }
    }
    (0..k).map(|i| ok[i] && pos[i] == inst.goals()[i]).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::instance::Move;

    fn inst(grid: &[&str], agents: &[([u8; 2], [u8; 2])]) -> Instance {
        let j = crate::instance::InstanceJson {
            size: grid.len(),
            grid: grid.iter().map(|s| s.to_string()).collect(),
            agents: agents
                .iter()
                .map(|&(s, g)| crate::instance::AgentSpec { start: s, goal: g })
                .collect(),
        };
        Instance::try_from(j).unwrap()
    }

    fn plan(s: &[&str]) -> Plan {
        Plan {
            moves: s
                .iter()
                .map(|x| x.chars().map(|c| Move::from_letter(c).unwrap()).collect())
                .collect(),
        }
    }

    #[test]
    fn valid_plan_costs_count_until_last_arrival() {
        let i = inst(
            &["FFF", "FFF", "FFF"],
            &[([0, 0], [0, 2]), ([2, 0], [2, 1])],
        );
        // Agent 2 arrives at t=1, leaves at t=2, returns at t=3: cost 3.
        let o = simulate(&i, &plan(&["RRWW", "RLRW"]));
        assert!(o.valid, "{o:?}");
        assert_eq!((o.sum_of_costs, o.makespan), (2 + 3, 3));
    }

    #[test]
    fn agent_already_on_goal_costs_zero() {
        let i = inst(
            &["FFF", "FFF", "FFF"],
            &[([0, 0], [0, 0]), ([2, 0], [2, 1])],
        );
        let o = simulate(&i, &plan(&["", "R"]));
        assert!(o.valid);
        assert_eq!((o.sum_of_costs, o.makespan), (1, 1));
    }

    #[test]
    fn failures_are_classified_with_time_and_agents() {
        let i = inst(
            &["FFF", "FHF", "FFF"],
            &[([0, 0], [0, 2]), ([0, 2], [0, 0])],
        );
        let f = |p: &[&str]| simulate(&i, &plan(p)).failure.unwrap();
        let x = f(&["U", "W"]);
        assert_eq!(
            (x.kind, x.t, x.agents.clone()),
            (FailureKind::IllegalMove, 1, vec![1])
        );
        let x = f(&["RD", "WW"]);
        assert_eq!((x.kind, x.t), (FailureKind::Hole, 2));
        let x = f(&["R", "L"]);
        assert_eq!(
            (x.kind, x.t, x.agents.clone()),
            (FailureKind::VertexConflict, 1, vec![1, 2])
        );
        let x = f(&["RR", "WL"]);
        assert_eq!((x.kind, x.t), (FailureKind::EdgeConflict, 2));
        let x = f(&["R", "D"]);
        assert_eq!(
            (x.kind, x.t, x.agents.clone()),
            (FailureKind::GoalNotReached, 1, vec![1, 2])
        );
        let long = "W".repeat(i.horizon() + 1);
        let x = f(&[&long, "W"]);
        assert_eq!(
            (x.kind, x.t as usize),
            (FailureKind::TooLong, i.horizon() + 1)
        );
        let x = f(&["R"]);
        assert_eq!(x.kind, FailureKind::WrongAgentCount);
    }

    #[test]
    fn following_into_a_vacated_cell_is_not_a_conflict() {
        let i = inst(
            &["FFF", "FFF", "FFF"],
            &[([0, 0], [0, 2]), ([0, 1], [1, 2])],
        );
        assert!(simulate(&i, &plan(&["RR", "RD"])).valid);
    }
    #[test]
    fn agent_credit_plays_past_the_first_failure() {
        let i = inst(
            &["FFFF", "FFFF", "FFFF", "FHFF"],
            &[([0, 0], [0, 2]), ([0, 3], [0, 1]), ([3, 0], [3, 2])],
        );
        // Agents 1 and 2 meet at (0,1)/(0,2): both uncredited; agent 3 walks into the hole.
        assert_eq!(
            agent_credit(&i, &plan(&["RR", "LL", "RR"])),
            vec![false, false, false]
        );
        // Agent 3 goes around the hole and is credited although 1 and 2 collide first.
        assert_eq!(
            agent_credit(&i, &plan(&["RR", "LL", "URRD"])),
            vec![false, false, true]
        );
        // A valid plan credits everyone; a swap (edge conflict) credits neither swapper.
        let two = inst(
            &["FFF", "FFF", "FFF"],
            &[([0, 0], [0, 1]), ([0, 1], [0, 0])],
        );
        assert_eq!(agent_credit(&two, &plan(&["R", "L"])), vec![false, false]);
        assert_eq!(agent_credit(&two, &plan(&["DRU", "WWL"])), vec![true, true]);
        assert!(simulate(&two, &plan(&["DRU", "WWL"])).valid);
        // Ending off the goal, or the wrong agent count, earns nothing.
        assert_eq!(agent_credit(&two, &plan(&["D", "W"])), vec![false, false]);
        assert_eq!(agent_credit(&two, &plan(&["R"])), vec![false, false]);
    }
}
