//! `ledger audit`: every engineer decision of a branch with its evidence, config diff,
//! clips, rationale, status and outcome on the decided stage's validation set.
use super::{CliError, CliResult};
use mapf_ledger::ledger::Ledger;
use std::path::Path;

/// `texts`: (print the prompts, print the replies).
pub fn run(
    ledger: &Path,
    branch: &str,
    stage: Option<u32>,
    texts: (bool, bool),
    json: bool,
) -> CliResult {
    let l = Ledger::open_read_only(ledger).map_err(err)?;
    let report = mapf_ledger::views::audit::audit(&l, branch, stage).map_err(err)?;
    if let Some(n) = stage {
        if report.decisions.is_empty() {
            return Err(CliError::input(format!(
                "`--stage {n}`: branch {branch} has no engineer decision at stage {n}"
            )));
        }
    }
    // The recorded texts, read from their blobs (None: the engineer read no prompt or
    // wrote no reply, as the built-in ones).
    let text = |h: Option<mapf_ledger::ledger::Hash>| -> Result<Option<String>, CliError> {
        h.map(|h| {
            l.blob(&h)
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .map_err(err)
        })
        .transpose()
    };
    let (want_prompt, want_reply) = texts;
    if json {
        let mut v = serde_json::to_value(&report).expect("audit serialises");
        if want_prompt || want_reply {
            for (d, out) in report
                .decisions
                .iter()
                .zip(v["decisions"].as_array_mut().expect("decisions"))
            {
                if want_prompt {
                    out["prompt_text"] = serde_json::json!(text(d.prompt)?);
                }
                if want_reply {
                    out["reply_text"] = serde_json::json!(text(d.reply)?);
                }
            }
        }
        println!("{}", serde_json::to_string_pretty(&v).expect("serialises"));
        return Ok(());
    }
    print!("{}", mapf_ledger::views::audit::render(&report));
    for d in &report.decisions {
        for (want, what, h) in [
            (want_prompt, "prompt", d.prompt),
            (want_reply, "reply", d.reply),
        ] {
            if !want {
                continue;
            }
            match text(h)? {
                Some(t) => {
                    let h = h.expect("a text has a blob");
                    println!(
                        "\n---- stage {} {} ({} engineer; blob {}) ----\n{t}",
                        d.stage,
                        what,
                        d.engineer,
                        h.short()
                    );
                    if !t.ends_with('\n') {
                        println!();
                    }
                    println!("---- end of stage {} {what} ----", d.stage);
                }
                None => println!(
                    "\n---- stage {} {what}: none recorded (engineer {} reads no prompt and writes no reply) ----",
                    d.stage, d.engineer
                ),
            }
        }
    }
    Ok(())
}

use super::ledger_error as err;
