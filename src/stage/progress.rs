//! How a run shows its progress on standard error: [`Bars`], an indicatif bar per
//! stage (step, loss, sampled valid rate) on a terminal, and off one (a Slurm or
//! `nohup` log, a pipe) plain lines at a bounded rate, for `ledger run` and `replay`;
//! [`Lines`], plain lines a few per stage, for a study's runs, whose output lands in
//! logs.
use super::Progress;
use crate::env::table::ResultTable;
use crate::train::grpo::StepStats;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::time::{Duration, Instant};

/// How far apart [`Bars`]' plain lines are, at most one a stage's step between (the
/// first and last step of a stage always print).
pub const PLAIN_EVERY: Duration = Duration::from_secs(15);

/// Progress for `run` and `replay`: on a terminal an indicatif bar per stage, showing
/// step, loss, sampled valid rate; elsewhere [`Plain`] lines. Nothing when quiet.
pub struct Bars {
    bar: Option<ProgressBar>,
    plain: Option<Plain>,
    quiet: bool,
    terminal: bool,
}

impl Bars {
    pub fn new(quiet: bool) -> Bars {
        Bars {
            bar: None,
            plain: None,
            quiet,
            terminal: std::io::stderr().is_terminal(),
        }
    }
}

impl Progress for Bars {
    fn stage_begin(&mut self, stage: u32, engineer: &str, steps: u64) {
        if self.quiet {
            return;
        }
        if !self.terminal {
            eprintln!("stage {stage}: engineer {engineer}, {steps} steps");
            self.plain = Some(Plain::new(stage, steps));
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
        if let Some(p) = &mut self.plain {
            if let Some(line) = p.step(done, s, Instant::now()) {
                eprintln!("{line}");
            }
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
        self.plain = None;
        let (valid, optimal) = v.sum_row(2);
        eprintln!("stage {stage} done: validation valid {valid:.1}%, optimal {optimal:.1}%");
    }
}

/// One stage's progress as plain lines, at most one per [`PLAIN_EVERY`] (the first
/// and the last step always): `stage 1: step 12 of 120, reward 1.234, loss 0.0123,
/// 2345 tokens/s, elapsed 1m05s`.
pub struct Plain {
    stage: u32,
    steps: u64,
    started: Instant,
    last: Option<Instant>,
    /// Tokens generated since the stage began, and at the last line.
    tokens: u64,
}

impl Plain {
    pub fn new(stage: u32, steps: u64) -> Plain {
        Plain {
            stage,
            steps,
            started: Instant::now(),
            last: None,
            tokens: 0,
        }
    }

    /// The line for step `done` at `now`, when one is due.
    pub fn step(&mut self, done: u64, s: &StepStats, now: Instant) -> Option<String> {
        self.tokens += s.tokens;
        let due = match self.last {
            None => true,
            Some(t) => done >= self.steps || now.duration_since(t) >= PLAIN_EVERY,
        };
        if !due {
            return None;
        }
        self.last = Some(now);
        let elapsed = now.duration_since(self.started);
        let mut line = format!(
            "stage {}: step {done} of {}, reward {:.3}, loss {:.4}",
            self.stage, self.steps, s.reward_mean, s.loss
        );
        if self.tokens > 0 && elapsed.as_secs_f64() > 0.0 {
            let rate = self.tokens as f64 / elapsed.as_secs_f64();
            line.push_str(&format!(", {rate:.0} tokens/s"));
        }
        line.push_str(&format!(", elapsed {}", clock(elapsed)));
        Some(line)
    }
}

/// `1h02m03s`, `1m05s`, `7s`.
fn clock(d: Duration) -> String {
    let s = d.as_secs();
    match (s / 3600, s / 60 % 60, s % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, s) => format!("{m}m{s:02}s"),
        (h, m, s) => format!("{h}h{m:02}m{s:02}s"),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_lines_come_first_last_and_at_most_one_per_interval() {
        let t0 = Instant::now();
        let mut p = Plain::new(1, 100);
        let s = StepStats {
            reward_mean: 1.25,
            loss: 0.5,
            tokens: 1000,
            ..Default::default()
        };
        let at = |secs: u64| t0 + Duration::from_secs(secs);
        let first = p.step(1, &s, at(2)).expect("the first step prints");
        assert!(
            first.starts_with("stage 1: step 1 of 100, reward 1.250, loss 0.5000"),
            "{first}"
        );
        assert!(
            first.contains("tokens/s") && first.contains("elapsed"),
            "{first}"
        );
        // Within the interval: nothing, however many steps.
        for k in 2..=20 {
            let now = at(2) + Duration::from_millis(500 * k);
            assert_eq!(p.step(k, &s, now), None, "step {k}");
        }
        assert!(p.step(21, &s, at(2) + PLAIN_EVERY).is_some());
        assert_eq!(p.step(22, &s, at(2) + PLAIN_EVERY), None);
        // The last step prints whenever it comes.
        let last = p
            .step(100, &s, at(2) + PLAIN_EVERY)
            .expect("the last step prints");
        assert!(last.contains("step 100 of 100"), "{last}");
    }

    #[test]
    fn elapsed_reads_as_a_clock() {
        assert_eq!(clock(Duration::from_secs(7)), "7s");
        assert_eq!(clock(Duration::from_secs(65)), "1m05s");
        assert_eq!(clock(Duration::from_secs(3723)), "1h02m03s");
    }
}
