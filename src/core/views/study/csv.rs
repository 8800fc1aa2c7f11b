//! study.csv: every run's test cells and Sum rows, every aggregated cell, and every
//! paired and transfer row, per seed and pooled, one CSV row each (written with the
//! `csv` crate).
use super::model::{StudyPaired, StudyPairedMetric, StudyReport, StudyRun};

/// A value with 4 decimals, as every rate and difference of study.csv.
fn f4(x: f64) -> String {
    format!("{x:.4}")
}

/// An optional value with 4 decimals; empty when there is none.
fn opt(x: Option<f64>) -> String {
    x.map(|v| format!("{v:.4}")).unwrap_or_default()
}

/// One row of study.csv, every value already formatted (empty: not applicable to the
/// row's kind). The fields are the columns, in order.
#[derive(Default, serde::Serialize)]
struct CsvRow {
    kind: &'static str,
    engineer: String,
    replicate: String,
    branch: String,
    final_stage: String,
    agents: String,
    size: String,
    n: String,
    total: String,
    valid: String,
    optimal: String,
    valid_rate: String,
    optimal_rate: String,
    valid_ci95: String,
    optimal_ci95: String,
    suite: String,
    subset: String,
    baseline: String,
    valid_boot_low: String,
    valid_boot_high: String,
    optimal_boot_low: String,
    optimal_boot_high: String,
    valid_a_only: String,
    valid_b_only: String,
    valid_p: String,
    optimal_a_only: String,
    optimal_b_only: String,
    optimal_p: String,
    /// On a run's rows: the stages its engineer did not decide (`3 fallback;4 rejected`;
    /// see `StudyRun::undecided`), empty when it decided every one.
    undecided: String,
}

/// study.csv: one `cell` row per run and test cell, one `sum` row per run and agent
/// count, one `mean` row per engineer and cell (mean and 95% half-width over seeds; with
/// a `subset` for each wait-ratio subset's Sum of a stratified suite), and against
/// `fixed` one `paired` row per engineer, Sum row and replicate (`valid_rate`,
/// `optimal_rate`: the differences in points) and one `paired_mean` row per engineer and
/// Sum row (the mean difference, its t half-width, the pooled bootstrap interval and
/// McNemar's test); likewise `transfer` and `transfer_mean` rows of each engineer's
/// change from stage 0 (`baseline` "stage 0"), and with an `oracle` arm `regret` and
/// `regret_mean` rows of each arm's regret (`engineer` oracle, `baseline` the arm: the
/// differences are oracle − arm). A run's rows name the stages its engineer
/// did not decide (`undecided`). Written with the `csv` crate: a field with a comma or quote (an
/// engineer's or branch's name) is quoted.
pub fn study_csv(r: &StudyReport) -> String {
    let mut rows: Vec<CsvRow> = Vec::new();
    for run in &r.runs {
        run_rows(run, &mut rows);
    }
    for c in &r.cells {
        rows.push(CsvRow {
            kind: "mean",
            engineer: c.engineer.clone(),
            agents: c.agents.to_string(),
            size: c.size.map(|n| n.to_string()).unwrap_or_default(),
            n: c.n.to_string(),
            valid_rate: f4(c.valid_mean),
            optimal_rate: f4(c.optimal_mean),
            valid_ci95: opt(c.valid_ci95),
            optimal_ci95: opt(c.optimal_ci95),
            suite: "test".into(),
            subset: c.subset.clone().unwrap_or_default(),
            ..CsvRow::default()
        });
    }
    // Each engineer against the baseline, then each engineer's transfer from stage 0
    // (`baseline` "stage 0").
    let compared = r.paired.iter().map(|p| (p, "paired", "paired_mean"));
    let transfer = r.transfer.iter().map(|p| (p, "transfer", "transfer_mean"));
    let regret = r.regret.iter().map(|p| (p, "regret", "regret_mean"));
    for (p, per_seed_kind, mean_kind) in compared.chain(transfer).chain(regret) {
        paired_rows(r, p, (per_seed_kind, mean_kind), &mut rows);
    }
    csv_text(&rows)
}

/// One run's `cell` rows (every test cell) and `sum` rows (every agent count).
fn run_rows(run: &StudyRun, rows: &mut Vec<CsvRow>) {
    let fs = run
        .summary
        .final_stage
        .map(|x| x.to_string())
        .unwrap_or_default();
    let of_run = |kind: &'static str, agents: usize, size: String| CsvRow {
        kind,
        engineer: run.engineer.clone(),
        replicate: run.replicate.to_string(),
        branch: run.branch.clone(),
        final_stage: fs.clone(),
        agents: agents.to_string(),
        size,
        n: "1".into(),
        suite: "test".into(),
        undecided: run
            .undecided
            .iter()
            .map(|u| format!("{} {}", u.stage, u.status))
            .collect::<Vec<_>>()
            .join(";"),
        ..CsvRow::default()
    };
    for (&(k, n), c) in &run.summary.test.cells {
        rows.push(CsvRow {
            total: c.total.to_string(),
            valid: c.valid.to_string(),
            optimal: c.optimal.to_string(),
            valid_rate: f4(c.valid_rate()),
            optimal_rate: f4(c.optimal_rate()),
            ..of_run("cell", k, n.to_string())
        });
    }
    for k in run.summary.test.agent_counts() {
        let (v, o) = run.summary.test.sum_row(k);
        let cs: Vec<_> = run
            .summary
            .test
            .cells
            .iter()
            .filter(|c| c.0 .0 == k)
            .map(|c| *c.1)
            .collect();
        rows.push(CsvRow {
            total: cs.iter().map(|c| c.total).sum::<u32>().to_string(),
            valid: cs.iter().map(|c| c.valid).sum::<u32>().to_string(),
            optimal: cs.iter().map(|c| c.optimal).sum::<u32>().to_string(),
            valid_rate: f4(v),
            optimal_rate: f4(o),
            ..of_run("sum", k, String::new())
        });
    }
}

