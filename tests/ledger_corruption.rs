//! Damage detection: a flipped byte in an event record, a blob (file or small-blob
//! pack), the refs file or the sled projection cache, and a truncated blob file or
//! pack, make `ledger verify` exit 1 naming the bad event, blob, file or ref.
use crate::common;

use common::{ledger, ok, text};
use mapf_ledger::ledger::event::*;
use mapf_ledger::ledger::{Hash, Ledger, Meta};
use rand::{Rng, SeedableRng};
use std::path::{Path, PathBuf};

/// A plan small enough to be stored inline (under the store's 4 KiB inline limit): the
/// damage tests below rely on the genesis plan being the one small blob.
const PLAN: &str = include_str!("plans/tiny.toml");

struct Fixture {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    events: Vec<Hash>,
    big_blob: Hash,
}

fn fixture() -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("l");
    let mut l = Ledger::create(&dir, PLAN.as_bytes()).unwrap();
    let big: Vec<u8> = (0..50_000u32).map(|i| (i * 7 % 256) as u8).collect();
    let big_blob = l.put_blob(&big).unwrap();
    let mut items = vec![(
        EventBody::CheckpointSaved(CheckpointSaved {
            step: 0,
            blob: big_blob,
            params: big_blob,
        }),
        1,
        Meta::now(),
    )];
    for i in 0..20u64 {
        items.push((common::gradient_step(i, big_blob, i), 1, Meta::now()));
    }
    let events = l.append("main", items).unwrap();
    Fixture {
        _tmp: tmp,
        dir,
        events,
        big_blob,
    }
}

/// `ledger rebuild`, which must succeed.
fn rebuild(dir: &Path) {
    ok(&ledger(dir, &["rebuild"]));
}

/// `ledger verify`: its exit code and everything it printed.
fn verify(dir: &Path) -> (Option<i32>, String) {
    let o = ledger(dir, &["verify"]);
    (o.status.code(), text(&o))
}

fn flip(path: &Path, at: u64) {
    let mut b = std::fs::read(path).unwrap();
    b[at as usize] ^= 0x01;
    std::fs::write(path, b).unwrap();
}

#[test]
fn intact_ledger_verifies() {
    let f = fixture();
    assert_eq!(verify(&f.dir).0, Some(0));
}

#[test]
fn flipped_byte_in_an_event_names_that_event() {
    let f = fixture();
    let target = f.events[7];
    let loc = Ledger::open_read_only(&f.dir)
        .unwrap()
        .location(&target)
        .unwrap();
    flip(&loc.pack, loc.event_offset + loc.event_len as u64 / 2);
    let (code, out) = verify(&f.dir);
    assert_eq!(code, Some(1), "{out}");
    let first = out.lines().next().unwrap();
    assert!(
        first.contains(&format!("event {}", target.short())),
        "{out}"
    );
}

#[test]
fn flipped_byte_anywhere_in_committed_records_is_detected() {
    let f = fixture();
    let pack = f.dir.join("packs/pack-00000001.pack");
    let len = std::fs::metadata(&pack).unwrap().len();
    let orig = std::fs::read(&pack).unwrap();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
    for _ in 0..12 {
        let at = rng.random_range(0..len);
        flip(&pack, at);
        let (code, out) = verify(&f.dir);
        assert_eq!(code, Some(1), "flip at {at} undetected: {out}");
        std::fs::write(&pack, &orig).unwrap();
    }
    assert_eq!(verify(&f.dir).0, Some(0));
}

#[test]
fn flipped_and_truncated_blob_files_name_the_blob() {
    let f = fixture();
    let hex = f.big_blob.to_hex();
    let path = f.dir.join("blobs").join(&hex[..2]).join(&hex[2..]);
    let orig = std::fs::read(&path).unwrap();
    flip(&path, 1234);
    let (code, out) = verify(&f.dir);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains(&format!("blob {}", f.big_blob.short())),
        "{out}"
    );
    std::fs::write(&path, &orig[..orig.len() - 100]).unwrap();
    let (code, out) = verify(&f.dir);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains(&format!("blob {}", f.big_blob.short())) && out.contains("truncated"),
        "{out}"
    );
    std::fs::remove_file(&path).unwrap();
    let (code, out) = verify(&f.dir);
    assert_eq!(code, Some(1));
    assert!(out.contains("missing"), "{out}");
}

