//! Where a study's runs execute: in this process (`local`, the default), as N separate
//! processes on this machine (`local:N`), or as one Slurm job array (`slurm`).
//!
//! Out-of-process runs use worker ledgers, so the study's ledger keeps one writer: the
//! study bundles its pending branches (each a fork, maybe partly run) into
//! `WORKDIR/pending.bundle`; each task `ledger study-task` starts (or reopens) its own
//! ledger `WORKDIR/tasks/BRANCH/ledger` from that bundle, runs the branch to the plan's
//! end, and writes `done` (the head) beside it, with its stdout and stderr in
//! `stdout.log` and `stderr.log`. The study then fetches every finished worker (each
//! branch moves forward, verified hash by hash), so the heads are the ones a local run
//! gives: runs are deterministic functions of their recorded inputs.
//!
//! Slurm: one `sbatch --array` per submission, a bash script mapping the array index to
//! a branch, the job ids kept in `WORKDIR/slurm-jobs.txt`. `squeue` says which tasks are
//! still queued or running; a task that is neither and has no `done` failed or was
//! cancelled, and running `study` again resubmits it (its worker resumes from its last
//! checkpoint). `WORKDIR` must be on a filesystem the compute nodes share.
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// How to run a study's pending branches.
#[derive(Clone, Debug, PartialEq)]
pub enum Executor {
    /// In this process, one after another (N = 1), or N processes at once.
    Local(usize),
    /// A Slurm job array; each element is passed to `sbatch` as given.
    Slurm { sbatch_args: Vec<String> },
}

impl std::str::FromStr for Executor {
    type Err = ExecutorError;
    fn from_str(s: &str) -> Result<Executor, ExecutorError> {
        match s {
            "local" => Ok(Executor::Local(1)),
            "slurm" => Ok(Executor::Slurm {
                sbatch_args: Vec::new(),
            }),
            _ => match s.strip_prefix("local:").map(str::parse::<usize>) {
                Some(Ok(n)) if n >= 1 => Ok(Executor::Local(n)),
                _ => Err(ExecutorError::Unknown { text: s.into() }),
            },
        }
    }
}

/// Errors of out-of-process execution, each naming the task, file or command.
#[derive(Debug, thiserror::Error)]
pub enum ExecutorError {
    /// An `--executor` that names no executor.
    #[error("executor `{text}`: use local, local:N (N >= 1 processes at once) or slurm")]
    Unknown { text: String },
    #[error("{}: {message}", path.display())]
    Io { path: PathBuf, message: String },
    #[error("`{command}` failed: {message}")]
    Command { command: String, message: String },
    #[error("--sbatch-arg is for --executor slurm (the executor is {0:?})")]
    SbatchArgs(Executor),
    #[error("{} of {} study tasks did not finish:\n{}", failed.len(), total, failed.iter().map(|f| f.to_string()).collect::<Vec<_>>().join("\n"))]
    Failed {
        failed: Vec<FailedTask>,
        total: usize,
    },
}

impl Executor {
    /// This executor with `sbatch_args`, the sbatch options of every task: only Slurm
    /// takes them.
    pub fn with_sbatch_args(self, sbatch_args: Vec<String>) -> Result<Executor, ExecutorError> {
        match self {
            Executor::Slurm { .. } => Ok(Executor::Slurm { sbatch_args }),
            other if !sbatch_args.is_empty() => Err(ExecutorError::SbatchArgs(other)),
            other => Ok(other),
        }
    }
}

