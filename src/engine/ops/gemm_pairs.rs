//! The tile unit's bf16 GEMM on operands that are already in its layout (#30): no
//! packing pass. `gemm_amx::one` takes f32 views and packs both operands into k-pair
//! panels on every call; under `amp = bf16` the convolutions' operands are bf16 storage
//! to begin with, so their im2col can write the layout the tiles load (`conv2d_bf16.rs`)
//! and a stored gradient whose rows are whole tile steps is the left operand as it lies.
//! Before this, cnn-small at batch 64, 1 thread, spent most of its conv GEMM time
//! widening the columns to f32 and packing them back to bf16 pairs (perf, Sapphire
//! Rapids, docs/performance/bf16-conversions.md).
//!
//! Layouts, with `k` cut into the blocks the other native kernels use ([`KSplit`]: the
//! same `block_depth`, each block's pairs padded with zero pairs to whole tile steps of
//! 16), so every output is summed in the same order as `gemm_amx::one` sums it: bit for
//! bit its result.
//! - Left operand ([`ARows`]): row i's padded pair P is the u16 pair at `2P` of row i
//!   (row stride `ld` u16): a row-major bf16 matrix when the blocks need no padding.
//! - Right operand ([`BCols`]): padded pair P of column j at `P * ld + j` (u32, the low
//!   half k = 2p, the high half 2p + 1), or a [`PackedB`] (32-column panels).

use rayon::prelude::*;

use crate::engine::ops::gemm_amx;
use crate::engine::ops::gemm_bf16::{block_depth, PackedB, NR};
use crate::error::{Error, Result};

/// Rows and columns of C one step of four tiles covers.
pub(crate) const T: usize = 32;

/// `k` cut as the native bf16 kernels cut it, with each block's pairs padded to whole
/// tile steps of 16 pairs.
#[derive(Clone, Debug)]
pub(crate) struct KSplit {
    pub(crate) k: usize,
    /// k per block ([`block_depth`]; even).
    pub(crate) kc: usize,
    /// Per block: its first padded pair and its padded pair count.
    pub(crate) blocks: Vec<(usize, usize)>,
    /// Pairs over all blocks, padding included.
    pub(crate) pairs: usize,
}

impl KSplit {
    pub(crate) fn new(k: usize) -> KSplit {
        let kc = block_depth(k);
        let mut blocks = Vec::new();
        let mut pairs = 0;
        if k > 0 {
            for pc in (0..k).step_by(kc) {
                let kt = (k - pc).min(kc).div_ceil(2).div_ceil(16) * 16;
                blocks.push((pairs, kt));
                pairs += kt;
            }
        }
        KSplit {
            k,
            kc,
            blocks,
            pairs,
        }
    }

    /// Whether a row's k values lie at u16 positions 0..k in order (every block but the
    /// last fills its tile steps exactly; the last one's padding follows k): then a
    /// row-major bf16 matrix with rows of `2 * pairs` is the left operand as it is.
    pub(crate) fn dense(&self) -> bool {
        let n = self.blocks.len();
        n > 0
            && self.blocks[..n - 1]
                .iter()
                .all(|&(_, kt)| 2 * kt == self.kc)
    }

    /// Block `b` alone, its pairs from 0: for an operand laid out one block at a time.
    pub(crate) fn block(&self, b: usize) -> KSplit {
        let (s, e) = self.span(b);
        KSplit {
            k: e - s,
            kc: self.kc,
            blocks: vec![(0, self.blocks[b].1)],
            pairs: self.blocks[b].1,
        }
    }

    /// Rows `kk` of block `b` span: `b * kc .. min((b + 1) * kc, k)`.
    pub(crate) fn span(&self, b: usize) -> (usize, usize) {
        (b * self.kc, ((b + 1) * self.kc).min(self.k))
    }
}

/// A left operand in the tiles' layout: `rows` rows (the memory holds them padded to a
/// multiple of 32), row i's padded pair P at u16 `i * ld + 2P`.
#[derive(Clone, Copy)]
pub(crate) struct ARows<'a> {
    pub(crate) data: &'a [u16],
    pub(crate) rows: usize,
    pub(crate) ld: usize,
}

/// A right operand in the tiles' layout.
#[derive(Clone, Copy)]
pub(crate) enum BCols<'a> {
    /// `cols` columns (the memory holds them padded to a multiple of 32), padded pair P
    /// of column j at `data[P * ld + j]`.
    Pairs {
        data: &'a [u32],
        cols: usize,
        ld: usize,
    },
    /// Packed once (a layer's weights).
    Packed(&'a PackedB),
}

