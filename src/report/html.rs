//! The report page: one HTML document with its styles, script and figures inline (no
//! server, CDN or network). Every number is wrapped in an element carrying the hash of
//! the event it came from (`data-ev`); hovering shows it, clicking shows (and copies)
//! the `ledger show` command that prints the event.
use super::{heatmap_values, validation_series, BranchView, Eval, Report};
use crate::figures::{css_color, curves_svg, Curves};
use crate::ledger::Hash;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

/// HTML-escape text (element content and attribute values).
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

/// A number that cites its events: `data-ev` holds their full hashes.
fn cite(text: &str, events: &[Hash], what: &str) -> String {
    let full: Vec<String> = events.iter().map(|h| h.to_hex()).collect();
    let short: Vec<String> = events.iter().map(|h| h.short()).collect();
    format!(
        "<span class=\"n\" data-ev=\"{}\" title=\"{} · event {}\">{}</span>",
        full.join(" "),
        esc(what),
        short.join(", "),
        esc(text)
    )
}

fn pct(v: f64) -> String {
    format!("{v:.2}")
}

/// Two cells, valid % then optimal %, citing `events`; two dashes when not evaluated.
fn rate_pair(h: &mut String, cell: Option<(String, String)>, events: &[Hash], what: &str) {
    match cell {
        Some((v, o)) => {
            let _ = write!(
                h,
                "<td>{}</td><td>{}</td>",
                cite(&v, events, what),
                cite(&o, events, what)
            );
        }
        None => h.push_str("<td>–</td><td>–</td>"),
    }
}

/// The second header row of a table with `groups` valid/optimal column pairs.
fn rate_header(h: &mut String, groups: usize) {
    h.push_str("<tr><th></th>");
    for _ in 0..groups {
        h.push_str("<th>valid %</th><th>optimal %</th>");
    }
    h.push_str("</tr></thead><tbody>");
}

/// The start of a paper-layout row: `N×N`, or the Sum row (`None`).
fn size_row(h: &mut String, n: Option<usize>) {
    let _ = write!(
        h,
        "<tr{}><td class=\"l\">{}</td>",
        if n.is_none() { " class=\"sum\"" } else { "" },
        n.map(|n| format!("{n}×{n}"))
            .unwrap_or_else(|| "Sum".into())
    );
}

/// "sizes.9.data_ratio" -> "9×9 data"; "agents" stays.
fn field_label(f: &str) -> String {
    let parts: Vec<&str> = f.split('.').collect();
    match parts.as_slice() {
        ["sizes", n, k] => format!("{n}×{n} {}", k.trim_end_matches("_ratio")),
        _ => f.to_string(),
    }
}

fn value(x: Option<f64>) -> String {
    match x {
        None => "–".into(),
        Some(v) if v.fract() == 0.0 && v.abs() < 1e9 => format!("{v:.0}"),
        Some(v) => format!("{v:.2}"),
    }
}

/// A valid-rate colour (the viridis map of the heatmap figures) and a readable ink.
fn heat(v: f64) -> (String, &'static str) {
    use plotters::style::colors::colormaps::{ColorMap, ViridisRGB};
    let c = ViridisRGB.get_color(v.clamp(0.0, 100.0) / 100.0);
    (
        format!("#{:02x}{:02x}{:02x}", c.0, c.1, c.2),
        if v > 60.0 { "#000" } else { "#fff" },
    )
}

fn swatch(i: usize) -> String {
    format!("<i class=\"sw\" style=\"background:{}\"></i>", css_color(i))
}

fn inline_svg(svg: String) -> String {
    // Scale with the page: plotters writes a fixed width/height; keep them as the
    // aspect ratio via viewBox and let CSS size the element.
    if svg.contains("viewBox") {
        return svg;
    }
    let dims = |attr: &str| -> Option<u32> {
        let i = svg.find(&format!("{attr}=\""))? + attr.len() + 2;
        svg[i..].split('"').next()?.parse().ok()
    };
    match (dims("width"), dims("height")) {
        (Some(w), Some(h)) => svg.replacen("<svg ", &format!("<svg viewBox=\"0 0 {w} {h}\" "), 1),
        _ => svg,
    }
}