/// Why a study task (`ledger study-task`) did not finish its branch.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    #[error("{0}")]
    Ledger(#[from] crate::ledger::LedgerError),
    /// The worker ledger's plan does not read. Its text only, as the task has always
    /// said it: an input error (exit 2), whatever is inside.
    #[error("{0}")]
    Plan(crate::stage::StageError),
    #[error("{branch} stopped before the plan's last stage (interrupted?); run the task again to resume")]
    Unfinished { branch: String },
    #[error("{0}")]
    Executor(#[from] ExecutorError),
}

/// The worker ledger at `dir` of a study task, made ready to run: created from the
/// bundle file at `bundle` the first time, else (an earlier attempt made it) opened as
/// the writer with `open` and given anything of the bundle it lacks (nothing, usually).
pub fn prepare_worker(
    dir: &Path,
    bundle: &Path,
    open: &dyn Fn(&Path) -> Result<crate::ledger::Ledger, crate::ledger::LedgerError>,
) -> Result<(), crate::ledger::LedgerError> {
    let bundle = crate::ledger::bundle::Bundle::read(bundle)?;
    if dir.join("db").is_dir() {
        open(dir)?.fetch(&bundle, None)?;
    } else {
        crate::ledger::Ledger::create_from_bundle(dir, &bundle)?;
    }
    Ok(())
}

/// The end of a study task whose run returned: `branch` of the worker ledger at `dir`
/// must have run the plan's last stage; then `done` beside the ledger gets its head
/// (what the study waits for). Returns the head.
pub fn finish_task(dir: &Path, branch: &str) -> Result<crate::ledger::Hash, TaskError> {
    let l = crate::ledger::Ledger::open_read_only(dir)?;
    let head = l.head(branch)?;
    let last = crate::stage::ledger_plan(&l)
        .map_err(TaskError::Plan)?
        .engineer
        .stages;
    let state = l.state_at(&head)?;
    if crate::stage::next_stage(&state) <= last {
        return Err(TaskError::Unfinished {
            branch: branch.to_string(),
        });
    }
    let done = dir.parent().unwrap_or(Path::new(".")).join("done");
    std::fs::write(&done, format!("{}\n", head.to_hex())).map_err(io(&done))?;
    Ok(head)
}

/// A task that ended without `done`: its branch, why, and the tail of its log.
#[derive(Debug, Clone)]
pub struct FailedTask {
    pub branch: String,
    pub why: String,
    pub log: PathBuf,
    pub tail: String,
}

impl std::fmt::Display for FailedTask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "  {}: {} (log {}):\n{}",
            self.branch,
            self.why,
            self.log.display(),
            self.tail
                .lines()
                .map(|l| format!("    | {l}"))
                .collect::<Vec<_>>()
                .join("\n")
        )
    }
}

/// One pending study branch and where its worker lives.
#[derive(Clone, Debug)]
pub struct Task {
    pub branch: String,
    pub dir: PathBuf,
}

