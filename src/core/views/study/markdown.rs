//! study.md: the study's [`StudyTables`] as Markdown, in the paper's layout (rows: Sum
//! and sizes per agent count; columns: engineers), then the transfer, subset and paired
//! tables, the orderings, the power line, the validation curve and the runs. Only
//! formatting: every number and verdict comes from the tables.
use super::model::{
    StudyCell, StudyPaired, StudyPairedMetric, StudyReport, BASELINE, ORACLE, REUSED,
};
use super::tables::{paired_cell, CellRow, DeltaTable, StudyTables};
use crate::views::format::{pm, rate};
use crate::views::paired::RESAMPLES;
use std::fmt::Write as _;

/// "" for one, else "s".
fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// A table's header and rule: `| A | B | c1 | c2 |` over `|---|---|---|---|`.
fn head(s: &mut String, lead: &[&str], cols: impl IntoIterator<Item = String>) {
    let mut head = String::from("|");
    let mut rule = String::from("|");
    for c in lead.iter().map(|l| l.to_string()).chain(cols) {
        head.push_str(&format!(" {c} |"));
        rule.push_str("---|");
    }
    let _ = writeln!(s, "{head}\n{rule}");
}

/// A cell of valid % / optimal %, each mean ± half-width; `-` when not evaluated.
fn rates_cell(c: Option<&StudyCell>) -> String {
    match c {
        Some(c) => format!(
            " {} / {} |",
            pm(c.valid_mean, c.valid_ci95),
            pm(c.optimal_mean, c.optimal_ci95)
        ),
        None => " - |".into(),
    }
}

/// study.md: the paper's layout (rows: Sum and sizes per agent count; columns:
/// engineers), mean ± 95% t-interval over seeds, plus the validation curves.
pub fn study_markdown(r: &StudyReport) -> String {
    let t = StudyTables::of(r);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# Study: {} forked at stage {}, {} seed{}\n",
        r.from,
        r.at,
        r.seeds,
        plural(r.seeds as usize)
    );
    let _ = writeln!(
        s,
        "Final-stage test results, valid % / optimal %: mean over {} seed{}{}.\n",
        r.seeds,
        plural(r.seeds as usize),
        if r.seeds > 1 {
            " ± half-width of the 95% t-interval"
        } else {
            " (one seed: no interval)"
        }
    );
    test_markdown(&mut s, &t);
    if let Some(d) = &t.transfer {
        transfer_markdown(&mut s, d);
    }
    subset_markdown(&mut s, &t);
    if let Some(d) = &t.paired {
        paired_markdown(&mut s, d);
    }
    if let Some(d) = &t.regret {
        regret_markdown(&mut s, d);
    }
    orderings_markdown(&mut s, &t);
    power_markdown(&mut s, &t);
    validation_markdown(&mut s, &t);
    undecided_markdown(&mut s, r);
    let _ = writeln!(s, "\nRuns:\n");
    for run in &r.runs {
        let _ = writeln!(
            s,
            "- `{}`: engineer {}, replicate {}, head {}{}",
            run.branch,
            run.engineer,
            run.replicate,
            run.head.short(),
            if run.action == REUSED {
                " (from an earlier report)"
            } else {
                ""
            }
        );
    }
    s
}

/// The runs whose engineer did not decide every stage (a fallback or a rejected reply
/// kept the configuration): those arms are in part `fixed`, said where the tables are.
fn undecided_markdown(s: &mut String, r: &StudyReport) {
    let runs: Vec<&crate::views::study::StudyRun> = r
        .runs
        .iter()
        .filter(|run| !run.undecided.is_empty())
        .collect();
    if runs.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "\n**Not every stage was its engineer's.** In these runs a stage kept the configuration \
         because the engineer failed (fallback) or gave no usable proposal (rejected), so the \
         arm is in part `fixed` there:\n"
    );
    for run in runs {
        let stages: Vec<String> = run
            .undecided
            .iter()
            .map(|u| format!("stage {} ({})", u.stage, u.status))
            .collect();
        let _ = writeln!(
            s,
            "- {} seed {} (`{}`): {}",
            run.engineer,
            run.replicate,
            run.branch,
            stages.join(", ")
        );
    }
}

