//! The text of the ledger's own commands: the warning of a writer's open that set
//! records aside, `log` lines, an event and a branch as `show` prints them, the branch
//! listing, and the reports of `verify`, `recover`, `gc`, `rebuild`, `bundle` and
//! `fetch`. Each function returns what the command prints, newlines included.
use crate::ledger::bundle::FetchReport;
use crate::ledger::gc::GcReport;
use crate::ledger::recover::RecoverReport;
use crate::ledger::{BranchState, Event, Hash, RebuildReport, Report};
use crate::views::branches::BranchListing;
use crate::views::export::EventRecord;
use crate::views::format::count;
use crate::views::show::{render_stage, Shown};
use crate::views::tensorboard::RunWritten;
use ledger_store::aside::SetAside;
use std::fmt::Write as _;
use std::path::Path;

/// The warning of a writer's open that set `a` aside rather than cut it (history a
/// damaged `REFS` may have hidden, or a crash's uncommitted batch), one line.
pub fn set_aside_warning(a: &SetAside) -> String {
    format!(
        "warning: {} held {} intact record(s) in {} bytes past its committed length {} (not history: a crash before its commit, or a damaged last REFS record); set aside as {}; `ledger recover` re-attaches them as recovered/* branches",
        a.from.display(),
        a.records,
        a.bytes,
        a.offset,
        a.to.display()
    )
}

/// What a writer's open says on standard error: each note of derived data it remade,
/// and the warning of each set-aside with records in it ([`set_aside_warning`]).
pub fn open_notes(l: &crate::ledger::Ledger) -> Vec<String> {
    let notes = l.healed().iter().map(|note| format!("note: {note}"));
    let aside = l.set_aside().iter().filter(|a| a.records > 0);
    notes.chain(aside.map(set_aside_warning)).collect()
}

/// `init --plan`: the ledger created at `dir`, the plan file it came from, its genesis.
pub fn created(dir: &Path, plan: &Path, genesis: &Hash) -> String {
    format!(
        "created ledger {} from {} (genesis {})\n",
        dir.display(),
        plan.display(),
        genesis.short()
    )
}

/// `branch delete`: the branch that went, where it was, and what removes its events.
pub fn deleted(name: &str, head: &Hash) -> String {
    format!(
        "deleted branch {name} (was at {}); `ledger gc` removes what no branch reaches\n",
        head.short()
    )
}

/// `fork`: the new branch `name`, where it forked and with which engineer, its head.
pub fn forked(name: &str, from: &str, at: u32, engineer: &str, head: &Hash) -> String {
    format!(
        "branch {name} forked from {from} before stage {at} (engineer {engineer}), head {}\n",
        head.short()
    )
}

/// `log --follow`'s warning when the followed branch moved to `head`, history that does
/// not continue what was printed (the whole history follows).
pub fn diverged(branch: &str, head: &Hash) -> String {
    format!(
        "ledger: branch {branch} moved to {}, which does not continue what was printed",
        head.short()
    )
}

/// One `log` line of event `h`.
pub fn log_line(h: &Hash, e: &Event) -> String {
    format!(
        "{}  stage {:<3} {:<20} {}\n",
        h.short(),
        e.stage,
        e.body.kind(),
        e.body.summary()
    )
}

/// `show EVENT`: its hash, parent, stage, kind, summary, body and metadata.
pub fn event(rec: &EventRecord) -> Result<String, serde_json::Error> {
    let mut s = String::new();
    let parent = rec
        .parent
        .map(|p| p.to_hex())
        .unwrap_or_else(|| "(none)".into());
    let _ = writeln!(s, "event   {}", rec.hash);
    let _ = writeln!(s, "parent  {parent}");
    let _ = writeln!(s, "stage   {}", rec.stage);
    let _ = writeln!(s, "kind    {}", rec.body.kind());
    let _ = writeln!(s, "summary {}", rec.body.summary());
    let _ = writeln!(s, "{}", serde_json::to_string_pretty(&rec.body)?);
    let _ = writeln!(s, "meta    {}", serde_json::to_string(&rec.meta)?);
    Ok(s)
}

