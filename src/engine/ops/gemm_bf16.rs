//! Native bf16 GEMM: bf16 operands, f32 accumulation, on CPUs with AVX512_BF16
//! (`vdpbf16ps`: 16 lanes, each adding the dot product of one pair of bf16 values to an
//! f32 accumulator, so 32 multiply-adds per instruction where an f32 FMA does 16).
//!
//! The operands arrive as f32 views (`Mat`), as every other GEMM here; under `amp = bf16`
//! they already lie on the bf16 grid (activations widened from bf16 storage, weights
//! rounded by `KernelWeights`), so the round-to-nearest-even narrowing done while packing
//! is exact for them. Any other f32 input is rounded to bf16 first, as an autocast would.
//!
//! Layout (BLIS-style): `k` is cut into blocks of at most `KC`, the right-hand side into
//! panels of `NR` = 32 columns (two zmm registers), the left-hand side into panels of
//! `MR` = 12 rows. Both are packed as k-pairs: one u32 per (lane, pair) holding the bf16
//! of k = 2p in its low half and k = 2p + 1 in its high half, which is the operand layout
//! `vdpbf16ps` multiplies. The micro-kernel keeps a 12x32 f32 tile in 24 registers.
//!
//! Differences from the f32 path: products of bf16 pairs are summed in another order,
//! and `vdpbf16ps` treats denormal inputs and outputs as zero (bf16 shares f32's exponent
//! range, so only values below 1.2e-38 are affected). The tolerance the tests hold it
//! to: |got - ref| <= 1e-5 * sum|a_ik b_kj| against an f64 reference on the rounded
//! operands (`tests::matches_f64_reference_on_odd_shapes`).

use std::cell::RefCell;
use std::sync::OnceLock;

use crate::engine::device::MemTracker;
use crate::engine::ops::gemm::Mat;
use crate::engine::ops::gemm_amx;
use crate::error::{Error, Result};

/// Rows of the micro-kernel's tile: 12 rows x 2 vectors = 24 accumulators, which with the
/// two B vectors and one broadcast leaves 5 of the 32 zmm registers free. 24 independent
/// `vdpbf16ps` chains cover the instruction's latency at two per cycle.
const MR: usize = 12;
/// Columns of the tile: two zmm vectors of 16 f32. The CNNs' channel counts (32, 64, 128)
/// are multiples of it, so their GEMMs (n = c_out) have no ragged column panel.
pub(super) const NR: usize = 32;
/// Most k per block. A B micro-panel is KC/2 pairs x 32 lanes x 4 bytes = 24 KiB at 384,
/// which stays in the 48 KiB L1 of Sapphire Rapids while 12-row A panels stream past it.
pub(super) const KC: usize = 384;
/// Rows of A packed at a time (12 micro-panels): 144 x 384 x 2 bytes = 108 KiB in L2.
/// At 144 the mlp's batch of 128 is packed once per k-block.
const MC: usize = 144;
/// Columns of B packed at a time: 1024 x 384 x 2 bytes = 768 KiB in the 2 MiB L2.
const NC: usize = 1024;

/// Whether this CPU runs the native bf16 path (AVX512_BF16 with AVX-512F/BW), detected
/// once.
pub fn available() -> bool {
    static HAVE: OnceLock<bool> = OnceLock::new();
    *HAVE.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx512bw")
                && std::arch::is_x86_feature_detected!("avx512bf16")
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    })
}

/// One line saying how `amp = bf16` computes on this CPU, and why.
/// The unit native bf16 GEMMs run on: `amx`, `avx512_bf16`, or None (computed in f32).
pub fn unit() -> Option<&'static str> {
    if gemm_amx::ready() {
        Some("amx")
    } else if available() {
        Some("avx512_bf16")
    } else {
        None
    }
}

pub fn path_line() -> &'static str {
    if gemm_amx::ready() {
        "bf16: native, AMX tiles (tdpbf16ps), f32 accumulation: on this CPU class AVX512_BF16's \
         vdpbf16ps runs at about half the f32 FMA rate, the tiles at about 7x"
    } else if available() {
        "bf16: native, AVX512_BF16 dot products (vdpbf16ps), f32 accumulation"
    } else {
        "bf16: storage only, computed in f32: this CPU has no AVX512_BF16"
    }
}

