//! Batch normalisation over NHWC activations: statistics per channel over N*H*W rows.
//!
//! Reductions run over fixed 256-row chunks combined in chunk order, so results are
//! bit-identical whatever the thread count.

use half::bf16;
use rayon::prelude::*;

use crate::engine::amp::{half_dtype, narrow_bf16, widen_bf16};
use crate::engine::cuda::gpu::Gpu;
use crate::engine::device::{Device, MemTracker};
use crate::engine::ops::batchnorm_cuda::GBatchNorm;
use crate::engine::ops::desc::{InitSource, Initial, LayerSpec};
use crate::engine::ops::layer::{Ctx, Layer, LayerDesc, Param};
use crate::engine::ops::layer_cuda::GpuLayer;
use crate::engine::ops::sync_bn;
use crate::engine::rng::Rng;
use crate::engine::tensor::{Buf, DType, Tensor};
use crate::error::{Error, Result};

const CHUNK_ROWS: usize = 256;

/// An element batch norm reads: f32, or bf16 storage widened as it is read (exact), so
/// under `amp = bf16` no widened copy of the input, the saved `xhat` or the gradient is
/// made (cnn-small, batch 64, 1 thread: batch norm was 11% of the bf16 step, most of it
/// widening and narrowing round trips).
pub(crate) trait El: Copy + Send + Sync {
    fn f(self) -> f32;
}

impl El for f32 {
    #[inline(always)]
    fn f(self) -> f32 {
        self
    }
}

impl El for bf16 {
    #[inline(always)]
    fn f(self) -> f32 {
        widen_bf16(self)
    }
}

/// Per-channel sums over all rows of `a` and `b` (same shape, walked together), `width`
/// accumulators per chunk, reduced deterministically in chunk order.
pub(crate) fn channel_sums<A: Sync, B: Sync>(
    a: &[A],
    b: &[B],
    c: usize,
    width: usize,
    f: impl Fn(&mut [f64], &[A], &[B]) + Sync,
) -> Vec<f64> {
    let partials: Vec<Vec<f64>> = a
        .par_chunks(CHUNK_ROWS * c)
        .zip(b.par_chunks(CHUNK_ROWS * c))
        .map(|(ac, bc)| {
            let mut acc = vec![0.0f64; width];
            for (ar, br) in ac.chunks_exact(c).zip(bc.chunks_exact(c)) {
                f(&mut acc, ar, br);
            }
            acc
        })
        .collect();
    let mut total = vec![0.0f64; width];
    for p in partials {
        for (t, v) in total.iter_mut().zip(p) {
            *t += v;
        }
    }
    total
}

pub struct BatchNorm2d {
    pub c: usize,
    pub eps: f32,
    pub momentum: f32,
    pub gamma: Param,
    pub beta: Param,
    pub running_mean: Vec<f32>,
    pub running_var: Vec<f32>,
    saved: Option<(Tensor, Vec<f32>)>,
    /// A ReLU fused in (`fuse = on`): applied in the output pass, and its mask recomputed
    /// from the saved `xhat` in backward, so no pass of its own and no output kept.
    pub(crate) relu: bool,
}

/// `y = gamma * xhat + beta` over rows of `c` channels, then ReLU when `RELU`: the one
/// expression both the plain and the fused layer compute, so the fused mask recomputed
/// in backward is exactly the sign the forward saw.
#[inline(always)]
fn affine<const RELU: bool>(x: f32, g: f32, b: f32) -> f32 {
    let y = g * x + b;
    if RELU {
        y.max(0.0)
    } else {
        y
    }
}

fn affine_rows<const RELU: bool>(yd: &mut [f32], xh: &[f32], gamma: &[f32], beta: &[f32]) {
    let c = gamma.len();
    yd.par_chunks_mut(CHUNK_ROWS * c)
        .zip(xh.par_chunks(CHUNK_ROWS * c))
        .for_each(|(yc, xc)| {
            for (yr, xr) in yc.chunks_exact_mut(c).zip(xc.chunks_exact(c)) {
                for (((y, x), g), b) in yr.iter_mut().zip(xr).zip(gamma).zip(beta) {
                    *y = affine::<RELU>(*x, *g, *b);
                }
            }
        });
}

fn affine_rows_in_place<const RELU: bool>(yd: &mut [f32], gamma: &[f32], beta: &[f32]) {
    let c = gamma.len();
    yd.par_chunks_mut(CHUNK_ROWS * c).for_each(|yc| {
        for yr in yc.chunks_exact_mut(c) {
            for ((y, g), b) in yr.iter_mut().zip(gamma).zip(beta) {
                *y = affine::<RELU>(*y, *g, *b);
            }
        }
    });
}

