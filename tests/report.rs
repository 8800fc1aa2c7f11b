//! `ledger report` opened in a real headless Chromium: the page loads with no console
//! error and no network request, every section is there with the counts the ledger
//! holds (stages, decisions, branches, study rows), every number cites an event, and a
//! full-page screenshot is written. A generated ledger of 10 branches × 10 stages checks
//! that the page stays within the viewport's width and under 5 MB.
//!
//! `ledger serve` is opened the same way: the page follows a ledger that `ledger run`
//! is writing (a new stage appears in place, without a reload), and markup an LLM wrote
//! stays text on the live page too.
//!
//! Screenshots are kept under the target directory (`report-screenshots/`).
use crate::common;

use common::browser::Browser;
use common::{fails, fork_and_run, json, ledger, ok, tiny_ledger};
use mapf_ledger::engineer::context::{EngineerContext, TrainingDetails};
use mapf_ledger::env::config::GeneratorConfig;
use mapf_ledger::env::simulate::FailureKind;
use mapf_ledger::env::RefusedField;
use mapf_ledger::ledger::event::*;
use mapf_ledger::ledger::plan::ContextModules;
use mapf_ledger::ledger::{codec, Hash, Ledger, Meta};
use mapf_ledger::train::eval::table_of;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What the page says about itself, read from the DOM (not from data the page
/// computed about itself).
const PROBE: &str = r#"(() => {
  const all = (s, r) => [...(r || document).querySelectorAll(s)];
  const depth = (li) => { let d = 0; for (let p = li.parentElement; p; p = p.parentElement) { if (p.tagName === 'LI') d++; } return d; };
  // Each decision card's columns side by side without overlap: the diff table's
  // "applied" column stays inside its own column, clear of the Rationale column.
  const decisionLayout = () => {
    all('#decisions details').forEach(d => { d.open = true; });
    let checked = 0;
    const overlaps = [];
    for (const a of all('#decisions article.decision')) {
      const cols = a.querySelector('.cols');
      const why = cols && [...cols.children].find(c => (c.querySelector('h4') || {}).textContent === 'Rationale');
      const applied = a.querySelector('table.diff thead th:last-child');
      if (!why || !applied) continue;
      checked++;
      const t = applied.closest('table').getBoundingClientRect();
      const h = applied.getBoundingClientRect();
      const w = why.getBoundingClientRect();
      const own = applied.closest('.cols > div').getBoundingClientRect();
      const x = Math.min(h.right, w.right) - Math.max(h.left, w.left);
      const y = Math.min(t.bottom, w.bottom) - Math.max(h.top, w.top);
      if ((x > 0 && y > 0) || t.right > own.right + 1) {
        overlaps.push(`${a.dataset.branch}@${a.dataset.stage}: applied ${Math.round(h.left)}-${Math.round(h.right)}, rationale ${Math.round(w.left)}-${Math.round(w.right)}`);
      }
    }
    return {checked, overlaps};
  };
  const uncited = all('td:not(.l)').filter(td => {
    const t = td.textContent.trim();
    return t !== '–' && /\d/.test(t) && !td.querySelector('[data-ev]');
  }).map(td => td.textContent.trim());
  return {
    sections: all('main > section').map(s => s.id),
    curves: all('#validation svg').length,
    validation_rows: all('#validation table.curves tbody tr').length,
    validation_branches: all('#validation table.curves thead tr:first-child th[colspan]').map(th => th.textContent),
    tests: all('#test table.test').map(t => ({agents: +t.dataset.agents, rows: t.tBodies[0].rows.length, sum: all('tr.sum', t).length})),
    heatmaps: all('#heatmaps figure.heatmap').map(f => ({branch: f.dataset.branch, stages: all('thead th', f).length - 1, sizes: f.querySelector('tbody').rows.length})),
    decisions: all('#decisions article.decision').map(a => a.dataset.branch + '@' + a.dataset.stage),
    forks: all('#forks li.fork').map(li => [li.dataset.branch, depth(li)]),
    study_rows: all('#study table.study-summary tbody tr').length,
    study_tests: all('#study table.study-test').length,
    cited: all('[data-ev]').length,
    uncited: uncited,
    training_rows: all('#training table.training tbody tr').length,
    training_curves: all('#training svg').length,
    samples: all('#samples figure.sample').map(f => f.dataset.kind),
    sample_grids: all('#samples svg.grid').length,
    overflow: document.documentElement.scrollWidth - window.innerWidth,
    bad_hashes: all('[data-ev]').filter(e => !/^([0-9a-f]{64})( [0-9a-f]{64})*$/.test(e.dataset.ev)).length,
    decision_layout: decisionLayout(),
  };
})()"#;

