//! The training engine: tensors on a device with tracked memory, layer-wise ops with
//! explicit forward/backward, the model zoo, data, optimizers and the step loop.

pub mod data;
