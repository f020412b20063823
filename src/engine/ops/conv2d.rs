//! 2-D convolution on NHWC tensors, weights `[out, kh, kw, in]`.
//!
//! NHWC makes im2col a copy of contiguous channel runs and makes the GEMM output land
//! directly in NHWC, so no layout shuffles are needed between layers. The input is kept
//! for backward and the column matrix is rebuilt there (in the device workspace), which
//! costs one cheap im2col but saves `kh*kw` times the input in activation memory.

use std::cell::OnceCell;

use half::bf16;
use rayon::prelude::*;

use crate::engine::cuda::gpu::Gpu;
use crate::engine::device::{Device, MemCategory};
pub use crate::engine::geom::ConvGeom;
use crate::engine::ops::conv2d_bf16::{self, patch, unpatch, Input};
use crate::engine::ops::conv2d_cuda::GConv;
use crate::engine::ops::conv_algos;
use crate::engine::ops::desc::{InitSource, Initial, LayerSpec};
use crate::engine::ops::gemm::Mat;
use crate::engine::ops::gemm_amp::{matmul_turned_amp, matmul_w, native_half, WeightB};
use crate::engine::ops::layer::{take_saved, Ctx, KernelWeights, Layer, LayerDesc, Param};
use crate::engine::ops::layer_cuda::GpuLayer;
use crate::engine::ops::{add_bias_grad, fill_rows};
use crate::engine::rng::Rng;
use crate::engine::tensor::{Buf, DType, Tensor};
use crate::error::{Error, Result};

/// Copies input patches into rows of `col` (`rows x kkc`), zero where padding.
pub fn im2col(x: &[f32], g: &ConvGeom, col: &mut [f32]) {
    im2col_with(x, g, col, |d, s| d.copy_from_slice(s));
}

/// [`im2col`] from bf16 storage, widening in the copy: under `amp = bf16` the stored
/// input is read directly instead of being widened to an f32 copy first, which on
/// cnn-small (batch 64, 1 thread, perf) was one more pass and one more fresh buffer per
/// conv in forward and again in backward.
pub(crate) fn im2col_bf16(x: &[bf16], g: &ConvGeom, col: &mut [f32]) {
    im2col_with(x, g, col, |d, s| {
        for (d, s) in d.iter_mut().zip(s) {
            *d = f32::from_bits(u32::from(s.to_bits()) << 16);
        }
    });
}

/// The input as the im2col path reads it: bf16 storage directly, else f32 data.
#[derive(Clone, Copy)]
enum Src<'a> {
    F32(&'a [f32]),
    Bf16(&'a [bf16]),
}

impl Src<'_> {
    fn im2col(self, g: &ConvGeom, col: &mut [f32]) {
        match self {
            Src::F32(x) => im2col(x, g, col),
            Src::Bf16(x) => im2col_bf16(x, g, col),
        }
    }
}

/// `x` as f32 for the kernels that read f32 only, widened (once, into `cell`) when it
/// is stored in a half type.
pub(crate) fn wide<'a>(x: &'a Tensor, cell: &'a OnceCell<Tensor>) -> Result<&'a [f32]> {
    if x.dtype() == DType::F32 {
        return x.f32();
    }
    if cell.get().is_none() {
        // The cell was empty just above and nothing else fills it.
        let _ = cell.set(x.widened()?);
    }
    match cell.get() {
        Some(t) => t.f32(),
        None => Err(Error::Runtime("conv2d: widened input missing".into())),
    }
}

/// What the tile path reads: bf16 storage as it is; anything else (the model's f32
/// input) narrowed once into `cell`, as the packing path rounds it.
fn input<'a>(x: &'a Tensor, cell: &'a OnceCell<Tensor>) -> Result<Input<'a>> {
    if let Some(h) = x.bf16() {
        return Ok(Input::bf16(h));
    }
    if cell.get().is_none() {
        // The cell was empty just above and nothing else fills it.
        let _ = cell.set(x.to_dtype(DType::Bf16, MemCategory::Workspace)?);
    }
    match cell.get().and_then(|t| t.bf16()) {
        Some(h) => Ok(Input::bf16(h)),
        None => Err(Error::Runtime("conv2d: narrowed input missing".into())),
    }
}

