//! The backward pass of a loss over the `lm` policy's log-probs within a memory bound
//! (the plan's `[grpo] log_prob_chunk` and `recompute`), with the gradients of one plain
//! forward and backward.
//!
//! tch has no custom autograd function, so the graph is cut by hand in two places:
//! - **The loss head.** The final hidden states become a leaf. Log-probs and entropies
//!   are computed from it without gradients, a chunk of target tokens at a time; the
//!   loss is built from them as leaves (so the closure that builds it, GRPO's
//!   `clipped_loss`, is the one it always was), and its backward gives each token's
//!   gradient. Then each chunk is computed again with gradients and
//!   `(log_probs * their gradient + entropies * theirs).sum()` is backpropagated, which
//!   adds the chunk's rows to the hidden leaf's gradient (and its share to a trainable
//!   head's). Only one chunk's `[tokens, vocabulary]` f32 tensors live at a time.
//! - **Layers** (with `recompute`). The forward runs without gradients and keeps each
//!   layer's input; the backward recomputes one layer at a time from its input, made a
//!   leaf that requires gradients, backpropagates `(output * output's gradient).sum()`,
//!   which adds the layer's parameter gradients and gives its input's, and goes down
//!   to the embedding. What lives is the layer boundaries and one layer's activations.
//!
//! By the chain rule these are the plain backward's gradients. On the CPU in f32 with
//! the head frozen (LoRA) they are the same bits: every row's forward is the same ops,
//! and each gradient reaches every tensor through the same products (tested below and
//! in `tests/lm_bf16.rs`). A trainable tied head adds its chunks' gradients one chunk at
//! a time, a different order of float sums.
use super::{length_buckets, LmPolicy, RowBatch};
use crate::train::policy::LogProbs;
use tch::{Kind, Tensor};

/// What one length bucket's forward left for its backward.
struct Forward {
    batch: RowBatch,
    /// The final hidden states, with the graph below them (the whole model, or with
    /// `recompute` the final norm over [`Layers::top`]).
    hidden: Tensor,
    /// `hidden` detached: the leaf the loss head's chunks backpropagate into.
    leaf: Tensor,
    /// Log-probs and entropies of the bucket's targets (no gradients).
    per_action: Tensor,
    entropy: Tensor,
    layers: Option<Layers>,
}

/// With `recompute`: every layer's input (no gradients), the stream after the last
/// layer as a leaf, and what the layers share.
struct Layers {
    inputs: Vec<Tensor>,
    top: Tensor,
    shared: super::model::LayerInputs,
}

/// The gradient of `t`, zeros when nothing reached it.
fn grad_or_zeros(t: &Tensor) -> Tensor {
    let g = t.grad();
    if g.defined() {
        g
    } else {
        t.zeros_like()
    }
}

/// Backpropagate `gradient` from `output` (the backward of `output` seeded with it).
fn backward_from(output: &Tensor, gradient: &Tensor) {
    (output * gradient).sum(Kind::Float).backward();
}

/// One bucket's forward: with gradients through the model, or with `recompute`
/// without them, keeping each layer's input.
fn forward(policy: &LmPolicy, batch: RowBatch, temperature: f64) -> Forward {
    let model = &policy.model;
    let shared = batch.layer_inputs(model);
    let (hidden, layers) = if policy.settings.recompute {
        let mut inputs = Vec::with_capacity(model.cfg.num_hidden_layers as usize);
        let top = tch::no_grad(|| {
            let mut x = model.embed(&batch.tokens);
            for l in 0..model.cfg.num_hidden_layers as usize {
                let next = model.layer(l, &x, &shared, true);
                inputs.push(x);
                x = next;
            }
            x
        })
        .set_requires_grad(true);
        let hidden = model.final_norm(&top);
        (
            hidden,
            Some(Layers {
                inputs,
                top,
                shared,
            }),
        )
    } else {
        (model.uncached(&batch.tokens, &shared, true), None)
    };
    let leaf = hidden.detach().set_requires_grad(true);
    let (per_action, entropy) = tch::no_grad(|| {
        policy.target_log_probs(&batch.flat(&leaf), &batch.pick, &batch.target, temperature)
    });
    Forward {
        batch,
        hidden,
        leaf,
        per_action,
        entropy,
        layers,
    }
}

