//! Conv2d on the CUDA backend, beside the CPU op in `conv2d.rs`. Where cuDNN loads, its
//! three convolutions (`cuda::dnn`); under AMP they take and give the half type with f32
//! compute (cuDNN's pseudo-half configurations), as PyTorch's autocast runs cuDNN, and
//! the weight gradient is computed in the half type and added to the f32 gradient.
//! Elsewhere (or with `TUNE_CUDNN=0`): im2col (skipped for pointwise convolutions) and
//! cuBLASLt GEMMs, col2im for the input gradient. Under AMP the patch matrix is gathered
//! in f32 from the widened input and stored in the half type (its values are already on
//! the half grid, so nothing rounds), and the GEMMs take half operands with f32 results,
//! as linear does.

use cudarc::driver::CudaSlice;

use crate::cuda_launch;
use crate::engine::cuda::blas::Shape;
use crate::engine::cuda::dnn::{ConvKey, Dir, Dnn};
use crate::engine::cuda::gpu::words;
use crate::engine::cuda::gpu::{DBuf, GTensor, Gpu};
use crate::engine::cuda::kernels::elementwise;
use crate::engine::device::MemCategory;
use crate::engine::geom::ConvGeom;
use crate::engine::ops::layer_cuda::{
    half_weights, missing, operand, out, shape_err, store, GParam, GpuLayer, Pass,
};
use crate::engine::tensor::DType;
use crate::error::Result;

pub struct GConv {
    pub(crate) c_in: usize,
    pub(crate) c_out: usize,
    pub(crate) k: usize,
    pub(crate) stride: usize,
    pub(crate) pad: usize,
    pub(crate) w: GParam,
    pub(crate) b: Option<GParam>,
    pub(crate) saved_x: Option<GTensor>,
}

/// The layer's geometry on NHWC input `x`.
fn conv_geom(c: &GConv, x: &GTensor) -> Result<ConvGeom> {
    match *x.shape.as_slice() {
        [n, h, w, ci] if ci == c.c_in && h + 2 * c.pad >= c.k && w + 2 * c.pad >= c.k => {
            Ok(ConvGeom {
                n,
                h,
                w,
                c_in: c.c_in,
                c_out: c.c_out,
                k: c.k,
                stride: c.stride,
                pad: c.pad,
            })
        }
        _ => Err(shape_err(
            "conv2d",
            format!("input {:?} is not NHWC with {} channels", x.shape, c.c_in),
        )),
    }
}

/// The im2col and col2im kernels' geometry arguments.
fn index_args(g: &ConvGeom) -> [i32; 9] {
    [g.n, g.h, g.w, g.c_in, g.k, g.stride, g.pad, g.oh(), g.ow()].map(|v| v as i32)
}

/// im2col or col2im (same geometry arguments): `dst` from `src`, one thread per `dst`
/// element.
fn conv_index(
    gpu: &Gpu,
    kernel: &str,
    dst: &mut DBuf,
    src: &CudaSlice<f32>,
    a: [i32; 9],
) -> Result<()> {
    cuda_launch!(
        gpu,
        kernel,
        elementwise(dst.len()),
        &mut dst.s,
        src,
        &a[0],
        &a[1],
        &a[2],
        &a[3],
        &a[4],
        &a[5],
        &a[6],
        &a[7],
        &a[8]
    )
}

impl GConv {
    /// `y` = the bias in every row, when the layer has one (a GEMM or convolution then
    /// adds onto it).
    fn fill_bias(&self, gpu: &Gpu, y: &mut DBuf, rows: usize) -> Result<()> {
        let Some(b) = &self.b else { return Ok(()) };
        let (r, c) = (rows as u64, self.c_out as i32);
        cuda_launch!(
            gpu,
            "fill_rows",
            elementwise(y.len()),
            &mut y.s,
            &b.w.s,
            &r,
            &c
        )
    }

    fn key(&self, x: &GTensor, dt: DType) -> Result<ConvKey> {
        Ok(ConvKey {
            g: conv_geom(self, x)?,
            dt,
        })
    }

