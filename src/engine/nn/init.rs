//! A model's initial parameters and buffers computed from its description alone, in
//! `visit_params` order and drawn from the seed's stream exactly as the CPU layers'
//! constructors draw them (PyTorch's default: uniform in ±1/sqrt(fan_in) for weights
//! and biases, BN at identity). A backend other than the CPU builds its layers from
//! these, so every backend starts from the same weights without a CPU model.

use crate::engine::nn::zoo::{self, ModelKind};
pub use crate::engine::ops::desc::{HostParam, Initial};
use crate::error::Result;

impl Initial {
    /// The values `zoo::build(kind, classes, seed, _)` starts from.
    pub fn of(kind: ModelKind, classes: usize, seed: u64) -> Result<Initial> {
        let mut rng = zoo::init_rng(seed);
        let mut out = Initial::default();
        for d in &zoo::describe(kind, classes) {
            d.init(&mut rng, &mut out)?;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::device::Device;

    /// The description's values are the CPU model's, bit for bit, for every model: the
    /// CUDA backend starts from them, so a drift here would break CPU/GPU parity.
    #[test]
    fn initial_values_are_the_cpu_models_bit_for_bit() {
        let dev = Device::cpu(0, 1);
        for kind in [
            ModelKind::Mlp,
            ModelKind::MlpGelu,
            ModelKind::CnnSmall,
            ModelKind::ResnetMini,
        ] {
            for seed in [0, 7] {
                let mut model = zoo::build(kind, 10, seed, &dev).unwrap();
                let mut want = Initial::default();
                model.visit_params(&mut |p| {
                    want.params.push_back(HostParam {
                        name: p.name.clone(),
                        shape: p.w.shape().to_vec(),
                        values: p.w.f32().unwrap().to_vec(),
                        decay: p.decay,
                    })
                });
                model.visit_buffers(&mut |n, b| want.buffers.push_back((n.into(), b.clone())));
                let got = Initial::of(kind, 10, seed).unwrap();
                assert_eq!(got.params.len(), want.params.len(), "{kind}");
                for (g, w) in got.params.iter().zip(&want.params) {
                    assert_eq!(
                        (&g.name, &g.shape, g.decay),
                        (&w.name, &w.shape, w.decay),
                        "{kind}"
                    );
                    let same = g
                        .values
                        .iter()
                        .zip(&w.values)
                        .all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(
                        same && g.values.len() == w.values.len(),
                        "{kind} {}",
                        g.name
                    );
                }
                assert_eq!(got.buffers, want.buffers, "{kind}");
            }
        }
    }
}
