//! What the samples say about a run, computed from the per-device series alone:
//!
//! - **imbalance**: one accelerator's memory or utilisation well above the others'
//!   (PyTorch `DataParallel` gathers outputs, computes the loss and reduces gradients on
//!   device 0, so device 0 stands out);
//! - **starvation**: low mean utilisation with a saw-tooth (bursts of work between
//!   idle gaps) while the host CPU is saturated: the input pipeline is the bottleneck;
//! - **throttling**: a GPU slowed by power or thermal limits for part of the run;
//! - **shared GPU**: processes outside the watched tree used a GPU the run was on.
//!
//! The last two concern a measurement's validity, not the program. Thresholds are the
//! constants below; each finding states the numbers it fired on.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use tune_probes::{nvml::metric as gpu, throttle_reason_names, Source};

use super::model::DeviceSeries;
use crate::results::Finding;
use crate::stats::median;

/// Peak memory of the top device at least this many times the others' median...
pub const IMBALANCE_MEM_RATIO: f64 = 1.25;
/// ...and at least this much more, on GPUs (smaller gaps are allocator noise)...
pub const IMBALANCE_MEM_MIN_GAP_GPU: f64 = 256.0 * 1048576.0;
/// ...or on engine devices.
pub const IMBALANCE_MEM_MIN_GAP_ENGINE: f64 = 1048576.0;
/// Mean utilisation of the top device this many points above the others' median.
pub const IMBALANCE_UTIL_GAP: f64 = 20.0;
/// Starvation needs mean utilisation below this...
pub const STARVED_MEAN_UTIL: f64 = 50.0;
/// ...and at least this many bursts: rises from at most `SAW_LOW` to at least `SAW_HIGH`...
pub const SAW_MIN_BURSTS: usize = 3;
pub const SAW_LOW: f64 = 20.0;
pub const SAW_HIGH: f64 = 60.0;
/// ...while the host CPU (or the watched tree, as a share of all cores) averages at least this.
pub const HOST_SATURATED_PCT: f64 = 80.0;
/// Throttling is reported when a slowdown reason is set in at least this share of samples.
pub const THROTTLE_MIN_SHARE: f64 = 0.10;
/// NVML throttle reasons that slow work (not `gpu_idle` nor the clock-setting ones).
pub const SLOWDOWN_REASONS: [&str; 5] = [
    "sw_power_cap",
    "hw_slowdown",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
];

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FindingKind {
    Imbalance,
    Starvation,
    Throttling,
    SharedGpu,
    /// From the PyTorch hooks: the loop waits for its DataLoader.
    DataWait,
    /// From the PyTorch hooks: host-to-device copies.
    H2d,
    /// From the PyTorch hooks: the optimizer step is the largest cost.
    Optimizer,
    /// From the PyTorch hooks: forward and backward computation is the largest cost.
    Compute,
    /// Other processes used the CPU the watched job needed.
    Contention,
    /// From the PyTorch hooks: the first steps (start-up, compilation) took most of the run.
    Warmup,
    /// NVML's ECC error counts grew, or the driver reported a critical XID.
    GpuFault,
    /// From the PyTorch hooks: each DataLoader worker replays the whole IterableDataset.
    ReplayedStream,
    /// From the hooks: evaluating the model takes a large share of the job's time.
    Evaluation,
    /// From the PyTorch hooks: the script's own code between the model's calls is the
    /// largest cost (measured on the CPU only).
    Script,
    /// From the PyTorch hooks: activation checkpointing runs a large share of the forward
    /// again inside backward.
    Recompute,
    /// From the PyTorch hooks: models that are not trained (a distillation's teacher, a
    /// target network), called with gradients off inside training, take a large share.
    NoGrad,
    /// From the PyTorch hooks: a compute-bound step's threads leave free cores idle.
    IdleCores,
}

/// A finding about one device (or the Python job) of a watched run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WatchFinding {
    pub kind: FindingKind,
    /// The device it is about (`gpu0`, `engine0`).
    pub device: String,
    /// The title and the numbers it fired on, from this run.
    #[serde(flatten)]
    pub finding: Finding,
    /// What to do about it, with the PyTorch change where there is one.
    pub hint: String,
}

/// What the rules need besides the series.
#[derive(Clone, Debug, Default)]
pub struct Context {
    /// Pids seen in the watched tree; empty when unknown.
    pub tree: BTreeSet<u32>,
    /// Logical cores of the host, to judge the tree's CPU use.
    pub cores: usize,
}

