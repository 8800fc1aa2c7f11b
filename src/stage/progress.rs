//! How a run shows its progress on standard error: [`Bars`], an indicatif bar per
//! stage (step, loss, sampled valid rate; drawn only on a terminal), for `ledger run`
//! and `replay`; [`Lines`], plain lines a few per stage, for a study's runs, whose
//! output lands in logs.
use super::Progress;
use crate::env::table::ResultTable;
use crate::train::grpo::StepStats;
use indicatif::{ProgressBar, ProgressStyle};

/// indicatif bars: one per stage, showing step, loss, sampled valid rate (on stderr,
/// and only on a terminal). `run` and `replay` draw them.
pub struct Bars {
    bar: Option<ProgressBar>,
    quiet: bool,
}

impl Bars {
    pub fn new(quiet: bool) -> Bars {
        Bars { bar: None, quiet }
    }
}

impl Progress for Bars {
    fn stage_begin(&mut self, stage: u32, engineer: &str, steps: u64) {
        if self.quiet {
            return;
        }
        let bar = ProgressBar::new(steps);
        bar.set_style(
            ProgressStyle::with_template(
                "stage {prefix:>2} [{bar:30}] {pos}/{len} {msg} ({elapsed})",
            )
            .expect("template")
            .progress_chars("=> "),
        );
        bar.set_prefix(stage.to_string());
        bar.set_message(format!("engineer {engineer}"));
        self.bar = Some(bar);
    }
    fn step(&mut self, _stage: u32, done: u64, s: &StepStats) {
        if let Some(b) = &self.bar {
            b.set_position(done);
            b.set_message(format!(
                "loss {:.4} valid {:.2} reward {:.3}",
                s.loss, s.valid_rate, s.reward_mean
            ));
        }
    }
    fn note(&mut self, message: &str) {
        match &self.bar {
            Some(b) => b.println(message),
            None => eprintln!("{message}"),
        }
    }
    fn stage_end(&mut self, stage: u32, v: &ResultTable) {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
        let (valid, optimal) = v.sum_row(2);
        eprintln!("stage {stage} done: validation valid {valid:.1}%, optimal {optimal:.1}%");
    }
}

/// Progress as plain lines on standard error (one per stage, a few per stage's steps).
pub struct Lines {
    quiet: bool,
    steps: u64,
}

impl Lines {
    pub fn new(quiet: bool) -> Lines {
        Lines { quiet, steps: 0 }
    }
}

impl Progress for Lines {
    fn stage_begin(&mut self, stage: u32, engineer: &str, steps: u64) {
        self.steps = steps;
        if !self.quiet {
            eprintln!("  stage {stage}: engineer {engineer}, {steps} steps");
        }
    }
    fn step(&mut self, stage: u32, done: u64, s: &StepStats) {
        if !self.quiet
            && self.steps >= 4
            && done % (self.steps / 4).max(1) == 0
            && done < self.steps
        {
            eprintln!(
                "  stage {stage}: step {done}/{} loss {:.4} valid {:.2}",
                self.steps, s.loss, s.valid_rate
            );
        }
    }
    fn note(&mut self, message: &str) {
        if !self.quiet {
            eprintln!("{message}");
        }
    }
    fn stage_end(&mut self, stage: u32, v: &ResultTable) {
        if !self.quiet {
            let (valid, optimal) = v.sum_row(2);
            eprintln!("  stage {stage} done: validation valid {valid:.1}%, optimal {optimal:.1}%");
        }
    }
}


/// A bar counting `len` items of `unit` (e.g. `contexts`), labelled `prefix` right-aligned
/// in `width` columns, with elapsed time and an estimate of what is left.
pub fn counter(len: u64, prefix: &str, width: usize, unit: &str) -> ProgressBar {
    let b = ProgressBar::new(len);
    b.set_style(
        ProgressStyle::with_template(&format!(
            "{{prefix:>{width}}} [{{bar:30}}] {{pos}}/{{len}} {unit}  {{elapsed_precise}} (eta {{eta}})"
        ))
        .expect("template")
        .progress_chars("=> "),
    );
    b.set_prefix(prefix.to_string());
    b
}
