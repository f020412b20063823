//! Entering and leaving the dashboard's terminal mode (raw input, alternate screen,
//! hidden cursor), and getting out of it on every path: normal quit and errors (the
//! guard's drop) and panics on any thread (a hook that restores before the message is
//! printed, so the message lands on the normal screen).

use std::io::{stdout, IsTerminal, Stdout};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Once;

use crossterm::cursor::{Hide, Show};
use crossterm::execute;
use crossterm::terminal::{
    disable_raw_mode, enable_raw_mode, EnterAlternateScreen, LeaveAlternateScreen,
};
use ratatui::backend::CrosstermBackend;
use ratatui::Terminal;

use crate::error::{Error, Result};

/// The dashboard owns the terminal right now; the panic hook only acts then, so a panic
/// elsewhere never writes escape sequences into someone's piped output.
static ACTIVE: AtomicBool = AtomicBool::new(false);
static HOOK: Once = Once::new();

/// Refuses to start a dashboard where it cannot work, before anything is changed.
pub fn check_terminal(what: &str, json: bool) -> Result<()> {
    if json {
        return Err(Error::Invalid(format!(
            "{what}: --json and the dashboard do not go together; drop one of them"
        )));
    }
    if !stdout().is_terminal() || !std::io::stdin().is_terminal() {
        return Err(Error::Invalid(format!(
            "{what} needs an interactive terminal on stdin and stdout; without one, use \
             `tune sweep SPEC` for progress lines and `tune report DIR` for the results"
        )));
    }
    Ok(())
}

/// Undoes everything `enter` did. Safe to call twice.
pub fn restore() -> std::io::Result<()> {
    if !ACTIVE.swap(false, Ordering::SeqCst) {
        return Ok(());
    }
    // Raw mode first: it has more side effects than the alternate screen.
    let raw = disable_raw_mode();
    execute!(stdout(), LeaveAlternateScreen, Show)?;
    raw
}

fn install_panic_hook() {
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let _ = restore();
            previous(info);
        }));
    });
}

/// The terminal in dashboard mode; dropping it restores the terminal.
pub struct Guard {
    pub terminal: Terminal<CrosstermBackend<Stdout>>,
}

pub fn enter() -> Result<Guard> {
    let io = |e: std::io::Error| Error::Runtime(format!("cannot set up the terminal: {e}"));
    install_panic_hook();
    ACTIVE.store(true, Ordering::SeqCst);
    let entered = enable_raw_mode()
        .and_then(|()| execute!(stdout(), EnterAlternateScreen, Hide))
        .and_then(|()| Terminal::new(CrosstermBackend::new(stdout())));
    match entered {
        Ok(terminal) => Ok(Guard { terminal }),
        Err(e) => {
            let _ = restore();
            Err(io(e))
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Err(e) = restore() {
            eprintln!(
                "warning: could not restore the terminal ({e}); run `reset` if it misbehaves"
            );
        }
    }
}