impl BCols<'_> {
    fn cols(&self) -> usize {
        match self {
            BCols::Pairs { cols, .. } => *cols,
            BCols::Packed(p) => p.n,
        }
    }

    /// The first u32 of block `b`'s columns `j..j + 32` (j a multiple of 32), and the
    /// stride between its pairs in u32.
    fn at(&self, ks: &KSplit, b: usize, j: usize) -> (*const u32, usize) {
        match self {
            BCols::Pairs { data, ld, .. } => (data[ks.blocks[b].0 * ld + j..].as_ptr(), *ld),
            BCols::Packed(p) => (p.panel(b * ks.kc, j / NR).as_ptr(), NR),
        }
    }
}

/// Whether the tile unit runs here: the kernels below need it, callers check first.
pub(crate) fn ready() -> bool {
    gemm_amx::ready()
}

/// Errors unless `a` and `b` hold what their descriptions say for `a.rows x b.cols()`
/// over the k of `ks` (rows and columns padded to 32 in memory), and a destination of
/// `dst_len` floats at row stride `ldc` holds the product.
fn check(a: &ARows, b: &BCols, ks: &KSplit, dst_len: usize, ldc: usize) -> Result<()> {
    let (m, n) = (a.rows, b.cols());
    let pad = |v: usize| v.div_ceil(T) * T;
    let a_ok = a.ld >= 2 * ks.pairs && a.data.len() >= pad(m) * a.ld;
    let b_ok = match *b {
        BCols::Pairs { data, ld, .. } => ld >= pad(n) && data.len() >= ks.pairs * ld,
        BCols::Packed(p) => p.k == ks.k && p.kc == ks.kc,
    };
    let dst_ok = m == 0 || n == 0 || (ldc >= n && dst_len >= (m - 1) * ldc + n);
    if a_ok && b_ok && dst_ok {
        return Ok(());
    }
    Err(Error::Shape {
        op: "matmul_tiles",
        msg: format!(
            "{m}x{} * {}x{n} into {dst_len} elements (row stride {ldc}; a holds {} u16 of \
             stride {}, b's layout fits: {b_ok})",
            ks.k,
            ks.k,
            a.data.len(),
            a.ld
        ),
    })
}

/// `dst (m x n, row stride ldc) = [dst +] a * b` over the k of `ks`, on the tile unit,
/// split over `threads` (rows of C where `a` is taller, columns otherwise). Errors where
/// an operand's memory does not hold what its description says, or the tile unit is
/// not ready here.
pub(crate) fn matmul(
    dst: &mut [f32],
    ldc: usize,
    a: ARows,
    b: BCols,
    ks: &KSplit,
    accumulate: bool,
    threads: usize,
) -> Result<()> {
    check(&a, &b, ks, dst.len(), ldc)?;
    if !ready() {
        return Err(Error::Runtime(
            "bf16 tile GEMM called where the AMX tile unit is not ready".into(),
        ));
    }
    let (m, n) = (a.rows, b.cols());
    if empty(dst, ldc, (m, n), ks, accumulate) {
        return Ok(());
    }
    let out = Out(dst.as_mut_ptr());
    let by_rows = m >= n;
    let len = if by_rows { m } else { n };
    let threads = threads.clamp(1, len.div_ceil(T));
    let per = len.div_ceil(threads).div_ceil(T) * T;
    let part = |i: usize| -> Result<()> {
        let (s, e) = (i * per, ((i + 1) * per).min(len));
        let (rows, cols) = if by_rows {
            ((s, e), (0, n))
        } else {
            ((0, m), (s, e))
        };
        let on = Tiles::new()?;
        // SAFETY: the checks above hold every tile load inside `a` and `b` (rows and
        // columns padded to 32 in memory, pairs per `ks`) and every write inside the
        // m x n block of `dst`; parts write disjoint rows or columns of it, and this
        // function holds its unique borrow until every part is done.
        unsafe { part_on_tiles(&on, out.get(), ldc, rows, cols, a, b, ks, accumulate) };
        Ok(())
    };
    if threads == 1 {
        part(0)
    } else {
        (0..len.div_ceil(per)).into_par_iter().try_for_each(part)
    }
}

