//! Pointwise activations: ReLU (in place, keeps its output as the mask) and GELU (tanh
//! approximation, as `nn.GELU(approximate="tanh")`).

use rayon::prelude::*;

use crate::engine::cuda::gpu::Gpu;
use crate::engine::device::Device;
use crate::engine::ops::activation_cuda::GActivation;
use crate::engine::ops::desc::{InitSource, Initial, LayerSpec};
use crate::engine::ops::layer::{take_saved, Ctx, Layer, LayerDesc};
use crate::engine::ops::layer_cuda::GpuLayer;
use crate::engine::rng::Rng;
use crate::engine::tensor::Tensor;
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
        let y = take_saved(&mut self.saved_y, "relu")?.into_f32()?;
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
        let mut y = ctx.alloc(x.shape());
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
