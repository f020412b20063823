//! `tune watch --steps N / --duration S` (issue #26): a watch of a job that trains for
//! hours ends by itself. Past N steps (counted by the PyTorch hooks, which stop a Python
//! job at the step boundary themselves) or S seconds, a command tune started is asked to
//! stop (SIGINT, as Ctrl-C would; a Python job that already got the hooks' SystemExit is
//! left to finish), and ended with its children after a grace period; an attached process
//! is only left alone. Either way the report is written.

use std::time::{Duration, Instant};

use super::target::Target;
use crate::bridge::Link;

/// How long a job has to end by itself once asked, before its processes are killed: a
/// DataLoader joins each worker for up to 5 s (`MP_STATUS_CHECK_INTERVAL`) on exit.
const GRACE: Duration = Duration::from_secs(10);

/// The watch's window and how far it is.
pub(crate) struct WatchWindow {
    pub steps: Option<u64>,
    pub duration: Option<Duration>,
    /// When the window filled, and why (for the report).
    ended: Option<(Instant, String)>,
    asked: bool,
    killed: bool,
}

impl WatchWindow {
    pub fn new(steps: Option<u64>, duration: Option<Duration>) -> WatchWindow {
        WatchWindow {
            steps,
            duration,
            ended: None,
            asked: false,
            killed: false,
        }
    }

    /// The hooks' window for `--steps N`: no warm-up, N steps, then SystemExit at the
    /// step boundary.
    pub fn hook_json(&self) -> Option<String> {
        self.steps
            .map(|n| serde_json::json!({ "warmup": 0, "steps": n, "seconds": null }).to_string())
    }

    /// Whether the watch is over: true when an attached process's window filled (stop
    /// watching); for a started command, asks it to stop and, past the grace, ends it.
    pub fn check(&mut self, started: Instant, link: Option<&Link>, target: &Target) -> bool {
        if self.ended.is_none() {
            let steps = link.map_or(0, Link::steps_seen) as u64;
            let why = match (self.steps, self.duration) {
                (Some(n), _) if steps >= n || link.is_some_and(Link::window_full) => {
                    Some(format!("{n} steps (--steps {n})"))
                }
                (_, Some(d)) if started.elapsed() >= d => Some(format!(
                    "{:.0} s (--duration {})",
                    d.as_secs_f64(),
                    d.as_secs_f64()
                )),
                _ => None,
            };
            let Some(why) = why else {
                return false;
            };
            eprintln!("watch: window full after {why}: ending the watch");
            self.ended = Some((Instant::now(), why));
        }
        if !target.is_child() {
            return true;
        }
        let Some((at, _)) = &self.ended else {
            return false;
        };
        // A Python job stopped by the hooks' window is already on its way out.
        let hooks_stopped = link.is_some_and(Link::window_full);
        if !self.asked {
            self.asked = true;
            if !hooks_stopped {
                target.signal(libc::SIGINT);
            }
        } else if at.elapsed() >= GRACE && !self.killed {
            self.killed = true;
            eprintln!(
                "watch: the command did not end within {} s of being asked; ending it and its children",
                GRACE.as_secs()
            );
            crate::process::procs::kill_descendants(target.pid());
            target.signal(libc::SIGKILL);
        }
        false
    }

    /// For the report: what ended the watch, if its window did.
    pub fn note(&self) -> Option<String> {
        self.ended.as_ref().map(|(_, why)| {
            let how = if self.killed {
                format!(
                    "; the command did not end within {} s and was killed with its children",
                    GRACE.as_secs()
                )
            } else {
                String::new()
            };
            format!("the watch ended after {why}{how}")
        })
    }

    /// Whether tune ended the watched command (its exit code is then not a failure).
    pub fn stopped_it(&self) -> bool {
        self.ended.is_some()
    }
}