/// What the im2col path reads: bf16 storage as it is, anything else as f32.
fn src<'a>(x: &'a Tensor, cell: &'a OnceCell<Tensor>) -> Result<Src<'a>> {
    match x.bf16() {
        Some(h) => Ok(Src::Bf16(h)),
        None => Ok(Src::F32(wide(x, cell)?)),
    }
}

fn im2col_with<T: Copy + Sync>(
    x: &[T],
    g: &ConvGeom,
    col: &mut [f32],
    copy: impl Fn(&mut [f32], &[T]) + Sync,
) {
    let (oh, ow, kkc, c) = (g.oh(), g.ow(), g.kkc(), g.c_in);
    let per_img = oh * ow * kkc;
    col[..g.n * per_img]
        .par_chunks_mut(per_img)
        .enumerate()
        .for_each(|(n, cimg)| {
            let ximg = &x[n * g.h * g.w * c..(n + 1) * g.h * g.w * c];
            for (p, row) in cimg.chunks_exact_mut(kkc).enumerate() {
                patch(ximg, g, (p / ow, p % ow), row, &|d| d.fill(0.0), &copy);
            }
        });
}

/// Scatter-adds rows of `col` back into an input-shaped gradient (`dx` is overwritten).
pub fn col2im(col: &[f32], g: &ConvGeom, dx: &mut [f32]) {
    let (ow, kkc) = (g.ow(), g.kkc());
    let per_img = g.oh() * ow * kkc;
    dx.par_chunks_mut(g.h * g.w * g.c_in)
        .enumerate()
        .for_each(|(n, dimg)| {
            dimg.fill(0.0);
            let cimg = &col[n * per_img..(n + 1) * per_img];
            for (p, row) in cimg.chunks_exact(kkc).enumerate() {
                unpatch(dimg, g, (p / ow, p % ow), row);
            }
        });
}

pub struct Conv2d {
    pub c_in: usize,
    pub c_out: usize,
    pub k: usize,
    pub stride: usize,
    pub pad: usize,
    pub w: Param,
    pub b: Option<Param>,
    saved_x: Option<Tensor>,
}

impl Conv2d {
    /// Kaiming-uniform init as PyTorch's default. `bias = false` before a BatchNorm, whose
    /// shift makes a conv bias redundant (one of the seed articles' tips).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        c_in: usize,
        c_out: usize,
        k: usize,
        stride: usize,
        pad: usize,
        bias: bool,
        rng: &mut Rng,
        dev: &Device,
    ) -> Result<Conv2d> {
        let fan_in = (c_in * k * k) as f32;
        let bound = 1.0 / fan_in.sqrt();
        let w = (0..c_out * k * k * c_in)
            .map(|_| rng.range_f32(-bound, bound))
            .collect();
        let b = if bias {
            let v = (0..c_out).map(|_| rng.range_f32(-bound, bound)).collect();
            Some(Param::new("bias", &[c_out], v, false, dev)?)
        } else {
            None
        };
        Ok(Conv2d {
            c_in,
            c_out,
            k,
            stride,
            pad,
            w: Param::new("weight", &[c_out, k * k * c_in], w, true, dev)?,
            b,
            saved_x: None,
        })
    }

    pub fn geom(&self, x: &Tensor) -> Result<ConvGeom> {
        match *x.shape() {
            [n, h, w, c]
                if c == self.c_in && h + 2 * self.pad >= self.k && w + 2 * self.pad >= self.k =>
            {
                Ok(ConvGeom {
                    n,
                    h,
                    w,
                    c_in: c,
                    c_out: self.c_out,
                    k: self.k,
                    stride: self.stride,
                    pad: self.pad,
                })
            }
            _ => Err(Error::Shape {
                op: "conv2d",
                msg: format!(
                    "input {:?} is not NHWC with {} channels and room for a {}x{} kernel",
                    x.shape(),
                    self.c_in,
                    self.k,
                    self.k
                ),
            }),
        }
    }
}