/// The fused ReLU's gradient mask on `dy`, from what forward kept: the output was
/// positive exactly where `gamma * xhat + beta > 0` (ReLU's backward zeroes `y <= 0`).
#[inline(always)]
fn masked<const RELU: bool>(d: f32, x: f32, g: f32, b: f32) -> f32 {
    if RELU && g * x + b <= 0.0 {
        0.0
    } else {
        d
    }
}

impl BatchNorm2d {
    pub fn new(c: usize, dev: &Device) -> Result<BatchNorm2d> {
        Ok(BatchNorm2d {
            c,
            eps: 1e-5,
            momentum: 0.1,
            gamma: Param::new("weight", &[c], vec![1.0; c], false, dev)?,
            beta: Param::new("bias", &[c], vec![0.0; c], false, dev)?,
            running_mean: vec![0.0; c],
            running_var: vec![1.0; c],
            saved: None,
            relu: false,
        })
    }

    /// Batch norm with the following ReLU fused in (`fuse = on`).
    pub fn with_relu(c: usize, dev: &Device) -> Result<BatchNorm2d> {
        Ok(BatchNorm2d {
            relu: true,
            ..BatchNorm2d::new(c, dev)?
        })
    }

    fn rows(&self, x: &Tensor) -> Result<usize> {
        let last = x.shape().last().copied().unwrap_or(0);
        if last != self.c || x.is_empty() {
            return Err(Error::Shape {
                op: "batchnorm",
                msg: format!("input {:?} does not end in {} channels", x.shape(), self.c),
            });
        }
        Ok(x.len() / self.c)
    }

    /// Batch mean and biased variance per channel.
    pub fn batch_stats(x: &[f32], c: usize) -> (Vec<f32>, Vec<f32>) {
        Self::batch_stats_of(x, c)
    }

    fn batch_stats_of<T: El>(x: &[T], c: usize) -> (Vec<f32>, Vec<f32>) {
        let m = (x.len() / c) as f64;
        let sum = channel_sums(x, x, c, c, |acc, row, _| {
            for (a, v) in acc.iter_mut().zip(row) {
                *a += v.f() as f64;
            }
        });
        let mean: Vec<f64> = sum.iter().map(|s| s / m).collect();
        let sq = channel_sums(x, x, c, c, |acc, row, _| {
            for ((a, v), mu) in acc.iter_mut().zip(row).zip(&mean) {
                let d = v.f() as f64 - mu;
                *a += d * d;
            }
        });
        (
            mean.iter().map(|&v| v as f32).collect(),
            sq.iter().map(|s| (s / m) as f32).collect(),
        )
    }
}

/// A batch norm's description over `c` channels.
#[derive(Debug)]
pub struct BatchNormDesc {
    pub c: usize,
    pub eps: f32,
    pub momentum: f32,
}

impl BatchNormDesc {
    /// PyTorch's defaults: eps 1e-5, momentum 0.1.
    pub fn new(c: usize) -> BatchNormDesc {
        BatchNormDesc {
            c,
            eps: 1e-5,
            momentum: 0.1,
        }
    }
}

impl LayerSpec for BatchNormDesc {
    fn op(&self) -> &'static str {
        "batchnorm"
    }
    fn cpu(&self, _rng: &mut Rng, dev: &Device) -> Result<Box<dyn Layer>> {
        Ok(Box::new(BatchNorm2d::new(self.c, dev)?))
    }
    /// At identity, drawing nothing.
    fn init(&self, _rng: &mut Rng, out: &mut Initial) -> Result<()> {
        let c = self.c;
        out.param("weight", &[c], vec![1.0; c], false);
        out.param("bias", &[c], vec![0.0; c], false);
        out.buffer("running_mean", vec![0.0; c]);
        out.buffer("running_var", vec![1.0; c]);
        Ok(())
    }
    fn gpu(&self, gpu: &Gpu, src: &mut InitSource) -> Result<Box<dyn GpuLayer>> {
        Ok(Box::new(self.gpu_layer(gpu, src, false)?))
    }
}

