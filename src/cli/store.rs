//! Ledger store commands: init, log, show, branches, verify, export, rebuild. Thin over
//! `mapf_ledger::ledger`; every read command takes `--json`.
use super::{CliError, CliResult};
use clap::{Subcommand, ValueEnum};
use mapf_ledger::ledger::{Chain, Hash, Ledger, LedgerError, Meta, RebuildReport, Resolved};
use mapf_ledger::record::event::{EventBody, GradientStep, InstancesGenerated};
use mapf_ledger::views::export::{self, EventRecord, Format};
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
    /// Test helper: append batches to `main` forever (or N times), printing
    /// "<batch> <head> <events>" after each durable batch.
    #[command(hide = true)]
    DebugAppendLoop {
        /// Events per appended batch.
        #[arg(long, default_value_t = 50)]
        batch: usize,
        /// Stop after this many batches (default: never).
        #[arg(long)]
        batches: Option<u64>,
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
}

use super::ledger_error as err;

/// An error writing a command's output. A closed pipe (`ledger cat BLOB | head`) is the
/// reader leaving, not a failure: the command ends quietly with status 0 (see
/// [`super::Stdout`]), whichever writer met it.
fn out_err(e: std::io::Error) -> CliError {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        std::process::exit(0);
    }
    CliError::input(format!("writing output: {e}"))
}

fn print_json(v: &impl serde::Serialize) -> CliResult {
    let s = serde_json::to_string_pretty(v).map_err(|e| CliError::input(e.to_string()))?;
    println!("{s}");
    Ok(())
}

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
        StoreCommand::Cat { blob } => cat(ledger, &blob),
        StoreCommand::Show {
            reference,
            json,
            samples: Some(n),
            kind,
            suite,
            ..
        } => show_samples(ledger, &reference, json, n as usize, kind, suite.as_deref()),
        StoreCommand::Show {
            reference,
            json,
            timing: true,
            ..
        } => show_timing(ledger, &reference, json),
        StoreCommand::Show {
            reference, json, ..
        } => show(ledger, &reference, json),
        StoreCommand::Branches { json } => branches(ledger, json),
        StoreCommand::Verify { json, strict } => verify(ledger, json, strict),
        StoreCommand::Recover { json } => recover(ledger, json),
        StoreCommand::Export {
            format,
            what,
            branch,
            out,
        } => {
            if let ExportFormat::Tensorboard = format {
                return export_tensorboard(ledger, branch.as_deref(), what, out);
            }
            if let Some(o) = &out {
                super::check_output_file("--out", o)?;
            }
            let l = Ledger::open_read_only(ledger).map_err(err)?;
            let fmt = match format {
                ExportFormat::Jsonl => Format::Jsonl,
                ExportFormat::Csv => Format::Csv,
                ExportFormat::Tensorboard => unreachable!("handled above"),
            };
            let what = match what.unwrap_or(ExportWhat::Events) {
                ExportWhat::Events => export::What::Events,
                ExportWhat::Metrics => export::What::Metrics,
                ExportWhat::Decisions => export::What::Decisions,
                ExportWhat::Branches => export::What::Branches,
                ExportWhat::Steps => export::What::Steps,
                ExportWhat::Paired => export::What::Paired,
            };
            let write = |w: &mut dyn Write| match what {
                export::What::Events => export::export(&l, branch.as_deref(), fmt, w),
                t => export::export_table(&l, branch.as_deref(), t, fmt, w),
            };
            match out {
                Some(p) => {
                    let f = std::fs::File::create(&p)
                        .map_err(|e| CliError::input(format!("{}: {e}", p.display())))?;
                    let mut w = std::io::BufWriter::new(f);
                    write(&mut w).map_err(err)?;
                    w.flush().map_err(out_err)?;
                }
                None => {
                    let mut w = super::stdout();
                    write(&mut w).map_err(err)?;
                    w.flush().map_err(out_err)?;
                }
            }
            Ok(())
        }
        StoreCommand::Gc { json } => {
            let mut l = super::open_writer(ledger).map_err(err)?;
            let r = l
                .gc(&mapf_ledger::record::checkpoint::referenced_blobs)
                .map_err(err)?;
            if json {
                print_json(&r)
            } else {
                for s in &r.scratch_removed {
                    println!("gc: removed scratch ref {s} (left by a killed replay)");
                }
                println!(
                    "gc: removed {} events and {} blobs, kept {} events and {} blobs; {:.1} MB -> {:.1} MB in {:.3}s",
                    r.events_removed,
                    r.blobs_removed,
                    r.events_kept,
                    r.blobs_kept,
                    r.bytes_before as f64 / 1e6,
                    r.bytes_after as f64 / 1e6,
                    r.seconds
                );
                Ok(())
            }
        }
        StoreCommand::Branch(BranchCommand::Delete { name }) => {
            let mut l = super::open_writer(ledger).map_err(err)?;
            let head = l.head(&name).map_err(err)?;
            l.delete_branch(&name).map_err(err)?;
            println!(
                "deleted branch {name} (was at {}); `ledger gc` removes what no branch reaches",
                head.short()
            );
            Ok(())
        }
        StoreCommand::Rebuild { json } => {
            let mut l = Ledger::open_for_rebuild(ledger).map_err(err)?;
            super::warn_set_aside(&l);
            // Everything derived is remade: the index from the packs (a saved one can be
            // wrong with right checksums), then the projections.
            let index_seconds = l.reindex().map_err(err)?;
            let r = RebuildReport {
                index_seconds,
                ..l.rebuild().map_err(err)?
            };
            if json {
                print_json(&r)
            } else {
                println!(
                    "rescanned the packs into the index in {:.3}s; rebuilt projections of {} branches from {} events in {:.3}s",
                    r.index_seconds, r.branches, r.events, r.seconds
                );
                Ok(())
            }
        }
        StoreCommand::DebugAppendLoop { batch, batches } => append_loop(ledger, batch, batches),
    }
}

