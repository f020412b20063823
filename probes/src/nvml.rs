//! NVIDIA GPU readings through NVML (`nvml-wrapper`).
//!
//! NVML is initialised at most once per process. On a machine without the
//! driver, initialisation fails, [`nvml_notice`] gives one sentence saying so,
//! and [`NvmlSampler`] yields nothing: the rest of the probes carry on.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use nvml_wrapper::bitmasks::device::ThrottleReasons;
use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enum_wrappers::device::{
    Clock, EccCounter, MemoryError, PcieUtilCounter, TemperatureSensor,
};
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, EventSet, Nvml};
use serde::{Deserialize, Serialize};

use crate::error::ProbeError;
use crate::sample::{Sample, Sampler, Source};

/// Metric names written by [`NvmlSampler`].
pub mod metric {
    /// `Gpu`: share of the last sample period a kernel was running, 0..=100.
    pub const UTIL_GPU_PCT: &str = "util_gpu_pct";
    /// `Gpu`: share of the last sample period device memory was read or written.
    pub const UTIL_MEM_PCT: &str = "util_mem_pct";
    pub const MEM_USED_BYTES: &str = "mem_used_bytes";
    pub const MEM_TOTAL_BYTES: &str = "mem_total_bytes";
    pub const POWER_W: &str = "power_w";
    pub const SM_CLOCK_MHZ: &str = "sm_clock_mhz";
    /// The SM clock's maximum, for "running below its clock" (read every tick: a
    /// scripted or administrator change shows).
    pub const SM_CLOCK_MAX_MHZ: &str = "sm_clock_max_mhz";
    /// NVML's total-energy counter since the driver loaded, millijoules (Volta and
    /// newer); absent where the GPU has none, and energy is then integrated from power.
    pub const ENERGY_MJ: &str = "energy_mj";
    /// Enforced power limit, watts: `sw_power_cap` means the draw reached it.
    pub const POWER_LIMIT_W: &str = "power_limit_w";
    pub const TEMP_C: &str = "temp_c";
    pub const PCIE_TX_KBPS: &str = "pcie_tx_kb_per_s";
    pub const PCIE_RX_KBPS: &str = "pcie_rx_kb_per_s";
    /// Raw NVML throttle-reason bits; decode with [`throttle_reason_names`](super::throttle_reason_names).
    pub const THROTTLE_REASONS: &str = "throttle_reasons";
    /// Volatile ECC error counts since the driver loaded (absent where ECC is off or
    /// unsupported): a repeat during which either grows ran on faulty memory.
    pub const ECC_CORRECTED: &str = "ecc_corrected";
    pub const ECC_UNCORRECTED: &str = "ecc_uncorrected";
    /// Critical XID events (driver-reported GPU faults) since the previous sample;
    /// present only where NVML delivers XID events to this process.
    pub const XID_EVENTS: &str = "xid_events";
    /// The newest of those events' XID code (999: unknown).
    pub const XID_LAST: &str = "xid_last";
    /// `GpuProcess`: GPU memory the process holds.
    pub const PROC_USED_BYTES: &str = "used_bytes";
    /// `GpuProcess`: the process's SM utilisation in the latest driver sample, 0..=100.
    pub const PROC_SM_PCT: &str = "sm_pct";
    /// `GpuProcess`: the process's frame-buffer utilisation in the latest driver sample.
    pub const PROC_MEM_PCT: &str = "mem_pct";
}

static NVML: OnceLock<Result<Nvml, String>> = OnceLock::new();

fn nvml() -> Result<&'static Nvml, &'static str> {
    NVML.get_or_init(|| init().map_err(|e| notice_for(&e)))
        .as_ref()
        .map_err(String::as_str)
}

/// NVML by its soname, as the driver installs it; where the loader cannot find it, from
/// the folders of [`LIB_DIRS_ENV`](crate::culibs::LIB_DIRS_ENV), where `tune probe` and
/// the CUDA backend look for the other CUDA libraries (and the tests put their stand-ins).
fn init() -> Result<Nvml, NvmlError> {
    let first = match Nvml::init() {
        Err(e @ NvmlError::LibloadingError(_)) => e,
        other => return other,
    };
    for dir in crate::culibs::extra_dirs() {
        let path = dir.join("libnvidia-ml.so.1");
        if path.is_file() {
            return Nvml::builder().lib_path(path.as_os_str()).init();
        }
    }
    Err(first)
}

