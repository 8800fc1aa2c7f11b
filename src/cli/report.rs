//! `ledger report`: the experiment as one self-contained HTML page with its figures;
//! `ledger serve`: the same page, live.
use super::CliResult;
use std::path::{Path, PathBuf};

#[derive(clap::Args, Debug)]
pub struct ReportArgs {
    /// Branches to show, in this order (repeatable; default: every branch except study
    /// runs `study-*`).
    #[arg(long = "branch", value_name = "BRANCH")]
    pub branches: Vec<String>,
    /// A study directory (written by `ledger study`): adds its means with 95% intervals.
    #[arg(long, value_name = "DIR")]
    pub study: Option<PathBuf>,
    /// Output directory: index.html and figures/*.svg|png.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
}

pub fn run(dir: &Path, args: ReportArgs) -> CliResult {
    let study = args.study.as_deref();
    let (report, written) = mapf_ledger::report::report_dir(dir, &args.branches, study, &args.out)?;
    print!(
        "{}",
        mapf_ledger::report::written_line(&report, &written, &args.out)
    );
    Ok(())
}

#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// Address to listen on, HOST:PORT or ADDR:PORT (port 0: any free port, printed).
    /// Another host than localhost (127.0.0.1 / ::1) shows the ledger to the network.
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:8473",
          value_parser = mapf_ledger::report::serve::bind_addr)]
    pub bind: std::net::SocketAddr,
    /// Branches to show, in this order (repeatable; default: every branch except study
    /// runs, including branches created while serving).
    #[arg(long = "branch", value_name = "BRANCH")]
    pub branches: Vec<String>,
    /// A study directory (written by `ledger study`): adds its means with 95% intervals.
    #[arg(long, value_name = "DIR")]
    pub study: Option<PathBuf>,
}

pub fn serve(dir: &Path, args: ServeArgs) -> CliResult {
    let addr = args.bind;
    let opts = mapf_ledger::report::serve::ServeOptions {
        ledger_arg: dir.display().to_string(),
        branches: args.branches,
        study: args.study,
    };
    let ready = |at: std::net::SocketAddr| {
        if !at.ip().is_loopback() {
            eprintln!(
                "ledger: serving on {at}, which other machines can reach: the ledger's contents are visible to them"
            );
        }
        println!(
            "serving {} at http://{at}/ (read-only; the page follows the ledger; Ctrl-C stops)",
            dir.display()
        );
        use std::io::Write as _;
        let _ = std::io::stdout().flush();
    };
    let addr = addr.to_string();
    Ok(mapf_ledger::report::serve::serve(dir, &addr, opts, ready)?)
}
