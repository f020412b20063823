//! The experiment runner: reads a sweep spec, plans trials over knob values, journals
//! their results durably, and summarises step times into throughputs with confidence
//! intervals. Running trials in child processes and rendering reports live elsewhere.

pub mod journal;
pub mod plan;
pub mod spec;
pub mod stats;
pub mod sweep;
pub mod trial;
