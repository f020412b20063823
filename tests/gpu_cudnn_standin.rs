//! The cuDNN stand-in (tests/standin/cudnn.cpp, `libcudnn.so.9`) driven through cudarc 0.19's
//! own cuDNN API, as tune's conv path will drive it, against a naive CPU convolution
//! written here (f32 operands, f64 sums): forward, backward data and backward filter, NCHW
//! and NHWC, 3x3 and 1x1 and 3x2 filters, stride 2, padding, dilation, both convolution
//! modes, alpha and beta (beta = 0 over NaN, beta = 1 accumulating), f32 (FMA and TF32
//! math), bf16 and fp16 (f32 compute, rounded once), every listed algorithm, and the
//! refusals: too small a workspace, descriptors that disagree, buffers out of range.
//! Runs on the stand-in under `TUNE_CUDA_STANDIN=1` and on a GPU with cuDNN (the checks
//! of the stand-in's own strictness only on the stand-in); skips with the reason
//! elsewhere, and fails under `TUNE_REQUIRE_GPU=1`.

use cudarc::cudnn::{result, sys, CudnnError};
use cudarc::driver::{CudaSlice, DevicePtr};
use sys::cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION;
use sys::cudnnDataType_t as Dt;
use sys::cudnnMathType_t::{CUDNN_DEFAULT_MATH, CUDNN_FMA_MATH};
use sys::cudnnStatus_t as St;
use sys::cudnnTensorFormat_t::CUDNN_TENSOR_NHWC;

#[path = "common/standin.rs"]
mod standin;

#[path = "standin/cudnn_check.rs"]
mod check;

use check::*;

/// Every cuDNN entry point tune's conv path calls (cudarc resolves each by name on first
/// use and panics if one is missing).
const SYMBOLS: [&str; 28] = [
    "cudnnGetVersion",
    "cudnnGetErrorString",
    "cudnnCreate",
    "cudnnDestroy",
    "cudnnSetStream",
    "cudnnGetStream",
    "cudnnCreateTensorDescriptor",
    "cudnnSetTensor4dDescriptor",
    "cudnnSetTensor4dDescriptorEx",
    "cudnnDestroyTensorDescriptor",
    "cudnnCreateFilterDescriptor",
    "cudnnSetFilter4dDescriptor",
    "cudnnDestroyFilterDescriptor",
    "cudnnCreateConvolutionDescriptor",
    "cudnnSetConvolution2dDescriptor",
    "cudnnSetConvolutionMathType",
    "cudnnSetConvolutionGroupCount",
    "cudnnDestroyConvolutionDescriptor",
    "cudnnGetConvolution2dForwardOutputDim",
    "cudnnGetConvolutionForwardAlgorithm_v7",
    "cudnnGetConvolutionBackwardDataAlgorithm_v7",
    "cudnnGetConvolutionBackwardFilterAlgorithm_v7",
    "cudnnGetConvolutionForwardWorkspaceSize",
    "cudnnGetConvolutionBackwardDataWorkspaceSize",
    "cudnnGetConvolutionBackwardFilterWorkspaceSize",
    "cudnnConvolutionForward",
    "cudnnConvolutionBackwardData",
    "cudnnConvolutionBackwardFilter",
];

#[test]
fn every_entry_point_is_exported_and_the_version_is_9() {
    let test = "every_entry_point_is_exported_and_the_version_is_9";
    let Some(_stream) = setup(test) else { return };
    // SAFETY: the library `setup` mapped, found again by its soname; nothing runs.
    let lib = unsafe { libloading::Library::new("libcudnn.so.9") }.unwrap();
    for name in SYMBOLS {
        // SAFETY: only the symbol's address is looked up.
        let f = unsafe { lib.get::<unsafe extern "C" fn()>(name.as_bytes()) };
        assert!(f.is_ok(), "{name} is missing: {:?}", f.err());
    }
    let v = result::get_version();
    assert_eq!(
        v / 10000,
        9,
        "cudnnGetVersion {v}: major*10000 + minor*100 + patch"
    );
    // SAFETY: cuDNN returns a static NUL-terminated string for any status.
    let name =
        unsafe { std::ffi::CStr::from_ptr(sys::cudnnGetErrorString(St::CUDNN_STATUS_BAD_PARAM)) };
    assert_eq!(name.to_str().unwrap(), "CUDNN_STATUS_BAD_PARAM");
}

