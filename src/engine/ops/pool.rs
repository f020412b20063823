//! Pooling on NHWC: max pooling (keeps argmax indices for backward), global average
//! pooling (NHWC -> NC), and flatten.

use half::bf16;

use crate::engine::amp::{half_dtype, narrow_bf16, widen_bf16};
use crate::engine::cuda::gpu::Gpu;
use crate::engine::device::{Device, MemCategory};
use crate::engine::ops::desc::{InitSource, Initial, LayerSpec};
use crate::engine::ops::layer::{Ctx, Layer, LayerDesc};
use crate::engine::ops::layer_cuda::GpuLayer;
use crate::engine::ops::pool_cuda::{GFlatten, GGlobalAvgPool};
use crate::engine::rng::Rng;
use crate::engine::tensor::{Buf, DType, Tensor};
use crate::error::{Error, Result};

/// `y (n x c) = mean over each image's `px` pixels of `x`` (NHWC), summed in pixel order
/// onto `y`'s zeros, then scaled.
fn mean_pixels<T: Copy>(x: &[T], y: &mut [f32], (px, c): (usize, usize), f: impl Fn(T) -> f32) {
    let inv = 1.0 / px as f32;
    for (out, img) in y.chunks_exact_mut(c).zip(x.chunks_exact(px * c)) {
        for p in img.chunks_exact(c) {
            for (o, v) in out.iter_mut().zip(p) {
                *o += f(*v);
            }
        }
        for o in out.iter_mut() {
            *o *= inv;
        }
    }
}

fn nhwc(x: &Tensor, op: &'static str) -> Result<[usize; 4]> {
    match *x.shape() {
        [n, h, w, c] => Ok([n, h, w, c]),
        _ => Err(Error::Shape {
            op,
            msg: format!("input {:?} is not NHWC", x.shape()),
        }),
    }
}

pub struct MaxPool2d {
    pub k: usize,
    pub stride: usize,
    saved: Option<(Tensor, Vec<usize>)>,
}

impl MaxPool2d {
    pub fn new(k: usize, stride: usize) -> MaxPool2d {
        MaxPool2d {
            k,
            stride,
            saved: None,
        }
    }
}

impl Layer for MaxPool2d {
    fn name(&self) -> String {
        format!("maxpool{}x{}", self.k, self.k)
    }

    fn forward(&mut self, x: Tensor, ctx: &Ctx) -> Result<Tensor> {
        let x = x.into_f32()?;
        let [n, h, w, c] = nhwc(&x, "maxpool")?;
        if h < self.k || w < self.k {
            return Err(Error::Shape {
                op: "maxpool",
                msg: format!("input {h}x{w} smaller than kernel {}", self.k),
            });
        }
        let (oh, ow) = (
            (h - self.k) / self.stride + 1,
            (w - self.k) / self.stride + 1,
        );
        let xd = x.f32()?;
        // Every output element is written by the loop below.
        let mut y = ctx.scratch(&[n, oh, ow, c]);
        let mut arg = vec![0u32; n * oh * ow * c];
        let yd = y.f32_mut()?;
        for b in 0..n {
            for oy in 0..oh {
                for ox in 0..ow {
                    let o = ((b * oh + oy) * ow + ox) * c;
                    for ch in 0..c {
                        let mut best = f32::NEG_INFINITY;
                        let mut bi = 0usize;
                        for ky in 0..self.k {
                            for kx in 0..self.k {
                                let i =
                                    ((b * h + oy * self.stride + ky) * w + ox * self.stride + kx)
                                        * c
                                        + ch;
                                if xd[i] > best {
                                    best = xd[i];
                                    bi = i;
                                }
                            }
                        }
                        yd[o + ch] = best;
                        arg[o + ch] = bi as u32;
                    }
                }
            }
        }
        if ctx.save {
            let idx = Tensor::from_buf(
                &[arg.len()],
                Buf::U32(arg),
                MemCategory::Activations,
                ctx.dev.mem(),
            )?;
            self.saved = Some((idx, x.shape().to_vec()));
        }
        ctx.store(y)
    }

    fn backward(&mut self, dy: Tensor, _need_dx: bool, ctx: &Ctx) -> Result<Option<Tensor>> {
        let (idx, shape) = self
            .saved
            .take()
            .ok_or_else(|| Error::Runtime("maxpool: backward without forward".into()))?;
        let dy = dy.into_f32()?;
        let mut dx = ctx.alloc(&shape);
        let dxd = dx.f32_mut()?;
        for (&i, &d) in idx.u32()?.iter().zip(dy.f32()?) {
            dxd[i as usize] += d;
        }
        Ok(Some(ctx.store(dx)?))
    }

    fn clear_saved(&mut self) {
        self.saved = None;
    }
}

/// NHWC -> NC by averaging over H and W.
#[derive(Default)]
pub struct GlobalAvgPool {
    saved_shape: Option<Vec<usize>>,
}

/// Global average pooling's description.
#[derive(Debug)]
pub struct GlobalAvgPoolDesc;

