//! What a finished trial leaves behind: the journal's record types, shared by the
//! executor (which writes them) and the report (which is built from them).
//!
//! The journal's first line is a `Header` holding the spec, so `tune report DIR` can
//! rebuild a report from `journal.jsonl` alone; every later line is one `Trial`.

use serde::{Deserialize, Serialize};

use serde_json::Value;

use crate::engine::parallel::DeviceSummary;
use crate::engine::train::RunSummary;
use crate::knobs::Knobs;
use crate::results::hardware::RepeatHardware;
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

/// One measured run of a configuration: the engine's own summary, embedded as it is
/// (schema 2.0). `clean` is the only thing the record does to it: JSON has no NaN, so
/// non-finite figures are replaced before the summary is written.
pub type Repeat = RunSummary;

/// Largest magnitude of a figure in a record. Every sum over a run's steps, product of
/// two figures and ratio of two stays finite within it, so nothing built from records
/// (statistics, the report) becomes infinite: JSON has no infinity, serde writes it as
/// `null`, and readers refuse a `null` where they need a number (#27).
pub const MAX_FIGURE: f64 = 1e30;
/// Smallest positive figure that may divide (a step time, a throughput): its reciprocal
/// is at most `MAX_FIGURE`.
pub const MIN_DIVISOR: f64 = 1.0 / MAX_FIGURE;

/// `x` when it is in `0..=MAX_FIGURE`, else 0 (unknown).
pub fn figure(x: f64) -> f64 {
    if (0.0..=MAX_FIGURE).contains(&x) {
        x
    } else {
        0.0
    }
}

/// Whether `x` can divide: in `MIN_DIVISOR..=MAX_FIGURE`.
pub fn divisor(x: f64) -> bool {
    (MIN_DIVISOR..=MAX_FIGURE).contains(&x)
}

/// The summary as the record stores it: a non-finite loss (only a diverged run has one)
/// becomes `f32::MAX`; a figure outside `0..=MAX_FIGURE` becomes 0 (unknown) and a step
/// time or autotune timing outside it is dropped, so the line reads back and nothing
/// built from it overflows. The runner passes every repeat of every executor through
/// this before it is journaled, and every journal line read is passed through it again
/// (an older tune or an edited file may hold anything).
pub fn clean(mut s: RunSummary) -> Repeat {
    let loss = |l: f32| if l.is_finite() { l } else { f32::MAX };
    s.losses.iter_mut().for_each(|l| *l = loss(*l));
    s.final_loss = loss(s.final_loss);
    // Step times divide (throughput and its interval).
    s.step_times.retain(|t| divisor(*t));
    let p = &mut s.phases_mean;
    for v in [
        &mut p.data_wait,
        &mut p.h2d,
        &mut p.zero_grad,
        &mut p.forward,
        &mut p.backward,
        &mut p.recompute,
        &mut p.comm,
        &mut p.optimizer,
    ] {
        *v = figure(*v);
    }
    for a in &mut s.algorithms {
        a.timings_ms.retain(|_, ms| divisor(*ms));
    }
    if !divisor(s.samples_per_s) {
        s.samples_per_s = 0.0;
    }
    s.step_ms_median = figure(s.step_ms_median);
    s.wall_s = figure(s.wall_s);
    s.accuracy = s.accuracy.filter(|a| (0.0..=1.0).contains(a));
    s.loss_scale_final = s.loss_scale_final.filter(|v| v.is_finite());
    s.compile_s = s.compile_s.filter(|v| (0.0..=MAX_FIGURE).contains(v));
    for d in &mut s.devices {
        d.busy_s = figure(d.busy_s);
        d.busy_fraction = figure(d.busy_fraction);
        d.comm_s = figure(d.comm_s);
        d.comm_fraction = figure(d.comm_fraction);
        d.comm_overlap = d.comm_overlap.filter(|v| (0.0..=MAX_FIGURE).contains(v));
    }
    if let Some(i) = &mut s.imbalance {
        i.busy = figure(i.busy);
        i.memory = figure(i.memory);
    }
    s
}

