//! The report page: one HTML document with its styles, script and figures inline (no
//! server, CDN or network). Every number is wrapped in an element carrying the hash of
//! the event it came from (`data-ev`); hovering shows it, clicking shows (and copies)
//! the `ledger show` command that prints the event.
//!
//! The page is built with maud's `html!`, which escapes every spliced value by
//! construction: ledger text (branch names, engineers' rationales, LLM replies) can only
//! ever become text on the page. The only raw HTML is ours: the style sheet, the script
//! and the SVG figures (plotters escapes the text it draws). The style sheet and the
//! scripts are files under `report/assets/`, spliced in with `include_str!`.
use super::{heatmap_values, validation_series, BranchView, Eval, Report};
use crate::figures::{css_color, curves_svg, Curves};
use crate::ledger::Hash;
use crate::views::format::{pm, rate};
use crate::views::study::{StudyCell, StudyReport};
use maud::{html, Markup, PreEscaped, DOCTYPE};
use std::collections::{BTreeMap, BTreeSet};

/// A number that cites its events: `data-ev` holds their full hashes.
fn cite(text: &str, events: &[Hash], what: &str) -> Markup {
    let full: Vec<String> = events.iter().map(|h| h.to_hex()).collect();
    let short: Vec<String> = events.iter().map(|h| h.short()).collect();
    html! {
        span.n data-ev=(full.join(" ")) title={ (what) " · event " (short.join(", ")) } { (text) }
    }
}

/// Two cells, valid % then optimal %, citing `events`; two dashes when not evaluated.
fn rate_pair(cell: Option<(String, String)>, events: &[Hash], what: &str) -> Markup {
    html! {
        @match cell {
            Some((v, o)) => { td { (cite(&v, events, what)) } td { (cite(&o, events, what)) } }
            None => { td { "–" } td { "–" } }
        }
    }
}

/// The second header row of a table with `groups` valid/optimal column pairs, after
/// `blank` empty header cells.
fn rate_header(blank: usize, groups: usize) -> Markup {
    html! {
        tr {
            @for _ in 0..blank { th {} }
            @for _ in 0..groups { th { "valid %" } th { "optimal %" } }
        }
    }
}

/// The first cell of a paper-layout row: `N×N`, or the Sum row's label (`None`).
fn size_label(n: Option<usize>) -> String {
    n.map(|n| format!("{n}×{n}"))
        .unwrap_or_else(|| "Sum".into())
}

/// "sizes.9.data_ratio" -> "9×9 data"; "agents" stays.
fn field_label(f: &str) -> String {
    let parts: Vec<&str> = f.split('.').collect();
    match parts.as_slice() {
        ["sizes", n, k] => format!("{n}×{n} {}", k.trim_end_matches("_ratio")),
        _ => f.to_string(),
    }
}

fn value(x: Option<f64>) -> String {
    x.map_or_else(|| "–".into(), crate::views::number)
}

/// "" for one, else the plural ending `many`.
fn plural(n: usize, many: &'static str) -> &'static str {
    if n == 1 {
        ""
    } else {
        many
    }
}

/// A valid-rate colour (the viridis map of the heatmap figures) and a readable ink.
fn heat(v: f64) -> (String, &'static str) {
    use plotters::style::colors::colormaps::{ColorMap, ViridisRGB};
    let c = ViridisRGB.get_color(v.clamp(0.0, 100.0) / 100.0);
    (
        format!("#{:02x}{:02x}{:02x}", c.0, c.1, c.2),
        if v > 60.0 { "#000" } else { "#fff" },
    )
}

fn swatch(i: usize) -> Markup {
    html! { i.sw style={ "background:" (css_color(i)) } {} }
}

/// A column-pair header per name (branches or engineers), each with its colour.
fn name_headers<'a>(names: impl Iterator<Item = &'a str>) -> Markup {
    html! {
        @for (i, name) in names.enumerate() {
            th colspan="2" { (swatch(i)) (name) }
        }
    }
}

