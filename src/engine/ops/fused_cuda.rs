//! The fused layers on the CUDA backend, beside the CPU ones in `fused.rs`: Linear+ReLU
//! as a bias-less GEMM and one `bias_relu` kernel (unfused: `fill_rows`, the GEMM
//! accumulating onto it, `relu_forward`), its backward's mask and bias gradient in one
//! reduction kernel. Batch norm+ReLU is `GBatchNorm` on its `bn_relu_*` kernels
//! (batchnorm_cuda.rs).
//!
//! The forward adds the bias after the GEMM's sum instead of before it, so against the
//! unfused layer it agrees to f32 rounding, not bit for bit.

use crate::cuda_launch;
use crate::engine::cuda::blas::Shape;
use crate::engine::cuda::gpu::{GTensor, Gpu};
use crate::engine::cuda::kernels::{channel_reduce, elementwise};
use crate::engine::ops::desc::InitSource;
use crate::engine::ops::layer_cuda::{
    half_weights, missing, operand, out, shape_err, store, GParam, GpuLayer, Pass,
};
use crate::engine::ops::linear::LinearDesc;
use crate::engine::ops::linear_cuda::GLinear;
use crate::error::Result;

/// Linear+ReLU on the GPU, its parameters taken from `src` as `LinearDesc`'s.
pub(crate) fn linear_relu_gpu(
    d: &LinearDesc,
    gpu: &Gpu,
    src: &mut InitSource,
) -> Result<Box<dyn GpuLayer>> {
    Ok(Box::new(GLinearRelu {
        lin: GLinear {
            d_in: d.d_in,
            d_out: d.d_out,
            w: src.param(gpu, "weight", d.d_in * d.d_out)?,
            b: src.param(gpu, "bias", d.d_out)?,
            saved_x: None,
        },
        saved_y: None,
    }))
}

pub struct GLinearRelu {
    lin: GLinear,
    saved_y: Option<GTensor>,
}

impl GpuLayer for GLinearRelu {
    fn name(&self) -> &'static str {
        "linear_relu"
    }
    fn forward(&mut self, x: GTensor, gpu: &Gpu, p: Pass) -> Result<GTensor> {
        let (d_in, d_out) = (self.lin.d_in, self.lin.d_out);
        let n = x.shape.first().copied().unwrap_or(0);
        if n == 0 || x.len() != n * d_in {
            return Err(shape_err(
                "linear_relu",
                format!("input {:?} is not [n, {d_in}]", x.shape),
            ));
        }
        let x = operand(gpu, &x, p)?;
        let wh = half_weights(gpu, &self.lin.w, p)?;
        let mut y = out(gpu, n * d_out, p)?;
        let s = Shape {
            m: n,
            n: d_out,
            k: d_in,
            ta: false,
            tb: true,
            accumulate: false,
            dt: p.gemm_dt(),
        };
        gpu.gemm(
            &s,
            x.s(),
            wh.as_ref().map_or(&self.lin.w.w.s, |h| &h.s),
            &mut y.s,
        )?;
        let (rows, cols) = (n as u64, d_out as i32);
        cuda_launch!(
            gpu,
            "bias_relu",
            elementwise(n * d_out),
            &mut y.s,
            &self.lin.b.w.s,
            &rows,
            &cols
        )?;
        let y = store(gpu, GTensor::new(&[n, d_out], y)?, p)?;
        if p.save {
            self.lin.saved_x = Some(x);
            self.saved_y = Some(y.clone());
        }
        Ok(y)
    }
    fn backward(
        &mut self,
        dy: GTensor,
        need_dx: bool,
        gpu: &Gpu,
        p: Pass,
    ) -> Result<Option<GTensor>> {
        let y = self.saved_y.take().ok_or_else(|| missing("linear_relu"))?;
        let (yf, dyf) = (gpu.widen(&y)?, gpu.widen(&dy)?);
        drop(y);
        let c = self.lin.d_out;
        let rows = dyf.len() / c.max(1);
        let mut dm = out(gpu, dyf.len(), p)?;
        {
            let (gb, _) = self.lin.b.slot(gpu)?;
            let (r, ci) = (rows as u64, c as i32);
            cuda_launch!(
                gpu,
                "relu_mask_channel_sum",
                channel_reduce(rows, c),
                &mut dm.s,
                &mut gb.s,
                dyf.s(),
                yf.s(),
                &r,
                &ci
            )?;
        }
        let dm = GTensor::new(&dyf.shape, dm)?;
        self.lin.backward_with(dm, need_dx, gpu, p, false)
    }
    fn clear_saved(&mut self) {
        self.saved_y = None;
        self.lin.saved_x = None;
    }
    fn visit_params(&mut self, f: &mut dyn FnMut(&mut GParam)) {
        f(&mut self.lin.w);
        f(&mut self.lin.b);
    }
}