fn every_direction(test: &str, ty: Ty, math: sys::cudnnMathType_t) {
    let Some(stream) = setup(test) else { return };
    let dnn = Dnn::new(&stream);
    let mut runs = 0;
    for cs in cases() {
        for dir in DIRS {
            for ab in ALPHA_BETA {
                let n = check(&dnn, &cs, ty, math, dir, ab);
                assert!(
                    n >= 2,
                    "{dir:?} {cs:?}: only {n} runnable algorithms listed"
                );
                runs += n;
            }
        }
    }
    eprintln!(
        "{test}: {}{runs} runs match the reference",
        standin::label()
    );
}

#[test]
fn f32_all_directions_layouts_algorithms_match_the_reference() {
    every_direction(
        "f32_all_directions_layouts_algorithms_match_the_reference",
        Ty::F32,
        CUDNN_FMA_MATH,
    );
}

#[test]
fn bf16_all_directions_match_the_reference() {
    every_direction(
        "bf16_all_directions_match_the_reference",
        Ty::Bf16,
        CUDNN_DEFAULT_MATH,
    );
}

#[test]
fn fp16_all_directions_match_the_reference() {
    every_direction(
        "fp16_all_directions_match_the_reference",
        Ty::F16,
        CUDNN_DEFAULT_MATH,
    );
}

/// Under CUDNN_DEFAULT_MATH, f32 data may go through TF32 tensor cores (cuDNN permits it on
/// Ampere and later): within TF32's tolerance, and on the stand-in visibly not f32's.
#[test]
fn f32_default_math_is_tf32_fma_math_is_not() {
    let test = "f32_default_math_is_tf32_fma_math_is_not";
    let Some(stream) = setup(test) else { return };
    let dnn = Dnn::new(&stream);
    let cs = CASES[0];
    for dir in DIRS {
        check(&dnn, &cs, Ty::F32, CUDNN_DEFAULT_MATH, dir, (1.0, 0.0));
    }
    if !standin::requested() {
        return;
    }
    // The same forward under both math types: TF32 rounds the operands, so results differ.
    let run = |math| {
        let mut spec = cs.spec(Ty::F32);
        spec.math = math;
        let d = Descs::new(&spec).unwrap();
        let up = |v: Vec<f32>| stream.clone_htod(&Ty::F32.bytes(&v)).unwrap();
        let n = |d: [usize; 4]| d.iter().product::<usize>();
        let mut b = Bufs {
            x: up(values(n(cs.xd()), 1, Ty::F32)),
            w: up(values(n(cs.wd()), 2, Ty::F32)),
            y: up(vec![0.0; n(cs.yd())]),
        };
        let algo =
            Algo::Fwd(sys::cudnnConvolutionFwdAlgo_t::CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM);
        launch(&dnn, &d, algo, None, 0, (1.0, 0.0), &mut b).unwrap();
        Ty::F32.floats(&stream.clone_dtoh(&b.y).unwrap())
    };
    let (tf32, fma) = (run(CUDNN_DEFAULT_MATH), run(CUDNN_FMA_MATH));
    let differ = tf32.iter().zip(&fma).filter(|(a, b)| a != b).count();
    assert!(
        differ > tf32.len() / 2,
        "only {differ} of {} differ",
        tf32.len()
    );
}

