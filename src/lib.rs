//! `tune`: measures which training settings make neural-network training faster on this
//! machine, by how much, and why.
//!
//! Data flows through one folder per stage: `engine` trains, `runner` sweeps knobs over
//! child-process trials, `advisor` turns measurements into recommendations, `report`
//! renders them.

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
