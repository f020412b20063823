//! Global average pooling on the CUDA backend, beside the CPU op in `pool.rs`.

use crate::cuda_launch;
use crate::engine::cuda::gpu::{GTensor, Gpu};
use crate::engine::cuda::kernels::elementwise;
use crate::engine::ops::layer_cuda::{out, shape_err, Pass};
use crate::error::Result;

fn nhwc(shape: &[usize]) -> Result<[usize; 4]> {
    match *shape {
        [n, h, w, c] => Ok([n, h, w, c]),
        _ => Err(shape_err("global_avg_pool", format!("{shape:?}"))),
    }
}

pub(crate) fn gap_forward(x: &GTensor, gpu: &Gpu, p: Pass) -> Result<GTensor> {
    let [n, h, w, c] = nhwc(&x.shape)?;
    let mut y = out(gpu, n * c, p)?;
    let a = [n, h * w, c].map(|v| v as i32);
    cuda_launch!(
        gpu,
        "gap_forward",
        elementwise(n * c),
        &mut y.s,
        x.s(),
        &a[0],
        &a[1],
        &a[2]
    )?;
    GTensor::new(&[n, c], y)
}

/// The input gradient for an input of `shape` (NHWC).
pub(crate) fn gap_backward(dy: &GTensor, shape: &[usize], gpu: &Gpu, p: Pass) -> Result<GTensor> {
    let [n, h, w, c] = nhwc(shape)?;
    let mut dx = out(gpu, n * h * w * c, p)?;
    let a = [n, h * w, c].map(|v| v as i32);
    cuda_launch!(
        gpu,
        "gap_backward",
        elementwise(dx.len()),
        &mut dx.s,
        dy.s(),
        &a[0],
        &a[1],
        &a[2]
    )?;
    GTensor::new(shape, dx)
}