#[test]
fn damaged_refs_file_or_a_ref_to_nothing_is_named() {
    use mapf_ledger::ledger::refs::Refs;
    let f = fixture();
    let refs = f.dir.join("REFS");
    let orig = std::fs::read(&refs).unwrap();
    // A byte of the last record (the one that counts; zeros pad the file after it).
    let (_, end) = Refs::parse_log(&f.dir, &orig).unwrap();
    flip(&refs, end as u64 - 80);
    let (code, out) = verify(&f.dir);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("REFS") && out.contains("damaged"), "{out}");
    // A well-formed file whose ref points at no stored event.
    let (mut r, _) = Refs::parse_log(&f.dir, &orig).unwrap();
    r.branches.insert("main".into(), Hash::of_event(b"nothing"));
    mapf_ledger::ledger::refs::replace(&f.dir, &r).unwrap();
    let (code, out) = verify(&f.dir);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("ref main") && out.contains("unknown event"),
        "{out}"
    );
}

#[test]
fn flipped_byte_in_a_small_blob_names_the_blob() {
    let f = fixture();
    let pack = f.dir.join("packs/blobs-00000001.pack");
    let len = std::fs::metadata(&pack).unwrap().len();
    // The genesis plan is the one small blob: flip a byte of its content.
    flip(&pack, len - 20);
    let (code, out) = verify(&f.dir);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("blob ") && out.contains("blobs-00000001.pack offset 8"),
        "{out}"
    );
}

/// A projection cache sled finds corrupt (a full disk or a crash can leave one) is
/// derived data, never a reason to refuse: `verify` warns and exits 0, naming the
/// cache; the next writer's open sets it aside, says so, and remakes it; history is
/// untouched and the writer appends.
#[test]
fn a_corrupt_projection_cache_is_a_warning_and_the_writer_remakes_it() {
    let f = fixture();
    Ledger::open(&f.dir).unwrap().rebuild().unwrap();
    let db = f.dir.join("db/db");
    let mut b = std::fs::read(&db).unwrap();
    for x in &mut b[64..4096] {
        *x = 0xff;
    }
    std::fs::write(&db, b).unwrap();
    let (code, out) = verify(&f.dir);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("WARN")
            && out.contains("db (projection cache, sled)")
            && out.contains("corrupt")
            && out.contains("remakes it"),
        "{out}"
    );
    // The writer's open heals it and says so.
    let log = common::ledger(&f.dir, &["gc"]);
    let err = common::stderr(&log);
    assert!(log.status.success(), "{err}");
    assert!(
        err.contains("note:") && err.contains("projection cache") && err.contains("db.corrupt"),
        "{err}"
    );
    let mut w = Ledger::open(&f.dir).unwrap();
    assert!(w.healed().is_empty(), "healed once: {:?}", w.healed());
    assert_eq!(w.head("main").unwrap(), *f.events.last().unwrap());
    w.append("main", vec![]).unwrap();
    drop(w);
    assert_eq!(verify(&f.dir).0, Some(0));
}

