//! `compare` as text: the branches side by side, then their stages on the items that
//! need coordination (when any), then (with `--decisions`) each branch's decisions.
use crate::views::compare::{render, render_decisions, BranchSummary};

/// The text of `compare` over `summaries` (`decisions`: with the decision listing).
pub fn compare(summaries: &[BranchSummary], decisions: bool) -> String {
    let mut out = render(summaries);
    let coordination: Vec<(String, Vec<_>)> = summaries
        .iter()
        .map(|b| (b.branch.clone(), b.coordination.clone()))
        .collect();
    let text = crate::views::coordination::render(&coordination);
    if !text.is_empty() {
        out.push('\n');
        out.push_str(&text);
    }
    if decisions {
        out.push('\n');
        out.push_str(&render_decisions(summaries));
    }
    out
}