impl Conv2d {
    /// Backward under native bf16 on the tile unit (`conv2d_bf16`): the columns rebuilt
    /// in the tiles' layouts from the stored input, `dy` read as stored. Bit for bit
    /// the packing path's gradients.
    fn backward_tiles(
        &mut self,
        x: Tensor,
        dy: Tensor,
        g: &ConvGeom,
        need_dx: bool,
        ctx: &Ctx,
    ) -> Result<Option<Tensor>> {
        let dyb = dy
            .bf16()
            .ok_or_else(|| Error::Runtime("conv2d: bf16 gradient expected".into()))?;
        if let Some(b) = &mut self.b {
            add_bias_grad(b, dy.widened()?.f32()?)?;
        }
        let xcell = OnceCell::new();
        let xs = input(&x, &xcell)?;
        let wt = self.w.kernel_weights(ctx.amp);
        let w = &mut self.w;
        ctx.dev
            .with_workspace(conv2d_bf16::weight_grad_ws(g), |ws| -> Result<()> {
                let (gw, acc) = w.grad_slot()?;
                conv2d_bf16::weight_grad(xs, dyb, g, gw, acc, ws)
            })?;
        let dx = if need_dx {
            let WeightB::Packed(p) = wt.n()? else {
                return Err(Error::Runtime("conv2d: bf16 weights not packed".into()));
            };
            let dx = conv2d_bf16::input_grad(dyb, g, p, ctx.dev.mem())?;
            let cat = MemCategory::Activations;
            Some(Tensor::from_buf(
                x.shape(),
                Buf::Bf16(dx),
                cat,
                ctx.dev.mem(),
            )?)
        } else {
            None
        };
        drop(wt);
        Ok(dx)
    }
}

/// One forward with the named algorithm into a fresh output (bias first, so every
/// algorithm accumulates onto it).
fn conv_forward(
    algo: &str,
    (x, xcell): (&Tensor, &OnceCell<Tensor>),
    wt: &KernelWeights,
    bias: Option<&Param>,
    g: &ConvGeom,
    ctx: &Ctx,
) -> Result<Tensor> {
    let shape = [g.n, g.oh(), g.ow(), g.c_out];
    // Native bf16 on the tile unit: the columns written in the tiles' layout and the
    // output narrowed strip by strip, straight into bf16 storage.
    let tiles = !matches!(algo, "direct" | "winograd") && !g.is_pointwise();
    if tiles && native_half(ctx.amp) && conv2d_bf16::applies(g) {
        let WeightB::Packed(p) = wt.t()? else {
            return Err(Error::Runtime("conv2d: bf16 weights not packed".into()));
        };
        let b = bias.map(|b| b.w.f32()).transpose()?;
        let y = conv2d_bf16::forward(input(x, xcell)?, g, p, b, ctx.dev.mem())?;
        let cat = MemCategory::Activations;
        return Tensor::from_buf(&shape, Buf::Bf16(y), cat, ctx.dev.mem());
    }
    // Every algorithm writes all of `y` (onto the bias, or overwriting: `direct` and
    // `winograd` are tested on a buffer of 7s).
    let mut y = ctx.scratch(&shape);
    let yd = y.f32_mut()?;
    let accumulate = match bias {
        Some(b) => {
            fill_rows(yd, b.w.f32()?);
            true
        }
        None => false,
    };
    match algo {
        "direct" => conv_algos::direct(wide(x, xcell)?, wt.f32()?, g, yd, accumulate)?,
        "winograd" => {
            let (xd, wd) = (wide(x, xcell)?, wt.f32()?);
            ctx.dev
                .with_workspace(conv_algos::winograd_workspace(g), |ws| {
                    conv_algos::winograd(xd, wd, g, yd, accumulate, ws, ctx.dev.par())
                })?
        }
        _ if g.is_pointwise() => matmul_w(
            yd,
            Mat::rm(wide(x, xcell)?, g.rows(), g.kkc()),
            wt.t()?,
            accumulate,
            ctx.dev.par(),
            ctx.amp,
        )?,
        _ => ctx.dev.with_workspace(g.rows() * g.kkc(), |col| {
            src(x, xcell)?.im2col(g, col);
            matmul_w(
                yd,
                Mat::rm(col, g.rows(), g.kkc()),
                wt.t()?,
                accumulate,
                ctx.dev.par(),
                ctx.amp,
            )
        })?,
    }
    Ok(y)
}