/// `x` rounded to bf16 (nearest even), as the bits `vcvtne2ps2bf16` gives.
fn bf16_bits(x: f32) -> u32 {
    let b = x.to_bits();
    if x.is_nan() {
        (b >> 16) | 0x40
    } else {
        (b + 0x7fff + ((b >> 16) & 1)) >> 16
    }
}

pub(super) fn pair(lo: f32, hi: f32) -> u32 {
    bf16_bits(lo) | (bf16_bits(hi) << 16)
}

/// An operand seen as lanes x k: element (l, kk) at `data[l * ls + kk * ks]`. Lanes are
/// A's rows or B's columns.
#[derive(Clone, Copy)]
pub(super) struct Lanes<'a> {
    pub(super) data: &'a [f32],
    pub(super) ls: usize,
    pub(super) ks: usize,
}

thread_local! {
    /// Packing buffers (A block, B panel, one lane's pairs), kept per thread so a step's
    /// hundreds of GEMM calls do not each map and fault in fresh pages.
    static BUFS: RefCell<(Vec<u32>, Vec<u32>, Vec<u32>)> =
        const { RefCell::new((Vec::new(), Vec::new(), Vec::new())) };
}

/// `dst (m x n, row-major) = [dst +] a (m x k) * b (k x n)` with bf16 products and f32
/// sums. With `Rayon(t)`, t > 1, the output is split over t single-threaded GEMMs (rows
/// where `a` is taller, columns otherwise), as `gemm::matmul_split` does for f32.
/// Errors when the CPU lacks AVX512_BF16 ([`available`]); callers check first.
pub fn matmul(
    dst: &mut [f32],
    a: Mat,
    b: Mat,
    accumulate: bool,
    par: gemm::Parallelism,
) -> Result<()> {
    matmul_on(dst, a, BSrc::Mat(b), accumulate, par, gemm_amx::ready())
}

/// [`matmul`] with `b` packed already ([`PackedB`]): the same result bit for bit,
/// without packing `b` on this call.
pub fn matmul_packed(
    dst: &mut [f32],
    a: Mat,
    b: &PackedB,
    accumulate: bool,
    par: gemm::Parallelism,
) -> Result<()> {
    let src = BSrc::Packed {
        p: b,
        first: 0,
        cols: b.n,
    };
    matmul_on(dst, a, src, accumulate, par, gemm_amx::ready())
}

/// The right-hand operand: an f32 view packed per call, or panels packed before.
#[derive(Clone, Copy)]
pub(super) enum BSrc<'a> {
    Mat(Mat<'a>),
    /// Columns `first * NR ..` (`cols` of them) of a packed operand.
    Packed {
        p: &'a PackedB,
        first: usize,
        cols: usize,
    },
}

impl BSrc<'_> {
    fn dims(&self) -> (usize, usize) {
        match self {
            BSrc::Mat(b) => (b.rows, b.cols),
            BSrc::Packed { p, cols, .. } => (p.k, *cols),
        }
    }

    /// Columns `s..e` (`s` a multiple of NR where packed).
    fn columns(self, s: usize, e: usize) -> Self {
        match self {
            BSrc::Mat(b) => BSrc::Mat(Mat {
                data: &b.data[s * b.cs..],
                cols: e - s,
                ..b
            }),
            BSrc::Packed { p, first, .. } => BSrc::Packed {
                p,
                first: first + s / NR,
                cols: e - s,
            },
        }
    }
}

