//! What sampling itself costs, so reports can state the profiler's overhead.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Running cost of one activity (a whole tick, or one sampler within it).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Cost {
    pub calls: u64,
    pub total_us: f64,
    pub max_us: f64,
}

impl Cost {
    pub fn record(&mut self, spent: Duration) {
        let us = spent.as_secs_f64() * 1e6;
        self.calls += 1;
        self.total_us += us;
        self.max_us = self.max_us.max(us);
    }

    /// Mean cost per call in µs; `None` before the first call.
    pub fn mean_us(&self) -> Option<f64> {
        (self.calls > 0).then(|| self.total_us / self.calls as f64)
    }
}

/// Cost of the sampling ticks, overall and per sampler.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Overhead {
    /// Whole ticks: every sampler plus pushing into the timeline.
    pub tick: Cost,
    /// Keyed by [`Sampler::name`](crate::Sampler::name).
    pub per_sampler: BTreeMap<String, Cost>,
    /// Ticks that started later than a full interval after they were due,
    /// because sampling took longer than the interval.
    pub late_ticks: u64,
    /// CPU time the sampling thread used over its life (user + system, from
    /// `/proc/thread-self/stat`, 10 ms resolution), written when it stops; unlike
    /// the tick costs above it does not grow when the machine is busy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_cpu_ms: Option<f64>,
}

impl Overhead {
    pub fn record_sampler(&mut self, name: &str, spent: Duration) {
        match self.per_sampler.get_mut(name) {
            Some(c) => c.record(spent),
            None => {
                let mut c = Cost::default();
                c.record(spent);
                self.per_sampler.insert(name.to_owned(), c);
            }
        }
    }

    /// Mean share of one core spent sampling, in percent of the interval.
    /// This is the sampling thread's duty cycle, an upper bound on what it
    /// takes from the workload on a busy machine.
    pub fn duty_pct(&self, interval: Duration) -> Option<f64> {
        let interval_us = interval.as_secs_f64() * 1e6;
        if interval_us <= 0.0 {
            return None;
        }
        self.tick.mean_us().map(|m| 100.0 * m / interval_us)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cost_mean_and_max() {
        let mut c = Cost::default();
        assert_eq!(c.mean_us(), None);
        c.record(Duration::from_micros(100));
        c.record(Duration::from_micros(300));
        assert_eq!(c.calls, 2);
        assert!((c.mean_us().unwrap() - 200.0).abs() < 1e-9);
        assert!((c.max_us - 300.0).abs() < 1e-9);
    }

    #[test]
    fn duty_is_share_of_interval() {
        let mut o = Overhead::default();
        o.tick.record(Duration::from_micros(1000));
        o.record_sampler("host", Duration::from_micros(1000));
        let d = o.duty_pct(Duration::from_millis(100)).unwrap();
        assert!((d - 1.0).abs() < 1e-9);
        assert_eq!(o.per_sampler["host"].calls, 1);
    }
}
