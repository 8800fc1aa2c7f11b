//! The recorded prompts and replies that `audit --prompt` and `--reply` add, read from
//! their blobs: a framed block per decision in the text, `prompt_text` and `reply_text`
//! fields in the JSON.
use crate::ledger::{Hash, Ledger, LedgerError};
use crate::views::audit::{AuditReport, DecisionAudit};

/// The text of blob `h` (None: the engineer read no prompt or wrote no reply, as the
/// built-in ones do).
pub fn recorded_text(l: &Ledger, h: Option<Hash>) -> Result<Option<String>, LedgerError> {
    h.map(|h| l.blob(&h).map(|b| String::from_utf8_lossy(&b).into_owned()))
        .transpose()
}

/// The report as JSON, with each decision's `prompt_text` (when `prompt`) and
/// `reply_text` (when `reply`).
pub fn json_with_texts(
    l: &Ledger,
    report: &AuditReport,
    (prompt, reply): (bool, bool),
) -> Result<serde_json::Value, LedgerError> {
    let mut v = serde_json::to_value(report).expect("audit serialises");
    if prompt || reply {
        for (d, out) in report
            .decisions
            .iter()
            .zip(v["decisions"].as_array_mut().expect("decisions"))
        {
            if prompt {
                out["prompt_text"] = serde_json::json!(recorded_text(l, d.prompt)?);
            }
            if reply {
                out["reply_text"] = serde_json::json!(recorded_text(l, d.reply)?);
            }
        }
    }
    Ok(v)
}

/// Decision `d`'s `what` ("prompt" or "reply"), recorded as `text` in blob `h`, framed.
pub fn block(d: &DecisionAudit, what: &str, h: Option<Hash>, text: Option<&str>) -> String {
    match (text, h) {
        (Some(t), Some(h)) => format!(
            "\n---- stage {} {} ({} engineer; blob {}) ----\n{t}\n{}---- end of stage {} {what} ----\n",
            d.stage,
            what,
            d.engineer,
            h.short(),
            if t.ends_with('\n') { "" } else { "\n" },
            d.stage
        ),
        _ => format!(
            "\n---- stage {} {what}: none recorded (engineer {} reads no prompt and writes no reply) ----\n",
            d.stage, d.engineer
        ),
    }
}
