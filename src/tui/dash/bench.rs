//! What one dashboard frame costs (`tune bench --what dash`), and the synthetic sweep it
//! is measured on, which the rendering tests share.
//!
//! The sweep is made up (named `synthetic`, with invented step times) because the figure
//! is about drawing, not training: a frame of N trials and D devices costs the same
//! whatever the numbers say. Its report still goes through `report::build`, so the
//! table holds real bootstrap intervals and ratios.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use crossterm::event::{KeyCode, KeyEvent};
use ratatui::backend::TestBackend;
use ratatui::Terminal;

use super::app::{App, Mode, SweepState};
use crate::engine::train::Phases;
use crate::error::{Error, Result};
use crate::knobs::Knobs;
use crate::results::model::{Ratio, Recommendation, Report};
use crate::results::record::{Repeat, Status, TrialRecord};
use crate::results::Finding;
use crate::runner::live::LiveTrial;
use crate::spec::plan;
use crate::spec::Spec;
use crate::tui::widgets::devices::DeviceSeries;

const SPEC: &str = "name = \"synthetic\"\n[workload]\nmodel = \"cnn-small\"\ndataset = \"synthetic\"\n\
                    batch_size = 32\nsteps = 50\nwarmup = 5\ndevice = \"cpu\"\n[knobs]\nbatch_size = [32, 64]\n";

/// Deterministic jitter in [-1, 1).
fn jitter(i: usize, j: usize) -> f64 {
    let h = (i as u64 * 0x9e37_79b9 + j as u64 * 0x85eb_ca6b) % 1000;
    h as f64 / 500.0 - 1.0
}

/// A sweep of `trials` configurations: the baseline first, every `fail_every`-th one
/// crashed (0 = none fail).
pub fn synthetic_report(trials: usize, fail_every: usize) -> Result<Report> {
    let spec = Spec::parse(SPEC, "synthetic.toml")?;
    let base = spec.search.baseline.clone();
    let records: Vec<TrialRecord> = (0..trials)
        .map(|i| {
            let knobs = Knobs {
                batch_size: base.batch_size + i,
                num_workers: i % 3,
                ..base.clone()
            };
            let failed = fail_every > 0 && i > 0 && i % fail_every == 0;
            let step = 0.05 * (1.0 + 0.3 * jitter(i, 0));
            let repeat = Repeat {
                step_times: (0..55)
                    .map(|j| step * (1.0 + 0.02 * jitter(i, j)))
                    .collect(),
                warmup: 5,
                samples_per_step: knobs.batch_size,
                samples_per_s: knobs.batch_size as f64 / step,
                losses: (0..55).map(|j| 2.3 / (1.0 + j as f32 * 0.05)).collect(),
                phases_mean: Phases {
                    data_wait: step * 0.1,
                    forward: step * 0.3,
                    backward: step * 0.45,
                    optimizer: step * 0.1,
                    ..Phases::default()
                },
                peak_bytes: BTreeMap::from([
                    ("activations".to_string(), (20 + i as u64) << 20),
                    ("params".to_string(), 8 << 20),
                ]),
                peak_total_bytes: (28 + i as u64) << 20,
                accuracy: Some(0.9),
                backend: "cpu".into(),
                wall_s: 3.0,
                ..Repeat::default()
            };
            TrialRecord {
                id: plan::trial_id(&knobs, &base),
                label: knobs.diff_label(&base),
                knobs,
                round: 0,
                steps: 50,
                status: if failed { Status::Crashed } else { Status::Ok },
                error: failed.then(|| {
                    "no result: killed by signal 9 (SIGKILL, e.g. the kernel's OOM killer)".into()
                }),
                repeats: if failed {
                    Vec::new()
                } else {
                    vec![repeat.clone(), repeat]
                },
                timeline: Vec::new(),
                nodes: Vec::new(),
                hardware: Vec::new(),
            }
        })
        .collect();
    let mut report = crate::advisor::build_report(&spec, &records);
    report.recommendations = (0..3)
        .map(|i| Recommendation {
            finding: Finding {
                title: format!("synthetic recommendation {i}"),
                evidence: "data wait is 10.0% [9.1, 10.8] of a step".into(),
            },
            expected_gain: Some(Ratio {
                ratio: 1.1,
                lo: 1.05,
                hi: 1.15,
                significant: true,
            }),
            confidence: "medium".into(),
            tune_flag: "--num-workers 2".into(),
            pytorch: "DataLoader(num_workers=2)".into(),
            rule: "data_wait".into(),
            kind: Default::default(),
            change: crate::spec::Change::of(
                ["num_workers"],
                &crate::knobs::Knobs {
                    num_workers: 2,
                    ..Default::default()
                },
            ),
        })
        .collect();
    Ok(report)
}

