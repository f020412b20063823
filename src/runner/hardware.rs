//! Per repeat: what the hardware did while it ran (throttling, SM clock against its
//! maximum, the power cap, other processes on the trial's GPUs, other processes' CPU load,
//! VM steal time) and the energy the trial's GPUs drew over its steady window. The sweep
//! re-runs a contaminated repeat up to `[search] hardware_reruns` times; the report leaves
//! it out of the figures while a clean repeat remains (`results::hardware::counted`). A
//! confirmation does the same pair by pair (`Reruns::again_pair`,
//! `results::figures::pairs_of`).

use std::collections::{BTreeMap, BTreeSet};

use tune_probes::host::{parse_proc_stat, CpuTimes};
use tune_probes::{throttle_reason_names, Sample, Source};

use crate::results::build::steady_steps;
use crate::results::hardware::{Energy, GpuState, RepeatHardware};
use crate::results::record::Repeat;
use crate::spec::Search;

/// Test-only: a file read instead of `/proc/stat` for steal time, so a test can plant
/// steal a real VM would show (docs/gpu.md). Nothing else reads it.
pub const PROC_STAT_ENV: &str = "TUNE_PROC_STAT";

/// Steal above this share of all CPU time contaminates a repeat: a hypervisor that
/// takes 5% of the cores' time away has slowed the run by about as much, the size of
/// the effects a sweep looks for.
pub const STEAL_PCT: f64 = 5.0;

/// A busy sample's SM clock below this share of its maximum contaminates the repeat.
/// GPUs boost to their maximum under load unless a limit holds them back; 85% leaves
/// room for boost steps without a throttle reason behind them.
pub const SM_CLOCK_RATIO: f64 = 0.85;

/// Throttle reasons that slow a running kernel; `gpu_idle`, application and display
/// clock settings and sync boost do not (NVML sets idle whenever no kernel runs).
const SLOWING: &[&str] = &[
    "sw_power_cap",
    "hw_slowdown",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
];

/// One trial's budget of re-runs for contaminated repeats (`[search] hardware_reruns`).
pub struct Reruns {
    left: usize,
}

impl Reruns {
    pub fn new(search: &Search) -> Reruns {
        Reruns {
            left: search.hardware_reruns,
        }
    }

    /// Whether repeat `r` (0-based) of `label` runs again: it ran to the end, the
    /// hardware contaminated it and the budget allows. Marks it and says why on stderr;
    /// a contaminated repeat kept for lack of budget is said too.
    pub fn again(&mut self, label: &str, r: usize, ok: bool, hw: &mut RepeatHardware) -> bool {
        if !ok || !hw.contaminated() {
            return false;
        }
        let why = hw.reasons.join("; ");
        if self.left == 0 {
            eprintln!(
                "note: '{label}' repeat {} was contaminated ({why}); no re-run left \
                 ([search] hardware_reruns): it is kept, flagged, and left out of the figures \
                 while a clean repeat remains",
                r + 1
            );
            return false;
        }
        self.left -= 1;
        hw.rerun = true;
        eprintln!(
            "note: '{label}' repeat {} was contaminated ({why}); running it again ({} re-run(s) left)",
            r + 1,
            self.left
        );
        true
    }

    /// Whether pair `p` (0-based, in the order the pairs ran, re-runs included, as the
    /// report numbers them) of a confirmation of `label` runs again: each of its
    /// runs ended well, one of them or both were contaminated (`hws`: each run's side,
    /// "baseline" or "change", and its record), and the budget allows. Both runs go
    /// again, in the same order, so the pair still measures the two sides in one stretch
    /// of time; both records are marked `rerun`. Said on stderr either way.
    pub fn again_pair(
        &mut self,
        label: &str,
        p: usize,
        ok: bool,
        hws: &mut [(&str, &mut RepeatHardware)],
    ) -> bool {
        let why: Vec<String> = hws
            .iter()
            .filter(|(_, h)| h.contaminated())
            .map(|(side, h)| format!("{side}: {}", h.reasons.join("; ")))
            .collect();
        if !ok || why.is_empty() {
            return false;
        }
        let why = why.join(" | ");
        if self.left == 0 {
            eprintln!(
                "note: '{label}' pair {} was contaminated ({why}); no re-run left \
                 ([search] hardware_reruns): it is kept, flagged, and left out of the \
                 confirmation's verdict while a clean pair remains",
                p + 1
            );
            return false;
        }
        self.left -= 1;
        for (_, h) in hws.iter_mut() {
            h.rerun = true;
        }
        eprintln!(
            "note: '{label}' pair {} was contaminated ({why}); running the pair again ({} \
             re-run(s) left)",
            p + 1,
            self.left
        );
        true
    }
}