impl Task {
    pub fn new(workdir: &Path, branch: &str) -> Task {
        Task {
            branch: branch.to_string(),
            dir: workdir.join("tasks").join(branch.replace('/', "+")),
        }
    }
    pub fn ledger(&self) -> PathBuf {
        self.dir.join("ledger")
    }
    pub fn done(&self) -> PathBuf {
        self.dir.join("done")
    }
    pub fn is_done(&self) -> bool {
        self.done().is_file()
    }
    fn stderr(&self) -> PathBuf {
        self.dir.join("stderr.log")
    }
    fn failure(&self, why: &str) -> FailedTask {
        let text = std::fs::read_to_string(self.stderr()).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        FailedTask {
            branch: self.branch.clone(),
            why: why.to_string(),
            log: self.stderr(),
            tail: lines[lines.len().saturating_sub(8)..].join("\n"),
        }
    }
    /// The arguments of `ledger` that run this task.
    fn args(&self, bundle: &Path, device: Option<crate::train::DeviceSpec>) -> Vec<String> {
        let mut a = vec![
            "--ledger".to_string(),
            self.ledger().display().to_string(),
            "study-task".into(),
            "--bundle".into(),
            bundle.display().to_string(),
            "--branch".into(),
            self.branch.clone(),
        ];
        if let Some(d) = device {
            a.extend(["--device".into(), d.to_string()]);
        }
        a
    }
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> ExecutorError + '_ {
    move |e| ExecutorError::Io {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

fn ledger_exe() -> Result<PathBuf, ExecutorError> {
    std::env::current_exe().map_err(|e| ExecutorError::Command {
        command: "current_exe".into(),
        message: e.to_string(),
    })
}

/// Run the tasks as up to `n` processes at once on this machine; returns when all
/// ended (or `stop` was set, after they stopped).
pub fn run_local(
    tasks: &[Task],
    bundle: &Path,
    device: Option<crate::train::DeviceSpec>,
    n: usize,
    note: &mut dyn FnMut(&str),
    stop: &std::sync::atomic::AtomicBool,
) -> Result<(), ExecutorError> {
    let exe = ledger_exe()?;
    let mut queue: Vec<&Task> = tasks.iter().filter(|t| !t.is_done()).collect();
    queue.reverse();
    let mut running: Vec<(&Task, Child)> = Vec::new();
    let total = queue.len();
    let mut started = 0;
    loop {
        while running.len() < n && !stop.load(std::sync::atomic::Ordering::SeqCst) {
            let Some(t) = queue.pop() else { break };
            std::fs::create_dir_all(&t.dir).map_err(io(&t.dir))?;
            let out = std::fs::File::create(t.dir.join("stdout.log")).map_err(io(&t.dir))?;
            let err = std::fs::File::create(t.stderr()).map_err(io(&t.dir))?;
            let child = Command::new(&exe)
                .args(t.args(bundle, device))
                .arg("--quiet")
                .stdin(Stdio::null())
                .stdout(out)
                .stderr(err)
                .spawn()
                .map_err(|e| ExecutorError::Command {
                    command: format!("{} study-task", exe.display()),
                    message: e.to_string(),
                })?;
            started += 1;
            note(&format!(
                "[{started}/{total}] {} started (local process {})",
                t.branch,
                child.id()
            ));
            running.push((t, child));
        }
        if running.is_empty() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(200));
        let mut i = 0;
        while i < running.len() {
            match running[i].1.try_wait() {
                Ok(Some(status)) => {
                    let (t, _) = running.remove(i);
                    note(&format!(
                        "{} {}",
                        t.branch,
                        if status.success() {
                            "finished".to_string()
                        } else {
                            format!("ended with {status}")
                        }
                    ));
                }
                Ok(None) => i += 1,
                Err(e) => {
                    return Err(ExecutorError::Command {
                        command: "wait".into(),
                        message: e.to_string(),
                    })
                }
            }
        }
    }
}

fn command_output(cmd: &mut Command) -> Result<String, ExecutorError> {
    let shown = format!("{cmd:?}");
    let o = cmd.output().map_err(|e| ExecutorError::Command {
        command: shown.clone(),
        message: e.to_string(),
    })?;
    if !o.status.success() {
        return Err(ExecutorError::Command {
            command: shown,
            message: format!(
                "{}: {}",
                o.status,
                String::from_utf8_lossy(&o.stderr).trim()
            ),
        });
    }
    Ok(String::from_utf8_lossy(&o.stdout).into_owned())
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// Job ids this study submitted (one per line in `WORKDIR/slurm-jobs.txt`).
fn submitted_jobs(workdir: &Path) -> Vec<String> {
    std::fs::read_to_string(workdir.join("slurm-jobs.txt"))
        .unwrap_or_default()
        .lines()
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty())
        .collect()
}

/// Branches of this study's Slurm tasks that are queued or running, from `squeue`.
fn active_branches(workdir: &Path) -> Result<Vec<String>, ExecutorError> {
    let jobs = submitted_jobs(workdir);
    if jobs.is_empty() {
        return Ok(Vec::new());
    }
    // One line per array element (-r): its array job id and index, mapped back to the
    // branch through the task list written at submission. Each job is asked about on
    // its own: squeue refuses an id it has purged, which then has nothing active.
    let mut listing = String::new();
    for job in &jobs {
        match command_output(Command::new("squeue").args(["-h", "-r", "-o", "%F %K", "-j", job])) {
            Ok(o) => listing.push_str(&o),
            Err(ExecutorError::Command { message, .. }) if message.contains("Invalid job id") => {}
            Err(e) => return Err(e),
        }
    }
    let mut active = Vec::new();
    for line in listing.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 2 {
            continue;
        }
        let (array_job, index) = (f[0], f[1]);
        let map = workdir.join(format!("slurm-{array_job}.tasks"));
        if let Ok(text) = std::fs::read_to_string(&map) {
            if let Some(b) = index
                .parse::<usize>()
                .ok()
                .and_then(|i| text.lines().nth(i))
            {
                active.push(b.to_string());
            }
        }
    }
    Ok(active)
}

