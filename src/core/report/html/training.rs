//! The Training section: GRPO step by step (the sampled validity on instances that need
//! coordination, and per branch and stage the means of what the steps recorded).
use super::cells::{cite, inline_svg};
use crate::figures::{curves_svg, Curves};
use crate::report::Report;
use crate::views::format::rate;
use maud::{html, Markup};

/// GRPO step by step: the sampled validity on training instances that need coordination
/// (one line per branch, a moving mean), and per branch and stage the means of what the
/// steps recorded.
pub(super) fn training(r: &Report) -> Result<Markup, crate::figures::FigureError> {
    if r.branches.iter().all(|b| b.training.is_empty()) {
        return Ok(html! {});
    }
    let series: Vec<crate::figures::Series> = r
        .branches
        .iter()
        .filter(|b| !b.coordination_curve.is_empty())
        .map(|b| (b.name.clone(), b.coordination_curve.clone()))
        .collect();
    let title = format!(
        "Sampled valid % on training instances that need coordination (mean of {} steps)",
        crate::report::STEP_WINDOW
    );
    let figure = if series.is_empty() {
        None
    } else {
        Some(inline_svg(curves_svg(&Curves {
            title: &title,
            x_label: "GRPO step",
            y_label: "valid %",
            series: &series,
            bands: &[],
            percent: true,
        })?))
    };
    Ok(html! {
        section #training {
        h2 { "Training, step by step" }
        p.hint {
            "What GRPO saw: each stage's mean reward, the share of groups whose samples all scored alike "
            "(no gradient), the KL to the reference, the clipped share, and how many sampled plans were valid, "
            "overall and on the instances that need coordination. Every step: "
            code { "ledger export --what steps" } "."
        }
        @if let Some(f) = figure { div.figs { (f) } }
        @for b in &r.branches {
            @if !b.training.is_empty() {
                h4 { (b.name) }
                div.scroll {
                    table.training {
                        thead {
                            tr {
                                th.l { "stage" } th { "steps" } th { "reward" } th { "zero-variance %" }
                                th { "KL" } th { "clipped %" } th { "sampled valid %" }
                                th { "coordination samples" } th { "their valid %" }
                            }
                        }
                        tbody {
                            @for s in &b.training {
                                @let what = format!(
                                    "{} stage {}: mean of {} GRPO steps (the first and last step's events)",
                                    b.name, s.stage, s.steps
                                );
                                @let c = |text: String| cite(&text, &s.events, &what);
                                tr {
                                    td.l { (s.stage) } td { (c(s.steps.to_string())) }
                                    td { (c(format!("{:.3}", s.reward_mean))) }
                                    td { (c(rate(100.0 * s.zero_variance_share))) }
                                    td { (c(format!("{:.4}", s.kl))) }
                                    td { (c(rate(100.0 * s.clip_fraction))) }
                                    td { (c(rate(s.valid_pct))) }
                                    td { (c(s.coordination_samples.to_string())) }
                                    @match s.coordination_valid_pct {
                                        Some(v) => td { (c(rate(v))) },
                                        None => td { "–" },
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        }
    })
}
