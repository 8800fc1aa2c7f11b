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
//!
//! The steps format (`prompt = "steps"`) reads the cells prompt and writes the plan time
//! first: one line per time step, every agent on it in order, each named by its tag
//! (`a`, `b`, ...) with the cell it is on and its move; a last line states the cells
//! they end on:
//!
//! ```text
//! a (0,0) R b (2,2) U
//! a (0,1) R b (1,2) W
//! a (0,2) b (1,2)
//! ```
//!
//! Whether an agent must make way then depends on the cells written earlier on its own
//! line, not on its number (issue 53). Both parsers read either layout.
//!
//! An instance's agents are `agent 1` to `agent k` unless it is named
//! ([`Instance::named`], GRPO's `agent_names`): then every prompt, the agent-line plans
//! and [`parse_plan_in`] call them by their names (`agent 3`, `agent 5`). The steps
//! layout tags agents by position whatever their names.
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
            inst.name(a)
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
        s.push_str(&format!("agent {}: <moves>\n", inst.name(a)));
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
            inst.name(a)
        ));
    }
    s.push_str("Answer:\n");
    s
}

/// Render a plan as text (the format `parse_plan` reads).
pub fn render_plan(plan: &Plan) -> String {
    agent_lines(plan, |a| a + 1)
}

/// [`render_plan`] with the agents called by `inst`'s names ([`Instance::named`]).
pub fn render_plan_in(inst: &Instance, plan: &Plan) -> String {
    agent_lines(plan, |a| inst.name(a))
}

fn agent_lines(plan: &Plan, name: impl Fn(usize) -> usize) -> String {
    let mut s = String::new();
    for (a, seq) in plan.moves.iter().enumerate() {
        s.push_str(&format!("agent {}: ", name(a)));
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
/// planner chose this; see `ledgers/cards/mapf-base.md`).
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
            inst.name(a),
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
        s.push_str(&format!("agent {}: {}", inst.name(a), cell_text(inst, at)));
        for &m in seq {
            at = inst.step(at, m).unwrap_or(at);
            s.push_str(&format!(" {} {}", m.letter(), cell_text(inst, at)));
        }
        s.push('\n');
    }
    s
}

/// The tag that names agent `a` (0-based) on a line of the steps format.
pub fn step_tag(a: usize) -> char {
    debug_assert!(a < 26, "agents are at most MAX_AGENTS");
    (b'a' + a as u8) as char
}

/// A plan in the steps format: one line per time step up to the longest agent's moves,
/// each agent's tag, the cell it is on and its move (an agent whose moves have ended
/// writes `W`), then a line of the cells every agent ends on: `a (0,0) R b (2,2) W`,
/// ..., `a (0,2) b (2,2)`. The cell comes before the move, as in the cells format, so
/// the move is chosen next to the cell it leaves.
pub fn render_steps_plan(inst: &Instance, plan: &Plan) -> String {
    let mut at: Vec<_> = inst.starts().to_vec();
    let line = |f: &mut dyn FnMut(usize) -> String| -> String {
        let slots: Vec<String> = (0..plan.moves.len()).map(f).collect();
        slots.join(" ") + "\n"
    };
    let mut s = String::new();
    let steps = plan.moves.iter().map(Vec::len).max().unwrap_or(0);
    for t in 0..steps {
        s.push_str(&line(&mut |a| {
            let m = plan.moves[a].get(t).copied().unwrap_or(Move::W);
            let here = cell_text(inst, at[a]);
            at[a] = inst.step(at[a], m).unwrap_or(at[a]);
            format!("{} {here} {}", step_tag(a), m.letter())
        }));
    }
    s.push_str(&line(&mut |a| {
        format!("{} {}", step_tag(a), cell_text(inst, at[a]))
    }));
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
    parse_lines(text, &Names::Plain(agents)).map(|(plan, _)| plan)
}

/// Parse plan text for `inst`: as [`parse_plan`], and every stated cell must be the cell
/// the agent is on at that point (its start before the first move). A wrong cell is a
/// parse error naming it: the plan says something false about where the agent is. A
/// move that leaves the grid ends the checks of that line (the simulator reports it).
pub fn parse_plan_in(text: &str, inst: &Instance) -> Result<Plan, ParseError> {
    let (plan, stated) = parse_lines(text, &Names::Of(inst))?;
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
                        inst.name(a),
                        sc.row,
                        sc.col
                    ),
                });
            }
        }
    }
    Ok(plan)
}

