//! The native bf16 GEMM's tests: the kernels, and the pre-packed operand.

mod kernels {
    use crate::engine::ops::gemm::test_data as data;
    use crate::engine::ops::gemm_bf16::*;

    /// A `rows x cols` operand, stored transposed (`cols x rows`, row-major) when `t`.
    fn view(data: &[f32], rows: usize, cols: usize, t: bool) -> Mat<'_> {
        if t {
            Mat::rm(data, cols, rows).t()
        } else {
            Mat::rm(data, rows, cols)
        }
    }

    fn round(v: &[f32]) -> Vec<f32> {
        v.iter()
            .map(|&x| f32::from_bits(bf16_bits(x) << 16))
            .collect()
    }

    /// Against an f64 reference on the bf16-rounded operands: the only differences left
    /// are f32 summation, bounded by 1e-5 of the sum of |products| for these k.
    #[test]
    fn matches_f64_reference_on_odd_shapes() {
        if !available() {
            eprintln!("skipped: this CPU has no AVX512_BF16, the native bf16 GEMM cannot run");
            return;
        }
        if !gemm_amx::ready() {
            eprintln!("AMX not ready here: only the AVX512_BF16 kernel is checked");
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        for (m, k, n) in [
            (1, 1, 1),
            (17, 33, 65),
            (13, 1, 40),
            (12, 785, 33),
            (145, 50, 1030),
            (40, 2, 16),
        ] {
            for (ta, tb) in [(false, false), (false, true), (true, false), (true, true)] {
                let (ar, br) = (round(&data(m * k, 11)), round(&data(k * n, 12)));
                let (am, bm) = (view(&ar, m, k, ta), view(&br, k, n, tb));
                let start = data(m * n, 13);
                for (acc, threads, amx) in [
                    (false, 1, false),
                    (true, 1, false),
                    (false, 2, false),
                    (true, 2, false),
                    (false, 1, true),
                    (true, 1, true),
                    (true, 2, true),
                ] {
                    if amx && !gemm_amx::ready() {
                        continue;
                    }
                    let mut got = start.clone();
                    let par = if threads > 1 {
                        gemm::Parallelism::Rayon(threads)
                    } else {
                        gemm::Parallelism::None
                    };
                    pool.install(|| matmul_on(&mut got, am, BSrc::Mat(bm), acc, par, amx))
                        .unwrap();
                    for i in 0..m {
                        for j in 0..n {
                            let (mut s, mut mag) = (0.0f64, 0.0f64);
                            for p in 0..k {
                                let x = am.data[i * am.rs + p * am.cs] as f64
                                    * bm.data[p * bm.rs + j * bm.cs] as f64;
                                s += x;
                                mag += x.abs();
                            }
                            if acc {
                                s += start[i * n + j] as f64;
                                mag += (start[i * n + j] as f64).abs();
                            }
                            let g = got[i * n + j] as f64;
                            assert!(
                                (g - s).abs() <= 1e-5 * mag + 1e-30,
                                "{m}x{k}x{n} ta={ta} tb={tb} acc={acc} x{threads} \
                                 amx={amx} at ({i},{j}): {g} vs {s}"
                            );
                        }
                    }
                }
            }
        }
    }

    /// Off-grid f32 inputs are rounded to bf16 (nearest even) before the products, as
    /// an autocast's cast would.
    #[test]
    fn rounds_off_grid_inputs_to_bf16() {
        if !available() {
            eprintln!("skipped: this CPU has no AVX512_BF16, the native bf16 GEMM cannot run");
            return;
        }
        let (m, k, n) = (3, 70, 35);
        let (a, b) = (data(m * k, 21), data(k * n, 22));
        let a: Vec<f32> = a.iter().map(|x| x * 1.001).collect();
        let (ra, rb) = (round(&a), round(&b));
        let mut got = vec![0.0; m * n];
        let mut want = vec![0.0; m * n];
        let none = gemm::Parallelism::None;
        matmul(&mut got, Mat::rm(&a, m, k), Mat::rm(&b, k, n), false, none).unwrap();
        matmul(
            &mut want,
            Mat::rm(&ra, m, k),
            Mat::rm(&rb, k, n),
            false,
            none,
        )
        .unwrap();
        assert_eq!(got, want);
    }

    #[test]
    fn rejects_mismatched_shapes() {
        let a = vec![0.0; 6];
        let mut d = vec![0.0; 4];
        let none = gemm::Parallelism::None;
        assert!(matmul(&mut d, Mat::rm(&a, 2, 3), Mat::rm(&a, 2, 3), false, none).is_err());
    }
}

