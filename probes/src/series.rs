//! Slicing the flat list of samples into per-metric series, and summarising them.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::sample::{Sample, Source};

/// Names one series: a metric of one source, device and process.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct SeriesKey {
    pub source: Source,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    pub metric: String,
}

impl SeriesKey {
    pub fn new(source: Source, device: Option<u32>, metric: &str) -> Self {
        SeriesKey {
            source,
            device,
            pid: None,
            metric: metric.to_owned(),
        }
    }

    pub fn with_pid(mut self, pid: u32) -> Self {
        self.pid = Some(pid);
        self
    }

    fn matches(&self, s: &Sample) -> bool {
        s.source == self.source && s.device == self.device && s.pid == self.pid
    }
}

/// Summary of one series. Percentiles use the nearest-rank method.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SeriesStats {
    pub count: usize,
    pub mean: f64,
    pub min: f64,
    pub max: f64,
    pub p50: f64,
}

/// A series key with its summary, the form reports store.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SeriesSummary {
    pub key: SeriesKey,
    pub stats: SeriesStats,
}

/// The `(t_ms, value)` points of one series, in timeline order.
pub fn series<'a>(
    samples: impl IntoIterator<Item = &'a Sample>,
    key: &SeriesKey,
) -> Vec<(f64, f64)> {
    samples
        .into_iter()
        .filter(|s| key.matches(s))
        .filter_map(|s| s.get(&key.metric).map(|v| (s.t_ms, v)))
        .collect()
}

/// Every series present in the samples, sorted.
pub fn series_keys<'a>(samples: impl IntoIterator<Item = &'a Sample>) -> BTreeSet<SeriesKey> {
    let mut keys = BTreeSet::new();
    for s in samples {
        for metric in s.metrics.keys() {
            keys.insert(SeriesKey {
                source: s.source,
                device: s.device,
                pid: s.pid,
                metric: metric.clone(),
            });
        }
    }
    keys
}

/// Summary of the values, or `None` for an empty series (no reading is not a zero reading).
pub fn stats(values: impl IntoIterator<Item = f64>) -> Option<SeriesStats> {
    let mut v: Vec<f64> = values.into_iter().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let count = v.len();
    let mean = v.iter().sum::<f64>() / count as f64;
    Some(SeriesStats {
        count,
        mean,
        min: v[0],
        max: v[count - 1],
        p50: percentile_sorted(&v, 50.0),
    })
}

/// Nearest-rank percentile of already sorted, non-empty values.
fn percentile_sorted(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Summaries of every series in the samples.
pub fn summarize<'a, I>(samples: I) -> Vec<SeriesSummary>
where
    I: IntoIterator<Item = &'a Sample> + Clone,
{
    series_keys(samples.clone())
        .into_iter()
        .filter_map(|key| {
            let points = series(samples.clone(), &key);
            stats(points.into_iter().map(|(_, v)| v)).map(|stats| SeriesSummary { key, stats })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(t: f64, source: Source, dev: Option<u32>, metric: &str, v: f64) -> Sample {
        let mut s = Sample::new(t, source);
        s.device = dev;
        s.set(metric, v);
        s
    }

    #[test]
    fn series_selects_by_source_device_and_metric() {
        let samples = vec![
            sample(0.0, Source::Gpu, Some(0), "util_pct", 10.0),
            sample(0.0, Source::Gpu, Some(1), "util_pct", 90.0),
            sample(100.0, Source::Gpu, Some(0), "util_pct", 30.0),
            sample(100.0, Source::Engine, Some(0), "util_pct", 55.0),
        ];
        let key = SeriesKey::new(Source::Gpu, Some(0), "util_pct");
        assert_eq!(series(&samples, &key), vec![(0.0, 10.0), (100.0, 30.0)]);
        assert_eq!(series_keys(&samples).len(), 3);
    }

    #[test]
    fn stats_mean_max_median() {
        let s = stats([3.0, 1.0, 2.0, 10.0]).unwrap();
        assert_eq!(s.count, 4);
        assert_eq!(s.mean, 4.0);
        assert_eq!(s.min, 1.0);
        assert_eq!(s.max, 10.0);
        assert_eq!(s.p50, 2.0);
        assert_eq!(stats([5.0]).unwrap().p50, 5.0);
        assert!(stats(std::iter::empty()).is_none());
    }

    #[test]
    fn summarize_covers_every_series() {
        let samples = vec![
            sample(0.0, Source::Host, None, "cpu_util_pct", 20.0),
            sample(100.0, Source::Host, None, "cpu_util_pct", 40.0),
            sample(100.0, Source::Core, Some(1), "util_pct", 40.0),
        ];
        let sums = summarize(&samples);
        assert_eq!(sums.len(), 2);
        let host = sums.iter().find(|s| s.key.source == Source::Host).unwrap();
        assert_eq!(host.stats.mean, 30.0);
    }
}
