//! mapf-ledger: an event-sourced experiment ledger for LLM-designed training
//! environments on the MAPF-FrozenLake testbed.
//!
//! Data flows top to bottom: [`env`] (the testbed) -> [`ledger`] -> CLI views.
pub mod cli;
pub mod engineer;
pub mod env;
pub mod executor;
pub mod figures;
pub mod ledger;
pub mod replay;
pub mod report;
pub mod schemas;
pub mod seed;
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