mod packed {
    use crate::engine::device::{MemTracker, RECYCLE_MIN};
    use crate::engine::ops::gemm::test_data as data;
    use crate::engine::ops::gemm_amx;
    use crate::engine::ops::gemm_bf16::*;

    /// A GEMM on the pre-packed operand gives the per-call packing's result bit for
    /// bit: both orientations of the weights, k over one and several blocks, ragged
    /// column panels, accumulate, and 1 and 2 threads (a column split starts inside the
    /// packed panels, a row split reads all of them).
    #[test]
    fn packed_operand_gives_the_per_call_result_bit_for_bit() {
        if !available() {
            eprintln!("skipped: this CPU has no AVX512_BF16, the native bf16 GEMM cannot run");
            return;
        }
        if !gemm_amx::ready() {
            eprintln!("AMX not ready here: only the AVX512_BF16 kernel is checked");
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        // (m, k, n): a tall batch (row split), a wide output (column split, 3 panels
        // with a ragged last one), k of 2 and 3 blocks, and odd k.
        for (m, k, n) in [(130, 70, 40), (9, 785, 100), (33, 1025, 67), (4, 3, 5)] {
            let w = data(k * n, 31);
            let x = data(m * k, 32);
            let start = data(m * n, 33);
            // The weights stored [n, k] (as a Linear's W, so b = W^T) and [k, n].
            for stored_t in [true, false] {
                let b = if stored_t {
                    Mat::rm(&w, n, k).t()
                } else {
                    Mat::rm(&w, k, n)
                };
                let fresh = PackedB::new(b).unwrap();
                // Packed again into a recycled buffer of old values (NaN pairs, the
                // padding included), as after every optimizer step: the same operand.
                let (mem, len) = (MemTracker::default(), fresh.bytes() / 4);
                mem.recycle(vec![u32::MAX; len]);
                let packed = PackedB::new_in(b, &mem).unwrap();
                if len >= RECYCLE_MIN {
                    assert!(mem.take_recycled::<u32>(len).is_none(), "bin not used");
                }
                assert!(
                    packed.data == fresh.data,
                    "{k}x{n}: recycled packing differs"
                );
                for (acc, threads) in [(false, 1), (true, 1), (false, 2), (true, 2)] {
                    let par = if threads > 1 {
                        gemm::Parallelism::Rayon(threads)
                    } else {
                        gemm::Parallelism::None
                    };
                    let (mut want, mut got) = (start.clone(), start.clone());
                    let a = Mat::rm(&x, m, k);
                    pool.install(|| {
                        matmul(&mut want, a, b, acc, par).unwrap();
                        matmul_packed(&mut got, a, &packed, acc, par).unwrap();
                    });
                    let same = want
                        .iter()
                        .zip(&got)
                        .all(|(p, q)| p.to_bits() == q.to_bits());
                    assert!(
                        same,
                        "{m}x{k}x{n} stored_t={stored_t} acc={acc} x{threads}: packed differs"
                    );
                }
            }
        }
    }

    #[test]
    fn a_mismatched_packed_operand_is_refused() {
        if !available() {
            eprintln!("skipped: this CPU has no AVX512_BF16");
            return;
        }
        let w = data(6 * 4, 1);
        let packed = PackedB::new(Mat::rm(&w, 6, 4)).unwrap();
        let x = data(2 * 5, 2);
        let mut out = vec![0.0; 2 * 4];
        let none = gemm::Parallelism::None;
        assert!(matmul_packed(&mut out, Mat::rm(&x, 2, 5), &packed, false, none).is_err());
        assert!(PackedB::new(Mat::rm(&w, 6, 5)).is_err());
    }
}
