//! Mixed precision on the CUDA backend (`amp = bf16 | fp16 | tf32`) against the CPU
//! backend's AMP and against f32. Same activation as gpu_parity.rs: skips with the reason
//! without a GPU, fails instead under `TUNE_REQUIRE_GPU=1`, and runs on the CPU stand-in
//! under `TUNE_CUDA_STANDIN=1` (docs/gpu.md), where the conversion kernels run as C++ and
//! cuBLASLt's half and TF32 GEMMs are reference loops.
//!
//! Tolerances, and why:
//! - conversions: bit for bit (both sides round to nearest even; fp16 overflows to inf);
//! - half GEMMs: |gpu - ref| <= 1e-4 + 1e-3*|ref| against a reference over the operands
//!   rounded to the half grid (exact products, f32 or wider sums: only the summation
//!   order differs);
//! - TF32 GEMM: against a reference over TF32-rounded operands, within 2^-9 of the sum
//!   of |products| (tensor cores may truncate to TF32 instead of rounding: an H200 did),
//!   and at least 1e-4 away from the f32 result somewhere (else the compute type did not
//!   reach cuBLASLt);
//! - loss curves, GPU AMP vs CPU AMP: |gpu - cpu| <= 2e-3 + 2e-2*|cpu|. Both store the
//!   same tensors in the same half type, but the GPU rounds a GEMM's f32 input before
//!   the GEMM (as autocast does) where the CPU multiplies the f32 input, and a sum
//!   ordered differently can round a stored half one ulp apart (2^-8 relative in bf16);
//! - loss curves, AMP vs f32 on the GPU: |amp - f32| <= 2e-2 + 5e-2*|f32| over the first
//!   steps (half storage moves a loss by well under 1% on these models).

use half::{bf16, f16};
use tune::engine::amp::ScalerConfig;
use tune::engine::device::{MemCategory, MemTracker};
use tune::engine::nn::zoo::ModelKind;
use tune::engine::optim::OptimKind;
use tune::engine::rng::Rng;
use tune::engine::tensor::DType;
use tune::engine::testing::{GTensor, Gpu, Shape};
use tune::engine::train::{run, DeviceChoice, NoObserver, RunSummary, Workload};
use tune::knobs::{Amp, Knobs};

#[path = "common/standin.rs"]
mod standin;

use standin::gpu_or_skip;

fn random(n: usize, seed: u64) -> Vec<f32> {
    let mut r = Rng::from_keys(&[seed, 31]);
    (0..n).map(|_| r.normal()).collect()
}

fn close(what: &str, got: &[f32], want: &[f32], atol: f32, rtol: f32) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= atol + rtol * w.abs(),
            "{what}: element {i} is {g} on the GPU, {w} expected"
        );
    }
}

fn round(v: &[f32], dt: DType) -> Vec<f32> {
    v.iter()
        .map(|&x| match dt {
            DType::Bf16 => bf16::from_f32(x).to_f32(),
            DType::F16 => f16::from_f32(x).to_f32(),
            _ => x,
        })
        .collect()
}

/// TF32 as tensor cores read an f32 (10 mantissa bits, nearest, ties away from zero).
fn tf32(v: &[f32]) -> Vec<f32> {
    v.iter()
        .map(|&x| {
            let u = x.to_bits();
            if u & 0x7f80_0000 == 0x7f80_0000 {
                x
            } else {
                f32::from_bits((u + 0x1000) & 0xffff_e000)
            }
        })
        .collect()
}

fn abs(v: &[f32]) -> Vec<f32> {
    v.iter().map(|x| x.abs()).collect()
}

fn up(gpu: &Gpu, v: &[f32]) -> GTensor {
    GTensor::new(&[v.len()], gpu.upload(v, MemCategory::Activations).unwrap()).unwrap()
}

/// Row-major `op(A) op(B) (+ C)` in f64 (A stored `[k,m]` when `ta`, B `[n,k]` when `tb`).
fn reference(s: &Shape, a: &[f32], b: &[f32], c: &[f32]) -> Vec<f32> {
    let mut out = vec![0.0f32; s.m * s.n];
    for i in 0..s.m {
        for j in 0..s.n {
            let mut acc = 0.0f64;
            for p in 0..s.k {
                let av = if s.ta { a[p * s.m + i] } else { a[i * s.k + p] };
                let bv = if s.tb { b[j * s.k + p] } else { b[p * s.n + j] };
                acc += f64::from(av) * f64::from(bv);
            }
            out[i * s.n + j] = acc as f32 + if s.accumulate { c[i * s.n + j] } else { 0.0 };
        }
    }
    out
}