/// The final-stage test tables as one table: per agent count its Sum row, then a row
/// per size.
fn test_markdown(s: &mut String, t: &StudyTables) {
    head(s, &["Agents", "Size"], t.study.engineers.iter().cloned());
    for table in &t.test {
        let k = table.agents;
        for row in std::iter::once(&table.sum).chain(&table.sizes) {
            let CellRow { size, cells } = row;
            let mut line = format!(
                "| {k} | {} |",
                size.map(|n| format!("{n}x{n}"))
                    .unwrap_or_else(|| "**Sum**".into())
            );
            for c in cells {
                line.push_str(&rates_cell(*c));
            }
            let _ = writeln!(s, "{line}");
        }
    }
}

/// The Sum rows of each wait-ratio subset of a stratified test suite (nothing when the
/// suite is not stratified): rows (agents, subset), a column per engineer.
fn subset_markdown(s: &mut String, t: &StudyTables) {
    if t.subsets.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "\nFinal-stage test results per wait-ratio subset (Sum: mean over sizes), valid % / optimal %:\n"
    );
    head(s, &["Agents", "Subset"], t.study.engineers.iter().cloned());
    for row in &t.subsets {
        let mut line = format!("| {} | {} |", row.agents, row.subset);
        for c in &row.cells {
            line.push_str(&rates_cell(*c));
        }
        let _ = writeln!(s, "{line}");
    }
}

/// A paired table twice, valid then optimal: a row per engineer (and subset), a column
/// per Sum row, each cell [`paired_cell`]; `against` names the other side in the
/// caption ("vs fixed", "from stage 0").
fn delta_markdown(s: &mut String, d: &DeltaTable, against: &str) {
    let pick: [(&str, fn(&StudyPaired) -> &StudyPairedMetric); 2] =
        [("Valid %", |p| &p.valid), ("Optimal %", |p| &p.optimal)];
    for (title, metric) in pick {
        let _ = writeln!(s, "\n{title}, Δ {against} [95% paired CI]:\n");
        let cols = d.cols.iter().map(|&(suite, k)| {
            if suite == "val" {
                format!("Validation ({k} agents)")
            } else {
                format!("{k} agents")
            }
        });
        head(s, &["Engineer"], cols);
        for row in &d.rows {
            let mut line = match row.subset {
                Some(w) => format!("| {} @ {w} |", row.engineer),
                None => format!("| {} |", row.engineer),
            };
            for c in &row.cells {
                match c {
                    Some(c) => line.push_str(&format!(" {} |", paired_cell(metric(c.pair)))),
                    None => line.push_str(" - |"),
                }
            }
            let _ = writeln!(s, "{line}");
        }
    }
}

/// Each engineer against [`BASELINE`] in the paper's layout: one row per engineer (and
/// per engineer and wait-ratio subset), a column per Sum row (validation, 3, 4, 5
/// agents).
fn paired_markdown(s: &mut String, d: &DeltaTable) {
    let seeds = d.seeds;
    let _ = writeln!(
        s,
        "\nPaired differences vs {BASELINE}: replicate r of each engineer against replicate r of {BASELINE} \
         (the same fork point and suite items). Δ = engineer − {BASELINE} in percentage points, \
         mean over {seeds} seed{}{}; boot: 95% paired bootstrap over items pooled over seeds \
         ({} resamples, items resampled within each seed's cells); p: McNemar's exact test on the \
         discordant items pooled over seeds.",
        plural(seeds),
        if seeds > 1 {
            " [95% t-interval of the per-seed differences]"
        } else {
            " (one seed: no t-interval)"
        },
        RESAMPLES
    );
    delta_markdown(s, d, &format!("vs {BASELINE}"));
    for n in &d.notes {
        let _ = writeln!(s, "\nNo instance-level statistics: {n}.");
    }
}

/// Each arm's regret: the oracle against the arm, a row per arm, a column per Sum row.
fn regret_markdown(s: &mut String, d: &DeltaTable) {
    let seeds = d.seeds;
    let _ = writeln!(
        s,
        "\nRegret: replicate r of the {ORACLE} arm (each stage trained on every candidate, \
         the best by validation kept) against replicate r of each arm. Δ = {ORACLE} − arm in \
         percentage points, mean over {seeds} seed{}{}; boot: 95% paired bootstrap over items \
         pooled over seeds ({} resamples); p: McNemar's exact test. A regret below 0 is an \
         arm that beat the oracle, whose choice by validation did not carry to the row.",
        plural(seeds),
        if seeds > 1 {
            " [95% t-interval of the per-seed differences]"
        } else {
            " (one seed: no t-interval)"
        },
        RESAMPLES
    );
    delta_markdown(s, d, &format!("{ORACLE} − arm"));
    for n in &d.notes {
        let _ = writeln!(s, "\nNo instance-level statistics of the regret: {n}.");
    }
}

