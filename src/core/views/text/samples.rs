//! `show BRANCH@stageN --samples N`: a stage's sampled plans as text, each drawn on its
//! grid beside its moves, with its outcome, reward and where it came from.
use crate::views::samples::{render_drawing, Samples};
use std::fmt::Write as _;

/// The samples `s` of `branch@stage{stage}` (`suite`: the evaluation they came from,
/// None: GRPO's sampled plans), with a legend after any drawing.
pub fn render(branch: &str, stage: u32, suite: Option<&str>, s: &Samples) -> String {
    let mut w = String::new();
    let _ = writeln!(
        w,
        "{branch}@stage{stage}: {} of {} matching {} ({} recorded)",
        s.samples.len(),
        s.matching,
        match suite {
            Some(name) => format!("{name} evaluation plans"),
            None => "sampled plans".to_string(),
        },
        s.recorded
    );
    for (i, x) in s.samples.iter().enumerate() {
        let outcome = match (x.valid, x.optimal, x.failure) {
            (true, true, _) => format!("optimal (cost {})", x.cost),
            (true, false, _) => format!("valid, cost {} against {}", x.cost, x.optimal_cost),
            (false, _, f) => format!(
                "invalid: {}{}",
                f.map(|k| k.name()).unwrap_or("failed"),
                x.detail
                    .as_deref()
                    .map(|d| format!(" ({d})"))
                    .unwrap_or_default()
            ),
        };
        let at = match (&x.suite, x.step) {
            (Some(name), _) => format!("{name} item {}", x.index),
            (None, step) => format!(
                "step {}, {} #{}",
                step.unwrap_or(0),
                x.event.short(),
                x.index
            ),
        };
        let reward = x
            .reward
            .map(|r| format!("; reward {r}"))
            .unwrap_or_default();
        let _ = writeln!(
            w,
            "\n[{}] {at}, instance {} ({}x{}, {} agents{})\n    {outcome}{reward}",
            i + 1,
            x.instance.short(),
            x.drawing.size,
            x.drawing.size,
            x.agents,
            if x.needs_coordination {
                ", needs coordination"
            } else {
                ""
            },
        );
        let grid = render_drawing(&x.drawing);
        let plan: Vec<&str> = x.plan.lines().collect();
        for r in 0..grid.len().max(plan.len()) {
            let _ = writeln!(
                w,
                "    {:<width$}   {}",
                grid.get(r).map(String::as_str).unwrap_or(""),
                plan.get(r).copied().unwrap_or(""),
                width = grid.first().map_or(0, String::len)
            );
        }
    }
    if !s.samples.is_empty() {
        let _ = writeln!(
            w,
            "\n(digits: starts; a, b, ...: goals; *: path; X: where it failed; H: hole)"
        );
    }
    w
}
