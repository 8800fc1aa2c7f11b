//! Adam with decoupled weight decay, written over tch tensors so its state is ours to
//! checkpoint (tch's built-in optimisers do not expose their moments). One update is a
//! fixed sequence of tensor ops in parameter-name order: bit-reproducible on a device.
use tch::{nn, Kind, Tensor};

pub use crate::plan::trainer::AdamConfig;

/// Adam state: first and second moments per parameter (name order) and the step count.
pub struct Adam {
    pub config: AdamConfig,
    pub step: u64,
    /// `(name, m, v)` in name order.
    pub moments: Vec<(String, Tensor, Tensor)>,
}

/// Parameters of a var store in name order (the order every hash and update uses).
pub fn named_params(vs: &nn::VarStore) -> Vec<(String, Tensor)> {
    let mut v: Vec<(String, Tensor)> = vs.variables().into_iter().collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

impl Adam {
    pub fn new(vs: &nn::VarStore, config: AdamConfig) -> Adam {
        let moments = named_params(vs)
            .into_iter()
            .map(|(n, p)| (n, p.zeros_like(), p.zeros_like()))
            .collect();
        Adam {
            config,
            step: 0,
            moments,
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
        let bc1 = 1.0 - c.beta1.powi(self.step as i32);
        let bc2 = 1.0 - c.beta2.powi(self.step as i32);
        for (((name, p), g), (mname, m, v)) in
            params.iter().zip(&grads).zip(self.moments.iter_mut())
        {
            debug_assert_eq!(name, mname);
            let g = g * scale;
            let _ = m.g_mul_scalar_(c.beta1).g_add_(&(&g * (1.0 - c.beta1)));
            let _ = v
                .g_mul_scalar_(c.beta2)
                .g_add_(&(g.square() * (1.0 - c.beta2)));
            let denom = (&*v / bc2).sqrt() + c.eps;
            let update = (&*m / bc1) / denom;
            let mut p = p.shallow_clone();
            if c.weight_decay > 0.0 {
                let _ = p.g_mul_scalar_(1.0 - c.lr * c.weight_decay);
            }
            let _ = p.g_sub_(&(update * c.lr));
        }
        norm
    }
}
