//! Per-device measurements: a busy/communication clock each device's threads add to, and
//! the per-device summary a run reports (busy fraction, peak bytes, time in
//! communication, imbalance as max/mean).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::engine::clock::Phases;
use crate::engine::device::MemSnapshot;

/// Cumulative nanoseconds one device spent working and communicating. Written with
/// relaxed atomic adds from the device's threads; read by the thread that reports steps,
/// after a channel hand-off that orders the writes before the read.
#[derive(Debug, Default)]
pub struct DeviceClock {
    busy_ns: AtomicU64,
    /// Collectives run by the device's communication thread (DDP gradient buckets).
    comm_ns: AtomicU64,
    /// Collectives the compute thread itself waits in (SyncBatchNorm, buffer broadcast).
    sync_ns: AtomicU64,
}

fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// One reading of a clock, in seconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ClockReading {
    pub busy_s: f64,
    pub comm_s: f64,
    pub sync_s: f64,
}

impl ClockReading {
    pub fn since(&self, earlier: &ClockReading) -> ClockReading {
        ClockReading {
            busy_s: self.busy_s - earlier.busy_s,
            comm_s: self.comm_s - earlier.comm_s,
            sync_s: self.sync_s - earlier.sync_s,
        }
    }
}

impl DeviceClock {
    pub fn add_busy(&self, d: Duration) {
        self.busy_ns.fetch_add(ns(d), Ordering::Relaxed);
    }
    pub fn add_comm(&self, d: Duration) {
        self.comm_ns.fetch_add(ns(d), Ordering::Relaxed);
    }
    pub fn add_sync(&self, d: Duration) {
        self.sync_ns.fetch_add(ns(d), Ordering::Relaxed);
    }
    pub fn read(&self) -> ClockReading {
        let s = |a: &AtomicU64| a.load(Ordering::Relaxed) as f64 * 1e-9;
        ClockReading {
            busy_s: s(&self.busy_ns),
            comm_s: s(&self.comm_ns),
            sync_s: s(&self.sync_ns),
        }
    }
}

/// What one device did during one step.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DeviceStep {
    pub index: usize,
    /// Working: compute, and the copies the device's own thread makes.
    pub busy_s: f64,
    /// In inter-device communication (DP copies; DDP collectives, waits for peers included).
    pub comm_s: f64,
    /// DDP: gradient all-reduce time, and the part of it that ran before backward had
    /// computed its last gradient.
    pub allreduce_s: f64,
    pub allreduce_overlapped_s: f64,
}

/// One device over the measured (post-warm-up) steps of a run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DeviceSummary {
    pub index: usize,
    /// Compute threads of this (virtual) device.
    pub threads: usize,
    /// Seconds the device worked: compute, plus the copies its own thread makes (under
    /// DP, device 0 makes all of them). Waiting for data, for other devices or for a
    /// collective is not work.
    pub busy_s: f64,
    /// `busy_s` over the measured steps' wall time.
    pub busy_fraction: f64,
    /// Seconds in inter-device communication: DP's scatter/broadcast/gather/reduce copies
    /// (part of `busy_s`), DDP's collectives (on the device's communication thread,
    /// concurrent with compute, waits for peers included).
    pub comm_s: f64,
    /// `comm_s` over the measured steps' wall time.
    pub comm_fraction: f64,
    /// DDP only: share of the gradient all-reduce time that ran before backward had
    /// computed its last gradient (hidden behind gradient computation). With a single
    /// bucket this is about 0: the bucket fills with the last gradient.
    pub comm_overlap: Option<f64>,
    /// Peak bytes of this device's arena during training, all categories together.
    pub peak_bytes: u64,
    /// Peak bytes per category.
    pub peak_by_category: BTreeMap<String, u64>,
}

/// How uneven the devices are: max over mean (1.0 = perfectly even).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Imbalance {
    pub busy: f64,
    pub memory: f64,
}

/// max/mean of positive values; 1 when there is nothing to compare.
pub fn max_over_mean(v: &[f64]) -> f64 {
    let mean = v.iter().sum::<f64>() / v.len().max(1) as f64;
    let max = v.iter().copied().fold(0.0, f64::max);
    if mean > 0.0 && mean.is_finite() {
        max / mean
    } else {
        1.0
    }
}

