//! The dashboard's data side, run on its own thread: follows a sweep folder and samples
//! the devices, and hands the results to the event loop as ready-made values.
//!
//! A folder is *finished* when its report.json is at least as new as its journal (a
//! resumed sweep appends to the journal and so turns it live again), and *live*
//! otherwise. Live, the journal is re-read whenever it changes (it changes once per
//! trial) and the report rebuilt from it; `live.json` gives the running trial and
//! `timeline.jsonl`, when something writes one, the device samples. Without a timeline
//! the devices are sampled here, which is right because a sweep's files are local.

use std::collections::HashSet;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use tune_probes::{HostSampler, NvmlSampler, Sample, Sampler};

use super::app::Mode;
use crate::error::{Error, Result};
use crate::report::{read_journal, JOURNAL, REPORT_JSON};
use crate::results::model::{Report, TimelineSample};
use crate::runner::live::{LiveTrial, LIVE_JSON};
use crate::spec::plan::{self, halving_rounds};
use crate::spec::{Spec, Strategy};
use crate::tui::widgets::devices::{DeviceHistory, DeviceSeries};

/// A timeline another component may write next to the journal: one `TimelineSample`
/// JSON object per line (the report's `timeline[]` element).
pub const TIMELINE_JSONL: &str = "timeline.jsonl";

/// What the event loop needs after one poll.
#[derive(Clone, Debug, Default)]
pub struct Update {
    /// A new report, when the data changed: the report, how it was obtained, trial runs
    /// journaled and planned.
    pub report: Option<(Arc<Report>, Mode, usize, Option<usize>)>,
    pub live: Option<LiveTrial>,
    pub devices: Vec<DeviceSeries>,
    pub device_note: Option<String>,
    /// Something wrong with the files, in one line.
    pub problem: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    modified: SystemTime,
    len: u64,
}

fn stamp(path: &Path) -> Option<Stamp> {
    let m = std::fs::metadata(path).ok()?;
    Some(Stamp {
        modified: m.modified().ok()?,
        len: m.len(),
    })
}

/// Trial runs a spec plans in all: halving's rounds each count.
pub fn planned_runs(spec: &Spec) -> usize {
    let n = plan::plan(spec).trials.len();
    match spec.search.strategy {
        Strategy::Halving => halving_rounds(n, spec.search.eta).iter().map(|r| r.0).sum(),
        _ => n,
    }
}

/// The sweep folder under `reports/` whose journal or report changed last: the one a
/// user running `tune dash` without arguments most likely means.
pub fn newest_sweep(reports: &Path) -> Result<PathBuf> {
    let entries = std::fs::read_dir(reports).map_err(|e| {
        Error::Invalid(format!(
            "no sweep folder given and {} cannot be read ({e}): pass one, e.g. `tune dash reports/quickstart`",
            reports.display()
        ))
    })?;
    entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter_map(|dir| {
            let newest = [JOURNAL, REPORT_JSON]
                .iter()
                .filter_map(|f| stamp(&dir.join(f)).map(|s| s.modified))
                .max()?;
            Some((newest, dir))
        })
        .max()
        .map(|(_, dir)| dir)
        .ok_or_else(|| {
            Error::Invalid(format!(
                "no sweep under {}: run `tune sweep SPEC` first, or pass a sweep folder",
                reports.display()
            ))
        })
}

/// Samples this machine's devices: GPUs through NVML, the host CPU and memory.
struct Monitor {
    host: HostSampler,
    gpus: NvmlSampler,
    t0: Instant,
    buf: Vec<Sample>,
    note: Option<String>,
}

impl Monitor {
    fn new() -> Monitor {
        let gpus = NvmlSampler::new();
        let note = (gpus.gpu_count() == 0).then(|| match tune_probes::nvml_notice() {
            Some(n) => format!("no GPU readings: {n}"),
            None => "no GPU readings: NVML sees no GPU".into(),
        });
        Monitor {
            host: HostSampler::new(),
            gpus,
            t0: Instant::now(),
            buf: Vec::new(),
            note,
        }
    }

