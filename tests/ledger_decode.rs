//! Decoding arbitrary or hostile bytes never panics and never allocates more than a
//! small bound, whatever lengths the bytes claim (a counting global allocator measures
//! the peak).
use crate::common;

use mapf_ledger::ledger::codec::{self, EVENT_VERSION};
use mapf_ledger::ledger::{BranchState, Meta};
use proptest::prelude::*;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;
static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let n = LIVE.fetch_add(l.size(), Ordering::SeqCst) + l.size();
        PEAK.fetch_max(n, Ordering::SeqCst);
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size(), Ordering::SeqCst);
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static A: Counting = Counting;

/// Peak extra bytes allocated while running `f`.
fn peak_during(f: impl FnOnce()) -> usize {
    let base = LIVE.load(Ordering::SeqCst);
    PEAK.store(base, Ordering::SeqCst);
    f();
    PEAK.load(Ordering::SeqCst).saturating_sub(base)
}

const BOUND: usize = 8 << 20;

fn decode_all(b: &[u8]) {
    let _ = mapf_ledger::ledger::event::decode_event(b);
    let _ = codec::event_parent(b);
    let _ = Meta::decode(b, "meta");
    let _ = codec::decode::<BranchState>(b, "projection");
}

#[test]
fn claimed_huge_lengths_allocate_little() {
    // Every variant (and one past the last), then a u64::MAX / 2^40 length claim at
    // each following position.
    let kinds = common::event_kinds().len() as u8;
    assert!(kinds >= 16, "{kinds} event kinds");
    for variant in 0u8..=kinds {
        for pad in 0..6usize {
            for claim in [u64::MAX, 1 << 40, 1 << 28] {
                let mut b = vec![EVENT_VERSION, 0, 1, variant];
                b.extend(std::iter::repeat_n(0u8, pad));
                b.push(253);
                b.extend_from_slice(&claim.to_le_bytes());
                b.extend_from_slice(&[1, 2, 3]);
                let peak = peak_during(|| decode_all(&b));
                assert!(
                    peak < BOUND,
                    "variant {variant} pad {pad}: {peak} bytes allocated"
                );
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]
    #[test]
    fn arbitrary_bytes_never_panic_and_allocate_boundedly(mut b in proptest::collection::vec(any::<u8>(), 0..256), v in 0u8..=(common::event_kinds().len() as u8)) {
        if b.len() > 3 {
            b[0] = EVENT_VERSION;
            b[3] = v;
        }
        let peak = peak_during(|| decode_all(&b));
        prop_assert!(peak < BOUND, "{} bytes allocated for {} input bytes", peak, b.len());
    }
}
