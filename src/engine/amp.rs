//! Mixed precision: half-precision storage with f32 accumulation, and the dynamic loss
//! scaler.
//!
//! Under `amp = bf16 | fp16` every activation and activation gradient that travels
//! between layers, and everything a layer keeps for backward, is stored in the half type
//! (2 bytes per element, charged as such). Kernels widen their operands to f32, compute
//! and accumulate in f32 (what tensor cores do with half inputs) and round the result back
//! to half. Weights are rounded to the half grid for compute while the optimizer keeps
//! f32 master weights. So the numerics (rounding, fp16 overflow to inf, underflow to
//! zero) are those of real mixed precision. Under bf16 on a CPU with AVX512_BF16 (or AMX)
//! the GEMMs take bf16 operands natively (`ops/gemm_bf16.rs`, `ops/gemm_amx.rs`, the
//! weights packed once per optimizer step); on the AMX tile unit conv2d's im2col and the
//! linear layers lay the stored bf16 activations and gradients out for the tiles as they
//! read them, with no f32 copy (`ops/gemm_pairs.rs`, `ops/conv2d_bf16.rs`,
//! `ops/linear_bf16.rs`), and elsewhere conv2d's im2col reads bf16 storage directly;
//! batch norm and ReLU read and write bf16 storage (computing in f32 in registers);
//! every other kernel, and fp16 everywhere, widens to f32, where the conversions are
//! pure cost.
//! `tune probe` says which path each precision runs here.

use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::engine::device::MemTracker;
use crate::engine::tensor::{Buf, DType};
use crate::error::{Error, Result};
use crate::knobs::Amp;

/// Elements per parallel conversion task; below one chunk the conversion stays on the
/// calling thread, where rayon's fork/join would cost more than the copy.
const CHUNK: usize = 1 << 15;

/// The storage type `amp` selects, or `None` for full precision.
pub fn half_dtype(amp: Amp) -> Option<DType> {
    match amp {
        Amp::Off | Amp::Tf32 => None,
        Amp::Bf16 => Some(DType::Bf16),
        Amp::Fp16 => Some(DType::F16),
    }
}

/// Converts f32 data to a half buffer (round to nearest even; fp16 overflows to inf),
/// written into a buffer from `mem`'s recycle bin when it holds one of this length.
pub fn narrow(src: &[f32], dt: DType, mem: &MemTracker) -> Result<Buf> {
    match dt {
        DType::Bf16 => Ok(Buf::Bf16(map_uninit(src, mem.spare(src.len()), |x| {
            bf16::from_bits(bf16_round(x, false))
        }))),
        DType::F16 => {
            let mut v = mem
                .take_recycled(src.len())
                .unwrap_or_else(|| vec![f16::ZERO; src.len()]);
            v.par_chunks_mut(CHUNK)
                .zip(src.par_chunks(CHUNK))
                .for_each(|(d, s)| d.convert_from_f32_slice(s));
            Ok(Buf::F16(v))
        }
        DType::F32 => Ok(Buf::F32(src.to_vec())),
        DType::U32 => Err(Error::Shape {
            op: "narrow",
            msg: "u32 is not a floating type".into(),
        }),
    }
}

/// `x` rounded to bf16 bits (nearest even; NaN stays NaN, quieted), after a ReLU when
/// `relu`: the bits `half::bf16::from_f32` gives, without its branches, so the loop
/// vectorizes. `half`'s slice conversion for bf16 is a scalar loop: on cnn-small at
/// batch 64, 1 thread (perf, Sapphire Rapids), narrowing and widening were 30% of the
/// bf16 step, a third of that zeroing the fresh buffers.
#[inline(always)]
fn bf16_round(x: f32, relu: bool) -> u16 {
    let x = if relu { x.max(0.0) } else { x };
    let b = x.to_bits();
    let rounded = b.wrapping_add(0x7fff + ((b >> 16) & 1)) >> 16;
    let quiet = (b >> 16) | 0x40;
    (if x.is_nan() { quiet } else { rounded }) as u16
}

