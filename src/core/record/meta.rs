//! Per-event metadata: wall time, duration, host, versions, threads, device, and on a
//! stage's `stage_completed` event where the stage's time went. Stored beside each event
//! in its pack record (and bundle) and never hashed, so a faithful replay reproduces the
//! same event ids.
//!
//! **Layouts.** Metadata is bincode, which is not self-describing: a field added to
//! [`Meta`] would make every record written before it fail to decode. So there are two
//! layouts, told apart by length (the codec rejects trailing bytes and short input):
//! - layout 1, the six fields every ledger before stage timings wrote;
//! - layout 2, those six and then the [`StageTiming`], written only when there is one.
//!
//! `codec::encode(&meta)` writes layout 1 for metadata without a timing (the timing field
//! is skipped when None), byte for byte what older builds wrote, so they still read
//! every event but a timed `stage_completed`; with a timing it writes layout 2. Always
//! decode through [`Meta::decode`], which reads both. Keeping the timing here rather than
//! in a side file means it travels with the event in bundles, survives `gc` and
//! `recover` with it, and needs no second store to keep consistent.
use super::timing::StageTiming;
use ledger_store::codec::{self, CodecError};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Prefix of the `versions` key of each environment variable that chose kernels and
/// was set where the event was produced (the trainer's `train::kernels::KERNEL_ENV`).
pub const KERNEL_ENV_PREFIX: &str = "env:";

/// The kernel variables `versions` records (see [`KERNEL_ENV_PREFIX`]), by name.
pub fn kernel_env(versions: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    versions
        .iter()
        .filter_map(|(k, v)| Some((k.strip_prefix(KERNEL_ENV_PREFIX)?.to_string(), v.clone())))
        .collect()
}

/// Kernel variables as a reader sees them: "A=1 B=2", or "no kernel variables set".
pub fn describe_kernel_env(env: &BTreeMap<String, String>) -> String {
    if env.is_empty() {
        return "no kernel variables set".into();
    }
    let pairs: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    pairs.join(" ")
}

/// Facts about how and when an event was produced; not part of its identity.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Meta {
    /// Milliseconds since the Unix epoch when the event was appended.
    pub wall_time_ms: Option<u64>,
    /// How long producing the event took, in microseconds.
    pub duration_us: Option<u64>,
    pub host: Option<String>,
    /// Component versions (crate, libtorch, model, ...).
    pub versions: BTreeMap<String, String>,
    pub threads: Option<u32>,
    pub device: Option<String>,
    /// Where the stage's time went: on the `stage_completed` event of a stage recorded
    /// with timings, absent elsewhere (stored as metadata layout 2, see `record::meta`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timing: Option<StageTiming>,
}

/// Layout 1: the fields of every metadata record written before stage timings.
#[derive(Deserialize)]
struct MetaV1 {
    wall_time_ms: Option<u64>,
    duration_us: Option<u64>,
    host: Option<String>,
    versions: BTreeMap<String, String>,
    threads: Option<u32>,
    device: Option<String>,
}

impl Meta {
    /// Decode stored metadata of either layout (see the module doc); `what` names the
    /// record in errors. An error is layout 2's when the bytes are longer than layout 1.
    pub fn decode(bytes: &[u8], what: &'static str) -> Result<Meta, CodecError> {
        match codec::decode::<MetaV1>(bytes, what) {
            Ok(v1) => Ok(Meta {
                wall_time_ms: v1.wall_time_ms,
                duration_us: v1.duration_us,
                host: v1.host,
                versions: v1.versions,
                threads: v1.threads,
                device: v1.device,
                timing: None,
            }),
            Err(CodecError::Trailing { .. }) => {
                let m: Meta = codec::decode(bytes, what)?;
                // Layout 2 always carries a timing: a None there is not what this build
                // writes (it would be layout 1 with a stray byte).
                match m.timing {
                    Some(_) => Ok(m),
                    None => Err(CodecError::Malformed {
                        what,
                        message: "layout-2 metadata without a stage timing".into(),
                    }),
                }
            }
            Err(e) => Err(e),
        }
    }

