//! The input plumbing every full-screen view shares (`tune dash`, `tune watch --tui`):
//! a thread that forwards terminal events to the view's event loop, and a guard that
//! tells that loop when one of its threads dies by panic. Each view has its own event
//! enum; [`FromInput`] is all this needs of it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::time::Duration;

use crossterm::event as term;

/// A view's event, as far as its input thread makes one.
pub(crate) trait FromInput: Send {
    /// A terminal event.
    fn input(ev: term::Event) -> Self;
    /// The terminal stopped giving input, or a thread of the view died.
    fn fatal(why: String) -> Self;
}

/// Tells the event loop when its thread dies by panic, so the screen does not freeze.
pub(crate) struct PanicNotice<E: FromInput>(pub Sender<E>, pub &'static str);

impl<E: FromInput> Drop for PanicNotice<E> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let _ = self.0.send(E::fatal(format!(
                "the dashboard's {} thread panicked",
                self.1
            )));
        }
    }
}

/// Forwards terminal events until `stop` is set.
pub(crate) fn input_thread<E: FromInput>(tx: Sender<E>, stop: &AtomicBool) {
    let _notice = PanicNotice(tx.clone(), "input");
    while !stop.load(Ordering::Relaxed) {
        // A short poll so that quitting never waits long for this thread.
        let ready = match term::poll(Duration::from_millis(100)) {
            Ok(r) => r,
            Err(e) => {
                let _ = tx.send(E::fatal(format!("cannot read the terminal: {e}")));
                return;
            }
        };
        if !ready {
            continue;
        }
        let sent = match term::read() {
            Ok(ev) => tx.send(E::input(ev)),
            Err(e) => {
                let _ = tx.send(E::fatal(format!("cannot read the terminal: {e}")));
                return;
            }
        };
        if sent.is_err() {
            return;
        }
    }
}
