//! `Recorder`: how the pipeline writes to a branch. Events are collected and appended in
//! durable batches (`flush`), blobs are stored immediately (so a flushed event never
//! references a missing blob), and every event gets the same run metadata (threads,
//! device) plus its own wall time. Nothing recorded here is hashed except the events.
use crate::ledger::{EventBody, Hash, Ledger, LedgerError, Meta};

pub struct Recorder<'a> {
    ledger: &'a mut Ledger,
    branch: String,
    base_meta: Meta,
    pending: Vec<(EventBody, u32, Meta)>,
    /// Events appended so far by this recorder.
    pub appended: Vec<Hash>,
}

impl<'a> Recorder<'a> {
    pub fn new(ledger: &'a mut Ledger, branch: &str, base_meta: Meta) -> Recorder<'a> {
        Recorder {
            ledger,
            branch: branch.to_string(),
            base_meta,
            pending: Vec::new(),
            appended: Vec::new(),
        }
    }

    pub fn ledger(&self) -> &Ledger {
        self.ledger
    }

    pub fn branch(&self) -> &str {
        &self.branch
    }

    /// Store a blob now (durable before any event that names it is flushed).
    pub fn blob(&mut self, bytes: &[u8]) -> Result<Hash, LedgerError> {
        self.ledger.put_blob(bytes)
    }

    /// Queue an event of `stage`.
    pub fn push(&mut self, stage: u32, body: EventBody) {
        let mut meta = self.base_meta.clone();
        meta.wall_time_ms = Meta::now().wall_time_ms;
        self.pending.push((body, stage, meta));
    }

    /// Queue an event with extra metadata (e.g. a duration).
    pub fn push_with(&mut self, stage: u32, body: EventBody, edit: impl FnOnce(&mut Meta)) {
        self.push(stage, body);
        if let Some(last) = self.pending.last_mut() {
            edit(&mut last.2);
        }
    }

    /// Append everything queued as one durable batch; returns the new event ids.
    pub fn flush(&mut self) -> Result<Vec<Hash>, LedgerError> {
        if self.pending.is_empty() {
            return Ok(Vec::new());
        }
        let items = std::mem::take(&mut self.pending);
        let ids = self.ledger.append(&self.branch, items)?;
        self.appended.extend_from_slice(&ids);
        Ok(ids)
    }

    /// Events queued but not yet durable.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }
}