/// An SVG figure of ours (plotters escapes the text it draws), scaled with the page:
/// plotters writes a fixed width/height; keep them as the aspect ratio via viewBox and
/// let CSS size the element.
fn inline_svg(svg: String) -> Markup {
    if svg.contains("viewBox") {
        return PreEscaped(svg);
    }
    let dims = |attr: &str| -> Option<u32> {
        let i = svg.find(&format!("{attr}=\""))? + attr.len() + 2;
        svg[i..].split('"').next()?.parse().ok()
    };
    PreEscaped(match (dims("width"), dims("height")) {
        (Some(w), Some(h)) => svg.replacen("<svg ", &format!("<svg viewBox=\"0 0 {w} {h}\" "), 1),
        _ => svg,
    })
}

// Each asset is spliced after a newline (the page's bytes since it was a Rust string).

/// The page's style sheet.
const STYLE: &str = concat!("\n", include_str!("assets/report.css"));

/// The page's script: clicking a number shows (and copies) the `ledger show` command
/// that prints its event.
const SCRIPT: &str = concat!("\n", include_str!("assets/report.js"));

/// `ledger serve`'s addition to the page: ask the server (long polling `/version`)
/// whether the ledger moved, and if so fetch the page again and swap its `<main>` in
/// place. The fetched page is parsed by DOMParser, whose scripts never run; its text was
/// escaped by the same renderer as this one.
const LIVE_SCRIPT: &str = concat!("\n", include_str!("assets/live.js"));

/// Render the whole page.
pub fn render(r: &Report) -> Result<String, crate::figures::FigureError> {
    page(r, None)
}

/// The page as `ledger serve` shows it: `version` (the ledger's refs when it was
/// gathered) and the script that swaps in a newer page when they move.
pub fn render_live(r: &Report, version: &str) -> Result<String, crate::figures::FigureError> {
    page(r, Some(version))
}

/// A live page for a ledger with nothing to show yet (no branch, or one being created):
/// the message, and the script that replaces it once there is.
pub fn render_waiting(ledger: &str, message: &str, version: &str) -> String {
    let page = html! {
        (DOCTYPE) "\n"
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width,initial-scale=1";
                title { "waiting · mapf-ledger" }
                style { (PreEscaped(STYLE)) }
            }
            body data-ledger=(ledger) data-live=(version) {
                main {
                    h1 { "Ledger " code { (ledger) } }
                    p.lead { span #live.badge { "live" } " " (message) }
                }
                script { (PreEscaped(LIVE_SCRIPT)) }
            }
        }
    };
    page.into_string() + "\n"
}

fn page(r: &Report, live: Option<&str>) -> Result<String, crate::figures::FigureError> {
    let decisions: usize = r.branches.iter().map(|b| b.audit.decisions.len()).sum();
    let nb = r.branches.len();
    let study_lead = r.study.as_ref().map(|s| {
        format!(
            " · study of {} engineer{} × {} seed{}",
            s.engineers.len(),
            plural(s.engineers.len(), "s"),
            s.seeds,
            plural(s.seeds as usize, "s")
        )
    });
    let validation = validation(r)?;
    let training = training(r)?;
    let study = match &r.study {
        Some(s) => Some(study(s)?),
        None => None,
    };
    let page = html! {
        (DOCTYPE) "\n"
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width,initial-scale=1";
                title { (r.plan) " · mapf-ledger report" }
                style { (PreEscaped(STYLE)) }
            }
            body data-ledger=(r.ledger) data-live=[live] {
                main {
                    h1 { "Experiment report: " (r.plan) }
                    p.lead {
                        "Ledger " code { (r.ledger) } " · " (nb) " branch" (plural(nb, "es"))
                        " · " (decisions) " engineer decision" (plural(decisions, "s"))
                        (study_lead.unwrap_or_default())
                        @if live.is_some() { " " span #live.badge title="ledger serve: the page follows the ledger as events land" { "live" } }
                    }
                    p.hint {
                        "Every number names the event it came from: hover it for the hash, click it for the "
                        code { "ledger show" } " command."
                    }
                    nav {
                        a href="#validation" { "Validation" }
                        a href="#test" { "Test" }
                        @if r.branches.iter().any(|b| !b.training.is_empty()) { a href="#training" { "Training" } }
                        a href="#heatmaps" { "Heatmaps" }
                        @if r.branches.iter().any(|b| !b.samples.is_empty()) { a href="#samples" { "Samples" } }
                        a href="#decisions" { "Decisions" }
                        a href="#forks" { "Fork tree" }
                        @if r.study.is_some() { a href="#study" { "Study" } }
                    }
                    (validation)
                    (test(r))
                    (training)
                    (heatmaps(r))
                    (samples(r))
                    (timeline(r))
                    (forks(r))
                    @if let Some(s) = study { (s) }
                }
                pre #cite hidden {}
                script { (PreEscaped(SCRIPT)) }
                @if live.is_some() { script { (PreEscaped(LIVE_SCRIPT)) } }
            }
        }
    };
    Ok(page.into_string() + "\n")
}

