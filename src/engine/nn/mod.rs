//! Neural-network structure: the layer contract, the model container (with activation
//! checkpointing), composite blocks and the model zoo.

pub mod init;
pub mod model;
pub(crate) mod model_cuda;
pub mod residual;
pub mod residual_cuda;
pub mod zoo;

/// The layer contract lives with the ops (`ops/layer.rs`); this keeps `nn::layer` paths.
pub use crate::engine::ops::layer;
