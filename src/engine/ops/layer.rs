//! The layer contract. Each layer has an explicit forward that keeps what its backward
//! needs and an explicit backward that consumes it (llm.c style, no autograd tape), so
//! activation memory, checkpoint segments and gradient readiness are all visible here.

use std::sync::Arc;

use crate::engine::amp;
use crate::engine::autotune::Algos;
use crate::engine::collective::Collective;
use crate::engine::device::{Device, MemCategory};
use crate::engine::ops::desc::CpuOnly;
pub use crate::engine::ops::desc::LayerDesc;
use crate::engine::tensor::{DType, Tensor};
use crate::error::Result;
use crate::knobs::Amp;

/// A trainable parameter with its gradient. `g == None` means "no gradient buffer":
/// the state `zero_grad(set_to_none=True)` leaves behind, where the next backward writes
/// instead of accumulating.
#[derive(Debug)]
pub struct Param {
    pub name: String,
    pub w: Tensor,
    pub g: Option<Tensor>,
    /// Whether weight decay applies (not to biases and norm parameters, as usual).
    pub decay: bool,
}

impl Param {
    pub fn new(
        name: impl Into<String>,
        shape: &[usize],
        init: Vec<f32>,
        decay: bool,
        dev: &Device,
    ) -> Result<Param> {
        Ok(Param {
            name: name.into(),
            w: Tensor::from_vec(shape, init, MemCategory::Params, dev.mem())?,
            g: None,
            decay,
        })
    }

    /// The gradient buffer to write into and whether backward must accumulate (`+=`)
    /// rather than overwrite (`=`). Allocates it when absent; the fill is needed anyway
    /// because some kernels write only part of it.
    pub fn grad_slot(&mut self) -> Result<(&mut [f32], bool)> {
        let accumulate = self.g.is_some();
        let g = match &mut self.g {
            Some(g) => g,
            slot @ None => slot.insert(Tensor::zeros(
                self.w.shape(),
                MemCategory::Grads,
                self.w.tracker(),
            )),
        };
        Ok((g.f32_mut()?, accumulate))
    }

    pub fn len(&self) -> usize {
        self.w.len()
    }

    pub fn is_empty(&self) -> bool {
        self.w.is_empty()
    }
}

/// Per-call context of a forward or backward pass.
#[derive(Clone)]
pub struct Ctx {
    pub dev: Arc<Device>,
    /// Training mode (batch statistics in BN) vs evaluation.
    pub train: bool,
    /// Keep what backward needs. Off for checkpointed segments outside their recompute
    /// and for evaluation.
    pub save: bool,
    /// This forward recomputes a checkpointed segment: state updates (BN running
    /// statistics) already happened and must not happen twice.
    pub recompute: bool,
    pub amp: Amp,
    /// Algorithm selection (autotuning or the fixed heuristic).
    pub algos: Arc<Algos>,
    /// SyncBatchNorm: batch-norm statistics are reduced over these ranks (DDP).
    pub sync_bn: Option<Arc<dyn Collective>>,
}

impl Ctx {
    pub fn train(dev: &Arc<Device>) -> Ctx {
        Ctx {
            dev: Arc::clone(dev),
            train: true,
            save: true,
            recompute: false,
            amp: Amp::Off,
            algos: Algos::heuristic(),
            sync_bn: None,
        }
    }

    pub fn eval(dev: &Arc<Device>) -> Ctx {
        Ctx {
            train: false,
            save: false,
            ..Ctx::train(dev)
        }
    }

    /// A new f32 output buffer on this context's device. Under AMP it is a compute
    /// temporary (the kernel's f32 accumulator, narrowed by `store` before it is kept or
    /// passed on), so it is charged as workspace; otherwise it is the activation itself.
    pub fn alloc(&self, shape: &[usize]) -> Tensor {
        let cat = if amp::half_dtype(self.amp).is_none() {
            MemCategory::Activations
        } else {
            MemCategory::Workspace
        };
        Tensor::zeros(shape, cat, self.dev.mem())
    }

    pub fn from_vec(&self, shape: &[usize], v: Vec<f32>) -> Result<Tensor> {
        Tensor::from_vec(shape, v, MemCategory::Activations, self.dev.mem())
    }

    /// How a tensor leaves a layer (output, input gradient) or is kept for backward:
    /// in the mixed-precision storage type when AMP is on, untouched otherwise.
    pub fn store(&self, t: Tensor) -> Result<Tensor> {
        match amp::half_dtype(self.amp) {
            // Charged as activations whatever buffer it came from: a widened compute
            // copy (workspace) turns back into a stored activation here.
            Some(dt) if t.dtype() == DType::F32 => t.to_dtype(dt, MemCategory::Activations),
            _ => Ok(t),
        }
    }

    /// The storage type name used in algorithm keys.
    pub fn dtype_name(&self) -> &'static str {
        match self.amp {
            // The CPU has no TF32 mode: tf32 runs (and is keyed as) f32 here.
            Amp::Off | Amp::Tf32 => "f32",
            Amp::Bf16 => "bf16",
            Amp::Fp16 => "f16",
        }
    }

    /// Weights as a kernel should see them: rounded to the half grid under AMP (a
    /// workspace copy; the f32 master weights stay with the optimizer), else shared.
    pub fn weights(&self, w: &Tensor) -> Result<Tensor> {
        match amp::half_dtype(self.amp) {
            Some(dt) => Tensor::from_vec(
                w.shape(),
                amp::round_to_grid(w.f32()?, dt),
                MemCategory::Workspace,
                self.dev.mem(),
            ),
            None => Ok(w.clone()),
        }
    }
}

pub trait Layer: Send {
    fn name(&self) -> String;

    /// What the layer is, for every backend to build the same model (`ops/desc.rs`).
    fn describe(&self) -> LayerDesc {
        Box::new(CpuOnly(self.name()))
    }

    /// Forward pass. Takes the input by value so a layer that needs it for backward keeps
    /// it without a copy, and an in-place layer can reuse its buffer.
    fn forward(&mut self, x: Tensor, ctx: &Ctx) -> Result<Tensor>;

    /// Backward pass: consumes what forward saved, adds parameter gradients into their
    /// slots, and returns the input gradient when `need_dx`.
    fn backward(&mut self, dy: Tensor, need_dx: bool, ctx: &Ctx) -> Result<Option<Tensor>>;

    /// Drops whatever forward saved (checkpointing, or an aborted step).
    fn clear_saved(&mut self);

    fn visit_params(&mut self, _f: &mut dyn FnMut(&mut Param)) {}

    /// Non-trainable state that must travel with the parameters (BN running statistics).
    fn visit_buffers(&mut self, _f: &mut dyn FnMut(&str, &mut Vec<f32>)) {}
}

/// Takes a saved tensor or reports that backward ran without its forward.
pub fn take_saved(slot: &mut Option<Tensor>, layer: &str) -> Result<Tensor> {
    slot.take().ok_or_else(|| {
        crate::error::Error::Runtime(format!("{layer}: backward called without a saved forward"))
    })
}
