//! The harness of tests/gpu_cudnn_standin.rs (a module of that test, as nccl_check.cpp is
//! the NCCL stand-in's): cuDNN loaded for cudarc, descriptors and calls through cudarc's
//! `cudnn::result` API, buffers in either layout, and the naive CPU convolution every
//! result is checked against (f32 operands, f64 sums), written from the definition of a
//! convolution rather than from the stand-in's loops.

use std::sync::{Arc, OnceLock};

use cudarc::cudnn::{result, sys, CudnnError};
use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtr, DevicePtrMut};
use sys::cudnnConvolutionMode_t::{CUDNN_CONVOLUTION, CUDNN_CROSS_CORRELATION};
use sys::cudnnDataType_t as Dt;
use sys::cudnnMathType_t::CUDNN_FMA_MATH;
use sys::cudnnStatus_t as St;
use sys::cudnnTensorFormat_t::{CUDNN_TENSOR_NCHW, CUDNN_TENSOR_NHWC};

use crate::standin;

/// Mapped cuDNN libraries, kept for the whole process so cudarc's dlopen by soname finds them.
static CUDNN: OnceLock<Result<Vec<libloading::Library>, String>> = OnceLock::new();

/// Maps `libcudnn.so.9` from the stand-in folder or `TUNE_CUDA_LIB_DIRS` (as tune's
/// `libs::preload` does for its libraries), then asks cudarc whether it loads.
fn load_cudnn() -> Result<(), String> {
    let mapped = CUDNN.get_or_init(|| {
        let mut dirs: Vec<_> = standin::dir().into_iter().collect();
        dirs.extend(tune_probes::culibs::extra_dirs());
        let Some(p) = dirs
            .iter()
            .map(|d| d.join("libcudnn.so.9"))
            .find(|p| p.exists())
        else {
            return Ok(Vec::new()); // left to the loader's own search path
        };
        // SAFETY: loading runs only the library's initialisers (NVIDIA's or the stand-in's).
        let lib =
            unsafe { libloading::Library::new(&p) }.map_err(|e| format!("{}: {e}", p.display()))?;
        Ok(vec![lib])
    });
    mapped.as_ref().map_err(Clone::clone)?;
    // SAFETY: a dlopen and close of each name cudarc tries; no symbol called.
    if unsafe { sys::is_culib_present() } {
        Ok(())
    } else {
        Err("cuDNN (libcudnn.so.9) does not load".into())
    }
}

/// A stream on device 0 with cuDNN loadable, or `None` with the reason printed. Needs the
/// driver (or its stand-in) and cuDNN only: no NVRTC, no cuBLASLt.
pub fn setup(test: &str) -> Option<Arc<CudaStream>> {
    if let Err(e) = standin::activate() {
        panic!("{test}: {e}");
    }
    use tune::engine::cuda::libs;
    let driver = libs::require(&[libs::Lib::Driver]).map_err(|e| e.to_string());
    let why = match driver.and_then(|()| load_cudnn()) {
        Ok(()) => match CudaContext::new(0) {
            Ok(ctx) => {
                eprintln!(
                    "{test}: {}cuDNN {}",
                    standin::label(),
                    result::get_version()
                );
                return Some(ctx.new_stream().unwrap());
            }
            Err(e) => format!("no GPU 0: {e}"),
        },
        Err(why) => why,
    };
    if std::env::var("TUNE_REQUIRE_GPU").as_deref() == Ok("1") {
        panic!("{test}: TUNE_REQUIRE_GPU=1 but {why}");
    }
    eprintln!("skipping {test}: {why}");
    None
}

