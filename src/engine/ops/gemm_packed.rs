//! A right-hand GEMM operand packed for the native bf16 kernels once, then reused by
//! every call: a layer's weights, packed when the optimizer has changed them and not on
//! each of the step's GEMMs (`ops/layer.rs`, `Param::kernel_weights`).
//!
//! Before: mlp at batch 128, 1 thread, `amp = bf16` (perf, Sapphire Rapids) spent about a
//! third of its GEMM time narrowing and packing the f32 weights, each 1024x1024 matrix
//! packed in forward and again for the input gradient on every step (and once per thread
//! under a column split).
//!
//! Layout: `k` is cut into the same blocks the kernels cut it into (`gemm_bf16::one`),
//! and each block's columns into panels of `NR` lanes holding the block's k-pairs padded
//! with zero pairs to a multiple of 16 (the AMX kernel's tile depth; the AVX-512 kernel
//! reads only the pairs it needs). Each panel holds exactly what the kernels would have
//! packed from the same operand, so results are bit for bit those of packing per call.

use rayon::prelude::*;

use crate::engine::ops::gemm::Mat;
use crate::engine::ops::gemm_bf16::{available, pack, Lanes, KC, NR};
use crate::error::{Error, Result};

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
        let mut data = vec![0u32; len];
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

    /// Panel `j` (columns j*NR..) of the k-block starting at `pc`: pairs of NR lanes,
    /// zero-padded to the block's multiple of 16 pairs.
    pub(crate) fn panel(&self, pc: usize, j: usize) -> &[u32] {
        let (start, kt) = self.blocks[pc / self.kc];
        &self.data[start + j * NR * kt..start + (j + 1) * NR * kt]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::ops::gemm::test_data as data;
    use crate::engine::ops::gemm_amx;
    use crate::engine::ops::gemm_bf16::{matmul, matmul_packed};

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
                let packed = PackedB::new(b).unwrap();
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