const STYLE: &str = r#"
:root{--fg:#1d1f23;--muted:#5f6670;--line:#d9dde3;--bg:#fff;--soft:#f5f7fa;--accent:#1f77b4}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;color:var(--fg);background:var(--bg)}
main{max-width:1240px;margin:0 auto;padding:16px 24px 80px}
h1{font-size:22px;margin:8px 0 4px}
h2{font-size:18px;margin:32px 0 8px;padding-top:8px;border-top:1px solid var(--line)}
h3{font-size:15px;margin:18px 0 6px}
h4{font-size:12px;text-transform:uppercase;letter-spacing:.04em;color:var(--muted);margin:0 0 4px}
p.lead,p.hint{color:var(--muted);margin:4px 0}
nav{display:flex;flex-wrap:wrap;gap:12px;margin:10px 0}
nav a{color:var(--accent);text-decoration:none}
code{font:12px ui-monospace,"DejaVu Sans Mono",monospace}
.scroll{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;margin:4px 0 12px}
th,td{padding:3px 8px;border-bottom:1px solid var(--line);text-align:right;white-space:nowrap}
th{font-weight:600;background:var(--soft)}
th.l,td.l{text-align:left}
tr.sum td{font-weight:600;border-top:2px solid var(--fg)}
.sw{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:5px;vertical-align:baseline}
.figs{display:grid;grid-template-columns:repeat(auto-fill,minmax(420px,580px));gap:12px}
.figs svg{width:100%;height:auto;border:1px solid var(--line)}
.heatmaps,.tests{display:flex;flex-wrap:wrap;gap:18px 32px}
figure{margin:0}
.heatmap table td{min-width:44px;text-align:center;border:1px solid #fff}
.heatmap figcaption{font-weight:600;margin-bottom:2px}
.n{cursor:pointer;font-variant-numeric:tabular-nums}
.n:hover{outline:1px dotted var(--accent)}
details.branch{margin:8px 0;border:1px solid var(--line);border-radius:6px;padding:6px 12px}
details.branch>summary{cursor:pointer;font-weight:600}
article.decision{border-left:4px solid var(--line);padding:6px 12px;margin:10px 0;background:var(--soft)}
article.decision.accepted{border-color:#2ca02c}
article.decision.clipped{border-color:#ff7f0e}
article.decision.rejected{border-color:#d62728}
article.decision.fallback{border-color:#9467bd}
article.decision header{display:flex;flex-wrap:wrap;gap:10px;align-items:baseline;margin-bottom:6px}
.badge{font-size:12px;padding:1px 6px;border-radius:8px;background:#e6e9ee}
.cols{display:grid;grid-template-columns:repeat(auto-fit,minmax(260px,1fr));gap:12px}
.cols ul{margin:0;padding-left:18px}
blockquote{margin:0;padding:0 0 0 10px;border-left:2px solid var(--line);white-space:pre-wrap;overflow-wrap:anywhere}
.verdict{font-weight:600}
.muted{color:var(--muted)}
ul.tree,ul.tree ul{list-style:none;padding-left:20px;margin:4px 0}
ul.tree{padding-left:0}
ul.tree li{margin:3px 0}
ul.tree ul{border-left:1px solid var(--line)}
.branchname{font-weight:600}
#cite{position:fixed;left:0;right:0;bottom:0;margin:0;padding:8px 24px;background:#1d1f23;color:#fff;font:13px ui-monospace,"DejaVu Sans Mono",monospace;white-space:pre-wrap}
"#;

const SCRIPT: &str = r#"
(function () {
  var bar = document.getElementById('cite');
  var dir = document.body.getAttribute('data-ledger');
  document.addEventListener('click', function (e) {
    var t = e.target.closest('[data-ev]');
    if (!t) { return; }
    var cmds = t.getAttribute('data-ev').split(' ').map(function (h) {
      return 'ledger --ledger ' + dir + ' show ' + h.slice(0, 12);
    }).join('\n');
    bar.textContent = cmds + '    (' + t.getAttribute('title') + ')';
    bar.hidden = false;
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(cmds).catch(function () {});
    }
  });
})();
"#;

/// Render the whole page.
pub fn render(r: &Report) -> Result<String, String> {
    let mut h = String::new();
    let decisions: usize = r.branches.iter().map(|b| b.audit.decisions.len()).sum();
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
         <title>{plan} · mapf-ledger report</title><style>{STYLE}</style></head>\
         <body data-ledger=\"{dir}\"><main>\
         <h1>Experiment report: {plan}</h1>\
         <p class=\"lead\">Ledger <code>{dir}</code> · {nb} branch{bs} · {decisions} engineer decision{ds}{study}</p>\
         <p class=\"hint\">Every number names the event it came from: hover it for the hash, \
         click it for the <code>ledger show</code> command.</p>\
         <nav><a href=\"#validation\">Validation</a><a href=\"#test\">Test</a>\
         <a href=\"#heatmaps\">Heatmaps</a><a href=\"#decisions\">Decisions</a>\
         <a href=\"#forks\">Fork tree</a>{study_link}</nav>",
        plan = esc(&r.plan),
        dir = esc(&r.ledger),
        nb = r.branches.len(),
        bs = if r.branches.len() == 1 { "" } else { "es" },
        ds = if decisions == 1 { "" } else { "s" },
        study = match &r.study {
            Some(s) => format!(
                " · study of {} engineer{} × {} seed{}",
                s.engineers.len(),
                if s.engineers.len() == 1 { "" } else { "s" },
                s.seeds,
                if s.seeds == 1 { "" } else { "s" }
            ),
            None => String::new(),
        },
        study_link = if r.study.is_some() {
            "<a href=\"#study\">Study</a>"
        } else {
            ""
        },
    );
    validation(&mut h, r)?;
    test(&mut h, r);
    heatmaps(&mut h, r);
    timeline(&mut h, r);
    forks(&mut h, r);
    if r.study.is_some() {
        study(&mut h, r)?;
    }
    let _ = writeln!(
        h,
        "</main><pre id=\"cite\" hidden></pre><script>{SCRIPT}</script></body></html>"
    );
    Ok(h)
}

fn validation(h: &mut String, r: &Report) -> Result<(), String> {
    let stages: BTreeSet<u32> = r
        .branches
        .iter()
        .flat_map(|b| {
            b.stages
                .iter()
                .filter(|s| s.validation.is_some())
                .map(|s| s.stage)
        })
        .collect();
    let _ = write!(
        h,
        "<section id=\"validation\"><h2>Validation</h2>\
         <p class=\"hint\">Mean over map sizes of the validation set (training agent count), per stage; one line per branch.</p>"
    );
    let [valid, optimal] = validation_series(r);
    let _ = write!(h, "<div class=\"figs\">");
    for (title, y, series) in [
        ("Validation valid %", "valid %", &valid),
        ("Validation optimal %", "optimal %", &optimal),
    ] {
        h.push_str(&inline_svg(curves_svg(&Curves {
            title,
            y_label: y,
            series,
        })?));
    }
    let _ = write!(
        h,
        "</div><div class=\"scroll\"><table class=\"curves\"><thead><tr><th class=\"l\">stage</th>"
    );
    for (i, b) in r.branches.iter().enumerate() {
        let _ = write!(h, "<th colspan=\"2\">{}{}</th>", swatch(i), esc(&b.name));
    }
    h.push_str("</tr>");
    rate_header(h, r.branches.len());
    for st in &stages {
        let _ = write!(h, "<tr class=\"stage\"><td class=\"l\">{st}</td>");
        for b in &r.branches {
            let agents = b.validation_agents().unwrap_or(2);
            let cell = b
                .stages
                .iter()
                .find(|s| s.stage == *st)
                .and_then(|s| s.validation.as_ref())
                .and_then(|v| Some((v.event, v.sum(agents)?)));
            let events: Vec<Hash> = cell.iter().map(|c| c.0).collect();
            rate_pair(
                h,
                cell.map(|(_, (v, o))| (pct(v), pct(o))),
                &events,
                &format!("{} stage {st} validation", b.name),
            );
        }
        h.push_str("</tr>");
    }
    h.push_str("</tbody></table></div></section>");
    Ok(())
}

fn test(h: &mut String, r: &Report) {
    let finals: Vec<Option<(u32, &Eval)>> = r.branches.iter().map(|b| b.final_test()).collect();
    let agents: BTreeSet<usize> = finals
        .iter()
        .flatten()
        .flat_map(|(_, e)| e.table.agent_counts())
        .collect();
    let _ = write!(
        h,
        "<section id=\"test\"><h2>Test</h2><p class=\"hint\">Final evaluated stage of each branch; \
         rows are map sizes, the Sum row is the mean over sizes (the paper's layout). Below them: the \
         tables per wait-ratio subset of stratified suites, and each branch against the first, item by item.</p>"
    );
    if agents.is_empty() {
        h.push_str("<p class=\"muted\">No branch has a test evaluation yet.</p>");
    }
    h.push_str("<div class=\"tests\">");
    for k in agents {
        let sizes: BTreeSet<usize> = finals
            .iter()
            .flatten()
            .flat_map(|(_, e)| e.sizes(k))
            .collect();
        let _ = write!(
            h,
            "<div class=\"scroll\"><h3>{k} agents</h3><table class=\"test\" data-agents=\"{k}\"><thead><tr><th class=\"l\">size</th>"
        );
        for (i, (b, f)) in r.branches.iter().zip(&finals).enumerate() {
            let stage = f.map(|f| format!(" <span class=\"muted\">stage {}</span>", f.0));
            let _ = write!(
                h,
                "<th colspan=\"2\">{}{}{}</th>",
                swatch(i),
                esc(&b.name),
                stage.unwrap_or_default()
            );
        }
        h.push_str("</tr>");
        rate_header(h, r.branches.len());
        let rows: Vec<Option<usize>> = sizes.iter().copied().map(Some).chain([None]).collect();
        for n in rows {
            size_row(h, n);
            for (b, f) in r.branches.iter().zip(&finals) {
                let cell = f.and_then(|(stage, e)| {
                    let v = match n {
                        Some(n) => e.rate(k, n),
                        None => e.sum(k),
                    }?;
                    Some((stage, e.event, v))
                });
                let stage = cell.map(|c| c.0).unwrap_or_default();
                let events: Vec<Hash> = cell.iter().map(|c| c.1).collect();
                rate_pair(
                    h,
                    cell.map(|(_, _, (v, o))| (pct(v), pct(o))),
                    &events,
                    &format!("{} stage {stage} test, {k} agents", b.name),
                );
            }
            h.push_str("</tr>");
        }
        h.push_str("</tbody></table></div>");
    }
    h.push_str("</div>");
    subsets(h, r);
    paired(h, r);
    h.push_str("</section>");
}

/// The final stage's Sum rows per wait-ratio subset: rows (suite, agents, subset), a
/// column pair per branch; nothing when no suite is stratified.
fn subsets(h: &mut String, r: &Report) {
    let keys = crate::views::compare::subset_rows(r.branches.iter().map(|b| b.subsets.as_slice()));
    if keys.is_empty() {
        return;
    }
    let _ = write!(
        h,
        "<h3>By wait-ratio subset</h3><p class=\"hint\">Final evaluated stage; each cell's items are split into equal subsets \
         whose items need coordination with the subset's probability; mean over sizes.</p>\
         <div class=\"scroll\"><table class=\"subsets\"><thead><tr><th class=\"l\">suite</th><th class=\"l\">agents</th><th class=\"l\">subset</th>"
    );
    for (i, b) in r.branches.iter().enumerate() {
        let _ = write!(h, "<th colspan=\"2\">{}{}</th>", swatch(i), esc(&b.name));
    }
    h.push_str("</tr><tr><th></th><th></th><th></th>");
    for _ in &r.branches {
        h.push_str("<th>valid %</th><th>optimal %</th>");
    }
    h.push_str("</tr></thead><tbody>");
    for (_, suite, k, subset) in keys {
        let _ = write!(
            h,
            "<tr><td class=\"l\">{}</td><td class=\"l\">{k}</td><td class=\"l\">{}</td>",
            esc(&suite),
            esc(&subset)
        );
        for b in &r.branches {
            let t = b
                .subsets
                .iter()
                .find(|t| t.suite == suite && t.subset == subset)
                .filter(|t| t.table.agent_counts().contains(&k));
            let events: Vec<Hash> = t.iter().map(|t| t.event).collect();
            rate_pair(
                h,
                t.map(|t| {
                    let (v, o) = t.table.sum_row(k);
                    (pct(v), pct(o))
                }),
                &events,
                &format!("{} {suite}@{subset}, {k} agents", b.name),
            );
        }
        h.push_str("</tr>");
    }
    h.push_str("</tbody></table></div>");
}

/// Every branch after the first against the first, item by item on the same suite
/// items: both rates with their own intervals, the paired difference, McNemar's test.
fn paired(h: &mut String, r: &Report) {
    for (branch, p) in &r.paired {
        let _ = write!(
            h,
            "<h3>Paired: {} − {}</h3><p class=\"hint\">Final stages {} and {}, on the same suite items pair by pair: \
             each branch's rate (mean over sizes) with its own 95% bootstrap interval, the difference in points with \
             its paired 95% bootstrap interval ({} resamples, items resampled within each size), the items only one \
             branch gets right and McNemar's exact p.</p>",
            esc(branch),
            esc(&p.against),
            p.against_stage.map_or("–".into(), |n| n.to_string()),
            p.stage.map_or("–".into(), |n| n.to_string()),
            p.resamples
        );
        if !p.rows.is_empty() {
            let _ = write!(
                h,
                "<div class=\"scroll\"><table class=\"paired\" data-branch=\"{}\"><thead><tr>\
                 <th class=\"l\">suite</th><th class=\"l\">agents</th><th class=\"l\">subset</th><th>items</th><th class=\"l\">metric</th>\
                 <th>{} % [95%]</th><th>{} % [95%]</th><th>Δ points [paired 95%]</th><th>only {} / only {}</th><th>McNemar p</th>\
                 </tr></thead><tbody>",
                esc(branch),
                esc(&p.against),
                esc(branch),
                esc(&p.against),
                esc(branch)
            );
            for row in &p.rows {
                for (name, m) in [("valid", &row.valid), ("optimal", &row.optimal)] {
                    let what = format!(
                        "{branch} − {}: {} {} agents {} {name}",
                        p.against,
                        row.suite,
                        row.agents,
                        row.subset.as_deref().unwrap_or("all")
                    );
                    let c = |t: String| format!("<td>{}</td>", cite(&t, &row.events, &what));
                    let _ = write!(
                        h,
                        "<tr><td class=\"l\">{}</td><td class=\"l\">{}</td><td class=\"l\">{}</td>{}<td class=\"l\">{name}</td>{}{}{}{}{}</tr>",
                        esc(&row.suite),
                        row.agents,
                        esc(row.subset.as_deref().unwrap_or("all")),
                        c(row.instances.to_string()),
                        c(format!("{:.2} [{:.2}, {:.2}]", m.a, m.a_ci95.low, m.a_ci95.high)),
                        c(format!("{:.2} [{:.2}, {:.2}]", m.b, m.b_ci95.low, m.b_ci95.high)),
                        c(format!(
                            "{:+.2} [{:+.2}, {:+.2}]",
                            m.diff, m.diff_ci95.low, m.diff_ci95.high
                        )),
                        c(format!("{} / {}", m.mcnemar.a_only, m.mcnemar.b_only)),
                        c(format!("{:.4}", m.mcnemar.p)),
                    );
                }
            }
            h.push_str("</tbody></table></div>");
        }
        for m in &p.missing {
            let _ = write!(h, "<p class=\"muted\">{}</p>", esc(m));
        }
    }
}

fn heatmaps(h: &mut String, r: &Report) {
    let _ = write!(
        h,
        "<section id=\"heatmaps\"><h2>Heatmaps</h2><p class=\"hint\">Validation valid % per map size (rows) and stage (columns), per branch.</p><div class=\"heatmaps\">"
    );
    for b in &r.branches {
        let values = heatmap_values(b);
        let stages: BTreeSet<u32> = values.keys().map(|k| k.1).collect();
        let sizes: BTreeSet<usize> = values.keys().map(|k| k.0).collect();
        let events: BTreeMap<u32, Hash> = b
            .stages
            .iter()
            .filter_map(|s| Some((s.stage, s.validation.as_ref()?.event)))
            .collect();
        let _ = write!(
            h,
            "<figure class=\"heatmap\" data-branch=\"{}\"><figcaption>{}</figcaption><table><thead><tr><th class=\"l\">size \\ stage</th>",
            esc(&b.name),
            esc(&b.name)
        );
        for st in &stages {
            let _ = write!(h, "<th>{st}</th>");
        }
        h.push_str("</tr></thead><tbody>");
        for n in &sizes {
            let _ = write!(h, "<tr><th class=\"l\">{n}×{n}</th>");
            for st in &stages {
                match (values.get(&(*n, *st)), events.get(st)) {
                    (Some(&v), Some(ev)) => {
                        let (bg, ink) = heat(v);
                        let _ = write!(
                            h,
                            "<td style=\"background:{bg};color:{ink}\">{}</td>",
                            cite(
                                &format!("{v:.0}"),
                                &[*ev],
                                &format!("{} stage {st} validation {n}×{n}, valid %", b.name)
                            )
                        );
                    }
                    _ => h.push_str("<td>–</td>"),
                }
            }
            h.push_str("</tr>");
        }
        h.push_str("</tbody></table></figure>");
    }
    h.push_str("</div></section>");
}

fn timeline(h: &mut String, r: &Report) {
    let _ = write!(
        h,
        "<section id=\"decisions\"><h2>Decisions</h2><p class=\"hint\">Per stage: the engineer, \
         its status, what it saw, the configuration it proposed and what was applied (clips and \
         refused keys), its rationale, and validation on the sizes it changed, before → after.</p>"
    );
    for (i, b) in r.branches.iter().enumerate() {
        let n = b.audit.decisions.len();
        let _ = write!(
            h,
            "<details class=\"branch\" data-branch=\"{}\"{}><summary>{}{} · {n} decision{}</summary>",
            esc(&b.name),
            if i == 0 { " open" } else { "" },
            swatch(i),
            esc(&b.name),
            if n == 1 { "" } else { "s" }
        );
        if n == 0 {
            h.push_str("<p class=\"muted\">No engineer decision on this branch.</p>");
        }
        for d in &b.audit.decisions {
            decision(h, b, d);
        }
        h.push_str("</details>");
    }
    h.push_str("</section>");
}

fn decision(h: &mut String, b: &BranchView, d: &crate::views::audit::DecisionAudit) {
    let what = format!("{} stage {} decision", b.name, d.stage);
    let ev = [d.event];
    let _ = write!(
        h,
        "<article class=\"decision {status}\" data-branch=\"{branch}\" data-stage=\"{stage}\">\
         <header><b>stage {stage}</b><span>{engineer}</span><span class=\"badge\">{status}</span>{reason}\
         <span class=\"muted\">decision {ev}</span></header><div class=\"cols\">",
        status = esc(&d.status),
        branch = esc(&b.name),
        stage = d.stage,
        engineer = esc(&d.engineer),
        reason = d
            .status_reason
            .as_deref()
            .map(|r| format!("<span class=\"muted\">{}</span>", esc(r)))
            .unwrap_or_default(),
        ev = cite(&d.event.short(), &ev, &what),
    );
    // What it saw.
    h.push_str("<div><h4>Saw</h4>");
    if d.evidence.is_empty() {
        h.push_str("<p class=\"muted\">no summary or failure breakdown in its context</p>");
    } else {
        h.push_str("<ul>");
        for e in &d.evidence {
            let _ = write!(
                h,
                "<li>{}</li>",
                cite(
                    e,
                    &ev,
                    &format!("{what}, context blob {}", d.context.short())
                )
            );
        }
        h.push_str("</ul>");
    }
    h.push_str("</div>");
    // What it changed.
    h.push_str("<div><h4>Changed</h4>");
    if d.changes.is_empty() {
        h.push_str("<p class=\"muted\">no change</p>");
    } else {
        h.push_str("<table class=\"diff\"><thead><tr><th class=\"l\">field</th><th>was</th><th>proposed</th><th>applied</th></tr></thead><tbody>");
        for c in &d.changes {
            let clipped = d.clips.iter().any(|k| k.field == c.field);
            let _ = write!(
                h,
                "<tr{}><td class=\"l\">{}{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                if clipped { " class=\"clipped\"" } else { "" },
                esc(&field_label(&c.field)),
                if clipped {
                    " <span class=\"badge\">clipped</span>"
                } else {
                    ""
                },
                cite(&value(c.previous), &ev, &what),
                cite(&value(c.proposed), &ev, &what),
                cite(&value(c.applied), &ev, &what),
            );
        }
        h.push_str("</tbody></table>");
    }
    if !d.clips.is_empty() {
        h.push_str("<ul class=\"clips\">");
        for c in &d.clips {
            let _ = write!(
                h,
                "<li>clip {}: {} → {} ({})</li>",
                esc(&field_label(&c.field)),
                esc(&c.proposed),
                esc(&c.applied),
                esc(&c.reason)
            );
        }
        h.push_str("</ul>");
    }
    if !d.refused.is_empty() {
        h.push_str("<ul class=\"refused\">");
        for f in &d.refused {
            let _ = write!(
                h,
                "<li>refused <code>{}</code></li>",
                esc(&serde_json::to_string(f).unwrap_or_default())
            );
        }
        h.push_str("</ul>");
    }
    h.push_str("</div>");
    // Why.
    let _ = write!(
        h,
        "<div><h4>Rationale</h4>{}</div>",
        if d.rationale.trim().is_empty() {
            "<p class=\"muted\">none given</p>".to_string()
        } else {
            format!("<blockquote>{}</blockquote>", esc(d.rationale.trim()))
        }
    );
    // What happened next: how GRPO went on the stage, then validation.
    h.push_str("<div><h4>Outcome</h4>");
    if let Some(t) = &d.training {
        let _ = write!(
            h,
            "<p class=\"muted training\">GRPO: {}</p>",
            esc(&t.line())
        );
    }
    match &d.outcome {
        None => h.push_str("<p class=\"muted\">not evaluated yet</p>"),
        Some(o) => {
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
            let _ = write!(
                h,
                "<p><span class=\"verdict\">{}</span> · all sizes Δ valid {}</p>",
                esc(&o.verdict.replace('_', " ")),
                cite(
                    &format!("{:+.2}", o.sum_delta_valid),
                    &evs,
                    &format!(
                        "{} validation, stage {} → {}",
                        b.name, o.previous_stage, o.stage
                    )
                )
            );
            if !shown.is_empty() {
                h.push_str("<table class=\"outcome\"><thead><tr><th class=\"l\">size</th><th>valid before</th><th>after</th><th>Δ</th></tr></thead><tbody>");
                for s in shown {
                    let w = format!(
                        "{} validation {}×{}, stage {} → {}",
                        b.name, s.size, s.size, o.previous_stage, o.stage
                    );
                    let _ = write!(
                        h,
                        "<tr><td class=\"l\">{n}×{n}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                        cite(&pct(s.valid_before), &evs, &w),
                        cite(&pct(s.valid_after), &evs, &w),
                        cite(&format!("{:+.2}", s.delta_valid), &evs, &w),
                        n = s.size
                    );
                }
                h.push_str("</tbody></table>");
            }
        }
    }
    h.push_str("</div></div></article>");
}

fn forks(h: &mut String, r: &Report) {
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
    let _ = write!(
        h,
        "<section id=\"forks\"><h2>Fork tree</h2><p class=\"hint\">Each fork keeps its source's stages before the fork stage and lets its engineer design the rest.</p><ul class=\"tree\">"
    );
    let mut seen = BTreeSet::new();
    for b in roots {
        fork_node(h, b, &children, &mut seen);
    }
    h.push_str("</ul></section>");
}

fn fork_node<'a>(
    h: &mut String,
    b: &'a BranchView,
    children: &BTreeMap<&str, Vec<&'a BranchView>>,
    seen: &mut BTreeSet<&'a str>,
) {
    if !seen.insert(b.name.as_str()) {
        return;
    }
    let stages = b.stages.iter().filter(|s| s.completed.is_some()).count();
    let _ = write!(
        h,
        "<li class=\"fork\" data-branch=\"{}\"><span class=\"branchname\">{}</span> · head {} · {stages} completed stage{}",
        esc(&b.name),
        esc(&b.name),
        cite(&b.head.short(), &[b.head], &format!("{} head", b.name)),
        if stages == 1 { "" } else { "s" }
    );
    if let Some(f) = &b.fork {
        let _ = write!(
            h,
            " · <span class=\"muted\">forked from {} before stage {} (engineer {}, at {})</span>",
            esc(&f.from),
            f.stage,
            esc(&f.engineer),
            cite(&f.at.short(), &[f.at], &format!("fork point of {}", b.name))
        );
    }
    if let Some(kids) = children.get(b.name.as_str()) {
        h.push_str("<ul>");
        for k in kids {
            fork_node(h, k, children, seen);
        }
        h.push_str("</ul>");
    }
    h.push_str("</li>");
}

fn study(h: &mut String, r: &Report) -> Result<(), String> {
    let Some(s) = &r.study else { return Ok(()) };
    let _ = write!(
        h,
        "<section id=\"study\"><h2>Study</h2><p class=\"hint\">Forks of {} before stage {}, {} seed{} per engineer; \
         mean ± half-width of the 95% t-interval over seeds{}.</p>",
        esc(&s.from),
        s.at,
        s.seeds,
        if s.seeds == 1 { "" } else { "s" },
        if s.seeds < 2 { " (one seed: no interval)" } else { "" }
    );
    let pm = |m: f64, ci: Option<f64>| match ci {
        Some(c) => format!("{m:.2} ± {c:.2}"),
        None => format!("{m:.2}"),
    };
    h.push_str("<div class=\"scroll\"><table class=\"study-summary\"><thead><tr><th class=\"l\">engineer</th><th>runs</th><th>final stage</th><th>validation valid %</th><th>validation optimal %</th><th class=\"l\">runs (heads)</th></tr></thead><tbody>");
    for (i, e) in s.engineers.iter().enumerate() {
        let runs: Vec<&crate::views::study::StudyRun> =
            s.runs.iter().filter(|x| &x.engineer == e).collect();
        let finals: Vec<(u32, f64, f64)> = runs
            .iter()
            .filter_map(|x| x.summary.validation.last().copied())
            .collect();
        let heads: Vec<Hash> = runs.iter().map(|x| x.head).collect();
        let (v, vci) =
            crate::views::compare::mean_ci(&finals.iter().map(|f| f.1).collect::<Vec<_>>());
        let (o, oci) =
            crate::views::compare::mean_ci(&finals.iter().map(|f| f.2).collect::<Vec<_>>());
        let stage = finals.iter().map(|f| f.0).max();
        let what = format!("{e}: final-stage validation over {} runs", runs.len());
        let _ = write!(
            h,
            "<tr class=\"engineer\"><td class=\"l\">{}{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"l\">{}</td></tr>",
            swatch(i),
            esc(e),
            cite(&runs.len().to_string(), &heads, &what),
            stage
                .map(|x| cite(&x.to_string(), &heads, &what))
                .unwrap_or_else(|| "–".into()),
            if finals.is_empty() { "–".into() } else { cite(&pm(v, vci), &heads, &what) },
            if finals.is_empty() { "–".into() } else { cite(&pm(o, oci), &heads, &what) },
            runs.iter()
                .map(|x| format!("{} {}", esc(&x.branch), cite(&x.head.short(), &[x.head], &format!("head of {}", x.branch))))
                .collect::<Vec<_>>()
                .join("<br>")
        );
    }
    h.push_str("</tbody></table></div><div class=\"figs\">");
    let series = crate::views::study::study_series(s);
    h.push_str(&inline_svg(curves_svg(&Curves {
        title: "Study: mean validation valid % per stage",
        y_label: "valid %",
        series: &series,
    })?));
    h.push_str("</div>");
    // Test cells in the paper's layout: rows (agents, size | Sum), a column per engineer.
    let whole = |c: &&crate::views::study::StudyCell| c.subset.is_none();
    let agents: BTreeSet<usize> = s.cells.iter().filter(whole).map(|c| c.agents).collect();
    for k in agents {
        let _ = write!(
            h,
            "<h3>Final-stage test, {k} agents</h3><div class=\"scroll\"><table class=\"study-test\"><thead><tr><th class=\"l\">size</th>"
        );
        for (i, e) in s.engineers.iter().enumerate() {
            let _ = write!(h, "<th colspan=\"2\">{}{}</th>", swatch(i), esc(e));
        }
        h.push_str("</tr>");
        rate_header(h, s.engineers.len());
        let sizes: BTreeSet<usize> = s
            .cells
            .iter()
            .filter(whole)
            .filter(|c| c.agents == k)
            .filter_map(|c| c.size)
            .collect();
        let rows: Vec<Option<usize>> = sizes.into_iter().map(Some).chain([None]).collect();
        for n in rows {
            size_row(h, n);
            for e in &s.engineers {
                let heads: Vec<Hash> = s
                    .runs
                    .iter()
                    .filter(|x| &x.engineer == e)
                    .map(|x| x.head)
                    .collect();
                let cell = s
                    .cells
                    .iter()
                    .filter(whole)
                    .find(|c| &c.engineer == e && c.agents == k && c.size == n);
                rate_pair(
                    h,
                    cell.map(|c| {
                        (
                            pm(c.valid_mean, c.valid_ci95),
                            pm(c.optimal_mean, c.optimal_ci95),
                        )
                    }),
                    &heads,
                    &format!("{e}: test {k} agents over {} runs", cell.map_or(0, |c| c.n)),
                );
            }
            h.push_str("</tr>");
        }
        h.push_str("</tbody></table></div>");
    }
    // Sum rows per wait-ratio subset (stratified test suites).
    let subsets: BTreeSet<(usize, String)> = s
        .cells
        .iter()
        .filter_map(|c| Some((c.agents, c.subset.clone()?)))
        .collect();
    if !subsets.is_empty() {
        h.push_str("<h3>Final-stage test per wait-ratio subset (mean over sizes)</h3><div class=\"scroll\"><table class=\"study-subsets\"><thead><tr><th class=\"l\">agents</th><th class=\"l\">subset</th>");
        for (i, e) in s.engineers.iter().enumerate() {
            let _ = write!(h, "<th colspan=\"2\">{}{}</th>", swatch(i), esc(e));
        }
        h.push_str("</tr><tr><th></th><th></th>");
        for _ in &s.engineers {
            h.push_str("<th>valid %</th><th>optimal %</th>");
        }
        h.push_str("</tr></thead><tbody>");
        for (k, subset) in subsets {
            let _ = write!(
                h,
                "<tr><td class=\"l\">{k}</td><td class=\"l\">{}</td>",
                esc(&subset)
            );
            for e in &s.engineers {
                let heads: Vec<Hash> = s
                    .runs
                    .iter()
                    .filter(|x| &x.engineer == e)
                    .map(|x| x.head)
                    .collect();
                let cell = s.cells.iter().find(|c| {
                    &c.engineer == e && c.agents == k && c.subset.as_ref() == Some(&subset)
                });
                rate_pair(
                    h,
                    cell.map(|c| {
                        (
                            pm(c.valid_mean, c.valid_ci95),
                            pm(c.optimal_mean, c.optimal_ci95),
                        )
                    }),
                    &heads,
                    &format!(
                        "{e}: test@{subset} {k} agents over {} runs",
                        cell.map_or(0, |c| c.n)
                    ),
                );
            }
            h.push_str("</tr>");
        }
        h.push_str("</tbody></table></div>");
    }
    study_paired(h, s);
    h.push_str("</section>");
    Ok(())
}

/// A study's paired differences against `fixed`: per metric, one row per engineer (and
/// wait-ratio subset), a column per Sum row, each citing the runs' heads.
fn study_paired(h: &mut String, s: &crate::views::study::StudyReport) {
    use crate::views::study::{paired_cell_parts, BASELINE};
    if s.paired.is_empty() {
        return;
    }
    let _ = write!(
        h,
        "<h3>Paired differences vs {BASELINE}</h3><p class=\"hint\">Replicate r of each engineer against replicate r of \
         {BASELINE} (the same fork point and suite items): Δ = engineer − {BASELINE} in points, mean over seeds \
         [95% t-interval of the per-seed differences]; boot: paired bootstrap over items pooled over seeds \
         ({} resamples); p: McNemar's exact test on the discordant items pooled over seeds.</p>",
        crate::views::paired::RESAMPLES
    );
    let (cols, rows) = s.paired_layout();
    for (title, pick) in [("Valid %", 0usize), ("Optimal %", 1)] {
        let _ = write!(
            h,
            "<h4>{title}, Δ vs {BASELINE}</h4><div class=\"scroll\"><table class=\"study-paired\"><thead><tr><th class=\"l\">engineer</th>"
        );
        for (suite, k) in &cols {
            let _ = write!(
                h,
                "<th>{}</th>",
                if suite == "val" {
                    format!("validation ({k} agents)")
                } else {
                    format!("{k} agents")
                }
            );
        }
        h.push_str("</tr></thead><tbody>");
        for (e, sub) in &rows {
            let _ = write!(
                h,
                "<tr><td class=\"l\">{}{}</td>",
                esc(e),
                sub.as_ref()
                    .map(|w| format!(" @ {}", esc(w)))
                    .unwrap_or_default()
            );
            for (suite, k) in &cols {
                let p = s.paired.iter().find(|p| {
                    &p.engineer == e && &p.suite == suite && p.agents == *k && &p.subset == sub
                });
                match p {
                    Some(p) => {
                        let heads: Vec<Hash> = s
                            .runs
                            .iter()
                            .filter(|x| {
                                (x.engineer == p.engineer || x.engineer == p.baseline)
                                    && p.replicates.contains(&x.replicate)
                            })
                            .map(|x| x.head)
                            .collect();
                        let m = if pick == 0 { &p.valid } else { &p.optimal };
                        let what = format!("{e} − {BASELINE}: {suite} {k} agents, {title}");
                        let (main, detail) = paired_cell_parts(m);
                        let _ = write!(
                            h,
                            "<td>{}{}</td>",
                            cite(&main, &heads, &what),
                            detail
                                .map(|d| format!(
                                    "<br><small class=\"muted\">{}</small>",
                                    cite(&d, &heads, &what)
                                ))
                                .unwrap_or_default()
                        );
                    }
                    None => h.push_str("<td>–</td>"),
                }
            }
            h.push_str("</tr>");
        }
        h.push_str("</tbody></table></div>");
    }
    let notes: BTreeSet<&String> = s.paired.iter().filter_map(|p| p.note.as_ref()).collect();
    for n in notes {
        let _ = write!(
            h,
            "<p class=\"muted\">No instance-level statistics: {}.</p>",
            esc(n)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_in_text() {
        assert_eq!(
            esc(r#"<b a="1">&'x'</b>"#),
            "&lt;b a=&quot;1&quot;&gt;&amp;&#39;x&#39;&lt;/b&gt;"
        );
    }

    #[test]
    fn numbers_cite_full_hashes() {
        let h = Hash::of_blob(b"x");
        let s = cite("1.00", &[h], "a < b");
        assert!(s.contains(&format!("data-ev=\"{}\"", h.to_hex())), "{s}");
        assert!(s.contains("a &lt; b"), "{s}");
    }

    #[test]
    fn fields_read_as_sizes() {
        assert_eq!(field_label("sizes.9.data_ratio"), "9×9 data");
        assert_eq!(field_label("agents"), "agents");
    }
}
