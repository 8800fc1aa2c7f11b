//! Every integration test of the application in one test binary (`cargo test --test
//! integration`; one file's tests: `cargo test --test integration replay::`). One binary
//! instead of one per file: CI compiles and links the shared helpers and the library's
//! generic code once, not ~36 times, and the test threads take the next test from every
//! file, so a file with one long test no longer leaves a core idle. Each `tests/NAME.rs`
//! is a module below; `tests/layering.rs` fails if one is not listed here (Cargo's
//! automatic discovery of test files is off, so an unlisted file would never run).
mod common;

mod base_model;
mod cli_env;
mod cli_help;
mod cli_hostile;
mod codec_pins;
mod core_binary;
mod engineer_rl;
mod hf_parity;
mod input_errors;
mod interrupts;
mod layering;
mod ledger_chaos;
mod ledger_cli;
mod ledger_corruption;
mod ledger_crash;
mod ledger_decode;
mod ledger_live;
mod ledger_projection;
mod ledger_schemas;
mod ledger_store;
mod ledger_sync;
mod llm_engineer;
mod lm_bench;
mod lm_bf16;
mod lm_engineer;
mod lm_policy;
mod oracle;
mod paired;
mod paper;
mod pipeline;
mod plan_check;
mod readme;
mod replay;
mod report;
mod schemas;
mod show;
mod study_executors;
mod timing;
mod train_determinism;
mod views;
