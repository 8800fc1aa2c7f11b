//! `ledger export --format tensorboard --out DIR`: one run directory per branch holding
//! a TensorBoard event file of scalars, so TensorBoard (and the tools that import its
//! files) can plot a ledger's runs side by side.
//!
//! What is written, per branch (a run named after the branch):
//! - per GRPO step, at the global optimiser step: `train/reward_mean`, `reward_std`,
//!   `kl`, `clip_fraction`, `zero_variance_share`, `valid_pct`, `optimal_pct`,
//!   `coordination_valid_pct` (when the batch had such instances) from `grpo_stats` and
//!   `trajectories`; `train/loss`, `policy_loss`, `entropy`, `grad_norm` from
//!   `gradient_step`;
//! - per engineer-RL step (`engineer_training`), at its global step: `engineer/reward_mean`,
//!   `parsed_pct`, `legal_pct`, `grounded_pct`, `learnability` (mean over the replies
//!   probed), `loss`, `grad_norm`;
//! - per stage evaluation, at the last optimiser step of the stage (0 before any): valid
//!   and optimal % of every group of [`super::paired::groups_with`]:
//!   `val/2_agents/valid`, `test/3_agents/wait0.25/optimal`, `test/3_agents/coord/valid`
//!   (the same groups `compare` and `study` pair), and `stage` itself;
//! - per stage recorded with a timing (the unhashed metadata of its completion, see
//!   [`super::timing`]), at the same step: `timing/wall_seconds`, and per phase
//!   `timing/{phase}/seconds`, `timing/{phase}/share` (of the wall time) and, where it
//!   sampled or scored tokens, `timing/{phase}/tokens_per_second`.
//!
//! The format is TensorBoard's record file: each record is its length (u64, little
//! endian), the masked CRC-32C of those 8 bytes, the payload, and the payload's masked
//! CRC-32C; each payload is a `tensorflow.Event` protocol buffer. The three messages
//! used (`Event`, `Summary`, `Summary.Value` with `simple_value`) are encoded by hand
//! below: six fields, where a protobuf code generator would add a build step for nothing.
//! Wall times are the events' recorded metadata (unhashed), so the files are the same
//! bytes for the same ledger. [`read_scalars`] reads such a file back, checking framing
//! and both CRCs.
use super::coordination::RecordedSuite;
use super::paired::groups_with;
use crate::ledger::{EventBody, Hash, Ledger, LedgerError, StageState};
use crate::record::event::{EngineerTraining, GradientStep};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One scalar point of a run.
#[derive(Clone, Debug, PartialEq)]
pub struct Scalar {
    pub tag: String,
    pub step: i64,
    pub value: f32,
    /// Seconds since the Unix epoch (the source event's recorded wall time; 0 if none).
    pub wall_time: f64,
}

/// The event file's name inside a run directory (fixed, so an export run again
/// replaces its file instead of adding a second one TensorBoard would read twice).
pub const FILE_NAME: &str = "events.out.tfevents.0.mapf-ledger";

/// Every scalar of the branch whose head is `head`, in recorded order: GRPO's batches,
/// then the optimiser steps, then each stage's timing and evaluations (the module doc
/// lists the tags).
pub fn branch_scalars(
    ledger: &Ledger,
    branch: &str,
    head: &Hash,
) -> Result<Vec<Scalar>, LedgerError> {
    let mut out = Run::default();
    push_batches(&mut out, ledger, branch, head)?;
    let step_of_stage = push_optimiser_steps(&mut out, ledger, head)?;
    // Evaluations: every group of every stage's latest outcomes per suite.
    let suites = super::coordination::suite_items(ledger, head)?;
    let state = ledger.state_at(head)?;
    for st in &state.stages {
        let step = step_of_stage.get(&st.stage).copied().unwrap_or(0);
        push_stage_timing(&mut out, ledger, st, step)?;
        push_stage_evaluations(&mut out, ledger, st, step, &suites)?;
    }
    Ok(out.scalars)
}

/// The scalars of one run, gathered in the order they are written.
#[derive(Default)]
struct Run {
    scalars: Vec<Scalar>,
}

