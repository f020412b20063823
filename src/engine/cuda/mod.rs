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
