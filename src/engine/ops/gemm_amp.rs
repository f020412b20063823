//! GEMMs in the precision `amp` computes in: the native bf16 kernels where the CPU has
//! them (`gemm_bf16`, `gemm_amx`), else the f32 GEMM (`gemm`). Apart from `gemm.rs` so
//! the f32 GEMM, which the bf16 kernels build on (`Mat`), imports none of them.

use crate::engine::ops::gemm::{kernel_family, matmul, matmul_turned, Mat};
use crate::engine::ops::gemm_bf16;
use crate::engine::ops::gemm_bf16::PackedB;
use crate::error::Result;
use crate::knobs::Amp;

/// What native bf16 GEMMs run on here (`amx`, `avx512_bf16`), None where bf16 is
/// computed in f32.
pub fn bf16_unit() -> Option<&'static str> {
    gemm_bf16::unit()
}

/// Whether `amp` computes its GEMMs natively in half precision on this CPU: bf16 where
/// the CPU has AVX512_BF16 ([`gemm_bf16`]). Everything else widens to f32.
pub fn native_half(amp: Amp) -> bool {
    amp == Amp::Bf16 && gemm_bf16::available()
}

/// [`matmul`] in the precision `amp` computes in: the native bf16 kernel where
/// [`native_half`], the f32 GEMM otherwise.
pub fn matmul_amp(
    dst: &mut [f32],
    a: Mat,
    b: Mat,
    accumulate: bool,
    par: gemm::Parallelism,
    amp: Amp,
) -> Result<()> {
    if native_half(amp) {
        gemm_bf16::matmul(dst, a, b, accumulate, par)
    } else {
        matmul(dst, a, b, accumulate, par)
    }
}

/// A layer's weights as a GEMM's right-hand operand: an f32 view (rounded to the half
/// grid under AMP), or packed for the native bf16 kernels once per optimizer step.
#[derive(Clone, Copy)]
pub enum WeightB<'a> {
    Mat(Mat<'a>),
    Packed(&'a PackedB),
}

/// [`matmul_amp`] with the weights as `b`: a packed operand runs the native bf16 kernel
/// without packing on this call.
pub fn matmul_w(
    dst: &mut [f32],
    a: Mat,
    b: WeightB,
    accumulate: bool,
    par: gemm::Parallelism,
    amp: Amp,
) -> Result<()> {
    match b {
        WeightB::Mat(b) => matmul_amp(dst, a, b, accumulate, par, amp),
        WeightB::Packed(p) => gemm_bf16::matmul_packed(dst, a, p, accumulate, par),
    }
}

/// [`matmul_turned`] in the precision `amp` computes in. The bf16 kernel packs either
/// orientation of its operands at the same speed, so it is called unturned.
pub fn matmul_turned_amp(
    dst: &mut [f32],
    a: Mat,
    b: Mat,
    accumulate: bool,
    (par, amp): (gemm::Parallelism, Amp),
    scratch: &mut [f32],
) -> Result<()> {
    if native_half(amp) {
        gemm_bf16::matmul(dst, a, b, accumulate, par)
    } else {
        matmul_turned(dst, a, b, accumulate, par, scratch)
    }
}

/// What an `amp` trial on the CPU backend measures here, where that is not half-precision
/// arithmetic: a sweep's note, so that nobody reads a storage-only bf16 ratio as what
/// PyTorch's autocast, or a GPU, would give (#30: on the Ice Lake host the engine's bf16
/// measured 0.89-1.05x while PyTorch's autocast gave 0.38-0.46x). None where the GEMMs
/// compute natively, and for fp32.
pub fn amp_cpu_notice(amp: Amp) -> Option<String> {
    let path = match amp {
        Amp::Off => return None,
        Amp::Bf16 if native_half(amp) => return None,
        Amp::Bf16 => gemm_bf16::path_line().to_string(),
        Amp::Fp16 => fp16_path_line().to_string(),
        Amp::Tf32 => TF32_LINE.to_string(),
    };
    let what = match amp {
        Amp::Tf32 => "the trial measures fp32 again",
        _ => {
            "the trial measures the conversions to and from half precision, not \
             half-precision arithmetic, and a GPU or a CPU with native half-precision units \
             will differ"
        }
    };
    Some(format!("{path}; {what}"))
}

const TF32_LINE: &str = "tf32: no TF32 on CPUs: runs as fp32";

fn fp16_path_line() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    let fp16_native = std::arch::is_x86_feature_detected!("avx512fp16");
    #[cfg(not(target_arch = "x86_64"))]
    let fp16_native = false;
    if fp16_native {
        // AVX512_FP16's FMAs accumulate in fp16 (AMX-FP16 is not on this CPU class), and
        // AMP promises f32 accumulation, which on this CPU means widening first.
        "fp16: storage only, computed in f32: AVX512_FP16 is here but accumulates in fp16, \
         and AMP accumulates in f32"
    } else {
        "fp16: storage only, computed in f32: this CPU has no AVX512_FP16"
    }
}

/// How each precision's GEMMs compute on this CPU, and why: one line per `amp` value,
/// for `tune probe` and `tune bench`.
pub fn amp_path_lines() -> Vec<String> {
    vec![
        format!("fp32: {} f32 FMA kernels (gemm crate)", kernel_family()),
        gemm_bf16::path_line().to_string(),
        fp16_path_line().to_string(),
        TF32_LINE.to_string(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sweep's note says where an amp trial is not half-precision arithmetic here,
    /// and only there: fp32 never, bf16 only where this CPU has no native bf16.
    #[test]
    fn the_notice_names_each_amp_that_computes_in_f32_here() {
        assert_eq!(amp_cpu_notice(Amp::Off), None);
        let fp16 = amp_cpu_notice(Amp::Fp16).unwrap();
        assert!(fp16.starts_with("fp16: storage only"), "{fp16}");
        assert!(amp_cpu_notice(Amp::Tf32).unwrap().contains("runs as fp32"));
        match amp_cpu_notice(Amp::Bf16) {
            None => assert!(native_half(Amp::Bf16), "bf16 is native only where said"),
            Some(n) => {
                assert!(!native_half(Amp::Bf16));
                assert!(
                    n.contains("storage only") && n.contains("not half-precision"),
                    "{n}"
                );
            }
        }
    }
}
