//! conv2d through cuDNN (`libcudnn.so.9`, cudarc's `cudnn` feature), where it loads.
//!
//! One handle per GPU on its compute stream, and one plan per convolution shape and
//! operand type: NHWC tensors, a KRSC filter (tune's weight layout, which cuDNN calls
//! NHWC for filters), cross-correlation with f32 compute. Each direction (forward,
//! backward data, backward filter) has the candidates cuDNN's heuristic lists as
//! runnable, best first. Without autotune the first is used; with it, each candidate is
//! timed with CUDA events on scratch output the first time a shape runs (what
//! `torch.backends.cudnn.benchmark` does through `cudnnFind*`), the winner is kept in the
//! same versioned cache as the GEMMs, and every decision, with the workspace it takes,
//! goes into the trial record. Calls go through cudarc's `result` layer: its safe
//! wrappers unwrap errors and assert on empty heuristic lists.

use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::cudnn::{result as dnn, sys};
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut};

use crate::engine::autotune::{AlgoChoice, Algos, ChoiceSource};
use crate::engine::cuda::err::cuda_err;
use crate::engine::device::{MemCategory, MemTracker};
use crate::engine::geom::ConvGeom;
use crate::engine::tensor::DType;
use crate::error::{Error, Result};

/// `TUNE_CUDNN=0` keeps conv2d on im2col + cuBLASLt where cuDNN loads (to compare the
/// two paths on one machine).
pub const OFF_ENV: &str = "TUNE_CUDNN";

fn err(what: &str, e: dnn::CudnnError) -> Error {
    Error::Runtime(format!("cuDNN: {what}: {:?}", e.0))
}

/// One convolution's geometry and operand type (NHWC input `n x h x w x c_in`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConvKey {
    pub g: ConvGeom,
    pub dt: DType,
}

impl ConvKey {
    /// The autotune key: every dimension and the operand type.
    fn name(&self) -> String {
        let g = &self.g;
        format!(
            "n{} {}x{}x{} -> {} k{} s{} p{} {:?}",
            g.n, g.h, g.w, g.c_in, g.c_out, g.k, g.stride, g.pad, self.dt
        )
    }
}

/// The three convolutions of a layer's step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    Forward,
    BackwardData,
    BackwardFilter,
}

impl Dir {
    fn op(self) -> &'static str {
        match self {
            Dir::Forward => "conv2d.cudnn.fwd",
            Dir::BackwardData => "conv2d.cudnn.bwd_data",
            Dir::BackwardFilter => "conv2d.cudnn.bwd_filter",
        }
    }
    fn index(self) -> usize {
        self as usize
    }
}

#[derive(Clone, Copy, Debug)]
enum Algo {
    Fwd(sys::cudnnConvolutionFwdAlgo_t),
    Data(sys::cudnnConvolutionBwdDataAlgo_t),
    Filter(sys::cudnnConvolutionBwdFilterAlgo_t),
}

/// A runnable algorithm and the workspace it needs for its plan's shape.
struct Cand {
    algo: Algo,
    ws: usize,
    /// Stable across runs with the same library and shape, so the cache can name it:
    /// cuDNN's algorithm and its workspace.
    name: String,
}

fn cand(algo: Algo, ws: usize) -> Cand {
    let full = match algo {
        Algo::Fwd(a) => format!("{a:?}"),
        Algo::Data(a) => format!("{a:?}"),
        Algo::Filter(a) => format!("{a:?}"),
    };
    // FWD_ALGO_IMPLICIT_GEMM, BWD_DATA_ALGO_1, ...: the enumerant less cuDNN's prefix.
    let short = full.strip_prefix("CUDNN_CONVOLUTION_").unwrap_or(&full);
    Cand {
        algo,
        ws,
        name: format!("{short} ({ws} B workspace)"),
    }
}

