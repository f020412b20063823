use std::process::ExitCode;

use clap::Parser;
use tune::commands::cli::{Cli, Command};

// Turns an allocation failure into a clean one-line error and exit (a trial's `oom`
// line in a trial child) instead of an abort that would read as a crash.
#[global_allocator]
static ALLOC: tune::process::alloc::OomExit = tune::process::alloc::OomExit;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return clap_error(&e),
    };
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

/// Help and version as clap prints them; a usage error as every other refusal: one line
/// (clap's own first line and its tip, without the usage block), exit 2.
fn clap_error(e: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        let _ = e.print();
        return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
    }
    let text = e.to_string();
    let mut parts = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"));
    let first = parts.next().unwrap_or("bad arguments");
    let first = first.strip_prefix("error: ").unwrap_or(first);
    let mut line = first.to_string();
    for tip in parts.filter(|l| l.starts_with("tip:")) {
        line.push_str("; ");
        line.push_str(tip);
    }
    eprintln!(
        "error: {} (tune --help lists the commands and flags)",
        tune::error::one_line(&line)
    );
    ExitCode::from(2)
}
