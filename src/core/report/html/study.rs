//! The Study section: the study's [`StudyTables`] (the model study.md is written from
//! too) as HTML: a summary row per engineer, the validation curve, the final-stage test
//! tables, the subset rows, the transfer and the paired differences against `fixed`,
//! every number citing the heads of the runs it came from. Only formatting.
use super::cells::{
    cite, inline_svg, name_headers, plural, rate_header, rate_pair, size_label, swatch,
};
use crate::figures::{curves_svg, Curves};
use crate::ledger::Hash;
use crate::views::format::pm;
use crate::views::study::{
    paired_cell_parts, study_series, DeltaCell, DeltaTable, EngineerRuns, StudyCell, StudyPaired,
    StudyPairedMetric, StudyReport, StudyTables, TestTable, BASELINE,
};
use maud::{html, Markup};

/// The valid % and optimal % texts of a study cell (mean ± half-width).
fn cell_pair(c: Option<&StudyCell>) -> Option<(String, String)> {
    c.map(|c| {
        (
            pm(c.valid_mean, c.valid_ci95),
            pm(c.optimal_mean, c.optimal_ci95),
        )
    })
}

/// The Study section of `s`.
pub(super) fn study(s: &StudyReport) -> Result<Markup, crate::figures::FigureError> {
    let t = StudyTables::of(s);
    let curves = inline_svg(curves_svg(&Curves {
        x_label: "stage",
        title: "Study: mean validation valid % per stage",
        y_label: "valid %",
        series: &study_series(s),
        bands: &[],
        percent: true,
    })?);
    Ok(html! {
        section #study {
            h2 { "Study" }
            p.hint {
                "Forks of " (s.from) " before stage " (s.at) ", " (s.seeds) " seed" (plural(s.seeds as usize, "s"))
                " per engineer; mean ± half-width of the 95% t-interval over seeds"
                @if s.seeds < 2 { " (one seed: no interval)" }
                "."
            }
            div.scroll {
                table.study-summary {
                    thead {
                        tr {
                            th.l { "engineer" } th { "runs" } th { "final stage" }
                            th { "validation valid %" } th { "validation optimal %" } th.l { "runs (heads)" }
                        }
                    }
                    tbody { @for (i, e) in t.engineers.iter().enumerate() { (summary_row(i, e)) } }
                }
            }
            div.figs { (curves) }
            @for table in &t.test { (test_table(&t, table)) }
            (subsets(&t))
            (transfer(&t))
            (paired(&t))
            (regret(&t))
        }
    })
}

