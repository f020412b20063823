//! The tile path's linear GEMMs against the packing path's (f32 operands packed per
//! call, `gemm_bf16` on AMX), bit for bit.

use half::bf16;

use crate::engine::amp::narrow_bf16;
use crate::engine::ops::gemm::test_data as data;
use crate::engine::ops::gemm::Mat;
use crate::engine::ops::gemm_bf16::{self, PackedB};
use crate::engine::ops::gemm_pairs;
use crate::engine::ops::linear_bf16::*;

fn same(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(p, q)| p.to_bits() == q.to_bits())
}

/// Forward, weight gradient and input gradient on the tile path equal the packing
/// path's bit for bit: the mlp's layers at batch 128 (k of several padded blocks), an
/// odd batch (the weight gradient's last pair half empty), f32 input rows (the first
/// layer's), 1 and 2 threads, a NaN-filled workspace.
#[test]
fn tile_path_gives_the_packing_paths_linear_results_bit_for_bit() {
    if !gemm_pairs::ready() {
        eprintln!("skipped: the AMX tile unit is not ready here, the tile path cannot run");
        return;
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .unwrap();
    for (n, d_in, d_out, f32_input) in [
        (128, 784, 1024, true),
        (128, 1024, 1024, false),
        (128, 1024, 10, false),
        (37, 300, 45, false),
    ] {
        let xf = data(n * d_in, 61);
        let xh: Vec<bf16> = xf.iter().map(|v| narrow_bf16(*v)).collect();
        let xr: Vec<f32> = xh.iter().map(|v| v.to_f32()).collect();
        let (x, xm) = if f32_input {
            (Rows::F32(&xf), Mat::rm(&xf, n, d_in))
        } else {
            (Rows::bf16(&xh), Mat::rm(&xr, n, d_in))
        };
        let w: Vec<f32> = data(d_out * d_in, 62).iter().map(|v| v * 1.001).collect();
        let wt = PackedB::new(Mat::rm(&w, d_out, d_in).t()).unwrap();
        let wn = PackedB::new(Mat::rm(&w, d_out, d_in)).unwrap();
        let dy: Vec<bf16> = data(n * d_out, 63)
            .iter()
            .map(|v| narrow_bf16(*v))
            .collect();
        let dyf: Vec<f32> = dy.iter().map(|v| v.to_f32()).collect();
        let dym = Mat::rm(&dyf, n, d_out);
        let ws_len = forward_ws(n, d_in)
            .max(weight_grad_ws(n, d_in, d_out))
            .max(input_grad_ws(n, d_out));
        for (threads, acc) in [(1, false), (1, true), (2, false), (2, true)] {
            let par = if threads > 1 {
                gemm::Parallelism::Rayon(threads)
            } else {
                gemm::Parallelism::None
            };
            let mut ws = vec![f32::NAN; ws_len];
            let case = format!("{n}x{d_in}->{d_out} x{threads} acc={acc}");
            pool.install(|| {
                let start = data(n * d_out, 64);
                let mut want = start.clone();
                gemm_bf16::matmul_packed(&mut want, xm, &wt, true, par).unwrap();
                let mut got = start;
                forward(x, (n, d_in), &wt, &mut got, threads, &mut ws).unwrap();
                assert!(same(&want, &got), "{case}: forward");

                let start = data(d_out * d_in, 65);
                let mut want = start.clone();
                gemm_bf16::matmul(&mut want, dym.t(), xm, acc, par).unwrap();
                let mut got = start;
                let dims = (n, d_in, d_out);
                weight_grad(x, &dy, dims, &mut got, acc, threads, &mut ws).unwrap();
                assert!(same(&want, &got), "{case}: weight grad");

                let mut want = vec![0.0f32; n * d_in];
                gemm_bf16::matmul_packed(&mut want, dym, &wn, false, par).unwrap();
                let mut got = vec![f32::NAN; n * d_in];
                input_grad(&dy, (n, d_out), &wn, &mut got, threads, &mut ws).unwrap();
                assert!(same(&want, &got), "{case}: input grad");
            });
        }
    }
}
