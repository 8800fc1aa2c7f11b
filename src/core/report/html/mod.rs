//! The report page: one HTML document with its styles, script and figures inline (no
//! server, CDN or network). Every number is wrapped in an element carrying the hash of
//! the event it came from (`data-ev`); hovering shows it, clicking shows (and copies)
//! the `ledger show` command that prints the event.
//!
//! The page is built with maud's `html!`, which escapes every spliced value by
//! construction: ledger text (branch names, engineers' rationales, LLM replies) can only
//! ever become text on the page. The only raw HTML is ours: the style sheet, the script
//! and the SVG figures (plotters escapes the text it draws).
//!
//! A file per section of the page, in page order: `validation.rs`, `final_test.rs`,
//! `training.rs`, `heatmaps.rs`, `samples.rs`, `decisions.rs`, `forks.rs` and
//! `study.rs` (which formats the study's
//! [`StudyTables`](crate::views::study::StudyTables), the model study.md is written from
//! too); `cells.rs` holds what they share. The style sheet and the scripts are files
//! beside them, under `report/assets/`, spliced in with `include_str!`.
mod cells;
mod decisions;
mod final_test;
mod forks;
mod heatmaps;
mod samples;
mod study;
mod training;
mod validation;

use super::Report;
use cells::plural;
use maud::{html, PreEscaped, DOCTYPE};

// Each asset is spliced after a newline (the page's bytes since it was a Rust string).

/// The page's style sheet.
const STYLE: &str = concat!("\n", include_str!("../assets/report.css"));

/// The page's script: clicking a number shows (and copies) the `ledger show` command
/// that prints its event.
const SCRIPT: &str = concat!("\n", include_str!("../assets/report.js"));

/// `ledger serve`'s addition to the page: ask the server (long polling `/version`)
/// whether the ledger moved, and if so fetch the page again and swap its `<main>` in
/// place. The fetched page is parsed by DOMParser, whose scripts never run; its text was
/// escaped by the same renderer as this one.
const LIVE_SCRIPT: &str = concat!("\n", include_str!("../assets/live.js"));

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

/// The page of `r`, live (`ledger serve`) when given the ledger's `version`.
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
    let validation = validation::validation(r)?;
    let training = training::training(r)?;
    let study = match &r.study {
        Some(s) => Some(study::study(s)?),
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
                    (final_test::test(r))
                    (training)
                    (heatmaps::heatmaps(r))
                    (samples::samples(r))
                    (decisions::timeline(r))
                    (forks::forks(r))
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
