//! The training engine: tensors on a device with tracked memory, layer-wise ops with
//! explicit forward/backward, the model zoo, data, optimizers and the step loop.

pub mod amp;
pub mod autotune;
pub mod caps;
pub mod cuda;
pub mod data;
pub mod device;
#[cfg(test)]
mod gradcheck;
pub mod nn;
pub mod ops;
pub mod optim;
pub mod parallel;
pub mod probe;
pub mod rng;
pub mod step;
pub mod tensor;
pub mod train;

pub use train::{run, NoObserver, Observer, RunSummary, StepEvent, Workload};
