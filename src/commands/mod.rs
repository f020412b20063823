//! Commands whose work is a thin layer over a stage: `train` (progress line over the
//! engine's observer), `bench` (engine and GEMM throughput), `probe` (machine facts), `gate`
//! (loads two reports and writes the verdict of `crate::gate`) and `watch` (flags to a
//! `crate::watch` session).

pub mod bench;
pub mod cli;
pub mod gate;
pub mod probe;
pub mod report;
pub mod sweep;
pub mod train;
pub mod watch;
