//! A study run out of process ends on the same branch heads as one run here: a 2 × 2
//! study with `--executor local:2`, and one on a real single-node Slurm
//! (`tools/slurm.sh` starts it from Debian's packages) where one task is `scancel`ed
//! mid-run: the study fails naming it, and running it again resubmits only that task.
use crate::common;

use common::{heads, ledger, ok, tiny_ledger};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const ENGINEERS: &str = "fixed,random";

fn study_heads(d: &Path) -> Vec<(String, String)> {
    heads(d)
        .into_iter()
        .filter(|(n, _)| n.starts_with("study-"))
        .collect()
}

/// A worker-style copy of `origin`'s main (through stage 1) as a fresh ledger.
fn copy_prefix(origin: &Path, tmp: &Path, name: &str) -> PathBuf {
    let b = tmp.join(format!("{name}.bundle"));
    ok(&ledger(
        origin,
        &["bundle", "--branch", "main", "--out", b.to_str().unwrap()],
    ));
    let d = tmp.join(name);
    ok(&ledger(&d, &["init", "--from-bundle", b.to_str().unwrap()]));
    d
}

fn study_args<'a>(out: &'a str, executor: &'a str) -> Vec<&'a str> {
    vec![
        "study",
        "--at",
        "stage2",
        "--engineers",
        ENGINEERS,
        "--seeds",
        "2",
        "--out",
        out,
        "--executor",
        executor,
    ]
}

/// Start the single-node Slurm (idempotent); stop it at the end if this test started it.
struct Slurm {
    env: Vec<(String, String)>,
    started_here: bool,
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/slurm.sh")
}

impl Slurm {
    fn start() -> Slurm {
        let was_up = Command::new(script())
            .arg("status")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        let o = Command::new(script())
            .arg("start")
            .output()
            .expect("tools/slurm.sh");
        assert!(
            o.status.success(),
            "tools/slurm.sh start failed:\n{}",
            String::from_utf8_lossy(&o.stderr)
        );
        let env = String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter_map(|l| l.trim().strip_prefix("export ")?.split_once('='))
            .map(|(k, v)| (k.to_string(), v.trim_matches(['"', '\'']).to_string()))
            .collect();
        Slurm {
            env,
            started_here: !was_up,
        }
    }
    fn command(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        c.envs(self.env.iter().map(|(k, v)| (k, v)));
        c
    }
    fn ledger(&self, dir: &Path, args: &[&str]) -> std::process::Output {
        self.command(env!("CARGO_BIN_EXE_ledger"))
            .arg("--ledger")
            .arg(dir)
            .args(args)
            .env_remove("LEDGER")
            .output()
            .expect("run ledger")
    }
}

impl Drop for Slurm {
    fn drop(&mut self) {
        if self.started_here {
            let _ = Command::new(script()).arg("stop").status();
        }
    }
}

#[test]
fn local_and_slurm_studies_end_on_the_same_heads() {
    let tmp = tempfile::tempdir().unwrap();
    let origin = tiny_ledger(tmp.path());

    // Reference: in this process, one run after another.
    let here = copy_prefix(&origin, tmp.path(), "here");
    let out = tmp.path().join("out-here");
    ok(&ledger(&here, &study_args(out.to_str().unwrap(), "local")));
    let reference = study_heads(&here);
    assert_eq!(reference.len(), 4);

    // Two worker processes at once.
    let par = copy_prefix(&origin, tmp.path(), "par");
    let out = tmp.path().join("out-par");
    let o = ledger(&par, &study_args(out.to_str().unwrap(), "local:2"));
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    ok(&o);
    assert!(err.contains("started (local process"), "{err}");
    assert_eq!(study_heads(&par), reference, "local:2 = local");
    for (b, _) in &reference {
        let t = out.join("work/tasks").join(b);
        assert!(
            t.join("stderr.log").is_file() && t.join("done").is_file(),
            "{b}: logs and done kept"
        );
    }
    ok(&ledger(&par, &["verify"]));

    // A real Slurm: scancel one task mid-run, then run the study again; the task is
    // resubmitted and the study ends on the local heads.
    let slurm = Slurm::start();
    let sc = copy_prefix(&origin, tmp.path(), "slurm");
    let out = tmp.path().join("out-slurm");
    let work = out.join("work");
    let args = study_args(out.to_str().unwrap(), "slurm");
    let first = slurm
        .command(env!("CARGO_BIN_EXE_ledger"))
        .arg("--ledger")
        .arg(&sc)
        .args(&args)
        .env_remove("LEDGER")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let jobs = work.join("slurm-jobs.txt");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !jobs.is_file() {
        assert!(Instant::now() < deadline, "the study submitted nothing");
        std::thread::sleep(Duration::from_millis(20));
    }
    let job = std::fs::read_to_string(&jobs).unwrap().trim().to_string();
    let cancel = slurm
        .command("scancel")
        .arg(format!("{job}_1"))
        .output()
        .unwrap();
    assert!(
        cancel.status.success(),
        "{}",
        String::from_utf8_lossy(&cancel.stderr)
    );
    let o = first.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert_eq!(
        o.status.code(),
        Some(1),
        "a cancelled task fails the study: {err}"
    );
    assert!(err.contains("submitted Slurm job array"), "{err}");
    assert!(err.contains("1 of 4 study tasks did not finish"), "{err}");
    assert!(err.contains("stderr.log"), "names its log: {err}");
    let o = slurm.ledger(&sc, &args);
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    ok(&o);
    assert!(
        err.contains("(1 task:"),
        "only the cancelled task is resubmitted: {err}"
    );
    assert_eq!(
        study_heads(&sc),
        reference,
        "slurm = local, after scancel and resume"
    );
    ok(&slurm.ledger(&sc, &["verify"]));
}