/// What the agents of a plan text are called: `1..=k`, or an instance's names.
enum Names<'a> {
    Plain(usize),
    Of(&'a Instance),
}

impl Names<'_> {
    fn agents(&self) -> usize {
        match self {
            Names::Plain(k) => *k,
            Names::Of(inst) => inst.agents(),
        }
    }

    fn name(&self, a: usize) -> usize {
        match self {
            Names::Plain(_) => a + 1,
            Names::Of(inst) => inst.name(a),
        }
    }

    /// The agent (0-based) called `name`.
    fn index(&self, name: usize) -> Option<usize> {
        (0..self.agents()).find(|&a| self.name(a) == name)
    }

    /// The agents a plan may name, for an error message: `3` (plain) or `2 and 5`.
    fn describe(&self) -> String {
        match self {
            Names::Of(inst) if inst.is_named() => {
                let names: Vec<String> = (0..self.agents())
                    .map(|a| self.name(a).to_string())
                    .collect();
                let (last, rest) = names.split_last().expect("at least one agent");
                if rest.is_empty() {
                    format!("one, agent {last}")
                } else {
                    format!("agents {} and {last}", rest.join(", "))
                }
            }
            _ => self.agents().to_string(),
        }
    }
}

/// Parse a recorded plan of `inst` whose agents may have been named in training
/// ([`Instance::named`]; the recorded instance does not keep the names): as
/// [`parse_plan_in`], and where that fails, again with the agents called by the
/// numbers the text's lines give them in order, when those are one per agent,
/// increasing and not `1..=k` (otherwise the first error stands).
pub fn parse_recorded_plan(text: &str, inst: &Instance) -> Result<Plan, ParseError> {
    let first = parse_plan_in(text, inst);
    if first.is_ok() || inst.is_named() {
        return first;
    }
    let names: Option<Vec<u8>> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|l| {
            let rest = l.get(..5)?.eq_ignore_ascii_case("agent").then(|| &l[5..])?;
            rest.split_once(':')?.0.trim().parse().ok()
        })
        .collect();
    match names.and_then(|n| inst.clone().named(&n).ok()) {
        Some(named) if named.is_named() => parse_plan_in(text, &named),
        _ => first,
    }
}

