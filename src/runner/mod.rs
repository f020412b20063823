//! The experiment runner: runs a spec's plan round by round through an `Executor` it
//! defines (`crate::executor` implements it), journals each finished trial durably
//! (`journal`, `resume`), announces the running trial to a dashboard (`live`), samples the
//! devices over the sweep (`sampling`), and reports progress to a `SweepObserver`.
//! Judging results is the advisor's, rendering the report's, composing `tune sweep` the
//! commands'.

pub mod journal;
pub mod live;
pub mod resume;
pub mod sampling;
pub mod sweep;
