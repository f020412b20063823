//! One metric of one configuration, baseline against current.
//!
//! Throughput and step time are judged on the pooled steady-state step times: the ratio
//! of medians with a percentile-bootstrap interval (for the reader), and a one-sided
//! Mann-Whitney U test (for the decision). Peak memory has no per-step samples; it is
//! judged on the repeats' peaks. A change counts only when it is significant *and*
//! larger than the threshold, and the threshold is never smaller than the spread the
//! two sweeps measured between identical repeats (their noise floor).

use serde::Serialize;

use crate::results::build::{repeat_noise_floor, steady_times};
use crate::results::hardware::counted;
use crate::results::model::{NoiseFloor, TrialReport};
use crate::results::record::Repeat;
use crate::stats::{self, Bootstrap};

/// What `--metric` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// Median throughput; lower is worse.
    #[value(name = "samples_per_s")]
    SamplesPerS,
    /// Median step time in milliseconds; higher is worse.
    #[value(name = "step_ms")]
    StepMs,
    /// Largest peak of tracked memory over the repeats; higher is worse.
    #[value(name = "peak_bytes")]
    PeakBytes,
    /// Energy the trial's GPUs drew per sample (NVML); higher is worse.
    #[value(name = "joules_per_sample")]
    JoulesPerSample,
}

impl Metric {
    pub fn name(self) -> &'static str {
        match self {
            Metric::SamplesPerS => "samples_per_s",
            Metric::StepMs => "step_ms",
            Metric::PeakBytes => "peak_bytes",
            Metric::JoulesPerSample => "joules_per_sample",
        }
    }

    /// A value of this metric for a table cell.
    pub fn show(self, v: f64) -> String {
        match self {
            Metric::SamplesPerS => format!("{v:.1}/s"),
            Metric::StepMs => format!("{v:.3} ms"),
            Metric::PeakBytes => format!("{:.2} MiB", v / 1048576.0),
            Metric::JoulesPerSample => format!("{v:.4} J"),
        }
    }

    /// What getting worse means, in words.
    fn worse_word(self) -> (&'static str, &'static str) {
        match self {
            Metric::SamplesPerS | Metric::StepMs => ("slower", "faster"),
            Metric::PeakBytes => ("more memory", "less memory"),
            Metric::JoulesPerSample => ("more energy", "less energy"),
        }
    }
}

/// How strict the gate is.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Policy {
    /// Largest tolerated relative worsening (0.03 = 3%) before the noise floor widens it.
    pub max_regression: f64,
    /// Significance level of the one-sided test.
    pub alpha: f64,
    /// Bootstrap resamples for the ratio's interval.
    pub resamples: usize,
    /// A check whose figures rest on repeats the hardware contaminated fails
    /// (`--fail-on-contaminated`) instead of passing with a warning.
    pub fail_on_contaminated: bool,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            max_regression: 0.03,
            alpha: 0.01,
            resamples: Bootstrap::default().resamples,
            fail_on_contaminated: false,
        }
    }
}

/// What one report measured for one configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct Side {
    /// Steady-state step times of every repeat, pooled (seconds).
    pub steps: Vec<f64>,
    pub samples_per_step: f64,
    /// Peak tracked bytes of each repeat.
    pub peaks: Vec<u64>,
    /// Relative spread between identical repeats of step time (the larger of this
    /// configuration's own and the sweep's median); None when unknown (one repeat).
    pub time_noise: Option<f64>,
    /// Joules per sample (median, lo, hi), when the report sampled GPUs.
    pub energy: Option<(f64, f64, f64)>,
}

impl Side {
    /// From a report's trial, using the noise floor the sweep recorded: the trial's own
    /// (when it has two repeats or more) and the sweep's median, whichever is larger.
    /// Only the repeats the report's figures use: contaminated ones are left out while a
    /// clean one remains (`results::hardware::counted`).
    pub fn from_trial(t: &TrialReport, sweep: Option<&NoiseFloor>) -> Side {
        let (used, _) = counted(t.repeats.len(), &t.hardware);
        let repeats: Vec<Repeat> = used.iter().map(|&i| t.repeats[i].clone()).collect();
        let own = (repeats.len() >= 2).then_some(t.noise_floor);
        let mut side = Side::from_repeats(&repeats, own, sweep.map(|n| n.median));
        side.energy = t.joules_per_sample.as_ref().map(|e| (e.median, e.lo, e.hi));
        side
    }