#[test]
fn conversion_kernels_round_like_the_cpu() {
    let Some(gpu) = gpu_or_skip("conversion_kernels_round_like_the_cpu") else {
        return;
    };
    let mut v = random(3001, 1);
    v.extend([
        1e6,
        -1e6,
        65504.0,
        65520.0, // rounds to inf in fp16
        1e-9,
        f32::MIN_POSITIVE,
        6.0e-8, // an fp16 subnormal
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        1.0 + 1.0 / 256.0, // a bf16 tie
        -0.0,
    ]);
    let x = up(&gpu, &v);
    for dt in [DType::Bf16, DType::F16] {
        let h = gpu.narrow(&x, dt).unwrap();
        assert!(
            h.is_half() && h.buf.len() == v.len().div_ceil(2),
            "{dt:?}: 2 bytes each"
        );
        let back = gpu.download(gpu.widen(&h).unwrap().s()).unwrap();
        for (i, (g, c)) in back.iter().zip(round(&v, dt)).enumerate() {
            assert!(
                g.to_bits() == c.to_bits() || (g.is_nan() && c.is_nan()),
                "{dt:?}: element {i} ({}) became {g} on the GPU, {c} on the CPU",
                v[i]
            );
        }
    }
}

#[test]
fn half_and_tf32_gemms_match_a_reference() {
    let Some(gpu) = gpu_or_skip("half_and_tf32_gemms_match_a_reference") else {
        return;
    };
    let cache = tempfile::tempdir().unwrap();
    let tf = Gpu::open(
        0,
        cache.path(),
        true,
        std::sync::Arc::new(MemTracker::default()),
    )
    .unwrap();
    for (m, n, k) in [(4, 4, 4), (5, 3, 64), (8, 1, 3), (7, 9, 33)] {
        for ta in [false, true] {
            for tb in [false, true] {
                for accumulate in [false, true] {
                    let (a, b, c0) = (random(m * k, 2), random(k * n, 3), random(m * n, 4));
                    for dt in [DType::Bf16, DType::F16] {
                        let s = Shape {
                            m,
                            n,
                            k,
                            ta,
                            tb,
                            accumulate,
                            dt,
                        };
                        let ha = gpu.narrow(&up(&gpu, &a), dt).unwrap();
                        let hb = gpu.narrow(&up(&gpu, &b), dt).unwrap();
                        let mut c = gpu.upload(&c0, MemCategory::Activations).unwrap();
                        gpu.gemm(&s, ha.s(), hb.s(), &mut c.s).unwrap();
                        close(
                            &format!("gemm {}", s.key()),
                            &gpu.download(&c.s).unwrap(),
                            &reference(&s, &round(&a, dt), &round(&b, dt), &c0),
                            1e-4,
                            1e-3,
                        );
                    }
                    let s = Shape {
                        m,
                        n,
                        k,
                        ta,
                        tb,
                        accumulate,
                        dt: DType::F32,
                    };
                    let (da, db) = (up(&tf, &a), up(&tf, &b));
                    let mut c = tf.upload(&c0, MemCategory::Activations).unwrap();
                    tf.gemm(&s, da.s(), db.s(), &mut c.s).unwrap();
                    let got = tf.download(&c.s).unwrap();
                    // Tensor cores may truncate an f32 to TF32 rather than round it (seen
                    // on an H200: 4.7e-4 off the round-to-nearest reference, k = 3), so
                    // each operand is within 2^-10 of its value either way and each
                    // product within 2^-9: the bound is 2^-9 of the sum of |products|.
                    let want = reference(&s, &tf32(&a), &tf32(&b), &c0);
                    let terms = reference(&s, &abs(&a), &abs(&b), &vec![0.0; c0.len()]);
                    for (i, ((g, w), t)) in got.iter().zip(&want).zip(&terms).enumerate() {
                        assert!(
                            (g - w).abs() <= 1e-5 + t / 512.0,
                            "tf32 gemm {}: element {i} is {g} on the GPU, {w} expected \
                             (sum of |products| {t})",
                            s.key()
                        );
                    }
                    if k >= 33 {
                        let exact = reference(&s, &a, &b, &c0);
                        let most = got
                            .iter()
                            .zip(&exact)
                            .map(|(g, e)| (g - e).abs())
                            .fold(0.0f32, f32::max);
                        assert!(
                            most > 1e-4,
                            "tf32 gemm {}: the result is f32's (max difference {most}): \
                             TF32 compute did not reach cuBLASLt",
                            s.key()
                        );
                    }
                }
            }
        }
    }
}

fn workload(model: ModelKind, device: DeviceChoice, steps: usize) -> Workload {
    Workload {
        steps,
        warmup: 0,
        eval: false,
        lr: 0.05,
        device,
        cache_dir: tempfile::tempdir().unwrap().keep(),
        ..Workload::new(model, "synthetic")
    }
}

fn train(w: &Workload, amp: Amp, batch_size: usize) -> RunSummary {
    let k = Knobs {
        amp,
        batch_size,
        ..Knobs::default()
    };
    run(w, &k, &mut NoObserver).unwrap()
}

