//! `tune-probes`: the measurement layer of `tune`.
//!
//! It owns the samplers (NVML GPUs, host CPU and process trees from `/proc`,
//! and the engine's virtual devices via shared atomic counters), the one
//! timeline they all write to (a bounded ring at a fixed interval, default
//! 100 ms), the background [`Recorder`] that drives them and measures its own
//! cost, and the serialisable [`TimelineSnapshot`] that reports store.
//!
//! It does not depend on the engine: the engine updates
//! [`DeviceCounters`] and this crate turns them into rates.

pub mod cpu;
pub mod culibs;
pub mod engine;
pub mod error;
pub mod host;
pub mod nvml;
pub mod overhead;
pub mod recorder;
pub mod sample;
pub mod series;
pub mod timeline;

pub use cpu::{cpu_info, cpu_model, CpuInfo};
pub use culibs::{probe_cuda_libs, LibStatus};
pub use engine::{DeviceCounters, DeviceReading, EngineSampler};
pub use error::ProbeError;
pub use host::{HostSampler, TreeMembers};
pub use nvml::{
    gpu_inventory, nvml_available, nvml_notice, throttle_reason_names, GpuInfo, NvmlSampler,
};
pub use overhead::{Cost, Overhead};
pub use recorder::{Recorder, SharedTimeline};
pub use sample::{Sample, Sampler, Source};
pub use series::{SeriesKey, SeriesStats, SeriesSummary};
pub use timeline::{Timeline, TimelineSnapshot, DEFAULT_CAPACITY, DEFAULT_INTERVAL};
