//! GELU on the CUDA backend (tanh approximation, kernels `gelu_forward`/`gelu_backward`
//! in kernels.cu): the shared element-wise activation layer, keeping its input.

use crate::engine::ops::activation_cuda::{GActivation, Keeps};

/// GELU as a GPU layer.
pub(crate) fn gelu() -> GActivation {
    GActivation::new("gelu", "gelu_forward", "gelu_backward", Keeps::Input)
}
