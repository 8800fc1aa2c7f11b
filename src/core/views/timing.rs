//! `ledger show BRANCH@stageN --timing [--json]`: where a stage's time went, from the
//! [`StageTiming`] in the unhashed metadata of its `stage_completed` event, as a
//! [`TimingReport`] (schema `schemas/show-timing.json`) and its text table: per phase the
//! seconds, share of the stage's wall time, tokens and tokens/s, and on a GPU whose
//! memory bandwidth is known the share of the memory roofline its decoding reached.
use crate::ledger::{Hash, Ledger, LedgerError};
use crate::record::meta::Meta;
use crate::record::timing::{gpu_bandwidth, StageTiming};
use schemars::JsonSchema;
use serde::Serialize;
use std::collections::BTreeMap;

/// A stage's timing with shares, rates and roofline figures.
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
pub struct TimingReport {
    pub branch: String,
    pub stage: u32,
    /// The `stage_completed` event whose metadata holds the timing.
    pub event: Hash,
    /// The device the stage ran on, as its metadata records it (`cpu`, `cuda`, `cuda:1`).
    pub device: Option<String>,
    /// The compute dtype (`f32`, `bf16`).
    pub compute_dtype: Option<String>,
    /// The GPU's model name, when it ran on CUDA and the driver named it.
    pub gpu: Option<String>,
    /// The environment variables set that chose kernels (cuDNN's attention order,
    /// TF32, ...: see `record::meta::KERNEL_ENV_PREFIX`), by name: they move timings as
    /// well as bits.
    pub kernel_env: BTreeMap<String, String>,
    /// The GPU's peak memory bandwidth in bytes/s, when the GPU is in the table
    /// ([`gpu_bandwidth`]); None on the CPU or for an unknown GPU.
    pub bandwidth_bytes_per_second: Option<f64>,
    /// The timing covers only the part of the stage run by the process that completed
    /// it (the stage was resumed).
    pub resumed: bool,
    pub wall_seconds: f64,
    /// The phases' seconds together, and the wall time they leave out (the glue between
    /// phases: records, progress, projections).
    pub covered_seconds: f64,
    pub unaccounted_seconds: f64,
    pub phases: Vec<PhaseRow>,
}

/// One phase of a [`TimingReport`].
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
pub struct PhaseRow {
    pub name: String,
    pub seconds: f64,
    /// Seconds over the stage's wall time (0..1).
    pub share: f64,
    pub calls: u64,
    pub sampled_tokens: Option<u64>,
    pub prefilled_tokens: Option<u64>,
    /// Sampled (or scored) tokens per second of the phase.
    pub tokens_per_second: Option<f64>,
    pub decode_steps: Option<u64>,
    pub decode_bytes: Option<u64>,
    /// The decoding's memory roofline time: its bytes over the GPU's bandwidth.
    pub roofline_seconds: Option<f64>,
    /// Roofline time over the phase's seconds: the share of the memory roofline the
    /// phase's decoding reached (a lower bound, since its bytes are; the phase's time
    /// includes its prefill and scoring). None off a GPU or where bytes or bandwidth are
    /// unknown.
    pub roofline_share: Option<f64>,
}

/// Why a stage has no timing to show.
#[derive(Debug, thiserror::Error)]
pub enum TimingError {
    #[error("{0}")]
    Ledger(#[from] LedgerError),
    #[error("branch `{branch}` has no stage {stage} (it has stages {have})")]
    NoStage {
        branch: String,
        stage: u32,
        have: String,
    },
    #[error(
        "{branch}@stage{stage} has not completed: a stage's timing is recorded with its completion"
    )]
    NotCompleted { branch: String, stage: u32 },
    #[error("{branch}@stage{stage} has no timing: it was recorded by a build before stage timings (its completion event {event} carries none)")]
    NotRecorded {
        branch: String,
        stage: u32,
        event: String,
    },
}

