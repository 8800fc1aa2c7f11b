//! Export: the JSON form of events ([`EventRecord`], one per line) and a flat CSV view.
use super::event::{Event, EventBody};
use super::hash::Hash;
use super::meta::Meta;
use super::store::Ledger;
use super::LedgerError;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::io::Write;

/// The JSON form of a stored event: its id, the event, and its (unhashed) metadata.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EventRecord {
    pub hash: Hash,
    pub parent: Option<Hash>,
    pub stage: u32,
    pub body: EventBody,
    pub meta: Meta,
}

impl EventRecord {
    pub fn new(hash: Hash, event: Event, meta: Meta) -> EventRecord {
        EventRecord {
            hash,
            parent: event.parent,
            stage: event.stage,
            body: event.body,
            meta,
        }
    }

    /// The event itself (without id and metadata).
    pub fn event(&self) -> Event {
        Event {
            parent: self.parent,
            stage: self.stage,
            body: self.body.clone(),
        }
    }
}

/// Export formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Jsonl,
    Csv,
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// Write events (a branch's history oldest first, or every stored event in storage
/// order) to `out`. Returns the number written.
pub fn export(
    ledger: &Ledger,
    branch: Option<&str>,
    format: Format,
    out: &mut dyn Write,
) -> Result<u64, LedgerError> {
    let hashes: Vec<Hash> = match branch {
        Some(b) => {
            let mut v = ledger.ancestry(&ledger.head(b)?)?;
            v.reverse();
            v
        }
        None => ledger
            .all_events()
            .map(|r| r.map(|(h, _)| h))
            .collect::<Result<_, _>>()?,
    };
    let io = |e: std::io::Error| LedgerError::Io {
        path: "<output>".into(),
        message: e.to_string(),
    };
    if format == Format::Csv {
        writeln!(out, "hash,parent,stage,kind,summary").map_err(io)?;
    }
    for h in &hashes {
        let (event, meta) = ledger.event_with_meta(h)?;
        match format {
            Format::Jsonl => {
                let rec = EventRecord::new(*h, event, meta);
                serde_json::to_writer(&mut *out, &rec).map_err(|e| io(e.into()))?;
                out.write_all(b"\n").map_err(io)?;
            }
            Format::Csv => {
                writeln!(
                    out,
                    "{},{},{},{},{}",
                    h,
                    event.parent.map(|p| p.to_hex()).unwrap_or_default(),
                    event.stage,
                    event.body.kind(),
                    csv_field(&event.body.summary())
                )
                .map_err(io)?;
            }
        }
    }
    Ok(hashes.len() as u64)
}