/// One sentence for users, naming the likely cause rather than the API error.
fn notice_for(e: &NvmlError) -> String {
    let why = match e {
        NvmlError::LibloadingError(inner) => {
            let detail = inner.to_string();
            if detail.contains("cannot open shared object file") || detail.contains("No such file")
            {
                "libnvidia-ml.so.1 not found (no NVIDIA driver)".to_owned()
            } else {
                format!("libnvidia-ml.so.1 could not be loaded ({detail})")
            }
        }
        NvmlError::DriverNotLoaded => "the NVIDIA kernel driver is not loaded".to_owned(),
        NvmlError::NoPermission => "no permission to talk to the NVIDIA driver".to_owned(),
        NvmlError::LibRmVersionMismatch => {
            "libnvidia-ml and the kernel driver versions differ (reboot or reinstall the driver)"
                .to_owned()
        }
        other => format!("initialisation failed: {other}"),
    };
    format!("NVML unavailable: {why}; GPU metrics absent")
}

/// Why there are no GPU metrics, or `None` when NVML is working.
/// Initialises NVML on first call.
pub fn nvml_notice() -> Option<&'static str> {
    nvml().err()
}

pub fn nvml_available() -> bool {
    nvml().is_ok()
}

/// Static facts about one GPU, for `tune probe` and report environments.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuInfo {
    /// NVML index; NVML orders by PCI bus id, which may differ from CUDA's
    /// default order, so match devices across tools by `uuid`.
    pub index: u32,
    pub name: String,
    pub uuid: String,
    pub memory_total_bytes: u64,
    pub driver_version: String,
    /// e.g. "13.0": the highest CUDA version the driver supports.
    pub cuda_driver_version: String,
    /// CUDA compute capability (major, minor), when NVML says.
    #[serde(default)]
    pub compute_capability: Option<(u32, u32)>,
    /// Peer-to-peer read access from this GPU to each other GPU, by NVML index:
    /// "ok", or NVML's reason it is not.
    #[serde(default)]
    pub peer_access: BTreeMap<u32, String>,
}

/// Every GPU NVML sees. Fails with [`ProbeError::NvmlUnavailable`] (carrying
/// the notice) when NVML is missing.
pub fn gpu_inventory() -> Result<Vec<GpuInfo>, ProbeError> {
    let nvml = nvml().map_err(|n| ProbeError::NvmlUnavailable(n.to_owned()))?;
    let call = |call: &'static str| move |source| ProbeError::Nvml { call, source };
    let driver_version = nvml
        .sys_driver_version()
        .map_err(call("sys_driver_version"))?;
    let cuda = nvml
        .sys_cuda_driver_version()
        .map_err(call("sys_cuda_driver_version"))?;
    let cuda_driver_version = format!(
        "{}.{}",
        nvml_wrapper::cuda_driver_version_major(cuda),
        nvml_wrapper::cuda_driver_version_minor(cuda)
    );
    let count = nvml.device_count().map_err(call("device_count"))?;
    (0..count)
        .map(|index| {
            let d = nvml
                .device_by_index(index)
                .map_err(call("device_by_index"))?;
            let compute_capability = d
                .cuda_compute_capability()
                .ok()
                .and_then(|c| Some((u32::try_from(c.major).ok()?, u32::try_from(c.minor).ok()?)));
            let mut peer_access = BTreeMap::new();
            for other in (0..count).filter(|&o| o != index) {
                let status = nvml.device_by_index(other).and_then(|o| {
                    d.p2p_status(
                        &o,
                        nvml_wrapper::enum_wrappers::device::P2pCapabilitiesIndex::Read,
                    )
                });
                let text = match status {
                    Ok(nvml_wrapper::enum_wrappers::device::P2pStatus::Ok) => "ok".to_string(),
                    Ok(s) => format!("{s:?}"),
                    Err(e) => format!("unknown ({e})"),
                };
                peer_access.insert(other, text);
            }
            Ok(GpuInfo {
                compute_capability,
                peer_access,
                index,
                name: d.name().map_err(call("name"))?,
                uuid: d.uuid().map_err(call("uuid"))?,
                memory_total_bytes: d.memory_info().map_err(call("memory_info"))?.total,
                driver_version: driver_version.clone(),
                cuda_driver_version: cuda_driver_version.clone(),
            })
        })
        .collect()
}

