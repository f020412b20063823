//! Element-wise activations (ReLU, GELU) on the CUDA backend, beside the CPU ops in
//! `activation.rs` (f32 in and out; under AMP the layer widens and stores around it).

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

/// What an activation's input gradient is computed from.
#[derive(Clone, Copy)]
pub(crate) enum Keeps {
    /// Its output: ReLU's is zero exactly where its gradient is.
    Output,
    /// Its input: GELU's derivative needs it, as on the CPU.
    Input,
}

/// An element-wise activation as a GPU layer: its forward and gradient kernels, and the
/// tensor (in the pass's storage type) it keeps for backward. ReLU and GELU are two
/// values of it, not two copies of the layer.
pub struct GActivation {
    name: &'static str,
    forward: &'static str,
    grad: &'static str,
    keeps: Keeps,
    saved: Option<GTensor>,
}

impl GActivation {
    pub(crate) fn new(
        name: &'static str,
        forward: &'static str,
        grad: &'static str,
        keeps: Keeps,
    ) -> Self {
        GActivation {
            name,
            forward,
            grad,
            keeps,
            saved: None,
        }
    }

    pub(crate) fn relu() -> Self {
        GActivation::new("relu", "relu_forward", "relu_backward", Keeps::Output)
    }
}

impl GpuLayer for GActivation {
    fn name(&self) -> &'static str {
        self.name
    }
    fn forward(&mut self, x: GTensor, gpu: &Gpu, p: Pass) -> Result<GTensor> {
        let y = store(gpu, pointwise(gpu, self.forward, &gpu.widen(&x)?, p)?, p)?;
        if p.save {
            self.saved = Some(match self.keeps {
                Keeps::Output => y.clone(),
                Keeps::Input => store(gpu, x, p)?,
            });
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
        let kept = self.saved.take().ok_or_else(|| missing(self.name))?;
        let dx = pointwise_grad(gpu, self.grad, &gpu.widen(&dy)?, &gpu.widen(&kept)?, p)?;
        store(gpu, dx, p).map(Some)
    }
    fn clear_saved(&mut self) {
        self.saved = None;
    }
}
