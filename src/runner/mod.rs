//! The experiment runner: runs a spec's plan round by round through an `Executor` it
//! defines (`crate::executor` implements it), journals each finished trial durably
//! (`journal`, `resume`), announces the running trial to a dashboard (`live`), samples the
//! devices over the sweep (`sampling`), and reports progress to a `SweepObserver`.
//! Judging results is the advisor's, rendering the report's, composing `tune sweep` the
//! commands'.

// Public while `Journal::repaired` has no caller in the crate (a torn line repaired on open
// is never reported); pub(crate) would flag it as dead code.
pub(crate) mod budget;
pub(crate) mod hardware;
pub mod journal;
pub(crate) mod live;
pub(crate) mod resume;
pub(crate) mod sampling;
pub(crate) mod sweep;

pub use sweep::{Executor, Outcome, Run, RunEvent, SweepObserver};
