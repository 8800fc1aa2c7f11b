//! JSON Schemas of every interchange format, generated from the Rust types. The
//! checked-in copies under schemas/ must equal these (tests/schemas.rs).
use schemars::schema_for;

/// `(file stem, pretty JSON)` for every schema, in a fixed order.
pub fn all() -> Vec<(&'static str, String)> {
    let mut out = vec![
        ("instance", pretty(schema_for!(crate::env::Instance))),
        ("plan", pretty(schema_for!(crate::env::Plan))),
        (
            "generator-config",
            pretty(schema_for!(crate::env::GeneratorConfig)),
        ),
        (
            "config-proposal",
            pretty(schema_for!(crate::env::ConfigProposal)),
        ),
        ("outcome", pretty(schema_for!(crate::env::Outcome))),
    ];
    out.extend(crate::ledger::schemas());
    out.extend([
        (
            "audit",
            pretty(schema_for!(crate::views::audit::AuditReport)),
        ),
        (
            "compare",
            pretty(schema_for!(Vec<crate::study::BranchSummary>)),
        ),
        ("study", pretty(schema_for!(crate::study::StudyReport))),
        (
            "export-metric-row",
            pretty(schema_for!(crate::ledger::export::MetricRow)),
        ),
        (
            "export-decision-row",
            pretty(schema_for!(crate::ledger::export::DecisionRow)),
        ),
        (
            "export-branch-row",
            pretty(schema_for!(crate::ledger::export::BranchRow)),
        ),
        (
            "lm-generate",
            pretty(schema_for!(crate::cli::lm::GenerateOutput)),
        ),
        (
            "branches",
            pretty(schema_for!(Vec<crate::views::branches::BranchListing>)),
        ),
    ]);
    out
}

pub(crate) fn pretty(s: schemars::Schema) -> String {
    let mut t = serde_json::to_string_pretty(&s).expect("schemas serialize");
    t.push('\n');
    t
}