/// Every finding the series support, in a stable order.
pub fn findings(series: &[DeviceSeries], ctx: &Context) -> Vec<WatchFinding> {
    let mut out = Vec::new();
    let used = accelerators_in_use(series, ctx);
    for source in [Source::Gpu, Source::Engine] {
        let devs: Vec<&DeviceSeries> = used
            .iter()
            .copied()
            .filter(|d| d.id.source == source)
            .collect();
        out.extend(imbalance(&devs));
    }
    let host = host_load(series, ctx);
    for d in &used {
        out.extend(starvation(d, host.as_ref()));
    }
    for d in series.iter().filter(|d| d.id.source == Source::Gpu) {
        out.extend(throttling(d));
        out.extend(gpu_fault(d));
    }
    out.extend(shared_gpus(series, ctx));
    out
}

fn mib(b: f64) -> f64 {
    b / 1048576.0
}

/// Accelerators the watched run used. Engine devices always belong to the run. A GPU
/// does when one of the tree's processes is on it; when no tree process is seen on any
/// GPU (no per-process data, or NVML reports pids from another PID namespace), every
/// GPU with any process on it counts, and failing that every GPU.
fn accelerators_in_use<'a>(series: &'a [DeviceSeries], ctx: &Context) -> Vec<&'a DeviceSeries> {
    let procs: Vec<&DeviceSeries> = series
        .iter()
        .filter(|d| d.id.source == Source::GpuProcess)
        .collect();
    let with = |pred: &dyn Fn(u32) -> bool| -> BTreeSet<u32> {
        procs
            .iter()
            .filter(|p| p.id.pid.is_some_and(pred))
            .filter_map(|p| p.id.index)
            .collect()
    };
    let mine = with(&|pid| ctx.tree.contains(&pid));
    let any = with(&|_| true);
    let gpus: BTreeSet<u32> = if !mine.is_empty() {
        mine
    } else if !any.is_empty() {
        any
    } else {
        series
            .iter()
            .filter(|d| d.id.source == Source::Gpu)
            .filter_map(|d| d.id.index)
            .collect()
    };
    series
        .iter()
        .filter(|d| match d.id.source {
            Source::Engine => true,
            Source::Gpu => d.id.index.is_some_and(|i| gpus.contains(&i)),
            _ => false,
        })
        .collect()
}

/// The top device by `key` and the median of the others, when the top is unique.
fn top_vs_rest<'a>(
    devs: &[&'a DeviceSeries],
    key: impl Fn(&DeviceSeries) -> Option<f64>,
) -> Option<(&'a DeviceSeries, f64, f64)> {
    let mut vals: Vec<(&DeviceSeries, f64)> = devs
        .iter()
        .filter_map(|d| key(d).map(|v| (*d, v)))
        .collect();
    if vals.len() < 2 {
        return None;
    }
    vals.sort_by(|a, b| b.1.total_cmp(&a.1));
    let (top, v) = vals[0];
    let rest: Vec<f64> = vals[1..].iter().map(|x| x.1).collect();
    (v > rest[0]).then(|| (top, v, median(&rest)))
}

fn imbalance(devs: &[&DeviceSeries]) -> Vec<WatchFinding> {
    let mut out = Vec::new();
    let n = devs.len();
    if let Some((top, peak, rest)) = top_vs_rest(devs, |d| d.mem().map(|s| s.max)) {
        let gap = if top.id.source == Source::Gpu {
            IMBALANCE_MEM_MIN_GAP_GPU
        } else {
            IMBALANCE_MEM_MIN_GAP_ENGINE
        };
        if peak >= IMBALANCE_MEM_RATIO * rest && peak - rest >= gap {
            out.push(WatchFinding {
                kind: FindingKind::Imbalance,
                device: top.label(),
                finding: Finding {
                title: format!("{} holds more memory than the other devices", top.label()),
                evidence: format!(
                    "peak {:.0} MiB on {} vs a median peak of {:.0} MiB on the other {} device(s) ({:.2}x)",
                    mib(peak),
                    top.label(),
                    mib(rest),
                    n - 1,
                    if rest > 0.0 { peak / rest } else { f64::INFINITY }
                ),
                },
                hint: dp_hint(),
            });
        }
    }
    if let Some((top, mean, rest)) = top_vs_rest(devs, |d| d.util().map(|s| s.mean)) {
        if mean - rest >= IMBALANCE_UTIL_GAP {
            out.push(WatchFinding {
                kind: FindingKind::Imbalance,
                device: top.label(),
                finding: Finding {
                title: format!("{} is busier than the other devices", top.label()),
                evidence: format!(
                    "mean utilisation {mean:.0}% on {} vs a median of {rest:.0}% on the other {} device(s)",
                    top.label(),
                    n - 1
                ),
                },
                hint: dp_hint(),
            });
        }
    }
    out
}

