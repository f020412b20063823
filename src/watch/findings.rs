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
mod tests {
    use super::*;
    use crate::watch::model::group;
    use crate::watch::model::tests::sample;

    /// The watch report keeps `title` and `evidence` beside `kind`, `device` and `hint`.
    #[test]
    fn a_watch_finding_serialises_its_finding_inline() {
        let f = WatchFinding {
            kind: FindingKind::Throttling,
            device: "gpu0".into(),
            finding: Finding::new("t", "e"),
            hint: "h".into(),
        };
        let v = serde_json::to_value(&f).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"kind": "throttling", "device": "gpu0", "title": "t", "evidence": "e", "hint": "h"})
        );
        assert_eq!(serde_json::from_value::<WatchFinding>(v).unwrap(), f);
    }
    use tune_probes::nvml::metric as m;
    use tune_probes::Sample;

    const GIB: f64 = 1073741824.0;

    /// `n` ticks of 100 ms for GPU `i` with utilisation from `util(t)` and memory `mem`.
    fn gpu_run(i: u32, n: usize, util: impl Fn(usize) -> f64, mem: f64) -> Vec<Sample> {
        (0..n)
            .map(|t| {
                sample(
                    t as f64 * 100.0,
                    Source::Gpu,
                    Some(i),
                    None,
                    &[
                        (m::UTIL_GPU_PCT, util(t)),
                        (m::MEM_USED_BYTES, mem),
                        (m::MEM_TOTAL_BYTES, 80.0 * GIB),
                    ],
                )
            })
            .collect()
    }

    fn host_run(n: usize, cpu: f64) -> Vec<Sample> {
        (0..n)
            .map(|t| {
                sample(
                    t as f64 * 100.0,
                    Source::Host,
                    None,
                    None,
                    &[("cpu_util_pct", cpu)],
                )
            })
            .collect()
    }

    fn proc_on(i: u32, pid: u32, bytes: f64) -> Sample {
        sample(
            0.0,
            Source::GpuProcess,
            Some(i),
            Some(pid),
            &[(m::PROC_USED_BYTES, bytes)],
        )
    }

    fn ctx(tree: &[u32]) -> Context {
        Context {
            tree: tree.iter().copied().collect(),
            cores: 16,
        }
    }

    fn kinds(f: &[WatchFinding]) -> Vec<(FindingKind, String)> {
        f.iter().map(|f| (f.kind, f.device.clone())).collect()
    }

    #[test]
    fn dataparallel_memory_and_busy_imbalance_fires_on_device_0() {
        let mut s = gpu_run(0, 50, |_| 95.0, 30.0 * GIB);
        s.extend(gpu_run(1, 50, |_| 60.0, 18.0 * GIB));
        s.extend(gpu_run(2, 50, |_| 62.0, 18.5 * GIB));
        s.extend([proc_on(0, 10, 29.0 * GIB), proc_on(1, 10, 17.0 * GIB)]);
        s.push(proc_on(2, 10, 17.0 * GIB));
        let f = findings(&group(&s), &ctx(&[10]));
        assert_eq!(
            kinds(&f),
            vec![
                (FindingKind::Imbalance, "gpu0".into()),
                (FindingKind::Imbalance, "gpu0".into())
            ]
        );
        assert!(
            f[0].finding.evidence.contains("30720 MiB"),
            "{}",
            f[0].finding.evidence
        );
        assert!(f[0].hint.contains("DistributedDataParallel"));
        assert!(
            f[1].finding.evidence.contains("95%"),
            "{}",
            f[1].finding.evidence
        );
    }

    #[test]
    fn balanced_devices_and_unused_gpus_are_silent() {
        // Balanced within the thresholds.
        let mut s = gpu_run(0, 50, |_| 90.0, 20.0 * GIB);
        s.extend(gpu_run(1, 50, |_| 85.0, 19.0 * GIB));
        s.extend([proc_on(0, 10, GIB), proc_on(1, 10, GIB)]);
        // An idle GPU the job never touched must not count as "the others".
        s.extend(gpu_run(2, 50, |_| 0.0, 0.0));
        assert!(findings(&group(&s), &ctx(&[10])).is_empty());

        // A single-GPU job on a multi-GPU box: no imbalance with the idle ones.
        let mut s = gpu_run(0, 50, |_| 95.0, 30.0 * GIB);
        s.extend(gpu_run(1, 50, |_| 0.0, 0.5 * GIB));
        s.push(proc_on(0, 10, 29.0 * GIB));
        assert!(findings(&group(&s), &ctx(&[10])).is_empty());
    }

    #[test]
    fn engine_devices_are_compared_too() {
        let dev = |i: u32, bytes: f64, busy: f64| -> Vec<Sample> {
            (0..20)
                .map(|t| {
                    sample(
                        t as f64 * 100.0,
                        Source::Engine,
                        Some(i),
                        None,
                        &[("busy_pct", busy), ("bytes", bytes)],
                    )
                })
                .collect()
        };
        let mut s = dev(0, 64e6, 90.0);
        s.extend(dev(1, 40e6, 55.0));
        let f = findings(&group(&s), &Context::default());
        assert_eq!(f.len(), 2);
        assert!(f.iter().all(|f| f.device == "engine0"));
        let mut s = dev(0, 40e6, 90.0);
        s.extend(dev(1, 40e6, 88.0));
        assert!(findings(&group(&s), &Context::default()).is_empty());
    }

    #[test]
    fn bursts_count_rises_with_hysteresis() {
        assert_eq!(bursts(&[0.0, 90.0, 0.0, 90.0, 10.0, 70.0]), 3);
        // Wobbling around the middle is not a burst.
        assert_eq!(bursts(&[30.0, 55.0, 25.0, 59.0, 40.0]), 0);
        // Starting high does not count until it has been low.
        assert_eq!(bursts(&[90.0, 90.0, 15.0, 65.0]), 1);
        assert_eq!(bursts(&[]), 0);
    }

    fn saw(t: usize) -> f64 {
        // 1 busy tick in 4: mean 25%; 24 bursts in 100 ticks (the first high tick follows no low one).
        if t.is_multiple_of(4) {
            100.0
        } else {
            0.0
        }
    }

    #[test]
    fn starvation_fires_on_saw_tooth_with_saturated_host() {
        let mut s = gpu_run(0, 100, saw, 8.0 * GIB);
        s.extend(host_run(100, 97.0));
        let f = findings(&group(&s), &ctx(&[10]));
        assert_eq!(kinds(&f), vec![(FindingKind::Starvation, "gpu0".into())]);
        assert!(
            f[0].finding.evidence.contains("24 bursts"),
            "{}",
            f[0].finding.evidence
        );
        assert!(f[0].finding.evidence.contains("host CPU averaged 97%"));
        assert!(f[0].hint.contains("num_workers"));
    }

    #[test]
    fn starvation_also_fires_when_the_tree_saturates_all_cores() {
        let mut s = gpu_run(0, 100, saw, 8.0 * GIB);
        s.extend(host_run(100, 50.0));
        s.extend((0..100).map(|t| {
            sample(
                t as f64 * 100.0,
                Source::Tree,
                None,
                Some(10),
                &[("cpu_pct", 1500.0)],
            )
        }));
        let f = findings(&group(&s), &ctx(&[10]));
        assert_eq!(kinds(&f), vec![(FindingKind::Starvation, "gpu0".into())]);
        assert!(f[0]
            .finding
            .evidence
            .contains("share of all cores averaged 94%"));
    }

    #[test]
    fn starvation_is_silent_without_each_of_its_conditions() {
        // Host idle: low utilisation is not blamed on input.
        let mut s = gpu_run(0, 100, saw, GIB);
        s.extend(host_run(100, 30.0));
        assert!(findings(&group(&s), &ctx(&[10])).is_empty());
        // Flat low utilisation (no saw-tooth), host busy.
        let mut s = gpu_run(0, 100, |_| 30.0, GIB);
        s.extend(host_run(100, 97.0));
        assert!(findings(&group(&s), &ctx(&[10])).is_empty());
        // Saw-tooth but a high mean: busy device with short gaps.
        let mut s = gpu_run(
            0,
            100,
            |t| if t.is_multiple_of(10) { 0.0 } else { 100.0 },
            GIB,
        );
        s.extend(host_run(100, 97.0));
        assert!(findings(&group(&s), &ctx(&[10])).is_empty());
    }

    #[test]
    fn throttling_fires_on_slowdown_reasons_only() {
        use nvml_mask::*;
        let with_mask = |mask: &dyn Fn(usize) -> f64| -> Vec<Sample> {
            (0..20)
                .map(|t| {
                    sample(
                        t as f64 * 100.0,
                        Source::Gpu,
                        Some(0),
                        None,
                        &[(m::THROTTLE_REASONS, mask(t)), (m::TEMP_C, 84.0)],
                    )
                })
                .collect()
        };
        let s = with_mask(&|t| if t < 10 { HW_THERMAL } else { 0.0 });
        let f = findings(&group(&s), &Context::default());
        assert_eq!(kinds(&f), vec![(FindingKind::Throttling, "gpu0".into())]);
        assert!(
            f[0].finding.evidence.contains("50% of 20 samples"),
            "{}",
            f[0].finding.evidence
        );
        assert!(f[0].finding.evidence.contains("hw_thermal_slowdown 50%"));
        assert!(f[0].finding.evidence.contains("84 C"));
        // Idle and clock-setting "reasons" are not slowdowns.
        let s = with_mask(&|_| GPU_IDLE + APP_CLOCKS);
        assert!(findings(&group(&s), &Context::default()).is_empty());
        // One throttled sample in 20 is below the threshold.
        let s = with_mask(&|t| if t == 3 { SW_POWER_CAP } else { 0.0 });
        assert!(findings(&group(&s), &Context::default()).is_empty());
    }

    #[test]
    fn ecc_growth_and_xid_events_are_a_gpu_fault() {
        let run = |ecc_u: &dyn Fn(usize) -> f64, xid: &dyn Fn(usize) -> f64| {
            let s: Vec<Sample> = (0..10)
                .map(|t| {
                    sample(
                        t as f64 * 100.0,
                        Source::Gpu,
                        Some(0),
                        None,
                        &[
                            (m::ECC_UNCORRECTED, ecc_u(t)),
                            (m::ECC_CORRECTED, 4.0),
                            (m::XID_EVENTS, xid(t)),
                            (m::XID_LAST, 79.0),
                        ],
                    )
                })
                .collect();
            findings(&group(&s), &Context::default())
        };
        // Counts from before the watch, steady through it: nothing to say.
        assert!(run(&|_| 2.0, &|_| 0.0).is_empty());
        let f = run(&|t| if t < 5 { 2.0 } else { 5.0 }, &|t| f64::from(t == 7));
        assert_eq!(kinds(&f), vec![(FindingKind::GpuFault, "gpu0".into())]);
        let e = &f[0].finding.evidence;
        assert!(e.contains("3 uncorrected ECC error(s)"), "{e}");
        assert!(e.contains("1 critical XID event(s) (79)"), "{e}");
        assert!(
            !e.contains("4 corrected"),
            "steady counts are not blamed: {e}"
        );
    }

    /// NVML's throttle-reason bits (nvml.h `nvmlClocksEventReason*`).
    mod nvml_mask {
        pub const GPU_IDLE: f64 = 0x1 as f64;
        pub const APP_CLOCKS: f64 = 0x2 as f64;
        pub const SW_POWER_CAP: f64 = 0x4 as f64;
        pub const HW_THERMAL: f64 = 0x40 as f64;
    }

    #[test]
    fn other_processes_on_a_gpu_are_reported() {
        let mut s = gpu_run(0, 10, |_| 90.0, 20.0 * GIB);
        s.extend([proc_on(0, 10, 18.0 * GIB), proc_on(0, 99, 2.0 * GIB)]);
        let f = findings(&group(&s), &ctx(&[10, 11]));
        assert_eq!(kinds(&f), vec![(FindingKind::SharedGpu, "gpu0".into())]);
        assert!(
            f[0].finding.evidence.contains("pid 99 2048 MiB"),
            "{}",
            f[0].finding.evidence
        );
        assert!(!f[0].finding.evidence.contains("container"));
        // Only the tree's own processes: silent.
        let mut s = gpu_run(0, 10, |_| 90.0, 20.0 * GIB);
        s.extend([proc_on(0, 10, 18.0 * GIB), proc_on(0, 11, 1.0 * GIB)]);
        assert!(findings(&group(&s), &ctx(&[10, 11])).is_empty());
        // Unknown tree: cannot tell, so silent.
        let mut s = gpu_run(0, 10, |_| 90.0, 20.0 * GIB);
        s.push(proc_on(0, 99, GIB));
        assert!(findings(&group(&s), &Context::default()).is_empty());

        // No GPU process of the tree at all: reported with the namespace caveat.
        let f = findings(&group(&s), &ctx(&[10]));
        assert!(
            f[0].finding.evidence.contains("container"),
            "{}",
            f[0].finding.evidence
        );
    }
}
