//! The advisor: rules over one sweep's measurements that turn them into
//! recommendations. Each rule is a module with one `check` function; it fires only on
//! evidence measured in this run, and stays silent when an effect's 95% interval
//! includes 1. Every recommendation carries its numbers with intervals, the expected
//! gain, a confidence, the `tune` flag and the PyTorch line.
//!
//! Confidence: `high` when the gain was measured and its interval clears 1 by more than
//! the trials' repeat-to-repeat noise, `medium` when measured and significant but
//! closer than that, `low` when the evidence is a phase share or device counter and the
//! change itself was not tried in this sweep (no expected gain then).

pub(crate) mod amp;
pub(crate) mod autotune;
pub(crate) mod breakeven;
mod budget;
mod build;
pub(crate) mod comm;
pub(crate) mod confirm;
pub(crate) mod data_wait;
pub(crate) mod dp_imbalance;
pub(crate) mod drift;
pub(crate) mod faster;
pub(crate) mod h2d;
mod load;
pub(crate) mod memory;
pub(crate) mod screen;
pub(crate) mod settle;
pub(crate) mod utilization;
pub mod verdict;
pub(crate) mod zero_grad;

#[cfg(test)]
pub(crate) mod testkit;

pub use build::{build_report, build_report_within};
pub use verdict::{story, RecVerdict, Story};

use crate::knobs::Knobs;
use crate::results::build::steady_times;
use crate::results::model::{Ci, Ratio, RecKind, Recommendation, Report, TrialReport};
use crate::results::record::Status;
use crate::results::Finding;
use crate::spec::plan::knobs_hash;
use crate::stats::{self, Bootstrap};

/// Accuracy may drop by at most this much (absolute, 0..1) for a change to count as
/// learning the same thing.
pub const ACCURACY_TOLERANCE: f64 = 0.01;
/// Without accuracy, the mean loss over the last tenth of the steps may rise by at most
/// this factor.
pub const LOSS_TOLERANCE: f64 = 1.15;

type Rule = fn(&Ctx) -> Vec<Recommendation>;

/// Every rule, in the order their recommendations are listed (and, for the
/// confirmation's combination, the order in which a knob is claimed).
pub const RULES: &[(&str, Rule)] = &[
    ("data_wait", data_wait::check),
    ("h2d", h2d::check),
    ("memory", memory::check),
    ("amp", amp::check),
    ("dp_imbalance", dp_imbalance::check),
    ("comm", comm::check),
    ("autotune", autotune::check),
    ("zero_grad", zero_grad::check),
    ("utilization", utilization::check),
];

/// Runs every rule over a report, then `faster` for measured speedups none explained.
pub fn advise(report: &Report) -> Vec<Recommendation> {
    let cx = Ctx::new(report);
    let mut recs: Vec<Recommendation> = RULES
        .iter()
        .flat_map(|(name, rule)| {
            rule(&cx).into_iter().map(move |mut r| {
                r.rule = (*name).to_string();
                r
            })
        })
        .collect();
    // Last, so the phase rules' explanations win for the knobs they cover.
    let extra = faster::check(&cx, &recs);
    recs.extend(extra);
    recs
}

/// What rules see: the report and its baseline.
pub struct Ctx<'a> {
    pub report: &'a Report,
    /// The baseline, when it ran successfully.
    pub base: Option<&'a TrialReport>,
}

/// Whether a configuration learns what the baseline learns.
#[derive(Clone, Debug, PartialEq)]
pub enum Parity {
    Same,
    /// Neither accuracy nor a loss curve to compare.
    Unknown,
    Diverged,
    LostAccuracy {
        base: f64,
        this: f64,
    },
    WorseLoss {
        base: f64,
        this: f64,
    },
}

impl Parity {
    /// A change may be recommended only when parity holds or cannot be judged.
    pub fn allows(&self) -> bool {
        matches!(self, Parity::Same | Parity::Unknown)
    }