/// Half types are summed in f32 and rounded once, to nearest even: one 1x1 convolution whose
/// exact f32 sums sit on or near half-ulp boundaries of the element type.
#[test]
fn half_types_round_once_to_nearest_even() {
    let test = "half_types_round_once_to_nearest_even";
    let Some(stream) = setup(test) else { return };
    let dnn = Dnn::new(&stream);
    for (ty, m) in [(Ty::Bf16, 8), (Ty::F16, 11)] {
        let e = |k: i32| 2f32.powi(-k);
        let (lo, hi, tiny) = (1.0 - e(m), 1.0 + e(m - 1), e(m));
        // x's 5 channels; each filter picks some. Products of lo and hi are exact in f32 and
        // each rounds down alone, but three of them sum past the half ulp: rounded once,
        // 3 + 2 ulp(1); rounded per product, 3. 1 + tiny is a tie (to 1, even); 1 + 1.5 ulp
        // is a tie (to 1 + 2 ulp, even).
        let x = [lo, lo, lo, 1.0, tiny];
        let w = [
            [hi, hi, hi, 0.0, 0.0],
            [0.0, 0.0, 0.0, 1.0, 1.0],
            [0.0, 0.0, 0.0, hi, 1.0],
            [0.0, 0.0, 0.0, -1.0, -1.0],
        ];
        let want = [3.0 + e(m - 2), 1.0, 1.0 + e(m - 2), -1.0];
        let cs = Case {
            n: 1,
            c: 5,
            h: 1,
            w: 1,
            k: 4,
            r: 1,
            s: 1,
            pad: 0,
            stride: 1,
            dil: 1,
            flip: false,
            nhwc: false,
        };
        let d = Descs::new(&cs.spec(ty)).unwrap();
        let mut b = Bufs {
            x: stream.clone_htod(&ty.bytes(&x)).unwrap(),
            w: stream.clone_htod(&ty.bytes(&w.concat())).unwrap(),
            y: stream.clone_htod(&ty.bytes(&[f32::NAN; 4])).unwrap(),
        };
        for l in list(&dnn, &d, Dir::Fwd)
            .unwrap()
            .iter()
            // The GEMM-like algorithms (0, 1, 2) sum exactly here; a GPU's FFT or Winograd
            // ones would not.
            .filter(|l| l.status == St::CUDNN_STATUS_SUCCESS && algo_id(l.algo) <= 2)
        {
            let mut ws = (l.memory > 0).then(|| stream.alloc_zeros::<u8>(l.memory).unwrap());
            launch(&dnn, &d, l.algo, ws.as_mut(), l.memory, (1.0, 0.0), &mut b).unwrap();
            let got = ty.floats(&stream.clone_dtoh(&b.y).unwrap());
            assert_eq!(got, want, "{ty:?} {:?}", l.algo);
        }
    }
}

/// The `_v7` lists: runnable algorithms first, fastest first, each with its workspace as
/// the size query says; on the stand-in, exactly the algorithms it documents.
#[test]
fn algorithm_lists_are_sorted_with_their_workspaces() {
    let test = "algorithm_lists_are_sorted_with_their_workspaces";
    let Some(stream) = setup(test) else { return };
    let dnn = Dnn::new(&stream);
    let cs = CASES[1];
    let d = Descs::new(&cs.spec(Ty::F32)).unwrap();
    let (crs, pq) = (cs.c * cs.r * cs.s, cs.p() * cs.q());
    let (col, taps) = (crs * pq * 4, crs * 24);
    for (dir, count, want) in [
        (Dir::Fwd, 8, vec![(1, taps), (0, 0), (2, col)]),
        (Dir::Data, 6, vec![(1, col), (0, 0)]),
        (Dir::Filter, 7, vec![(1, col), (3, taps), (0, 0)]),
    ] {
        let l = list(&dnn, &d, dir).unwrap();
        let ok: Vec<_> = l
            .iter()
            .take_while(|e| e.status == St::CUDNN_STATUS_SUCCESS)
            .collect();
        assert!(
            l[ok.len()..]
                .iter()
                .all(|e| e.status != St::CUDNN_STATUS_SUCCESS),
            "{dir:?}: {l:?}"
        );
        assert!(
            ok.windows(2).all(|p| p[0].time <= p[1].time),
            "{dir:?}: {l:?}"
        );
        for e in &ok {
            assert_eq!(ws_size(&dnn, &d, e.algo).unwrap(), e.memory, "{:?}", e.algo);
        }
        eprintln!("{test}: {}{dir:?}: {ok:?}", standin::label());
        if standin::requested() {
            assert_eq!(l.len(), count, "{dir:?}: every enumerant is listed");
            let got: Vec<_> = ok.iter().map(|e| (algo_id(e.algo), e.memory)).collect();
            assert_eq!(got, want, "{dir:?}");
            // One not offered: its workspace query is NOT_SUPPORTED.
            let e = l[ok.len()];
            assert_eq!(
                ws_size(&dnn, &d, e.algo),
                Err(CudnnError(St::CUDNN_STATUS_NOT_SUPPORTED))
            );
        }
    }
}

