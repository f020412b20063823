//! What a finished trial leaves behind: the journal's record types, shared by the
//! executor (which writes them) and the report (which is built from them).
//!
//! The journal's first line is a `Header` holding the spec, so `tune report DIR` can
//! rebuild a report from `journal.jsonl` alone; every later line is one `Trial`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::engine::autotune::AlgoChoice;
use crate::engine::parallel::{DeviceSummary, Imbalance};
use crate::engine::train::{Phases, RunSummary};
use crate::knobs::Knobs;
use crate::runner::spec::Spec;

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
    /// Per device: busy fraction, peak bytes, time in communication (engine runs).
    #[serde(default)]
    pub devices: Vec<DeviceSummary>,
    /// max/mean over the devices of busy fraction and peak bytes.
    #[serde(default)]
    pub imbalance: Option<Imbalance>,
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
            devices: s.devices.clone(),
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
}

/// A journal line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Record {
    Header { tune_version: String, spec: Spec },
    Trial(TrialRecord),
}
