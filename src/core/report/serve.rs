//! `ledger serve`: the report as a live local web page over a ledger that a run may be
//! writing. One renderer, two outputs: the page is [`super::html::render_live`] of the
//! same [`super::gather`] that `ledger report` writes to a file, plus a script that
//! long-polls `/version` and swaps in the new page when the ledger's refs move.
//!
//! What it never does: write to the ledger (it opens read-only snapshots, which never
//! wait for the writer), serve a file (every response is rendered from the ledger in
//! memory; there is no path-to-file mapping at all), or listen beyond localhost unless
//! told to. Routes: `GET /` (the page), `GET /version?since=V&wait=S` (the refs' version,
//! answered when it differs from `V` or after `S` seconds, at most 60), anything else
//! 404, any method but GET and HEAD 405.
use super::{default_branches, gather, html, read_study, ReportError};
use crate::ledger::{Hash, Ledger};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What to show: the report's arguments.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// The ledger directory as the user named it (shown on the page).
    pub ledger_arg: String,
    /// Branches in order (empty: every branch but study runs, re-read as they appear).
    pub branches: Vec<String>,
    pub study: Option<PathBuf>,
}

/// Requests handled at once; more get 503 (a page holds one long poll).
const MAX_IN_FLIGHT: usize = 64;
/// How often a long poll re-reads the refs.
const POLL: Duration = Duration::from_millis(200);
/// The longest a long poll waits.
const MAX_WAIT_S: u64 = 60;

/// The version of the ledger's refs: a hash over every (branch, head), in name order.
/// Any append, fork, branch deletion or recovery changes it; reading it never waits for
/// a writer (`REFS` is replaced atomically).
pub fn version(dir: &Path) -> Result<String, ReportError> {
    let heads = crate::ledger::Ledger::current_heads(dir)?;
    let mut buf = Vec::new();
    for (name, head) in &heads {
        buf.extend_from_slice(name.as_bytes());
        buf.push(0);
        buf.extend_from_slice(&head.0);
    }
    Ok(Hash::of_blob(&buf).short())
}

/// The page for the ledger as it is now, and the version it shows.
fn render(dir: &Path, opts: &ServeOptions) -> (String, String) {
    // The version is read before the snapshot: if the ledger moves in between, the
    // page is newer than its version says and the next poll fetches it again (never
    // the reverse, which could miss an update).
    let v = match version(dir) {
        Ok(v) => v,
        Err(e) => {
            return (
                html::render_waiting(&opts.ledger_arg, &e.to_string(), "-"),
                "-".into(),
            )
        }
    };
    let page = (|| -> Result<String, ReportError> {
        let ledger = Ledger::open_read_only(dir)?;
        let study = opts.study.as_deref().map(read_study).transpose()?;
        let branches = if opts.branches.is_empty() {
            default_branches(&ledger)?
        } else {
            opts.branches.clone()
        };
        let report = gather(&ledger, &opts.ledger_arg, &branches, study)?;
        html::render_live(&report, &v).map_err(|source| ReportError::Figure {
            name: "inline".into(),
            source,
        })
    })();
    match page {
        Ok(p) => (p, v),
        Err(e) => {
            let msg = format!("nothing to show yet: {}", crate::ledger::Chain(&e));
            (html::render_waiting(&opts.ledger_arg, &msg, &v), v)
        }
    }
}

/// Headers of every response: never cached, never sniffed, and a content policy that
/// lets the page run only its own inline script and talk only to this server.
fn respond(rq: tiny_http::Request, status: u16, content_type: &str, body: String) {
    let head_only = *rq.method() == tiny_http::Method::Head;
    let mut resp = tiny_http::Response::from_string(if head_only { String::new() } else { body })
        .with_status_code(status);
    for (k, v) in [
        ("Content-Type", content_type),
        ("Cache-Control", "no-store"),
        ("X-Content-Type-Options", "nosniff"),
        ("Referrer-Policy", "no-referrer"),
        (
            "Content-Security-Policy",
            "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; \
             img-src data:; connect-src 'self'; base-uri 'none'; form-action 'none'",
        ),
    ] {
        if let Ok(h) = tiny_http::Header::from_bytes(k.as_bytes(), v.as_bytes()) {
            resp.add_header(h);
        }
    }
    // A client that went away is not our error.
    let _ = rq.respond(resp);
}

/// One query parameter's value (the few this server reads are plain tokens).
fn param<'a>(query: &'a str, key: &str) -> Option<&'a str> {
    query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v)
}

struct Shared {
    dir: PathBuf,
    opts: ServeOptions,
    /// The last page rendered, with its version: re-rendered only when the refs move.
    page: Mutex<Option<(String, String)>>,
    in_flight: AtomicUsize,
}

