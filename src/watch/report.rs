//! The report `tune watch` writes at exit: `report.json` (same schema family as the sweep
//! report: `schema_version`, `environment`, `notes` and a `timeline` of
//! `{t_s, device, metric, value}` rows) and `summary.md`, each written atomically.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use serde::{Deserialize, Serialize};
use tune_probes::{GpuInfo, Sample, TimelineSnapshot};

use super::findings::WatchFinding;
use super::live::fmt_bytes;
use super::model::{DeviceId, DeviceMetrics};
use crate::error::{Error, Result};
use crate::report::markdown::{cell, code};
use crate::results::model::{Environment, TimelineSample, SCHEMA_VERSION};

pub const KIND: &str = "watch";
/// Points per series kept in `timeline`; longer series are averaged in equal buckets.
/// Summaries and findings use every sample.
pub const MAX_POINTS_PER_SERIES: usize = 1000;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WatchReport {
    /// "MAJOR.MINOR", shared with the sweep report.
    pub schema_version: String,
    /// Always "watch"; sweep reports have a `spec` instead.
    pub kind: String,
    pub environment: Environment,
    /// GPUs NVML reported; empty when none (see `notes` for why).
    pub gpus: Vec<GpuInfo>,
    pub target: TargetReport,
    pub duration_s: f64,
    pub sampling: Sampling,
    pub devices: Vec<DeviceMetrics>,
    pub findings: Vec<WatchFinding>,
    pub notes: Vec<String>,
    /// What the PyTorch hooks measured, when the command was a Python job that
    /// reported steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python: Option<crate::bridge::StepSummary>,
    /// Every step the hooks reported (each rank's under torchrun; step 0 is a process's
    /// first step, start-up and compilation), at most `timeline::MAX_STEPS` per rank:
    /// the timeline, the trace and `tune compare` read them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<crate::bridge::Step>,
    /// `--pid`: what sampling the process's Python stacks showed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stacks: Option<crate::bridge::StackSummary>,
    pub timeline: Vec<TimelineSample>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TargetReport {
    /// The command tune started, or null when it attached to `pid`.
    pub command: Option<Vec<String>>,
    /// Root of the watched process tree.
    pub pid: u32,
    /// The command's exit code (128 + signal when killed); null for an attached process.
    pub exit_code: Option<i32>,
    /// How it ended, in words.
    pub ended: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sampling {
    pub interval_ms: f64,
    /// Samplers' ticks.
    pub ticks: u64,
    pub samples: usize,
    /// Samples pushed out of the bounded timeline (summaries then cover the newest part).
    pub dropped: u64,
    /// Mean cost of one tick (every sampler), microseconds.
    pub tick_mean_us: Option<f64>,
    /// Mean tick cost as a share of the interval: the sampling thread's duty cycle.
    pub duty_pct: Option<f64>,
    /// Mean cost of each sampler per tick (`host`, `nvml`, `engine`), microseconds.
    pub sampler_mean_us: BTreeMap<String, f64>,
    /// Ticks that started more than an interval late because sampling overran.
    pub late_ticks: u64,
    /// CPU time the sampling thread used (10 ms resolution); null where unknown.
    pub thread_cpu_ms: Option<f64>,
    /// That CPU time as a share of one core over `ticks` intervals.
    pub thread_cpu_pct_of_core: Option<f64>,
}

impl Sampling {
    pub fn of(snap: &TimelineSnapshot) -> Sampling {
        Sampling {
            interval_ms: snap.interval_ms,
            ticks: snap.overhead.tick.calls,
            samples: snap.samples.len(),
            dropped: snap.dropped,
            tick_mean_us: snap.overhead.tick.mean_us(),
            duty_pct: snap.overhead_duty_pct(),
            sampler_mean_us: snap
                .overhead
                .per_sampler
                .iter()
                .filter_map(|(k, c)| c.mean_us().map(|m| (k.clone(), m)))
                .collect(),
            late_ticks: snap.overhead.late_ticks,
            thread_cpu_ms: snap.overhead.thread_cpu_ms,
            thread_cpu_pct_of_core: snap.overhead.thread_cpu_ms.and_then(|c| {
                let span_ms = snap.overhead.tick.calls as f64 * snap.interval_ms;
                (span_ms > 0.0).then(|| 100.0 * c / span_ms)
            }),
        }
    }
}

/// What sampling a training run found (`tune train --sample-interval`): the same
/// device summaries and findings as a watch report, without the timeline.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunSampled {
    pub sampling: Sampling,
    pub devices: Vec<DeviceMetrics>,
    pub findings: Vec<WatchFinding>,
    pub notes: Vec<String>,
}

impl RunSampled {
    pub fn of(snap: &TimelineSnapshot, tree: std::collections::BTreeSet<u32>) -> RunSampled {
        let series = super::model::group(&snap.samples);
        let ctx = super::findings::Context {
            tree,
            cores: crate::engine::train::default_threads(),
        };
        let mut notes = Vec::new();
        if let Some(n) = tune_probes::nvml_notice() {
            notes.push(n.to_string());
        }
        RunSampled {
            sampling: Sampling::of(snap),
            devices: super::model::summarize(&series),
            findings: super::findings::findings(&series, &ctx),
            notes,
        }
    }

    /// Plain lines: the sampling cost, one line per device (cores and GPU processes
    /// left out), the findings and notes.
    pub fn lines(&self) -> Vec<String> {
        let s = &self.sampling;
        let mut out = vec![format!(
            "sampled every {:.0} ms: {} ticks of {} wall time each; sampling thread CPU {}",
            s.interval_ms,
            s.ticks,
            s.tick_mean_us
                .map_or("–".into(), |u| format!("{:.2} ms", u / 1e3)),
            match (s.thread_cpu_ms, s.thread_cpu_pct_of_core) {
                (Some(c), Some(p)) => format!("{c:.0} ms ({p:.2}% of one core)"),
                _ => "unknown".into(),
            },
        )];
        for d in &self.devices {
            if matches!(
                d.id.source,
                tune_probes::Source::Core | tune_probes::Source::GpuProcess
            ) {
                continue;
            }
            let mut parts = Vec::new();
            if let Some(u) = d.metrics.get(d.id.util_metric()) {
                parts.push(format!(
                    "{} mean {:.0}% max {:.0}%",
                    d.id.util_metric(),
                    u.mean,
                    u.max
                ));
            }
            if let Some(m) = d.id.mem_metric().and_then(|m| d.metrics.get(m)) {
                parts.push(format!("memory peak {}", fmt_bytes(m.max)));
            }
            if !parts.is_empty() {
                out.push(format!("  {}: {}", d.device, parts.join(", ")));
            }
        }
        if self.findings.is_empty() {
            out.push("findings: none".into());
        }
        for f in &self.findings {
            out.push(format!(
                "finding: {}: {}",
                f.finding.title, f.finding.evidence
            ));
        }
        for n in &self.notes {
            out.push(format!("note: {n}"));
        }
        out
    }
}

/// The samples as `{t_s, device, metric, value}` rows, grouped per series in time order,
/// each series averaged down to at most `max_points` points.
pub fn timeline_rows(samples: &[Sample], max_points: usize) -> Vec<TimelineSample> {
    let mut series: BTreeMap<(DeviceId, &str), Vec<(f64, f64)>> = BTreeMap::new();
    for s in samples {
        for (m, &v) in &s.metrics {
            series
                .entry((DeviceId::of(s), m.as_str()))
                .or_default()
                .push((s.t_ms, v));
        }
    }
    let max_points = max_points.max(1);
    let mut rows = Vec::new();
    for ((id, metric), pts) in series {
        let bucket = pts.len().div_ceil(max_points);
        for chunk in pts.chunks(bucket) {
            let n = chunk.len() as f64;
            rows.push(TimelineSample {
                t_s: chunk.iter().map(|p| p.0).sum::<f64>() / n / 1e3,
                device: id.label(),
                metric: metric.to_string(),
                value: chunk.iter().map(|p| p.1).sum::<f64>() / n,
            });
        }
    }
    rows
}

impl WatchReport {
    pub fn to_json(&self) -> Result<String> {
        serde_json::to_string_pretty(self)
            .map_err(|e| Error::Runtime(format!("cannot encode the watch report: {e}")))
    }

    /// Reads a watch report back, refusing a newer major schema or another kind of report.
    pub fn load(path: &Path) -> Result<WatchReport> {
        let text = crate::fsio::read_text_limited(path, crate::fsio::MAX_INPUT_BYTES)?;
        let v: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| Error::format(path, format!("not a JSON report: {e}")))?;
        if v.get("kind").and_then(|k| k.as_str()) != Some(KIND) {
            return Err(Error::format(
                path,
                "not a tune watch report (no \"kind\": \"watch\")",
            ));
        }
        let major = |s: &str| s.split('.').next().and_then(|m| m.parse::<u64>().ok());
        let theirs = v
            .get("schema_version")
            .and_then(|s| s.as_str())
            .and_then(major);
        if theirs.is_none() || theirs > major(SCHEMA_VERSION) {
            return Err(Error::format(
                path,
                format!(
                    "schema_version is missing or newer than this tune reads ({SCHEMA_VERSION})"
                ),
            ));
        }
        serde_json::from_value(v)
            .map_err(|e| Error::format(path, format!("invalid watch report: {e}")))
    }

    pub fn markdown(&self) -> String {
        // Phases of at least half a percent, largest first.
        let shares = |m: &std::collections::BTreeMap<String, f64>| {
            let mut v: Vec<(&String, f64)> = m
                .iter()
                .map(|(k, x)| (k, *x))
                .filter(|(_, x)| *x >= 0.005)
                .collect();
            v.sort_by(|a, b| b.1.total_cmp(&a.1));
            let v: Vec<String> = v
                .iter()
                .map(|(k, x)| format!("{} {:.1}%", cell(k), x * 100.0))
                .collect();
            v.join(", ")
        };
        let mut s = String::new();
        let what = match &self.target.command {
            Some(c) => code(&c.join(" ")),
            None => format!("pid {}", self.target.pid),
        };
        let _ = writeln!(s, "# tune watch: {what}\n");
        let e = &self.environment;
        let _ = writeln!(
            s,
            "{} on {} ({} cores), tune {}. Watched for {:.1} s, sampled every {:.0} ms; \
             the process {}.\n",
            cell(&e.host),
            cell(&e.cpu_model),
            e.cores,
            cell(&e.tune_version),
            self.duration_s,
            self.sampling.interval_ms,
            cell(&self.target.ended)
        );
        let _ = writeln!(s, "## Findings\n");
        if self.findings.is_empty() {
            let _ = writeln!(
                s,
                "None: no imbalance, starvation, throttling or GPU sharing in the samples.\n"
            );
        }
        for f in &self.findings {
            let _ = writeln!(
                s,
                "- **{}**: {}. {}\n",
                cell(&f.finding.title),
                cell(&f.finding.evidence),
                cell(&f.hint)
            );
        }
        if let Some(p) = &self.python {
            let _ = writeln!(s, "## PyTorch steps\n");
            let mut line = format!(
                "{} steps ({} after warm-up), median step {:.1} ms",
                p.steps, p.steady_steps, p.median_step_ms
            );
            match (p.samples_per_s, p.steps_per_s) {
                (Some(x), _) => line.push_str(&format!(", {x:.1} samples/s")),
                (None, Some(x)) => line.push_str(&format!(", {x:.2} steps/s (batch size unknown)")),
                _ => {}
            }
            if let Some(t) = p.tokens_per_s {
                line.push_str(&format!(", {t:.0} tokens/s"));
            }
            if let Some(f) = p.first_step_ms {
                line.push_str(&format!(
                    "; the first step (start-up, compilation) took {f:.1} ms, kept out of these figures"
                ));
            }
            let _ = writeln!(s, "{line}.\n");
            let _ = writeln!(s, "Share of the step: {}.\n", shares(&p.phase_share));
            let who = match p.processes {
                Some(n) => {
                    let _ = writeln!(
                        s,
                        "{n} training processes that Python's multiprocessing started, with \
                         no torch.distributed rank: the figures above are the first's, each \
                         one's below; the job trains their sum.\n"
                    );
                    "process"
                }
                None => "rank",
            };
            for k in &p.ranks {
                let _ = writeln!(
                    s,
                    "- {who} {}: {} steps, median {:.1} ms ({:.1} ms outside backward); {}",
                    k.rank,
                    k.steps,
                    k.median_step_ms,
                    k.outside_backward_ms,
                    shares(&k.phase_share)
                );
            }
            if !p.ranks.is_empty() {
                s.push('\n');
            }
        }
        let _ = writeln!(s, "## Devices\n");
        let _ = writeln!(
            s,
            "| device | samples | utilisation mean / max | memory peak |"
        );
        let _ = writeln!(s, "|---|---:|---:|---:|");
        for d in &self.devices {
            let util = d.metrics.get(d.id.util_metric());
            let mem = d.id.mem_metric().and_then(|m| d.metrics.get(m));
            let count = d.metrics.values().map(|m| m.count).max().unwrap_or(0);
            let _ = writeln!(
                s,
                "| {} | {count} | {} | {} |",
                cell(&d.device),
                util.map_or("–".into(), |u| format!("{:.0}% / {:.0}%", u.mean, u.max)),
                mem.map_or("–".into(), |m| fmt_bytes(m.max)),
            );
        }
        if !self.notes.is_empty() {
            let _ = writeln!(s, "\n## Notes\n");
            for n in &self.notes {
                let _ = writeln!(s, "- {}", cell(n));
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::watch::model::tests::sample;
    use tune_probes::Source;

    #[test]
    fn timeline_rows_keep_short_series_and_average_long_ones() {
        let mut s: Vec<Sample> = (0..10)
            .map(|t| {
                sample(
                    t as f64 * 100.0,
                    Source::Gpu,
                    Some(0),
                    None,
                    &[("util_gpu_pct", t as f64)],
                )
            })
            .collect();
        s.push(sample(
            0.0,
            Source::Host,
            None,
            None,
            &[("cpu_util_pct", 5.0)],
        ));
        let rows = timeline_rows(&s, 1000);
        assert_eq!(rows.len(), 11);
        assert_eq!(rows[0].device, "host");
        let rows = timeline_rows(&s, 5);
        let gpu: Vec<(f64, f64)> = rows
            .iter()
            .filter(|r| r.device == "gpu0")
            .map(|r| (r.t_s, r.value))
            .collect();
        assert_eq!(gpu.len(), 5);
        assert_eq!(gpu[0], (0.05, 0.5));
        assert_eq!(gpu[4], (0.85, 8.5));
    }
}