    fn sample(&mut self, history: &mut DeviceHistory) {
        let now_ms = self.t0.elapsed().as_secs_f64() * 1e3;
        self.buf.clear();
        self.gpus.sample(now_ms, &mut self.buf);
        self.host.sample(now_ms, &mut self.buf);
        for s in &self.buf {
            history.push_sample(s);
        }
        if let Some((used, total)) = host_memory() {
            history.push("cpu", "mem_used_bytes", used as f64);
            history.push("cpu", "mem_total_bytes", total as f64);
        }
    }
}

/// Used and total host memory from `/proc/meminfo` (used = total - available).
fn host_memory() -> Option<(u64, u64)> {
    parse_meminfo(&std::fs::read_to_string("/proc/meminfo").ok()?)
}

fn parse_meminfo(text: &str) -> Option<(u64, u64)> {
    let field = |name: &str| -> Option<u64> {
        let line = text.lines().find(|l| l.starts_with(name))?;
        let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kb * 1024)
    };
    let total = field("MemTotal:")?;
    let avail = field("MemAvailable:")?;
    Some((total.saturating_sub(avail), total))
}

/// New complete lines of an append-only file, from where the last read stopped.
#[derive(Debug, Default)]
struct Tail {
    offset: u64,
    pending: Vec<u8>,
}

impl Tail {
    fn read_lines(&mut self, path: &Path) -> Vec<String> {
        let Ok(mut f) = File::open(path) else {
            return Vec::new();
        };
        let len = f.metadata().map_or(0, |m| m.len());
        if len < self.offset {
            // Replaced or truncated: start over.
            *self = Tail::default();
        }
        let mut buf = Vec::new();
        if f.seek(SeekFrom::Start(self.offset)).is_err() || f.read_to_end(&mut buf).is_err() {
            return Vec::new();
        }
        self.offset += buf.len() as u64;
        self.pending.extend_from_slice(&buf);
        let Some(end) = self.pending.iter().rposition(|&b| b == b'\n') else {
            return Vec::new();
        };
        let complete: Vec<u8> = self.pending.drain(..=end).collect();
        String::from_utf8_lossy(&complete)
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(str::to_string)
            .collect()
    }
}

pub struct Follower {
    dir: PathBuf,
    /// Given a report.json file rather than a folder: show it, follow nothing else.
    report_file: Option<PathBuf>,
    mode: Option<Mode>,
    journal_seen: Option<Stamp>,
    report_seen: Option<Stamp>,
    /// (id, round) of every journaled trial: a live.json naming one of them is stale.
    journaled: HashSet<(String, usize)>,
    live_seen: Option<Stamp>,
    live: Option<LiveTrial>,
    timeline: Tail,
    timeline_bad: usize,
    history: DeviceHistory,
    /// Devices from the report's own timeline (finished mode).
    report_devices: Vec<DeviceSeries>,
    monitor: Option<Monitor>,
    problem: Option<String>,
    /// An in-process sweep is running: its journal is the truth, whatever report.json
    /// an earlier run left.
    sweep_running: bool,
}

impl Follower {
    /// Opens a sweep folder or a report.json and reads it once; whatever is wrong with
    /// the input is reported here, before any terminal is touched. `sweep_running`: this
    /// process is running the sweep (see `set_sweep_running`).
    pub fn open(input: &Path, sweep_running: bool) -> Result<(Follower, Update)> {
        let (dir, report_file) = if input.is_dir() {
            (input.to_path_buf(), None)
        } else if input.is_file() {
            let dir = match input.parent() {
                Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
                _ => PathBuf::from("."),
            };
            (dir, Some(input.to_path_buf()))
        } else {
            return Err(Error::Invalid(format!(
                "{}: no such sweep folder or report.json",
                input.display()
            )));
        };
        if report_file.is_none() && !dir.join(JOURNAL).exists() && !dir.join(REPORT_JSON).exists() {
            return Err(Error::Invalid(format!(
                "{}: neither {REPORT_JSON} nor {JOURNAL} here; give a sweep folder (reports/<name>) or a report.json",
                dir.display()
            )));
        }
        let mut f = Follower {
            dir,
            report_file,
            mode: None,
            journal_seen: None,
            report_seen: None,
            journaled: HashSet::new(),
            live_seen: None,
            live: None,
            timeline: Tail::default(),
            timeline_bad: 0,
            history: DeviceHistory::new(),
            report_devices: Vec::new(),
            monitor: None,
            problem: None,
            sweep_running,
        };
        let first = f.poll_strict()?;
        Ok((f, first))
    }

