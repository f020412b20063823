//! `tune`: measures which training settings make neural-network training faster on this
//! machine, by how much, and why.
//!
//! Data flows through one folder per stage: `engine` trains, `runner` sweeps knobs over
//! child-process trials, `advisor` turns measurements into recommendations, `report`
//! renders them.

pub mod advisor;
pub mod bridge;
pub mod cli;
pub mod commands;
pub mod engine;
pub mod error;
pub mod fsio;
pub mod gate;
pub mod knobs;
pub mod limits;
pub mod report;
pub mod runner;
pub mod tui;
pub mod watch;

pub use error::{Error, Result};
pub use knobs::Knobs;
