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
use crate::engine::ops::activation_cuda::{relu_backward, relu_forward};
use crate::engine::ops::batchnorm_cuda::GBatchNorm;
use crate::engine::ops::conv2d_cuda::GConv;
use crate::engine::ops::layer::LayerDesc;
use crate::engine::ops::layer_cuda::{f32_unique, missing, store, GParam, Pass};
use crate::engine::ops::linear_cuda::GLinear;
use crate::engine::ops::pool_cuda::{gap_backward, gap_forward};
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
        match self {
            GLayer::Linear(_) => "linear",
            GLayer::Conv(_) => "conv2d",
            GLayer::BatchNorm(_) => "batchnorm2d",
            GLayer::Relu(_) => "relu",
            GLayer::Flatten(_) => "flatten",
            GLayer::GlobalAvgPool(_) => "global_avg_pool",
            GLayer::Block { .. } => "basic_block",
        }
        .into()
    }
    fn forward(&mut self, x: GTensor, ctx: &GCtx) -> Result<GTensor> {
        GLayer::forward(self, x, &ctx.gpu, ctx.pass)
    }
    fn backward(&mut self, dy: GTensor, need_dx: bool, ctx: &GCtx) -> Result<Option<GTensor>> {
        GLayer::backward(self, dy, need_dx, &ctx.gpu, ctx.pass)
    }
    fn clear_saved(&mut self) {
        GLayer::clear_saved(self)
    }
    fn visit_params(&mut self, f: &mut dyn FnMut(&mut GParam)) {
        GLayer::visit_params(self, f)
    }
}

pub enum GLayer {
    Linear(GLinear),
    Conv(GConv),
    BatchNorm(GBatchNorm),
    Relu(Option<GTensor>),
    Flatten(Option<Vec<usize>>),
    GlobalAvgPool(Option<Vec<usize>>),
    Block {
        main: Vec<GLayer>,
        shortcut: Vec<GLayer>,
        out: Box<GLayer>,
    },
}

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