impl Run {
    fn push(&mut self, tag: &str, step: u64, value: f64, wall_time: f64) {
        self.scalars.push(Scalar {
            tag: tag.to_string(),
            step: step as i64,
            value: value as f32,
            wall_time,
        })
    }
}

/// Seconds since the epoch of a recorded wall time in milliseconds (0 if none).
fn seconds(wall_time_ms: Option<u64>) -> f64 {
    wall_time_ms.map_or(0.0, |ms| ms as f64 / 1000.0)
}

/// The recorded wall time of event `h`, in seconds (0 if none).
fn wall(ledger: &Ledger, h: &Hash) -> Result<f64, LedgerError> {
    Ok(seconds(ledger.event_with_meta(h)?.1.wall_time_ms))
}

/// Training, step by step: each GRPO batch's rewards, KL, clipping and outcomes.
fn push_batches(
    out: &mut Run,
    ledger: &Ledger,
    branch: &str,
    head: &Hash,
) -> Result<(), LedgerError> {
    for r in super::steps::step_rows(ledger, branch, head)? {
        let w = wall(ledger, &r.event)?;
        out.push("train/reward_mean", r.step, r.reward_mean, w);
        out.push("train/reward_std", r.step, r.reward_std, w);
        out.push("train/kl", r.step, r.kl, w);
        out.push("train/clip_fraction", r.step, r.clip_fraction, w);
        out.push(
            "train/zero_variance_share",
            r.step,
            r.zero_variance_share,
            w,
        );
        out.push("train/valid_pct", r.step, r.valid_pct, w);
        out.push("train/optimal_pct", r.step, r.optimal_pct, w);
        if let Some(c) = r.coordination_valid_pct {
            out.push("train/coordination_valid_pct", r.step, c, w);
        }
    }
    Ok(())
}

/// The optimiser steps (the planner's and engineer RL's), in history order. Returns
/// the global step each stage's evaluations belong to: the last step up to the end of
/// the stage.
fn push_optimiser_steps(
    out: &mut Run,
    ledger: &Ledger,
    head: &Hash,
) -> Result<BTreeMap<u32, u64>, LedgerError> {
    let history = ledger.history_to(head)?;
    let mut step_of_stage = BTreeMap::new();
    let mut last = 0u64;
    for (h, ev) in &history {
        if let EventBody::GradientStep(g) = &ev.body {
            push_gradient_step(out, g, wall(ledger, h)?);
            last = last.max(g.step);
        }
        if let EventBody::EngineerTraining(t) = &ev.body {
            push_engineer_step(out, t, wall(ledger, h)?);
            last = last.max(t.step);
        }
        step_of_stage.insert(ev.stage, last);
    }
    Ok(step_of_stage)
}

/// A planner `gradient_step`: loss, policy loss, entropy and gradient norm.
fn push_gradient_step(out: &mut Run, g: &GradientStep, w: f64) {
    let f = f64::from_bits;
    out.push("train/loss", g.step, f(g.loss), w);
    out.push("train/policy_loss", g.step, f(g.policy_loss), w);
    out.push("train/entropy", g.step, f(g.entropy), w);
    out.push("train/grad_norm", g.step, f(g.grad_norm), w);
}

/// An `engineer_training` step: reward, the shares of replies parsed, legal and
/// grounded, the mean learnability of those probed, loss and gradient norm.
fn push_engineer_step(out: &mut Run, t: &EngineerTraining, w: f64) {
    let f = f64::from_bits;
    let n = t.replies.len().max(1) as f64;
    let pct = |x: usize| 100.0 * x as f64 / n;
    out.push("engineer/reward_mean", t.step, t.reward_mean(), w);
    out.push(
        "engineer/parsed_pct",
        t.step,
        pct(t.replies.iter().filter(|r| r.parsed).count()),
        w,
    );
    out.push(
        "engineer/legal_pct",
        t.step,
        pct(t.replies.iter().filter(|r| r.legal).count()),
        w,
    );
    out.push(
        "engineer/grounded_pct",
        t.step,
        pct(t.replies.iter().filter(|r| r.grounded).count()),
        w,
    );
    let probed: Vec<f64> = t
        .replies
        .iter()
        .filter_map(|r| r.learnability.map(f))
        .collect();
    if !probed.is_empty() {
        out.push(
            "engineer/learnability",
            t.step,
            probed.iter().sum::<f64>() / probed.len() as f64,
            w,
        );
    }
    out.push("engineer/loss", t.step, f(t.loss), w);
    out.push("engineer/grad_norm", t.step, f(t.grad_norm), w);
}