/// `f` over `src` into `out`'s spare capacity (its elements, if any, are dropped), in
/// parallel chunks, writing each element once (no zero fill first).
fn map_uninit<S: Copy + Sync, D: Copy + Send>(
    src: &[S],
    mut out: Vec<D>,
    f: impl Fn(S) -> D + Sync,
) -> Vec<D> {
    out.clear();
    out.reserve(src.len());
    out.spare_capacity_mut()[..src.len()]
        .par_chunks_mut(CHUNK)
        .zip(src.par_chunks(CHUNK))
        .for_each(|(d, s)| {
            for (d, s) in d.iter_mut().zip(s) {
                d.write(f(*s));
            }
        });
    // SAFETY: the chunks above cover the first src.len() slots of the capacity, and
    // each slot was written once.
    unsafe { out.set_len(src.len()) };
    out
}

/// `max(x, 0)` of f32 data narrowed to `dt` in one pass: a fused ReLU's output stored
/// without a pass of its own. Equal bit for bit to ReLU then [`narrow`]: rounding keeps
/// the sign, so rounding and ReLU commute.
pub fn narrow_relu(src: &[f32], dt: DType, mem: &MemTracker) -> Result<Buf> {
    match dt {
        DType::Bf16 => Ok(Buf::Bf16(map_uninit(src, mem.spare(src.len()), |x| {
            bf16::from_bits(bf16_round(x, true))
        }))),
        DType::F16 => Ok(Buf::F16(map_uninit(src, mem.spare(src.len()), |x| {
            f16::from_f32(x.max(0.0))
        }))),
        DType::F32 => Ok(Buf::F32(map_uninit(src, mem.spare(src.len()), |x| {
            x.max(0.0)
        }))),
        DType::U32 => narrow(src, dt, mem),
    }
}

/// Widens a half (or f32) buffer to f32.
pub fn widen(buf: &Buf) -> Result<Vec<f32>> {
    match buf {
        Buf::F32(v) => Ok(v.clone()),
        Buf::Bf16(v) => Ok(map_uninit(v, Vec::new(), |h| {
            f32::from_bits(u32::from(h.to_bits()) << 16)
        })),
        Buf::F16(v) => {
            let mut out = vec![0.0f32; v.len()];
            out.par_chunks_mut(CHUNK)
                .zip(v.par_chunks(CHUNK))
                .for_each(|(d, s)| s.convert_to_f32_slice(d));
            Ok(out)
        }
        Buf::U32(_) => Err(Error::Shape {
            op: "widen",
            msg: "u32 is not a floating type".into(),
        }),
    }
}

/// [`widen`] into `reuse` when it is given (a recycled buffer of the same length, its
/// old values all overwritten): no fresh buffer to fault in or zero.
pub fn widen_reusing(buf: &Buf, reuse: Option<Vec<f32>>) -> Result<Vec<f32>> {
    match (buf, reuse) {
        (Buf::Bf16(v), Some(mut out)) if out.len() == v.len() => {
            out.par_chunks_mut(CHUNK)
                .zip(v.par_chunks(CHUNK))
                .for_each(|(d, s)| {
                    for (d, s) in d.iter_mut().zip(s) {
                        *d = widen_bf16(*s);
                    }
                });
            Ok(out)
        }
        (Buf::F16(v), Some(mut out)) if out.len() == v.len() => {
            out.par_chunks_mut(CHUNK)
                .zip(v.par_chunks(CHUNK))
                .for_each(|(d, s)| s.convert_to_f32_slice(d));
            Ok(out)
        }
        (b, _) => widen(b),
    }
}

/// A bf16 value as f32 (exact: bf16 is f32's top half).
#[inline(always)]
pub fn widen_bf16(h: bf16) -> f32 {
    f32::from_bits(u32::from(h.to_bits()) << 16)
}