    /// The environment variables that chose kernels, as `versions` records them under
    /// [`KERNEL_ENV_PREFIX`] ("env:MKL_CBWR"), by name; empty where none was set or the
    /// event was recorded before they were.
    pub fn kernel_env(&self) -> BTreeMap<String, String> {
        kernel_env(&self.versions)
    }

    /// Metadata stamped with the current wall time, host and crate version.
    pub fn now() -> Meta {
        let ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .ok();
        let mut versions = BTreeMap::new();
        versions.insert(
            "mapf-ledger".to_string(),
            env!("CARGO_PKG_VERSION").to_string(),
        );
        Meta {
            wall_time_ms: ms,
            host: host(),
            versions,
            ..Meta::default()
        }
    }
}

/// This machine's host name (read once).
fn host() -> Option<String> {
    static HOST: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    HOST.get_or_init(|| {
        std::fs::read_to_string("/etc/hostname")
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
    })
    .clone()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::timing::Phase;

    fn sample() -> Meta {
        let mut m = Meta::now();
        m.threads = Some(2);
        m.device = Some("cpu".into());
        m.duration_us = Some(17);
        m
    }

    /// What `replay` and `show --timing` name: the kernel variables a stage recorded, read back by name
    /// from its metadata (nothing else there is one), as `NAME=VALUE` pairs.
    #[test]
    fn recorded_kernel_variables_are_read_back_by_name() {
        let versions: std::collections::BTreeMap<String, String> = [
            ("libtorch", "2.11.0"),
            ("env:NVIDIA_TF32_OVERRIDE", "0"),
            ("env:MKL_CBWR", "AVX2"),
            ("cpu", "env:not one"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .into();
        let env = kernel_env(&versions);
        assert_eq!(
            describe_kernel_env(&env),
            "MKL_CBWR=AVX2 NVIDIA_TF32_OVERRIDE=0"
        );
        assert_eq!(
            describe_kernel_env(&Default::default()),
            "no kernel variables set"
        );
    }

    /// The six fields as builds before stage timings encoded them.
    #[derive(Serialize)]
    struct OldMeta {
        wall_time_ms: Option<u64>,
        duration_us: Option<u64>,
        host: Option<String>,
        versions: BTreeMap<String, String>,
        threads: Option<u32>,
        device: Option<String>,
    }

    fn old_bytes(m: &Meta) -> Vec<u8> {
        codec::encode(&OldMeta {
            wall_time_ms: m.wall_time_ms,
            duration_us: m.duration_us,
            host: m.host.clone(),
            versions: m.versions.clone(),
            threads: m.threads,
            device: m.device.clone(),
        })
    }

    #[test]
    fn metadata_without_timing_keeps_the_old_layout() {
        let m = sample();
        assert_eq!(codec::encode(&m), old_bytes(&m), "byte for byte layout 1");
        assert_eq!(Meta::decode(&old_bytes(&m), "meta").unwrap(), m);
    }

    #[test]
    fn timing_round_trips_in_layout_2() {
        let mut m = sample();
        m.timing = Some(StageTiming {
            wall_seconds: 2.5,
            phases: vec![Phase {
                name: "generation".into(),
                seconds: 1.25,
                calls: 3,
                sampled_tokens: Some(480),
                prefilled_tokens: Some(96),
                decode_steps: Some(40),
                decode_bytes: Some(1 << 33),
            }],
            resumed: false,
            gpu: Some("NVIDIA H100 80GB HBM3".into()),
        });
        let bytes = codec::encode(&m);
        assert!(bytes.starts_with(&old_bytes(&m)));
        assert_eq!(Meta::decode(&bytes, "meta").unwrap(), m);
        // Cut short or with a byte too many, it is an error, not a misread.
        assert!(Meta::decode(&bytes[..bytes.len() - 1], "meta").is_err());
        let mut long = bytes.clone();
        long.push(0);
        assert!(Meta::decode(&long, "meta").is_err());
        // Layout 1 plus a None tag is not layout 2.
        let mut none = old_bytes(&m);
        none.push(0);
        assert!(Meta::decode(&none, "meta").is_err());
    }
}