/// Where the stage's time went, when its completion carries a timing (unhashed
/// metadata): wall seconds, and per phase its seconds, share and token rate.
fn push_stage_timing(
    out: &mut Run,
    ledger: &Ledger,
    st: &StageState,
    step: u64,
) -> Result<(), LedgerError> {
    let Some(h) = &st.completed else {
        return Ok(());
    };
    let (_, meta) = ledger.event_with_meta(h)?;
    let Some(t) = &meta.timing else {
        return Ok(());
    };
    let w = seconds(meta.wall_time_ms);
    out.push("timing/wall_seconds", step, t.wall_seconds, w);
    for p in &t.phases {
        out.push(&format!("timing/{}/seconds", p.name), step, p.seconds, w);
        if t.wall_seconds > 0.0 {
            let share = p.seconds / t.wall_seconds;
            out.push(&format!("timing/{}/share", p.name), step, share, w);
        }
        if let Some(n) = p.sampled_tokens.filter(|_| p.seconds > 0.0) {
            let rate = n as f64 / p.seconds;
            out.push(
                &format!("timing/{}/tokens_per_second", p.name),
                step,
                rate,
                w,
            );
        }
    }
    Ok(())
}

/// The stage's number (once, at its first evaluation), then valid and optimal % of
/// every group of each suite's latest outcomes.
fn push_stage_evaluations(
    out: &mut Run,
    ledger: &Ledger,
    st: &StageState,
    step: u64,
    suites: &BTreeMap<String, RecordedSuite>,
) -> Result<(), LedgerError> {
    let mut first = true;
    for (suite, h) in &st.outcome_events {
        let EventBody::EvaluationOutcomes(o) = ledger.event(h)?.body else {
            continue;
        };
        let w = wall(ledger, h)?;
        if first {
            out.push("stage", step, st.stage as f64, w);
            first = false;
        }
        let flags: Option<Vec<bool>> = suites
            .get(suite)
            .filter(|s| s.items.len() == o.outcomes.len())
            .map(|s| s.items.iter().map(|i| i.needs_coordination).collect());
        for g in groups_with(&o, flags.as_deref()) {
            let items: Vec<u8> = g.cells.iter().flatten().map(|&i| o.outcomes[i]).collect();
            if items.is_empty() {
                continue;
            }
            let n = items.len() as f64;
            let valid = items
                .iter()
                .filter(|&&b| b >= crate::record::event::OUTCOME_VALID)
                .count();
            let optimal = items
                .iter()
                .filter(|&&b| b == crate::record::event::OUTCOME_OPTIMAL)
                .count();
            let base = match &g.subset {
                Some(s) => format!("{}/{}_agents/{s}", g.suite, g.agents),
                None => format!("{}/{}_agents", g.suite, g.agents),
            };
            out.push(&format!("{base}/valid"), step, 100.0 * valid as f64 / n, w);
            out.push(
                &format!("{base}/optimal"),
                step,
                100.0 * optimal as f64 / n,
                w,
            );
        }
    }
    Ok(())
}

// ---- the record format ----

/// TensorFlow's masked CRC-32C (a CRC of data that holds CRCs is weak, so it is
/// rotated and offset).
fn masked_crc(bytes: &[u8]) -> u32 {
    let c = crc32c::crc32c(bytes);
    c.rotate_right(15).wrapping_add(0xa282_ead8)
}

fn varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A length-delimited protobuf field.
fn bytes_field(field: u32, bytes: &[u8], out: &mut Vec<u8>) {
    varint(((field << 3) | 2) as u64, out);
    varint(bytes.len() as u64, out);
    out.extend_from_slice(bytes);
}

