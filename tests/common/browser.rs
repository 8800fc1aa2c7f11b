//! A real headless Chromium driven over the DevTools protocol on a pipe
//! (`--remote-debugging-pipe`: the browser reads commands on fd 3 and writes replies and
//! events on fd 4, each a JSON message ended by a NUL byte). No websocket, no driver.
//!
//! Chromium comes from Debian's `chromium` package (`tools/chromium.sh` installs it;
//! `make test` runs that first). `$CHROMIUM` names another binary.
use serde_json::{json, Value};
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::FromRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The Chromium binary: `$CHROMIUM`, else the first of the usual names on PATH.
pub fn chromium() -> PathBuf {
    if let Some(p) = std::env::var_os("CHROMIUM") {
        return PathBuf::from(p);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for name in [
        "chromium",
        "chromium-browser",
        "google-chrome",
        "google-chrome-stable",
    ] {
        for dir in std::env::split_paths(&path) {
            let p = dir.join(name);
            if p.is_file() {
                return p;
            }
        }
    }
    panic!(
        "no Chromium found (set $CHROMIUM, or install Debian's package with tools/chromium.sh; \
         `make test` does this)"
    );
}

/// One pipe end pair, duplicated above fd 10 so the child's dup2 onto 3 and 4 can
/// never overwrite the other end.
fn pipe_high() -> (i32, i32) {
    let mut fds = [0i32; 2];
    // SAFETY: plain libc calls on fds this function owns.
    unsafe {
        assert_eq!(libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC), 0, "pipe2");
        let r = libc::fcntl(fds[0], libc::F_DUPFD_CLOEXEC, 10);
        let w = libc::fcntl(fds[1], libc::F_DUPFD_CLOEXEC, 10);
        assert!(r >= 10 && w >= 10, "fcntl");
        libc::close(fds[0]);
        libc::close(fds[1]);
        (r, w)
    }
}

pub struct Browser {
    child: Child,
    to_browser: File,
    from_browser: BufReader<File>,
    next_id: u64,
    session: Option<String>,
    /// Every event received so far (console, exceptions, log entries, requests).
    pub events: Vec<Value>,
    stderr: PathBuf,
    done: Arc<AtomicBool>,
}