/// [`matmul`] on the tile unit when `amx` (which must then be [`gemm_amx::ready`]), on
/// the AVX-512 kernel otherwise: the tests run both.
fn matmul_on(
    dst: &mut [f32],
    a: Mat,
    b: BSrc,
    accumulate: bool,
    par: gemm::Parallelism,
    amx: bool,
) -> Result<()> {
    let amx = amx && gemm_amx::ready();
    let (m, k, n) = (a.rows, a.cols, b.dims().1);
    let b_ok = match b {
        BSrc::Mat(bm) => bm.rows == k && (k == 0 || last(&bm) < bm.data.len()),
        BSrc::Packed { p, first, cols } => {
            p.k == k && p.kc == block_depth(k) && first * NR + cols <= p.n
        }
    };
    if !b_ok || dst.len() < m * n || (k > 0 && last(&a) >= a.data.len()) {
        return Err(Error::Shape {
            op: "matmul_bf16",
            msg: format!(
                "({m}x{k}) * ({}x{n}) into {} elements (a has {})",
                b.dims().0,
                dst.len(),
                a.data.len(),
            ),
        });
    }
    if !available() {
        return Err(Error::Runtime(
            "native bf16 GEMM called on a CPU without AVX512_BF16".into(),
        ));
    }
    if m == 0 || n == 0 {
        return Ok(());
    }
    if k == 0 {
        if !accumulate {
            dst[..m * n].fill(0.0);
        }
        return Ok(());
    }
    let threads = match par {
        gemm::Parallelism::Rayon(t) if t > 1 && m.max(n) >= 2 * t => t,
        _ => 1,
    };
    let out = DstPtr(dst.as_mut_ptr());
    if threads == 1 {
        // SAFETY: the checks above bound every index of `a`, `b` and the m x n block of
        // `dst`, which this call borrows uniquely.
        unsafe { one(out.get(), n, a, b, accumulate, amx) };
        return Ok(());
    }
    let by_rows = m >= n;
    let len = if by_rows { m } else { n };
    // Blocks on whole micro-panels, so no thread gets a ragged panel in the middle.
    let unit = if by_rows { MR } else { NR };
    let per = len.div_ceil(threads).div_ceil(unit) * unit;
    use rayon::prelude::*;
    (0..len.div_ceil(per)).into_par_iter().for_each(|i| {
        let (s, e) = (i * per, ((i + 1) * per).min(len));
        if by_rows {
            let sub = Mat {
                data: &a.data[s * a.rs..],
                rows: e - s,
                ..a
            };
            // SAFETY: rows s..e of the checked problem; blocks of `dst` are disjoint
            // rows, and `matmul` holds its unique borrow until every task is done.
            unsafe { one(out.get().add(s * n), n, sub, b, accumulate, amx) };
        } else {
            // SAFETY: columns s..e likewise (s a multiple of NR); blocks are disjoint
            // columns of `dst`.
            unsafe { one(out.get().add(s), n, a, b.columns(s, e), accumulate, amx) };
        }
    });
    Ok(())
}

fn last(v: &Mat) -> usize {
    if v.rows == 0 || v.cols == 0 {
        0
    } else {
        (v.rows - 1) * v.rs + (v.cols - 1) * v.cs
    }
}

/// `dst`'s pointer for blocks written from several threads.
#[derive(Clone, Copy)]
struct DstPtr(*mut f32);
// SAFETY: each task writes only its own block of `dst` (disjoint rows or columns), and
// `matmul` holds the unique borrow until every task has finished.
unsafe impl Send for DstPtr {}
unsafe impl Sync for DstPtr {}

impl DstPtr {
    /// Through a method so a closure captures the whole (Send) wrapper.
    fn get(self) -> *mut f32 {
        self.0
    }
}