impl BatchNormDesc {
    /// The GPU layer, with the following ReLU fused in when `relu` (ops/fused.rs).
    pub(crate) fn gpu_layer(
        &self,
        gpu: &Gpu,
        src: &mut InitSource,
        relu: bool,
    ) -> Result<GBatchNorm> {
        let c = self.c;
        Ok(GBatchNorm {
            c,
            eps: self.eps,
            momentum: self.momentum,
            gamma: src.param(gpu, "weight", c)?,
            beta: src.param(gpu, "bias", c)?,
            run_mean: src.buffer(gpu, "running_mean", c)?,
            run_var: src.buffer(gpu, "running_var", c)?,
            saved: None,
            sync: None,
            relu,
        })
    }
}

/// A batch norm and the ReLU after it, as one layer (`BatchNorm2d::with_relu`).
#[derive(Debug)]
pub struct BnReluDesc(pub BatchNormDesc);

impl LayerSpec for BnReluDesc {
    fn op(&self) -> &'static str {
        "batchnorm_relu"
    }
    fn cpu(&self, _rng: &mut Rng, dev: &Device) -> Result<Box<dyn Layer>> {
        let mut bn = BatchNorm2d::with_relu(self.0.c, dev)?;
        bn.eps = self.0.eps;
        bn.momentum = self.0.momentum;
        Ok(Box::new(bn))
    }
    fn init(&self, rng: &mut Rng, out: &mut Initial) -> Result<()> {
        self.0.init(rng, out)
    }
    fn gpu(&self, gpu: &Gpu, src: &mut InitSource) -> Result<Box<dyn GpuLayer>> {
        Ok(Box::new(self.0.gpu_layer(gpu, src, true)?))
    }
    fn holds(&self, op: &str) -> bool {
        matches!(op, "batchnorm_relu" | "batchnorm" | "relu")
    }
}

impl Layer for BatchNorm2d {
    fn name(&self) -> String {
        if self.relu {
            format!("batchnorm_relu({})", self.c)
        } else {
            format!("batchnorm({})", self.c)
        }
    }

    fn describe(&self) -> LayerDesc {
        let bn = BatchNormDesc {
            c: self.c,
            eps: self.eps,
            momentum: self.momentum,
        };
        if self.relu {
            Box::new(BnReluDesc(bn))
        } else {
            Box::new(bn)
        }
    }

    fn forward(&mut self, x: Tensor, ctx: &Ctx) -> Result<Tensor> {
        if ctx.sync_bn.is_none() && half_dtype(ctx.amp) == Some(DType::Bf16) {
            if let Some(xb) = x.bf16() {
                return self.forward_bf16(xb, x.shape(), ctx);
            }
        }
        let x = x.into_f32()?;
        let m = self.rows(&x)?;
        let c = self.c;
        let (mean, var) = if ctx.train {
            // SyncBatchNorm: statistics and their row count over every rank's batch.
            let (mean, var, m) = match &ctx.sync_bn {
                Some(coll) => sync_bn::global_stats(x.f32()?, c, coll.as_ref())?,
                None => {
                    let (mean, var) = BatchNorm2d::batch_stats(x.f32()?, c);
                    (mean, var, m)
                }
            };
            self.update_running(&mean, &var, m, ctx);
            (mean, var)
        } else {
            (self.running_mean.clone(), self.running_var.clone())
        };
        let invstd: Vec<f32> = var.iter().map(|v| 1.0 / (v + self.eps).sqrt()).collect();
        let (gamma, beta) = (self.gamma.w.f32()?, self.beta.w.f32()?);
        let save = ctx.save && ctx.train;
        // xhat is what backward needs; y = gamma*xhat + beta is computed from it.
        let mut xhat = if x.is_unique() {
            x
        } else {
            ctx.from_vec(x.shape(), x.f32()?.to_vec())?
        };
        {
            let xh = xhat.f32_mut()?;
            xh.par_chunks_mut(CHUNK_ROWS * c).for_each(|chunk| {
                for row in chunk.chunks_exact_mut(c) {
                    for ((v, mu), is) in row.iter_mut().zip(&mean).zip(&invstd) {
                        *v = (*v - mu) * is;
                    }
                }
            });
        }
        if save {
            // Written whole by the affine pass.
            let mut y = ctx.scratch(xhat.shape());
            let (xh, yd) = (xhat.f32()?, y.f32_mut()?);
            if self.relu {
                affine_rows::<true>(yd, xh, gamma, beta);
            } else {
                affine_rows::<false>(yd, xh, gamma, beta);
            }
            self.saved = Some((ctx.store(xhat)?, invstd));
            ctx.store(y)
        } else {
            let mut y = xhat;
            let yd = y.f32_mut()?;
            if self.relu {
                affine_rows_in_place::<true>(yd, gamma, beta);
            } else {
                affine_rows_in_place::<false>(yd, gamma, beta);
            }
            ctx.store(y)
        }
    }

