//! LLM engineers against a real HTTP server: a hand-written HTTP/1.1 server on
//! 127.0.0.1 speaks the chat-completions protocol and serves scripted replies (good
//! JSON, `<think>` plus fenced JSON, out-of-range values, garbage, HTTP 500 then
//! success, a hang). Each decision goes through the stage's real validation and
//! projection (`stage::decision_event`) with a real recorder on a real ledger, and the
//! recorded `EngineerDecision` is asserted. The CLI tests register engineers with
//! `ledger engineer add` and check the API key never reaches the ledger.
use crate::common;

use common::schema::validates;
use common::{files_under, ok};
use mapf_ledger::engineer::context::TrainingDetails;
use mapf_ledger::engineer::llm::{self, CallPolicy, LlmEngineer, LlmRegistration};
use mapf_ledger::engineer::text::TextRevision;
use mapf_ledger::engineer::{Engineer, EngineerContext, HistoryEntry};
use mapf_ledger::env::{GeneratorConfig, ResultTable};
use mapf_ledger::ledger::event::{
    DecisionStatus, EngineerDecision, EventBody, FailureBreakdown, SizeFailures,
};
use mapf_ledger::ledger::plan::ContextModules;
use mapf_ledger::ledger::recorder::Recorder;
use mapf_ledger::ledger::{Ledger, Meta};
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Output;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const DEMO: &[u8] = include_bytes!("../ledgers/demo.toml");

/// One scripted server behaviour, used for one connection.
#[derive(Clone)]
enum Script {
    /// A chat completion whose message content is this text.
    Chat(String),
    /// A bare status with a body.
    Status(u16, String),
    /// Read the request, then say nothing for this long.
    Hang(Duration),
}

/// A request the server received.
#[derive(Clone, Debug)]
struct Seen {
    request_line: String,
    headers: Vec<(String, String)>,
    body: serde_json::Value,
}

struct FakeServer {
    url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl FakeServer {
    fn start(script: Vec<Script>) -> FakeServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/v1", listener.local_addr().unwrap());
        let queue = Arc::new(Mutex::new(VecDeque::from(script)));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let seen2 = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                let next = queue.lock().unwrap().pop_front();
                let seen = seen2.clone();
                std::thread::spawn(move || serve(stream, next, &seen));
            }
        });
        FakeServer { url, seen }
    }

    fn requests(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

fn read_request(stream: &TcpStream) -> Option<Seen> {
    let mut r = BufReader::new(stream.try_clone().ok()?);
    let mut request_line = String::new();
    r.read_line(&mut request_line).ok()?;
    let mut headers = Vec::new();
    let mut len = 0usize;
    loop {
        let mut line = String::new();
        r.read_line(&mut line).ok()?;
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let (k, v) = line.split_once(':')?;
        let (k, v) = (k.trim().to_ascii_lowercase(), v.trim().to_string());
        if k == "content-length" {
            len = v.parse().ok()?;
        }
        headers.push((k, v));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).ok()?;
    Some(Seen {
        request_line: request_line.trim_end().to_string(),
        headers,
        body: serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null),
    })
}