/// A 2-D convolution's description (NHWC, square `k`x`k` kernel).
#[derive(Debug)]
pub struct Conv2dDesc {
    pub c_in: usize,
    pub c_out: usize,
    pub k: usize,
    pub stride: usize,
    pub pad: usize,
    pub bias: bool,
}

impl LayerSpec for Conv2dDesc {
    fn op(&self) -> &'static str {
        "conv2d"
    }
    fn cpu(&self, rng: &mut Rng, dev: &Device) -> Result<Box<dyn Layer>> {
        let d = self;
        Ok(Box::new(Conv2d::new(
            d.c_in, d.c_out, d.k, d.stride, d.pad, d.bias, rng, dev,
        )?))
    }
    fn init(&self, rng: &mut Rng, out: &mut Initial) -> Result<()> {
        let fan_in = self.c_in * self.k * self.k;
        let w = Initial::uniform(rng, self.c_out * fan_in, fan_in);
        // The bias is drawn after the weight, as Conv2d::new does.
        let b = self.bias.then(|| Initial::uniform(rng, self.c_out, fan_in));
        out.param("weight", &[self.c_out, fan_in], w, true);
        if let Some(b) = b {
            out.param("bias", &[self.c_out], b, false);
        }
        Ok(())
    }
    fn gpu(&self, gpu: &Gpu, src: &mut InitSource) -> Result<Box<dyn GpuLayer>> {
        let d = self;
        Ok(Box::new(GConv {
            c_in: d.c_in,
            c_out: d.c_out,
            k: d.k,
            stride: d.stride,
            pad: d.pad,
            w: src.param(gpu, "weight", d.c_out * d.k * d.k * d.c_in)?,
            b: if d.bias {
                Some(src.param(gpu, "bias", d.c_out)?)
            } else {
                None
            },
            saved_x: None,
        }))
    }
}

impl Layer for Conv2d {
    fn name(&self) -> String {
        format!(
            "conv{}x{}({}->{}, s{})",
            self.k, self.k, self.c_in, self.c_out, self.stride
        )
    }

    fn describe(&self) -> LayerDesc {
        Box::new(Conv2dDesc {
            c_in: self.c_in,
            c_out: self.c_out,
            k: self.k,
            stride: self.stride,
            pad: self.pad,
            bias: self.b.is_some(),
        })
    }

    fn forward(&mut self, x: Tensor, ctx: &Ctx) -> Result<Tensor> {
        let g = self.geom(&x)?;
        let xcell = OnceCell::new();
        let wt = self.w.kernel_weights(ctx.amp);
        let mut cands = vec!["im2col", "direct"];
        if conv_algos::winograd_applies(&g) {
            cands.push("winograd");
        }
        let key = format!(
            "n{} {}x{}x{}->{} k{} s{} p{} {}",
            g.n,
            g.h,
            g.w,
            g.c_in,
            g.c_out,
            g.k,
            g.stride,
            g.pad,
            ctx.dtype_name()
        );
        let bias = self.b.as_ref();
        let y = ctx.algos.run("conv2d", &key, &cands, |algo| {
            conv_forward(algo, (&x, &xcell), &wt, bias, &g, ctx)
        })?;
        drop((xcell, wt));
        if ctx.save {
            self.saved_x = Some(ctx.store(x)?);
        }
        ctx.store(y)
    }

