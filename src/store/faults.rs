//! A write budget for tests: with `MAPF_LEDGER_WRITE_BUDGET=N` in the environment, the
//! store's pack and blob writes fail as a full disk does (ENOSPC) once N bytes have been
//! written by this process. That is how the tests run a ledger out of space at a chosen
//! point on any filesystem, without mounting a small one. Unset (always, outside
//! tests), it costs one relaxed atomic load per write.
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// The environment variable that sets the budget, in bytes.
pub const BUDGET_ENV: &str = "MAPF_LEDGER_WRITE_BUDGET";

static BUDGET: OnceLock<Option<u64>> = OnceLock::new();
static SPENT: AtomicU64 = AtomicU64::new(0);

/// Count a write of `n` bytes against the budget: an error of kind `StorageFull` (as
/// ENOSPC reads) when it does not fit.
pub fn charge(n: u64) -> std::io::Result<()> {
    let budget = *BUDGET.get_or_init(|| {
        std::env::var(BUDGET_ENV)
            .ok()
            .and_then(|v| v.trim().parse().ok())
    });
    let Some(budget) = budget else {
        return Ok(());
    };
    let before = SPENT.fetch_add(n, Ordering::Relaxed);
    if before.saturating_add(n) > budget {
        return Err(std::io::Error::from(std::io::ErrorKind::StorageFull));
    }
    Ok(())
}