/// A ledger written by the previous layout (refs, pack lengths and small blobs in sled)
/// is moved to `REFS` and small-blob packs the first time it is opened, with every
/// event, blob and head unchanged.
#[test]
fn a_ledger_of_the_sled_layout_is_migrated_on_open() {
    let f = fixture();
    let small: Vec<(Hash, Vec<u8>)> = {
        let l = Ledger::open_read_only(&f.dir).unwrap();
        let g = l.history("main").unwrap()[0].0;
        let EventBody::Genesis(gen) = l.event(&g).unwrap().body else {
            panic!("first event is genesis")
        };
        vec![(gen.plan_blob, l.blob(&gen.plan_blob).unwrap())]
    };
    // Rewrite the store in the old layout.
    let refs = mapf_ledger::ledger::refs::Refs::read(&f.dir)
        .unwrap()
        .unwrap();
    {
        let db = open_sled(&f.dir.join("db"));
        let t = db.open_tree("refs").unwrap();
        for (name, head) in &refs.branches {
            t.insert([&b"b/"[..], name.as_bytes()].concat(), &head.0[..])
                .unwrap();
        }
        for (id, len) in &refs.packs {
            t.insert(
                [&b"p/"[..], &id.to_be_bytes()[..]].concat(),
                &len.to_le_bytes()[..],
            )
            .unwrap();
        }
        let b = db.open_tree("blobs").unwrap();
        for (h, bytes) in &small {
            b.insert(h.0, bytes.as_slice()).unwrap();
        }
        db.flush().unwrap();
    }
    std::fs::remove_file(f.dir.join("REFS")).unwrap();
    std::fs::remove_file(f.dir.join("packs/blobs-00000001.pack")).unwrap();
    // A reader opens it (migrating once), then the writer.
    let l = Ledger::open_read_only(&f.dir).unwrap();
    assert_eq!(l.head("main").unwrap(), *f.events.last().unwrap());
    assert_eq!(l.blob(&small[0].0).unwrap(), small[0].1);
    assert!(
        l.verify(&mapf_ledger::train::TrainState::referenced_blobs)
            .ok(),
        "{:?}",
        l.verify(&mapf_ledger::train::TrainState::referenced_blobs)
            .problems
    );
    drop(l);
    assert!(f.dir.join("REFS").is_file());
    let mut w = Ledger::open(&f.dir).unwrap();
    w.append("main", vec![]).unwrap();
    assert_eq!(verify(&f.dir).0, Some(0));
}

/// Open sled directly, waiting out a lock left by a ledger this process just closed.
fn open_sled(path: &Path) -> sled::Db {
    for _ in 0..500 {
        match sled::open(path) {
            Ok(db) => return db,
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(10)),
        }
    }
    sled::open(path).unwrap()
}

#[test]
fn truncated_pack_names_the_pack_and_writers_refuse_it() {
    let f = fixture();
    let pack = f.dir.join("packs/pack-00000001.pack");
    let b = std::fs::read(&pack).unwrap();
    std::fs::write(&pack, &b[..b.len() - 10]).unwrap();
    let (code, out) = verify(&f.dir);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("pack-00000001.pack") && out.contains("truncated"),
        "{out}"
    );
    let e = Ledger::open(&f.dir)
        .err()
        .expect("a writer must not append to a damaged ledger");
    assert!(e.to_string().contains("pack-00000001.pack"), "{e}");
}

