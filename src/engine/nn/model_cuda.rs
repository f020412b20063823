//! The model's layers on a GPU, built from the model's [`LayerDesc`]s (each op's
//! `LayerSpec::gpu`) and its initial
//! values (`nn::init`, the CPU model's values bit for bit), so both backends start from
//! identical weights and can be compared step by step. Same contract as the CPU layers
//! (`ops/layer_cuda.rs`): forward keeps what backward needs, backward adds into
//! parameter gradients and returns the input gradient.

use std::sync::Arc;

use crate::engine::cuda::gpu::{GTensor, Gpu};
use crate::engine::nn::model::{LayerOps, Model, PassCtx};
use crate::engine::ops::desc::{HostParam, InitSource, Initial, LayerDesc};
use crate::engine::ops::layer_cuda::{GParam, GpuLayer, Pass};
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

/// GPU layers for `descs`, starting from `init` (which must hold exactly their
/// parameters and buffers, in visit order).
pub fn from_desc(descs: &[LayerDesc], init: Initial, gpu: &Gpu) -> Result<Vec<GLayer>> {
    let mut src = InitSource(init);
    let layers = descs
        .iter()
        .map(|d| d.gpu(gpu, &mut src))
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
