//! Algorithm autotuning (`torch.backends.cudnn.benchmark = True`): recommended when
//! measured faster; a warning when its step times show repeated re-tuning, the sign of
//! input shapes that keep changing (each new shape is benchmarked again).

use super::{measured_change, warning, Ctx, Say};
use crate::report::model::{Recommendation, TrialReport};
use crate::runner::record::Status;
use crate::runner::stats::{median, steady_state};

/// A steady-state step this many times the median is a re-tuning spike.
pub const SPIKE_FACTOR: f64 = 1.5;
/// Spikes needed before warning, and how many times the baseline's rate they must be.
pub const MIN_SPIKES: usize = 3;
pub const RATE_FACTOR: f64 = 3.0;

/// Spikes and steady-state steps over all repeats.
pub fn spikes(t: &TrialReport) -> (usize, usize) {
    let mut n = 0;
    let mut total = 0;
    for r in &t.repeats {
        let steady = &r.step_times[steady_state(&r.step_times, r.warmup)..];
        let m = median(steady);
        if !m.is_finite() {
            continue;
        }
        n += steady.iter().filter(|&&x| x > SPIKE_FACTOR * m).count();
        total += steady.len();
    }
    (n, total)
}

fn rate((n, total): (usize, usize)) -> f64 {
    if total == 0 {
        0.0
    } else {
        n as f64 / total as f64
    }
}

pub fn check(cx: &Ctx) -> Vec<Recommendation> {
    let mut out = Vec::new();
    let tried: Vec<_> = cx
        .varying("autotune")
        .into_iter()
        .filter(|t| t.knobs.autotune)
        .collect();
    let base_rate = cx.base.map_or(0.0, |b| rate(spikes(b)));
    for t in tried.iter().filter(|t| t.status == Status::Ok) {
        let s = spikes(t);
        if s.0 >= MIN_SPIKES && rate(s) > RATE_FACTOR * base_rate {
            out.push(warning(Say {
                title: "Autotuning keeps re-tuning: input shapes seem to vary".into(),
                evidence: vec![format!(
                    "with autotune on, {} of {} steady-state steps took over {SPIKE_FACTOR}× the median step \
                     (baseline: {:.1}% of steps); each new input shape is benchmarked again, so pad or \
                     bucket inputs to a few shapes, or leave autotuning off",
                    s.0,
                    s.1,
                    base_rate * 100.0
                )],
                tune_flag: "(leave --autotune off unless shapes are fixed)".into(),
                pytorch: "torch.backends.cudnn.benchmark = False  # input shapes vary".into(),
            }));
        }
    }
    if let Some((t, r)) = cx.best_gain(&tried) {
        out.insert(
            0,
            measured_change(
                cx,
                t,
                r,
                "autotune",
                Say {
                    title: "Autotune convolution/GEMM algorithms".into(),
                    evidence: Vec::new(),
                    tune_flag: "--autotune".into(),
                    pytorch: "torch.backends.cudnn.benchmark = True".into(),
                },
            ),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{by_rule, report, spec, trial};
    use crate::report::model::RecKind;

    #[test]
    fn fires_when_autotuning_is_faster() {
        let s = spec("autotune = [false, true]", "");
        let r = report(
            &s,
            vec![
                trial(&s, &[], 0.010),
                trial(&s, &[("autotune", "true")], 0.008),
            ],
        );
        let recs = by_rule(&r, "autotune");
        assert_eq!(recs.len(), 1, "{recs:?}");
        assert_eq!(recs[0].kind, RecKind::Change);
        assert_eq!(recs[0].pytorch, "torch.backends.cudnn.benchmark = True");
        assert_eq!(recs[0].tune_flag, "--autotune");
    }

    #[test]
    fn silent_without_a_significant_effect() {
        let s = spec("autotune = [false, true]", "");
        let r = report(
            &s,
            vec![
                trial(&s, &[], 0.010),
                trial(&s, &[("autotune", "true")], 0.0101),
            ],
        );
        assert!(
            by_rule(&r, "autotune").is_empty(),
            "{:?}",
            r.recommendations
        );
    }

    #[test]
    fn warns_when_step_times_show_retuning() {
        let s = spec("autotune = [false, true]", "");
        let r = report(
            &s,
            vec![
                trial(&s, &[], 0.010),
                trial(&s, &[("autotune", "true")], 0.010).spikes(6, 4.0),
            ],
        );
        let recs = by_rule(&r, "autotune");
        assert_eq!(recs.len(), 1, "{recs:?}");
        assert_eq!(recs[0].kind, RecKind::Warning);
        assert!(recs[0].pytorch.contains("benchmark = False"));
        // The same spikes in the baseline are not autotuning's doing.
        let both = report(
            &s,
            vec![
                trial(&s, &[], 0.010).spikes(6, 4.0),
                trial(&s, &[("autotune", "true")], 0.010).spikes(6, 4.0),
            ],
        );
        assert!(by_rule(&both, "autotune").is_empty());
    }
}