/// The aggregate CPU times, from `/proc/stat` or the test's file.
pub fn cpu_times() -> Option<CpuTimes> {
    let path = std::env::var_os(PROC_STAT_ENV).unwrap_or_else(|| "/proc/stat".into());
    let text = std::fs::read_to_string(path).ok()?;
    parse_proc_stat(&text).ok().map(|s| s.total)
}

/// Steal over all CPU time between two readings, percent; None where the counters did
/// not move forward.
pub fn steal_pct(before: &CpuTimes, after: &CpuTimes) -> Option<f64> {
    let total = after.total().checked_sub(before.total())?;
    let steal = after.steal.checked_sub(before.steal)?;
    (total > 0).then(|| 100.0 * steal as f64 / total as f64)
}

/// What the repeat's samples say. `samples` are the sweep's raw samples between the
/// repeat's start and end; `ours` the pids of the sweep's process tree; `foreign_cpu` the
/// per-tick foreign CPU shares; `stand_in` whether NVML is tune's stand-in.
pub struct Inputs<'a> {
    pub samples: &'a [Sample],
    pub ours: &'a BTreeSet<u32>,
    pub foreign_cpu: &'a [f64],
    pub steal_pct: Option<f64>,
    pub run: Option<&'a Repeat>,
    pub search: &'a Search,
    pub stand_in: bool,
}

pub fn assess(i: &Inputs<'_>) -> RepeatHardware {
    let mut hw = RepeatHardware {
        steal_pct: i.steal_pct,
        foreign_cpu_pct: (!i.foreign_cpu.is_empty()).then(|| crate::stats::median(i.foreign_cpu)),
        ..RepeatHardware::default()
    };
    if let Some(s) = hw.steal_pct.filter(|s| *s > STEAL_PCT) {
        hw.reasons.push(format!(
            "VM steal time {s:.1}% of the CPU's time (above {STEAL_PCT:.0}%)"
        ));
    }
    if let (Some(f), Some(max)) = (hw.foreign_cpu_pct, i.search.max_foreign_cpu_pct) {
        if f > max as f64 {
            hw.reasons.push(format!(
                "other processes used {f:.0}% of the CPU (above max_foreign_cpu_pct = {max})"
            ));
        }
    }
    let gpus = trial_gpus(i.samples, i.ours);
    for &g in &gpus {
        let st = gpu_state(i.samples, g, i.ours);
        for (reason, n) in &st.throttle {
            hw.reasons
                .push(format!("gpu{g}: {reason} in {n} of {} samples", st.samples));
        }
        if let Some(r) = st.sm_clock_ratio_min.filter(|r| *r < SM_CLOCK_RATIO) {
            hw.reasons.push(format!(
                "gpu{g}: SM clock at {:.0}% of its maximum while busy",
                r * 100.0
            ));
        }
        for (n, kind) in [
            (st.ecc_uncorrected, "uncorrected"),
            (st.ecc_corrected, "corrected"),
        ] {
            if n > 0 {
                hw.reasons
                    .push(format!("gpu{g}: {n} {kind} ECC error(s) during the repeat"));
            }
        }
        if !st.xid.is_empty() {
            let codes: BTreeSet<u64> = st.xid.iter().copied().collect();
            let codes: Vec<String> = codes.iter().map(u64::to_string).collect();
            hw.reasons.push(format!(
                "gpu{g}: critical XID {} reported by the driver during the repeat",
                codes.join(", ")
            ));
        }
        if !st.foreign_pids.is_empty() {
            let pids: Vec<String> = st.foreign_pids.iter().map(u32::to_string).collect();
            hw.reasons.push(format!(
                "gpu{g}: another process on the GPU (pid {})",
                pids.join(", ")
            ));
        }
        hw.gpus.push(st);
    }
    hw.energy = energy(i.samples, &gpus, i.run, i.stand_in);
    hw
}

