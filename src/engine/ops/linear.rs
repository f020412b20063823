//! Fully connected layer, `y = x W^T + b` with `W` stored `[out, in]` as in PyTorch.

use std::cell::OnceCell;

use rayon::prelude::*;

use crate::engine::amp::{half_dtype, narrow_relu};
use crate::engine::autotune;
use crate::engine::cuda::gpu::Gpu;
use crate::engine::device::{Device, MemCategory};
use crate::engine::ops::conv2d::wide;
use crate::engine::ops::desc::{InitSource, Initial, LayerSpec};
use crate::engine::ops::gemm::Mat;
use crate::engine::ops::gemm_amp::{matmul_amp, matmul_turned_amp, matmul_w, native_half, WeightB};
use crate::engine::ops::layer::{take_saved, Ctx, Layer, LayerDesc, Param};
use crate::engine::ops::layer_cuda::GpuLayer;
use crate::engine::ops::linear_bf16::{self, Rows};
use crate::engine::ops::linear_cuda::GLinear;
use crate::engine::ops::{add_bias_grad, fill_rows};
use crate::engine::rng::Rng;
use crate::engine::tensor::Tensor;
use crate::error::{Error, Result};
use crate::knobs::Amp;

pub struct Linear {
    pub d_in: usize,
    pub d_out: usize,
    pub w: Param,
    pub b: Param,
    saved_x: Option<Tensor>,
}

impl Linear {
    /// PyTorch's default init: U(-1/sqrt(in), 1/sqrt(in)) for weights and bias.
    pub fn new(d_in: usize, d_out: usize, rng: &mut Rng, dev: &Device) -> Result<Linear> {
        let bound = 1.0 / (d_in as f32).sqrt();
        let w = (0..d_in * d_out)
            .map(|_| rng.range_f32(-bound, bound))
            .collect();
        let b = (0..d_out).map(|_| rng.range_f32(-bound, bound)).collect();
        Ok(Linear {
            d_in,
            d_out,
            w: Param::new("weight", &[d_out, d_in], w, true, dev)?,
            b: Param::new("bias", &[d_out], b, false, dev)?,
            saved_x: None,
        })
    }

    fn rows(&self, x: &Tensor) -> Result<usize> {
        let n = x.shape().first().copied().unwrap_or(0);
        if n == 0 || x.len() != n * self.d_in {
            return Err(Error::Shape {
                op: "linear",
                msg: format!(
                    "input {:?} does not have {} features per row",
                    x.shape(),
                    self.d_in
                ),
            });
        }
        Ok(n)
    }
}

/// The second GEMM strategy: rows split evenly over the compute threads, each block a
/// single-threaded GEMM. It wins over the GEMM's own parallel split when the batch is
/// tall and the weight matrix small enough for every thread to keep its own copy hot.
fn rowsplit(
    y: &mut [f32],
    x: &[f32],
    (n, d_in, d_out): (usize, usize, usize),
    w: WeightB,
    (amp, relu): (Amp, bool),
) -> Result<()> {
    let per = n.div_ceil(rayon::current_num_threads().max(1)).max(1);
    y[..n * d_out]
        .par_chunks_mut(per * d_out)
        .zip(x[..n * d_in].par_chunks(per * d_in))
        .try_for_each(|(yc, xc)| {
            let rows = xc.len() / d_in;
            matmul_w(
                yc,
                Mat::rm(xc, rows, d_in),
                w,
                true,
                gemm::Parallelism::None,
                amp,
            )?;
            if relu {
                // This block was just written by this thread and is still in its cache.
                yc.iter_mut().for_each(|v| *v = v.max(0.0));
            }
            Ok(())
        })
}

/// The third GEMM strategy: `y = x W^T` turned (`gemm::matmul_turned`), bit-identical to
/// `gemm`. 128x1024 -> 1024 forward, Sapphire Rapids, best of 7x20 back to back
/// (`matmul` alone): 2.13 -> 1.81 ms at 1 thread, 1.93 -> 1.30 ms at 2; 128x784 -> 1024:
/// 1.34 -> 1.42 ms at 1 thread (slower), 1.14 -> 1.06 ms at 2.
fn transposed(
    y: &mut [f32],
    x: &[f32],
    n: usize,
    (d_in, d_out): (usize, usize),
    w: &[f32],
    bias: &[f32],
    ctx: &Ctx,
) -> Result<()> {
    fill_rows(&mut y[..n * d_out], bias);
    ctx.dev.with_workspace(n * d_out, |t| {
        matmul_turned_amp(
            y,
            Mat::rm(x, n, d_in),
            Mat::rm(w, d_out, d_in).t(),
            true,
            (ctx.dev.par(), ctx.amp),
            t,
        )
    })
}

