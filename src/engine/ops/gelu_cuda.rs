//! GELU on the CUDA backend (tanh approximation), beside the CPU layer in
//! `activation.rs`: f32 in and out; under AMP the layer widens and stores around it.

use crate::cuda_launch;
use crate::engine::cuda::gpu::{GTensor, Gpu};
use crate::engine::cuda::kernels::elementwise;
use crate::engine::ops::layer_cuda::{missing, out, store, GpuLayer, Pass};
use crate::error::Result;

fn gelu_forward(x: &GTensor, gpu: &Gpu, p: Pass) -> Result<GTensor> {
    let mut y = out(gpu, x.len(), p)?;
    let n = x.len() as u64;
    cuda_launch!(
        gpu,
        "gelu_forward",
        elementwise(x.len()),
        &mut y.s,
        x.s(),
        &n
    )?;
    GTensor::new(&x.shape, y)
}

/// The input gradient from the saved input `x` (GELU's derivative needs the input, not
/// the output, as on the CPU).
fn gelu_backward(dy: &GTensor, x: &GTensor, gpu: &Gpu, p: Pass) -> Result<GTensor> {
    let mut dx = out(gpu, x.len(), p)?;
    let n = x.len() as u64;
    cuda_launch!(
        gpu,
        "gelu_backward",
        elementwise(x.len()),
        &mut dx.s,
        dy.s(),
        x.s(),
        &n
    )?;
    GTensor::new(&x.shape, dx)
}

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
        let y = store(gpu, gelu_forward(&gpu.widen(&x)?, gpu, p)?, p)?;
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
        let dx = gelu_backward(&gpu.widen(&dy)?, &gpu.widen(&x)?, gpu, p)?;
        store(gpu, dx, p).map(Some)
    }
    fn clear_saved(&mut self) {
        self.saved = None;
    }
}
