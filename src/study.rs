//! Counterfactual studies (`ledger study`): fork a branch before stage N once per
//! engineer and seed, run the forks (here, in worker processes or on Slurm, see
//! `crate::executor`). Summarising them is a view (`crate::views::study`), above this.
use crate::ledger::{Ledger, LedgerError};
use std::collections::BTreeSet;

// ---- counterfactual studies ----

/// What `ledger study` runs.
#[derive(Clone, Debug)]
pub struct StudySpec {
    /// Fork before this stage (>= 1).
    pub at: u32,
    pub from: String,
    /// Parsed at the edge (the CLI); reports and events record them as written.
    pub engineers: Vec<crate::engineer::EngineerSpec>,
    /// Seed replicates 0..seeds (0: the plan's seeds).
    pub seeds: u32,
    pub device: Option<crate::train::DeviceSpec>,
    /// Where the pending runs execute (see `crate::executor`).
    pub executor: crate::executor::Executor,
    /// Worker ledgers, logs and Slurm scripts of out-of-process runs.
    pub workdir: std::path::PathBuf,
    /// (engineer, replicate) runs taken from an earlier report ([`reusable_runs`]):
    /// neither forked nor run here unless this ledger already has their branch.
    pub reuse: BTreeSet<(String, u32)>,
}

/// The deterministic branch name of one study run.
pub fn study_branch(at: u32, engineer: &crate::engineer::EngineerSpec, replicate: u32) -> String {
    let name = engineer.label();
    format!("study-at{at}-{name}-s{replicate}")
}