/// One thread's GEMM into `dst` (row stride `ld`).
///
/// # Safety
/// `a` and `b` are checked views (every index inside their slices), `b.rows == a.cols`,
/// the CPU has AVX512_BF16, and `dst` points to `a.rows` rows of `ld >= b.cols` floats
/// that nothing else reads or writes meanwhile.
/// `amx`: run on the tile unit ([`gemm_amx::one`]), which must then be ready.
unsafe fn one(dst: *mut f32, ld: usize, a: Mat, b: BSrc, accumulate: bool, amx: bool) {
    if amx {
        // SAFETY: the same contract, and the tile unit is ready.
        unsafe { gemm_amx::one(dst, ld, a, b, accumulate) };
        return;
    }
    let (m, k, n) = (a.rows, a.cols, b.dims().1);
    let kc = block_depth(k);
    let av = Lanes {
        data: a.data,
        ls: a.rs,
        ks: a.cs,
    };
    BUFS.with(|bufs| {
        let mut bufs = bufs.borrow_mut();
        let (ap, bp, tmp) = &mut *bufs;
        ap.resize(MC.div_ceil(MR) * MR * (kc / 2), 0);
        bp.resize(NC.div_ceil(NR) * NR * (kc / 2), 0);
        tmp.resize(kc / 2 + 16, 0);
        for jc in (0..n).step_by(NC) {
            let nc = (n - jc).min(NC);
            for pc in (0..k).step_by(kc) {
                let kv = (k - pc).min(kc);
                let kp = kv.div_ceil(2);
                if let BSrc::Mat(bm) = b {
                    let bv = Lanes {
                        data: bm.data,
                        ls: bm.cs,
                        ks: bm.rs,
                    };
                    for jr in (0..nc).step_by(NR) {
                        let off = (jr / NR) * NR * kp;
                        // SAFETY: lanes jc+jr.. and k pc..pc+kv lie inside b (checked
                        // view); the panel fits `bp` (sized for NC columns, kc/2 pairs).
                        unsafe {
                            pack(
                                &mut bp[off..off + NR * kp],
                                NR,
                                bv,
                                (jc + jr, (nc - jr).min(NR)),
                                (pc, kv),
                                tmp,
                            )
                        };
                    }
                }
                let load = accumulate || pc > 0;
                for ic in (0..m).step_by(MC) {
                    let mc = (m - ic).min(MC);
                    for ir in (0..mc).step_by(MR) {
                        let off = (ir / MR) * MR * kp;
                        // SAFETY: as for B, rows ic+ir.. of a.
                        unsafe {
                            pack(
                                &mut ap[off..off + MR * kp],
                                MR,
                                av,
                                (ic + ir, (mc - ir).min(MR)),
                                (pc, kv),
                                tmp,
                            )
                        };
                    }
                    for jr in (0..nc).step_by(NR) {
                        let bpan = match b {
                            BSrc::Mat(_) => bp[(jr / NR) * NR * kp..].as_ptr(),
                            BSrc::Packed { p, first, .. } => {
                                p.panel(pc, first + (jc + jr) / NR).as_ptr()
                            }
                        };
                        for ir in (0..mc).step_by(MR) {
                            let apan = ap[(ir / MR) * MR * kp..].as_ptr();
                            // SAFETY: the tile's rows ic+ir.. (< m) and columns jc+jr..
                            // (< n, masked to nv) lie inside dst per the contract; the
                            // panels hold kp pairs of MR and NR lanes.
                            unsafe {
                                tile(
                                    (mc - ir).min(MR),
                                    kp,
                                    apan,
                                    bpan,
                                    dst.add((ic + ir) * ld + jc + jr),
                                    ld,
                                    (nc - jr).min(NR),
                                    load,
                                )
                            };
                        }
                    }
                }
            }
        }
    });
}