    pub fn describe(&self) -> String {
        match self {
            Parity::Same => "learns the same (accuracy/loss within tolerance)".into(),
            Parity::Unknown => "no accuracy or loss to compare".into(),
            Parity::Diverged => "training diverged (non-finite loss)".into(),
            Parity::LostAccuracy { base, this } => format!(
                "accuracy fell from {:.1}% to {:.1}%",
                base * 100.0,
                this * 100.0
            ),
            Parity::WorseLoss { base, this } => {
                format!("final loss rose from {base:.4} to {this:.4}")
            }
        }
    }
}

/// Mean of the last tenth (at least one) of a loss curve; None if any step diverged.
fn loss_tail(t: &TrialReport) -> Option<Option<f64>> {
    let losses = &t.repeats.first()?.losses;
    if losses.is_empty() {
        return None;
    }
    // The journal stores a non-finite loss as f32::MAX.
    if losses.iter().any(|l| !l.is_finite() || *l >= f32::MAX) {
        return Some(None);
    }
    let n = (losses.len() / 10).max(1);
    let tail = &losses[losses.len() - n..];
    Some(Some(
        tail.iter().map(|&l| f64::from(l)).sum::<f64>() / n as f64,
    ))
}

impl<'a> Ctx<'a> {
    pub fn new(report: &'a Report) -> Ctx<'a> {
        let base = report
            .baseline
            .as_deref()
            .and_then(|id| report.trial(id))
            .filter(|t| t.status == Status::Ok && t.samples_per_s.is_some());
        Ctx { report, base }
    }

    pub fn base_knobs(&self) -> &Knobs {
        &self.report.spec.search.baseline
    }

    /// What the script does by itself for `knob`, where that is what the baseline ran
    /// (not where tune set the spec's baseline value over it).
    pub fn own(&self, knob: &str) -> Option<&'a String> {
        let b = self.base?;
        crate::results::baselines::own_value(self.base_knobs(), &b.script_knobs, knob)
    }