fn screenshots() -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("report-screenshots");
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Open a report in Chromium; returns the probe's answer after checking the page loaded
/// cleanly and offline, and writes a screenshot named `name`.
fn open_in_browser(tmp: &Path, page: &Path, name: &str, width: u32) -> Value {
    open_and_probe(tmp, page, name, width, PROBE)
}

/// [`open_in_browser`] with another probe expression (its answer is returned).
fn open_and_probe(tmp: &Path, page: &Path, name: &str, width: u32, probe: &str) -> Value {
    let mut b = Browser::launch(tmp, Duration::from_secs(120));
    let url = format!("file://{}", page.canonicalize().unwrap().display());
    b.open(&url, width, 900);
    let mut probe = b.eval(probe);
    let shot = screenshots().join(format!("{name}.png"));
    b.screenshot(&shot);
    // Clicking a number shows the command that prints its event.
    probe["cite_bar"] = b.eval(
        "document.querySelector('#validation [data-ev]').click(), document.getElementById('cite').textContent",
    );
    let png = std::fs::read(&shot).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "screenshot is a PNG");
    assert!(png.len() > 10_000, "screenshot has content");
    let errors = b.errors();
    assert!(errors.is_empty(), "console errors: {errors:#?}");
    let requests = b.requests();
    assert!(
        requests.iter().all(|u| u == &url),
        "the page loads nothing but itself: {requests:?}"
    );
    probe
}

