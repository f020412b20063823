//! The AMX path of the native bf16 GEMM (Sapphire Rapids and later: AMX-TILE and
//! AMX-BF16). Why AMX and not only `vdpbf16ps`: on this project's Sapphire Rapids host a
//! standalone probe (24 independent chains, the load average about 10) gave 52-57 GFLOP/s
//! for f32 FMAs, 17-23 for `vdpbf16ps`, and 340-400 for `tdpbf16ps` on four tiles: the
//! AVX-512 dot product is slower than f32 there, the tile unit 7x faster.
//!
//! Tiles: 8 of 16 rows x 64 bytes. tmm0-3 hold a 32x32 f32 block of C (2x2 tiles),
//! tmm4-5 two 16-row tiles of A (16 k-pairs each), tmm6-7 two 16-column tiles of B.
//! B is packed as for the AVX-512 kernel (`gemm_bf16::pack`, 32 lanes a pair, so a B
//! tile is every other 64 bytes: stride 128); A as rows of k-pairs (a tile row is 64
//! bytes of one row). k is padded with zero pairs to a multiple of 16.
//!
//! The kernel asks Linux once per process for the tile data state
//! (`arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`); where that is refused the
//! AVX-512 path runs instead.

use std::arch::asm;
use std::cell::RefCell;
use std::sync::OnceLock;

use crate::engine::ops::gemm::Mat;
use crate::engine::ops::gemm_bf16::{block_depth, pack, pair, pairs_of_run, BSrc, Lanes, NR};

/// Rows of C a tile pair covers (two 16-row tiles).
const MR: usize = 32;
/// Rows of A packed at a time: 4 panels of 32, 128 x 384 x 2 bytes = 96 KiB in L2.
const MC: usize = 128;
/// Columns of B packed at a time, as the AVX-512 path.
const NC: usize = 1024;

/// Set to `1`: bf16 GEMMs never use AMX tiles (see [`ready`]).
pub const NO_AMX_ENV: &str = "TUNE_CPU_NO_AMX";

/// Whether the AMX path runs here: the CPU has AMX-TILE and AMX-BF16 (CPUID leaf 7,
/// EDX bits 24 and 22), AVX512_BF16 for the packing, and Linux granted the tile state.
pub fn ready() -> bool {
    static READY: OnceLock<bool> = OnceLock::new();
    *READY.get_or_init(|| {
        // `TUNE_CPU_NO_AMX=1` runs bf16 GEMMs on AVX512_BF16 dot products even where the
        // tiles exist: the two sum in different orders, and a CPU without AMX (AMD Zen
        // 4/5) runs the dot-product path, whose golden losses must be recordable and
        // checkable on an AMX host too (tests/engine_golden.rs).
        if std::env::var_os(NO_AMX_ENV).is_some_and(|v| v == "1") {
            return false;
        }
        if !crate::engine::ops::gemm_bf16::available() {
            return false;
        }
        // CPUID leaf 7 exists where AVX-512 does (checked above).
        let edx = std::arch::x86_64::__cpuid_count(7, 0).edx;
        if edx & (1 << 24) == 0 || edx & (1 << 22) == 0 {
            return false;
        }
        const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
        const XFEATURE_XTILEDATA: libc::c_long = 18;
        // SAFETY: arch_prctl with these arguments only changes this process' permitted
        // XSAVE features; it reads and writes no memory of ours.
        let r = unsafe {
            libc::syscall(
                libc::SYS_arch_prctl,
                ARCH_REQ_XCOMP_PERM,
                XFEATURE_XTILEDATA,
            )
        };
        r == 0
    })
}

/// The palette-1 tile configuration: 8 tiles of 16 rows x 64 bytes.
#[repr(C, align(64))]
struct TileCfg([u8; 64]);

fn config() -> TileCfg {
    let mut c = [0u8; 64];
    c[0] = 1;
    for t in 0..8 {
        c[16 + 2 * t] = 64;
        c[48 + t] = 16;
    }
    TileCfg(c)
}

/// Loads the palette-1 configuration [`tiles`] and [`store`] expect into this thread.
///
/// # Safety
/// [`ready`] returned true; [`release`] follows on the same thread.
pub(super) unsafe fn configure() {
    let cfg = config();
    // SAFETY: the tile state is permitted (`ready`, the contract); the configuration is
    // 64 aligned bytes of palette 1.
    unsafe { asm!("ldtilecfg [{0}]", in(reg) cfg.0.as_ptr(), options(nostack)) };
}

