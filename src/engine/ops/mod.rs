//! Ops: each file holds one operation's forward and backward (CPU kernels plus the
//! `Layer` that wraps them); `<op>_cuda.rs` beside it holds the same op's CUDA layer,
//! so one op's two implementations are read together.

pub mod activation;
pub mod activation_cuda;
pub mod batchnorm;
pub mod batchnorm_cuda;
pub mod conv2d;
pub(crate) mod conv2d_bf16;
pub mod conv2d_cuda;
pub mod conv_algos;
pub mod desc;
pub mod fused;
pub(crate) mod fused_cuda;
pub mod gelu;
pub(crate) mod gelu_cuda;
pub mod gemm;
pub mod gemm_amp;
pub(crate) mod gemm_amx;
pub(crate) mod gemm_bf16;
pub(crate) mod gemm_pairs;
pub(crate) mod gemm_peak;
pub mod layer;
pub(crate) mod layer_cuda;
pub mod linear;
pub(crate) mod linear_bf16;
pub mod linear_cuda;
pub mod loss;
pub mod pool;
pub mod pool_cuda;
#[cfg(test)]
mod storage_tests;
pub mod sync_bn;

use crate::engine::ops::layer::Param;
use crate::error::Result;

/// Writes `bias` into every row of `dst` (rows of `bias.len()`), so a following GEMM can
/// accumulate onto it: bias add costs no extra pass.
pub(crate) fn fill_rows(dst: &mut [f32], bias: &[f32]) {
    for row in dst.chunks_exact_mut(bias.len()) {
        row.copy_from_slice(bias);
    }
}

/// Adds the column sums of `dy` (rows of the bias width) into the bias gradient. A fresh
/// gradient slot is zero-filled, so adding is also right for the first backward.
pub(crate) fn add_bias_grad(b: &mut Param, dy: &[f32]) -> Result<()> {
    let (gb, _) = b.grad_slot()?;
    let width = gb.len();
    for row in dy.chunks_exact(width) {
        for (g, d) in gb.iter_mut().zip(row) {
            *g += d;
        }
    }
    Ok(())
}
