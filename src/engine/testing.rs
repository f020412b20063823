//! The one door from the integration tests into the CUDA backend's inside: what the
//! CPU-parity, kernel and GPU-optimizer tests (`tests/gpu_*.rs`, `tests/cuda_kernels.rs`)
//! drive directly, below `engine::run`. The modules behind it are `pub(crate)`; nothing
//! outside `tests/` uses this.

pub use crate::engine::cuda::blas::Shape;
pub use crate::engine::cuda::gpu::{DBuf, GTensor, Gpu};
pub use crate::engine::cuda::train::{amp_state, softmax_xent, GOptim, LossOut};
pub use crate::engine::nn::model_cuda::{from_cpu as gpu_layers_of, GCtx, GLayer};
pub use crate::engine::ops::layer_cuda::{GParam, GpuLayer, Pass};

/// The backend's own kernels (`kernels.cu`): the list, NVRTC, the PTX cache, launch shapes.
pub mod kernels {
    pub use crate::engine::cuda::kernels::{
        compile, cubin, elementwise, names, nvrtc_version, per_item, ptx_cached, SOURCE,
    };
}