fn respond(mut stream: &TcpStream, status: u16, body: &str) {
    let reason = match status {
        200 => "OK",
        500 => "Internal Server Error",
        _ => "Status",
    };
    let _ = write!(
        stream,
        "HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.flush();
}

fn serve(stream: TcpStream, script: Option<Script>, seen: &Mutex<Vec<Seen>>) {
    let Some(req) = read_request(&stream) else {
        return;
    };
    seen.lock().unwrap().push(req);
    match script {
        Some(Script::Chat(content)) => {
            let body = serde_json::json!({
                "id": "chatcmpl-test",
                "object": "chat.completion",
                "model": "fake",
                "choices": [{
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": "stop"
                }]
            });
            respond(&stream, 200, &body.to_string());
        }
        Some(Script::Status(s, body)) => respond(&stream, s, &body),
        Some(Script::Hang(d)) => std::thread::sleep(d),
        None => respond(&stream, 503, "{\"error\": \"script exhausted\"}"),
    }
}

fn current() -> GeneratorConfig {
    GeneratorConfig::uniform(2, 3..=6, 0.1, 0.2)
}

fn context() -> EngineerContext {
    EngineerContext {
        stage: 1,
        current: current(),
        validation: ResultTable::default(),
        failures: FailureBreakdown {
            suite: "val".into(),
            sizes: vec![],
        },
        history: vec![],
        training: TrainingDetails::default(),
        modules: ContextModules::default(),
        max_size: 10,
    }
}

fn registration(url: &str) -> LlmRegistration {
    LlmRegistration {
        name: "myllm".into(),
        url: url.to_string(),
        model: "qwen3-test".into(),
        api_key_env: None,
        tokenizer: None,
        max_context: None,
        context_modules: vec![],
    }
}

/// The text revision of the recorded ledgers these tests mirror (the demo's first).
fn first() -> TextRevision {
    TextRevision::of(1).unwrap()
}

fn engineer(url: &str) -> LlmEngineer {
    let mut e = LlmEngineer::new(registration(url), first());
    e.policy = CallPolicy {
        timeout: Duration::from_millis(400),
        attempts: 3,
        backoff: Duration::from_millis(10),
    };
    e
}

/// Decide, then record the decision through the stage's projection on a real ledger.
/// Returns the event and the ledger's copies of the prompt and reply blobs.
fn decide_and_record(
    eng: &mut LlmEngineer,
) -> (
    EngineerDecision,
    mapf_ledger::engineer::Decision,
    Option<String>,
    Option<String>,
) {
    let dir = tempfile::tempdir().unwrap();
    let mut ledger = Ledger::create(&dir.path().join("l"), DEMO).unwrap();
    let ctx = context();
    let d = eng.decide(&ctx);
    let event = {
        let mut rec = Recorder::new(&mut ledger, "main", Meta::default());
        mapf_ledger::stage::decision_event("myllm", &current(), &ctx, 10, d.clone(), &mut rec)
            .unwrap()
    };
    let text = |h: Option<mapf_ledger::ledger::Hash>| {
        h.map(|h| String::from_utf8(ledger.blob(&h).unwrap()).unwrap())
    };
    // The context is recorded as data: it decodes to what the engineer read.
    let recorded: EngineerContext =
        mapf_ledger::ledger::codec::decode(&ledger.blob(&event.context).unwrap(), "context")
            .unwrap();
    assert_eq!(recorded, ctx);
    let (p, r) = (text(event.prompt), text(event.reply));
    (event, d, p, r)
}

/// Decide with an engineer that gets no answer: the decision says so, and the stage's
/// projection refuses to make it an event, recording nothing (the ledger's head and
/// blobs are as before). Returns the reason.
fn decide_unanswered(eng: &mut LlmEngineer) -> mapf_ledger::engineer::Unanswered {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l");
    let mut ledger = Ledger::create(&path, DEMO).unwrap();
    let head = ledger.head("main").unwrap();
    let blobs = files_under(&path.join("blobs")).len();
    let ctx = context();
    let d = eng.decide(&ctx);
    let u = d.unanswered.clone().expect("no answer, so no decision");
    assert!(d.error.is_none() && d.proposal.is_none(), "{d:?}");
    let err = {
        let mut rec = Recorder::new(&mut ledger, "main", Meta::default());
        mapf_ledger::stage::decision_event("myllm", &current(), &ctx, 10, d, &mut rec).unwrap_err()
    };
    assert!(
        matches!(&err, mapf_ledger::stage::StageError::Unanswered(e) if *e == u),
        "{err}"
    );
    let text = err.to_string();
    assert!(
        text.contains("myllm") && text.contains(&eng.registration.endpoint()),
        "{text}"
    );
    assert!(
        text.contains("nothing of this stage was recorded"),
        "{text}"
    );
    assert_eq!(ledger.head("main").unwrap(), head);
    assert_eq!(files_under(&path.join("blobs")).len(), blobs);
    u
}

const GOOD: &str = "{\"sizes\": {\"4\": {\"hole_ratio\": 0.2, \"wait_ratio\": 0.3}}}";

#[test]
fn good_reply_is_accepted_and_recorded_verbatim() {
    let server = FakeServer::start(vec![Script::Chat(GOOD.into())]);
    let mut eng = engineer(&server.url);
    let (ev, d, prompt, reply) = decide_and_record(&mut eng);
    assert_eq!(ev.status, DecisionStatus::Accepted, "{}", ev.rationale);
    assert!(ev.clips.is_empty());
    assert_eq!(ev.applied.sizes[&4].hole_ratio, 0.2);
    assert_eq!(ev.applied.sizes[&4].wait_ratio, 0.3);
    assert_eq!(ev.applied.sizes[&5], current().sizes[&5]);
    assert_eq!(reply.as_deref(), Some(GOOD));
    let prompt = prompt.unwrap();
    assert_eq!(
        prompt,
        llm::prompt_for(&context(), &registration(&server.url), first())
    );
    assert_eq!(Some(prompt.clone()), d.prompt);
    assert!(
        prompt.contains("## Answer") && prompt.contains("\"wait_ratio\": z"),
        "the answer format is in the prompt"
    );
    assert!(prompt.contains("## Guideline"));
    assert!(ev.rationale.contains("attempt 1: ok"), "{}", ev.rationale);
    // The request itself: one POST to /v1/chat/completions, system + user, temperature 0.
    let reqs = server.requests();
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].request_line, "POST /v1/chat/completions HTTP/1.1");
    let b = &reqs[0].body;
    assert_eq!(b["model"], "qwen3-test");
    assert_eq!(b["temperature"], 0);
    assert_eq!(b["messages"][0]["role"], "system");
    assert_eq!(b["messages"][1]["role"], "user");
    assert!(prompt.contains(b["messages"][1]["content"].as_str().unwrap()));
    assert!(!reqs[0].headers.iter().any(|(k, _)| k == "authorization"));
}