/// On the stand-in, a workspace size smaller than the algorithm's need is refused, for
/// every algorithm that has one, as are a size claimed beyond the buffer and no buffer at
/// all. On a GPU, what cuDNN answers to the short size is printed, not held to: the
/// stand-in is meant to be at least as strict.
#[test]
fn too_small_a_workspace_is_refused() {
    let test = "too_small_a_workspace_is_refused";
    let Some(stream) = setup(test) else { return };
    let dnn = Dnn::new(&stream);
    let cs = CASES[0];
    let d = Descs::new(&cs.spec(Ty::F32)).unwrap();
    let mut b = bufs(&stream, &cs);
    let mut checked = 0;
    for dir in DIRS {
        for l in list(&dnn, &d, dir)
            .unwrap()
            .iter()
            .filter(|l| l.status == St::CUDNN_STATUS_SUCCESS && l.memory > 0)
        {
            // The size passed is one byte short (the buffer itself is large enough, so
            // only the size check can refuse it).
            let mut full = stream.alloc_zeros::<u8>(l.memory).unwrap();
            let r = launch(
                &dnn,
                &d,
                l.algo,
                Some(&mut full),
                l.memory - 1,
                (1.0, 0.0),
                &mut b,
            );
            if !standin::requested() {
                eprintln!(
                    "{test}: {:?} told {} of {} workspace bytes: {r:?}",
                    l.algo,
                    l.memory - 1,
                    l.memory
                );
                continue;
            }
            assert_eq!(
                r,
                Err(CudnnError(St::CUDNN_STATUS_BAD_PARAM)),
                "{:?} size",
                l.algo
            );
            // The size is right but the buffer one byte short: the stand-in's range check.
            let mut short = stream.alloc_zeros::<u8>(l.memory - 1).unwrap();
            let r = launch(
                &dnn,
                &d,
                l.algo,
                Some(&mut short),
                l.memory,
                (1.0, 0.0),
                &mut b,
            );
            assert_eq!(
                r,
                Err(CudnnError(St::CUDNN_STATUS_BAD_PARAM)),
                "{:?} claimed",
                l.algo
            );
            let r = launch(&dnn, &d, l.algo, None, l.memory, (1.0, 0.0), &mut b);
            assert_eq!(
                r,
                Err(CudnnError(St::CUDNN_STATUS_BAD_PARAM)),
                "{:?} null",
                l.algo
            );
            checked += 1;
        }
    }
    stream.synchronize().unwrap();
    assert!(!standin::requested() || checked >= 4, "{checked}");
}

