//! Chaos: damage every kind of file a ledger holds (event pack, small-blob pack, loose
//! blob, the last and an earlier `REFS` record, `packs/INDEX`, the sled projection
//! cache) by a flipped bit, a truncation or a zeroed page, seeded. Each time `verify`
//! must exit 1 naming the file (or, for a superseded REFS record, warn naming it), and
//! `recover` must bring the ledger back to a state that verifies, with every event and
//! blob the heads reached before still reachable, except those `recover` names as lost.
//!
//! A damaged last `REFS` record that reads as a torn write, followed by a writer, loses
//! nothing either (the writer sets aside what it would have cut; `recover` re-attaches it).
//!
//! Then kill -9 at random instants of `run`, `gc`, `fetch` and `recover` itself:
//! `recover` and `verify` after it lose nothing that was durable.
//!
//! `CHAOS_TRIALS=N` (default 1) runs N trials per (file class, damage) pair and prints
//! the figures (`CHAOS_SEED` varies the draws); `tools/chaos.sh N` runs it that way.
use crate::common;

use common::{files_under, fork_and_run, ledger, ledger_cmd, ok, text};
use mapf_ledger::ledger::event::*;
use mapf_ledger::ledger::{Hash, Ledger, Meta};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

const PLAN: &str = include_str!("plans/tiny.toml");

/// A ledger with history worth losing: several commits on `main`, two forks with
/// commits of their own, small blobs (in the blob pack) and large ones (files), a
/// saved index and a filled projection cache.
fn fixture(dir: &Path) {
    let mut l = Ledger::create(dir, PLAN.as_bytes()).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let mut step = 0u64;
    let mut commit = |l: &mut Ledger, branch: &str, n: usize| {
        let mut items = Vec::new();
        for _ in 0..n {
            step += 1;
            // Alternate small (packed) and large (file) blobs.
            let len = if step % 3 == 0 {
                6000
            } else {
                rng.random_range(50..2000)
            };
            let bytes: Vec<u8> = (0..len).map(|_| rng.random()).collect();
            let blob = l.put_blob(&bytes).unwrap();
            items.push((
                EventBody::CheckpointSaved(CheckpointSaved {
                    step,
                    blob,
                    params: blob,
                }),
                1,
                Meta::now(),
            ));
            items.push((common::gradient_step(step, blob, step), 1, Meta::now()));
        }
        l.append(branch, items).unwrap()
    };
    let mut mid = Vec::new();
    for _ in 0..4 {
        mid.extend(commit(&mut l, "main", 3));
    }
    let head = l.head("main").unwrap();
    l.fork("b", &head).unwrap();
    commit(&mut l, "b", 2);
    commit(&mut l, "main", 2);
    l.fork("c", &mid[7]).unwrap();
    commit(&mut l, "c", 2);
    commit(&mut l, "b", 2);
    commit(&mut l, "main", 2);
    l.rebuild().unwrap();
    l.save_index().unwrap();
}

/// What the heads reach: events and the blobs they name.
#[derive(Default)]
struct Reach {
    events: BTreeSet<Hash>,
    blobs: BTreeSet<Hash>,
}

