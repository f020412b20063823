//! The GPU side of the layer contract (`layer.rs` is the CPU side): a parameter on the
//! GPU, the pass flags every GPU layer reads, and the buffer helpers the `<op>_cuda.rs`
//! layers share. It knows the CUDA runtime (`cuda::gpu`) and no model.

use std::rc::Rc;

use crate::engine::cuda::gpu::{words, DBuf, GTensor, Gpu};
use crate::engine::cuda::sync_bn::NcclSync;
use crate::engine::device::MemCategory;
use crate::engine::tensor::DType;
use crate::error::{Error, Result};

/// A parameter on the GPU; `g == None` is the set-to-none state, as on the CPU.
pub struct GParam {
    pub name: String,
    pub w: DBuf,
    pub g: Option<DBuf>,
    pub decay: bool,
}

impl GParam {
    /// The gradient buffer (zeroed when new) and whether a GEMM must accumulate into it.
    pub(crate) fn slot(&mut self, gpu: &Gpu) -> Result<(&mut DBuf, bool)> {
        self.slot_made(gpu, true)
    }

    /// As [`GParam::slot`], for a caller that writes every element when told not to
    /// accumulate (the weight-gradient GEMMs and cuDNN's filter pass with beta = 0): a
    /// new buffer is not zeroed first. Under `zero_grad = none` every step's gradients
    /// are new, and PyTorch's set-to-none likewise writes the first gradient without a
    /// memset. The CUDA stand-in fills new memory with NaN, so a caller that read it would
    /// show in gpu_parity's set-to-none loss curves.
    pub(crate) fn write_slot(&mut self, gpu: &Gpu) -> Result<(&mut DBuf, bool)> {
        self.slot_made(gpu, false)
    }

    fn slot_made(&mut self, gpu: &Gpu, zeroed: bool) -> Result<(&mut DBuf, bool)> {
        let acc = self.g.is_some();
        let n = self.w.len();
        let g = match &mut self.g {
            Some(g) => g,
            slot @ None => slot.insert(if zeroed {
                gpu.zeros(n, MemCategory::Grads)?
            } else {
                gpu.alloc(n, MemCategory::Grads)?
            }),
        };
        Ok((g, acc))
    }
}

/// Per-pass flags, as the CPU backend's `Ctx`. `half` is AMP's storage type (bf16 or
/// fp16): activations, activation gradients and what layers keep for backward are
/// stored in it, GEMMs take it as operands and accumulate in f32, everything else
/// computes in f32 between a widen and a narrow, as the CPU backend's AMP does.
#[derive(Clone, Copy, Debug)]
pub struct Pass {
    pub train: bool,
    pub save: bool,
    pub recompute: bool,
    pub half: Option<DType>,
}

impl Pass {
    /// The GEMM operand type of this pass.
    pub fn gemm_dt(&self) -> DType {
        self.half.unwrap_or(DType::F32)
    }
}

/// How a layer's f32 result leaves it (output, input gradient) or is kept for backward:
/// in the AMP storage type, else as it is.
pub(crate) fn store(gpu: &Gpu, t: GTensor, p: Pass) -> Result<GTensor> {
    match p.half {
        Some(dt) => gpu.narrow(&t, dt),
        None => Ok(t),
    }
}

/// A GEMM operand in the pass's operand type (rounded to the half grid under AMP, as
/// autocast casts a matmul's inputs).
pub(crate) fn operand(gpu: &Gpu, t: &GTensor, p: Pass) -> Result<GTensor> {
    match p.half {
        Some(dt) => gpu.narrow(t, dt),
        None => gpu.widen(t),
    }
}

/// A weight as a GEMM operand: under AMP a half copy (workspace; the f32 master weights
/// stay with the optimizer), else `None` (use the weights themselves).
pub(crate) fn half_weights(gpu: &Gpu, w: &GParam, p: Pass) -> Result<Option<DBuf>> {
    let Some(dt) = p.half else { return Ok(None) };
    let n = w.w.len();
    let mut h = gpu.alloc(words(n, dt), MemCategory::Workspace)?;
    gpu.narrow_into(&mut h.s, &w.w.s, n, dt)?;
    Ok(Some(h))
}

/// `t` as an f32 buffer a kernel may write: its own when f32 and unshared.
pub(crate) fn f32_unique(gpu: &Gpu, t: GTensor) -> Result<DBuf> {
    if t.is_half() {
        gpu.widen(&t)?.into_unique(gpu)
    } else {
        t.into_unique(gpu)
    }
}

/// A layer's f32 result buffer: the activation itself, or under AMP a compute temporary
/// (workspace) that `store` narrows.
pub(crate) fn out(gpu: &Gpu, n: usize, p: Pass) -> Result<DBuf> {
    let cat = if p.half.is_some() {
        MemCategory::Workspace
    } else {
        MemCategory::Activations
    };
    gpu.alloc(n, cat)
}

pub(crate) fn shape_err(op: &'static str, msg: String) -> Error {
    Error::Shape { op, msg }
}

pub(crate) fn missing(layer: &str) -> Error {
    Error::Runtime(format!(
        "{layer}: backward called without a saved forward (GPU)"
    ))
}

/// A layer on the GPU, the CUDA side of `Layer`: forward keeps what backward needs,
/// backward adds into the parameter gradients and returns the input gradient. Each op
/// implements it in its own `<op>_cuda.rs`, so a new op is new files, not new arms of a
/// closed enum; each op's `LayerSpec::gpu` (`ops/desc.rs`) builds its layer.
pub trait GpuLayer {
    fn name(&self) -> &'static str;
    fn forward(&mut self, x: GTensor, gpu: &Gpu, p: Pass) -> Result<GTensor>;
    fn backward(
        &mut self,
        dy: GTensor,
        need_dx: bool,
        gpu: &Gpu,
        p: Pass,
    ) -> Result<Option<GTensor>>;
    /// Drops what forward kept for backward.
    fn clear_saved(&mut self);
    /// Parameters in the CPU model's visit order.
    fn visit_params(&mut self, _f: &mut dyn FnMut(&mut GParam)) {}
    /// Buffers (BN running statistics) in the CPU model's visit order: what DDP's
    /// `broadcast_buffers` sends from rank 0.
    fn visit_buffers(&mut self, _f: &mut dyn FnMut(&mut DBuf)) {}
    /// SyncBatchNorm's conversion (as `torch.nn.SyncBatchNorm.convert_sync_batchnorm`):
    /// every batch-norm layer, nested ones included, takes `sync`; true when one did.
    fn use_sync_bn(&mut self, _sync: &Rc<NcclSync>) -> bool {
        false
    }
    fn has_params(&mut self) -> bool {
        let mut has = false;
        self.visit_params(&mut |_| has = true);
        has
    }
}
