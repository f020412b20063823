//! Pointwise activations: ReLU (in place, keeps its output as the mask) and GELU (tanh
//! approximation, as `nn.GELU(approximate="tanh")`).

use half::bf16;
use rayon::prelude::*;

use crate::engine::amp::{half_dtype, map_bf16, narrow_bf16, widen_bf16, zip_map_bf16};
use crate::engine::cuda::gpu::Gpu;
use crate::engine::device::{Device, MemCategory};
use crate::engine::ops::activation_cuda::GActivation;
use crate::engine::ops::desc::{InitSource, Initial, LayerSpec};
use crate::engine::ops::layer::{take_saved, Ctx, Layer, LayerDesc};
use crate::engine::ops::layer_cuda::GpuLayer;
use crate::engine::rng::Rng;
use crate::engine::tensor::{Buf, DType, Tensor};
use crate::error::Result;

/// Elements per parallel task: big enough that rayon's overhead stays negligible.
const PAR_CHUNK: usize = 1 << 14;

#[derive(Default)]
pub struct Relu {
    saved_y: Option<Tensor>,
}

/// ReLU's description.
#[derive(Debug)]
pub struct ReluDesc;

impl LayerSpec for ReluDesc {
    fn op(&self) -> &'static str {
        "relu"
    }
    fn cpu(&self, _rng: &mut Rng, _dev: &Device) -> Result<Box<dyn Layer>> {
        Ok(Box::new(Relu::default()))
    }
    fn init(&self, _rng: &mut Rng, _out: &mut Initial) -> Result<()> {
        Ok(())
    }
    fn gpu(&self, _gpu: &Gpu, _src: &mut InitSource) -> Result<Box<dyn GpuLayer>> {
        Ok(Box::new(GActivation::relu()))
    }
}

impl Layer for Relu {
    fn name(&self) -> String {
        "relu".into()
    }

    fn describe(&self) -> LayerDesc {
        Box::new(ReluDesc)
    }

    fn forward(&mut self, x: Tensor, ctx: &Ctx) -> Result<Tensor> {
        if let Some(h) = bf16_io(&x, ctx) {
            // On the storage as it is: the widen, clip and narrow of the f32 path in one
            // pass, bit for bit (widening is exact, and narrowing an f32 that came from
            // bf16 gives it back).
            let y = map_bf16(h, ctx.dev.mem(), |v| narrow_bf16(widen_bf16(v).max(0.0)));
            let y = Tensor::from_buf(
                x.shape(),
                Buf::Bf16(y),
                MemCategory::Activations,
                ctx.dev.mem(),
            )?;
            if ctx.save {
                self.saved_y = Some(y.clone());
            }
            return Ok(y);
        }
        let mut x = x.into_f32()?;
        x.f32_mut()?.par_chunks_mut(PAR_CHUNK).for_each(|c| {
            for v in c {
                *v = v.max(0.0);
            }
        });
        let y = ctx.store(x)?;
        if ctx.save {
            self.saved_y = Some(y.clone());
        }
        Ok(y)
    }

    fn backward(&mut self, dy: Tensor, _need_dx: bool, ctx: &Ctx) -> Result<Option<Tensor>> {
        let y = take_saved(&mut self.saved_y, "relu")?;
        if let (Some(d), Some(yh)) = (bf16_io(&dy, ctx), y.bf16()) {
            // Branch-free (a mask on the bits), so the loop vectorizes: with an if/else
            // it was 17% of cnn-small's bf16 step (batch 64, 1 thread, perf).
            let dx = zip_map_bf16((d, yh), ctx.dev.mem(), |d, y| {
                let keep = u16::from(widen_bf16(y) <= 0.0).wrapping_sub(1);
                bf16::from_bits(narrow_bf16(widen_bf16(d)).to_bits() & keep)
            });
            let cat = MemCategory::Activations;
            return Ok(Some(Tensor::from_buf(
                dy.shape(),
                Buf::Bf16(dx),
                cat,
                ctx.dev.mem(),
            )?));
        }
        let y = y.into_f32()?;
        let mut dy = dy.into_f32()?;
        let yd = y.f32()?;
        dy.f32_mut()?
            .par_chunks_mut(PAR_CHUNK)
            .zip(yd.par_chunks(PAR_CHUNK))
            .for_each(|(d, y)| {
                for (d, y) in d.iter_mut().zip(y) {
                    if *y <= 0.0 {
                        *d = 0.0;
                    }
                }
            });
        Ok(Some(ctx.store(dy)?))
    }

    fn clear_saved(&mut self) {
        self.saved_y = None;
    }
}

/// `t`'s bf16 storage when AMP stores in bf16 (so what `ctx.store` would write is bf16
/// too): ReLU then reads and writes it directly instead of widening a copy.
fn bf16_io<'a>(t: &'a Tensor, ctx: &Ctx) -> Option<&'a [bf16]> {
    if half_dtype(ctx.amp) == Some(DType::Bf16) {
        t.bf16()
    } else {
        None
    }
}

const SQRT_2_OVER_PI: f32 = 0.797_884_6;
const GELU_C: f32 = 0.044_715;

#[derive(Default)]
pub struct Gelu {
    saved_x: Option<Tensor>,
}

impl Layer for Gelu {
    fn name(&self) -> String {
        "gelu".into()
    }

    fn describe(&self) -> LayerDesc {
        Box::new(crate::engine::ops::gelu::GeluDesc)
    }

    fn forward(&mut self, x: Tensor, ctx: &Ctx) -> Result<Tensor> {
        let xf = x.widened()?;
        // Written whole below.
        let mut y = ctx.scratch(x.shape());
        y.f32_mut()?
            .par_chunks_mut(PAR_CHUNK)
            .zip(xf.f32()?.par_chunks(PAR_CHUNK))
            .for_each(|(y, x)| {
                for (y, &x) in y.iter_mut().zip(x) {
                    let t = (SQRT_2_OVER_PI * (x + GELU_C * x * x * x)).tanh();
                    *y = 0.5 * x * (1.0 + t);
                }
            });
        drop(xf);
        if ctx.save {
            self.saved_x = Some(ctx.store(x)?);
        }
        ctx.store(y)
    }

    fn backward(&mut self, dy: Tensor, _need_dx: bool, ctx: &Ctx) -> Result<Option<Tensor>> {
        let x = take_saved(&mut self.saved_x, "gelu")?.into_f32()?;
        let mut dy = dy.into_f32()?;
        dy.f32_mut()?
            .par_chunks_mut(PAR_CHUNK)
            .zip(x.f32()?.par_chunks(PAR_CHUNK))
            .for_each(|(d, x)| {
                for (d, &x) in d.iter_mut().zip(x) {
                    let u = SQRT_2_OVER_PI * (x + GELU_C * x * x * x);
                    let t = u.tanh();
                    let du = SQRT_2_OVER_PI * (1.0 + 3.0 * GELU_C * x * x);
                    *d *= 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du;
                }
            });
        Ok(Some(ctx.store(dy)?))
    }

    fn clear_saved(&mut self) {
        self.saved_x = None;
    }
}