    /// The optimizer classes the script builds, as the hooks read them in the baseline
    /// (`bridge::OPTIMIZER`): what an `optim_impl` change's line names.
    pub fn optimizer(&self) -> Option<&'a str> {
        let b = self.base?;
        b.script_knobs
            .get(crate::bridge::OPTIMIZER)
            .map(String::as_str)
    }

    /// The baseline's `knob` as the advice names it: the script's own value when the
    /// hooks read one ("your script's num_workers=4"), since tune then leaves it as the
    /// script has it; else the value tune ran ("the baseline (num_workers=0)") (#31).
    pub fn baseline_named(&self, knob: &str) -> String {
        let own = self.own(knob);
        match own {
            Some(v) => format!("your script's {knob}={v}"),
            None => format!(
                "the baseline ({knob}={})",
                self.base_knobs().value(knob).unwrap_or_else(|| "?".into())
            ),
        }
    }

    pub fn backend(&self) -> &str {
        &self.report.environment.backend
    }

    /// The training framework whose loop ran the baseline's steps, as the hooks read it
    /// (`knobs::FRAMEWORK`): a Lightning script's bf16 is `L.Trainer(precision=...)`.
    pub fn framework(&self) -> Option<&'a str> {
        let b = self.base?;
        b.script_knobs
            .get(crate::knobs::FRAMEWORK)
            .map(String::as_str)
    }

    /// The line that sets `knob` to `value` in this job: its framework's setting where it
    /// has one, else PyTorch's, the optimizer named as the script builds it.
    pub fn line(&self, knob: &str, value: &str) -> String {
        self.lines([(knob, value)])
    }

    /// [`Ctx::line`] for several knobs at once.
    pub fn lines<'k>(&self, changes: impl IntoIterator<Item = (&'k str, &'k str)>) -> String {
        crate::knobs::script_lines(changes, self.backend(), self.framework(), self.optimizer())
    }

    /// Trials (any status) whose knobs differ from the baseline's in `knob` only.
    pub fn varying(&self, knob: &str) -> Vec<&'a TrialReport> {
        let base = self.base_knobs();
        self.report
            .trials
            .iter()
            .filter(|t| differs_only_in(&t.knobs, base, knob))
            .collect()
    }

    /// Of `cands`, the fastest one that is significantly faster than the baseline and
    /// learns the same; its ratio.
    pub fn best_gain(&self, cands: &[&'a TrialReport]) -> Option<(&'a TrialReport, Ratio)> {
        cands
            .iter()
            .filter(|t| t.status == Status::Ok)
            .filter_map(|t| Some((*t, t.ratio_vs_baseline?)))
            .filter(|(t, r)| r.significant && r.ratio > 1.0 && self.parity(t).allows())
            .max_by(|a, b| a.1.ratio.total_cmp(&b.1.ratio))
    }

    /// Throughput of `b` over `a`, with a bootstrap interval over their steady-state
    /// step times.
    pub fn ratio(&self, a: &TrialReport, b: &TrialReport) -> Option<Ratio> {
        let (at, asps) = steady_times(&a.repeats);
        let (bt, bsps) = steady_times(&b.repeats);
        if at.is_empty() || bt.is_empty() {
            return None;
        }
        let seed = knobs_hash(&a.knobs) ^ knobs_hash(&b.knobs).rotate_left(17);
        let e = stats::ratio_ci(&at, asps, &bt, bsps, &Bootstrap::with_seed(seed));
        (e.ratio.is_finite() && e.lo.is_finite() && e.hi.is_finite()).then_some(Ratio {
            ratio: e.ratio,
            lo: e.lo,
            hi: e.hi,
            significant: e.significant,
        })
    }

    /// Does `t` learn what the baseline learns?
    pub fn parity(&self, t: &TrialReport) -> Parity {
        if t.status == Status::Diverged {
            return Parity::Diverged;
        }
        let Some(base) = self.base else {
            return Parity::Unknown;
        };
        if let (Some(b), Some(x)) = (base.accuracy, t.accuracy) {
            return if x < b - ACCURACY_TOLERANCE {
                Parity::LostAccuracy { base: b, this: x }
            } else {
                Parity::Same
            };
        }
        match (loss_tail(base), loss_tail(t)) {
            (_, Some(None)) => Parity::Diverged,
            (Some(Some(b)), Some(Some(x))) if x > b * LOSS_TOLERANCE => {
                Parity::WorseLoss { base: b, this: x }
            }
            (Some(Some(_)), Some(Some(_))) => Parity::Same,
            _ => Parity::Unknown,
        }
    }
}

/// `a` and `base` agree on every knob and `[params]` entry except `knob` (either),
/// where they differ.
pub fn differs_only_in(a: &Knobs, base: &Knobs, knob: &str) -> bool {
    a.differs(base, knob)
        && Knobs::NAMES
            .iter()
            .filter(|n| **n != knob)
            .all(|n| !a.differs(base, n))
        && a.params
            .keys()
            .chain(base.params.keys())
            .filter(|n| *n != knob)
            .all(|n| a.params.get(n) == base.params.get(n))
}

/// "1.31× [1.27, 1.35]".
pub fn fmt_ratio(r: &Ratio) -> String {
    format!("{:.2}× [{:.2}, {:.2}]", r.ratio, r.lo, r.hi)
}

/// "312.4 [305.1, 318.0] samples/s" (`unit` from `throughput_unit`).
pub fn fmt_ci(c: &Ci, unit: &str) -> String {
    format!("{:.1} [{:.1}, {:.1}] {unit}", c.median, c.lo, c.hi)
}

pub fn fmt_pct(share: f64) -> String {
    format!("{:.1}%", share * 100.0)
}

pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / 1048576.0
}

