//! Adam with decoupled weight decay, written over tch tensors so its state is ours to
//! checkpoint (tch's built-in optimisers do not expose their moments). One update is a
//! fixed sequence of elementwise tensor ops, the same for every parameter in name order:
//! bit-reproducible on a device.
//!
//! The moments of f32 parameters on one device live in two flat buffers, each
//! parameter's moments a view of them, and an update runs its elementwise ops once over
//! the whole buffer instead of once per parameter: the same operations on every element,
//! so the same bits, in a dozen kernel launches instead of about sixteen a parameter (a
//! GPU step of small tensors is bound by the host issuing its kernels).
use tch::{nn, Device, Kind, Tensor};

pub use crate::plan::trainer::AdamConfig;

/// Adam state: first and second moments per parameter (name order) and the step count.
pub struct Adam {
    pub config: AdamConfig,
    pub step: u64,
    /// `(name, m, v)` in name order (views of `flat` when it is there).
    pub moments: Vec<(String, Tensor, Tensor)>,
    /// Every parameter's first and second moments, end to end in name order, when every
    /// parameter is f32 on one device; None otherwise (each parameter is updated alone).
    flat: Option<(Tensor, Tensor)>,
}

/// Parameters of a var store in name order (the order every hash and update uses).
pub fn named_params(vs: &nn::VarStore) -> Vec<(String, Tensor)> {
    let mut v: Vec<(String, Tensor)> = vs.variables().into_iter().collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

/// The one device of `params` when every one is f32 there (the flat layout's condition).
fn flat_device(params: &[(String, Tensor)]) -> Option<Device> {
    let device = params.first()?.1.device();
    params
        .iter()
        .all(|(_, p)| p.kind() == Kind::Float && p.device() == device)
        .then_some(device)
}

impl Adam {
    pub fn new(vs: &nn::VarStore, config: AdamConfig) -> Adam {
        Adam::laid_out(vs, config, true)
    }

    /// Zeroed moments in flat buffers where `flat` allows it and the parameters do (see
    /// the module doc), else one tensor each.
    fn laid_out(vs: &nn::VarStore, config: AdamConfig, flat: bool) -> Adam {
        let params = named_params(vs);
        let Some(device) = flat_device(&params).filter(|_| flat) else {
            let moments = params
                .into_iter()
                .map(|(n, p)| (n, p.zeros_like(), p.zeros_like()))
                .collect();
            return Adam {
                config,
                step: 0,
                moments,
                flat: None,
            };
        };
        let total: i64 = params.iter().map(|(_, p)| p.numel() as i64).sum();
        let m = Tensor::zeros([total], (Kind::Float, device));
        let v = Tensor::zeros([total], (Kind::Float, device));
        let mut at = 0;
        let moments = params
            .into_iter()
            .map(|(n, p)| {
                let (len, shape) = (p.numel() as i64, p.size());
                let view = |t: &Tensor| t.narrow(0, at, len).view(shape.as_slice());
                let moments = (n, view(&m), view(&v));
                at += len;
                moments
            })
            .collect();
        Adam {
            config,
            step: 0,
            moments,
            flat: Some((m, v)),
        }
    }

    /// Zero every parameter's gradient.
    pub fn zero_grad(vs: &nn::VarStore) {
        for (_, mut p) in named_params(vs) {
            let mut g = p.grad();
            if g.defined() {
                let _ = g.zero_();
            }
            let _ = &mut p;
        }
    }

    /// Apply one update from the current gradients; returns the global gradient norm
    /// before clipping.
    pub fn update(&mut self, vs: &nn::VarStore) -> f64 {
        let _guard = tch::no_grad_guard();
        let params = named_params(vs);
        let grads: Vec<Tensor> = params
            .iter()
            .map(|(_, p)| {
                let g = p.grad();
                if g.defined() {
                    g
                } else {
                    p.zeros_like()
                }
            })
            .collect();
        // The squared norms summed in f64 in name order on the device, then read once:
        // the same IEEE additions, in the same order, as reading each and adding on the
        // host, without waiting on a GPU once per parameter.
        let sq = grads
            .iter()
            .map(|g| g.pow_tensor_scalar(2).sum(Kind::Double))
            .reduce(|acc, s| acc + s)
            .map_or(0.0, |t| t.double_value(&[]));
        let norm = sq.sqrt();
        let c = self.config;
        let scale = if c.max_grad_norm > 0.0 && norm > c.max_grad_norm {
            c.max_grad_norm / (norm + 1e-6)
        } else {
            1.0
        };
        self.step += 1;
        match &mut self.flat {
            Some((m, v)) => {
                let flat: Vec<Tensor> = grads.iter().map(|g| g.reshape([-1])).collect();
                let update = moment_update(&c, self.step, &Tensor::cat(&flat, 0), scale, m, v);
                let mut at = 0;
                for (_, p) in &params {
                    let len = p.numel() as i64;
                    let u = update.narrow(0, at, len).view(p.size().as_slice());
                    apply(&c, p, &u);
                    at += len;
                }
            }
            None => {
                for (((name, p), g), (mname, m, v)) in
                    params.iter().zip(&grads).zip(self.moments.iter_mut())
                {
                    debug_assert_eq!(name, mname);
                    let update = moment_update(&c, self.step, g, scale, m, v);
                    apply(&c, p, &update);
                }
            }
        }
        norm
    }
}

/// Adam's moments updated in place from the gradient `g` (clipped by `scale`) at step
/// `step`, and the step's update `lr (m / bc1) / (sqrt(v / bc2) + eps)`, elementwise.
fn moment_update(
    c: &AdamConfig,
    step: u64,
    g: &Tensor,
    scale: f64,
    m: &mut Tensor,
    v: &mut Tensor,
) -> Tensor {
    let bc1 = 1.0 - c.beta1.powi(step as i32);
    let bc2 = 1.0 - c.beta2.powi(step as i32);
    let g = g * scale;
    let _ = m.g_mul_scalar_(c.beta1).g_add_(&(&g * (1.0 - c.beta1)));
    let _ = v
        .g_mul_scalar_(c.beta2)
        .g_add_(&(g.square() * (1.0 - c.beta2)));
    let denom = (&*v / bc2).sqrt() + c.eps;
    (&*m / bc1) / denom * c.lr
}

/// The parameter `p` decayed (decoupled weight decay) and moved by `-update`.
fn apply(c: &AdamConfig, p: &Tensor, update: &Tensor) {
    let mut p = p.shallow_clone();
    if c.weight_decay > 0.0 {
        let _ = p.g_mul_scalar_(1.0 - c.lr * c.weight_decay);
    }
    let _ = p.g_sub_(update);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parameters of several shapes (names out of insertion order), with gradients.
    fn store() -> nn::VarStore {
        let vs = nn::VarStore::new(Device::Cpu);
        let root = vs.root();
        tch::manual_seed(5);
        let _ = (&root / "z").randn("weight", &[3, 5], 0.0, 1.0);
        let _ = (&root / "a").randn("bias", &[7], 0.0, 1.0);
        let _ = (&root / "m").randn("w", &[2, 3, 4], 0.0, 1.0);
        vs
    }

    fn set_grads(vs: &nn::VarStore, step: u64) {
        for (i, (_, p)) in named_params(vs).into_iter().enumerate() {
            let n = p.numel() as i64;
            let g = (Tensor::arange(n, (Kind::Float, Device::Cpu)) * (0.37 + i as f64)
                + step as f64)
                .sin()
                * (3.0 / (1 + step * step) as f64);
            let mut grad = p.grad();
            if !grad.defined() {
                // A first backward makes the gradient tensor.
                (&p * 0.0).sum(Kind::Float).backward();
                grad = p.grad();
            }
            grad.copy_(&g.view(p.size().as_slice()));
        }
    }

    fn bits(ts: &[Tensor]) -> Vec<u32> {
        ts.iter()
            .flat_map(|t| Vec::<f32>::try_from(t.reshape([-1])).unwrap())
            .map(f32::to_bits)
            .collect()
    }

    /// The flat layout's whole-buffer update gives, bit for bit, what updating each
    /// parameter alone gives: parameters, moments and gradient norms, through clipped
    /// and unclipped steps with weight decay.
    #[test]
    fn the_flat_update_is_the_per_parameter_update_bit_for_bit() {
        let config = AdamConfig {
            lr: 0.01,
            weight_decay: 0.1,
            max_grad_norm: 8.0,
            ..AdamConfig::default()
        };
        let (a, b) = (store(), store());
        let mut flat = Adam::new(&a, config);
        let mut alone = Adam::laid_out(&b, config, false);
        assert!(flat.flat.is_some() && alone.flat.is_none());
        let mut clipped = 0;
        for step in 0..4 {
            set_grads(&a, step);
            set_grads(&b, step);
            let (na, nb) = (flat.update(&a), alone.update(&b));
            assert_eq!(na.to_bits(), nb.to_bits());
            clipped += (na > config.max_grad_norm) as u32;
            let params = |vs: &nn::VarStore| -> Vec<Tensor> {
                named_params(vs).into_iter().map(|(_, p)| p).collect()
            };
            assert_eq!(bits(&params(&a)), bits(&params(&b)), "step {step}");
            let moments = |adam: &Adam| -> Vec<Tensor> {
                adam.moments
                    .iter()
                    .flat_map(|(_, m, v)| [m.shallow_clone(), v.shallow_clone()])
                    .collect()
            };
            assert_eq!(bits(&moments(&flat)), bits(&moments(&alone)), "step {step}");
        }
        assert!(clipped > 0 && clipped < 4, "clipped {clipped} of 4 steps");
    }
}
