//! Per-device series grouped from the timeline: what a live view, a dashboard widget or
//! a finding reads. No formatting and no thresholds here.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tune_probes::engine::metric as engine;
use tune_probes::host::metric as host;
use tune_probes::nvml::metric as gpu;
use tune_probes::series::stats;
use tune_probes::{Sample, SeriesStats, Source};

/// Names one device-like thing on the timeline: the host, a core, the watched process
/// tree, a GPU, one process on a GPU, or an engine device.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct DeviceId {
    pub source: Source,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
}

impl DeviceId {
    pub fn of(s: &Sample) -> DeviceId {
        DeviceId {
            source: s.source,
            index: s.device,
            pid: s.pid,
        }
    }

    /// Short stable name: `host`, `cpu3`, `proc 1234`, `gpu0`, `gpu0 pid 1234`, `engine1`.
    pub fn label(&self) -> String {
        let i = self.index.map_or(String::new(), |i| i.to_string());
        let p = self.pid.map_or(String::new(), |p| p.to_string());
        match self.source {
            Source::Host => "host".into(),
            Source::Core => format!("cpu{i}"),
            Source::Tree => format!("proc {p}"),
            Source::Gpu => format!("gpu{i}"),
            Source::GpuProcess => format!("gpu{i} pid {p}"),
            Source::Engine => format!("engine{i}"),
        }
    }

    /// GPUs and engine devices: the accelerators that findings compare with each other.
    pub fn is_accelerator(&self) -> bool {
        matches!(self.source, Source::Gpu | Source::Engine)
    }

    /// The metric that says how busy this is, 0..=100 (100 = fully busy; for a process
    /// tree, 100 = one core).
    pub fn util_metric(&self) -> &'static str {
        match self.source {
            Source::Host | Source::Core => host::CPU_UTIL_PCT,
            Source::Tree => host::TREE_CPU_PCT,
            Source::Gpu => gpu::UTIL_GPU_PCT,
            Source::GpuProcess => gpu::PROC_SM_PCT,
            Source::Engine => engine::BUSY_PCT,
        }
    }

    /// The metric holding bytes in use, where this kind of device has one.
    pub fn mem_metric(&self) -> Option<&'static str> {
        match self.source {
            Source::Host | Source::Core => None,
            Source::Tree => Some(host::TREE_RSS_BYTES),
            Source::Gpu => Some(gpu::MEM_USED_BYTES),
            Source::GpuProcess => Some(gpu::PROC_USED_BYTES),
            Source::Engine => Some(engine::BYTES),
        }
    }
}

/// Every metric of one device over time, oldest first.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceSeries {
    pub id: DeviceId,
    pub metrics: BTreeMap<String, Vec<(f64, f64)>>,
}

impl DeviceSeries {
    pub fn label(&self) -> String {
        self.id.label()
    }

    /// `(t_ms, value)` points of one metric; empty when the device never reported it.
    pub fn points(&self, metric: &str) -> &[(f64, f64)] {
        self.metrics.get(metric).map_or(&[], Vec::as_slice)
    }

    pub fn values(&self, metric: &str) -> Vec<f64> {
        self.points(metric).iter().map(|&(_, v)| v).collect()
    }

    pub fn latest(&self, metric: &str) -> Option<f64> {
        self.points(metric).last().map(|&(_, v)| v)
    }

    /// Summary of one metric, `None` when it was never reported (absent is not zero).
    pub fn stats(&self, metric: &str) -> Option<SeriesStats> {
        stats(self.values(metric))
    }

    pub fn util(&self) -> Option<SeriesStats> {
        self.stats(self.id.util_metric())
    }

    pub fn mem(&self) -> Option<SeriesStats> {
        self.id.mem_metric().and_then(|m| self.stats(m))
    }

    /// Device memory capacity, where the device reports one (GPUs).
    pub fn mem_total(&self) -> Option<f64> {
        match self.id.source {
            Source::Gpu => self.latest(gpu::MEM_TOTAL_BYTES),
            _ => None,
        }
    }
}

