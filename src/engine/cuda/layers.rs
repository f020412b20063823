//! The model's layers on a GPU, built from the CPU model's [`LayerDesc`]s with the CPU
//! model's parameters copied over, so both backends start from identical weights and
//! can be compared step by step. Same contract as the CPU layers: forward keeps what
//! backward needs, backward adds into parameter gradients and returns the input gradient.

use std::collections::VecDeque;
use std::sync::Arc;

use cudarc::driver::CudaSlice;

use crate::cuda_launch;
use crate::engine::cuda::blas::Shape;
use crate::engine::cuda::gpu::{DBuf, GTensor, Gpu};
use crate::engine::cuda::kernels::{channel_reduce, elementwise, per_item};
use crate::engine::device::MemCategory;
use crate::engine::nn::layer::LayerDesc;
use crate::engine::nn::model::{LayerOps, Model, PassCtx};
use crate::error::{Error, Result};

/// A parameter on the GPU; `g == None` is the set-to-none state, as on the CPU.
pub struct GParam {
    pub name: String,
    pub w: DBuf,
    pub g: Option<DBuf>,
    pub decay: bool,
}

impl GParam {
    /// The gradient buffer (zeroed when new) and whether a GEMM must accumulate into it.
    fn slot(&mut self, gpu: &Gpu) -> Result<(&mut DBuf, bool)> {
        let acc = self.g.is_some();
        let g = match &mut self.g {
            Some(g) => g,
            slot @ None => slot.insert(gpu.zeros(self.w.len(), MemCategory::Grads)?),
        };
        Ok((g, acc))
    }
}

/// Per-pass flags, as the CPU backend's `Ctx`.
#[derive(Clone, Copy, Debug)]
pub struct Pass {
    pub train: bool,
    pub save: bool,
    pub recompute: bool,
}

/// The CUDA backend's pass context: the GPU the layers run on and the pass's flags.
#[derive(Clone)]
pub struct GCtx {
    pub gpu: Arc<Gpu>,
    pub pass: Pass,
}

impl PassCtx for GCtx {
    fn saves(&self) -> bool {
        self.pass.save
    }
    fn without_save(&self) -> GCtx {
        GCtx {
            pass: Pass {
                save: false,
                ..self.pass
            },
            gpu: Arc::clone(&self.gpu),
        }
    }
    fn for_recompute(&self) -> GCtx {
        GCtx {
            pass: Pass {
                train: true,
                save: true,
                recompute: true,
            },
            gpu: Arc::clone(&self.gpu),
        }
    }
}

impl LayerOps for GLayer {
    type T = GTensor;
    type Ctx = GCtx;
    type Param = GParam;
    fn name(&self) -> String {
        match self {
            GLayer::Linear(_) => "linear",
            GLayer::Conv(_) => "conv2d",
            GLayer::BatchNorm(_) => "batchnorm2d",
            GLayer::Relu(_) => "relu",
            GLayer::Flatten(_) => "flatten",
            GLayer::GlobalAvgPool(_) => "global_avg_pool",
            GLayer::Block { .. } => "basic_block",
        }
        .into()
    }
    fn forward(&mut self, x: GTensor, ctx: &GCtx) -> Result<GTensor> {
        GLayer::forward(self, x, &ctx.gpu, ctx.pass)
    }
    fn backward(&mut self, dy: GTensor, need_dx: bool, ctx: &GCtx) -> Result<Option<GTensor>> {
        GLayer::backward(self, dy, need_dx, &ctx.gpu)
    }
    fn clear_saved(&mut self) {
        GLayer::clear_saved(self)
    }
    fn visit_params(&mut self, f: &mut dyn FnMut(&mut GParam)) {
        GLayer::visit_params(self, f)
    }
}

fn shape_err(op: &'static str, msg: String) -> Error {
    Error::Shape { op, msg }
}

