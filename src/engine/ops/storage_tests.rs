//! Tests of how layers use storage (#30): outputs written into recycled buffers
//! (`Tensor::scratch`) must not depend on what those buffers held, and batch norm and
//! ReLU reading and writing bf16 storage directly must give the widen-compute-narrow
//! path's results bit for bit.

use std::sync::Arc;

use crate::engine::device::{Device, RECYCLE_MIN};
use crate::engine::ops::activation::{Gelu, Relu};
use crate::engine::ops::batchnorm::BatchNorm2d;
use crate::engine::ops::conv2d::Conv2d;
use crate::engine::ops::fused::LinearRelu;
use crate::engine::ops::layer::{Ctx, Layer};
use crate::engine::ops::linear::Linear;
use crate::engine::ops::pool::{GlobalAvgPool, MaxPool2d};
use crate::engine::rng::Rng;
use crate::engine::tensor::{DType, Tensor};
use crate::knobs::Amp;

type Make = fn(&Arc<Device>) -> Box<dyn Layer>;

fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut r = Rng::new(seed);
    (0..n).map(|_| r.range_f32(-1.0, 1.0)).collect()
}

fn bits(t: &Tensor) -> Vec<u32> {
    let w = t.widened().unwrap();
    w.f32().unwrap().iter().map(|v| v.to_bits()).collect()
}

/// Output, input gradient and parameter gradients (as bits) of one forward and backward.
fn run(l: &mut dyn Layer, x: Tensor, dy: &dyn Fn(&[usize]) -> Tensor, ctx: &Ctx) -> Vec<u32> {
    let y = l.forward(x, ctx).unwrap();
    let mut out = bits(&y);
    let dx = l.backward(dy(y.shape()), true, ctx).unwrap().unwrap();
    out.extend(bits(&dx));
    l.visit_params(&mut |p| {
        if let Some(g) = &p.g {
            out.extend(g.f32().unwrap().iter().map(|v| v.to_bits()));
        }
    });
    out
}

/// Every layer that writes its outputs into recycled buffers gives the same bits when
/// the recycle bin holds NaN-filled buffers (f32 and bf16) of every size it asks for as
/// on a fresh device, in f32 and bf16: no element is left with a buffer's old contents.
#[test]
fn outputs_do_not_depend_on_what_recycled_buffers_held() {
    let cases: [(&str, Make, [usize; 4]); 8] = [
        (
            "linear",
            |d| Box::new(Linear::new(256, 256, &mut Rng::new(1), d).unwrap()),
            [64, 256, 0, 0],
        ),
        (
            "linear_relu",
            |d| Box::new(LinearRelu::new(256, 256, &mut Rng::new(1), d).unwrap()),
            [64, 256, 0, 0],
        ),
        (
            "conv3x3",
            |d| Box::new(Conv2d::new(64, 64, 3, 1, 1, true, &mut Rng::new(2), d).unwrap()),
            [2, 16, 16, 64],
        ),
        (
            "conv1x1",
            |d| Box::new(Conv2d::new(64, 64, 1, 1, 0, false, &mut Rng::new(3), d).unwrap()),
            [2, 16, 16, 64],
        ),
        (
            "batchnorm",
            |d| Box::new(BatchNorm2d::new(64, d).unwrap()),
            [2, 16, 16, 64],
        ),
        (
            "maxpool",
            |_| Box::new(MaxPool2d::new(2, 2)),
            [4, 32, 32, 16],
        ),
        ("gelu", |_| Box::new(Gelu::default()), [64, 256, 0, 0]),
        (
            "global_avg_pool",
            |_| Box::new(GlobalAvgPool::default()),
            [4, 32, 32, 16],
        ),
    ];
    for amp in [Amp::Off, Amp::Bf16] {
        for (name, make, dims) in cases {
            let shape: Vec<usize> = dims.iter().copied().filter(|d| *d > 0).collect();
            let n: usize = shape.iter().product();
            let once = |poison: bool| {
                let dev = Device::cpu(0, 1);
                let ctx = Ctx {
                    amp,
                    ..Ctx::train(&dev)
                };
                let mem = dev.mem();
                if poison {
                    // Every length a layer here can ask for: its input's and its
                    // output's (a conv of stride 1, a pool halving each side).
                    assert!(n >= RECYCLE_MIN, "{name}: {n} values are not recycled");
                    for len in [n, n / 4] {
                        for _ in 0..4 {
                            mem.recycle(vec![f32::NAN; len]);
                            mem.recycle(vec![half::bf16::NAN; len]);
                        }
                    }
                }
                let x = ctx.from_vec(&shape, values(n, 7)).unwrap();
                let x = ctx.store(x).unwrap();
                let dy = |s: &[usize]| {
                    let t = ctx.from_vec(s, values(s.iter().product(), 8)).unwrap();
                    ctx.store(t).unwrap()
                };
                run(make(&dev).as_mut(), x, &dy, &ctx)
            };
            let (fresh, poisoned) = (once(false), once(true));
            assert!(
                fresh.iter().all(|b| f32::from_bits(*b).is_finite()),
                "{name} {amp:?}: non-finite on a fresh device"
            );
            assert!(
                fresh == poisoned,
                "{name} under amp={amp:?}: results depend on a recycled buffer's contents"
            );
        }
    }
}

