//! `Instance` (a FrozenLake map with agents' starts and goals), `Move` and `Plan`.
//!
//! Cells are addressed by index `row * size + col`; row 0 is the top row, `U` decreases
//! the row. The JSON form is the documented interchange format (schemas/instance.json,
//! schemas/plan.json); it is validated on the way in so an `Instance` value is always
//! well formed.
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Smallest and largest map side accepted (the paper uses 3..10).
pub const MIN_SIZE: usize = 3;
pub const MAX_SIZE: usize = 32;
/// Agent count limits.
pub const MIN_AGENTS: usize = 1;
pub const MAX_AGENTS: usize = 8;

/// Index of a cell: `row * size + col`.
pub type Cell = u16;

/// Why an instance is malformed. Every variant names the offending field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InstanceError {
    #[error("size {0} is outside {MIN_SIZE}..={MAX_SIZE}")]
    Size(usize),
    #[error("grid has {got} rows, expected {size}")]
    Rows { got: usize, size: usize },
    #[error("grid row {row} has {got} cells, expected {size}")]
    RowLength { row: usize, got: usize, size: usize },
    #[error("grid row {row} col {col}: unknown tile {tile:?} (use 'F' for frozen, 'H' for hole)")]
    Tile { row: usize, col: usize, tile: char },
    #[error("{got} agents, expected {MIN_AGENTS}..={MAX_AGENTS}")]
    AgentCount { got: usize },
    #[error("agent {agent} {what} [{row}, {col}] is outside the {size}x{size} grid")]
    OutOfGrid {
        agent: usize,
        what: &'static str,
        row: usize,
        col: usize,
        size: usize,
    },
    #[error("agent {agent} {what} [{row}, {col}] is a hole")]
    OnHole {
        agent: usize,
        what: &'static str,
        row: usize,
        col: usize,
    },
    #[error("agents {a} and {b} share the {what} [{row}, {col}]")]
    Shared {
        a: usize,
        b: usize,
        what: &'static str,
        row: usize,
        col: usize,
    },
    #[error("agent names {names:?} for {agents} agents: expected one per agent, strictly increasing, from 1 up")]
    Names { names: Vec<u8>, agents: usize },
    /// A plan's move string holds a letter that is no move (`moves[index]`, 1-based
    /// `character` after spaces are dropped).
    #[error("moves[{index}] (agent {}): character {character} is {ch:?}, not one of U D L R W", .index + 1)]
    Move {
        index: usize,
        character: usize,
        ch: char,
    },
}

/// One agent's task.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub struct AgentSpec {
    /// `[row, col]` of the start cell.
    pub start: [u8; 2],
    /// `[row, col]` of the goal cell.
    pub goal: [u8; 2],
}

/// JSON form of an instance.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InstanceJson {
    /// Side length N of the N x N grid.
    pub size: usize,
    /// N strings of N tiles, top row first: 'F' frozen, 'H' hole.
    pub grid: Vec<String>,
    /// The agents, numbered from 1 in text and failures (index 0 here).
    pub agents: Vec<AgentSpec>,
}

/// A validated MAPF-FrozenLake instance.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "InstanceJson", into = "InstanceJson")]
pub struct Instance {
    size: usize,
    /// `holes[cell]` is true for a hole.
    holes: Vec<bool>,
    starts: Vec<Cell>,
    goals: Vec<Cell>,
    /// The numbers the agents go by in text (`agent 3: ...`), strictly increasing; None:
    /// `1..=k`. A presentation of the same problem ([`Instance::named`]): not in the JSON
    /// form, the canonical bytes or the content hash.
    names: Option<Box<[u8]>>,
}

impl JsonSchema for Instance {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Instance".into()
    }
    fn json_schema(g: &mut schemars::SchemaGenerator) -> schemars::Schema {
        InstanceJson::json_schema(g)
    }
}

