//! ReLU on the CUDA backend, beside the CPU op in `activation.rs` (f32 in and out; under
//! AMP the layer widens and stores around it).

use crate::cuda_launch;
use crate::engine::cuda::gpu::{GTensor, Gpu};
use crate::engine::cuda::kernels::elementwise;
use crate::engine::ops::layer_cuda::{missing, out, store, GpuLayer, Pass};
use crate::error::Result;

pub(crate) fn relu_forward(x: &GTensor, gpu: &Gpu, p: Pass) -> Result<GTensor> {
    let mut y = out(gpu, x.len(), p)?;
    let n = x.len() as u64;
    cuda_launch!(
        gpu,
        "relu_forward",
        elementwise(x.len()),
        &mut y.s,
        x.s(),
        &n
    )?;
    GTensor::new(&x.shape, y)
}

/// The input gradient from the saved output `y` (ReLU's output is zero exactly where
/// its gradient is).
pub(crate) fn relu_backward(dy: &GTensor, y: &GTensor, gpu: &Gpu, p: Pass) -> Result<GTensor> {
    let mut dx = out(gpu, y.len(), p)?;
    let n = y.len() as u64;
    cuda_launch!(
        gpu,
        "relu_backward",
        elementwise(y.len()),
        &mut dx.s,
        dy.s(),
        y.s(),
        &n
    )?;
    GTensor::new(&y.shape, dx)
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
        let y = store(gpu, relu_forward(&gpu.widen(&x)?, gpu, p)?, p)?;
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
        let dx = relu_backward(&gpu.widen(&dy)?, &gpu.widen(&y)?, gpu, p)?;
        store(gpu, dx, p).map(Some)
    }
    fn clear_saved(&mut self) {
        self.saved = None;
    }
}
