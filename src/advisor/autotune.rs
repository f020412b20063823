//! Algorithm autotuning (`torch.backends.cudnn.benchmark = True`): recommended when
//! measured faster; a warning when the run tuned more (op, shape) keys than the model's
//! layers produce with fixed shapes, i.e. input shapes kept changing and each new one was
//! benchmarked again. The evidence is the engine's own list of algorithm decisions.

use super::{measured_change, warning, Ctx, Say};
use crate::knobs::torch_line;
use crate::results::model::{Recommendation, TrialReport};
use crate::results::record::Status;

/// Distinct (op, shape, dtype) keys one run decided an algorithm for, most over the
/// repeats; None when the trial did not report its decisions (command workloads).
pub fn keys(t: &TrialReport) -> Option<usize> {
    t.repeats
        .iter()
        .map(|r| r.algorithms.len())
        .filter(|&n| n > 0)
        .max()
}

pub fn check(cx: &Ctx) -> Vec<Recommendation> {
    let mut out = Vec::new();
    let tried: Vec<_> = cx
        .varying("autotune")
        .into_iter()
        .filter(|t| t.knobs.autotune)
        .collect();
    let base_keys = cx.base.and_then(keys);
    for t in tried.iter().filter(|t| t.status == Status::Ok) {
        if let (Some(n), Some(b)) = (keys(t), base_keys) {
            if n > b {
                out.push(warning(Say {
                    title: "Autotuning keeps re-tuning: input shapes vary".into(),
                    evidence: vec![format!(
                        "with autotune on the run benchmarked {n} (op, shape) keys, while the baseline's \
                         layers use {b}: {} extra input shapes were each timed again; pad or bucket \
                         inputs to a few shapes, or leave autotuning off",
                        n - b
                    )],
                    tune_flag: format!(
                        "(leave {} off unless shapes are fixed)",
                        super::switch("autotune").unwrap_or_default()
                    ),
                    pytorch: format!(
                        "{}  # input shapes vary",
                        torch_line("autotune", "false", cx.backend())
                    ),
                }));
            }
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
                    pytorch: torch_line("autotune", "true", cx.backend()),
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
    fn warns_only_when_more_keys_were_tuned_than_the_layers_use() {
        let s = spec("autotune = [false, true]", "");
        let r = report(
            &s,
            vec![
                trial(&s, &[], 0.010).algorithms(4),
                trial(&s, &[("autotune", "true")], 0.010).algorithms(9),
            ],
        );
        let recs = by_rule(&r, "autotune");
        assert_eq!(recs.len(), 1, "{recs:?}");
        assert_eq!(recs[0].kind, RecKind::Warning);
        assert!(recs[0].pytorch.contains("benchmark = False"));
        // Fixed shapes: as many keys as the baseline's layers, no warning (step-time
        // spikes alone are not evidence of re-tuning).
        let fixed = report(
            &s,
            vec![
                trial(&s, &[], 0.010).algorithms(4),
                trial(&s, &[("autotune", "true")], 0.010)
                    .algorithms(4)
                    .spikes(6, 4.0),
            ],
        );
        assert!(by_rule(&fixed, "autotune").is_empty());
    }
}