/// Descriptors that do not describe one convolution are refused, by the queries and by the
/// calls alike.
#[test]
fn mismatched_descriptors_are_refused() {
    let test = "mismatched_descriptors_are_refused";
    let Some(stream) = setup(test) else { return };
    let dnn = Dnn::new(&stream);
    let cs = CASES[1];
    let good = cs.spec(Ty::F32);
    let d = Descs::new(&good).unwrap();
    let mut dims = [0i32; 4];
    // SAFETY: live descriptors; four ints to write.
    unsafe {
        let [n, c, h, w] = dims.each_mut().map(|v| v as *mut i32);
        sys::cudnnGetConvolution2dForwardOutputDim(d.conv, d.x, d.w, n, c, h, w)
            .result()
            .unwrap();
    }
    assert_eq!(dims, good.y, "cudnnGetConvolution2dForwardOutputDim");
    let bad_param = Err(CudnnError(St::CUDNN_STATUS_BAD_PARAM));
    let mut wrong = Vec::new();
    let mut s = good;
    s.w[1] += 1; // the filter's channels are not the input's
    wrong.push(("filter channels", s, bad_param));
    let mut s = good;
    s.y[2] += 1; // y's height is not the conv's output height
    wrong.push(("y height", s, bad_param));
    let mut s = good;
    s.y[1] += 1; // y's channels are not the filter count
    wrong.push(("y channels", s, bad_param));
    let mut s = good;
    s.y[0] += 1; // y's batch is not x's
    wrong.push(("y batch", s, bad_param));
    let mut s = good;
    s.types[1] = Dt::CUDNN_DATA_HALF; // mixed data types
    wrong.push(("mixed types", s, bad_param));
    if standin::requested() {
        let mut s = good;
        s.compute = Dt::CUDNN_DATA_HALF; // TRUE_HALF: cuDNN's, not the stand-in's
        s.types = [Dt::CUDNN_DATA_HALF; 3];
        wrong.push((
            "half compute",
            s,
            Err(CudnnError(St::CUDNN_STATUS_NOT_SUPPORTED)),
        ));
    }
    for (what, spec, want) in wrong {
        let d = Descs::new(&spec).unwrap();
        let mut b = bufs(&stream, &cs);
        for dir in DIRS {
            let l = list(&dnn, &d, dir);
            let algo = list(&dnn, &Descs::new(&good).unwrap(), dir).unwrap()[0].algo;
            let w = ws_size(&dnn, &d, algo);
            let mut ws = stream.alloc_zeros::<u8>(1 << 20).unwrap();
            let r = launch(&dnn, &d, algo, Some(&mut ws), 1 << 20, (1.0, 0.0), &mut b);
            eprintln!(
                "{test}: {what} {dir:?}: list {:?}, workspace {w:?}, run {r:?}",
                l.as_ref().map(|v| v[0].status)
            );
            assert!(r.is_err() && w.is_err(), "{what} {dir:?}");
            if !standin::requested() {
                continue;
            }
            assert_eq!(r, want, "{what} {dir:?}");
            assert_eq!(w, Err(want.unwrap_err()), "{what} {dir:?}");
            match l {
                // A configuration the stand-in does not run: listed, every entry refused.
                Ok(l) => assert!(
                    l.iter().all(|e| e.status == St::CUDNN_STATUS_NOT_SUPPORTED),
                    "{what}"
                ),
                Err(e) => assert_eq!(Err(e), want, "{what} {dir:?}"),
            }
        }
    }
    if standin::requested() {
        // SAFETY: a live descriptor.
        let r = unsafe { result::set_convolution_group_count(d.conv, 2) };
        assert_eq!(r, Err(CudnnError(St::CUDNN_STATUS_NOT_SUPPORTED)), "groups");
    }
}

/// The stand-in's own checks: a buffer past its allocation, or an output over an input, is
/// refused before anything runs; nothing is written.
#[test]
fn standin_refuses_out_of_range_and_overlapping_buffers() {
    let test = "standin_refuses_out_of_range_and_overlapping_buffers";
    if !standin::requested() {
        eprintln!(
            "skipping {test}: checks of the stand-in itself (TUNE_CUDA_STANDIN=1 is not set)"
        );
        return;
    }
    let Some(stream) = setup(test) else { return };
    let dnn = Dnn::new(&stream);
    let cs = CASES[2]; // 1x1: x is longer than y
    let d = Descs::new(&cs.spec(Ty::F32)).unwrap();
    let bad = Err(CudnnError(St::CUDNN_STATUS_BAD_PARAM));
    let fwd = Algo::Fwd(sys::cudnnConvolutionFwdAlgo_t::CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM);
    let data = Algo::Data(sys::cudnnConvolutionBwdDataAlgo_t::CUDNN_CONVOLUTION_BWD_DATA_ALGO_0);
    let filter =
        Algo::Filter(sys::cudnnConvolutionBwdFilterAlgo_t::CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0);
    for (which, algo) in [(0, fwd), (1, data), (2, filter), (3, fwd), (4, filter)] {
        let mut b = bufs(&stream, &cs);
        let short = |v: &CudaSlice<u8>| stream.clone_htod(&vec![0u8; v.len() - 4]).unwrap();
        match which {
            0 => b.y = short(&b.y),
            1 => b.x = short(&b.x),
            2 => b.w = short(&b.w),
            3 => b.x = short(&b.x), // an input too short
            _ => b.y = short(&b.y),
        }
        let before = [&b.x, &b.w, &b.y].map(|v| stream.clone_dtoh(v).unwrap());
        assert_eq!(
            launch(&dnn, &d, algo, None, 0, (1.0, 0.0), &mut b),
            bad,
            "case {which}"
        );
        let after = [&b.x, &b.w, &b.y].map(|v| stream.clone_dtoh(v).unwrap());
        assert_eq!(before, after, "case {which}: something was written");
    }
    // In place: y over x (x is the longer here, so y lies inside x's allocation and only
    // the overlap check can refuse it).
    let b = bufs(&stream, &cs);
    let x_ptr = {
        let (p, _g) = b.x.device_ptr(&stream);
        p
    };
    let alpha_beta = [1.0f32, 0.0];
    // SAFETY: live handle, descriptors and buffers; y is x's own memory on purpose, which
    // the stand-in must refuse before touching anything.
    let r = unsafe {
        let (w, _g) = b.w.device_ptr(&stream);
        result::convolution_forward(
            dnn.h,
            &alpha_beta[0] as *const f32 as _,
            d.x,
            x_ptr as _,
            d.w,
            w as _,
            d.conv,
            sys::cudnnConvolutionFwdAlgo_t::CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
            std::ptr::null_mut(),
            0,
            &alpha_beta[1] as *const f32 as _,
            d.y,
            x_ptr as _,
        )
    };
    assert_eq!(r, bad, "in place");
    stream.synchronize().unwrap();
}