fn init(plan: &Path, ledger: &Path) -> CliResult {
    let bytes =
        std::fs::read(plan).map_err(|e| CliError::input(format!("{}: {e}", plan.display())))?;
    // A model directory `run` could not find is refused now, not at the first stage.
    if let Ok(p) = mapf_ledger::plan::LedgerPlan::parse(&bytes) {
        p.lm.check_hf_dir()
            .map_err(|e| CliError::input(format!("{}: {}", plan.display(), Chain(&e))))?;
    }
    let l = Ledger::create(ledger, &bytes).map_err(|e| match e {
        LedgerError::Plan(p) => CliError::input(format!("{}: {p}", plan.display())),
        e => err(e),
    })?;
    let head = l.head("main").map_err(err)?;
    println!(
        "created ledger {} from {} (genesis {})",
        ledger.display(),
        plan.display(),
        head.short()
    );
    Ok(())
}

fn cat(ledger: &Path, blob: &str) -> CliResult {
    use std::io::Write;
    let l = Ledger::open_read_only(ledger).map_err(err)?;
    let h = l.blob_by_prefix(blob).map_err(err)?;
    let bytes = l.blob(&h).map_err(err)?;
    let mut out = super::stdout();
    out.write_all(&bytes)
        .and_then(|_| out.flush())
        .map_err(out_err)
}