/// What an engineer read and wrote is readable from the command line: `audit --prompt
/// --reply` prints both texts verbatim (and as `prompt_text`/`reply_text` in JSON), and
/// `cat` prints any blob by a prefix of its hash.
#[test]
fn audit_and_cat_print_the_recorded_prompt_and_reply() {
    let server = FakeServer::start(vec![Script::Chat(GOOD.into())]);
    let mut eng = engineer(&server.url);
    let dir = tempfile::tempdir().unwrap();
    let l = dir.path().join("l");
    let mut ledger = Ledger::create(&l, DEMO).unwrap();
    let ctx = context();
    let d = eng.decide(&ctx);
    let event = {
        let mut rec = Recorder::new(&mut ledger, "main", Meta::default());
        let e =
            mapf_ledger::stage::decision_event("myllm", &current(), &ctx, 10, d.clone(), &mut rec)
                .unwrap();
        rec.push(1, EventBody::EngineerDecision(e.clone()));
        rec.flush().unwrap();
        e
    };
    drop(ledger);
    let prompt = d.prompt.clone().unwrap();
    let run = |args: &[&str]| common::ledger(&l, args);
    let v: serde_json::Value =
        serde_json::from_str(&ok(&run(&["audit", "--prompt", "--reply", "--json"]))).unwrap();
    assert_eq!(v["decisions"][0]["prompt_text"], prompt.as_str());
    assert_eq!(v["decisions"][0]["reply_text"], GOOD);
    let text = ok(&run(&["audit", "--prompt", "--reply"]));
    assert!(text.contains(&prompt) && text.contains(GOOD), "{text}");
    assert!(text.contains(" prompt (myllm engineer") && text.contains(" reply (myllm engineer"));
    let reply = event.reply.unwrap().to_hex();
    assert_eq!(common::stdout(&run(&["cat", &reply[..12]])), GOOD);
    assert_eq!(common::stdout(&run(&["cat", &reply])), GOOD);
    let o = run(&["cat", "zz"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn think_block_and_fenced_json_are_extracted() {
    let served = "<think>\nThe 5x5 maps fail on collisions. Maybe {\"sizes\": {\"5\": {\"hole_ratio\": 0.45}}}? No, too many holes.\n</think>\n\nHere is the change:\n```json\n{\"sizes\": {\"5\": {\"wait_ratio\": 0.6}}}\n```\nMore coordination instances at size 5, where agents collide.";
    let server = FakeServer::start(vec![Script::Chat(served.into())]);
    let (ev, d, _, reply) = decide_and_record(&mut engineer(&server.url));
    assert_eq!(ev.status, DecisionStatus::Accepted, "{}", ev.rationale);
    assert_eq!(ev.applied.sizes[&5].wait_ratio, 0.6);
    assert_eq!(
        ev.applied.sizes[&5].hole_ratio, 0.1,
        "the draft in <think> is ignored"
    );
    assert_eq!(reply.as_deref(), Some(served));
    assert!(ev
        .rationale
        .starts_with("Here is the change:\n\nMore coordination instances at size 5"));
    assert!(!ev.rationale.contains("too many holes"));
    assert_eq!(
        d.proposed_text.as_deref(),
        Some("{\"sizes\": {\"5\": {\"wait_ratio\": 0.6}}}")
    );
}

#[test]
fn out_of_range_values_are_clipped_and_named() {
    let served = "```json\n{\"sizes\": {\"5\": {\"hole_ratio\": 0.9, \"wait_ratio\": -0.5, \"data_ratio\": 0.3}}}\n```\nHarder maps.";
    let server = FakeServer::start(vec![Script::Chat(served.into())]);
    let (ev, _, _, reply) = decide_and_record(&mut engineer(&server.url));
    assert_eq!(ev.status, DecisionStatus::Clipped, "{}", ev.rationale);
    let fields: Vec<&str> = ev.clips.iter().map(|c| c.field.as_str()).collect();
    assert!(fields.contains(&"sizes.5.hole_ratio"), "{fields:?}");
    assert!(fields.contains(&"sizes.5.wait_ratio"), "{fields:?}");
    assert!(
        !fields.iter().any(|f| f.contains("data_ratio")),
        "{fields:?}"
    );
    assert!(ev.applied.sizes[&5].hole_ratio <= 0.5);
    assert_eq!(ev.applied.sizes[&5].wait_ratio, 0.0);
    assert_eq!(ev.applied.sizes[&5].data_ratio, 0.3);
    assert_eq!(reply.as_deref(), Some(served));
}

#[test]
fn forbidden_keys_and_agent_changes_are_recorded_as_refused_and_clipped() {
    let served = "```json\n{\"reward\": 2, \"agents\": 4, \"sizes\": {\"5\": {\"data_ratio\": 0.3}}}\n```\nMore reward, more agents.";
    let server = FakeServer::start(vec![Script::Chat(served.into())]);
    let (ev, _, _, _) = decide_and_record(&mut engineer(&server.url));
    let refused: Vec<(&str, &str)> = ev
        .refused
        .iter()
        .map(|r| (r.field.as_str(), r.value.as_str()))
        .collect();
    assert_eq!(refused, [("reward", "2")]);
    // The agent count stays; the attempt is a recorded clip.
    assert_eq!(ev.applied.agents, current().agents);
    assert!(
        ev.clips
            .iter()
            .any(|c| c.field == "agents" && c.proposed == "4"),
        "{:?}",
        ev.clips
    );
    assert_eq!(ev.status, DecisionStatus::Clipped);
    assert_eq!(
        ev.applied.sizes[&5].data_ratio, 0.3,
        "the legal part is used"
    );
}

#[test]
fn garbage_is_rejected_and_the_previous_config_kept() {
    let served = "I am sorry, as a language model I prefer poems about frozen lakes.";
    let server = FakeServer::start(vec![Script::Chat(served.into())]);
    let (ev, d, prompt, reply) = decide_and_record(&mut engineer(&server.url));
    assert!(d.error.is_none());
    assert!(d.proposal.is_none());
    assert!(
        matches!(&ev.status, DecisionStatus::Rejected { .. }),
        "{:?}",
        ev.status
    );
    assert_eq!(ev.applied, current(), "the previous configuration stands");
    assert!(ev.clips.is_empty());
    assert!(ev.rationale.contains("reply rejected"), "{}", ev.rationale);
    assert!(
        ev.rationale.contains("poems about frozen lakes"),
        "{}",
        ev.rationale
    );
    assert_eq!(reply.as_deref(), Some(served));
    assert!(prompt.is_some());
}

#[test]
fn http_500_then_success_is_retried() {
    let server = FakeServer::start(vec![
        Script::Status(500, "{\"error\": \"overloaded\"}".into()),
        Script::Chat(GOOD.into()),
    ]);
    let (ev, _, _, reply) = decide_and_record(&mut engineer(&server.url));
    assert_eq!(ev.status, DecisionStatus::Accepted, "{}", ev.rationale);
    assert_eq!(ev.applied.sizes[&4].hole_ratio, 0.2);
    assert_eq!(server.requests().len(), 2);
    assert!(
        ev.rationale
            .contains("llm calls: attempt 1: HTTP 500; attempt 2: ok"),
        "{}",
        ev.rationale
    );
    assert_eq!(reply.as_deref(), Some(GOOD));
}

#[test]
fn a_hang_times_out_after_bounded_attempts_and_is_no_decision() {
    let hang = Script::Hang(Duration::from_secs(3));
    let server = FakeServer::start(vec![hang.clone(), hang.clone(), hang]);
    let started = std::time::Instant::now();
    let u = decide_unanswered(&mut engineer(&server.url));
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "bounded by the timeout"
    );
    assert!(u.cause.contains("after 3 attempt(s)"), "{u}");
    assert!(
        u.cause
            .contains("attempt 1: timed out; attempt 2: timed out; attempt 3: timed out"),
        "{u}"
    );
    assert_eq!(server.requests().len(), 3);
}

#[test]
fn a_refused_connection_is_retried_then_is_no_decision() {
    // A port nothing listens on: bind one, then let it go.
    let url = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let u = decide_unanswered(&mut engineer(&url));
    assert!(u.cause.contains("connection failed"), "{u}");
    assert!(u.cause.contains("attempt 3:"), "retried: {u}");
}

#[test]
fn a_4xx_is_not_retried_and_is_no_decision() {
    let server = FakeServer::start(vec![
        Script::Status(401, "{\"error\": \"bad key\"}".into()),
        Script::Chat(GOOD.into()),
    ]);
    let u = decide_unanswered(&mut engineer(&server.url));
    assert!(u.cause.contains("HTTP 401"), "{u}");
    assert_eq!(server.requests().len(), 1);
}

#[test]
fn the_api_key_is_sent_as_a_bearer_token_and_never_recorded() {
    let var = "MAPF_LEDGER_TEST_KEY_BEARER";
    // Only this test reads or writes this variable.
    std::env::set_var(var, "sk-test-secret-123");
    let server = FakeServer::start(vec![Script::Chat(GOOD.into())]);
    let mut eng = engineer(&server.url);
    eng.registration.api_key_env = Some(var.into());
    let (ev, d, prompt, reply) = decide_and_record(&mut eng);
    assert_eq!(ev.status, DecisionStatus::Accepted);
    let reqs = server.requests();
    let auth = reqs[0]
        .headers
        .iter()
        .find(|(k, _)| k == "authorization")
        .map(|(_, v)| v.clone());
    assert_eq!(auth.as_deref(), Some("Bearer sk-test-secret-123"));
    for text in [
        prompt.unwrap(),
        reply.unwrap(),
        ev.rationale.clone(),
        format!("{d:?}"),
        format!("{ev:?}"),
    ] {
        assert!(!text.contains("sk-test-secret"));
    }
    // A missing key means no call, and no decision.
    let mut eng = engineer(&server.url);
    eng.registration.api_key_env = Some("MAPF_LEDGER_TEST_KEY_NEVER_SET".into());
    let u = decide_unanswered(&mut eng);
    assert!(
        u.cause
            .contains("MAPF_LEDGER_TEST_KEY_NEVER_SET is not set"),
        "{u}"
    );
    assert_eq!(server.requests().len(), 1);
}

fn long_context() -> EngineerContext {
    let mut ctx = context();
    ctx.stage = 4;
    ctx.modules.training_details = true;
    ctx.failures.sizes = (3..=6)
        .map(|n| SizeFailures {
            size: n,
            total: 20,
            counts: vec![],
            examples: (0..3)
                .map(|i| format!("example plan {n}/{i}: {}", "R D L U W ".repeat(60)))
                .collect(),
        })
        .collect();
    ctx.history = (1..=3)
        .map(|s| HistoryEntry {
            stage: s,
            engineer: "myllm".into(),
            previous: current(),
            config: current(),
            validation: ResultTable::default(),
        })
        .collect();
    ctx
}

#[test]
fn the_context_is_trimmed_to_the_window_in_order_and_noted() {
    let ctx = long_context();
    let mut reg = registration("http://127.0.0.1:9/v1");
    let full = llm::prompt_for(&ctx, &reg, first());
    let counter = llm::TokenCounter::Approximate;
    let full_tokens = counter.count(&full);
    // Room for everything but a few example plans: only examples are cut.
    reg.max_context = Some((full_tokens - 300) as u32);
    let p = llm::build_prompt(&ctx, &reg, &counter, first());
    assert!(p.tokens.unwrap() <= full_tokens - 300);
    assert_eq!(p.cut.len(), 1, "{:?}", p.cut);
    assert!(p.cut[0].ends_with("example failing plan(s)"), "{:?}", p.cut);
    assert!(
        p.text().contains("example plan 3/0"),
        "earlier examples stay"
    );
    assert!(
        !p.text().contains("example plan 6/2"),
        "the last example goes first"
    );
    // A tiny window: every example, then all history (oldest first), then training details.
    reg.max_context = Some(200);
    let p = llm::build_prompt(&ctx, &reg, &counter, first());
    assert_eq!(p.cut[0], "12 example failing plan(s)");
    assert_eq!(p.cut[1], "3 history entries (stage 1, 2, 3)");
    assert_eq!(p.cut[2], "training details");
    assert!(p.cut[3].starts_with("nothing more to cut"));
    assert!(!p.text().contains("## Training details"));
    // The engineer records the note with its decision.
    let server = FakeServer::start(vec![Script::Chat(GOOD.into())]);
    let mut eng = engineer(&server.url);
    eng.registration.max_context = Some(200);
    let d = eng.decide(&ctx);
    assert!(
        d.rationale
            .contains("context trimmed to fit 200 tokens: cut 12 example failing plan(s)"),
        "{}",
        d.rationale
    );
    assert_eq!(
        d.prompt.unwrap(),
        llm::prompt_for(&ctx, &eng.registration, first())
    );
}

/// A word-level tokenizer.json: every whitespace-separated word is one token.
const TOKENIZER: &str = r#"{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],"normalizer":null,"pre_tokenizer":{"type":"Whitespace"},"post_processor":null,"decoder":null,"model":{"type":"WordLevel","vocab":{"[UNK]":0},"unk_token":"[UNK]"}}"#;

#[test]
fn tokens_are_counted_with_the_registered_tokenizer() {
    let mut reg = registration("http://127.0.0.1:9/v1");
    reg.tokenizer = Some(TOKENIZER.as_bytes().to_vec());
    let counter = llm::TokenCounter::for_registration(&reg).unwrap();
    assert_eq!(counter.count("three words here"), 3);
    let ctx = long_context();
    let full = llm::build_prompt(&ctx, &reg, &counter, first());
    assert!(full.cut.is_empty());
    let words = counter.count(&full.system) + counter.count(&full.user);
    reg.max_context = Some((words - 50) as u32);
    let p = llm::build_prompt(&ctx, &reg, &counter, first());
    assert!(p.tokens.unwrap() <= words - 50);
    assert_eq!(p.cut, vec!["1 example failing plan(s)".to_string()]);
    assert_eq!(llm::prompt_for(&ctx, &reg, first()), p.text());
}

// ---- the command line ----

/// The `ledger` command with a secret in the environment (which must never be stored).
fn ledger_cmd(dir: &std::path::Path, args: &[&str]) -> Output {
    common::ledger_cmd(dir, args)
        .env("MAPF_LEDGER_TEST_SECRET", "sk-cli-supersecret-42")
        .output()
        .unwrap()
}

fn init(plan: &[u8]) -> (tempfile::TempDir, std::path::PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let plan_path = tmp.path().join("plan.toml");
    std::fs::write(&plan_path, plan).unwrap();
    let dir = tmp.path().join("ledger");
    ok(&ledger_cmd(
        &dir,
        &["init", "--plan", plan_path.to_str().unwrap()],
    ));
    (tmp, dir)
}

#[test]
fn cli_registers_lists_and_never_stores_the_key() {
    let (tmp, dir) = init(DEMO);
    let tok = tmp.path().join("tokenizer.json");
    std::fs::write(&tok, TOKENIZER).unwrap();
    ok(&ledger_cmd(
        &dir,
        &[
            "engineer",
            "add",
            "myllm",
            "--url",
            "http://127.0.0.1:8000/v1",
            "--model",
            "Qwen/Qwen3-8B",
            "--api-key-env",
            "MAPF_LEDGER_TEST_SECRET",
            "--tokenizer",
            tok.to_str().unwrap(),
            "--max-context",
            "32768",
        ],
    ));
    let list: serde_json::Value =
        serde_json::from_str(&ok(&ledger_cmd(&dir, &["engineer", "list", "--json"]))).unwrap();
    validates("engineer-list", &list);
    let rows = list.as_array().unwrap();
    assert_eq!(rows.len(), 1);
    let r = &rows[0];
    assert_eq!(r["name"], "myllm");
    assert_eq!(r["url"], "http://127.0.0.1:8000/v1");
    assert_eq!(r["model"], "Qwen/Qwen3-8B");
    assert_eq!(r["api_key_env"], "MAPF_LEDGER_TEST_SECRET");
    assert_eq!(r["max_context"], 32768);
    assert_eq!(r["tokenizer"].as_str().unwrap().len(), 64);
    assert!(r["context_modules"]
        .as_array()
        .unwrap()
        .contains(&serde_json::json!("failure_breakdown")));
    let text = ok(&ledger_cmd(&dir, &["engineer", "list"]));
    assert!(
        text.contains("myllm") && text.contains("Qwen/Qwen3-8B"),
        "{text}"
    );

    // Input errors exit 2 and name the input.
    let bad: &[(&[&str], &str)] = &[
        (
            &[
                "engineer",
                "add",
                "myllm",
                "--url",
                "http://x:1/v1",
                "--model",
                "m",
            ],
            "already registered",
        ),
        (
            &[
                "engineer",
                "add",
                "heuristic",
                "--url",
                "http://x:1/v1",
                "--model",
                "m",
            ],
            "built-in",
        ),
        (
            &[
                "engineer",
                "add",
                "My LLM",
                "--url",
                "http://x:1/v1",
                "--model",
                "m",
            ],
            "lowercase",
        ),
        (
            &[
                "engineer",
                "add",
                "b",
                "--url",
                "ftp://x:1/v1",
                "--model",
                "m",
            ],
            "--url",
        ),
        (
            &[
                "engineer",
                "add",
                "c",
                "--url",
                "http://x:1/v1",
                "--model",
                "m",
                "--api-key-env",
                "sk-cli-supersecret-42",
            ],
            "--api-key-env",
        ),
        (
            &[
                "engineer",
                "add",
                "d",
                "--url",
                "http://x:1/v1",
                "--model",
                "m",
                "--tokenizer",
                "/nonexistent/tokenizer.json",
            ],
            "--tokenizer",
        ),
    ];
    for (args, needle) in bad {
        let o = ledger_cmd(&dir, args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }

    // The key is nowhere in the ledger: not in the export, not in any file.
    let export = ok(&ledger_cmd(&dir, &["export", "--format", "jsonl"]));
    assert!(export.contains("engineer_registered"));
    assert!(export.contains("MAPF_LEDGER_TEST_SECRET"));
    assert!(!export.contains("sk-cli-supersecret"));
    for entry in files_under(&dir) {
        let bytes = std::fs::read(&entry).unwrap();
        assert!(
            !bytes.windows(9).any(|w| w == b"sk-cli-su"),
            "{} holds the key",
            entry.display()
        );
    }
    ok(&ledger_cmd(&dir, &["verify"]));

    // The stage's engineer factory finds the registration on the branch.
    let ledger = Ledger::open_read_only(&dir).unwrap();
    let state = ledger.state_at(&ledger.head("main").unwrap()).unwrap();
    assert_eq!(state.engineers, vec!["myllm".to_string()]);
    let reg = llm::registered(&ledger, &state, "myllm").unwrap();
    assert_eq!(reg.tokenizer.as_deref(), Some(TOKENIZER.as_bytes()));
    assert_eq!(reg.max_context, Some(32768));
    assert_eq!(reg.endpoint(), "http://127.0.0.1:8000/v1/chat/completions");
}

const TINY: &str = r#"name = "tiny-llm"
seed = 3
policy = "grid"
[initial_config]
agents = 2
[initial_config.sizes.3]
data_ratio = 0.5
hole_ratio = 0.1
wait_ratio = 0.2
[initial_config.sizes.4]
data_ratio = 0.5
hole_ratio = 0.1
wait_ratio = 0.2
[suites]
validation_per_cell = 10
test_per_cell = 5
max_size = 6
[warmup]
steps = 30
batch_size = 32
instances = 256
[grpo]
steps = 6
batch_size = 8
group_size = 4
instances_per_stage = 32
checkpoint_every = 4
[engineer]
name = "fixed"
stages = 1
"#;

#[test]
fn a_run_with_a_garbage_reply_continues_and_verifies() {
    let served = "Sorry, no JSON today.";
    let server = FakeServer::start(vec![Script::Chat(served.into())]);
    let (_tmp, dir) = init(TINY.as_bytes());
    ok(&ledger_cmd(
        &dir,
        &[
            "engineer",
            "add",
            "myllm",
            "--url",
            &server.url,
            "--model",
            "fake",
        ],
    ));
    let o = common::ledger_cmd(
        &dir,
        &["run", "--engineer", "myllm", "--quiet", "--device", "cpu"],
    )
    .env("MAPF_LEDGER_LLM_TIMEOUT_MS", "5000")
    .output()
    .unwrap();
    ok(&o);
    let terminal = common::text(&o);
    assert!(
        terminal.contains("engineer myllm's proposal was not used"),
        "{terminal}"
    );
    assert_eq!(server.requests().len(), 1);
    ok(&ledger_cmd(&dir, &["verify"]));
    let export = ok(&ledger_cmd(&dir, &["export", "--format", "jsonl"]));
    let decision = export
        .lines()
        .find(|l| l.contains("engineer_decision"))
        .expect("a decision event");
    assert!(decision.contains("rejected"), "{decision}");
    assert!(export.contains("stage_completed"));
    let ledger = Ledger::open_read_only(&dir).unwrap();
    let state = ledger.state_at(&ledger.head("main").unwrap()).unwrap();
    let s1 = state.stages.iter().find(|s| s.stage == 1).unwrap();
    assert!(s1.completed.is_some());
    assert_eq!(
        s1.config, state.initial_config,
        "the previous configuration stands"
    );
    assert!(s1
        .decision_status
        .as_deref()
        .is_some_and(|s| s.contains("rejected")));
}

/// A dead endpoint is not a decision, in `run` and in `engineer eval`: `run` stops
/// with an error naming the engineer and the URL, records nothing of the stage (the
/// head is the one before it, and the ledger verifies), and resumes it once the
/// endpoint answers; `engineer eval` fails (exit 1) and writes no score.
#[test]
fn a_dead_endpoint_stops_the_run_and_fails_engineer_eval() {
    let dead = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let (_tmp, dir) = init(TINY.as_bytes());
    ok(&ledger_cmd(
        &dir,
        &["engineer", "add", "dead", "--url", &dead, "--model", "fake"],
    ));
    let o = common::ledger_cmd(
        &dir,
        &["run", "--engineer", "dead", "--quiet", "--device", "cpu"],
    )
    .env("MAPF_LEDGER_LLM_TIMEOUT_MS", "500")
    .output()
    .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("engineer dead did not answer"), "{err}");
    assert!(
        err.contains(&dead) && err.contains("connection failed"),
        "{err}"
    );
    ok(&ledger_cmd(&dir, &["verify"]));
    // Stage 0 (the base model's evaluation, no engineer) is recorded; nothing of stage 1.
    let export = ok(&ledger_cmd(&dir, &["export", "--format", "jsonl"]));
    let stage_1: Vec<serde_json::Value> = export
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|e| e["stage"].as_u64() != Some(0))
        .collect();
    assert!(stage_1.is_empty(), "events past stage 0: {stage_1:?}");
    assert!(export.contains("stage_completed"), "stage 0 completed");
    // engineer eval scores nothing for silence, and says so.
    let o = common::ledger_cmd(
        &dir,
        &[
            "engineer",
            "eval",
            "--engineer",
            "http",
            "--url",
            &dead,
            "--served-model",
            "fake",
            "--contexts",
            "4",
        ],
    )
    .env("MAPF_LEDGER_LLM_TIMEOUT_MS", "500")
    .output()
    .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("engineer http did not answer"), "{err}");
    assert!(err.contains("no engineer eval was written"), "{err}");
    assert!(
        o.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    // Once the endpoint answers, the same run resumes and the stage completes.
    let served = "```json\n{\"sizes\": {}}\n```\nKeep it.";
    let server = FakeServer::start(vec![Script::Chat(served.into())]);
    ok(&ledger_cmd(
        &dir,
        &[
            "engineer",
            "add",
            "alive",
            "--url",
            &server.url,
            "--model",
            "fake",
        ],
    ));
    ok(&ledger_cmd(
        &dir,
        &["run", "--engineer", "alive", "--quiet", "--device", "cpu"],
    ));
    let export = ok(&ledger_cmd(&dir, &["export", "--format", "jsonl"]));
    assert_eq!(export.matches("engineer_decision").count(), 1, "{export}");
    assert!(export.contains("stage_completed"));
}

/// An engineer registered after the stage a fork starts at is the fork's to use: `fork
/// --at stage1 --engineer myllm` records the registration on the fork, whose run then
/// asks that endpoint, and a bundle of the fork carries it to another ledger. A name no
/// branch registered is refused before forking, with the nearest name suggested.
#[test]
fn an_engineer_registered_after_the_fork_point_is_the_forks_to_use() {
    let served = "```json\n{\"sizes\": {}}\n```\nKeep it.";
    let server = FakeServer::start(vec![Script::Chat(served.into())]);
    let (tmp, dir) = init(TINY.as_bytes());
    ok(&ledger_cmd(&dir, &["run", "--quiet", "--device", "cpu"]));
    ok(&ledger_cmd(
        &dir,
        &[
            "engineer",
            "add",
            "myllm",
            "--url",
            &server.url,
            "--model",
            "fake",
        ],
    ));
    // A misspelled name: refused, nothing forked, the nearest name offered.
    let o = ledger_cmd(&dir, &["fork", "--at", "stage1", "--engineer", "mylm"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("unknown engineer \"mylm\"") && err.contains("did you mean `myllm`?"),
        "{err}"
    );
    let branches = ok(&ledger_cmd(&dir, &["branches"]));
    assert!(!branches.contains("mylm"), "{branches}");
    ok(&ledger_cmd(
        &dir,
        &[
            "fork",
            "--at",
            "stage1",
            "--engineer",
            "myllm",
            "--name",
            "f",
        ],
    ));
    let list = ok(&ledger_cmd(&dir, &["engineer", "list", "--branch", "f"]));
    assert!(list.contains("myllm"), "{list}");
    ok(&ledger_cmd(
        &dir,
        &["run", "--branch", "f", "--quiet", "--device", "cpu"],
    ));
    assert_eq!(server.requests().len(), 1, "the fork's stage asked myllm");
    let audit = ok(&ledger_cmd(&dir, &["audit", "--branch", "f"]));
    assert!(audit.contains("myllm"), "{audit}");
    ok(&ledger_cmd(&dir, &["verify"]));
    // The fork's bundle carries the registration.
    let bundle = tmp.path().join("f.bundle");
    ok(&ledger_cmd(
        &dir,
        &["bundle", "--branch", "f", "--out", bundle.to_str().unwrap()],
    ));
    let other = tmp.path().join("other");
    ok(&ledger_cmd(
        &other,
        &["init", "--from-bundle", bundle.to_str().unwrap()],
    ));
    let list = ok(&ledger_cmd(&other, &["engineer", "list", "--branch", "f"]));
    assert!(list.contains("myllm"), "{list}");
}

#[test]
fn sizes_above_the_plans_limit_are_dropped_and_recorded() {
    let served = "```json\n{\"sizes\": {\"12\": {\"data_ratio\": 0.5}, \"6\": {\"data_ratio\": 0.2}}}\n```\nBigger maps.";
    let server = FakeServer::start(vec![Script::Chat(served.into())]);
    let (ev, _, _, _) = decide_and_record(&mut engineer(&server.url));
    assert!(!ev.applied.sizes.contains_key(&12));
    assert_eq!(ev.applied.sizes[&6].data_ratio, 0.2);
    assert!(
        ev.clips
            .iter()
            .any(|c| c.field == "sizes.12" && c.applied == "(dropped)"),
        "{:?}",
        ev.clips
    );
}

/// `ledger engineer eval` benchmarks a served model in one command: every context's
/// prompt reaches the endpoint, each reply is scored, and the report validates against
/// its schema. The built-in engineers score the same contexts the same way every time.
#[test]
fn engineer_eval_scores_an_http_engineer_in_one_command() {
    let tmp = tempfile::tempdir().unwrap();
    let good = "```json\n{\"sizes\": {\"3\": {\"data_ratio\": 0.3, \"hole_ratio\": 0.1, \"wait_ratio\": 0.5}}}\n```\nSize 3 failed 999/1000 times, mostly vertex_conflict.";
    let script: Vec<Script> = (0..6)
        .map(|i| {
            Script::Chat(if i % 2 == 0 {
                good.to_string()
            } else {
                "I would rather not.".to_string()
            })
        })
        .collect();
    let server = FakeServer::start(script);
    let l = tmp.path().join("none");
    let out = common::ledger(
        &l,
        &[
            "engineer",
            "eval",
            "--engineer",
            "fixed,http",
            "--url",
            &server.url,
            "--served-model",
            "fake",
            "--contexts",
            "6",
            "--json",
        ],
    );
    let report: serde_json::Value = serde_json::from_str(&ok(&out)).unwrap();
    validates("engineer-eval", &report);
    let http = &report["engineers"][1];
    assert_eq!(http["engineer"], "http");
    assert_eq!(http["summary"]["contexts"], 6);
    assert_eq!(http["summary"]["parse_pct"], 50.0, "{http}");
    // The rationale cites 999/1000, which no context holds.
    assert_eq!(http["summary"]["grounded_pct"], 0.0, "{}", http["summary"]);
    assert_eq!(http["summary"]["claiming_contexts"], 3);
    let seen = server.requests();
    assert_eq!(
        seen.len(),
        6,
        "one request per context (no retries on a 200)"
    );
    let prompt = seen[0].body["messages"][1]["content"].as_str().unwrap();
    assert!(
        prompt.contains("## Failure breakdown") && prompt.contains("## Answer"),
        "{prompt}"
    );
    assert_eq!(seen[0].body["model"], "fake");
    // Deterministic for a seed; another seed draws other contexts.
    let run = |seed: &str| {
        ok(&common::ledger(
            &l,
            &[
                "engineer",
                "eval",
                "--engineer",
                "fixed,random,heuristic",
                "--contexts",
                "30",
                "--seed",
                seed,
                "--json",
            ],
        ))
    };
    assert_eq!(run("4"), run("4"));
    assert_ne!(run("4"), run("5"));
    let text = ok(&common::ledger(
        &l,
        &[
            "engineer",
            "eval",
            "--engineer",
            "fixed,heuristic",
            "--contexts",
            "30",
        ],
    ));
    assert!(
        text.contains("engineer-eval rules v5")
            && text.contains("heuristic")
            && text.contains("direction"),
        "{text}"
    );
    // Earlier reports' rules stay runnable, by name.
    let v3 = ok(&common::ledger(
        &l,
        &[
            "engineer",
            "eval",
            "--engineer",
            "fixed",
            "--contexts",
            "3",
            "--rules",
            "v3",
        ],
    ));
    assert!(v3.contains("engineer-eval rules v3"), "{v3}");
    let v4 = ok(&common::ledger(
        &l,
        &[
            "engineer",
            "eval",
            "--engineer",
            "fixed",
            "--contexts",
            "3",
            "--rules",
            "v4",
        ],
    ));
    assert!(v4.contains("engineer-eval rules v4"), "{v4}");
    // The default rules' controls: every engineer is paired against blind and random too.
    let both: serde_json::Value = serde_json::from_str(&ok(&common::ledger(
        &l,
        &[
            "engineer",
            "eval",
            "--engineer",
            "teacher-v3,blind,random,heuristic",
            "--contexts",
            "40",
            "--json",
        ],
    )))
    .unwrap();
    validates("engineer-eval", &both);
    assert_eq!(both["rules"], "engineer-eval rules v5");
    let against = |base: &str, eng: &str| {
        both["paired"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["against"] == base && p["engineer"] == eng && p["metric"] == "direction")
    };
    for (base, eng) in [
        ("teacher-v3", "blind"),
        ("blind", "teacher-v3"),
        ("blind", "random"),
        ("random", "blind"),
        ("random", "heuristic"),
    ] {
        assert!(against(base, eng), "no {eng} against {base}");
    }
    // Bad input is named, exit 2.
    for (args, needle) in [
        (vec!["--engineer", "nope"], "not a built-in engineer"),
        (vec!["--engineer", "base"], "needs a model"),
        (vec!["--engineer", "fixed", "--rules", "v9"], "v9"),
        (
            vec!["--engineer", "http"],
            "--url URL and --served-model NAME",
        ),
        (
            vec!["--engineer", "fixed", "--contexts", "0"],
            "no contexts",
        ),
    ] {
        let mut a = vec!["engineer", "eval"];
        a.extend(args);
        let o = common::ledger(&l, &a);
        assert_eq!(
            o.status.code(),
            Some(2),
            "{a:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(
            String::from_utf8_lossy(&o.stderr).contains(needle),
            "{a:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

/// Engineer text revision 2 (`[engineer] revision = 2`): a trimmed module says what was
/// cut, in the prompt itself and within the budget, where revision 1 (every ledger
/// before it) read "none: this is the first designed stage" after cutting history; and
/// a reply naming a size twice is a recorded repair, not a silent last-wins.
#[test]
fn revision_2_prompts_say_what_was_cut_and_duplicate_keys_are_repairs() {
    use mapf_ledger::engineer::reply::{duplicate_keys, read_reply};
    use mapf_ledger::engineer::text::build;
    let rev = |n| TextRevision::of(n).unwrap();
    let ctx = long_context();
    let counter = llm::TokenCounter::Approximate;
    let old = build(&ctx, &[], Some(200), &counter, rev(1));
    assert!(
        old.text()
            .contains("none: this is the first designed stage"),
        "revision 1 is as recorded"
    );
    let new = build(&ctx, &[], Some(200), &counter, rev(2));
    let text = new.text();
    assert!(
        !text.contains("none: this is the first designed stage"),
        "{text}"
    );
    assert!(
        text.contains("3 earlier designed stage(s) omitted to fit the prompt (stage 1, 2, 3)"),
        "{text}"
    );
    assert!(
        text.contains("12 example failing plan(s) omitted to fit the prompt"),
        "{text}"
    );
    assert!(
        text.contains("## Training details (last stage)\nomitted to fit the prompt"),
        "{text}"
    );
    assert!(
        text.contains("## Failure breakdown"),
        "the breakdown is never dropped"
    );
    // The same cuts; the notes themselves cost tokens, which the final count includes.
    assert_eq!(new.cut[..3], old.cut[..3]);
    assert_eq!(
        new.tokens.unwrap(),
        counter.count(&new.system) + counter.count(&new.user)
    );
    // Within the budget, when it can be: a roomier window cuts only what it must.
    let roomy = build(
        &ctx,
        &[],
        Some(counter.count(&old.text()) as u32 + 400),
        &counter,
        rev(2),
    );
    assert!(roomy.tokens.unwrap() <= counter.count(&old.text()) + 400);
    // Untrimmed, both revisions are the same text.
    assert_eq!(
        build(&ctx, &[], None, &counter, rev(1)).text(),
        build(&ctx, &[], None, &counter, rev(2)).text()
    );

    let reply = "```json\n{\"sizes\": {\"10\": {\"wait_ratio\": 0.3}, \"5\": {\"hole_ratio\": 0.1, \"hole_ratio\": 0.2}, \" 10\": {\"wait_ratio\": 0.04}}}\n```\nMore waiting on 10.";
    assert_eq!(
        duplicate_keys(
            "{\"sizes\": {\"10\": {}, \"5\": {\"hole_ratio\": 1, \"hole_ratio\": 2}, \" 10\": {}}}"
        ),
        vec!["sizes.5.hole_ratio", "sizes.10"]
    );
    let mut d1 = mapf_ledger::engineer::Decision::default();
    read_reply(&mut d1, reply, vec![], rev(1));
    let mut d2 = mapf_ledger::engineer::Decision::default();
    read_reply(&mut d2, reply, vec![], rev(2));
    assert_eq!(
        d1.proposal, d2.proposal,
        "the applied values are the same (last wins)"
    );
    assert!(
        !d1.rationale.contains("repaired"),
        "revision 1 is as recorded"
    );
    assert!(
        d2.rationale
            .contains("repaired: the reply names sizes.10 more than once"),
        "{}",
        d2.rationale
    );
    assert!(
        d2.rationale.contains("sizes.5.hole_ratio"),
        "{}",
        d2.rationale
    );
}

/// An HTTP engineer registered without `--max-context` reads the prompt of the plan's
/// text revision, as its reply is read at it (until issue 51 it was sent revision 1's
/// prompt whatever the plan said). Captured behind `engineer eval` on
/// ledgers/pilots/engineer-copy-pilot.toml (revision 5, whose breakdown closes the prompt,
/// weakest last), for an engineer registered on a ledger and for `http`.
#[test]
fn an_http_engineer_without_a_window_reads_the_plans_revision() {
    const PILOT: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/ledgers/pilots/engineer-copy-pilot.toml"
    );
    let plan = mapf_ledger::plan::LedgerPlan::parse(&std::fs::read(PILOT).unwrap()).unwrap();
    let text = TextRevision::of_plan(&plan).unwrap();
    assert!(
        text.breakdown_last,
        "the pilot is at a revision that puts the breakdown last"
    );
    let demo = mapf_ledger::plan::LedgerPlan::parse(DEMO).unwrap();
    assert_ne!(demo.engineer.revision, plan.engineer.revision);
    let demo_at_pilot = String::from_utf8(DEMO.to_vec()).unwrap().replace(
        &format!("\nrevision = {}\n", demo.engineer.revision),
        &format!("\nrevision = {}\n", plan.engineer.revision),
    );
    let (_tmp, dir) = init(demo_at_pilot.as_bytes());
    let server = FakeServer::start(vec![Script::Chat(GOOD.into()); 2]);
    ok(&ledger_cmd(
        &dir,
        &[
            "engineer",
            "add",
            "myllm",
            "--url",
            &server.url,
            "--model",
            "fake",
        ],
    ));
    ok(&ledger_cmd(
        &dir,
        &[
            "engineer",
            "eval",
            "--engineer",
            "myllm,http",
            "--url",
            &server.url,
            "--served-model",
            "fake",
            "--plan",
            PILOT,
            "--contexts",
            "1",
            "--json",
        ],
    ));
    let seen = server.requests();
    assert_eq!(seen.len(), 2, "one request per engineer");
    for s in &seen {
        let user = s.body["messages"][1]["content"].as_str().unwrap();
        // What only a breakdown-last revision renders: its answer format, then the
        // breakdown's lines weakest last, closing the prompt.
        assert!(
            user.contains("taken from its line of the failure breakdown below"),
            "{user}"
        );
        let tail = user.split("## Failure breakdown").last().unwrap();
        assert!(
            tail.starts_with(" (validation, val), weakest last\n"),
            "{user}"
        );
    }
}