/// The work runs on the handle's stream, after what was queued there before it (the
/// uploads, which the stand-in slows down) and before what follows: two forwards, the
/// second accumulating (beta = 1), give twice one, with no synchronisation in between.
#[test]
fn work_runs_in_order_on_the_handles_stream() {
    let test = "work_runs_in_order_on_the_handles_stream";
    let Some(stream) = setup(test) else { return };
    let dnn = Dnn::new(&stream);
    let mut got: sys::cudaStream_t = std::ptr::null_mut();
    // SAFETY: a live handle; one pointer to write.
    unsafe { sys::cudnnGetStream(dnn.h, &mut got) }
        .result()
        .unwrap();
    assert_eq!(got as usize, stream.cu_stream() as usize, "cudnnGetStream");
    let cs = CASES[0];
    let d = Descs::new(&cs.spec(Ty::F32)).unwrap();
    let algo = Algo::Fwd(sys::cudnnConvolutionFwdAlgo_t::CUDNN_CONVOLUTION_FWD_ALGO_GEMM);
    let need = ws_size(&dnn, &d, algo).unwrap();
    let mut ws = stream.alloc_zeros::<u8>(need.max(1)).unwrap();
    let mut b = bufs(&stream, &cs);
    launch(&dnn, &d, algo, Some(&mut ws), need, (1.0, 0.0), &mut b).unwrap();
    let once = stream.clone_dtoh(&b.y).unwrap();
    let mut b2 = bufs(&stream, &cs);
    launch(&dnn, &d, algo, Some(&mut ws), need, (1.0, 0.0), &mut b2).unwrap();
    launch(&dnn, &d, algo, Some(&mut ws), need, (1.0, 1.0), &mut b2).unwrap();
    let twice = Ty::F32.floats(&stream.clone_dtoh(&b2.y).unwrap());
    for (i, (t, o)) in twice.iter().zip(Ty::F32.floats(&once)).enumerate() {
        assert_eq!(*t, 2.0 * o, "[{i}]");
    }
}