/// A cuDNN handle on one stream.
pub struct Dnn {
    pub h: sys::cudnnHandle_t,
    pub stream: Arc<CudaStream>,
}
impl Dnn {
    pub fn new(stream: &Arc<CudaStream>) -> Dnn {
        let h = result::create_handle().unwrap();
        // SAFETY: a live handle and a live stream of the current context.
        unsafe { result::set_stream(h, stream.cu_stream() as sys::cudaStream_t) }.unwrap();
        Dnn {
            h,
            stream: stream.clone(),
        }
    }
}
impl Drop for Dnn {
    fn drop(&mut self) {
        // SAFETY: created in `new`, destroyed once.
        unsafe { result::destroy_handle(self.h) }.unwrap();
    }
}

/// Element types: f32, and bf16 / fp16 with f32 compute.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Ty {
    F32,
    Bf16,
    F16,
}
impl Ty {
    pub fn dt(self) -> Dt {
        match self {
            Ty::F32 => Dt::CUDNN_DATA_FLOAT,
            Ty::Bf16 => Dt::CUDNN_DATA_BFLOAT16,
            Ty::F16 => Dt::CUDNN_DATA_HALF,
        }
    }
    pub fn q(self, v: f32) -> f32 {
        match self {
            Ty::F32 => v,
            Ty::Bf16 => half::bf16::from_f32(v).to_f32(),
            Ty::F16 => half::f16::from_f32(v).to_f32(),
        }
    }
    pub fn bytes(self, v: &[f32]) -> Vec<u8> {
        v.iter()
            .flat_map(|&x| match self {
                Ty::F32 => x.to_le_bytes().to_vec(),
                Ty::Bf16 => half::bf16::from_f32(x).to_le_bytes().to_vec(),
                Ty::F16 => half::f16::from_f32(x).to_le_bytes().to_vec(),
            })
            .collect()
    }
    pub fn floats(self, b: &[u8]) -> Vec<f32> {
        match self {
            Ty::F32 => b
                .chunks(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
            Ty::Bf16 => b
                .chunks(2)
                .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect(),
            Ty::F16 => b
                .chunks(2)
                .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect(),
        }
    }
}

/// One convolution: input n x c x h x w, k filters of c x r x s.
#[derive(Clone, Copy, Debug)]
pub struct Case {
    pub n: usize,
    pub c: usize,
    pub h: usize,
    pub w: usize,
    pub k: usize,
    pub r: usize,
    pub s: usize,
    pub pad: usize,
    pub stride: usize,
    pub dil: usize,
    pub flip: bool, // CUDNN_CONVOLUTION (the filter flipped) instead of cross-correlation
    pub nhwc: bool,
}
impl Case {
    pub fn p(&self) -> usize {
        (self.h + 2 * self.pad - (self.r - 1) * self.dil - 1) / self.stride + 1
    }
    pub fn q(&self) -> usize {
        (self.w + 2 * self.pad - (self.s - 1) * self.dil - 1) / self.stride + 1
    }
    pub fn xd(&self) -> [usize; 4] {
        [self.n, self.c, self.h, self.w]
    }
    pub fn wd(&self) -> [usize; 4] {
        [self.k, self.c, self.r, self.s]
    }
    pub fn yd(&self) -> [usize; 4] {
        [self.n, self.k, self.p(), self.q()]
    }
    pub fn spec(&self, ty: Ty) -> Spec {
        let i = |d: [usize; 4]| d.map(|v| v as i32);
        Spec {
            x: i(self.xd()),
            w: i(self.wd()),
            y: i(self.yd()),
            types: [ty.dt(); 3],
            compute: Dt::CUDNN_DATA_FLOAT,
            nhwc: self.nhwc,
            conv: [self.pad, self.stride, self.dil].map(|v| v as i32),
            flip: self.flip,
            math: CUDNN_FMA_MATH,
        }
    }
}

/// What the descriptors say, separately from the [`Case`], so tests can make them disagree.
#[derive(Clone, Copy, Debug)]
pub struct Spec {
    pub x: [i32; 4],
    pub w: [i32; 4],
    pub y: [i32; 4],
    pub types: [Dt; 3], // x, w, y
    pub compute: Dt,
    pub nhwc: bool,
    pub conv: [i32; 3], // pad, stride, dilation (the same along h and w)
    pub flip: bool,
    pub math: sys::cudnnMathType_t,
}

/// The descriptors of one convolution (in forward terms), destroyed on drop.
pub struct Descs {
    pub x: sys::cudnnTensorDescriptor_t,
    pub w: sys::cudnnFilterDescriptor_t,
    pub conv: sys::cudnnConvolutionDescriptor_t,
    pub y: sys::cudnnTensorDescriptor_t,
}
impl Descs {
    pub fn new(s: &Spec) -> Result<Descs, CudnnError> {
        let d = Descs {
            x: result::create_tensor_descriptor()?,
            w: result::create_filter_descriptor()?,
            conv: result::create_convolution_descriptor()?,
            y: result::create_tensor_descriptor()?,
        };
        let fmt = if s.nhwc {
            CUDNN_TENSOR_NHWC
        } else {
            CUDNN_TENSOR_NCHW
        };
        let mode = if s.flip {
            CUDNN_CONVOLUTION
        } else {
            CUDNN_CROSS_CORRELATION
        };
        let [pad, stride, dil] = s.conv;
        // SAFETY: descriptors created above and alive until `d` drops.
        unsafe {
            result::set_tensor4d_descriptor(d.x, fmt, s.types[0], s.x)?;
            result::set_filter4d_descriptor(d.w, s.types[1], fmt, s.w)?;
            result::set_tensor4d_descriptor(d.y, fmt, s.types[2], s.y)?;
            result::set_convolution2d_descriptor(
                d.conv, pad, pad, stride, stride, dil, dil, mode, s.compute,
            )?;
            result::set_convolution_math_type(d.conv, s.math)?;
        }
        Ok(d)
    }
}
impl Drop for Descs {
    fn drop(&mut self) {
        // SAFETY: each created in `new` and destroyed once here.
        unsafe {
            result::destroy_tensor_descriptor(self.x).unwrap();
            result::destroy_filter_descriptor(self.w).unwrap();
            result::destroy_convolution_descriptor(self.conv).unwrap();
            result::destroy_tensor_descriptor(self.y).unwrap();
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Dir {
    Fwd,
    Data,
    Filter,
}
pub const DIRS: [Dir; 3] = [Dir::Fwd, Dir::Data, Dir::Filter];

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Algo {
    Fwd(sys::cudnnConvolutionFwdAlgo_t),
    Data(sys::cudnnConvolutionBwdDataAlgo_t),
    Filter(sys::cudnnConvolutionBwdFilterAlgo_t),
}

/// One entry of a `cudnnGetConvolution*Algorithm_v7` answer.
#[derive(Clone, Copy, Debug)]
pub struct Listed {
    pub algo: Algo,
    pub status: St,
    pub time: f32,
    pub memory: usize,
}

pub fn list(dnn: &Dnn, d: &Descs, dir: Dir) -> Result<Vec<Listed>, CudnnError> {
    let mut n = [0i32];
    macro_rules! ask {
        ($f:path, $v:ident, $a:expr, $b:expr, $out:expr) => {{
            // SAFETY: all-zero is a valid perf struct (each enum field's 0 is a variant);
            // cuDNN writes at most 8 entries, the array's length.
            let mut out = [unsafe { std::mem::zeroed() }; 8];
            // SAFETY: live handle and descriptors; `n` and `out` outlive the call.
            unsafe {
                $f(
                    dnn.h,
                    $a,
                    $b,
                    d.conv,
                    $out,
                    8,
                    n.as_mut_ptr(),
                    out.as_mut_ptr(),
                )
            }?;
            out[..n[0] as usize]
                .iter()
                .map(|p| Listed {
                    algo: Algo::$v(p.algo),
                    status: p.status,
                    time: p.time,
                    memory: p.memory,
                })
                .collect()
        }};
    }
    Ok(match dir {
        Dir::Fwd => ask!(
            result::get_convolution_forward_algorithm,
            Fwd,
            d.x,
            d.w,
            d.y
        ),
        Dir::Data => ask!(
            result::get_convolution_backward_data_algorithm,
            Data,
            d.w,
            d.y,
            d.x
        ),
        Dir::Filter => ask!(
            result::get_convolution_backward_filter_algorithm,
            Filter,
            d.x,
            d.y,
            d.w
        ),
    })
}

pub fn ws_size(dnn: &Dnn, d: &Descs, algo: Algo) -> Result<usize, CudnnError> {
    // SAFETY: live handle and descriptors.
    unsafe {
        match algo {
            Algo::Fwd(a) => {
                result::get_convolution_forward_workspace_size(dnn.h, d.x, d.w, d.conv, d.y, a)
            }
            Algo::Data(a) => result::get_convolution_backward_data_workspace_size(
                dnn.h, d.w, d.y, d.conv, d.x, a,
            ),
            Algo::Filter(a) => result::get_convolution_backward_filter_workspace_size(
                dnn.h, d.x, d.y, d.conv, d.w, a,
            ),
        }
    }
}

/// Device data in forward terms: the direction decides which one is written.
pub struct Bufs {
    pub x: CudaSlice<u8>,
    pub w: CudaSlice<u8>,
    pub y: CudaSlice<u8>,
}

/// Queues one call: `ws_bytes` is the size claimed, `ws` the buffer passed (if any).
pub fn launch(
    dnn: &Dnn,
    d: &Descs,
    algo: Algo,
    ws: Option<&mut CudaSlice<u8>>,
    ws_bytes: usize,
    (alpha, beta): (f32, f32),
    b: &mut Bufs,
) -> Result<(), CudnnError> {
    let s = &dnn.stream;
    let (a, be) = (
        &alpha as *const f32 as *const _,
        &beta as *const f32 as *const _,
    );
    let (wsp, _gws) = match ws {
        Some(w) => {
            let (p, g) = w.device_ptr_mut(s);
            (p as *mut std::ffi::c_void, Some(g))
        }
        None => (std::ptr::null_mut(), None),
    };
    // SAFETY: live handle and descriptors; the pointers are live allocations (or ones a
    // test makes too small on purpose, which the stand-in must refuse before any access);
    // alpha and beta outlive the call; the guards order the stream after earlier writes.
    unsafe {
        match algo {
            Algo::Fwd(al) => {
                let ((x, _g1), (w, _g2), (y, _g3)) =
                    (b.x.device_ptr(s), b.w.device_ptr(s), b.y.device_ptr_mut(s));
                result::convolution_forward(
                    dnn.h, a, d.x, x as _, d.w, w as _, d.conv, al, wsp, ws_bytes, be, d.y, y as _,
                )
            }
            Algo::Data(al) => {
                let ((x, _g1), (w, _g2), (y, _g3)) =
                    (b.x.device_ptr_mut(s), b.w.device_ptr(s), b.y.device_ptr(s));
                result::convolution_backward_data(
                    dnn.h, a, d.w, w as _, d.y, y as _, d.conv, al, wsp, ws_bytes, be, d.x, x as _,
                )
            }
            Algo::Filter(al) => {
                let ((x, _g1), (w, _g2), (y, _g3)) =
                    (b.x.device_ptr(s), b.w.device_ptr_mut(s), b.y.device_ptr(s));
                result::convolution_backward_filter(
                    dnn.h, a, d.x, x as _, d.y, y as _, d.conv, al, wsp, ws_bytes, be, d.w, w as _,
                )
            }
        }
    }
}

/// Index of logical (NCHW / KCRS) element `i` in memory of format `nhwc` (NHWC / KRSC).
pub fn at(d: [usize; 4], nhwc: bool, i: usize) -> usize {
    if !nhwc {
        return i;
    }
    let (a, b, c, e) = (
        i / (d[1] * d[2] * d[3]),
        i / (d[2] * d[3]) % d[1],
        i / d[3] % d[2],
        i % d[3],
    );
    ((a * d[2] + c) * d[3] + e) * d[1] + b
}
pub fn to_mem(v: &[f32], d: [usize; 4], nhwc: bool) -> Vec<f32> {
    let mut out = vec![0.0; v.len()];
    for (i, &x) in v.iter().enumerate() {
        out[at(d, nhwc, i)] = x;
    }
    out
}
pub fn from_mem(v: &[f32], d: [usize; 4], nhwc: bool) -> Vec<f32> {
    (0..v.len()).map(|i| v[at(d, nhwc, i)]).collect()
}

/// Values in [-1, 1) from a fixed sequence, representable in `ty`.
pub fn values(n: usize, seed: u64, ty: Ty) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ty.q((s >> 40) as f32 / (1u64 << 23) as f32 - 1.0)
        })
        .collect()
}

/// The naive convolution: (the three directions' results, each with the sum of the
/// magnitudes of its terms), logical order. Written as scatters over every (output
/// position, tap) pair, where the stand-in gathers.
pub fn reference(cs: &Case, x: &[f32], w: &[f32], dy: &[f32]) -> [Vec<(f64, f64)>; 3] {
    let (p, q) = (cs.p(), cs.q());
    let mut y = vec![(0.0, 0.0); cs.n * cs.k * p * q];
    let mut dx = vec![(0.0, 0.0); x.len()];
    let mut dw = vec![(0.0, 0.0); w.len()];
    let add = |t: &mut (f64, f64), v: f64| {
        t.0 += v;
        t.1 += v.abs();
    };
    for n in 0..cs.n {
        for k in 0..cs.k {
            for (pi, qi) in (0..p).flat_map(|a| (0..q).map(move |b| (a, b))) {
                let yi = ((n * cs.k + k) * p + pi) * q + qi;
                for c in 0..cs.c {
                    for (r, s) in (0..cs.r).flat_map(|a| (0..cs.s).map(move |b| (a, b))) {
                        let h = (pi * cs.stride + r * cs.dil) as isize - cs.pad as isize;
                        let ww = (qi * cs.stride + s * cs.dil) as isize - cs.pad as isize;
                        if h < 0 || ww < 0 || h >= cs.h as isize || ww >= cs.w as isize {
                            continue;
                        }
                        let xi = ((n * cs.c + c) * cs.h + h as usize) * cs.w + ww as usize;
                        let (fr, fs) = if cs.flip {
                            (cs.r - 1 - r, cs.s - 1 - s)
                        } else {
                            (r, s)
                        };
                        let wi = ((k * cs.c + c) * cs.r + fr) * cs.s + fs;
                        add(&mut y[yi], x[xi] as f64 * w[wi] as f64);
                        add(&mut dx[xi], dy[yi] as f64 * w[wi] as f64);
                        add(&mut dw[wi], dy[yi] as f64 * x[xi] as f64);
                    }
                }
            }
        }
    }
    [y, dx, dw]
}

/// How far a result may be from the f64 reference: `scale` is the sum of its terms'
/// magnitudes (what f32 summation error grows with).
pub fn tolerance(ty: Ty, tf32: bool, want: f64, scale: f64) -> f64 {
    let sum = if tf32 { 2e-3 } else { 1e-5 } * scale + 1e-6;
    match ty {
        Ty::F32 => sum,
        // The one rounding on store: half an ulp is at most 2^-8 of the value in bf16 and
        // 2^-11 in fp16 (allowed twice that).
        Ty::Bf16 => sum + want.abs() / 256.0,
        Ty::F16 => sum + want.abs() / 1024.0,
    }
}

/// The bound for any algorithm on real cuDNN: as [`tolerance`], plus, for a half output, one ulp
/// of the half type per unit of `scale` (the magnitude of what was summed and blended),
/// since cuDNN may round before the end: the algorithms it documents as non-deterministic
/// add partial sums into the output with atomics, and a blend with beta != 0 may round
/// alpha * conv to the half type before adding beta * prior. Seen on an H200 (cuDNN
/// 9.14): BWD_DATA_ALGO_0 gave the farther of the two neighbouring bf16 values (0.33398
/// for 0.33259) and was five fp16 ulps off (0.46436 for 0.46555); BWD_DATA_ALGO_1 in fp16
/// with alpha/beta (0.5, 1.0) six fp16 ulps (0.020752 for 0.020848), where the blend
/// cancels most of its terms. A wrong convolution is off by the order of `scale` itself.
pub fn cudnn_tolerance(ty: Ty, tf32: bool, want: f64, scale: f64) -> f64 {
    let early_rounding = match ty {
        Ty::F32 => 0.0,
        Ty::Bf16 => scale / 128.0,
        Ty::F16 => scale / 1024.0,
    };
    tolerance(ty, tf32, want, scale) + early_rounding
}

/// Runs `dir` of `cs` with every algorithm the library lists as runnable and checks each
/// against the reference; returns how many ran.
pub fn check(
    dnn: &Dnn,
    cs: &Case,
    ty: Ty,
    math: sys::cudnnMathType_t,
    dir: Dir,
    ab: (f32, f32),
) -> usize {
    let mut spec = cs.spec(ty);
    spec.math = math;
    let d = Descs::new(&spec).unwrap();
    let (xd, wd, yd) = (cs.xd(), cs.wd(), cs.yd());
    let len = |d: [usize; 4]| d.iter().product::<usize>();
    let x = values(len(xd), 1, ty);
    let w = values(len(wd), 2, ty);
    let dy = values(len(yd), 3, ty);
    let refs = reference(cs, &x, &w, &dy);
    let (shape, out_ref, prior_seed) = match dir {
        Dir::Fwd => (yd, &refs[0], 4),
        Dir::Data => (xd, &refs[1], 5),
        Dir::Filter => (wd, &refs[2], 6),
    };
    // beta = 0: the output holds NaN, which must not show; else values to blend with.
    let prior = if ab.1 == 0.0 {
        vec![f32::NAN; len(shape)]
    } else {
        values(len(shape), prior_seed, ty)
    };
    let s = &dnn.stream;
    let up = |v: &[f32], d: [usize; 4]| s.clone_htod(&ty.bytes(&to_mem(v, d, cs.nhwc))).unwrap();
    let tf32 = ty == Ty::F32 && math != CUDNN_FMA_MATH;
    let mut ran = 0;
    let mut first: Option<Vec<f32>> = None;
    for l in list(dnn, &d, dir).unwrap() {
        if l.status != St::CUDNN_STATUS_SUCCESS {
            continue;
        }
        let mut b = match dir {
            Dir::Fwd => Bufs {
                x: up(&x, xd),
                w: up(&w, wd),
                y: up(&prior, yd),
            },
            Dir::Data => Bufs {
                x: up(&prior, xd),
                w: up(&w, wd),
                y: up(&dy, yd),
            },
            Dir::Filter => Bufs {
                x: up(&x, xd),
                w: up(&prior, wd),
                y: up(&dy, yd),
            },
        };
        let need = ws_size(dnn, &d, l.algo).unwrap();
        assert_eq!(
            need, l.memory,
            "{:?}: listed workspace vs its query",
            l.algo
        );
        let mut ws = (need > 0).then(|| s.alloc_zeros::<u8>(need).unwrap());
        launch(dnn, &d, l.algo, ws.as_mut(), need, ab, &mut b).unwrap();
        let out = match dir {
            Dir::Fwd => &b.y,
            Dir::Data => &b.x,
            Dir::Filter => &b.w,
        };
        let got = from_mem(&ty.floats(&s.clone_dtoh(out).unwrap()), shape, cs.nhwc);
        for (i, (&g, &(v, scale))) in got.iter().zip(out_ref).enumerate() {
            let p = if ab.1 == 0.0 { 0.0 } else { prior[i] as f64 };
            let want = ab.0 as f64 * v + ab.1 as f64 * p;
            let tol = cudnn_tolerance(
                ty,
                tf32,
                want,
                scale * ab.0.abs() as f64 + (ab.1 as f64 * p).abs(),
            );
            assert!(
                (g as f64 - want).abs() <= tol,
                "{dir:?} {:?} {ty:?} {cs:?} alpha/beta {ab:?}: [{i}] = {g}, want {want} (tolerance {tol})",
                l.algo
            );
        }
        // Algorithms may sum in different orders; each is held to the reference above,
        // and to the first one here.
        if let Some(f) = &first {
            for (i, (a, b)) in got.iter().zip(f).enumerate() {
                let tol =
                    cudnn_tolerance(ty, tf32, *b as f64, out_ref[i].1 * ab.0.abs() as f64 + 1.0);
                assert!(
                    ((a - b) as f64).abs() <= tol,
                    "{dir:?} {:?} vs the first algorithm at [{i}]: {a} vs {b}",
                    l.algo
                );
            }
        } else {
            first = Some(got);
        }
        ran += 1;
    }
    ran
}

#[allow(clippy::too_many_arguments)]
const fn case(
    n: usize,
    c: usize,
    h: usize,
    w: usize,
    k: usize,
    r: usize,
    s: usize,
    pad: usize,
    stride: usize,
    dil: usize,
    flip: bool,
) -> Case {
    Case {
        n,
        c,
        h,
        w,
        k,
        r,
        s,
        pad,
        stride,
        dil,
        flip,
        nhwc: false,
    }
}

/// The geometries every direction is checked on (NCHW; [`cases`] adds NHWC). Heights,
/// widths and filters are not all square, so a transposed index shows.
pub const CASES: [Case; 6] = [
    case(2, 3, 7, 6, 4, 3, 3, 1, 1, 1, false), // 3x3, padding 1
    case(2, 3, 7, 7, 5, 3, 3, 1, 2, 1, false), // 3x3, padding 1, stride 2
    case(2, 4, 5, 5, 3, 1, 1, 0, 1, 1, false), // 1x1
    case(1, 3, 6, 7, 2, 1, 1, 0, 2, 1, false), // 1x1, stride 2
    case(1, 2, 7, 7, 3, 3, 3, 2, 1, 2, true),  // dilation 2, CUDNN_CONVOLUTION
    case(2, 3, 6, 5, 2, 3, 2, 1, 2, 1, true),  // 3x2 filter, stride 2, CUDNN_CONVOLUTION
];

/// [`CASES`] in both layouts.
pub fn cases() -> Vec<Case> {
    CASES
        .iter()
        .flat_map(|b| [*b, Case { nhwc: true, ..*b }])
        .collect()
}

pub const ALPHA_BETA: [(f32, f32); 2] = [(1.0, 0.0), (0.5, 1.0)];

pub fn algo_id(a: Algo) -> u32 {
    match a {
        Algo::Fwd(a) => a as u32,
        Algo::Data(a) => a as u32,
        Algo::Filter(a) => a as u32,
    }
}

/// Fresh buffers for `cs` in f32 (x, w, y in forward terms), NaN-filled outputs.
pub fn bufs(stream: &Arc<CudaStream>, cs: &Case) -> Bufs {
    let n = |d: [usize; 4]| d.iter().product::<usize>();
    let up = |v: Vec<f32>| stream.clone_htod(&Ty::F32.bytes(&v)).unwrap();
    Bufs {
        x: up(values(n(cs.xd()), 1, Ty::F32)),
        w: up(values(n(cs.wd()), 2, Ty::F32)),
        y: up(values(n(cs.yd()), 3, Ty::F32)),
    }
}
