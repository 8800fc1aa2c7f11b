//! The Test section: each branch's final-stage test tables in the paper's layout, then
//! what training did (transfer from stage 0), the tables per wait-ratio subset, the
//! coordination split and each branch against the first, item by item.
use super::cells::{cite, name_headers, rate_header, rate_pair, size_label, swatch};
use crate::ledger::Hash;
use crate::report::{Eval, Report};
use crate::views::format::rate;
use maud::{html, Markup};
use std::collections::BTreeSet;

/// The Test section: a table per agent count (rows: sizes, then Sum; a column pair per
/// branch), then the transfer, subset, coordination and paired tables.
pub(super) fn test(r: &Report) -> Markup {
    let finals: Vec<Option<(u32, &Eval)>> = r.branches.iter().map(|b| b.final_test()).collect();
    let agents: BTreeSet<usize> = finals
        .iter()
        .flatten()
        .flat_map(|(_, e)| e.table.agent_counts())
        .collect();
    // One table per agent count: rows are sizes then Sum, a column pair per branch.
    let table = |k: usize| {
        let sizes: BTreeSet<usize> = finals
            .iter()
            .flatten()
            .flat_map(|(_, e)| e.sizes(k))
            .collect();
        let rows: Vec<Option<usize>> = sizes.iter().copied().map(Some).chain([None]).collect();
        html! {
            div.scroll {
                h3 { (k) " agents" }
                table.test data-agents=(k) {
                    thead {
                        tr {
                            th.l { "size" }
                            @for (i, (b, f)) in r.branches.iter().zip(&finals).enumerate() {
                                th colspan="2" {
                                    (swatch(i)) (b.name)
                                    @if let Some((stage, _)) = f { " " span.muted { "stage " (stage) } }
                                }
                            }
                        }
                        (rate_header(1, r.branches.len()))
                    }
                    tbody {
                        @for n in rows {
                            tr class=[n.is_none().then_some("sum")] {
                                td.l { (size_label(n)) }
                                @for (b, f) in r.branches.iter().zip(&finals) {
                                    @let cell = f.and_then(|(stage, e)| {
                                        let v = match n {
                                            Some(n) => e.rate(k, n),
                                            None => e.sum(k),
                                        }?;
                                        Some((stage, e.event, v))
                                    });
                                    @let stage = cell.map(|c| c.0).unwrap_or_default();
                                    @let events: Vec<Hash> = cell.iter().map(|c| c.1).collect();
                                    (rate_pair(
                                        cell.map(|(_, _, (v, o))| (rate(v), rate(o))),
                                        &events,
                                        &format!("{} stage {stage} test, {k} agents", b.name),
                                    ))
                                }
                            }
                        }
                    }
                }
            }
        }
    };
    html! {
        section #test {
            h2 { "Test" }
            p.hint {
                "Final evaluated stage of each branch; rows are map sizes, the Sum row is the mean over sizes (the paper's layout). "
                "Below them: the tables per wait-ratio subset of stratified suites, and each branch against the first, item by item."
            }
            @if agents.is_empty() { p.muted { "No branch has a test evaluation yet." } }
            div.tests { @for k in agents { (table(k)) } }
            (transfer(r))
            (subsets(r))
            (coordination(r))
            (paired(r))
        }
    }
}