    /// cuDNN and this layer's shape key, where cuDNN loads and runs the shape.
    fn dnn<'g>(&self, gpu: &'g Gpu, x: &GTensor, p: Pass) -> Result<Option<(&'g Dnn, ConvKey)>> {
        let Ok(d) = &gpu.dnn else { return Ok(None) };
        let key = self.key(x, p.gemm_dt())?;
        Ok(d.runs(&key).then_some((d, key)))
    }

    fn forward_dnn(
        &mut self,
        x: GTensor,
        gpu: &Gpu,
        d: &Dnn,
        key: ConvKey,
        p: Pass,
    ) -> Result<GTensor> {
        let g = key.g;
        let rows = g.rows();
        let shape = [g.n, g.oh(), g.ow(), self.c_out];
        let x = operand(gpu, &x, p)?;
        let wh = half_weights(gpu, &self.w, p)?;
        let wbuf = wh.as_ref().map_or(&self.w.w.s, |h| &h.s);
        let y = match p.half {
            None => {
                let mut y = out(gpu, rows * self.c_out, p)?;
                self.fill_bias(gpu, &mut y, rows)?;
                let beta = if self.b.is_some() { 1.0 } else { 0.0 };
                d.run(&gpu.mem, &key, Dir::Forward, x.s(), wbuf, &mut y.s, beta)?;
                GTensor::new(&shape, y)?
            }
            Some(dt) => {
                let mut y = gpu.alloc(words(rows * self.c_out, dt), MemCategory::Activations)?;
                d.run(&gpu.mem, &key, Dir::Forward, x.s(), wbuf, &mut y.s, 0.0)?;
                let y = GTensor::of(&shape, y, dt)?;
                if self.b.is_some() {
                    // cuDNN's half output cannot take an f32 bias: add it in f32 and round
                    // again (no model of the zoo has a conv bias).
                    let mut y32 = gpu.widen(&y)?.into_unique(gpu)?;
                    let mut bias = gpu.alloc(rows * self.c_out, MemCategory::Workspace)?;
                    self.fill_bias(gpu, &mut bias, rows)?;
                    gpu.axpy(&mut y32.s, &bias.s, 1.0)?;
                    store(gpu, GTensor::new(&shape, y32)?, p)?
                } else {
                    y
                }
            }
        };
        if p.save {
            self.saved_x = Some(x);
        }
        Ok(y)
    }

    fn backward_dnn(
        &mut self,
        dy: GTensor,
        need_dx: bool,
        gpu: &Gpu,
        (d, key): (&Dnn, ConvKey),
        p: Pass,
    ) -> Result<Option<GTensor>> {
        let x = self.saved_x.take().ok_or_else(|| missing("conv2d"))?;
        if let Some(b) = &mut self.b {
            let (gb, _) = b.slot(gpu)?;
            gpu.channel_sum(&mut gb.s, gpu.widen(&dy)?.s(), self.c_out)?;
        }
        let dy = operand(gpu, &dy, p)?;
        {
            let (gw, acc) = self.w.write_slot(gpu)?;
            let filter = Dir::BackwardFilter;
            match p.half {
                None => {
                    let beta = if acc { 1.0 } else { 0.0 };
                    d.run(&gpu.mem, &key, filter, x.s(), dy.s(), &mut gw.s, beta)?;
                }
                Some(dt) => {
                    let n = gw.len();
                    let mut h = gpu.alloc(words(n, dt), MemCategory::Workspace)?;
                    d.run(&gpu.mem, &key, filter, x.s(), dy.s(), &mut h.s, 0.0)?;
                    let g32 = gpu.widen(&GTensor::of(&[n], h, dt)?)?;
                    if acc {
                        gpu.axpy(&mut gw.s, g32.s(), 1.0)?;
                    } else {
                        gpu.stream
                            .memcpy_dtod(g32.s(), &mut gw.s)
                            .map_err(|e| crate::engine::cuda::gpu::cuda_err("device copy", e))?;
                    }
                }
            }
        }
        if !need_dx {
            return Ok(None);
        }
        let wh = half_weights(gpu, &self.w, p)?;
        let wbuf = wh.as_ref().map_or(&self.w.w.s, |h| &h.s);
        let data = Dir::BackwardData;
        let dx = match p.half {
            None => {
                let mut dx = out(gpu, x.len(), p)?;
                d.run(&gpu.mem, &key, data, wbuf, dy.s(), &mut dx.s, 0.0)?;
                GTensor::new(&x.shape, dx)?
            }
            Some(dt) => {
                let mut dx = gpu.alloc(words(x.len(), dt), MemCategory::Activations)?;
                d.run(&gpu.mem, &key, data, wbuf, dy.s(), &mut dx.s, 0.0)?;
                GTensor::of(&x.shape, dx, dt)?
            }
        };
        Ok(Some(dx))
    }

    fn pointwise(&self) -> bool {
        self.k == 1 && self.stride == 1 && self.pad == 0
    }

    /// The im2col matrix of `x` (rows = output pixels, columns = ky, kx, c), in the
    /// pass's GEMM operand type.
    fn columns(x: &GTensor, g: &ConvGeom, gpu: &Gpu, p: Pass) -> Result<DBuf> {
        let len = g.rows() * g.kkc();
        let mut col = gpu.alloc(len, MemCategory::Workspace)?;
        conv_index(gpu, "im2col", &mut col, gpu.widen(x)?.s(), index_args(g))?;
        let Some(dt) = p.half else { return Ok(col) };
        let mut half = gpu.alloc(words(len, dt), MemCategory::Workspace)?;
        gpu.narrow_into(&mut half.s, &col.s, len, dt)?;
        Ok(half)
    }
}

