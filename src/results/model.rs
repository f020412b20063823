//! The `Report` type: the JSON schema of `report.json`. Every field here is part of the
//! schema; bump `SCHEMA_VERSION`'s minor for additions and its major for anything a
//! reader of the previous version would misread.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::finding::Finding;
use super::upgrade;
use crate::engine::parallel::DeviceSummary;
use crate::error::{Error, Result};
use crate::fsio::{read_text_limited, MAX_INPUT_BYTES};
use crate::knobs::Knobs;
use crate::results::hardware::RepeatHardware;
use crate::results::record::{NodeRun, Repeat, Status};
use crate::spec::plan::Skipped;
use crate::spec::Change;
use crate::spec::Spec;

pub use super::schema::SCHEMA_VERSION;

/// Timeline metric on `host`, derived per tick by the sweep's sampler: the share of all
/// cores (0..=100) busy outside the sweep's process tree, i.e. other processes competing
/// with the trial for the machine.
pub const FOREIGN_CPU_PCT: &str = "foreign_cpu_pct";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// "MAJOR.MINOR"; readers refuse a newer major.
    pub schema_version: String,
    pub environment: Environment,
    pub spec: Spec,
    /// In plan order, baseline first.
    pub trials: Vec<TrialReport>,
    /// Combinations the plan left out because their knobs contradict each other.
    #[serde(default)]
    pub skipped: Vec<Skipped>,
    /// Id of the baseline trial.
    pub baseline: Option<String>,
    /// Id of the fastest successful trial.
    pub best: Option<String>,
    pub recommendations: Vec<Recommendation>,
    /// The recommended combination measured once more, and whether it delivered.
    #[serde(default)]
    pub confirmation: Option<Confirmation>,
    /// Device samples over time, trials laid end to end (see `trial_spans`).
    pub timeline: Vec<TimelineSample>,
    /// Where each trial sits on the timeline.
    #[serde(default)]
    pub trial_spans: Vec<TrialSpan>,
    /// Plain-language remarks about the sweep as a whole (e.g. how many trials failed).
    #[serde(default)]
    pub notes: Vec<String>,
    /// Spread between identical repeats over the whole sweep (schema 1.1); None when no
    /// trial has two successful repeats, or the report predates it.
    #[serde(default)]
    pub noise_floor: Option<NoiseFloor>,
    /// The baseline's runs interleaved through the plan (not the first, which is a plan
    /// trial, nor the confirmation's re-runs): drift is measured across them (#31).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub baseline_runs: Vec<TrialReport>,
    /// How far the baseline's throughput moved over the sweep, across all its runs; None
    /// with fewer than two successful baseline runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift: Option<Drift>,
    /// How the sweep used its `[search] budget_s`, and what it left out; None without a
    /// budget (#31).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<BudgetUse>,
}

/// How a sweep used its budget, for the report (`Report::budget`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BudgetUse {
    /// `[search] budget_s`.
    pub budget_s: u64,
    /// Seconds the sweep's runs took.
    pub used_s: f64,
    /// What the budget left out ("2 repeats of the plan", "the confirmation"); empty when
    /// everything ran.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_run: Vec<String>,
    /// The run under way when the budget ended, stopped then ("'num_workers=2' (repeat 2
    /// of 3), 41.3 s in"): a run cut short is not used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
    /// Seconds that stopped run had taken: time spent, though nothing of it is used.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub stopped_s: f64,
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

impl BudgetUse {
    /// Whether the budget ended the sweep before everything ran.
    pub fn cut(&self) -> bool {
        !self.not_run.is_empty() || self.stopped.is_some()
    }

    /// One sentence for the notes: how much was used, and what was not run.
    pub fn sentence(&self) -> String {
        if !self.cut() {
            return format!(
                "Time budget: the sweep ran within its budget_s = {} ({:.0} s used).",
                self.budget_s, self.used_s
            );
        }
        let stopped = self.stopped.as_ref().map_or(String::new(), |s| {
            format!(" The run under way then, {s}, was stopped: a run cut short is not used.")
        });
        let not_run = if self.not_run.is_empty() {
            "nothing more".to_string()
        } else {
            self.not_run.join(" and ")
        };
        format!(
            "Time budget: budget_s = {} was spent after {:.0} s, so {not_run} did not run; the \
             figures are what was measured by then.{stopped} `tune sweep SPEC --resume` runs \
             the rest, with a budget_s of its own.",
            self.budget_s, self.used_s,
        )
    }
}

