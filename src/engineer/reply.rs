//! Reading an engineer's reply, for every engineer that writes text (HTTP or
//! in-process): `<think>` blocks are dropped, a fenced JSON block is preferred, else the
//! first balanced JSON object that reads as a proposal; keys no engineer may set are
//! refused with their values; the prose around the JSON is the rationale. An unparseable
//! reply yields no proposal (the stage records a rejection and keeps the previous
//! configuration).
use super::text::TextRevision;
use super::Decision;
use crate::env::{ConfigProposal, RefusedField};

/// What [`extract`] found in a reply.
#[derive(Clone, Debug, PartialEq)]
pub struct Extracted {
    pub proposal: ConfigProposal,
    /// Keys the engineer may not set, with their values (recorded, never applied).
    pub refused: Vec<RefusedField>,
    /// The JSON object as the model wrote it.
    pub json: String,
    /// The prose outside the JSON (and outside `<think>` blocks), trimmed.
    pub rationale: String,
}

/// Why a reply yields no proposal. Its text is recorded in the stage's rejection (a hashed
/// rationale), so the wording below is part of every recorded ledger: change it only with
/// a new text revision.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{why}; reply began {began:?}{ellipsis}")]
pub struct UnreadableReply {
    pub why: Unreadable,
    /// The reply's first 120 characters, trimmed.
    pub began: String,
    /// `…` when the reply is longer than `began`.
    ellipsis: &'static str,
}

/// What was missing from an unreadable reply.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Unreadable {
    #[error("the reply has nothing outside <think> blocks")]
    OnlyThinking,
    #[error("no JSON object in the reply")]
    NoJson,
    /// Objects were found; the first three reasons each was refused.
    #[error("no usable JSON object in the reply ({})", .0.join("; "))]
    NoUsableJson(Vec<String>),
}

/// Parse a reply into a proposal (see [`extract`]).
pub fn extract_proposal(reply: &str) -> Result<ConfigProposal, UnreadableReply> {
    extract(reply).map(|e| e.proposal)
}

/// The proposal keys a reply may use: `all` (every size at once) from
/// [`TextRevision::whole_configuration`] on; before, it is a key no engineer may set,
/// refused as it always was, so recorded replies read as they did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Keys {
    pub all: bool,
}

impl Keys {
    /// The keys of text revision `text`.
    pub fn of(text: TextRevision) -> Keys {
        Keys {
            all: text.whole_configuration,
        }
    }

    /// The keys before `all`.
    pub const FIRST: Keys = Keys { all: false };

    fn is_proposal_key(self, k: &str) -> bool {
        k == "agents" || k == "sizes" || (self.all && k == "all")
    }
}

/// Drop `<think>…</think>` blocks: a `</think>` without an opening tag ends reasoning
/// that started in the prompt (everything before it goes), and an unclosed `<think>`
/// runs to the end of the reply.
pub fn strip_think(reply: &str) -> String {
    let mut s = reply.to_string();
    if let (Some(close), open) = (s.find("</think>"), s.find("<think>")) {
        if open.is_none_or(|o| o > close) {
            s = s[close + "</think>".len()..].to_string();
        }
    }
    let mut out = String::new();
    let mut rest = s.as_str();
    while let Some(o) = rest.find("<think>") {
        out.push_str(&rest[..o]);
        let after = &rest[o + "<think>".len()..];
        match after.find("</think>") {
            Some(c) => rest = &after[c + "</think>".len()..],
            None => {
                rest = "";
                break;
            }
        }
    }
    out.push_str(rest);
    out
}

/// Fenced code blocks: (byte range of the whole fence, language tag, body).
fn fences(text: &str) -> Vec<(std::ops::Range<usize>, String, String)> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(o) = text[from..].find("```") {
        let start = from + o;
        let after = start + 3;
        let line_end = text[after..]
            .find('\n')
            .map(|i| after + i)
            .unwrap_or(text.len());
        let lang = text[after..line_end].trim().to_ascii_lowercase();
        let body_start = (line_end + 1).min(text.len());
        match text[body_start..].find("```") {
            Some(c) => {
                let end = body_start + c + 3;
                out.push((
                    start..end,
                    lang,
                    text[body_start..body_start + c].to_string(),
                ));
                from = end;
            }
            None => break,
        }
    }
    out
}

