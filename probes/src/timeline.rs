//! The shared timeline: a bounded ring of samples on one monotonic clock.

use std::collections::{BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::overhead::Overhead;
use crate::sample::Sample;
use crate::series::{self, SeriesKey, SeriesSummary};

/// 10 Hz: fine enough to see step-level stalls, cheap enough to leave on.
pub const DEFAULT_INTERVAL: Duration = Duration::from_millis(100);

/// Enough for about an hour of a host with a few GPUs at 10 Hz; the oldest
/// samples go first when a run is longer.
pub const DEFAULT_CAPACITY: usize = 200_000;

/// Samples from every sampler, oldest first, bounded in memory.
#[derive(Debug)]
pub struct Timeline {
    origin: Instant,
    interval: Duration,
    capacity: usize,
    samples: VecDeque<Sample>,
    dropped: u64,
    overhead: Overhead,
}

impl Default for Timeline {
    fn default() -> Self {
        Timeline::new(DEFAULT_INTERVAL, DEFAULT_CAPACITY)
    }
}

impl Timeline {
    /// A timeline whose clock starts now. A capacity of 0 is raised to 1.
    pub fn new(interval: Duration, capacity: usize) -> Self {
        let capacity = capacity.max(1);
        Timeline {
            origin: Instant::now(),
            interval,
            capacity,
            // Grow lazily: most runs are far shorter than the capacity.
            samples: VecDeque::with_capacity(capacity.min(4096)),
            dropped: 0,
            overhead: Overhead::default(),
        }
    }

    pub fn origin(&self) -> Instant {
        self.origin
    }

    /// Milliseconds since the origin, the clock every sample's `t_ms` uses.
    pub fn now_ms(&self) -> f64 {
        self.ms_at(Instant::now())
    }

    pub fn ms_at(&self, at: Instant) -> f64 {
        at.saturating_duration_since(self.origin).as_secs_f64() * 1e3
    }

    pub fn interval(&self) -> Duration {
        self.interval
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn len(&self) -> usize {
        self.samples.len()
    }

    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// Samples pushed out by newer ones since the timeline began.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    pub fn push(&mut self, sample: Sample) {
        if self.samples.len() == self.capacity {
            self.samples.pop_front();
            self.dropped += 1;
        }
        self.samples.push_back(sample);
    }

    pub fn extend(&mut self, samples: impl IntoIterator<Item = Sample>) {
        for s in samples {
            self.push(s);
        }
    }

    pub fn samples(&self) -> impl Iterator<Item = &Sample> + Clone {
        self.samples.iter()
    }

    pub fn overhead(&self) -> &Overhead {
        &self.overhead
    }

    pub fn overhead_mut(&mut self) -> &mut Overhead {
        &mut self.overhead
    }

    pub fn series(&self, key: &SeriesKey) -> Vec<(f64, f64)> {
        series::series(self.samples(), key)
    }

    pub fn series_keys(&self) -> BTreeSet<SeriesKey> {
        series::series_keys(self.samples())
    }

    pub fn summarize(&self) -> Vec<SeriesSummary> {
        series::summarize(self.samples())
    }

    /// A copy of everything, for reports and for readers that must not hold the lock.
    pub fn snapshot(&self) -> TimelineSnapshot {
        TimelineSnapshot {
            interval_ms: self.interval.as_secs_f64() * 1e3,
            capacity: self.capacity,
            dropped: self.dropped,
            samples: self.samples.iter().cloned().collect(),
            overhead: self.overhead.clone(),
        }
    }

    /// Samples with `t_ms` strictly after `after_ms`, for incremental readers (TUI).
    pub fn samples_since(&self, after_ms: f64) -> Vec<Sample> {
        // Samples are pushed in time order, so scan back from the newest.
        let newer = self
            .samples
            .iter()
            .rev()
            .take_while(|s| s.t_ms > after_ms)
            .count();
        self.samples
            .iter()
            .skip(self.samples.len() - newer)
            .cloned()
            .collect()
    }
}

/// The serialisable form of a [`Timeline`], as stored in `report.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TimelineSnapshot {
    pub interval_ms: f64,
    pub capacity: usize,
    pub dropped: u64,
    pub samples: Vec<Sample>,
    pub overhead: Overhead,
}

impl TimelineSnapshot {
    pub fn series(&self, key: &SeriesKey) -> Vec<(f64, f64)> {
        series::series(&self.samples, key)
    }

    pub fn series_keys(&self) -> BTreeSet<SeriesKey> {
        series::series_keys(&self.samples)
    }

    pub fn summarize(&self) -> Vec<SeriesSummary> {
        series::summarize(&self.samples)
    }

    /// Mean sampling cost as a percent of the interval (see [`Overhead::duty_pct`]).
    pub fn overhead_duty_pct(&self) -> Option<f64> {
        self.overhead
            .duty_pct(Duration::from_secs_f64(self.interval_ms.max(0.0) / 1e3))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::Source;

    fn s(t: f64, v: f64) -> Sample {
        let mut s = Sample::new(t, Source::Host);
        s.set("cpu_util_pct", v);
        s
    }

    #[test]
    fn ring_drops_oldest_and_counts_them() {
        let mut tl = Timeline::new(DEFAULT_INTERVAL, 3);
        tl.extend((0..5).map(|i| s(i as f64, i as f64)));
        assert_eq!(tl.len(), 3);
        assert_eq!(tl.dropped(), 2);
        let ts: Vec<f64> = tl.samples().map(|s| s.t_ms).collect();
        assert_eq!(ts, vec![2.0, 3.0, 4.0]);
    }

    #[test]
    fn zero_capacity_keeps_the_newest() {
        let mut tl = Timeline::new(DEFAULT_INTERVAL, 0);
        tl.push(s(1.0, 1.0));
        tl.push(s(2.0, 2.0));
        assert_eq!(tl.len(), 1);
        assert_eq!(tl.dropped(), 1);
    }

    #[test]
    fn samples_since_returns_only_newer() {
        let mut tl = Timeline::default();
        tl.extend((0..5).map(|i| s(i as f64 * 100.0, 0.0)));
        let newer: Vec<f64> = tl.samples_since(200.0).iter().map(|s| s.t_ms).collect();
        assert_eq!(newer, vec![300.0, 400.0]);
        assert!(tl.samples_since(400.0).is_empty());
    }

    #[test]
    fn snapshot_roundtrips_through_json_and_keeps_series() {
        let mut tl = Timeline::new(Duration::from_millis(50), 10);
        tl.push(s(0.0, 10.0));
        let mut gpu = Sample::new(50.0, Source::Gpu).with_device(1);
        gpu.set("util_pct", 80.0);
        tl.push(gpu);
        tl.overhead_mut().tick.record(Duration::from_micros(500));

        let snap = tl.snapshot();
        let json = serde_json::to_string(&snap).unwrap();
        let back: TimelineSnapshot = serde_json::from_str(&json).unwrap();
        assert_eq!(back, snap);
        assert_eq!(back.interval_ms, 50.0);
        let key = SeriesKey::new(Source::Gpu, Some(1), "util_pct");
        assert_eq!(back.series(&key), vec![(50.0, 80.0)]);
        assert!((back.overhead_duty_pct().unwrap() - 1.0).abs() < 1e-9);
        // Absent device/pid stay out of the JSON rather than appearing as null.
        assert!(!json.contains("\"pid\""));
    }

    #[test]
    fn non_finite_values_are_not_recorded() {
        let mut x = Sample::new(0.0, Source::Host);
        x.set("a", f64::NAN);
        x.set("b", f64::INFINITY);
        assert!(x.metrics.is_empty());
    }
}
