//! Every option and argument of every subcommand has help text (issue 52, item 5): the
//! tree is walked from `ledger -h` down, each subcommand's `-h` read, and each entry of
//! its Options and Arguments must carry words after its name.
use crate::common;
use common::help_section as section;

fn help(path: &[String]) -> String {
    common::help(&common::bin(path), path)
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
