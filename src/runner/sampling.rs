//! Device sampling while a sweep runs: one recorder for the whole sweep (CPU and memory
//! of the sweep's process tree, which holds the running trial; every GPU NVML sees),
//! sliced into one stretch per trial for the journal.
//!
//! `TUNE_SAMPLE_MS` sets the interval (default 200 ms; 0 turns sampling off).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tune_probes::recorder::lock;
use tune_probes::{
    nvml_available, HostSampler, NvmlSampler, Recorder, Sample, Sampler, SharedTimeline, Source,
    Timeline, DEFAULT_CAPACITY,
};

use crate::results::model::TimelineSample;

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
        if ms == 0 {
            return SweepSampler {
                timeline,
                recorder: None,
            };
        }
        let mut samplers: Vec<Box<dyn Sampler>> =
            vec![Box::new(HostSampler::new().watch(std::process::id()))];
        if nvml_available() {
            samplers.push(Box::new(NvmlSampler::new()));
        }
        let recorder = match Recorder::start(samplers, Arc::clone(&timeline)) {
            Ok(r) => Some(r),
            Err(e) => {
                eprintln!("note: device sampling is off for this sweep: {e}");
                None
            }
        };
        SweepSampler { timeline, recorder }
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
}