/// `tensorflow.Event { wall_time = 1 (double), step = 2 (int64), file_version = 3 or
/// summary = 5 }`.
fn event_payload(
    wall_time: f64,
    step: i64,
    file_version: Option<&str>,
    summary: Option<&[u8]>,
) -> Vec<u8> {
    let mut e = Vec::new();
    e.push(0x09); // field 1, 64-bit
    e.extend_from_slice(&wall_time.to_le_bytes());
    if step != 0 {
        e.push(0x10); // field 2, varint
        varint(step as u64, &mut e);
    }
    if let Some(v) = file_version {
        bytes_field(3, v.as_bytes(), &mut e);
    }
    if let Some(s) = summary {
        bytes_field(5, s, &mut e);
    }
    e
}

/// `Summary { value = 1: Summary.Value { tag = 1 (string), simple_value = 2 (float) } }`.
fn summary_payload(tag: &str, value: f32) -> Vec<u8> {
    let mut v = Vec::new();
    bytes_field(1, tag.as_bytes(), &mut v);
    v.push(0x15); // field 2, 32-bit
    v.extend_from_slice(&value.to_le_bytes());
    let mut s = Vec::new();
    bytes_field(1, &v, &mut s);
    s
}

fn record(payload: &[u8], out: &mut Vec<u8>) {
    let len = (payload.len() as u64).to_le_bytes();
    out.extend_from_slice(&len);
    out.extend_from_slice(&masked_crc(&len).to_le_bytes());
    out.extend_from_slice(payload);
    out.extend_from_slice(&masked_crc(payload).to_le_bytes());
}

/// The event file's bytes: the file-version event, then one event per scalar.
pub fn event_file(scalars: &[Scalar]) -> Vec<u8> {
    let mut out = Vec::new();
    let start = scalars
        .iter()
        .map(|s| s.wall_time)
        .find(|&w| w > 0.0)
        .unwrap_or(0.0);
    record(
        &event_payload(start, 0, Some("brain.Event:2"), None),
        &mut out,
    );
    for s in scalars {
        record(
            &event_payload(
                s.wall_time,
                s.step,
                None,
                Some(&summary_payload(&s.tag, s.value)),
            ),
            &mut out,
        );
    }
    out
}

// ---- reading back ----

/// What is wrong in an event file read back ([`read_scalars`]), naming the record and
/// its offset, or the protobuf field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EventFileError {
    #[error("varint runs past the end")]
    VarintPastEnd,
    #[error("varint longer than 10 bytes")]
    VarintTooLong,
    #[error("field {0} runs past the end")]
    FieldPastEnd(u32),
    #[error("field {field}: unsupported wire type {wire}")]
    WireType { field: u32, wire: u8 },
    #[error("record {record} at byte {at}: truncated header")]
    TruncatedHeader { record: usize, at: usize },
    #[error("record {record} at byte {at}: length CRC mismatch")]
    LengthCrc { record: usize, at: usize },
    #[error("record {record} at byte {at}: truncated payload")]
    TruncatedPayload { record: usize, at: usize },
    #[error("record {record} at byte {at}: truncated payload CRC")]
    TruncatedPayloadCrc { record: usize, at: usize },
    #[error("record {record} at byte {at}: payload CRC mismatch")]
    PayloadCrc { record: usize, at: usize },
    /// A record's event message does not parse.
    #[error("record {record}: {source}")]
    Record {
        record: usize,
        #[source]
        source: Box<EventFileError>,
    },
    /// The event's wall time is not 8 bytes.
    #[error("wall_time")]
    WallTime,
    /// A summary value's `simple_value` is not 4 bytes.
    #[error("simple_value")]
    SimpleValue,
    /// A summary value's tag is not UTF-8.
    #[error("{0}")]
    Tag(#[from] std::string::FromUtf8Error),
}

fn read_varint(b: &[u8], at: &mut usize) -> Result<u64, EventFileError> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *b.get(*at).ok_or(EventFileError::VarintPastEnd)?;
        *at += 1;
        v |= ((byte & 0x7f) as u64) << shift;
        if byte & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(EventFileError::VarintTooLong)
}