/// bf16 and fp16 loss curves of mlp and cnn-small on the GPU track the CPU backend's AMP
/// and the GPU's own f32 within the tolerances above; the loss scaler's decisions (skipped
/// steps, final scale) are the CPU's; activations are stored at 2 bytes.
#[test]
fn amp_loss_curves_track_the_cpu_amp_and_f32() {
    if gpu_or_skip("amp_loss_curves_track_the_cpu_amp_and_f32").is_none() {
        return;
    }
    // The stand-in runs kernels on one CPU thread: 3 steps of batch 8 there.
    let (steps, batch) = if standin::requested() {
        (3, 8)
    } else {
        (8, 32)
    };
    for model in [ModelKind::Mlp, ModelKind::CnnSmall] {
        let f32_gpu = train(&workload(model, DeviceChoice::Cuda, steps), Amp::Off, batch);
        for amp in [Amp::Bf16, Amp::Fp16] {
            let cpu = train(&workload(model, DeviceChoice::Cpu, steps), amp, batch);
            let gpu = train(&workload(model, DeviceChoice::Cuda, steps), amp, batch);
            eprintln!(
                "{}{model} amp={amp}: cpu {:?} gpu {:?} gpu f32 {:?}; skipped cpu {:?} gpu {:?}",
                standin::label(),
                cpu.losses,
                gpu.losses,
                f32_gpu.losses,
                cpu.skipped_steps,
                gpu.skipped_steps
            );
            close(
                &format!("{model} amp={amp} vs the CPU's"),
                &gpu.losses,
                &cpu.losses,
                2e-3,
                2e-2,
            );
            close(
                &format!("{model} amp={amp} vs f32"),
                &gpu.losses,
                &f32_gpu.losses,
                2e-2,
                5e-2,
            );
            assert_eq!(gpu.skipped_steps, cpu.skipped_steps, "{model} {amp}");
            assert_eq!(gpu.loss_scale_final, cpu.loss_scale_final, "{model} {amp}");
            let (h, f) = (
                gpu.peak_bytes["activations"],
                f32_gpu.peak_bytes["activations"],
            );
            eprintln!("{model} amp={amp}: activations peak {h} B, f32 {f} B");
            // About half: not f32-sized, and not small either (an f32 result left
            // un-narrowed is charged as workspace, and would vanish from this figure).
            let r = h as f64 / f as f64;
            assert!(
                (0.4..0.75).contains(&r),
                "{model} amp={amp}: activations peak {h} B is not about half of f32's {f} B"
            );
        }
    }
}

/// An overflowing fp16 step is skipped on the device without a host sync, and AdamW's
/// bias correction afterwards counts only applied steps, as on the CPU (the device-side
/// step counter). The overflow is at step 0, so the first applied step is AdamW's t = 1
/// (an update of lr * sign(g)); counted as t = 2 it would be a quarter smaller, and the
/// next loss would move far outside the tolerance.
#[test]
fn a_skipped_fp16_step_is_skipped_on_the_device_as_on_the_cpu() {
    if gpu_or_skip("a_skipped_fp16_step_is_skipped_on_the_device_as_on_the_cpu").is_none() {
        return;
    }
    let steps = if standin::requested() { 4 } else { 8 };
    let w = |device| Workload {
        optimizer: OptimKind::Adamw,
        lr: 0.003,
        inject_overflow_at: Some(0),
        scaler: ScalerConfig {
            growth_interval: 2,
            ..ScalerConfig::default()
        },
        ..workload(ModelKind::Mlp, device, steps)
    };
    let cpu = train(&w(DeviceChoice::Cpu), Amp::Fp16, 8);
    let gpu = train(&w(DeviceChoice::Cuda), Amp::Fp16, 8);
    eprintln!(
        "{}mlp fp16 adamw, overflow at step 0: cpu {:?} (skipped {:?}, scale {:?}) gpu {:?} \
         (skipped {:?}, scale {:?})",
        standin::label(),
        cpu.losses,
        cpu.skipped_steps,
        cpu.loss_scale_final,
        gpu.losses,
        gpu.skipped_steps,
        gpu.loss_scale_final
    );
    assert_eq!(cpu.skipped_steps, vec![0]);
    assert_eq!(gpu.skipped_steps, cpu.skipped_steps);
    assert_eq!(gpu.loss_scale_final, cpu.loss_scale_final);
    close("losses", &gpu.losses, &cpu.losses, 2e-3, 2e-2);
}

/// `amp = tf32` runs on the CUDA backend with f32 storage (no scaler), and its losses
/// stay within TF32's rounding of f32's.
#[test]
fn tf32_trains_with_f32_storage() {
    if gpu_or_skip("tf32_trains_with_f32_storage").is_none() {
        return;
    }
    let steps = if standin::requested() { 3 } else { 8 };
    let off = train(
        &workload(ModelKind::Mlp, DeviceChoice::Cuda, steps),
        Amp::Off,
        8,
    );
    let tf = train(
        &workload(ModelKind::Mlp, DeviceChoice::Cuda, steps),
        Amp::Tf32,
        8,
    );
    eprintln!(
        "{}mlp tf32 {:?} f32 {:?}",
        standin::label(),
        tf.losses,
        off.losses
    );
    close("tf32 vs f32 losses", &tf.losses, &off.losses, 1e-2, 2e-2);
    assert_eq!(tf.loss_scale_final, None);
    assert_eq!(
        tf.peak_bytes["activations"], off.peak_bytes["activations"],
        "tf32 stores f32"
    );
}
