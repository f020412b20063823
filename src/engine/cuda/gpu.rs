//! One GPU: its context, a compute stream and a copy stream, the kernels, cuBLASLt, cuDNN
//! where it loads, and buffers charged to the engine's memory tracker like every CPU
//! buffer.

use std::path::Path;
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaSlice, CudaStream, LaunchConfig};

use crate::engine::cuda::blas::{Blas, Shape};
use crate::engine::cuda::dnn::Dnn;
pub use crate::engine::cuda::err::{cuda_err, nccl_err};
use crate::engine::cuda::kernels::{self, Kernels};
use crate::engine::cuda::libs;
use crate::engine::device::{MemCategory, MemTracker};
pub use crate::engine::tensor::words;
use crate::engine::tensor::DType;
use crate::error::{Error, Result};

/// A device buffer of f32, charged to a memory category until dropped.
#[derive(Debug)]
pub struct DBuf {
    pub s: CudaSlice<f32>,
    cat: MemCategory,
    mem: Arc<MemTracker>,
}

impl DBuf {
    pub fn len(&self) -> usize {
        self.s.len()
    }
    pub fn is_empty(&self) -> bool {
        self.s.is_empty()
    }
}

impl Drop for DBuf {
    fn drop(&mut self) {
        self.mem.free(self.cat, self.s.len() * 4);
    }
}

/// A device tensor: a shape over a shared buffer (shared so a layer can keep its input
/// or output for backward while passing it on; kernels only write unshared buffers).
///
/// Under AMP a tensor may be stored in bf16 or fp16 (`dt`): its buffer then holds two
/// 16-bit values per 32-bit word, so it costs 2 bytes per element, and `s()` is that
/// packed storage (for kernels taking `unsigned short*` and half GEMM operands). An f32
/// kernel handed a half tensor would read past the buffer's end, which the CPU
/// stand-in's guard pages turn into a fault.
#[derive(Clone, Debug)]
pub struct GTensor {
    pub shape: Vec<usize>,
    pub buf: Arc<DBuf>,
    pub dt: DType,
}

impl GTensor {
    pub fn new(shape: &[usize], buf: DBuf) -> Result<GTensor> {
        GTensor::of(shape, buf, DType::F32)
    }
    /// A tensor of `dt` elements over `buf` (packed two to a word for half types).
    pub fn of(shape: &[usize], buf: DBuf, dt: DType) -> Result<GTensor> {
        let n: usize = shape.iter().product();
        if words(n, dt).max(1) != buf.len().max(1) || dt == DType::U32 {
            return Err(Error::Shape {
                op: "gpu tensor",
                msg: format!("{dt:?} shape {shape:?} over {} words", buf.len()),
            });
        }
        Ok(GTensor {
            shape: shape.to_vec(),
            buf: Arc::new(buf),
            dt,
        })
    }
    /// Elements (not storage words).
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn is_half(&self) -> bool {
        self.dt != DType::F32
    }
    pub fn s(&self) -> &CudaSlice<f32> {
        &self.buf.s
    }
    pub fn reshape(&self, shape: &[usize]) -> Result<GTensor> {
        if shape.iter().product::<usize>() != self.len() {
            return Err(Error::Shape {
                op: "gpu reshape",
                msg: format!("{:?} -> {shape:?}", self.shape),
            });
        }
        Ok(GTensor {
            shape: shape.to_vec(),
            buf: Arc::clone(&self.buf),
            dt: self.dt,
        })
    }
    /// The buffer for an in-place kernel: this one when unshared, else a copy.
    pub fn into_unique(self, gpu: &Gpu) -> Result<DBuf> {
        match Arc::try_unwrap(self.buf) {
            Ok(b) => Ok(b),
            Err(shared) => {
                let mut out = gpu.alloc(shared.len(), shared.cat)?;
                gpu.stream
                    .memcpy_dtod(&shared.s, &mut out.s)
                    .map_err(|e| cuda_err("device copy", e))?;
                Ok(out)
            }
        }
    }
}