impl Instance {
    /// Build and validate an instance from cell indices.
    pub fn new(
        size: usize,
        holes: Vec<bool>,
        starts: Vec<Cell>,
        goals: Vec<Cell>,
    ) -> Result<Instance, InstanceError> {
        if !(MIN_SIZE..=MAX_SIZE).contains(&size) {
            return Err(InstanceError::Size(size));
        }
        assert_eq!(holes.len(), size * size, "holes must cover the grid");
        assert_eq!(starts.len(), goals.len(), "one goal per start");
        let k = starts.len();
        if !(MIN_AGENTS..=MAX_AGENTS).contains(&k) {
            return Err(InstanceError::AgentCount { got: k });
        }
        for (what, cells) in [("start", &starts), ("goal", &goals)] {
            for (a, &c) in cells.iter().enumerate() {
                let (row, col) = (c as usize / size, c as usize % size);
                if c as usize >= size * size {
                    return Err(InstanceError::OutOfGrid {
                        agent: a + 1,
                        what,
                        row,
                        col,
                        size,
                    });
                }
                if holes[c as usize] {
                    return Err(InstanceError::OnHole {
                        agent: a + 1,
                        what,
                        row,
                        col,
                    });
                }
                if let Some(b) = cells[..a].iter().position(|&o| o == c) {
                    return Err(InstanceError::Shared {
                        a: b + 1,
                        b: a + 1,
                        what,
                        row,
                        col,
                    });
                }
            }
        }
        Ok(Instance {
            size,
            holes,
            starts,
            goals,
            names: None,
        })
    }

    /// The same problem with its agents called by `names` in text instead of `1..=k`
    /// (GRPO's named training agents, issue 53): one name per agent, strictly increasing,
    /// from 1 up. Simulation, solving and the content hash are unchanged; the prompt and
    /// plan texts ([`crate::text`]) use the names.
    pub fn named(mut self, names: &[u8]) -> Result<Instance, InstanceError> {
        let ok = names.len() == self.agents()
            && names.first().is_some_and(|&n| n >= 1)
            && names.windows(2).all(|w| w[0] < w[1]);
        if !ok {
            return Err(InstanceError::Names {
                names: names.to_vec(),
                agents: self.agents(),
            });
        }
        let plain = names.iter().enumerate().all(|(a, &n)| n as usize == a + 1);
        self.names = (!plain).then(|| names.into());
        Ok(self)
    }

    /// The number agent `a` (0-based) goes by in text: `a + 1` unless [`Instance::named`].
    pub fn name(&self, a: usize) -> usize {
        self.names.as_ref().map_or(a + 1, |n| n[a] as usize)
    }

    /// Whether the agents go by names other than `1..=k`.
    pub fn is_named(&self) -> bool {
        self.names.is_some()
    }

    pub fn size(&self) -> usize {
        self.size
    }
    pub fn agents(&self) -> usize {
        self.starts.len()
    }
    pub fn cells(&self) -> usize {
        self.size * self.size
    }
    pub fn is_hole(&self, cell: Cell) -> bool {
        self.holes[cell as usize]
    }
    pub fn holes(&self) -> &[bool] {
        &self.holes
    }
    pub fn hole_count(&self) -> usize {
        self.holes.iter().filter(|&&h| h).count()
    }
    pub fn starts(&self) -> &[Cell] {
        &self.starts
    }
    pub fn goals(&self) -> &[Cell] {
        &self.goals
    }
    pub fn row_col(&self, cell: Cell) -> (usize, usize) {
        (cell as usize / self.size, cell as usize % self.size)
    }
    pub fn cell(&self, row: usize, col: usize) -> Cell {
        (row * self.size + col) as Cell
    }

    /// Where `mv` takes an agent standing on `cell`, or `None` when it leaves the grid.
    #[inline]
    pub fn step(&self, cell: Cell, mv: Move) -> Option<Cell> {
        let n = self.size;
        let c = cell as usize;
        let (r, col) = (c / n, c % n);
        match mv {
            Move::W => Some(cell),
            Move::U => (r > 0).then(|| cell - n as Cell),
            Move::D => (r + 1 < n).then(|| cell + n as Cell),
            Move::L => (col > 0).then(|| cell - 1),
            Move::R => (col + 1 < n).then(|| cell + 1),
        }
    }