#[derive(Debug, thiserror::Error)]
pub enum StudyError {
    #[error("{0}")]
    Ledger(#[from] LedgerError),
    #[error("{0}")]
    Fork(#[from] crate::replay::ForkError),
    #[error("{0}")]
    Stage(#[from] crate::stage::StageError),
    #[error("branch {branch} exists but is not this study's run ({why}); delete or rename it")]
    Clash { branch: String, why: String },
    #[error("interrupted: the study is durable; run the same command again to resume")]
    Interrupted,
    #[error("{0}")]
    Output(String),
    #[error(transparent)]
    Executor(#[from] crate::executor::ExecutorError),
    #[error("--reuse {path}: {why}")]
    Reuse { path: String, why: String },
    /// The `--reuse` report does not read (its message names the file read).
    #[error("--reuse {0}")]
    ReuseReport(#[source] crate::report::ReportError),
}

pub use crate::views::study::{StudyDesign, StudyRunRecord};

impl StudySpec {
    /// What the study's report names: the fork point, engineers and seeds.
    pub fn design(&self) -> StudyDesign {
        StudyDesign {
            from: self.from.clone(),
            at: self.at,
            seeds: self.seeds,
            engineers: self.engineers.iter().map(ToString::to_string).collect(),
        }
    }
}

/// Fork (when missing) and run (when unfinished) every engineer × seed branch, in the
/// order engineer by engineer, seed by seed. A second call skips the finished runs.
pub fn run_study(
    ledger: &mut Ledger,
    spec: &StudySpec,
    progress: &mut dyn crate::stage::Progress,
    stop: &std::sync::atomic::AtomicBool,
) -> Result<Vec<StudyRunRecord>, StudyError> {
    use crate::stage::{next_stage, Pipeline, RunOptions};
    let last = crate::stage::ledger_plan(ledger)?.engineer.stages;
    let existing: BTreeSet<String> = ledger.branches()?.into_iter().map(|b| b.0).collect();
    // Pass 1: fork what is missing, find what must run.
    let mut plan = Vec::new();
    for e in &spec.engineers {
        for r in 0..spec.seeds {
            let name = study_branch(spec.at, e, r);
            let written = e.to_string();
            if !existing.contains(&name) && spec.reuse.contains(&(written.clone(), r)) {
                continue;
            }
            let action = if existing.contains(&name) {
                let st = ledger.projection(&name)?;
                match &st.forked_from {
                    Some((from, _, eng))
                        if from == &spec.from && *eng == written && st.replicate == r => {}
                    other => {
                        return Err(StudyError::Clash {
                            branch: name,
                            why: match other {
                                Some((f, _, eng)) => format!(
                                    "forked from {f} with engineer {eng}, replicate {}",
                                    st.replicate
                                ),
                                None => "not a fork".into(),
                            },
                        })
                    }
                }
                if next_stage(&st) > last {
                    "skipped"
                } else {
                    "resumed"
                }
            } else {
                crate::replay::fork(ledger, &spec.from, spec.at, e, Some(&name), r)?;
                "ran"
            };
            plan.push((written, r, name, action));
        }
    }
    // Pass 2: run the unfinished branches, here (one pipeline: the suites are shared)
    // or in worker ledgers fetched back. The oracle arms run last: their searches take
    // each candidate another arm of their replicate trained (the same stage from the
    // same checkpoint and seed) from that arm's branch instead of training it again.
    let is_oracle = |written: &str| {
        written
            .parse::<crate::engineer::EngineerSpec>()
            .is_ok_and(|e| e.name == crate::engineer::ORACLE)
    };
    let mut pending: Vec<&(String, u32, String, &str)> =
        plan.iter().filter(|p| p.3 != "skipped").collect();
    pending.sort_by_key(|p| is_oracle(&p.0));
    match &spec.executor {
        _ if pending.is_empty() => {}
        crate::executor::Executor::Local(1) => {
            let device = match spec.device {
                Some(d) => d,
                None => crate::stage::ledger_plan(ledger)?.train.device,
            };
            let mut pipeline = Pipeline::new(ledger, device)?;
            let total = pending.len();
            for (i, (e, r, name, action)) in pending.into_iter().enumerate() {
                progress.note(&format!(
                    "[{}/{total}] {name}: engineer {e}, replicate {r} ({})",
                    i + 1,
                    if *action == "ran" { "new" } else { "resuming" }
                ));
                let opts = RunOptions {
                    branch: name.clone(),
                    stages: None,
                    engineer: None,
                };
                let s = pipeline.run(&opts, &mut crate::engineer::build, progress, stop)?;
                if s.interrupted {
                    return Err(StudyError::Interrupted);
                }
            }
        }
        executor => {
            let (searches, arms): (Vec<_>, Vec<_>) =
                pending.into_iter().partition(|p| is_oracle(&p.0));
            let names = |runs: &[&(String, u32, String, &str)]| -> Vec<String> {
                runs.iter().map(|p| p.2.clone()).collect()
            };
            if !arms.is_empty() {
                let wave = Wave {
                    bundle: "pending.bundle",
                    branches: names(&arms),
                    siblings: vec![],
                };
                run_elsewhere(ledger, spec, executor, &wave, progress, stop)?;
            }
            if !searches.is_empty() {
                // Each search's worker ledger also holds the finished arms of its
                // replicate, the stages its candidates may be.
                let replicates: BTreeSet<u32> = searches.iter().map(|p| p.1).collect();
                let siblings = plan
                    .iter()
                    .filter(|p| replicates.contains(&p.1) && !is_oracle(&p.0))
                    .filter(|p| ledger.head(&p.2).is_ok())
                    .map(|p| p.2.clone())
                    .collect();
                let wave = Wave {
                    bundle: "pending-oracle.bundle",
                    branches: names(&searches),
                    siblings,
                };
                run_elsewhere(ledger, spec, executor, &wave, progress, stop)?;
            }
        }
    }
    Ok(plan
        .into_iter()
        .map(|(engineer, replicate, branch, action)| StudyRunRecord {
            engineer,
            replicate,
            branch,
            action,
        })
        .collect())
}

impl StudySpec {
    /// The finished runs of the earlier report at `path` (`study --reuse`: its
    /// `study.json` or the directory holding it) that this study takes
    /// ([`reusable_runs`]); they become [`StudySpec::reuse`].
    pub fn reuse_report(
        &mut self,
        ledger: &Ledger,
        path: &std::path::Path,
    ) -> Result<Vec<crate::views::study::StudyRun>, StudyError> {
        let report = crate::report::read_study(path).map_err(StudyError::ReuseReport)?;
        let reused = reusable_runs(ledger, self, report, path)?;
        self.reuse = reused
            .iter()
            .map(|r| (r.engineer.clone(), r.replicate))
            .collect();
        Ok(reused)
    }
}

/// The finished runs of `prior`, an earlier report (`study.json`) of this same study,
/// that `spec` asks for (its engineers, replicates 0..seeds) and this ledger lacks: they
/// count in the tables instead of being forked and run again (a study whose worker
/// ledgers are gone, or one split over machines that kept only their reports). Runs are
/// deterministic, so such a run is the one this ledger would record.
///
/// Each is checked to be a fork of this ledger's `from`: the evaluations it inherited
/// (every stage before the fork point) must be events of `from`'s history, with the same
/// validation figures. A report of another plan, seed, fork point or base fails here.
pub fn reusable_runs(
    ledger: &Ledger,
    spec: &StudySpec,
    prior: crate::views::study::StudyReport,
    path: &std::path::Path,
) -> Result<Vec<crate::views::study::StudyRun>, StudyError> {
    let fail = |why: String| StudyError::Reuse {
        path: path.display().to_string(),
        why,
    };
    if prior.from != spec.from || prior.at != spec.at {
        return Err(fail(format!(
            "a study of {} forked at stage{}, not of {} at stage{}",
            prior.from, prior.at, spec.from, spec.at
        )));
    }
    let last = crate::stage::ledger_plan(ledger)?.engineer.stages;
    let existing: BTreeSet<String> = ledger.branches()?.into_iter().map(|b| b.0).collect();
    // What every fork of `from` at `at` inherits: its evaluation events and figures.
    let head = ledger.head(&spec.from)?;
    let inherited: BTreeSet<crate::ledger::Hash> = ledger
        .history_to(&head)?
        .into_iter()
        .filter(|(_, ev)| ev.stage < spec.at)
        .map(|(h, _)| h)
        .collect();
    let state = ledger.state_at(&head)?;
    let from_validation: Vec<(u32, f64, f64)> =
        crate::views::compare::summarise(&spec.from, &state)
            .validation
            .into_iter()
            .filter(|v| v.0 < spec.at)
            .collect();
    let mut out = Vec::new();
    for mut run in prior.runs {
        let wanted = spec
            .engineers
            .iter()
            .find(|e| e.to_string() == run.engineer)
            .filter(|_| run.replicate < spec.seeds);
        let Some(engineer) = wanted else { continue };
        if run.summary.final_stage != Some(last) || existing.contains(&run.branch) {
            continue;
        }
        if run.branch != study_branch(spec.at, engineer, run.replicate) {
            return Err(fail(format!(
                "run {} is not this study's name for engineer {}, replicate {}",
                run.branch, run.engineer, run.replicate
            )));
        }
        let events: Vec<&crate::ledger::Hash> = run
            .summary
            .coordination
            .iter()
            .filter(|c| c.stage < spec.at)
            .map(|c| &c.event)
            .collect();
        if events.is_empty() {
            return Err(fail(format!(
                "run {} records no evaluation before stage{}, so it cannot be checked against {}",
                run.branch, spec.at, spec.from
            )));
        }
        if let Some(e) = events.iter().find(|e| !inherited.contains(*e)) {
            return Err(fail(format!(
                "run {} did not fork from this ledger's {}: its evaluation event {} is not in {}'s stages before stage{}",
                run.branch,
                spec.from,
                e.short(),
                spec.from,
                spec.at
            )));
        }
        let validation: Vec<(u32, f64, f64)> = run
            .summary
            .validation
            .iter()
            .copied()
            .filter(|v| v.0 < spec.at)
            .collect();
        if validation != from_validation {
            return Err(fail(format!(
                "run {} inherited validation {:?}, but {} has {:?}",
                run.branch, validation, spec.from, from_validation
            )));
        }
        run.summary.restore_tables();
        if let Some(items) = &run.items {
            items
                .restore(&mut run.summary)
                .map_err(|why| fail(format!("run {}: {why}", run.branch)))?;
        }
        run.action = crate::views::study::REUSED.into();
        out.push(run);
    }
    Ok(out)
}

/// Run `branches` (forks in `ledger`, maybe partly run) in worker ledgers with
/// `executor`, then fetch every finished one back; errors name the tasks that did not
/// finish, with their logs, after fetching the others.
/// Branches run out of process together: their bundle's file name in the work
/// directory, and finished branches the bundle carries beside them (read by the runs,
/// not run or fetched back).
struct Wave {
    bundle: &'static str,
    branches: Vec<String>,
    siblings: Vec<String>,
}

fn run_elsewhere(
    ledger: &mut Ledger,
    spec: &StudySpec,
    executor: &crate::executor::Executor,
    wave: &Wave,
    progress: &mut dyn crate::stage::Progress,
    stop: &std::sync::atomic::AtomicBool,
) -> Result<(), StudyError> {
    use crate::executor::{self as ex, Executor, Task};
    use crate::ledger::bundle::Bundle;
    let workdir = &spec.workdir;
    std::fs::create_dir_all(workdir)
        .map_err(|e| StudyError::Output(format!("{}: {e}", workdir.display())))?;
    let tasks: Vec<Task> = wave
        .branches
        .iter()
        .map(|b| Task::new(workdir, b))
        .collect();
    let bundle = workdir.join(wave.bundle);
    if tasks.iter().any(|t| !t.is_done()) {
        let refs = wave
            .branches
            .iter()
            .chain(&wave.siblings)
            .map(|b| Ok((b.to_string(), ledger.head(b)?)))
            .collect::<Result<Vec<_>, LedgerError>>()?;
        Bundle::collect(
            ledger,
            &refs,
            &|_| false,
            &|_| false,
            &crate::train::TrainState::referenced_blobs,
        )?
        .write(&bundle)?;
    }
    let mut note = |m: &str| progress.note(m);
    match executor {
        Executor::Local(n) => ex::run_local(&tasks, &bundle, spec.device, *n, &mut note, stop)?,
        Executor::Slurm { sbatch_args } => ex::run_slurm(
            &tasks,
            workdir,
            &bundle,
            spec.device,
            sbatch_args,
            std::time::Duration::from_secs(2),
            &mut note,
            stop,
        )?,
    }
    // Fetch each finished worker's branch (a fast-forward of the fork recorded here).
    for t in tasks.iter().filter(|t| t.is_done()) {
        let worker = Ledger::open_read_only(&t.ledger())?;
        let head = worker.head(&t.branch)?;
        let b = Bundle::collect(
            &worker,
            &[(t.branch.clone(), head)],
            &|h| ledger.contains_event(h),
            &|h| ledger.has_blob(h).unwrap_or(false),
            &crate::train::TrainState::referenced_blobs,
        )?;
        drop(worker);
        let r = ledger.fetch(&b, None)?;
        progress.note(&format!(
            "fetched {} ({} events, {} blobs)",
            t.branch, r.events_added, r.blobs_added
        ));
    }
    if stop.load(std::sync::atomic::Ordering::SeqCst) {
        return Err(StudyError::Interrupted);
    }
    let failed = ex::failures(&tasks);
    if !failed.is_empty() {
        return Err(ex::ExecutorError::Failed {
            failed,
            total: tasks.len(),
        }
        .into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn study_names_are_deterministic() {
        assert_eq!(
            study_branch(3, &"base".parse().unwrap(), 1),
            "study-at3-base-s1"
        );
        assert_eq!(
            study_branch(2, &"current+engineer-rl".parse().unwrap(), 4),
            "study-at2-current-engineer-rl-s4"
        );
        assert_eq!(
            study_branch(2, &"current+engineer-rl:-history".parse().unwrap(), 0),
            "study-at2-current-no-history-engineer-rl-s0"
        );
        assert_eq!(
            study_branch(
                2,
                &"current:-failure_breakdown+training_details"
                    .parse()
                    .unwrap(),
                0
            ),
            "study-at2-current-no-failure_breakdown-with-training_details-s0"
        );
    }
}