/// One paired (or transfer) row's CSV rows: a `per_seed_kind` row per replicate (the
/// differences in points, with the engineer's branch and final stage), then a
/// `mean_kind` row of the mean difference, its t half-width, the pooled bootstrap
/// interval and McNemar's test.
fn paired_rows(
    r: &StudyReport,
    p: &StudyPaired,
    (per_seed_kind, mean_kind): (&'static str, &'static str),
    rows: &mut Vec<CsvRow>,
) {
    let branch = |e: &str, rep: u32| {
        r.runs
            .iter()
            .find(|x| x.engineer == e && x.replicate == rep)
            .map(|x| {
                (
                    x.branch.clone(),
                    x.summary
                        .final_stage
                        .map(|n| n.to_string())
                        .unwrap_or_default(),
                )
            })
            .unwrap_or_default()
    };
    let of_pair = |kind: &'static str| CsvRow {
        kind,
        engineer: p.engineer.clone(),
        agents: p.agents.to_string(),
        suite: p.suite.clone(),
        subset: p.subset.clone().unwrap_or_default(),
        baseline: p.baseline.clone(),
        ..CsvRow::default()
    };
    for (i, rep) in p.replicates.iter().enumerate() {
        let (b, fs) = branch(&p.engineer, *rep);
        rows.push(CsvRow {
            replicate: rep.to_string(),
            branch: b,
            final_stage: fs,
            n: "1".into(),
            valid_rate: f4(p.valid.per_seed[i]),
            optimal_rate: f4(p.optimal.per_seed[i]),
            ..of_pair(per_seed_kind)
        });
    }
    let boot = |m: &StudyPairedMetric| match m.bootstrap_ci95 {
        Some(i) => (f4(i.low), f4(i.high)),
        None => Default::default(),
    };
    let mc = |m: &StudyPairedMetric| match m.mcnemar {
        Some(t) => (
            t.a_only.to_string(),
            t.b_only.to_string(),
            format!("{:.6}", t.p),
        ),
        None => Default::default(),
    };
    let (valid_boot_low, valid_boot_high) = boot(&p.valid);
    let (optimal_boot_low, optimal_boot_high) = boot(&p.optimal);
    let (valid_a_only, valid_b_only, valid_p) = mc(&p.valid);
    let (optimal_a_only, optimal_b_only, optimal_p) = mc(&p.optimal);
    rows.push(CsvRow {
        n: p.replicates.len().to_string(),
        valid_rate: f4(p.valid.mean),
        optimal_rate: f4(p.optimal.mean),
        valid_ci95: opt(p.valid.ci95),
        optimal_ci95: opt(p.optimal.ci95),
        valid_boot_low,
        valid_boot_high,
        optimal_boot_low,
        optimal_boot_high,
        valid_a_only,
        valid_b_only,
        valid_p,
        optimal_a_only,
        optimal_b_only,
        optimal_p,
        ..of_pair(mean_kind)
    });
}
/// The CSV text of `rows`, the header (CsvRow's field names) first; the header alone
/// when there is no row.
fn csv_text(rows: &[CsvRow]) -> String {
    let blank = [CsvRow::default()];
    let mut w = csv::Writer::from_writer(Vec::new());
    for row in if rows.is_empty() { &blank[..] } else { rows } {
        w.serialize(row).expect("CSV into memory");
    }
    let text = w.into_inner().expect("CSV into memory");
    let text = String::from_utf8(text).expect("CSV of UTF-8 fields");
    match rows.is_empty() {
        true => text
            .lines()
            .next()
            .map(|h| format!("{h}\n"))
            .unwrap_or_default(),
        false => text,
    }
}

#[cfg(test)]
mod tests {
    use super::super::model::{report, StudyCell};
    use super::*;

    #[test]
    fn study_csv_has_its_header_and_quotes_fields_that_need_it() {
        let text = study_csv(&report(vec![]));
        assert_eq!(text.lines().count(), 1, "the header alone: {text}");
        assert!(text.starts_with("kind,engineer,replicate,branch,final_stage,agents,size,n,"));
        assert!(text.ends_with(",optimal_a_only,optimal_b_only,optimal_p,undecided\n"));
        let cell = StudyCell {
            engineer: "llm \"a\", b".into(),
            agents: 3,
            size: None,
            subset: None,
            n: 2,
            valid_mean: 50.0,
            valid_ci95: Some(1.5),
            optimal_mean: 25.0,
            optimal_ci95: None,
        };
        let text = study_csv(&report(vec![cell]));
        let header = text.lines().next().unwrap().split(',').count();
        assert_eq!(header, 29);
        let row = text.lines().nth(1).unwrap();
        assert_eq!(
            row,
            "mean,\"llm \"\"a\"\", b\",,,,3,,2,,,,50.0000,25.0000,1.5000,,test,,,,,,,,,,,,,"
        );
        let mut read = csv::Reader::from_reader(text.as_bytes());
        let rec = read.records().next().unwrap().unwrap();
        assert_eq!(rec.len(), 29);
        assert_eq!(&rec[1], "llm \"a\", b");
    }
}
