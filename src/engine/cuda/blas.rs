//! GEMM through cuBLASLt on row-major matrices (f32, or bf16/fp16 operands with an f32
//! result under AMP), with descriptors and the chosen
//! algorithm cached per shape so a training step does no planning.
//!
//! cuBLASLt is column-major. A row-major `C[m,n] = A[m,k] B[k,n]` is the column-major
//! `C^T = B^T A^T`, and a row-major matrix read column-major is its transpose, so the call
//! passes B as cuBLASLt's first operand and A as its second, with the same transposes.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::cublaslt::result as lt;
use cudarc::cublaslt::sys;
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut};

use crate::engine::autotune::Algos;
use crate::engine::tensor::words;
use crate::engine::tensor::DType;
use crate::error::{Error, Result};

/// Bytes of cuBLASLt workspace: what cuBLASLt's own docs recommend for Hopper.
pub const WORKSPACE_BYTES: usize = 32 << 20;

/// How many heuristic candidates autotuning times per shape.
pub const MAX_CANDIDATES: usize = 8;

/// One GEMM shape: `C[m,n] (+)= op(A) op(B)` with op(A) `[m,k]`, op(B) `[k,n]`.
/// `ta`: A is stored `[k,m]` (use its transpose); `tb`: B is stored `[n,k]`. `dt` is the
/// operands' type (f32, or bf16/fp16 under AMP, packed two to a word); C is always f32
/// and the accumulation f32 (compute type 32F, as under torch.autocast).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Shape {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub ta: bool,
    pub tb: bool,
    pub accumulate: bool,
    pub dt: DType,
}

impl Shape {
    pub fn key(&self) -> String {
        format!(
            "m{} n{} k{} {}{}{} {}",
            self.m,
            self.n,
            self.k,
            if self.ta { "T" } else { "N" },
            if self.tb { "T" } else { "N" },
            if self.accumulate { " +=" } else { "" },
            dtype_name(self.dt)
        )
    }
}

fn dtype_name(dt: DType) -> &'static str {
    match dt {
        DType::F32 => "f32",
        DType::Bf16 => "bf16",
        DType::F16 => "f16",
        DType::U32 => "u32",
    }
}

fn cuda_type(dt: DType) -> Result<sys::cudaDataType_t> {
    match dt {
        DType::F32 => Ok(sys::cudaDataType_t::CUDA_R_32F),
        DType::Bf16 => Ok(sys::cudaDataType_t::CUDA_R_16BF),
        DType::F16 => Ok(sys::cudaDataType_t::CUDA_R_16F),
        DType::U32 => Err(Error::Shape {
            op: "gemm",
            msg: "u32 operands".into(),
        }),
    }
}

fn err(what: &str, e: lt::CublasError) -> Error {
    Error::Runtime(format!("cuBLASLt {what}: {e:?}"))
}

/// The descriptors of one shape and its heuristic candidates (index 0 = cuBLASLt's pick).
struct Plan {
    desc: sys::cublasLtMatmulDesc_t,
    a: sys::cublasLtMatrixLayout_t,
    b: sys::cublasLtMatrixLayout_t,
    c: sys::cublasLtMatrixLayout_t,
    algos: Vec<sys::cublasLtMatmulHeuristicResult_t>,
    chosen: usize,
    /// Whether autotuning (when on) has decided `chosen`.
    tuned: bool,
}

// SAFETY: the descriptor handles are plain heap objects of cuBLASLt, not tied to a
// thread; tune uses each Plan from one thread at a time (behind the Blas mutex).
unsafe impl Send for Plan {}

impl Drop for Plan {
    fn drop(&mut self) {
        // SAFETY: each handle was created by cuBLASLt in `Plan::new` and is destroyed
        // once, here. Errors on teardown are ignored: nothing can be done about them.
        unsafe {
            let _ = lt::destroy_matrix_layout(self.a);
            let _ = lt::destroy_matrix_layout(self.b);
            let _ = lt::destroy_matrix_layout(self.c);
            let _ = lt::destroy_matmul_desc(self.desc);
        }
    }
}