/// One protobuf field: (field number, wire type, varint value, bytes of a length-delimited one).
type Field<'a> = (u32, u8, u64, &'a [u8]);

/// The fields of one protobuf message.
fn fields(b: &[u8]) -> Result<Vec<Field<'_>>, EventFileError> {
    let mut at = 0;
    let mut out = Vec::new();
    while at < b.len() {
        let key = read_varint(b, &mut at)?;
        let (field, wire) = ((key >> 3) as u32, (key & 7) as u8);
        let take = |at: &mut usize, n: usize| -> Result<&[u8], EventFileError> {
            let s = b
                .get(*at..*at + n)
                .ok_or(EventFileError::FieldPastEnd(field))?;
            *at += n;
            Ok(s)
        };
        match wire {
            0 => out.push((field, wire, read_varint(b, &mut at)?, &b[0..0])),
            1 => out.push((field, wire, 0, take(&mut at, 8)?)),
            5 => out.push((field, wire, 0, take(&mut at, 4)?)),
            2 => {
                let n = read_varint(b, &mut at)? as usize;
                out.push((field, wire, 0, take(&mut at, n)?));
            }
            wire => return Err(EventFileError::WireType { field, wire }),
        }
    }
    Ok(out)
}

/// The scalars of an event file, checking every record's framing and both CRCs (the
/// file-version record is checked and skipped). Errors name the record and offset.
pub fn read_scalars(file: &[u8]) -> Result<Vec<Scalar>, EventFileError> {
    let mut at = 0usize;
    let mut out = Vec::new();
    let mut n = 0usize;
    while at < file.len() {
        let head = file
            .get(at..at + 12)
            .ok_or(EventFileError::TruncatedHeader { record: n, at })?;
        let len_bytes = &head[..8];
        let len = u64::from_le_bytes(len_bytes.try_into().expect("8 bytes")) as usize;
        if u32::from_le_bytes(head[8..12].try_into().expect("4 bytes")) != masked_crc(len_bytes) {
            return Err(EventFileError::LengthCrc { record: n, at });
        }
        let payload = file
            .get(at + 12..at + 12 + len)
            .ok_or(EventFileError::TruncatedPayload { record: n, at })?;
        let crc = file
            .get(at + 12 + len..at + 16 + len)
            .ok_or(EventFileError::TruncatedPayloadCrc { record: n, at })?;
        if u32::from_le_bytes(crc.try_into().expect("4 bytes")) != masked_crc(payload) {
            return Err(EventFileError::PayloadCrc { record: n, at });
        }
        let mut wall_time = 0.0;
        let mut step = 0i64;
        let mut value = None;
        for (field, _, v, bytes) in fields(payload).map_err(|e| EventFileError::Record {
            record: n,
            source: Box::new(e),
        })? {
            match field {
                1 => {
                    wall_time =
                        f64::from_le_bytes(bytes.try_into().map_err(|_| EventFileError::WallTime)?)
                }
                2 => step = v as i64,
                5 => {
                    for (f, _, _, val) in fields(bytes)? {
                        if f != 1 {
                            continue;
                        }
                        let (mut tag, mut x) = (None, None);
                        for (vf, _, _, vb) in fields(val)? {
                            match vf {
                                1 => tag = Some(String::from_utf8(vb.to_vec())?),
                                2 => {
                                    x = Some(f32::from_le_bytes(
                                        vb.try_into().map_err(|_| EventFileError::SimpleValue)?,
                                    ))
                                }
                                _ => {}
                            }
                        }
                        if let (Some(tag), Some(x)) = (tag, x) {
                            value = Some((tag, x));
                        }
                    }
                }
                _ => {}
            }
        }
        if let Some((tag, value)) = value {
            out.push(Scalar {
                tag,
                step,
                value,
                wall_time,
            });
        }
        at += 16 + len;
        n += 1;
    }
    Ok(out)
}

/// One branch's run as written.
#[derive(Clone, Debug, serde::Serialize)]
pub struct RunWritten {
    pub branch: String,
    pub file: PathBuf,
    pub scalars: usize,
}