/// Moves and stated cells of each agent's line.
#[allow(clippy::type_complexity)]
fn parse_lines(text: &str, names: &Names) -> Result<(Plan, Vec<Vec<StatedCell>>), ParseError> {
    let agents = names.agents();
    if is_steps_text(text) {
        return parse_step_lines(text, agents);
    }
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
        let Some(index) = names.index(agent) else {
            return Err(err(
                indent + 6,
                format!(
                    "agent {agent} does not exist (the instance has {})",
                    names.describe()
                ),
            ));
        };
        if moves[index].is_some() {
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
                let (row, col) = cell_coords(inner).ok_or_else(|| {
                    err(
                        column,
                        format!("({inner}) is not a cell (write `(row,col)`)"),
                    )
                })?;
                stated[index].push(StatedCell {
                    after: seq.len(),
                    row,
                    col,
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
        moves[index] = Some(seq);
    }
    let mut out = Vec::with_capacity(agents);
    for (a, m) in moves.into_iter().enumerate() {
        match m {
            Some(seq) => out.push(seq),
            None => {
                return Err(ParseError {
                    line: last_line + 1,
                    column: 1,
                    message: format!("no line for agent {}", names.name(a)),
                })
            }
        }
    }
    Ok((Plan { moves: out }, stated))
}

/// The row and column inside a cell's parentheses, `0,1` (spaces allowed).
fn cell_coords(inner: &str) -> Option<(usize, usize)> {
    let (r, c) = inner.split_once(',')?;
    Some((r.trim().parse().ok()?, c.trim().parse().ok()?))
}

/// Whether plan text is in the steps layout: its first line opens with a one-letter tag
/// and a cell (`a (0,0) ...`), where the agent layout opens with `agent`.
fn is_steps_text(text: &str) -> bool {
    let Some(first) = text.lines().map(str::trim).find(|l| !l.is_empty()) else {
        return false;
    };
    let mut chars = first.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.next().is_some_and(char::is_whitespace)
        && chars.as_str().trim_start().starts_with('(')
}

/// The words of one steps line with their 1-based columns: a cell `( ... )` is one word
/// whatever it holds; elsewhere words are split at whitespace and commas.
fn step_words(raw: &str, line: usize) -> Result<Vec<(usize, &str)>, ParseError> {
    let mut words = Vec::new();
    let mut rest = raw.char_indices().peekable();
    while let Some((off, ch)) = rest.next() {
        if ch.is_whitespace() || ch == ',' {
            continue;
        }
        let end = if ch == '(' {
            let close = raw[off..].find(')').ok_or_else(|| ParseError {
                line,
                column: off + 1,
                message: "a cell `(row,col)` is missing its ')'".into(),
            })?;
            off + close + 1
        } else {
            raw[off..]
                .find(|c: char| c.is_whitespace() || c == ',' || c == '(')
                .map_or(raw.len(), |e| off + e)
        };
        while rest.peek().is_some_and(|&(o, _)| o < end) {
            rest.next();
        }
        words.push((off + 1, &raw[off..end]));
    }
    Ok(words)
}

/// Moves and stated cells of a plan in the steps layout: one line per time step of each
/// agent's tag, cell and move, every agent on every line in order, and last a line of
/// tags and the cells the agents end on (which may be left out).
#[allow(clippy::type_complexity)]
fn parse_step_lines(text: &str, agents: usize) -> Result<(Plan, Vec<Vec<StatedCell>>), ParseError> {
    let mut moves: Vec<Vec<Move>> = vec![Vec::new(); agents];
    let mut stated: Vec<Vec<StatedCell>> = vec![Vec::new(); agents];
    let mut end_line = None;
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        if raw.trim().is_empty() {
            continue;
        }
        let err = |column: usize, message: String| ParseError {
            line,
            column,
            message,
        };
        let words = step_words(raw, line)?;
        if let Some(end) = end_line {
            return Err(err(
                raw.len() - raw.trim_start().len() + 1,
                format!("a line after the end cells of line {end}"),
            ));
        }
        // A step line has a move after each cell; the end line has none.
        let is_move = |w: &str| w.len() == 1 && w.chars().all(|c| Move::from_letter(c).is_some());
        let stepping = words.get(2).is_some_and(|&(_, w)| is_move(w));
        let end = raw.trim_end().len() + 1;
        let mut w = words.iter();
        for a in 0..agents {
            let tag = step_tag(a);
            let Some(&(column, word)) = w.next() else {
                return Err(err(
                    end,
                    format!("the line names {a} of the {agents} agents (next: `{tag}`)"),
                ));
            };
            if !word.eq_ignore_ascii_case(&tag.to_string()) {
                return Err(err(
                    column,
                    format!("expected agent {}'s tag `{tag}`, found {word:?}", a + 1),
                ));
            }
            let Some(&(column, word)) = w.next() else {
                return Err(err(end, format!("agent {}'s cell is missing", a + 1)));
            };
            let (row, col) = word
                .strip_prefix('(')
                .and_then(|c| c.strip_suffix(')'))
                .and_then(cell_coords)
                .ok_or_else(|| err(column, format!("{word} is not a cell (write `(row,col)`)")))?;
            stated[a].push(StatedCell {
                after: moves[a].len(),
                row,
                col,
                line,
                column,
            });
            if stepping {
                let Some(&(column, word)) = w.next() else {
                    return Err(err(end, format!("agent {}'s move is missing", a + 1)));
                };
                match word.chars().next().and_then(Move::from_letter) {
                    Some(m) if is_move(word) => moves[a].push(m),
                    _ => {
                        return Err(err(
                            column,
                            format!("{word:?} is not a move (use U, D, L, R, W)"),
                        ))
                    }
                }
            }
        }
        if let Some(&(column, word)) = w.next() {
            return Err(err(
                column,
                format!("{word:?} after the last agent (the instance has {agents})"),
            ));
        }
        if !stepping {
            end_line = Some(line);
        }
    }
    Ok((Plan { moves }, stated))
}

#[cfg(test)]
mod tests {
    use super::super::simulate::simulate;
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
    fn named_agents_are_called_by_their_names_in_every_agent_line_format() {
        let plain = inst();
        let named = inst().named(&[3, 5]).unwrap();
        let plan = Plan {
            moves: vec![
                vec![Move::R, Move::R, Move::D, Move::D],
                vec![Move::U, Move::U, Move::L, Move::L],
            ],
        };
        assert_eq!(
            render_cells_prompt(&named),
            "3x3 2 agents\nholes: (1,1)\nagent 3: start (0,0) goal (2,2)\n\
             agent 5: start (2,2) goal (0,0)\nAnswer:\n"
        );
        let text = render_cells_plan(&named, &plan);
        assert_eq!(
            text,
            "agent 3: (0,0) R (0,1) R (0,2) D (1,2) D (2,2)\n\
             agent 5: (2,2) U (1,2) U (0,2) L (0,1) L (0,0)\n"
        );
        assert_eq!(parse_plan_in(&text, &named).unwrap(), plan);
        let lines = render_plan_in(&named, &plan);
        assert!(lines.starts_with("agent 3: R R D D\nagent 5: "), "{lines}");
        assert_eq!(parse_plan_in(&lines, &named).unwrap(), plan);
        for render in [render_prompt, render_compact_prompt] {
            let p = render(&named);
            assert!(
                p.contains("agent 3: start") && p.contains("agent 5: start"),
                "{p}"
            );
            assert!(!p.contains("agent 1:") && !p.contains("agent 2:"), "{p}");
        }
        // The plain names do not read a named instance's plan, nor the reverse.
        let e = parse_plan_in(&text, &plain).unwrap_err();
        assert_eq!(e.message, "agent 3 does not exist (the instance has 2)");
        let e = parse_plan_in(&render_cells_plan(&plain, &plan), &named).unwrap_err();
        assert_eq!(
            e.message,
            "agent 1 does not exist (the instance has agents 3 and 5)"
        );
        let e = parse_plan_in("agent 3: (0,0) R (0,1)", &named).unwrap_err();
        assert_eq!(e.message, "no line for agent 5");
        let e =
            parse_plan_in("agent 3: (0,0) R (0,1)\nagent 5: (0,0) U (1,2)", &named).unwrap_err();
        assert_eq!(e.message, "agent 5 starts at (2,2), the plan says (0,0)");
        // A recorded plan is read with the names its lines give.
        assert_eq!(parse_recorded_plan(&text, &plain).unwrap(), plan);
        assert_eq!(parse_recorded_plan(&lines, &plain).unwrap(), plan);
        let e = parse_recorded_plan("agent 5: (0,0)\nagent 3: (2,2)", &plain).unwrap_err();
        assert_eq!(e.message, "agent 5 does not exist (the instance has 2)");
        // The names 1..=k are the plain instance; names out of order, repeated, zero or
        // of the wrong count are refused.
        assert_eq!(inst().named(&[1, 2]).unwrap(), plain);
        assert!(!inst().named(&[1, 2]).unwrap().is_named());
        for bad in [&[5, 3][..], &[3, 3], &[0, 2], &[1, 2, 3], &[4]] {
            let e = inst().named(bad).unwrap_err();
            assert!(
                e.to_string().contains("strictly increasing"),
                "{bad:?}: {e}"
            );
        }
        // A named instance is the same problem: same content hash, same simulation.
        assert_eq!(named.content_hash(), plain.content_hash());
        assert_eq!(simulate(&named, &plan), simulate(&plain, &plan));
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

    #[test]
    fn steps_format_writes_time_first_and_both_parsers_read_it() {
        let inst = inst();
        // Agent 2 is done after two moves: it writes waits on its cell to the end.
        let plan = Plan {
            moves: vec![
                vec![Move::R, Move::R, Move::D, Move::D],
                vec![Move::U, Move::U],
            ],
        };
        let text = render_steps_plan(&inst, &plan);
        assert_eq!(
            text,
            "a (0,0) R b (2,2) U\n\
             a (0,1) R b (1,2) U\n\
             a (0,2) D b (0,2) W\n\
             a (1,2) D b (0,2) W\n\
             a (2,2) b (0,2)\n"
        );
        let padded = Plan {
            moves: vec![
                plan.moves[0].clone(),
                vec![Move::U, Move::U, Move::W, Move::W],
            ],
        };
        assert_eq!(parse_plan_in(&text, &inst).unwrap(), padded);
        assert_eq!(parse_plan(&text, 2).unwrap(), padded);
        // The padding waits on the goal change neither validity nor cost.
        let (o, p) = (simulate(&inst, &plan), simulate(&inst, &padded));
        assert_eq!((o.failure, o.sum_of_costs), (p.failure, p.sum_of_costs));
        // Blank lines, case and commas are tolerated as in the agent layout.
        let loose = "\n A (0,0) r, B (2,2) u\n\na (0,1), b ( 1 , 2 )\n";
        let p = parse_plan_in(loose, &inst).unwrap();
        assert_eq!(p.moves, vec![vec![Move::R], vec![Move::U]]);
        // The end line may be left out: the moves are the plan.
        let p = parse_plan_in("a (0,0) R b (2,2) U", &inst).unwrap();
        assert_eq!(p.moves, vec![vec![Move::R], vec![Move::U]]);
        // No moves at all: the end line alone.
        assert_eq!(
            parse_plan("a (0,0) b (2,2)", 2).unwrap().moves,
            vec![Vec::<Move>::new(), vec![]]
        );
    }

    #[test]
    fn steps_format_keeps_every_outcome_of_solver_and_random_plans() {
        use super::super::config::GeneratorConfig;
        use super::super::generator::generate;
        use super::super::instance::MAX_AGENTS;
        use super::super::seed::Seed;
        use super::super::solver::Budget;
        let moves = [Move::U, Move::D, Move::L, Move::R, Move::W];
        for agents in 1..=MAX_AGENTS {
            let wait = if agents > 1 { 0.5 } else { 0.0 };
            let cfg = GeneratorConfig::uniform(agents, [5, 7, 10], 0.1, wait);
            let seed = Seed::root(7).child("steps", agents as u64);
            for (i, s) in generate(&cfg, 6, seed, Budget::default())
                .unwrap()
                .iter()
                .enumerate()
            {
                let inst = &s.instance;
                // Random plans too: collisions, holes and moves off the grid.
                let random = Plan {
                    moves: (0..agents)
                        .map(|a| {
                            (0..(a * 7 + i * 3) % 9)
                                .map(|t| moves[(a * 31 + t * 17 + i * 5) % 5])
                                .collect()
                        })
                        .collect(),
                };
                for plan in [&s.plan, &random] {
                    let text = render_steps_plan(inst, plan);
                    assert_eq!(
                        text.lines().count(),
                        1 + plan.moves.iter().map(Vec::len).max().unwrap()
                    );
                    let back = parse_plan_in(&text, inst).unwrap();
                    let (a, b) = (simulate(inst, plan), simulate(inst, &back));
                    assert_eq!(
                        (a.failure.map(|f| f.kind), a.makespan, a.sum_of_costs),
                        (b.failure.map(|f| f.kind), b.makespan, b.sum_of_costs),
                        "{agents} agents, item {i}:\n{text}"
                    );
                }
            }
        }
    }

    #[test]
    fn steps_format_errors_name_the_agent_line_and_column() {
        let inst = inst();
        let first = "a (0,0) R b (2,2) U\n";
        for (body, at, what) in [
            // A wrong cell is false about where the agent is.
            (
                "a (0,1) b (2,1)",
                (2, 11),
                "agent 2 is after 1 move at (1,2), the plan says (2,1)",
            ),
            ("a (0,1) R", (2, 10), "names 1 of the 2 agents (next: `b`)"),
            (
                "b (1,2) U a (0,1) R",
                (2, 1),
                "expected agent 1's tag `a`, found \"b\"",
            ),
            ("a (0,1) R b (1,2) X", (2, 19), "\"X\" is not a move"),
            ("a (0,1) R b (1,2)", (2, 18), "agent 2's move is missing"),
            ("a R b (1,2) U", (2, 3), "R is not a cell"),
            (
                "a (0,1) R b (1,2) U c (0,0) W",
                (2, 21),
                "\"c\" after the last agent",
            ),
            ("a (0,1) R b (1,2", (2, 13), "missing its ')'"),
            (
                "a (0,1) b (1,2)\na (0,1) R b (1,2) U",
                (3, 1),
                "a line after the end cells of line 2",
            ),
            (
                "a (0,1) b (1,2)\n ,",
                (3, 2),
                "a line after the end cells of line 2",
            ),
        ] {
            let e = parse_plan_in(&format!("{first}{body}"), &inst).unwrap_err();
            assert_eq!((e.line, e.column), at, "{body:?}: {e}");
            assert!(e.message.contains(what), "{body:?}: {e}");
        }
        let e = parse_plan_in("a (0,1) R b (2,2) U", &inst).unwrap_err();
        assert!(e.message.contains("agent 1 starts at (0,0)"), "{e}");
        // A line opening with a move where the cell should be is neither layout.
        let e = parse_plan_in("a R (0,1) b U (1,2)", &inst).unwrap_err();
        assert_eq!((e.line, e.column), (1, 1), "{e}");
    }
}
