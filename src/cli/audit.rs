//! `ledger audit`: every engineer decision of a branch with its evidence, config diff,
//! clips, rationale, status and outcome on the decided stage's validation set.
use super::CliResult;
use mapf_ledger::ledger::Ledger;
use mapf_ledger::views::text::audit::{block, json_with_texts, recorded_text};
use std::path::Path;

pub fn run(ledger: &Path, a: super::AuditArgs) -> CliResult {
    let (branch, stage, texts, json) = (&a.branch, a.stage, (a.prompt, a.reply), a.json);
    let l = Ledger::open_read_only(ledger)?;
    let report = mapf_ledger::views::audit::audit_of(&l, branch, stage)?;
    if json {
        let v = json_with_texts(&l, &report, texts)?;
        println!("{}", serde_json::to_string_pretty(&v).expect("serialises"));
        return Ok(());
    }
    print!("{}", mapf_ledger::views::audit::render(&report));
    for d in &report.decisions {
        for (want, what, h) in [(texts.0, "prompt", d.prompt), (texts.1, "reply", d.reply)] {
            if want {
                let text = recorded_text(&l, h)?;
                print!("{}", block(d, what, h, text.as_deref()));
            }
        }
    }
    Ok(())
}
