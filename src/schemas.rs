//! JSON Schemas of every interchange format, generated from the Rust types. The
//! checked-in copies under schemas/ must equal these (tests/schemas.rs).
use schemars::schema_for;

/// A schema file that could not be written (or its directory made).
#[derive(Debug, thiserror::Error)]
#[error("{}: {source}", path.display())]
pub struct WriteError {
    pub path: std::path::PathBuf,
    #[source]
    pub source: std::io::Error,
}

/// Write every schema ([`all`]) as `NAME.json` into `out` (created if missing), telling
/// `wrote` each file's path once it is written.
pub fn write_all(
    out: &std::path::Path,
    wrote: &mut dyn FnMut(&std::path::Path),
) -> Result<(), WriteError> {
    let failed = |path: &std::path::Path| {
        let path = path.to_path_buf();
        move |source| WriteError { path, source }
    };
    std::fs::create_dir_all(out).map_err(failed(out))?;
    for (name, text) in all() {
        let path = out.join(format!("{name}.json"));
        std::fs::write(&path, text).map_err(failed(&path))?;
        wrote(&path);
    }
    Ok(())
}

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
    // The ledger's formats: the JSON form of an event (every kind), the plan file, and
    // what `verify`, `rebuild`, `gc`, `recover` and `fetch` print with --json.
    out.extend([
        (
            "ledger-event",
            pretty(schema_for!(crate::views::export::EventRecord)),
        ),
        ("ledger-plan", pretty(schema_for!(crate::plan::LedgerPlan))),
        ("verify", pretty(schema_for!(crate::ledger::verify::Report))),
        ("rebuild", pretty(schema_for!(crate::ledger::RebuildReport))),
        ("gc", pretty(schema_for!(crate::ledger::gc::GcReport))),
        (
            "recover",
            pretty(schema_for!(crate::ledger::recover::RecoverReport)),
        ),
        (
            "fetch",
            pretty(schema_for!(crate::ledger::bundle::FetchReport)),
        ),
    ]);
    out.extend([
        (
            "audit",
            pretty(schema_for!(crate::views::audit::AuditReport)),
        ),
        (
            "compare",
            pretty(schema_for!(Vec<crate::views::compare::BranchSummary>)),
        ),
        (
            "study",
            pretty(schema_for!(crate::views::study::StudyReport)),
        ),
        (
            "export-metric-row",
            pretty(schema_for!(crate::views::export::MetricRow)),
        ),
        (
            "export-decision-row",
            pretty(schema_for!(crate::views::export::DecisionRow)),
        ),
        (
            "export-step-row",
            pretty(schema_for!(crate::views::steps::StepRow)),
        ),
        (
            "export-branch-row",
            pretty(schema_for!(crate::views::export::BranchRow)),
        ),
        ("eval", pretty(schema_for!(crate::views::model::EvalReport))),
        (
            "eval-item",
            pretty(schema_for!(crate::views::model::EvalItem)),
        ),
        (
            "lm-generate",
            pretty(schema_for!(crate::views::model::GenerateOutput)),
        ),
        (
            "branches",
            pretty(schema_for!(Vec<crate::views::branches::BranchListing>)),
        ),
        (
            "show-branch",
            pretty(schema_for!(crate::views::show::BranchShow)),
        ),
        (
            "show-stage",
            pretty(schema_for!(crate::views::show::StageShow)),
        ),
        (
            "show-timing",
            pretty(schema_for!(crate::views::timing::TimingReport)),
        ),
        (
            "export-paired-row",
            pretty(schema_for!(crate::views::export::PairedExportRow)),
        ),
        (
            "export-outcome-row",
            pretty(schema_for!(crate::views::export::OutcomeRow)),
        ),
        (
            "engineer-eval",
            pretty(schema_for!(crate::engineer::eval::EvalReport)),
        ),
        (
            "show-samples",
            pretty(schema_for!(crate::views::samples::Samples)),
        ),
        (
            "replay",
            pretty(schema_for!(crate::views::show::ReplayReport)),
        ),
        (
            "replay-counterfactual",
            pretty(schema_for!(crate::replay::Counterfactual)),
        ),
        (
            "engineer-list",
            pretty(schema_for!(Vec<crate::views::show::EngineerRow>)),
        ),
        (
            "env-generate",
            pretty(schema_for!(Vec<crate::env::generator::Solved>)),
        ),
        (
            "env-solve",
            pretty(schema_for!(crate::views::testbed::SolveReport)),
        ),
        (
            "env-check",
            pretty(schema_for!(crate::views::testbed::CheckReport)),
        ),
        (
            "env-suite",
            pretty(schema_for!(crate::views::testbed::SuiteReport)),
        ),
        (
            "env-throughput",
            pretty(schema_for!(crate::env::batch::Throughput)),
        ),
        (
            "plan-check",
            pretty(schema_for!(crate::plan_check::MemoryPlan)),
        ),
    ]);
    out
}

fn pretty(s: schemars::Schema) -> String {
    let mut t = serde_json::to_string_pretty(&s).expect("schemas serialize");
    t.push('\n');
    t
}
