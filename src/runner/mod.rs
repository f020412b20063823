//! The experiment runner: reads a sweep spec, plans trials over knob values, runs each
//! in a child process (`trial` parent side, `child` child side), journals their results
//! durably, and summarises step times into throughputs with confidence intervals.
//! Rendering reports lives in `report`.

pub mod journal;
pub mod live;
pub mod resume;
pub mod sampling;
pub mod sweep;
