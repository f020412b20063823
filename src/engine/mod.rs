//! The training engine: tensors on a device with tracked memory, layer-wise ops with
//! explicit forward/backward, the model zoo, data, optimizers and the step loop.

pub mod amp;
pub mod autotune;
pub mod caps;
pub mod clock;
pub mod collective;
pub mod cpu;
pub mod cuda;
pub mod data;
pub mod device;
pub mod geom;
#[cfg(test)]
mod gradcheck;
pub mod host;
pub(crate) mod launcher;
pub mod nn;
pub mod ops;
pub mod optim;
pub mod parallel;
pub mod probe;
pub mod rng;
pub mod step;
pub mod tensor;
#[doc(hidden)]
pub mod testing;
pub mod train;
pub mod vocab;

pub use train::{run, NoObserver, Observer, RunSummary, StepEvent, Workload};
