//! The running trial, as a file a dashboard can follow: `live.json` in the sweep folder.
//!
//! The journal only learns about a trial once it has finished. To show the one that is
//! running, the sweep writes `live.json` before it starts each child (which trial, which
//! repeat, which of how many), and the child (`tune trial`, told the path through
//! `TUNE_LIVE_FILE`) rewrites it as steps finish, at most every `WRITE_EVERY`. The sweep
//! removes it once the trial is journaled.
//!
//! Every write is a temp file renamed over the old one, so a reader sees a whole file or
//! the previous one. No fsync: this is a view of progress, not a record; a crash loses
//! nothing the journal needs.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::engine::train::{Observer, Phases, StepEvent};
use crate::error::{Error, Result};
use crate::knobs::Knobs;

pub const LIVE_JSON: &str = "live.json";
/// Set by the sweep on trial children: where to write progress.
pub const LIVE_ENV: &str = "TUNE_LIVE_FILE";
/// Often enough to look live, rare enough to cost nothing next to a training step.
pub const WRITE_EVERY: Duration = Duration::from_millis(250);
/// Steps the live throughput and phase figures are taken over.
const WINDOW: usize = 20;

/// What a dashboard knows about the trial that is running.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LiveTrial {
    pub id: String,
    pub label: String,
    pub knobs: Knobs,
    /// Halving round.
    pub round: usize,
    /// 1-based repeat of this configuration, out of `repeats`.
    pub repeat: usize,
    pub repeats: usize,
    /// 1-based position in the sweep, out of `total` trial runs.
    pub index: usize,
    pub total: usize,
    pub started_unix_ms: u64,
    pub updated_unix_ms: u64,
    /// The process doing the work: the trial child once it has written, else the sweep.
    pub pid: u32,
    /// Optimizer steps done so far and in all (warm-up included); 0 of 0 before the first
    /// step, and for command workloads, whose progress tune cannot see.
    pub step: usize,
    pub steps: usize,
    pub warmup: usize,
    pub loss: Option<f32>,
    /// Median over the last few steps after warm-up.
    pub samples_per_s: Option<f64>,
    /// Mean seconds per phase over the same steps.
    pub phases: Option<Phases>,
    /// Mean seconds per step over the same steps (the last step's during warm-up).
    pub step_s: Option<f64>,
    /// Engine memory by category right after the last step.
    pub mem_bytes: BTreeMap<String, u64>,
    pub mem_peak_bytes: u64,
    /// A `[workload.python]` trial's steps in words, from the hooks (`bridge::Progress`):
    /// warm-up or measuring, the first step and its compile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl LiveTrial {
    pub fn load(path: &Path) -> Result<LiveTrial> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        serde_json::from_str(&text).map_err(|e| Error::format(path, format!("invalid: {e}")))
    }

    /// Replaces the file at `path` in one rename.
    pub fn store(&self, path: &Path) -> Result<()> {
        let text = serde_json::to_vec(self)
            .map_err(|e| Error::Runtime(format!("cannot encode live progress: {e}")))?;
        let name = path
            .file_name()
            .map_or_else(|| LIVE_JSON.into(), |n| n.to_string_lossy().into_owned());
        let tmp = path.with_file_name(format!(".{name}.tmp.{}", std::process::id()));
        write_new(&tmp, &text)
            .and_then(|()| std::fs::rename(&tmp, path))
            .map_err(|e| {
                let _ = std::fs::remove_file(&tmp);
                Error::io(path, e)
            })
    }

    /// Seconds since the trial started, by the wall clock.
    pub fn elapsed_s(&self, now_unix_ms: u64) -> f64 {
        now_unix_ms.saturating_sub(self.started_unix_ms) as f64 / 1e3
    }
}

/// Removes the live file; a missing file is fine (the sweep may not have written one).
/// Writes `bytes` to a file of its own at `tmp`: never through a symlink or into a file
/// that was there (its name is predictable, #27); one left by a dead process of the same
/// id is removed first (a symlink is removed, not followed).
fn write_new(tmp: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let open = || {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(tmp)
    };
    let mut f = match open() {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            std::fs::remove_file(tmp)?;
            open()?
        }
        other => other?,
    };
    f.write_all(bytes)
}

pub fn clear(path: &Path) {
    let _ = std::fs::remove_file(path);
}