/// The forward strategies in the heuristic's order: `transposed` first where the input
/// is at least 8 times as wide as the batch and the output at least 256 wide (where it
/// won at 1 and 2 threads in the measurements on `transposed`; a 10-wide output lost 2x).
fn forward_algos(n: usize, d_in: usize, d_out: usize) -> [&'static str; 3] {
    let [gemm, rowsplit, trans] = autotune::LINEAR_ALGOS;
    if d_in >= 8 * n && d_out >= 256 {
        [trans, gemm, rowsplit]
    } else {
        [gemm, rowsplit, trans]
    }
}

/// A linear layer's description: `d_in` to `d_out`, with a bias.
#[derive(Debug)]
pub struct LinearDesc {
    pub d_in: usize,
    pub d_out: usize,
}

impl LayerSpec for LinearDesc {
    fn op(&self) -> &'static str {
        "linear"
    }
    fn cpu(&self, rng: &mut Rng, dev: &Device) -> Result<Box<dyn Layer>> {
        Ok(Box::new(Linear::new(self.d_in, self.d_out, rng, dev)?))
    }
    fn init(&self, rng: &mut Rng, out: &mut Initial) -> Result<()> {
        let (d_in, d_out) = (self.d_in, self.d_out);
        let w = Initial::uniform(rng, d_in * d_out, d_in);
        let b = Initial::uniform(rng, d_out, d_in);
        out.param("weight", &[d_out, d_in], w, true);
        out.param("bias", &[d_out], b, false);
        Ok(())
    }
    fn gpu(&self, gpu: &Gpu, src: &mut InitSource) -> Result<Box<dyn GpuLayer>> {
        Ok(Box::new(GLinear {
            d_in: self.d_in,
            d_out: self.d_out,
            w: src.param(gpu, "weight", self.d_in * self.d_out)?,
            b: src.param(gpu, "bias", self.d_out)?,
            saved_x: None,
        }))
    }
}

impl Layer for Linear {
    fn name(&self) -> String {
        format!("linear({}->{})", self.d_in, self.d_out)
    }

    fn describe(&self) -> LayerDesc {
        Box::new(LinearDesc {
            d_in: self.d_in,
            d_out: self.d_out,
        })
    }

    fn forward(&mut self, x: Tensor, ctx: &Ctx) -> Result<Tensor> {
        self.forward_with(x, ctx, false)
    }

    fn backward(&mut self, dy: Tensor, need_dx: bool, ctx: &Ctx) -> Result<Option<Tensor>> {
        self.backward_with(dy, need_dx, ctx, true)
    }

    fn clear_saved(&mut self) {
        self.saved_x = None;
    }

    fn visit_params(&mut self, f: &mut dyn FnMut(&mut Param)) {
        f(&mut self.w);
        f(&mut self.b);
    }
}

/// `max(v, 0)` in place, in parallel chunks.
fn relu_in_place(v: &mut [f32]) {
    v.par_chunks_mut(1 << 14).for_each(|c| {
        for v in c {
            *v = v.max(0.0);
        }
    });
}

