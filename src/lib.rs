//! mapf-ledger: an event-sourced experiment ledger for LLM-designed training
//! environments on the MAPF-FrozenLake testbed. This crate is the part that trains.
//!
//! Data flows top to bottom: [`train`] -> [`engineer`] -> [`stage`] -> [`replay`] ->
//! [`study`] -> the `ledger` binary (its private `cli`).
//!
//! The workspace's other crates sit below this one and link no libtorch:
//! - `ledger-core` (`src/core`): events, plans with every config type, the Ledger, the
//!   read-only views, figures and the report; re-exported here under their own names
//!   ([`record`], [`plan`], [`ledger`], [`context`], [`figures`], [`views`], [`report`],
//!   [`output`]);
//! - `mapf-testbed` (`src/testbed`): MAPF-FrozenLake and the seed tree ([`env`](mod@env),
//!   [`seed`]);
//! - `ledger-store` (`src/store`): how bytes are kept (through [`ledger`]).
pub use ledger_core::{context, env, figures, ledger, output, plan, record, report, seed, views};

pub mod diagnosis;

/// What a signal does to a command (any build).
pub mod interrupt;

// Everything below trains, or runs what trains: it needs libtorch (the `train`
// feature, on by default).
#[cfg(feature = "train")]
pub mod engineer;
#[cfg(feature = "train")]
pub mod executor;
#[cfg(feature = "train")]
pub mod plan_check;
#[cfg(feature = "train")]
pub mod replay;
#[cfg(feature = "train")]
pub mod schemas;
#[cfg(feature = "train")]
pub mod stage;
#[cfg(feature = "train")]
pub mod study;
#[cfg(feature = "train")]
pub mod train;

#[cfg(all(test, feature = "train"))]
mod tests {
    /// A broken libtorch setup must fail CI: run a real tensor op through tch.
    #[test]
    fn libtorch_links_and_computes() {
        let t = tch::Tensor::from_slice(&[1.0f32, 2.0, 3.5]);
        let s = (&t * 2.0).sum(tch::Kind::Float).double_value(&[]);
        assert_eq!(s, 13.0);
    }
}
