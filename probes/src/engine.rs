//! Counters the engine's virtual devices update, and the sampler that reads them.
//!
//! The engine only does atomic adds/stores on its hot path; turning them into
//! rates happens here, on the sampling thread. This keeps the crate free of
//! any dependency on the engine.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::sample::{Sample, Sampler, Source};

/// Metric names written by [`EngineSampler`].
pub mod metric {
    /// Share of the interval the device was busy, 0..=100.
    pub const BUSY_PCT: &str = "busy_pct";
    /// Arena bytes in use now.
    pub const BYTES: &str = "bytes";
    /// Highest arena bytes seen since the counters were created or reset.
    pub const PEAK_BYTES: &str = "peak_bytes";
}

/// One virtual device's counters.
#[derive(Debug, Default)]
pub struct DeviceCounter {
    busy_ns: AtomicU64,
    bytes: AtomicU64,
    peak: AtomicU64,
}

/// A plain copy of one device's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceReading {
    /// Cumulative busy time.
    pub busy_ns: u64,
    pub bytes: u64,
    pub peak_bytes: u64,
}

/// Counters for every virtual device, shared (`Arc`) between engine and sampler.
///
/// Relaxed ordering throughout: each counter stands alone and the sampler
/// only needs values that are eventually current, not ordered with each other.
#[derive(Debug)]
pub struct DeviceCounters {
    devices: Vec<DeviceCounter>,
}

impl DeviceCounters {
    pub fn new(devices: usize) -> Self {
        DeviceCounters {
            devices: (0..devices).map(|_| DeviceCounter::default()).collect(),
        }
    }

    pub fn new_shared(devices: usize) -> Arc<Self> {
        Arc::new(Self::new(devices))
    }

    pub fn len(&self) -> usize {
        self.devices.len()
    }

    pub fn is_empty(&self) -> bool {
        self.devices.is_empty()
    }

    // An out-of-range device is an engine bug; counting it nowhere keeps the
    // hot path free of error handling, and debug builds still catch it.
    fn dev(&self, dev: usize) -> Option<&DeviceCounter> {
        debug_assert!(
            dev < self.devices.len(),
            "device {dev} of {}",
            self.devices.len()
        );
        self.devices.get(dev)
    }

    /// Adds a finished busy span. Report spans as they end; the sampler spreads
    /// a span longer than one interval over the following ticks.
    pub fn add_busy(&self, dev: usize, ns: u64) {
        if let Some(d) = self.dev(dev) {
            d.busy_ns.fetch_add(ns, Ordering::Relaxed);
        }
    }

    /// Sets the arena bytes in use and raises the peak if needed.
    pub fn set_bytes(&self, dev: usize, bytes: u64) {
        if let Some(d) = self.dev(dev) {
            d.bytes.store(bytes, Ordering::Relaxed);
            d.peak.fetch_max(bytes, Ordering::Relaxed);
        }
    }

    /// Raises the peak to `bytes` if it is higher, for engines whose allocator
    /// keeps its own peak (a peak between two ticks would otherwise be missed).
    pub fn raise_peak(&self, dev: usize, bytes: u64) {
        if let Some(d) = self.dev(dev) {
            d.peak.fetch_max(bytes, Ordering::Relaxed);
        }
    }

    /// Starts a new peak window (e.g. per trial) from the current bytes.
    pub fn reset_peak(&self, dev: usize) {
        if let Some(d) = self.dev(dev) {
            d.peak
                .store(d.bytes.load(Ordering::Relaxed), Ordering::Relaxed);
        }
    }

    pub fn read(&self, dev: usize) -> Option<DeviceReading> {
        self.devices.get(dev).map(|d| DeviceReading {
            busy_ns: d.busy_ns.load(Ordering::Relaxed),
            bytes: d.bytes.load(Ordering::Relaxed),
            peak_bytes: d.peak.load(Ordering::Relaxed),
        })
    }

    pub fn read_all(&self) -> Vec<DeviceReading> {
        (0..self.devices.len())
            .filter_map(|d| self.read(d))
            .collect()
    }
}

/// Samples busy % and arena bytes of each virtual device.
pub struct EngineSampler {
    counters: Arc<DeviceCounters>,
    prev: Option<(f64, Vec<u64>)>,
    /// Busy time reported but not yet shown, because it exceeded an interval.
    carry_ns: Vec<f64>,
}