/// Stable names of the throttle reasons set in `mask` (the
/// [`metric::THROTTLE_REASONS`] value). Idle is a reason too: a GPU waiting
/// for work is "throttled" by NVML's definition.
pub fn throttle_reason_names(mask: f64) -> Vec<&'static str> {
    const NAMES: [(ThrottleReasons, &str); 9] = [
        (ThrottleReasons::GPU_IDLE, "gpu_idle"),
        (
            ThrottleReasons::APPLICATIONS_CLOCKS_SETTING,
            "applications_clocks_setting",
        ),
        (ThrottleReasons::SW_POWER_CAP, "sw_power_cap"),
        (ThrottleReasons::HW_SLOWDOWN, "hw_slowdown"),
        (ThrottleReasons::SYNC_BOOST, "sync_boost"),
        (ThrottleReasons::SW_THERMAL_SLOWDOWN, "sw_thermal_slowdown"),
        (ThrottleReasons::HW_THERMAL_SLOWDOWN, "hw_thermal_slowdown"),
        (
            ThrottleReasons::HW_POWER_BRAKE_SLOWDOWN,
            "hw_power_brake_slowdown",
        ),
        (
            ThrottleReasons::DISPLAY_CLOCK_SETTING,
            "display_clock_setting",
        ),
    ];
    if !(mask.is_finite() && mask >= 0.0) {
        return Vec::new();
    }
    let bits = ThrottleReasons::from_bits_truncate(mask as u64);
    NAMES
        .iter()
        .filter(|(flag, _)| bits.contains(*flag))
        .map(|&(_, name)| name)
        .collect()
}

/// Reads every GPU once per tick.
pub struct NvmlSampler {
    gpus: Vec<Gpu>,
    pcie_every: u32,
    pcie_countdown: u32,
    /// Critical XID events of every GPU, where NVML delivers them (Linux, a driver
    /// that supports events): drained without waiting at each tick.
    xid: Option<XidEvents>,
}