/// A saved index (`packs/INDEX`, here with a tail appended after it) answers exactly as
/// a scan of the packs does; damage to it is named by verify, a lookup it sends to the
/// wrong record fails naming it, and `rebuild` remakes it.
#[test]
fn a_saved_index_is_used_checked_and_remade() {
    let f = fixture();
    let history = |l: &Ledger| l.history("main").unwrap();
    {
        let l = Ledger::open(&f.dir).unwrap();
        l.save_index().unwrap();
    }
    let index = f.dir.join("packs").join("INDEX");
    assert!(index.is_file());
    let mut l = Ledger::open(&f.dir).unwrap();
    let tail = l
        .append(
            "main",
            vec![(common::gradient_step(99, f.big_blob, 1), 1, Meta::now())],
        )
        .unwrap()[0];
    let expected = history(&l);
    drop(l);
    let scanned_away = f.dir.join("INDEX.away");
    std::fs::rename(&index, &scanned_away).unwrap();
    let scanned = history(&Ledger::open_read_only(&f.dir).unwrap());
    std::fs::rename(&scanned_away, &index).unwrap();
    let r = Ledger::open_read_only(&f.dir).unwrap();
    assert_eq!(history(&r), expected);
    assert_eq!(scanned, expected);
    assert_eq!(r.event_count(), f.events.len() + 2);
    assert_eq!(
        r.resolve(&tail.to_hex()[..10]).unwrap(),
        mapf_ledger::ledger::Resolved::Event(tail)
    );
    let e = f.events[5].to_hex();
    assert_eq!(
        r.resolve(&e[..10]).unwrap(),
        mapf_ledger::ledger::Resolved::Event(f.events[5])
    );
    drop(r);
    assert_eq!(verify(&f.dir).0, Some(0));

    // One flipped bit in the sorted ids: verify names the index file, exit 1.
    let len = std::fs::metadata(&index).unwrap().len();
    let n = (f.events.len() + 1) as u64; // genesis and the fixture's events
    flip(&index, len - 4 - n * 56 + 3);
    let (code, out) = verify(&f.dir);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("packs/INDEX") && out.contains("rebuild"),
        "{out}"
    );
    // rebuild remakes it; verify passes again and history is unchanged.
    rebuild(&f.dir);
    assert_eq!(verify(&f.dir).0, Some(0));
    let l = Ledger::open(&f.dir).unwrap();
    l.save_index().unwrap();
    assert_eq!(history(&l), expected);
    drop(l);

    // An entry pointing at another record (checksum fixed up, as a buggy writer
    // would leave it): the lookup fails naming the index instead of returning the
    // wrong event.
    let mut b = std::fs::read(&index).unwrap();
    let n = n + 1; // the tail event is in the index now
    let entries = b.len() - 4 - (n as usize) * 20; // entries + ranks
    let (e1, e2) = (entries + 16 * 3 + 8, entries + 16 * 4 + 8);
    let (o1, o2): ([u8; 8], [u8; 8]) = (
        b[e1..e1 + 8].try_into().unwrap(),
        b[e2..e2 + 8].try_into().unwrap(),
    );
    b[e1..e1 + 8].copy_from_slice(&o2);
    b[e2..e2 + 8].copy_from_slice(&o1);
    let end = b.len() - 4;
    let sum = crc32fast::hash(&b[..end]);
    b[end..].copy_from_slice(&sum.to_le_bytes());
    std::fs::write(&index, &b).unwrap();
    let r = Ledger::open_read_only(&f.dir).unwrap();
    // The library names the repair as a type; the CLI names the command.
    let err = r.history("main").unwrap_err();
    assert!(
        matches!(
            err,
            mapf_ledger::ledger::LedgerError::Store(ledger_store::StoreError::Damaged {
                repair: mapf_ledger::ledger::Repair::Rebuild,
                ..
            })
        ) && err.to_string().contains("packs/INDEX"),
        "{err}"
    );
    drop(r);
    let log = common::ledger(&f.dir, &["log"]);
    assert_eq!(log.status.code(), Some(1));
    common::each_cause_once(&log);
    assert!(
        common::stderr(&log).contains("packs/INDEX")
            && common::stderr(&log).contains("`ledger rebuild` remakes it"),
        "{}",
        common::stderr(&log)
    );
    let (code, out) = verify(&f.dir);
    assert_eq!(code, Some(1), "{out}");

    // A segment consistent in itself (ids sorted, positions and ranks inverse, checksum
    // right) that gives two positions each other's ids: verify names the first position.
    rebuild(&f.dir);
    Ledger::open(&f.dir).unwrap().save_index().unwrap();
    let (code, out) = verify(&f.dir);
    assert_eq!(code, Some(0), "{out}");
    let mut b = std::fs::read(&index).unwrap();
    let n = n as usize;
    let ranks = b.len() - 4 - n * 4;
    let sorted_pos = ranks - n * 16 - n * 4;
    let u32_at = |b: &[u8], at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
    let (r1, r2) = (2usize, 5usize);
    let (p1, p2) = (
        u32_at(&b, sorted_pos + r1 * 4) as usize,
        u32_at(&b, sorted_pos + r2 * 4) as usize,
    );
    b[sorted_pos + r1 * 4..][..4].copy_from_slice(&(p2 as u32).to_le_bytes());
    b[sorted_pos + r2 * 4..][..4].copy_from_slice(&(p1 as u32).to_le_bytes());
    b[ranks + p1 * 4..][..4].copy_from_slice(&(r2 as u32).to_le_bytes());
    b[ranks + p2 * 4..][..4].copy_from_slice(&(r1 as u32).to_le_bytes());
    let end = b.len() - 4;
    let sum = crc32fast::hash(&b[..end]);
    b[end..].copy_from_slice(&sum.to_le_bytes());
    std::fs::write(&index, &b).unwrap();
    let (code, out) = verify(&f.dir);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains(&format!("index position {}", p1.min(p2))) && out.contains("rebuild"),
        "{out}"
    );
    // As the message says, `ledger rebuild` remakes it though its checksums are right.
    rebuild(&f.dir);
    let (code, out) = verify(&f.dir);
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(history(&Ledger::open_read_only(&f.dir).unwrap()), expected);
}