fn gpu_samples(samples: &[Sample], g: u32) -> impl Iterator<Item = &Sample> {
    samples
        .iter()
        .filter(move |s| s.source == Source::Gpu && s.device == Some(g))
}

/// The GPUs the repeat used: those holding a process of the sweep's tree, else those
/// that were busy, else every GPU sampled.
fn trial_gpus(samples: &[Sample], ours: &BTreeSet<u32>) -> Vec<u32> {
    let all: BTreeSet<u32> = samples
        .iter()
        .filter(|s| s.source == Source::Gpu)
        .filter_map(|s| s.device)
        .collect();
    let with_ours: BTreeSet<u32> = samples
        .iter()
        .filter(|s| s.source == Source::GpuProcess && s.pid.is_some_and(|p| ours.contains(&p)))
        .filter_map(|s| s.device)
        .collect();
    if !with_ours.is_empty() {
        return with_ours.into_iter().collect();
    }
    let busy: BTreeSet<u32> = samples
        .iter()
        .filter(|s| s.source == Source::Gpu && s.get("util_gpu_pct").is_some_and(|u| u > 0.0))
        .filter_map(|s| s.device)
        .collect();
    if busy.is_empty() { all } else { busy }
        .into_iter()
        .collect()
}

fn gpu_state(samples: &[Sample], g: u32, ours: &BTreeSet<u32>) -> GpuState {
    let mut st = GpuState {
        index: g,
        ..GpuState::default()
    };
    let mut reasons: BTreeMap<&'static str, usize> = BTreeMap::new();
    let mut ecc: [(Option<f64>, Option<f64>); 2] = [(None, None); 2];
    for s in gpu_samples(samples, g) {
        st.samples += 1;
        for (i, m) in ["ecc_corrected", "ecc_uncorrected"].into_iter().enumerate() {
            if let Some(v) = s.get(m) {
                ecc[i].0.get_or_insert(v);
                ecc[i].1 = Some(v);
            }
        }
        if s.get("xid_events").is_some_and(|n| n > 0.0) {
            st.xid.push(s.get("xid_last").unwrap_or(999.0) as u64);
        }
        if let Some(bits) = s.get("throttle_reasons") {
            let names = throttle_reason_names(bits);
            for n in names.iter().filter(|n| SLOWING.contains(n)) {
                *reasons.entry(n).or_default() += 1;
            }
            st.power_cap_samples += usize::from(names.contains(&"sw_power_cap"));
        }
        let busy = s.get("util_gpu_pct").is_some_and(|u| u > 0.0);
        if let (true, Some(c), Some(m)) = (busy, s.get("sm_clock_mhz"), s.get("sm_clock_max_mhz")) {
            if m > 0.0 {
                let r = c / m;
                st.sm_clock_ratio_min = Some(st.sm_clock_ratio_min.map_or(r, |x: f64| x.min(r)));
            }
        }
    }
    let grew = |(first, last): (Option<f64>, Option<f64>)| match (first, last) {
        (Some(a), Some(b)) if b > a => (b - a) as u64,
        _ => 0,
    };
    st.ecc_corrected = grew(ecc[0]);
    st.ecc_uncorrected = grew(ecc[1]);
    st.throttle = reasons
        .into_iter()
        .map(|(n, c)| (n.to_string(), c))
        .collect();
    let foreign: BTreeSet<u32> = samples
        .iter()
        .filter(|s| s.source == Source::GpuProcess && s.device == Some(g))
        .filter_map(|s| s.pid)
        .filter(|p| !ours.contains(p))
        .collect();
    st.foreign_pids = foreign.into_iter().collect();
    st
}

