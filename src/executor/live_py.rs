//! A `[workload.python]` trial's progress in `live.json`, for `tune dash`: the sweep
//! writes the file as each trial starts and an engine trial's child rewrites it as its
//! steps finish (`runner::live`), but a Python trial's steps arrive through the hooks'
//! pipe in the sweep's own process, and the dashboard said "starting" for its whole run.
//! This rewrites the file from what the hooks reported, at most every
//! `live::WRITE_EVERY`: steps, warm-up, the recent step time, samples/s and phases, and
//! the first step with its compile.

use std::cell::{Cell, RefCell};
use std::path::PathBuf;
use std::time::Instant;

use crate::bridge::Progress;
use crate::runner::live::{self, LiveTrial};

pub(super) struct PyLive {
    path: PathBuf,
    state: RefCell<LiveTrial>,
    /// The window's measured steps: the trial's planned total is its warm-up plus these.
    window_steps: usize,
    last: Cell<Option<Instant>>,
}

impl PyLive {
    /// Continues the file the sweep wrote for this trial; None (nothing written) when
    /// there is none or it is unreadable: a trial never fails over its progress display.
    pub(super) fn open(path: Option<&PathBuf>, window_steps: usize) -> Option<PyLive> {
        let path = path?.clone();
        let state = LiveTrial::load(&path).ok()?;
        Some(PyLive {
            path,
            state: RefCell::new(state),
            window_steps,
            last: Cell::new(None),
        })
    }

    /// Rewrites the file from `p` when the last write is old enough.
    pub(super) fn tick(&self, p: &Progress) {
        if self
            .last
            .get()
            .is_some_and(|t| t.elapsed() < live::WRITE_EVERY)
        {
            return;
        }
        self.last.set(Some(Instant::now()));
        let mut s = self.state.borrow_mut();
        apply(&mut s, p, self.window_steps);
        s.updated_unix_ms = live::unix_ms();
        // A dashboard that cannot follow is no reason to stop the trial.
        let _ = s.store(&self.path);
    }
}

/// `p` in the live file's terms: `step` counts the first step too; until measuring
/// begins every step so far is warm-up, so the view says "warm-up" and the total moves
/// with it.
fn apply(s: &mut LiveTrial, p: &Progress, window_steps: usize) {
    let done = p.steps + usize::from(p.first.is_some());
    s.step = done;
    s.warmup = p.warmup.map_or(done, |w| w + 1);
    s.steps = (s.warmup + window_steps).max(done);
    s.step_s = p.step_s;
    s.samples_per_s = p.samples_per_s.filter(|_| p.warmup.is_some());
    s.phases = p.phases;
    // The bar says warm-up and the figures line the step time: the note adds what
    // neither shows.
    s.note = match p.first_words() {
        Some(w) => Some(w),
        None if done == 0 => Some(p.line(true)),
        None => None,
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bridge::Events;

    #[test]
    fn a_python_trial_is_warm_up_until_measuring_begins_then_has_figures() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join(live::LIVE_JSON);
        LiveTrial {
            label: "num_workers=2".into(),
            ..LiveTrial::default()
        }
        .store(&path)
        .unwrap();
        let l = PyLive::open(Some(&path), 30).unwrap();
        let mut e = Events::default();
        e.push_line(r#"{"ev":"first_step","t":1,"dur":2.5,"compile":2.0}"#);
        for i in 1..=9 {
            e.push_line(&format!(
                r#"{{"ev":"step","step":{i},"t":{i},"dur":0.05,"batch":16,"forward":0.02,"backward":0.03}}"#
            ));
        }
        l.tick(&e.progress());
        let s = LiveTrial::load(&path).unwrap();
        assert_eq!(
            (s.label.as_str(), s.step, s.warmup, s.steps),
            ("num_workers=2", 10, 10, 40)
        );
        assert_eq!(s.samples_per_s, None, "no samples/s during warm-up: {s:?}");
        assert!(
            s.note
                .as_deref()
                .unwrap()
                .contains("first step 2.5 s (2.0 s compiling)"),
            "{s:?}"
        );
        // Written at most every WRITE_EVERY: the next tick right away writes nothing.
        e.push_line(r#"{"ev":"window","warmup":9}"#);
        l.tick(&e.progress());
        assert_eq!(LiveTrial::load(&path).unwrap().samples_per_s, None);
        std::thread::sleep(live::WRITE_EVERY);
        l.tick(&e.progress());
        let s = LiveTrial::load(&path).unwrap();
        assert_eq!((s.step, s.warmup, s.steps), (10, 10, 40));
        assert!((s.samples_per_s.unwrap() - 320.0).abs() < 1e-6, "{s:?}");
        assert_eq!(
            s.note.as_deref(),
            Some("first step 2.5 s (2.0 s compiling)")
        );
    }

    #[test]
    fn no_file_no_writer() {
        let d = tempfile::tempdir().unwrap();
        assert!(PyLive::open(None, 30).is_none());
        assert!(PyLive::open(Some(&d.path().join("none.json")), 30).is_none());
    }
}
