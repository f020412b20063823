//! `tune dash [DIR]`: a live view of a running sweep or a finished one, and the screen
//! of `tune sweep --tui`.
//!
//! Three threads: the input thread forwards terminal events, the data thread
//! (`source::Follower`) polls the sweep folder and the devices, and this thread owns the
//! `App`, applies each event and redraws. The draw reads memory only.
//!
//! Test hook: with `TUNE_DASH_FAULT=panic`, the `!` key panics, so the tests can check
//! that a panic restores the terminal.

pub mod app;
pub mod bench;
pub mod source;
pub mod view;

#[cfg(test)]
mod tests;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crossterm::event::{self as term, KeyCode, KeyEventKind};

pub use self::app::App;
use self::app::SweepState;
use self::source::{Follower, Update};
use crate::error::{Error, Result};
use crate::runner::live::unix_ms;
use crate::tui::input::{input_thread, FromInput, PanicNotice};
use crate::tui::terminal;

pub use crate::tui::terminal::check_terminal;

/// How often the data thread looks at the files and samples the devices.
pub const POLL: Duration = Duration::from_millis(500);
const FAULT_ENV: &str = "TUNE_DASH_FAULT";

/// What the event loop reacts to.
#[derive(Debug)]
pub enum Event {
    Input(term::Event),
    Data(Box<Update>),
    SweepEnded(String),
    /// A dashboard thread died (a panic) or the terminal stopped giving input.
    Fatal(String),
}

impl FromInput for Event {
    fn input(ev: term::Event) -> Self {
        Event::Input(ev)
    }

    fn fatal(why: String) -> Self {
        Event::Fatal(why)
    }
}

/// A sweep running in this process on another thread (`tune sweep --tui`).
#[derive(Debug, Default)]
pub struct SweepLink {
    /// Set by the dashboard to stop the sweep (checked between trials; kills the child).
    pub cancel: Arc<AtomicBool>,
    ended: OnceLock<String>,
}

impl SweepLink {
    /// The sweep ended; `msg` says how. Only the first call counts.
    pub fn end(&self, msg: String) {
        let _ = self.ended.set(msg);
    }

    pub fn ended(&self) -> Option<&str> {
        self.ended.get().map(String::as_str)
    }

    /// A guard for the sweep thread: if it unwinds without calling `end`, the dashboard
    /// still learns that the sweep is gone.
    pub fn on_end(&self) -> EndGuard<'_> {
        EndGuard(self)
    }

    /// A guard for the dashboard's side: if it unwinds (a panic), the sweep is stopped,
    /// or the process would wait for every remaining trial before exiting.
    pub fn stop_on_unwind(&self) -> StopGuard<'_> {
        StopGuard(self)
    }
}

pub struct StopGuard<'a>(&'a SweepLink);

impl Drop for StopGuard<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.cancel.store(true, Ordering::Relaxed);
        }
    }
}

pub struct EndGuard<'a>(&'a SweepLink);

impl Drop for EndGuard<'_> {
    fn drop(&mut self) {
        self.0
            .end("the sweep thread stopped unexpectedly (see the message after quitting)".into());
    }
}

impl App {
    pub fn apply_update(&mut self, u: Update) {
        if let Some((report, mode, done, planned)) = u.report {
            self.set_report(report, mode, done, planned);
        }
        self.live = u.live;
        self.devices = u.devices;
        self.device_scroll = self.device_scroll.min(self.devices.len().saturating_sub(1));
        self.device_note = u.device_note;
        self.problem = u.problem;
    }
}

/// `tune dash [dir]`: the dashboard of a sweep folder or report.json, by default the
/// sweep under reports/ that changed last.
pub fn main(dir: Option<&Path>) -> Result<i32> {
    let input = match dir {
        Some(d) => d.to_path_buf(),
        None => source::newest_sweep(Path::new("reports"))?,
    };
    let (follower, first) = Follower::open(&input, false)?;
    check_terminal("tune dash", false)?;
    let mut app = App::new("", input.display().to_string(), SweepState::Detached);
    app.apply_update(first);
    run(app, follower, None)?;
    Ok(0)
}

