//! Finite-difference gradient checks for every op and every backward path (input and
//! parameter gradients), through the same `Layer` interface training uses.
//!
//! Tolerances: central differences on f32 ops with eps = 1e-2 and the loss summed in
//! f64 give about 1e-3 absolute noise, so the check is |fd - analytic| <= 5e-3 + 2e-2*|analytic|.
//! A probe whose step crosses a kink (ReLU, max-pool ties) is not differentiable there:
//! such probes are recognised because differences at eps and eps/2 disagree, and are
//! skipped; at least two thirds of the input probes must be kink-free.

use std::sync::Arc;

use crate::engine::device::{Device, MemCategory};
use crate::engine::ops::layer::{Ctx, Layer};
use crate::engine::rng::Rng;
use crate::engine::tensor::Tensor;

const EPS: f32 = 1e-2;
const ATOL: f64 = 5e-3;
const RTOL: f64 = 2e-2;

fn loss(layer: &mut dyn Layer, x: &[f32], shape: &[usize], r: &[f32], dev: &Arc<Device>) -> f64 {
    let ctx = Ctx {
        save: false,
        recompute: true,
        ..Ctx::train(dev)
    };
    let xt = Tensor::from_vec(shape, x.to_vec(), MemCategory::Activations, dev.mem()).unwrap();
    let y = layer.forward(xt, &ctx).unwrap();
    y.f32()
        .unwrap()
        .iter()
        .zip(r)
        .map(|(a, b)| *a as f64 * *b as f64)
        .sum()
}

fn close(fd: f64, an: f64) -> bool {
    (fd - an).abs() <= ATOL + RTOL * an.abs()
}

/// Checks input and parameter gradients of `layer` at a random input of `shape`.
/// `away_from_zero` keeps inputs off ReLU-style kinks.
pub fn check(mut layer: Box<dyn Layer>, shape: &[usize], seed: u64, away_from_zero: bool) {
    let dev = Device::cpu(0, 1);
    let mut rng = Rng::new(seed);
    let n: usize = shape.iter().product();
    let x: Vec<f32> = (0..n)
        .map(|_| {
            let v = rng.range_f32(-1.0, 1.0);
            if away_from_zero {
                v.signum() * (0.1 + v.abs())
            } else {
                v
            }
        })
        .collect();
    let ctx = Ctx::train(&dev);
    let y = layer
        .forward(
            Tensor::from_vec(shape, x.clone(), MemCategory::Activations, dev.mem()).unwrap(),
            &ctx,
        )
        .unwrap();
    let r: Vec<f32> = (0..y.len()).map(|_| rng.range_f32(-1.0, 1.0)).collect();
    let dy = Tensor::from_vec(y.shape(), r.clone(), MemCategory::Activations, dev.mem()).unwrap();
    drop(y);
    let dx = layer
        .backward(dy, true, &ctx)
        .unwrap()
        .expect("input gradient");
    let dx = dx.f32().unwrap().to_vec();
    let name = layer.name();

    let mut usable = 0;
    for _ in 0..12 {
        let i = rng.below(n);
        let fd_at = |layer: &mut dyn Layer, eps: f32| {
            let mut xp = x.clone();
            xp[i] += eps;
            let mut xm = x.clone();
            xm[i] -= eps;
            (loss(layer, &xp, shape, &r, &dev) - loss(layer, &xm, shape, &r, &dev))
                / (2.0 * eps as f64)
        };
        let fd = fd_at(layer.as_mut(), EPS);
        let fd_half = fd_at(layer.as_mut(), EPS / 2.0);
        if !close(fd, fd_half) {
            continue;
        }
        usable += 1;
        assert!(
            close(fd, dx[i] as f64),
            "{name}: d/dx[{i}] fd {fd} vs analytic {}",
            dx[i]
        );
    }
    assert!(
        usable >= 8,
        "{name}: only {usable} of 12 input probes were kink-free"
    );

    // Parameter gradients: collect (param index, element) probes, then perturb each.
    let mut grads: Vec<Vec<f32>> = Vec::new();
    layer.visit_params(&mut |p| {
        grads.push(
            p.g.as_ref()
                .expect("param gradient")
                .f32()
                .unwrap()
                .to_vec(),
        )
    });
    let mut probes = 0;
    let mut usable = 0;
    for (pi, g) in grads.iter().enumerate() {
        for _ in 0..6 {
            let e = rng.below(g.len());
            let mut fd_at = |eps: f32| {
                let mut vals = [0.0f64; 2];
                for (k, delta) in [eps, -eps].into_iter().enumerate() {
                    nudge(layer.as_mut(), pi, e, delta);
                    vals[k] = loss(layer.as_mut(), &x, shape, &r, &dev);
                    nudge(layer.as_mut(), pi, e, -delta);
                }
                (vals[0] - vals[1]) / (2.0 * eps as f64)
            };
            let fd = fd_at(EPS);
            let fd_half = fd_at(EPS / 2.0);
            probes += 1;
            if !close(fd, fd_half) {
                continue;
            }
            usable += 1;
            assert!(
                close(fd, g[e] as f64),
                "{name}: param {pi}[{e}] fd {fd} vs analytic {}",
                g[e]
            );
        }
    }
    assert!(
        3 * usable >= 2 * probes,
        "{name}: only {usable} of {probes} parameter probes were kink-free"
    );
}