    pub fn set_sweep_running(&mut self, running: bool) {
        self.sweep_running = running;
    }

    /// One poll; errors become the update's `problem` and the last good data stays.
    pub fn poll(&mut self) -> Update {
        match self.poll_strict() {
            Ok(u) => u,
            Err(e) => {
                self.problem = Some(e.to_string());
                self.current(None)
            }
        }
    }

    /// Whether the devices shown are this machine's, sampled now: while the sweep is
    /// live, and after it finished in front of us when its report has no timeline.
    fn sampling_here(&self) -> bool {
        self.mode == Some(Mode::Live)
            || (self.report_devices.is_empty() && !self.history.is_empty())
    }

    fn current(&self, report: Option<(Arc<Report>, Mode, usize, Option<usize>)>) -> Update {
        let no_timeline =
            "the report has no device timeline (probes did not record during the sweep)";
        let (devices, device_note) = if !self.sampling_here() {
            (
                self.report_devices.clone(),
                self.report_devices
                    .is_empty()
                    .then(|| no_timeline.to_string()),
            )
        } else if self.mode == Some(Mode::Finished) {
            (
                self.history.devices(),
                Some(format!("{no_timeline}; showing this machine now")),
            )
        } else {
            (
                self.history.devices(),
                self.monitor.as_ref().and_then(|m| m.note.clone()),
            )
        };
        Update {
            report,
            live: self.live.clone(),
            devices,
            device_note,
            problem: self.problem.clone(),
        }
    }

    fn poll_strict(&mut self) -> Result<Update> {
        let report_path = self
            .report_file
            .clone()
            .unwrap_or_else(|| self.dir.join(REPORT_JSON));
        let journal_path = self.dir.join(JOURNAL);
        let rs = stamp(&report_path);
        let js = if self.report_file.is_some() {
            None
        } else {
            stamp(&journal_path)
        };
        // A trial starting after the report was written means a resumed sweep.
        let live_newer =
            |r: Stamp| stamp(&self.dir.join(LIVE_JSON)).is_some_and(|l| l.modified > r.modified);
        let finished = match (rs, js) {
            _ if self.sweep_running => false,
            (Some(r), Some(j)) => r.modified >= j.modified && !live_newer(r),
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => {
                return Err(Error::Invalid(format!(
                    "{}: the sweep's {JOURNAL} and {REPORT_JSON} are gone",
                    self.dir.display()
                )))
            }
        };
        let mut report = None;
        if finished {
            if self.mode != Some(Mode::Finished) || self.report_seen != rs {
                let r = Report::load(&report_path)?;
                self.report_devices = timeline_devices(&r.timeline);
                let runs = r.trials.len();
                report = Some((Arc::new(r), Mode::Finished, runs, Some(runs)));
                self.report_seen = rs;
                self.mode = Some(Mode::Finished);
            }
            self.live = None;
            if self.sampling_here() {
                self.follow_devices();
            }
        } else {
            if self.mode != Some(Mode::Live) || self.journal_seen != js {
                let (spec, records) = read_journal(&journal_path)?;
                self.journaled = records.iter().map(|r| (r.id.clone(), r.round)).collect();
                let r = crate::advisor::build_report(&spec, &records);
                report = Some((
                    Arc::new(r),
                    Mode::Live,
                    records.len(),
                    Some(planned_runs(&spec)),
                ));
                self.journal_seen = js;
                self.mode = Some(Mode::Live);
            }
            self.follow_live();
            self.follow_devices();
        }
        self.problem = None;
        if self.timeline_bad > 0 {
            self.problem = Some(format!(
                "{TIMELINE_JSONL}: {} unreadable line(s) skipped",
                self.timeline_bad
            ));
        }
        Ok(self.current(report))
    }