/// What training did per engineer: a row per engineer and half (all items, then those
/// that need no coordination and those that do), a column per Sum row, valid then
/// optimal.
fn transfer_markdown(s: &mut String, d: &DeltaTable) {
    let seeds = d.seeds;
    let _ = writeln!(
        s,
        "\nTransfer: each run's final stage against its own stage 0 on the same suite items. \
         Δ = final − stage 0 in percentage points, mean over {seeds} seed{}{}; boot: 95% paired \
         bootstrap over items pooled over seeds ({} resamples); p: McNemar's exact test. \
         Rows `indep` and `coord`: the items that need no coordination and those that do.",
        plural(seeds),
        if seeds > 1 {
            " [95% t-interval of the per-seed changes]"
        } else {
            " (one seed: no t-interval)"
        },
        RESAMPLES
    );
    delta_markdown(s, d, "from stage 0");
    for n in &d.notes {
        let _ = writeln!(s, "\nNo instance-level statistics of the transfer: {n}.");
    }
}

/// The paper's orderings stated plainly, each with its paired interval and verdict.
fn orderings_markdown(s: &mut String, t: &StudyTables) {
    let Some(o) = &t.orderings else { return };
    let items = match o.subset {
        Some(c) => format!("items that need coordination (`{c}`)"),
        None => "every item".into(),
    };
    let _ = writeln!(
        s,
        "
The paper's orderings, final stage, valid % on {items}: Δ = engineer − baseline \
         [95% t-interval over seeds]; boot: pooled paired bootstrap over items. \
         \"holds\": the interval is above 0; \"reversed\": below; \"not resolved\": it spans 0.\n"
    );
    for c in &o.claims {
        let p = c.pair;
        let _ = writeln!(
            s,
            "- {}: {} − {}, {} {} agents: {} over {} seed{}: **{}**",
            c.claim,
            p.engineer,
            p.baseline,
            if p.suite == "val" {
                "validation"
            } else {
                p.suite.as_str()
            },
            p.agents,
            paired_cell(&p.valid),
            p.replicates.len(),
            plural(p.replicates.len()),
            c.verdict.text()
        );
    }
}

/// The power line: the seeds 80% power asks on the target row, planned and observed.
fn power_markdown(s: &mut String, t: &StudyTables) {
    let Some(pw) = t.power else { return };
    let row = format!(
        "{} {}-agent {}",
        pw.suite,
        pw.agents,
        match &pw.subset {
            Some(c) => format!("`{c}` items"),
            None => "items".into(),
        }
    );
    let n = |x: Option<usize>| x.map(|n| n.to_string()).unwrap_or_else(|| "-".into());
    let _ = write!(
        s,
        "\nPower: to see {} points on {row} with 80% power (two-sided 5% paired t-test over seeds):",
        pw.effect
    );
    if let Some(sd) = pw.planned_sd {
        let _ = write!(
            s,
            " planned from the pilot's SD of per-seed differences, {sd:.2} points: **{} seeds**;",
            n(pw.planned_seeds)
        );
    }
    if pw.observed.is_empty() {
        let _ = write!(s, " observed: not yet (a comparison needs 2 paired seeds).");
    } else {
        let _ = write!(s, " observed here:");
        for (i, o) in pw.observed.iter().enumerate() {
            let _ = write!(
                s,
                "{} {} − {}: SD {:.2} over {} seeds, {} seeds needed",
                if i == 0 { "" } else { ";" },
                o.engineer,
                o.baseline,
                o.sd,
                o.seeds,
                n(o.seeds_needed)
            );
        }
        s.push('.');
    }
    let seeds = t.study.seeds;
    let _ = writeln!(
        s,
        " This study has {} seed{}.",
        seeds,
        plural(seeds as usize)
    );
}