fn validation(r: &Report) -> Result<Markup, crate::figures::FigureError> {
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
    let [valid_bands, optimal_bands] = super::validation_bands(r);
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

fn test(r: &Report) -> Markup {
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

/// GRPO step by step: the sampled validity on training instances that need coordination
/// (one line per branch, a moving mean), and per branch and stage the means of what the
/// steps recorded.
fn training(r: &Report) -> Result<Markup, crate::figures::FigureError> {
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
        super::STEP_WINDOW
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
fn samples(r: &Report) -> Markup {
    if r.branches.iter().all(|b| b.samples.is_empty()) {
        return html! {};
    }
    html! {
        section #samples {
        h2 { "Sampled plans" }
        p.hint {
            "Plans GRPO sampled in each branch's last trained stage: valid ones, ones that ran into "
            "another agent, ones that fell in a hole (up to " (super::SAMPLES_PER_KIND) " each), and when the plan keeps "
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

fn heatmaps(r: &Report) -> Markup {
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

fn timeline(r: &Report) -> Markup {
    html! {
        section #decisions {
            h2 { "Decisions" }
            p.hint {
                "Per stage: the engineer, its status, what it saw, the configuration it proposed and what was "
                "applied (clips and refused keys), its rationale, and validation on the sizes it changed, before → after."
            }
            @for (i, b) in r.branches.iter().enumerate() {
                @let n = b.audit.decisions.len();
                details.branch data-branch=(b.name) open[i == 0] {
                    summary { (swatch(i)) (b.name) " · " (n) " decision" (plural(n, "s")) }
                    @if n == 0 { p.muted { "No engineer decision on this branch." } }
                    @for d in &b.audit.decisions { (decision(b, d)) }
                }
            }
        }
    }
}

fn decision(b: &BranchView, d: &crate::views::audit::DecisionAudit) -> Markup {
    let what = format!("{} stage {} decision", b.name, d.stage);
    let ev = [d.event];
    html! {
        article class={ "decision " (d.status) } data-branch=(b.name) data-stage=(d.stage) {
            header {
                b { "stage " (d.stage) }
                span { (d.engineer) }
                span.badge { (d.status) }
                @if let Some(reason) = &d.status_reason { span.muted { (reason) } }
                span.muted { "decision " (cite(&d.event.short(), &ev, &what)) }
            }
            div.cols {
                // What it saw.
                div {
                    h4 { "Saw" }
                    @if d.evidence.is_empty() {
                        p.muted { "no summary or failure breakdown in its context" }
                    } @else {
                        ul {
                            @for e in &d.evidence {
                                li { (cite(e, &ev, &format!("{what}, context blob {}", d.context.short()))) }
                            }
                        }
                    }
                }
                // What it changed.
                div {
                    h4 { "Changed" }
                    @if d.changes.is_empty() {
                        p.muted { "no change" }
                    } @else {
                        table.diff {
                            thead { tr { th.l { "field" } th { "was" } th { "proposed" } th { "applied" } } }
                            tbody {
                                @for c in &d.changes {
                                    @let clipped = d.clips.iter().any(|k| k.field == c.field);
                                    tr class=[clipped.then_some("clipped")] {
                                        td.l {
                                            (field_label(&c.field))
                                            @if clipped { " " span.badge { "clipped" } }
                                        }
                                        td { (cite(&value(c.previous), &ev, &what)) }
                                        td { (cite(&value(c.proposed), &ev, &what)) }
                                        td { (cite(&value(c.applied), &ev, &what)) }
                                    }
                                }
                            }
                        }
                    }
                    @if !d.clips.is_empty() {
                        ul.clips {
                            @for c in &d.clips {
                                li { "clip " (field_label(&c.field)) ": " (c.proposed) " → " (c.applied) " (" (c.reason) ")" }
                            }
                        }
                    }
                    @if !d.refused.is_empty() {
                        ul.refused {
                            @for f in &d.refused {
                                li { "refused " code { (serde_json::to_string(f).unwrap_or_default()) } }
                            }
                        }
                    }
                }
                // Why.
                div {
                    h4 { "Rationale" }
                    @if d.rationale.trim().is_empty() {
                        p.muted { "none given" }
                    } @else {
                        blockquote { (d.rationale.trim()) }
                    }
                }
                // What happened next: how GRPO went on the stage, then validation.
                div {
                    h4 { "Outcome" }
                    @if let Some(t) = &d.training { p.muted.training { "GRPO: " (t.line()) } }
                    @match &d.outcome {
                        None => { p.muted { "not evaluated yet" } }
                        Some(o) => { (outcome(b, o)) }
                    }
                }
            }
        }
    }
}

/// Validation after a decision: the change over all sizes, then the sizes it changed,
/// before → after.
fn outcome(b: &BranchView, o: &crate::views::audit::DecisionOutcome) -> Markup {
    let event_of = |stage: u32| {
        b.stages
            .iter()
            .find(|s| s.stage == stage)
            .and_then(|s| s.validation.as_ref())
            .map(|v| v.event)
    };
    let evs: Vec<Hash> = [event_of(o.previous_stage), event_of(o.stage)]
        .into_iter()
        .flatten()
        .collect();
    let shown: Vec<&crate::views::audit::SizeOutcome> = if o.changed_sizes.is_empty() {
        Vec::new()
    } else {
        o.sizes.iter().filter(|s| s.changed).collect()
    };
    let all = format!(
        "{} validation, stage {} → {}",
        b.name, o.previous_stage, o.stage
    );
    html! {
        p {
            span.verdict { (o.verdict.replace('_', " ")) }
            " · all sizes Δ valid " (cite(&format!("{:+.2}", o.sum_delta_valid), &evs, &all))
        }
        @if !shown.is_empty() {
            table.outcome {
                thead { tr { th.l { "size" } th { "valid before" } th { "after" } th { "Δ" } } }
                tbody {
                    @for s in shown {
                        @let w = format!(
                            "{} validation {}×{}, stage {} → {}",
                            b.name, s.size, s.size, o.previous_stage, o.stage
                        );
                        tr {
                            td.l { (s.size) "×" (s.size) }
                            td { (cite(&rate(s.valid_before), &evs, &w)) }
                            td { (cite(&rate(s.valid_after), &evs, &w)) }
                            td { (cite(&format!("{:+.2}", s.delta_valid), &evs, &w)) }
                        }
                    }
                }
            }
        }
    }
}

fn forks(r: &Report) -> Markup {
    let names: BTreeSet<&str> = r.branches.iter().map(|b| b.name.as_str()).collect();
    let mut children: BTreeMap<&str, Vec<&BranchView>> = BTreeMap::new();
    let mut roots = Vec::new();
    for b in &r.branches {
        match &b.fork {
            Some(f) if names.contains(f.from.as_str()) && f.from != b.name => {
                children.entry(f.from.as_str()).or_default().push(b)
            }
            _ => roots.push(b),
        }
    }
    for c in children.values_mut() {
        c.sort_by(|a, b| {
            let key = |x: &BranchView| x.fork.as_ref().map(|f| f.stage).unwrap_or(0);
            key(a).cmp(&key(b)).then(a.name.cmp(&b.name))
        });
    }
    let mut seen = BTreeSet::new();
    let nodes: Vec<Markup> = roots
        .into_iter()
        .map(|b| fork_node(b, &children, &mut seen))
        .collect();
    html! {
        section #forks {
            h2 { "Fork tree" }
            p.hint { "Each fork keeps its source's stages before the fork stage and lets its engineer design the rest." }
            ul.tree { @for n in nodes { (n) } }
        }
    }
}

fn fork_node<'a>(
    b: &'a BranchView,
    children: &BTreeMap<&str, Vec<&'a BranchView>>,
    seen: &mut BTreeSet<&'a str>,
) -> Markup {
    if !seen.insert(b.name.as_str()) {
        return html! {};
    }
    let stages = b.stages.iter().filter(|s| s.completed.is_some()).count();
    let kids: Option<Vec<Markup>> = children
        .get(b.name.as_str())
        .map(|kids| kids.iter().map(|k| fork_node(k, children, seen)).collect());
    html! {
        li.fork data-branch=(b.name) {
            span.branchname { (b.name) }
            " · head " (cite(&b.head.short(), &[b.head], &format!("{} head", b.name)))
            " · " (stages) " completed stage" (plural(stages, "s"))
            @if let Some(f) = &b.fork {
                " · "
                span.muted {
                    "forked from " (f.from) " before stage " (f.stage) " (engineer " (f.engineer) ", at "
                    (cite(&f.at.short(), &[f.at], &format!("fork point of {}", b.name))) ")"
                }
            }
            @if let Some(kids) = kids { ul { @for k in kids { (k) } } }
        }
    }
}

fn study(s: &StudyReport) -> Result<Markup, crate::figures::FigureError> {
    let curves = inline_svg(curves_svg(&Curves {
        x_label: "stage",
        title: "Study: mean validation valid % per stage",
        y_label: "valid %",
        series: &crate::views::study::study_series(s),
        bands: &[],
        percent: true,
    })?);
    // Test cells in the paper's layout: rows (agents, size | Sum), a column per engineer.
    let whole = |c: &&StudyCell| c.subset.is_none();
    let agents: BTreeSet<usize> = s.cells.iter().filter(whole).map(|c| c.agents).collect();
    let heads = |e: &str| -> Vec<Hash> {
        s.runs
            .iter()
            .filter(|x| x.engineer == e)
            .map(|x| x.head)
            .collect()
    };
    let cell_pair = |c: Option<&StudyCell>| {
        c.map(|c| {
            (
                pm(c.valid_mean, c.valid_ci95),
                pm(c.optimal_mean, c.optimal_ci95),
            )
        })
    };
    let test_table = |k: usize| {
        let sizes: BTreeSet<usize> = s
            .cells
            .iter()
            .filter(whole)
            .filter(|c| c.agents == k)
            .filter_map(|c| c.size)
            .collect();
        let rows: Vec<Option<usize>> = sizes.into_iter().map(Some).chain([None]).collect();
        html! {
            h3 { "Final-stage test, " (k) " agents" }
            div.scroll {
                table.study-test {
                    thead {
                        tr { th.l { "size" } (name_headers(s.engineers.iter().map(String::as_str))) }
                        (rate_header(1, s.engineers.len()))
                    }
                    tbody {
                        @for n in rows {
                            tr class=[n.is_none().then_some("sum")] {
                                td.l { (size_label(n)) }
                                @for e in &s.engineers {
                                    @let cell = s
                                        .cells
                                        .iter()
                                        .filter(whole)
                                        .find(|c| &c.engineer == e && c.agents == k && c.size == n);
                                    (rate_pair(
                                        cell_pair(cell),
                                        &heads(e),
                                        &format!("{e}: test {k} agents over {} runs", cell.map_or(0, |c| c.n)),
                                    ))
                                }
                            }
                        }
                    }
                }
            }
        }
    };
    // Sum rows per wait-ratio subset (stratified test suites).
    let subsets: BTreeSet<(usize, String)> = s
        .cells
        .iter()
        .filter_map(|c| Some((c.agents, c.subset.clone()?)))
        .collect();
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
                    tbody { @for (i, e) in s.engineers.iter().enumerate() { (study_summary_row(s, i, e)) } }
                }
            }
            div.figs { (curves) }
            @for k in agents { (test_table(k)) }
            @if !subsets.is_empty() {
                h3 { "Final-stage test per wait-ratio subset (mean over sizes)" }
                div.scroll {
                    table.study-subsets {
                        thead {
                            tr {
                                th.l { "agents" } th.l { "subset" }
                                (name_headers(s.engineers.iter().map(String::as_str)))
                            }
                            (rate_header(2, s.engineers.len()))
                        }
                        tbody {
                            @for (k, subset) in &subsets {
                                tr {
                                    td.l { (k) } td.l { (subset) }
                                    @for e in &s.engineers {
                                        @let cell = s.cells.iter().find(|c| {
                                            &c.engineer == e && c.agents == *k && c.subset.as_ref() == Some(subset)
                                        });
                                        (rate_pair(
                                            cell_pair(cell),
                                            &heads(e),
                                            &format!(
                                                "{e}: test@{subset} {k} agents over {} runs",
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
            (study_transfer(s))
            (study_paired(s))
        }
    })
}

/// Each engineer's change from its runs' stage 0 on every Sum row (valid %), mean over
/// seeds with its t-interval and the pooled bootstrap: a row per engineer and half.
fn study_transfer(s: &StudyReport) -> Markup {
    use crate::views::study::paired_cell_parts;
    if s.transfer.is_empty() {
        return html! {};
    }
    let cols: BTreeSet<(bool, String, usize)> = s
        .transfer
        .iter()
        .map(|p| (p.suite != "val", p.suite.clone(), p.agents))
        .collect();
    let rows: Vec<(String, Option<&str>)> = s
        .engineers
        .iter()
        .flat_map(|e| [None, Some("indep"), Some("coord")].map(|h| (e.clone(), h)))
        .filter(|(e, h)| {
            s.transfer
                .iter()
                .any(|p| &p.engineer == e && p.subset.as_deref() == *h)
        })
        .collect();
    html! {
        h3 { "Transfer: final stage − stage 0, valid %" }
        p.hint {
            "Each run's final stage against its own stage 0 on the same suite items: Δ in points, mean over seeds "
            "[95% t-interval of the per-seed changes]; boot: paired bootstrap over items pooled over seeds; "
            "p: McNemar's exact test. indep / coord: the items that need no coordination and those that do."
        }
        div.scroll {
            table.study-transfer {
                thead {
                    tr {
                        th.l { "engineer" }
                        @for (_, suite, k) in &cols {
                            th { @if suite == "val" { "validation (" (k) " agents)" } @else { (k) " agents" } }
                        }
                    }
                }
                tbody {
                    @for (e, half) in &rows {
                        tr {
                            td.l { (e) @if let Some(h) = half { " @ " (h) } }
                            @for (_, suite, k) in &cols {
                                @match s.transfer.iter().find(|p| &p.engineer == e && &p.suite == suite && p.agents == *k && p.subset.as_deref() == *half) {
                                    Some(p) => {
                                        @let (main, detail) = paired_cell_parts(&p.valid);
                                        @let heads: Vec<Hash> = s.runs.iter()
                                            .filter(|x| x.engineer == p.engineer && p.replicates.contains(&x.replicate))
                                            .map(|x| x.head)
                                            .collect();
                                        @let what = format!("{e}: {suite} {k} agents, valid % final − stage 0");
                                        td {
                                            (cite(&main, &heads, &what))
                                            @if let Some(d) = detail { br; small.muted { (cite(&d, &heads, &what)) } }
                                        }
                                    }
                                    None => { td { "–" } }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// One engineer of a study: its runs, final stage and final-stage validation (mean ±
/// 95% half-width over seeds), and the runs' branches with their heads.
fn study_summary_row(s: &StudyReport, i: usize, e: &str) -> Markup {
    let runs: Vec<&crate::views::study::StudyRun> =
        s.runs.iter().filter(|x| x.engineer == e).collect();
    let finals: Vec<(u32, f64, f64)> = runs
        .iter()
        .filter_map(|x| x.summary.validation.last().copied())
        .collect();
    let heads: Vec<Hash> = runs.iter().map(|x| x.head).collect();
    let (v, vci) = crate::views::compare::mean_ci(&finals.iter().map(|f| f.1).collect::<Vec<_>>());
    let (o, oci) = crate::views::compare::mean_ci(&finals.iter().map(|f| f.2).collect::<Vec<_>>());
    let stage = finals.iter().map(|f| f.0).max();
    let what = format!("{e}: final-stage validation over {} runs", runs.len());
    html! {
        tr.engineer {
            td.l { (swatch(i)) (e) }
            td { (cite(&runs.len().to_string(), &heads, &what)) }
            td {
                @match stage {
                    Some(x) => { (cite(&x.to_string(), &heads, &what)) }
                    None => { "–" }
                }
            }
            td { @if finals.is_empty() { "–" } @else { (cite(&pm(v, vci), &heads, &what)) } }
            td { @if finals.is_empty() { "–" } @else { (cite(&pm(o, oci), &heads, &what)) } }
            td.l {
                @for (j, x) in runs.iter().enumerate() {
                    @if j > 0 { br; }
                    (x.branch) " " (cite(&x.head.short(), &[x.head], &format!("head of {}", x.branch)))
                }
            }
        }
    }
}

/// A study's paired differences against `fixed`: per metric, one row per engineer (and
/// wait-ratio subset), a column per Sum row, each citing the runs' heads.
fn study_paired(s: &StudyReport) -> Markup {
    use crate::views::study::{paired_cell_parts, BASELINE};
    if s.paired.is_empty() {
        return html! {};
    }
    let (cols, rows) = s.paired_layout();
    let cell =
        |e: &String, sub: &Option<String>, suite: &String, k: usize, title: &str, pick: usize| {
            let p = s.paired.iter().find(|p| {
                &p.engineer == e && &p.suite == suite && p.agents == k && &p.subset == sub
            });
            let Some(p) = p else {
                return html! { td { "–" } };
            };
            let heads: Vec<Hash> = s
                .runs
                .iter()
                .filter(|x| {
                    (x.engineer == p.engineer || x.engineer == p.baseline)
                        && p.replicates.contains(&x.replicate)
                })
                .map(|x| x.head)
                .collect();
            let m = if pick == 0 { &p.valid } else { &p.optimal };
            let what = format!("{e} − {BASELINE}: {suite} {k} agents, {title}");
            let (main, detail) = paired_cell_parts(m);
            html! {
                td {
                    (cite(&main, &heads, &what))
                    @if let Some(d) = detail { br; small.muted { (cite(&d, &heads, &what)) } }
                }
            }
        };
    let notes: BTreeSet<&String> = s.paired.iter().filter_map(|p| p.note.as_ref()).collect();
    html! {
        h3 { "Paired differences vs " (BASELINE) }
        p.hint {
            "Replicate r of each engineer against replicate r of " (BASELINE)
            " (the same fork point and suite items): Δ = engineer − " (BASELINE)
            " in points, mean over seeds [95% t-interval of the per-seed differences]; boot: paired bootstrap "
            "over items pooled over seeds (" (crate::views::paired::RESAMPLES) " resamples); p: McNemar's exact "
            "test on the discordant items pooled over seeds."
        }
        @for (title, pick) in [("Valid %", 0usize), ("Optimal %", 1)] {
            h4 { (title) ", Δ vs " (BASELINE) }
            div.scroll {
                table.study-paired {
                    thead {
                        tr {
                            th.l { "engineer" }
                            @for (suite, k) in &cols {
                                th {
                                    @if suite == "val" { "validation (" (k) " agents)" } @else { (k) " agents" }
                                }
                            }
                        }
                    }
                    tbody {
                        @for (e, sub) in &rows {
                            tr {
                                td.l { (e) @if let Some(w) = sub { " @ " (w) } }
                                @for (suite, k) in &cols { (cell(e, sub, suite, *k, title, pick)) }
                            }
                        }
                    }
                }
            }
        }
        @for n in notes { p.muted { "No instance-level statistics: " (n) "." } }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_cite_full_hashes() {
        let h = Hash::of_blob(b"x");
        let s = cite("1.00", &[h], "a < b").into_string();
        assert!(s.contains(&format!("data-ev=\"{}\"", h.to_hex())), "{s}");
        assert!(s.contains("a &lt; b"), "{s}");
    }

    #[test]
    fn markup_in_text_stays_text() {
        let s = cite("<script>x</script>", &[], "\"><td>").into_string();
        assert_eq!(
            s,
            "<span class=\"n\" data-ev=\"\" title=\"&quot;&gt;&lt;td&gt; · event \">&lt;script&gt;x&lt;/script&gt;</span>"
        );
    }

    #[test]
    fn fields_read_as_sizes() {
        assert_eq!(field_label("sizes.9.data_ratio"), "9×9 data");
        assert_eq!(field_label("agents"), "agents");
    }
}