/// The baseline measured several times through a sweep: its fastest run against its
/// slowest. A trial's gain counts only when it beats the baseline runs on both sides of it
/// in time, which is the same as its ratio to the nearest clearing the drift between them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Drift {
    /// Successful baseline runs: the plan's, the interleaved ones, the confirmation's.
    pub runs: usize,
    /// Median throughput of the slowest and the fastest run.
    pub slowest: f64,
    pub fastest: f64,
    /// Fastest over slowest, with its 95% interval.
    pub ratio: Ratio,
    /// One sentence for people, the same in every face.
    pub summary: String,
}

/// A trial's throughput against one run of the baseline.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BaselineRatio {
    /// Journal id of that baseline run.
    pub baseline: String,
    /// "before" or "after" the trial in time.
    pub when: String,
    pub ratio: Ratio,
}

/// How far apart identical repeats of one configuration landed, over a sweep: differences
/// smaller than this cannot be told from run-to-run noise on the machine it ran on.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct NoiseFloor {
    /// Successful trials with at least two repeats that it summarises.
    pub trials: usize,
    /// Fewest repeats among those trials.
    pub repeats: usize,
    /// Median of those trials' `noise_floor` (max/min - 1 of repeat median step times).
    pub median: f64,
    /// Largest of them.
    pub max: f64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Environment {
    pub host: String,
    pub cpu_model: String,
    /// Logical cores available to the sweep.
    pub cores: usize,
    /// "cpu", "cuda" or "command" (an external workload).
    pub backend: String,
    pub os: String,
    pub tune_version: String,
    /// `git rev-parse HEAD` of the folder the sweep ran in, when it is a repository.
    pub git_commit: Option<String>,
    /// GPUs NVML sees (empty when none; `gpu_notice` says why).
    #[serde(default)]
    pub gpus: Vec<tune_probes::GpuInfo>,
    /// Why there are no GPU facts, e.g. "NVML unavailable: ...".
    #[serde(default)]
    pub gpu_notice: Option<String>,
    /// NVIDIA driver version, when NVML answers.
    #[serde(default)]
    pub driver: Option<String>,
    /// Highest CUDA version the driver supports, when NVML answers.
    #[serde(default)]
    pub cuda: Option<String>,
    /// Physical memory of the host (`MemTotal`).
    #[serde(default)]
    pub host_memory_bytes: Option<u64>,
}

/// A median with its 95% bootstrap interval.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Ci {
    pub median: f64,
    pub lo: f64,
    pub hi: f64,
}