/// Releases this thread's tile state ([`configure`]).
pub(super) fn release() {
    // SAFETY: tilerelease only resets tile registers and configuration; without a
    // configuration loaded it does nothing.
    unsafe { asm!("tilerelease", options(nostack, nomem)) };
}

thread_local! {
    /// Packing buffers (A block, B panel, one pair's lanes) per thread.
    static BUFS: RefCell<(Vec<u32>, Vec<u32>, Vec<u32>)> =
        const { RefCell::new((Vec::new(), Vec::new(), Vec::new())) };
}

/// One thread's GEMM into `dst` (row stride `ld`) on the tile unit.
///
/// # Safety
/// As `gemm_bf16::one`, and [`ready`] returned true.
pub(super) unsafe fn one(dst: *mut f32, ld: usize, a: Mat, b: BSrc, accumulate: bool) {
    let (m, k) = (a.rows, a.cols);
    let n = match b {
        BSrc::Mat(bm) => bm.cols,
        BSrc::Packed { cols, .. } => cols,
    };
    let kc = block_depth(k);
    let kp16 = (kc / 2).div_ceil(16) * 16;
    let av = Lanes {
        data: a.data,
        ls: a.rs,
        ks: a.cs,
    };
    // SAFETY: `ready()` holds (the contract); released below.
    unsafe { configure() };
    BUFS.with(|bufs| {
        let mut bufs = bufs.borrow_mut();
        let (ap, bp, tmp) = &mut *bufs;
        ap.resize(MC * kp16, 0);
        bp.resize(NC.div_ceil(NR) * NR * kp16, 0);
        tmp.resize(kc / 2 + 16, 0);
        let mut scratch = [0.0f32; MR * NR];
        for jc in (0..n).step_by(NC) {
            let nc = (n - jc).min(NC);
            for pc in (0..k).step_by(kc) {
                let kv = (k - pc).min(kc);
                let kp = kv.div_ceil(2);
                let kt = kp.div_ceil(16) * 16;
                if let BSrc::Mat(bm) = b {
                    let bv = Lanes {
                        data: bm.data,
                        ls: bm.cs,
                        ks: bm.rs,
                    };
                    for jr in (0..nc).step_by(NR) {
                        let off = (jr / NR) * NR * kt;
                        let panel = &mut bp[off..off + NR * kt];
                        // SAFETY: as in `gemm_bf16::one`: the block lies inside b, the
                        // panel holds kp pairs of NR lanes.
                        unsafe {
                            pack(
                                &mut panel[..NR * kp],
                                NR,
                                bv,
                                (jc + jr, (nc - jr).min(NR)),
                                (pc, kv),
                                tmp,
                            )
                        };
                        panel[NR * kp..].fill(0);
                    }
                }
                let load = accumulate || pc > 0;
                for ic in (0..m).step_by(MC) {
                    let mc = (m - ic).min(MC);
                    for ir in (0..mc).step_by(MR) {
                        let off = (ir / MR) * MR * kt;
                        pack_rows(
                            &mut ap[off..off + MR * kt],
                            kt,
                            av,
                            (ic + ir, (mc - ir).min(MR)),
                            (pc, kv),
                        );
                    }
                    for jr in (0..nc).step_by(NR) {
                        let bpan = match b {
                            BSrc::Mat(_) => bp[(jr / NR) * NR * kt..].as_ptr(),
                            BSrc::Packed { p, first, .. } => {
                                p.panel(pc, first + (jc + jr) / NR).as_ptr()
                            }
                        };
                        for ir in (0..mc).step_by(MR) {
                            let apan = ap[(ir / MR) * MR * kt..].as_ptr();
                            // SAFETY: the panels hold kt pairs (zero-padded) of MR and NR
                            // lanes; the tile's rows and columns are clipped to the
                            // problem, which lies inside dst per the contract.
                            unsafe {
                                // A: 32 rows of kt pairs; B: kt pairs of NR lanes.
                                tiles((apan as *const u8, kt * 4), (bpan as *const u8, NR * 4), kt);
                                store(scratch.as_mut_ptr(), NR);
                                write_back(
                                    &scratch,
                                    dst.add((ic + ir) * ld + jc + jr),
                                    ld,
                                    ((mc - ir).min(MR), (nc - jr).min(NR)),
                                    load,
                                );
                            }
                        }
                    }
                }
            }
        }
    });
    release();
}