/// The dashboard of `tune sweep --tui`, over the sweep writing into `out`.
pub fn run_attached(out: &Path, link: &SweepLink) -> Result<()> {
    let (follower, first) = Follower::open(out, true)?;
    let mut app = App::new("", out.display().to_string(), SweepState::Running);
    app.apply_update(first);
    run(app, follower, Some(link))
}

fn data_thread(
    mut follower: Follower,
    tx: Sender<Event>,
    stop: Receiver<()>,
    link: Option<&SweepLink>,
) {
    let _notice = PanicNotice(tx.clone(), "data");
    let mut told_end = false;
    loop {
        match stop.recv_timeout(POLL) {
            Err(RecvTimeoutError::Timeout) => {}
            _ => return,
        }
        // The end message is read before polling, so the poll that follows it sees the
        // report the sweep wrote just before ending.
        let ended = link.and_then(|l| l.ended()).map(str::to_string);
        follower.set_sweep_running(link.is_some() && ended.is_none());
        if tx.send(Event::Data(Box::new(follower.poll()))).is_err() {
            return;
        }
        if let (Some(msg), false) = (ended, told_end) {
            told_end = true;
            if tx.send(Event::SweepEnded(msg)).is_err() {
                return;
            }
        }
    }
}

/// Applies one event. Returns an error only for a fatal one.
fn apply(app: &mut App, ev: Event, fault_panic: bool) -> Result<()> {
    // The clock is read here, not in the view, so a frame is a pure function of the app.
    app.now_unix_ms = unix_ms();
    match ev {
        Event::Input(term::Event::Key(k)) => {
            if fault_panic && k.kind == KeyEventKind::Press && k.code == KeyCode::Char('!') {
                panic!("injected fault: panic ({FAULT_ENV})");
            }
            app.on_key(k);
        }
        // A resize needs nothing but the redraw that follows every event.
        Event::Input(_) => {}
        Event::Data(u) => app.apply_update(*u),
        Event::SweepEnded(msg) => {
            app.sweep = SweepState::Ended(msg);
            app.confirm_quit = false;
        }
        Event::Fatal(msg) => return Err(Error::Runtime(msg)),
    }
    Ok(())
}

/// Stops the helper threads when the event loop ends, by return or by panic; without
/// it a panic here would wait forever for the input thread inside the thread scope.
struct Stopper<'a> {
    input: &'a AtomicBool,
    data: Option<Sender<()>>,
}

impl Drop for Stopper<'_> {
    fn drop(&mut self) {
        self.input.store(true, Ordering::Relaxed);
        self.data.take();
    }
}

fn run(mut app: App, follower: Follower, link: Option<&SweepLink>) -> Result<()> {
    let fault_panic = std::env::var(FAULT_ENV).is_ok_and(|v| v == "panic");
    let (tx, rx) = mpsc::channel();
    let (stop_data, stop_rx) = mpsc::channel::<()>();
    let stop_input = AtomicBool::new(false);
    let mut guard = terminal::enter()?;
    let result = std::thread::scope(|s| {
        let _stopper = Stopper {
            input: &stop_input,
            data: Some(stop_data),
        };
        let tx_in = tx.clone();
        let stop_in = &stop_input;
        s.spawn(move || input_thread(tx_in, stop_in));
        s.spawn(move || data_thread(follower, tx, stop_rx, link));
        let r = event_loop(&mut guard, &mut app, &rx, fault_panic);
        if app.cancel_sweep || r.is_err() {
            if let Some(l) = link {
                l.cancel.store(true, Ordering::Relaxed);
            }
        }
        r
    });
    drop(guard);
    result
}

fn event_loop(
    guard: &mut terminal::Guard,
    app: &mut App,
    rx: &Receiver<Event>,
    fault_panic: bool,
) -> Result<()> {
    let io = |e: std::io::Error| Error::Runtime(format!("cannot draw the dashboard: {e}"));
    loop {
        guard
            .terminal
            .draw(|f| f.render_widget(&*app, f.area()))
            .map_err(io)?;
        let ev = rx
            .recv()
            .map_err(|_| Error::Runtime("the dashboard's threads stopped".into()))?;
        apply(app, ev, fault_panic)?;
        // Coalesce whatever else is queued into one redraw.
        while let Ok(ev) = rx.try_recv() {
            apply(app, ev, fault_panic)?;
        }
        if app.quit {
            return Ok(());
        }
    }
}