/// Throughput relative to the baseline; above 1 is faster.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Ratio {
    pub ratio: f64,
    pub lo: f64,
    pub hi: f64,
    /// The 95% interval excludes 1.
    pub significant: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrialReport {
    pub id: String,
    /// Knobs that differ from the baseline, or "baseline".
    pub label: String,
    pub knobs: Knobs,
    pub status: Status,
    pub error: Option<String>,
    /// Halving round of the figures below (0 for other strategies).
    pub round: usize,
    /// Measured steps per repeat.
    pub steps: usize,
    pub repeats: Vec<Repeat>,
    /// Over the steady-state steps of all repeats pooled.
    pub samples_per_s: Option<Ci>,
    /// Where the batch is token ids (a script's `[B, T]` integer tensor): samples/s times
    /// the tokens per sample, interval included (#31). None otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_per_s: Option<Ci>,
    pub ratio_vs_baseline: Option<Ratio>,
    /// Largest peak over the repeats.
    pub peak_total_bytes: Option<u64>,
    /// Largest resident set of the sweep's process tree sampled while the trial ran: the
    /// host memory it really used (allocator and runtime included), when sampled.
    #[serde(default)]
    pub rss_peak_bytes: Option<u64>,
    /// Mean share of a step spent in each phase (`other` = untimed remainder).
    pub phase_share: BTreeMap<String, f64>,
    pub accuracy: Option<f64>,
    pub final_loss: Option<f32>,
    /// Relative spread between repeat medians (max/min - 1).
    pub noise_floor: f64,
    pub not_applicable: BTreeMap<String, String>,
    /// Per device over the repeats, in the engine's own type: the largest peaks, the
    /// mean busy and communication figures (imbalance between devices, DataParallel's
    /// device 0, shows here).
    #[serde(default)]
    pub devices: Vec<DeviceSummary>,
    /// The node of each run, when a cluster ran the sweep (`executor = "slurm"`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<NodeRun>,
    /// Share of all cores (percent) that processes outside the sweep kept busy while the
    /// trial ran, median over its samples: contention its figures include. None when not
    /// sampled.
    #[serde(default)]
    pub foreign_cpu_pct: Option<f64>,
    /// `[workload.python]`: the script's explicit settings tune replaced for this trial,
    /// in words ("your script sets num_workers=4; tune applied 0 for this trial").
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub overrides: BTreeMap<String, String>,
    /// `[workload.python]`: what the script does by itself for a knob, read by the hooks
    /// (its own argument or PyTorch's default), in the knob's spelling.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub script_knobs: BTreeMap<String, String>,
    /// A trial that timed out, crashed or ran out of memory after measuring steps: they
    /// are kept (in `repeats`), and used in its figures only when enough are steady.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partial: Option<Partial>,
    /// Per repeat (aligned with `repeats`): what the hardware did while it ran.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hardware: Vec<RepeatHardware>,
    /// Energy the trial's GPUs drew per sample, when GPUs were sampled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub joules_per_sample: Option<EnergyPerSample>,
    /// Set when the hardware contaminated repeats: which, why, and whether the figures
    /// still rest on them (no clean repeat remained).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contamination: Option<Contamination>,
    /// The baseline run that `ratio_vs_baseline` is taken against: the one nearest in time
    /// (#31); None when that is the plan's baseline trial.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nearest_baseline: Option<String>,
    /// Against the baseline runs on each side of this trial in time, when the sweep ran
    /// the baseline more than once.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub against: Vec<BaselineRatio>,
    /// Set when the sweep measured this change promising but could not settle it against
    /// the machine's drift, and measured it again in alternating pairs beside the
    /// baseline: `ratio_vs_baseline` is then the pairs' ratio (#31).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settled: Option<Settled>,
}

/// A change settled side by side: what the sweep's own run measured, and the pairs that
/// measured it again.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Settled {
    /// The sweep's own run against the baseline run nearest it, before the pairs.
    pub sweep: Option<Ratio>,
    /// Alternating pairs (the change and a baseline run beside it) measured.
    pub pairs: usize,
    /// What the hardware did to the pairs, when it contaminated any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hardware: Option<String>,
}

/// Joules per sample over the steady window, with the 95% interval that the throughput's
/// interval gives (the window's mean power is taken as exact: NVML's counter measures it,
/// not samples it).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EnergyPerSample {
    pub median: f64,
    pub lo: f64,
    pub hi: f64,
    /// Mean draw of the counted GPUs over the windows, watts.
    pub mean_power_w: f64,
    /// `counter` (NVML's total-energy counter) or `power` (power samples integrated).
    pub source: String,
    /// From tune's NVML stand-in, not a GPU: shown as "(stand-in, not a GPU)".
    pub stand_in: bool,
}

/// The repeats the hardware contaminated.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Contamination {
    /// 0-based indices into `repeats`.
    pub repeats: Vec<usize>,
    /// Every repeat was contaminated, so the figures rest on them.
    pub in_figures: bool,
    /// "1 of 3 repeats contaminated (gpu0: hw_thermal_slowdown in 4 of 9 samples); left
    /// out of the figures".
    pub note: String,
}