#[test]
fn report_of_a_real_ledger_in_chromium() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tiny_ledger(tmp.path());
    fork_and_run(&d, "stage1", "random", "h");
    let study = tmp.path().join("study");
    ok(&ledger(
        &d,
        &[
            "study",
            "--at",
            "stage2",
            "--engineers",
            "fixed,random",
            "--seeds",
            "2",
            "--out",
            study.to_str().unwrap(),
            "--quiet",
        ],
    ));
    let out = tmp.path().join("report");
    let said = ok(&ledger(
        &d,
        &[
            "report",
            "--study",
            study.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ],
    ));
    assert!(
        said.contains("2 branches") && said.contains("study"),
        "{said}"
    );
    for f in [
        "index.html",
        "figures/validation-valid.svg",
        "figures/validation-valid.png",
        "figures/validation-optimal.png",
        "figures/heatmap-main.png",
        "figures/heatmap-h.svg",
        "figures/study.png",
    ] {
        assert!(out.join(f).is_file(), "{f} written");
    }

    // What the ledger holds, through its own commands.
    let compare = json(&ledger(&d, &["compare", "main", "h", "--json"]));
    let stages: Vec<usize> = compare
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["validation"].as_array().unwrap().len())
        .collect();
    let mut decisions = Vec::new();
    for b in ["main", "h"] {
        let a = json(&ledger(&d, &["audit", "--branch", b, "--json"]));
        for x in a["decisions"].as_array().unwrap() {
            decisions.push(format!("{b}@{}", x["stage"]));
        }
    }
    assert_eq!(decisions.len(), 4, "2 designed stages on each branch");

    // What training did: a transfer row per branch and Sum row (validation, 3, 4 and 5
    // agents), and one per engineer of the study.
    let html = std::fs::read_to_string(out.join("index.html")).unwrap();
    let table = |class: &str| {
        let at = html
            .find(&format!("<table class=\"{class}\""))
            .unwrap_or_else(|| panic!("no {class} table"));
        let body = &html[at..];
        body[..body.find("</table>").unwrap()]
            .matches("<tr>")
            .count()
    };
    assert_eq!(
        table("transfer"),
        1 + 2 * 4,
        "a header and 2 branches x 4 Sum rows"
    );
    assert!(
        table("study-transfer") >= 3,
        "a header and a row per engineer"
    );
    let p = open_in_browser(tmp.path(), &out.join("index.html"), "tiny", 1280);
    assert_eq!(
        p["sections"],
        serde_json::json!([
            "validation",
            "test",
            "training",
            "heatmaps",
            "samples",
            "decisions",
            "forks",
            "study"
        ])
    );
    assert_eq!(p["curves"], 2, "valid and optimal curves");
    // Sampled plans of each branch's last stage, each drawn on its grid, at most 2 of
    // each kind (valid, conflict, hole) per branch and at least a valid one.
    let kinds: Vec<String> = p["samples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap().to_string())
        .collect();
    assert_eq!(p["sample_grids"].as_u64().unwrap() as usize, kinds.len());
    assert!(
        kinds.len() <= 2 * 6 && kinds.iter().any(|k| k == "valid"),
        "{kinds:?}"
    );
    assert!(
        kinds
            .iter()
            .all(|k| ["valid", "vertex_conflict", "edge_conflict", "hole"].contains(&k.as_str())),
        "{kinds:?}"
    );
    // GRPO step by step: one row per trained stage of each branch (main's 1-2, h's 1-2)
    // and one figure of sampled validity on coordination instances.
    assert_eq!(p["training_rows"], 4);
    assert_eq!(p["training_curves"], 1);
    assert_eq!(p["validation_rows"], stages.iter().max().copied().unwrap());
    assert_eq!(p["validation_branches"], serde_json::json!(["main", "h"]));
    let tests = p["tests"].as_array().unwrap();
    assert_eq!(tests.len(), 3, "3, 4 and 5 agents: {tests:?}");
    for t in tests {
        assert_eq!(t["sum"], 1, "a Sum row per table");
    }
    let heatmaps = p["heatmaps"].as_array().unwrap();
    assert_eq!(heatmaps.len(), 2);
    for (h, n) in heatmaps.iter().zip(&stages) {
        assert_eq!(h["stages"].as_u64().unwrap() as usize, *n, "{h}");
        assert_eq!(
            h["sizes"], 4,
            "validation covers sizes 3..=6 (suites.max_size): {h}"
        );
    }
    assert_eq!(p["decisions"], serde_json::json!(decisions));
    // At 1,280 px each decision card's "applied" column sits in its own column, not
    // under the Rationale column (issue 52).
    let layout = &p["decision_layout"];
    assert!(
        layout["checked"].as_u64().unwrap() > 0,
        "no diff table measured: {layout}"
    );
    assert_eq!(layout["overlaps"], serde_json::json!([]), "{layout}");
    assert_eq!(p["forks"], serde_json::json!([["main", 0], ["h", 1]]));
    assert_eq!(p["study_rows"], 2, "one row per engineer");
    assert_eq!(p["study_tests"], 3);
    assert_eq!(
        p["uncited"],
        serde_json::json!([]),
        "every number cites its event"
    );
    assert_eq!(p["bad_hashes"], 0);
    let bar = p["cite_bar"].as_str().unwrap();
    assert!(
        bar.contains(&format!("ledger --ledger {} show ", d.display())),
        "clicking a number names its event: {bar}"
    );
    // And that hash really is a ledger event.
    let hash = bar
        .split(" show ")
        .nth(1)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap();
    ok(&ledger(&d, &["show", hash]));
}

