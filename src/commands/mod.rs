//! Commands whose work is a thin layer over a stage: `train` (progress line over the
//! engine's observer), `bench` (engine and GEMM throughput) and `probe` (machine facts).

pub mod bench;
pub mod probe;
pub mod train;
