//! Forward algorithms of conv2d beyond im2col+GEMM, the candidates autotuning picks from:
//!
//! - `direct`: no column buffer. For each output row and each kernel tap, a small GEMM
//!   reads the input through a strided view. No workspace, but many small GEMMs.
//! - `winograd`: F(2x2, 3x3) (Lavin & Gray 2016) for 3x3 stride-1 convolutions: 2x2
//!   output tiles from 4x4 input tiles, 16 GEMMs in the transformed domain instead of
//!   nine per output, i.e. 2.25x fewer multiplies, paid for with transforms and
//!   workspace.
//!
//! Both write `y` (NHWC) like the im2col path: added onto `y` when `accumulate` (the
//! bias is already there), else overwriting it.

use rayon::prelude::*;

use crate::engine::geom::ConvGeom;
use crate::engine::ops::gemm::{matmul, Mat};
use crate::error::Result;

/// `y = [y +] conv(x, w)` by per-tap GEMMs on strided input views.
pub fn direct(x: &[f32], w: &[f32], g: &ConvGeom, y: &mut [f32], accumulate: bool) -> Result<()> {
    let (oh, ow, kkc, cin, cout) = (g.oh(), g.ow(), g.kkc(), g.c_in, g.c_out);
    let (s, p) = (g.stride as isize, g.pad as isize);
    y[..g.n * oh * ow * cout]
        .par_chunks_mut(ow * cout)
        .enumerate()
        .try_for_each(|(r, yrow)| -> Result<()> {
            let (n, oy) = (r / oh, (r % oh) as isize);
            if !accumulate {
                yrow.fill(0.0);
            }
            for ky in 0..g.k {
                let iy = oy * s + ky as isize - p;
                if iy < 0 || iy >= g.h as isize {
                    continue;
                }
                for kx in 0..g.k {
                    // Output columns whose input column ox*s + kx - p is inside the image.
                    let lo = (p - kx as isize).max(0);
                    let lo = ((lo + s - 1) / s) as usize;
                    let hi_ix = g.w as isize - 1 + p - kx as isize;
                    if hi_ix < 0 {
                        continue;
                    }
                    let hi = ((hi_ix / s) as usize + 1).min(ow);
                    if lo >= hi {
                        continue;
                    }
                    let ix0 = (lo as isize * s + kx as isize - p) as usize;
                    let off = ((n * g.h + iy as usize) * g.w + ix0) * cin;
                    let a = Mat {
                        data: &x[off..],
                        rows: hi - lo,
                        cols: cin,
                        rs: g.stride * cin,
                        cs: 1,
                    };
                    let b = Mat {
                        data: &w[(ky * g.k + kx) * cin..],
                        rows: cin,
                        cols: cout,
                        rs: 1,
                        cs: kkc,
                    };
                    matmul(
                        &mut yrow[lo * cout..hi * cout],
                        a,
                        b,
                        true,
                        gemm::Parallelism::None,
                    )?;
                }
            }
            Ok(())
        })
}

/// Whether Winograd F(2,3) applies to this geometry.
pub fn winograd_applies(g: &ConvGeom) -> bool {
    g.k == 3 && g.stride == 1
}

/// Workspace floats Winograd needs: transformed input, transformed weights, products.
pub fn winograd_workspace(g: &ConvGeom) -> usize {
    let t = winograd_tiles(g);
    16 * (t * g.c_in + g.c_in * g.c_out + t * g.c_out)
}

fn winograd_tiles(g: &ConvGeom) -> usize {
    g.n * g.oh().div_ceil(2) * g.ow().div_ceil(2)
}

