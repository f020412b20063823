//! Linear on the CUDA backend, beside the CPU op in `linear.rs`: bias broadcast by
//! `fill_rows`, then cuBLASLt GEMMs that accumulate onto it (forward) or into the
//! gradient slots (backward). Under AMP the GEMM operands (input, a half copy of the
//! weights, the output gradient) are bf16/fp16 and the results f32, narrowed on the way
//! out; the bias gradient is summed from the widened output gradient.

use crate::cuda_launch;
use crate::engine::cuda::blas::Shape;
use crate::engine::cuda::gpu::{GTensor, Gpu};
use crate::engine::cuda::kernels::elementwise;
use crate::engine::ops::layer_cuda::{
    half_weights, missing, operand, out, shape_err, store, GParam, GpuLayer, Pass,
};
use crate::error::Result;

pub struct GLinear {
    pub(crate) d_in: usize,
    pub(crate) d_out: usize,
    pub(crate) w: GParam,
    pub(crate) b: GParam,
    pub(crate) saved_x: Option<GTensor>,
}

impl GpuLayer for GLinear {
    fn name(&self) -> &'static str {
        "linear"
    }
    fn forward(&mut self, x: GTensor, gpu: &Gpu, p: Pass) -> Result<GTensor> {
        let n = x.shape.first().copied().unwrap_or(0);
        if n == 0 || x.len() != n * self.d_in {
            return Err(shape_err(
                "linear",
                format!("input {:?} is not [n, {}]", x.shape, self.d_in),
            ));
        }
        let x = operand(gpu, &x, p)?;
        let wh = half_weights(gpu, &self.w, p)?;
        let mut y = out(gpu, n * self.d_out, p)?;
        let (rows, cols) = (n as u64, self.d_out as i32);
        cuda_launch!(
            gpu,
            "fill_rows",
            elementwise(n * self.d_out),
            &mut y.s,
            &self.b.w.s,
            &rows,
            &cols
        )?;
        let s = Shape {
            m: n,
            n: self.d_out,
            k: self.d_in,
            ta: false,
            tb: true,
            accumulate: true,
            dt: p.gemm_dt(),
        };
        gpu.gemm(
            &s,
            x.s(),
            wh.as_ref().map_or(&self.w.w.s, |h| &h.s),
            &mut y.s,
        )?;
        if p.save {
            self.saved_x = Some(x);
        }
        store(gpu, GTensor::new(&[n, self.d_out], y)?, p)
    }
    fn backward(
        &mut self,
        dy: GTensor,
        need_dx: bool,
        gpu: &Gpu,
        p: Pass,
    ) -> Result<Option<GTensor>> {
        self.backward_with(dy, need_dx, gpu, p, true)
    }
    fn clear_saved(&mut self) {
        self.saved_x = None;
    }
    fn visit_params(&mut self, f: &mut dyn FnMut(&mut GParam)) {
        f(&mut self.w);
        f(&mut self.b);
    }
}

impl GLinear {
    /// Backward; without `bias_grad` the caller has summed the bias gradient already (the
    /// fused bias+ReLU layer, in its mask kernel: ops/fused_cuda.rs).
    pub(crate) fn backward_with(
        &mut self,
        dy: GTensor,
        need_dx: bool,
        gpu: &Gpu,
        p: Pass,
        bias_grad: bool,
    ) -> Result<Option<GTensor>> {
        let x = self.saved_x.take().ok_or_else(|| missing("linear"))?;
        let n = x.shape[0];
        let dyf = if bias_grad {
            Some(gpu.widen(&dy)?)
        } else {
            None
        };
        let dy = operand(gpu, &dy, p)?;
        {
            let (gw, acc) = self.w.write_slot(gpu)?;
            let s = Shape {
                m: self.d_out,
                n: self.d_in,
                k: n,
                ta: true,
                tb: false,
                accumulate: acc,
                dt: p.gemm_dt(),
            };
            gpu.gemm(&s, dy.s(), x.s(), &mut gw.s)?;
        }
        if let Some(dyf) = dyf {
            let (gb, _) = self.b.slot(gpu)?;
            gpu.channel_sum(&mut gb.s, dyf.s(), self.d_out)?;
        }
        if !need_dx {
            return Ok(None);
        }
        let wh = half_weights(gpu, &self.w, p)?;
        let mut dx = out(gpu, n * self.d_in, p)?;
        let s = Shape {
            m: n,
            n: self.d_in,
            k: self.d_out,
            ta: false,
            tb: false,
            accumulate: false,
            dt: p.gemm_dt(),
        };
        gpu.gemm(
            &s,
            dy.s(),
            wh.as_ref().map_or(&self.w.w.s, |h| &h.s),
            &mut dx.s,
        )?;
        store(gpu, GTensor::new(&x.shape, dx)?, p).map(Some)
    }
}
