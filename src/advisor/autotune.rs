//! Algorithm autotuning (`torch.backends.cudnn.benchmark = True`): recommended when
//! measured faster; a warning when, with autotuning on, the training loop needed
//! algorithm decisions after its first two steps: shapes they did not have, each
//! benchmarked again. The evidence is the engine's own list of decisions, each marked
//! with when it was first needed (`late`, `eval`).

use super::{measured_change, warning, Ctx, Say};
use crate::results::model::{Recommendation, TrialReport};
use crate::results::record::Status;

/// (op, shape) keys a run first needed after its first two training steps, most over the
/// repeats; None when the trial did not report its decisions (command workloads). With
/// fixed shapes those steps need every key the training uses; the held-out
/// evaluation's shapes (its batch of 256 and remainder), needed once after training, do
/// not count: an H200 sweep of cnn-small with evaluation warned "input shapes vary" on
/// them alone, comparing key counts with a baseline that logs only cuDNN's choices.
pub fn later_keys(t: &TrialReport) -> Option<usize> {
    t.repeats
        .iter()
        .filter(|r| !r.algorithms.is_empty())
        .map(|r| r.algorithms.iter().filter(|a| a.late).count())
        .max()
}

pub fn check(cx: &Ctx) -> Vec<Recommendation> {
    let mut out = Vec::new();
    let tried: Vec<_> = cx
        .varying("autotune")
        .into_iter()
        .filter(|t| t.knobs.autotune)
        .collect();
    for t in tried.iter().filter(|t| t.status == Status::Ok) {
        if let Some(n) = later_keys(t).filter(|&n| n > 0) {
            out.push(warning(Say {
                title: "Autotuning keeps re-tuning: input shapes vary".into(),
                evidence: vec![format!(
                    "with autotune on, {n} (op, shape) keys were first needed after the first \
                     two training steps: the input shapes changed while training, and each new one \
                     was timed again; pad or bucket inputs to a few shapes, or leave \
                     autotuning off"
                )],
                tune_flag: format!(
                    "(leave {} off unless shapes are fixed)",
                    super::switch("autotune").unwrap_or_default()
                ),
                pytorch: format!("{}  # input shapes vary", cx.line("autotune", "false")),
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
                    tune_flag: super::flag("autotune", "true"),
                    pytorch: cx.line("autotune", "true"),
                },
            ),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{by_rule, report, spec, trial};
    use crate::results::model::RecKind;

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
    fn warns_only_when_keys_were_needed_after_the_first_steps() {
        let s = spec("autotune = [false, true]", "");
        let r = report(
            &s,
            vec![
                trial(&s, &[], 0.010).algorithms(4, 0, 0),
                trial(&s, &[("autotune", "true")], 0.010).algorithms(4, 5, 0),
            ],
        );
        let recs = by_rule(&r, "autotune");
        assert_eq!(recs.len(), 1, "{recs:?}");
        assert_eq!(recs[0].kind, RecKind::Warning);
        assert!(recs[0].pytorch.contains("benchmark = False"));
        assert!(
            recs[0].finding.evidence.contains("5 (op, shape) keys"),
            "{recs:?}"
        );
        // Fixed shapes: every key needed by the first steps, the evaluation's own shapes
        // after training, more keys than the baseline logged: no warning (step-time
        // spikes alone are not evidence of re-tuning either).
        let fixed = report(
            &s,
            vec![
                trial(&s, &[], 0.010).algorithms(2, 0, 3),
                trial(&s, &[("autotune", "true")], 0.010)
                    .algorithms(9, 0, 6)
                    .spikes(6, 4.0),
            ],
        );
        assert!(
            by_rule(&fixed, "autotune").is_empty(),
            "{:?}",
            fixed.recommendations
        );
    }
}