/// `ledger show REF --timing`: the timing of the stage `reference` names
/// (`BRANCH@stageN`; anything else is [`LedgerError::NotAStage`]).
pub fn timing_of(ledger: &Ledger, reference: &str) -> Result<TimingReport, TimingError> {
    let (branch, stage) = ledger.stage_of(reference, "--timing shows one stage's phases")?;
    stage_timing(ledger, &branch, stage)
}

/// The timing of `branch`'s stage `stage`.
pub fn stage_timing(
    ledger: &Ledger,
    branch: &str,
    stage: u32,
) -> Result<TimingReport, TimingError> {
    let head = ledger.head_of(branch)?;
    let state = ledger.state_at(&head)?;
    let st = state.stage(stage).ok_or_else(|| TimingError::NoStage {
        branch: branch.to_string(),
        stage,
        have: state
            .stages
            .iter()
            .map(|s| s.stage.to_string())
            .collect::<Vec<_>>()
            .join(", "),
    })?;
    let event = st.completed.ok_or_else(|| TimingError::NotCompleted {
        branch: branch.to_string(),
        stage,
    })?;
    let (_, meta) = ledger.event_with_meta(&event)?;
    let timing = meta
        .timing
        .clone()
        .ok_or_else(|| TimingError::NotRecorded {
            branch: branch.to_string(),
            stage,
            event: event.short(),
        })?;
    Ok(report(branch, stage, event, &meta, &timing))
}

/// A [`TimingReport`] of `timing`, recorded with `meta` on event `event`.
pub fn report(
    branch: &str,
    stage: u32,
    event: Hash,
    meta: &Meta,
    timing: &StageTiming,
) -> TimingReport {
    let bandwidth = bandwidth_of(meta.device.as_deref(), timing.gpu.as_deref());
    let covered = timing.covered_seconds();
    TimingReport {
        branch: branch.to_string(),
        stage,
        event,
        device: meta.device.clone(),
        compute_dtype: meta.versions.get("compute_dtype").cloned(),
        gpu: timing.gpu.clone(),
        kernel_env: meta.kernel_env(),
        bandwidth_bytes_per_second: bandwidth,
        resumed: timing.resumed,
        wall_seconds: timing.wall_seconds,
        covered_seconds: covered,
        unaccounted_seconds: timing.wall_seconds - covered,
        phases: phase_rows(timing, bandwidth),
    }
}

/// The memory bandwidth a roofline is computed with: the table's figure for `gpu`
/// ([`gpu_bandwidth`]) when `device` is CUDA (`cuda`, `cuda:N`); None otherwise.
pub fn bandwidth_of(device: Option<&str>, gpu: Option<&str>) -> Option<f64> {
    let on_gpu = device.is_some_and(|d| d.starts_with("cuda"));
    gpu.filter(|_| on_gpu).and_then(gpu_bandwidth)
}

/// Every phase of `timing` with its share of the wall time, tokens/s and, given the
/// GPU's memory `bandwidth`, its roofline. A bench that timed one GRPO step with
/// `train::timing::Phases` prints these through [`render_table`].
pub fn phase_rows(timing: &StageTiming, bandwidth: Option<f64>) -> Vec<PhaseRow> {
    let wall = timing.wall_seconds;
    let ratio = |x: f64, of: f64| if of > 0.0 { x / of } else { 0.0 };
    timing
        .phases
        .iter()
        .map(|p| {
            let roofline_seconds = match (p.decode_bytes, bandwidth) {
                (Some(b), Some(bw)) => Some(b as f64 / bw),
                _ => None,
            };
            PhaseRow {
                name: p.name.clone(),
                seconds: p.seconds,
                share: ratio(p.seconds, wall),
                calls: p.calls,
                sampled_tokens: p.sampled_tokens,
                prefilled_tokens: p.prefilled_tokens,
                tokens_per_second: p
                    .sampled_tokens
                    .filter(|_| p.seconds > 0.0)
                    .map(|t| t as f64 / p.seconds),
                decode_steps: p.decode_steps,
                decode_bytes: p.decode_bytes,
                roofline_seconds,
                roofline_share: roofline_seconds
                    .filter(|_| p.seconds > 0.0)
                    .map(|r| r / p.seconds),
            }
        })
        .collect()
}

