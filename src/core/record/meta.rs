//! Per-event metadata: wall time, duration, host, versions, threads, device. Stored
//! beside each event in its pack record and never hashed, so a faithful replay
//! reproduces the same event ids.
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

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
}

impl Meta {
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
