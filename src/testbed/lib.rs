//! MAPF-FrozenLake, the paper's testbed, as its own crate: instances and plans,
//! simulation, the reference solver, the configurable generator, text rendering/parsing,
//! the benchmark suites, tables in the paper's layout and MovingAI import, plus the
//! [`seed`] tree every random choice flows from.
//!
//! It depends on no tensor library and no ledger: the application crate (`mapf-ledger`)
//! re-exports it as `env` (and `seed`), and its tests run without libtorch
//! (`cargo test -p mapf-testbed`).
pub mod baseline;
pub mod batch;
pub mod config;
pub mod coordination;
pub mod files;
pub mod generator;
pub mod instance;
pub mod movingai;
pub mod seed;
pub mod simulate;
pub mod solver;
pub mod suite;
pub mod table;
pub mod text;
pub mod verdict;

pub use config::{project, Clip, ConfigProposal, GeneratorConfig, RefusedField, SizeConfig};
pub use generator::{generate, Solved};
pub use instance::{Cell, Instance, Move, Plan};
pub use simulate::{simulate, CostMetric, Failure, FailureKind, Outcome, Reference};
pub use solver::{solve, Budget, Solution, SolveError};
pub use suite::{Suite, SuiteName, SuiteSpec};
pub use table::{CellCounts, ResultTable};
