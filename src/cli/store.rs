//! Ledger store commands: init, log, show, branches, verify, export, rebuild. Thin over
//! `mapf_ledger::ledger`; every read command takes `--json`.
use super::{out_err, print_json, say, write_out, CliError, CliResult};
use clap::{Subcommand, ValueEnum};
use mapf_ledger::ledger::{follow, Ledger};
use mapf_ledger::views::export::{self, EventRecord, Format};
use mapf_ledger::views::text::samples as view_samples;
use mapf_ledger::views::{samples, tensorboard, timing};
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Subcommand, Debug)]
pub enum StoreCommand {
    /// Create a ledger from a plan file (see ledgers/README.md), or from a bundle
    /// (`ledger bundle`) that starts at its genesis.
    Init {
        /// The plan file (TOML; see ledgers/README.md) the ledger is created from.
        #[arg(
            long,
            value_name = "FILE",
            required_unless_present = "from_bundle",
            conflicts_with = "from_bundle"
        )]
        plan: Option<PathBuf>,
        /// A bundle (`ledger bundle`) holding the genesis to create the ledger from.
        #[arg(long, value_name = "FILE")]
        from_bundle: Option<PathBuf>,
    },
    /// A branch's events, newest first; with --follow, oldest first and then each new
    /// event as it becomes durable, while a run writes.
    Log {
        /// A branch, BRANCH@stageN (its history through stage N) or an event's hash prefix.
        #[arg(long, default_value = "main", value_name = "REFERENCE")]
        branch: String,
        /// Show at most this many events (with --follow: of the history before it).
        #[arg(long)]
        limit: Option<usize>,
        /// Keep printing the branch's new events as they are committed; ends when no
        /// process is writing the ledger any more (or on Ctrl-C). --json prints JSON lines.
        #[arg(long, short = 'f')]
        follow: bool,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// A blob's bytes, as stored (hash or a prefix of 4+ hex digits), to standard output:
    /// an engineer's prompt and reply, a plan file, a context, a checkpoint.
    Cat {
        /// The blob's hash, or a prefix of 4+ hex digits.
        #[arg(value_name = "BLOB")]
        blob: String,
    },
    /// One event (hash prefix), a branch (its stages), or a stage (`branch@stageN`: a
    /// summary of its engineer, training, checkpoint, configuration, validation and test
    /// tables; the whole projection with --json).
    Show {
        /// An event's hash prefix, a branch, or BRANCH@stageN.
        #[arg(value_name = "REF")]
        reference: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// With a stage: up to N of its sampled plans (spread over its GRPO steps), each
        /// drawn on its grid with its reward and failure.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=10_000))]
        samples: Option<u32>,
        /// With --samples: only plans of this kind (a failure kind such as
        /// vertex_conflict or hole, or conflict, invalid, valid, optimal).
        #[arg(long, value_name = "KIND", requires = "samples")]
        kind: Option<mapf_ledger::views::samples::KindFilter>,
        /// With --samples: the greedy plans of the stage's evaluation on this suite
        /// (val or test; kept when the plan sets suites.keep_plans) instead of GRPO's.
        #[arg(long, value_name = "SUITE", requires = "samples", value_parser = ["val", "test"])]
        suite: Option<String>,
        /// With a stage: where its wall time went, phase by phase (seconds, share,
        /// tokens, tokens/s, and on a GPU the share of the memory roofline its decoding
        /// reached), from the unhashed metadata of its completion.
        #[arg(long, conflicts_with = "samples")]
        timing: bool,
    },
    /// Every branch with its head and fork point.
    Branches {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Recompute every event hash, parent link, ref and blob (exit 1 naming the first bad one).
    Verify {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Fail (exit 1) on warnings too: a damaged superseded REFS record, a blob
        /// `recover` recorded as lost, intact records no committed pack holds (past a
        /// committed length, or set aside by a writer).
        #[arg(long)]
        strict: bool,
    },
    /// Repair damage: restore the newest intact REFS snapshot, cut damaged pack bytes out
    /// of history (moving the intact records after them), move damaged blob files aside,
    /// bring back branch tips no ref reaches as `recovered/...` (intact records past the
    /// committed lengths and in `<ledger>/set-aside/` included), and rebuild. Copies of
    /// everything damaged are kept in `<ledger>/damaged/<n>/`.
    Recover {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Export events, per-cell metrics, decisions, branches or GRPO steps as JSON lines or
    /// CSV (every branch, or one branch's history).
    Export {
        /// jsonl, csv, or tensorboard (event files under --out DIR).
        #[arg(long, value_enum, default_value = "jsonl")]
        format: ExportFormat,
        /// events: every event; metrics: one row per (branch, stage, suite, agents,
        /// size); decisions: one row per engineer decision; branches: one row per branch;
        /// steps: one row per GRPO step (reward, zero-variance share, KL, clip, sampled
        /// validity overall and on instances that need coordination).
        /// (Not with --format tensorboard, which writes every scalar.)
        #[arg(long, value_enum)]
        what: Option<ExportWhat>,
        /// Only this history: a branch, BRANCH@stageN or an event's hash prefix.
        #[arg(long, value_name = "REFERENCE")]
        branch: Option<String>,
        /// Write here instead of standard output (with --format tensorboard: the
        /// directory that gets one run directory per branch; required).
        #[arg(long, value_name = "FILE|DIR")]
        out: Option<PathBuf>,
    },
    /// Remove every event and blob no branch reaches (deleted branches, scratch runs),
    /// crash-safe: killed at any instant, nothing a branch reaches is lost.
    Gc {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Branch operations (`ledger branch delete NAME`).
    #[command(subcommand)]
    Branch(BranchCommand),
    /// Recompute every projection from the log.
    Rebuild {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand, Debug)]
pub enum BranchCommand {
    /// Remove a branch's ref (its events stay until `ledger gc`; `main` cannot go).
    Delete {
        /// The branch to delete.
        name: String,
    },
}

#[derive(ValueEnum, Clone, Copy, Debug)]
pub enum ExportFormat {
    Jsonl,
    Csv,
    /// TensorBoard event files of scalars, one run directory per branch under --out.
    Tensorboard,
}

#[derive(ValueEnum, Clone, Copy, Debug)]
pub enum ExportWhat {
    Events,
    Metrics,
    Decisions,
    Branches,
    /// One row per GRPO step: reward, zero-variance share, KL, clip, sampled validity
    /// (and on instances that need coordination).
    Steps,
    /// One row per (branch, suite, agents, subset): the branch paired item by item with
    /// main (rates, difference with its 95% paired bootstrap interval, McNemar p).
    Paired,
    /// One row per (branch, evaluated stage, suite item): its outcome, instance hash and
    /// whether it needs coordination (to pair runs of different ledgers).
    Outcomes,
}

use mapf_ledger::views::text::ledger as view;

pub fn run(cmd: StoreCommand, ledger: &Path) -> CliResult {
    match cmd {
        StoreCommand::Init { plan, from_bundle } => match (plan, from_bundle) {
            (_, Some(b)) => super::sync::init_from_bundle(ledger, &b),
            (Some(plan), None) => init(&plan, ledger),
            (None, None) => Err(CliError::input(
                "init needs --plan FILE or --from-bundle FILE",
            )),
        },
        StoreCommand::Log {
            branch,
            limit,
            follow: true,
            json,
        } => follow(ledger, &branch, limit, json),
        StoreCommand::Log {
            branch,
            limit,
            follow: false,
            json,
        } => log(ledger, &branch, limit, json),
        StoreCommand::Cat { blob } => {
            let l = Ledger::open_read_only(ledger)?;
            let h = l.blob_by_prefix(&blob)?;
            write_out(&l.blob(&h)?)
        }
        StoreCommand::Show {
            reference,
            json,
            samples: Some(n),
            kind,
            suite,
            ..
        } => {
            let l = Ledger::open_read_only(ledger)?;
            let suite = suite.as_deref();
            let s = samples::samples_of(&l, &reference, n as usize, kind, suite)?;
            say(json, &s, |s| {
                view_samples::render(&s.branch, s.stage, suite, s)
            })
        }
        StoreCommand::Show {
            reference,
            json,
            timing: true,
            ..
        } => {
            let l = Ledger::open_read_only(ledger)?;
            say(json, &timing::timing_of(&l, &reference)?, timing::render)
        }
        StoreCommand::Show {
            reference, json, ..
        } => show(ledger, &reference, json),
        StoreCommand::Branches { json } => {
            let mut l = Ledger::open_read_only(ledger)?;
            let rows = mapf_ledger::views::branches::branches(&mut l)?;
            say(json, &rows, |r| view::branches(r))
        }
        StoreCommand::Verify { json, strict } => verify(ledger, json, strict),
        StoreCommand::Recover { json } => {
            let r = mapf_ledger::ledger::recover::recover(ledger)?;
            say(json, &r, |r| view::recover(ledger, r))
        }
        StoreCommand::Export {
            format,
            what,
            branch,
            out,
        } => export(ledger, format, what, branch, out),
        StoreCommand::Gc { json } => {
            let mut l = super::open_writer(ledger)?;
            let r = l.gc(&mapf_ledger::record::checkpoint::referenced_blobs)?;
            say(json, &r, view::gc)
        }
        StoreCommand::Branch(BranchCommand::Delete { name }) => {
            let mut l = super::open_writer(ledger)?;
            let head = l.head(&name)?;
            l.delete_branch(&name)?;
            print!("{}", view::deleted(&name, &head));
            Ok(())
        }
        StoreCommand::Rebuild { json } => {
            let mut l = Ledger::open_for_rebuild(ledger)?;
            super::warn_set_aside(&l);
            say(json, &l.rebuild_all()?, view::rebuild)
        }
    }
}

fn init(plan: &Path, ledger: &Path) -> CliResult {
    let l = Ledger::create_from_plan_file(ledger, plan)?;
    print!("{}", view::created(ledger, plan, &l.head("main")?));
    Ok(())
}

fn export(
    ledger: &Path,
    format: ExportFormat,
    what: Option<ExportWhat>,
    branch: Option<String>,
    out: Option<PathBuf>,
) -> CliResult {
    let fmt = match format {
        ExportFormat::Tensorboard => {
            return export_tensorboard(ledger, branch.as_deref(), what, out)
        }
        ExportFormat::Jsonl => Format::Jsonl,
        ExportFormat::Csv => Format::Csv,
    };
    if let Some(o) = &out {
        mapf_ledger::output::check_file("--out", o)?;
    }
    let l = Ledger::open_read_only(ledger)?;
    let what = match what.unwrap_or(ExportWhat::Events) {
        ExportWhat::Events => export::What::Events,
        ExportWhat::Metrics => export::What::Metrics,
        ExportWhat::Decisions => export::What::Decisions,
        ExportWhat::Branches => export::What::Branches,
        ExportWhat::Steps => export::What::Steps,
        ExportWhat::Paired => export::What::Paired,
        ExportWhat::Outcomes => export::What::Outcomes,
    };
    let mut w: Box<dyn Write> = match out {
        Some(p) => Box::new(mapf_ledger::output::create(&p)?),
        None => Box::new(super::stdout()),
    };
    export::write(&l, branch.as_deref(), what, fmt, &mut w)?;
    w.flush().map_err(out_err)
}

fn log(ledger: &Path, branch: &str, limit: Option<usize>, json: bool) -> CliResult {
    let l = Ledger::open_read_only(ledger)?;
    let hs = l.newest_first(branch, limit)?;
    if json {
        return print_json(&export::event_records(&l, &hs)?);
    }
    let mut w = super::stdout();
    for h in hs {
        let e = l.event(&h)?;
        w.write_all(view::log_line(&h, &e).as_bytes())
            .map_err(out_err)?;
    }
    w.flush().map_err(out_err)
}

/// `log --follow`: the branch's history oldest first (the last `limit` events), then
/// every event committed after it (see [`follow::follow`]).
fn follow(ledger: &Path, branch: &str, limit: Option<usize>, json: bool) -> CliResult {
    use follow::Followed;
    let mut w = super::stdout();
    follow::follow(ledger, branch, limit, |f| -> CliResult {
        match f {
            Followed::Diverged(head) => eprintln!("{}", view::diverged(branch, &head)),
            Followed::Event(h, e, m) => {
                let line = match json {
                    true => EventRecord::json_line(*h, e, m)?,
                    false => view::log_line(h, &e),
                };
                w.write_all(line.as_bytes()).map_err(out_err)?;
            }
            Followed::Polled => w.flush().map_err(out_err)?,
        }
        Ok(())
    })
}

fn show(ledger: &Path, reference: &str, json: bool) -> CliResult {
    let mut l = Ledger::open_read_only(ledger)?;
    let shown = mapf_ledger::views::show::show(&mut l, reference)?;
    match json {
        true => println!("{}", shown.to_json()?),
        false => print!("{}", view::shown(&shown)?),
    }
    Ok(())
}

fn export_tensorboard(
    ledger: &Path,
    branch: Option<&str>,
    what: Option<ExportWhat>,
    out: Option<PathBuf>,
) -> CliResult {
    let name = |w: ExportWhat| w.to_possible_value().map(|v| v.get_name().to_string());
    let dir = tensorboard::out_dir(what.map(|w| name(w).unwrap_or_default()), out.as_deref())?;
    let l = Ledger::open_read_only(ledger)?;
    let runs = tensorboard::export(&l, branch, dir)?;
    print!("{}", view::tensorboard(&runs, dir));
    Ok(())
}

fn verify(ledger: &Path, json: bool, strict: bool) -> CliResult {
    let r = mapf_ledger::ledger::verify::verify_dir(ledger)?;
    if json {
        print_json(&r)?;
    } else {
        print!("{}", view::verify(ledger, &r));
    }
    match r.failure(strict) {
        None => Ok(()),
        Some(p) => Err(CliError::check(format!(
            "verify failed for ledger {}: {p} (`ledger recover` repairs damaged packs, blobs and REFS; `ledger rebuild` remakes the index and projections)",
            ledger.display()
        ))),
    }
}