fn reach(dir: &Path) -> Reach {
    let l = Ledger::open_read_only(dir).unwrap();
    let mut r = Reach::default();
    for (_, head) in l.branches().unwrap() {
        for h in l.ancestry(&head).unwrap() {
            if r.events.insert(h) {
                r.blobs.extend(l.event(&h).unwrap().body.blobs());
            }
        }
    }
    r
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let p = e.path();
        if p.is_dir() {
            copy_dir(&p, &to.join(e.file_name()));
        } else if e.file_name() != "LOCK" {
            std::fs::copy(&p, to.join(e.file_name())).unwrap();
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Class {
    EventPack,
    BlobPack,
    LooseBlob,
    RefsLast,
    RefsEarlier,
    Index,
    Sled,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Damage {
    Flip,
    Truncate,
    ZeroPage,
}

/// The file of a class to damage and the byte range that matters in it.
fn target(dir: &Path, class: Class, rng: &mut ChaCha8Rng) -> (PathBuf, u64, u64) {
    let whole = |p: PathBuf| {
        let n = std::fs::metadata(&p).unwrap().len();
        (p, 0, n)
    };
    match class {
        Class::EventPack => whole(dir.join("packs/pack-00000001.pack")),
        Class::BlobPack => whole(dir.join("packs/blobs-00000001.pack")),
        Class::LooseBlob => {
            let mut files: Vec<PathBuf> = files_under(&dir.join("blobs"));
            files.sort();
            whole(files[rng.random_range(0..files.len())].clone())
        }
        Class::RefsLast | Class::RefsEarlier => {
            let p = dir.join("REFS");
            let b = std::fs::read(&p).unwrap();
            let spans = mapf_ledger::ledger::refs::records(&b);
            let (s, e) = if class == Class::RefsLast {
                *spans.last().unwrap()
            } else {
                spans[rng.random_range(0..spans.len() - 1)]
            };
            (p, s as u64, e as u64)
        }
        Class::Index => whole(dir.join("packs/INDEX")),
        Class::Sled => whole(dir.join("db/db")),
    }
}

/// Damage the file; returns whether any byte changed.
/// Damage `path` within `lo..hi`; the byte range changed (None when nothing changed).
fn damage(
    path: &Path,
    lo: u64,
    hi: u64,
    how: Damage,
    class: Class,
    rng: &mut ChaCha8Rng,
) -> Option<(u64, u64)> {
    let before = std::fs::read(path).unwrap();
    let mut b = before.clone();
    let at = rng.random_range(lo..hi) as usize;
    let range = match how {
        Damage::Flip => {
            b[at] ^= 1 << rng.random_range(0..8);
            (at, at + 1)
        }
        // An earlier REFS record cannot be cut without the later ones: its bytes are
        // zeroed instead.
        Damage::Truncate if class == Class::RefsEarlier => {
            let end = (at + 16).min(hi as usize);
            b[at..end].fill(0);
            (at, end)
        }
        Damage::Truncate => {
            b.truncate(at);
            (at, before.len())
        }
        Damage::ZeroPage => {
            let page = at / 4096 * 4096;
            let end = (page + 4096).min(before.len());
            b[page..end].fill(0);
            (page, end)
        }
    };
    std::fs::write(path, &b).unwrap();
    (b != before).then_some((range.0 as u64, range.1 as u64))
}

/// Each event's frame in the event pack, `[start, end)` (a frame ends where the next
/// begins, the last at the file's end), and its ancestry.
fn frames_and_ancestry(dir: &Path) -> BTreeMap<Hash, ((u64, u64), Vec<Hash>)> {
    let l = Ledger::open_read_only(dir).unwrap();
    let pack = dir.join("packs/pack-00000001.pack");
    let len = std::fs::metadata(&pack).unwrap().len();
    let mut at: Vec<(u64, Hash)> = reach(dir)
        .events
        .iter()
        .map(|h| {
            let loc = l.location(h).unwrap();
            assert_eq!(loc.pack.file_name(), pack.file_name(), "one event pack");
            (loc.offset, *h)
        })
        .collect();
    at.sort();
    (0..at.len())
        .map(|i| {
            let end = at.get(i + 1).map_or(len, |n| n.0);
            let h = at[i].1;
            (h, ((at[i].0, end), l.ancestry(&h).unwrap()))
        })
        .collect()
}

#[derive(Default)]
struct Tally {
    trials: u32,
    detected: u32,
    harmless: u32,
    recovered: u32,
    /// Genesis itself was in the damaged bytes.
    unrecoverable: u32,
    lost_events: u32,
    lost_blobs: u32,
}

#[test]
fn damage_to_any_file_is_named_and_recovered_losing_only_the_damaged_bytes() {
    let trials: u64 = std::env::var("CHAOS_TRIALS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("base");
    fixture(&base);
    let before = reach(&base);
    assert!(before.events.len() > 40 && before.blobs.len() > 20);
    let frames = frames_and_ancestry(&base);
    let classes = [
        Class::EventPack,
        Class::BlobPack,
        Class::LooseBlob,
        Class::RefsLast,
        Class::RefsEarlier,
        Class::Index,
        Class::Sled,
    ];
    let seed = std::env::var("CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2026);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut table = Vec::new();
    for class in classes {
        for how in [Damage::Flip, Damage::Truncate, Damage::ZeroPage] {
            let mut t = Tally::default();
            for trial in 0..trials {
                let d = tmp.path().join(format!("{class:?}-{how:?}-{trial}"));
                copy_dir(&base, &d);
                let (file, lo, hi) = target(&d, class, &mut rng);
                let Some(damaged) = damage(&file, lo, hi, how, class, &mut rng) else {
                    continue;
                };
                t.trials += 1;
                let ctx = format!("{class:?} {how:?} trial {trial} ({})", file.display());
                let name = file.file_name().unwrap().to_string_lossy().into_owned();
                let v = ledger(&d, &["verify"]);
                let said = text(&v);
                let named = match class {
                    // A loose blob is named by its id (the file name is its hex tail).
                    Class::LooseBlob => said.contains(&name[..10]),
                    Class::Sled => said.contains("projection cache"),
                    _ => said.contains(&name),
                };
                match (v.status.code(), class) {
                    (Some(1), _) if named => t.detected += 1,
                    // A superseded record is a warning: history is whole.
                    (Some(0), Class::RefsEarlier) if said.contains("WARN") && named => {
                        t.detected += 1;
                        assert_eq!(
                            ledger(&d, &["verify", "--strict"]).status.code(),
                            Some(1),
                            "{ctx}: --strict fails on the warning"
                        );
                    }
                    // sled's file has free space; verify read every entry back.
                    (Some(0), Class::Sled) => t.harmless += 1,
                    _ => panic!("{ctx}: verify did not name the damage: {said}"),
                }
                let r = ledger(&d, &["recover", "--json"]);
                let report: serde_json::Value = serde_json::from_str(&ok(&r))
                    .unwrap_or_else(|e| panic!("{ctx}: recover --json: {e}"));
                common::schema::validates("recover", &report);
                let v = ledger(&d, &["verify"]);
                // Damage that took genesis takes every branch with it (nothing is left
                // to root history in); the report must say so, and verify keeps failing.
                let all_lost = report["branches"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .all(|b| b["after"].is_null());
                if all_lost {
                    assert!(text(&v).contains("no branches"), "{ctx}: {}", text(&v));
                    t.lost_events += before.events.len() as u32;
                    t.unrecoverable += 1;
                    continue;
                }
                assert_eq!(
                    v.status.code(),
                    Some(0),
                    "{ctx}: after recover: {}",
                    text(&v)
                );
                t.recovered += 1;
                let named_lost = |key: &str| -> BTreeSet<Hash> {
                    report[key]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|h| h.as_str().unwrap().parse().unwrap())
                        .collect()
                };
                let after = reach(&d);
                let lost: BTreeSet<Hash> = named_lost("lost_events")
                    .union(&named_lost("cut_off_events"))
                    .copied()
                    .collect();
                let gone: Vec<&Hash> = before.events.difference(&after.events).collect();
                for h in &gone {
                    assert!(
                        lost.contains(h),
                        "{ctx}: event {} lost unreported; recover said {report}",
                        h.short()
                    );
                }
                let lost_blobs = named_lost("lost_blobs");
                let l = Ledger::open_read_only(&d).unwrap();
                for b in before.blobs.iter().filter(|b| after.blobs.contains(b)) {
                    assert!(
                        l.has_blob(b).unwrap() || lost_blobs.contains(b),
                        "{ctx}: blob {} lost unreported",
                        b.short()
                    );
                }
                // Every event outside the damaged bytes survives: still reachable, unless
                // its history runs through a damaged frame (then reported cut off).
                let hit = |h: &Hash| {
                    class == Class::EventPack && {
                        let (a, b) = frames[h].0;
                        a < damaged.1 && damaged.0 < b
                    }
                };
                for (h, (_, ancestry)) in &frames {
                    if hit(h) {
                        continue;
                    }
                    if ancestry.iter().any(hit) {
                        assert!(
                            after.events.contains(h) || lost.contains(h),
                            "{ctx}: event {} (intact, history through the damage) neither kept nor reported",
                            h.short()
                        );
                    } else {
                        assert!(
                            after.events.contains(h),
                            "{ctx}: event {} lies outside the damaged bytes {damaged:?} with its whole history, yet no branch reaches it after recover",
                            h.short()
                        );
                    }
                }
                t.lost_events += gone.len() as u32;
                t.lost_blobs += lost_blobs.len() as u32;
                // Everything damaged was kept aside.
                if report["changed"].as_bool().unwrap() {
                    let copy = report["damaged_copy"].as_str().unwrap();
                    assert!(Path::new(copy).is_dir(), "{ctx}");
                }
                // And the ledger takes new history again.
                if common::heads(&d).iter().any(|(n, _)| n == "main") {
                    ok(&common::append_loop::run(&d, 3, 1));
                }
            }
            table.push((class, how, t));
        }
    }
    println!("class        damage    trials detected harmless recovered no-genesis lost-events lost-blobs");
    for (c, h, t) in &table {
        println!(
            "{:<12} {:<9} {:>6} {:>8} {:>8} {:>9} {:>10} {:>11} {:>10}",
            format!("{c:?}"),
            format!("{h:?}"),
            t.trials,
            t.detected,
            t.harmless,
            t.recovered,
            t.unrecoverable,
            t.lost_events,
            t.lost_blobs
        );
    }
}

/// The class where damage and a crash look alike: the last `REFS` record zeroed from a
/// point inside it to its end, which is what a write cut short leaves. `verify` cannot
/// tell it from a crash, so it warns (exit 0; `--strict` 1) of the intact records past
/// the committed lengths; then a writer opens the ledger and appends to `main`, setting
/// those records aside instead of cutting them away; `recover` re-attaches them. Every
/// event and blob the heads reached before the damage is reachable afterwards, with the
/// writer's new events.
#[test]
fn a_last_refs_record_damaged_like_a_torn_write_loses_nothing_to_the_next_writer() {
    let trials: u64 = std::env::var("CHAOS_TRIALS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let seed = std::env::var("CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2026);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("base");
    fixture(&base);
    let before = reach(&base);
    let mut whole = 0;
    for trial in 0..trials {
        let d = tmp.path().join(format!("torn-{trial}"));
        copy_dir(&base, &d);
        let refs = d.join("REFS");
        let mut b = std::fs::read(&refs).unwrap();
        let (s, e) = *mapf_ledger::ledger::refs::records(&b).last().unwrap();
        let cut = rng.random_range(s..e);
        b[cut..e].fill(0);
        std::fs::write(&refs, &b).unwrap();
        let ctx = format!("trial {trial} (REFS zeroed from {cut} to {e})");
        // Indistinguishable from a crash: a warning naming the pack, not a failure.
        let v = ledger(&d, &["verify"]);
        let said = text(&v);
        assert_eq!(v.status.code(), Some(0), "{ctx}: {said}");
        assert!(
            said.contains("WARN")
                && said.contains("pack-00000001.pack")
                && said.contains("intact record"),
            "{ctx}: verify did not warn of the records past the committed length: {said}"
        );
        assert_eq!(
            ledger(&d, &["verify", "--strict"]).status.code(),
            Some(1),
            "{ctx}"
        );
        // A writer opens the ledger and appends: it sets the records aside, and says so.
        let w = common::append_loop::run(&d, 3, 1);
        assert!(
            text(&w).contains("set aside"),
            "{ctx}: the writer did not report what it set aside: {}",
            text(&w)
        );
        let appended = common::heads(&d);
        let v = ledger(&d, &["verify"]);
        assert!(
            v.status.code() == Some(0) && text(&v).contains("set-aside"),
            "{ctx}: {}",
            text(&v)
        );
        // recover re-attaches them; then nothing is left to warn of.
        let report: serde_json::Value =
            serde_json::from_str(&ok(&ledger(&d, &["recover", "--json"]))).unwrap();
        common::schema::validates("recover", &report);
        assert!(
            report["lost_events"].as_array().unwrap().is_empty()
                && report["lost_blobs"].as_array().unwrap().is_empty(),
            "{ctx}: {report}"
        );
        let v = ledger(&d, &["verify", "--strict"]);
        assert_eq!(
            v.status.code(),
            Some(0),
            "{ctx}: after recover: {}",
            text(&v)
        );
        let after = reach(&d);
        let gone: Vec<String> = before
            .events
            .difference(&after.events)
            .map(|h| h.short())
            .collect();
        assert!(
            gone.is_empty(),
            "{ctx}: events lost: {gone:?}; recover said {report}"
        );
        let l = Ledger::open_read_only(&d).unwrap();
        for blob in &before.blobs {
            assert!(
                l.has_blob(blob).unwrap(),
                "{ctx}: blob {} lost",
                blob.short()
            );
        }
        // The writer's own commit is still main's.
        let main = appended.iter().find(|(n, _)| n == "main").unwrap();
        assert!(common::heads(&d).contains(main), "{ctx}");
        whole += 1;
    }
    println!("RefsTornLike ZeroTail  trials {trials} every-event-kept {whole}");
}

/// Kill `args` at a random instant within `spread` ms of its start, then
/// `recover` and `verify`: every event the durable heads reached is still reached.
/// Returns whether the kill hit (the process was still running when it came).
fn kill_then_recover(d: &Path, args: &[&str], rng: &mut ChaCha8Rng, spread: u64) -> bool {
    let mut child = ledger_cmd(d, args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(rng.random_range(0..spread)));
    let hit = child.try_wait().unwrap().is_none();
    let _ = child.kill();
    child.wait().unwrap();
    // What was durable when it died: the heads of the last complete REFS record.
    let durable = reach(d);
    let r = ledger(d, &["recover", "--json"]);
    let report: serde_json::Value = serde_json::from_str(&ok(&r)).unwrap();
    assert!(
        report["lost_events"].as_array().unwrap().is_empty()
            && report["lost_blobs"].as_array().unwrap().is_empty(),
        "{args:?}: recover after a kill lost something: {report}"
    );
    let v = ledger(d, &["verify"]);
    assert_eq!(v.status.code(), Some(0), "{args:?}: {}", text(&v));
    let after = reach(d);
    assert!(
        durable.events.is_subset(&after.events),
        "{args:?}: recover lost durable events"
    );
    hit
}

/// Kills of one command until `want` hit it while it ran (at most `tries`), halving the
/// spread after a miss; panics when none hit. `before` prepares each attempt.
fn kills_that_hit(
    what: &str,
    want: u32,
    tries: u32,
    mut spread: u64,
    rng: &mut ChaCha8Rng,
    mut attempt: impl FnMut(&mut ChaCha8Rng, u64) -> bool,
) {
    let (mut hits, mut n) = (0, 0);
    while hits < want && n < tries {
        if attempt(rng, spread) {
            hits += 1;
        } else {
            spread = (spread / 2).max(20);
        }
        n += 1;
    }
    println!("kill -9 during {what}: {hits} of {n} kills hit a running process");
    assert!(
        hits > 0,
        "{what}: no kill hit a running process in {n} tries"
    );
}

#[test]
fn kill_9_during_run_gc_fetch_and_recover_loses_nothing_durable() {
    let tmp = tempfile::tempdir().unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    let plan = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/plans/tiny.toml");
    // run: the tiny grid plan, killed at random instants, resumed by the next round.
    let d = tmp.path().join("run");
    ok(&ledger(&d, &["init", "--plan", plan]));
    kills_that_hit("run", 3, 6, 3000, &mut rng, |rng, spread| {
        kill_then_recover(&d, &["run", "--quiet"], rng, spread)
    });
    ok(&ledger(&d, &["run", "--quiet"]));
    // gc: a deleted fork's events go; kills at random instants of the rewrite.
    kills_that_hit("gc", 3, 8, 400, &mut rng, |rng, spread| {
        fork_and_run(&d, "stage2", "random", "scratch");
        ok(&ledger(&d, &["branch", "delete", "scratch"]));
        kill_then_recover(&d, &["gc"], rng, spread)
    });
    // fetch: into a fresh ledger from the run's ledger (a fresh one each try, so that
    // every fetch has something to copy).
    let mut k = 0;
    kills_that_hit("fetch", 3, 8, 400, &mut rng, |rng, spread| {
        k += 1;
        let into = tmp.path().join(format!("into-{k}"));
        ok(&ledger(&into, &["init", "--plan", plan]));
        kill_then_recover(
            &into,
            &["fetch", d.to_str().unwrap(), "--prefix", "w/"],
            rng,
            spread,
        )
    });
    // recover itself, on a ledger whose REFS lost its last record.
    let before_damage = reach(&d);
    kills_that_hit("recover", 3, 8, 300, &mut rng, |rng, spread| {
        let x = tmp.path().join(format!("rec-{}", rng.random::<u32>()));
        copy_dir(&d, &x);
        let refs = x.join("REFS");
        let b = std::fs::read(&refs).unwrap();
        let (_, end) = *mapf_ledger::ledger::refs::records(&b).last().unwrap();
        let mut b2 = b.clone();
        b2[end - 30] ^= 4;
        std::fs::write(&refs, &b2).unwrap();
        // `x` is a copy of `d`, which stays intact: what the heads reached before.
        let mut child = ledger_cmd(&x, &["recover"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(rng.random_range(0..spread)));
        let hit = child.try_wait().unwrap().is_none();
        let _ = child.kill();
        child.wait().unwrap();
        ok(&ledger(&x, &["recover"]));
        let v = ledger(&x, &["verify"]);
        assert_eq!(
            v.status.code(),
            Some(0),
            "recover after a killed recover: {}",
            text(&v)
        );
        let after = reach(&x);
        assert!(
            before_damage.events.is_subset(&after.events),
            "a killed recover lost events"
        );
        hit
    });
}

/// A blob lost to damage is a named warning after `recover`, and fetching from a copy
/// of the ledger that still has it brings it back.
#[test]
fn a_lost_blob_comes_back_from_a_copy() {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("base");
    fixture(&base);
    let d = tmp.path().join("d");
    copy_dir(&base, &d);
    let mut files = files_under(&d.join("blobs"));
    files.sort();
    let mut b = std::fs::read(&files[0]).unwrap();
    b[100] ^= 0x20;
    std::fs::write(&files[0], b).unwrap();
    assert_eq!(ledger(&d, &["verify"]).status.code(), Some(1));
    let report: serde_json::Value =
        serde_json::from_str(&ok(&ledger(&d, &["recover", "--json"]))).unwrap();
    let lost = report["lost_blobs"].as_array().unwrap();
    assert_eq!(lost.len(), 1, "{report}");
    let v = ledger(&d, &["verify"]);
    assert_eq!(v.status.code(), Some(0), "{}", text(&v));
    let said = text(&v);
    assert!(
        said.contains("WARN") && said.contains("lost to damage"),
        "{said}"
    );
    assert_eq!(ledger(&d, &["verify", "--strict"]).status.code(), Some(1));
    ok(&ledger(&d, &["fetch", base.to_str().unwrap()]));
    let v = ledger(&d, &["verify", "--strict"]);
    assert_eq!(v.status.code(), Some(0), "{}", text(&v));
    assert!(!text(&v).contains("WARN"));
}
