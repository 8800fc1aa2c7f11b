//! What SIGINT (Ctrl-C) and SIGTERM do to a command: the one place that installs the
//! handler, for the two kinds of work a command does.
//!
//! - [`Work::Durable`] (`run`, `study`, a kept counterfactual): the first signal sets
//!   the flag [`on_signal`] returns, and the work stops at its next durable point: the
//!   end of the gradient step under way, whose records are durable then
//!   ([`crate::stage`]), or the end of a warm-up checkpoint interval. `ledger run`
//!   again resumes, reaching the head an uninterrupted run reaches.
//! - [`Work::Scratch`] (`replay --verify`, a counterfactual that keeps nothing): the
//!   work is thrown away whatever happens, so the first signal ends the process at once.
//!
//! Either way a second signal (or a scratch command's first) ends the process with
//! `_exit(130)`: no destructors and no `atexit` handlers, so libtorch's static teardown
//! never runs under a computation still live on the main thread (it crashed with
//! SIGSEGV, or a torch panic inside a matmul, when `exit` ran it). Nothing recorded can
//! be lost that way: the commit under way finishes first and no new one starts
//! (`ledger_store::commits`), a scratch ref lives in the writer's memory only
//! (`ledger_store::Store::set_ref`), and the next writer removes temporary blobs.
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// What the interrupted command's work is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Work {
    /// Recorded as it goes: stop at the next durable point.
    Durable,
    /// Scratch: nothing of it survives the command, so stop at once.
    Scratch,
}

/// The exit status of an interrupted command (128 + SIGINT, as shells report it).
pub const EXIT_CODE: i32 = 130;

/// Install the handler for `work` and return the flag the first signal sets. `what`
/// says, on the first signal, what happens now (e.g. "stopping at the end of this
/// gradient step"). Call once per process; a later call keeps the first handler.
pub fn on_signal(work: Work, what: &'static str) -> Arc<AtomicBool> {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let _ = ctrlc::set_handler(move || {
        if work == Work::Scratch {
            eprintln!("\ninterrupted: {what}");
            exit_now();
        }
        if flag.swap(true, Ordering::SeqCst) {
            eprintln!(
                "\naborted: nothing recorded is lost (the work since the last durable point is \
                 recomputed when the command runs again)"
            );
            exit_now();
        }
        eprintln!("\n{what} (Ctrl-C again to abort at once)...");
    });
    stop
}

/// End the process with [`EXIT_CODE`] without running any destructor or `atexit`
/// handler (see the module doc).
fn exit_now() -> ! {
    // A commit under way finishes first, and no new one starts (a torn one is safe, but
    // `verify` reports its tail until the next writer cuts it); a disk that stalls
    // longer than this is cut as `kill -9` would cut it.
    ledger_store::commits::hold_and_wait(std::time::Duration::from_secs(10));
    // SAFETY: `_exit` is async-signal-safe and takes no Rust state; whatever the main
    // thread was doing is cut as a `kill -9` would cut it, which the ledger survives.
    unsafe { libc::_exit(EXIT_CODE) }
}