/// Steady steps a failed trial needs before its figures (`samples_per_s`) use them: a
/// bootstrap interval over fewer is wider than the effects a sweep looks for.
pub const MIN_PARTIAL_STEADY: usize = 10;

/// The steps a failed trial measured before it ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Partial {
    /// Steps measured, over all its repeats.
    pub steps: usize,
    /// Of those, the steady ones (after warm-up and slow leading steps).
    pub steady_steps: usize,
    /// Whether its figures use them (at least `MIN_PARTIAL_STEADY` steady steps).
    pub used: bool,
    /// "partial (timeout): its figures are from the 18 steady steps it measured".
    pub note: String,
}

impl TrialReport {
    pub fn peak_mib(&self) -> Option<f64> {
        self.peak_total_bytes.map(|b| b as f64 / 1048576.0)
    }

    /// The backend the trial ran on ("cpu" when no repeat says).
    pub fn backend(&self) -> &str {
        self.repeats
            .iter()
            .map(|r| r.backend.as_str())
            .find(|b| !b.is_empty())
            .unwrap_or("cpu")
    }

    /// "cpu:0", "cuda:1", ...: the name of `devices[i]`.
    pub fn device_name(&self, d: &DeviceSummary) -> String {
        d.name(self.backend())
    }
}

/// What a recommendation asks for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecKind {
    /// Make this change.
    #[default]
    Change,
    /// Do not do this, or watch out: the evidence shows a risk.
    Warning,
}

/// A suggested change, with the evidence from this sweep. Written by the advisor.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Recommendation {
    /// The advisor rule that wrote it (e.g. `data_wait`).
    #[serde(default)]
    pub rule: String,
    #[serde(default)]
    pub kind: RecKind,
    /// The title, and the numbers with confidence intervals from this run.
    #[serde(flatten)]
    pub finding: Finding,
    /// Expected throughput ratio after the change (1.2 = 20% faster).
    pub expected_gain: Option<Ratio>,
    /// "high", "medium" or "low".
    pub confidence: String,
    /// The change as `tune` flags, e.g. `--num-workers 2`.
    pub tune_flag: String,
    /// The equivalent PyTorch line.
    pub pytorch: String,
    /// The change as knob values (`knob -> value`), when it is one this sweep measured:
    /// the confirmation trial combines these. Typed: taken from the measured trial's knobs.
    #[serde(default)]
    pub change: Change,
}

/// The recommended combination, run once more after the sweep.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Confirmation {
    /// Knobs that differ from the baseline.
    pub label: String,
    pub knobs: Knobs,
    /// Rules whose changes were combined.
    pub rules: Vec<String>,
    /// Product of the combined changes' measured ratios (and of their interval bounds):
    /// what the combination should give if the effects multiply.
    pub predicted: Option<Ratio>,
    /// The confirmation run; its `ratio_vs_baseline` is the measured gain, against
    /// `baseline_rerun` when there is one. None until run.
    pub trial: Option<TrialReport>,
    /// The baseline measured again, alternating repeats with `trial`, so both see the
    /// same machine (load drifts over a sweep).
    #[serde(default)]
    pub baseline_rerun: Option<TrialReport>,
    /// `matches` (measured and predicted intervals overlap), `better`, `worse`,
    /// `not_confirmed` (the measured interval includes 1), `failed` or `not_run`.
    pub verdict: String,
    /// One sentence for people.
    pub summary: String,
    /// When several changes are combined: each one also confirmed on its own, beside its
    /// own run of the baseline (#31).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub alone: Vec<Alone>,
    /// Pairs of `trial` and `baseline_rerun` the hardware contaminated (`repeats` holds
    /// 0-based pair indices): left out of the verdict, or, when no clean pair remained
    /// (`in_figures`), the verdict rests on them and `summary` says so (#28).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contamination: Option<Contamination>,
}

