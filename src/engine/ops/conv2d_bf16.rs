//! Convolutions under `amp = bf16` on the AMX tile unit, with im2col writing the tiles'
//! layout directly (#30). The columns are built from the bf16 input as it is stored (a
//! copy of 16-bit runs), as rows of k-pairs for the forward GEMM and as pairs of rows
//! for the weight gradient; the gradient `dy` is the input gradient's left operand as it
//! lies. So none of the column matrix's f32 round trip remains: before, each conv
//! widened its columns into an f32 matrix and the GEMM narrowed and packed them back to
//! bf16 pairs, in forward and twice in backward (`dy` likewise), which was most of the
//! bf16 conv's time on cnn-small (docs/performance/bf16-conversions.md).
//!
//! Every sum is the one `gemm_amx::one` computes on the same operands (`gemm_pairs`), so
//! results are bit for bit those of the packing path (unit tests below).

use half::bf16;
use half::slice::HalfFloatSliceExt;

use crate::engine::geom::ConvGeom;
use crate::engine::ops::gemm_bf16::PackedB;
use crate::engine::ops::gemm_pairs::{self, u32_as_u16, ws_u16, ws_u32, ARows, BCols, KSplit};
use crate::error::Result;

/// The kernel columns `kx` that land inside the input for output column `ox`, as
/// `(first kx, count, first ix)`. Consecutive `kx` read consecutive input pixels whatever
/// the stride, so each (row, ky) is one contiguous run of `count * c_in` values.
pub(crate) fn kx_run(g: &ConvGeom, ox: usize) -> (usize, usize, usize) {
    let start = (ox * g.stride) as isize - g.pad as isize;
    let kx0 = (-start).max(0) as usize;
    let kx1 = ((g.w as isize - start).min(g.k as isize)).max(0) as usize;
    let count = kx1.saturating_sub(kx0);
    (kx0, count, (start + kx0 as isize).max(0) as usize)
}

/// Output pixel `(oy, ox)`'s patch of one image `ximg` into `row` (`kkc` values in
/// (ky, kx, c) order), `zero` where the kernel reaches into the padding: the one im2col
/// row every layout here and `conv2d::im2col` write.
#[inline(always)]
pub(crate) fn patch<S: Copy, D: Copy>(
    ximg: &[S],
    g: &ConvGeom,
    (oy, ox): (usize, usize),
    row: &mut [D],
    zero: &impl Fn(&mut [D]),
    copy: &impl Fn(&mut [D], &[S]),
) {
    let c = g.c_in;
    let (kx0, cnt, ix0) = kx_run(g, ox);
    for ky in 0..g.k {
        let iy = (oy * g.stride + ky) as isize - g.pad as isize;
        let seg = &mut row[ky * g.k * c..(ky + 1) * g.k * c];
        if iy < 0 || iy >= g.h as isize || cnt == 0 {
            zero(seg);
            continue;
        }
        zero(&mut seg[..kx0 * c]);
        let off = (iy as usize * g.w + ix0) * c;
        copy(
            &mut seg[kx0 * c..(kx0 + cnt) * c],
            &ximg[off..off + cnt * c],
        );
        zero(&mut seg[(kx0 + cnt) * c..]);
    }
}

/// The conv's input as the tile path reads it: bf16 storage as its bits (an f32 input,
/// the model's, is narrowed once first, as the packing path rounds it).
#[derive(Clone, Copy)]
pub(crate) struct Input<'a>(&'a [u16]);

