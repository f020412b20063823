//! Convolutions under `amp = bf16` on the AMX tile unit, with im2col writing the tiles'
//! layout directly (#30). The columns are built from the bf16 input as it is stored (a
//! copy of 16-bit runs), as rows of k-pairs for the forward GEMM and as pairs of rows
//! for the weight gradient; the gradient `dy` is the input gradient's left operand. So
//! none of the column matrix's f32 round trip remains: before, each conv widened its
//! columns into an f32 matrix and the GEMM narrowed and packed them back to bf16 pairs,
//! in forward and twice in backward (`dy` likewise), which was most of the bf16 conv's
//! time on cnn-small (docs/performance/bf16-conversions.md).
//!
//! Forward and the input gradient run strip by strip of 32 output rows
//! (`gemm_pairs::strip`): each strip's operand laid out, multiplied and finished
//! (narrowed to bf16; for the input gradient added into its image by col2im) while it
//! is in cache, so neither the column matrix nor an f32 output goes through memory.
//!
//! Every sum is the one `gemm_amx::one` computes on the same operands (`gemm_pairs`),
//! and every rounding the one `ctx.store` makes, so results are bit for bit those of the
//! packing path (unit tests below).

use half::bf16;
use half::slice::HalfFloatSliceExt;
use rayon::prelude::*;

use crate::engine::amp::narrow_bf16;
use crate::engine::device::MemTracker;
use crate::engine::geom::ConvGeom;
use crate::engine::ops::gemm_bf16::PackedB;
use crate::engine::ops::gemm_pairs::{self, lay_row, u32_as_u16, ARows, BCols, KSplit, Tiles, T};
use crate::error::{Error, Result};

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

