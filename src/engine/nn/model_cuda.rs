//! The model's layers on a GPU, built from the model's [`LayerDesc`]s and its initial
//! values (`nn::init`, the CPU model's values bit for bit), so both backends start from
//! identical weights and can be compared step by step. Same contract as the CPU layers
//! (`ops/layer_cuda.rs`): forward keeps what backward needs, backward adds into
//! parameter gradients and returns the input gradient.

use std::sync::Arc;

use crate::engine::cuda::gpu::{DBuf, GTensor, Gpu};
use crate::engine::device::MemCategory;
use crate::engine::nn::init::{HostParam, Initial};
use crate::engine::nn::model::{LayerOps, Model, PassCtx};
use crate::engine::nn::residual_cuda::GBasicBlock;
use crate::engine::ops::activation_cuda::GRelu;
use crate::engine::ops::batchnorm_cuda::GBatchNorm;
use crate::engine::ops::conv2d_cuda::GConv;
use crate::engine::ops::layer::LayerDesc;
use crate::engine::ops::layer_cuda::{GParam, GpuLayer, Pass};
use crate::engine::ops::linear_cuda::GLinear;
use crate::engine::ops::pool_cuda::{GFlatten, GGlobalAvgPool};
use crate::error::{Error, Result};

/// The CUDA backend's pass context: the GPU the layers run on and the pass's flags.
#[derive(Clone)]
pub struct GCtx {
    pub gpu: Arc<Gpu>,
    pub pass: Pass,
}

impl PassCtx for GCtx {
    fn saves(&self) -> bool {
        self.pass.save
    }
    fn without_save(&self) -> GCtx {
        GCtx {
            pass: Pass {
                save: false,
                ..self.pass
            },
            gpu: Arc::clone(&self.gpu),
        }
    }
    fn for_recompute(&self) -> GCtx {
        GCtx {
            pass: Pass {
                train: true,
                save: true,
                recompute: true,
                half: self.pass.half,
            },
            gpu: Arc::clone(&self.gpu),
        }
    }
}

impl LayerOps for GLayer {
    type T = GTensor;
    type Ctx = GCtx;
    type Param = GParam;
    fn name(&self) -> String {
        GpuLayer::name(self.as_ref()).into()
    }
    fn forward(&mut self, x: GTensor, ctx: &GCtx) -> Result<GTensor> {
        GpuLayer::forward(self.as_mut(), x, &ctx.gpu, ctx.pass)
    }
    fn backward(&mut self, dy: GTensor, need_dx: bool, ctx: &GCtx) -> Result<Option<GTensor>> {
        GpuLayer::backward(self.as_mut(), dy, need_dx, &ctx.gpu, ctx.pass)
    }
    fn clear_saved(&mut self) {
        GpuLayer::clear_saved(self.as_mut())
    }
    fn visit_params(&mut self, f: &mut dyn FnMut(&mut GParam)) {
        GpuLayer::visit_params(self.as_mut(), f)
    }
}

/// A GPU model's layer: any op's `GpuLayer` (`ops/<op>_cuda.rs`).
pub type GLayer = Box<dyn GpuLayer>;

/// Parameters and buffers in visit order, consumed while building.
struct Source(Initial);

impl Source {
    fn param(&mut self, gpu: &Gpu, want: &str, len: usize) -> Result<GParam> {
        let p = self.0.params.pop_front().ok_or_else(|| {
            Error::Runtime(format!(
                "GPU model: ran out of initial parameters at {want}"
            ))
        })?;
        if p.name != want || p.values.len() != len {
            return Err(Error::Runtime(format!(
                "GPU model: expected parameter {want} of {len} values, got {} {:?}",
                p.name, p.shape
            )));
        }
        Ok(GParam {
            w: gpu.upload(&p.values, MemCategory::Params)?,
            name: p.name,
            g: None,
            decay: p.decay,
        })
    }

    fn buffer(&mut self, gpu: &Gpu, want: &str, len: usize) -> Result<DBuf> {
        let (name, data) = self.0.buffers.pop_front().ok_or_else(|| {
            Error::Runtime(format!("GPU model: ran out of initial buffers at {want}"))
        })?;
        if name != want || data.len() != len {
            return Err(Error::Runtime(format!(
                "GPU model: expected buffer {want} of {len} values, got {name}"
            )));
        }
        gpu.upload(&data, MemCategory::Params)
    }
}

