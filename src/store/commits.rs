//! Commits in flight, process-wide: what lets a command end at once on a second
//! signal (`_exit`, no destructors) without cutting a commit in half. A commit torn by
//! `kill -9` is safe (the bytes past the committed length are ignored, and the next
//! writer cuts them), but it leaves a tail that `verify` reports until then; an exit the
//! process chooses itself waits for the commit under way instead.
//!
//! [`Commit::enter`] marks a commit (a batch of records, or a refs record) for as long
//! as it lives; [`hold_and_wait`] stops new ones from starting and waits until none is
//! in flight. A commit that would start after the hold never starts: it waits for the
//! exit.
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);
static HOLD: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// Commits this thread is inside (a batch's commit writes a refs record inside it).
    static DEPTH: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// A commit under way (see the module doc).
pub struct Commit(());

impl Commit {
    /// Mark a commit; when the process is about to exit ([`hold_and_wait`]), wait for
    /// that instead of starting.
    pub fn enter() -> Commit {
        if DEPTH.get() > 0 {
            // Inside a commit already counted: part of it, never held.
            DEPTH.set(DEPTH.get() + 1);
            return Commit(());
        }
        loop {
            while HOLD.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(50));
            }
            IN_FLIGHT.fetch_add(1, Ordering::SeqCst);
            // A hold set between the check and the count: step back and wait for it.
            if !HOLD.load(Ordering::SeqCst) {
                DEPTH.set(1);
                return Commit(());
            }
            IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

impl Drop for Commit {
    fn drop(&mut self) {
        let depth = DEPTH.get() - 1;
        DEPTH.set(depth);
        if depth == 0 {
            IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// Let no new commit start, and wait (at most `limit`) until none is in flight. Returns
/// whether none is (false: one was still running at the limit, a disk that stalls).
pub fn hold_and_wait(limit: Duration) -> bool {
    HOLD.store(true, Ordering::SeqCst);
    let t = Instant::now();
    while IN_FLIGHT.load(Ordering::SeqCst) > 0 {
        if t.elapsed() >= limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hold_waits_for_the_commit_under_way_and_nested_commits_count_once() {
        let outer = Commit::enter();
        let inner = Commit::enter();
        assert_eq!(IN_FLIGHT.load(Ordering::SeqCst), 1);
        drop(inner);
        let t = std::thread::spawn(|| hold_and_wait(Duration::from_secs(5)));
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            !t.is_finished(),
            "the hold waits while a commit is in flight"
        );
        drop(outer);
        assert!(t.join().unwrap());
        assert_eq!(IN_FLIGHT.load(Ordering::SeqCst), 0);
        HOLD.store(false, Ordering::SeqCst);
    }
}