#[test]
fn report_refuses_bad_input_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let d = fixture(tmp.path(), 2, 3);
    let out = tmp.path().join("r");
    fails(
        &ledger(
            &d,
            &["report", "--branch", "nope", "--out", out.to_str().unwrap()],
        ),
        2,
        "nope",
    );
    let missing = tmp.path().join("no-study");
    fails(
        &ledger(
            &d,
            &[
                "report",
                "--study",
                missing.to_str().unwrap(),
                "--out",
                out.to_str().unwrap(),
            ],
        ),
        2,
        "study.json",
    );
    assert!(
        !out.join("index.html").exists(),
        "nothing written on bad input"
    );
    // The same ledger and arguments give the same page, byte for byte.
    ok(&ledger(&d, &["report", "--out", out.to_str().unwrap()]));
    let a = std::fs::read(out.join("index.html")).unwrap();
    ok(&ledger(&d, &["report", "--out", out.to_str().unwrap()]));
    assert_eq!(a, std::fs::read(out.join("index.html")).unwrap());
}

/// What an LLM writes reaches the page as text: its rationale, the keys it proposed
/// that were refused, and a rejection reason quoting its reply, each carrying
/// `<script>`, `</td>` and other markup.
#[test]
fn markup_written_by_an_llm_renders_as_text() {
    const HOSTILE: &str = "Raise holes</td></tr></table></blockquote></div><script>console.error('injected script ran')</script><b class=\"injected\">bold</b> & \"quoted\" 'single' <!-- comment";
    let tmp = tempfile::tempdir().unwrap();
    let d = fixture_with(tmp.path(), 1, 2, &|d| {
        d.rationale = HOSTILE.to_string();
        d.refused = vec![RefusedField {
            field: "</td><script>console.error('injected key ran')</script>".into(),
            value: HOSTILE.to_string(),
        }];
        d.status = DecisionStatus::Rejected {
            reason: format!("no usable JSON object in the reply; reply began {HOSTILE:?}"),
        };
    });
    let out = tmp.path().join("report");
    ok(&ledger(&d, &["report", "--out", out.to_str().unwrap()]));
    // open_and_probe also fails on any console error (the injected scripts log one)
    // and on any request besides the page itself.
    let p = open_and_probe(
        tmp.path(),
        &out.join("index.html"),
        "llm-markup",
        1280,
        r#"(() => {
          const all = (s) => [...document.querySelectorAll(s)];
          return {
            scripts: document.scripts.length,
            injected: all('.injected').length,
            decisions: all('#decisions article.decision').length,
            rationale: all('#decisions blockquote').map(b => [b.textContent, b.children.length]),
            refused: all('#decisions ul.refused code').map(c => c.textContent),
            reason: all('#decisions article.decision header span.muted').map(s => s.textContent),
            sections: all('main > section').map(s => s.id),
            forks: all('#forks li.fork').length,
          };
        })()"#,
    );
    assert_eq!(p["scripts"], 1, "only the page's own script: {p}");
    assert_eq!(p["injected"], 0, "no element was made from the text: {p}");
    assert_eq!(p["decisions"], 1, "{p}");
    assert_eq!(p["rationale"], serde_json::json!([[HOSTILE, 0]]));
    let refused = p["refused"][0].as_str().unwrap();
    assert!(
        refused.contains("</td><script>console.error('injected key ran')</script>")
            && refused.contains("injected script ran"),
        "{refused}"
    );
    let reason = p["reason"][0].as_str().unwrap();
    assert!(
        reason.contains("<b class=\\\"injected\\\">bold</b>"),
        "{reason}"
    );
    assert_eq!(
        p["sections"],
        serde_json::json!(["validation", "test", "heatmaps", "decisions", "forks"]),
        "the text closed no element: every section is still there"
    );
    assert_eq!(p["forks"], 1);
}

