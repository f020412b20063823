//! Linear layers under `amp = bf16` on the AMX tile unit (#30): the stored bf16
//! activations and gradients laid out for the tiles as they are read (`gemm_pairs`),
//! instead of widened to f32 copies that the GEMM narrows and packs back. Bit for bit
//! the packing path's results (`linear_bf16_tests.rs`).

use half::bf16;
use half::slice::HalfFloatSliceExt;

use crate::engine::amp::narrow_bf16;
use crate::engine::ops::gemm_bf16::PackedB;
use crate::engine::ops::gemm_pairs::{self, u32_as_u16, ws_u16, ws_u32, ARows, BCols, KSplit};
use crate::error::Result;

/// A matrix of `k`-value rows as the tile path reads it: bf16 storage as its bits, or
/// f32 (the model's input) rounded to bf16 as it is copied, as the packing path rounds.
#[derive(Clone, Copy)]
pub(crate) enum Rows<'a> {
    Bf16(&'a [u16]),
    F32(&'a [f32]),
}

impl<'a> Rows<'a> {
    pub(crate) fn bf16(x: &'a [bf16]) -> Rows<'a> {
        Rows::Bf16(x.reinterpret_cast())
    }

    /// Row `r` (of `v.len()` values) as bf16 bits into `v`.
    #[inline(always)]
    fn row(self, r: usize, v: &mut [u16]) {
        let k = v.len();
        match self {
            Rows::Bf16(x) => v.copy_from_slice(&x[r * k..(r + 1) * k]),
            Rows::F32(x) => {
                for (d, s) in v.iter_mut().zip(&x[r * k..(r + 1) * k]) {
                    *d = narrow_bf16(*s).to_bits();
                }
            }
        }
    }
}

fn pad32(v: usize) -> usize {
    v.div_ceil(32) * 32
}

/// Whether linear layers run on the tile path under native bf16 here.
pub(crate) fn applies() -> bool {
    gemm_pairs::ready()
}

/// f32 words of workspace [`forward`] needs.
pub(crate) fn forward_ws(n: usize, d_in: usize) -> usize {
    pad32(n) * KSplit::new(d_in).pairs
}

/// `y (n x d_out) += x * W^T`, `wt` being `W^T` packed (`y` holds the bias).
pub(crate) fn forward(
    x: Rows,
    (n, d_in): (usize, usize),
    wt: &PackedB,
    y: &mut [f32],
    threads: usize,
    ws: &mut [f32],
) -> Result<()> {
    let ks = KSplit::new(d_in);
    let ld = 2 * ks.pairs;
    let a = &mut ws_u16(ws)[..pad32(n) * ld];
    gemm_pairs::lay_rows(n, &ks, a, ld, |r, v| x.row(r, v));
    let a = ARows {
        data: a,
        rows: n,
        ld,
    };
    gemm_pairs::matmul(y, wt.n, a, BCols::Packed(wt), &ks, true, threads)
}

/// f32 words of workspace [`weight_grad`] needs.
pub(crate) fn weight_grad_ws(n: usize, d_in: usize, d_out: usize) -> usize {
    let ks = KSplit::new(n);
    pad32(d_out) * ks.pairs + ks.pairs * pad32(d_in)
}

/// `gw (d_out x d_in) = [gw +] dy^T * x`: k is the batch rows, so `dy` goes in as
/// pairs of rows per output and `x` as pairs of rows per input.
pub(crate) fn weight_grad(
    x: Rows,
    dy: &[bf16],
    (n, d_in, d_out): (usize, usize, usize),
    gw: &mut [f32],
    accumulate: bool,
    threads: usize,
    ws: &mut [f32],
) -> Result<()> {
    let ks = KSplit::new(n);
    let ldb = pad32(d_in);
    let (aw, bw) = ws_u32(ws).split_at_mut(pad32(d_out) * ks.pairs);
    let bw = &mut bw[..ks.pairs * ldb];
    gemm_pairs::lay_transposed(dy.reinterpret_cast(), d_out, &ks, aw);
    gemm_pairs::lay_pairs(&ks, d_in, bw, ldb, |r, v| x.row(r, v));
    let a = ARows {
        data: u32_as_u16(aw),
        rows: d_out,
        ld: 2 * ks.pairs,
    };
    let b = BCols::Pairs {
        data: bw,
        cols: d_in,
        ld: ldb,
    };
    gemm_pairs::matmul(gw, d_in, a, b, &ks, accumulate, threads)
}

/// f32 words of workspace [`input_grad`] needs.
pub(crate) fn input_grad_ws(n: usize, d_out: usize) -> usize {
    pad32(n) * KSplit::new(d_out).pairs
}

/// `dx (n x d_in) = dy * W`, `w` being `W` packed.
pub(crate) fn input_grad(
    dy: &[bf16],
    (n, d_out): (usize, usize),
    w: &PackedB,
    dx: &mut [f32],
    threads: usize,
    ws: &mut [f32],
) -> Result<()> {
    let ks = KSplit::new(d_out);
    let ld = 2 * ks.pairs;
    let a = &mut ws_u16(ws)[..pad32(n) * ld];
    let dy = Rows::bf16(dy);
    gemm_pairs::lay_rows(n, &ks, a, ld, |r, v| dy.row(r, v));
    let a = ARows {
        data: a,
        rows: n,
        ld,
    };
    gemm_pairs::matmul(dx, w.n, a, BCols::Packed(w), &ks, false, threads)
}

#[cfg(test)]
#[path = "linear_bf16_tests.rs"]
mod tests;
