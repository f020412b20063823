//! Commands whose work is a thin layer over a stage: `train` (progress line over the
//! engine's observer), `bench` (engine and GEMM throughput) `probe` (machine facts) and `gate`
//! (loads two reports and writes the verdict of `crate::gate`).

pub mod bench;
pub mod gate;
pub mod probe;
pub mod train;
