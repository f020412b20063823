//! Fused pointwise chains (`fuse = on`, the engine's side of `torch.compile`): a Linear
//! followed by ReLU, and batch norm followed by ReLU, each one layer whose pointwise work
//! runs in the passes the pair already makes over its tensors.
//!
//! - bias + ReLU: the bias is already in the GEMM's accumulator (`fill_rows`), and the
//!   ReLU is the GEMM's epilogue (`Linear::forward_with`): under AMP it runs in the pass
//!   that narrows the output to the half type (the unfused pair narrows, widens, clips
//!   and narrows again), in f32 on each row block right after its GEMM (`rowsplit`) or
//!   in one pass after it; the backward applies ReLU's mask in the pass that sums the
//!   bias gradient (one pass over `dy` instead of two). On CUDA
//!   the forward is the GEMM plus one bias+ReLU kernel instead of fill, GEMM and ReLU.
//! - batch norm + ReLU: ReLU in the pass that writes `gamma * xhat + beta`, and its mask
//!   recomputed from the saved `xhat` inside batch norm's two backward passes
//!   (`BatchNorm2d::relu`, described by `BnReluDesc` in batchnorm.rs), so the pair keeps
//!   no ReLU output and makes no pass of its own.
//!
//! Same f32 operations in the same order as the unfused pair: bit for bit in f32. Under
//! AMP the fused backward sums the bias gradient before the gradient is narrowed to the
//! half type rather than after, so the two differ within half rounding there.

use rayon::prelude::*;

use crate::engine::cuda::gpu::Gpu;
use crate::engine::device::Device;
use crate::engine::ops::desc::{InitSource, Initial, LayerSpec};
use crate::engine::ops::fused_cuda::linear_relu_gpu;
use crate::engine::ops::layer::{take_saved, Ctx, Layer, LayerDesc, Param};
use crate::engine::ops::layer_cuda::GpuLayer;
use crate::engine::ops::linear::{Linear, LinearDesc};
use crate::engine::rng::Rng;
use crate::engine::tensor::Tensor;
use crate::error::Result;

/// A Linear and the ReLU after it, as one layer.
#[derive(Debug)]
pub struct LinearReluDesc(pub LinearDesc);

impl LayerSpec for LinearReluDesc {
    fn op(&self) -> &'static str {
        "linear_relu"
    }
    fn cpu(&self, rng: &mut Rng, dev: &Device) -> Result<Box<dyn Layer>> {
        Ok(Box::new(LinearRelu {
            lin: Linear::new(self.0.d_in, self.0.d_out, rng, dev)?,
            saved_y: None,
        }))
    }
    fn init(&self, rng: &mut Rng, out: &mut Initial) -> Result<()> {
        self.0.init(rng, out)
    }
    fn gpu(&self, gpu: &Gpu, src: &mut InitSource) -> Result<Box<dyn GpuLayer>> {
        linear_relu_gpu(&self.0, gpu, src)
    }
    fn holds(&self, op: &str) -> bool {
        matches!(op, "linear_relu" | "linear" | "relu")
    }
}

pub struct LinearRelu {
    lin: Linear,
    saved_y: Option<Tensor>,
}

impl LinearRelu {
    pub fn new(d_in: usize, d_out: usize, rng: &mut Rng, dev: &Device) -> Result<LinearRelu> {
        Ok(LinearRelu {
            lin: Linear::new(d_in, d_out, rng, dev)?,
            saved_y: None,
        })
    }
}

/// ReLU's mask on `dy` (zero where the output `y <= 0`, as ReLU's backward) and the bias
/// gradient's column sums of the masked `dy`, in one pass. Threads split the columns, and
/// each sums its columns over the rows in row order, as `add_bias_grad` does: the same
/// sums bit for bit at any thread count.
fn mask_and_bias_grad(dy: &mut [f32], y: &[f32], gb: &mut [f32]) {
    let width = gb.len();
    if width == 0 {
        return;
    }
    let blocks = rayon::current_num_threads().clamp(1, width);
    let cb = width.div_ceil(blocks);
    let nb = width.div_ceil(cb);
    let mut cols: Vec<Vec<&mut [f32]>> = (0..nb).map(|_| Vec::new()).collect();
    for row in dy.chunks_exact_mut(width) {
        for (b, part) in row.chunks_mut(cb).enumerate() {
            cols[b].push(part);
        }
    }
    cols.into_par_iter()
        .zip(gb.par_chunks_mut(cb))
        .enumerate()
        .for_each(|(b, (rows, g))| {
            for (r, d) in rows.into_iter().enumerate() {
                let start = r * width + b * cb;
                let yr = &y[start..start + d.len()];
                for ((d, y), g) in d.iter_mut().zip(yr).zip(g.iter_mut()) {
                    if *y <= 0.0 {
                        *d = 0.0;
                    }
                    *g += *d;
                }
            }
        });
}