impl Linear {
    /// Forward, with a ReLU epilogue when `relu` (the fused Linear+ReLU, ops/fused.rs):
    /// the ReLU runs in the pass that narrows the output to the half type under AMP (no
    /// pass of its own, and no widen-ReLU-narrow round trip), and in f32 on each
    /// thread's row block right after its GEMM under `rowsplit`, else in one pass after
    /// the GEMM (the gemm crate owns its output pass). Bit for bit the unfused pair's
    /// output: rounding to the half grid keeps the sign, so it commutes with ReLU.
    pub(crate) fn forward_with(&mut self, x: Tensor, ctx: &Ctx, relu: bool) -> Result<Tensor> {
        let n = self.rows(&x)?;
        // Widened only for the kernels that read f32 (not on the tile path).
        let xcell = OnceCell::new();
        // Packed for the native bf16 GEMM once per optimizer step, not per call.
        let w = self.w.kernel_weights(ctx.amp);
        let key = format!("n{n} {}->{} {}", self.d_in, self.d_out, ctx.dtype_name());
        let (wm, bd) = (w.t()?, self.b.w.f32()?);
        let tiles = native_half(ctx.amp) && linear_bf16::applies();
        let (d_in, d_out) = (self.d_in, self.d_out);
        // Under AMP the ReLU rides on the narrowing pass instead.
        let f32_relu = relu && half_dtype(ctx.amp).is_none();
        let y = ctx
            .algos
            .run("linear", &key, &forward_algos(n, d_in, d_out), |algo| {
                // Every element is written: the bias first, then the GEMM adds onto it.
                let mut y = ctx.scratch(&[n, d_out]);
                let yd = y.f32_mut()?;
                match (algo, wm) {
                    ("transposed", WeightB::Mat(_)) => {
                        let xd = wide(&x, &xcell)?;
                        transposed(yd, xd, n, (d_in, d_out), w.f32()?, bd, ctx)?
                    }
                    ("rowsplit", _) => {
                        fill_rows(yd, bd);
                        let xd = wide(&x, &xcell)?;
                        rowsplit(yd, xd, (n, d_in, d_out), wm, (ctx.amp, f32_relu))?;
                    }
                    // `gemm` (and `transposed`, as below) on the tile unit: the stored
                    // bf16 input laid out for the tiles as it is read.
                    (_, WeightB::Packed(p)) if tiles => {
                        fill_rows(yd, bd);
                        let xr = match x.bf16() {
                            Some(h) => Rows::bf16(h),
                            None => Rows::F32(wide(&x, &xcell)?),
                        };
                        let t = threads(ctx);
                        ctx.dev
                            .with_workspace(linear_bf16::forward_ws(n, d_in), |ws| {
                                linear_bf16::forward(xr, (n, d_in), p, yd, t, ws)
                            })?;
                    }
                    // `transposed` on a packed operand is this: the bf16 kernel packs
                    // either orientation alike, so `matmul_turned_amp` runs it unturned.
                    _ => {
                        fill_rows(yd, bd);
                        let xm = Mat::rm(wide(&x, &xcell)?, n, d_in);
                        matmul_w(yd, xm, wm, true, ctx.dev.par(), ctx.amp)?;
                    }
                }
                if f32_relu && algo != "rowsplit" {
                    relu_in_place(yd);
                }
                Ok(y)
            })?;
        drop((xcell, w));
        if ctx.save {
            self.saved_x = Some(ctx.store(x)?);
        }
        match half_dtype(ctx.amp) {
            Some(dt) if relu => Tensor::from_buf(
                y.shape(),
                narrow_relu(y.f32()?, dt, ctx.dev.mem())?,
                MemCategory::Activations,
                ctx.dev.mem(),
            ),
            _ => ctx.store(y),
        }
    }

    /// Backward; without `bias_grad` the caller has summed the bias gradient already (the
    /// fused bias+ReLU layer does it in its mask pass, ops/fused.rs).
    pub(crate) fn backward_with(
        &mut self,
        dy: Tensor,
        need_dx: bool,
        ctx: &Ctx,
        bias_grad: bool,
    ) -> Result<Option<Tensor>> {
        let x = take_saved(&mut self.saved_x, "linear")?;
        let stored = x.bf16().is_some() && dy.bf16().is_some();
        if stored && native_half(ctx.amp) && linear_bf16::applies() {
            return self.backward_tiles(&x, &dy, need_dx, ctx, bias_grad);
        }
        let x = x.into_f32()?;
        let dy = dy.into_f32()?;
        let n = self.rows(&x)?;
        let dyd = dy.f32()?;
        let dym = Mat::rm(dyd, n, self.d_out);
        {
            let (gw, acc) = self.w.grad_slot()?;
            matmul_amp(
                gw,
                dym.t(),
                Mat::rm(x.f32()?, n, self.d_in),
                acc,
                ctx.dev.par(),
                ctx.amp,
            )?;
        }
        if bias_grad {
            add_bias_grad(&mut self.b, dyd)?;
        }
        if !need_dx {
            return Ok(None);
        }
        let w = self.w.kernel_weights(ctx.amp);
        // Written whole by the GEMM (not accumulating).
        let mut dx = ctx.scratch(x.shape());
        matmul_w(dx.f32_mut()?, dym, w.n()?, false, ctx.dev.par(), ctx.amp)?;
        drop(w);
        Ok(Some(ctx.store(dx)?))
    }
}