/// One agent count's final-stage test table in the paper's layout: rows (size | Sum), a
/// column pair per engineer.
fn test_table(t: &StudyTables, table: &TestTable) -> Markup {
    let k = table.agents;
    let engineers = || t.study.engineers.iter().map(String::as_str);
    html! {
        h3 { "Final-stage test, " (k) " agents" }
        div.scroll {
            table.study-test {
                thead {
                    tr { th.l { "size" } (name_headers(engineers())) }
                    (rate_header(1, t.engineers.len()))
                }
                tbody {
                    @for row in table.sizes.iter().chain([&table.sum]) {
                        tr class=[row.size.is_none().then_some("sum")] {
                            td.l { (size_label(row.size)) }
                            @for (e, cell) in t.engineers.iter().zip(&row.cells) {
                                (rate_pair(
                                    cell_pair(*cell),
                                    &e.heads,
                                    &format!("{}: test {k} agents over {} runs", e.engineer, cell.map_or(0, |c| c.n)),
                                ))
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Sum rows per wait-ratio subset (stratified test suites); nothing without any.
fn subsets(t: &StudyTables) -> Markup {
    if t.subsets.is_empty() {
        return html! {};
    }
    html! {
        h3 { "Final-stage test per wait-ratio subset (mean over sizes)" }
        div.scroll {
            table.study-subsets {
                thead {
                    tr {
                        th.l { "agents" } th.l { "subset" }
                        (name_headers(t.study.engineers.iter().map(String::as_str)))
                    }
                    (rate_header(2, t.engineers.len()))
                }
                tbody {
                    @for row in &t.subsets {
                        tr {
                            td.l { (row.agents) } td.l { (row.subset) }
                            @for (e, cell) in t.engineers.iter().zip(&row.cells) {
                                (rate_pair(
                                    cell_pair(*cell),
                                    &e.heads,
                                    &format!(
                                        "{}: test@{} {} agents over {} runs",
                                        e.engineer, row.subset, row.agents,
                                        cell.map_or(0, |c| c.n)
                                    ),
                                ))
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The header row of a paired table: the engineer column, then a column per Sum row.
fn delta_header(d: &DeltaTable) -> Markup {
    html! {
        tr {
            th.l { "engineer" }
            @for (suite, k) in &d.cols {
                th { @if *suite == "val" { "validation (" (k) " agents)" } @else { (k) " agents" } }
            }
        }
    }
}

/// The body of a paired table on one metric: a row per engineer (and subset), each
/// cell the mean difference with its t-interval and, beneath it, the instance-level
/// statistics, citing the runs it pairs; `what` titles a cell's citation.
fn delta_body(
    d: &DeltaTable,
    metric: fn(&StudyPaired) -> &StudyPairedMetric,
    what: impl Fn(&str, &str, usize) -> String,
) -> Markup {
    let cell = |e: &str, c: &Option<DeltaCell>, (suite, k): (&str, usize)| {
        let Some(c) = c else {
            return html! { td { "–" } };
        };
        let what = what(e, suite, k);
        let (main, detail) = paired_cell_parts(metric(c.pair));
        html! {
            td {
                (cite(&main, &c.heads, &what))
                @if let Some(d) = detail { br; small.muted { (cite(&d, &c.heads, &what)) } }
            }
        }
    };
    html! {
        tbody {
            @for row in &d.rows {
                tr {
                    td.l { (row.engineer) @if let Some(w) = row.subset { " @ " (w) } }
                    @for (c, col) in row.cells.iter().zip(&d.cols) { (cell(row.engineer, c, *col)) }
                }
            }
        }
    }
}

/// Each engineer's change from its runs' stage 0 on every Sum row (valid %), mean over
/// seeds with its t-interval and the pooled bootstrap: a row per engineer and half.
fn transfer(t: &StudyTables) -> Markup {
    let Some(d) = &t.transfer else {
        return html! {};
    };
    html! {
        h3 { "Transfer: final stage − stage 0, valid %" }
        p.hint {
            "Each run's final stage against its own stage 0 on the same suite items: Δ in points, mean over seeds "
            "[95% t-interval of the per-seed changes]; boot: paired bootstrap over items pooled over seeds; "
            "p: McNemar's exact test. indep / coord: the items that need no coordination and those that do."
        }
        div.scroll {
            table.study-transfer {
                thead { (delta_header(d)) }
                (delta_body(d, |p| &p.valid, |e, suite, k| format!("{e}: {suite} {k} agents, valid % final − stage 0")))
            }
        }
    }
}

/// One engineer of a study: its runs, final stage and final-stage validation (mean ±
/// 95% half-width over seeds), and the runs' branches with their heads.
fn summary_row(i: usize, e: &EngineerRuns) -> Markup {
    let heads: &[Hash] = &e.heads;
    let what = format!(
        "{}: final-stage validation over {} runs",
        e.engineer,
        e.runs.len()
    );
    html! {
        tr.engineer {
            td.l { (swatch(i)) (e.engineer) }
            td { (cite(&e.runs.len().to_string(), heads, &what)) }
            td {
                @match e.final_stage {
                    Some(x) => { (cite(&x.to_string(), heads, &what)) }
                    None => { "–" }
                }
            }
            @match e.final_validation {
                Some([(v, vci), (o, oci)]) => {
                    td { (cite(&pm(v, vci), heads, &what)) }
                    td { (cite(&pm(o, oci), heads, &what)) }
                }
                None => { td { "–" } td { "–" } }
            }
            td.l {
                @for (j, x) in e.runs.iter().enumerate() {
                    @if j > 0 { br; }
                    (x.branch) " " (cite(&x.head.short(), &[x.head], &format!("head of {}", x.branch)))
                }
            }
        }
    }
}

/// Each arm's regret (valid %): the oracle against the arm, a row per arm, a column
/// per Sum row, each citing the runs' heads.
fn regret(t: &StudyTables) -> Markup {
    let Some(d) = &t.regret else {
        return html! {};
    };
    html! {
        h3 { "Regret: oracle − arm, valid %" }
        p.hint {
            "Replicate r of the oracle arm (each stage trained on every candidate, the best by validation kept) "
            "against replicate r of each arm: Δ in points, mean over seeds [95% t-interval of the per-seed "
            "differences]; boot: paired bootstrap over items pooled over seeds; p: McNemar's exact test."
        }
        div.scroll {
            table.study-regret {
                thead { (delta_header(d)) }
                (delta_body(d, |p| &p.valid, |e, suite, k| format!("oracle − {e}: {suite} {k} agents, valid %")))
            }
        }
    }
}

/// A study's paired differences against `fixed`: per metric, one row per engineer (and
/// wait-ratio subset), a column per Sum row, each citing the runs' heads.
fn paired(t: &StudyTables) -> Markup {
    let Some(d) = &t.paired else {
        return html! {};
    };
    let metrics: [(&str, fn(&StudyPaired) -> &StudyPairedMetric); 2] =
        [("Valid %", |p| &p.valid), ("Optimal %", |p| &p.optimal)];
    html! {
        h3 { "Paired differences vs " (BASELINE) }
        p.hint {
            "Replicate r of each engineer against replicate r of " (BASELINE)
            " (the same fork point and suite items): Δ = engineer − " (BASELINE)
            " in points, mean over seeds [95% t-interval of the per-seed differences]; boot: paired bootstrap "
            "over items pooled over seeds (" (crate::views::paired::RESAMPLES) " resamples); p: McNemar's exact "
            "test on the discordant items pooled over seeds."
        }
        @for (title, metric) in metrics {
            h4 { (title) ", Δ vs " (BASELINE) }
            div.scroll {
                table.study-paired {
                    thead { (delta_header(d)) }
                    (delta_body(d, metric, |e, suite, k| format!("{e} − {BASELINE}: {suite} {k} agents, {title}")))
                }
            }
        }
        @for n in &d.notes { p.muted { "No instance-level statistics: " (n) "." } }
    }
}
