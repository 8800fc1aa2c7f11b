//! What the commands print as text, one module per command family, each function
//! returning the whole text (the CLI writes it): [`ledger`]: the ledger's own commands
//! (log, show, branches, verify, recover, gc, rebuild, bundle, fetch); [`samples`]:
//! `show --samples`; [`testbed`]: `env …`; [`audit`]: the prompts and replies of
//! `audit --prompt/--reply`; [`compare`]: `compare`; [`engineers`]: `engineer list`;
//! [`lm`]: `lm generate`.
pub mod audit;
pub mod compare;
pub mod engineers;
pub mod ledger;
pub mod lm;
pub mod samples;
pub mod testbed;