struct Plan {
    x: sys::cudnnTensorDescriptor_t,
    w: sys::cudnnFilterDescriptor_t,
    y: sys::cudnnTensorDescriptor_t,
    conv: sys::cudnnConvolutionDescriptor_t,
    cands: [Vec<Cand>; 3],
    chosen: [Option<usize>; 3],
}

impl Drop for Plan {
    fn drop(&mut self) {
        // SAFETY: each descriptor was created by cuDNN in `Dnn::plan` and is destroyed
        // once, here (a null one, from a plan that failed half-way, is skipped). Errors on
        // teardown are ignored: nothing can be done about them.
        unsafe {
            if !self.x.is_null() {
                let _ = dnn::destroy_tensor_descriptor(self.x);
            }
            if !self.y.is_null() {
                let _ = dnn::destroy_tensor_descriptor(self.y);
            }
            if !self.w.is_null() {
                let _ = dnn::destroy_filter_descriptor(self.w);
            }
            if !self.conv.is_null() {
                let _ = dnn::destroy_convolution_descriptor(self.conv);
            }
        }
    }
}

fn data_type(dt: DType) -> Result<sys::cudnnDataType_t> {
    match dt {
        DType::F32 => Ok(sys::cudnnDataType_t::CUDNN_DATA_FLOAT),
        DType::F16 => Ok(sys::cudnnDataType_t::CUDNN_DATA_HALF),
        DType::Bf16 => Ok(sys::cudnnDataType_t::CUDNN_DATA_BFLOAT16),
        DType::U32 => Err(Error::Shape {
            op: "cudnn conv2d",
            msg: "u32 is not a floating type".into(),
        }),
    }
}

fn int(v: usize) -> Result<c_int> {
    c_int::try_from(v).map_err(|_| Error::Shape {
        op: "cudnn conv2d",
        msg: format!("dimension {v} does not fit cuDNN's int"),
    })
}

/// cuDNN on one GPU: the handle (bound to the compute stream) and the plans.
pub struct Dnn {
    handle: sys::cudnnHandle_t,
    stream: Arc<CudaStream>,
    /// `cudnnGetVersion`: major*10000 + minor*100 + patch.
    pub version: usize,
    /// TF32 tensor cores for f32 convolutions (`torch.backends.cudnn.allow_tf32`).
    tf32: bool,
    /// A plan per shape, or why cuDNN cannot run it (that shape then stays on im2col +
    /// cuBLASLt, and the record says so).
    plans: Mutex<HashMap<ConvKey, std::result::Result<Plan, String>>>,
    /// Autotune's selector once set; else a heuristic one that records the first
    /// candidate per shape, so the record names the algorithm either way.
    autotune: OnceLock<Arc<Algos>>,
    heuristic: Arc<Algos>,
}

// SAFETY: a cuDNN handle may be used from any thread but not from two at once (NVIDIA's
// thread-safety notes); every call through `handle` happens with `plans` locked.
unsafe impl Send for Dnn {}
unsafe impl Sync for Dnn {}

impl Drop for Dnn {
    fn drop(&mut self) {
        if let Ok(p) = self.plans.get_mut() {
            p.clear();
        }
        // SAFETY: the handle was created in `open` and is destroyed once, after its plans.
        let _ = unsafe { dnn::destroy_handle(self.handle) };
    }
}

impl Dnn {
    /// cuDNN on `stream`'s GPU, or why conv2d stays on im2col + cuBLASLt: `TUNE_CUDNN=0`,
    /// a library that does not load, or a handle that cannot be made.
    pub fn open(stream: &Arc<CudaStream>, tf32: bool) -> std::result::Result<Dnn, String> {
        if std::env::var(OFF_ENV).as_deref() == Ok("0") {
            return Err(format!("{OFF_ENV}=0"));
        }
        crate::engine::cuda::libs::optional(crate::engine::cuda::libs::Lib::Cudnn)
            .map_err(|e| format!("cuDNN not loaded: {e}"))?;
        stream
            .context()
            .bind_to_thread()
            .map_err(|e| format!("cuDNN: binding the context: {e}"))?;
        let handle = dnn::create_handle().map_err(|e| format!("cudnnCreate: {:?}", e.0))?;
        // SAFETY: `handle` was just created; the stream belongs to the bound context and
        // outlives the handle (`Dnn` holds it).
        if let Err(e) = unsafe { dnn::set_stream(handle, stream.cu_stream() as *mut _) } {
            // SAFETY: created above, destroyed once.
            let _ = unsafe { dnn::destroy_handle(handle) };
            return Err(format!("cudnnSetStream: {:?}", e.0));
        }
        Ok(Dnn {
            handle,
            stream: Arc::clone(stream),
            version: dnn::get_version(),
            tf32,
            plans: Mutex::new(HashMap::new()),
            autotune: OnceLock::new(),
            heuristic: Algos::heuristic(),
        })
    }

