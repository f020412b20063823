//! The only entrance: the clap definitions (`cli`) and one module per subcommand that is
//! more than a call into its stage: `train` (progress line over the engine's observer),
//! `sweep` (runner + executor + advisor + report), `report` (re-render), `bench`, `probe`,
//! `gate` (loads two reports and writes the verdict of `crate::gate`) and `watch` (flags to
//! a `crate::watch` session). `trial`, `supervise` and `dash` are dispatched by main.rs
//! straight into their stage with plain values. Nothing below this module imports it.

pub mod bench;
pub mod cli;
pub mod gate;
pub mod probe;
pub mod report;
pub mod sweep;
pub mod train;
pub mod watch;
