//! The Heatmaps section: per branch, validation valid % per map size and stage, each
//! cell coloured by its rate.
use super::cells::{cite, heat};
use crate::ledger::Hash;
use crate::report::{heatmap_values, BranchView, Report};
use maud::{html, Markup};
use std::collections::{BTreeMap, BTreeSet};

/// The Heatmaps section: a size × stage table per branch.
pub(super) fn heatmaps(r: &Report) -> Markup {
    let figure = |b: &BranchView| {
        let values = heatmap_values(b);
        let stages: BTreeSet<u32> = values.keys().map(|k| k.1).collect();
        let sizes: BTreeSet<usize> = values.keys().map(|k| k.0).collect();
        let events: BTreeMap<u32, Hash> = b
            .stages
            .iter()
            .filter_map(|s| Some((s.stage, s.validation.as_ref()?.event)))
            .collect();
        html! {
            figure.heatmap data-branch=(b.name) {
                figcaption { (b.name) }
                table {
                    thead { tr { th.l { "size \\ stage" } @for st in &stages { th { (st) } } } }
                    tbody {
                        @for n in &sizes {
                            tr {
                                th.l { (n) "×" (n) }
                                @for st in &stages {
                                    @match (values.get(&(*n, *st)), events.get(st)) {
                                        (Some(&v), Some(ev)) => {
                                            @let (bg, ink) = heat(v);
                                            td style={ "background:" (bg) ";color:" (ink) } {
                                                (cite(
                                                    &format!("{v:.0}"),
                                                    &[*ev],
                                                    &format!("{} stage {st} validation {n}×{n}, valid %", b.name)
                                                ))
                                            }
                                        }
                                        _ => { td { "–" } }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    };
    html! {
        section #heatmaps {
            h2 { "Heatmaps" }
            p.hint { "Validation valid % per map size (rows) and stage (columns), per branch." }
            div.heatmaps { @for b in &r.branches { (figure(b)) } }
        }
    }
}