/// The report as the text `show --timing` prints.
pub fn render(r: &TimingReport) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let device = r.device.as_deref().unwrap_or("unknown device");
    let dtype = r
        .compute_dtype
        .as_deref()
        .map(|d| format!(", {d}"))
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "{}@stage{} timing ({device}{dtype}; recorded with {})",
        r.branch,
        r.stage,
        r.event.short()
    );
    let on_gpu = device.starts_with("cuda");
    if on_gpu {
        let _ = writeln!(
            out,
            "GPU {}; memory bandwidth {}",
            r.gpu
                .as_deref()
                .unwrap_or("n/a (its name was not recorded)"),
            match r.bandwidth_bytes_per_second {
                Some(b) => format!("{:.2} TB/s", b / 1e12),
                None => "n/a (not in the table)".into(),
            }
        );
    }
    if !r.kernel_env.is_empty() {
        let _ = writeln!(
            out,
            "kernel variables: {}",
            crate::record::meta::describe_kernel_env(&r.kernel_env)
        );
    }
    let _ = writeln!(
        out,
        "wall {:.3} s; the phases cover {:.3} s ({:.1}%), {:.3} s between them{}",
        r.wall_seconds,
        r.covered_seconds,
        100.0
            * if r.wall_seconds > 0.0 {
                r.covered_seconds / r.wall_seconds
            } else {
                0.0
            },
        r.unaccounted_seconds,
        if r.resumed {
            "\n(resumed: only the part run by the process that completed the stage)"
        } else {
            ""
        }
    );
    out.push('\n');
    out.push_str(&render_table(&r.phases, on_gpu));
    out
}

/// The phase table of [`render`]: one line per phase, with a roofline column when
/// `on_gpu` (`n/a` where the bandwidth or the bytes are unknown).
pub fn render_table(phases: &[PhaseRow], on_gpu: bool) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = write!(
        out,
        "{:<16} {:>10} {:>7} {:>6} {:>11} {:>11} {:>11}",
        "phase", "seconds", "share", "calls", "sampled", "prefilled", "tokens/s"
    );
    if on_gpu {
        let _ = write!(out, " {:>9}", "roofline");
    }
    out.push('\n');
    let count = |x: Option<u64>| x.map(thousands).unwrap_or_else(|| "-".into());
    for p in phases {
        let _ = write!(
            out,
            "{:<16} {:>10.3} {:>6.1}% {:>6} {:>11} {:>11} {:>11}",
            p.name,
            p.seconds,
            100.0 * p.share,
            p.calls,
            count(p.sampled_tokens),
            count(p.prefilled_tokens),
            p.tokens_per_second
                .map(|t| thousands(t.round() as u64))
                .unwrap_or_else(|| "-".into())
        );
        if on_gpu {
            let cell = match (p.decode_bytes, p.roofline_share) {
                (None, _) => "-".to_string(),
                (Some(_), Some(s)) => percent(s),
                (Some(_), None) => "n/a".to_string(),
            };
            let _ = write!(out, " {cell:>9}");
        }
        out.push('\n');
    }
    if on_gpu {
        out.push_str(
            "\nroofline: the decoding's weight and key/value-cache reads over the GPU's memory \
             bandwidth, as a share of the phase's time (a lower bound)\n",
        );
    }
    out
}

/// A share as a percentage readable at any size: `37.5%`, `0.042%`, `<0.001%`.
fn percent(share: f64) -> String {
    let p = 100.0 * share;
    if p >= 1.0 {
        format!("{p:.1}%")
    } else if p >= 0.001 {
        format!("{p:.3}%")
    } else {
        "<0.001%".into()
    }
}

