//! Damage detection: a flipped byte in an event record, a blob file or a ref, and a
//! truncated blob file make `ledger verify` exit 1 naming the bad event, blob or ref.
use mapf_ledger::ledger::event::*;
use mapf_ledger::ledger::{Hash, Ledger, Meta};
use rand::{Rng, SeedableRng};
use std::path::{Path, PathBuf};
use std::process::Command;

const PLAN: &str = include_str!("../ledgers/demo.toml");

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
        items.push((
            EventBody::GradientStep(GradientStep {
                step: i,
                params: big_blob,
                loss: i,
                policy_loss: i,
                kl: 0,
                entropy: 0,
                grad_norm: 0,
                reward_mean: 0,
            }),
            1,
            Meta::now(),
        ));
    }
    let events = l.append("main", items).unwrap();
    Fixture {
        _tmp: tmp,
        dir,
        events,
        big_blob,
    }
}

fn verify(dir: &Path) -> (Option<i32>, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_ledger"))
        .arg("--ledger")
        .arg(dir)
        .arg("verify")
        .output()
        .unwrap();
    (
        o.status.code(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
    )
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
fn flipped_byte_in_a_ref_names_the_ref() {
    let f = fixture();
    for (i, mutate) in [0usize, 31, 32].into_iter().enumerate() {
        {
            let db = open_sled(&f.dir.join("db"));
            let refs = db.open_tree("refs").unwrap();
            let mut v = f.events.last().unwrap().0.to_vec();
            if mutate < 32 {
                v[mutate] ^= 0x80;
            } else {
                v.push(0);
            }
            refs.insert(b"b/main", v).unwrap();
            db.flush().unwrap();
        }
        let (code, out) = verify(&f.dir);
        assert_eq!(code, Some(1), "case {i}: {out}");
        assert!(out.contains("ref main"), "case {i}: {out}");
    }
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