impl LayerSpec for GlobalAvgPoolDesc {
    fn op(&self) -> &'static str {
        "global_avg_pool"
    }
    fn cpu(&self, _rng: &mut Rng, _dev: &Device) -> Result<Box<dyn Layer>> {
        Ok(Box::new(GlobalAvgPool::default()))
    }
    fn init(&self, _rng: &mut Rng, _out: &mut Initial) -> Result<()> {
        Ok(())
    }
    fn gpu(&self, _gpu: &Gpu, _src: &mut InitSource) -> Result<Box<dyn GpuLayer>> {
        Ok(Box::<GGlobalAvgPool>::default())
    }
}

impl Layer for GlobalAvgPool {
    fn name(&self) -> String {
        "global_avg_pool".into()
    }

    fn describe(&self) -> LayerDesc {
        Box::new(GlobalAvgPoolDesc)
    }

    fn forward(&mut self, x: Tensor, ctx: &Ctx) -> Result<Tensor> {
        let [n, h, w, c] = nhwc(&x, "global_avg_pool")?;
        let mut y = ctx.alloc(&[n, c]);
        let yd = y.f32_mut()?;
        // bf16 storage is read as it is (widening is exact): no widened copy of the
        // input, which was most of this layer's bf16 time (cnn-small: 0.55 ms against
        // 0.07 in f32, TUNE_PROFILE_LAYERS).
        match x.bf16() {
            Some(xb) => mean_pixels(xb, yd, (h * w, c), widen_bf16),
            None => mean_pixels(x.widened()?.f32()?, yd, (h * w, c), |v| v),
        }
        if ctx.save {
            self.saved_shape = Some(x.shape().to_vec());
        }
        ctx.store(y)
    }

    fn backward(&mut self, dy: Tensor, _need_dx: bool, ctx: &Ctx) -> Result<Option<Tensor>> {
        let shape = self
            .saved_shape
            .take()
            .ok_or_else(|| Error::Runtime("global_avg_pool: backward without forward".into()))?;
        let dy = dy.into_f32()?;
        let [n, h, w, c] = [shape[0], shape[1], shape[2], shape[3]];
        let inv = 1.0 / (h * w) as f32;
        let dyd = dy.f32()?;
        if half_dtype(ctx.amp) == Some(DType::Bf16) {
            // Written in bf16 as `ctx.store` would narrow the f32 values below: one
            // narrowed row per image, copied to its pixels.
            let mut dx: Vec<bf16> = ctx.dev.mem().spare(n * h * w * c);
            for b in 0..n {
                let row: Vec<bf16> = dyd[b * c..(b + 1) * c]
                    .iter()
                    .map(|g| narrow_bf16(g * inv))
                    .collect();
                for _ in 0..h * w {
                    dx.extend_from_slice(&row);
                }
            }
            let cat = MemCategory::Activations;
            return Ok(Some(Tensor::from_buf(
                &shape,
                Buf::Bf16(dx),
                cat,
                ctx.dev.mem(),
            )?));
        }
        // Every element is written below: a recycled buffer, not a fresh zeroed one (perf:
        // this allocation was a quarter of cnn-small's f32 page faults).
        let mut dx = ctx.scratch(&shape);
        let dxd = dx.f32_mut()?;
        for b in 0..n {
            let g = &dyd[b * c..(b + 1) * c];
            for px in dxd[b * h * w * c..(b + 1) * h * w * c].chunks_exact_mut(c) {
                for (d, gv) in px.iter_mut().zip(g) {
                    *d = gv * inv;
                }
            }
        }
        Ok(Some(ctx.store(dx)?))
    }

    fn clear_saved(&mut self) {
        self.saved_shape = None;
    }
}

/// `[N, ...] -> [N, prod(...)]`; a view, no copy.
#[derive(Default)]
pub struct Flatten {
    saved_shape: Option<Vec<usize>>,
}

/// Flatten's description.
#[derive(Debug)]
pub struct FlattenDesc;

impl LayerSpec for FlattenDesc {
    fn op(&self) -> &'static str {
        "flatten"
    }
    fn cpu(&self, _rng: &mut Rng, _dev: &Device) -> Result<Box<dyn Layer>> {
        Ok(Box::new(Flatten::default()))
    }
    fn init(&self, _rng: &mut Rng, _out: &mut Initial) -> Result<()> {
        Ok(())
    }
    fn gpu(&self, _gpu: &Gpu, _src: &mut InitSource) -> Result<Box<dyn GpuLayer>> {
        Ok(Box::<GFlatten>::default())
    }
}

impl Layer for Flatten {
    fn name(&self) -> String {
        "flatten".into()
    }

    fn describe(&self) -> LayerDesc {
        Box::new(FlattenDesc)
    }

    fn forward(&mut self, x: Tensor, ctx: &Ctx) -> Result<Tensor> {
        let n = x.shape().first().copied().unwrap_or(0);
        let rest = x.len().checked_div(n).unwrap_or(0);
        if ctx.save {
            self.saved_shape = Some(x.shape().to_vec());
        }
        x.reshape(&[n, rest])
    }

    fn backward(&mut self, dy: Tensor, _need_dx: bool, _ctx: &Ctx) -> Result<Option<Tensor>> {
        let shape = self
            .saved_shape
            .take()
            .ok_or_else(|| Error::Runtime("flatten: backward without forward".into()))?;
        Ok(Some(dy.reshape(&shape)?))
    }

    fn clear_saved(&mut self) {
        self.saved_shape = None;
    }
}
