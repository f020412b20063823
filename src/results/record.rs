//! What a finished trial leaves behind: the journal's record types, shared by the
//! executor (which writes them) and the report (which is built from them).
//!
//! The journal's first line is a `Header` holding the spec, so `tune report DIR` can
//! rebuild a report from `journal.jsonl` alone; every later line is one `Trial`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::engine::autotune::AlgoChoice;
use crate::engine::parallel::Imbalance;
use crate::engine::train::{Phases, RunSummary};
use crate::knobs::Knobs;
use crate::results::model::TimelineSample;
use crate::spec::Spec;

/// How a trial ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Ok,
    /// Loss became non-finite.
    Diverged,
    /// Panic, abort, signal, or a nonzero exit without a result.
    Crashed,
    /// Ran past the per-trial time limit and was killed.
    Timeout,
    /// Exceeded the per-trial memory cap.
    Oom,
    /// The engine does not implement this configuration (yet) on this machine.
    Unsupported,
    /// Refused as invalid, or a runtime error that is not one of the above.
    Failed,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Diverged => "diverged",
            Status::Crashed => "crashed",
            Status::Timeout => "timeout",
            Status::Oom => "oom",
            Status::Unsupported => "unsupported",
            Status::Failed => "failed",
        }
    }
}

/// One measured run of a configuration.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Repeat {
    /// Wall time of every step in seconds, warm-up included.
    pub step_times: Vec<f64>,
    /// Steps the run itself excluded as warm-up.
    pub warmup: usize,
    pub samples_per_step: f64,
    /// The run's own median figure after warm-up (0 when not measurable).
    pub samples_per_s: f64,
    pub losses: Vec<f32>,
    pub phases_mean: Phases,
    pub peak_bytes: BTreeMap<String, u64>,
    pub peak_total_bytes: u64,
    pub accuracy: Option<f64>,
    /// Knobs that do not apply on this backend, with the reason.
    #[serde(default)]
    pub not_applicable: BTreeMap<String, String>,
    #[serde(default)]
    pub backend: String,
    pub wall_s: f64,
    /// The algorithm each (op, shape, dtype) key ran with (autotune or heuristic).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub algorithms: Vec<AlgoChoice>,
    /// Steps whose update the fp16 loss scaler skipped.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped_steps: Vec<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss_scale_final: Option<f32>,
    /// max/mean over the devices of busy fraction and peak bytes (engine runs).
    #[serde(default)]
    pub imbalance: Option<Imbalance>,
    /// Per device: how busy it was and its peak memory.
    #[serde(default)]
    pub devices: Vec<DeviceStats>,
}

/// One device during one repeat.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DeviceStats {
    /// "cpu:0", "cuda:1", ...
    pub device: String,
    /// Share of the measured steps' wall time the device was computing, 0..=1.
    pub busy_share: Option<f64>,
    pub peak_bytes: Option<u64>,
    /// Share of the measured steps' wall time spent in communication, 0..=1.
    pub comm_share: Option<f64>,
    /// DDP: share of the all-reduce time hidden behind backward.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comm_overlap: Option<f64>,
}

impl DeviceStats {
    /// The one device of a single-device run, from its step phases: the device computes
    /// during zero-grad, forward, backward and the optimizer step, and idles while the
    /// step waits for data or a copy. A run that reports its own per-device counters
    /// (multi-device engines) should be taken as it reports them instead.
    pub fn single_from_phases(s: &RunSummary) -> DeviceStats {
        let p = &s.phases_mean;
        let measured = s.step_times.get(s.warmup..).unwrap_or(&[]);
        let step = if measured.is_empty() {
            f64::NAN
        } else {
            measured.iter().sum::<f64>() / measured.len() as f64
        };
        let share = |v: f64| (step > 0.0 && v.is_finite()).then(|| (v / step).clamp(0.0, 1.0));
        DeviceStats {
            device: format!(
                "{}:0",
                if s.backend.is_empty() {
                    "cpu"
                } else {
                    &s.backend
                }
            ),
            busy_share: share(p.zero_grad + p.forward + p.backward + p.optimizer),
            peak_bytes: Some(s.peak_total_bytes),
            comm_share: share(p.comm).filter(|c| *c > 0.0),
            comm_overlap: None,
        }
    }

    /// The devices of a run that measured its own per-device counters.
    pub fn from_engine(s: &RunSummary) -> Vec<DeviceStats> {
        let backend = if s.backend.is_empty() {
            "cpu"
        } else {
            &s.backend
        };
        s.devices
            .iter()
            .map(|d| DeviceStats {
                device: format!("{backend}:{}", d.index),
                busy_share: d.busy_fraction.is_finite().then_some(d.busy_fraction),
                peak_bytes: Some(d.peak_bytes),
                comm_share: (d.comm_fraction.is_finite() && d.comm_fraction > 0.0)
                    .then_some(d.comm_fraction),
                comm_overlap: d.comm_overlap,
            })
            .collect()
    }
}

impl Repeat {
    pub fn from_summary(s: &RunSummary) -> Repeat {
        Repeat {
            step_times: s.step_times.clone(),
            warmup: s.warmup,
            samples_per_step: s.samples_per_step as f64,
            samples_per_s: finite_or_zero(s.samples_per_s),
            // JSON has no NaN; a non-finite loss only reaches here from a diverged run.
            losses: s
                .losses
                .iter()
                .map(|l| if l.is_finite() { *l } else { f32::MAX })
                .collect(),
            phases_mean: s.phases_mean,
            peak_bytes: s.peak_bytes.clone(),
            peak_total_bytes: s.peak_total_bytes,
            accuracy: s.accuracy.filter(|a| a.is_finite()),
            not_applicable: s.not_applicable.clone(),
            backend: s.backend.clone(),
            wall_s: finite_or_zero(s.wall_s),
            algorithms: s.algorithms.clone(),
            skipped_steps: s.skipped_steps.clone(),
            loss_scale_final: s.loss_scale_final,
            devices: if s.devices.is_empty() {
                vec![DeviceStats::single_from_phases(s)]
            } else {
                DeviceStats::from_engine(s)
            },
            imbalance: s.imbalance,
        }
    }
}

pub fn finite_or_zero(x: f64) -> f64 {
    if x.is_finite() {
        x
    } else {
        0.0
    }
}

/// One configuration's result: all its repeats, or the failure that stopped them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrialRecord {
    pub id: String,
    pub label: String,
    pub knobs: Knobs,
    /// Halving round (0 for the other strategies); a configuration has one record per
    /// round it took part in.
    #[serde(default)]
    pub round: usize,
    /// Measured steps per repeat in this round (warm-up excluded).
    pub steps: usize,
    pub status: Status,
    pub error: Option<String>,
    /// Repeats that completed; a failed trial may still have some.
    pub repeats: Vec<Repeat>,
    /// Device samples taken while the trial ran, `t_s` from the trial's start.
    #[serde(default)]
    pub timeline: Vec<TimelineSample>,
}

/// A journal line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Record {
    Header { tune_version: String, spec: Spec },
    Trial(TrialRecord),
}