/// Why `export --format tensorboard` has nowhere to write.
#[derive(Debug, thiserror::Error)]
pub enum OutDirError {
    /// A `--what` (named here) given with it.
    #[error("--what {0} does not apply to --format tensorboard, which writes every scalar (training steps and evaluations); leave --what out")]
    What(String),
    #[error("--format tensorboard writes a directory of runs: name it with --out DIR")]
    Missing,
    #[error("--out {}: not a directory (TensorBoard runs are written as directories under it)", .0.display())]
    NotADirectory(PathBuf),
}

/// The directory `--out` names for runs, before any work: given, and a directory or
/// not there yet; and no `--what` (`what`: its name), since every scalar is written.
pub fn out_dir(what: Option<String>, out: Option<&Path>) -> Result<&Path, OutDirError> {
    if let Some(w) = what {
        return Err(OutDirError::What(w));
    }
    let dir = out.ok_or(OutDirError::Missing)?;
    if dir.exists() && !dir.is_dir() {
        return Err(OutDirError::NotADirectory(dir.to_path_buf()));
    }
    Ok(dir)
}

/// Write one run directory per branch (`branch`, or every branch) under `dir`. Each
/// file is written to a temporary name and renamed, so a reader never sees half of one.
pub fn export(
    ledger: &Ledger,
    branch: Option<&str>,
    dir: &Path,
) -> Result<Vec<RunWritten>, LedgerError> {
    let io = |p: &Path, e: std::io::Error| {
        LedgerError::Store(ledger_store::StoreError::Io {
            path: p.to_path_buf(),
            message: e.to_string(),
        })
    };
    let branches: Vec<(String, Hash)> = match branch {
        Some(b) => vec![(b.to_string(), ledger.head_of(b)?)],
        None => ledger.branches()?,
    };
    let mut written = Vec::new();
    for (name, head) in branches {
        let scalars = branch_scalars(ledger, &name, &head)?;
        // Branch names are path-safe (the ledger refuses `..`, empty parts and
        // backslashes); `study/x` becomes a nested run, as TensorBoard shows it.
        let run = dir.join(&name);
        std::fs::create_dir_all(&run).map_err(|e| io(&run, e))?;
        let file = run.join(FILE_NAME);
        let tmp = run.join(format!(".{FILE_NAME}.tmp"));
        std::fs::write(&tmp, event_file(&scalars)).map_err(|e| io(&tmp, e))?;
        std::fs::rename(&tmp, &file).map_err(|e| io(&file, e))?;
        written.push(RunWritten {
            branch: name,
            file,
            scalars: scalars.len(),
        });
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalars_round_trip_and_damage_is_named() {
        let s = vec![
            Scalar {
                tag: "train/reward_mean".into(),
                step: 7,
                value: 1.25,
                wall_time: 1_700_000_000.5,
            },
            Scalar {
                tag: "val/2_agents/valid".into(),
                step: 300,
                value: 76.0,
                wall_time: 1_700_000_100.0,
            },
        ];
        let bytes = event_file(&s);
        assert_eq!(read_scalars(&bytes).unwrap(), s);
        // The first record is TensorBoard's file-version event, byte for byte.
        assert_eq!(&bytes[12..13], &[0x09]);
        let text = String::from_utf8_lossy(&bytes);
        assert!(text.contains("brain.Event:2"));
        let mut bad = bytes.clone();
        let last = bad.len() - 6;
        bad[last] ^= 1;
        assert!(read_scalars(&bad)
            .unwrap_err()
            .to_string()
            .contains("payload CRC mismatch"));
        assert!(read_scalars(&bytes[..bytes.len() - 2])
            .unwrap_err()
            .to_string()
            .contains("truncated"));
    }

    #[test]
    fn crc32c_is_castagnoli() {
        // The check value of CRC-32C ("123456789"), and TensorFlow's mask.
        assert_eq!(crc32c::crc32c(b"123456789"), 0xe306_9283);
        assert_eq!(
            masked_crc(b""),
            0u32.rotate_right(15).wrapping_add(0xa282_ead8)
        );
    }
}