/// The byte range of the balanced `{...}` starting at `start` (strings and escapes
/// respected), if it closes.
fn balanced(text: &str, start: usize) -> Option<std::ops::Range<usize>> {
    let bytes = text.as_bytes();
    let (mut depth, mut in_str, mut esc) = (0usize, false, false);
    for (i, &b) in bytes.iter().enumerate().skip(start) {
        if in_str {
            match (esc, b) {
                (true, _) => esc = false,
                (false, b'\\') => esc = true,
                (false, b'"') => in_str = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_str = true,
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(start..i + 1);
                }
            }
            _ => {}
        }
    }
    None
}

/// Why one JSON text is not a proposal. Pushed into [`Unreadable::NoUsableJson`]'s
/// reasons as its text, which is recorded in the stage's rejection (a hashed rationale):
/// each wording is part of every recorded ledger, byte for byte. The JSON reader's
/// error is kept typed but is not a `source()`: the text quotes it inside parentheses,
/// where a printed chain would write it a second time.
#[derive(Debug, thiserror::Error)]
pub enum NotAProposal {
    #[error("not JSON ({0})")]
    NotJson(serde_json::Error),
    #[error("not a JSON object ({0})")]
    NotAnObject(serde_json::Value),
    /// An object with neither proposal key; `found`: its keys, in its order.
    #[error("no \"sizes\" or \"agents\" key (found {})", found_keys(.found))]
    NoProposalKey { found: Vec<String> },
    /// [`NotAProposal::NoProposalKey`] where `all` is a proposal key too (text revision
    /// 7 on).
    #[error("no \"sizes\", \"all\" or \"agents\" key (found {})", found_keys(.found))]
    NoWholeProposalKey { found: Vec<String> },
    #[error("not a configuration proposal ({0})")]
    NotAConfiguration(serde_json::Error),
}