impl Layer for LinearRelu {
    fn name(&self) -> String {
        format!("linear_relu({}->{})", self.lin.d_in, self.lin.d_out)
    }

    fn describe(&self) -> LayerDesc {
        Box::new(LinearReluDesc(LinearDesc {
            d_in: self.lin.d_in,
            d_out: self.lin.d_out,
        }))
    }

    fn forward(&mut self, x: Tensor, ctx: &Ctx) -> Result<Tensor> {
        let y = self.lin.forward_with(x, ctx, true)?;
        if ctx.save {
            self.saved_y = Some(y.clone());
        }
        Ok(y)
    }

    fn backward(&mut self, dy: Tensor, need_dx: bool, ctx: &Ctx) -> Result<Option<Tensor>> {
        let y = take_saved(&mut self.saved_y, "linear_relu")?.into_f32()?;
        let mut dy = dy.into_f32()?;
        {
            let (gb, _) = self.lin.b.grad_slot()?;
            mask_and_bias_grad(dy.f32_mut()?, y.f32()?, gb);
        }
        drop(y);
        self.lin.backward_with(ctx.store(dy)?, need_dx, ctx, false)
    }

    fn clear_saved(&mut self) {
        self.saved_y = None;
        self.lin.clear_saved();
    }

    fn visit_params(&mut self, f: &mut dyn FnMut(&mut Param)) {
        self.lin.visit_params(f);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::engine::device::MemCategory;
    use crate::engine::gradcheck;
    use crate::engine::ops::activation::Relu;
    use crate::engine::ops::batchnorm::BatchNorm2d;
    use crate::knobs::Amp;

    fn tensor(dev: &Arc<Device>, shape: &[usize], seed: u64) -> Tensor {
        let mut r = Rng::new(seed);
        let n = shape.iter().product();
        let v = (0..n).map(|_| r.range_f32(-1.0, 1.0)).collect();
        Tensor::from_vec(shape, v, MemCategory::Activations, dev.mem()).unwrap()
    }

    fn bits(t: &Tensor) -> Vec<u32> {
        t.f32().unwrap().iter().map(|v| v.to_bits()).collect()
    }

    fn grads(l: &mut dyn Layer) -> Vec<u32> {
        let mut out = Vec::new();
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
        out
    }

    /// One forward and backward of `fused` and of `plain` (a list run in order) from the
    /// same weights and input: output, input gradient and parameter gradients, as bits.
    fn both(
        fused: &mut dyn Layer,
        plain: &mut [Box<dyn Layer>],
        shape: &[usize],
        threads: usize,
    ) -> [(Vec<u32>, Vec<u32>, Vec<u32>); 2] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            let dev = Device::cpu(0, threads);
            let ctx = Ctx::train(&dev);
            let x = tensor(&dev, shape, 1);
            let yf = fused.forward(x.clone(), &ctx).unwrap();
            let dy = tensor(&dev, yf.shape(), 2);
            let dxf = fused.backward(dy.clone(), true, &ctx).unwrap().unwrap();
            let mut yp = x;
            for l in plain.iter_mut() {
                yp = l.forward(yp, &ctx).unwrap();
            }
            let mut d = dy;
            for l in plain.iter_mut().rev() {
                d = l.backward(d, true, &ctx).unwrap().unwrap();
            }
            let mut gp = Vec::new();
            for l in plain.iter_mut() {
                gp.extend(grads(l.as_mut()));
            }
            [
                (bits(&yf), bits(&dxf), grads(fused)),
                (bits(&yp), bits(&d), gp),
            ]
        })
    }

    /// The fused layers give the unfused pair's output and gradients bit for bit, at 1
    /// and 3 threads (the bias-gradient pass splits columns over threads).
    #[test]
    fn fused_layers_match_the_unfused_pairs_bit_for_bit() {
        for threads in [1, 3] {
            let dev = Device::cpu(0, 1);
            let mut fused = LinearRelu::new(37, 45, &mut Rng::new(5), &dev).unwrap();
            let mut plain: Vec<Box<dyn Layer>> = vec![
                Box::new(Linear::new(37, 45, &mut Rng::new(5), &dev).unwrap()),
                Box::new(Relu::default()),
            ];
            let [f, p] = both(&mut fused, &mut plain, &[19, 37], threads);
            assert!(
                f.0 == p.0,
                "linear_relu forward differs at {threads} threads"
            );
            assert!(
                f.1 == p.1,
                "linear_relu input gradient differs at {threads} threads"
            );
            assert!(
                f.2 == p.2,
                "linear_relu weight/bias gradients differ at {threads} threads"
            );

            let mut fused = BatchNorm2d::with_relu(6, &dev).unwrap();
            let mut plain: Vec<Box<dyn Layer>> = vec![
                Box::new(BatchNorm2d::new(6, &dev).unwrap()),
                Box::new(Relu::default()),
            ];
            // A shifted beta puts part of every channel below zero and part above.
            for l in [&mut fused as &mut dyn Layer, plain[0].as_mut()] {
                l.visit_params(&mut |p| {
                    if p.name == "bias" {
                        for (i, v) in p.w.f32_mut().unwrap().iter_mut().enumerate() {
                            *v = 0.3 * i as f32 - 0.7;
                        }
                    }
                });
            }
            let [f, p] = both(&mut fused, &mut plain, &[3, 5, 7, 6], threads);
            assert!(
                f.0 == p.0,
                "batchnorm_relu forward differs at {threads} threads"
            );
            assert!(
                f.1 == p.1,
                "batchnorm_relu input gradient differs at {threads} threads"
            );
            assert!(
                f.2 == p.2,
                "batchnorm_relu gamma/beta gradients differ at {threads} threads"
            );
        }
    }

    /// The fused forward's ReLU epilogue (ReLU in the narrowing pass under AMP, in the
    /// GEMM's row blocks or one pass after it in f32) gives the unfused pair's stored
    /// output bit for bit in every precision and at 1 and 3 threads, with a bias that
    /// puts about half the outputs below zero.
    #[test]
    fn linear_relu_epilogue_matches_the_unfused_forward_in_every_precision() {
        for amp in [Amp::Off, Amp::Bf16, Amp::Fp16] {
            for threads in [1, 3] {
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .unwrap();
                let (f, p) = pool.install(|| {
                    let dev = Device::cpu(0, threads);
                    let ctx = Ctx {
                        amp,
                        ..Ctx::train(&dev)
                    };
                    let mut fused = LinearRelu::new(64, 40, &mut Rng::new(9), &dev).unwrap();
                    let mut lin = Linear::new(64, 40, &mut Rng::new(9), &dev).unwrap();
                    let mut relu = Relu::default();
                    let x = tensor(&dev, &[33, 64], 4);
                    let yf = fused.forward(x.clone(), &ctx).unwrap();
                    let yp = relu.forward(lin.forward(x, &ctx).unwrap(), &ctx).unwrap();
                    (yf, yp)
                });
                assert_eq!(f.dtype(), p.dtype(), "{amp:?} stores in another type");
                let (f, p) = (f.widened().unwrap(), p.widened().unwrap());
                let zeros = bits(&f).iter().filter(|b| **b == 0).count();
                assert!(zeros > 33 * 40 / 5, "{amp:?}: only {zeros} outputs clipped");
                assert!(
                    bits(&f) == bits(&p),
                    "linear_relu forward differs from linear then relu under amp={amp:?} \
                     at {threads} threads"
                );
            }
        }
    }

    /// Weights within +-0.05 and biases of +-0.8 keep every pre-activation at least 0.4
    /// from ReLU's kink, which a finite difference of a weight (moving 4 rows at once)
    /// otherwise crosses unseen; the mask still zeroes the outputs with a negative bias.
    #[test]
    fn linear_relu_gradients_match_finite_differences() {
        let dev = Device::cpu(0, 1);
        let mut l = LinearRelu::new(7, 5, &mut Rng::new(3), &dev).unwrap();
        l.visit_params(&mut |p| {
            let bias = p.name == "bias";
            for (i, v) in p.w.f32_mut().unwrap().iter_mut().enumerate() {
                *v = if bias {
                    if i % 2 == 0 {
                        0.8
                    } else {
                        -0.8
                    }
                } else {
                    *v * 0.13
                };
            }
        });
        gradcheck::check(Box::new(l), &[4, 7], 11, false);
    }

    #[test]
    fn batchnorm_relu_gradients_match_finite_differences() {
        let dev = Device::cpu(0, 1);
        let mut l = BatchNorm2d::with_relu(3, &dev).unwrap();
        l.visit_params(&mut |p| {
            if p.name == "bias" {
                p.w.f32_mut().unwrap().copy_from_slice(&[0.4, -0.2, 0.1]);
            }
        });
        gradcheck::check(Box::new(l), &[2, 3, 3, 3], 13, false);
    }
}