/// cudarc's safe types (`Cudnn`, `ConvForward`, `ConvBackwardData`, `ConvBackwardFilter`):
/// pick the first algorithm, size its workspace, run; bf16 data with f32 compute.
#[test]
fn cudarc_safe_api_runs_all_three_directions() {
    use cudarc::cudnn::{ConvBackwardData, ConvBackwardFilter, ConvForward, Cudnn};
    let test = "cudarc_safe_api_runs_all_three_directions";
    let Some(stream) = setup(test) else { return };
    let cudnn = Cudnn::new(stream.clone()).unwrap();
    let cs = Case {
        nhwc: true,
        ..CASES[1]
    };
    let bf = |v: Vec<f32>| v.into_iter().map(half::bf16::from_f32).collect::<Vec<_>>();
    let n = |d: [usize; 4]| d.iter().product::<usize>();
    let (x, w, dy) = (
        values(n(cs.xd()), 1, Ty::Bf16),
        values(n(cs.wd()), 2, Ty::Bf16),
        values(n(cs.yd()), 3, Ty::Bf16),
    );
    let refs = reference(&cs, &x, &w, &dy);
    let i = |d: [usize; 4]| d.map(|v| v as i32);
    let mut conv = cudnn
        .create_conv2d::<f32>([1, 1], [2, 2], [1, 1], CUDNN_CROSS_CORRELATION)
        .unwrap();
    conv.set_math_type(CUDNN_DEFAULT_MATH).unwrap();
    let xd = cudnn
        .create_4d_tensor::<half::bf16>(CUDNN_TENSOR_NHWC, i(cs.xd()))
        .unwrap();
    let wd = cudnn
        .create_4d_filter::<half::bf16>(CUDNN_TENSOR_NHWC, i(cs.wd()))
        .unwrap();
    let yd = cudnn
        .create_4d_tensor::<half::bf16>(CUDNN_TENSOR_NHWC, i(cs.yd()))
        .unwrap();
    let up = |v: &[f32], d| stream.clone_htod(&bf(to_mem(v, d, true))).unwrap();
    let (dx_, w_, dy_) = (up(&x, cs.xd()), up(&w, cs.wd()), up(&dy, cs.yd()));
    let mut out_y = stream.alloc_zeros::<half::bf16>(n(cs.yd())).unwrap();
    let mut out_dx = stream.alloc_zeros::<half::bf16>(n(cs.xd())).unwrap();
    let mut out_dw = stream.alloc_zeros::<half::bf16>(n(cs.wd())).unwrap();
    let one = half::bf16::ONE;
    let zero = half::bf16::ZERO;
    let ws = |bytes: usize| stream.alloc_zeros::<u8>(bytes.max(1)).unwrap();
    let f = ConvForward {
        conv: &conv,
        x: &xd,
        w: &wd,
        y: &yd,
    };
    let a = f.pick_algorithm().unwrap();
    // SAFETY: buffers match the descriptors' types and sizes.
    unsafe {
        f.launch(
            a,
            Some(&mut ws(f.get_workspace_size(a).unwrap())),
            (one, zero),
            &dx_,
            &w_,
            &mut out_y,
        )
    }
    .unwrap();
    let b = ConvBackwardData {
        conv: &conv,
        dx: &xd,
        w: &wd,
        dy: &yd,
    };
    let a = b.pick_algorithm().unwrap();
    // SAFETY: as above.
    unsafe {
        b.launch(
            a,
            Some(&mut ws(b.get_workspace_size(a).unwrap())),
            (one, zero),
            &mut out_dx,
            &w_,
            &dy_,
        )
    }
    .unwrap();
    let g = ConvBackwardFilter {
        conv: &conv,
        x: &xd,
        dw: &wd,
        dy: &yd,
    };
    let a = g.pick_algorithm().unwrap();
    // SAFETY: as above.
    unsafe {
        g.launch(
            a,
            Some(&mut ws(g.get_workspace_size(a).unwrap())),
            (one, zero),
            &dx_,
            &mut out_dw,
            &dy_,
        )
    }
    .unwrap();
    for (k, (out, d)) in [(&out_y, cs.yd()), (&out_dx, cs.xd()), (&out_dw, cs.wd())]
        .into_iter()
        .enumerate()
    {
        let got: Vec<f32> = stream
            .clone_dtoh(out)
            .unwrap()
            .iter()
            .map(|v| v.to_f32())
            .collect();
        for (j, (g, &(want, scale))) in from_mem(&got, d, true).iter().zip(&refs[k]).enumerate() {
            let tol = tolerance(Ty::Bf16, false, want, scale);
            assert!(
                (*g as f64 - want).abs() <= tol,
                "{:?} [{j}] = {g}, want {want}",
                DIRS[k]
            );
        }
    }
}
