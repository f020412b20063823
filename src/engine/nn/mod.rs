//! Neural-network structure: the layer contract, the model container (with activation
//! checkpointing), composite blocks and the model zoo.

pub mod init;
pub mod layer;
pub mod model;
pub mod residual;
pub mod zoo;