    /// From raw repeats; `own` and `sweep` are the recorded noise floors, if any.
    pub fn from_repeats(repeats: &[Repeat], own: Option<f64>, sweep: Option<f64>) -> Side {
        let (steps, samples_per_step) = steady_times(repeats);
        let time_noise = match (own, sweep) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        }
        .filter(|x| x.is_finite() && *x >= 0.0);
        Side {
            steps,
            samples_per_step,
            peaks: repeats.iter().map(|r| r.peak_total_bytes).collect(),
            time_noise,
            energy: None,
        }
    }

    /// As the sweep would record it: `own` computed from the repeats like report.json's
    /// trial `noise_floor`, no sweep-wide figure. For simulations and tests.
    pub fn measured(repeats: &[Repeat]) -> Side {
        Side::from_repeats(repeats, repeat_noise_floor(repeats), None)
    }

    /// Spread of the repeats' peaks (max/min - 1); None with fewer than two.
    fn peak_noise(&self) -> Option<f64> {
        let p: Vec<f64> = self
            .peaks
            .iter()
            .filter(|&&b| b > 0)
            .map(|&b| b as f64)
            .collect();
        (p.len() >= 2).then(|| stats::noise_floor(&p))
    }
}

/// The verdict of one check.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// No significant change beyond the threshold.
    Pass,
    /// Significantly better, beyond the threshold.
    Improved,
    /// Significantly worse, beyond the threshold: fails the gate.
    Regression,
    /// The current run of this configuration failed where the baseline's completed:
    /// fails the gate.
    Failed,
    /// Not comparable (the baseline failed, or a metric was not measured).
    Skipped,
}

impl Verdict {
    pub fn fails(self) -> bool {
        matches!(self, Verdict::Regression | Verdict::Failed)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Improved => "improved",
            Verdict::Regression => "REGRESSION",
            Verdict::Failed => "FAILED",
            Verdict::Skipped => "skipped",
        }
    }
}

/// The numbers behind a verdict.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Outcome {
    /// The metric's value in each report (median for times, largest peak for memory).
    pub baseline: f64,
    pub current: f64,
    /// current / baseline, with its 95% interval (bootstrap for times; the range over
    /// repeat pairs for memory).
    pub ratio: f64,
    pub lo: f64,
    pub hi: f64,
    /// Relative worsening: positive is worse (slower, more memory), negative is better.
    pub worse_by: f64,
    /// One-sided p-value that the current run is worse; None for memory.
    pub p_worse: Option<f64>,
    /// One-sided p-value that it is better; None for memory.
    pub p_better: Option<f64>,
    /// The change is significant in the direction of `worse_by`.
    pub significant: bool,
    /// The threshold actually applied: `max_regression` or the noise floor if larger.
    pub threshold: f64,
    /// The noise floor considered (the larger of the two reports', as a change of this
    /// metric); None when unknown.
    pub noise_floor: Option<f64>,
    pub verdict: Verdict,
}

impl Outcome {
    /// The verdict in one sentence.
    pub fn explain(&self, metric: Metric, policy: &Policy) -> String {
        let (worse, better) = metric.worse_word();
        let size = if self.worse_by == 0.0 {
            "unchanged".to_string()
        } else {
            format!(
                "{:.1}% {}",
                self.worse_by.abs() * 100.0,
                if self.worse_by > 0.0 { worse } else { better }
            )
        };
        let p = match (self.worse_by > 0.0, self.p_worse, self.p_better) {
            (true, Some(p), _) | (false, _, Some(p)) => fmt_p(p),
            _ if metric == Metric::JoulesPerSample && self.significant => {
                "95% intervals do not overlap".into()
            }
            _ if metric == Metric::JoulesPerSample => "95% intervals overlap".into(),
            _ if self.significant => "repeat ranges do not overlap".into(),
            _ => "repeat ranges overlap".into(),
        };
        let sig = if self.significant {
            format!("significant ({p})")
        } else if self.p_worse.is_some() {
            format!("not significant ({p}, alpha {})", policy.alpha)
        } else {
            format!("not significant ({p})")
        };
        let widened = if self.threshold > policy.max_regression {
            format!(
                " (threshold widened from {:.1}% to the {:.1}% noise floor)",
                policy.max_regression * 100.0,
                self.threshold * 100.0
            )
        } else {
            String::new()
        };
        let beyond = self.worse_by.abs() > self.threshold;
        let t = self.threshold * 100.0;
        let body = match self.verdict {
            Verdict::Regression => format!("{size}, {sig}, beyond the {t:.1}% threshold"),
            Verdict::Improved => format!("{size}, {sig}, beyond the {t:.1}% threshold"),
            _ if self.significant => format!("{size}, {sig}, within the {t:.1}% threshold"),
            _ if beyond => format!("{size} but {sig}: indistinguishable from noise"),
            _ => format!("{size}, {sig}, within the {t:.1}% threshold"),
        };
        format!("{body}{widened}")
    }
}