/// Packs lanes `l0..l0+lv` and k `k0..k0+kv` of `v` as k-pairs: `out[p * stride + l]`
/// holds (k0+2p, k0+2p+1) of lane l0+l; lanes past `lv` and the odd k's partner are 0.
///
/// # Safety
/// Every element (l, kk) of the block lies inside `v.data`, `out` holds
/// `stride * ceil(kv/2)` values, `lv <= stride`, `tmp` holds ceil(kv/2) + 16, and the CPU
/// has AVX512_BF16.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
pub(super) unsafe fn pack(
    out: &mut [u32],
    stride: usize,
    v: Lanes,
    (l0, lv): (usize, usize),
    (k0, kv): (usize, usize),
    tmp: &mut [u32],
) {
    use std::arch::x86_64::*;
    let kp = kv.div_ceil(2);
    let d = v.data;
    if lv < stride {
        for p in 0..kp {
            out[p * stride + lv..(p + 1) * stride].fill(0);
        }
    }
    if v.ls == 1 {
        // Lanes contiguous (B row-major, A stored transposed): two k rows of 16 lanes are
        // narrowed in one `vcvtne2ps2bf16` and interleaved into pairs by one permute.
        static IDX: [i16; 32] = {
            let mut t = [0i16; 32];
            let mut q = 0;
            while q < 16 {
                t[2 * q] = q as i16;
                t[2 * q + 1] = 16 + q as i16;
                q += 1;
            }
            t
        };
        // SAFETY: IDX is 32 i16, one unaligned 64-byte load.
        let idx = unsafe { _mm512_loadu_epi16(IDX.as_ptr()) };
        for p in 0..kp {
            let r0 = l0 + (k0 + 2 * p) * v.ks;
            let has1 = 2 * p + 1 < kv;
            let r1 = r0 + v.ks;
            let row = &mut out[p * stride..p * stride + lv];
            let mut l = 0;
            while l + 16 <= lv {
                // SAFETY: lanes l..l+16 of k rows 2p (and 2p+1 when present) are inside
                // the block, so inside `d`; `row` has 16 u32 from l.
                unsafe {
                    let x0 = _mm512_loadu_ps(d.as_ptr().add(r0 + l));
                    let x1 = if has1 {
                        _mm512_loadu_ps(d.as_ptr().add(r1 + l))
                    } else {
                        _mm512_setzero_ps()
                    };
                    let h: __m512i = std::mem::transmute(_mm512_cvtne2ps_pbh(x1, x0));
                    let pairs = _mm512_permutexvar_epi16(idx, h);
                    _mm512_storeu_epi32(row.as_mut_ptr().add(l) as *mut i32, pairs);
                }
                l += 16;
            }
            for (j, o) in row.iter_mut().enumerate().skip(l) {
                let hi = if has1 { d[r1 + j] } else { 0.0 };
                *o = pair(d[r0 + j], hi);
            }
        }
    } else if v.ks == 1 {
        // k contiguous (A row-major, B = W^T): each lane's run narrows 32 floats at a
        // time straight into pairs, then the pairs are spread to the lane's column.
        for l in 0..lv {
            let base = (l0 + l) * v.ls + k0;
            // SAFETY: AVX512_BF16 per this function's contract; `tmp` holds kp pairs.
            unsafe { pairs_of_run(&d[base..base + kv], &mut tmp[..kp]) };
            for (p, &t) in tmp[..kp].iter().enumerate() {
                out[p * stride + l] = t;
            }
        }
    } else {
        for p in 0..kp {
            for l in 0..lv {
                let at = |kk: usize| d[(l0 + l) * v.ls + (k0 + kk) * v.ks];
                let hi = if 2 * p + 1 < kv { at(2 * p + 1) } else { 0.0 };
                out[p * stride + l] = pair(at(2 * p), hi);
            }
        }
    }
}

/// `out[p] = pair(src[2p], src[2p+1])` (the odd k's partner 0): 32 floats narrowed per
/// `vcvtne2ps2bf16`, which leaves them in k order, so pairs come out as they are.
///
/// # Safety
/// `out` holds ceil(src.len() / 2) values and the CPU has AVX512_BF16.
#[target_feature(enable = "avx512f,avx512bf16")]
pub(super) unsafe fn pairs_of_run(src: &[f32], out: &mut [u32]) {
    use std::arch::x86_64::*;
    let (kv, kp) = (src.len(), out.len());
    let full = (kv / 32 * 32).min(kp / 16 * 32);
    let mut kk = 0;
    while kk < full {
        // SAFETY: floats kk..kk+32 are inside `src`, pairs kk/2..kk/2+16 inside `out`.
        unsafe {
            let x0 = _mm512_loadu_ps(src.as_ptr().add(kk));
            let x1 = _mm512_loadu_ps(src.as_ptr().add(kk + 16));
            let h: __m512i = std::mem::transmute(_mm512_cvtne2ps_pbh(x1, x0));
            _mm512_storeu_epi32(out.as_mut_ptr().add(kk / 2) as *mut i32, h);
        }
        kk += 32;
    }
    // The tail (under 32 floats: all of a 3x3x3 convolution's 27) through masked loads,
    // whose masked-off lanes read as 0: the odd k's partner.
    let r = kv - full;
    if r > 0 {
        let mask = |w: usize| ((1u32 << w.min(16)) - 1) as __mmask16;
        let pairs = kp - full / 2;
        // SAFETY: the masks cover floats full..kv of `src` and pairs full/2..kp of `out`;
        // masked-off lanes are not touched (AVX-512 fault suppression), so the pointers
        // may run past the slices' ends.
        unsafe {
            let s0 = src.as_ptr().add(full);
            let x0 = _mm512_maskz_loadu_ps(mask(r), s0);
            let x1 = _mm512_maskz_loadu_ps(mask(r.saturating_sub(16)), s0.wrapping_add(16));
            let h: __m512i = std::mem::transmute(_mm512_cvtne2ps_pbh(x1, x0));
            let o = out.as_mut_ptr().add(full / 2) as *mut i32;
            _mm512_mask_storeu_epi32(o, mask(pairs), h);
        }
    }
}