/// [`clean`] for every repeat of a trial, and its device samples kept within
/// `MAX_FIGURE` (a sample out of it is dropped).
pub fn clean_trial(t: &mut TrialRecord) {
    for r in &mut t.repeats {
        *r = clean(std::mem::take(r));
    }
    t.timeline
        .retain(|x| figure(x.t_s) == x.t_s && x.value.abs() <= MAX_FIGURE);
}

/// The record's reading of the engine's per-device figures: what the advisor and the
/// report ask of a device, derived from the one `DeviceSummary` rather than stored twice.
impl DeviceSummary {
    /// "cpu:0", "cuda:1", ...: the backend of the run and the device index.
    pub fn name(&self, backend: &str) -> String {
        let backend = if backend.is_empty() { "cpu" } else { backend };
        format!("{backend}:{}", self.index)
    }

    /// Share of the measured steps' wall time the device was working, 0..=1.
    pub fn busy_share(&self) -> Option<f64> {
        self.busy_fraction.is_finite().then_some(self.busy_fraction)
    }

    /// Peak bytes of the device's arena; None when unknown (a converted 1.x record).
    pub fn peak(&self) -> Option<u64> {
        (self.peak_bytes > 0).then_some(self.peak_bytes)
    }

    /// Share of the measured steps' wall time in communication; None when there was none.
    pub fn comm_share(&self) -> Option<f64> {
        (self.comm_fraction.is_finite() && self.comm_fraction > 0.0).then_some(self.comm_fraction)
    }
}

pub fn finite_or_zero(x: f64) -> f64 {
    if x.is_finite() {
        x
    } else {
        0.0
    }
}

/// Keeps the last record of each (id, round), in journal order: a confirmation killed
/// between its two journal lines wrote one of them twice before #27, and a trial counts
/// once.
pub fn last_of_each(trials: &mut Vec<TrialRecord>) {
    let mut seen = std::collections::HashSet::new();
    let mut keep: Vec<bool> = trials
        .iter()
        .rev()
        .map(|t| seen.insert((t.id.clone(), t.round)))
        .collect();
    keep.reverse();
    let mut flags = keep.into_iter();
    trials.retain(|_| flags.next().unwrap_or(true));
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
    /// Where each run went when a cluster ran it (`executor = "slurm"`): one entry per
    /// run that reached a node, in run order. Empty for local sweeps.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<NodeRun>,
    /// Per repeat (index-aligned with `repeats`): what the hardware did while it ran and
    /// the energy it drew. Empty when nothing was sampled (older journals, clusters).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hardware: Vec<RepeatHardware>,
}

/// The node one run of a trial ran on, and that node's environment fingerprint as the
/// run saw it, so repeats on different machines are never silently pooled.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeRun {
    /// Which run of the trial (0-based): repeat order.
    pub repeat: usize,
    /// The scheduler's job id.
    pub job_id: String,
    /// The node name the scheduler gave (`SLURMD_NODENAME`, else the job's node list).
    pub node: String,
    /// What the node said about itself; None when the run never reached its program.
    #[serde(default)]
    pub fingerprint: Option<NodeFingerprint>,
}

/// A node's hardware and driver, as its trial process read them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeFingerprint {
    pub hostname: String,
    pub cpu_model: String,
    pub cores: usize,
    /// GPU models NVML lists, in index order (empty when NVML is absent).
    #[serde(default)]
    pub gpus: Vec<String>,
    #[serde(default)]
    pub driver: Option<String>,
    /// Why there are no GPU facts, when there are none.
    #[serde(default)]
    pub gpu_notice: Option<String>,
}

impl NodeFingerprint {
    /// What makes two nodes' measurements comparable: the hardware and driver, not the
    /// name.
    pub fn node_type(&self) -> String {
        let gpus = if self.gpus.is_empty() {
            "no GPU".to_string()
        } else {
            self.gpus.join(", ")
        };
        match &self.driver {
            Some(d) => format!("{} x{} / {gpus} (driver {d})", self.cpu_model, self.cores),
            None => format!("{} x{} / {gpus}", self.cpu_model, self.cores),
        }
    }
}

