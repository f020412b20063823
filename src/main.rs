use std::process::ExitCode;

use clap::Parser;
use tune::commands::cli::{Cli, Command};

// Turns an allocation failure into a clean one-line error and exit (a trial's `oom`
// line in a trial child) instead of an abort that would read as a crash.
#[global_allocator]
static ALLOC: tune::process::alloc::OomExit = tune::process::alloc::OomExit;

fn main() -> ExitCode {
    let cli = Cli::parse();
    if matches!(
        cli.command,
        Command::Train(_)
            | Command::Report(_)
            | Command::Probe(_)
            | Command::Bench(_)
            | Command::Gate(_)
    ) {
        // Printing commands end quietly when their reader goes away (`tune train | head`),
        // as Unix tools do, instead of panicking on EPIPE in println!. Not for the sweep,
        // trial or watch processes, which own children and must finish their bookkeeping.
        // SAFETY: called before any thread is started; SIG_DFL is a valid disposition.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    let result = tune::commands::run(&cli.command);
    match result {
        Ok(code) => ExitCode::from(code.clamp(0, 255) as u8),
        Err(e) => {
            // The one place tune prints an error: escaped and cut here, every path is covered.
            eprintln!("error: {}", tune::error::one_line(&e.to_string()));
            ExitCode::from(if e.is_bad_input() { 2 } else { 1 })
        }
    }
}