fn median(v: &mut [f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// The child's observer: keeps a window of recent steps and rewrites the live file.
pub struct LiveWriter {
    path: PathBuf,
    state: LiveTrial,
    recent: VecDeque<(f64, usize, Phases)>,
    last_write: Option<Instant>,
    warned: bool,
}

impl LiveWriter {
    /// Continues the file the sweep wrote for this trial; `None` (and no writing) when
    /// it is unreadable, because a trial must not fail over its progress display.
    pub fn from_env(warmup: usize) -> Option<LiveWriter> {
        let path = PathBuf::from(std::env::var_os(LIVE_ENV)?);
        let mut state = LiveTrial::load(&path).ok()?;
        state.pid = std::process::id();
        state.warmup = warmup;
        Some(LiveWriter {
            path,
            state,
            recent: VecDeque::with_capacity(WINDOW),
            last_write: None,
            warned: false,
        })
    }

    fn write(&mut self) {
        self.state.updated_unix_ms = unix_ms();
        if let Err(e) = self.state.store(&self.path) {
            if !self.warned {
                eprintln!("note: cannot write live progress: {e}");
                self.warned = true;
            }
        }
        self.last_write = Some(Instant::now());
    }
}

impl Observer for LiveWriter {
    fn on_step(&mut self, ev: &StepEvent) {
        let s = &mut self.state;
        s.step = ev.step + 1;
        s.steps = ev.steps;
        s.loss = Some(ev.loss).filter(|l| l.is_finite());
        s.step_s = Some(ev.step_s);
        s.mem_bytes = ev.mem_after.current.clone();
        s.mem_peak_bytes = ev.mem_after.total_peak;
        if ev.step >= s.warmup && ev.step_s > 0.0 {
            if self.recent.len() == WINDOW {
                self.recent.pop_front();
            }
            self.recent.push_back((ev.step_s, ev.samples, ev.phases));
            let mut rates: Vec<f64> = self.recent.iter().map(|(t, n, _)| *n as f64 / t).collect();
            s.samples_per_s = median(&mut rates);
            let n = self.recent.len() as f64;
            let mut mean = Phases::default();
            for name in Phases::NAMES {
                let v = self.recent.iter().map(|(_, _, p)| p.get(name)).sum::<f64>() / n;
                set_phase(&mut mean, name, v);
            }
            s.phases = Some(mean);
            s.step_s = Some(self.recent.iter().map(|(t, _, _)| t).sum::<f64>() / n);
        }
        let due = self.last_write.is_none_or(|t| t.elapsed() >= WRITE_EVERY);
        if due || s.step == s.steps {
            self.write();
        }
    }
}

fn set_phase(p: &mut Phases, name: &str, v: f64) {
    match name {
        "data_wait" => p.data_wait = v,
        "h2d" => p.h2d = v,
        "zero_grad" => p.zero_grad = v,
        "forward" => p.forward = v,
        "backward" => p.backward = v,
        "recompute" => p.recompute = v,
        "comm" => p.comm = v,
        "optimizer" => p.optimizer = v,
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::device::MemSnapshot;

    fn event(step: usize, step_s: f64) -> StepEvent {
        StepEvent {
            step,
            steps: 10,
            loss: 1.5,
            samples: 32,
            step_s,
            phases: Phases {
                forward: step_s * 0.25,
                backward: step_s * 0.5,
                ..Phases::default()
            },
            mem_after: MemSnapshot {
                current: BTreeMap::from([("params".to_string(), 1000)]),
                peak: BTreeMap::new(),
                total_current: 1000,
                total_peak: 4000,
            },
            loss_scale: None,
            skipped: false,
        }
    }

    #[test]
    fn writer_continues_the_sweeps_file_and_skips_warmup() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(LIVE_JSON);
        let start = LiveTrial {
            id: "num_workers=2#abc".into(),
            label: "num_workers=2".into(),
            repeat: 1,
            repeats: 2,
            index: 3,
            total: 7,
            ..LiveTrial::default()
        };
        start.store(&path).unwrap();
        let mut w = LiveWriter {
            path: path.clone(),
            state: LiveTrial::load(&path).unwrap(),
            recent: VecDeque::new(),
            last_write: None,
            warned: false,
        };
        w.state.warmup = 2;
        // Warm-up steps are slow and must not count.
        w.on_step(&event(0, 1.0));
        w.on_step(&event(1, 1.0));
        let early = LiveTrial::load(&path).unwrap();
        assert_eq!(early.step, 1, "the first step is written at once");
        assert_eq!(early.samples_per_s, None);
        for s in 2..10 {
            w.on_step(&event(s, 0.1));
        }
        // The last step is always written, throttle or not.
        let got = LiveTrial::load(&path).unwrap();
        assert_eq!((got.step, got.steps), (10, 10));
        assert_eq!(got.label, "num_workers=2");
        assert_eq!((got.index, got.total), (3, 7));
        assert!((got.samples_per_s.unwrap() - 320.0).abs() < 1e-6);
        let ph = got.phases.unwrap();
        assert!((ph.backward - 0.05).abs() < 1e-9);
        assert!((got.step_s.unwrap() - 0.1).abs() < 1e-9);
        assert_eq!(got.mem_peak_bytes, 4000);
        assert_eq!(got.mem_bytes.get("params"), Some(&1000));
        // Only the file itself is left behind, no temp files.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
