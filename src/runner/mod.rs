//! The experiment runner: reads a sweep spec, plans trials over knob values, runs each
//! in a child process (`trial` parent side, `child` child side), journals their results
//! durably, and summarises step times into throughputs with confidence intervals.
//! Rendering reports lives in `report`.

pub mod alloc;
mod child;
pub mod journal;
pub mod live;
pub mod metric;
pub(crate) mod pipes;
pub mod plan;
mod procs;
pub mod record;
pub mod resume;
pub mod sampling;
pub mod spec;
pub mod stats;
pub mod supervise;
pub mod sweep;
pub mod trial;
