//! Commands whose work is a thin layer over a stage: `train` (progress line over the
//! engine's observer), `bench` (engine and GEMM throughput), `probe` (machine facts) and
//! `watch` (flags to a `crate::watch` session).

pub mod bench;
pub mod probe;
pub mod train;
pub mod watch;
