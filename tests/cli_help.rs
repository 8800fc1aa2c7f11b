//! Every option and argument of every subcommand has help text (issue 52, item 5): the
//! tree is walked from `ledger -h` down, each subcommand's `-h` read, and each entry of
//! its Options and Arguments must carry words after its name.
use crate::common;
use std::process::Command;

fn help(path: &[String]) -> String {
    let o = Command::new(common::bin(path))
        .args(path)
        .arg("-h")
        .env_remove("LEDGER")
        .output()
        .expect("run ledger");
    assert!(o.status.success(), "{path:?} -h: {o:?}");
    String::from_utf8(o.stdout).unwrap()
}

/// The entries of a `-h` section (`Commands:`, `Options:`, `Arguments:`): (name, help).
fn section(text: &str, title: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut inside = false;
    for line in text.lines() {
        let line = line.trim_end();
        if line.ends_with(':') && !line.starts_with(' ') {
            inside = line == title;
            continue;
        }
        if !inside || line.trim().is_empty() {
            continue;
        }
        // An entry starts at indent 2 (or 6: long options without a short one):
        // "  NAME  help", the name (single spaces inside, as in `-h, --help` or
        // `--out <DIR>`), then two or more spaces, then the help; no help, no gap.
        // Where help is long clap puts it on the following lines, indented further.
        let indent = line.len() - line.trim_start().len();
        let rest = line.trim();
        if indent > 6 {
            if let Some((_, h)) = out.last_mut() {
                h.push(' ');
                h.push_str(rest);
            }
            continue;
        }
        let (name, help) = match rest.find("  ") {
            Some(i) => (rest[..i].trim(), rest[i..].trim()),
            None => (rest.trim(), ""),
        };
        out.push((name.to_string(), help.to_string()));
    }
    out
}

#[test]
fn every_argument_of_every_subcommand_has_help() {
    let mut missing = Vec::new();
    let mut seen = 0;
    let mut todo: Vec<Vec<String>> = vec![vec![]];
    while let Some(path) = todo.pop() {
        let text = help(&path);
        for (name, _) in section(&text, "Commands:") {
            if name != "help" {
                let mut p = path.clone();
                p.push(name);
                todo.push(p);
            }
        }
        for title in ["Options:", "Arguments:"] {
            for (name, h) in section(&text, title) {
                seen += 1;
                if h.is_empty() {
                    missing.push(format!("ledger {} {name}", path.join(" ")));
                }
            }
        }
    }
    assert!(
        seen > 100,
        "only {seen} arguments found: is the -h layout parsed?"
    );
    assert!(
        missing.is_empty(),
        "arguments without help:\n{}",
        missing.join("\n")
    );
}
