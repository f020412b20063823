//! The machine's multiply-add peak, measured: independent chains of FMAs (f32, AVX-512
//! where the CPU has it, else AVX2's 256-bit FMA) and of `vdpbf16ps` (bf16 pairs into
//! f32), timed on each of `threads` threads at once.
//! What `tune bench` holds each row's useful GFLOP/s against (the idea of
//! `../shared/peers/clock_probe512.c`). A GEMM cannot beat it; how close one gets says
//! how much a faster kernel could still buy.

use std::time::Instant;

use crate::engine::ops::{gemm_amx, gemm_bf16};

/// The measured peak, GFLOP/s summed over the threads that ran at once.
#[derive(Clone, Copy, Debug)]
pub struct Peak {
    /// f32 FMAs (2 flops per lane).
    pub f32_gflops: f64,
    /// The vector width the f32 chains ran at: "avx512f" or "fma" (AVX2's 256 bits), the
    /// same names as the GEMM kernel families, since the GEMMs run at that width too.
    pub f32_unit: &'static str,
    /// bf16 dot products (4 flops per lane), where the CPU has AVX512_BF16.
    pub bf16_gflops: Option<f64>,
    /// bf16 on AMX tiles (`tdpbf16ps`), where the CPU has them and Linux grants them.
    pub amx_bf16_gflops: Option<f64>,
}

impl Peak {
    /// The peak of the unit `amp = bf16` GEMMs run on here (AMX, else AVX512_BF16).
    pub fn native_bf16(&self) -> Option<f64> {
        self.amx_bf16_gflops.or(self.bf16_gflops)
    }
}

/// Multiply-add instructions per chain per timed call: 24 chains x 2^22 x 16 lanes is
/// about 3 GFLOP, 10-20 ms a core at these peaks, long enough to dwarf the timer.
const ITERS: usize = 1 << 22;

/// Times `f` (which returns the flops it did) on `threads` threads started together;
/// best of 3, the wall time of the slowest thread.
fn timed(threads: usize, f: fn() -> f64) -> f64 {
    let mut best = 0.0f64;
    for _ in 0..3 {
        let start = Instant::now();
        let flops: f64 = std::thread::scope(|s| {
            let hs: Vec<_> = (0..threads).map(|_| s.spawn(f)).collect();
            hs.into_iter().map(|h| h.join().unwrap_or(0.0)).sum()
        });
        best = best.max(flops / start.elapsed().as_secs_f64() / 1e9);
    }
    best
}

/// Measures the peak on `threads` threads (about 0.2 s per precision on a quiet core).
/// `None` on a CPU with neither AVX-512F nor FMA, where the probe has no kernel.
pub fn measure(threads: usize) -> Option<Peak> {
    #[cfg(target_arch = "x86_64")]
    {
        let threads = threads.max(1);
        if !std::arch::is_x86_feature_detected!("avx512f") {
            // An AVX2 host (Zen 1-3, Haswell to Comet Lake): the gemm crate runs its FMA
            // kernels there, so their peak is the 256-bit one; no bf16 unit exists.
            if !(std::arch::is_x86_feature_detected!("avx")
                && std::arch::is_x86_feature_detected!("fma"))
            {
                return None;
            }
            // SAFETY: AVX and FMA were detected above.
            let f32_gflops = timed(threads, || unsafe { fma_f32_avx2() });
            return Some(Peak {
                f32_gflops,
                f32_unit: "fma",
                bf16_gflops: None,
                amx_bf16_gflops: None,
            });
        }
        // SAFETY (both closures): AVX-512F (and AVX512_BF16 for the second) was detected
        // above.
        let f32_gflops = timed(threads, || unsafe { fma_f32() });
        let bf16_gflops = gemm_bf16::available().then(|| timed(threads, || unsafe { dot_bf16() }));
        // SAFETY: `ready` checked the tile unit and its permission.
        let amx_bf16_gflops =
            gemm_amx::ready().then(|| timed(threads, || unsafe { gemm_amx::peak_flops() }));
        Some(Peak {
            f32_gflops,
            f32_unit: "avx512f",
            bf16_gflops,
            amx_bf16_gflops,
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = threads;
        None
    }
}

/// 12 independent f32 FMA chains of 8 lanes: 12 of the 16 ymm registers, twice the
/// 4-cycle latency x 2 FMA ports the widest AVX2 cores (Zen 2-3, Skylake) need to stay
/// full, with room left for the two constants so nothing spills. Returns the flops done.
///
/// # Safety
/// The CPU has AVX and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx,fma")]
unsafe fn fma_f32_avx2() -> f64 {
    use std::arch::x86_64::*;
    let mut acc = [_mm256_setzero_ps(); 12];
    for (i, a) in acc.iter_mut().enumerate() {
        *a = _mm256_set1_ps(i as f32 * 0.01);
    }
    let m = std::hint::black_box(_mm256_set1_ps(0.999_999));
    let c = std::hint::black_box(_mm256_set1_ps(1e-7));
    // Twice the AVX-512 chains' iterations: half the chains at half the width would
    // otherwise make each call a quarter as long.
    for _ in 0..2 * ITERS {
        for a in acc.iter_mut() {
            *a = _mm256_fmadd_ps(*a, m, c);
        }
    }
    std::hint::black_box(acc);
    (2 * ITERS * 12 * 8 * 2) as f64
}

/// 24 independent f32 FMA chains (as many as the bf16 kernel's accumulators, more than
/// the 4-cycle latency x 2 ports needs). Returns the flops done.
///
/// # Safety
/// The CPU has AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn fma_f32() -> f64 {
    use std::arch::x86_64::*;
    let mut acc = [_mm512_setzero_ps(); 24];
    for (i, a) in acc.iter_mut().enumerate() {
        *a = _mm512_set1_ps(i as f32 * 0.01);
    }
    let m = std::hint::black_box(_mm512_set1_ps(0.999_999));
    let c = std::hint::black_box(_mm512_set1_ps(1e-7));
    for _ in 0..ITERS {
        for a in acc.iter_mut() {
            *a = _mm512_fmadd_ps(*a, m, c);
        }
    }
    std::hint::black_box(acc);
    (ITERS * 24 * 16 * 2) as f64
}

/// 24 independent `vdpbf16ps` chains. Returns the flops done (a pair's two multiplies
/// and two adds per lane).
///
/// # Safety
/// The CPU has AVX-512F and AVX512_BF16.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn dot_bf16() -> f64 {
    use std::arch::x86_64::*;
    let mut acc = [_mm512_setzero_ps(); 24];
    // Pairs of tiny values, so the chains stay finite and normal for every iteration.
    let a = std::hint::black_box(_mm512_cvtne2ps_pbh(
        _mm512_set1_ps(1e-6),
        _mm512_set1_ps(2e-6),
    ));
    let b = std::hint::black_box(_mm512_cvtne2ps_pbh(
        _mm512_set1_ps(1e-3),
        _mm512_set1_ps(3e-3),
    ));
    for _ in 0..ITERS {
        for x in acc.iter_mut() {
            *x = _mm512_dpbf16_ps(*x, a, b);
        }
    }
    std::hint::black_box(acc);
    (ITERS * 24 * 16 * 4) as f64
}