/// Whether the product is empty (no rows, columns or k), having written what it then is
/// (zeros, unless added onto what `dst` holds).
fn empty(dst: &mut [f32], ldc: usize, (m, n): (usize, usize), ks: &KSplit, acc: bool) -> bool {
    if m == 0 || n == 0 {
        return true;
    }
    if ks.k == 0 && !acc {
        for i in 0..m {
            dst[i * ldc..i * ldc + n].fill(0.0);
        }
    }
    ks.k == 0
}

/// `dst`'s pointer for parts written from several threads.
#[derive(Clone, Copy)]
struct Out(*mut f32);
// SAFETY: each part writes only its own rows or columns of `dst` (see `matmul`).
unsafe impl Send for Out {}
unsafe impl Sync for Out {}

impl Out {
    /// Through a method so a closure captures the whole (Send) wrapper.
    fn get(self) -> *mut f32 {
        self.0
    }
}

/// Rows `r0..r1` and columns `c0..c1` of C (each start a multiple of 32), k-block by
/// k-block as `gemm_amx::one`: each block's 32x32 tiles summed over its pairs from zero,
/// then added into `dst` (written on the first block unless `accumulate`).
///
/// # Safety
/// As `matmul` checks: tile loads of rows `r0..` of `a` (padded to 32) and columns
/// `c0..` of `b` (padded to 32) stay inside their memory, and `dst` holds the block.
#[allow(clippy::too_many_arguments)]
unsafe fn part_on_tiles(
    _on: &Tiles,
    dst: *mut f32,
    ldc: usize,
    (r0, r1): (usize, usize),
    (c0, c1): (usize, usize),
    a: ARows,
    b: BCols,
    ks: &KSplit,
    accumulate: bool,
) {
    let mut scratch = [0.0f32; T * T];
    for bi in 0..ks.blocks.len() {
        let load = accumulate || bi > 0;
        for i in (r0..r1).step_by(T) {
            for j in (c0..c1).step_by(T) {
                let within = ((r1 - i).min(T), (c1 - j).min(T));
                // SAFETY: rows i.. of a and columns j.. of b lie inside their padded
                // memory, and the tile's clipped rows and columns inside `dst` (the
                // contract); `_on` configured the tile unit.
                unsafe {
                    block_tile(
                        (&a, i),
                        (&b, j),
                        (ks, bi),
                        (dst.add(i * ldc + j), ldc),
                        within,
                        load,
                        &mut scratch,
                    )
                };
            }
        }
    }
}

/// The 32x32 output tile at row `i` of `a` and column `j` of `b` over k-block `bi`,
/// summed from zero on the tiles, then written into `c` (row stride `ldc`, `rows x cols`
/// of it inside the problem) or added onto it when `load`: a whole tile written goes
/// straight from the tiles to `c`, anything else through `scratch`.
///
/// # Safety
/// The tile unit is configured on this thread; rows `i..i + 32` of `a` (padded) hold
/// block `bi`'s pairs, pairs of block `bi` of `b` hold columns `j..j + 32` (padded), and
/// `c` holds `rows` rows of `cols` writable floats (32 x 32 when whole) at stride `ldc`.
#[allow(clippy::too_many_arguments)]
unsafe fn block_tile(
    (a, i): (&ARows, usize),
    (b, j): (&BCols, usize),
    (ks, bi): (&KSplit, usize),
    (c, ldc): (*mut f32, usize),
    (rows, cols): (usize, usize),
    load: bool,
    scratch: &mut [f32; T * T],
) {
    let (off, kt) = ks.blocks[bi];
    let ap = a.data[i * a.ld + 2 * off..].as_ptr();
    let (bp, ldb) = b.at(ks, bi, j);
    // SAFETY: the contract.
    unsafe {
        gemm_amx::tiles((ap as *const u8, a.ld * 2), (bp as *const u8, ldb * 4), kt);
        if !load && rows == T && cols == T {
            gemm_amx::store(c, ldc);
        } else {
            gemm_amx::store(scratch.as_mut_ptr(), T);
            add_or_copy(scratch, c, ldc, (rows, cols), load);
        }
    }
}

/// This thread's tile unit, configured for [`strip`] while held (released when the
/// thread's last guard drops, so guards may nest).
pub(crate) struct Tiles {
    /// The configuration is the thread's: the guard must not move to another.
    _here: std::marker::PhantomData<*const ()>,
}

