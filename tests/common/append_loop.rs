//! The crash tests' load generator: a writer that appends batches to `main` (one large
//! and one small blob and `batch` events a batch) and reports each batch once it is
//! durable, in a process of its own that a test can kill -9 mid-write.
//!
//! The process is this test binary itself, run again for [`child`] alone with the
//! ledger and the load in its environment ([`command`]): it opens the ledger as
//! `ledger`'s writer commands do (saying, in their words, what the open set aside) and
//! appends until killed or done. Its stdout carries libtest's lines too, so a report
//! line is marked: `appended <batch> <head> <events>` ([`report`]).
use mapf_ledger::ledger::event::{EventBody, GradientStep, InstancesGenerated};
use mapf_ledger::ledger::{Chain, Hash, Ledger, LedgerError, Meta};
use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// The environment that makes [`child`] run: the ledger directory, then the load.
const DIR: &str = "MAPF_LEDGER_APPEND_LOOP_DIR";
const BATCH: &str = "MAPF_LEDGER_APPEND_LOOP_BATCH";
const BATCHES: &str = "MAPF_LEDGER_APPEND_LOOP_BATCHES";
/// The first word of a report line.
const MARK: &str = "appended";

/// The writer process on the ledger `dir`: batches of `batch` events, `batches` of them
/// (None: until killed). Its stdout and stderr are the caller's to set.
pub fn command(dir: &Path, batch: usize, batches: Option<u64>) -> Command {
    let mut c = Command::new(std::env::current_exe().expect("the test binary"));
    c.args([
        "common::append_loop::child",
        "--exact",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
        "--quiet",
    ])
    .env(DIR, dir)
    .env(BATCH, batch.to_string())
    .env_remove(BATCHES);
    if let Some(n) = batches {
        c.env(BATCHES, n.to_string());
    }
    c
}

/// Run the writer to its end: `batches` batches of `batch` events.
pub fn run(dir: &Path, batch: usize, batches: u64) -> Output {
    command(dir, batch, Some(batches))
        .stdin(Stdio::null())
        .output()
        .expect("run the append loop")
}

/// A report line's (batch, head, events on `main`), None for any other line.
pub fn report(line: &str) -> Option<(u64, Hash, u64)> {
    let f: Vec<&str> = line.strip_prefix(MARK)?.split_whitespace().collect();
    match f[..] {
        [i, head, total] => Some((i.parse().ok()?, head.parse().ok()?, total.parse().ok()?)),
        _ => None,
    }
}

/// The writer, when [`command`] started this process (else nothing: a plain test run
/// passes over it, `--include-ignored` too). Exits 2 on an error, as `ledger` does.
#[test]
#[ignore = "the writer process of common::append_loop::command, run only by it"]
fn child() {
    let Some(dir) = std::env::var_os(DIR) else {
        return;
    };
    let number = |var: &str| std::env::var(var).ok().map(|v| v.parse().expect(var));
    let batch = number(BATCH).unwrap_or(50) as usize;
    if let Err(e) = append(Path::new(&dir), batch, number(BATCHES)) {
        eprintln!("ledger: {}", Chain(&e));
        std::process::exit(2);
    }
}

/// Append `batches` batches (None: forever) of `batch` events to `main` of the ledger
/// at `dir`, printing a report line after each durable one.
fn append(dir: &Path, batch: usize, batches: Option<u64>) -> Result<(), LedgerError> {
    let mut l = Ledger::open(dir)?;
    for a in l.set_aside().iter().filter(|a| a.records > 0) {
        eprintln!("{}", mapf_ledger::views::text::ledger::set_aside_warning(a));
    }
    let mut total = l.ancestry(&l.head("main")?)?.len() as u64;
    let mut i = 0u64;
    let stdout = std::io::stdout();
    while batches.is_none_or(|n| i < n) {
        // One large (file) and one small (sled) blob per batch, referenced by an event.
        let big: Vec<u8> = (0..6000u64)
            .map(|k| (k.wrapping_mul(31).wrapping_add(i * 7919) % 251) as u8)
            .collect();
        let small = format!("instance {i}").into_bytes();
        let b1 = l.put_blob(&big)?;
        let b2 = l.put_blob(&small)?;
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
        let hs = l.append("main", items)?;
        total += n;
        let mut w = stdout.lock();
        // The reader gone (the test killed or done with it) ends the loop.
        let head = hs.last().expect("non-empty");
        if writeln!(w, "{MARK} {i} {head} {total}")
            .and_then(|()| w.flush())
            .is_err()
        {
            return Ok(());
        }
        i += 1;
    }
    Ok(())
}
