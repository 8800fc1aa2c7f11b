//! The `ledger` binary: argument parsing and dispatch ([`cli`]), thin over the library.
mod cli;

fn main() {
    cli::main();
}