/// The keys of [`NotAProposal::NoProposalKey`] as its text lists them.
fn found_keys(keys: &[String]) -> String {
    if keys.is_empty() {
        "an empty object".to_string()
    } else {
        keys.iter()
            .map(|k| format!("{k:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Read a JSON text as a proposal: `{"agents"?, "sizes"?}`, that object wrapped as
/// `{"config": {...}}` or `{"proposal": {...}}`, or a bare map of sizes
/// (`{"5": {...}}`). Other keys make it not a proposal.
pub fn parse_proposal(json: &str) -> Result<(ConfigProposal, Vec<RefusedField>), NotAProposal> {
    parse_proposal_with(json, Keys::FIRST)
}

/// [`parse_proposal`] with the proposal keys `keys` (with `all`: `{"all": {...}}` sets
/// its fields at every size).
pub fn parse_proposal_with(
    json: &str,
    keys: Keys,
) -> Result<(ConfigProposal, Vec<RefusedField>), NotAProposal> {
    let v: serde_json::Value = serde_json::from_str(json.trim()).map_err(NotAProposal::NotJson)?;
    let mut obj = match v {
        serde_json::Value::Object(o) => o,
        other => return Err(NotAProposal::NotAnObject(other)),
    };
    for wrapper in ["config", "proposal"] {
        if obj.len() == 1 && obj.get(wrapper).is_some_and(|x| x.is_object()) {
            if let Some(serde_json::Value::Object(inner)) = obj.remove(wrapper) {
                obj = inner;
            }
            break;
        }
    }
    if !obj.is_empty() && obj.keys().all(|k| k.trim().parse::<u32>().is_ok()) {
        let mut wrapped = serde_json::Map::new();
        wrapped.insert("sizes".into(), serde_json::Value::Object(obj));
        obj = wrapped;
    }
    // Keys an engineer may not set (`reward`, `validation_set`, anything else) are
    // taken out and returned as refused fields: recorded with the decision, never
    // applied and never silently dropped. An object with no proposal key at all is not
    // a proposal (prose may quote other JSON).
    if !obj.is_empty() && !obj.keys().any(|k| keys.is_proposal_key(k)) {
        let found = obj.keys().cloned().collect();
        return Err(if keys.all {
            NotAProposal::NoWholeProposalKey { found }
        } else {
            NotAProposal::NoProposalKey { found }
        });
    }
    let mut refused = Vec::new();
    let unknown: Vec<String> = obj
        .keys()
        .filter(|k| !keys.is_proposal_key(k))
        .cloned()
        .collect();
    for k in unknown {
        let v = obj.remove(&k).expect("listed above");
        refused.push(RefusedField {
            field: k,
            value: v.to_string(),
        });
    }
    let refuse_fields = |fields: &mut serde_json::Map<String, serde_json::Value>,
                         at: &str,
                         refused: &mut Vec<RefusedField>| {
        let bad: Vec<String> = fields
            .keys()
            .filter(|f| !["data_ratio", "hole_ratio", "wait_ratio"].contains(&f.as_str()))
            .cloned()
            .collect();
        for f in bad {
            let v = fields.remove(&f).expect("listed above");
            refused.push(RefusedField {
                field: format!("{at}.{f}"),
                value: v.to_string(),
            });
        }
    };
    if let Some(serde_json::Value::Object(sizes)) = obj.get_mut("sizes") {
        for (n, v) in sizes.iter_mut() {
            if let serde_json::Value::Object(fields) = v {
                refuse_fields(fields, &format!("sizes.{n}"), &mut refused);
            }
        }
    }
    if let Some(serde_json::Value::Object(fields)) = obj.get_mut("all") {
        refuse_fields(fields, "all", &mut refused);
    }
    let proposal = serde_json::from_value(serde_json::Value::Object(obj))
        .map_err(NotAProposal::NotAConfiguration)?;
    Ok((proposal, refused))
}

/// The text around the JSON at `cut`: both sides trimmed, joined by a blank line.
fn prose(text: &str, cut: std::ops::Range<usize>) -> String {
    let parts: Vec<&str> = [text[..cut.start].trim(), text[cut.end..].trim()]
        .into_iter()
        .filter(|p| !p.is_empty())
        .collect();
    parts.join("\n\n")
}

/// Extract a proposal from a model reply: drop `<think>` blocks, prefer a fenced JSON
/// block (```json first, then unlabelled fences), else the first balanced `{...}` that
/// reads as a proposal. The rationale is the remaining prose. The error says why
/// nothing usable was found, quoting the start of the reply.
pub fn extract(reply: &str) -> Result<Extracted, UnreadableReply> {
    extract_with(reply, Keys::FIRST)
}

/// [`extract`] with the proposal keys `keys`.
pub fn extract_with(reply: &str, keys: Keys) -> Result<Extracted, UnreadableReply> {
    let text = strip_think(reply);
    let mut reasons: Vec<String> = Vec::new();
    let fenced = fences(&text);
    let mut ordered: Vec<&(std::ops::Range<usize>, String, String)> =
        fenced.iter().filter(|f| f.1 == "json").collect();
    ordered.extend(fenced.iter().filter(|f| f.1 != "json"));
    for (range, _, body) in ordered {
        match parse_proposal_with(body, keys) {
            Ok((p, refused)) => {
                return Ok(Extracted {
                    proposal: p,
                    refused,
                    json: body.trim().to_string(),
                    rationale: prose(&text, range.clone()),
                })
            }
            Err(e) => reasons.push(format!("fenced block: {e}")),
        }
    }
    // Every '{' starts a candidate (at most MAX_CANDIDATES, so a pathological reply
    // stays cheap); an unclosed one does not hide a complete object after it.
    const MAX_CANDIDATES: usize = 256;
    let mut from = 0;
    let mut tried = 0;
    while let Some(o) = text[from..].find('{') {
        let start = from + o;
        from = start + 1;
        tried += 1;
        if tried > MAX_CANDIDATES {
            break;
        }
        match balanced(&text, start) {
            Some(r) => match parse_proposal_with(&text[r.clone()], keys) {
                Ok((p, refused)) => {
                    return Ok(Extracted {
                        proposal: p,
                        refused,
                        json: text[r.clone()].to_string(),
                        rationale: prose(&text, r),
                    })
                }
                Err(e) => reasons.push(e.to_string()),
            },
            None => {
                if !reasons.iter().any(|r| r == "an unclosed '{'") {
                    reasons.push("an unclosed '{'".into());
                }
            }
        }
    }
    let began: String = reply.trim().chars().take(120).collect();
    let ellipsis = if reply.trim().chars().count() > 120 {
        "…"
    } else {
        ""
    };
    let why = if text.trim().is_empty() && !reply.trim().is_empty() {
        Unreadable::OnlyThinking
    } else if reasons.is_empty() {
        Unreadable::NoJson
    } else {
        reasons.truncate(3);
        Unreadable::NoUsableJson(reasons)
    };
    Err(UnreadableReply {
        why,
        began,
        ellipsis,
    })
}

/// Keys a JSON object names twice, as dotted paths (`sizes.10`): a map's keys compared
/// as written, and a size's number as read (`"10"` and `" 10"` are one size). JSON
/// readers keep the last value of a repeated key without a word, so an engineer's
/// repeated key has to be found before that.
pub fn duplicate_keys(json: &str) -> Vec<String> {
    use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
    use std::cell::RefCell;
    struct Walk<'a> {
        path: String,
        found: &'a RefCell<Vec<String>>,
    }
    impl<'de> DeserializeSeed<'de> for Walk<'_> {
        type Value = ();
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_any(self)
        }
    }
    impl<'de> Visitor<'de> for Walk<'_> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("JSON")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            let mut seen = std::collections::BTreeSet::new();
            while let Some(k) = map.next_key::<String>()? {
                let key = match k.trim().parse::<u64>() {
                    Ok(n) => n.to_string(),
                    Err(_) => k.clone(),
                };
                let path = if self.path.is_empty() {
                    key.clone()
                } else {
                    format!("{}.{key}", self.path)
                };
                if !seen.insert(key) {
                    self.found.borrow_mut().push(path.clone());
                }
                map.next_value_seed(Walk {
                    path,
                    found: self.found,
                })?;
            }
            Ok(())
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            while seq
                .next_element_seed(Walk {
                    path: self.path.clone(),
                    found: self.found,
                })?
                .is_some()
            {}
            Ok(())
        }
        fn visit_bool<E>(self, _: bool) -> Result<(), E> {
            Ok(())
        }
        fn visit_i64<E>(self, _: i64) -> Result<(), E> {
            Ok(())
        }
        fn visit_u64<E>(self, _: u64) -> Result<(), E> {
            Ok(())
        }
        fn visit_f64<E>(self, _: f64) -> Result<(), E> {
            Ok(())
        }
        fn visit_str<E>(self, _: &str) -> Result<(), E> {
            Ok(())
        }
        fn visit_unit<E>(self) -> Result<(), E> {
            Ok(())
        }
    }
    let found = RefCell::new(Vec::new());
    let mut de = serde_json::Deserializer::from_str(json.trim());
    // The JSON already parsed as a proposal; a failure here finds nothing more.
    let _ = Walk {
        path: String::new(),
        found: &found,
    }
    .deserialize(&mut de);
    found.into_inner()
}

