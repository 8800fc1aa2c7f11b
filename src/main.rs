//! The `ledger` binary: see `mapf_ledger::cli`.
fn main() {
    mapf_ledger::cli::main();
}