/// `x` narrowed to bf16 (nearest even, as [`narrow`]).
#[inline(always)]
pub fn narrow_bf16(x: f32) -> bf16 {
    bf16::from_bits(bf16_round(x, false))
}

/// `f` over `src` into a bf16 vector from `mem` ([`MemTracker::spare`]), written once
/// per element (no zero fill), in parallel chunks: for kernels that read and write bf16
/// storage directly.
pub fn map_bf16<S: Copy + Sync>(
    src: &[S],
    mem: &MemTracker,
    f: impl Fn(S) -> bf16 + Sync,
) -> Vec<bf16> {
    map_uninit(src, mem.spare(src.len()), f)
}

/// `f` over `a` and `b` pairwise (equal lengths) into a fresh bf16 vector, as
/// [`map_bf16`].
pub fn zip_map_bf16<A: Copy + Sync, B: Copy + Sync>(
    (a, b): (&[A], &[B]),
    mem: &MemTracker,
    f: impl Fn(A, B) -> bf16 + Sync,
) -> Vec<bf16> {
    let n = a.len().min(b.len());
    let mut out: Vec<bf16> = mem.spare(n);
    out.spare_capacity_mut()[..n]
        .par_chunks_mut(CHUNK)
        .zip(a[..n].par_chunks(CHUNK).zip(b[..n].par_chunks(CHUNK)))
        .for_each(|(d, (a, b))| {
            for ((d, a), b) in d.iter_mut().zip(a).zip(b) {
                d.write(f(*a, *b));
            }
        });
    // SAFETY: the chunks above cover the first n slots of the capacity, each written
    // once.
    unsafe { out.set_len(n) };
    out
}

/// f32 values rounded to the half grid of `dt`: what a half copy widened back would
/// hold, in one pass (used for weights in compute).
pub fn round_to_grid(src: &[f32], dt: DType) -> Vec<f32> {
    round_to_grid_reusing(src, dt, None)
}

/// [`round_to_grid`] into `reuse` when it is a recycled buffer of `src`'s length (every
/// value overwritten): where bf16 is not native (an AVX2 host) the rounded weights are
/// remade after every optimizer step, and mlp's 1.86M fresh floats faulted in 1915
/// pages a step (tests/bf16_native.rs) against 261 for its f32 step.
pub fn round_to_grid_reusing(src: &[f32], dt: DType, reuse: Option<Vec<f32>>) -> Vec<f32> {
    let mut out = match reuse {
        Some(v) if v.len() == src.len() => v,
        _ => vec![0.0; src.len()],
    };
    out.par_chunks_mut(CHUNK)
        .zip(src.par_chunks(CHUNK))
        .for_each(|(d, s)| match dt {
            DType::Bf16 => d
                .iter_mut()
                .zip(s)
                .for_each(|(d, s)| *d = bf16::from_f32(*s).to_f32()),
            DType::F16 => d
                .iter_mut()
                .zip(s)
                .for_each(|(d, s)| *d = f16::from_f32(*s).to_f32()),
            DType::F32 | DType::U32 => d.copy_from_slice(s),
        });
    out
}

/// Dynamic loss scaling with PyTorch `GradScaler` semantics.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ScalerConfig {
    /// Loss scaling on or off. Default: on for fp16 (whose 5-bit exponent underflows
    /// small gradients), off for bf16 (same exponent range as f32), as PyTorch advises.
    pub enabled: Option<bool>,
    pub init_scale: f32,
    pub growth_factor: f32,
    pub backoff_factor: f32,
    pub growth_interval: u32,
}

impl Default for ScalerConfig {
    fn default() -> Self {
        ScalerConfig {
            enabled: None,
            init_scale: 65536.0,
            growth_factor: 2.0,
            backoff_factor: 0.5,
            growth_interval: 2000,
        }
    }
}