/// One recommended change confirmed on its own: run alternately with a baseline run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Alone {
    /// The rule whose change it is, and the change as a label.
    pub rule: String,
    pub label: String,
    pub predicted: Option<Ratio>,
    /// Against the baseline run beside it; None when not run or failed.
    pub measured: Option<Ratio>,
    /// As `Confirmation::verdict`.
    pub verdict: String,
    pub summary: String,
    /// The sweep's time budget ended its pairs before they all ran (`BUDGET_CUT`): a
    /// gain too few pairs could not show, whose interval still reaches the prediction,
    /// is unconfirmed, not withdrawn.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cut_short: bool,
    /// As `Confirmation::contamination`, for this change's pairs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contamination: Option<Contamination>,
}

/// One trial's place on the report's timeline.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrialSpan {
    pub id: String,
    pub label: String,
    pub start_s: f64,
    pub end_s: f64,
}

/// The note the runs of a confirmation carry where the sweep's time budget ended it
/// before all its pairs ran (`runner::sweep`): "the time budget ended it after 1 of 4
/// pairs".
pub const BUDGET_CUT: &str = "the time budget ended it after";

/// One sample of one metric of one device.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TimelineSample {
    pub t_s: f64,
    pub device: String,
    pub metric: String,
    pub value: f64,
}

impl Report {
    /// What this report's throughput counts (`throughput_unit` over its trials).
    pub fn throughput_unit(&self) -> &'static str {
        throughput_unit(&self.trials)
    }

    /// Reads a report, refusing one written by a newer major schema version.
    pub fn load(path: impl AsRef<Path>) -> Result<Report> {
        let path = path.as_ref();
        let text = read_text_limited(path, MAX_INPUT_BYTES)?;
        let value: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
            Error::format(
                path,
                format!("not a JSON report: {}", crate::error::shown(&e.to_string())),
            )
        })?;
        let version = value
            .get("schema_version")
            .and_then(|v| v.as_str())
            .map(str::to_string)
            .ok_or_else(|| Error::format(path, "no schema_version: not a tune report"))?;
        let current = upgrade::major(SCHEMA_VERSION);
        let report: Report = match upgrade::major(&version) {
            Some(theirs) if Some(theirs) == current => {
                // Parsed again from the text, not from `value`: only then does serde_json
                // say where (line, column) a field has the wrong type.
                drop(value);
                parse(&text).map_err(|why| Error::format(path, format!("invalid report: {why}")))?
            }
            // 1.x: converted to the 2.0 form first, then read from the converted text so
            // the message still names the field; its position is in the converted text,
            // not the file, so it is left out.
            Some(1) => {
                let mut value = value;
                upgrade::report_v1(&mut value);
                let converted = serde_json::to_string_pretty(&value)
                    .map_err(|e| Error::Runtime(format!("cannot convert the report: {e}")))?;
                parse(&converted).map_err(|why| {
                    let why = why.rsplit_once(" at line ").map_or(why.as_str(), |w| w.0);
                    Error::format(path, format!("invalid report (schema {version}): {why}"))
                })?
            }
            Some(theirs) if current.is_some_and(|c| theirs > c) => {
                return Err(Error::format(
                    path,
                    format!(
                        "report schema {version} is newer than this tune reads ({SCHEMA_VERSION}); \
                         upgrade tune to read it"
                    ),
                ))
            }
            // Before 1.0 there was no stable schema: reading it would mislead.
            Some(_) => {
                return Err(Error::format(
                    path,
                    format!(
                        "report schema {version} is an older major than this tune reads \
                         ({SCHEMA_VERSION}); re-run the sweep with this tune"
                    ),
                ))
            }
            None => {
                return Err(Error::format(
                    path,
                    format!("schema_version '{version}' is not MAJOR.MINOR"),
                ))
            }
        };
        report
            .check()
            .map_err(|why| Error::format(path, format!("invalid report: {why}")))?;
        Ok(report)
    }

    /// The figures the renderers and the gate divide, scale and compare must be
    /// non-negative (serde already refused non-numbers, NaN and negative counts).
    pub fn check(&self) -> std::result::Result<(), String> {
        let bad = |field: String, v: f64| {
            (v.is_nan() || v < 0.0).then(|| format!("{field} is {v}, must be zero or more"))
        };
        let all = self
            .trials
            .iter()
            .enumerate()
            .map(|(i, t)| (format!("trials[{i}]"), t));
        let confirm = self.confirmation.iter().flat_map(|c| {
            c.trial
                .iter()
                .chain(c.baseline_rerun.iter())
                .map(|t| ("confirmation".to_string(), t))
        });
        for (at, t) in all.chain(confirm) {
            let mut figures = vec![(format!("{at}.noise_floor"), t.noise_floor)];
            if let Some(c) = t.samples_per_s {
                for (name, v) in [("median", c.median), ("lo", c.lo), ("hi", c.hi)] {
                    figures.push((format!("{at}.samples_per_s.{name}"), v));
                }
            }
            if let Some(r) = t.ratio_vs_baseline {
                figures.push((format!("{at}.ratio_vs_baseline.ratio"), r.ratio));
            }
            for (k, v) in &t.phase_share {
                figures.push((format!("{at}.phase_share.{k}"), *v));
            }
            for (j, rep) in t.repeats.iter().enumerate() {
                if let Some(v) = rep.step_times.iter().find(|v| v.is_nan() || **v < 0.0) {
                    figures.push((format!("{at}.repeats[{j}].step_times"), *v));
                }
            }
            if let Some(msg) = figures.into_iter().find_map(|(f, v)| bad(f, v)) {
                return Err(msg);
            }
        }
        if let Some(n) = &self.noise_floor {
            if let Some(msg) = bad("noise_floor.median".into(), n.median)
                .or_else(|| bad("noise_floor.max".into(), n.max))
            {
                return Err(msg);
            }
        }
        Ok(())
    }

    pub fn to_json(&self) -> Result<String> {
        serde_json::to_string_pretty(self)
            .map_err(|e| Error::Runtime(format!("cannot encode the report: {e}")))
    }

    pub fn trial(&self, id: &str) -> Option<&TrialReport> {
        self.trials.iter().find(|t| t.id == id)
    }
}