/// The micro-kernel for a tile of `rows` (1..=MR) rows: dispatches to the version with
/// that many accumulator rows, so a ragged last panel costs no wasted multiplies.
///
/// # Safety
/// As [`tile_m`].
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn tile(
    rows: usize,
    kp: usize,
    a: *const u32,
    b: *const u32,
    c: *mut f32,
    ldc: usize,
    nv: usize,
    load: bool,
) {
    macro_rules! go {
        ($($m:literal)*) => {
            match rows {
                $($m => {
                    // SAFETY: forwarded contract.
                    unsafe { tile_m::<$m>(kp, a, b, c, ldc, nv, load) }
                })*
                _ => {}
            }
        };
    }
    go!(1 2 3 4 5 6 7 8 9 10 11 12);
}

/// `c[0..M][0..nv] = [c +] A_panel * B_panel` over `kp` k-pairs.
///
/// # Safety
/// `a` holds kp * MR u32 (pairs, lane-major per pair), `b` kp * NR, `c` points to M rows
/// of stride `ldc` with `nv <= NR` writable floats each, and the CPU has AVX512_BF16.
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn tile_m<const M: usize>(
    kp: usize,
    a: *const u32,
    b: *const u32,
    c: *mut f32,
    ldc: usize,
    nv: usize,
    load: bool,
) {
    use std::arch::x86_64::*;
    let mut acc = [[_mm512_setzero_ps(); 2]; M];
    for p in 0..kp {
        // SAFETY: pair p of the B panel is NR u32 at b + p*NR, of the A panel MR u32 at
        // a + p*MR (the contract); __m512i and __m512bh are both 64 plain bytes.
        unsafe {
            let bp = b.add(p * NR) as *const i32;
            let b0: __m512bh = std::mem::transmute(_mm512_loadu_epi32(bp));
            let b1: __m512bh = std::mem::transmute(_mm512_loadu_epi32(bp.add(16)));
            let ap = a.add(p * MR);
            for (i, row) in acc.iter_mut().enumerate() {
                let av: __m512bh = std::mem::transmute(_mm512_set1_epi32(*ap.add(i) as i32));
                row[0] = _mm512_dpbf16_ps(row[0], av, b0);
                row[1] = _mm512_dpbf16_ps(row[1], av, b1);
            }
        }
    }
    let mask = |lo: usize| -> __mmask16 {
        let w = nv.saturating_sub(lo).min(16);
        ((1u32 << w) - 1) as __mmask16
    };
    let (m0, m1) = (mask(0), mask(16));
    for (i, row) in acc.iter().enumerate() {
        // SAFETY: row i of the tile has nv writable floats from c + i*ldc; the masks
        // cover exactly those, and masked-off lanes are neither read nor written
        // (AVX-512 fault suppression), so the second vector may start past the end.
        unsafe {
            let r = c.add(i * ldc);
            let r1 = r.wrapping_add(16);
            let (mut v0, mut v1) = (row[0], row[1]);
            if load {
                v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, r));
                v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, r1));
            }
            _mm512_mask_storeu_ps(r, m0, v0);
            _mm512_mask_storeu_ps(r1, m1, v1);
        }
    }
}

// Packed operands (`PackedB`): A right-hand GEMM operand packed for the native bf16 kernels once, then reused by
// every call: a layer's weights, packed when the optimizer has changed them and not on
// each of the step's GEMMs (`ops/layer.rs`, `Param::kernel_weights`).
//
// Before: mlp at batch 128, 1 thread, `amp = bf16` (perf, Sapphire Rapids) spent about a
// third of its GEMM time narrowing and packing the f32 weights, each 1024x1024 matrix
// packed in forward and again for the input gradient on every step (and once per thread
// under a column split).
//
// Layout: `k` is cut into the same blocks the kernels cut it into (`gemm_bf16::one`),
// and each block's columns into panels of `NR` lanes holding the block's k-pairs padded
// with zero pairs to a multiple of 16 (the AMX kernel's tile depth; the AVX-512 kernel
// reads only the pairs it needs). Each panel holds exactly what the kernels would have
// packed from the same operand, so results are bit for bit those of packing per call.