/// Batch norm (plain and with the fused ReLU) and ReLU on bf16 storage give what the
/// f32 path gives on the same values (widen, compute, narrow): outputs, input
/// gradients, parameter gradients and running statistics, bit for bit, in training and
/// in evaluation.
#[test]
fn bf16_storage_paths_match_the_widening_path_bit_for_bit() {
    let cases: [(&str, Make); 3] = [
        ("batchnorm", |d| Box::new(BatchNorm2d::new(6, d).unwrap())),
        ("batchnorm_relu", |d| {
            Box::new(BatchNorm2d::with_relu(6, d).unwrap())
        }),
        ("relu", |_| Box::new(Relu::default())),
    ];
    let shape = [3, 5, 7, 6];
    let n: usize = shape.iter().product();
    for (name, make) in cases {
        for train in [true, false] {
            let one = |bf16_in: bool| {
                let dev = Device::cpu(0, 2);
                let ctx = Ctx {
                    amp: Amp::Bf16,
                    train,
                    save: train,
                    ..Ctx::train(&dev)
                };
                let mut l = make(&dev);
                // A shifted beta puts part of every channel below zero and part above.
                l.visit_params(&mut |p| {
                    if p.name == "bias" {
                        for (i, v) in p.w.f32_mut().unwrap().iter_mut().enumerate() {
                            *v = 0.3 * i as f32 - 0.7;
                        }
                    }
                });
                // Values on the bf16 grid, given as bf16 storage or as f32.
                let input = |len: usize, seed: u64, s: &[usize]| {
                    let t = ctx.from_vec(s, values(len, seed)).unwrap();
                    let h = t.to_dtype(DType::Bf16, t.category()).unwrap();
                    if bf16_in {
                        h
                    } else {
                        h.widened().unwrap()
                    }
                };
                let x = input(n, 1, &shape);
                assert_eq!(x.bf16().is_some(), bf16_in);
                let y = l.forward(x, &ctx).unwrap();
                assert_eq!(y.dtype(), DType::Bf16, "{name}: output not stored in bf16");
                let mut out = bits(&y);
                if train {
                    let dx = l
                        .backward(input(n, 2, &shape), true, &ctx)
                        .unwrap()
                        .unwrap();
                    assert_eq!(dx.dtype(), DType::Bf16);
                    out.extend(bits(&dx));
                    l.visit_params(&mut |p| {
                        out.extend(
                            p.g.as_ref()
                                .unwrap()
                                .f32()
                                .unwrap()
                                .iter()
                                .map(|v| v.to_bits()),
                        )
                    });
                }
                l.visit_buffers(&mut |_, b| out.extend(b.iter().map(|v| v.to_bits())));
                out
            };
            let (wide, direct) = (one(false), one(true));
            let zeros = wide.iter().filter(|b| **b == 0).count();
            assert!(
                zeros > 0 || !name.contains("relu"),
                "{name}: nothing clipped"
            );
            assert!(
                wide == direct,
                "{name} (train={train}): bf16 storage path differs from the widening path"
            );
        }
    }
}

/// Global average pooling on bf16 storage (the input read as stored, the input gradient
/// written in bf16) gives the f32 path's results on the same values, narrowed as
/// `ctx.store` narrows them, bit for bit.
#[test]
fn global_avg_pool_on_bf16_storage_is_the_f32_path_narrowed() {
    let (shape, out) = ([3, 5, 7, 6], [3, 6]);
    let on_grid = |len: usize, seed: u64| -> Vec<f32> {
        values(len, seed)
            .iter()
            .map(|v| crate::engine::amp::narrow_bf16(*v).to_f32())
            .collect()
    };
    let (x, dy) = (on_grid(3 * 5 * 7 * 6, 1), on_grid(3 * 6, 2));
    let one = |amp: Amp| {
        let dev = Device::cpu(0, 2);
        let ctx = Ctx {
            amp,
            ..Ctx::train(&dev)
        };
        let store = |v: &[f32], s: &[usize]| ctx.store(ctx.from_vec(s, v.to_vec()).unwrap());
        let mut l = GlobalAvgPool::default();
        let y = l.forward(store(&x, &shape).unwrap(), &ctx).unwrap();
        let dx = l.backward(store(&dy, &out).unwrap(), true, &ctx).unwrap();
        let dx = dx.unwrap();
        assert_eq!(
            dx.dtype(),
            y.dtype(),
            "{amp:?}: the input gradient's storage"
        );
        let narrowed = |t: &Tensor| {
            let t = t
                .to_dtype(DType::Bf16, t.category())
                .unwrap_or_else(|_| t.clone());
            bits(&t)
        };
        (narrowed(&y), narrowed(&dx))
    };
    let (want, got) = (one(Amp::Off), one(Amp::Bf16));
    assert!(
        want.0 == got.0,
        "bf16 pooling's output differs from f32's narrowed"
    );
    assert!(
        want.1 == got.1,
        "bf16 pooling's input gradient differs from f32's narrowed"
    );
}