    fn follow_live(&mut self) {
        let path = self.dir.join(LIVE_JSON);
        let s = stamp(&path);
        if s.is_none() {
            self.live = None;
            self.live_seen = None;
            return;
        }
        if s != self.live_seen {
            self.live_seen = s;
            // A half-visible file cannot happen (it is renamed into place), so a read
            // error means it just went away: no trial.
            self.live = LiveTrial::load(&path).ok();
        }
        let stale = self.live.as_ref().is_some_and(|l| {
            self.journaled.contains(&(l.id.clone(), l.round)) || !process_alive(l.pid)
        });
        if stale {
            self.live = None;
        }
    }

    fn follow_devices(&mut self) {
        let path = self.dir.join(TIMELINE_JSONL);
        if path.exists() {
            self.monitor = None;
            for line in self.timeline.read_lines(&path) {
                match serde_json::from_str::<TimelineSample>(&line) {
                    Ok(s) => self.history.push(&s.device, &s.metric, s.value),
                    Err(_) => self.timeline_bad += 1,
                }
            }
            return;
        }
        self.monitor
            .get_or_insert_with(Monitor::new)
            .sample(&mut self.history);
    }
}

/// False only when the process is known to be gone: /proc exists and lacks it.
fn process_alive(pid: u32) -> bool {
    let proc = Path::new("/proc");
    pid == 0 || !proc.join("self").exists() || proc.join(pid.to_string()).exists()
}

