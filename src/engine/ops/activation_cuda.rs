//! ReLU on the CUDA backend, beside the CPU op in `activation.rs` (f32 in and out; under
//! AMP the layer widens and stores around it).

use crate::cuda_launch;
use crate::engine::cuda::gpu::{GTensor, Gpu};
use crate::engine::cuda::kernels::elementwise;
use crate::engine::ops::layer_cuda::{out, Pass};
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