    fn backward(&mut self, dy: Tensor, need_dx: bool, ctx: &Ctx) -> Result<Option<Tensor>> {
        if self.relu {
            self.backward_as::<true>(dy, need_dx, ctx)
        } else {
            self.backward_as::<false>(dy, need_dx, ctx)
        }
    }

    fn clear_saved(&mut self) {
        self.saved = None;
    }

    fn visit_params(&mut self, f: &mut dyn FnMut(&mut Param)) {
        f(&mut self.gamma);
        f(&mut self.beta);
    }

    fn visit_buffers(&mut self, f: &mut dyn FnMut(&str, &mut Vec<f32>)) {
        f("running_mean", &mut self.running_mean);
        f("running_var", &mut self.running_var);
    }
}

impl BatchNorm2d {
    /// The running statistics' update from a training batch's (not on a recompute).
    fn update_running(&mut self, mean: &[f32], var: &[f32], m: usize, ctx: &Ctx) {
        if ctx.recompute {
            return;
        }
        let unbias = m as f32 / (m.max(2) - 1) as f32;
        for i in 0..self.c {
            self.running_mean[i] =
                (1.0 - self.momentum) * self.running_mean[i] + self.momentum * mean[i];
            self.running_var[i] =
                (1.0 - self.momentum) * self.running_var[i] + self.momentum * var[i] * unbias;
        }
    }

    /// Forward on bf16 storage: statistics read the bf16 input as it is, and the output
    /// `y` and the saved `xhat` are written in bf16 from the same f32 values the f32
    /// path computes and then narrows: bit for bit that path's results, without its
    /// widened copy and its two f32 buffers.
    fn forward_bf16(&mut self, x: &[bf16], shape: &[usize], ctx: &Ctx) -> Result<Tensor> {
        let c = self.c;
        if shape.last() != Some(&c) || x.is_empty() {
            return Err(Error::Shape {
                op: "batchnorm",
                msg: format!("input {shape:?} does not end in {c} channels"),
            });
        }
        let (mean, var) = if ctx.train {
            let (mean, var) = BatchNorm2d::batch_stats_of(x, c);
            self.update_running(&mean, &var, x.len() / c, ctx);
            (mean, var)
        } else {
            (self.running_mean.clone(), self.running_var.clone())
        };
        let invstd: Vec<f32> = var.iter().map(|v| 1.0 / (v + self.eps).sqrt()).collect();
        let (gamma, beta) = (self.gamma.w.f32()?, self.beta.w.f32()?);
        let save = ctx.save && ctx.train;
        let per = (&mean[..], &invstd[..], gamma, beta);
        let (y, xhat) = if self.relu {
            normalize_bf16::<true>(x, per, save, ctx.dev.mem())
        } else {
            normalize_bf16::<false>(x, per, save, ctx.dev.mem())
        };
        let mem = ctx.dev.mem();
        let cat = crate::engine::device::MemCategory::Activations;
        if let Some(xh) = xhat {
            let xh = Tensor::from_buf(shape, Buf::Bf16(xh), cat, mem)?;
            self.saved = Some((xh, invstd));
        }
        Tensor::from_buf(shape, Buf::Bf16(y), cat, mem)
    }

