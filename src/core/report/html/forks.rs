//! The Fork tree section: every branch under the one it was forked from, with its head
//! and fork point.
use super::cells::{cite, plural};
use crate::report::{BranchView, Report};
use maud::{html, Markup};
use std::collections::{BTreeMap, BTreeSet};

/// The Fork tree section: branches whose source is on the page nest under it, by fork
/// stage then name; the others are roots.
pub(super) fn forks(r: &Report) -> Markup {
    let names: BTreeSet<&str> = r.branches.iter().map(|b| b.name.as_str()).collect();
    let mut children: BTreeMap<&str, Vec<&BranchView>> = BTreeMap::new();
    let mut roots = Vec::new();
    for b in &r.branches {
        match &b.fork {
            Some(f) if names.contains(f.from.as_str()) && f.from != b.name => {
                children.entry(f.from.as_str()).or_default().push(b)
            }
            _ => roots.push(b),
        }
    }
    for c in children.values_mut() {
        c.sort_by(|a, b| {
            let key = |x: &BranchView| x.fork.as_ref().map(|f| f.stage).unwrap_or(0);
            key(a).cmp(&key(b)).then(a.name.cmp(&b.name))
        });
    }
    let mut seen = BTreeSet::new();
    let nodes: Vec<Markup> = roots
        .into_iter()
        .map(|b| fork_node(b, &children, &mut seen))
        .collect();
    html! {
        section #forks {
            h2 { "Fork tree" }
            p.hint { "Each fork keeps its source's stages before the fork stage and lets its engineer design the rest." }
            ul.tree { @for n in nodes { (n) } }
        }
    }
}

/// One branch of the fork tree and, beneath it, its forks (each branch once).
fn fork_node<'a>(
    b: &'a BranchView,
    children: &BTreeMap<&str, Vec<&'a BranchView>>,
    seen: &mut BTreeSet<&'a str>,
) -> Markup {
    if !seen.insert(b.name.as_str()) {
        return html! {};
    }
    let stages = b.stages.iter().filter(|s| s.completed.is_some()).count();
    let kids: Option<Vec<Markup>> = children
        .get(b.name.as_str())
        .map(|kids| kids.iter().map(|k| fork_node(k, children, seen)).collect());
    html! {
        li.fork data-branch=(b.name) {
            span.branchname { (b.name) }
            " · head " (cite(&b.head.short(), &[b.head], &format!("{} head", b.name)))
            " · " (stages) " completed stage" (plural(stages, "s"))
            @if let Some(f) = &b.fork {
                " · "
                span.muted {
                    "forked from " (f.from) " before stage " (f.stage) " (engineer " (f.engineer) ", at "
                    (cite(&f.at.short(), &[f.at], &format!("fork point of {}", b.name))) ")"
                }
            }
            @if let Some(kids) = kids { ul { @for k in kids { (k) } } }
        }
    }
}
