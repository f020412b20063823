//! The live view of `tune watch` as plain text lines (one per display period), and the
//! `--json` stream (one sample per line). Both only format `model` data.

use std::fmt::Write as _;

use tune_probes::engine::metric as engine;
use tune_probes::host::metric as host;
use tune_probes::nvml::metric as gpu;
use tune_probes::{Sample, Source};

use super::model::{group, DeviceSeries};

pub fn fmt_bytes(b: f64) -> String {
    const MIB: f64 = 1048576.0;
    if b >= 1024.0 * MIB {
        format!("{:.2} GiB", b / (1024.0 * MIB))
    } else {
        format!("{:.1} MiB", b / MIB)
    }
}

fn mean(d: &DeviceSeries, metric: &str) -> Option<f64> {
    d.stats(metric).map(|s| s.mean)
}

/// One device's part of a line, from the samples of one period: rates as means over the
/// period, sizes as the latest value. `None` for devices the line leaves out (cores and
/// per-process GPU entries; the report has them).
pub fn segment(d: &DeviceSeries) -> Option<String> {
    let mut s = d.label();
    let mut put = |text: String| {
        s.push(' ');
        s.push_str(&text);
    };
    match d.id.source {
        Source::Host => put(format!("cpu {:.0}%", mean(d, host::CPU_UTIL_PCT)?)),
        Source::Tree => {
            if let Some(c) = mean(d, host::TREE_CPU_PCT) {
                put(format!("cpu {c:.0}%"));
            }
            if let Some(r) = d.latest(host::TREE_RSS_BYTES) {
                put(format!("rss {}", fmt_bytes(r)));
            }
            if let Some(n) = d.latest(host::TREE_PROCS) {
                put(format!("{n:.0} procs"));
            }
        }
        Source::Gpu => {
            if let Some(u) = mean(d, gpu::UTIL_GPU_PCT) {
                put(format!("util {u:.0}%"));
            }
            match (d.latest(gpu::MEM_USED_BYTES), d.mem_total()) {
                (Some(u), Some(t)) => put(format!("mem {}/{}", fmt_bytes(u), fmt_bytes(t))),
                (Some(u), None) => put(format!("mem {}", fmt_bytes(u))),
                _ => {}
            }
            if let Some(p) = mean(d, gpu::POWER_W) {
                put(format!("{p:.0} W"));
            }
            if let Some(c) = d.latest(gpu::SM_CLOCK_MHZ) {
                put(format!("{c:.0} MHz"));
            }
            if let Some(t) = d.latest(gpu::TEMP_C) {
                put(format!("{t:.0} C"));
            }
        }
        Source::Engine => {
            if let Some(b) = mean(d, engine::BUSY_PCT) {
                put(format!("busy {b:.0}%"));
            }
            if let Some(b) = d.latest(engine::BYTES) {
                put(fmt_bytes(b));
            }
        }
        Source::Core | Source::GpuProcess => return None,
    }
    Some(s)
}

/// The plain line for the samples of one period, or `None` when they hold nothing to show.
pub fn line(elapsed_s: f64, samples: &[Sample]) -> Option<String> {
    let parts: Vec<String> = group(samples).iter().filter_map(segment).collect();
    if parts.is_empty() {
        return None;
    }
    let mut out = String::new();
    let _ = write!(out, "[{elapsed_s:7.1}s] {}", parts.join(" | "));
    Some(out)
}

/// One JSON object per sample, newline-terminated.
pub fn json_lines(samples: &[Sample]) -> String {
    let mut out = String::new();
    for s in samples {
        // A Sample holds only strings and finite numbers, so encoding cannot fail.
        if let Ok(j) = serde_json::to_string(s) {
            out.push_str(&j);
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::watch::model::tests::sample;

    #[test]
    fn line_shows_tree_host_gpu_and_engine_but_not_cores() {
        let s = vec![
            sample(0.0, Source::Host, None, None, &[("cpu_util_pct", 40.0)]),
            sample(100.0, Source::Host, None, None, &[("cpu_util_pct", 60.0)]),
            sample(
                100.0,
                Source::Core,
                Some(0),
                None,
                &[("cpu_util_pct", 99.0)],
            ),
            sample(
                100.0,
                Source::Tree,
                None,
                Some(42),
                &[
                    ("cpu_pct", 180.0),
                    ("rss_bytes", 3.0 * 1048576.0),
                    ("procs", 2.0),
                ],
            ),
            sample(
                100.0,
                Source::Gpu,
                Some(0),
                None,
                &[
                    ("util_gpu_pct", 87.0),
                    ("mem_used_bytes", 2.0 * 1073741824.0),
                    ("mem_total_bytes", 80.0 * 1073741824.0),
                    ("power_w", 301.4),
                ],
            ),
            sample(100.0, Source::Engine, Some(1), None, &[("busy_pct", 12.0)]),
        ];
        let l = line(1.0, &s).unwrap();
        assert_eq!(
            l,
            "[    1.0s] host cpu 50% | proc 42 cpu 180% rss 3.0 MiB 2 procs | \
             gpu0 util 87% mem 2.00 GiB/80.00 GiB 301 W | engine1 busy 12%"
        );
        // Only per-core samples: nothing to show.
        assert!(line(0.0, &s[2..3]).is_none());
    }

    #[test]
    fn json_lines_roundtrip() {
        let s = vec![
            sample(0.0, Source::Tree, None, Some(42), &[("rss_bytes", 1.0)]),
            sample(1.0, Source::Gpu, Some(0), None, &[("util_gpu_pct", 5.0)]),
        ];
        let text = json_lines(&s);
        let back: Vec<Sample> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(back, s);
    }
}