impl EngineSampler {
    pub fn new(counters: Arc<DeviceCounters>) -> Self {
        let n = counters.len();
        EngineSampler {
            counters,
            prev: None,
            carry_ns: vec![0.0; n],
        }
    }
}

impl Sampler for EngineSampler {
    fn name(&self) -> &str {
        "engine"
    }

    fn sample(&mut self, now_ms: f64, out: &mut Vec<Sample>) {
        let readings = self.counters.read_all();
        let busy: Vec<u64> = readings.iter().map(|r| r.busy_ns).collect();
        let wall_ns = self.prev.as_ref().map(|(t, _)| (now_ms - t) * 1e6);
        for (i, r) in readings.iter().enumerate() {
            let mut s = Sample::new(now_ms, Source::Engine).with_device(i as u32);
            s.set(metric::BYTES, r.bytes as f64);
            s.set(metric::PEAK_BYTES, r.peak_bytes as f64);
            if let (Some(wall), Some((_, prev))) = (wall_ns, &self.prev) {
                if wall > 0.0 {
                    let delta = r.busy_ns.saturating_sub(prev.get(i).copied().unwrap_or(0)) as f64;
                    // Spans are reported when they end, so one long op can land
                    // in a single tick; cap at 100% and carry the rest forward
                    // so the mean over the run stays exact.
                    let pending = delta + self.carry_ns[i];
                    let shown = pending.min(wall);
                    self.carry_ns[i] = pending - shown;
                    s.set(metric::BUSY_PCT, 100.0 * shown / wall);
                }
            }
            out.push(s);
        }
        self.prev = Some((now_ms, busy));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn busy_of(out: &[Sample], dev: u32) -> Option<f64> {
        out.iter()
            .find(|s| s.device == Some(dev))
            .and_then(|s| s.get(metric::BUSY_PCT))
    }

    #[test]
    fn counters_track_bytes_and_peak() {
        let c = DeviceCounters::new(2);
        c.set_bytes(0, 100);
        c.set_bytes(0, 300);
        c.set_bytes(0, 50);
        c.add_busy(1, 7);
        c.add_busy(1, 3);
        assert_eq!(
            c.read(0),
            Some(DeviceReading {
                busy_ns: 0,
                bytes: 50,
                peak_bytes: 300
            })
        );
        assert_eq!(c.read(1).map(|r| r.busy_ns), Some(10));
        c.reset_peak(0);
        assert_eq!(c.read(0).map(|r| r.peak_bytes), Some(50));
        c.raise_peak(0, 40);
        assert_eq!(c.read(0).map(|r| r.peak_bytes), Some(50));
        c.raise_peak(0, 900);
        assert_eq!(c.read(0).map(|r| (r.bytes, r.peak_bytes)), Some((50, 900)));
        assert_eq!(c.read(2), None);
    }

    #[test]
    fn busy_fraction_from_deltas_over_wall_time() {
        let c = DeviceCounters::new_shared(2);
        let mut s = EngineSampler::new(Arc::clone(&c));
        let mut out = Vec::new();
        s.sample(0.0, &mut out);
        // First tick: bytes, but no rate yet.
        assert_eq!(out.len(), 2);
        assert_eq!(busy_of(&out, 0), None);

        c.add_busy(0, 25_000_000); // 25 ms of a 100 ms tick
        c.add_busy(1, 100_000_000);
        c.set_bytes(1, 4096);
        out.clear();
        s.sample(100.0, &mut out);
        assert_eq!(busy_of(&out, 0), Some(25.0));
        assert_eq!(busy_of(&out, 1), Some(100.0));
        assert_eq!(out[1].get(metric::BYTES), Some(4096.0));
        assert_eq!(out[1].get(metric::PEAK_BYTES), Some(4096.0));
    }

    #[test]
    fn long_span_is_spread_over_later_ticks() {
        let c = DeviceCounters::new_shared(1);
        let mut s = EngineSampler::new(Arc::clone(&c));
        let mut out = Vec::new();
        s.sample(0.0, &mut out);
        c.add_busy(0, 250_000_000); // one 250 ms op reported at its end
        let mut seen = Vec::new();
        for t in [100.0, 200.0, 300.0, 400.0] {
            out.clear();
            s.sample(t, &mut out);
            seen.push(busy_of(&out, 0).unwrap());
        }
        assert_eq!(seen, vec![100.0, 100.0, 50.0, 0.0]);
    }
}
