//! ReLU on the CUDA backend, beside the CPU op in `activation.rs` (f32 in and out; under
//! AMP the layer widens and stores around it).

use crate::cuda_launch;
use crate::engine::cuda::gpu::{GTensor, Gpu};
use crate::engine::cuda::kernels::elementwise;
use crate::engine::ops::layer_cuda::{missing, out, store, GpuLayer, Pass};
use crate::error::Result;

/// An element-wise activation kernel `name(y, x, n)` over `x` (ReLU's, GELU's forward).
pub(crate) fn pointwise(gpu: &Gpu, name: &'static str, x: &GTensor, p: Pass) -> Result<GTensor> {
    let mut y = out(gpu, x.len(), p)?;
    let n = x.len() as u64;
    cuda_launch!(gpu, name, elementwise(x.len()), &mut y.s, x.s(), &n)?;
    GTensor::new(&x.shape, y)
}

/// An activation's input gradient `name(dx, dy, saved, n)` from what its layer kept:
/// ReLU its output (zero exactly where its gradient is), GELU its input.
pub(crate) fn pointwise_grad(
    gpu: &Gpu,
    name: &'static str,
    dy: &GTensor,
    saved: &GTensor,
    p: Pass,
) -> Result<GTensor> {
    let mut dx = out(gpu, saved.len(), p)?;
    let n = saved.len() as u64;
    cuda_launch!(
        gpu,
        name,
        elementwise(saved.len()),
        &mut dx.s,
        dy.s(),
        saved.s(),
        &n
    )?;
    GTensor::new(&saved.shape, dx)
}

/// ReLU as a GPU layer; it keeps its output for backward.
#[derive(Default)]
pub struct GRelu {
    saved: Option<GTensor>,
}

impl GpuLayer for GRelu {
    fn name(&self) -> &'static str {
        "relu"
    }
    fn forward(&mut self, x: GTensor, gpu: &Gpu, p: Pass) -> Result<GTensor> {
        let y = store(gpu, pointwise(gpu, "relu_forward", &gpu.widen(&x)?, p)?, p)?;
        if p.save {
            self.saved = Some(y.clone());
        }
        Ok(y)
    }
    fn backward(
        &mut self,
        dy: GTensor,
        _need_dx: bool,
        gpu: &Gpu,
        p: Pass,
    ) -> Result<Option<GTensor>> {
        let y = self.saved.take().ok_or_else(|| missing("relu"))?;
        let dx = pointwise_grad(gpu, "relu_backward", &gpu.widen(&dy)?, &gpu.widen(&y)?, p)?;
        store(gpu, dx, p).map(Some)
    }
    fn clear_saved(&mut self) {
        self.saved = None;
    }
}
