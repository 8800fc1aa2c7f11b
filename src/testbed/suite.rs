//! The paper's benchmark suites: a held-out 2-agent validation set over sizes 3..10 and
//! test sets of 3 agents (sizes 3..10), 4 agents (4..10) and 5 agents (5..10), M
//! instances per (agents, size) cell.
//!
//! Each suite is deterministic from its name and seed and content-addressed: its hash is
//! blake3 over the canonical bytes of every instance, its optima and its plan, in cell
//! order, so any change to generation or solving is visible as a new hash.
//!
//! A suite can be **stratified by wait ratio** (`SuiteSpec::wait_ratios`, the paper's
//! test subsets): each cell's `per_cell` items are then split into equal consecutive
//! subsets, one per wait ratio in the order listed, and item j of the subset for ratio w
//! needs coordination with probability w (drawn from that item's own seed node). Without
//! wait ratios a suite is exactly what it always was (same items, same hash).
use super::config::{max_hole_ratio, ConfigError};
use super::generator::{generate_one, GenerateError, InstanceSpec, Solved};
use super::solver::Budget;
use crate::seed::Seed;
use rand::Rng as _;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

/// Most instances per suite cell (`env suite`, as `eval --per-cell`).
pub const MAX_PER_CELL: usize = 100_000;

/// Context string for suite hashes.
const SUITE_CONTEXT: &str = "mapf-ledger 2026 suite v1";

/// Which suite.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SuiteName {
    /// 2 agents, sizes 3..10: what engineers get to see.
    Val,
    /// 3 agents x 3..10, 4 agents x 4..10, 5 agents x 5..10.
    Test,
}

/// A name that is no suite.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("expected val or test")]
pub struct UnknownSuite;

/// The suite a command line names: `val` (or `validation`) or `test`.
impl std::str::FromStr for SuiteName {
    type Err = UnknownSuite;

    fn from_str(s: &str) -> Result<SuiteName, UnknownSuite> {
        match s {
            "val" | "validation" => Ok(SuiteName::Val),
            "test" => Ok(SuiteName::Test),
            _ => Err(UnknownSuite),
        }
    }
}

impl SuiteName {
    pub fn as_str(self) -> &'static str {
        match self {
            SuiteName::Val => "val",
            SuiteName::Test => "test",
        }
    }
    /// The (agents, size) cells of the paper's protocol, up to `max_size`.
    pub fn cells(self, max_size: usize) -> Vec<(usize, usize)> {
        match self {
            SuiteName::Val => (3..=max_size).map(|s| (2, s)).collect(),
            SuiteName::Test => (3..=5usize)
                .flat_map(|k| (k..=max_size).map(move |s| (k, s)))
                .collect(),
        }
    }
}

/// How to build a suite.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SuiteSpec {
    pub name: SuiteName,
    /// Instances per (agents, size) cell (150 in the paper).
    pub per_cell: usize,
    /// Largest map size (10 in the paper).
    pub max_size: usize,
    pub seed: u64,
    /// Stratification by wait ratio (empty: none, coordination left to chance): each
    /// cell's items are split into `wait_ratios.len()` equal consecutive subsets, in this
    /// order; `per_cell` must be a multiple of the count.
    #[serde(default)]
    pub wait_ratios: Vec<f64>,
}

impl SuiteSpec {
    pub fn paper(name: SuiteName) -> SuiteSpec {
        SuiteSpec {
            name,
            per_cell: 150,
            max_size: 10,
            seed: 2026,
            wait_ratios: Vec::new(),
        }
    }

    /// Items per subset of a cell (`per_cell` without stratification).
    pub fn per_subset(&self) -> usize {
        self.per_cell / self.wait_ratios.len().max(1)
    }

    /// Why this spec cannot be built, if it cannot: a `per_cell` that the wait ratios do
    /// not divide, a ratio outside [0, 1], or a ratio listed twice.
    pub fn check(&self) -> Result<(), ConfigError> {
        check_wait_ratios(&self.wait_ratios, Some(self.per_cell))
    }
}

/// The stratification rules (see [`SuiteSpec::wait_ratios`]): ratios in [0, 1], none
/// listed twice, and (`per_cell` given) a `per_cell` they divide into equal subsets.
/// The message says what is wrong; the caller names the field.
pub fn check_wait_ratios(wait_ratios: &[f64], per_cell: Option<usize>) -> Result<(), ConfigError> {
    for (i, &w) in wait_ratios.iter().enumerate() {
        if !(0.0..=1.0).contains(&w) {
            return Err(ConfigError::WaitRatioRange(w));
        }
        if wait_ratios[..i]
            .iter()
            .any(|&v| subset_label(v) == subset_label(w))
        {
            return Err(ConfigError::WaitRatioTwice(w));
        }
    }
    let n = wait_ratios.len();
    match per_cell {
        Some(per_cell) if n > 0 && per_cell % n != 0 => Err(ConfigError::WaitRatioSubsets {
            per_cell,
            subsets: n,
        }),
        _ => Ok(()),
    }
}

/// The name of a wait-ratio subset: `wait0.25`, `wait0.50`, ... (two decimals, more when
/// the ratio needs them). Evaluations of a subset are recorded as `SUITE@LABEL`.
pub fn subset_label(wait_ratio: f64) -> String {
    let two = format!("{wait_ratio:.2}");
    if two.parse::<f64>() == Ok(wait_ratio) {
        format!("wait{two}")
    } else {
        format!("wait{wait_ratio}")
    }
}

/// The subset of item `j` (0-based within its cell) of a cell of `per_cell` items split
/// into `subsets` equal consecutive runs (None without stratification).
pub fn subset_of(j: usize, per_cell: usize, subsets: usize) -> Option<usize> {
    (subsets > 0).then(|| j / (per_cell / subsets).max(1))
}