/// `show REF` as text: [`event`], [`branch`] or the stage's summary
/// ([`crate::views::show::render_stage`]).
pub fn shown(s: &Shown) -> Result<String, serde_json::Error> {
    Ok(match s {
        Shown::Event(rec) => event(rec)?,
        Shown::Branch { name, head, state } => branch(name, head, state),
        Shown::Stage { branch, stage } => render_stage(branch, stage),
    })
}

/// `export --format tensorboard`: what was written under `dir` and how to view it.
pub fn tensorboard(runs: &[RunWritten], dir: &Path) -> String {
    let scalars: usize = runs.iter().map(|r| r.scalars).sum();
    format!(
        "wrote {} run{} ({scalars} scalars) under {}; view with: tensorboard --logdir {}\n",
        runs.len(),
        if runs.len() == 1 { "" } else { "s" },
        dir.display(),
        dir.display()
    )
}

/// `show BRANCH`: its head, plan, size, fork point and one line per stage.
pub fn branch(name: &str, head: &Hash, s: &BranchState) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "branch  {name}");
    let _ = writeln!(out, "head    {head}");
    let _ = writeln!(out, "plan    {} (seed {})", s.plan_name, s.seed);
    let _ = writeln!(out, "events  {}", s.events);
    if let Some((b, at, e)) = &s.forked_from {
        let _ = writeln!(out, "forked  from {b} at {} (engineer {e})", at.short());
    }
    for st in &s.stages {
        let _ = writeln!(
            out,
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
    out
}

/// `branches`: one line per branch.
pub fn branches(rows: &[BranchListing]) -> String {
    let mut out = String::new();
    for r in rows {
        let fork = match &r.forked_from {
            None => String::new(),
            Some(f) => format!("  forked from {} at {}", f.branch, f.at.short()),
        };
        let _ = writeln!(
            out,
            "{:<20} {}  {}  {}{fork}",
            r.name,
            r.head.short(),
            count(r.events, "event", "events"),
            count(r.stages as u64, "stage", "stages"),
        );
    }
    out
}

/// `verify` of the ledger at `dir`: its warnings and totals, or its first 20 problems.
pub fn verify(dir: &Path, r: &Report) -> String {
    let mut out = String::new();
    if r.ok() {
        for w in &r.warnings {
            let _ = writeln!(out, "WARN {w}");
        }
        let _ = writeln!(
            out,
            "ledger {} verified: {} ({:.1} MB), {} ({:.1} MB), {} in {:.3}s ({:.0} MB/s)",
            dir.display(),
            count(r.events, "event", "events"),
            r.event_bytes as f64 / 1e6,
            count(r.blobs, "blob", "blobs"),
            r.blob_bytes as f64 / 1e6,
            count(r.branches as u64, "branch", "branches"),
            r.seconds,
            r.bytes_per_second() / 1e6
        );
    } else {
        for p in r.problems.iter().take(20) {
            let _ = writeln!(out, "BAD {p}");
        }
        if r.problems.len() > 20 {
            let _ = writeln!(out, "... and {} more problems", r.problems.len() - 20);
        }
    }
    out
}

/// `recover` of the ledger at `dir`: what was damaged and what was done about it.
pub fn recover(dir: &Path, r: &RecoverReport) -> String {
    let mut out = String::new();
    let short = |h: &Option<Hash>| h.map_or("-".to_string(), |h| h.short());
    if !r.changed {
        let _ = writeln!(
            out,
            "ledger {}: nothing damaged in REFS, packs or blobs; index and projections rebuilt ({} events)",
            dir.display(),
            r.events
        );
        return out;
    }
    if r.refs.newest_damaged {
        let _ = match r.refs.restored_record {
            Some(n) => writeln!(
                out,
                "REFS: the newest record was damaged; restored record {n} of {}",
                r.refs.records
            ),
            None => writeln!(
                out,
                "REFS: no intact record; branches rebuilt from the packs"
            ),
        };
    } else if !r.refs.damaged_records.is_empty() {
        let _ = writeln!(
            out,
            "REFS: superseded records {:?} were damaged; rewritten as the one current record",
            r.refs.damaged_records
        );
    }
    for p in &r.packs {
        let len = |l: Option<u64>| l.map_or("unlisted".to_string(), |l| l.to_string());
        let _ = if p.created {
            writeln!(
                out,
                "pack {}: made, holding {} moved records",
                p.file, p.moved_frames
            )
        } else {
            writeln!(
                out,
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
            )
        };
    }
    for f in &r.moved_blob_files {
        let _ = writeln!(out, "blob file {f}: damaged, moved out of the store");
    }
    for b in r.branches.iter().filter(|b| b.action != "kept") {
        let _ = writeln!(
            out,
            "branch {}: {} ({} -> {})",
            b.name,
            b.action,
            short(&b.before),
            short(&b.after)
        );
    }
    for h in &r.lost_events {
        let _ = writeln!(
            out,
            "LOST event {} (its record was in damaged bytes)",
            h.short()
        );
    }
    if !r.cut_off_events.is_empty() {
        let _ = writeln!(
            out,
            "LOST {} intact events after a lost one (no ref reaches them; their records are in the damaged copy): {}",
            r.cut_off_events.len(),
            r.cut_off_events.iter().map(|h| h.short()).collect::<Vec<_>>().join(" ")
        );
    }
    for h in &r.lost_blobs {
        let _ = writeln!(
            out,
            "LOST blob {} (fetching it from a copy of the ledger restores it)",
            h.short()
        );
    }
    let _ = writeln!(
        out,
        "recovered ledger {}: copies of the damaged files in {}; rebuilt from {} events",
        dir.display(),
        r.damaged_copy.as_deref().unwrap_or("-"),
        r.events
    );
    out
}

/// `gc`: the scratch refs removed, then what was removed and kept.
pub fn gc(r: &GcReport) -> String {
    let mut out = String::new();
    for s in &r.scratch_removed {
        let _ = writeln!(out, "gc: removed scratch ref {s} (left by a killed replay)");
    }
    let _ = writeln!(
        out,
        "gc: removed {} events and {} blobs, kept {} events and {} blobs; {:.1} MB -> {:.1} MB in {:.3}s",
        r.events_removed,
        r.blobs_removed,
        r.events_kept,
        r.blobs_kept,
        r.bytes_before as f64 / 1e6,
        r.bytes_after as f64 / 1e6,
        r.seconds
    );
    out
}

/// `rebuild`: the rescan of the packs and the rebuilt projections.
pub fn rebuild(r: &RebuildReport) -> String {
    format!(
        "rescanned the packs into the index in {:.3}s; rebuilt projections of {} from {} in {:.3}s\n",
        r.index_seconds,
        count(r.branches as u64, "branch", "branches"),
        count(r.events, "event", "events"),
        r.seconds
    )
}

/// `bundle`: the file written, its size and the refs it holds.
pub fn bundle(
    out: &Path,
    events: usize,
    blobs: usize,
    bytes: u64,
    refs: &[(String, Hash)],
) -> String {
    format!(
        "wrote {}: {} events, {} blobs, {:.1} MB ({})\n",
        out.display(),
        events,
        blobs,
        bytes as f64 / 1e6,
        refs.iter()
            .map(|(n, h)| format!("{n} {}", h.short()))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// `fetch` and `init --from-bundle`: `what` happened, what was added, the branches moved.
pub fn fetch(r: &FetchReport, what: &str) -> String {
    let mut out = format!(
        "{what}: {} events and {} blobs added; {} branch{} updated, {} unchanged\n",
        r.events_added,
        r.blobs_added,
        r.refs_updated.len(),
        if r.refs_updated.len() == 1 { "" } else { "es" },
        r.refs_unchanged.len()
    );
    for (name, head) in &r.refs_updated {
        let _ = writeln!(out, "  {name} -> {}", &head[..12]);
    }
    out
}