    /// Frozen neighbours of `cell` (not including waiting in place).
    pub fn neighbours(&self, cell: Cell) -> impl Iterator<Item = Cell> + '_ {
        [Move::U, Move::D, Move::L, Move::R]
            .into_iter()
            .filter_map(move |m| self.step(cell, m))
            .filter(move |&c| !self.holes[c as usize])
    }

    /// The longest plan the simulator accepts: longer sequences fail as `too_long`.
    /// Generous (twice the cell count) so that every optimal plan fits easily.
    pub fn horizon(&self) -> usize {
        2 * self.cells()
    }

    /// Canonical bytes for content addressing: format tag, size, agent count, the hole
    /// bitmap (row-major, LSB first) and the start and goal cells (u16 little-endian).
    pub fn canonical_bytes(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(4 + self.cells() / 8 + 1 + 4 * self.agents());
        b.push(1); // format tag
        b.push(self.size as u8);
        b.push(self.agents() as u8);
        let mut byte = 0u8;
        for (i, &h) in self.holes.iter().enumerate() {
            if h {
                byte |= 1 << (i % 8);
            }
            if i % 8 == 7 {
                b.push(byte);
                byte = 0;
            }
        }
        if self.cells() % 8 != 0 {
            b.push(byte);
        }
        for &c in self.starts.iter().chain(&self.goals) {
            b.extend_from_slice(&c.to_le_bytes());
        }
        b
    }

    /// Content hash of the instance (blake3 of its canonical bytes).
    pub fn content_hash(&self) -> blake3::Hash {
        blake3::Hasher::new_derive_key("mapf-ledger 2026 instance v1")
            .update(&self.canonical_bytes())
            .finalize()
    }

    /// Grid rows as text, top row first ('F' frozen, 'H' hole).
    pub fn grid_rows(&self) -> Vec<String> {
        (0..self.size)
            .map(|r| {
                (0..self.size)
                    .map(|c| {
                        if self.holes[r * self.size + c] {
                            'H'
                        } else {
                            'F'
                        }
                    })
                    .collect()
            })
            .collect()
    }
}

impl TryFrom<InstanceJson> for Instance {
    type Error = InstanceError;
    fn try_from(j: InstanceJson) -> Result<Self, Self::Error> {
        let n = j.size;
        if !(MIN_SIZE..=MAX_SIZE).contains(&n) {
            return Err(InstanceError::Size(n));
        }
        if j.grid.len() != n {
            return Err(InstanceError::Rows {
                got: j.grid.len(),
                size: n,
            });
        }
        let mut holes = Vec::with_capacity(n * n);
        for (row, line) in j.grid.iter().enumerate() {
            let chars: Vec<char> = line.chars().collect();
            if chars.len() != n {
                return Err(InstanceError::RowLength {
                    row,
                    got: chars.len(),
                    size: n,
                });
            }
            for (col, ch) in chars.into_iter().enumerate() {
                match ch {
                    'F' | 'f' | '.' | 'S' | 'G' => holes.push(false),
                    'H' | 'h' | '#' => holes.push(true),
                    tile => return Err(InstanceError::Tile { row, col, tile }),
                }
            }
        }
        let k = j.agents.len();
        if !(MIN_AGENTS..=MAX_AGENTS).contains(&k) {
            return Err(InstanceError::AgentCount { got: k });
        }
        let mut starts = Vec::with_capacity(k);
        let mut goals = Vec::with_capacity(k);
        for (a, spec) in j.agents.iter().enumerate() {
            for (what, [row, col], out) in [
                ("start", spec.start, &mut starts),
                ("goal", spec.goal, &mut goals),
            ] {
                let (row, col) = (row as usize, col as usize);
                if row >= n || col >= n {
                    return Err(InstanceError::OutOfGrid {
                        agent: a + 1,
                        what,
                        row,
                        col,
                        size: n,
                    });
                }
                out.push((row * n + col) as Cell);
            }
        }
        Instance::new(n, holes, starts, goals)
    }
}

impl From<Instance> for InstanceJson {
    fn from(i: Instance) -> Self {
        let rc = |c: Cell| {
            let (r, col) = i.row_col(c);
            [r as u8, col as u8]
        };
        InstanceJson {
            size: i.size,
            grid: i.grid_rows(),
            agents: i
                .starts
                .iter()
                .zip(&i.goals)
                .map(|(&s, &g)| AgentSpec {
                    start: rc(s),
                    goal: rc(g),
                })
                .collect(),
        }
    }
}

/// One timestep's move for one agent. `W` waits in place.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
pub enum Move {
    U,
    D,
    L,
    R,
    W,
}

impl Move {
    pub const ALL: [Move; 5] = [Move::U, Move::D, Move::L, Move::R, Move::W];

    pub fn letter(self) -> char {
        match self {
            Move::U => 'U',
            Move::D => 'D',
            Move::L => 'L',
            Move::R => 'R',
            Move::W => 'W',
        }
    }

    /// Parse one move letter, case-insensitively.
    pub fn from_letter(c: char) -> Option<Move> {
        match c.to_ascii_uppercase() {
            'U' => Some(Move::U),
            'D' => Some(Move::D),
            'L' => Some(Move::L),
            'R' => Some(Move::R),
            'W' => Some(Move::W),
            _ => None,
        }
    }