thread_local! {
    /// Live [`Tiles`] guards on this thread.
    static HELD: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

impl Tiles {
    /// Errors where the tile unit is not ready here.
    pub(crate) fn new() -> Result<Tiles> {
        if !ready() {
            return Err(Error::Runtime(
                "bf16 tile GEMM called where the AMX tile unit is not ready".into(),
            ));
        }
        if HELD.get() == 0 {
            // SAFETY: the unit is ready; the last guard's drop releases it on this
            // thread (guards are not Send).
            unsafe { gemm_amx::configure() };
        }
        HELD.set(HELD.get() + 1);
        Ok(Tiles {
            _here: std::marker::PhantomData,
        })
    }
}

impl Drop for Tiles {
    fn drop(&mut self) {
        let left = HELD.get().saturating_sub(1);
        HELD.set(left);
        if left == 0 {
            gemm_amx::release();
        }
    }
}

/// `out (a.rows x n, row stride ldo) = [out +] a * b` for a strip of at most 32 rows, on
/// this thread: the sums [`matmul`] gives those rows, block by block in the same order,
/// for callers that finish each strip while it is in cache (`conv2d_bf16`: narrowing
/// the output, col2im) instead of writing the whole product to memory first. `a.data`
/// holds 32 rows (rows past `a.rows` are read and their products discarded).
pub(crate) fn strip(
    _on: &Tiles,
    out: &mut [f32],
    ldo: usize,
    a: ARows,
    b: BCols,
    ks: &KSplit,
    accumulate: bool,
) -> Result<()> {
    check(&a, &b, ks, out.len(), ldo)?;
    let (m, n) = (a.rows, b.cols());
    if m > T {
        return Err(Error::Shape {
            op: "matmul_tiles",
            msg: format!("a strip of {m} rows (at most {T})"),
        });
    }
    if empty(out, ldo, (m, n), ks, accumulate) {
        return Ok(());
    }
    let mut scratch = [0.0f32; T * T];
    let c = out.as_mut_ptr();
    for bi in 0..ks.blocks.len() {
        let load = accumulate || bi > 0;
        for j in (0..n).step_by(T) {
            // SAFETY: `check` holds a's 32 rows and b's columns j..j + 32 of every block
            // inside their memory and the strip's m x n inside `out` (so a whole 32 x 32
            // tile, m = 32 and j + 32 <= n, too); `_on` configured the unit.
            unsafe {
                block_tile(
                    (&a, 0),
                    (&b, j),
                    (ks, bi),
                    (c.add(j), ldo),
                    (m, (n - j).min(T)),
                    load,
                    &mut scratch,
                )
            };
        }
    }
    Ok(())
}

/// Adds (`load`) or copies the `rows x cols` corner of `scratch` into `c` (row stride
/// `ldc`): `c + s` per element, as `gemm_amx::write_back`, in masked 16-lane vectors
/// (the scalar loop's calls to memcpy were 7% of cnn-small's bf16 step, perf).
///
/// # Safety
/// `c` points to `rows` rows of `cols` writable floats at stride `ldc`; the CPU has
/// AVX-512F (the tile unit implies it).
#[target_feature(enable = "avx512f")]
unsafe fn add_or_copy(
    scratch: &[f32; T * T],
    c: *mut f32,
    ldc: usize,
    (rows, cols): (usize, usize),
    load: bool,
) {
    use std::arch::x86_64::*;
    let mask = |lo: usize| ((1u32 << cols.saturating_sub(lo).min(16)) - 1) as __mmask16;
    let (m0, m1) = (mask(0), mask(16));
    for i in 0..rows.min(T) {
        // SAFETY: row i of `scratch` is 32 floats; row i of `c` has `cols` writable
        // floats, which the masks cover exactly (masked-off lanes are not touched).
        unsafe {
            let s = scratch.as_ptr().add(i * T);
            let (mut v0, mut v1) = (_mm512_loadu_ps(s), _mm512_loadu_ps(s.add(16)));
            let d = c.add(i * ldc);
            let d1 = d.wrapping_add(16);
            if load {
                v0 = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, d), v0);
                v1 = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, d1), v1);
            }
            _mm512_mask_storeu_ps(d, m0, v0);
            _mm512_mask_storeu_ps(d1, m1, v1);
        }
    }
}

/// Whether the masked AVX-512BW copies below run here (the tile unit implies it).
fn bw() -> bool {
    std::arch::is_x86_feature_detected!("avx512bw")
}

