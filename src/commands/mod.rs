//! The only entrance: the clap definitions (`cli`) and one module per subcommand that is
//! more than a call into its stage: `train` (progress line over the engine's observer),
//! `sweep` (runner + executor + advisor + report), `report` (re-render), `bench`, `probe`,
//! `gate` (loads two reports and writes the verdict of `crate::gate`), `compare` (what
//! changed between two watches or two sweeps) and `watch` (flags to a `crate::watch`
//! session). `run` dispatches all ten; `trial`, `supervise` and `dash`
//! go straight into their stage with plain values. Nothing below this module imports it.

mod answer;
pub mod bench;
pub mod cli;
pub mod compare;
pub mod gate;
pub mod probe;
pub mod report;
pub(crate) mod summary;
pub mod sweep;
pub mod train;
pub mod watch;

use crate::error::Result;
use cli::Command;

/// Runs one subcommand; the exit code on success (a sweep with no successful trial, a
/// failing gate), the error otherwise.
pub fn run(command: &Command) -> Result<i32> {
    match command {
        Command::Train(a) => train::main(a),
        Command::Trial(a) => Ok(crate::executor::child::child_main(
            a.knobs(),
            &a.run.workload(),
        )),
        Command::Supervise(a) => Ok(crate::process::supervise::supervise_main(
            a.parent,
            a.mem_cap_bytes,
            &a.command,
        )),
        Command::Sweep(a) => sweep::main(a),
        Command::Report(a) => report::main(a),
        Command::Probe(a) => probe::main(a),
        Command::Bench(a) => bench::main(a),
        Command::Gate(a) => gate::main(a),
        Command::Compare(a) => compare::main(a),
        Command::Dash(a) => crate::tui::dash::main(a.dir.as_deref()),
        Command::Watch(a) => watch::main(a),
    }
}
