//! The Validation section: each branch's validation curves (valid and optimal %, with
//! their 95% bands) and the per-stage table beneath them.
use super::cells::{inline_svg, name_headers, rate_header, rate_pair};
use crate::figures::{curves_svg, Curves};
use crate::ledger::Hash;
use crate::report::{validation_bands, validation_series, Report};
use crate::views::format::rate;
use maud::{html, Markup};
use std::collections::BTreeSet;

/// The Validation section: the curves of every branch and a row per stage.
pub(super) fn validation(r: &Report) -> Result<Markup, crate::figures::FigureError> {
    let stages: BTreeSet<u32> = r
        .branches
        .iter()
        .flat_map(|b| {
            b.stages
                .iter()
                .filter(|s| s.validation.is_some())
                .map(|s| s.stage)
        })
        .collect();
    let [valid, optimal] = validation_series(r);
    let [valid_bands, optimal_bands] = validation_bands(r);
    let mut figures = Vec::new();
    for (title, y, series, bands) in [
        (
            "Validation valid % (shaded: 95% interval)",
            "valid %",
            &valid,
            &valid_bands,
        ),
        (
            "Validation optimal % (shaded: 95% interval)",
            "optimal %",
            &optimal,
            &optimal_bands,
        ),
    ] {
        figures.push(inline_svg(curves_svg(&Curves {
            x_label: "stage",
            title,
            y_label: y,
            series,
            bands,
            percent: true,
        })?));
    }
    // One row per stage: each branch's validation Sum row at that stage.
    let row = |st: u32| {
        html! {
            tr.stage {
                td.l { (st) }
                @for b in &r.branches {
                    @let agents = b.validation_agents().unwrap_or(2);
                    @let cell = b
                        .stages
                        .iter()
                        .find(|s| s.stage == st)
                        .and_then(|s| s.validation.as_ref())
                        .and_then(|v| Some((v.event, v.sum(agents)?)));
                    @let events: Vec<Hash> = cell.iter().map(|c| c.0).collect();
                    (rate_pair(
                        cell.map(|(_, (v, o))| (rate(v), rate(o))),
                        &events,
                        &format!("{} stage {st} validation", b.name),
                    ))
                }
            }
        }
    };
    Ok(html! {
        section #validation {
            h2 { "Validation" }
            p.hint { "Mean over map sizes of the validation set (training agent count), per stage; one line per branch." }
            div.figs { @for f in figures { (f) } }
            div.scroll {
                table.curves {
                    thead {
                        tr {
                            th.l { "stage" }
                            (name_headers(r.branches.iter().map(|b| b.name.as_str())))
                        }
                        (rate_header(1, r.branches.len()))
                    }
                    tbody { @for st in stages { (row(st)) } }
                }
            }
        }
    })
}