/// Submit the tasks that are neither done nor active as one job array and wait until no
/// task of this study is queued or running (or `stop` is set); [`failures`] then names
/// the tasks that did not finish.
#[allow(clippy::too_many_arguments)]
pub fn run_slurm(
    tasks: &[Task],
    workdir: &Path,
    bundle: &Path,
    device: Option<crate::train::DeviceSpec>,
    sbatch_args: &[String],
    poll: Duration,
    note: &mut dyn FnMut(&str),
    stop: &std::sync::atomic::AtomicBool,
) -> Result<(), ExecutorError> {
    let exe = ledger_exe()?;
    let active = active_branches(workdir)?;
    let submit: Vec<&Task> = tasks
        .iter()
        .filter(|t| !t.is_done() && !active.contains(&t.branch))
        .collect();
    for b in &active {
        note(&format!("{b}: still queued or running in Slurm, waiting"));
    }
    if !submit.is_empty() {
        let mut script = String::from(
            "#!/bin/bash\n# Written by `ledger study --executor slurm`: one array element per study branch.\nset -uo pipefail\ncase \"$SLURM_ARRAY_TASK_ID\" in\n",
        );
        for (i, t) in submit.iter().enumerate() {
            std::fs::create_dir_all(&t.dir).map_err(io(&t.dir))?;
            let args: Vec<String> = t
                .args(bundle, device)
                .iter()
                .map(|a| shell_quote(a))
                .collect();
            script.push_str(&format!(
                "  {i}) dir={dir}; branch={branch}; args=({args}) ;;\n",
                dir = shell_quote(&t.dir.display().to_string()),
                branch = shell_quote(&t.branch),
                args = args.join(" ")
            ));
        }
        script.push_str(&format!(
            "  *) echo \"no study task $SLURM_ARRAY_TASK_ID\" >&2; exit 2 ;;\nesac\nrm -f \"$dir/done\"\nexec {} \"${{args[@]}}\" --quiet >\"$dir/stdout.log\" 2>\"$dir/stderr.log\"\n",
            shell_quote(&exe.display().to_string())
        ));
        let n = std::fs::read_dir(workdir).map(|d| d.count()).unwrap_or(0);
        let path = workdir.join(format!("study-{n}.sbatch"));
        std::fs::write(&path, &script).map_err(io(&path))?;
        let mut cmd = Command::new("sbatch");
        cmd.arg("--parsable")
            .arg(format!("--array=0-{}", submit.len() - 1))
            .arg("--job-name=ledger-study")
            .arg(format!("--output={}/slurm-%A_%a.out", workdir.display()))
            .args(sbatch_args)
            .arg(&path);
        let out = command_output(&mut cmd)?;
        let job = out.trim().split(';').next().unwrap_or("").to_string();
        if job.is_empty() {
            return Err(ExecutorError::Command {
                command: format!("{cmd:?}"),
                message: "no job id printed".into(),
            });
        }
        let map = workdir.join(format!("slurm-{job}.tasks"));
        let names: Vec<&str> = submit.iter().map(|t| t.branch.as_str()).collect();
        std::fs::write(&map, names.join("\n") + "\n").map_err(io(&map))?;
        let jobs_file = workdir.join("slurm-jobs.txt");
        let mut jobs = submitted_jobs(workdir);
        jobs.push(job.clone());
        std::fs::write(&jobs_file, jobs.join("\n") + "\n").map_err(io(&jobs_file))?;
        note(&format!(
            "submitted Slurm job array {job} ({} task{}: {})",
            submit.len(),
            if submit.len() == 1 { "" } else { "s" },
            names.join(", ")
        ));
    }
    loop {
        if stop.load(std::sync::atomic::Ordering::SeqCst) {
            note("stopped waiting; the Slurm tasks go on (run the study again to collect them)");
            return Ok(());
        }
        let active = active_branches(workdir)?;
        if active.is_empty() {
            return Ok(());
        }
        std::thread::sleep(poll);
    }
}

/// The tasks without `done`, as failures with their log tails.
pub fn failures(tasks: &[Task]) -> Vec<FailedTask> {
    tasks
        .iter()
        .filter(|t| !t.is_done())
        .map(|t| {
            let why = if t.dir.join("stderr.log").is_file() {
                "ended without finishing (failed, cancelled or killed)"
            } else {
                "never started"
            };
            t.failure(why)
        })
        .collect()
}
