//! Device sampling while a sweep runs: one recorder for the whole sweep (CPU and memory
//! of the sweep's process tree, which holds the running trial; every GPU NVML sees),
//! sliced into one stretch per trial for the journal.
//!
//! `TUNE_SAMPLE_MS` sets the interval (default 200 ms; 0 turns sampling off).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tune_probes::recorder::lock;
use tune_probes::{
    gpu_inventory, nvml_available, HostSampler, NvmlSampler, Recorder, Sample, Sampler,
    SharedTimeline, Source, Timeline, TreeMembers, DEFAULT_CAPACITY,
};

use super::hardware;
use crate::results::hardware::RepeatHardware;
use crate::results::record::Repeat;
use crate::spec::Search;

use crate::results::model::{TimelineSample, FOREIGN_CPU_PCT};

pub const SAMPLE_MS_ENV: &str = "TUNE_SAMPLE_MS";
const DEFAULT_MS: u64 = 200;

/// Metrics kept in reports; the rest (per-core load, thread counts, clocks) would
/// swell report.json without feeding a chart or a rule.
const KEPT: &[(Source, &str)] = &[
    (Source::Host, "cpu_util_pct"),
    (Source::Tree, "cpu_pct"),
    (Source::Tree, "rss_bytes"),
    (Source::Gpu, "util_gpu_pct"),
    (Source::Gpu, "mem_used_bytes"),
    (Source::Gpu, "mem_total_bytes"),
    (Source::Gpu, "power_w"),
];

pub struct SweepSampler {
    timeline: SharedTimeline,
    recorder: Option<Recorder>,
    /// Pids seen in the sweep's process tree: a GPU process outside it is foreign.
    members: TreeMembers,
    /// NVML is tune's stand-in (its driver version says so): energy is labelled.
    stand_in: bool,
}

/// Where a repeat started: the timeline's clock and the CPU's steal counter.
pub struct RepeatStart {
    ms: f64,
    cpu: Option<tune_probes::host::CpuTimes>,
}

impl SweepSampler {
    /// Starts sampling, or returns an idle sampler (with a note on stderr) when it
    /// cannot: a sweep without a timeline is still a sweep.
    pub fn start() -> SweepSampler {
        let ms = std::env::var(SAMPLE_MS_ENV)
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(DEFAULT_MS);
        let timeline = Arc::new(Mutex::new(Timeline::new(
            Duration::from_millis(ms.max(1)),
            DEFAULT_CAPACITY,
        )));
        let host = HostSampler::new().watch(std::process::id());
        let members = host.tree_members();
        if ms == 0 {
            return SweepSampler {
                timeline,
                recorder: None,
                members,
                stand_in: false,
            };
        }
        let mut samplers: Vec<Box<dyn Sampler>> = vec![Box::new(host)];
        let mut stand_in = false;
        if nvml_available() {
            samplers.push(Box::new(NvmlSampler::new()));
            stand_in = gpu_inventory().is_ok_and(|g| {
                g.iter()
                    .any(|g| g.driver_version.contains("stand-in") || g.name.contains("not a GPU"))
            });
        }
        let recorder = match Recorder::start(samplers, Arc::clone(&timeline)) {
            Ok(r) => Some(r),
            Err(e) => {
                eprintln!("note: device sampling is off for this sweep: {e}");
                None
            }
        };
        SweepSampler {
            timeline,
            recorder,
            members,
            stand_in,
        }
    }

    /// Marks a repeat's start (call right before it runs).
    pub fn repeat_start(&self) -> RepeatStart {
        RepeatStart {
            ms: self.now_ms(),
            cpu: hardware::cpu_times(),
        }
    }

    /// What the hardware did since `start`; None when sampling is off.
    pub fn repeat_end(
        &self,
        start: RepeatStart,
        run: Option<&Repeat>,
        search: &Search,
    ) -> Option<RepeatHardware> {
        let steal_pct = match (start.cpu, hardware::cpu_times()) {
            (Some(a), Some(b)) => hardware::steal_pct(&a, &b),
            _ => None,
        };
        let samples = if self.recorder.is_some() {
            lock(&self.timeline).samples_since(start.ms)
        } else {
            Vec::new()
        };
        if samples.is_empty() && steal_pct.is_none() {
            return None;
        }
        let foreign: Vec<f64> = convert(&samples, start.ms)
            .into_iter()
            .filter(|s| s.metric == FOREIGN_CPU_PCT)
            .map(|s| s.value)
            .collect();
        let mut ours = self.members.pids();
        ours.insert(std::process::id());
        if let Ok(now) = tune_probes::host::process_tree(std::process::id()) {
            ours.extend(now);
        }
        Some(hardware::assess(&hardware::Inputs {
            samples: &samples,
            ours: &ours,
            foreign_cpu: &foreign,
            steal_pct,
            run,
            search,
            stand_in: self.stand_in,
        }))
    }