    /// Backward; with `RELU` the fused ReLU's mask is applied to `dy` inside both passes
    /// (the sums and the input gradient) instead of in a pass of its own. Same values in
    /// the same order as ReLU's backward followed by batch norm's: bit for bit in f32.
    fn backward_as<const RELU: bool>(
        &mut self,
        dy: Tensor,
        need_dx: bool,
        ctx: &Ctx,
    ) -> Result<Option<Tensor>> {
        let (xhat, invstd) = self
            .saved
            .take()
            .ok_or_else(|| Error::Runtime("batchnorm: backward without forward".into()))?;
        if ctx.sync_bn.is_none() {
            if let (Some(xb), Some(db)) = (xhat.bf16(), dy.bf16()) {
                let dx = self.backward_bf16::<RELU>(xb, db, &invstd, need_dx, ctx.dev.mem())?;
                return dx
                    .map(|v| {
                        let cat = crate::engine::device::MemCategory::Activations;
                        Tensor::from_buf(xhat.shape(), Buf::Bf16(v), cat, ctx.dev.mem())
                    })
                    .transpose();
            }
        }
        let xhat = xhat.into_f32()?;
        let mut dy = dy.into_f32()?;
        let c = self.c;
        let m = self.rows(&xhat)? as f64;
        let xh = xhat.f32()?;
        let dyd = dy.f32()?;
        let (gw, bw) = (self.gamma.w.f32()?.to_vec(), self.beta.w.f32()?.to_vec());
        let sums = self.param_grads::<RELU, f32>(dyd, xh, (&gw, &bw))?;
        if !need_dx {
            return Ok(None);
        }
        // SyncBatchNorm: the input gradient needs these sums over the global batch.
        let (sums, m) = match &ctx.sync_bn {
            Some(coll) => sync_bn::global_sums(&sums, m, coll.as_ref())?,
            None => (sums, m),
        };
        let (dbeta, dgamma) = sums.split_at(c);
        let gamma = &gw;
        let scale: Vec<f32> = (0..c).map(|i| gamma[i] * invstd[i]).collect();
        let mb: Vec<f32> = dbeta.iter().map(|v| (v / m) as f32).collect();
        let mg: Vec<f32> = dgamma.iter().map(|v| (v / m) as f32).collect();
        let dd = dy.f32_mut()?;
        dd.par_chunks_mut(CHUNK_ROWS * c)
            .zip(xh.par_chunks(CHUNK_ROWS * c))
            .for_each(|(dc, xc)| {
                for (dr, xr) in dc.chunks_exact_mut(c).zip(xc.chunks_exact(c)) {
                    let per = scale.iter().zip(&mb).zip(&mg).zip(gw.iter().zip(&bw));
                    for ((d, x), (((s, b), g), (gc, bc))) in dr.iter_mut().zip(xr).zip(per) {
                        let dm = masked::<RELU>(*d, *x, *gc, *bc);
                        *d = s * (dm - b - x * g);
                    }
                }
            });
        Ok(Some(ctx.store(dy)?))
    }

    /// dbeta = sum(dy) and dgamma = sum(dy * xhat) in one pass over both tensors, added
    /// into the gradients; returns the sums (dbeta then dgamma) for the input gradient.
    /// Zipped, not indexed: the indexed loop's bounds checks kept it scalar (resnet and
    /// cnn-small's batchnorm(32) backward, 1 thread: see docs/performance.md).
    fn param_grads<const RELU: bool, T: El>(
        &mut self,
        dy: &[T],
        xh: &[T],
        (gw, bw): (&[f32], &[f32]),
    ) -> Result<Vec<f64>> {
        let c = self.c;
        let sums = channel_sums(dy, xh, c, 2 * c, |acc, dr, xr| {
            let (db, dg) = acc.split_at_mut(c);
            let gb = gw.iter().zip(bw);
            for ((((b, g), d), x), (gc, bc)) in
                db.iter_mut().zip(dg.iter_mut()).zip(dr).zip(xr).zip(gb)
            {
                let x = x.f();
                let d = masked::<RELU>(d.f(), x, *gc, *bc) as f64;
                *b += d;
                *g += d * x as f64;
            }
        });
        let (dbeta, dgamma) = sums.split_at(c);
        // A fresh gradient slot is zero-filled, so adding is right for the first backward too.
        for (p, d) in [(&mut self.gamma, dgamma), (&mut self.beta, dbeta)] {
            let (g, _) = p.grad_slot()?;
            for (gi, di) in g.iter_mut().zip(d) {
                *gi += *di as f32;
            }
        }
        Ok(sums)
    }