fn dp_hint() -> String {
    "the DataParallel signature: device 0 scatters inputs, gathers outputs, computes the \
     loss and reduces gradients. DistributedDataParallel gives every device the same work: \
     torch.nn.parallel.DistributedDataParallel(model, device_ids=[rank]) under torchrun \
     (tune: --parallel ddp)"
        .into()
}

/// Rises from at most `SAW_LOW` to at least `SAW_HIGH`, with hysteresis so noise
/// around one level does not count.
pub fn bursts(values: &[f64]) -> usize {
    let mut low = false;
    let mut n = 0;
    for &v in values {
        if v <= SAW_LOW {
            low = true;
        } else if v >= SAW_HIGH && low {
            n += 1;
            low = false;
        }
    }
    n
}

/// How loaded the host was: `(what, mean percent)` when saturated, else `None`.
fn host_load(series: &[DeviceSeries], ctx: &Context) -> Option<(String, f64)> {
    let host = series
        .iter()
        .find(|d| d.id.source == Source::Host)
        .and_then(|d| d.util())
        .map(|s| s.mean);
    if let Some(h) = host.filter(|&h| h >= HOST_SATURATED_PCT) {
        return Some(("host CPU".into(), h));
    }
    if ctx.cores > 0 {
        let tree = series
            .iter()
            .filter(|d| d.id.source == Source::Tree)
            .filter_map(|d| d.util())
            .map(|s| s.mean / ctx.cores as f64)
            .fold(None, |a: Option<f64>, b| Some(a.map_or(b, |a| a.max(b))));
        if let Some(t) = tree.filter(|&t| t >= HOST_SATURATED_PCT) {
            return Some(("the watched processes' share of all cores".into(), t));
        }
    }
    None
}

fn starvation(d: &DeviceSeries, host: Option<&(String, f64)>) -> Option<WatchFinding> {
    let (what, load) = host?;
    let load = *load;
    let util = d.values(d.id.util_metric());
    let mean = d.util()?.mean;
    let n = bursts(&util);
    if mean >= STARVED_MEAN_UTIL || n < SAW_MIN_BURSTS {
        return None;
    }
    Some(WatchFinding {
        kind: FindingKind::Starvation,
        device: d.label(),
        finding: Finding {
        title: format!("{} waits for input: the data pipeline is the bottleneck", d.label()),
        evidence: format!(
            "mean utilisation {mean:.0}% with {n} bursts from <= {SAW_LOW:.0}% to >= {SAW_HIGH:.0}% \
             over {} samples, while {what} averaged {load:.0}%",
            util.len()
        ),
        },
        hint: "load and augment batches in parallel and ahead of the device: \
               DataLoader(num_workers=N, pin_memory=True, persistent_workers=True) \
               (tune: --num-workers N); move decoding/augmentation off the training process"
            .into(),
    })
}

fn throttling(d: &DeviceSeries) -> Option<WatchFinding> {
    let masks = d.values(gpu::THROTTLE_REASONS);
    if masks.is_empty() {
        return None;
    }
    let mut counts: BTreeMap<&'static str, usize> = BTreeMap::new();
    let mut any = 0;
    for &m in &masks {
        let slow: Vec<&'static str> = throttle_reason_names(m)
            .into_iter()
            .filter(|r| SLOWDOWN_REASONS.contains(r))
            .collect();
        if !slow.is_empty() {
            any += 1;
        }
        for r in slow {
            *counts.entry(r).or_default() += 1;
        }
    }
    let share = any as f64 / masks.len() as f64;
    if share < THROTTLE_MIN_SHARE {
        return None;
    }
    let reasons: Vec<String> = counts
        .iter()
        .map(|(r, c)| format!("{r} {:.0}%", 100.0 * *c as f64 / masks.len() as f64))
        .collect();
    let mut extra = String::new();
    if let Some(t) = d.stats(gpu::TEMP_C) {
        extra += &format!(", temperature up to {:.0} C", t.max);
    }
    if let Some(p) = d.stats(gpu::POWER_W) {
        extra += &format!(", power up to {:.0} W", p.max);
    }
    Some(WatchFinding {
        kind: FindingKind::Throttling,
        device: d.label(),
        finding: Finding {
            title: format!("{} was throttled", d.label()),
            evidence: format!(
                "clocks slowed in {:.0}% of {} samples ({}){extra}",
                100.0 * share,
                masks.len(),
                reasons.join(", ")
            ),
        },
        hint: "timings taken while throttled are not comparable with unthrottled ones; \
               check cooling and power limits (nvidia-smi -q -d PERFORMANCE,POWER,TEMPERATURE)"
            .into(),
    })
}