/// `n` with thousands separators (`12,345`).
fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::timing::Phase;

    fn timing(gpu: Option<&str>) -> StageTiming {
        StageTiming {
            wall_seconds: 10.0,
            phases: vec![
                Phase {
                    name: "generation".into(),
                    seconds: 4.0,
                    calls: 2,
                    sampled_tokens: Some(8000),
                    prefilled_tokens: Some(1200),
                    decode_steps: Some(300),
                    decode_bytes: Some(2_680_000_000_000),
                },
                Phase {
                    name: "optimiser".into(),
                    seconds: 5.5,
                    calls: 2,
                    ..Phase::default()
                },
            ],
            resumed: false,
            gpu: gpu.map(str::to_string),
        }
    }

    fn meta(device: &str) -> Meta {
        let mut m = Meta {
            device: Some(device.into()),
            ..Meta::default()
        };
        m.versions.insert("compute_dtype".into(), "bf16".into());
        m
    }

    #[test]
    fn shares_rates_and_roofline_on_a_known_gpu() {
        let t = timing(Some("NVIDIA H100 80GB HBM3"));
        let r = report("main", 1, Hash([7; 32]), &meta("cuda"), &t);
        assert_eq!(r.bandwidth_bytes_per_second, Some(3.35e12));
        assert_eq!(r.covered_seconds, 9.5);
        assert!((r.unaccounted_seconds - 0.5).abs() < 1e-12);
        let g = &r.phases[0];
        assert_eq!(g.share, 0.4);
        assert_eq!(g.tokens_per_second, Some(2000.0));
        // 2.68e12 bytes at 3.35e12 B/s: 0.8 s of a 4 s phase.
        assert!((g.roofline_seconds.unwrap() - 0.8).abs() < 1e-9);
        assert!((g.roofline_share.unwrap() - 0.2).abs() < 1e-9);
        assert_eq!(r.phases[1].roofline_share, None);
        let text = render(&r);
        assert!(
            text.contains("GPU NVIDIA H100 80GB HBM3; memory bandwidth 3.35 TB/s"),
            "{text}"
        );
        assert!(text.contains("20.0%"), "{text}");
        assert!(text.contains("8,000") && text.contains("2,000"), "{text}");
        assert!(!text.contains("kernel variables"), "{text}");
        // A stage timed under a kernel variable says so: it moves timings.
        let mut m = meta("cuda");
        m.versions
            .insert("env:TORCH_CUDNN_SDPA_DEPRIORITIZED".into(), "1".into());
        let text = render(&report("main", 1, Hash([7; 32]), &m, &t));
        assert!(
            text.contains("kernel variables: TORCH_CUDNN_SDPA_DEPRIORITIZED=1"),
            "{text}"
        );
    }

    #[test]
    fn no_roofline_guessed_off_a_known_gpu() {
        // An unknown GPU: n/a, not a guess.
        let r = report(
            "main",
            1,
            Hash([7; 32]),
            &meta("cuda:0"),
            &timing(Some("Mystery X")),
        );
        assert_eq!(r.bandwidth_bytes_per_second, None);
        assert_eq!(r.phases[0].roofline_share, None);
        let text = render(&r);
        assert!(
            text.contains("n/a (not in the table)") && text.contains("n/a"),
            "{text}"
        );
        // The CPU: no roofline column at all.
        let r = report("main", 1, Hash([7; 32]), &meta("cpu"), &timing(None));
        assert_eq!(r.phases[0].roofline_seconds, None);
        assert!(!render(&r).contains("roofline"));
    }

    #[test]
    fn percentages_stay_readable_when_small() {
        assert_eq!(percent(0.375), "37.5%");
        assert_eq!(percent(0.00042), "0.042%");
        assert_eq!(percent(1e-9), "<0.001%");
    }

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1234567), "1,234,567");
    }
}
