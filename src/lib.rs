//! mapf-ledger: an event-sourced experiment ledger for LLM-designed training
//! environments on the MAPF-FrozenLake testbed.
//!
//! Data flows top to bottom: [`env`](mod@env) (the testbed) -> [`ledger`] -> CLI views.
//!
//! The workspace's other crates sit below this one: `mapf-testbed` (`src/testbed`, the
//! MAPF-FrozenLake environment and the seed tree; re-exported here as [`env`](mod@env) and
//! [`seed`]) and `ledger-store` (`src/store`, the storage engine; re-exported through
//! [`ledger`]). Neither links libtorch.
pub mod cli;
pub mod engineer;
pub use mapf_testbed as env;
pub mod executor;
pub mod figures;
pub mod ledger;
pub mod plan;
pub mod record;
pub mod replay;
pub mod report;
pub mod schemas;
pub use mapf_testbed::seed;
pub mod stage;
pub mod study;
pub mod train;
pub mod views;

#[cfg(test)]
mod tests {
    /// A broken libtorch setup must fail CI: run a real tensor op through tch.
    #[test]
    fn libtorch_links_and_computes() {
        let t = tch::Tensor::from_slice(&[1.0f32, 2.0, 3.5]);
        let s = (&t * 2.0).sum(tch::Kind::Float).double_value(&[]);
        assert_eq!(s, 13.0);
    }
}
