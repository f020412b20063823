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