/// NVML's event set, moved into the sampler's thread.
struct XidEvents(EventSet<'static>);

// SAFETY: an NVML event set is a handle into the thread-safe NVML library ("all NVML
// calls are thread-safe", NVML API reference); the sampler owns it alone and uses it
// from one thread at a time.
unsafe impl Send for XidEvents {}

impl XidEvents {
    /// One set holding every GPU's critical XID events; None where any registration
    /// fails (NVML then reports none, as on a GPU without event support).
    fn open(nvml: &'static Nvml, gpus: &[Gpu]) -> Option<XidEvents> {
        let mut set = nvml.create_event_set().ok()?;
        for g in gpus {
            set = g
                .device
                .register_events(EventTypes::CRITICAL_XID_ERROR, set)
                .ok()?;
        }
        Some(XidEvents(set))
    }

    /// Events waiting now, per GPU index: (count, newest code). A bounded drain, so a
    /// storm of events cannot hold the tick.
    fn drain(&self) -> BTreeMap<u32, (u64, u64)> {
        let mut seen: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
        for _ in 0..64 {
            let Ok(e) = self.0.wait(0) else { break };
            let Ok(i) = e.device.index() else { continue };
            let code = match e.event_data {
                Some(XidError::Value(v)) => v,
                _ => 999,
            };
            let n = seen.entry(i).or_default();
            n.0 += 1;
            n.1 = code;
        }
        seen
    }
}

struct Gpu {
    index: u32,
    device: Device<'static>,
    /// Newest driver timestamp (µs) of per-process utilisation already seen.
    last_proc_ts: u64,
}

impl Default for NvmlSampler {
    fn default() -> Self {
        NvmlSampler::new()
    }
}

impl NvmlSampler {
    /// Opens every GPU; on a machine without NVML this is an empty sampler.
    pub fn new() -> Self {
        let gpus = match nvml() {
            Ok(nvml) => {
                let count = nvml.device_count().unwrap_or(0);
                (0..count)
                    .filter_map(|index| {
                        nvml.device_by_index(index).ok().map(|device| Gpu {
                            index,
                            device,
                            last_proc_ts: 0,
                        })
                    })
                    .collect()
            }
            Err(_) => Vec::new(),
        };
        let xid = match nvml() {
            Ok(nvml) if !gpus.is_empty() => XidEvents::open(nvml, &gpus),
            _ => None,
        };
        NvmlSampler {
            gpus,
            pcie_every: 10,
            pcie_countdown: 0,
            xid,
        }
    }

    /// Read PCIe throughput every `n` ticks (default 10, i.e. 1 s at 10 Hz).
    /// Each PCIe reading makes the driver count bytes for 20 ms per direction
    /// per GPU, which on a many-GPU box would eat most of a 100 ms tick.
    pub fn pcie_every(mut self, n: u32) -> Self {
        self.pcie_every = n.max(1);
        self.pcie_countdown = 0;
        self
    }

    /// GPUs this sampler reads (0 when NVML is unavailable).
    pub fn gpu_count(&self) -> usize {
        self.gpus.len()
    }
}

/// Records `value` under `name` only when the call succeeded: `NotSupported`
/// and every other error mean "absent", never zero.
fn put<T>(s: &mut Sample, name: &str, r: Result<T, NvmlError>, f: impl FnOnce(T) -> f64) {
    if let Ok(v) = r {
        s.set(name, f(v));
    }
}

impl Gpu {
    fn sample(
        &mut self,
        now_ms: f64,
        with_pcie: bool,
        xid: Option<(u64, u64)>,
        out: &mut Vec<Sample>,
    ) {
        let d = &self.device;
        let mut s = Sample::new(now_ms, Source::Gpu).with_device(self.index);
        for (name, kind) in [
            (metric::ECC_CORRECTED, MemoryError::Corrected),
            (metric::ECC_UNCORRECTED, MemoryError::Uncorrected),
        ] {
            put(
                &mut s,
                name,
                d.total_ecc_errors(kind, EccCounter::Volatile),
                |n| n as f64,
            );
        }
        if let Some((n, code)) = xid {
            s.set(metric::XID_EVENTS, n as f64);
            if n > 0 {
                s.set(metric::XID_LAST, code as f64);
            }
        }
        if let Ok(u) = d.utilization_rates() {
            s.set(metric::UTIL_GPU_PCT, f64::from(u.gpu));
            s.set(metric::UTIL_MEM_PCT, f64::from(u.memory));
        }
        if let Ok(m) = d.memory_info() {
            s.set(metric::MEM_USED_BYTES, m.used as f64);
            s.set(metric::MEM_TOTAL_BYTES, m.total as f64);
        }
        put(&mut s, metric::POWER_W, d.power_usage(), |mw| {
            f64::from(mw) / 1e3
        });
        put(
            &mut s,
            metric::SM_CLOCK_MHZ,
            d.clock_info(Clock::SM),
            f64::from,
        );
        put(
            &mut s,
            metric::SM_CLOCK_MAX_MHZ,
            d.max_clock_info(Clock::SM),
            f64::from,
        );
        put(
            &mut s,
            metric::ENERGY_MJ,
            d.total_energy_consumption(),
            |mj| mj as f64,
        );
        put(
            &mut s,
            metric::POWER_LIMIT_W,
            d.enforced_power_limit(),
            |mw| f64::from(mw) / 1e3,
        );
        put(
            &mut s,
            metric::TEMP_C,
            d.temperature(TemperatureSensor::Gpu),
            f64::from,
        );
        if with_pcie {
            put(
                &mut s,
                metric::PCIE_TX_KBPS,
                d.pcie_throughput(PcieUtilCounter::Send),
                f64::from,
            );
            put(
                &mut s,
                metric::PCIE_RX_KBPS,
                d.pcie_throughput(PcieUtilCounter::Receive),
                f64::from,
            );
        }
        put(
            &mut s,
            metric::THROTTLE_REASONS,
            d.current_throttle_reasons(),
            |r| r.bits() as f64,
        );
        if !s.metrics.is_empty() {
            out.push(s);
        }
        self.sample_processes(now_ms, out);
    }

    fn sample_processes(&mut self, now_ms: f64, out: &mut Vec<Sample>) {
        let mut per_pid: BTreeMap<u32, Sample> = BTreeMap::new();
        let index = self.index;
        let new = |pid: u32| {
            Sample::new(now_ms, Source::GpuProcess)
                .with_device(index)
                .with_pid(pid)
        };
        if let Ok(procs) = self.device.running_compute_processes() {
            for p in procs {
                let s = per_pid.entry(p.pid).or_insert_with(|| new(p.pid));
                if let UsedGpuMemory::Used(bytes) = p.used_gpu_memory {
                    s.set(metric::PROC_USED_BYTES, bytes as f64);
                }
            }
        }
        // Only samples newer than the last seen timestamp, and of those the
        // newest per process; NotFound (no process was busy) leaves them absent.
        if let Ok(stats) = self.device.process_utilization_stats(self.last_proc_ts) {
            let mut newest: BTreeMap<u32, (u64, u32, u32)> = BTreeMap::new();
            for u in stats {
                self.last_proc_ts = self.last_proc_ts.max(u.timestamp);
                let e = newest.entry(u.pid).or_insert((0, 0, 0));
                if u.timestamp >= e.0 {
                    *e = (u.timestamp, u.sm_util, u.mem_util);
                }
            }
            for (pid, (_, sm, mem)) in newest {
                let s = per_pid.entry(pid).or_insert_with(|| new(pid));
                s.set(metric::PROC_SM_PCT, f64::from(sm));
                s.set(metric::PROC_MEM_PCT, f64::from(mem));
            }
        }
        out.extend(per_pid.into_values().filter(|s| !s.metrics.is_empty()));
    }
}

impl Sampler for NvmlSampler {
    fn name(&self) -> &str {
        "nvml"
    }

    fn sample(&mut self, now_ms: f64, out: &mut Vec<Sample>) {
        let with_pcie = self.pcie_countdown == 0;
        self.pcie_countdown = if with_pcie {
            self.pcie_every - 1
        } else {
            self.pcie_countdown - 1
        };
        let xid = self.xid.as_ref().map(XidEvents::drain);
        for gpu in &mut self.gpus {
            let events = xid
                .as_ref()
                .map(|x| x.get(&gpu.index).copied().unwrap_or_default());
            gpu.sample(now_ms, with_pcie, events, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throttle_bits_decode_to_names() {
        let mask = (ThrottleReasons::GPU_IDLE | ThrottleReasons::SW_POWER_CAP).bits() as f64;
        assert_eq!(
            throttle_reason_names(mask),
            vec!["gpu_idle", "sw_power_cap"]
        );
        assert!(throttle_reason_names(0.0).is_empty());
        assert!(throttle_reason_names(f64::NAN).is_empty());
        assert!(throttle_reason_names(-1.0).is_empty());
    }

    #[test]
    fn missing_library_notice_is_one_clear_sentence() {
        let err = NvmlError::DriverNotLoaded;
        assert_eq!(
            notice_for(&err),
            "NVML unavailable: the NVIDIA kernel driver is not loaded; GPU metrics absent"
        );
    }

    // On a machine with NVML the notice is None and the sampler may find GPUs;
    // either way nothing here may panic and the two answers must agree.
    #[test]
    fn without_nvml_sampler_is_empty_and_notice_explains() {
        let mut s = NvmlSampler::new();
        let mut out = Vec::new();
        s.sample(0.0, &mut out);
        match nvml_notice() {
            Some(notice) => {
                assert!(notice.starts_with("NVML unavailable: "), "{notice}");
                assert!(notice.ends_with("GPU metrics absent"), "{notice}");
                assert_eq!(s.gpu_count(), 0);
                assert!(out.is_empty());
                assert!(
                    matches!(gpu_inventory(), Err(ProbeError::NvmlUnavailable(n)) if n == notice)
                );
                assert!(!nvml_available());
            }
            None => assert!(nvml_available()),
        }
    }
}