/// Packs rows `l0..l0+lv` (of 32) and k `k0..k0+kv` of `v` as rows of k-pairs:
/// `out[l * kt + p]`, zero past `lv` rows and past the block's pairs.
fn pack_rows(
    out: &mut [u32],
    kt: usize,
    v: Lanes,
    (l0, lv): (usize, usize),
    (k0, kv): (usize, usize),
) {
    let kp = kv.div_ceil(2);
    let d = v.data;
    for l in 0..MR {
        let row = &mut out[l * kt..(l + 1) * kt];
        if l >= lv {
            row.fill(0);
            continue;
        }
        let base = (l0 + l) * v.ls + k0 * v.ks;
        if v.ks == 1 {
            // SAFETY: `ready()` implies AVX512_BF16; the row holds kt >= kp pairs.
            unsafe { pairs_of_run(&d[base..base + kv], &mut row[..kp]) };
        } else if v.ls != 1 {
            for (p, o) in row[..kp].iter_mut().enumerate() {
                let hi = if 2 * p + 1 < kv {
                    d[base + (2 * p + 1) * v.ks]
                } else {
                    0.0
                };
                *o = pair(d[base + 2 * p * v.ks], hi);
            }
        }
        row[kp..].fill(0);
    }
    if v.ls == 1 && v.ks != 1 {
        // Rows contiguous (A = dy^T in the weight gradients, k = the batch): 16 rows of
        // a k-pair narrowed and paired at once (`gemm_bf16::pack` on a 16-lane strip),
        // then spread to their rows.
        let mut strip = [0u32; 16 * 16];
        let mut l = 0;
        while l < lv {
            let w = (lv - l).min(16);
            for p0 in (0..kp).step_by(16) {
                let pn = (kp - p0).min(16);
                let kk = (kv - 2 * p0).min(32);
                // SAFETY: `ready()` implies AVX512_BF16; lanes l..l+w and k
                // k0+2p0..+kk lie inside the block; the strip holds pn pairs of 16.
                unsafe {
                    pack(
                        &mut strip[..16 * pn],
                        16,
                        v,
                        (l0 + l, w),
                        (k0 + 2 * p0, kk),
                        &mut [0u32; 32],
                    )
                };
                for q in 0..w {
                    let at = (l + q) * kt + p0;
                    for (p, o) in out[at..at + pn].iter_mut().enumerate() {
                        *o = strip[p * 16 + q];
                    }
                }
            }
            l += 16;
        }
    }
}

/// `C = A * B` over `kt` pairs (a multiple of 16) into tmm0-3 (a 32x32 f32 block's
/// four 16x16 quarters, summed from zero): A is 32 rows of `sa` bytes' stride, 16 pairs
/// (64 bytes) a step; B is pairs of `sb` bytes' stride, 32 columns (two 64-byte halves)
/// each. The one tile loop of both bf16 tile GEMMs (this file's packed panels and
/// `gemm_pairs`' operands as laid out), so both sum every output in the same order.
///
/// # Safety
/// The tile configuration of [`config`] is loaded; the 32 rows x kt pairs of A and the
/// kt pairs x 32 columns of B lie inside readable memory.
pub(super) unsafe fn tiles((a, sa): (*const u8, usize), (b, sb): (*const u8, usize), kt: usize) {
    let a1 = a.wrapping_add(16 * sa);
    // SAFETY: tilezero touches only tile registers.
    unsafe {
        asm!(
            "tilezero tmm0",
            "tilezero tmm1",
            "tilezero tmm2",
            "tilezero tmm3",
            options(nostack, nomem)
        )
    };
    for s in 0..kt / 16 {
        // SAFETY: step s reads 16 rows of 64 bytes from each A tile (pairs 16s..16s+16)
        // and pairs 16s..16s+16 of 64 bytes from each B half: inside per the contract.
        unsafe {
            asm!(
                "tileloadd tmm4, [{a0} + {sa}*1]",
                "tileloadd tmm5, [{a1} + {sa}*1]",
                "tileloadd tmm6, [{b0} + {sb}*1]",
                "tileloadd tmm7, [{b1} + {sb}*1]",
                "tdpbf16ps tmm0, tmm4, tmm6",
                "tdpbf16ps tmm1, tmm4, tmm7",
                "tdpbf16ps tmm2, tmm5, tmm6",
                "tdpbf16ps tmm3, tmm5, tmm7",
                a0 = in(reg) a.add(64 * s),
                a1 = in(reg) a1.add(64 * s),
                sa = in(reg) sa,
                b0 = in(reg) b.add(16 * s * sb),
                b1 = in(reg) b.add(16 * s * sb + 64),
                sb = in(reg) sb,
                options(nostack, readonly)
            )
        };
    }
}