/// Launches a kernel of `kernels.cu` on the GPU's compute stream. The argument list must
/// match the kernel's C signature in order and type (u64 for `u64`, i32 for `int`, f32
/// for `float`, buffers for pointers).
#[macro_export]
macro_rules! cuda_launch {
    ($gpu:expr, $name:expr, $cfg:expr, $($arg:expr),* $(,)?) => {{
        use cudarc::driver::PushKernelArg;
        let cfg: cudarc::driver::LaunchConfig = $cfg;
        let name: &str = $name;
        let f = $gpu.kernels.get(name)?;
        let mut b = $gpu.stream.launch_builder(f);
        $( b.arg($arg); )*
        // SAFETY: the arguments follow the kernel's signature in kernels.cu (the caller's
        // contract, checked by the CPU-parity tests), buffers are live device memory of
        // this context and sized for the launch's index range.
        unsafe { b.launch(cfg) }
            .map(|_| ())
            .map_err(|e| $crate::engine::cuda::cuda_err(&format!("kernel {name}"), e))
    }};
}

pub struct Gpu {
    pub ordinal: usize,
    pub name: String,
    pub ctx: Arc<CudaContext>,
    /// Kernels and GEMMs.
    pub stream: Arc<CudaStream>,
    /// Host-to-device copies from pinned memory, overlapping compute.
    pub copy: Arc<CudaStream>,
    pub kernels: Kernels,
    pub blas: Blas,
    /// cuDNN for conv2d, or why conv2d runs as im2col + cuBLASLt here.
    pub dnn: std::result::Result<Dnn, String>,
    pub mem: Arc<MemTracker>,
}

impl Gpu {
    /// Opens GPU `ordinal` after checking that the libraries load. `cache_dir` holds the
    /// compiled kernels.
    pub fn open(ordinal: usize, cache_dir: &Path, tf32: bool, mem: Arc<MemTracker>) -> Result<Gpu> {
        libs::require(&libs::TRAINING)?;
        let count = CudaContext::device_count()
            .map_err(|e| Error::Unavailable(format!("CUDA backend: no usable GPU: {e}")))?;
        if ordinal >= count.max(0) as usize {
            return Err(Error::Unavailable(format!(
                "CUDA backend: GPU {ordinal} asked for, {count} visible"
            )));
        }
        let ctx = CudaContext::new(ordinal).map_err(|e| cuda_err("context", e))?;
        let name = ctx.name().unwrap_or_else(|_| format!("cuda:{ordinal}"));
        let stream = ctx.new_stream().map_err(|e| cuda_err("stream", e))?;
        let copy = ctx.new_stream().map_err(|e| cuda_err("copy stream", e))?;
        let kernels = Kernels::load(&ctx, cache_dir)?;
        let blas = Blas::new(&stream, tf32)?;
        let dnn = Dnn::open(&stream, tf32);
        mem.alloc(
            MemCategory::Workspace,
            crate::engine::cuda::blas::WORKSPACE_BYTES,
        );
        Ok(Gpu {
            ordinal,
            name,
            ctx,
            stream,
            copy,
            kernels,
            blas,
            dnn,
            mem,
        })
    }

    /// Uninitialised buffer for a kernel that writes every element.
    pub fn alloc(&self, n: usize, cat: MemCategory) -> Result<DBuf> {
        // SAFETY: every caller passes the buffer to a kernel (or copy) that writes all
        // `n` elements before anything reads it.
        let s = unsafe { self.stream.alloc::<f32>(n.max(1)) }
            .map_err(|e| cuda_err(&format!("allocating {n} floats"), e))?;
        self.mem.alloc(cat, s.len() * 4);
        Ok(DBuf {
            s,
            cat,
            mem: Arc::clone(&self.mem),
        })
    }

    /// Charges a buffer allocated elsewhere (on the copy stream) to `cat`.
    pub fn wrap(&self, s: CudaSlice<f32>, cat: MemCategory) -> DBuf {
        self.mem.alloc(cat, s.len() * 4);
        DBuf {
            s,
            cat,
            mem: Arc::clone(&self.mem),
        }
    }

    pub fn zeros(&self, n: usize, cat: MemCategory) -> Result<DBuf> {
        let s = self
            .stream
            .alloc_zeros::<f32>(n.max(1))
            .map_err(|e| cuda_err(&format!("allocating {n} floats"), e))?;
        self.mem.alloc(cat, s.len() * 4);
        Ok(DBuf {
            s,
            cat,
            mem: Arc::clone(&self.mem),
        })
    }

    pub fn upload(&self, data: &[f32], cat: MemCategory) -> Result<DBuf> {
        let s = self
            .stream
            .clone_htod(data)
            .map_err(|e| cuda_err("host-to-device copy", e))?;
        self.mem.alloc(cat, s.len() * 4);
        Ok(DBuf {
            s,
            cat,
            mem: Arc::clone(&self.mem),
        })
    }