/// Sums per-step device figures over the measured steps into summaries.
#[derive(Clone, Debug, Default)]
pub struct DeviceTotals {
    pub threads: usize,
    pub busy_s: f64,
    pub comm_s: f64,
    pub allreduce_s: f64,
    pub allreduce_overlapped_s: f64,
    pub ddp: bool,
}

impl DeviceTotals {
    pub fn add(&mut self, s: &DeviceStep) {
        self.busy_s += s.busy_s;
        self.comm_s += s.comm_s;
        self.allreduce_s += s.allreduce_s;
        self.allreduce_overlapped_s += s.allreduce_overlapped_s;
    }
}

/// Per-device summaries and the imbalance, from totals over `wall_s` seconds of
/// measured steps and each device's memory snapshot at the end of training.
pub fn summarize(
    totals: &[DeviceTotals],
    snaps: &[MemSnapshot],
    wall_s: f64,
) -> (Vec<DeviceSummary>, Imbalance) {
    let frac = |x: f64| if wall_s > 0.0 { x / wall_s } else { 0.0 };
    let devices: Vec<DeviceSummary> = totals
        .iter()
        .zip(snaps)
        .enumerate()
        .map(|(index, (t, snap))| DeviceSummary {
            index,
            threads: t.threads,
            busy_s: t.busy_s,
            busy_fraction: frac(t.busy_s),
            comm_s: t.comm_s,
            comm_fraction: frac(t.comm_s),
            comm_overlap: (t.ddp && t.allreduce_s > 0.0)
                .then(|| t.allreduce_overlapped_s / t.allreduce_s),
            peak_bytes: snap.total_peak,
            peak_by_category: snap.peak.clone(),
        })
        .collect();
    let busy: Vec<f64> = devices.iter().map(|d| d.busy_fraction).collect();
    let mem: Vec<f64> = devices.iter().map(|d| d.peak_bytes as f64).collect();
    let imbalance = Imbalance {
        busy: max_over_mean(&busy),
        memory: max_over_mean(&mem),
    };
    (devices, imbalance)
}

/// The one-device summary of a single-device run: busy = zero-grad, forward (with the
/// loss), backward and optimizer time; waiting for data is not device work.
pub fn single_device_summary(
    threads: usize,
    phase_sum: &Phases,
    wall_s: f64,
    snap: &MemSnapshot,
) -> (Vec<DeviceSummary>, Imbalance) {
    let t = DeviceTotals {
        threads,
        busy_s: phase_sum.zero_grad + phase_sum.forward + phase_sum.backward + phase_sum.optimizer,
        ..DeviceTotals::default()
    };
    summarize(&[t], std::slice::from_ref(snap), wall_s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn imbalance_is_max_over_mean() {
        assert_eq!(max_over_mean(&[1.0, 3.0]), 1.5);
        assert_eq!(max_over_mean(&[2.0]), 1.0);
        assert_eq!(max_over_mean(&[]), 1.0);
        assert_eq!(max_over_mean(&[0.0, 0.0]), 1.0);
        let t = [
            DeviceTotals {
                threads: 1,
                busy_s: 3.0,
                comm_s: 1.0,
                ..DeviceTotals::default()
            },
            DeviceTotals {
                threads: 1,
                busy_s: 1.0,
                ..DeviceTotals::default()
            },
        ];
        let snaps = [
            MemSnapshot {
                total_peak: 300,
                ..MemSnapshot::default()
            },
            MemSnapshot {
                total_peak: 100,
                ..MemSnapshot::default()
            },
        ];
        let (d, imb) = summarize(&t, &snaps, 4.0);
        assert_eq!(d[0].busy_fraction, 0.75);
        assert_eq!(d[0].comm_fraction, 0.25);
        assert_eq!(d[1].comm_overlap, None);
        assert_eq!(imb.busy, 1.5);
        assert_eq!(imb.memory, 1.5);
    }
}