impl Browser {
    /// Start Chromium with a fresh profile under `dir`. A watchdog kills it after
    /// `limit`, so a hung browser fails the test instead of hanging it.
    pub fn launch(dir: &Path, limit: Duration) -> Browser {
        let (cmd_r, cmd_w) = pipe_high();
        let (ev_r, ev_w) = pipe_high();
        let stderr = dir.join("chromium-stderr.log");
        let mut cmd = Command::new(chromium());
        cmd.args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--disable-background-networking",
            "--disable-dev-shm-usage",
            "--remote-debugging-pipe",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", dir.join("profile").display()))
        .arg("about:blank")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(File::create(&stderr).expect("chromium log"));
        // SAFETY: only async-signal-safe dup2 calls between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                if libc::dup2(cmd_r, 3) < 0 || libc::dup2(ev_w, 4) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().expect("start chromium");
        // SAFETY: the parent's ends are ours alone; the child's ends are closed here.
        let (to_browser, from_browser) = unsafe {
            libc::close(cmd_r);
            libc::close(ev_w);
            (File::from_raw_fd(cmd_w), File::from_raw_fd(ev_r))
        };
        let done = Arc::new(AtomicBool::new(false));
        let (flag, pid) = (done.clone(), child.id() as i32);
        std::thread::spawn(move || {
            let step = Duration::from_millis(200);
            let mut waited = Duration::ZERO;
            while waited < limit {
                if flag.load(Ordering::SeqCst) {
                    return;
                }
                std::thread::sleep(step);
                waited += step;
            }
            // SAFETY: signalling our own child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        });
        Browser {
            child,
            to_browser,
            from_browser: BufReader::new(from_browser),
            next_id: 0,
            session: None,
            events: Vec::new(),
            stderr,
            done,
        }
    }

    fn log_tail(&self) -> String {
        let s = std::fs::read_to_string(&self.stderr).unwrap_or_default();
        let lines: Vec<&str> = s.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    fn read(&mut self) -> Value {
        let mut buf = Vec::new();
        let n = self
            .from_browser
            .read_until(0, &mut buf)
            .expect("read from chromium");
        if n == 0 || buf.last() != Some(&0) {
            panic!(
                "chromium closed the protocol pipe (crashed or timed out); its log:\n{}",
                self.log_tail()
            );
        }
        buf.pop();
        serde_json::from_slice(&buf).expect("chromium sends JSON")
    }

    /// Send one command (to the page session once attached) and wait for its reply;
    /// events that arrive meanwhile are kept in `events`.
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut msg = json!({"id": id, "method": method, "params": params});
        if let Some(s) = &self.session {
            msg["sessionId"] = json!(s);
        }
        let mut bytes = serde_json::to_vec(&msg).unwrap();
        bytes.push(0);
        self.to_browser
            .write_all(&bytes)
            .expect("write to chromium");
        loop {
            let m = self.read();
            if m["id"] == json!(id) {
                if let Some(e) = m.get("error") {
                    panic!("{method} failed: {e}");
                }
                return m["result"].clone();
            }
            if m.get("method").is_some() {
                self.events.push(m);
            }
        }
    }

    /// Open `url` in a new page of `width` × `height` CSS pixels and wait for its load
    /// event.
    pub fn open(&mut self, url: &str, width: u32, height: u32) {
        let t = self.call("Target.createTarget", json!({"url": "about:blank"}));
        let target = t["targetId"].as_str().expect("targetId").to_string();
        let a = self.call(
            "Target.attachToTarget",
            json!({"targetId": target, "flatten": true}),
        );
        self.session = Some(a["sessionId"].as_str().expect("sessionId").to_string());
        for domain in ["Page", "Runtime", "Log", "Network"] {
            self.call(&format!("{domain}.enable"), json!({}));
        }
        self.call(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": width, "height": height, "deviceScaleFactor": 1, "mobile": false}),
        );
        self.call("Page.navigate", json!({"url": url}));
        while !self
            .events
            .iter()
            .any(|e| e["method"] == "Page.loadEventFired")
        {
            let m = self.read();
            if m.get("method").is_some() {
                self.events.push(m);
            }
        }
    }

    /// Evaluate a JavaScript expression in the page; its value, as JSON.
    pub fn eval(&mut self, expression: &str) -> Value {
        let r = self.call(
            "Runtime.evaluate",
            json!({"expression": expression, "returnByValue": true, "awaitPromise": true}),
        );
        if let Some(e) = r.get("exceptionDetails") {
            panic!("evaluating {expression}: {e}");
        }
        r["result"]["value"].clone()
    }

    /// A PNG of the whole page (beyond the viewport), written to `path`.
    pub fn screenshot(&mut self, path: &Path) {
        use base64::Engine as _;
        let m = self.call("Page.getLayoutMetrics", json!({}));
        let size = &m["cssContentSize"];
        let (w, h) = (
            size["width"].as_f64().unwrap(),
            size["height"].as_f64().unwrap(),
        );
        let shot = self.call(
            "Page.captureScreenshot",
            json!({"format": "png", "captureBeyondViewport": true,
                   "clip": {"x": 0, "y": 0, "width": w, "height": h, "scale": 1}}),
        );
        let png = base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().expect("screenshot data"))
            .expect("base64 screenshot");
        std::fs::write(path, png).expect("write screenshot");
    }

    /// Console errors, uncaught exceptions and error log entries, as text.
    pub fn errors(&self) -> Vec<String> {
        self.events
            .iter()
            .filter_map(|e| match e["method"].as_str()? {
                "Runtime.exceptionThrown" => {
                    Some(format!("exception: {}", e["params"]["exceptionDetails"]))
                }
                "Runtime.consoleAPICalled"
                    if matches!(
                        e["params"]["type"].as_str(),
                        Some("error" | "assert" | "warning")
                    ) =>
                {
                    Some(format!(
                        "console.{}: {}",
                        e["params"]["type"], e["params"]["args"]
                    ))
                }
                "Log.entryAdded" if e["params"]["entry"]["level"] == "error" => {
                    Some(format!("log: {}", e["params"]["entry"]["text"]))
                }
                _ => None,
            })
            .collect()
    }

    /// Every URL the page requested.
    pub fn requests(&self) -> Vec<String> {
        self.events
            .iter()
            .filter(|e| e["method"] == "Network.requestWillBeSent")
            .filter_map(|e| e["params"]["request"]["url"].as_str().map(String::from))
            .collect()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        self.done.store(true, Ordering::SeqCst);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
