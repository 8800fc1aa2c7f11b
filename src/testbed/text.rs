//! Text I/O of the testbed: an instance rendered as the prompt an LLM (or the `text`
//! policy) reads, and plan text parsed back with precise errors.
//!
//! Plan text is one line per agent, `agent <n>: <moves>`, moves over U D L R W. The
//! parser is tolerant of case, surrounding whitespace, blank lines and separators
//! (spaces, commas) between moves; everything else is a parse error naming the line and
//! column, which the simulator reports as a `parse_error` failure.
//!
//! The cells format (`prompt = "cells"`, the shipped base planner's) states positions
//! instead of leaving them implicit: the prompt lists holes, starts and goals as
//! `(row,col)` cells, and each plan line writes the cell every move reaches,
//! `agent 1: (0,0) R (0,1) D (1,1)`; [`parse_plan_in`] checks those cells.
use super::instance::{Instance, Move, Plan};
use super::simulate::{Failure, FailureKind};

/// Render `inst` as the prompt text.
pub fn render_prompt(inst: &Instance) -> String {
    let n = inst.size();
    let mut s = String::with_capacity(256 + n * n * 2);
    s.push_str(&format!(
        "Multi-agent path finding on a {n}x{n} frozen lake with {} agents.\n",
        inst.agents()
    ));
    s.push_str("Grid (row 0 at the top, column 0 at the left; F = frozen, H = hole):\n");
    for (r, row) in inst.grid_rows().iter().enumerate() {
        s.push_str(&format!("row {r}: "));
        let spaced: Vec<String> = row.chars().map(String::from).collect();
        s.push_str(&spaced.join(" "));
        s.push('\n');
    }
    s.push_str("Agents (row, column):\n");
    for a in 0..inst.agents() {
        let (sr, sc) = inst.row_col(inst.starts()[a]);
        let (gr, gc) = inst.row_col(inst.goals()[a]);
        s.push_str(&format!(
            "agent {}: start ({sr}, {sc}) goal ({gr}, {gc})\n",
            a + 1
        ));
    }
    s.push_str(
        "Moves: U (row - 1), D (row + 1), L (column - 1), R (column + 1), W (wait).\n\
         All agents move at the same time. No agent may leave the grid, enter a hole, \
         share a cell with another agent or swap cells with one. An agent whose moves \
         have ended waits where it is; every agent must end on its goal.\n\
         Answer with one line per agent:\n",
    );
    for a in 0..inst.agents() {
        s.push_str(&format!("agent {}: <moves>\n", a + 1));
    }
    s
}

/// The compact prompt the policy reads: size and agent count, the grid rows (`F`/`H`
/// separated by spaces), each agent's start and goal as row and column, then `Answer:`.
///
/// ```text
/// 4x4 2 agents
/// F F F F
/// F H F F
/// F F F F
/// F F F H
/// agent 1: start 0 0 goal 2 3
/// agent 2: start 3 0 goal 0 3
/// Answer:
/// ```
pub fn render_compact_prompt(inst: &Instance) -> String {
    let n = inst.size();
    let mut s = format!("{n}x{n} {} agents\n", inst.agents());
    for row in inst.grid_rows() {
        let cells: Vec<String> = row.chars().map(String::from).collect();
        s.push_str(&cells.join(" "));
        s.push('\n');
    }
    for a in 0..inst.agents() {
        let (sr, sc) = inst.row_col(inst.starts()[a]);
        let (gr, gc) = inst.row_col(inst.goals()[a]);
        s.push_str(&format!(
            "agent {}: start {sr} {sc} goal {gr} {gc}\n",
            a + 1
        ));
    }
    s.push_str("Answer:\n");
    s
}

/// Render a plan as text (the format `parse_plan` reads).
pub fn render_plan(plan: &Plan) -> String {
    let mut s = String::new();
    for (a, seq) in plan.moves.iter().enumerate() {
        s.push_str(&format!("agent {}: ", a + 1));
        let letters: Vec<String> = seq.iter().map(|m| m.letter().to_string()).collect();
        s.push_str(&letters.join(" "));
        s.push('\n');
    }
    s
}

