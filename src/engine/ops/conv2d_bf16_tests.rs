//! The tile path's convolution GEMMs against the packing path's (f32 columns packed per
//! call, `gemm_bf16` on AMX), bit for bit.

use half::bf16;

use crate::engine::amp::narrow_bf16;
use crate::engine::device::MemTracker;
use crate::engine::geom::ConvGeom;
use crate::engine::ops::conv2d::{col2im, im2col, im2col_bf16};
use crate::engine::ops::conv2d_bf16::*;
use crate::engine::ops::gemm::test_data as data;
use crate::engine::ops::gemm::Mat;
use crate::engine::ops::gemm_bf16::{self, PackedB};
use crate::engine::ops::gemm_pairs;

fn geom(n: usize, hw: (usize, usize), (c_in, c_out): (usize, usize), s: usize) -> ConvGeom {
    ConvGeom {
        n,
        h: hw.0,
        w: hw.1,
        c_in,
        c_out,
        k: 3,
        stride: s,
        pad: 1,
    }
}

fn same(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(p, q)| p.to_bits() == q.to_bits())
}

fn narrowed(v: &[f32]) -> Vec<u16> {
    v.iter().map(|x| narrow_bf16(*x).to_bits()).collect()
}

fn bits(v: &[bf16]) -> Vec<u16> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Forward, weight gradient and input gradient on the tile path equal the packing
/// path's bit for bit (forward with and without a bias, then narrowed; the input
/// gradient through col2im, then narrowed), on cnn-small's three conv shapes (the first
/// on f32 input, as the model's input arrives), k over several blocks with padding (the
/// weight gradient's k is the rows), an odd row count, images whose rows are not whole
/// strips, channels that are not whole tile steps, at 1 and 2 threads, with a
/// NaN-filled workspace (nothing may read what the path did not write).
#[test]
fn tile_path_gives_the_packing_paths_conv_results_bit_for_bit() {
    if !gemm_pairs::ready() {
        eprintln!("skipped: the AMX tile unit is not ready here, the tile path cannot run");
        return;
    }
    let pools = [1, 2].map(|t| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(t)
            .build()
            .unwrap()
    });
    let cases = [
        (geom(2, (32, 32), (3, 32), 1), true),
        (geom(2, (16, 16), (32, 64), 2), false),
        (geom(1, (8, 8), (64, 128), 2), false),
        (geom(3, (7, 5), (5, 16), 1), false),
        (geom(4, (16, 16), (8, 32), 1), false),
    ];
    for (g, f32_input) in cases {
        assert!(applies(&g), "{g:?}: the tile path does not apply");
        let (rows, kkc, c) = (g.rows(), g.kkc(), g.c_out);
        let xf = data(g.n * g.h * g.w * g.c_in, 51);
        let xh: Vec<bf16> = xf.iter().map(|v| narrow_bf16(*v)).collect();
        // An f32 input reaches the tile path narrowed (conv2d's `input`).
        let x = Input::bf16(&xh);
        let mut col = vec![0.0f32; rows * kkc];
        if f32_input {
            im2col(&xf, &g, &mut col);
        } else {
            im2col_bf16(&xh, &g, &mut col);
        }
        // Off the bf16 grid, as the f32 master weights are.
        let w: Vec<f32> = data(c * kkc, 52).iter().map(|v| v * 1.001).collect();
        let wt = PackedB::new(Mat::rm(&w, c, kkc).t()).unwrap();
        let wn = PackedB::new(Mat::rm(&w, c, kkc)).unwrap();
        let dy: Vec<bf16> = data(rows * c, 53).iter().map(|v| narrow_bf16(*v)).collect();
        let dyf: Vec<f32> = dy.iter().map(|v| v.to_f32()).collect();
        let bias = data(c, 54);
        for ((threads, pool), acc) in [1, 2]
            .iter()
            .zip(&pools)
            .flat_map(|p| [(p, false), (p, true)])
        {
            let par = if *threads > 1 {
                gemm::Parallelism::Rayon(*threads)
            } else {
                gemm::Parallelism::None
            };
            let mut ws = vec![f32::NAN; weight_grad_ws(&g)];
            let start_gw = data(c * kkc, 55);
            pool.install(|| {
                let colm = Mat::rm(&col, rows, kkc);
                let mut want = vec![0.0f32; rows * c];
                if acc {
                    want.chunks_exact_mut(c)
                        .for_each(|r| r.copy_from_slice(&bias));
                }
                gemm_bf16::matmul_packed(&mut want, colm, &wt, acc, par).unwrap();
                // Outputs go into recycled buffers (NaN-filled here) where the bin has
                // them: every element must be written.
                let mem = MemTracker::default();
                mem.recycle(vec![bf16::NAN; rows * c]);
                mem.recycle(vec![bf16::NAN; g.n * g.h * g.w * g.c_in]);
                let got = forward(x, &g, &wt, acc.then_some(&bias[..]), &mem).unwrap();
                let b = if acc { "a bias" } else { "no bias" };
                assert!(
                    narrowed(&want) == bits(&got),
                    "{g:?} x{threads} {b}: forward"
                );

                let dym = Mat::rm(&dyf, rows, c);
                let mut want = start_gw.clone();
                gemm_bf16::matmul(&mut want, dym.t(), colm, acc, par).unwrap();
                let mut got = start_gw.clone();
                weight_grad(x, &dy, &g, &mut got, acc, &mut ws).unwrap();
                assert!(same(&want, &got), "{g:?} x{threads} acc={acc}: weight grad");

                let mut dcol = vec![0.0f32; rows * kkc];
                gemm_bf16::matmul_packed(&mut dcol, dym, &wn, false, par).unwrap();
                let mut want = vec![f32::NAN; g.n * g.h * g.w * g.c_in];
                col2im(&dcol, &g, &mut want);
                let got = input_grad(&dy, &g, &wn, &mem).unwrap();
                assert!(
                    narrowed(&want) == bits(&got),
                    "{g:?} x{threads}: input grad"
                );
            });
        }
    }
}
