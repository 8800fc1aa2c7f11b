//! The Sampled plans section: plans of each branch's last trained stage drawn on their
//! grids as inline SVG.
use super::cells::cite;
use crate::figures::css_color;
use crate::report::Report;
use maud::{html, Markup};

/// Pixels per grid cell in a sample drawing.
const CELL: u32 = 22;

/// A sampled plan on its grid, as inline SVG: holes dark, each agent's path a line in
/// its colour from its start (a numbered disc) towards its goal (a ring), and a red
/// cross where the plan failed. Every coordinate is a number we computed; no ledger
/// text reaches the SVG except through maud's escaping.
fn grid_svg(d: &crate::views::samples::Drawing) -> Markup {
    let n = d.size;
    let side = n * CELL;
    let centre = |(r, c): (u32, u32)| (c * CELL + CELL / 2, r * CELL + CELL / 2);
    html! {
        svg.grid xmlns="http://www.w3.org/2000/svg" width=(side) height=(side)
            viewBox=(format!("0 0 {side} {side}")) role="img" {
            @for (r, row) in d.rows.iter().enumerate() {
                @for (c, ch) in row.chars().enumerate() {
                    rect x=(c as u32 * CELL) y=(r as u32 * CELL) width=(CELL) height=(CELL)
                        fill=(if ch == 'H' { "#35506b" } else { "#e9f2f9" }) stroke="#fff" {}
                }
            }
            @for (a, p) in d.paths.iter().enumerate() {
                @let pts: Vec<String> = p.iter().map(|&x| { let (cx, cy) = centre(x); format!("{cx},{cy}") }).collect();
                @let colour = css_color(a);
                @if let Some(&g) = d.goals.get(a) {
                    @let (gx, gy) = centre(g);
                    circle cx=(gx) cy=(gy) r=(CELL / 2 - 3) fill="none" stroke=(colour) stroke-width="2.5" {}
                }
                polyline points=(pts.join(" ")) fill="none" stroke=(colour) stroke-width="3"
                    stroke-linejoin="round" stroke-linecap="round" opacity="0.85" {}
                @let (sx, sy) = centre(p[0]);
                circle cx=(sx) cy=(sy) r=(CELL / 2 - 4) fill=(colour) {}
                text x=(sx) y=(sy + 4) text-anchor="middle" font-size="11" fill="#fff" { (a + 1) }
            }
            @for &f in &d.failure_cells {
                @let (fx, fy) = centre(f);
                @let h = CELL / 2 - 3;
                path d=(format!("M{} {}L{} {}M{} {}L{} {}", fx - h, fy - h, fx + h, fy + h, fx - h, fy + h, fx + h, fy - h))
                    stroke="#d62728" stroke-width="3" {}
            }
        }
    }
}

/// Sampled plans of each branch's last trained stage, drawn on their grids.
pub(super) fn samples(r: &Report) -> Markup {
    if r.branches.iter().all(|b| b.samples.is_empty()) {
        return html! {};
    }
    html! {
        section #samples {
        h2 { "Sampled plans" }
        p.hint {
            "Plans GRPO sampled in each branch's last trained stage: valid ones, ones that ran into "
            "another agent, ones that fell in a hole (up to " (crate::report::SAMPLES_PER_KIND) " each), and when the plan keeps "
            "evaluation plans (" code { "suites.keep_plans" } ") test items the final model got wrong. Discs are starts, "
            "rings goals, the red cross where the plan failed. More: "
            code { "ledger show BRANCH@stageN --samples 10 --kind conflict" } "."
        }
        @for b in &r.branches {
            @if !b.samples.is_empty() {
                h4 { (b.name) " · stage " (b.samples[0].stage) }
                div.samples {
                    @for x in &b.samples {
                        @let kind = match (x.valid, x.failure) {
                            (true, _) => "valid".to_string(),
                            (false, Some(k)) => k.name().to_string(),
                            (false, None) => "invalid".to_string(),
                        };
                        @let step = x.step.unwrap_or(0);
                        @let at = match &x.suite {
                            Some(suite) => format!("{suite} item {} (stage {})", x.index, x.stage),
                            None => format!("step {step}"),
                        };
                        @let what = match &x.suite {
                            Some(suite) => format!("{} stage {}: {suite} item {} (evaluation plans)", b.name, x.stage, x.index),
                            None => format!("{} stage {} step {step}: trajectory {} of the batch", b.name, x.stage, x.index),
                        };
                        figure.sample data-kind=(kind) data-suite=[x.suite.as_deref()] {
                            (grid_svg(&x.drawing))
                            figcaption {
                                span.verdict { (kind) }
                                @if x.valid {
                                    " · cost " (x.cost) " (optimal " (x.optimal_cost) ")"
                                }
                                @if let Some(reward) = x.reward { " · reward " (cite(&format!("{reward}"), &[x.event], &what)) }
                                @if x.reward.is_none() { " · " (cite("plan", &[x.event], &what)) }
                                br;
                                span.muted { (at) " · " (x.agents) " agents" @if x.needs_coordination { " · needs coordination" } }
                                @if let Some(d) = &x.detail { br; span.muted { (d) } }
                            }
                        }
                    }
                }
            }
        }
        }
    }
}