/// A cell as the cells format writes it: `(row,col)`, no spaces, so that a scratch
/// tokenizer keeps it one token (see `train::lm::chat::CELLS_SPLIT`).
pub fn cell_text(inst: &Instance, cell: super::instance::Cell) -> String {
    let (r, c) = inst.row_col(cell);
    format!("({r},{c})")
}

/// The cells prompt: positions are never implicit. Holes are listed by coordinate and
/// starts and goals are cells, so a small transformer matches cells by token instead of
/// counting through a flattened grid (the representation experiments of the base
/// planner chose this; see `ledgers/models/mapf-base/README.md`).
///
/// ```text
/// 4x4 2 agents
/// holes: (1,1) (3,3)
/// agent 1: start (0,0) goal (2,3)
/// agent 2: start (3,0) goal (0,3)
/// Answer:
/// ```
pub fn render_cells_prompt(inst: &Instance) -> String {
    let n = inst.size();
    let mut s = format!("{n}x{n} {} agents\nholes:", inst.agents());
    let holes: Vec<usize> = (0..inst.cells()).filter(|&c| inst.holes()[c]).collect();
    if holes.is_empty() {
        s.push_str(" none");
    }
    for c in holes {
        s.push(' ');
        s.push_str(&cell_text(inst, c as super::instance::Cell));
    }
    s.push('\n');
    for a in 0..inst.agents() {
        s.push_str(&format!(
            "agent {}: start {} goal {}\n",
            a + 1,
            cell_text(inst, inst.starts()[a]),
            cell_text(inst, inst.goals()[a])
        ));
    }
    s.push_str("Answer:\n");
    s
}

/// A plan in the cells format: each agent's line starts at its start cell and writes
/// the cell each move reaches, `agent 1: (0,0) R (0,1) D (1,1)`. [`parse_plan_in`]
/// reads it back and checks every stated cell; [`parse_plan`] reads the moves.
pub fn render_cells_plan(inst: &Instance, plan: &Plan) -> String {
    let mut s = String::new();
    for (a, seq) in plan.moves.iter().enumerate() {
        let mut at = inst.starts()[a];
        s.push_str(&format!("agent {}: {}", a + 1, cell_text(inst, at)));
        for &m in seq {
            at = inst.step(at, m).unwrap_or(at);
            s.push_str(&format!(" {} {}", m.letter(), cell_text(inst, at)));
        }
        s.push('\n');
    }
    s
}

/// A plan text that does not parse: where and why (line and column are 1-based).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}, column {column}: {message}")]
pub struct ParseError {
    pub line: usize,
    pub column: usize,
    pub message: String,
}

impl ParseError {
    /// The failure the simulator reports for unparsable plan text.
    pub fn to_failure(&self) -> Failure {
        Failure {
            kind: FailureKind::ParseError,
            t: 0,
            agents: vec![],
            detail: self.to_string(),
        }
    }
}

/// A cell a plan line states (the cells format): after how many of the agent's moves,
/// which row and column, and where in the text.
#[derive(Clone, Debug, PartialEq, Eq)]
struct StatedCell {
    after: usize,
    row: usize,
    col: usize,
    line: usize,
    column: usize,
}

/// Parse plan text for an instance with `agents` agents. Moves are read; cells stated
/// between them (`(row,col)`, the cells format) must be well formed but are not checked
/// against a map: [`parse_plan_in`] does that.
pub fn parse_plan(text: &str, agents: usize) -> Result<Plan, ParseError> {
    parse_lines(text, agents).map(|(plan, _)| plan)
}

/// Parse plan text for `inst`: as [`parse_plan`], and every stated cell must be the cell
/// the agent is on at that point (its start before the first move). A wrong cell is a
/// parse error naming it: the plan says something false about where the agent is. A
/// move that leaves the grid ends the checks of that line (the simulator reports it).
pub fn parse_plan_in(text: &str, inst: &Instance) -> Result<Plan, ParseError> {
    let (plan, stated) = parse_lines(text, inst.agents())?;
    for (a, cells) in stated.iter().enumerate() {
        let mut at = Some(inst.starts()[a]);
        let mut done = 0;
        for sc in cells {
            while done < sc.after {
                at = at.and_then(|c| inst.step(c, plan.moves[a][done]));
                done += 1;
            }
            let Some(cell) = at else { break };
            let (r, c) = inst.row_col(cell);
            if (sc.row, sc.col) != (r, c) {
                let when = match sc.after {
                    0 => "starts".to_string(),
                    1 => "is after 1 move".to_string(),
                    k => format!("is after {k} moves"),
                };
                return Err(ParseError {
                    line: sc.line,
                    column: sc.column,
                    message: format!(
                        "agent {} {when} at ({r},{c}), the plan says ({},{})",
                        a + 1,
                        sc.row,
                        sc.col
                    ),
                });
            }
        }
    }
    Ok(plan)
}

