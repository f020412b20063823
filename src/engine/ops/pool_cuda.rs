//! Global average pooling and flatten on the CUDA backend, beside the CPU ops in
//! `pool.rs`.

use crate::cuda_launch;
use crate::engine::cuda::gpu::{GTensor, Gpu};
use crate::engine::cuda::kernels::elementwise;
use crate::engine::ops::layer_cuda::{missing, out, shape_err, store, GpuLayer, Pass};
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

/// Global average pooling as a GPU layer; it keeps its input's shape for backward.
#[derive(Default)]
pub struct GGlobalAvgPool {
    saved: Option<Vec<usize>>,
}

impl GpuLayer for GGlobalAvgPool {
    fn name(&self) -> &'static str {
        "global_avg_pool"
    }
    fn forward(&mut self, x: GTensor, gpu: &Gpu, p: Pass) -> Result<GTensor> {
        let y = store(gpu, gap_forward(&gpu.widen(&x)?, gpu, p)?, p)?;
        if p.save {
            self.saved = Some(x.shape.clone());
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
        let shape = self
            .saved
            .take()
            .ok_or_else(|| missing("global_avg_pool"))?;
        let dx = gap_backward(&gpu.widen(&dy)?, &shape, gpu, p)?;
        store(gpu, dx, p).map(Some)
    }
    fn clear_saved(&mut self) {
        self.saved = None;
    }
}

/// Flatten as a GPU layer: a reshape to [n, rest], undone in backward.
#[derive(Default)]
pub struct GFlatten {
    saved: Option<Vec<usize>>,
}

impl GpuLayer for GFlatten {
    fn name(&self) -> &'static str {
        "flatten"
    }
    fn forward(&mut self, x: GTensor, _gpu: &Gpu, p: Pass) -> Result<GTensor> {
        let n = x.shape.first().copied().unwrap_or(0);
        let rest = x.len().checked_div(n).unwrap_or(0);
        if p.save {
            self.saved = Some(x.shape.clone());
        }
        x.reshape(&[n, rest])
    }
    fn backward(
        &mut self,
        dy: GTensor,
        _need_dx: bool,
        _gpu: &Gpu,
        _p: Pass,
    ) -> Result<Option<GTensor>> {
        let shape = self.saved.take().ok_or_else(|| missing("flatten"))?;
        Ok(Some(dy.reshape(&shape)?))
    }
    fn clear_saved(&mut self) {
        self.saved = None;
    }
}