#[test]
fn ten_branches_by_ten_stages_stay_readable() {
    let tmp = tempfile::tempdir().unwrap();
    let d = fixture(tmp.path(), 10, 10);
    let out = tmp.path().join("report");
    ok(&ledger(&d, &["report", "--out", out.to_str().unwrap()]));
    let size = std::fs::metadata(out.join("index.html")).unwrap().len();
    assert!(size < 5_000_000, "index.html is {size} bytes");
    let p = open_in_browser(tmp.path(), &out.join("index.html"), "ten-by-ten", 1280);
    assert!(
        p["overflow"].as_i64().unwrap() <= 0,
        "the page fits the window's width (wide tables scroll in place): {}",
        p["overflow"]
    );
    assert_eq!(p["validation_rows"], 10);
    assert_eq!(p["validation_branches"].as_array().unwrap().len(), 10);
    let heatmaps = p["heatmaps"].as_array().unwrap();
    assert_eq!(heatmaps.len(), 10);
    for h in heatmaps {
        assert_eq!(
            (h["stages"].as_u64(), h["sizes"].as_u64()),
            (Some(10), Some(8)),
            "{h}"
        );
    }
    assert_eq!(p["decisions"].as_array().unwrap().len(), 10 * 9);
    assert_eq!(
        p["decision_layout"]["overlaps"],
        serde_json::json!([]),
        "{}",
        p["decision_layout"]
    );
    let forks = p["forks"].as_array().unwrap();
    assert_eq!(forks[0], serde_json::json!(["main", 0]));
    assert!(
        forks[1..].iter().all(|f| f[1] == 1),
        "nine forks of main: {forks:?}"
    );
    assert_eq!(p["uncited"], serde_json::json!([]));
}

// ---- ledger serve ----

/// A running `ledger serve` on `d` (any free port), stopped when dropped.
struct Server {
    child: std::process::Child,
    url: String,
}