/// Moves and stated cells of each agent's line.
#[allow(clippy::type_complexity)]
fn parse_lines(text: &str, agents: usize) -> Result<(Plan, Vec<Vec<StatedCell>>), ParseError> {
    let mut moves: Vec<Option<Vec<Move>>> = vec![None; agents];
    let mut stated: Vec<Vec<StatedCell>> = vec![Vec::new(); agents];
    let mut last_line = 0;
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        last_line = line;
        let trimmed = raw.trim_start();
        if trimmed.trim().is_empty() {
            continue;
        }
        let indent = raw.len() - trimmed.len();
        let err = |column: usize, message: String| ParseError {
            line,
            column,
            message,
        };
        let lower = trimmed.to_ascii_lowercase();
        if !lower.starts_with("agent") {
            return Err(err(
                indent + 1,
                format!(
                    "expected `agent <n>: <moves>`, found {:?}",
                    trimmed.trim_end()
                ),
            ));
        }
        let after = &trimmed["agent".len()..];
        let Some(colon) = after.find(':') else {
            return Err(err(indent + 1, "missing ':' after the agent number".into()));
        };
        let num_text = after[..colon].trim();
        let agent: usize = num_text.parse().map_err(|_| {
            err(
                indent + 6,
                format!("agent number {num_text:?} is not a positive integer"),
            )
        })?;
        if agent == 0 || agent > agents {
            return Err(err(
                indent + 6,
                format!("agent {agent} does not exist (the instance has {agents})"),
            ));
        }
        if moves[agent - 1].is_some() {
            return Err(err(indent + 1, format!("agent {agent} has a second line")));
        }
        let body_start = indent + "agent".len() + colon + 1;
        let body = &raw[body_start..];
        let mut seq = Vec::new();
        let mut chars = body.char_indices().peekable();
        while let Some((off, ch)) = chars.next() {
            if ch.is_whitespace() || ch == ',' {
                continue;
            }
            if ch == '(' {
                let column = body_start + off + 1;
                let Some(close) = body[off..].find(')') else {
                    return Err(err(column, "a cell `(row,col)` is missing its ')'".into()));
                };
                let inner = &body[off + 1..off + close];
                let parts: Vec<&str> = inner.split(',').map(str::trim).collect();
                let coords: Option<Vec<usize>> = (parts.len() == 2)
                    .then(|| parts.iter().map(|p| p.parse().ok()).collect())
                    .flatten();
                let Some(rc) = coords else {
                    return Err(err(
                        column,
                        format!("({inner}) is not a cell (write `(row,col)`)"),
                    ));
                };
                stated[agent - 1].push(StatedCell {
                    after: seq.len(),
                    row: rc[0],
                    col: rc[1],
                    line,
                    column,
                });
                while chars.peek().is_some_and(|&(o, _)| o <= off + close) {
                    chars.next();
                }
                continue;
            }
            match Move::from_letter(ch) {
                Some(m) => seq.push(m),
                None => {
                    return Err(err(
                        body_start + off + 1,
                        format!("{ch:?} is not a move (use U, D, L, R, W)"),
                    ))
                }
            }
        }
        moves[agent - 1] = Some(seq);
    }
    let mut out = Vec::with_capacity(agents);
    for (a, m) in moves.into_iter().enumerate() {
        match m {
            Some(seq) => out.push(seq),
            None => {
                return Err(ParseError {
                    line: last_line + 1,
                    column: 1,
                    message: format!("no line for agent {}", a + 1),
                })
            }
        }
    }
    Ok((Plan { moves: out }, stated))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inst() -> Instance {
        serde_json::from_str(
            r#"{"size":3,"grid":["FFF","FHF","FFF"],"agents":[{"start":[0,0],"goal":[2,2]},{"start":[2,2],"goal":[0,0]}]}"#,
        )
        .unwrap()
    }

    #[test]
    fn prompt_lists_grid_agents_and_alphabet() {
        let p = render_prompt(&inst());
        assert!(p.contains("row 1: F H F"));
        assert!(p.contains("agent 2: start (2, 2) goal (0, 0)"));
        assert!(p.contains("W (wait)"));
    }

    #[test]
    fn parse_round_trips_and_tolerates_case_space_commas() {
        let plan = Plan {
            moves: vec![
                vec![Move::R, Move::R, Move::D, Move::D],
                vec![Move::U, Move::W],
            ],
        };
        assert_eq!(parse_plan(&render_plan(&plan), 2).unwrap(), plan);
        let loose = "\n  AGENT 2 :u, w\nagent 1:rrDD  \n\n";
        assert_eq!(parse_plan(loose, 2).unwrap(), plan);
    }

    #[test]
    fn parse_errors_name_line_and_column() {
        let e = parse_plan("agent 1: R R\nagent 2: R X", 2).unwrap_err();
        assert_eq!((e.line, e.column), (2, 12));
        assert!(e.message.contains("'X'"));
        let e = parse_plan("agent 1: R", 2).unwrap_err();
        assert!(e.message.contains("no line for agent 2"), "{e}");
        let e = parse_plan("agent 3: R", 2).unwrap_err();
        assert!(e.message.contains("agent 3 does not exist"), "{e}");
        let e = parse_plan("the answer is RR", 2).unwrap_err();
        assert_eq!((e.line, e.column), (1, 1));
        let e = parse_plan("agent 1: R\nagent 1: D", 2).unwrap_err();
        assert!(e.message.contains("second line"));
    }

    #[test]
    fn cells_format_round_trips_and_checks_every_stated_cell() {
        let inst = inst();
        let p = render_cells_prompt(&inst);
        assert!(p.starts_with("3x3 2 agents\nholes: (1,1)\n"), "{p}");
        assert!(p.contains("agent 2: start (2,2) goal (0,0)\n"), "{p}");
        let plan = Plan {
            moves: vec![
                vec![Move::R, Move::R, Move::D, Move::D],
                vec![Move::U, Move::U, Move::L, Move::L],
            ],
        };
        let text = render_cells_plan(&inst, &plan);
        assert_eq!(
            text.lines().next().unwrap(),
            "agent 1: (0,0) R (0,1) R (0,2) D (1,2) D (2,2)"
        );
        assert_eq!(parse_plan_in(&text, &inst).unwrap(), plan);
        assert_eq!(parse_plan(&text, 2).unwrap(), plan);
        // A wrong cell is named where it stands.
        let e = parse_plan_in("agent 1: (0,0) R (0,2)\nagent 2: (2,2)", &inst).unwrap_err();
        assert_eq!((e.line, e.column), (1, 18), "{e}");
        assert!(
            e.message
                .contains("agent 1 is after 1 move at (0,1), the plan says (0,2)"),
            "{e}"
        );
        let e = parse_plan_in("agent 1: (0,1)\nagent 2: (2,2)", &inst).unwrap_err();
        assert!(e.message.contains("agent 1 starts at (0,0)"), "{e}");
        // Malformed cells are parse errors in both parsers.
        for (bad, what) in [
            ("agent 1: (0,0 R\nagent 2: W", "missing its ')'"),
            ("agent 1: (0;0) R\nagent 2: W", "is not a cell"),
            ("agent 1: (0,0,1) R\nagent 2: W", "is not a cell"),
        ] {
            let e = parse_plan(bad, 2).unwrap_err();
            assert!(e.message.contains(what), "{bad:?}: {e}");
            assert_eq!((e.line, e.column), (1, 10), "{bad:?}");
        }
        // A move off the grid ends that line's checks: the simulator reports it.
        let off = parse_plan_in("agent 1: (0,0) U (9,9)\nagent 2: W", &inst).unwrap();
        assert_eq!(off.moves[0], vec![Move::U]);
    }
}