/// The one place a `LayerDesc` meets its GPU layer.
fn build(d: &LayerDesc, gpu: &Gpu, src: &mut Source) -> Result<GLayer> {
    let layer: GLayer = match d {
        LayerDesc::Linear { d_in, d_out } => Box::new(GLinear {
            d_in: *d_in,
            d_out: *d_out,
            w: src.param(gpu, "weight", d_in * d_out)?,
            b: src.param(gpu, "bias", *d_out)?,
            saved_x: None,
        }),
        LayerDesc::Conv2d {
            c_in,
            c_out,
            k,
            stride,
            pad,
            bias,
        } => Box::new(GConv {
            c_in: *c_in,
            c_out: *c_out,
            k: *k,
            stride: *stride,
            pad: *pad,
            w: src.param(gpu, "weight", c_out * k * k * c_in)?,
            b: if *bias {
                Some(src.param(gpu, "bias", *c_out)?)
            } else {
                None
            },
            saved_x: None,
        }),
        LayerDesc::BatchNorm2d { c, eps, momentum } => Box::new(GBatchNorm {
            c: *c,
            eps: *eps,
            momentum: *momentum,
            gamma: src.param(gpu, "weight", *c)?,
            beta: src.param(gpu, "bias", *c)?,
            run_mean: src.buffer(gpu, "running_mean", *c)?,
            run_var: src.buffer(gpu, "running_var", *c)?,
            saved: None,
            sync: None,
        }),
        LayerDesc::Relu => Box::<GRelu>::default(),
        LayerDesc::Flatten => Box::<GFlatten>::default(),
        LayerDesc::GlobalAvgPool => Box::<GGlobalAvgPool>::default(),
        LayerDesc::BasicBlock {
            main,
            shortcut,
            out,
        } => {
            // The CPU block visits main's parameters, then the shortcut's.
            let main = main
                .iter()
                .map(|l| build(l, gpu, src))
                .collect::<Result<Vec<_>>>()?;
            let shortcut = shortcut
                .iter()
                .map(|l| build(l, gpu, src))
                .collect::<Result<Vec<_>>>()?;
            Box::new(GBasicBlock {
                main,
                shortcut,
                out: build(out, gpu, src)?,
            })
        }
        LayerDesc::Other(name) => {
            return Err(Error::Unavailable(format!(
                "CUDA backend: layer {name} has no GPU kernels yet"
            )))
        }
    };
    Ok(layer)
}

/// GPU layers for `descs`, starting from `init` (which must hold exactly their
/// parameters and buffers, in visit order).
pub fn from_desc(descs: &[LayerDesc], init: Initial, gpu: &Gpu) -> Result<Vec<GLayer>> {
    let mut src = Source(init);
    let layers = descs
        .iter()
        .map(|d| build(d, gpu, &mut src))
        .collect::<Result<Vec<_>>>()?;
    if !src.0.params.is_empty() || !src.0.buffers.is_empty() {
        return Err(Error::Runtime(format!(
            "GPU model: {} parameters and {} buffers were not used",
            src.0.params.len(),
            src.0.buffers.len()
        )));
    }
    Ok(layers)
}

/// The GPU copy of `model`: same layers, same parameter values (the parity tests start
/// both backends from one CPU model this way).
pub fn from_cpu(model: &mut Model, gpu: &Gpu) -> Result<Vec<GLayer>> {
    let mut init = Initial::default();
    let mut bad = None;
    model.visit_params(&mut |p| match p.w.f32() {
        Ok(d) => init.params.push_back(HostParam {
            name: p.name.clone(),
            shape: p.w.shape().to_vec(),
            values: d.to_vec(),
            decay: p.decay,
        }),
        Err(e) => bad = Some(e),
    });
    if let Some(e) = bad {
        return Err(e);
    }
    model.visit_buffers(&mut |name, v| init.buffers.push_back((name.to_string(), v.clone())));
    let descs: Vec<LayerDesc> = model.layers.iter().map(|l| l.describe()).collect();
    from_desc(&descs, init, gpu)
}