fn handle(shared: &Shared, rq: tiny_http::Request) {
    use tiny_http::Method;
    if !matches!(rq.method(), Method::Get | Method::Head) {
        return respond(
            rq,
            405,
            "text/plain; charset=utf-8",
            "read-only: GET and HEAD only\n".into(),
        );
    }
    let url = rq.url().to_string();
    let (path, query) = url.split_once('?').unwrap_or((&url, ""));
    match path {
        "/" | "/index.html" => {
            let current = version(&shared.dir).unwrap_or_else(|_| "-".into());
            let mut cache = shared.page.lock().unwrap_or_else(|p| p.into_inner());
            let fresh = matches!(&*cache, Some((_, v)) if *v == current);
            if !fresh {
                *cache = Some(render(&shared.dir, &shared.opts));
            }
            let body = cache.as_ref().map(|c| c.0.clone()).unwrap_or_default();
            drop(cache);
            respond(rq, 200, "text/html; charset=utf-8", body)
        }
        "/version" => {
            let since = param(query, "since").unwrap_or("");
            let wait = param(query, "wait")
                .and_then(|w| w.parse::<u64>().ok())
                .unwrap_or(25)
                .min(MAX_WAIT_S);
            let until = Instant::now() + Duration::from_secs(wait);
            let v = loop {
                let v = version(&shared.dir).unwrap_or_else(|_| "-".into());
                if v != since || Instant::now() >= until {
                    break v;
                }
                std::thread::sleep(POLL);
            };
            respond(rq, 200, "text/plain; charset=utf-8", v)
        }
        _ => respond(
            rq,
            404,
            "text/plain; charset=utf-8",
            "not found: this server shows one page, at /\n".into(),
        ),
    }
}

/// Serve until the process is stopped. `ready` gets the bound address (the port when
/// `bind` asked for port 0) before the first request is read.
pub fn serve(
    dir: &Path,
    bind: &str,
    opts: ServeOptions,
    ready: impl FnOnce(SocketAddr),
) -> Result<(), ReportError> {
    // Fail now, naming the study file or the directory, rather than serve an error page
    // forever.
    if let Some(s) = &opts.study {
        super::read_study(s)?;
    }
    Ledger::open_read_only(dir)?;
    let server = tiny_http::Server::http(bind).map_err(|e| ReportError::Output {
        path: PathBuf::from(bind),
        message: format!("cannot listen there: {e}"),
    })?;
    let addr = server
        .server_addr()
        .to_ip()
        .ok_or_else(|| ReportError::Output {
            path: PathBuf::from(bind),
            message: "not an IP address".into(),
        })?;
    ready(addr);
    let shared = Arc::new(Shared {
        dir: dir.to_path_buf(),
        opts,
        page: Mutex::new(None),
        in_flight: AtomicUsize::new(0),
    });
    for rq in server.incoming_requests() {
        if shared.in_flight.fetch_add(1, Ordering::SeqCst) >= MAX_IN_FLIGHT {
            shared.in_flight.fetch_sub(1, Ordering::SeqCst);
            respond(rq, 503, "text/plain; charset=utf-8", "busy\n".into());
            continue;
        }
        let s = shared.clone();
        std::thread::spawn(move || {
            handle(&s, rq);
            s.in_flight.fetch_sub(1, Ordering::SeqCst);
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_are_read_by_name() {
        assert_eq!(param("since=ab12&wait=3", "wait"), Some("3"));
        assert_eq!(param("since=ab12&wait=3", "since"), Some("ab12"));
        assert_eq!(param("", "since"), None);
    }
}

/// Why a `serve --bind` value is no address.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    #[error("expected HOST:PORT or ADDR:PORT (e.g. localhost:8473), got {0:?}")]
    NoPort(String),
    /// (clap prints the message alone, so it holds the cause.)
    #[error("{value:?} is not an address this machine resolves: {cause}")]
    Unresolved {
        value: String,
        cause: std::io::Error,
    },
    #[error("{0:?} resolves to no address")]
    NoAddress(String),
}

/// `serve --bind`: `ADDR:PORT` or `HOST:PORT` (`localhost:8473`), resolved once here to
/// the first address the name has (IPv4 first, as a browser tries `localhost`).
pub fn bind_addr(s: &str) -> Result<std::net::SocketAddr, BindError> {
    use std::net::ToSocketAddrs;
    if let Ok(a) = s.parse() {
        return Ok(a);
    }
    if !s.contains(':') {
        return Err(BindError::NoPort(s.to_string()));
    }
    let addrs: Vec<std::net::SocketAddr> = s
        .to_socket_addrs()
        .map_err(|cause| BindError::Unresolved {
            value: s.to_string(),
            cause,
        })?
        .collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .copied()
        .ok_or_else(|| BindError::NoAddress(s.to_string()))
}