/// The k per block the kernels use for depth `k`: even blocks of equal size, at most
/// `KC` (784 runs as 2 x 392 rather than 384 + 384 + 16).
pub(crate) fn block_depth(k: usize) -> usize {
    let blocks = k.div_ceil(KC).max(1);
    k.div_ceil(blocks).div_ceil(2) * 2
}

/// A `k x n` operand packed as bf16 k-pairs (see the module's doc).
#[derive(Debug)]
pub struct PackedB {
    pub(crate) k: usize,
    pub(crate) n: usize,
    /// k per block, as [`block_depth`].
    pub(crate) kc: usize,
    /// Per block: where its panels start in `data`, and its pairs per panel (padded).
    blocks: Vec<(usize, usize)>,
    data: Vec<u32>,
}

impl PackedB {
    /// Packs `b` (any strides). Errors where the CPU lacks AVX512_BF16 or `b`'s view
    /// reaches past its data.
    pub fn new(b: Mat) -> Result<PackedB> {
        PackedB::new_in(b, &MemTracker::default())
    }

    /// [`PackedB::new`] into a buffer from `mem`'s recycle bin when it holds one of the
    /// packed length (weights are packed again after every optimizer step: fresh
    /// buffers were pages faulted in every step); [`PackedB::recycle`] hands it back.
    pub fn new_in(b: Mat, mem: &MemTracker) -> Result<PackedB> {
        let (k, n) = (b.rows, b.cols);
        let last = if k == 0 || n == 0 {
            0
        } else {
            (k - 1) * b.rs + (n - 1) * b.cs
        };
        if k > 0 && n > 0 && last >= b.data.len() {
            return Err(Error::Shape {
                op: "pack_bf16",
                msg: format!("{k}x{n} view past {} elements", b.data.len()),
            });
        }
        if !available() {
            return Err(Error::Runtime(
                "bf16 packing called on a CPU without AVX512_BF16".into(),
            ));
        }
        let kc = block_depth(k);
        let panels = n.div_ceil(NR);
        let mut blocks = Vec::new();
        let mut len = 0;
        for pc in (0..k).step_by(kc.max(1)) {
            let kt = (k - pc).min(kc).div_ceil(2).div_ceil(16) * 16;
            blocks.push((len, kt));
            len += panels * NR * kt;
        }
        use rayon::prelude::*;
        let mut data = mem
            .take_recycled::<u32>(len)
            .unwrap_or_else(|| vec![0u32; len]);
        let view = Lanes {
            data: b.data,
            ls: b.cs,
            ks: b.rs,
        };
        for (i, &(start, kt)) in blocks.iter().enumerate() {
            let end = start + panels * NR * kt;
            let pc = i * kc;
            let kv = (k - pc).min(kc);
            let kp = kv.div_ceil(2);
            data[start..end]
                .par_chunks_mut(NR * kt)
                .enumerate()
                .for_each(|(j, panel)| {
                    let lanes = (n - j * NR).min(NR);
                    // The block's padding pairs: a recycled buffer holds old values.
                    panel[NR * kp..].fill(0);
                    let mut tmp = vec![0u32; kc / 2 + 16];
                    // SAFETY: lanes j*NR.. and k pc..pc+kv lie inside the checked view;
                    // the panel holds kt >= kp pairs of NR lanes; AVX512_BF16 is here.
                    unsafe {
                        pack(
                            &mut panel[..NR * kp],
                            NR,
                            view,
                            (j * NR, lanes),
                            (pc, kv),
                            &mut tmp,
                        )
                    };
                });
        }
        Ok(PackedB {
            k,
            n,
            kc,
            blocks,
            data,
        })
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.data.len() * 4
    }

    /// Gives the packed buffer to `mem`'s recycle bin, for the next [`PackedB::new_in`].
    pub fn recycle(self, mem: &MemTracker) {
        mem.recycle(self.data);
    }

    /// Panel `j` (columns j*NR..) of the k-block starting at `pc`: pairs of NR lanes,
    /// zero-padded to the block's multiple of 16 pairs.
    pub(crate) fn panel(&self, pc: usize, j: usize) -> &[u32] {
        let (start, kt) = self.blocks[pc / self.kc];
        &self.data[start + j * NR * kt..start + (j + 1) * NR * kt]
    }
}

#[cfg(test)]
#[path = "gemm_bf16_tests.rs"]
mod tests;
