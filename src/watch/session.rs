//! One `tune watch` from start to report: start or attach to the process, sample its
//! tree, the host and the GPUs on one timeline, show them live, and at exit summarise,
//! judge and write the report.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tune_probes::recorder::lock;
use tune_probes::{
    gpu_inventory, nvml_notice, HostSampler, NvmlSampler, Recorder, Sample, Sampler, Timeline,
    DEFAULT_CAPACITY,
};

use super::findings::{findings, Context, Finding};
use super::live;
use super::model::{group, summarize};
use super::report::{
    timeline_rows, Sampling, TargetReport, WatchReport, KIND, MAX_POINTS_PER_SERIES,
};
use super::target::{catch_stop_signals, stop_signals, Ended, Target};
use crate::error::{Error, Result};
use crate::report::model::SCHEMA_VERSION;

pub enum What {
    Pid(u32),
    Command(Vec<String>),
}

pub struct Options {
    pub what: What,
    pub interval: Duration,
    pub json: bool,
    pub out: PathBuf,
}

/// The default report folder: `reports/watch-<unix seconds>-<tune's pid>`.
pub fn default_out() -> PathBuf {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    PathBuf::from("reports").join(format!("watch-{secs}-{}", std::process::id()))
}

/// Fails now, before any command runs, if the report could not be written later.
fn prepare_out(dir: &std::path::Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let probe = dir.join(format!(".tune-watch-probe.{}", std::process::id()));
    std::fs::write(&probe, b"").map_err(|e| Error::io(dir, e))?;
    // Best effort: a leftover empty probe file is harmless.
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// Prints what arrived since the last call: every sample as JSON at once, or one plain
/// line per display period.
struct Printer {
    json: bool,
    every: Duration,
    last_line: Instant,
    cursor_ms: f64,
    pending: Vec<Sample>,
    started: Instant,
}

impl Printer {
    fn pull(&mut self, timeline: &Mutex<Timeline>) {
        let new = lock(timeline).samples_since(self.cursor_ms);
        if let Some(last) = new.last() {
            self.cursor_ms = last.t_ms;
        }
        self.pending.extend(new);
    }

    fn show(&mut self, force: bool) {
        use std::io::Write;
        if self.json {
            if !self.pending.is_empty() {
                let mut out = std::io::stdout().lock();
                // A closed stdout (e.g. `| head`) must not stop the watch.
                let _ = out.write_all(live::json_lines(&self.pending).as_bytes());
                let _ = out.flush();
                self.pending.clear();
            }
            return;
        }
        if force || self.last_line.elapsed() >= self.every {
            if let Some(l) = live::line(self.started.elapsed().as_secs_f64(), &self.pending) {
                eprintln!("{l}");
            }
            self.pending.clear();
            self.last_line = Instant::now();
        }
    }
}

pub fn run(opts: &Options) -> Result<i32> {
    if opts.interval.is_zero() {
        return Err(Error::Invalid(
            "watch: --interval must be at least 1 ms".into(),
        ));
    }
    // Attach first: a dead pid must leave nothing behind. Then make sure the report
    // can be written before a command is started, not after it ran for hours.
    let attached = match &opts.what {
        What::Pid(p) => Some(Target::attach(*p)?),
        What::Command(_) => None,
    };
    prepare_out(&opts.out)?;
    catch_stop_signals()?;
    let mut target = match (attached, &opts.what) {
        (Some(t), _) => t,
        (None, What::Command(c)) => Target::spawn(c, opts.json)?,
        (None, What::Pid(p)) => Target::attach(*p)?,
    };
    let started = Instant::now();
    let host = HostSampler::new().watch(target.pid());
    let members = host.tree_members();
    let samplers: Vec<Box<dyn Sampler>> = vec![Box::new(host), Box::new(NvmlSampler::new())];
    let mut notes = Vec::new();
    if let Some(n) = nvml_notice() {
        eprintln!("note: {n}");
        notes.push(n.to_string());
    }
    let timeline = Arc::new(Mutex::new(Timeline::new(opts.interval, DEFAULT_CAPACITY)));
    let recorder = Recorder::start(samplers, Arc::clone(&timeline))?;
    let what = match target.command() {
        Some(c) => format!("`{}` (pid {})", c.join(" "), target.pid()),
        None => format!("pid {}", target.pid()),
    };
    eprintln!(
        "watch: following {what} and its children every {} ms; report in {}",
        opts.interval.as_millis(),
        opts.out.display()
    );

    let mut printer = Printer {
        json: opts.json,
        every: opts.interval.max(Duration::from_secs(1)),
        last_line: Instant::now(),
        cursor_ms: f64::NEG_INFINITY,
        pending: Vec::new(),
        started,
    };
    let poll = opts.interval.min(Duration::from_millis(50));
    let mut signals_seen = 0;
    let ended = loop {
        if let Some(e) = target.poll()? {
            break e;
        }
        let (n, sig) = stop_signals();
        if n > signals_seen {
            signals_seen = n;
            if !target.is_child() {
                break Ended::Interrupted;
            }
            if n == 1 {
                // Ctrl-C reaches the whole foreground process group, the command
                // included; a SIGTERM sent to tune alone is passed on.
                if sig == libc::SIGTERM {
                    target.signal(libc::SIGTERM);
                }
                eprintln!("watch: waiting for the command to exit (signal again to kill it)");
            } else {
                target.signal(libc::SIGKILL);
            }
        }
        printer.pull(&timeline);
        printer.show(false);
        std::thread::sleep(poll);
    };
    let duration_s = started.elapsed().as_secs_f64();
    recorder.stop()?;
    printer.pull(&timeline);
    printer.show(true);

    let snap = lock(&timeline).snapshot();
    if snap.dropped > 0 {
        notes.push(format!(
            "the timeline held {} samples; the oldest {} were dropped, so summaries cover the later part",
            snap.capacity, snap.dropped
        ));
    }
    let series = group(&snap.samples);
    let ctx = Context {
        tree: members.pids(),
        cores: crate::engine::train::default_threads(),
    };
    let found = findings(&series, &ctx);
    let report = WatchReport {
        schema_version: SCHEMA_VERSION.into(),
        kind: KIND.into(),
        environment: crate::report::build::environment("command".into()),
        gpus: gpu_inventory().unwrap_or_default(),
        target: TargetReport {
            command: target.command().map(<[String]>::to_vec),
            pid: target.pid(),
            exit_code: target.is_child().then(|| ended.exit_code()),
            ended: ended.describe(),
        },
        duration_s,
        sampling: Sampling::of(&snap),
        devices: summarize(&series),
        findings: found,
        notes,
        timeline: timeline_rows(&snap.samples, MAX_POINTS_PER_SERIES),
    };
    let paths = report.write(&opts.out)?;
    print_outcome(&report, &paths);
    Ok(ended.exit_code())
}

fn print_outcome(r: &WatchReport, paths: &[PathBuf]) {
    eprintln!(
        "watch: the process {} after {:.1} s ({} samples over {} ticks)",
        r.target.ended, r.duration_s, r.sampling.samples, r.sampling.ticks
    );
    if r.findings.is_empty() {
        eprintln!("findings: none (no imbalance, starvation, throttling or GPU sharing seen)");
    }
    for Finding {
        title, evidence, ..
    } in &r.findings
    {
        eprintln!("finding: {title}: {evidence}");
    }
    let shown: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    eprintln!("report: {}", shown.join(", "));
}