impl Linear {
    /// Backward under native bf16 on the tile unit (`linear_bf16`): `x` and `dy` read as
    /// stored. Bit for bit the packing path's gradients.
    fn backward_tiles(
        &mut self,
        x: &Tensor,
        dy: &Tensor,
        need_dx: bool,
        ctx: &Ctx,
        bias_grad: bool,
    ) -> Result<Option<Tensor>> {
        let (Some(xb), Some(dyb)) = (x.bf16(), dy.bf16()) else {
            return Err(Error::Runtime(
                "linear: bf16 input and gradient expected".into(),
            ));
        };
        let (n, x_rows) = (self.rows(x)?, Rows::bf16(xb));
        let (d_in, d_out, t) = (self.d_in, self.d_out, threads(ctx));
        {
            let (gw, acc) = self.w.grad_slot()?;
            let len = linear_bf16::weight_grad_ws(n, d_in, d_out);
            ctx.dev.with_workspace(len, |ws| {
                linear_bf16::weight_grad(x_rows, dyb, (n, d_in, d_out), gw, acc, t, ws)
            })?;
        }
        if bias_grad {
            add_bias_grad(&mut self.b, dy.widened()?.f32()?)?;
        }
        if !need_dx {
            return Ok(None);
        }
        let w = self.w.kernel_weights(ctx.amp);
        let WeightB::Packed(p) = w.n()? else {
            return Err(Error::Runtime("linear: bf16 weights not packed".into()));
        };
        // Written whole by the GEMM (not accumulating).
        let mut dx = ctx.scratch(x.shape());
        let dxd = dx.f32_mut()?;
        ctx.dev
            .with_workspace(linear_bf16::input_grad_ws(n, d_out), |ws| {
                linear_bf16::input_grad(dyb, (n, d_out), p, dxd, t, ws)
            })?;
        drop(w);
        Ok(Some(ctx.store(dx)?))
    }
}

/// The compute threads the GEMMs split over.
fn threads(ctx: &Ctx) -> usize {
    match ctx.dev.par() {
        gemm::Parallelism::Rayon(t) => t,
        gemm::Parallelism::None => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::ops::gemm::matmul;

    /// `transposed` gives `gemm`'s bits, bias included, where k spans several of gemm's
    /// k-blocks (1024) and where n and d_out are not multiples of the tile.
    #[test]
    fn transposed_is_bit_identical_to_gemm() {
        let ctx = Ctx::train(&Device::cpu(0, 1));
        for (n, d_in, d_out) in [(16, 1024, 1024), (37, 300, 45), (128, 784, 300)] {
            let x: Vec<f32> = (0..n * d_in)
                .map(|i| ((i * 7919) % 1000) as f32 * 1e-3 - 0.5)
                .collect();
            let w: Vec<f32> = (0..d_out * d_in)
                .map(|i| ((i * 104_729) % 997) as f32 * 1e-3 - 0.5)
                .collect();
            let b: Vec<f32> = (0..d_out).map(|i| i as f32 * 0.01 - 0.2).collect();
            let mut want = vec![0.0; n * d_out];
            fill_rows(&mut want, &b);
            matmul(
                &mut want,
                Mat::rm(&x, n, d_in),
                Mat::rm(&w, d_out, d_in).t(),
                true,
                gemm::Parallelism::None,
            )
            .unwrap();
            let mut got = vec![f32::NAN; n * d_out];
            transposed(&mut got, &x, n, (d_in, d_out), &w, &b, &ctx).unwrap();
            let same = want
                .iter()
                .zip(&got)
                .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "{n}x{d_in}->{d_out}: transposed differs from gemm");
        }
    }

    #[test]
    fn rowsplit_agrees_with_one_gemm() {
        let (n, d_in, d_out) = (37, 29, 13);
        let x: Vec<f32> = (0..n * d_in)
            .map(|i| ((i * 7) % 23) as f32 / 11.0 - 1.0)
            .collect();
        let w: Vec<f32> = (0..d_out * d_in)
            .map(|i| ((i * 5) % 17) as f32 / 9.0 - 1.0)
            .collect();
        let wm = Mat::rm(&w, d_out, d_in).t();
        let mut a = vec![0.5; n * d_out];
        let mut b = a.clone();
        matmul(
            &mut a,
            Mat::rm(&x, n, d_in),
            wm,
            true,
            gemm::Parallelism::None,
        )
        .unwrap();
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        pool.install(|| {
            rowsplit(
                &mut b,
                &x,
                (n, d_in, d_out),
                WeightB::Mat(wm),
                (Amp::Off, false),
            )
        })
        .unwrap();
        for (u, v) in a.iter().zip(&b) {
            assert!((u - v).abs() <= 1e-5 * (1.0 + u.abs()), "{u} vs {v}");
        }
    }
}