fn missing(layer: &str) -> Error {
    Error::Runtime(format!(
        "{layer}: backward called without a saved forward (GPU)"
    ))
}

pub struct GLinear {
    d_in: usize,
    d_out: usize,
    w: GParam,
    b: GParam,
    saved_x: Option<GTensor>,
}

pub struct GConv {
    c_in: usize,
    c_out: usize,
    k: usize,
    stride: usize,
    pad: usize,
    w: GParam,
    b: Option<GParam>,
    saved_x: Option<GTensor>,
}

pub struct GBatchNorm {
    c: usize,
    eps: f32,
    momentum: f32,
    gamma: GParam,
    beta: GParam,
    run_mean: DBuf,
    run_var: DBuf,
    saved: Option<(GTensor, DBuf)>,
}

pub enum GLayer {
    Linear(GLinear),
    Conv(GConv),
    BatchNorm(GBatchNorm),
    Relu(Option<GTensor>),
    Flatten(Option<Vec<usize>>),
    GlobalAvgPool(Option<Vec<usize>>),
    Block {
        main: Vec<GLayer>,
        shortcut: Vec<GLayer>,
        out: Box<GLayer>,
    },
}

/// Parameters and buffers of the CPU model in visit order, consumed while building.
struct Source {
    params: VecDeque<(String, Vec<usize>, Vec<f32>, bool)>,
    buffers: VecDeque<(String, Vec<f32>)>,
}

impl Source {
    fn param(&mut self, gpu: &Gpu, want: &str, len: usize) -> Result<GParam> {
        let (name, shape, data, decay) = self.params.pop_front().ok_or_else(|| {
            Error::Runtime(format!("GPU model: ran out of CPU parameters at {want}"))
        })?;
        if name != want || data.len() != len {
            return Err(Error::Runtime(format!(
                "GPU model: expected parameter {want} of {len} values, CPU model has {name} {shape:?}"
            )));
        }
        Ok(GParam {
            name,
            w: gpu.upload(&data, MemCategory::Params)?,
            g: None,
            decay,
        })
    }

    fn buffer(&mut self, gpu: &Gpu, want: &str, len: usize) -> Result<DBuf> {
        let (name, data) = self.buffers.pop_front().ok_or_else(|| {
            Error::Runtime(format!("GPU model: ran out of CPU buffers at {want}"))
        })?;
        if name != want || data.len() != len {
            return Err(Error::Runtime(format!(
                "GPU model: expected buffer {want} of {len} values, CPU model has {name}"
            )));
        }
        gpu.upload(&data, MemCategory::Params)
    }
}

fn build(d: &LayerDesc, gpu: &Gpu, src: &mut Source) -> Result<GLayer> {
    Ok(match d {
        LayerDesc::Linear { d_in, d_out } => GLayer::Linear(GLinear {
            d_in: *d_in,
            d_out: *d_out,
            w: src.param(gpu, "weight", d_in * d_out)?,
            b: src.param(gpu, "bias", *d_out)?,
            saved_x: None,
        }),
        LayerDesc::Conv2d {
            c_in,
            c_out,
            k,
            stride,
            pad,
            bias,
        } => GLayer::Conv(GConv {
            c_in: *c_in,
            c_out: *c_out,
            k: *k,
            stride: *stride,
            pad: *pad,
            w: src.param(gpu, "weight", c_out * k * k * c_in)?,
            b: if *bias {
                Some(src.param(gpu, "bias", *c_out)?)
            } else {
                None
            },
            saved_x: None,
        }),
        LayerDesc::BatchNorm2d { c, eps, momentum } => GLayer::BatchNorm(GBatchNorm {
            c: *c,
            eps: *eps,
            momentum: *momentum,
            gamma: src.param(gpu, "weight", *c)?,
            beta: src.param(gpu, "bias", *c)?,
            run_mean: src.buffer(gpu, "running_mean", *c)?,
            run_var: src.buffer(gpu, "running_var", *c)?,
            saved: None,
        }),
        LayerDesc::Relu => GLayer::Relu(None),
        LayerDesc::Flatten => GLayer::Flatten(None),
        LayerDesc::GlobalAvgPool => GLayer::GlobalAvgPool(None),
        LayerDesc::BasicBlock {
            main,
            shortcut,
            out,
        } => {
            // The CPU block visits main's parameters, then the shortcut's.
            let main = main
                .iter()
                .map(|l| build(l, gpu, src))
                .collect::<Result<Vec<_>>>()?;
            let shortcut = shortcut
                .iter()
                .map(|l| build(l, gpu, src))
                .collect::<Result<Vec<_>>>()?;
            GLayer::Block {
                main,
                shortcut,
                out: Box::new(build(out, gpu, src)?),
            }
        }
        LayerDesc::Other(name) => {
            return Err(Error::Unavailable(format!(
                "CUDA backend: layer {name} has no GPU kernels yet"
            )))
        }
    })
}

