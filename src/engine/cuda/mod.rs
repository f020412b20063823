//! The CUDA backend (cudarc 0.19, libraries loaded at run time).
//!
//! It builds everywhere and touches no CUDA library until [`libs::require`] has checked
//! that each one loads, so machines without a GPU get one clear line instead of
//! cudarc's panic. Kernels are NVRTC-compiled from `kernels.cu`; GEMM is cuBLASLt.

pub mod blas;
pub mod gpu;
pub mod kernels;
pub mod layers;
pub mod libs;
pub mod train;
pub mod versions;

use crate::error::Error;

/// Whether the CUDA backend can run here: the first GPU's name, or why not (one line).
/// Used by `--device auto`; opens no context beyond the driver's device query.
pub fn usable() -> std::result::Result<String, String> {
    libs::require(&libs::TRAINING).map_err(|e| e.to_string())?;
    let count = cudarc::driver::CudaContext::device_count()
        .map_err(|e| format!("CUDA backend: no usable GPU: {e}"))?;
    if count < 1 {
        return Err("CUDA backend: the driver sees no GPU".into());
    }
    cudarc::driver::CudaContext::new(0)
        .and_then(|c| c.name())
        .map_err(|e| Error::Unavailable(format!("CUDA backend: GPU 0: {e}")).to_string())
}