/// ECC errors that appeared while the run was watched (growth of the volatile counts, so
/// errors from before are not blamed on it) and critical XID events.
fn gpu_fault(d: &DeviceSeries) -> Option<WatchFinding> {
    let grew = |metric: &str| {
        let v = d.values(metric);
        match (v.first(), v.last()) {
            (Some(a), Some(b)) if b > a => (b - a) as u64,
            _ => 0,
        }
    };
    let mut what = Vec::new();
    for (metric, kind) in [
        (gpu::ECC_UNCORRECTED, "uncorrected"),
        (gpu::ECC_CORRECTED, "corrected"),
    ] {
        let n = grew(metric);
        if n > 0 {
            what.push(format!("{n} {kind} ECC error(s)"));
        }
    }
    let xid: f64 = d.values(gpu::XID_EVENTS).iter().sum();
    if xid > 0.0 {
        let mut codes: Vec<u64> = d.values(gpu::XID_LAST).iter().map(|c| *c as u64).collect();
        codes.sort_unstable();
        codes.dedup();
        let codes: Vec<String> = codes.iter().map(u64::to_string).collect();
        what.push(format!(
            "{xid:.0} critical XID event(s) ({})",
            codes.join(", ")
        ));
    }
    if what.is_empty() {
        return None;
    }
    Some(WatchFinding {
        kind: FindingKind::GpuFault,
        device: d.label(),
        finding: Finding {
            title: format!("{} reported hardware faults", d.label()),
            evidence: format!("{} while the run was watched", what.join(" and ")),
        },
        hint: "timings and results from a faulting GPU are suspect: check it \
               (nvidia-smi -q -d ECC,PAGE_RETIREMENT; the kernel log for NVRM: Xid) \
               before trusting or comparing this run"
            .into(),
    })
}

fn shared_gpus(series: &[DeviceSeries], ctx: &Context) -> Vec<WatchFinding> {
    if ctx.tree.is_empty() {
        return Vec::new();
    }
    let procs: Vec<&DeviceSeries> = series
        .iter()
        .filter(|d| d.id.source == Source::GpuProcess)
        .collect();
    let none_match = !procs
        .iter()
        .any(|p| p.id.pid.is_some_and(|pid| ctx.tree.contains(&pid)));
    let mut by_gpu: BTreeMap<u32, Vec<&DeviceSeries>> = BTreeMap::new();
    for p in procs {
        if let (Some(i), Some(pid)) = (p.id.index, p.id.pid) {
            if !ctx.tree.contains(&pid) {
                by_gpu.entry(i).or_default().push(p);
            }
        }
    }
    by_gpu
        .into_iter()
        .map(|(i, others)| {
            let list: Vec<String> = others
                .iter()
                .map(|p| {
                    let mut s = format!("pid {}", p.id.pid.unwrap_or(0));
                    if let Some(m) = p.stats(gpu::PROC_USED_BYTES) {
                        s += &format!(" {:.0} MiB", mib(m.max));
                    }
                    if let Some(u) = p.stats(gpu::PROC_SM_PCT) {
                        s += &format!(" up to {:.0}% SM", u.max);
                    }
                    s
                })
                .collect();
            let caveat = if none_match {
                "; none of the GPU processes is in the watched tree, which also happens when \
                 tune runs in a container and NVML reports host pids"
            } else {
                ""
            };
            WatchFinding {
                kind: FindingKind::SharedGpu,
                device: format!("gpu{i}"),
                finding: Finding {
                    title: format!("other processes used gpu{i}"),
                    evidence: format!(
                        "{} process(es) outside the watched tree: {}{caveat}",
                        others.len(),
                        list.join(", ")
                    ),
                },
                hint: "other work on the same GPU competes for compute and memory and makes \
                       timings unreliable; run alone (CUDA_VISIBLE_DEVICES) or on an idle GPU"
                    .into(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests;