/// `n` GPUs with a few minutes of history; device 0 carries more memory (the DP shape).
pub fn synthetic_devices(n: usize) -> Vec<DeviceSeries> {
    (0..n)
        .map(|d| DeviceSeries {
            name: format!("gpu{d}"),
            util_pct: (0..600).map(|j| 70.0 + 25.0 * jitter(d, j)).collect(),
            mem_used_bytes: Some(if d == 0 { 60 << 30 } else { 30 << 30 }),
            mem_total_bytes: Some(80 << 30),
            power_w: Some(300.0 + 10.0 * d as f64),
            clock_mhz: Some(1755.0),
        })
        .collect()
}

/// A running trial halfway through, for the current-trial panel.
pub fn synthetic_live(report: &Report) -> LiveTrial {
    let knobs = report
        .trials
        .last()
        .map_or_else(Knobs::default, |t| t.knobs.clone());
    LiveTrial {
        id: "running#00000000".into(),
        label: "num_workers=2 batch_size=64".into(),
        knobs,
        repeat: 1,
        repeats: 2,
        index: report.trials.len() + 1,
        total: report.trials.len() + 2,
        started_unix_ms: 1_000,
        updated_unix_ms: 13_000,
        step: 30,
        steps: 55,
        warmup: 5,
        loss: Some(1.234),
        samples_per_s: Some(640.5),
        phases: Some(Phases {
            data_wait: 0.005,
            forward: 0.015,
            backward: 0.022,
            optimizer: 0.005,
            ..Phases::default()
        }),
        step_s: Some(0.05),
        mem_bytes: BTreeMap::new(),
        mem_peak_bytes: 40 << 20,
        ..LiveTrial::default()
    }
}

/// The whole dashboard over the synthetic sweep, as `tune dash` would hold it mid-sweep.
pub fn synthetic_app(trials: usize, devices: usize) -> Result<App> {
    let report = synthetic_report(trials, 17)?;
    let mut app = App::new("", "reports/synthetic", SweepState::Detached);
    app.live = Some(synthetic_live(&report));
    app.now_unix_ms = 14_000;
    app.devices = synthetic_devices(devices);
    app.set_report(Arc::new(report), Mode::Live, trials, Some(trials + 2));
    Ok(app)
}

/// Frame times in milliseconds.
#[derive(Clone, Debug)]
pub struct FrameTimes {
    pub frames: usize,
    pub median_ms: f64,
    pub p95_ms: f64,
    pub max_ms: f64,
    /// This thread's CPU time per frame over the timed frames (and the key presses
    /// between them): unlike wall time, not inflated when other processes take the CPU.
    /// `None` where `/proc/thread-self/stat` cannot be read.
    pub cpu_ms_mean: Option<f64>,
}

/// CPU time of the calling thread in milliseconds, at clock-tick (10 ms) resolution.
fn thread_cpu_ms() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/thread-self/stat").ok()?;
    let s = tune_probes::host::parse_pid_stat(&text).ok()?;
    Some((s.utime + s.stime) as f64 * 1e3 / tune_probes::host::USER_HZ)
}

/// Times `frames` full redraws (render into the buffer, diff against the previous
/// frame, write the changes to an in-memory backend) of a `width`x`height` terminal. The
/// selection moves between frames so each one has real changes to diff; moving it is not
/// timed.
pub fn measure(
    trials: usize,
    devices: usize,
    width: u16,
    height: u16,
    frames: usize,
) -> Result<FrameTimes> {
    let mut app = synthetic_app(trials, devices)?;
    let mut term = Terminal::new(TestBackend::new(width, height))
        .map_err(|e| Error::Runtime(format!("test backend: {e}")))?;
    let mut times = Vec::with_capacity(frames);
    let mut cpu_start = None;
    for f in 0..frames + 10 {
        if f == 10 {
            cpu_start = thread_cpu_ms();
        }
        // Down through the table, then back up, and so on.
        let key = if (f / trials.max(1)) & 1 == 0 {
            KeyCode::Down
        } else {
            KeyCode::Up
        };
        app.on_key(KeyEvent::from(key));
        let t = Instant::now();
        term.draw(|fr| fr.render_widget(&app, fr.area()))
            .map_err(|e| Error::Runtime(format!("test backend: {e}")))?;
        // The first frames fill caches (layout, allocations); they are not the steady cost.
        if f >= 10 {
            times.push(t.elapsed().as_secs_f64() * 1e3);
        }
    }
    let cpu_ms_mean = cpu_start
        .zip(thread_cpu_ms())
        .map(|(a, b)| (b - a) / frames as f64);
    if times.is_empty() {
        return Err(Error::Invalid("bench: at least one frame is needed".into()));
    }
    times.sort_by(f64::total_cmp);
    let pick = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
    Ok(FrameTimes {
        frames,
        median_ms: pick(0.5),
        p95_ms: pick(0.95),
        max_ms: pick(1.0),
        cpu_ms_mean,
    })
}
