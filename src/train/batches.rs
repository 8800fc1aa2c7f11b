//! Which items each step trains on: consecutive slices of seeded per-epoch
//! permutations, a pure function of (items, batch size, seed, step), shared by GRPO's
//! batches, the warm-up's and rehearsal's.
use crate::seed::Seed;
use rand::seq::SliceRandom;

/// The instance indices of step `step`'s batch: consecutive slices of per-epoch seeded
/// permutations of `0..n`, so any step's batch is known without replaying earlier ones.
pub fn batch_indices(n: usize, batch: usize, seed: Seed, step: u64) -> Vec<usize> {
    let mut out = Vec::with_capacity(batch);
    let mut cached: Option<(u64, Vec<usize>)> = None;
    for j in 0..batch as u64 {
        let flat = step * batch as u64 + j;
        let (epoch, pos) = (flat / n as u64, (flat % n as u64) as usize);
        if cached.as_ref().is_none_or(|(e, _)| *e != epoch) {
            let mut perm: Vec<usize> = (0..n).collect();
            perm.shuffle(&mut seed.child("epoch", epoch).rng());
            cached = Some((epoch, perm));
        }
        out.push(cached.as_ref().expect("set above").1[pos]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_cover_each_epoch_once() {
        let seed = Seed::root(3);
        let mut seen: Vec<usize> = (0..5).flat_map(|s| batch_indices(20, 4, seed, s)).collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..20).collect::<Vec<_>>());
        assert_eq!(batch_indices(20, 4, seed, 7), batch_indices(20, 4, seed, 7));
    }
}