/// Stores tmm0-3 (a 32x32 f32 block) at `c`, rows `ldc` floats apart.
///
/// # Safety
/// 32 rows of 32 writable floats at `c` with row stride `ldc`; tmm0-3 hold a block
/// ([`tiles`]).
pub(super) unsafe fn store(c: *mut f32, ldc: usize) {
    // SAFETY: four 16x16 f32 tiles into the block (the contract).
    unsafe {
        asm!(
            "tilestored [{c0} + {s}*1], tmm0",
            "tilestored [{c1} + {s}*1], tmm1",
            "tilestored [{c2} + {s}*1], tmm2",
            "tilestored [{c3} + {s}*1], tmm3",
            c0 = in(reg) c,
            c1 = in(reg) c.add(16),
            c2 = in(reg) c.add(16 * ldc),
            c3 = in(reg) c.add(16 * ldc + 16),
            s = in(reg) ldc * 4,
            options(nostack)
        )
    };
}

/// Adds (or writes) the `rows x cols` corner of `scratch` into `c` (row stride `ld`).
///
/// # Safety
/// `c` points to `rows` rows of `cols` writable floats at stride `ld`.
pub(super) unsafe fn write_back(
    scratch: &[f32; MR * NR],
    c: *mut f32,
    ld: usize,
    (rows, cols): (usize, usize),
    load: bool,
) {
    for i in 0..rows {
        // SAFETY: row i of the tile, `cols` floats, inside dst (the contract).
        let row = unsafe { std::slice::from_raw_parts_mut(c.add(i * ld), cols) };
        let src = &scratch[i * NR..i * NR + cols];
        if load {
            row.iter_mut().zip(src).for_each(|(d, s)| *d += s);
        } else {
            row.copy_from_slice(src);
        }
    }
}

/// Flops of `tdpbf16ps` on four tiles held in registers, for the peak probe: 2^19 rounds
/// of four (16x16 outputs x 32 products x 2 flops each), about 4 GFLOP.
///
/// # Safety
/// [`ready`] returned true.
pub unsafe fn peak_flops() -> f64 {
    const ROUNDS: usize = 1 << 19;
    let cfg = config();
    let zeros = [0u32; 16 * 16];
    let mut out = [0.0f32; 16 * 16];
    // SAFETY: the tile state is permitted (`ready`); loads read the 1 KiB of `zeros`
    // (16 rows of 64 bytes), the store writes the 1 KiB of `out`.
    unsafe {
        asm!("ldtilecfg [{0}]", in(reg) cfg.0.as_ptr(), options(nostack));
        asm!(
            "tileloadd tmm4, [{p} + {s}*1]",
            "tileloadd tmm5, [{p} + {s}*1]",
            "tileloadd tmm6, [{p} + {s}*1]",
            "tileloadd tmm7, [{p} + {s}*1]",
            "tilezero tmm0",
            "tilezero tmm1",
            "tilezero tmm2",
            "tilezero tmm3",
            p = in(reg) zeros.as_ptr(),
            s = in(reg) 64usize,
            options(nostack, readonly)
        );
        for _ in 0..ROUNDS {
            asm!(
                "tdpbf16ps tmm0, tmm4, tmm6",
                "tdpbf16ps tmm1, tmm4, tmm7",
                "tdpbf16ps tmm2, tmm5, tmm6",
                "tdpbf16ps tmm3, tmm5, tmm7",
                options(nostack, nomem)
            );
        }
        asm!(
            "tilestored [{p} + {s}*1], tmm0",
            p = in(reg) out.as_mut_ptr(),
            s = in(reg) 64usize,
            options(nostack)
        );
        asm!("tilerelease", options(nostack, nomem));
    }
    std::hint::black_box(out);
    (ROUNDS * 4 * 16 * 16 * 32 * 2) as f64
}
