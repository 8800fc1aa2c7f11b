//! Which items each step trains on: consecutive slices of seeded per-epoch
//! permutations, a pure function of (items, batch size, seed, step), shared by GRPO's
//! batches, the warm-up's and rehearsal's.
//! Also the names a batch's agents go by in its texts ([`named`]).
use crate::env::{Instance, Solved};
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

/// The instances `data[idx]` of one batch, each with its agents named by k distinct
/// numbers from `1..=up_to` in increasing order (`grpo.agent_names`,
/// `warmup.agent_names`; 0, or fewer names than agents: the plain `1..=k`), drawn from
/// `seed` and the position in the batch. Outcomes do not depend on names; texts do.
pub fn named(data: &[Solved], idx: &[usize], up_to: u32, seed: Seed) -> Vec<Instance> {
    idx.iter()
        .enumerate()
        .map(|(j, &i)| {
            let inst = data[i].instance.clone();
            let k = inst.agents();
            if (up_to as usize) < k.max(2) {
                return inst;
            }
            let mut rng = seed.child("instance", j as u64).rng();
            let mut names: Vec<u8> = rand::seq::index::sample(&mut rng, up_to as usize, k)
                .into_iter()
                .map(|n| n as u8 + 1)
                .collect();
            names.sort_unstable();
            inst.named(&names)
                .expect("k distinct names from 1 up, sorted")
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::Plan;

    #[test]
    fn batches_cover_each_epoch_once() {
        let seed = Seed::root(3);
        let mut seen: Vec<usize> = (0..5).flat_map(|s| batch_indices(20, 4, seed, s)).collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..20).collect::<Vec<_>>());
        assert_eq!(batch_indices(20, 4, seed, 7), batch_indices(20, 4, seed, 7));
    }

    /// `grpo.agent_names`: every 2-agent training instance goes by two distinct names in
    /// increasing order, every pair of 1..=5 comes up, the draw is a function of the
    /// stage's seed and step, and 0 leaves the instances as they are.
    #[test]
    fn named_batches_draw_every_pair_and_repeats_from_the_seed() {
        let inst: Instance = serde_json::from_str(
            r#"{"size":3,"grid":["FFF","FHF","FFF"],"agents":[{"start":[0,0],"goal":[0,2]},{"start":[2,0],"goal":[2,2]}]}"#,
        )
        .unwrap();
        let solved = Solved {
            instance: inst.clone(),
            reference: crate::env::Reference {
                sum_of_costs: 4,
                makespan: 2,
            },
            plan: moves(&["RR", "RR"]),
            needs_coordination: false,
            solver_nodes: 1,
        };
        let data = vec![solved; 4];
        let idx = [0, 1, 2, 3, 0, 1, 2, 3];
        let seed = Seed::root(9);
        assert!(named(&data, &idx, 0, seed.child("agent_names", 0))
            .iter()
            .all(|i| *i == inst));
        let mut pairs = std::collections::BTreeSet::new();
        for step in 0..40 {
            let batch = named(&data, &idx, 5, seed.child("agent_names", step));
            assert_eq!(
                batch,
                named(&data, &idx, 5, seed.child("agent_names", step))
            );
            for named in &batch {
                let (a, b) = (named.name(0), named.name(1));
                assert!(1 <= a && a < b && b <= 5, "{a} {b}");
                assert_eq!(named.content_hash(), inst.content_hash());
                pairs.insert((a, b));
            }
        }
        assert_eq!(pairs.len(), 10, "{pairs:?}");
        assert_ne!(
            named(&data, &idx, 5, seed.child("agent_names", 0)),
            named(&data, &idx, 5, Seed::root(10).child("agent_names", 0))
        );
    }

    fn moves(s: &[&str]) -> Plan {
        Plan {
            moves: s
                .iter()
                .map(|l| {
                    l.chars()
                        .map(|c| crate::env::Move::from_letter(c).unwrap())
                        .collect()
                })
                .collect(),
        }
    }
}