impl GpuLayer for GConv {
    fn name(&self) -> &'static str {
        "conv2d"
    }
    fn forward(&mut self, x: GTensor, gpu: &Gpu, p: Pass) -> Result<GTensor> {
        if let Some((d, key)) = self.dnn(gpu, &x, p)? {
            return self.forward_dnn(x, gpu, d, key, p);
        }
        let g = conv_geom(self, &x)?;
        let (rows, kkc) = (g.rows(), g.kkc());
        let x = operand(gpu, &x, p)?;
        let wh = half_weights(gpu, &self.w, p)?;
        let wbuf = wh.as_ref().map_or(&self.w.w.s, |h| &h.s);
        let mut y = out(gpu, rows * self.c_out, p)?;
        self.fill_bias(gpu, &mut y, rows)?;
        let s = Shape {
            m: rows,
            n: self.c_out,
            k: kkc,
            ta: false,
            tb: true,
            accumulate: self.b.is_some(),
            dt: p.gemm_dt(),
        };
        if self.pointwise() {
            gpu.gemm(&s, x.s(), wbuf, &mut y.s)?;
        } else {
            let col = Self::columns(&x, &g, gpu, p)?;
            gpu.gemm(&s, &col.s, wbuf, &mut y.s)?;
        }
        if p.save {
            self.saved_x = Some(x);
        }
        store(gpu, GTensor::new(&[g.n, g.oh(), g.ow(), self.c_out], y)?, p)
    }
    fn backward(
        &mut self,
        dy: GTensor,
        need_dx: bool,
        gpu: &Gpu,
        p: Pass,
    ) -> Result<Option<GTensor>> {
        let saved = self.saved_x.as_ref().ok_or_else(|| missing("conv2d"))?;
        if let Some((d, key)) = self.dnn(gpu, saved, p)? {
            return self.backward_dnn(dy, need_dx, gpu, (d, key), p);
        }
        let x = self.saved_x.take().ok_or_else(|| missing("conv2d"))?;
        let g = conv_geom(self, &x)?;
        let (rows, kkc) = (g.rows(), g.kkc());
        if let Some(b) = &mut self.b {
            let (gb, _) = b.slot(gpu)?;
            gpu.channel_sum(&mut gb.s, gpu.widen(&dy)?.s(), self.c_out)?;
        }
        let dy = operand(gpu, &dy, p)?;
        let col = if self.pointwise() {
            None
        } else {
            Some(Self::columns(&x, &g, gpu, p)?)
        };
        {
            let (gw, acc) = self.w.write_slot(gpu)?;
            let s = Shape {
                m: self.c_out,
                n: kkc,
                k: rows,
                ta: true,
                tb: false,
                accumulate: acc,
                dt: p.gemm_dt(),
            };
            let a = col.as_ref().map_or(x.s(), |c| &c.s);
            gpu.gemm(&s, dy.s(), a, &mut gw.s)?;
        }
        drop(col);
        if !need_dx {
            return Ok(None);
        }
        let s = Shape {
            m: rows,
            n: kkc,
            k: self.c_out,
            ta: false,
            tb: false,
            accumulate: false,
            dt: p.gemm_dt(),
        };
        let wh = half_weights(gpu, &self.w, p)?;
        let wbuf = wh.as_ref().map_or(&self.w.w.s, |h| &h.s);
        if self.pointwise() {
            let mut dx = out(gpu, rows * kkc, p)?;
            gpu.gemm(&s, dy.s(), wbuf, &mut dx.s)?;
            return store(gpu, GTensor::new(&x.shape, dx)?, p).map(Some);
        }
        let mut dcol = gpu.alloc(rows * kkc, MemCategory::Workspace)?;
        gpu.gemm(&s, dy.s(), wbuf, &mut dcol.s)?;
        drop(wh);
        let mut dx = out(gpu, x.len(), p)?;
        conv_index(gpu, "col2im", &mut dx, &dcol.s, index_args(&g))?;
        store(gpu, GTensor::new(&x.shape, dx)?, p).map(Some)
    }
    fn clear_saved(&mut self) {
        self.saved_x = None;
    }
    fn visit_params(&mut self, f: &mut dyn FnMut(&mut GParam)) {
        f(&mut self.w);
        if let Some(b) = &mut self.b {
            f(b);
        }
    }
}
