//! One measurement at one instant, and the trait every sampler implements.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Where a sample came from; together with `device` and `pid` it names a series.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// Whole-machine totals (`device` and `pid` are `None`).
    Host,
    /// One logical CPU; `device` is its index in `/proc/stat`.
    Core,
    /// A watched process tree; `pid` is the root of the tree.
    Tree,
    /// One NVIDIA GPU; `device` is its NVML index.
    Gpu,
    /// One process on one GPU; `device` is the NVML index, `pid` the process.
    GpuProcess,
    /// One virtual device of the engine; `device` is its index.
    Engine,
}

impl Source {
    /// Stable lowercase name, the same one serde writes.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Host => "host",
            Source::Core => "core",
            Source::Tree => "tree",
            Source::Gpu => "gpu",
            Source::GpuProcess => "gpu_process",
            Source::Engine => "engine",
        }
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Metrics read from one source at one instant.
///
/// A metric the hardware or kernel could not give is left out of `metrics`,
/// never written as zero: zero is a real reading (an idle GPU), absence is not.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Milliseconds since the timeline's origin (monotonic clock).
    pub t_ms: f64,
    pub source: Source,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    pub metrics: BTreeMap<String, f64>,
}

impl Sample {
    pub fn new(t_ms: f64, source: Source) -> Self {
        Sample {
            t_ms,
            source,
            device: None,
            pid: None,
            metrics: BTreeMap::new(),
        }
    }

    pub fn with_device(mut self, device: u32) -> Self {
        self.device = Some(device);
        self
    }

    pub fn with_pid(mut self, pid: u32) -> Self {
        self.pid = Some(pid);
        self
    }

    /// Adds a metric; non-finite values are dropped so reports never carry NaN.
    pub fn set(&mut self, metric: &str, value: f64) {
        if value.is_finite() {
            self.metrics.insert(metric.to_owned(), value);
        }
    }

    pub fn get(&self, metric: &str) -> Option<f64> {
        self.metrics.get(metric).copied()
    }
}

/// Something that can be read periodically onto the timeline.
///
/// `Send` because the [`Recorder`](crate::Recorder) runs samplers on its own thread.
pub trait Sampler: Send {
    /// Short name used in overhead accounting ("host", "nvml", "engine").
    fn name(&self) -> &str;

    /// Appends the samples for the instant `now_ms` (timeline milliseconds).
    /// Must not panic and must not block for long: it runs once per tick.
    fn sample(&mut self, now_ms: f64, out: &mut Vec<Sample>);
}