    /// Index in [`Move::ALL`] (the action index a policy emits).
    pub fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Move {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.letter())
    }
}

/// Per-agent move sequences. JSON form: `{"moves": ["RRD", "DDW"]}`, one string per agent.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "PlanJson", into = "PlanJson")]
pub struct Plan {
    pub moves: Vec<Vec<Move>>,
}

/// JSON form of a plan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanJson {
    /// One string per agent over the letters U, D, L, R, W (case-insensitive; spaces ignored).
    pub moves: Vec<String>,
}

impl JsonSchema for Plan {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Plan".into()
    }
    fn json_schema(g: &mut schemars::SchemaGenerator) -> schemars::Schema {
        PlanJson::json_schema(g)
    }
}

impl TryFrom<PlanJson> for Plan {
    type Error = InstanceError;
    fn try_from(j: PlanJson) -> Result<Self, InstanceError> {
        let mut moves = Vec::with_capacity(j.moves.len());
        for (a, s) in j.moves.iter().enumerate() {
            let mut seq = Vec::with_capacity(s.len());
            for (i, ch) in s.chars().filter(|c| !c.is_whitespace()).enumerate() {
                seq.push(Move::from_letter(ch).ok_or(InstanceError::Move {
                    index: a,
                    character: i + 1,
                    ch,
                })?);
            }
            moves.push(seq);
        }
        Ok(Plan { moves })
    }
}

impl From<Plan> for PlanJson {
    fn from(p: Plan) -> Self {
        PlanJson {
            moves: p
                .moves
                .iter()
                .map(|s| s.iter().map(|m| m.letter()).collect())
                .collect(),
        }
    }
}

impl Plan {
    /// The plan given by the cell paths (each path starts at the agent's start).
    pub fn from_paths(inst: &Instance, paths: &[Vec<Cell>]) -> Plan {
        let moves = paths
            .iter()
            .map(|p| {
                p.windows(2)
                    .map(|w| {
                        Move::ALL
                            .into_iter()
                            .find(|&m| inst.step(w[0], m) == Some(w[1]))
                            .expect("consecutive path cells are adjacent")
                    })
                    .collect()
            })
            .collect();
        Plan { moves }
    }

    /// The longest sequence's length.
    pub fn len(&self) -> usize {
        self.moves.iter().map(Vec::len).max().unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Instance {
        serde_json::from_str(
            r#"{"size":3,"grid":["FFF","FHF","FFF"],"agents":[{"start":[0,0],"goal":[2,2]},{"start":[2,2],"goal":[0,0]}]}"#,
        )
        .unwrap()
    }

    #[test]
    fn json_round_trip_and_validation_names_the_field() {
        let i = sample();
        assert_eq!(i.agents(), 2);
        assert!(i.is_hole(4));
        let back: Instance = serde_json::from_str(&serde_json::to_string(&i).unwrap()).unwrap();
        assert_eq!(back, i);
        let err = serde_json::from_str::<Instance>(
            r#"{"size":3,"grid":["FFF","FHF","FFF"],"agents":[{"start":[1,1],"goal":[2,2]}]}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("agent 1 start [1, 1] is a hole"), "{err}");
        let err = serde_json::from_str::<Instance>(
            r#"{"size":3,"grid":["FFF","FXF","FFF"],"agents":[{"start":[0,0],"goal":[2,2]}]}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("row 1 col 1"), "{err}");
    }

    #[test]
    fn steps_respect_edges() {
        let i = sample();
        assert_eq!(i.step(0, Move::U), None);
        assert_eq!(i.step(0, Move::L), None);
        assert_eq!(i.step(0, Move::R), Some(1));
        assert_eq!(i.step(0, Move::D), Some(3));
        assert_eq!(i.step(8, Move::R), None);
        assert_eq!(i.neighbours(1).collect::<Vec<_>>(), vec![0, 2]);
    }

    #[test]
    fn plan_json_is_case_and_space_tolerant_with_precise_errors() {
        let p: Plan = serde_json::from_str(r#"{"moves":["r r d","dDw"]}"#).unwrap();
        assert_eq!(p.moves[0], vec![Move::R, Move::R, Move::D]);
        let err = serde_json::from_str::<Plan>(r#"{"moves":["RR","DX"]}"#)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("moves[1] (agent 2): character 2 is 'X'"),
            "{err}"
        );
    }
}