/// One (agents, size) cell of a suite.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SuiteCell {
    pub agents: usize,
    pub size: usize,
    pub items: Vec<Solved>,
}

/// A generated suite.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Suite {
    pub name: SuiteName,
    /// blake3 (hex) over the canonical bytes of every item, in cell order.
    pub hash: String,
    pub cells: Vec<SuiteCell>,
    /// The wait ratios the cells are stratified by (see [`SuiteSpec::wait_ratios`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub wait_ratios: Vec<f64>,
}

/// Build a suite. Hole ratios are spread uniformly over what each cell allows (up to
/// 0.5, fewer where the agents need room); coordination is left to chance, as in the
/// paper's test sets, unless the spec stratifies by wait ratio.
pub fn build(spec: &SuiteSpec, budget: Budget) -> Result<Suite, GenerateError> {
    spec.check()?;
    let root = Seed::named(spec.name.as_str(), spec.seed);
    let cells: Vec<(usize, usize)> = spec.name.cells(spec.max_size);
    let jobs: Vec<(usize, usize, usize)> = cells
        .iter()
        .flat_map(|&(k, s)| (0..spec.per_cell).map(move |j| (k, s, j)))
        .collect();
    let per_subset = spec.per_subset();
    let items: Vec<Solved> = jobs
        .into_par_iter()
        .map(|(k, s, j)| {
            let cell = root.child("cell", (k * 100 + s) as u64);
            // Unstratified: today's node. Stratified: item j' of the subset for ratio w
            // has its own node under the ratio's bits, so a subset's items do not depend
            // on which other ratios are listed or in what order.
            let (node, wait) = match subset_of(j, spec.per_cell, spec.wait_ratios.len()) {
                None => (cell.child("instance", j as u64), None),
                Some(w) => {
                    let ratio = spec.wait_ratios[w];
                    let node = cell
                        .child("wait", ratio.to_bits())
                        .child("instance", (j - w * per_subset) as u64);
                    (node, Some(ratio))
                }
            };
            let mut rng = node.rng();
            let hole_ratio = rng.random::<f64>() * max_hole_ratio(s, k);
            let coordination = wait.map(|w| rng.random_bool(w));
            let spec = InstanceSpec {
                size: s,
                agents: k,
                hole_ratio,
                coordination,
            };
            generate_one(&spec, &mut rng, budget)
        })
        .collect::<Result<_, _>>()?;
    Ok(assemble(spec, cells, items))
}

/// Items in cell order, `spec.per_cell` per cell, grouped into the suite's cells.
fn assemble(spec: &SuiteSpec, cells: Vec<(usize, usize)>, items: Vec<Solved>) -> Suite {
    let mut it = items.into_iter();
    let cells: Vec<SuiteCell> = cells
        .into_iter()
        .map(|(agents, size)| SuiteCell {
            agents,
            size,
            items: it.by_ref().take(spec.per_cell).collect(),
        })
        .collect();
    Suite {
        name: spec.name,
        hash: suite_hash(&cells),
        cells,
        wait_ratios: spec.wait_ratios.clone(),
    }
}

/// A suite from its items as recorded (in cell order, `spec.per_cell` per cell), e.g.
/// the instance blobs a ledger's stage 0 stored. None when the items do not fill the
/// spec's cells exactly.
pub fn from_items(spec: &SuiteSpec, items: Vec<Solved>) -> Option<Suite> {
    let cells: Vec<(usize, usize)> = spec.name.cells(spec.max_size);
    if items.len() != cells.len() * spec.per_cell || spec.check().is_err() {
        return None;
    }
    let suite = assemble(spec, cells, items);
    let fits = suite.cells.iter().all(|c| {
        c.items
            .iter()
            .all(|i| i.instance.agents() == c.agents && i.instance.size() == c.size)
    });
    fits.then_some(suite)
}

fn suite_hash(cells: &[SuiteCell]) -> String {
    let mut h = blake3::Hasher::new_derive_key(SUITE_CONTEXT);
    for c in cells {
        h.update(&(c.agents as u32).to_le_bytes());
        h.update(&(c.size as u32).to_le_bytes());
        h.update(&(c.items.len() as u32).to_le_bytes());
        for it in &c.items {
            it.write_canonical(&mut h);
        }
    }
    h.finalize().to_hex().to_string()
}

impl Solved {
    /// Canonical bytes of an item for content addressing: the instance, its optima and
    /// its plan, little-endian, length-prefixed.
    pub fn write_canonical(&self, h: &mut blake3::Hasher) {
        h.update(&self.instance.canonical_bytes());
        h.update(&self.reference.sum_of_costs.to_le_bytes());
        h.update(&self.reference.makespan.to_le_bytes());
        h.update(&(self.plan.moves.len() as u32).to_le_bytes());
        for seq in &self.plan.moves {
            h.update(&(seq.len() as u32).to_le_bytes());
            let letters: Vec<u8> = seq.iter().map(|m| m.letter() as u8).collect();
            h.update(&letters);
        }
    }
}

impl Suite {
    pub fn len(&self) -> usize {
        self.cells.iter().map(|c| c.items.len()).sum()
    }

    /// The subset (index into `wait_ratios`) of every item, in suite order; empty when
    /// the suite is not stratified.
    pub fn item_subsets(&self) -> Vec<usize> {
        let w = self.wait_ratios.len();
        self.cells
            .iter()
            .flat_map(|c| (0..c.items.len()).filter_map(move |j| subset_of(j, c.items.len(), w)))
            .collect()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