fn timeline_devices(samples: &[TimelineSample]) -> Vec<DeviceSeries> {
    let mut sorted: Vec<&TimelineSample> = samples.iter().collect();
    sorted.sort_by(|a, b| a.t_s.total_cmp(&b.t_s));
    let mut h = DeviceHistory::new();
    for s in sorted {
        h.push(&s.device, &s.metric, s.value);
    }
    h.devices()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::knobs::Knobs;
    use crate::results::record::{Record, Status, TrialRecord};
    use crate::runner::journal::Journal;

    const SPEC: &str = "name = \"follow\"\n[workload]\nmodel = \"mlp\"\ndataset = \"synthetic\"\n\
                        [knobs]\nbatch_size = [16, 32]\n";

    fn record(spec: &Spec, batch: usize, status: Status) -> TrialRecord {
        let base = &spec.search.baseline;
        let knobs = Knobs {
            batch_size: batch,
            ..base.clone()
        };
        TrialRecord {
            id: plan::trial_id(&knobs, base),
            label: knobs.diff_label(base),
            knobs,
            round: 0,
            steps: 0,
            status,
            error: (status != Status::Ok).then(|| "boom".to_string()),
            repeats: Vec::new(),
            timeline: Vec::new(),
            nodes: Vec::new(),
            hardware: Vec::new(),
        }
    }

    fn report_of(u: &Update) -> (&Report, Mode, usize, Option<usize>) {
        let (r, m, d, p) = u.report.as_ref().expect("a report in this update");
        (r, *m, *d, *p)
    }

    #[test]
    fn follows_a_growing_journal_the_live_trial_and_then_the_report() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let spec = Spec::parse(SPEC, d.join("s.toml")).unwrap();
        let mut j = Journal::open(d.join(JOURNAL)).unwrap();
        j.append(&Record::Header {
            tune_version: "test".into(),
            spec: spec.clone(),
        })
        .unwrap();
        let (mut f, first) = Follower::open(d, false).unwrap();
        let (r, mode, done, planned) = report_of(&first);
        assert_eq!(
            (r.trials.len(), mode, done, planned),
            (0, Mode::Live, 0, Some(2))
        );
        assert!(first.live.is_none());
        // Nothing changed: no new report to redraw.
        assert!(f.poll().report.is_none());

        // A trial starts (the sweep writes live.json; this process stands in for it).
        let running = record(&spec, 16, Status::Failed);
        LiveTrial {
            id: running.id.clone(),
            label: running.label.clone(),
            pid: std::process::id(),
            ..LiveTrial::default()
        }
        .store(&d.join(LIVE_JSON))
        .unwrap();
        let u = f.poll();
        assert_eq!(u.live.as_ref().map(|l| l.label.as_str()), Some("baseline"));
        // The local devices: at least the host's memory from the first sample on.
        assert!(u
            .devices
            .iter()
            .any(|d| d.name == "cpu" && d.mem_total_bytes.is_some()));

        // It is journaled: the table grows, the live file no longer counts.
        j.append(&Record::Trial(running)).unwrap();
        let u = f.poll();
        let (r, mode, done, _) = report_of(&u);
        assert_eq!((r.trials.len(), mode, done), (1, Mode::Live, 1));
        assert_eq!(r.trials[0].status, Status::Failed);
        assert!(u.live.is_none(), "a journaled trial is not running");

        // The sweep finishes: report.json is at least as new as the journal.
        std::thread::sleep(std::time::Duration::from_millis(20));
        let mut done_report = crate::advisor::build_report(&spec, &[record(&spec, 16, Status::Ok)]);
        done_report.notes.push("final".into());
        crate::fsio::atomic_write(
            d.join(REPORT_JSON),
            done_report.to_json().unwrap().as_bytes(),
        )
        .unwrap();
        let u = f.poll();
        let (r, mode, _, _) = report_of(&u);
        assert_eq!(mode, Mode::Finished);
        assert_eq!(r.notes.last().map(String::as_str), Some("final"));
        assert!(u.live.is_none());
        // Watched live, so the devices stay on this machine, and say so.
        assert!(u.devices.iter().any(|d| d.name == "cpu"));
        assert!(u
            .device_note
            .unwrap()
            .ends_with("; showing this machine now"));
        // Opened finished, nothing here is the sweep's: no devices, and why.
        let (_, fresh) = Follower::open(d, false).unwrap();
        assert_eq!(report_of(&fresh).1, Mode::Finished);
        assert!(fresh.devices.is_empty());
        assert_eq!(
            fresh.device_note.as_deref(),
            Some("the report has no device timeline (probes did not record during the sweep)")
        );

        // Resumed: a trial starts after the report was written, so it is live again.
        std::thread::sleep(std::time::Duration::from_millis(20));
        LiveTrial {
            id: "other#1".into(),
            pid: std::process::id(),
            ..LiveTrial::default()
        }
        .store(&d.join(LIVE_JSON))
        .unwrap();
        let u = f.poll();
        assert_eq!(report_of(&u).1, Mode::Live);
        assert_eq!(u.live.map(|l| l.id), Some("other#1".to_string()));
    }

    #[test]
    fn a_finished_report_shows_its_own_device_timeline() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let spec = Spec::parse(SPEC, d.join("s.toml")).unwrap();
        let mut r = crate::advisor::build_report(&spec, &[]);
        for (t, dev, util) in [
            (0.2, "gpu1", 50.0),
            (0.1, "gpu0", 90.0),
            (0.2, "gpu0", 95.0),
        ] {
            r.timeline.push(TimelineSample {
                t_s: t,
                device: dev.into(),
                metric: "util_gpu_pct".into(),
                value: util,
            });
        }
        crate::fsio::atomic_write(d.join(REPORT_JSON), r.to_json().unwrap().as_bytes()).unwrap();
        let (_, u) = Follower::open(&d.join(REPORT_JSON), false).unwrap();
        assert_eq!(report_of(&u).1, Mode::Finished);
        let names: Vec<&str> = u.devices.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["gpu0", "gpu1"]);
        assert_eq!(u.devices[0].util_pct, vec![90.0, 95.0], "in time order");
        assert!(u.device_note.is_none());
    }

    #[test]
    fn a_live_file_of_a_dead_process_is_not_a_running_trial() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let spec = Spec::parse(SPEC, d.join("s.toml")).unwrap();
        Journal::open(d.join(JOURNAL))
            .unwrap()
            .append(&Record::Header {
                tune_version: "test".into(),
                spec,
            })
            .unwrap();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        LiveTrial {
            id: "x#1".into(),
            pid,
            ..LiveTrial::default()
        }
        .store(&d.join(LIVE_JSON))
        .unwrap();
        let (_, u) = Follower::open(d, false).unwrap();
        assert!(u.live.is_none());
    }

    #[test]
    fn a_timeline_file_replaces_local_sampling() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let spec = Spec::parse(SPEC, d.join("s.toml")).unwrap();
        Journal::open(d.join(JOURNAL))
            .unwrap()
            .append(&Record::Header {
                tune_version: "test".into(),
                spec,
            })
            .unwrap();
        let lines = [
            r#"{"t_s":0.1,"device":"dev0","metric":"busy_pct","value":90}"#,
            r#"{"t_s":0.1,"device":"dev1","metric":"busy_pct","value":40}"#,
            r#"{"t_s":0.1,"device":"dev1","metric":"bytes","value":1024}"#,
            "not json",
        ];
        std::fs::write(d.join(TIMELINE_JSONL), lines.join("\n") + "\n").unwrap();
        let (_, u) = Follower::open(d, false).unwrap();
        let names: Vec<&str> = u.devices.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(
            names,
            ["dev0", "dev1"],
            "no local cpu device next to a timeline"
        );
        assert_eq!(u.devices[1].mem_used_bytes, Some(1024));
        assert!(u.problem.unwrap().contains("1 unreadable line(s)"));
        assert!(u.device_note.is_none());
    }

    #[test]
    fn bad_inputs_say_what_is_wrong() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let e = Follower::open(&d.join("nope"), false).err().unwrap();
        assert!(
            e.is_bad_input() && e.to_string().contains("no such sweep folder"),
            "{e}"
        );
        let e = Follower::open(d, false).err().unwrap();
        assert!(
            e.to_string()
                .contains("neither report.json nor journal.jsonl"),
            "{e}"
        );
        std::fs::write(d.join(REPORT_JSON), "{\"schema_version\": \"9.0\"}").unwrap();
        let e = Follower::open(d, false).err().unwrap();
        assert!(
            e.is_bad_input() && e.to_string().contains("newer than this tune reads"),
            "{e}"
        );
        std::fs::write(d.join(JOURNAL), "{\"type\":\"trial\"}\n").unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(d.join(JOURNAL), "{\"type\":\"trial\"}\n{}\n").unwrap();
        let e = Follower::open(d, false).err().unwrap();
        assert!(e.is_bad_input() && e.to_string().contains("line 1"), "{e}");
        let e = newest_sweep(&d.join("nothing")).unwrap_err();
        assert!(e.to_string().contains("cannot be read"), "{e}");
        let e = newest_sweep(d).unwrap_err();
        assert!(e.to_string().contains("no sweep under"), "{e}");
    }

    #[test]
    fn newest_sweep_picks_the_folder_that_changed_last() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["old", "new"] {
            let p = dir.path().join(name);
            std::fs::create_dir(&p).unwrap();
            std::fs::write(p.join(JOURNAL), "").unwrap();
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        std::fs::create_dir(dir.path().join("unrelated")).unwrap();
        assert_eq!(newest_sweep(dir.path()).unwrap(), dir.path().join("new"));
    }

    #[test]
    fn meminfo_gives_used_and_total() {
        let text = "MemTotal:       16318012 kB\nMemFree:  1000 kB\nMemAvailable:   12000000 kB\n";
        assert_eq!(
            parse_meminfo(text),
            Some(((16318012 - 12000000) * 1024, 16318012 * 1024))
        );
        assert_eq!(parse_meminfo("MemTotal: 5 kB\n"), None);
    }

    #[test]
    fn tail_returns_only_complete_new_lines() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.jsonl");
        let mut t = Tail::default();
        assert!(t.read_lines(&p).is_empty(), "a missing file is no lines");
        std::fs::write(&p, "a\nb\nc").unwrap();
        assert_eq!(t.read_lines(&p), ["a", "b"]);
        std::fs::write(&p, "a\nb\nc-done\nd\n").unwrap();
        assert_eq!(t.read_lines(&p), ["c-done", "d"]);
        assert!(t.read_lines(&p).is_empty());
        std::fs::write(&p, "x\n").unwrap();
        assert_eq!(t.read_lines(&p), ["x"], "a shorter file starts over");
    }
}