fn log(ledger: &Path, branch: &str, limit: Option<usize>, json: bool) -> CliResult {
    let l = Ledger::open_read_only(ledger).map_err(err)?;
    let head = l.head_of(branch).map_err(err)?;
    let mut hs = l.ancestry(&head).map_err(err)?;
    if let Some(n) = limit {
        hs.truncate(n);
    }
    if json {
        let recs = hs
            .iter()
            .map(|h| {
                l.event_with_meta(h)
                    .map(|(event, meta)| EventRecord::new(*h, event, meta))
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(err)?;
        return print_json(&recs);
    }
    let mut w = super::stdout();
    for h in hs {
        let e = l.event(&h).map_err(err)?;
        write_log_line(&mut w, &h, &e).map_err(out_err)?;
    }
    w.flush().map_err(out_err)
}

fn write_log_line(
    w: &mut impl Write,
    h: &Hash,
    e: &mapf_ledger::ledger::Event,
) -> std::io::Result<()> {
    writeln!(
        w,
        "{}  stage {:<3} {:<20} {}",
        h.short(),
        e.stage,
        e.body.kind(),
        e.body.summary()
    )
}

/// `log --follow`: the branch's history oldest first (the last `limit` events), then
/// every event committed after it, polling `REFS` (a reader's snapshot never waits for
/// the writer). Ends once no process writes the ledger and everything is printed.
fn follow(ledger: &Path, branch: &str, limit: Option<usize>, json: bool) -> CliResult {
    // Only a branch moves: a stage or an event reference has nothing to follow.
    if mapf_ledger::ledger::refs::validate_branch(branch).is_err() {
        return Err(CliError::input(format!(
            "--follow {branch}: follows a branch by name (BRANCH, not BRANCH@stageN or a hash)"
        )));
    }
    let mut w = super::stdout();
    let mut printed: Option<Hash> = None;
    let mut first = true;
    loop {
        let writing = Ledger::writer_active(ledger);
        let head = Ledger::current_heads(ledger)
            .map_err(err)?
            .get(branch)
            .copied();
        if head.is_some() && head != printed {
            let l = Ledger::open_read_only(ledger).map_err(err)?;
            let head = l.head(branch).map_err(err)?;
            let mut new = l.ancestry(&head).map_err(err)?;
            let whole = new.len();
            if let Some(i) = new.iter().position(|h| Some(*h) == printed) {
                new.truncate(i);
            }
            if printed.is_some() && new.len() == whole {
                eprintln!(
                    "ledger: branch {branch} moved to {}, which does not continue what was printed",
                    head.short()
                );
            }
            if first {
                if let Some(n) = limit {
                    new.truncate(n);
                }
            }
            for h in new.iter().rev() {
                let (e, m) = l.event_with_meta(h).map_err(err)?;
                if json {
                    let rec = EventRecord::new(*h, e, m);
                    let s =
                        serde_json::to_string(&rec).map_err(|e| CliError::input(e.to_string()))?;
                    writeln!(w, "{s}").map_err(out_err)?;
                } else {
                    write_log_line(&mut w, h, &e).map_err(out_err)?;
                }
            }
            w.flush().map_err(out_err)?;
            printed = Some(head);
        } else if head.is_none() && first {
            let l = Ledger::open_read_only(ledger).map_err(err)?;
            return Err(err(l.unknown_branch(branch)));
        }
        first = false;
        if !writing {
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

fn show(ledger: &Path, reference: &str, json: bool) -> CliResult {
    let mut l = Ledger::open_read_only(ledger).map_err(err)?;
    match l.resolve(reference).map_err(err)? {
        Resolved::Event(h) => {
            let (event, meta) = l.event_with_meta(&h).map_err(err)?;
            let rec = EventRecord::new(h, event, meta);
            if json {
                return print_json(&rec);
            }
            println!("event   {}", rec.hash);
            println!(
                "parent  {}",
                rec.parent
                    .map(|p| p.to_hex())
                    .unwrap_or_else(|| "(none)".into())
            );
            println!("stage   {}", rec.stage);
            println!("kind    {}", rec.body.kind());
            println!("summary {}", rec.body.summary());
            let body = serde_json::to_string_pretty(&rec.body)
                .map_err(|e| CliError::input(e.to_string()))?;
            println!("{body}");
            let meta =
                serde_json::to_string(&rec.meta).map_err(|e| CliError::input(e.to_string()))?;
            println!("meta    {meta}");
            Ok(())
        }
        Resolved::Branch { name, head } => {
            let s = l.projection(&name).map_err(err)?;
            if json {
                return print_json(&mapf_ledger::views::show::BranchShow::new(name, head, &s));
            }
            println!("branch  {name}");
            println!("head    {head}");
            println!("plan    {} (seed {})", s.plan_name, s.seed);
            println!("events  {}", s.events);
            if let Some((b, at, e)) = &s.forked_from {
                println!("forked  from {b} at {} (engineer {e})", at.short());
            }
            for st in &s.stages {
                println!(
                    "stage {}: engineer {} decision {} steps {} trajectories {} ({} valid){}",
                    st.stage,
                    st.engineer.as_deref().unwrap_or("-"),
                    st.decision_status.as_deref().unwrap_or("-"),
                    st.gradient_steps,
                    st.trajectories,
                    st.valid,
                    if st.completed.is_some() {
                        " completed"
                    } else {
                        ""
                    }
                );
            }
            Ok(())
        }
        Resolved::Stage { branch, stage } => {
            let s = l.projection(&branch).map_err(err)?;
            let st = s.stage(stage).ok_or_else(|| {
                CliError::input(format!(
                    "branch `{branch}` has no stage {stage} (it has {})",
                    s.stages.len()
                ))
            })?;
            if json {
                return print_json(&mapf_ledger::views::show::StageShow::new(branch, st));
            }
            print!("{}", mapf_ledger::views::show::render_stage(&branch, st));
            Ok(())
        }
    }
}

fn export_tensorboard(
    ledger: &Path,
    branch: Option<&str>,
    what: Option<ExportWhat>,
    out: Option<PathBuf>,
) -> CliResult {
    if let Some(w) = what {
        return Err(CliError::input(format!(
            "--what {} does not apply to --format tensorboard, which writes every scalar \
             (training steps and evaluations); leave --what out",
            w.to_possible_value()
                .map(|v| v.get_name().to_string())
                .unwrap_or_default()
        )));
    }
    let Some(dir) = out else {
        return Err(CliError::input(
            "--format tensorboard writes a directory of runs: name it with --out DIR".to_string(),
        ));
    };
    if dir.exists() && !dir.is_dir() {
        return Err(CliError::input(format!(
            "--out {}: not a directory (TensorBoard runs are written as directories under it)",
            dir.display()
        )));
    }
    let l = Ledger::open_read_only(ledger).map_err(err)?;
    let runs = mapf_ledger::views::tensorboard::export(&l, branch, &dir).map_err(err)?;
    let scalars: usize = runs.iter().map(|r| r.scalars).sum();
    println!(
        "wrote {} run{} ({scalars} scalars) under {}; view with: tensorboard --logdir {}",
        runs.len(),
        if runs.len() == 1 { "" } else { "s" },
        dir.display(),
        dir.display()
    );
    Ok(())
}

fn show_timing(ledger: &Path, reference: &str, json: bool) -> CliResult {
    use mapf_ledger::views::timing::{render, stage_timing, TimingError};
    let l = Ledger::open_read_only(ledger).map_err(err)?;
    let Resolved::Stage { branch, stage } = l.resolve(reference).map_err(err)? else {
        return Err(CliError::input(format!(
            "--timing shows one stage's phases: name a stage, as in {}@stage1 (got {reference:?})",
            reference.split('@').next().unwrap_or("main")
        )));
    };
    let r = match stage_timing(&l, &branch, stage) {
        Ok(r) => r,
        Err(TimingError::Ledger(e)) => return Err(err(e)),
        Err(e) => return Err(CliError::input(e.to_string())),
    };
    if json {
        return print_json(&r);
    }
    let mut w = super::stdout();
    write!(w, "{}", render(&r)).map_err(out_err)?;
    Ok(())
}

fn show_samples(
    ledger: &Path,
    reference: &str,
    json: bool,
    n: usize,
    kind: Option<mapf_ledger::views::samples::KindFilter>,
    suite: Option<&str>,
) -> CliResult {
    use mapf_ledger::views::samples::{render_drawing, samples};
    let l = Ledger::open_read_only(ledger).map_err(err)?;
    let Resolved::Stage { branch, stage } = l.resolve(reference).map_err(err)? else {
        return Err(CliError::input(format!(
            "--samples shows one stage's sampled plans: name a stage, as in {}@stage1 (got {reference:?})",
            reference.split('@').next().unwrap_or("main")
        )));
    };
    let head = l.head_of(&branch).map_err(err)?;
    let s = samples(&l, &branch, &head, stage, n, kind, suite).map_err(err)?;
    if json {
        return print_json(&s);
    }
    let mut w = super::stdout();
    writeln!(
        w,
        "{branch}@stage{stage}: {} of {} matching {} ({} recorded)",
        s.samples.len(),
        s.matching,
        match suite {
            Some(name) => format!("{name} evaluation plans"),
            None => "sampled plans".to_string(),
        },
        s.recorded
    )
    .map_err(out_err)?;
    for (i, x) in s.samples.iter().enumerate() {
        let outcome = match (x.valid, x.optimal, x.failure) {
            (true, true, _) => format!("optimal (cost {})", x.cost),
            (true, false, _) => format!("valid, cost {} against {}", x.cost, x.optimal_cost),
            (false, _, f) => format!(
                "invalid: {}{}",
                f.map(|k| k.name()).unwrap_or("failed"),
                x.detail
                    .as_deref()
                    .map(|d| format!(" ({d})"))
                    .unwrap_or_default()
            ),
        };
        let at = match (&x.suite, x.step) {
            (Some(name), _) => format!("{name} item {}", x.index),
            (None, step) => format!(
                "step {}, {} #{}",
                step.unwrap_or(0),
                x.event.short(),
                x.index
            ),
        };
        let reward = x
            .reward
            .map(|r| format!("; reward {r}"))
            .unwrap_or_default();
        writeln!(
            w,
            "\n[{}] {at}, instance {} ({}x{}, {} agents{})\n    {outcome}{reward}",
            i + 1,
            x.instance.short(),
            x.drawing.size,
            x.drawing.size,
            x.agents,
            if x.needs_coordination {
                ", needs coordination"
            } else {
                ""
            },
        )
        .map_err(out_err)?;
        let grid = render_drawing(&x.drawing);
        let plan: Vec<&str> = x.plan.lines().collect();
        for r in 0..grid.len().max(plan.len()) {
            writeln!(
                w,
                "    {:<width$}   {}",
                grid.get(r).map(String::as_str).unwrap_or(""),
                plan.get(r).copied().unwrap_or(""),
                width = grid.first().map_or(0, String::len)
            )
            .map_err(out_err)?;
        }
    }
    if !s.samples.is_empty() {
        writeln!(
            w,
            "\n(digits: starts; a, b, ...: goals; *: path; X: where it failed; H: hole)"
        )
        .map_err(out_err)?;
    }
    w.flush().map_err(out_err)
}

fn branches(ledger: &Path, json: bool) -> CliResult {
    let mut l = Ledger::open_read_only(ledger).map_err(err)?;
    let rows = mapf_ledger::views::branches::branches(&mut l).map_err(err)?;
    if json {
        return print_json(&rows);
    }
    let mut w = super::stdout();
    for r in rows {
        let fork = match &r.forked_from {
            None => String::new(),
            Some(f) => format!("  forked from {} at {}", f.branch, f.at.short()),
        };
        writeln!(
            w,
            "{:<20} {}  {} events  {} stages{fork}",
            r.name,
            r.head.short(),
            r.events,
            r.stages
        )
        .map_err(out_err)?;
    }
    w.flush().map_err(out_err)
}

/// Below this many free bytes, `verify` says the filesystem is (nearly) full.
const LOW_SPACE: u64 = 64 << 20;

fn verify(ledger: &Path, json: bool, strict: bool) -> CliResult {
    let l = Ledger::open_read_only(ledger).map_err(err)?;
    let mut r = l.verify(&mapf_ledger::record::checkpoint::referenced_blobs);
    drop(l);
    // The writer's projection cache, when no writer is using it: derived data, so a
    // damaged one is a warning (the next writer's open remakes it), never damage.
    if let Some(ps) = Ledger::check_projection_cache(ledger).map_err(err)? {
        r.warnings.extend(ps.into_iter().map(|p| mapf_ledger::ledger::Problem {
            problem: format!(
                "{} (derived data: the next writer's open sets it aside and remakes it)",
                p.problem
            ),
            what: p.what,
        }));
    }
    // A full disk is not damage: a write that ran out of space leaves its uncommitted
    // tail or nothing, which the checks above tell from damaged history.
    if let Some(free) = mapf_ledger::ledger::free_space(ledger) {
        if free < LOW_SPACE {
            r.warnings.push(mapf_ledger::ledger::Problem {
                what: format!("the filesystem holding {}", ledger.display()),
                problem: format!(
                    "{free} bytes free: a write that ran out of space there recorded nothing it could not finish (free space, then run the command again); only BAD lines, if any, are damage"
                ),
            });
        }
    }
    if json {
        print_json(&r)?;
    } else if r.ok() {
        for w in &r.warnings {
            println!("WARN {w}");
        }
        println!(
            "ledger {} verified: {} events ({:.1} MB), {} blobs ({:.1} MB), {} branches in {:.3}s ({:.0} MB/s)",
            ledger.display(),
            r.events,
            r.event_bytes as f64 / 1e6,
            r.blobs,
            r.blob_bytes as f64 / 1e6,
            r.branches,
            r.seconds,
            r.bytes_per_second() / 1e6
        );
    } else {
        for p in r.problems.iter().take(20) {
            println!("BAD {p}");
        }
        if r.problems.len() > 20 {
            println!("... and {} more problems", r.problems.len() - 20);
        }
    }
    match r.first().or(r.warnings.first().filter(|_| strict)) {
        None => Ok(()),
        Some(p) => Err(CliError::check(format!(
            "verify failed for ledger {}: {p} (`ledger recover` repairs damaged packs, blobs and REFS; `ledger rebuild` remakes the index and projections)",
            ledger.display()
        ))),
    }
}

fn recover(ledger: &Path, json: bool) -> CliResult {
    let r = mapf_ledger::ledger::recover::recover(ledger).map_err(err)?;
    if json {
        return print_json(&r);
    }
    let short = |h: &Option<Hash>| h.map_or("-".to_string(), |h| h.short());
    if !r.changed {
        println!(
            "ledger {}: nothing damaged in REFS, packs or blobs; index and projections rebuilt ({} events)",
            ledger.display(),
            r.events
        );
        return Ok(());
    }
    if r.refs.newest_damaged {
        match r.refs.restored_record {
            Some(n) => println!(
                "REFS: the newest record was damaged; restored record {n} of {}",
                r.refs.records
            ),
            None => println!("REFS: no intact record; branches rebuilt from the packs"),
        }
    } else if !r.refs.damaged_records.is_empty() {
        println!(
            "REFS: superseded records {:?} were damaged; rewritten as the one current record",
            r.refs.damaged_records
        );
    }
    for p in &r.packs {
        let len = |l: Option<u64>| l.map_or("unlisted".to_string(), |l| l.to_string());
        if p.created {
            println!(
                "pack {}: made, holding {} moved records",
                p.file, p.moved_frames
            );
        } else {
            println!(
                "pack {}: committed {} -> {}; damaged {}; {} intact records moved",
                p.file,
                len(p.committed_before),
                len(p.committed_after),
                p.damaged
                    .iter()
                    .map(|(o, n)| format!("{n} bytes at {o}"))
                    .collect::<Vec<_>>()
                    .join(", "),
                p.moved_frames
            );
        }
    }
    for f in &r.moved_blob_files {
        println!("blob file {f}: damaged, moved out of the store");
    }
    for b in r.branches.iter().filter(|b| b.action != "kept") {
        println!(
            "branch {}: {} ({} -> {})",
            b.name,
            b.action,
            short(&b.before),
            short(&b.after)
        );
    }
    for h in &r.lost_events {
        println!("LOST event {} (its record was in damaged bytes)", h.short());
    }
    if !r.cut_off_events.is_empty() {
        println!(
            "LOST {} intact events after a lost one (no ref reaches them; their records are in the damaged copy): {}",
            r.cut_off_events.len(),
            r.cut_off_events.iter().map(|h| h.short()).collect::<Vec<_>>().join(" ")
        );
    }
    for h in &r.lost_blobs {
        println!(
            "LOST blob {} (fetching it from a copy of the ledger restores it)",
            h.short()
        );
    }
    println!(
        "recovered ledger {}: copies of the damaged files in {}; rebuilt from {} events",
        ledger.display(),
        r.damaged_copy.as_deref().unwrap_or("-"),
        r.events
    );
    Ok(())
}

fn append_loop(ledger: &Path, batch: usize, batches: Option<u64>) -> CliResult {
    let mut l = super::open_writer(ledger).map_err(err)?;
    let mut total = l
        .ancestry(&l.head("main").map_err(err)?)
        .map_err(err)?
        .len() as u64;
    let mut i = 0u64;
    let stdout = std::io::stdout();
    while batches.is_none_or(|n| i < n) {
        // One large (file) and one small (sled) blob per batch, referenced by an event.
        let big: Vec<u8> = (0..6000u64)
            .map(|k| (k.wrapping_mul(31).wrapping_add(i * 7919) % 251) as u8)
            .collect();
        let small = format!("instance {i}").into_bytes();
        let b1 = l.put_blob(&big).map_err(err)?;
        let b2 = l.put_blob(&small).map_err(err)?;
        let mut items = vec![(
            EventBody::InstancesGenerated(InstancesGenerated {
                split: "train".into(),
                config: b2,
                instances: vec![b1, b2],
            }),
            1,
            Meta::default(),
        )];
        for k in 1..batch.max(1) {
            items.push((
                EventBody::GradientStep(GradientStep {
                    step: i * batch as u64 + k as u64,
                    params: Hash::of_blob(&i.to_le_bytes()),
                    loss: (k as f64).to_bits(),
                    policy_loss: 0,
                    kl: 0,
                    entropy: 0,
                    grad_norm: 0,
                    reward_mean: 0,
                }),
                1,
                Meta::default(),
            ));
        }
        let n = items.len() as u64;
        let hs = l.append("main", items).map_err(err)?;
        total += n;
        let mut w = stdout.lock();
        writeln!(w, "{i} {} {total}", hs.last().expect("non-empty")).map_err(out_err)?;
        w.flush().map_err(out_err)?;
        i += 1;
    }
    Ok(())
}