/// "high" when the interval clears 1 by more than the noise between repeats,
/// "medium" otherwise.
pub fn confidence(r: &Ratio, noise: f64) -> &'static str {
    let margin = if r.ratio >= 1.0 {
        r.lo - 1.0
    } else {
        1.0 - r.hi
    };
    if margin > noise.max(0.02) {
        "high"
    } else {
        "medium"
    }
}

/// "this vs baseline: ratio; throughput vs throughput".
pub fn effect_evidence(label: &str, t: &TrialReport, base: &TrialReport, r: &Ratio) -> String {
    let unit = crate::results::model::throughput_unit([t, base]);
    let thr = |x: &TrialReport| x.samples_per_s.map_or("–".into(), |c| fmt_ci(&c, unit));
    match &t.settled {
        // The pairs measured the ratio; the sweep's run only nominated it.
        Some(s) => format!(
            "{label}: {} throughput vs the baseline, side by side in {} alternating pairs (the \
             sweep's own run read {} against the baseline run nearest it, unsettled by the \
             machine's drift)",
            fmt_ratio(r),
            s.pairs,
            s.sweep.map_or("no ratio".into(), |x| fmt_ratio(&x))
        ),
        None => format!(
            "{label}: {} throughput vs the baseline ({} vs {})",
            fmt_ratio(r),
            thr(t),
            thr(base)
        ),
    }
}

/// The words of a recommendation.
pub struct Say {
    pub title: String,
    pub evidence: Vec<String>,
    pub tune_flag: String,
    pub pytorch: String,
}

/// The recommendation for a measured change of one knob: `t` against the baseline.
pub fn measured_change(
    cx: &Ctx,
    t: &TrialReport,
    r: Ratio,
    knob: &str,
    say: Say,
) -> Recommendation {
    let Say {
        title,
        mut evidence,
        tune_flag,
        pytorch,
    } = say;
    let noise = cx
        .base
        .map_or(t.noise_floor, |b| b.noise_floor.max(t.noise_floor));
    if let Some(base) = cx.base {
        evidence.push(effect_evidence(&t.label, t, base, &r));
    }
    let change = crate::spec::Change::of([knob], &t.knobs);
    Recommendation {
        kind: RecKind::Change,
        finding: Finding {
            title,
            evidence: evidence.join("; "),
        },
        expected_gain: Some(r),
        confidence: confidence(&r, noise).into(),
        tune_flag,
        pytorch,
        change,
        ..Recommendation::default()
    }
}

/// A recommendation from indirect evidence (a phase share, device counters): the change
/// itself was not measured, so there is no expected gain and confidence is low.
pub fn unmeasured_change(say: Say) -> Recommendation {
    Recommendation {
        kind: RecKind::Change,
        finding: Finding {
            title: say.title,
            evidence: say.evidence.join("; "),
        },
        expected_gain: None,
        confidence: "low".into(),
        tune_flag: say.tune_flag,
        pytorch: say.pytorch,
        ..Recommendation::default()
    }
}

/// A warning: evidence that a setting is risky or misleading.
pub fn warning(say: Say) -> Recommendation {
    Recommendation {
        kind: RecKind::Warning,
        confidence: "medium".into(),
        ..unmeasured_change(say)
    }
}

/// The `tune` flag for one knob value, from the knob table (booleans are switches); a
/// user parameter, which has no flag, as `name=value`.
pub fn flag(knob: &str, value: &str) -> String {
    let Some(f) = switch(knob) else {
        return format!("{knob}={value}");
    };
    match value {
        "true" => f,
        "false" => String::new(),
        v => format!("{f} {v}"),
    }
}

/// A knob's bare flag (`--num-workers`) as the knob table writes it; `None` for a name
/// that is no knob.
pub(crate) fn switch(knob: &str) -> Option<String> {
    crate::knobs::knob(knob).map(crate::knobs::Knob::flag)
}
