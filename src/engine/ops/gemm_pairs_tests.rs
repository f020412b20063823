//! The tile GEMM on laid-out operands against the packing AMX path.

use crate::engine::ops::gemm::test_data as data;
use crate::engine::ops::gemm::Mat;
use crate::engine::ops::gemm_bf16::{self, PackedB};
use crate::engine::ops::gemm_pairs::*;

fn bits(x: f32) -> u16 {
    crate::engine::amp::narrow_bf16(x).to_bits()
}

/// `a` (m x k, row-major f32) in the left layout: rows padded to 32 with NaN bits (only
/// discarded outputs may read them), each block's pairs at its offset, zero pairs after.
fn left(a: &[f32], m: usize, ks: &KSplit) -> (Vec<u16>, usize) {
    let ld = 2 * ks.pairs;
    let mut out = vec![0x7fc0u16; m.div_ceil(32) * 32 * ld];
    for i in 0..m {
        let row = &mut out[i * ld..(i + 1) * ld];
        row.fill(0);
        for (b, &(off, _)) in ks.blocks.iter().enumerate() {
            let (s, e) = ks.span(b);
            for kk in s..e {
                row[2 * off + kk - s] = bits(a[i * ks.k + kk]);
            }
        }
    }
    (out, ld)
}

/// `b` (k x n, row-major f32) in the right layout, columns padded to 32 with NaN bits.
fn right(b: &[f32], n: usize, ks: &KSplit) -> (Vec<u32>, usize) {
    let ld = n.div_ceil(32) * 32;
    let mut out = vec![0x7fc0_7fc0u32; ks.pairs * ld];
    for (bi, &(off, kt)) in ks.blocks.iter().enumerate() {
        let (s, e) = ks.span(bi);
        for p in 0..kt {
            for j in 0..n {
                let at = |kk: usize| {
                    if kk < e {
                        u32::from(bits(b[kk * n + j]))
                    } else {
                        0
                    }
                };
                let r = s + 2 * p;
                out[(off + p) * ld + j] = at(r) | (at(r + 1) << 16);
            }
        }
    }
    (out, ld)
}

/// Laid-out operands (plain pairs on both sides, and packed weights on the right) give
/// the packing AMX path's result bit for bit: k of one block and of several (dense and
/// padded), ragged rows and columns, odd k, accumulate, 1 and 2 threads.
#[test]
fn laid_out_operands_give_the_packing_paths_result_bit_for_bit() {
    if !ready() {
        eprintln!("skipped: the AMX tile unit is not ready here, the tile GEMM cannot run");
        return;
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .unwrap();
    for (m, k, n) in [
        (64, 27, 32),
        (70, 288, 40),
        (33, 576, 64),
        (40, 785, 70),
        (5, 1031, 3),
        (96, 2, 128),
    ] {
        let (a, b) = (data(m * k, 41), data(k * n, 42));
        let ks = KSplit::new(k);
        let (al, lda) = left(&a, m, &ks);
        let (bl, ldb) = right(&b, n, &ks);
        let packed = PackedB::new(Mat::rm(&b, k, n)).unwrap();
        let start = data(m * n, 43);
        for (acc, threads) in [(false, 1), (true, 1), (false, 2), (true, 2)] {
            let par = if threads > 1 {
                gemm::Parallelism::Rayon(threads)
            } else {
                gemm::Parallelism::None
            };
            let mut want = start.clone();
            pool.install(|| {
                gemm_bf16::matmul(&mut want, Mat::rm(&a, m, k), Mat::rm(&b, k, n), acc, par)
            })
            .unwrap();
            let a_op = ARows {
                data: &al,
                rows: m,
                ld: lda,
            };
            let rights = [
                (
                    "pairs",
                    BCols::Pairs {
                        data: &bl,
                        cols: n,
                        ld: ldb,
                    },
                ),
                ("packed", BCols::Packed(&packed)),
            ];
            for (name, b_op) in rights {
                let mut got = start.clone();
                pool.install(|| matmul(&mut got, n, a_op, b_op, &ks, acc, threads))
                    .unwrap();
                let same = want
                    .iter()
                    .zip(&got)
                    .all(|(p, q)| p.to_bits() == q.to_bits());
                assert!(
                    same,
                    "{m}x{k}x{n} {name} acc={acc} x{threads}: differs from the packing path"
                );
            }
        }
    }
}

/// A left operand shorter than its rows padded to 32, or a right one narrower than its
/// stride, is refused, not read past its end.
#[test]
fn operands_smaller_than_their_layout_are_refused() {
    let ks = KSplit::new(40);
    let a = vec![0u16; 31 * 2 * ks.pairs];
    let b = vec![0u32; ks.pairs * 32];
    let mut out = vec![0.0f32; 64 * 64];
    let a_op = ARows {
        data: &a,
        rows: 31,
        ld: 2 * ks.pairs,
    };
    let b_op = BCols::Pairs {
        data: &b,
        cols: 32,
        ld: 32,
    };
    assert!(matmul(&mut out, 32, a_op, b_op, &ks, false, 1).is_err());
    let a = vec![0u16; 32 * 2 * ks.pairs];
    let a_op = ARows { data: &a, ..a_op };
    let narrow = BCols::Pairs {
        data: &b,
        cols: 33,
        ld: 32,
    };
    assert!(matmul(&mut out, 33, a_op, narrow, &ks, false, 1).is_err());
}
