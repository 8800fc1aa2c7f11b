//! Ledger benchmarks (hand-timed; `cargo bench --bench ledger`). Prints the figures
//! the ledger issue sets goals for: durable append rate, rebuild rate, verify
//! throughput, fork latency vs ledger size, stored bytes per trajectory, random lookup.
//!
//! `LEDGER_BENCH_EVENTS` (default 1,000,000) sets the size of the large ledger;
//! `LEDGER_BENCH_DIR` where it is written (default: a temporary directory).
use mapf_ledger::env::simulate::FailureKind;
use mapf_ledger::ledger::event::*;
use mapf_ledger::ledger::{Hash, Ledger, Meta};
use rand::{Rng, SeedableRng};
use std::time::Instant;

const PLAN: &str = include_str!("../../ledgers/demo.toml");

fn small(i: u64) -> EventBody {
    EventBody::GradientStep(GradientStep {
        step: i,
        params: Hash::of_blob(&i.to_le_bytes()),
        loss: (i as f64 * 1e-3).to_bits(),
        policy_loss: 0,
        kl: 0,
        entropy: 0,
        grad_norm: 1.0f64.to_bits(),
        reward_mean: 0,
    })
}

fn dir_size(p: &std::path::Path) -> u64 {
    let mut n = 0;
    if let Ok(rd) = std::fs::read_dir(p) {
        for e in rd.flatten() {
            let m = e.metadata().unwrap();
            n += if m.is_dir() {
                dir_size(&e.path())
            } else {
                m.len()
            };
        }
    }
    n
}