    pub fn now_ms(&self) -> f64 {
        lock(&self.timeline).now_ms()
    }

    /// Share of one core the sampling thread used, in percent (its duty cycle), with
    /// the interval; None when sampling is off or has not ticked.
    pub fn cost(&self) -> Option<(f64, Duration)> {
        self.recorder.as_ref()?;
        let tl = lock(&self.timeline);
        Some((tl.overhead().duty_pct(tl.interval())?, tl.interval()))
    }

    /// Samples taken after `start_ms`, with times in seconds from `start_ms`.
    pub fn since(&self, start_ms: f64) -> Vec<TimelineSample> {
        if self.recorder.is_none() {
            return Vec::new();
        }
        let samples = lock(&self.timeline).samples_since(start_ms);
        convert(&samples, start_ms)
    }
}

/// The report's flat form of probe samples: one row per metric, devices named
/// `host` and `gpu:N`.
pub fn convert(samples: &[Sample], start_ms: f64) -> Vec<TimelineSample> {
    let mut out = Vec::new();
    // One tick's host, tree and per-core samples share a time; per core count so that
    // the tree's CPU (100 = one core) can be taken out of the host's (100 = all cores).
    let mut ticks: std::collections::BTreeMap<u64, (Option<f64>, Option<f64>, usize)> =
        std::collections::BTreeMap::new();
    for s in samples {
        let tick = ticks.entry(s.t_ms.to_bits()).or_default();
        match s.source {
            Source::Host => tick.0 = s.metrics.get("cpu_util_pct").copied(),
            Source::Tree => tick.1 = s.metrics.get("cpu_pct").copied(),
            Source::Core => tick.2 += 1,
            _ => {}
        }
    }
    for (t, (host, tree, cores)) in ticks {
        if let (Some(host), Some(tree), true) = (host, tree, cores > 0) {
            out.push(TimelineSample {
                t_s: (f64::from_bits(t) - start_ms) / 1e3,
                device: "host".into(),
                metric: FOREIGN_CPU_PCT.into(),
                value: (host - tree / cores as f64).clamp(0.0, 100.0),
            });
        }
    }
    for s in samples {
        let device = match (s.source, s.device) {
            (Source::Host | Source::Tree, _) => "host".to_string(),
            (Source::Gpu, Some(d)) => format!("gpu:{d}"),
            _ => continue,
        };
        for (metric, value) in &s.metrics {
            if KEPT.iter().any(|(src, m)| *src == s.source && m == metric) {
                out.push(TimelineSample {
                    t_s: (s.t_ms - start_ms) / 1e3,
                    device: device.clone(),
                    metric: metric.clone(),
                    value: *value,
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_chart_metrics_and_names_devices() {
        let mut tree = Sample::new(1500.0, Source::Tree).with_pid(7);
        tree.set("cpu_pct", 180.0);
        tree.set("threads", 9.0);
        let mut gpu = Sample::new(1600.0, Source::Gpu).with_device(1);
        gpu.set("util_gpu_pct", 40.0);
        let mut core = Sample::new(1600.0, Source::Core).with_device(0);
        core.set("cpu_util_pct", 90.0);
        let rows = convert(&[tree, gpu, core], 1000.0);
        assert_eq!(rows.len(), 2, "{rows:?}");
        assert_eq!(rows[0].device, "host");
        assert_eq!(rows[0].metric, "cpu_pct");
        assert!((rows[0].t_s - 0.5).abs() < 1e-12);
        assert_eq!(rows[1].device, "gpu:1");
    }

    #[test]
    fn foreign_load_is_the_host_minus_the_sweeps_tree() {
        // Two cores, the host 75% busy, the sweep's tree using one full core (50% of
        // the host): the other 25% is someone else's.
        let mut host = Sample::new(2000.0, Source::Host);
        host.set("cpu_util_pct", 75.0);
        let mut tree = Sample::new(2000.0, Source::Tree).with_pid(7);
        tree.set("cpu_pct", 100.0);
        let cores: Vec<Sample> = (0..2)
            .map(|n| Sample::new(2000.0, Source::Core).with_device(n))
            .collect();
        let mut all = vec![host, tree];
        all.extend(cores);
        let rows = convert(&all, 1000.0);
        let f: Vec<_> = rows
            .iter()
            .filter(|r| r.metric == FOREIGN_CPU_PCT)
            .collect();
        assert_eq!(f.len(), 1, "{rows:?}");
        assert!((f[0].value - 25.0).abs() < 1e-9, "{f:?}");
        assert!((f[0].t_s - 1.0).abs() < 1e-12);
    }
}