impl ScalerConfig {
    pub fn validate(&self) -> Result<()> {
        let bad = |what: &str, v: String, need: &str| {
            Err(Error::Invalid(format!(
                "invalid loss-scaler {what} {v}: must be {need}"
            )))
        };
        if !(self.init_scale.is_finite() && self.init_scale > 0.0) {
            return bad("init_scale", self.init_scale.to_string(), "finite and > 0");
        }
        if !(self.growth_factor.is_finite() && self.growth_factor > 1.0) {
            return bad("growth_factor", self.growth_factor.to_string(), "> 1");
        }
        if !(self.backoff_factor > 0.0 && self.backoff_factor < 1.0) {
            return bad(
                "backoff_factor",
                self.backoff_factor.to_string(),
                "in (0, 1)",
            );
        }
        if self.growth_interval == 0 {
            return bad("growth_interval", "0".into(), "at least 1");
        }
        Ok(())
    }

    pub fn active_for(&self, amp: Amp) -> bool {
        // TF32 stores f32: nothing underflows, so there is nothing to scale.
        self.enabled.unwrap_or(amp == Amp::Fp16) && half_dtype(amp).is_some()
    }
}

/// The scaler's running state.
#[derive(Clone, Debug)]
pub struct GradScaler {
    cfg: ScalerConfig,
    scale: f32,
    clean_steps: u32,
}

impl GradScaler {
    pub fn new(cfg: ScalerConfig) -> GradScaler {
        GradScaler {
            scale: cfg.init_scale,
            cfg,
            clean_steps: 0,
        }
    }

    /// The factor the loss (and so every gradient) is multiplied by this step.
    pub fn scale(&self) -> f32 {
        self.scale
    }