/// One bucket's backward, given the loss's gradient with respect to its targets'
/// log-probs and entropies: the loss head chunk by chunk, then the layers.
fn backward(policy: &LmPolicy, f: Forward, grad_lp: &Tensor, grad_ent: &Tensor, temperature: f64) {
    let Forward {
        batch,
        hidden,
        leaf,
        layers,
        ..
    } = f;
    let device = leaf.device();
    let flat = batch.flat(&leaf);
    for r in policy.target_chunks(batch.pick.len()) {
        let (start, n) = (r.start as i64, (r.end - r.start) as i64);
        let sel = flat.index_select(0, &Tensor::from_slice(&batch.pick[r.clone()]).to(device));
        let (lp, ent) = policy.target_head(
            &sel,
            &Tensor::from_slice(&batch.target[r]).to(device),
            temperature,
        );
        ((lp * grad_lp.narrow(0, start, n)).sum(Kind::Float)
            + (ent * grad_ent.narrow(0, start, n)).sum(Kind::Float))
        .backward();
    }
    backward_from(&hidden, &grad_or_zeros(&leaf));
    // The head's tensors go before the layers' backward.
    drop((flat, hidden, leaf));
    let Some(Layers {
        mut inputs,
        top,
        shared,
    }) = layers
    else {
        return;
    };
    let model = &policy.model;
    let mut grad = grad_or_zeros(&top);
    for l in (0..inputs.len()).rev() {
        let x = inputs
            .pop()
            .expect("one input a layer")
            .set_requires_grad(true);
        let out = model.layer(l, &x, &shared, true);
        backward_from(&out, &grad);
        grad = grad_or_zeros(&x);
    }
    let embedded = model.embed(&batch.tokens);
    if embedded.requires_grad() {
        backward_from(&embedded, &grad);
    }
}

