//! Optimizers with PyTorch semantics: SGD with momentum (`torch.optim.SGD`) and AdamW
//! (`torch.optim.AdamW`, decoupled weight decay). State lives in f32 and is charged to the
//! optimizer-state category; a parameter without a gradient is skipped, as in PyTorch.

use std::fmt;
use std::str::FromStr;

use rayon::prelude::*;

use crate::engine::device::MemCategory;
use crate::engine::ops::layer::Param;
use crate::engine::tensor::Tensor;
use crate::error::{Error, Result};

#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OptimKind {
    Sgd,
    Adamw,
}

impl fmt::Display for OptimKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            OptimKind::Sgd => "sgd",
            OptimKind::Adamw => "adamw",
        })
    }
}

impl FromStr for OptimKind {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "sgd" => Ok(OptimKind::Sgd),
            "adamw" => Ok(OptimKind::Adamw),
            other => Err(Error::Invalid(format!(
                "unknown optimizer '{other}': allowed values are sgd, adamw"
            ))),
        }
    }
}

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct OptimConfig {
    pub kind: OptimKind,
    pub lr: f32,
    pub momentum: f32,
    pub weight_decay: f32,
    pub betas: (f32, f32),
    pub eps: f32,
}

impl OptimConfig {
    pub fn sgd(lr: f32) -> OptimConfig {
        OptimConfig {
            kind: OptimKind::Sgd,
            lr,
            momentum: 0.9,
            weight_decay: 0.0,
            betas: (0.9, 0.999),
            eps: 1e-8,
        }
    }

    pub fn adamw(lr: f32) -> OptimConfig {
        OptimConfig {
            kind: OptimKind::Adamw,
            weight_decay: 0.01,
            ..OptimConfig::sgd(lr)
        }
    }

    /// The run's optimizer with PyTorch's defaults for `kind`, validated: every backend
    /// builds its optimizer from this, so a bad learning rate is refused the same way.
    pub fn of(kind: OptimKind, lr: f32) -> Result<OptimConfig> {
        let cfg = match kind {
            OptimKind::Sgd => OptimConfig::sgd(lr),
            OptimKind::Adamw => OptimConfig::adamw(lr),
        };
        cfg.validate()?;
        Ok(cfg)
    }

    pub fn validate(&self) -> Result<()> {
        if !(self.lr.is_finite() && self.lr > 0.0) {
            return Err(Error::Invalid(format!(
                "invalid learning rate {}: must be a positive number",
                self.lr
            )));
        }
        Ok(())
    }
}

/// Elements per parallel task in the update loops.
const PAR_CHUNK: usize = 1 << 15;

pub struct Optimizer {
    pub cfg: OptimConfig,
    /// Per parameter (in visit order): momentum buffer, or Adam's (m, v).
    state: Vec<Vec<Tensor>>,
    step: u64,
}

impl Optimizer {
    pub fn new(cfg: OptimConfig) -> Result<Optimizer> {
        cfg.validate()?;
        Ok(Optimizer {
            cfg,
            state: Vec::new(),
            step: 0,
        })
    }

    /// Starts a new optimizer step; `update` is then called once per parameter, in the
    /// same order every step.
    pub fn begin_step(&mut self) {
        self.step += 1;
    }