/// The GPU copy of `model`: same layers, same parameter values.
pub fn from_cpu(model: &mut Model, gpu: &Gpu) -> Result<Vec<GLayer>> {
    let mut src = Source {
        params: VecDeque::new(),
        buffers: VecDeque::new(),
    };
    let mut bad = None;
    model.visit_params(&mut |p| match p.w.f32() {
        Ok(d) => src
            .params
            .push_back((p.name.clone(), p.w.shape().to_vec(), d.to_vec(), p.decay)),
        Err(e) => bad = Some(e),
    });
    if let Some(e) = bad {
        return Err(e);
    }
    model.visit_buffers(&mut |name, v| src.buffers.push_back((name.to_string(), v.clone())));
    let layers = model
        .layers
        .iter()
        .map(|l| build(&l.describe(), gpu, &mut src))
        .collect::<Result<Vec<_>>>()?;
    if !src.params.is_empty() || !src.buffers.is_empty() {
        return Err(Error::Runtime(format!(
            "GPU model: {} parameters and {} buffers of the CPU model were not used",
            src.params.len(),
            src.buffers.len()
        )));
    }
    Ok(layers)
}

fn act(gpu: &Gpu, n: usize) -> Result<DBuf> {
    gpu.alloc(n, MemCategory::Activations)
}

impl GLinear {
    fn forward(&mut self, x: GTensor, gpu: &Gpu, p: Pass) -> Result<GTensor> {
        let n = x.shape.first().copied().unwrap_or(0);
        if n == 0 || x.len() != n * self.d_in {
            return Err(shape_err(
                "linear",
                format!("input {:?} is not [n, {}]", x.shape, self.d_in),
            ));
        }
        let mut y = act(gpu, n * self.d_out)?;
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
        };
        gpu.gemm(&s, x.s(), &self.w.w.s, &mut y.s)?;
        if p.save {
            self.saved_x = Some(x);
        }
        GTensor::new(&[n, self.d_out], y)
    }

    fn backward(&mut self, dy: GTensor, need_dx: bool, gpu: &Gpu) -> Result<Option<GTensor>> {
        let x = self.saved_x.take().ok_or_else(|| missing("linear"))?;
        let n = x.shape[0];
        {
            let (gw, acc) = self.w.slot(gpu)?;
            let s = Shape {
                m: self.d_out,
                n: self.d_in,
                k: n,
                ta: true,
                tb: false,
                accumulate: acc,
            };
            gpu.gemm(&s, dy.s(), x.s(), &mut gw.s)?;
        }
        let (gb, _) = self.b.slot(gpu)?;
        gpu.channel_sum(&mut gb.s, dy.s(), self.d_out)?;
        if !need_dx {
            return Ok(None);
        }
        let mut dx = act(gpu, n * self.d_in)?;
        let s = Shape {
            m: n,
            n: self.d_in,
            k: self.d_out,
            ta: false,
            tb: false,
            accumulate: false,
        };
        gpu.gemm(&s, dy.s(), &self.w.w.s, &mut dx.s)?;
        Ok(Some(GTensor::new(&x.shape, dx)?))
    }
}