/// The steady window: its steps' total time, ending at the last sample that saw one of
/// the trial's GPUs busy (the trial process ends, and the GPU idles, after its last
/// step). A workload that evaluates after training has its evaluation inside the window.
fn window(samples: &[Sample], gpus: &[u32], run: Option<&Repeat>) -> Option<(f64, f64)> {
    let steady_s: f64 = steady_steps(run?).iter().sum();
    let end = samples
        .iter()
        .filter(|s| s.source == Source::Gpu && s.device.is_some_and(|d| gpus.contains(&d)))
        .filter(|s| s.get("util_gpu_pct").is_some_and(|u| u > 0.0))
        .map(|s| s.t_ms)
        .fold(f64::NAN, f64::max);
    let first = samples
        .iter()
        .filter(|s| s.source == Source::Gpu)
        .map(|s| s.t_ms)
        .fold(f64::NAN, f64::min);
    (end.is_finite() && steady_s > 0.0).then(|| ((end - steady_s * 1e3).max(first), end))
}

/// `(t, v)` points' piecewise-linear value at `t`, held flat beyond the ends.
fn at(points: &[(f64, f64)], t: f64) -> Option<f64> {
    let (first, last) = (points.first()?, points.last()?);
    if t <= first.0 {
        return Some(first.1);
    }
    if t >= last.0 {
        return Some(last.1);
    }
    let w = points.windows(2).find(|w| w[0].0 <= t && t <= w[1].0)?;
    let span = w[1].0 - w[0].0;
    Some(if span > 0.0 {
        w[0].1 + (w[1].1 - w[0].1) * (t - w[0].0) / span
    } else {
        w[1].1
    })
}

/// Integral over `[a, b]` of the piecewise-linear function through `points`.
fn integral(points: &[(f64, f64)], a: f64, b: f64) -> Option<f64> {
    let mut ts: Vec<f64> = vec![a];
    ts.extend(points.iter().map(|p| p.0).filter(|t| *t > a && *t < b));
    ts.push(b);
    let mut sum = 0.0;
    for w in ts.windows(2) {
        sum += (at(points, w[0])? + at(points, w[1])?) / 2.0 * (w[1] - w[0]);
    }
    Some(sum)
}