fn nudge(layer: &mut dyn Layer, param: usize, elem: usize, delta: f32) {
    let mut idx = 0;
    layer.visit_params(&mut |p| {
        if idx == param {
            p.w.f32_mut().unwrap()[elem] += delta;
        }
        idx += 1;
    });
}

#[cfg(test)]
mod tests {
    use super::check;
    use crate::engine::device::Device;
    use crate::engine::nn::residual::BasicBlock;
    use crate::engine::ops::activation::{Gelu, Relu};
    use crate::engine::ops::batchnorm::BatchNorm2d;
    use crate::engine::ops::conv2d::Conv2d;
    use crate::engine::ops::linear::Linear;
    use crate::engine::ops::pool::{Flatten, GlobalAvgPool, MaxPool2d};
    use crate::engine::rng::Rng;

    fn dev() -> std::sync::Arc<Device> {
        Device::cpu(0, 1)
    }

    #[test]
    fn linear() {
        check(
            Box::new(Linear::new(7, 5, &mut Rng::new(1), &dev()).unwrap()),
            &[3, 7],
            10,
            false,
        );
    }

    #[test]
    fn conv2d_3x3_padded_stride1_with_bias() {
        check(
            Box::new(Conv2d::new(3, 4, 3, 1, 1, true, &mut Rng::new(2), &dev()).unwrap()),
            &[2, 5, 5, 3],
            11,
            false,
        );
    }

    #[test]
    fn conv2d_3x3_stride2() {
        check(
            Box::new(Conv2d::new(2, 3, 3, 2, 1, false, &mut Rng::new(3), &dev()).unwrap()),
            &[2, 6, 6, 2],
            12,
            false,
        );
    }

    #[test]
    fn conv2d_1x1_pointwise_and_strided() {
        check(
            Box::new(Conv2d::new(3, 4, 1, 1, 0, false, &mut Rng::new(4), &dev()).unwrap()),
            &[2, 3, 3, 3],
            13,
            false,
        );
        check(
            Box::new(Conv2d::new(3, 4, 1, 2, 0, false, &mut Rng::new(5), &dev()).unwrap()),
            &[2, 4, 4, 3],
            14,
            false,
        );
    }

    #[test]
    fn batchnorm2d() {
        check(
            Box::new(BatchNorm2d::new(3, &dev()).unwrap()),
            &[4, 3, 3, 3],
            15,
            false,
        );
    }

    #[test]
    fn relu() {
        check(Box::new(Relu::default()), &[3, 4, 4, 2], 16, true);
    }

    #[test]
    fn gelu() {
        check(Box::new(Gelu::default()), &[3, 8], 17, false);
    }

    #[test]
    fn max_pool() {
        check(Box::new(MaxPool2d::new(2, 2)), &[2, 4, 4, 3], 18, false);
    }

    #[test]
    fn global_avg_pool_and_flatten() {
        check(Box::new(GlobalAvgPool::default()), &[2, 3, 3, 4], 19, false);
        check(Box::new(Flatten::default()), &[2, 3, 3, 4], 20, false);
    }

    /// The block's wiring (branch, add, both backward paths) is checked with GELU in place
    /// of ReLU: behind BatchNorm many ReLU inputs sit within a finite-difference step of
    /// zero, so the difference quotient straddles kinks and cannot be trusted there. ReLU
    /// itself is checked above.
    #[test]
    fn residual_blocks_identity_and_projection() {
        let gelu = || -> Box<dyn crate::engine::ops::layer::Layer> { Box::new(Gelu::default()) };
        check(
            Box::new(BasicBlock::with_activation(3, 3, 1, gelu, &mut Rng::new(6), &dev()).unwrap()),
            &[4, 4, 4, 3],
            21,
            false,
        );
        check(
            Box::new(BasicBlock::with_activation(2, 4, 2, gelu, &mut Rng::new(7), &dev()).unwrap()),
            &[4, 4, 4, 2],
            22,
            false,
        );
    }
}