/// `d = s` (equal lengths) for the short runs im2col copies: masked 32-lane vectors
/// instead of a call to memcpy per run (im2col's run copies and fills were 12% of
/// cnn-small's bf16 step as calls, perf).
#[inline]
pub(crate) fn copy_u16(d: &mut [u16], s: &[u16]) {
    if !bw() || d.len() != s.len() {
        d.copy_from_slice(s);
        return;
    }
    // SAFETY: AVX-512BW is here (checked above); the lengths are equal.
    unsafe { copy_u16_bw(d, Some(s)) }
}

/// `d = 0` for short runs, as [`copy_u16`].
#[inline]
pub(crate) fn zero_u16(d: &mut [u16]) {
    if !bw() {
        d.fill(0);
        return;
    }
    // SAFETY: AVX-512BW is here (checked above).
    unsafe { copy_u16_bw(d, None) }
}

/// # Safety
/// The CPU has AVX-512BW; `s`, when given, is as long as `d`.
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn copy_u16_bw(d: &mut [u16], s: Option<&[u16]>) {
    use std::arch::x86_64::*;
    let n = d.len();
    let mut i = 0;
    while i < n {
        let w = (n - i).min(32);
        let m: __mmask32 = if w == 32 { u32::MAX } else { (1u32 << w) - 1 };
        // SAFETY: lanes i..i+w of `d` (and of `s`) are inside; masked-off lanes are not
        // touched.
        unsafe {
            let v = match s {
                Some(s) => _mm512_maskz_loadu_epi16(m, s.as_ptr().add(i) as *const i16),
                None => _mm512_setzero_si512(),
            };
            _mm512_mask_storeu_epi16(d.as_mut_ptr().add(i) as *mut i16, m, v);
        }
        i += 32;
    }
}

/// Writes the left layout of `rows` rows into `out` (row stride `ld >= 2 * ks.pairs`):
/// `row(r, v)` fills `v` with row r's `ks.k` bf16 values, which land at their blocks'
/// pairs, zero pairs after each block's values. Rows past `rows` (the tiles' padding)
/// are left as they are: only discarded outputs read them.
pub(crate) fn lay_rows(
    rows: usize,
    ks: &KSplit,
    out: &mut [u16],
    ld: usize,
    row: impl Fn(usize, &mut [u16]) + Sync,
) {
    const CHUNK: usize = 64;
    out[..rows * ld]
        .par_chunks_mut(CHUNK * ld)
        .enumerate()
        .for_each(|(ci, oc)| {
            let mut tmp = Vec::new();
            for (i, o) in oc.chunks_exact_mut(ld).enumerate() {
                lay_row(ks, o, &mut tmp, |v| row(ci * CHUNK + i, v));
            }
        });
}

/// One row of the left layout into `o` (at least `2 * ks.pairs` u16): `row(v)` fills `v`
/// with its `ks.k` bf16 values, which land at their blocks' pairs, zero pairs after each
/// block's values (`tmp` holds them on the way where the blocks need padding between).
#[inline]
pub(crate) fn lay_row(
    ks: &KSplit,
    o: &mut [u16],
    tmp: &mut Vec<u16>,
    row: impl FnOnce(&mut [u16]),
) {
    let k = ks.k;
    if ks.dense() {
        row(&mut o[..k]);
        zero_u16(&mut o[k..]);
        return;
    }
    tmp.resize(k, 0);
    row(tmp);
    o.fill(0);
    for (b, &(off, _)) in ks.blocks.iter().enumerate() {
        let (s, e) = ks.span(b);
        o[2 * off..2 * off + e - s].copy_from_slice(&tmp[s..e]);
    }
}

/// Writes the right layout of a matrix whose k runs over its rows: `out[P * ld + j]`
/// holds column j of rows 2p (low) and 2p+1 (high) of block b (P = its first pair + p),
/// zero past the block's rows and in columns `cols..ld`. `row(r, v)` fills `v` with row
/// r's `cols` bf16 values.
pub(crate) fn lay_pairs(
    ks: &KSplit,
    cols: usize,
    out: &mut [u32],
    ld: usize,
    row: impl Fn(usize, &mut [u16]) + Sync,
) {
    let Some(&(_, kt0)) = ks.blocks.first() else {
        return;
    };
    out[..ks.pairs * ld]
        .par_chunks_mut(kt0 * ld)
        .enumerate()
        .for_each(|(bi, blk)| lay_pairs_block(ks, bi, cols, blk, ld, &row));
}