impl Server {
    fn start(d: &Path) -> Server {
        use std::io::BufRead;
        let mut child = common::ledger_cmd(d, &["serve", "--bind", "127.0.0.1:0"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("start ledger serve");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let url = line
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .unwrap_or_else(|| panic!("serve said where it listens: {line:?}"))
            .to_string();
        Server { child, url }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const LIVE_PROBE: &str = r#"(() => ({
  stages: [...document.querySelectorAll('#validation table.curves tbody tr')].length,
  live: (document.getElementById('live') || {}).textContent,
  samples: [...document.querySelectorAll('#samples figure.sample')].map(f => f.dataset.kind),
  grids: document.querySelectorAll('#samples svg.grid').length,
  mark: window.__mark || 0,
  scripts: document.scripts.length,
}))()"#;

#[test]
fn serve_follows_a_run_in_chromium() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("l");
    let plan = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/plans/tiny.toml");
    ok(&ledger(&d, &["init", "--plan", plan]));
    ok(&ledger(&d, &["run", "--stages", "2", "--quiet"]));
    let server = Server::start(&d);
    let mut b = Browser::launch(tmp.path(), Duration::from_secs(300));
    // Long polls of 2 s, so the test does not wait out the default 25 s.
    let url = format!("{}?wait=2", server.url);
    b.open(&url, 1280, 900);
    let before = b.eval(LIVE_PROBE);
    assert_eq!(before["stages"], 2, "stages 0 and 1: {before}");
    assert_eq!(before["live"], "live", "{before}");
    assert_eq!(before["scripts"], 2, "the page's own two scripts: {before}");
    let kinds: Vec<&str> = before["samples"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|k| k.as_str())
        .collect();
    assert!(kinds.contains(&"valid"), "sampled plans drawn: {before}");
    assert_eq!(before["grids"].as_u64().unwrap() as usize, kinds.len());
    b.eval("window.__mark = 1");
    // A writer appends stage 2 while the page watches (the server never blocks it).
    ok(&ledger(&d, &["run", "--quiet"]));
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    let after = loop {
        let p = b.eval(LIVE_PROBE);
        if p["stages"] == 3 || std::time::Instant::now() > deadline {
            break p;
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    assert_eq!(after["stages"], 3, "the new stage appeared: {after}");
    assert_eq!(after["mark"], 1, "in place, without a reload: {after}");
    let shot = screenshots().join("serve-live.png");
    b.screenshot(&shot);
    let errors = b.errors();
    assert!(errors.is_empty(), "console errors: {errors:#?}");
    let origin = server.url.trim_end_matches('/');
    let requests = b.requests();
    assert!(
        requests.iter().all(|u| u.starts_with(origin)),
        "the page talks to its server only: {requests:?}"
    );
    assert!(
        requests.iter().any(|u| u.contains("/version?since=")),
        "{requests:?}"
    );
}

#[test]
fn markup_on_the_live_page_renders_as_text() {
    const HOSTILE: &str = "Raise holes</main><script>console.error('injected script ran')</script><b class=\"injected\">bold</b> & <!-- x";
    let tmp = tempfile::tempdir().unwrap();
    let d = fixture_with(tmp.path(), 1, 2, &|d| d.rationale = HOSTILE.to_string());
    let server = Server::start(&d);
    let mut b = Browser::launch(tmp.path(), Duration::from_secs(120));
    b.open(&server.url, 1280, 900);
    let p = b.eval(
        r#"(() => ({
          injected: document.querySelectorAll('.injected').length,
          scripts: document.scripts.length,
          rationale: [...document.querySelectorAll('#decisions blockquote')].map(q => q.textContent),
          sections: [...document.querySelectorAll('main > section')].map(s => s.id),
        }))()"#,
    );
    assert_eq!(p["injected"], 0, "{p}");
    assert_eq!(p["scripts"], 2, "only the page's own scripts: {p}");
    assert_eq!(p["rationale"], serde_json::json!([HOSTILE]));
    assert_eq!(
        p["sections"],
        serde_json::json!(["validation", "test", "heatmaps", "decisions", "forks"])
    );
    assert!(b.errors().is_empty(), "{:#?}", b.errors());
    // Nothing but the page: no file is served, whatever the path, and nothing is
    // written (raw requests, so no client normalises the path first).
    let status = |request: &str| -> String {
        use std::io::{Read, Write};
        let host = server
            .url
            .trim_start_matches("http://")
            .trim_end_matches('/');
        let mut c = std::net::TcpStream::connect(host).unwrap();
        write!(c, "{request}\r\nHost: {host}\r\nConnection: close\r\n\r\n").unwrap();
        let mut r = String::new();
        c.read_to_string(&mut r).unwrap();
        r.split_whitespace().nth(1).unwrap_or("").to_string()
    };
    for path in [
        "/../Cargo.toml",
        "/REFS",
        "/figures/x.svg",
        "/%2e%2e/%2e%2e/etc/passwd",
        "//etc/passwd",
    ] {
        assert_eq!(status(&format!("GET {path} HTTP/1.1")), "404", "{path}");
    }
    assert_eq!(status("POST / HTTP/1.1\r\nContent-Length: 0"), "405");
    assert_eq!(status("GET / HTTP/1.1"), "200");
}

// ---- a generated ledger ----

fn cells(
    agents: u32,
    sizes: std::ops::RangeInclusive<u32>,
    f: impl Fn(u32) -> u32,
) -> Vec<EvalCell> {
    sizes
        .map(|n| EvalCell {
            agents,
            size: n,
            total: 20,
            valid: f(n).min(20),
            optimal: f(n).min(20) / 2,
        })
        .collect()
}

