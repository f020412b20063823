//! GELU on the CUDA backend (tanh approximation), beside the CPU layer in
//! `activation.rs`: f32 in and out; under AMP the layer widens and stores around it.

use crate::engine::cuda::gpu::{GTensor, Gpu};
use crate::engine::ops::activation_cuda::{pointwise, pointwise_grad};
use crate::engine::ops::layer_cuda::{missing, store, GpuLayer, Pass};
use crate::error::Result;

/// GELU as a GPU layer; it keeps its input (in the pass's storage type) for backward.
#[derive(Default)]
pub struct GGelu {
    saved: Option<GTensor>,
}

impl GpuLayer for GGelu {
    fn name(&self) -> &'static str {
        "gelu"
    }
    fn forward(&mut self, x: GTensor, gpu: &Gpu, p: Pass) -> Result<GTensor> {
        let y = store(gpu, pointwise(gpu, "gelu_forward", &gpu.widen(&x)?, p)?, p)?;
        if p.save {
            self.saved = Some(store(gpu, x, p)?);
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
        let x = self.saved.take().ok_or_else(|| missing("gelu"))?;
        // GELU's derivative needs the input, not the output, as on the CPU.
        let dx = pointwise_grad(gpu, "gelu_backward", &gpu.widen(&dy)?, &gpu.widen(&x)?, p)?;
        store(gpu, dx, p).map(Some)
    }
    fn clear_saved(&mut self) {
        self.saved = None;
    }
}
