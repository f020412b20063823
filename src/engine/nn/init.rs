//! A model's initial parameters and buffers computed from its description alone, in
//! `visit_params` order and drawn from the seed's stream exactly as the CPU layers'
//! constructors draw them (PyTorch's default: uniform in ±1/sqrt(fan_in) for weights
//! and biases, BN at identity). A backend other than the CPU builds its layers from
//! these, so every backend starts from the same weights without a CPU model.

use std::collections::VecDeque;

use crate::engine::nn::zoo::{self, ModelKind};
use crate::engine::ops::layer::LayerDesc;
use crate::engine::rng::Rng;
use crate::error::{Error, Result};

/// One parameter's initial values.
#[derive(Clone, Debug, PartialEq)]
pub struct HostParam {
    pub name: String,
    pub shape: Vec<usize>,
    pub values: Vec<f32>,
    pub decay: bool,
}

/// Every parameter and buffer of a model, in visit order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Initial {
    pub params: VecDeque<HostParam>,
    pub buffers: VecDeque<(String, Vec<f32>)>,
}

impl Initial {
    /// The values `zoo::build(kind, classes, seed, _)` starts from.
    pub fn of(kind: ModelKind, classes: usize, seed: u64) -> Result<Initial> {
        let mut rng = zoo::init_rng(seed);
        let mut out = Initial::default();
        for d in &zoo::describe(kind, classes) {
            out.draw(d, &mut rng)?;
        }
        Ok(out)
    }

    fn param(&mut self, name: &str, shape: &[usize], values: Vec<f32>, decay: bool) {
        self.params.push_back(HostParam {
            name: name.into(),
            shape: shape.to_vec(),
            values,
            decay,
        });
    }

    fn uniform(rng: &mut Rng, n: usize, fan_in: usize) -> Vec<f32> {
        let bound = 1.0 / (fan_in as f32).sqrt();
        (0..n).map(|_| rng.range_f32(-bound, bound)).collect()
    }

    fn draw(&mut self, d: &LayerDesc, rng: &mut Rng) -> Result<()> {
        match d {
            LayerDesc::Linear { d_in, d_out } => {
                let w = Self::uniform(rng, d_in * d_out, *d_in);
                let b = Self::uniform(rng, *d_out, *d_in);
                self.param("weight", &[*d_out, *d_in], w, true);
                self.param("bias", &[*d_out], b, false);
            }
            LayerDesc::Conv2d {
                c_in,
                c_out,
                k,
                bias,
                ..
            } => {
                let fan_in = c_in * k * k;
                let w = Self::uniform(rng, c_out * fan_in, fan_in);
                // The bias is drawn after the weight, as Conv2d::new does.
                let b = bias.then(|| Self::uniform(rng, *c_out, fan_in));
                self.param("weight", &[*c_out, fan_in], w, true);
                if let Some(b) = b {
                    self.param("bias", &[*c_out], b, false);
                }
            }
            LayerDesc::BatchNorm2d { c, .. } => {
                self.param("weight", &[*c], vec![1.0; *c], false);
                self.param("bias", &[*c], vec![0.0; *c], false);
                self.buffers
                    .push_back(("running_mean".into(), vec![0.0; *c]));
                self.buffers
                    .push_back(("running_var".into(), vec![1.0; *c]));
            }
            LayerDesc::Relu | LayerDesc::Flatten | LayerDesc::GlobalAvgPool => {}
            LayerDesc::BasicBlock {
                main,
                shortcut,
                out,
            } => {
                for l in main.iter().chain(shortcut).chain(std::iter::once(&**out)) {
                    self.draw(l, rng)?;
                }
            }
            LayerDesc::Other(name) => {
                return Err(Error::Runtime(format!(
                    "model description: no initialisation for layer {name}"
                )))
            }
        }
        Ok(())
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
        for kind in [ModelKind::Mlp, ModelKind::CnnSmall, ModelKind::ResnetMini] {
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