fn build(d: &LayerDesc, gpu: &Gpu, src: &mut Source) -> Result<GLayer> {
    Ok(match d {
        LayerDesc::Linear { d_in, d_out } => GLayer::Linear(GLinear {
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
        } => GLayer::Conv(GConv {
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
        LayerDesc::BatchNorm2d { c, eps, momentum } => GLayer::BatchNorm(GBatchNorm {
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
        LayerDesc::Relu => GLayer::Relu(None),
        LayerDesc::Flatten => GLayer::Flatten(None),
        LayerDesc::GlobalAvgPool => GLayer::GlobalAvgPool(None),
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
            GLayer::Block {
                main,
                shortcut,
                out: Box::new(build(out, gpu, src)?),
            }
        }
        LayerDesc::Other(name) => {
            return Err(Error::Unavailable(format!(
                "CUDA backend: layer {name} has no GPU kernels yet"
            )))
        }
    })
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

impl GLayer {
    pub fn forward(&mut self, x: GTensor, gpu: &Gpu, p: Pass) -> Result<GTensor> {
        match self {
            GLayer::Linear(l) => l.forward(x, gpu, p),
            GLayer::Conv(l) => l.forward(x, gpu, p),
            GLayer::BatchNorm(l) => l.forward(x, gpu, p),
            GLayer::Relu(saved) => {
                let y = store(gpu, relu_forward(&gpu.widen(&x)?, gpu, p)?, p)?;
                if p.save {
                    *saved = Some(y.clone());
                }
                Ok(y)
            }
            GLayer::Flatten(saved) => {
                let n = x.shape.first().copied().unwrap_or(0);
                let rest = x.len().checked_div(n).unwrap_or(0);
                if p.save {
                    *saved = Some(x.shape.clone());
                }
                x.reshape(&[n, rest])
            }
            GLayer::GlobalAvgPool(saved) => {
                let y = store(gpu, gap_forward(&gpu.widen(&x)?, gpu, p)?, p)?;
                if p.save {
                    *saved = Some(x.shape.clone());
                }
                Ok(y)
            }
            GLayer::Block {
                main,
                shortcut,
                out,
            } => {
                let mut sc = x.clone();
                for l in shortcut.iter_mut() {
                    sc = l.forward(sc, gpu, p)?;
                }
                let mut h = x;
                for l in main.iter_mut() {
                    h = l.forward(h, gpu, p)?;
                }
                // The sum is formed in f32 from (possibly half) branches; the output
                // ReLU stores it.
                let shape = h.shape.clone();
                let mut sum = f32_unique(gpu, h)?;
                gpu.axpy(&mut sum.s, gpu.widen(&sc)?.s(), 1.0)?;
                drop(sc);
                out.forward(GTensor::new(&shape, sum)?, gpu, p)
            }
        }
    }

    pub fn backward(
        &mut self,
        dy: GTensor,
        need_dx: bool,
        gpu: &Gpu,
        p: Pass,
    ) -> Result<Option<GTensor>> {
        match self {
            GLayer::Linear(l) => l.backward(dy, need_dx, gpu, p),
            GLayer::Conv(l) => l.backward(dy, need_dx, gpu, p),
            GLayer::BatchNorm(l) => l.backward(dy, need_dx, gpu, p),
            GLayer::Relu(saved) => {
                let y = saved.take().ok_or_else(|| missing("relu"))?;
                let dx = relu_backward(&gpu.widen(&dy)?, &gpu.widen(&y)?, gpu, p)?;
                store(gpu, dx, p).map(Some)
            }
            GLayer::Flatten(saved) => {
                let shape = saved.take().ok_or_else(|| missing("flatten"))?;
                Ok(Some(dy.reshape(&shape)?))
            }
            GLayer::GlobalAvgPool(saved) => {
                let shape = saved.take().ok_or_else(|| missing("global_avg_pool"))?;
                let dx = gap_backward(&gpu.widen(&dy)?, &shape, gpu, p)?;
                store(gpu, dx, p).map(Some)
            }
            GLayer::Block {
                main,
                shortcut,
                out,
            } => {
                let d = out
                    .backward(dy, true, gpu, p)?
                    .ok_or_else(|| Error::Runtime("basic_block: relu gave no gradient".into()))?;
                let mut dmain = Some(d.clone());
                for (i, l) in main.iter_mut().enumerate().rev() {
                    let g = dmain.take().ok_or_else(|| missing("basic_block"))?;
                    dmain = l.backward(g, need_dx || i > 0, gpu, p)?;
                }
                let mut dsc = Some(d);
                for l in shortcut.iter_mut().rev() {
                    let g = dsc.take().ok_or_else(|| missing("basic_block"))?;
                    dsc = l.backward(g, need_dx, gpu, p)?;
                }
                if !need_dx {
                    return Ok(None);
                }
                match (dmain, dsc) {
                    (Some(a), Some(b)) => {
                        let shape = a.shape.clone();
                        let mut s = f32_unique(gpu, a)?;
                        gpu.axpy(&mut s.s, gpu.widen(&b)?.s(), 1.0)?;
                        store(gpu, GTensor::new(&shape, s)?, p).map(Some)
                    }
                    _ => Err(Error::Runtime("basic_block: missing input gradient".into())),
                }
            }
        }
    }

    pub fn clear_saved(&mut self) {
        match self {
            GLayer::Linear(l) => l.saved_x = None,
            GLayer::Conv(l) => l.saved_x = None,
            GLayer::BatchNorm(l) => l.saved = None,
            GLayer::Relu(s) => *s = None,
            GLayer::Flatten(s) | GLayer::GlobalAvgPool(s) => *s = None,
            GLayer::Block {
                main,
                shortcut,
                out,
            } => {
                for l in main.iter_mut().chain(shortcut.iter_mut()) {
                    l.clear_saved();
                }
                out.clear_saved();
            }
        }
    }

    /// Parameters in the CPU model's visit order.
    pub fn visit_params(&mut self, f: &mut dyn FnMut(&mut GParam)) {
        match self {
            GLayer::Linear(l) => {
                f(&mut l.w);
                f(&mut l.b);
            }
            GLayer::Conv(l) => {
                f(&mut l.w);
                if let Some(b) = &mut l.b {
                    f(b);
                }
            }
            GLayer::BatchNorm(l) => {
                f(&mut l.gamma);
                f(&mut l.beta);
            }
            GLayer::Block { main, shortcut, .. } => {
                for l in main.iter_mut().chain(shortcut.iter_mut()) {
                    l.visit_params(f);
                }
            }
            GLayer::Relu(_) | GLayer::Flatten(_) | GLayer::GlobalAvgPool(_) => {}
        }
    }

    /// Buffers (BN running statistics) in the CPU model's visit order: what DDP's
    /// `broadcast_buffers` sends from rank 0.
    pub fn visit_buffers(&mut self, f: &mut dyn FnMut(&mut DBuf)) {
        match self {
            GLayer::BatchNorm(l) => {
                f(&mut l.run_mean);
                f(&mut l.run_var);
            }
            GLayer::Block {
                main,
                shortcut,
                out,
            } => {
                for l in main.iter_mut().chain(shortcut.iter_mut()) {
                    l.visit_buffers(f);
                }
                out.visit_buffers(f);
            }
            _ => {}
        }
    }

    /// Every batch-norm layer, nested ones included (SyncBatchNorm's conversion, as
    /// `torch.nn.SyncBatchNorm.convert_sync_batchnorm`).
    pub fn visit_batch_norms(&mut self, f: &mut dyn FnMut(&mut GBatchNorm)) {
        match self {
            GLayer::BatchNorm(l) => f(l),
            GLayer::Block {
                main,
                shortcut,
                out,
            } => {
                for l in main.iter_mut().chain(shortcut.iter_mut()) {
                    l.visit_batch_norms(f);
                }
                out.visit_batch_norms(f);
            }
            _ => {}
        }
    }

    pub fn has_params(&mut self) -> bool {
        let mut has = false;
        self.visit_params(&mut |_| has = true);
        has
    }
}