/// NHWC geometry: (n, h, w, oh, ow).
fn conv_geom(c: &GConv, x: &GTensor) -> Result<(usize, usize, usize, usize, usize)> {
    match *x.shape.as_slice() {
        [n, h, w, ci] if ci == c.c_in && h + 2 * c.pad >= c.k && w + 2 * c.pad >= c.k => {
            let oh = (h + 2 * c.pad - c.k) / c.stride + 1;
            let ow = (w + 2 * c.pad - c.k) / c.stride + 1;
            Ok((n, h, w, oh, ow))
        }
        _ => Err(shape_err(
            "conv2d",
            format!("input {:?} is not NHWC with {} channels", x.shape, c.c_in),
        )),
    }
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
    fn pointwise(&self) -> bool {
        self.k == 1 && self.stride == 1 && self.pad == 0
    }

    /// The im2col matrix of `x` (rows = output pixels, columns = ky, kx, c).
    fn columns(&self, x: &GTensor, gpu: &Gpu) -> Result<DBuf> {
        let (n, h, w, oh, ow) = conv_geom(self, x)?;
        let kkc = self.k * self.k * self.c_in;
        let mut col = gpu.alloc(n * oh * ow * kkc, MemCategory::Workspace)?;
        let a = [n, h, w, self.c_in, self.k, self.stride, self.pad, oh, ow].map(|v| v as i32);
        conv_index(gpu, "im2col", &mut col, x.s(), a)?;
        Ok(col)
    }

    fn forward(&mut self, x: GTensor, gpu: &Gpu, p: Pass) -> Result<GTensor> {
        let (n, _, _, oh, ow) = conv_geom(self, &x)?;
        let rows = n * oh * ow;
        let kkc = self.k * self.k * self.c_in;
        let mut y = act(gpu, rows * self.c_out)?;
        if let Some(b) = &self.b {
            let (r, c) = (rows as u64, self.c_out as i32);
            cuda_launch!(
                gpu,
                "fill_rows",
                elementwise(y.len()),
                &mut y.s,
                &b.w.s,
                &r,
                &c
            )?;
        }
        let s = Shape {
            m: rows,
            n: self.c_out,
            k: kkc,
            ta: false,
            tb: true,
            accumulate: self.b.is_some(),
        };
        if self.pointwise() {
            gpu.gemm(&s, x.s(), &self.w.w.s, &mut y.s)?;
        } else {
            let col = self.columns(&x, gpu)?;
            gpu.gemm(&s, &col.s, &self.w.w.s, &mut y.s)?;
        }
        if p.save {
            self.saved_x = Some(x);
        }
        GTensor::new(&[n, oh, ow, self.c_out], y)
    }

    fn backward(&mut self, dy: GTensor, need_dx: bool, gpu: &Gpu) -> Result<Option<GTensor>> {
        let x = self.saved_x.take().ok_or_else(|| missing("conv2d"))?;
        let (n, h, w, oh, ow) = conv_geom(self, &x)?;
        let rows = n * oh * ow;
        let kkc = self.k * self.k * self.c_in;
        if let Some(b) = &mut self.b {
            let (gb, _) = b.slot(gpu)?;
            gpu.channel_sum(&mut gb.s, dy.s(), self.c_out)?;
        }
        let col = if self.pointwise() {
            None
        } else {
            Some(self.columns(&x, gpu)?)
        };
        {
            let (gw, acc) = self.w.slot(gpu)?;
            let s = Shape {
                m: self.c_out,
                n: kkc,
                k: rows,
                ta: true,
                tb: false,
                accumulate: acc,
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
        };
        let mut dcol = gpu.alloc(rows * kkc, MemCategory::Workspace)?;
        gpu.gemm(&s, dy.s(), &self.w.w.s, &mut dcol.s)?;
        if self.pointwise() {
            return Ok(Some(GTensor::new(&x.shape, dcol)?));
        }
        let mut dx = act(gpu, x.len())?;
        let a = [n, h, w, self.c_in, self.k, self.stride, self.pad, oh, ow].map(|v| v as i32);
        conv_index(gpu, "col2im", &mut dx, &dcol.s, a)?;
        Ok(Some(GTensor::new(&x.shape, dx)?))
    }
}

impl GBatchNorm {
    fn forward(&mut self, x: GTensor, gpu: &Gpu, p: Pass) -> Result<GTensor> {
        let c = self.c;
        if x.shape.last() != Some(&c) || x.is_empty() {
            return Err(shape_err(
                "batchnorm",
                format!("input {:?} does not end in {c} channels", x.shape),
            ));
        }
        let rows = x.len() / c;
        let (n, ci) = (x.len() as u64, c as i32);
        let mut invstd = gpu.alloc(c, MemCategory::Workspace)?;
        let mut y = act(gpu, x.len())?;
        if !p.train {
            cuda_launch!(
                gpu,
                "bn_invstd",
                per_item(c),
                &mut invstd.s,
                &self.run_var.s,
                &ci,
                &self.eps
            )?;
            let null = 0u64;
            cuda_launch!(
                gpu,
                "bn_forward",
                elementwise(x.len()),
                &mut y.s,
                &null,
                x.s(),
                &self.run_mean.s,
                &invstd.s,
                &self.gamma.w.s,
                &self.beta.w.s,
                &n,
                &ci
            )?;
            return GTensor::new(&x.shape, y);
        }
        let mut mean = gpu.zeros(c, MemCategory::Workspace)?;
        let mut var = gpu.zeros(c, MemCategory::Workspace)?;
        gpu.channel_sum(&mut mean.s, x.s(), c)?;
        let (inv_m, cn) = (1.0 / rows as f32, c as u64);
        cuda_launch!(gpu, "scale", elementwise(c), &mut mean.s, &inv_m, &cn)?;
        let r = rows as u64;
        cuda_launch!(
            gpu,
            "channel_sqdev",
            channel_reduce(rows, c),
            &mut var.s,
            x.s(),
            &mean.s,
            &r,
            &ci
        )?;
        let update = i32::from(!p.recompute);
        let m = rows as f32;
        cuda_launch!(
            gpu,
            "bn_finish",
            per_item(c),
            &mut mean.s,
            &mut var.s,
            &mut invstd.s,
            &mut self.run_mean.s,
            &mut self.run_var.s,
            &ci,
            &m,
            &self.eps,
            &self.momentum,
            &update
        )?;
        let save = p.save;
        let mut xhat = if save { Some(act(gpu, x.len())?) } else { None };
        let null = 0u64;
        {
            use cudarc::driver::PushKernelArg;
            let f = gpu.kernels.get("bn_forward")?;
            let mut b = gpu.stream.launch_builder(f);
            b.arg(&mut y.s);
            match &mut xhat {
                Some(h) => b.arg(&mut h.s),
                None => b.arg(&null),
            };
            b.arg(x.s())
                .arg(&mean.s)
                .arg(&invstd.s)
                .arg(&self.gamma.w.s)
                .arg(&self.beta.w.s)
                .arg(&n)
                .arg(&ci);
            // SAFETY: bn_forward(y, xhat|null, x, mean, invstd, gamma, beta, n, c): the
            // arguments above in that order; every buffer holds n or c floats.
            unsafe { b.launch(elementwise(x.len())) }
                .map_err(|e| crate::engine::cuda::gpu::cuda_err("kernel bn_forward", e))?;
        }
        if let Some(h) = xhat {
            self.saved = Some((GTensor::new(&x.shape, h)?, invstd));
        }
        GTensor::new(&x.shape, y)
    }

    fn backward(&mut self, dy: GTensor, need_dx: bool, gpu: &Gpu) -> Result<Option<GTensor>> {
        let (xhat, invstd) = self.saved.take().ok_or_else(|| missing("batchnorm"))?;
        let c = self.c;
        let rows = xhat.len() / c;
        let (r, ci) = (rows as u64, c as i32);
        let mut dbeta = gpu.zeros(c, MemCategory::Workspace)?;
        let mut dgamma = gpu.zeros(c, MemCategory::Workspace)?;
        gpu.channel_sum(&mut dbeta.s, dy.s(), c)?;
        cuda_launch!(
            gpu,
            "channel_dot",
            channel_reduce(rows, c),
            &mut dgamma.s,
            dy.s(),
            xhat.s(),
            &r,
            &ci
        )?;
        {
            let (gg, _) = self.gamma.slot(gpu)?;
            gpu.axpy(&mut gg.s, &dgamma.s, 1.0)?;
        }
        {
            let (gb, _) = self.beta.slot(gpu)?;
            gpu.axpy(&mut gb.s, &dbeta.s, 1.0)?;
        }
        if !need_dx {
            return Ok(None);
        }
        let mut dx = act(gpu, xhat.len())?;
        let (inv_m, n) = (1.0 / rows as f32, xhat.len() as u64);
        cuda_launch!(
            gpu,
            "bn_backward_dx",
            elementwise(xhat.len()),
            &mut dx.s,
            dy.s(),
            xhat.s(),
            &self.gamma.w.s,
            &invstd.s,
            &dbeta.s,
            &dgamma.s,
            &inv_m,
            &n,
            &ci
        )?;
        Ok(Some(GTensor::new(&xhat.shape, dx)?))
    }
}

impl GLayer {
    pub fn forward(&mut self, x: GTensor, gpu: &Gpu, p: Pass) -> Result<GTensor> {
        match self {
            GLayer::Linear(l) => l.forward(x, gpu, p),
            GLayer::Conv(l) => l.forward(x, gpu, p),
            GLayer::BatchNorm(l) => l.forward(x, gpu, p),
            GLayer::Relu(saved) => {
                let mut y = act(gpu, x.len())?;
                let n = x.len() as u64;
                cuda_launch!(
                    gpu,
                    "relu_forward",
                    elementwise(x.len()),
                    &mut y.s,
                    x.s(),
                    &n
                )?;
                let y = GTensor::new(&x.shape, y)?;
                if p.save {
                    *saved = Some(y.clone());
                }
                Ok(y)
            }
            GLayer::Flatten(saved) => {
                let n = x.shape.first().copied().unwrap_or(0);
                let rest = x.len().checked_div(n).unwrap_or(0);
                if p.save {
                    *saved = Some(x.shape.clone());
                }
                x.reshape(&[n, rest])
            }
            GLayer::GlobalAvgPool(saved) => {
                let [n, h, w, c] = match *x.shape.as_slice() {
                    [n, h, w, c] => [n, h, w, c],
                    _ => return Err(shape_err("global_avg_pool", format!("{:?}", x.shape))),
                };
                let mut y = act(gpu, n * c)?;
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
                if p.save {
                    *saved = Some(x.shape.clone());
                }
                GTensor::new(&[n, c], y)
            }
            GLayer::Block {
                main,
                shortcut,
                out,
            } => {
                let mut sc = x.clone();
                for l in shortcut.iter_mut() {
                    sc = l.forward(sc, gpu, p)?;
                }
                let mut h = x;
                for l in main.iter_mut() {
                    h = l.forward(h, gpu, p)?;
                }
                let shape = h.shape.clone();
                let mut sum = h.into_unique(gpu)?;
                gpu.axpy(&mut sum.s, sc.s(), 1.0)?;
                drop(sc);
                out.forward(GTensor::new(&shape, sum)?, gpu, p)
            }
        }
    }

    pub fn backward(&mut self, dy: GTensor, need_dx: bool, gpu: &Gpu) -> Result<Option<GTensor>> {
        match self {
            GLayer::Linear(l) => l.backward(dy, need_dx, gpu),
            GLayer::Conv(l) => l.backward(dy, need_dx, gpu),
            GLayer::BatchNorm(l) => l.backward(dy, need_dx, gpu),
            GLayer::Relu(saved) => {
                let y = saved.take().ok_or_else(|| missing("relu"))?;
                let mut dx = act(gpu, y.len())?;
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
                Ok(Some(GTensor::new(&y.shape, dx)?))
            }
            GLayer::Flatten(saved) => {
                let shape = saved.take().ok_or_else(|| missing("flatten"))?;
                Ok(Some(dy.reshape(&shape)?))
            }
            GLayer::GlobalAvgPool(saved) => {
                let shape = saved.take().ok_or_else(|| missing("global_avg_pool"))?;
                let [n, h, w, c] = [shape[0], shape[1], shape[2], shape[3]];
                let mut dx = act(gpu, n * h * w * c)?;
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
                Ok(Some(GTensor::new(&shape, dx)?))
            }
            GLayer::Block {
                main,
                shortcut,
                out,
            } => {
                let d = out
                    .backward(dy, true, gpu)?
                    .ok_or_else(|| Error::Runtime("basic_block: relu gave no gradient".into()))?;
                let mut dmain = Some(d.clone());
                for (i, l) in main.iter_mut().enumerate().rev() {
                    let g = dmain.take().ok_or_else(|| missing("basic_block"))?;
                    dmain = l.backward(g, need_dx || i > 0, gpu)?;
                }
                let mut dsc = Some(d);
                for l in shortcut.iter_mut().rev() {
                    let g = dsc.take().ok_or_else(|| missing("basic_block"))?;
                    dsc = l.backward(g, need_dx, gpu)?;
                }
                if !need_dx {
                    return Ok(None);
                }
                match (dmain, dsc) {
                    (Some(a), Some(b)) => {
                        let shape = a.shape.clone();
                        let mut s = a.into_unique(gpu)?;
                        gpu.axpy(&mut s.s, b.s(), 1.0)?;
                        Ok(Some(GTensor::new(&shape, s)?))
                    }
                    _ => Err(Error::Runtime("basic_block: missing input gradient".into())),
                }
            }
        }
    }

    pub fn clear_saved(&mut self) {
        match self {
            GLayer::Linear(l) => l.saved_x = None,
            GLayer::Conv(l) => l.saved_x = None,
            GLayer::BatchNorm(l) => l.saved = None,
            GLayer::Relu(s) => *s = None,
            GLayer::Flatten(s) | GLayer::GlobalAvgPool(s) => *s = None,
            GLayer::Block {
                main,
                shortcut,
                out,
            } => {
                for l in main.iter_mut().chain(shortcut.iter_mut()) {
                    l.clear_saved();
                }
                out.clear_saved();
            }
        }
    }

    /// Parameters in the CPU model's visit order.
    pub fn visit_params(&mut self, f: &mut dyn FnMut(&mut GParam)) {
        match self {
            GLayer::Linear(l) => {
                f(&mut l.w);
                f(&mut l.b);
            }
            GLayer::Conv(l) => {
                f(&mut l.w);
                if let Some(b) = &mut l.b {
                    f(b);
                }
            }
            GLayer::BatchNorm(l) => {
                f(&mut l.gamma);
                f(&mut l.beta);
            }
            GLayer::Block { main, shortcut, .. } => {
                for l in main.iter_mut().chain(shortcut.iter_mut()) {
                    l.visit_params(f);
                }
            }
            GLayer::Relu(_) | GLayer::Flatten(_) | GLayer::GlobalAvgPool(_) => {}
        }
    }

    pub fn has_params(&mut self) -> bool {
        let mut has = false;
        self.visit_params(&mut |_| has = true);
        has
    }
}