/// Events of stages `from..stages` on `branch`: engineer decisions whose rationale
/// carries markup (which the page must escape), validation every stage, test at the end.
fn stages(
    l: &mut Ledger,
    branch: &str,
    k: u32,
    from: u32,
    stages: u32,
    tweak: &dyn Fn(&mut EngineerDecision),
) {
    let mut config = GeneratorConfig::uniform(2, 3..=10, 0.1, 0.2);
    for s in from..stages {
        let seed = Hash::of_blob(format!("{branch}/{s}").as_bytes());
        let val = cells(2, 3..=10, |n| {
            (20 + s * (k + 1) + 3 * k).saturating_sub(2 * n) % 21
        });
        let mut events = vec![(
            EventBody::StageStarted(StageStarted {
                engineer: if s == 0 {
                    "warmup".into()
                } else {
                    format!("engineer{k}")
                },
                from_checkpoint: None,
                seed,
            }),
            s,
            Meta::now(),
        )];
        if s > 0 {
            let previous = config.clone();
            config = GeneratorConfig::uniform(
                2,
                3..=10,
                0.05 * ((s + k) % 5) as f64,
                0.1 * ((s * k) % 4) as f64,
            );
            let context = EngineerContext {
                stage: s,
                current: previous,
                validation: table_of(&Evaluation {
                    suite: "val".into(),
                    checkpoint: None,
                    cells: val.clone(),
                }),
                failures: FailureBreakdown {
                    suite: "val".into(),
                    sizes: vec![SizeFailures {
                        size: 9,
                        total: 20,
                        counts: vec![(FailureKind::Hole, 7), (FailureKind::VertexConflict, 2)],
                        examples: vec![],
                    }],
                },
                history: vec![],
                training: TrainingDetails::default(),
                modules: ContextModules::default(),
                max_size: 10,
            };
            let blob = l.put_blob(&codec::encode(&context)).unwrap();
            let mut decision = EngineerDecision {
                engineer: format!("engineer{k}"),
                context: blob,
                prompt: None,
                reply: None,
                proposed: ProposedConfig::None,
                applied: config.clone(),
                clips: vec![],
                refused: vec![],
                rationale: format!(
                    "Stage {s}: <img src=x onerror=\"console.error('unescaped')\"> holes & waits"
                ),
                status: DecisionStatus::Accepted,
            };
            tweak(&mut decision);
            events.push((EventBody::EngineerDecision(decision), s, Meta::now()));
        }
        events.push((
            EventBody::Evaluation(Evaluation {
                suite: "val".into(),
                checkpoint: None,
                cells: val,
            }),
            s,
            Meta::now(),
        ));
        if s + 1 == stages {
            for a in 3..=5 {
                events.push((
                    EventBody::Evaluation(Evaluation {
                        suite: "test".into(),
                        checkpoint: None,
                        cells: cells(a, a..=10, |n| (k + a + n) % 7),
                    }),
                    s,
                    Meta::now(),
                ));
            }
        }
        events.push((
            EventBody::StageCompleted(StageCompleted {
                checkpoint: None,
                steps: 10,
            }),
            s,
            Meta::now(),
        ));
        l.append(branch, events).unwrap();
    }
}

/// A ledger of `branches` branches (main and forks of it before stage 1), each with
/// `n` stages (0..n), made from events directly (no training).
fn fixture(tmp: &Path, branches: u32, n: u32) -> PathBuf {
    fixture_with(tmp, branches, n, &|_| {})
}

/// [`fixture`] with every engineer decision passed through `tweak` before it is
/// recorded.
fn fixture_with(
    tmp: &Path,
    branches: u32,
    n: u32,
    tweak: &dyn Fn(&mut EngineerDecision),
) -> PathBuf {
    let d = tmp.join("fixture");
    let plan = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/plans/tiny.toml"
    ))
    .unwrap();
    let mut l = Ledger::create(&d, &plan).unwrap();
    stages(&mut l, "main", 0, 0, 1, tweak);
    let at = l.head("main").unwrap();
    stages(&mut l, "main", 0, 1, n, tweak);
    for k in 1..branches {
        let name = format!("fork{k:02}");
        l.fork(&name, &at).unwrap();
        l.append(
            &name,
            vec![(
                EventBody::BranchForked(BranchForked {
                    from_branch: "main".into(),
                    at,
                    engineer: format!("engineer{k}"),
                    replicate: 0,
                }),
                0,
                Meta::now(),
            )],
        )
        .unwrap();
        stages(&mut l, &name, k, 1, n, tweak);
    }
    d
}