    /// Turns autotuning on for every shape planned from now on (once per GPU).
    pub fn autotune_with(&self, algos: Arc<Algos>) -> Result<()> {
        self.autotune
            .set(algos)
            .map_err(|_| Error::Runtime("cuDNN: autotuning was already set up".into()))
    }

    /// For the record: the algorithms the heuristic chose (autotune off), and every
    /// shape cuDNN could not run, with why (those ran as im2col + cuBLASLt).
    pub fn choices(&self) -> Vec<AlgoChoice> {
        let mut v = self.heuristic.choices();
        let mut shapes: Vec<(String, String)> = self
            .lock()
            .iter()
            .filter_map(|(k, p)| p.as_ref().err().map(|why| (k.name(), why.clone())))
            .collect();
        shapes.sort();
        v.extend(shapes.into_iter().map(|(key, why)| AlgoChoice {
            op: "conv2d".into(),
            key,
            algo: format!("im2col+cublasLt ({why})"),
            source: ChoiceSource::Heuristic,
            timings_ms: std::collections::BTreeMap::new(),
            late: false,
            eval: false,
        }));
        v
    }

    /// Whether cuDNN runs convolutions of `key` (planning them on first use); when not,
    /// the caller uses im2col + cuBLASLt and [`Dnn::choices`] says why.
    pub fn runs(&self, key: &ConvKey) -> bool {
        let mut plans = self.lock();
        plans
            .entry(*key)
            .or_insert_with(|| self.plan(key).map_err(|e| e.to_string()))
            .is_ok()
    }

    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<ConvKey, std::result::Result<Plan, String>>> {
        match self.plans.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    fn math(&self, dt: DType) -> sys::cudnnMathType_t {
        match dt {
            DType::F32 if !self.tf32 => sys::cudnnMathType_t::CUDNN_FMA_MATH,
            _ => sys::cudnnMathType_t::CUDNN_TENSOR_OP_MATH,
        }
    }

    fn plan(&self, key: &ConvKey) -> Result<Plan> {
        let dt = data_type(key.dt)?;
        let nhwc = sys::cudnnTensorFormat_t::CUDNN_TENSOR_NHWC;
        let g = &key.g;
        let mut p = Plan {
            x: std::ptr::null_mut(),
            w: std::ptr::null_mut(),
            y: std::ptr::null_mut(),
            conv: std::ptr::null_mut(),
            cands: [Vec::new(), Vec::new(), Vec::new()],
            chosen: [None; 3],
        };
        p.x = dnn::create_tensor_descriptor().map_err(|e| err("tensor descriptor", e))?;
        p.y = dnn::create_tensor_descriptor().map_err(|e| err("tensor descriptor", e))?;
        p.w = dnn::create_filter_descriptor().map_err(|e| err("filter descriptor", e))?;
        p.conv = dnn::create_convolution_descriptor().map_err(|e| err("conv descriptor", e))?;
        let (n, ci, co, k) = (int(g.n)?, int(g.c_in)?, int(g.c_out)?, int(g.k)?);
        let (pad, stride) = (int(g.pad)?, int(g.stride)?);
        // SAFETY: the descriptors were created above and are live; the values describe
        // NHWC tensors and a KRSC filter of these dimensions.
        unsafe {
            dnn::set_tensor4d_descriptor(p.x, nhwc, dt, [n, ci, int(g.h)?, int(g.w)?])
                .map_err(|e| err("input descriptor", e))?;
            dnn::set_tensor4d_descriptor(p.y, nhwc, dt, [n, co, int(g.oh())?, int(g.ow())?])
                .map_err(|e| err("output descriptor", e))?;
            dnn::set_filter4d_descriptor(p.w, dt, nhwc, [co, ci, k, k])
                .map_err(|e| err("filter descriptor", e))?;
            dnn::set_convolution2d_descriptor(
                p.conv,
                pad,
                pad,
                stride,
                stride,
                1,
                1,
                sys::cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION,
                sys::cudnnDataType_t::CUDNN_DATA_FLOAT,
            )
            .map_err(|e| err("conv descriptor", e))?;
            dnn::set_convolution_math_type(p.conv, self.math(key.dt))
                .map_err(|e| err("math type", e))?;
        }
        p.cands = [
            self.candidates(&p, Dir::Forward)?,
            self.candidates(&p, Dir::BackwardData)?,
            self.candidates(&p, Dir::BackwardFilter)?,
        ];
        for (c, dir) in p
            .cands
            .iter()
            .zip([Dir::Forward, Dir::BackwardData, Dir::BackwardFilter])
        {
            if c.is_empty() {
                return Err(Error::Runtime(format!(
                    "cuDNN has no runnable {} algorithm for {}",
                    dir.op(),
                    key.name()
                )));
            }
        }
        Ok(p)
    }

    /// The runnable algorithms cuDNN's heuristic lists for `dir`, best first, each once,
    /// with its workspace for this shape.
    fn candidates(&self, p: &Plan, dir: Dir) -> Result<Vec<Cand>> {
        const MAX: usize = 8;
        let h = self.handle;
        // One `_v7` query's runnable entries with their workspace estimates.
        macro_rules! runnable {
            ($perf:ty, $variant:path, $what:literal, |$r:ident, $n:ident| $query:expr) => {{
                let mut r = [const { std::mem::MaybeUninit::<$perf>::uninit() }; MAX];
                let mut n: c_int = 0;
                {
                    let ($r, $n) = (r.as_mut_ptr().cast::<$perf>(), &mut n);
                    // SAFETY: every descriptor is live and describes this plan; `r` has
                    // room for MAX entries, MAX is the requested count, and cuDNN says
                    // in `n` how many it initialised (only those are read below).
                    unsafe { $query }.map_err(|e| err($what, e))?;
                }
                let ok = sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS;
                r.iter()
                    .take(n.clamp(0, MAX as c_int) as usize)
                    .filter_map(|e| {
                        // SAFETY: one of the first `n` entries, initialised by cuDNN.
                        let e = unsafe { e.assume_init_ref() };
                        (e.status == ok).then(|| ($variant(e.algo), e.memory))
                    })
                    .collect::<Vec<(Algo, usize)>>()
            }};
        }
        let m = MAX as c_int;
        let got = match dir {
            Dir::Forward => runnable!(
                sys::cudnnConvolutionFwdAlgoPerf_t,
                Algo::Fwd,
                "forward heuristic",
                |r, n| dnn::get_convolution_forward_algorithm(h, p.x, p.w, p.conv, p.y, m, n, r)
            ),
            Dir::BackwardData => runnable!(
                sys::cudnnConvolutionBwdDataAlgoPerf_t,
                Algo::Data,
                "backward-data heuristic",
                |r, n| dnn::get_convolution_backward_data_algorithm(
                    h, p.w, p.y, p.conv, p.x, m, n, r
                )
            ),
            Dir::BackwardFilter => runnable!(
                sys::cudnnConvolutionBwdFilterAlgoPerf_t,
                Algo::Filter,
                "backward-filter heuristic",
                |r, n| dnn::get_convolution_backward_filter_algorithm(
                    h, p.x, p.y, p.conv, p.w, m, n, r
                )
            ),
        };
        let mut out: Vec<Cand> = Vec::new();
        for (algo, listed) in got {
            let name = format!("{algo:?}");
            if out.iter().any(|c| format!("{:?}", c.algo) == name) {
                continue; // listed again with another math type
            }
            // The workspace query is the documented size; the heuristic's `memory` is
            // an estimate that may differ from it.
            let ws = self.workspace_size(p, algo).unwrap_or(listed);
            out.push(cand(algo, ws));
        }
        Ok(out)
    }

    fn workspace_size(&self, p: &Plan, algo: Algo) -> Result<usize> {
        let h = self.handle;
        // SAFETY: the descriptors are live and describe this plan; `algo` is one cuDNN
        // listed as runnable for it.
        unsafe {
            match algo {
                Algo::Fwd(a) => {
                    dnn::get_convolution_forward_workspace_size(h, p.x, p.w, p.conv, p.y, a)
                }
                Algo::Data(a) => {
                    dnn::get_convolution_backward_data_workspace_size(h, p.w, p.y, p.conv, p.x, a)
                }
                Algo::Filter(a) => {
                    dnn::get_convolution_backward_filter_workspace_size(h, p.x, p.y, p.conv, p.w, a)
                }
            }
        }
        .map_err(|e| err("workspace size", e))
    }

    /// One convolution of `dir` on the compute stream: `out = conv(a, b) + beta * out`.
    /// Forward: a = x, b = w, out = y. Backward data: a = w, b = dy, out = dx. Backward
    /// filter: a = x, b = dy, out = dw. Buffers hold `key.dt` elements (packed two to a
    /// word for half types); the caller sizes them.
    #[allow(clippy::too_many_arguments)]
    pub fn run(
        &self,
        mem: &Arc<MemTracker>,
        key: &ConvKey,
        dir: Dir,
        a: &CudaSlice<f32>,
        b: &CudaSlice<f32>,
        out: &mut CudaSlice<f32>,
        beta: f32,
    ) -> Result<()> {
        let mut plans = self.lock();
        let p = match plans.get_mut(key) {
            Some(Ok(p)) => p,
            Some(Err(why)) => return Err(Error::Runtime(format!("cuDNN: {why}"))),
            None => {
                return Err(Error::Runtime(format!(
                    "cuDNN: {} was not planned",
                    key.name()
                )))
            }
        };
        let st = &self.stream;
        let (pa, _ra) = a.device_ptr(st);
        let (pb, _rb) = b.device_ptr(st);
        let i = dir.index();
        let chosen = match p.chosen[i] {
            Some(c) => c,
            None => {
                let names: Vec<&str> = p.cands[i].iter().map(|c| c.name.as_str()).collect();
                let algos = self.autotune.get().unwrap_or(&self.heuristic);
                let plan: &Plan = p;
                let winner = algos.choose(dir.op(), &key.name(), &names, |name| {
                    let c = plan.cands[i].iter().find(|c| c.name == name);
                    let c = c.ok_or_else(|| Error::Runtime(format!("cuDNN: no {name}")))?;
                    self.time(mem, plan, c, key, dir, pa, pb)
                })?;
                let c = names.iter().position(|n| *n == winner).unwrap_or(0);
                p.chosen[i] = Some(c);
                c
            }
        };
        let c = &p.cands[i][chosen];
        let (po, _ro) = out.device_ptr_mut(st);
        self.launch(mem, p, c, pa, pb, po, beta)
    }

    /// Milliseconds of candidate `c` on the real operands and a scratch output: one
    /// untimed run, then the mean of three between events (as the GEMMs are timed).
    #[allow(clippy::too_many_arguments)]
    fn time(
        &self,
        mem: &Arc<MemTracker>,
        p: &Plan,
        c: &Cand,
        key: &ConvKey,
        dir: Dir,
        pa: u64,
        pb: u64,
    ) -> Result<f64> {
        let st = &self.stream;
        let ev = |e| Error::Runtime(format!("CUDA: autotune timing event: {e}"));
        let g = &key.g;
        let elems = match dir {
            Dir::Forward => g.rows() * g.c_out,
            Dir::BackwardData => g.n * g.h * g.w * g.c_in,
            Dir::BackwardFilter => g.c_out * g.kkc(),
        };
        let mut scratch = st
            .alloc_zeros::<f32>(crate::engine::tensor::words(elems, key.dt).max(1))
            .map_err(|e| cuda_err("autotune scratch", e))?;
        let (po, _ro) = scratch.device_ptr_mut(st);
        self.launch(mem, p, c, pa, pb, po, 0.0)?;
        // Events with timing on (cudarc's default disables it).
        let timed = Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT);
        let start = st.record_event(timed).map_err(ev)?;
        for _ in 0..3 {
            self.launch(mem, p, c, pa, pb, po, 0.0)?;
        }
        let end = st.record_event(timed).map_err(ev)?;
        let ms = start.elapsed_ms(&end).map_err(ev)?;
        Ok(f64::from(ms) / 3.0)
    }

