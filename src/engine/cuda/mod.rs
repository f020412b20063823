//! The CUDA backend (cudarc 0.19, libraries loaded at run time).
//!
//! It builds everywhere and touches no CUDA library until [`libs::require`] has checked
//! that each one loads, so machines without a GPU get one clear line instead of
//! cudarc's panic. Kernels are NVRTC-compiled from `kernels.cu`; GEMM is cuBLASLt;
//! conv2d is cuDNN where `libcudnn.so.9` loads (`dnn`), else im2col + cuBLASLt.

pub(crate) mod blas;
pub mod ddp;
pub mod dnn;
pub(crate) mod dp;
pub mod err;
pub(crate) mod gpu;
pub(crate) mod kernels;
pub mod libs;
pub(crate) mod sync_bn;
pub(crate) mod train;
pub mod versions;

use crate::error::Error;

/// A CUDA driver error as the engine's error, naming what failed (`cuda_launch!` uses it).
pub use err::cuda_err;

/// The device name of the CPU stand-in of the CUDA driver (tests/standin/cuda.cpp).
pub const STANDIN_DEVICE: &str = "tune CPU stand-in (not a GPU)";

/// The backend a run on `device` is recorded as: "cuda", or "cuda (CPU stand-in)" so a
/// stand-in run's times can never pass for GPU measurements.
pub fn backend_label(device: &str) -> &'static str {
    if device == STANDIN_DEVICE {
        "cuda (CPU stand-in)"
    } else {
        "cuda"
    }
}

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

/// How many GPUs the driver sees (0 where the CUDA backend cannot run).
pub fn gpu_count() -> usize {
    if libs::require(&libs::TRAINING).is_err() {
        return 0;
    }
    cudarc::driver::CudaContext::device_count().map_or(0, |n| n.max(0) as usize)
}