/// A run handed to a scheduler and not yet finished: journaled when it is submitted, so
/// a resumed sweep follows the job instead of submitting it again.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Submission {
    pub id: String,
    pub round: usize,
    pub repeat: usize,
    pub job_id: String,
}

/// One finished repeat of a trial that has more to run, journaled as it ends so that a
/// sweep killed in a later repeat loses only that one (`--resume` goes on from the next).
/// The trial's own line, written when its last repeat ends, holds every repeat again.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RepeatRecord {
    pub id: String,
    pub round: usize,
    /// Which repeat of the trial (0-based).
    pub index: usize,
    pub run: Repeat,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<NodeRun>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hardware: Option<RepeatHardware>,
}

/// The version of the journal's line format, written into every line; a line without
/// one is 1.x and is converted on read (`upgrade`). Same meaning as report.json's.
pub const RECORD_VERSION: &str = super::schema::SCHEMA_VERSION;

/// A journal line.
#[derive(Clone, Debug, PartialEq)]
// One record exists at a time (a line being written or read): boxing the header's spec
// would save nothing worth the indirection.
#[allow(clippy::large_enum_variant)]
pub enum Record {
    Header { tune_version: String, spec: Spec },
    Trial(TrialRecord),
    Submitted(Submission),
    Repeat(RepeatRecord),
}

/// The line as written: the record, its type tag and the format version.
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum LineOut<'a> {
    Header {
        schema_version: &'a str,
        tune_version: &'a str,
        spec: &'a Spec,
    },
    Trial {
        schema_version: &'a str,
        #[serde(flatten)]
        trial: &'a TrialRecord,
    },
    Submitted {
        schema_version: &'a str,
        #[serde(flatten)]
        job: &'a Submission,
    },
    Repeat {
        schema_version: &'a str,
        #[serde(flatten)]
        done: &'a RepeatRecord,
    },
}

/// The line as read, once converted to the current version.
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[allow(clippy::large_enum_variant)]
enum LineIn {
    Header { tune_version: String, spec: Spec },
    Trial(TrialRecord),
    Submitted(Submission),
    Repeat(RepeatRecord),
}

impl Serialize for Record {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match self {
            Record::Header { tune_version, spec } => LineOut::Header {
                schema_version: RECORD_VERSION,
                tune_version,
                spec,
            },
            Record::Trial(trial) => LineOut::Trial {
                schema_version: RECORD_VERSION,
                trial,
            },
            Record::Submitted(job) => LineOut::Submitted {
                schema_version: RECORD_VERSION,
                job,
            },
            Record::Repeat(done) => LineOut::Repeat {
                schema_version: RECORD_VERSION,
                done,
            },
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for Record {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        use serde::de::Error as _;
        let mut v = Value::deserialize(d)?;
        super::upgrade::record(&mut v).map_err(D::Error::custom)?;
        // What a line holds is cleaned as a fresh repeat is: whatever wrote it, nothing
        // built from it can overflow.
        Ok(match serde_json::from_value(v).map_err(D::Error::custom)? {
            LineIn::Header { tune_version, spec } => Record::Header { tune_version, spec },
            LineIn::Trial(mut t) => {
                clean_trial(&mut t);
                Record::Trial(t)
            }
            LineIn::Submitted(j) => Record::Submitted(j),
            LineIn::Repeat(mut r) => {
                r.run = clean(r.run);
                Record::Repeat(r)
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    proptest! {
        /// `tune report DIR` rebuilds a report from the journal, and it must equal the
        /// one written from memory: every measured f64 has to come back bit for bit.
        #[test]
        fn every_finite_f64_comes_back_from_json_bit_for_bit(x in any::<f64>()) {
            prop_assume!(x.is_finite());
            let text = serde_json::to_string(&x).unwrap();
            let back: f64 = serde_json::from_str(&text).unwrap();
            prop_assert_eq!(back.to_bits(), x.to_bits(), "{} read back as {}", text, back);
        }
    }
}
