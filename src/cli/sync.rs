//! Moving history between ledgers: `ledger bundle` writes refs and everything they reach
//! into one file; `ledger fetch` copies missing objects in from a bundle or another
//! ledger directory; `ledger init --from-bundle` starts a worker ledger from a bundle.
use super::{CliError, CliResult};
use mapf_ledger::ledger::bundle::{Bundle, FetchReport};
use mapf_ledger::ledger::{Ledger, LedgerError};
use mapf_ledger::views::text::ledger as view;
use std::path::{Path, PathBuf};

#[derive(clap::Args, Debug)]
pub struct BundleArgs {
    /// BRANCH or BRANCH@stageN (everything through stage N's last event); repeatable.
    #[arg(long = "branch", value_name = "BRANCH[@stageN]", required = true)]
    pub branches: Vec<String>,
    /// The bundle file to write.
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
}

#[derive(clap::Args, Debug)]
pub struct FetchArgs {
    /// A bundle file or a ledger directory.
    #[arg(value_name = "SRC")]
    pub source: PathBuf,
    /// Put the incoming branches under this namespace (e.g. `worker1/`).
    #[arg(long, value_name = "NAME/")]
    pub prefix: Option<String>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

use super::ledger_error as err;

pub fn bundle(dir: &Path, args: BundleArgs) -> CliResult {
    mapf_ledger::output::check_file("--out", &args.out)?;
    let l = Ledger::open_read_only(dir).map_err(err)?;
    let refs = l.refs_named(&args.branches).map_err(err)?;
    let b = Bundle::collect(
        &l,
        &refs,
        &|_| false,
        &|_| false,
        &mapf_ledger::record::checkpoint::referenced_blobs,
    )
    .map_err(err)?;
    let bytes = b.write(&args.out).map_err(err)?;
    let (events, blobs) = (b.events.len(), b.blobs.len());
    print!("{}", view::bundle(&args.out, events, blobs, bytes, &refs));
    Ok(())
}

fn say(r: &FetchReport, json: bool, what: &str) -> CliResult {
    if json {
        println!("{}", serde_json::to_string_pretty(r).expect("serialises"));
    } else {
        print!("{}", view::fetch(r, what));
    }
    Ok(())
}

pub fn fetch(dir: &Path, args: FetchArgs) -> CliResult {
    if let Some(p) = &args.prefix {
        if !p.ends_with('/') {
            return Err(CliError::input(format!(
                "--prefix {p}: a namespace ends with `/` (e.g. `{p}/`)"
            )));
        }
    }
    let mut l = super::open_writer(dir).map_err(err)?;
    let b = Bundle::from_source(
        &args.source,
        &l,
        &mapf_ledger::record::checkpoint::referenced_blobs,
    )
    .map_err(|e| match e {
        LedgerError::Store(ledger_store::StoreError::Io { .. })
        | LedgerError::Store(ledger_store::StoreError::NotALedger { .. }) => {
            CliError::input(format!(
                "{}: not a bundle file or ledger directory ({e})",
                args.source.display()
            ))
        }
        e => err(e),
    })?;
    let r = l.fetch(&b, args.prefix.as_deref()).map_err(err)?;
    say(&r, args.json, &format!("fetched {}", args.source.display()))
}

pub fn init_from_bundle(dir: &Path, file: &Path) -> CliResult {
    let b = Bundle::read(file).map_err(err)?;
    let (_, r) = Ledger::create_from_bundle(dir, &b).map_err(err)?;
    say(
        &r,
        false,
        &format!("created ledger {} from {}", dir.display(), file.display()),
    )
}