/// "p = 0.012" or "p < 0.001".
pub fn fmt_p(p: f64) -> String {
    if p < 0.001 {
        "p < 0.001".into()
    } else {
        format!("p = {p:.3}")
    }
}

/// One-sided p-values (worse, better) that `cur`'s step times are larger / smaller than
/// `base`'s, from the two-sided normal approximation of `stats::mann_whitney_u`.
fn one_sided(base: &[f64], cur: &[f64]) -> (f64, f64) {
    let (u, p2) = stats::mann_whitney_u(cur, base);
    let mu = cur.len() as f64 * base.len() as f64 / 2.0;
    let half = p2 / 2.0;
    if u > mu {
        (half, 1.0 - half)
    } else if u < mu {
        (1.0 - half, half)
    } else {
        (0.5, 0.5)
    }
}

/// Judges one metric. Err says, in words, why it cannot be compared.
pub fn compare(
    metric: Metric,
    base: &Side,
    cur: &Side,
    policy: &Policy,
    seed: u64,
) -> Result<Outcome, String> {
    let (mut o, noise) = match metric {
        Metric::SamplesPerS | Metric::StepMs => time_outcome(metric, base, cur, policy, seed)?,
        Metric::PeakBytes => memory_outcome(base, cur)?,
        Metric::JoulesPerSample => energy_outcome(base, cur)?,
    };
    o.noise_floor = noise;
    o.threshold = policy.max_regression.max(noise.unwrap_or(0.0));
    let beyond = o.worse_by.abs() > o.threshold;
    o.verdict = match (o.significant && beyond, o.worse_by > 0.0) {
        (true, true) => Verdict::Regression,
        (true, false) => Verdict::Improved,
        _ => Verdict::Pass,
    };
    Ok(o)
}