/// [`crate::train::policy::Policy::backward_loss`] of `policy` for `targets[i]` after
/// `prompts[i]`, scored at `temperature`, within the policy's memory settings.
pub(super) fn backward_loss(
    policy: &LmPolicy,
    prompts: &[&[u32]],
    targets: &[&[u32]],
    temperature: f64,
    loss: &mut dyn FnMut(&LogProbs) -> Tensor,
) {
    let device = policy.model.device();
    let rows: Vec<usize> = (0..targets.len())
        .filter(|&i| !targets[i].is_empty())
        .collect();
    let lens: Vec<usize> = rows
        .iter()
        .map(|&i| prompts[i].len() + targets[i].len() - 1)
        .collect();
    // Rows of similar length share a forward, as in `token_log_probs`; the loss sees
    // the tokens in row order.
    let buckets: Vec<Vec<usize>> = length_buckets(&lens)
        .into_iter()
        .map(|b| b.into_iter().map(|k| rows[k]).collect())
        .collect();
    let forwards: Vec<Forward> = buckets
        .iter()
        .map(|part| {
            forward(
                policy,
                RowBatch::new(
                    prompts,
                    targets,
                    part,
                    device,
                    policy.settings.training_attention,
                ),
                temperature,
            )
        })
        .collect();
    // Bucket order -> row order: `order[j]` is the bucket-order index of row-order
    // token j.
    let mut start = vec![0usize; targets.len()];
    let mut offset = 0;
    for part in &buckets {
        for &i in part {
            start[i] = offset;
            offset += targets[i].len();
        }
    }
    let order: Vec<i64> = rows
        .iter()
        .flat_map(|&i| (start[i]..start[i] + targets[i].len()).map(|k| k as i64))
        .collect();
    let order = Tensor::from_slice(&order).to(device);
    let cat = |f: fn(&Forward) -> &Tensor| {
        if forwards.is_empty() {
            return Tensor::zeros([0], (Kind::Float, device));
        }
        Tensor::cat(&forwards.iter().map(f).collect::<Vec<_>>(), 0).index_select(0, &order)
    };
    let rollout_of: Vec<i64> = rows
        .iter()
        .flat_map(|&i| std::iter::repeat_n(i as i64, targets[i].len()))
        .collect();
    let lp = LogProbs {
        per_action: cat(|f| &f.per_action).set_requires_grad(true),
        entropy: cat(|f| &f.entropy).set_requires_grad(true),
        rollout_of: Tensor::from_slice(&rollout_of).to(device),
    };
    let l = loss(&lp);
    if lp.per_action.numel() == 0 {
        return;
    }
    l.backward();
    // The gradients back in bucket order: token j of row order is `order[j]` there.
    let to_buckets = |g: Tensor| g.zeros_like().index_copy(0, &order, &g);
    let grad_lp = to_buckets(grad_or_zeros(&lp.per_action));
    let grad_ent = to_buckets(grad_or_zeros(&lp.entropy));
    drop(lp);
    let mut at = 0i64;
    let mut spans = Vec::new();
    for f in &forwards {
        let n = f.batch.pick.len() as i64;
        spans.push((at, n));
        at += n;
    }
    // Last bucket first, as autograd's engine would (it runs later-made nodes first):
    // a parameter's gradient then sums the buckets in the plain backward's order.
    for (f, (at, n)) in forwards.into_iter().zip(spans).rev() {
        let (g_lp, g_ent) = (grad_lp.narrow(0, at, n), grad_ent.narrow(0, at, n));
        backward(policy, f, &g_lp, &g_ent, temperature);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::{generate as instances, Budget, GeneratorConfig, Instance};
    use crate::plan::trainer::PolicySettings;
    use crate::seed::Seed;
    use crate::train::lm::{init, pretraining_corpus, LmSpec};
    use crate::train::policy::{Policy, Rollout};
    use tch::Device;

    /// A scratch policy on 2-agent instances, and 6 rollouts of different lengths (two
    /// length buckets), sampled from it.
    fn setup(spec: &LmSpec) -> (LmPolicy, Vec<Instance>, Vec<Rollout>) {
        let cfg = GeneratorConfig::uniform(2, [3, 4], 0.1, 0.2);
        let data = instances(&cfg, 16, Seed::root(1), Budget::default()).unwrap();
        let p = init(spec, Device::Cpu, Seed::root(2), || {
            pretraining_corpus(spec, &data)
        })
        .unwrap();
        let inst: Vec<Instance> = data.iter().take(3).map(|d| d.instance.clone()).collect();
        let mut rollouts = p.sample(&inst, 2, false, Seed::root(3));
        // A short and a long answer, so the rows fall in more than one length bucket.
        rollouts[0].actions.truncate(3);
        let longer = rollouts[2].actions.clone();
        rollouts[3].actions.extend(longer);
        (p, inst, rollouts)
    }

    /// A loss of every term GRPO's has: log-probs, an entropy bonus, a mean.
    fn loss(lp: &LogProbs) -> Tensor {
        let w = (lp.rollout_of.to_kind(Kind::Float) + 1.0) * 0.1;
        (&lp.per_action * &w).mean(Kind::Float) - lp.entropy.mean(Kind::Float) * 0.01
    }

    /// Gradients of every trainable variable and the loss after `backward_loss` under
    /// `settings`.
    fn gradients(
        p: &mut LmPolicy,
        inst: &[Instance],
        rollouts: &[Rollout],
        settings: PolicySettings,
    ) -> (f64, Vec<(String, Tensor)>) {
        p.apply_settings(settings);
        crate::train::adam::Adam::zero_grad(p.vars());
        let mut value = 0.0;
        p.backward_loss(inst, rollouts, &mut |lp| {
            let l = loss(lp);
            value = l.double_value(&[]);
            l
        });
        let mut grads: Vec<(String, Tensor)> = p
            .vars()
            .variables()
            .into_iter()
            .map(|(n, v)| (n, v.grad().copy()))
            .collect();
        grads.sort_by(|a, b| a.0.cmp(&b.0));
        (value, grads)
    }

    fn max_difference(a: &[(String, Tensor)], b: &[(String, Tensor)]) -> f64 {
        a.iter()
            .zip(b)
            .map(|((n, x), (m, y))| {
                assert_eq!(n, m);
                f64::try_from((x - y).abs().max()).unwrap()
            })
            .fold(0.0, f64::max)
    }

    /// Largest difference between two sets of gradients, relative to the largest
    /// gradient of the second.
    fn relative_difference(a: &[(String, Tensor)], b: &[(String, Tensor)]) -> f64 {
        let scale = b
            .iter()
            .map(|(_, y)| f64::try_from(y.abs().max()).unwrap())
            .fold(0.0, f64::max);
        max_difference(a, b) / scale.max(1e-30)
    }

    /// The f32 tolerance of `tests/lm_bf16.rs` for a gradient computed in another order
    /// (micro-batches against the whole batch: gradient norms within 1e-4 relative).
    const F32_GRADIENT_TOL: f64 = 1e-4;

    /// Full fine-tuning of a scratch model (its head tied to the embedding, trainable):
    /// recomputed layers give the plain backward's loss and gradients bit for bit;
    /// chunked log-probs (a product of fewer rows may round differently, and a tied
    /// head sums its chunks' gradients one at a time) within [`F32_GRADIENT_TOL`].
    #[test]
    fn chunked_and_recomputed_backward_give_the_plain_gradients() {
        let spec = LmSpec::default();
        let (mut p, inst, rollouts) = setup(&spec);
        let lens: Vec<usize> = rollouts.iter().map(|r| r.actions.len()).collect();
        assert!(lens.iter().min() < lens.iter().max(), "{lens:?}");
        let (plain_loss, plain) = gradients(&mut p, &inst, &rollouts, PolicySettings::default());
        assert!(plain.iter().all(|(_, g)| g.defined()));
        let layers = PolicySettings {
            recompute: true,
            ..PolicySettings::default()
        };
        let (l, g) = gradients(&mut p, &inst, &rollouts, layers);
        assert_eq!(l.to_bits(), plain_loss.to_bits());
        assert_eq!(max_difference(&g, &plain), 0.0, "recomputed layers");
        for chunk in [1, 7, 64] {
            for recompute in [false, true] {
                let m = PolicySettings {
                    log_prob_chunk: chunk,
                    recompute,
                    ..PolicySettings::default()
                };
                let (l, g) = gradients(&mut p, &inst, &rollouts, m);
                assert!(
                    (l - plain_loss).abs() <= 1e-6 * plain_loss.abs(),
                    "{m:?}: {l} vs {plain_loss}"
                );
                let d = relative_difference(&g, &plain);
                assert!(
                    d <= F32_GRADIENT_TOL,
                    "{m:?}: relative gradient difference {d}"
                );
            }
        }
    }

    /// LoRA adapters with B not zero on `p`, the frozen head and base in `p`'s dtype.
    fn with_adapters(p: LmPolicy) -> LmPolicy {
        let lora = crate::train::lm::model::LoraSpec {
            rank: 4,
            alpha: 8.0,
            targets: crate::train::lm::model::LORA_MODULES
                .iter()
                .map(|s| s.to_string())
                .collect(),
        };
        let p = p
            .into_lora(lora, crate::record::Hash::of_blob(b"base"), Seed::root(4))
            .unwrap();
        tch::no_grad(|| {
            let _rng = crate::train::seeded_torch_rng(Seed::root(6));
            for (n, mut v) in p.vars().variables() {
                if n.contains("lora_B") {
                    v.copy_(&(v.randn_like() * 0.05));
                }
            }
        });
        p
    }

    /// Under LoRA (a frozen head): recomputed layers give the same bits; chunks, the
    /// same gradients within [`F32_GRADIENT_TOL`].
    #[test]
    fn under_lora_the_bounded_backward_gives_the_plain_gradients() {
        let spec = LmSpec::default();
        let (p, inst, rollouts) = setup(&spec);
        let mut p = with_adapters(p);
        let (plain_loss, plain) = gradients(&mut p, &inst, &rollouts, PolicySettings::default());
        for (chunk, recompute) in [
            (0, true),
            (100_000, false),
            (5, false),
            (5, true),
            (1, true),
        ] {
            let m = PolicySettings {
                log_prob_chunk: chunk,
                recompute,
                ..PolicySettings::default()
            };
            let (l, g) = gradients(&mut p, &inst, &rollouts, m);
            if chunk == 0 || chunk >= 100_000 {
                // One chunk: the same products, the same bits.
                assert_eq!(l.to_bits(), plain_loss.to_bits(), "{m:?}");
                assert_eq!(max_difference(&g, &plain), 0.0, "{m:?}");
            } else {
                assert!((l - plain_loss).abs() <= 1e-6 * plain_loss.abs(), "{m:?}");
                let d = relative_difference(&g, &plain);
                assert!(
                    d <= F32_GRADIENT_TOL,
                    "{m:?}: relative gradient difference {d}"
                );
            }
        }
    }

    /// The scratch policy of [`setup`] in bf16 (the CUDA dtype path, on the CPU) with
    /// adapters ([`with_adapters`]), and the instances it was pretrained on.
    fn bf16_with_adapters() -> (LmPolicy, Vec<crate::env::Solved>) {
        let spec = LmSpec::default();
        let cfg = GeneratorConfig::uniform(2, [3, 4], 0.1, 0.2);
        let data = instances(&cfg, 16, Seed::root(1), Budget::default()).unwrap();
        let compute = crate::train::compute::Compute {
            device: Device::Cpu,
            dtype: Kind::BFloat16,
        };
        let p = init(&spec, compute, Seed::root(2), || {
            pretraining_corpus(&spec, &data)
        })
        .unwrap();
        let p = with_adapters(p);
        assert_eq!(p.model.dtype, Kind::BFloat16);
        (p, data)
    }

    /// In bf16 (the CUDA dtype path, on the CPU) under LoRA, chunks and recomputed
    /// layers give the plain loss and gradients within bf16's tolerance of
    /// `tests/lm_bf16.rs` (1e-2 relative).
    #[test]
    fn in_bf16_the_bounded_backward_gives_the_plain_gradients_within_bf16_tolerance() {
        let (mut p, data) = bf16_with_adapters();
        let inst: Vec<Instance> = data.iter().take(3).map(|d| d.instance.clone()).collect();
        let rollouts = p.sample(&inst, 2, false, Seed::root(3));
        let (plain_loss, plain) = gradients(&mut p, &inst, &rollouts, PolicySettings::default());
        for (chunk, recompute) in [(0, true), (3, false), (3, true)] {
            let m = PolicySettings {
                log_prob_chunk: chunk,
                recompute,
                ..PolicySettings::default()
            };
            let (l, g) = gradients(&mut p, &inst, &rollouts, m);
            assert!(
                (l - plain_loss).abs() <= 1e-2 * plain_loss.abs().max(0.1),
                "{m:?}"
            );
            let d = relative_difference(&g, &plain);
            assert!(d <= 1e-2, "{m:?}: relative gradient difference {d}");
        }
    }

    /// The training kernels (`[lm] training_attention = "causal"`, `training_norms =
    /// "fused"`, each alone and both) against the recorded ones (masked, eager), with
    /// the whole backward, recomputed layers and chunked log-probs: the loss within
    /// `loss_tol` relative, every gradient within `grad_tol` of the largest, and the
    /// policy's and the KL reference's log-probs and entropies within `lp_tol`.
    fn kernels_agree(mut p: LmPolicy, inst: &[Instance], rollouts: &[Rollout], tol: [f64; 3]) {
        use crate::plan::trainer::{TrainingAttention as A, TrainingNorms as N};
        let [loss_tol, grad_tol, lp_tol] = tol;
        let lens: Vec<usize> = p.row_tokens(inst, rollouts);
        assert!(
            length_buckets(&lens)
                .iter()
                .any(|b| b.iter().any(|&k| lens[k] != lens[b[0]])),
            "a bucket pads a row: {lens:?}"
        );
        let scored = |p: &LmPolicy| {
            tch::no_grad(|| {
                let lp = p.log_probs(inst, rollouts);
                let reference = p.reference_log_probs(inst, rollouts);
                (lp, reference)
            })
        };
        for (recompute, chunk) in [(false, 0), (true, 5)] {
            let memory = PolicySettings {
                recompute,
                log_prob_chunk: chunk,
                ..PolicySettings::default()
            };
            let (want_loss, want) = gradients(&mut p, inst, rollouts, memory);
            let (want_lp, want_ref) = scored(&p);
            for (attention, norms) in [
                (A::Causal, N::Eager),
                (A::Masked, N::Fused),
                (A::Causal, N::Fused),
            ] {
                let m = PolicySettings {
                    training_attention: attention,
                    training_norms: norms,
                    ..memory
                };
                let (l, g) = gradients(&mut p, inst, rollouts, m);
                assert!(
                    (l - want_loss).abs() <= loss_tol * want_loss.abs().max(0.1),
                    "{m:?}: loss {l} vs {want_loss}"
                );
                let d = relative_difference(&g, &want);
                assert!(d <= grad_tol, "{m:?}: relative gradient difference {d}");
                let (lp, reference) = scored(&p);
                let d = |a: &Tensor, b: &Tensor| f64::try_from((a - b).abs().max()).unwrap();
                assert!(d(&lp.per_action, &want_lp.per_action) <= lp_tol, "{m:?}");
                assert!(d(&lp.entropy, &want_lp.entropy) <= lp_tol, "{m:?}");
                assert!(lp.rollout_of.equal(&want_lp.rollout_of), "{m:?}");
                if let (Some(r), Some(w)) = (&reference, &want_ref) {
                    assert!(d(&r.per_action, &w.per_action) <= lp_tol, "{m:?} reference");
                }
                assert_eq!(reference.is_some(), want_ref.is_some());
            }
        }
        p.apply_settings(PolicySettings::default());
    }

    /// The training kernels in f32, full fine-tuning and under LoRA: within the f32
    /// tolerances of the bounded backward (1e-6 loss, [`F32_GRADIENT_TOL`]) and of
    /// sampled against trained log-probs (1e-5).
    #[test]
    fn the_training_kernels_give_the_recorded_kernels_log_probs_and_gradients() {
        let spec = LmSpec::default();
        let (full, inst, rollouts) = setup(&spec);
        let tol = [1e-6, F32_GRADIENT_TOL, 1e-5];
        kernels_agree(full, &inst, &rollouts, tol);
        let (p, _, _) = setup(&spec);
        kernels_agree(with_adapters(p), &inst, &rollouts, tol);
    }

    /// The same in bf16 under LoRA (the CUDA dtype path, on the CPU), within the bf16
    /// tolerance of `tests/lm_bf16.rs` (1e-2 relative; log-probs within 5e-2).
    #[test]
    fn in_bf16_the_training_kernels_agree_within_bf16_tolerance() {
        let (_, inst, rollouts) = setup(&LmSpec::default());
        let (p, _) = bf16_with_adapters();
        kernels_agree(p, &inst, &rollouts, [1e-2, 1e-2, 5e-2]);
    }

    /// Scoring in chunks gives every target's log-prob and entropy within the f32
    /// log-prob tolerance (1e-5, as sampled against trained log-probs), in row order.
    #[test]
    fn chunked_scoring_gives_the_same_log_probs_and_entropies() {
        let spec = LmSpec::default();
        let (mut p, inst, rollouts) = setup(&spec);
        let whole = tch::no_grad(|| p.log_probs(&inst, &rollouts));
        for chunk in [1, 3, 1000] {
            p.apply_settings(PolicySettings {
                log_prob_chunk: chunk,
                ..PolicySettings::default()
            });
            let part = tch::no_grad(|| p.log_probs(&inst, &rollouts));
            let d = |a: &Tensor, b: &Tensor| f64::try_from((a - b).abs().max()).unwrap();
            assert!(
                d(&part.per_action, &whole.per_action) <= 1e-5,
                "chunk {chunk}"
            );
            assert!(d(&part.entropy, &whole.entropy) <= 1e-5, "chunk {chunk}");
            assert!(part.rollout_of.equal(&whole.rollout_of), "chunk {chunk}");
        }
    }
}