/// Adds `row`, output pixel `(oy, ox)`'s patch gradient (`kkc` values in (ky, kx, c)
/// order), into the one image's input gradient `dimg`: col2im's step, which every
/// input gradient here and `conv2d::col2im` sum in, row after row.
#[inline(always)]
pub(crate) fn unpatch(dimg: &mut [f32], g: &ConvGeom, (oy, ox): (usize, usize), row: &[f32]) {
    let c = g.c_in;
    let (kx0, cnt, ix0) = kx_run(g, ox);
    for ky in 0..g.k {
        let iy = (oy * g.stride + ky) as isize - g.pad as isize;
        if iy < 0 || iy >= g.h as isize {
            continue;
        }
        let off = (iy as usize * g.w + ix0) * c;
        let src = &row[(ky * g.k + kx0) * c..(ky * g.k + kx0 + cnt) * c];
        for (d, s) in dimg[off..off + cnt * c].iter_mut().zip(src) {
            *d += s;
        }
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

/// Output rows one parallel task takes (whole strips): its buffers and the tile
/// configuration are set up once per task.
const TASK_ROWS: usize = 8 * T;

/// `y (rows x c_out) = [bias +] columns(x) * W^T` narrowed to bf16, `wt` being `W^T`
/// packed, strip by strip of 32 output rows: each strip's columns laid out, multiplied
/// and narrowed while in cache. No column matrix and no f32 output in memory: on
/// cnn-small's first conv (65536 x 27 columns, 32 channels) those were 4 MiB of columns
/// and 8 MiB of f32 output written and read again to be narrowed. The sums and their
/// rounding are those of the whole-matrix GEMM then `ctx.store`'s narrowing.
pub(crate) fn forward(
    x: Input,
    g: &ConvGeom,
    wt: &PackedB,
    bias: Option<&[f32]>,
    mem: &MemTracker,
) -> Result<Vec<bf16>> {
    let ks = KSplit::new(g.kkc());
    let (rows, c, ld) = (g.rows(), g.c_out, 2 * ks.pairs);
    if bias.is_some_and(|b| b.len() != c) || wt.n != c {
        return Err(Error::Shape {
            op: "conv2d",
            msg: format!("{c} output channels, weights for {}", wt.n),
        });
    }
    let mut y: Vec<bf16> = mem.spare(rows * c);
    y.spare_capacity_mut()[..rows * c]
        .par_chunks_mut(TASK_ROWS * c)
        .enumerate()
        .try_for_each(|(t, yt)| -> Result<()> {
            let on = Tiles::new()?;
            let mut a = vec![0u16; T * ld];
            let mut acc = vec![0.0f32; T * c];
            let mut tmp = Vec::new();
            for (s, ys) in yt.chunks_mut(T * c).enumerate() {
                let (r0, m) = (t * TASK_ROWS + s * T, ys.len() / c);
                for (r, o) in a.chunks_exact_mut(ld).take(m).enumerate() {
                    lay_row(&ks, o, &mut tmp, |v| x.row(g, r0 + r, v));
                }
                if let Some(b) = bias {
                    acc.chunks_exact_mut(c).for_each(|r| r.copy_from_slice(b));
                }
                let a = ARows {
                    data: &a,
                    rows: m,
                    ld,
                };
                gemm_pairs::strip(&on, &mut acc, c, a, BCols::Packed(wt), &ks, bias.is_some())?;
                for (o, v) in ys.iter_mut().zip(&acc) {
                    o.write(narrow_bf16(*v));
                }
            }
            Ok(())
        })?;
    // SAFETY: the tasks above wrote every one of the first rows * c slots (their chunks
    // cover them, each strip's m rows of c), each once; an error returned before this.
    unsafe { y.set_len(rows * c) };
    Ok(y)
}

/// f32 words of workspace [`weight_grad`] needs: each k-block's product.
pub(crate) fn weight_grad_ws(g: &ConvGeom) -> usize {
    KSplit::new(g.rows()).blocks.len() * g.c_out * g.kkc()
}

thread_local! {
    /// One k-block's operands for [`weight_grad`] (`dy^T` pairs, column pairs), kept per
    /// thread: every block overwrites what the tiles read, so they are not zeroed again.
    static BLOCK: std::cell::RefCell<(Vec<u32>, Vec<u32>)> =
        const { std::cell::RefCell::new((Vec::new(), Vec::new())) };
}

/// `gw (c_out x kkc) = [gw +] dy^T * columns(x)`: k is the rows (output pixels), cut in
/// the blocks the whole-matrix GEMM cuts it in. Each block's operands (`dy^T` as pairs
/// of rows per channel, the columns as pairs of rows per column) are laid out and
/// multiplied while in cache, blocks in parallel, each block's product kept in `ws`;
/// then `gw` adds them in block order, as the whole-matrix GEMM adds block after block.
/// Before, both operands were laid out whole through memory (cnn-small's first conv,
/// k = 65536: 4 MiB each, the transposition writing 32 rows 128 KiB apart) and the
/// GEMM ran on one thread (32 x 27 is one tile).
pub(crate) fn weight_grad(
    x: Input,
    dy: &[bf16],
    g: &ConvGeom,
    gw: &mut [f32],
    accumulate: bool,
    ws: &mut [f32],
) -> Result<()> {
    let ks = KSplit::new(g.rows());
    let (c, kkc, ldb) = (g.c_out, g.kkc(), pad32(g.kkc()));
    let n = c * kkc;
    if dy.len() != g.rows() * c || gw.len() < n || ws.len() < weight_grad_ws(g) {
        return Err(Error::Shape {
            op: "conv2d",
            msg: format!(
                "weight gradient of {} values from {} gradient values ({} rows of {c}), \
                 {} of workspace",
                gw.len(),
                dy.len(),
                g.rows(),
                ws.len()
            ),
        });
    }
    let bits: &[u16] = dy.reinterpret_cast();
    let parts = &mut ws[..weight_grad_ws(g)];
    if n == 0 {
        return Ok(());
    }
    parts
        .par_chunks_mut(n)
        .enumerate()
        .try_for_each(|(bi, part)| -> Result<()> {
            let on = Tiles::new()?;
            let sub = ks.block(bi);
            let kt = sub.pairs;
            BLOCK.with(|bufs| {
                let mut bufs = bufs.borrow_mut();
                let (a, b) = &mut *bufs;
                a.resize(pad32(c) * kt, 0);
                b.resize(kt * ldb, 0);
                gemm_pairs::lay_transposed_block(bits, c, (0, c), &ks, bi, a, kt);
                let row = |r: usize, v: &mut [u16]| x.row(g, r, v);
                gemm_pairs::lay_pairs_block(&ks, bi, kkc, b, ldb, &row);
                let bc = BCols::Pairs {
                    data: b,
                    cols: kkc,
                    ld: ldb,
                };
                for i in (0..c).step_by(T) {
                    let a = ARows {
                        data: &u32_as_u16(a)[i * 2 * kt..],
                        rows: (c - i).min(T),
                        ld: 2 * kt,
                    };
                    gemm_pairs::strip(&on, &mut part[i * kkc..], kkc, a, bc, &sub, false)?;
                }
                Ok(())
            })
        })?;
    let parts = &*parts;
    const CH: usize = 4096;
    gw[..n].par_chunks_mut(CH).enumerate().for_each(|(ci, gc)| {
        let e0 = ci * CH;
        let first = &parts[e0..e0 + gc.len()];
        if accumulate {
            gc.iter_mut().zip(first).for_each(|(v, p)| *v += p);
        } else {
            gc.copy_from_slice(first);
        }
        for b in 1..ks.blocks.len() {
            let pb = &parts[b * n + e0..b * n + e0 + gc.len()];
            gc.iter_mut().zip(pb).for_each(|(v, p)| *v += p);
        }
    });
    Ok(())
}

/// `dx = narrow(col2im(dy * W))`, `w` being `W` packed, image by image and strip by
/// strip of 32 output rows: each strip's `dy` rows multiplied, the column gradients
/// added into the image's f32 sums while in cache, the image narrowed when whole. No
/// column-gradient matrix and no f32 input gradient in memory: on cnn-small's second
/// conv they were 19 MiB and 8 MiB written and read again. Each input element sums its
/// rows' values in row order from zero, as `conv2d::col2im` does, then rounds as
/// `ctx.store`: bit for bit the whole-matrix path.
pub(crate) fn input_grad(
    dy: &[bf16],
    g: &ConvGeom,
    w: &PackedB,
    mem: &MemTracker,
) -> Result<Vec<bf16>> {
    let ks = KSplit::new(g.c_out);
    let (c, ld, kkc) = (g.c_out, 2 * ks.pairs, g.kkc());
    let (per, ow, img) = (g.oh() * g.ow(), g.ow(), g.h * g.w * g.c_in);
    if dy.len() != g.rows() * c || w.n != kkc {
        return Err(Error::Shape {
            op: "conv2d",
            msg: format!(
                "gradient of {} values for {} rows of {c}; weights give {} columns of {kkc}",
                dy.len(),
                g.rows(),
                w.n
            ),
        });
    }
    let bits: &[u16] = dy.reinterpret_cast();
    let mut dx: Vec<bf16> = mem.spare(g.n * img);
    dx.spare_capacity_mut()[..g.n * img]
        .par_chunks_mut(img)
        .enumerate()
        .try_for_each(|(n, dimg)| -> Result<()> {
            let on = Tiles::new()?;
            let mut a = vec![0u16; T * ld];
            let mut col = vec![0.0f32; T * kkc];
            let mut sums = vec![0.0f32; img];
            let mut tmp = Vec::new();
            for s in (0..per).step_by(T) {
                let (r0, m) = (n * per + s, (per - s).min(T));
                for (r, o) in a.chunks_exact_mut(ld).take(m).enumerate() {
                    let at = (r0 + r) * c;
                    lay_row(&ks, o, &mut tmp, |v| v.copy_from_slice(&bits[at..at + c]));
                }
                let a = ARows {
                    data: &a,
                    rows: m,
                    ld,
                };
                gemm_pairs::strip(&on, &mut col, kkc, a, BCols::Packed(w), &ks, false)?;
                for (r, row) in col.chunks_exact(kkc).take(m).enumerate() {
                    unpatch(&mut sums, g, ((s + r) / ow, (s + r) % ow), row);
                }
            }
            for (o, v) in dimg.iter_mut().zip(&sums) {
                o.write(narrow_bf16(*v));
            }
            Ok(())
        })?;
    // SAFETY: each image's task wrote all of its img slots once; an error returned
    // before this.
    unsafe { dx.set_len(g.n * img) };
    Ok(dx)
}

#[cfg(test)]
#[path = "conv2d_bf16_tests.rs"]
mod tests;