    /// One parameter's update. `grad_scale` divides the gradient first (loss-scale
    /// unscaling folded into the update, so no separate pass over the gradients).
    pub fn update(&mut self, index: usize, p: &mut Param, grad_scale: f32) -> Result<()> {
        if self.state.len() <= index {
            self.state.resize_with(index + 1, Vec::new);
        }
        let st = &mut self.state[index];
        let Some(g) = &p.g else { return Ok(()) };
        let g = g.f32()?;
        let inv = 1.0 / grad_scale;
        let c = &self.cfg;
        let wd = if p.decay { c.weight_decay } else { 0.0 };
        let slots = match c.kind {
            OptimKind::Sgd => usize::from(c.momentum != 0.0),
            OptimKind::Adamw => 2,
        };
        while st.len() < slots {
            st.push(Tensor::zeros(
                p.w.shape(),
                MemCategory::OptimizerState,
                p.w.tracker(),
            ));
        }
        let w = p.w.f32_mut()?;
        match c.kind {
            OptimKind::Sgd => {
                let first = self.step == 1;
                if let Some(buf) = st.first_mut() {
                    let b = buf.f32_mut()?;
                    w.par_chunks_mut(PAR_CHUNK)
                        .zip(b.par_chunks_mut(PAR_CHUNK))
                        .zip(g.par_chunks(PAR_CHUNK))
                        .for_each(|((w, b), g)| {
                            // Zipped iterators and the first-step branch outside the loop:
                            // no bounds checks, so the loop vectorises. mlp at 1 thread on
                            // the Sapphire Rapids host: optimizer 2.29 -> 0.91 ms/step.
                            let (lr, mom) = (c.lr, c.momentum);
                            let it = w.iter_mut().zip(b.iter_mut()).zip(g);
                            if first {
                                for ((w, b), g) in it {
                                    *b = g * inv + wd * *w;
                                    *w -= lr * *b;
                                }
                            } else {
                                for ((w, b), g) in it {
                                    *b = mom * *b + (g * inv + wd * *w);
                                    *w -= lr * *b;
                                }
                            }
                        });
                } else {
                    for (w, g) in w.iter_mut().zip(g) {
                        *w -= c.lr * (g * inv + wd * *w);
                    }
                }
            }
            OptimKind::Adamw => {
                let t = self.step as i32;
                let bc1 = 1.0 - c.betas.0.powi(t);
                let bc2 = 1.0 - c.betas.1.powi(t);
                let (m_t, v_t) = st.split_at_mut(1);
                let m = m_t[0].f32_mut()?;
                let v = v_t[0].f32_mut()?;
                w.par_chunks_mut(PAR_CHUNK)
                    .zip(m.par_chunks_mut(PAR_CHUNK))
                    .zip(v.par_chunks_mut(PAR_CHUNK))
                    .zip(g.par_chunks(PAR_CHUNK))
                    .for_each(|(((w, m), v), g)| {
                        // Zipped iterators: no bounds checks, as in SGD above.
                        for (((w, m), v), g) in w.iter_mut().zip(m.iter_mut()).zip(v).zip(g) {
                            let gi = g * inv;
                            *w *= 1.0 - c.lr * wd;
                            *m = c.betas.0 * *m + (1.0 - c.betas.0) * gi;
                            *v = c.betas.1 * *v + (1.0 - c.betas.1) * gi * gi;
                            let mh = *m / bc1;
                            let vh = *v / bc2;
                            *w -= c.lr * mh / (vh.sqrt() + c.eps);
                        }
                    });
            }
        }
        Ok(())
    }

    /// Convenience for a slice of parameters (tests, small models).
    pub fn step(&mut self, params: &mut [&mut Param], grad_scale: f32) -> Result<()> {
        self.begin_step();
        for (i, p) in params.iter_mut().enumerate() {
            self.update(i, p, grad_scale)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::device::Device;

    fn quad_param(dev: &Device) -> Param {
        Param::new("w", &[2], vec![1.0, -2.0], true, dev).unwrap()
    }

    /// Minimises 0.5*|w|^2 (gradient = w); both optimizers must shrink |w|.
    #[test]
    fn both_optimizers_descend_a_quadratic() {
        for cfg in [OptimConfig::sgd(0.1), OptimConfig::adamw(0.05)] {
            let dev = Device::cpu(0, 1);
            let mut p = quad_param(&dev);
            let mut opt = Optimizer::new(cfg.clone()).unwrap();
            for _ in 0..50 {
                let w = p.w.f32().unwrap().to_vec();
                p.g = Some(Tensor::from_vec(&[2], w, MemCategory::Grads, dev.mem()).unwrap());
                opt.step(&mut [&mut p], 1.0).unwrap();
            }
            let n: f32 = p.w.f32().unwrap().iter().map(|v| v * v).sum();
            assert!(n < 0.1, "{:?}: |w|^2 = {n}", cfg.kind);
        }
    }

    #[test]
    fn sgd_momentum_matches_pytorch_by_hand() {
        // torch: buf = g (step 1), buf = 0.9*buf + g after; w -= lr*buf.
        let dev = Device::cpu(0, 1);
        let mut p = Param::new("w", &[1], vec![1.0], false, &dev).unwrap();
        let mut opt = Optimizer::new(OptimConfig::sgd(0.1)).unwrap();
        for _ in 0..2 {
            p.g = Some(Tensor::from_vec(&[1], vec![1.0], MemCategory::Grads, dev.mem()).unwrap());
            opt.step(&mut [&mut p], 1.0).unwrap();
        }
        // step1: w = 1 - 0.1*1 = 0.9; step2: buf = 1.9, w = 0.9 - 0.19 = 0.71
        assert!((p.w.f32().unwrap()[0] - 0.71).abs() < 1e-6);
    }

    #[test]
    fn skips_params_without_grad_and_rejects_bad_lr() {
        let dev = Device::cpu(0, 1);
        let mut p = quad_param(&dev);
        let mut opt = Optimizer::new(OptimConfig::sgd(0.1)).unwrap();
        opt.step(&mut [&mut p], 1.0).unwrap();
        assert_eq!(p.w.f32().unwrap(), &[1.0, -2.0]);
        assert!(Optimizer::new(OptimConfig::sgd(0.0)).is_err());
    }
}