    /// One cuDNN call with candidate `c` on device pointers the caller keeps alive (and
    /// tracked by cudarc) until the work is done; the workspace is allocated for it.
    #[allow(clippy::too_many_arguments)]
    fn launch(
        &self,
        mem: &Arc<MemTracker>,
        p: &Plan,
        c: &Cand,
        pa: u64,
        pb: u64,
        po: u64,
        beta: f32,
    ) -> Result<()> {
        let st = &self.stream;
        let ws_words = c.ws.div_ceil(4);
        // SAFETY: the workspace is scratch cuDNN writes before reading.
        let ws = if ws_words > 0 {
            Some(unsafe { st.alloc::<f32>(ws_words) }.map_err(|e| cuda_err("cuDNN workspace", e))?)
        } else {
            None
        };
        mem.alloc(MemCategory::Workspace, ws_words * 4);
        let (pw, _rw) = match &ws {
            Some(w) => {
                let (p, r) = w.device_ptr(st);
                (p, Some(r))
            }
            None => (0, None),
        };
        let alpha = 1.0f32;
        let (al, be) = (
            (&alpha) as *const f32 as *const c_void,
            (&beta) as *const f32 as *const c_void,
        );
        let wsp = pw as *mut c_void;
        let h = self.handle;
        // SAFETY: the plan's descriptors describe exactly these buffers (the caller sized
        // them for `key`); alpha and beta are host floats, the scaling type for f32,
        // half and bf16 data; the workspace holds at least `c.ws` bytes; every pointer
        // stays valid while the caller's guards (and `_rw`) live, which record the use on
        // `st` for cudarc's cross-stream tracking.
        let r = unsafe {
            match c.algo {
                Algo::Fwd(a) => dnn::convolution_forward(
                    h,
                    al,
                    p.x,
                    pa as *const c_void,
                    p.w,
                    pb as *const c_void,
                    p.conv,
                    a,
                    wsp,
                    c.ws,
                    be,
                    p.y,
                    po as *mut c_void,
                ),
                Algo::Data(a) => dnn::convolution_backward_data(
                    h,
                    al,
                    p.w,
                    pa as *const c_void,
                    p.y,
                    pb as *const c_void,
                    p.conv,
                    a,
                    wsp,
                    c.ws,
                    be,
                    p.x,
                    po as *mut c_void,
                ),
                Algo::Filter(a) => dnn::convolution_backward_filter(
                    h,
                    al,
                    p.x,
                    pa as *const c_void,
                    p.y,
                    pb as *const c_void,
                    p.conv,
                    a,
                    wsp,
                    c.ws,
                    be,
                    p.w,
                    po as *mut c_void,
                ),
            }
        };
        drop(_rw);
        drop(ws);
        mem.free(MemCategory::Workspace, ws_words * 4);
        r.map_err(|e| err(&format!("{} ({})", c.name, "run"), e))
    }
}
