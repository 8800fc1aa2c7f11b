//! The Decisions section: per branch, every engineer decision (what it saw, what it
//! changed, why, and what happened next on validation).
use super::cells::{cite, field_label, plural, swatch, value};
use crate::ledger::Hash;
use crate::report::{BranchView, Report};
use crate::views::format::rate;
use maud::{html, Markup};

/// The Decisions section: a folding block per branch (the first open), a card per
/// decision.
pub(super) fn timeline(r: &Report) -> Markup {
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

/// One decision's card: header, then what it saw, changed, why, and the outcome.
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