    pub fn upload_u32(&self, data: &[u32]) -> Result<CudaSlice<u32>> {
        self.stream
            .clone_htod(data)
            .map_err(|e| cuda_err("host-to-device copy", e))
    }

    pub fn download(&self, s: &CudaSlice<f32>) -> Result<Vec<f32>> {
        self.stream
            .clone_dtoh(s)
            .map_err(|e| cuda_err("device-to-host copy", e))
    }

    pub fn sync(&self) -> Result<()> {
        self.stream
            .synchronize()
            .map_err(|e| cuda_err("synchronize", e))
    }

    // ---- small ops used by several layers ----

    pub fn fill(&self, b: &mut DBuf, v: f32) -> Result<()> {
        let n = b.len() as u64;
        cuda_launch!(
            self,
            "fill",
            kernels::elementwise(b.len()),
            &mut b.s,
            &v,
            &n
        )
    }

    /// `y += a * x`
    pub fn axpy(&self, y: &mut CudaSlice<f32>, x: &CudaSlice<f32>, a: f32) -> Result<()> {
        let n = y.len().min(x.len()) as u64;
        cuda_launch!(self, "axpy", kernels::elementwise(n as usize), y, x, &a, &n)
    }

    /// `out[ch] += sum_r x[r, ch]` (out must be zeroed or hold a sum to add to).
    pub fn channel_sum(
        &self,
        out: &mut CudaSlice<f32>,
        x: &CudaSlice<f32>,
        c: usize,
    ) -> Result<()> {
        let rows = (x.len() / c) as u64;
        let ci = c as i32;
        cuda_launch!(
            self,
            "channel_sum",
            kernels::channel_reduce(rows as usize, c),
            out,
            x,
            &rows,
            &ci
        )
    }

    pub fn gemm(
        &self,
        s: &Shape,
        a: &CudaSlice<f32>,
        b: &CudaSlice<f32>,
        c: &mut CudaSlice<f32>,
    ) -> Result<()> {
        self.blas.gemm(s, a, b, c, None)
    }

    /// `x` as f32: itself, or widened into a workspace buffer (a compute temporary).
    pub fn widen(&self, x: &GTensor) -> Result<GTensor> {
        let kernel = match x.dt {
            DType::F32 => return Ok(x.clone()),
            DType::Bf16 => "widen_bf16",
            DType::F16 => "widen_f16",
            DType::U32 => {
                return Err(Error::Shape {
                    op: "widen",
                    msg: "u32 is not a floating type".into(),
                })
            }
        };
        let n = x.len();
        let mut y = self.alloc(n, MemCategory::Workspace)?;
        let nn = n as u64;
        cuda_launch!(self, kernel, kernels::elementwise(n), &mut y.s, x.s(), &nn)?;
        GTensor::new(&x.shape, y)
    }

    /// `x` stored as `dt` (charged as activations): rounded to nearest even, fp16
    /// overflowing to inf as on the CPU backend. A tensor already in `dt` is shared.
    pub fn narrow(&self, x: &GTensor, dt: DType) -> Result<GTensor> {
        if x.dt == dt {
            return Ok(x.clone());
        }
        let x = self.widen(x)?;
        let mut y = self.alloc(words(x.len(), dt), MemCategory::Activations)?;
        self.narrow_into(&mut y.s, x.s(), x.len(), dt)?;
        GTensor::of(&x.shape, y, dt)
    }

    /// Writes `n` f32 values of `src` as `dt` into the packed buffer `dst`.
    pub fn narrow_into(
        &self,
        dst: &mut CudaSlice<f32>,
        src: &CudaSlice<f32>,
        n: usize,
        dt: DType,
    ) -> Result<()> {
        let kernel = match dt {
            DType::Bf16 => "narrow_bf16",
            DType::F16 => "narrow_f16",
            DType::F32 | DType::U32 => {
                return Err(Error::Shape {
                    op: "narrow",
                    msg: format!("{dt:?} is not a half type"),
                })
            }
        };
        let nn = n as u64;
        cuda_launch!(self, kernel, kernels::elementwise(n), dst, src, &nn)
    }

    pub fn launch_cfg_rows(n: usize) -> LaunchConfig {
        kernels::per_item(n)
    }
}