    fn backward(&mut self, dy: Tensor, need_dx: bool, ctx: &Ctx) -> Result<Option<Tensor>> {
        let x = take_saved(&mut self.saved_x, "conv2d")?;
        let g = self.geom(&x)?;
        let tiles = native_half(ctx.amp) && !g.is_pointwise() && conv2d_bf16::applies(&g);
        if tiles && dy.bf16().is_some() {
            return self.backward_tiles(x, dy, &g, need_dx, ctx);
        }
        let xcell = OnceCell::new();
        let dy = dy.into_f32()?;
        let wt = self.w.kernel_weights(ctx.amp);
        let (rows, kkc) = (g.rows(), g.kkc());
        let dyd = dy.f32()?;
        let dym = Mat::rm(dyd, rows, g.c_out);
        if let Some(b) = &mut self.b {
            add_bias_grad(b, dyd)?;
        }
        let (par, amp) = (ctx.dev.par(), ctx.amp);
        // Written whole: by the GEMM (1x1) or by col2im, which zeroes each image first.
        let mut dx = if need_dx {
            Some(ctx.scratch(x.shape()))
        } else {
            None
        };
        // The weight gradient `dy^T col` turned (`matmul_turned`): bit-identical, and
        // gemm parallelises it poorly as it stands (m = c_out and n = k*k*c_in are small,
        // the long k = rows is not split). cnn-small, batch 64, 2 threads, conv
        // 32->64 s2: 3.72 -> 2.61 ms; 1 thread: 4.36 -> 3.82 ms (docs/performance.md).
        let turned = g.c_out * kkc;
        if g.is_pointwise() {
            let (gw, acc) = self.w.grad_slot()?;
            let xm = Mat::rm(wide(&x, &xcell)?, rows, kkc);
            ctx.dev.with_workspace(turned, |t| {
                matmul_turned_amp(gw, dym.t(), xm, acc, (par, amp), t)
            })?;
            if let Some(dx) = &mut dx {
                matmul_w(dx.f32_mut()?, dym, wt.n()?, false, par, amp)?;
            }
            drop(wt);
            return dx.map(|d| ctx.store(d)).transpose();
        }
        let xs = src(&x, &xcell)?;
        let ws_len = turned + if need_dx { 2 * rows * kkc } else { rows * kkc };
        let w = &mut self.w;
        ctx.dev.with_workspace(ws_len, |ws| -> Result<()> {
            let (t, ws) = ws.split_at_mut(turned);
            let (col, dcol) = ws.split_at_mut(rows * kkc);
            xs.im2col(&g, col);
            {
                let (gw, acc) = w.grad_slot()?;
                let colm = Mat::rm(col, rows, kkc);
                matmul_turned_amp(gw, dym.t(), colm, acc, (par, amp), t)?;
            }
            if let Some(dx) = &mut dx {
                matmul_w(dcol, dym, wt.n()?, false, par, amp)?;
                col2im(dcol, &g, dx.f32_mut()?);
            }
            Ok(())
        })?;
        drop(wt);
        dx.map(|d| ctx.store(d)).transpose()
    }

    fn clear_saved(&mut self) {
        self.saved_x = None;
    }

    fn visit_params(&mut self, f: &mut dyn FnMut(&mut Param)) {
        f(&mut self.w);
        if let Some(b) = &mut self.b {
            f(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::amp::{narrow, widen};
    use crate::engine::ops::gemm::test_data as data;

    /// im2col straight from bf16 storage gives the columns of widening first, on
    /// geometries with padding, stride and a 1-wide kernel.
    #[test]
    fn im2col_from_bf16_matches_widen_then_im2col() {
        for (h, w, k, s, p) in [
            (7, 9, 3, 1, 1),
            (8, 8, 3, 2, 1),
            (6, 5, 5, 1, 2),
            (5, 6, 1, 2, 0),
        ] {
            let g = ConvGeom {
                n: 2,
                h,
                w,
                c_in: 3,
                c_out: 4,
                k,
                stride: s,
                pad: p,
            };
            let Buf::Bf16(xh) =
                narrow(&data(g.n * h * w * 3, 5), DType::Bf16, &Default::default()).unwrap()
            else {
                panic!("not bf16")
            };
            let xf = widen(&Buf::Bf16(xh.clone())).unwrap();
            let mut want = vec![f32::NAN; g.rows() * g.kkc()];
            im2col(&xf, &g, &mut want);
            let mut got = vec![f32::NAN; want.len()];
            im2col_bf16(&xh, &g, &mut got);
            let same = want
                .iter()
                .zip(&got)
                .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "{g:?}: im2col from bf16 differs");
        }
    }
}
