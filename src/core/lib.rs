//! ledger-core: everything of mapf-ledger that does not train, and so links no
//! libtorch. An auditor, reviewer or CI job reads, verifies, compares, reports and
//! fetches a ledger with this crate alone.
//!
//! Data flows top to bottom, and imports only point down (`tests/layering.rs`):
//! [`record`] (events, the trainer's records, projections) -> [`plan`] (plan files and
//! every config type in them, the trainer's too) -> [`ledger`] (the Ledger: facts,
//! branches, verify, gc, bundles, recover) -> [`context`] (the five context modules every
//! engineer reads) -> [`figures`] -> [`views`] (what read commands show) -> [`report`].
//! Beside them at the bottom, [`output`]: output files named on the command line,
//! checked before work and written whole.
//!
//! Below it sit `mapf-testbed` (re-exported as [`env`](mod@env) and [`seed`]) and
//! `ledger-store` (re-exported through [`ledger`]). The application crate above it adds
//! the trainer, the engineers, stages, replay and studies.
pub mod context;
pub use mapf_testbed as env;
pub mod figures;
pub mod ledger;
pub mod output;
pub mod plan;
pub mod record;
pub mod report;
pub use mapf_testbed::seed;
pub mod views;