/// Fill a decision from a reply: the extracted proposal and its rationale followed by
/// `notes`, or a rejection naming why nothing usable was found. Every engineer that
/// writes text (HTTP or in-process) goes through here, at the plan's text revision:
/// with [`TextRevision::repairs_duplicate_keys`] a key the reply names twice is a
/// recorded repair (the last value is used, as JSON readers do, and the rationale says
/// so), never a silent last-wins.
pub fn read_reply(d: &mut Decision, reply: &str, mut notes: Vec<String>, text: TextRevision) {
    let keys = Keys::of(text);
    if text.repairs_duplicate_keys {
        if let Ok(e) = extract_with(reply, keys) {
            for path in duplicate_keys(&e.json) {
                notes.push(format!(
                    "repaired: the reply names {path} more than once; its last value was used"
                ));
            }
        }
    }
    match extract_with(reply, keys) {
        Ok(e) => {
            d.proposal = Some(e.proposal);
            d.refused = e.refused;
            d.proposed_text = Some(e.json);
            d.rationale = std::iter::once(e.rationale)
                .filter(|r| !r.is_empty())
                .chain(notes)
                .collect::<Vec<_>>()
                .join("\n\n");
        }
        Err(e) => {
            d.rationale = std::iter::once(format!("reply rejected: {e}"))
                .chain(notes)
                .collect::<Vec<_>>()
                .join("\n");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sizes(p: &ConfigProposal) -> Vec<(String, Option<f64>)> {
        p.sizes
            .iter()
            .map(|(k, v)| (k.clone(), v.hole_ratio))
            .collect()
    }

    /// Why an object is not a proposal is recorded (in the rejection's hashed rationale):
    /// each wording stays byte for byte what it was when the reasons were strings.
    #[test]
    fn reasons_keep_their_recorded_wording() {
        let why = |reply: &str| extract(reply).unwrap_err().to_string();
        assert_eq!(
            why("```json\n[1]\n```\n```\nnope\n```\n{\"reward\": 1, \"b\": 2}"),
            "no usable JSON object in the reply (fenced block: not a JSON object ([1]); \
             fenced block: not JSON (expected ident at line 1 column 2); \
             no \"sizes\" or \"agents\" key (found \"b\", \"reward\")); \
             reply began \"```json\\n[1]\\n```\\n```\\nnope\\n```\\n{\\\"reward\\\": 1, \\\"b\\\": 2}\""
        );
        assert_eq!(
            why("x {\"sizes\": 5}"),
            "no usable JSON object in the reply (not a configuration proposal (invalid type: \
             integer `5`, expected a map)); reply began \"x {\\\"sizes\\\": 5}\""
        );
        assert_eq!(found_keys(&[]), "an empty object");
    }

    /// `all` is a proposal key from text revision 7 on; before, it is refused as any
    /// unknown key was, and alone it is no proposal, so recorded replies read as they did.
    #[test]
    fn all_is_read_from_revision_7_and_refused_before() {
        use crate::engineer::text::TextRevision;
        let rev = |n| Keys::of(TextRevision::of(n).unwrap());
        let whole = r#"x ```json
{"all": {"wait_ratio": 0.75, "reward": 1}, "sizes": {"4": {"hole_ratio": 0.1}}}
```"#;
        let e = extract_with(whole, rev(7)).unwrap();
        assert_eq!(e.proposal.all.as_ref().unwrap().wait_ratio, Some(0.75));
        assert_eq!(e.proposal.sizes["4"].hole_ratio, Some(0.1));
        assert_eq!(e.refused.len(), 1);
        assert_eq!(e.refused[0].field, "all.reward");
        for n in 1..=6 {
            let e = extract_with(whole, rev(n)).unwrap();
            assert_eq!(e.proposal.all, None);
            assert_eq!(e.refused[0].field, "all");
            let alone = extract_with(r#"{"all": {"wait_ratio": 0.75}}"#, rev(n)).unwrap_err();
            assert!(
                alone
                    .to_string()
                    .contains(r#"no "sizes" or "agents" key (found "all")"#),
                "{alone}"
            );
        }
        let none = extract_with(r#"{"al": {"wait_ratio": 0.75}}"#, rev(7)).unwrap_err();
        assert!(
            none.to_string()
                .contains(r#"no "sizes", "all" or "agents" key"#),
            "{none}"
        );
    }

    #[test]
    fn plain_json_object() {
        let e = extract(r#"{"sizes": {"5": {"hole_ratio": 0.2}}}"#).unwrap();
        assert_eq!(sizes(&e.proposal), vec![("5".into(), Some(0.2))]);
        assert_eq!(e.rationale, "");
    }

    #[test]
    fn think_then_fenced_json_then_prose() {
        let r = "<think>maybe {\"sizes\": {\"3\": {\"hole_ratio\": 0.4}}}? no.</think>\n```json\n{\"sizes\": {\"6\": {\"hole_ratio\": 0.05}}}\n```\nSize 6 fails on holes.";
        let e = extract(r).unwrap();
        assert_eq!(sizes(&e.proposal), vec![("6".into(), Some(0.05))]);
        assert_eq!(e.rationale, "Size 6 fails on holes.");
        assert!(e.json.starts_with('{'));
    }

    #[test]
    fn closing_think_without_opening_and_unclosed_think() {
        let r = "reasoning {\"sizes\":{\"3\":{}}} ...</think>{\"agents\": 2}";
        assert_eq!(extract_proposal(r).unwrap().agents, Some(2.0));
        let r = "<think>I think {\"agents\": 3} but I ran out of tokens";
        let err = extract(r).unwrap_err();
        assert_eq!(err.why, Unreadable::OnlyThinking);
        assert!(err.to_string().contains("outside <think>"), "{err}");
    }

    #[test]
    fn prose_around_json_and_braces_in_strings() {
        let r =
            "Here is my plan: {\"sizes\": {\"4\": {\"wait_ratio\": 0.5}}} because {waits} matter.";
        let e = extract(r).unwrap();
        assert_eq!(e.proposal.sizes["4"].wait_ratio, Some(0.5));
        assert!(e.rationale.starts_with("Here is my plan:"));
        assert!(e.rationale.ends_with("because {waits} matter."));
        let r = "{\"note\": \"}\"} then {\"sizes\": {\"4\": {\"hole_ratio\": 0.1}}}";
        assert_eq!(
            extract_proposal(r).unwrap().sizes["4"].hole_ratio,
            Some(0.1)
        );
    }

    #[test]
    fn wrapped_and_bare_size_maps() {
        let p = extract_proposal(r#"{"config": {"sizes": {"5": {"data_ratio": 0.3}}}}"#).unwrap();
        assert_eq!(p.sizes["5"].data_ratio, Some(0.3));
        let p = extract_proposal(r#"{"proposal": {"agents": 2}}"#).unwrap();
        assert_eq!(p.agents, Some(2.0));
        let p = extract_proposal(r#"{"5": {"hole_ratio": 0.3}, "6": {}}"#).unwrap();
        assert_eq!(p.sizes.len(), 2);
        assert_eq!(extract_proposal("{}").unwrap(), ConfigProposal::default());
    }

    #[test]
    fn fence_preference_and_unlabelled_fences() {
        let r = "```\n{\"agents\": 3}\n```\n```json\n{\"agents\": 2}\n```";
        assert_eq!(extract_proposal(r).unwrap().agents, Some(2.0));
        let r = "```\n{\"agents\": 3}\n```";
        assert_eq!(extract_proposal(r).unwrap().agents, Some(3.0));
        let r = "```JSON\n{\"sizes\": {\"3\": {\"hole_ratio\": 0}}}\n```";
        assert_eq!(
            extract_proposal(r).unwrap().sizes["3"].hole_ratio,
            Some(0.0)
        );
        // A broken fence falls through to a balanced object in the prose.
        let r = "```json\n{\"sizes\": \n```\nso: {\"agents\": 2}";
        assert_eq!(extract_proposal(r).unwrap().agents, Some(2.0));
    }

    #[test]
    fn forbidden_keys_are_refused_with_their_values_and_the_rest_is_used() {
        let e = extract(
            "```json\n{\"reward\": 2, \"sizes\": {\"5\": {\"hole_ratio\": 0.1, \"agents\": 4}}, \"validation_set\": [1]}\n```",
        )
        .unwrap();
        assert_eq!(sizes(&e.proposal), vec![("5".to_string(), Some(0.1))]);
        let refused: Vec<(&str, &str)> = e
            .refused
            .iter()
            .map(|r| (r.field.as_str(), r.value.as_str()))
            .collect();
        assert_eq!(
            refused,
            [
                ("reward", "2"),
                ("validation_set", "[1]"),
                ("sizes.5.agents", "4")
            ]
        );
        // A misspelt field is refused, not guessed.
        let e = extract("{\"sizes\": {\"5\": {\"holes\": 0.2}}}").unwrap();
        assert_eq!(e.refused[0].field, "sizes.5.holes");
        // An object with no proposal key is prose, not a proposal.
        assert!(extract("As {\"note\": 1} says, nothing.").is_err());
    }

    #[test]
    fn garbage_is_an_error_naming_the_reply() {
        for r in [
            "I cannot help with that.",
            "",
            "{not json}",
            "{\"foo\": 1}",
            "{\"sizes\": {\"5\": {\"hole_ratio\": \"lots\"}}}",
            "[1, 2, 3]",
            "{\"sizes\": {",
        ] {
            let err = extract_proposal(r).unwrap_err().to_string();
            assert!(err.contains("reply began"), "{r:?}: {err}");
        }
        let err = extract_proposal("The weather is nice").unwrap_err();
        assert_eq!(err.why, Unreadable::NoJson);
        assert_eq!(
            err.to_string(),
            "no JSON object in the reply; reply began \"The weather is nice\""
        );
    }
}
