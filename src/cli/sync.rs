//! Moving history between ledgers: `ledger bundle` writes refs and everything they reach
//! into one file; `ledger fetch` copies missing objects in from a bundle or another
//! ledger directory; `ledger init --from-bundle` starts a worker ledger from a bundle.
use super::CliResult;
use mapf_ledger::ledger::bundle::{self, Bundle};
use mapf_ledger::ledger::Ledger;
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

pub fn bundle(dir: &Path, args: BundleArgs) -> CliResult {
    mapf_ledger::output::check_file("--out", &args.out)?;
    let l = Ledger::open_read_only(dir)?;
    let w = l.write_bundle(&args.branches, &args.out)?;
    print!(
        "{}",
        view::bundle(&args.out, w.events, w.blobs, w.bytes, &w.refs)
    );
    Ok(())
}

pub fn fetch(dir: &Path, args: FetchArgs) -> CliResult {
    bundle::check_prefix(args.prefix.as_deref())?;
    let mut l = super::open_writer(dir)?;
    let r = l.fetch_from(&args.source, args.prefix.as_deref())?;
    let what = format!("fetched {}", args.source.display());
    super::say(args.json, &r, |r| view::fetch(r, &what))
}

pub fn init_from_bundle(dir: &Path, file: &Path) -> CliResult {
    let b = Bundle::read(file)?;
    let (_, r) = Ledger::create_from_bundle(dir, &b)?;
    let what = format!("created ledger {} from {}", dir.display(), file.display());
    super::say(false, &r, |r| view::fetch(r, &what))
}