pub struct Blas {
    handle: sys::cublasLtHandle_t,
    stream: Arc<CudaStream>,
    workspace: CudaSlice<u8>,
    plans: Mutex<HashMap<Shape, Plan>>,
    /// TF32 tensor cores for f32 GEMMs (`torch.backends.cuda.matmul.allow_tf32`).
    pub tf32: bool,
    /// Autotuning (the `cudnn.benchmark` analogue): on a shape's first GEMM, time each
    /// heuristic candidate on a scratch output and keep the fastest.
    autotune: OnceLock<Arc<Algos>>,
}

// SAFETY: the cuBLASLt handle is thread-safe per NVIDIA's docs (one handle may be
// shared by host threads); all launches go to `stream`.
unsafe impl Send for Blas {}
unsafe impl Sync for Blas {}

impl Drop for Blas {
    fn drop(&mut self) {
        // SAFETY: the handle was created in `new` and is destroyed once.
        let _ = unsafe { lt::destroy_handle(self.handle) };
    }
}

impl Blas {
    pub fn new(stream: &Arc<CudaStream>, tf32: bool) -> Result<Blas> {
        let handle = lt::create_handle().map_err(|e| err("create handle", e))?;
        let workspace = stream
            .alloc_zeros::<u8>(WORKSPACE_BYTES)
            .map_err(|e| Error::Runtime(format!("CUDA: cuBLASLt workspace: {e}")))?;
        Ok(Blas {
            handle,
            stream: Arc::clone(stream),
            workspace,
            plans: Mutex::new(HashMap::new()),
            tf32,
            autotune: OnceLock::new(),
        })
    }

    /// Turns autotuning on for every shape planned from now on (once per Blas).
    pub fn autotune_with(&self, algos: Arc<Algos>) -> Result<()> {
        self.autotune
            .set(algos)
            .map_err(|_| Error::Runtime("cuBLASLt: autotuning was already set up".into()))
    }