    /// Backward on bf16 storage (`xhat` and `dy` read as they are, the input gradient
    /// written in bf16): the f32 path's operations in its order, then its narrowing.
    fn backward_bf16<const RELU: bool>(
        &mut self,
        xh: &[bf16],
        dy: &[bf16],
        invstd: &[f32],
        need_dx: bool,
        mem: &MemTracker,
    ) -> Result<Option<Vec<bf16>>> {
        let c = self.c;
        if xh.len() != dy.len() || !xh.len().is_multiple_of(c) {
            return Err(Error::Shape {
                op: "batchnorm",
                msg: format!("gradient of {} values for {} saved", dy.len(), xh.len()),
            });
        }
        let m = (xh.len() / c) as f64;
        let (gw, bw) = (self.gamma.w.f32()?.to_vec(), self.beta.w.f32()?.to_vec());
        let sums = self.param_grads::<RELU, bf16>(dy, xh, (&gw, &bw))?;
        if !need_dx {
            return Ok(None);
        }
        let (dbeta, dgamma) = sums.split_at(c);
        let scale: Vec<f32> = (0..c).map(|i| gw[i] * invstd[i]).collect();
        let mb: Vec<f32> = dbeta.iter().map(|v| (v / m) as f32).collect();
        let mg: Vec<f32> = dgamma.iter().map(|v| (v / m) as f32).collect();
        let n = xh.len();
        let mut out: Vec<bf16> = mem.spare(n);
        out.spare_capacity_mut()[..n]
            .par_chunks_mut(CHUNK_ROWS * c)
            .zip(
                dy.par_chunks(CHUNK_ROWS * c)
                    .zip(xh.par_chunks(CHUNK_ROWS * c)),
            )
            .for_each(|(oc, (dc, xc))| {
                let rows = oc
                    .chunks_exact_mut(c)
                    .zip(dc.chunks_exact(c).zip(xc.chunks_exact(c)));
                for (or, (dr, xr)) in rows {
                    let per = scale.iter().zip(&mb).zip(&mg).zip(gw.iter().zip(&bw));
                    for ((o, (d, x)), (((s, b), g), (gc, bc))) in
                        or.iter_mut().zip(dr.iter().zip(xr)).zip(per)
                    {
                        let (d, x) = (widen_bf16(*d), widen_bf16(*x));
                        let dm = masked::<RELU>(d, x, *gc, *bc);
                        o.write(narrow_bf16(s * (dm - b - x * g)));
                    }
                }
            });
        // SAFETY: n is a multiple of c (checked above), so the chunks split into rows of
        // c exactly and each of the first n slots was written once.
        unsafe { out.set_len(n) };
        Ok(Some(out))
    }
}

/// Batch norm's forward output pass on bf16 storage, one pass over `x`: `xhat = (x -
/// mean) * invstd` and `y = affine(xhat)` per element in f32, each narrowed to bf16
/// (`xhat` only when `keep`, for backward), as the f32 path computes them and
/// `ctx.store` narrows them. The per-channel values are read as separate slices, not
/// tuples, so the loop over a row's channels vectorizes (perf: the tuple loop did not).
fn normalize_bf16<const RELU: bool>(
    x: &[bf16],
    (mean, invstd, gamma, beta): (&[f32], &[f32], &[f32], &[f32]),
    keep: bool,
    mem: &MemTracker,
) -> (Vec<bf16>, Option<Vec<bf16>>) {
    let c = gamma.len();
    let n = x.len() / c * c;
    let mut y: Vec<bf16> = mem.spare(n);
    let mut xh: Vec<bf16> = mem.spare(if keep { n } else { 0 });
    let xhat = |x: &bf16, mu: &f32, is: &f32| (widen_bf16(*x) - mu) * is;
    let ys = y.spare_capacity_mut()[..n].par_chunks_mut(CHUNK_ROWS * c);
    let xs = x[..n].par_chunks(CHUNK_ROWS * c);
    if keep {
        let hs = xh.spare_capacity_mut()[..n].par_chunks_mut(CHUNK_ROWS * c);
        ys.zip(hs).zip(xs).for_each(|((yc, hc), xc)| {
            let rows = yc.chunks_exact_mut(c).zip(hc.chunks_exact_mut(c));
            for ((yr, hr), xr) in rows.zip(xc.chunks_exact(c)) {
                let per = mean.iter().zip(invstd).zip(gamma.iter().zip(beta));
                for (((y, h), x), ((mu, is), (g, b))) in
                    yr.iter_mut().zip(hr.iter_mut()).zip(xr).zip(per)
                {
                    let v = xhat(x, mu, is);
                    y.write(narrow_bf16(affine::<RELU>(v, *g, *b)));
                    h.write(narrow_bf16(v));
                }
            }
        });
    } else {
        ys.zip(xs).for_each(|(yc, xc)| {
            for (yr, xr) in yc.chunks_exact_mut(c).zip(xc.chunks_exact(c)) {
                let per = mean.iter().zip(invstd).zip(gamma.iter().zip(beta));
                for ((y, x), ((mu, is), (g, b))) in yr.iter_mut().zip(xr).zip(per) {
                    y.write(narrow_bf16(affine::<RELU>(xhat(x, mu, is), *g, *b)));
                }
            }
        });
    }
    // SAFETY: n is a multiple of c, so the chunks split into rows of c exactly and each
    // of the first n slots of `y` (and of `xh` when `keep`) was written once.
    unsafe {
        y.set_len(n);
        if keep {
            xh.set_len(n);
        }
    }
    (y, keep.then_some(xh))
}