/// The report in `text`, or why not, naming the field serde stopped at.
fn parse(text: &str) -> std::result::Result<Report, String> {
    serde_json::from_str(text).map_err(|e| {
        // "missing field `x`" names it already; the key before it would mislead.
        let field = match e.to_string().starts_with("missing field") {
            true => None,
            false => field_before(text, e.line(), e.column()),
        }
        .map(|f| format!("field `{f}`: "))
        .unwrap_or_default();
        format!("{field}{}", crate::error::shown(&e.to_string()))
    })
}

/// The name of the last JSON key before `line`:`column` (1-based, as serde_json counts),
/// so a type error can name its field; a heuristic for the message only.
fn field_before(text: &str, line: usize, column: usize) -> Option<String> {
    let start: usize = text
        .split_inclusive('\n')
        .take(line.saturating_sub(1))
        .map(str::len)
        .sum();
    let mut end = (start + column).min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let before = &text[..end];
    let b = before.as_bytes();
    // The last `"key"` followed by a colon, with or without spaces between (pretty or
    // compact JSON).
    let mut i = b.len();
    while i > 0 {
        i -= 1;
        if b[i] != b':' {
            continue;
        }
        let mut close = i;
        while close > 0 && b[close - 1].is_ascii_whitespace() {
            close -= 1;
        }
        if close == 0 || b[close - 1] != b'"' {
            continue;
        }
        let open = before[..close - 1].rfind('"')?;
        let key = &before[open + 1..close - 1];
        return (!key.is_empty() && key.len() <= 64 && !key.contains('\\'))
            .then(|| key.to_string());
    }
    None
}

/// What the sweep's throughput counts: steps/s where no trial's steps had a batch the
/// hooks could count (`RunSummary::batch_unknown`), else samples/s.
pub fn throughput_unit<'a>(trials: impl IntoIterator<Item = &'a TrialReport>) -> &'static str {
    let mut measured = trials.into_iter().flat_map(|t| &t.repeats).peekable();
    if measured.peek().is_some() && measured.all(|r| r.batch_unknown) {
        "steps/s"
    } else {
        "samples/s"
    }
}