/// The validation curve: a row per stage, a column per engineer.
fn validation_markdown(s: &mut String, t: &StudyTables) {
    let _ = writeln!(
        s,
        "\nValidation (2 agents, mean over sizes), valid % / optimal %, mean over seeds:\n"
    );
    head(s, &["Stage"], t.study.engineers.iter().cloned());
    for row in &t.validation {
        let mut line = format!("| {} |", row.stage);
        for v in &row.points {
            match v {
                Some(v) => line.push_str(&format!(
                    " {} / {} |",
                    rate(v.valid_mean),
                    rate(v.optimal_mean)
                )),
                None => line.push_str(" - |"),
            }
        }
        let _ = writeln!(s, "{line}");
    }
}

/// The line `ledger study` ends with: how many runs, how many ran now, were already
/// finished or came from an earlier report, and the files written (a blank line first).
pub fn runs_line(report: &StudyReport) -> String {
    let count = |a: &str| report.runs.iter().filter(|r| r.action == a).count();
    let reused = count(REUSED);
    let done = count("skipped");
    format!(
        "\n{} runs ({} run now, {} already finished{}); wrote {}\n",
        report.runs.len(),
        report.runs.len() - done - reused,
        done,
        if reused > 0 {
            format!(", {reused} from an earlier report")
        } else {
            String::new()
        },
        report.files.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::super::model::{report, StudyPower};
    use super::*;

    #[test]
    fn orderings_state_what_each_paired_interval_shows() {
        let metric = |per_seed: Vec<f64>| {
            let (mean, ci95) = crate::views::compare::mean_ci(&per_seed);
            StudyPairedMetric {
                per_seed,
                mean,
                ci95,
                bootstrap_ci95: None,
                mcnemar: None,
            }
        };
        let pair = |e: &str, b: &str, xs: Vec<f64>| StudyPaired {
            engineer: e.into(),
            baseline: b.into(),
            suite: "test".into(),
            agents: 3,
            subset: Some("coord".into()),
            replicates: vec![0, 1, 2],
            valid: metric(xs.clone()),
            optimal: metric(xs),
            note: None,
        };
        let mut r = report(vec![]);
        r.seeds = 3;
        r.engineers = vec![
            "fixed".into(),
            "base".into(),
            "blind".into(),
            "current".into(),
        ];
        // 11 ± 2.48: above 0; -1..2: spans 0; current below base: reversed.
        r.paired = vec![
            pair("base", "fixed", vec![-1.0, 2.0, 0.0]),
            pair("current", "fixed", vec![10.0, 11.0, 12.0]),
        ];
        r.orderings = vec![
            pair("current", "base", vec![-5.0, -6.0, -7.0]),
            pair("current+engineer-rl", "current", vec![5.0, 6.0, 7.0]),
            pair("current", "blind", vec![-1.0, 4.0, 1.0]),
        ];
        r.power = Some(StudyPower {
            effect: 5.0,
            suite: "test".into(),
            agents: 3,
            subset: Some("coord".into()),
            planned_sd: Some(3.59),
            planned_seeds: Some(7),
            observed: vec![],
        });
        let md = study_markdown(&r);
        let line = |start: &str| {
            md.lines()
                .find(|l| l.starts_with(start))
                .unwrap_or_else(|| panic!("{start:?} in {md}"))
                .to_string()
        };
        assert!(line("- engineered > fixed: base − fixed, test 3 agents:")
            .ends_with("**not resolved**"));
        assert!(line(
            "- engineered > fixed: current − fixed, test 3 agents: +11.00 [+8.52, +13.48]"
        )
        .ends_with("over 3 seeds: **holds**"));
        assert!(
            line("- current > base: current − base, test 3 agents: -6.00")
                .ends_with("**reversed**")
        );
        assert!(line(
            "- engineer RL > current: current+engineer-rl − current, test 3 agents: +6.00"
        )
        .ends_with("**holds**"));
        // Whether reading the evidence helps: current over the rule that reads none.
        assert!(
            line("- reading > blind: current − blind, test 3 agents: +1.33")
                .ends_with("**not resolved**")
        );
        assert!(
            line("Power: to see 5 points on test 3-agent `coord` items")
                .contains("3.59 points: **7 seeds**; observed: not yet"),
            "{md}"
        );
    }
}
