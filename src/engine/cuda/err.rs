//! How a CUDA driver or NCCL failure becomes this crate's error: one line naming the call.

use crate::error::Error;

/// `pub` (hidden) for `cuda_launch!` used outside the crate (tests/gpu_optim.rs).
#[doc(hidden)]
pub fn cuda_err(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Runtime(format!("CUDA: {what}: {e}"))
}

/// An NCCL call's error, with NCCL's result code (cudarc's `Debug` hides it).
pub fn nccl_err(what: &str, e: cudarc::nccl::result::NcclError) -> Error {
    Error::Runtime(format!("NCCL: {what}: {:?}", e.0))
}