fn main() {
    let total: u64 = std::env::var("LEDGER_BENCH_EVENTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let tmp = tempfile::tempdir().unwrap();
    let base = std::env::var("LEDGER_BENCH_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| tmp.path().to_path_buf());
    let _ = std::fs::remove_dir_all(base.join("big"));
    let d = base.join("big");
    let mut l = Ledger::create(&d, PLAN.as_bytes()).unwrap();
    let event_bytes = mapf_ledger::ledger::event::encode_event(&Event {
        parent: Some(Hash::default()),
        stage: 1,
        body: small(12345),
    })
    .len();
    println!("ledger bench: {total} small events ({event_bytes} encoded bytes each)");

    // Append in durable batches; fork latency sampled as the ledger grows.
    let batch = 10_000u64;
    let mut appended = 0u64;
    let mut append_secs = 0.0;
    let mut marks = vec![1_000u64, 10_000, 100_000, 1_000_000];
    marks.retain(|&m| m <= total);
    let mut fork_lat = Vec::new();
    let mut all = Vec::with_capacity(total as usize);
    let mut next_mark = 0;
    while appended < total {
        let n = batch.min(total - appended);
        // Small batches first so the 1e3 mark is hit exactly.
        let n = if next_mark < marks.len() {
            n.min(marks[next_mark] - appended)
        } else {
            n
        };
        let items: Vec<_> = (appended..appended + n)
            .map(|i| (small(i), 1, Meta::default()))
            .collect();
        let t = Instant::now();
        let hs = l.append("main", items).unwrap();
        append_secs += t.elapsed().as_secs_f64();
        appended += n;
        all.extend(hs);
        if next_mark < marks.len() && appended == marks[next_mark] {
            let mut lat = Vec::new();
            for k in 0..21 {
                let at = all[(k * 7919) % all.len()];
                let t = Instant::now();
                l.fork(&format!("fork-{appended}-{k}"), &at).unwrap();
                lat.push(t.elapsed().as_secs_f64() * 1e3);
            }
            lat.sort_by(|a, b| a.total_cmp(b));
            fork_lat.push((appended, lat[10], lat[20]));
            next_mark += 1;
        }
    }
    println!(
        "append: {appended} events in durable batches of <= {batch}: {:.3}s = {:.0} events/s",
        append_secs,
        appended as f64 / append_secs
    );
    // Bigger batches.
    let items: Vec<_> = (0..100_000u64)
        .map(|i| (small(total + i), 1, Meta::default()))
        .collect();
    let t = Instant::now();
    all.extend(l.append("main", items).unwrap());
    let s = t.elapsed().as_secs_f64();
    println!(
        "append: one durable batch of 100000 events: {s:.3}s = {:.0} events/s",
        1e5 / s
    );
    for (n, med, max) in &fork_lat {
        println!("fork: at {n:>8} events: median {med:.3} ms, max {max:.3} ms (21 forks)");
    }
    let pack_bytes = dir_size(&d.join("packs"));
    println!(
        "disk: packs {:.1} MB ({:.1} bytes/event incl. frame), whole ledger {:.1} MB",
        pack_bytes as f64 / 1e6,
        pack_bytes as f64 / all.len() as f64,
        dir_size(&d) as f64 / 1e6
    );
    let t = Instant::now();
    drop(l);
    println!(
        "close: the writer saves its index (packs/INDEX) in {:.3}s",
        t.elapsed().as_secs_f64()
    );

    let t = Instant::now();
    let r = Ledger::open_read_only(&d).unwrap();
    println!(
        "open (reader): {} events indexed in {:.4}s",
        r.event_count(),
        t.elapsed().as_secs_f64()
    );
    drop(r);
    let t = Instant::now();
    let mut l = Ledger::open(&d).unwrap();
    println!(
        "open (writer): {} events indexed in {:.4}s",
        l.event_count(),
        t.elapsed().as_secs_f64()
    );

    // Random lookups.
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
    let n = 200_000;
    let picks: Vec<Hash> = (0..n)
        .map(|_| all[rng.random_range(0..all.len())])
        .collect();
    let t = Instant::now();
    let mut steps = 0u64;
    for h in &picks {
        if let EventBody::GradientStep(g) = l.event(h).unwrap().body {
            steps = steps.wrapping_add(g.step);
        }
    }
    let s = t.elapsed().as_secs_f64();
    println!(
        "lookup: {n} random events by hash: {:.2} us each (checksum {steps})",
        s / n as f64 * 1e6
    );

    // Rebuild.
    let r = l.rebuild().unwrap();
    println!(
        "rebuild: {} events over {} branches in {:.3}s = {:.0} events/s",
        r.events,
        r.branches,
        r.seconds,
        r.events as f64 / r.seconds
    );

    // Verify, small events only, then with checkpoint-sized blobs.
    let v = l.verify(&mapf_ledger::train::TrainState::referenced_blobs);
    assert!(v.ok(), "{:?}", v.first());
    println!(
        "verify (small events): {:.1} MB in {:.3}s = {:.0} MB/s ({} events)",
        (v.event_bytes + v.blob_bytes) as f64 / 1e6,
        v.seconds,
        v.bytes_per_second() / 1e6,
        v.events
    );
    let mut items = Vec::new();
    for k in 0..8u64 {
        let blob: Vec<u8> = (0..32u64 << 20)
            .map(|i| (i.wrapping_mul(2654435761).wrapping_add(k) >> 13) as u8)
            .collect();
        let h = l.put_blob(&blob).unwrap();
        items.push((
            EventBody::CheckpointSaved(CheckpointSaved {
                step: k,
                blob: h,
                params: h,
            }),
            1,
            Meta::default(),
        ));
    }
    l.append("main", items).unwrap();
    let v = l.verify(&mapf_ledger::train::TrainState::referenced_blobs);
    assert!(v.ok());
    println!(
        "verify (with 8 x 32 MiB checkpoints): {:.1} MB in {:.3}s = {:.0} MB/s",
        (v.event_bytes + v.blob_bytes) as f64 / 1e6,
        v.seconds,
        v.bytes_per_second() / 1e6
    );
    drop(l);
    let _ = std::fs::remove_dir_all(&d);

    // Where verify's time goes, per small event, on one core.
    let encoded: Vec<Vec<u8>> = (0..200_000u64)
        .map(|i| {
            mapf_ledger::ledger::event::encode_event(&Event {
                parent: Some(Hash::of_blob(&i.to_le_bytes())),
                stage: 1,
                body: small(i),
            })
        })
        .collect();
    let per = |f: &dyn Fn(&[u8]) -> u64| {
        let t = Instant::now();
        let mut acc = 0u64;
        for e in &encoded {
            acc = acc.wrapping_add(f(e));
        }
        (t.elapsed().as_secs_f64() / encoded.len() as f64 * 1e9, acc)
    };
    let (h, _) = per(&|e| Hash::of_event(e).prefix_u64());
    let (c, _) = per(&|e| crc32fast::hash(e) as u64);
    let (dec, _) = per(&|e| mapf_ledger::ledger::event::decode_event(e).unwrap().stage as u64);
    println!("verify cost per small event (one core): blake3 {h:.0} ns, crc32 {c:.0} ns, decode {dec:.0} ns");

    // Stored bytes per trajectory.
    let td = base.join("traj");
    let _ = std::fs::remove_dir_all(&td);
    let mut l = Ledger::create(&td, PLAN.as_bytes()).unwrap();
    let instances: Vec<Hash> = (0..64u32)
        .map(|i| l.put_blob(format!("instance {i}").as_bytes()).unwrap())
        .collect();
    let before = dir_size(&td.join("packs"));
    let mut n = 0;
    for s in 0..64u64 {
        let mut trajectories = Vec::new();
        for (i, _) in instances.iter().enumerate() {
            for g in 0..8u32 {
                let x = rng.random::<u32>();
                let valid = x % 3 != 0;
                trajectories.push(Trajectory {
                    instance: i as u32,
                    plan: (0..12).map(|_| rng.random::<u8>()).collect(),
                    valid,
                    optimal: valid && g % 2 == 0,
                    failure: if valid {
                        None
                    } else {
                        Some(FailureKind::EdgeConflict)
                    },
                    cost: if valid { 8 + x % 9 } else { 0 },
                    optimal_cost: 8,
                    reward_bits: if valid {
                        1.0f32.to_bits()
                    } else {
                        (-1.0f32).to_bits()
                    },
                });
            }
        }
        n += trajectories.len();
        let b = TrajectoryBatch {
            step: s,
            instances: instances.clone(),
            trajectories,
        };
        l.append("main", vec![(EventBody::Trajectories(b), 1, Meta::now())])
            .unwrap();
    }
    let bytes = dir_size(&td.join("packs")) - before;
    println!(
        "trajectories: {n} (2 agents, 12-byte plans, 64 instances x group 8 per batch): {:.1} stored bytes each",
        bytes as f64 / n as f64
    );
}
