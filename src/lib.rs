//! `tune`: measures which training settings make neural-network training faster on this
//! machine, by how much, and why.
//!
//! One folder per stage, stacked; a stage imports only the stages below it
//! (tests/quick/stages.rs holds the order and fails on a back-edge), bottom to top:
//! base (`error`, `fsio`, `limits`, `knobs`, `stats`, `process`) → `engine` (trains) →
//! `spec` (what to measure: spec and plan) → `results` (what was measured: trial records,
//! the report model) → `runner` (sweeps through an `Executor`) → `bridge` (PyTorch jobs) →
//! `executor` (where trials run) → `advisor` (judges) → `report` (renders) → `gate` →
//! `tui` → `watch` → `commands` (the only entrance).

pub mod advisor;
pub mod bridge;
pub mod commands;
pub mod engine;
pub mod error;
pub mod executor;
pub mod fsio;
pub mod gate;
pub mod knobs;
pub mod limits;
pub mod process;
pub mod report;
pub mod results;
pub mod runner;
pub mod spec;
pub mod stats;
pub mod tui;
pub mod watch;

pub use error::{Error, Result};
pub use knobs::Knobs;