/// Block `bi` of [`lay_pairs`]' layout into `blk` (the block's padded pairs, `ld` u32
/// each).
pub(crate) fn lay_pairs_block(
    ks: &KSplit,
    bi: usize,
    cols: usize,
    blk: &mut [u32],
    ld: usize,
    row: &impl Fn(usize, &mut [u16]),
) {
    let (rs, re) = ks.span(bi);
    let mut t = vec![0u16; 2 * cols];
    let (t0, t1) = t.split_at_mut(cols);
    for (p, o) in blk.chunks_exact_mut(ld).take(ks.blocks[bi].1).enumerate() {
        let r0 = rs + 2 * p;
        if r0 >= re {
            o.fill(0);
            continue;
        }
        row(r0, t0);
        if r0 + 1 < re {
            row(r0 + 1, t1);
        } else {
            t1.fill(0);
        }
        for ((o, lo), hi) in o.iter_mut().zip(t0.iter()).zip(t1.iter()) {
            *o = u32::from(*lo) | (u32::from(*hi) << 16);
        }
        o[cols..].fill(0);
    }
}

/// Writes the left layout of `m^T` for a row-major bf16 matrix `m` (`k x channels`, k
/// its rows): `out[c * pairs + P]` holds channel c of rows 2p (low) and 2p+1 (high) of
/// block b, zero past the block's rows. Rows of `out` past `channels` are left as they
/// are. (The weight gradients' `dy^T`.)
pub(crate) fn lay_transposed(m: &[u16], channels: usize, ks: &KSplit, out: &mut [u32]) {
    const CH: usize = 16;
    let ldp = ks.pairs;
    out[..channels * ldp]
        .par_chunks_mut(CH * ldp)
        .enumerate()
        .for_each(|(ci, oc)| {
            let c0 = ci * CH;
            let cn = (channels - c0).min(CH);
            for (bi, &(off, _)) in ks.blocks.iter().enumerate() {
                lay_transposed_block(m, channels, (c0, cn), ks, bi, &mut oc[off..], ldp);
            }
        });
}

/// Channels `c0..c0 + cn` of block `bi` of [`lay_transposed`]'s layout: channel
/// `c0 + cc`'s padded pair p of the block at `out[cc * ldp + p]`.
pub(crate) fn lay_transposed_block(
    m: &[u16],
    channels: usize,
    (c0, cn): (usize, usize),
    ks: &KSplit,
    bi: usize,
    out: &mut [u32],
    ldp: usize,
) {
    let (rs, re) = ks.span(bi);
    for p in 0..ks.blocks[bi].1 {
        let r0 = rs + 2 * p;
        if r0 >= re {
            for cc in 0..cn {
                out[cc * ldp + p] = 0;
            }
            continue;
        }
        let lo = &m[r0 * channels + c0..r0 * channels + c0 + cn];
        let hi = (r0 + 1 < re).then(|| &m[(r0 + 1) * channels + c0..(r0 + 1) * channels + c0 + cn]);
        for cc in 0..cn {
            let h = hi.map_or(0, |h| u32::from(h[cc]));
            out[cc * ldp + p] = u32::from(lo[cc]) | (h << 16);
        }
    }
}

/// The device workspace (f32, garbage) seen as u16 or u32 for the layouts above.
pub(crate) fn ws_u16(ws: &mut [f32]) -> &mut [u16] {
    // SAFETY: f32's alignment (4) covers u16's, every bit pattern is a valid u16, and
    // the view covers exactly the slice's bytes, borrowed uniquely for its lifetime.
    unsafe { std::slice::from_raw_parts_mut(ws.as_mut_ptr() as *mut u16, ws.len() * 2) }
}

pub(crate) fn ws_u32(ws: &mut [f32]) -> &mut [u32] {
    // SAFETY: as `ws_u16`: same size and alignment, every bit pattern valid.
    unsafe { std::slice::from_raw_parts_mut(ws.as_mut_ptr() as *mut u32, ws.len()) }
}

/// A u32 buffer's bytes as u16 (read-only), for a left operand written as pairs.
pub(crate) fn u32_as_u16(v: &[u32]) -> &[u16] {
    // SAFETY: u32's alignment covers u16's; the view covers exactly the slice's bytes.
    unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u16, v.len() * 2) }
}

#[cfg(test)]
#[path = "gemm_pairs_tests.rs"]
mod tests;
