//! One trial in a child process (being written).

use crate::cli::TrainArgs;

/// Child side of `tune trial`: runs the workload, prints one JSON line, returns the exit code.
pub fn child_main(_args: &TrainArgs) -> i32 {
    eprintln!("tune trial: not built yet");
    1
}