    /// Records whether this step's gradients were all finite and returns whether the
    /// optimizer may step. Overflow: skip the step and back off. Otherwise grow the scale
    /// after `growth_interval` consecutive clean steps.
    pub fn update(&mut self, grads_finite: bool) -> bool {
        if !grads_finite {
            self.scale *= self.cfg.backoff_factor;
            self.clean_steps = 0;
            return false;
        }
        self.clean_steps += 1;
        if self.clean_steps >= self.cfg.growth_interval {
            let grown = self.scale * self.cfg.growth_factor;
            // PyTorch keeps the old scale when growing would overflow f32.
            if grown.is_finite() {
                self.scale = grown;
            }
            self.clean_steps = 0;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scaler_follows_gradscaler_rules() {
        let mut s = GradScaler::new(ScalerConfig {
            growth_interval: 3,
            ..ScalerConfig::default()
        });
        assert_eq!(s.scale(), 65536.0);
        assert!(s.update(true));
        assert!(s.update(true));
        assert_eq!(s.scale(), 65536.0);
        assert!(s.update(true));
        assert_eq!(s.scale(), 131072.0);
        assert!(!s.update(false));
        assert_eq!(s.scale(), 65536.0);
        // The clean-step counter restarts after an overflow.
        assert!(s.update(true));
        assert!(s.update(true));
        assert_eq!(s.scale(), 65536.0);
    }

    /// Rounding into a recycled buffer gives the fresh path's bits in that buffer's
    /// memory; a buffer of another length is not used.
    #[test]
    fn rounding_to_the_grid_reuses_a_recycled_buffer() {
        let src: Vec<f32> = (0..70_000).map(|i| (i as f32).sin() * 3.7).collect();
        for dt in [DType::Bf16, DType::F16] {
            let want = round_to_grid(&src, dt);
            let old = vec![f32::NAN; src.len()];
            let at = old.as_ptr();
            let got = round_to_grid_reusing(&src, dt, Some(old));
            assert_eq!(
                got.as_ptr(),
                at,
                "{dt:?}: not written into the recycled buffer"
            );
            assert!(want
                .iter()
                .zip(&got)
                .all(|(a, b)| a.to_bits() == b.to_bits()));
            let other = round_to_grid_reusing(&src, dt, Some(vec![0.0; 5]));
            assert_eq!(other.len(), src.len());
        }
    }

    #[test]
    fn fp16_narrowing_overflows_and_underflows_like_hardware() {
        let Buf::F16(h) = narrow(&[1e6, 1e-9, 0.1], DType::F16, &MemTracker::default()).unwrap()
        else {
            panic!("not f16")
        };
        assert!(h[0].to_f32().is_infinite());
        assert_eq!(h[1].to_f32(), 0.0);
        assert!((h[2].to_f32() - 0.1).abs() < 1e-4);
        let Buf::Bf16(b) = narrow(&[1e6, 1e-9], DType::Bf16, &MemTracker::default()).unwrap()
        else {
            panic!("not bf16")
        };
        assert!(b[0].to_f32().is_finite() && b[1].to_f32() > 0.0);
    }

    #[test]
    fn rounding_matches_a_narrow_widen_round_trip() {
        let v: Vec<f32> = (0..100_000)
            .map(|i| (i as f32 * 0.37).sin() * 3.0)
            .collect();
        for dt in [DType::Bf16, DType::F16] {
            let via = widen(&narrow(&v, dt, &MemTracker::default()).unwrap()).unwrap();
            assert_eq!(round_to_grid(&v, dt), via);
        }
    }

    /// The branch-free rounding gives `half`'s bits on every class of value: signed
    /// zeros, denormals, ties both ways, the overflow to inf, infinities and NaNs.
    #[test]
    fn fast_bf16_rounding_matches_half_bit_for_bit() {
        let mut bits: Vec<u32> = vec![
            0,
            0x8000_0000,
            1,
            0x0000_8000,
            0x0001_8000,
            0x0000_8001,
            0x3f80_8000,
            0x3f81_8000,
            0x7f7f_ffff,
            0xff7f_ffff,
            0x7f80_0000,
            0xff80_0000,
            0x7f80_0001,
            0xffc0_0000,
            0x7fff_ffff,
            0xffff_ffff,
        ];
        let mut r = 0x9e37_79b9_u32;
        for _ in 0..200_000 {
            r ^= r << 13;
            r ^= r >> 17;
            r ^= r << 5;
            bits.push(r);
        }
        let v: Vec<f32> = bits.iter().map(|b| f32::from_bits(*b)).collect();
        let Buf::Bf16(got) = narrow(&v, DType::Bf16, &MemTracker::default()).unwrap() else {
            panic!("not bf16")
        };
        let Buf::Bf16(relu) = narrow_relu(&v, DType::Bf16, &MemTracker::default()).unwrap() else {
            panic!("not bf16")
        };
        for ((x, g), r) in v.iter().zip(&got).zip(&relu) {
            assert_eq!(
                g.to_bits(),
                bf16::from_f32(*x).to_bits(),
                "{:#x}",
                x.to_bits()
            );
            let want = bf16::from_f32(x.max(0.0)).to_bits();
            assert_eq!(r.to_bits(), want, "relu {:#x}", x.to_bits());
        }
        let back = widen(&Buf::Bf16(got.clone())).unwrap();
        for (b, g) in back.iter().zip(&got) {
            assert_eq!(b.to_bits(), g.to_f32().to_bits());
        }
    }

    #[test]
    fn bad_scaler_settings_are_refused() {
        for c in [
            ScalerConfig {
                init_scale: 0.0,
                ..Default::default()
            },
            ScalerConfig {
                growth_factor: 1.0,
                ..Default::default()
            },
            ScalerConfig {
                backoff_factor: 1.5,
                ..Default::default()
            },
            ScalerConfig {
                growth_interval: 0,
                ..Default::default()
            },
        ] {
            assert!(c.validate().is_err());
        }
    }
}