impl<'a> Input<'a> {
    pub(crate) fn bf16(x: &'a [bf16]) -> Input<'a> {
        Input(x.reinterpret_cast())
    }

    /// Row `r` of the column matrix (image r / (oh*ow)) as bf16 bits into `row`.
    #[inline(always)]
    fn row(self, g: &ConvGeom, r: usize, row: &mut [u16]) {
        let (per_img, ow) = (g.oh() * g.ow(), g.ow());
        let (n, p) = (r / per_img, r % per_img);
        let img = g.h * g.w * g.c_in;
        patch(
            &self.0[n * img..(n + 1) * img],
            g,
            (p / ow, p % ow),
            row,
            &gemm_pairs::zero_u16,
            &gemm_pairs::copy_u16,
        );
    }
}

fn pad32(v: usize) -> usize {
    v.div_ceil(32) * 32
}

/// Whether a conv of geometry `g` runs on the tile path under native bf16: the tile unit
/// is ready, and the column matrix's k (forward) and the output channels (the input
/// gradient's k) are cut into blocks a row-major bf16 row holds in order.
pub(crate) fn applies(g: &ConvGeom) -> bool {
    gemm_pairs::ready()
        && g.rows() > 0
        && KSplit::new(g.kkc()).dense()
        && KSplit::new(g.c_out).dense()
}

/// f32 words of workspace [`forward`] needs.
pub(crate) fn forward_ws(g: &ConvGeom) -> usize {
    pad32(g.rows()) * KSplit::new(g.kkc()).pairs
}

/// `y (rows x c_out) = [y +] columns(x) * W^T`, `wt` being `W^T` packed.
pub(crate) fn forward(
    x: Input,
    g: &ConvGeom,
    wt: &PackedB,
    y: &mut [f32],
    accumulate: bool,
    threads: usize,
    ws: &mut [f32],
) -> Result<()> {
    let ks = KSplit::new(g.kkc());
    let (rows, ld) = (g.rows(), 2 * ks.pairs);
    let a = &mut ws_u16(ws)[..pad32(rows) * ld];
    gemm_pairs::lay_rows(rows, &ks, a, ld, |r, v| x.row(g, r, v));
    let a = ARows { data: a, rows, ld };
    gemm_pairs::matmul(y, g.c_out, a, BCols::Packed(wt), &ks, accumulate, threads)
}

/// f32 words of workspace [`weight_grad`] needs.
pub(crate) fn weight_grad_ws(g: &ConvGeom) -> usize {
    let ks = KSplit::new(g.rows());
    pad32(g.c_out) * ks.pairs + ks.pairs * pad32(g.kkc())
}

/// `gw (c_out x kkc) = [gw +] dy^T * columns(x)`: k is the rows (output pixels), so `dy`
/// goes in as pairs of rows per channel and the columns as pairs of rows per column.
pub(crate) fn weight_grad(
    x: Input,
    dy: &[bf16],
    g: &ConvGeom,
    gw: &mut [f32],
    accumulate: bool,
    threads: usize,
    ws: &mut [f32],
) -> Result<()> {
    let ks = KSplit::new(g.rows());
    let ldb = pad32(g.kkc());
    let (aw, bw) = ws_u32(ws).split_at_mut(pad32(g.c_out) * ks.pairs);
    let bw = &mut bw[..ks.pairs * ldb];
    gemm_pairs::lay_transposed(dy.reinterpret_cast(), g.c_out, &ks, aw);
    gemm_pairs::lay_pairs(&ks, g.kkc(), bw, ldb, |r, v| x.row(g, r, v));
    let a = ARows {
        data: u32_as_u16(aw),
        rows: g.c_out,
        ld: 2 * ks.pairs,
    };
    let b = BCols::Pairs {
        data: bw,
        cols: g.kkc(),
        ld: ldb,
    };
    gemm_pairs::matmul(gw, g.kkc(), a, b, &ks, accumulate, threads)
}

/// f32 words of workspace [`input_grad`] needs besides the f32 `dcol` it writes.
pub(crate) fn input_grad_ws(g: &ConvGeom) -> usize {
    let ld = 2 * KSplit::new(g.c_out).pairs;
    if ld == g.c_out && g.rows().is_multiple_of(32) {
        0
    } else {
        (pad32(g.rows()) * ld).div_ceil(2)
    }
}

/// `dcol (rows x kkc) = dy * W`, `w` being `W` packed: `dy`'s bf16 rows are the left
/// operand as they lie when each is whole tile steps (the channel counts 32, 64, 128),
/// else copied into padded rows in `ws`.
pub(crate) fn input_grad(
    dy: &[bf16],
    g: &ConvGeom,
    w: &PackedB,
    dcol: &mut [f32],
    threads: usize,
    ws: &mut [f32],
) -> Result<()> {
    let ks = KSplit::new(g.c_out);
    let (rows, c, ld) = (g.rows(), g.c_out, 2 * ks.pairs);
    let bits: &[u16] = dy.reinterpret_cast();
    let a = if input_grad_ws(g) == 0 {
        ARows {
            data: bits,
            rows,
            ld: c,
        }
    } else {
        let a = &mut ws_u16(ws)[..pad32(rows) * ld];
        gemm_pairs::lay_rows(rows, &ks, a, ld, |r, v| {
            v.copy_from_slice(&bits[r * c..(r + 1) * c])
        });
        ARows { data: a, rows, ld }
    };
    gemm_pairs::matmul(dcol, g.kkc(), a, BCols::Packed(w), &ks, false, threads)
}

#[cfg(test)]
#[path = "conv2d_bf16_tests.rs"]
mod tests;
