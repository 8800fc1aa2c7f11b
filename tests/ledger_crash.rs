//! kill -9 of a writer appending in a loop, at random instants, many times: every time
//! the ledger verifies and its ref points at complete history including every batch
//! the writer reported durable. The writer is `common::append_loop`'s process.
use crate::common::append_loop;
use mapf_ledger::ledger::{Hash, Ledger};
use rand::{Rng, SeedableRng};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

#[test]
fn kill_9_at_random_instants_leaves_a_verifying_complete_ledger() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("l");
    let bin = env!("CARGO_BIN_EXE_ledger");
    let plan = concat!(env!("CARGO_MANIFEST_DIR"), "/ledgers/demo.toml");
    let st = Command::new(bin)
        .arg("--ledger")
        .arg(&d)
        .args(["init", "--plan", plan])
        .status()
        .unwrap();
    assert!(st.success());
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(2026);
    let mut acknowledged: Option<(Hash, u64)> = None;
    let mut kills_mid_run = 0;
    for round in 0..16 {
        let batch: i32 = rng.random_range(1..200);
        let mut child = append_loop::command(&d, batch as usize, None)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (first_tx, first_rx) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            let mut last = None;
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some((_, head, events)) = append_loop::report(&line) {
                    if last.is_none() {
                        let _ = first_tx.send(());
                    }
                    last = Some((head, events));
                }
            }
            last
        });
        // Even rounds kill at a random instant after the first durable batch (so the
        // kill lands mid-append however loaded the machine is); odd rounds at a random
        // instant from the start (possibly while opening or before any batch).
        if round % 2 == 0 {
            let _ = first_rx.recv_timeout(Duration::from_secs(60));
        }
        std::thread::sleep(Duration::from_millis(rng.random_range(5..250)));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        if let Some(last) = reader.join().unwrap() {
            kills_mid_run += 1;
            acknowledged = Some(last);
        }
        let o = Command::new(bin)
            .arg("--ledger")
            .arg(&d)
            .arg("verify")
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "round {round}: verify failed after kill -9: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        let l = Ledger::open_read_only(&d).unwrap();
        let head = l.head("main").unwrap();
        let anc = l.ancestry(&head).unwrap();
        assert_eq!(
            l.event(anc.last().unwrap()).unwrap().body.kind(),
            "genesis",
            "round {round}: history reaches genesis"
        );
        if let Some((h, n)) = acknowledged {
            assert!(
                anc.len() as u64 >= n,
                "round {round}: ref lost acknowledged events ({} < {n})",
                anc.len()
            );
            assert!(
                anc.contains(&h),
                "round {round}: acknowledged head {} not in history",
                h.short()
            );
        }
    }
    assert!(
        kills_mid_run >= 8,
        "the writer was killed mid-run only {kills_mid_run} times"
    );
}

/// The bytes of every file under `dir`.
fn bytes_under(dir: &std::path::Path) -> u64 {
    crate::common::files_under(dir)
        .iter()
        .map(|f| std::fs::metadata(f).map_or(0, |m| m.len()))
        .sum()
}

/// A full disk mid-run (the store's write budget, `MAPF_LEDGER_WRITE_BUDGET`, fails
/// its writes as ENOSPC does), at a quarter, half and three quarters of what the run
/// writes: `run` stops naming the full disk, says nothing recorded was lost and how
/// to go on, and leaves no temporary blob; the ledger verifies; and the same `run`
/// again, with space, resumes and reaches the head of an uninterrupted run, with
/// nothing done by hand.
#[test]
fn a_full_disk_mid_run_loses_nothing_and_the_run_resumes_to_the_same_head() {
    use crate::common::{ledger, ledger_cmd, ok, stderr};
    let tmp = tempfile::tempdir().unwrap();
    let plan = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/plans/tiny.toml");
    let head = |d: &std::path::Path| Ledger::open_read_only(d).unwrap().head("main").unwrap();
    let whole = tmp.path().join("whole");
    ok(&ledger(&whole, &["init", "--plan", plan]));
    let initial = bytes_under(&whole.join("packs")) + bytes_under(&whole.join("blobs"));
    ok(&ledger(&whole, &["run", "--quiet"]));
    let written = bytes_under(&whole.join("packs")) + bytes_under(&whole.join("blobs")) - initial;
    for quarter in 1..=3u64 {
        let d = tmp.path().join(format!("full-{quarter}"));
        ok(&ledger(&d, &["init", "--plan", plan]));
        let o = ledger_cmd(&d, &["run", "--quiet"])
            .env(
                ledger_store::faults::BUDGET_ENV,
                (written * quarter / 4).to_string(),
            )
            .output()
            .unwrap();
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "budget {quarter}/4: {err}");
        for said in [
            "the disk is full",
            "bytes could not be written",
            "nothing recorded was lost",
            "run the same command again",
        ] {
            assert!(err.contains(said), "budget {quarter}/4, no {said:?}: {err}");
        }
        let tmp_blobs: Vec<_> = crate::common::files_under(&d.join("blobs"))
            .into_iter()
            .filter(|f| f.file_name().unwrap().to_string_lossy().starts_with("tmp-"))
            .collect();
        assert!(tmp_blobs.is_empty(), "{tmp_blobs:?}");
        ok(&ledger(&d, &["verify"]));
        ok(&ledger(&d, &["run", "--quiet"]));
        assert_eq!(head(&d), head(&whole), "budget {quarter}/4");
        ok(&ledger(&d, &["verify"]));
    }
}