/// Joules the trial's GPUs drew over the steady window: the total-energy counter's rise
/// where every GPU has one, else power integrated (said in `source`).
fn energy(
    samples: &[Sample],
    gpus: &[u32],
    run: Option<&Repeat>,
    stand_in: bool,
) -> Option<Energy> {
    let (a, b) = window(samples, gpus, run)?;
    let series = |g: u32, m: &str| -> Vec<(f64, f64)> {
        gpu_samples(samples, g)
            .filter_map(|s| Some((s.t_ms, s.get(m)?)))
            .collect()
    };
    let counters: Vec<Vec<(f64, f64)>> = gpus.iter().map(|&g| series(g, "energy_mj")).collect();
    let (joules, source) = if counters.iter().all(|c| c.len() >= 2) {
        let mj: f64 = counters
            .iter()
            .map(|c| Some(at(c, b)? - at(c, a)?))
            .sum::<Option<f64>>()?;
        (mj / 1e3, "counter")
    } else {
        let powers: Vec<Vec<(f64, f64)>> = gpus.iter().map(|&g| series(g, "power_w")).collect();
        if powers.iter().any(|p| p.len() < 2) {
            return None;
        }
        let wms: f64 = powers
            .iter()
            .map(|p| integral(p, a, b))
            .sum::<Option<f64>>()?;
        (wms / 1e3, "power")
    };
    let window_s = (b - a) / 1e3;
    (joules.is_finite() && joules >= 0.0 && window_s > 0.0).then(|| Energy {
        joules,
        window_s,
        source: source.into(),
        gpus: gpus.to_vec(),
        stand_in,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(t: f64, d: u32, m: &[(&str, f64)]) -> Sample {
        let mut s = Sample::new(t, Source::Gpu).with_device(d);
        for (k, v) in m {
            s.set(k, *v);
        }
        s
    }

    fn search() -> Search {
        crate::spec::Spec::parse(
            "[workload]\nmodel = \"mlp\"\ndataset = \"synthetic\"\n[knobs]\nnum_workers = [0]\n",
            "x.toml",
        )
        .map(|s| s.search)
        .expect("spec")
    }

    #[test]
    fn piecewise_linear_integral_and_interpolation() {
        let p = [(0.0, 100.0), (1000.0, 300.0)];
        assert_eq!(at(&p, 500.0), Some(200.0));
        // 0..1000 ms of 100 -> 300 W: 200 W x 1000 ms.
        assert!((integral(&p, 0.0, 1000.0).unwrap() - 200_000.0).abs() < 1e-6);
        assert!((integral(&p, 250.0, 750.0).unwrap() - 100_000.0).abs() < 1e-6);
    }

    #[test]
    fn throttle_clock_foreign_and_steal_are_reasons() {
        let slow = (ThrottleBits::HW_THERMAL) as f64;
        let samples = vec![
            gpu(
                0.0,
                0,
                &[("util_gpu_pct", 90.0), ("throttle_reasons", slow)],
            ),
            gpu(
                100.0,
                0,
                &[
                    ("util_gpu_pct", 90.0),
                    ("sm_clock_mhz", 990.0),
                    ("sm_clock_max_mhz", 1980.0),
                ],
            ),
            Sample::new(100.0, Source::GpuProcess)
                .with_device(0)
                .with_pid(4242),
        ];
        let ours = BTreeSet::new();
        let s = search();
        let hw = assess(&Inputs {
            samples: &samples,
            ours: &ours,
            foreign_cpu: &[],
            steal_pct: Some(12.0),
            run: None,
            search: &s,
            stand_in: true,
        });
        let all = hw.reasons.join("; ");
        assert!(all.contains("steal time 12.0%"), "{all}");
        assert!(
            all.contains("gpu0: hw_thermal_slowdown in 1 of 2 samples"),
            "{all}"
        );
        assert!(all.contains("SM clock at 50%"), "{all}");
        assert!(all.contains("pid 4242"), "{all}");
        let clean = assess(&Inputs {
            samples: &samples[1..2],
            ours: &ours,
            foreign_cpu: &[90.0],
            steal_pct: Some(1.0),
            run: None,
            search: &s,
            stand_in: true,
        });
        // 50% clock still; foreign CPU is no reason unless the spec asks.
        assert_eq!(clean.reasons.len(), 1, "{:?}", clean.reasons);
    }

    #[test]
    fn ecc_growth_and_xid_events_are_reasons_and_steady_counts_are_not() {
        let s = search();
        let ours = BTreeSet::new();
        let reasons = |samples: &[Sample]| {
            assess(&Inputs {
                samples,
                ours: &ours,
                foreign_cpu: &[],
                steal_pct: None,
                run: None,
                search: &s,
                stand_in: true,
            })
            .reasons
            .join("; ")
        };
        let at = |t: f64, c: f64, u: f64, xid: f64| {
            gpu(
                t,
                0,
                &[
                    ("util_gpu_pct", 90.0),
                    ("ecc_corrected", c),
                    ("ecc_uncorrected", u),
                    ("xid_events", xid),
                    ("xid_last", 79.0),
                ],
            )
        };
        // Counts that were already there when the repeat began are not its fault.
        assert_eq!(
            reasons(&[at(0.0, 7.0, 2.0, 0.0), at(100.0, 7.0, 2.0, 0.0)]),
            ""
        );
        let all = reasons(&[at(0.0, 7.0, 2.0, 0.0), at(100.0, 10.0, 3.0, 1.0)]);
        assert!(
            all.contains("gpu0: 1 uncorrected ECC error(s) during the repeat"),
            "{all}"
        );
        assert!(
            all.contains("gpu0: 3 corrected ECC error(s) during the repeat"),
            "{all}"
        );
        assert!(all.contains("gpu0: critical XID 79 reported"), "{all}");
    }

    struct ThrottleBits;
    impl ThrottleBits {
        // NVML's nvmlClocksThrottleReasonHwThermalSlowdown.
        const HW_THERMAL: u64 = 0x40;
    }
}