fn larger(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

fn time_outcome(
    metric: Metric,
    base: &Side,
    cur: &Side,
    policy: &Policy,
    seed: u64,
) -> Result<(Outcome, Option<f64>), String> {
    let usable = |s: &Side| s.steps.len() >= 2 && s.samples_per_step > 0.0;
    if !usable(base) || !usable(cur) {
        return Err(format!(
            "no step times to compare (baseline {}, current {} steady-state steps)",
            base.steps.len(),
            cur.steps.len()
        ));
    }
    let (mb, mc) = (stats::median(&base.steps), stats::median(&cur.steps));
    if !(mb > 0.0 && mc > 0.0) {
        return Err("step times are not positive".into());
    }
    let boot = Bootstrap {
        resamples: policy.resamples,
        ..Bootstrap::with_seed(seed)
    };
    let (values, e) = match metric {
        Metric::SamplesPerS => (
            (base.samples_per_step / mb, cur.samples_per_step / mc),
            stats::ratio_ci(
                &base.steps,
                base.samples_per_step,
                &cur.steps,
                cur.samples_per_step,
                &boot,
            ),
        ),
        // Inverse throughputs at one sample per step: the ratio of median step times.
        _ => (
            (mb * 1e3, mc * 1e3),
            stats::ratio_ci(&cur.steps, 1.0, &base.steps, 1.0, &boot),
        ),
    };
    let worse_by = match metric {
        Metric::SamplesPerS => 1.0 - e.ratio,
        _ => e.ratio - 1.0,
    };
    let (p_worse, p_better) = one_sided(&base.steps, &cur.steps);
    let significant = if worse_by > 0.0 {
        p_worse < policy.alpha
    } else {
        p_better < policy.alpha
    };
    let o = Outcome {
        baseline: values.0,
        current: values.1,
        ratio: e.ratio,
        lo: e.lo,
        hi: e.hi,
        worse_by,
        p_worse: Some(p_worse),
        p_better: Some(p_better),
        significant,
        threshold: 0.0,
        noise_floor: None,
        verdict: Verdict::Pass,
    };
    // The floor is a spread of step times (slower by f); as a throughput drop that is
    // 1 - 1/(1 + f), so both metrics are widened by the same noise.
    let noise = larger(base.time_noise, cur.time_noise).map(|f| match metric {
        Metric::SamplesPerS => f / (1.0 + f),
        _ => f,
    });
    Ok((o, noise))
}

/// Joules per sample: each side's figure comes with the 95% interval its throughput
/// gives; a change is significant when the two intervals do not overlap. Energy per
/// sample moves with step time, so the step-time noise floor widens its threshold.
fn energy_outcome(base: &Side, cur: &Side) -> Result<(Outcome, Option<f64>), String> {
    let (b, c) = match (base.energy, cur.energy) {
        (Some(b), Some(c)) if b.0 > 0.0 && c.0 > 0.0 => (b, c),
        (b, c) => {
            let missing: Vec<&str> = [("baseline", b.is_none()), ("current", c.is_none())]
                .iter()
                .filter(|x| x.1)
                .map(|x| x.0)
                .collect();
            return Err(format!(
                "no joules_per_sample in the {} report (energy needs GPUs sampled through NVML \
                 while the sweep ran)",
                if missing.is_empty() {
                    "baseline or current".to_string()
                } else {
                    missing.join(" and ")
                }
            ));
        }
    };
    let ratio = c.0 / b.0;
    let worse_by = ratio - 1.0;
    let significant = if worse_by > 0.0 { c.1 > b.2 } else { c.2 < b.1 };
    let o = Outcome {
        baseline: b.0,
        current: c.0,
        ratio,
        lo: if b.2 > 0.0 { c.1 / b.2 } else { ratio },
        hi: if b.1 > 0.0 { c.2 / b.1 } else { ratio },
        worse_by,
        p_worse: None,
        p_better: None,
        significant,
        threshold: 0.0,
        noise_floor: None,
        verdict: Verdict::Pass,
    };
    Ok((o, larger(base.time_noise, cur.time_noise)))
}

/// Peak memory of the CPU engine is deterministic for a configuration, so there is
/// nothing to resample: a change is significant when every current repeat lies beyond
/// every baseline repeat.
fn memory_outcome(base: &Side, cur: &Side) -> Result<(Outcome, Option<f64>), String> {
    let nonzero = |s: &Side| -> Vec<f64> {
        s.peaks
            .iter()
            .filter(|&&b| b > 0)
            .map(|&b| b as f64)
            .collect()
    };
    let (b, c) = (nonzero(base), nonzero(cur));
    if b.is_empty() || c.is_empty() {
        return Err("no peak memory recorded (external command workloads have none)".into());
    }
    let max = |v: &[f64]| v.iter().copied().fold(f64::MIN, f64::max);
    let min = |v: &[f64]| v.iter().copied().fold(f64::MAX, f64::min);
    let ratio = max(&c) / max(&b);
    let worse_by = ratio - 1.0;
    let significant = if worse_by > 0.0 {
        min(&c) > max(&b)
    } else {
        max(&c) < min(&b)
    };
    let o = Outcome {
        baseline: max(&b),
        current: max(&c),
        ratio,
        lo: min(&c) / max(&b),
        hi: max(&c) / min(&b),
        worse_by,
        p_worse: None,
        p_better: None,
        significant,
        threshold: 0.0,
        noise_floor: None,
        verdict: Verdict::Pass,
    };
    Ok((o, larger(base.peak_noise(), cur.peak_noise())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn side(steps: Vec<f64>, peaks: Vec<u64>, noise: Option<f64>) -> Side {
        Side {
            steps,
            samples_per_step: 32.0,
            peaks,
            time_noise: noise,
            energy: None,
        }
    }

    fn ramp(n: usize, at: f64, step: f64) -> Vec<f64> {
        (0..n).map(|i| at + step * i as f64).collect()
    }

    #[test]
    fn a_clear_slowdown_is_a_regression_in_both_time_metrics() {
        // Disjoint samples: 0.100..0.1029 vs 0.110..0.1129 (10% slower).
        let b = side(ramp(30, 0.100, 1e-4), vec![], None);
        let c = side(ramp(30, 0.110, 1e-4), vec![], None);
        let p = Policy::default();
        let o = compare(Metric::SamplesPerS, &b, &c, &p, 1).unwrap();
        assert_eq!(o.verdict, Verdict::Regression, "{o:?}");
        assert!((o.ratio - 0.1014 / 0.1114).abs() < 1e-3, "{o:?}");
        assert!(o.lo <= o.ratio && o.ratio <= o.hi);
        assert!(o.p_worse.unwrap() < 1e-6 && o.p_better.unwrap() > 0.99);
        let s = compare(Metric::StepMs, &b, &c, &p, 1).unwrap();
        assert_eq!(s.verdict, Verdict::Regression);
        assert!((s.current - 111.45).abs() < 0.01 && (s.baseline - 101.45).abs() < 0.01);
        // Swapped, it is an improvement, and never a failure.
        let i = compare(Metric::SamplesPerS, &c, &b, &p, 1).unwrap();
        assert_eq!(i.verdict, Verdict::Improved);
        assert!(i.worse_by < 0.0);
    }

    #[test]
    fn significant_but_small_passes_and_the_noise_floor_widens_the_threshold() {
        let b = side(ramp(30, 0.100, 1e-5), vec![], None);
        // 2% slower and completely separated: significant, but under 3%.
        let c = side(ramp(30, 0.102, 1e-5), vec![], None);
        let p = Policy::default();
        let o = compare(Metric::StepMs, &b, &c, &p, 1).unwrap();
        assert!(o.significant && o.verdict == Verdict::Pass, "{o:?}");
        assert!(o
            .explain(Metric::StepMs, &p)
            .contains("within the 3.0% threshold"));
        // 6% slower fails at 3%, but not when identical repeats differed by 8%.
        let c6 = side(ramp(30, 0.106, 1e-5), vec![], None);
        assert_eq!(
            compare(Metric::StepMs, &b, &c6, &p, 1).unwrap().verdict,
            Verdict::Regression
        );
        let noisy = side(ramp(30, 0.106, 1e-5), vec![], Some(0.08));
        let o = compare(Metric::StepMs, &b, &noisy, &p, 1).unwrap();
        assert_eq!(o.verdict, Verdict::Pass);
        assert_eq!((o.threshold, o.noise_floor), (0.08, Some(0.08)));
        assert!(o
            .explain(Metric::StepMs, &p)
            .contains("widened from 3.0% to the 8.0%"));
    }

    #[test]
    fn beyond_threshold_but_not_significant_passes() {
        // Two overlapping samples whose medians differ by 10%, too few to be sure.
        let b = side(vec![0.10, 0.20], vec![], None);
        let c = side(vec![0.11, 0.22], vec![], None);
        let p = Policy::default();
        let o = compare(Metric::StepMs, &b, &c, &p, 1).unwrap();
        assert!(o.worse_by > 0.05 && !o.significant, "{o:?}");
        assert_eq!(o.verdict, Verdict::Pass);
        assert!(o
            .explain(Metric::StepMs, &p)
            .contains("indistinguishable from noise"));
    }

    #[test]
    fn memory_is_judged_on_repeat_ranges() {
        let p = Policy::default();
        let b = side(vec![], vec![1000, 1000], None);
        let c = side(vec![], vec![1100, 1100], None);
        let o = compare(Metric::PeakBytes, &b, &c, &p, 0).unwrap();
        assert_eq!(o.verdict, Verdict::Regression);
        assert!((o.worse_by - 0.1).abs() < 1e-12 && o.p_worse.is_none());
        // Overlapping repeats: not significant whatever the size.
        let c2 = side(vec![], vec![900, 1300], None);
        assert_eq!(
            compare(Metric::PeakBytes, &b, &c2, &p, 0).unwrap().verdict,
            Verdict::Pass
        );
        assert!(compare(Metric::PeakBytes, &b, &side(vec![], vec![0], None), &p, 0).is_err());
        assert!(compare(Metric::SamplesPerS, &b, &c, &p, 0).is_err());
    }
}