    /// A candidate's name, stable across runs with the same library and shape: its
    /// index in the heuristic's list and cuBLASLt's algorithm id.
    fn candidate_name(i: usize, h: &sys::cublasLtMatmulHeuristicResult_t) -> String {
        let mut id = -1i32;
        let mut written = 0usize;
        // SAFETY: `h.algo` is an algorithm the heuristic returned; the attribute is an
        // int32 written into `id`, whose size is passed.
        let r = unsafe {
            sys::cublasLtMatmulAlgoConfigGetAttribute(
                &h.algo,
                sys::cublasLtMatmulAlgoConfigAttributes_t::CUBLASLT_ALGO_CONFIG_ID,
                (&mut id) as *mut i32 as *mut c_void,
                std::mem::size_of::<i32>(),
                &mut written,
            )
        };
        if r == sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
            format!("cublasLt#{i} (algo {id})")
        } else {
            format!("cublasLt#{i}")
        }
    }

    /// Milliseconds of candidate `i` of plan `p` on the real operands and a scratch
    /// output (a GEMM may accumulate into its output, so the real one is not touched):
    /// one untimed run, then the mean of three between events. Syncs the stream once per
    /// candidate, on a shape's first GEMM only.
    fn time_candidate(&self, p: &Plan, s: &Shape, i: usize, pa: u64, pb: u64) -> Result<f64> {
        let st = &self.stream;
        let ev = |e| Error::Runtime(format!("CUDA: autotune timing event: {e}"));
        let mut scratch = st
            .alloc_zeros::<f32>(s.m * s.n)
            .map_err(|e| Error::Runtime(format!("CUDA: autotune scratch: {e}")))?;
        let (pc, _rc) = scratch.device_ptr_mut(st);
        let h = p
            .algos
            .get(i)
            .ok_or_else(|| Error::Runtime(format!("cuBLASLt: no candidate {i}")))?;
        self.launch(p, h, s, pa, pb, pc)?;
        // Events with timing on (cudarc's default disables it, and the driver then
        // refuses elapsed time with CUDA_ERROR_INVALID_HANDLE).
        let timed = Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT);
        let start = st.record_event(timed).map_err(ev)?;
        for _ in 0..3 {
            self.launch(p, h, s, pa, pb, pc)?;
        }
        let end = st.record_event(timed).map_err(ev)?;
        let ms = start.elapsed_ms(&end).map_err(ev)?;
        Ok(f64::from(ms) / 3.0)
    }

    /// The compute type of `s`: f32 accumulation always; TF32 tensor cores for f32
    /// operands when asked (half operands use tensor cores with 32F compute anyway).
    pub fn compute_type(&self, s: &Shape) -> sys::cublasComputeType_t {
        if self.tf32 && s.dt == DType::F32 {
            sys::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32
        } else {
            sys::cublasComputeType_t::CUBLAS_COMPUTE_32F
        }
    }

    fn plan(&self, s: &Shape) -> Result<Plan> {
        let f32t = sys::cudaDataType_t::CUDA_R_32F;
        let opt = cuda_type(s.dt)?;
        let compute = self.compute_type(s);
        // Column-major view: first operand = our B (stored [k,n] row-major = [n,k]
        // column-major when !tb), second = our A.
        let (b_rows, b_cols, ldb) = if s.tb {
            (s.k, s.n, s.k)
        } else {
            (s.n, s.k, s.n)
        };
        let (a_rows, a_cols, lda) = if s.ta {
            (s.m, s.k, s.m)
        } else {
            (s.k, s.m, s.k)
        };
        let lay = |t: sys::cudaDataType_t, r: usize, c: usize, ld: usize| {
            lt::create_matrix_layout(t, r as u64, c as u64, ld as i64)
                .map_err(|e| err("matrix layout", e))
        };
        let desc = lt::create_matmul_desc(compute, f32t).map_err(|e| err("matmul desc", e))?;
        let mut plan = Plan {
            desc,
            a: lay(opt, b_rows, b_cols, ldb)?,
            b: lay(opt, a_rows, a_cols, lda)?,
            c: lay(f32t, s.n, s.m, s.n)?,
            algos: Vec::new(),
            chosen: 0,
            tuned: false,
        };
        for (attr, t) in [
            (
                sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSA,
                s.tb,
            ),
            (
                sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSB,
                s.ta,
            ),
        ] {
            // cublasOperation_t: 0 = N, 1 = T (an int-sized enum).
            let op = i32::from(t);
            // SAFETY: `desc` is live; the attribute takes a cublasOperation_t (an int) by
            // pointer with its exact size.
            unsafe {
                lt::set_matmul_desc_attribute(
                    plan.desc,
                    attr,
                    (&op) as *const _ as *const c_void,
                    std::mem::size_of::<i32>(),
                )
            }
            .map_err(|e| err("transpose attribute", e))?;
        }
        let pref = lt::create_matmul_pref().map_err(|e| err("preference", e))?;
        let ws = WORKSPACE_BYTES;
        // SAFETY: `pref` is live; the attribute is a size_t passed by pointer.
        let set = unsafe {
            lt::set_matmul_pref_attribute(
                pref,
                sys::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                (&ws) as *const usize as *const c_void,
                std::mem::size_of::<usize>(),
            )
        };
        let mut results: Vec<sys::cublasLtMatmulHeuristicResult_t> =
            Vec::with_capacity(MAX_CANDIDATES);
        let mut count = 0i32;
        // SAFETY: every handle is live; `results` has room for MAX_CANDIDATES entries and
        // cuBLASLt writes at most that many, reporting how many in `count`.
        let got = set.and_then(|()| unsafe {
            sys::cublasLtMatmulAlgoGetHeuristic(
                self.handle,
                plan.desc,
                plan.a,
                plan.b,
                plan.c,
                plan.c,
                pref,
                MAX_CANDIDATES as i32,
                results.as_mut_ptr(),
                &mut count,
            )
            .result()
        });
        // SAFETY: created above, destroyed once.
        let _ = unsafe { lt::destroy_matmul_pref(pref) };
        got.map_err(|e| err(&format!("heuristic for {}", s.key()), e))?;
        // SAFETY: cuBLASLt initialised the first `count` entries.
        unsafe { results.set_len(count.clamp(0, MAX_CANDIDATES as i32) as usize) };
        plan.algos = results
            .into_iter()
            .filter(|r| r.state == sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS)
            .collect();
        if plan.algos.is_empty() {
            return Err(Error::Runtime(format!(
                "cuBLASLt has no algorithm for {}",
                s.key()
            )));
        }
        Ok(plan)
    }

    /// How many candidate algorithms cuBLASLt offers for `s` (plans it if needed).
    pub fn candidates(&self, s: &Shape) -> Result<usize> {
        let mut plans = self.lock();
        Ok(self.planned(&mut plans, s)?.algos.len())
    }

    /// The plan of `s`, made on first use.
    fn planned<'a>(&self, plans: &'a mut HashMap<Shape, Plan>, s: &Shape) -> Result<&'a mut Plan> {
        if !plans.contains_key(s) {
            let p = self.plan(s)?;
            plans.insert(*s, p);
        }
        plans
            .get_mut(s)
            .ok_or_else(|| Error::Runtime(format!("cuBLASLt: no plan for {}", s.key())))
    }

    /// Fixes the algorithm `s` runs with from now on (autotuning's decision).
    pub fn choose(&self, s: &Shape, index: usize) -> Result<()> {
        let mut plans = self.lock();
        let p = self.planned(&mut plans, s)?;
        if index >= p.algos.len() {
            return Err(Error::Runtime(format!(
                "cuBLASLt: candidate {index} out of range for {}",
                s.key()
            )));
        }
        p.chosen = index;
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Shape, Plan>> {
        match self.plans.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// `c (+)= op(a) op(b)`, row-major, on the compute stream. `algo` overrides the
    /// chosen candidate (autotuning's trial runs).
    pub fn gemm(
        &self,
        s: &Shape,
        a: &CudaSlice<f32>,
        b: &CudaSlice<f32>,
        c: &mut CudaSlice<f32>,
        algo: Option<usize>,
    ) -> Result<()> {
        if a.len() < words(s.m * s.k, s.dt)
            || b.len() < words(s.k * s.n, s.dt)
            || c.len() < s.m * s.n
        {
            return Err(Error::Shape {
                op: "gemm",
                msg: format!(
                    "{}: buffers of {}, {}, {} elements are too small",
                    s.key(),
                    a.len(),
                    b.len(),
                    c.len()
                ),
            });
        }
        // One lock per GEMM on the hot path: plan lookup (and planning, on first use).
        let mut plans = self.lock();
        let p = self.planned(&mut plans, s)?;
        let st = &self.stream;
        let (pa, _ra) = a.device_ptr(st);
        let (pb, _rb) = b.device_ptr(st);
        if !p.tuned && algo.is_none() {
            if let Some(algos) = self.autotune.get() {
                let names: Vec<String> = p
                    .algos
                    .iter()
                    .enumerate()
                    .map(|(i, h)| Blas::candidate_name(i, h))
                    .collect();
                let refs: Vec<&str> = names.iter().map(String::as_str).collect();
                let plan: &Plan = p;
                let winner = algos.choose("gemm", &s.key(), &refs, |name| {
                    let i = refs.iter().position(|r| *r == name).unwrap_or(0);
                    self.time_candidate(plan, s, i, pa, pb)
                })?;
                p.chosen = refs.iter().position(|r| *r == winner).unwrap_or(0);
            }
            p.tuned = true;
        }
        let h = p
            .algos
            .get(algo.unwrap_or(p.chosen))
            .ok_or_else(|| Error::Runtime(format!("cuBLASLt: no candidate for {}", s.key())))?;
        let (pc, _rc) = c.device_ptr_mut(st);
        self.launch(p, h, s, pa, pb, pc)
    }

    /// One `cublasLtMatmul` of plan `p` with candidate `h` on device pointers that the
    /// caller keeps alive (and tracked by cudarc) until the work is done.
    fn launch(
        &self,
        p: &Plan,
        h: &sys::cublasLtMatmulHeuristicResult_t,
        s: &Shape,
        pa: u64,
        pb: u64,
        pc: u64,
    ) -> Result<()> {
        let alpha = 1.0f32;
        let beta = if s.accumulate { 1.0f32 } else { 0.0f32 };
        let st = &self.stream;
        let (pw, _rw) = self.workspace.device_ptr(st);
        // SAFETY: the plan's descriptors describe exactly these buffers (sizes checked
        // by the caller); pointers stay valid while the caller's SyncOnDrop guards live,
        // which record the reads and writes on `st` for cudarc's cross-stream tracking.
        unsafe {
            lt::matmul(
                self.handle,
                p.desc,
                (&alpha) as *const f32 as *const c_void,
                (&beta) as *const f32 as *const c_void,
                pb as *const c_void,
                p.a,
                pa as *const c_void,
                p.b,
                pc as *const c_void,
                p.c,
                pc as *mut c_void,
                p.c,
                &h.algo,
                pw as *mut c_void,
                WORKSPACE_BYTES,
                st.cu_stream() as *mut _,
            )
        }
        .map_err(|e| err(&format!("matmul {}", s.key()), e))
    }
}