/// `y = [y +] conv3x3(x, w)` with stride 1 by Winograd F(2x2, 3x3).
pub fn winograd(
    x: &[f32],
    w: &[f32],
    g: &ConvGeom,
    y: &mut [f32],
    accumulate: bool,
    ws: &mut [f32],
    par: gemm::Parallelism,
) -> Result<()> {
    let (oh, ow, cin, cout) = (g.oh(), g.ow(), g.c_in, g.c_out);
    let (th, tw) = (oh.div_ceil(2), ow.div_ceil(2));
    let tiles = winograd_tiles(g);
    let (v, rest) = ws.split_at_mut(16 * tiles * cin);
    let (u, m) = rest.split_at_mut(16 * cin * cout);
    let m = &mut m[..16 * tiles * cout];

    // U[xi][ci][o] = (G g G^T)[xi] for the 3x3 filter g of (o, ci).
    u.par_chunks_mut(cin * cout)
        .enumerate()
        .for_each(|(xi, uxi)| {
            let (a, b) = (xi / 4, xi % 4);
            for o in 0..cout {
                let wo = &w[o * 9 * cin..(o + 1) * 9 * cin];
                for ci in 0..cin {
                    let f = |ky: usize, kx: usize| wo[(ky * 3 + kx) * cin + ci];
                    // Row a of G g, then column b of (G g) G^T.
                    let gg = |kx: usize| match a {
                        0 => f(0, kx),
                        1 => 0.5 * (f(0, kx) + f(1, kx) + f(2, kx)),
                        2 => 0.5 * (f(0, kx) - f(1, kx) + f(2, kx)),
                        _ => f(2, kx),
                    };
                    let val = match b {
                        0 => gg(0),
                        1 => 0.5 * (gg(0) + gg(1) + gg(2)),
                        2 => 0.5 * (gg(0) - gg(1) + gg(2)),
                        _ => gg(2),
                    };
                    uxi[ci * cout + o] = val;
                }
            }
        });

    // V[t][xi][ci] = (B^T d B)[xi] for the 4x4 input tile d of tile t.
    let p = g.pad as isize;
    v.par_chunks_mut(16 * cin).enumerate().for_each(|(t, vt)| {
        let n = t / (th * tw);
        let (ty, tx) = ((t / tw) % th, t % tw);
        let mut d = [[0.0f32; 4]; 4];
        for ci in 0..cin {
            for (i, row) in d.iter_mut().enumerate() {
                let iy = (2 * ty + i) as isize - p;
                for (j, e) in row.iter_mut().enumerate() {
                    let ix = (2 * tx + j) as isize - p;
                    *e = if iy >= 0 && iy < g.h as isize && ix >= 0 && ix < g.w as isize {
                        x[((n * g.h + iy as usize) * g.w + ix as usize) * cin + ci]
                    } else {
                        0.0
                    };
                }
            }
            // B^T d: rows (d0 - d2, d1 + d2, d2 - d1, d1 - d3).
            let mut bd = [[0.0f32; 4]; 4];
            for j in 0..4 {
                bd[0][j] = d[0][j] - d[2][j];
                bd[1][j] = d[1][j] + d[2][j];
                bd[2][j] = d[2][j] - d[1][j];
                bd[3][j] = d[1][j] - d[3][j];
            }
            for (i, r) in bd.iter().enumerate() {
                let vals = [r[0] - r[2], r[1] + r[2], r[2] - r[1], r[1] - r[3]];
                for (j, val) in vals.into_iter().enumerate() {
                    vt[(i * 4 + j) * cin + ci] = val;
                }
            }
        }
    });

    // M[xi] = V[xi] (tiles x cin, strided) * U[xi] (cin x cout).
    for xi in 0..16 {
        let a = Mat {
            data: &v[xi * cin..],
            rows: tiles,
            cols: cin,
            rs: 16 * cin,
            cs: 1,
        };
        let b = Mat::rm(&u[xi * cin * cout..(xi + 1) * cin * cout], cin, cout);
        matmul(
            &mut m[xi * tiles * cout..(xi + 1) * tiles * cout],
            a,
            b,
            false,
            par,
        )?;
    }

    // Y tile = A^T M A, A^T = [[1, 1, 1, 0], [0, 1, -1, -1]]; only in-image outputs.
    let m = &*m;
    y[..g.n * oh * ow * cout]
        .par_chunks_mut(oh * ow * cout)
        .enumerate()
        .for_each(|(n, yimg)| {
            for ty in 0..th {
                for tx in 0..tw {
                    let t = (n * th + ty) * tw + tx;
                    for o in 0..cout {
                        let e = |xi: usize| m[(xi * tiles + t) * cout + o];
                        let am = [
                            std::array::from_fn::<f32, 4, _>(|j| e(j) + e(4 + j) + e(8 + j)),
                            std::array::from_fn::<f32, 4, _>(|j| e(4 + j) - e(8 + j) - e(12 + j)),
                        ];
                        for (i, r) in am.iter().enumerate() {
                            let oy = 2 * ty + i;
                            if oy >= oh {
                                continue;
                            }
                            let out = [r[0] + r[1] + r[2], r[1] - r[2] - r[3]];
                            for (j, val) in out.into_iter().enumerate() {
                                let ox = 2 * tx + j;
                                if ox >= ow {
                                    continue;
                                }
                                let dst = &mut yimg[(oy * ow + ox) * cout + o];
                                *dst = if accumulate { *dst + val } else { val };
                            }
                        }
                    }
                }
            }
        });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::ops::conv2d::im2col;

    use crate::engine::ops::gemm::test_data as data;

    fn reference(x: &[f32], w: &[f32], g: &ConvGeom) -> Vec<f32> {
        let mut col = vec![0.0; g.rows() * g.kkc()];
        im2col(x, g, &mut col);
        let mut y = vec![0.0; g.rows() * g.c_out];
        matmul(
            &mut y,
            Mat::rm(&col, g.rows(), g.kkc()),
            Mat::rm(w, g.c_out, g.kkc()).t(),
            false,
            gemm::Parallelism::None,
        )
        .unwrap();
        y
    }

    fn close(a: &[f32], b: &[f32], what: &str) {
        assert_eq!(a.len(), b.len());
        for (i, (u, v)) in a.iter().zip(b).enumerate() {
            assert!(
                (u - v).abs() <= 1e-4 + 1e-4 * v.abs(),
                "{what}: element {i}: {u} vs {v}"
            );
        }
    }

    fn geoms() -> Vec<ConvGeom> {
        let mut out = Vec::new();
        for (h, w, k, s, p) in [
            (7, 9, 3, 1, 1),
            (8, 8, 3, 2, 1),
            (5, 6, 3, 1, 0),
            (6, 6, 1, 1, 0),
            (9, 7, 1, 2, 0),
            (6, 5, 5, 1, 2),
        ] {
            out.push(ConvGeom {
                n: 2,
                h,
                w,
                c_in: 3,
                c_out: 4,
                k,
                stride: s,
                pad: p,
            });
        }
        out
    }

    #[test]
    fn direct_matches_im2col_on_every_geometry() {
        for g in geoms() {
            let x = data(g.n * g.h * g.w * g.c_in, 1);
            let w = data(g.c_out * g.kkc(), 2);
            let want = reference(&x, &w, &g);
            let mut y = vec![7.0; want.len()];
            direct(&x, &w, &g, &mut y, false).unwrap();
            close(&y, &want, &format!("direct {g:?}"));
            // accumulate adds onto what is there (the bias)
            let mut y2 = vec![1.0; want.len()];
            direct(&x, &w, &g, &mut y2, true).unwrap();
            let plus: Vec<f32> = want.iter().map(|v| v + 1.0).collect();
            close(&y2, &plus, &format!("direct+acc {g:?}"));
        }
    }

    #[test]
    fn winograd_matches_im2col_on_3x3_stride_1_including_ragged_edges() {
        for g in geoms().into_iter().filter(winograd_applies) {
            let x = data(g.n * g.h * g.w * g.c_in, 3);
            let w = data(g.c_out * g.kkc(), 4);
            let want = reference(&x, &w, &g);
            let mut ws = vec![0.0; winograd_workspace(&g)];
            let mut y = vec![7.0; want.len()];
            winograd(&x, &w, &g, &mut y, false, &mut ws, gemm::Parallelism::None).unwrap();
            close(&y, &want, &format!("winograd {g:?}"));
        }
    }
}