/// The final stage's Sum rows per wait-ratio subset: rows (suite, agents, subset), a
/// column pair per branch; nothing when no suite is stratified.
fn subsets(r: &Report) -> Markup {
    let keys = crate::views::compare::subset_rows(r.branches.iter().map(|b| b.subsets.as_slice()));
    if keys.is_empty() {
        return html! {};
    }
    html! {
        h3 { "By wait-ratio subset" }
        p.hint {
            "Final evaluated stage; each cell's items are split into equal subsets whose items need coordination "
            "with the subset's probability; mean over sizes."
        }
        div.scroll {
            table.subsets {
                thead {
                    tr {
                        th.l { "suite" } th.l { "agents" } th.l { "subset" }
                        (name_headers(r.branches.iter().map(|b| b.name.as_str())))
                    }
                    (rate_header(3, r.branches.len()))
                }
                tbody {
                    @for (_, suite, k, subset) in &keys {
                        tr {
                            td.l { (suite) } td.l { (k) } td.l { (subset) }
                            @for b in &r.branches {
                                @let t = b
                                    .subsets
                                    .iter()
                                    .find(|t| &t.suite == suite && &t.subset == subset)
                                    .filter(|t| t.table.agent_counts().contains(k));
                                @let events: Vec<Hash> = t.iter().map(|t| t.event).collect();
                                (rate_pair(
                                    t.map(|t| {
                                        let (v, o) = t.table.sum_row(*k);
                                        (rate(v), rate(o))
                                    }),
                                    &events,
                                    &format!("{} {suite}@{subset}, {k} agents", b.name),
                                ))
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Per branch, every evaluated stage on the items that need coordination and on the
/// rest, beside the independent-shortest-paths baseline on the same items.
fn coordination(r: &Report) -> Markup {
    if r.branches.iter().all(|b| b.coordination.is_empty()) {
        return html! {};
    }
    html! {
        h3 { "Coordination" }
        p.hint {
            "An item needs coordination when its optimal sum-of-costs exceeds the sum of the agents' "
            "independent shortest paths; the baseline (independent shortest paths) fails every such item. "
            "Pooled over sizes, every evaluated stage."
        }
        @for b in &r.branches {
            @if !b.coordination.is_empty() {
                h4 { (b.name) }
                div.scroll {
                    table.coordination {
                        thead {
                            tr {
                                th.l { "stage" } th.l { "suite" } th.l { "agents" } th.l { "items" }
                                th { "n" } th { "valid %" } th { "optimal %" } th { "baseline valid %" }
                            }
                        }
                        tbody {
                            @for sc in &b.coordination {
                                @for row in &sc.rows {
                                    @let ev = [sc.event];
                                    @let what = format!(
                                        "{} stage {} {} {} agents, {} items",
                                        b.name, sc.stage, sc.suite, row.agents, row.half()
                                    );
                                    tr {
                                        td.l { (sc.stage) } td.l { (sc.suite) } td.l { (row.agents) }
                                        td.l { (row.half()) }
                                        td { (cite(&row.items.to_string(), &ev, &what)) }
                                        td { (cite(&rate(row.valid_pct), &ev, &what)) }
                                        td { (cite(&rate(row.optimal_pct), &ev, &what)) }
                                        td { (cite(&rate(row.baseline_valid_pct), &ev, &what)) }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// What training did on each branch: per agent count, the Sum row at stage 0 and at the
/// final stage on the same items, the change with its paired interval (valid, optimal)
/// and the valid change on the items that need no coordination and on those that do.
fn transfer(r: &Report) -> Markup {
    if r.transfer.is_empty() {
        return html! {};
    }
    let delta = |m: &crate::views::paired::PairedMetric| {
        format!(
            "{:+.2} [{:+.2}, {:+.2}]",
            m.diff, m.diff_ci95.low, m.diff_ci95.high
        )
    };
    html! {
        h3 { "Transfer: final stage − stage 0" }
        p.hint {
            "Each branch's final stage against its own stage 0 on the same suite items: the Sum row (mean over sizes) "
            "at both, the change in points with its paired 95% bootstrap interval ("
            (crate::views::paired::RESAMPLES) " resamples), and the valid change on the items that need no "
            "coordination (indep) and on those that do (coord). Trained on 2 agents, the 3-5-agent rows are the transfer."
        }
        div.scroll {
            table.transfer {
                thead {
                    tr {
                        th.l { "branch" } th.l { "suite" } th.l { "agents" } th { "items" }
                        th { "valid % stage 0 → final" } th { "valid Δ [95%]" } th { "optimal Δ [95%]" }
                        th { "indep valid Δ [95%]" } th { "coord valid Δ [95%]" }
                    }
                }
                tbody {
                    @for (branch, t) in &r.transfer {
                        @for row in t.rows.iter().filter(|x| x.subset.is_none()) {
                            @let what = format!("{branch}: {} {} agents, stage 0 → {}", row.suite, row.agents, t.stage.unwrap_or(0));
                            @let half = |name: &str| t.rows.iter()
                                .find(|h| h.suite == row.suite && h.agents == row.agents && h.subset.as_deref() == Some(name))
                                .map_or_else(|| "–".to_string(), |h| delta(&h.valid));
                            @let c = |text: String| html! { td { (cite(&text, &row.events, &what)) } };
                            tr {
                                td.l { (branch) } td.l { (row.suite) } td.l { (row.agents) }
                                (c(row.instances.to_string()))
                                (c(format!("{:.2} → {:.2}", row.valid.a, row.valid.b)))
                                (c(delta(&row.valid)))
                                (c(delta(&row.optimal)))
                                (c(half(crate::views::paired::coordination_label(false))))
                                (c(half(crate::views::paired::coordination_label(true))))
                            }
                        }
                    }
                }
            }
        }
        @for (branch, t) in &r.transfer { @for m in &t.missing { p.muted { (branch) ": " (m) } } }
    }
}

/// Every branch after the first against the first, item by item on the same suite
/// items: both rates with their own intervals, the paired difference, McNemar's test.
fn paired(r: &Report) -> Markup {
    html! {
        @for (branch, p) in &r.paired {
            h3 { "Paired: " (branch) " − " (p.against) }
            p.hint {
                "Final stages " (p.against_stage.map_or("–".into(), |n| n.to_string()))
                " and " (p.stage.map_or("–".into(), |n| n.to_string()))
                ", on the same suite items pair by pair: each branch's rate (mean over sizes) with its own 95% "
                "bootstrap interval, the difference in points with its paired 95% bootstrap interval ("
                (p.resamples) " resamples, items resampled within each size), the items only one branch gets "
                "right and McNemar's exact p."
            }
            @if !p.rows.is_empty() {
                div.scroll {
                    table.paired data-branch=(branch) {
                        thead {
                            tr {
                                th.l { "suite" } th.l { "agents" } th.l { "subset" } th { "items" } th.l { "metric" }
                                th { (p.against) " % [95%]" } th { (branch) " % [95%]" }
                                th { "Δ points [paired 95%]" } th { "only " (p.against) " / only " (branch) }
                                th { "McNemar p" }
                            }
                        }
                        tbody {
                            @for row in &p.rows {
                                @for (name, m) in [("valid", &row.valid), ("optimal", &row.optimal)] {
                                    @let subset = row.subset.as_deref().unwrap_or("all");
                                    @let what = format!(
                                        "{branch} − {}: {} {} agents {subset} {name}",
                                        p.against, row.suite, row.agents
                                    );
                                    @let c = |t: String| html! { td { (cite(&t, &row.events, &what)) } };
                                    tr {
                                        td.l { (row.suite) } td.l { (row.agents) } td.l { (subset) }
                                        (c(row.instances.to_string()))
                                        td.l { (name) }
                                        (c(format!("{:.2} [{:.2}, {:.2}]", m.a, m.a_ci95.low, m.a_ci95.high)))
                                        (c(format!("{:.2} [{:.2}, {:.2}]", m.b, m.b_ci95.low, m.b_ci95.high)))
                                        (c(format!("{:+.2} [{:+.2}, {:+.2}]", m.diff, m.diff_ci95.low, m.diff_ci95.high)))
                                        (c(format!("{} / {}", m.mcnemar.a_only, m.mcnemar.b_only)))
                                        (c(format!("{:.4}", m.mcnemar.p)))
                                    }
                                }
                            }
                        }
                    }
                }
            }
            @for m in &p.missing { p.muted { (m) } }
        }
    }
}