/// Groups samples into one series per device, sorted by device (host, cores, process
/// tree, GPUs, GPU processes, engine devices).
pub fn group<'a>(samples: impl IntoIterator<Item = &'a Sample>) -> Vec<DeviceSeries> {
    let mut by: BTreeMap<DeviceId, BTreeMap<String, Vec<(f64, f64)>>> = BTreeMap::new();
    for s in samples {
        let m = by.entry(DeviceId::of(s)).or_default();
        for (name, &v) in &s.metrics {
            m.entry(name.clone()).or_default().push((s.t_ms, v));
        }
    }
    by.into_iter()
        .map(|(id, metrics)| DeviceSeries { id, metrics })
        .collect()
}

/// One device's summary as reports store it: every metric's count, mean, min, max, p50.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeviceMetrics {
    /// The label (`gpu0`, `proc 1234`, ...).
    pub device: String,
    #[serde(flatten)]
    pub id: DeviceId,
    pub metrics: BTreeMap<String, SeriesStats>,
}

pub fn summarize(series: &[DeviceSeries]) -> Vec<DeviceMetrics> {
    series
        .iter()
        .map(|d| DeviceMetrics {
            device: d.label(),
            id: d.id.clone(),
            metrics: d
                .metrics
                .iter()
                .filter_map(|(name, pts)| {
                    stats(pts.iter().map(|&(_, v)| v)).map(|s| (name.clone(), s))
                })
                .collect(),
        })
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A sample with the given metrics, for hand-made series in tests.
    pub(crate) fn sample(
        t: f64,
        source: Source,
        index: Option<u32>,
        pid: Option<u32>,
        metrics: &[(&str, f64)],
    ) -> Sample {
        let mut s = Sample::new(t, source);
        s.device = index;
        s.pid = pid;
        for (k, v) in metrics {
            s.set(k, *v);
        }
        s
    }

    #[test]
    fn groups_by_device_in_a_stable_order() {
        let samples = vec![
            sample(0.0, Source::Gpu, Some(1), None, &[("util_gpu_pct", 10.0)]),
            sample(0.0, Source::Gpu, Some(0), None, &[("util_gpu_pct", 90.0)]),
            sample(0.0, Source::Host, None, None, &[("cpu_util_pct", 50.0)]),
            sample(100.0, Source::Gpu, Some(0), None, &[("util_gpu_pct", 70.0)]),
            sample(
                100.0,
                Source::GpuProcess,
                Some(0),
                Some(7),
                &[("used_bytes", 1e9)],
            ),
        ];
        let g = group(&samples);
        let labels: Vec<String> = g.iter().map(DeviceSeries::label).collect();
        assert_eq!(labels, ["host", "gpu0", "gpu1", "gpu0 pid 7"]);
        assert_eq!(g[1].points("util_gpu_pct"), &[(0.0, 90.0), (100.0, 70.0)]);
        assert_eq!(g[1].latest("util_gpu_pct"), Some(70.0));
        assert_eq!(g[1].util().unwrap().mean, 80.0);
        // A metric never reported is absent, not zero.
        assert!(g[1].mem().is_none());
        assert!(g[1].latest("power_w").is_none());
        assert!(g[1].id.is_accelerator() && !g[0].id.is_accelerator());
    }

    #[test]
    fn summaries_carry_every_metric() {
        let samples = vec![
            sample(
                0.0,
                Source::Engine,
                Some(0),
                None,
                &[("busy_pct", 20.0), ("bytes", 100.0)],
            ),
            sample(
                100.0,
                Source::Engine,
                Some(0),
                None,
                &[("busy_pct", 40.0), ("bytes", 300.0)],
            ),
        ];
        let s = summarize(&group(&samples));
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].device, "engine0");
        assert_eq!(s[0].metrics["busy_pct"].mean, 30.0);
        assert_eq!(s[0].metrics["bytes"].max, 300.0);
        let json = serde_json::to_value(&s[0]).unwrap();
        assert_eq!(json["source"], "engine");
        assert_eq!(json["index"], 0);
    }
}
