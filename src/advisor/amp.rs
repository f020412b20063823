//! Mixed precision: recommended only when measured faster AND learning the same
//! (accuracy within tolerance, no divergence). A faster setting that diverged or lost
//! accuracy gets a warning, never a recommendation.

use super::{effect_evidence, measured_change, warning, Ctx, Parity, Say};
use crate::knobs::Amp;
use crate::results::model::Recommendation;
use crate::results::record::Status;

/// The lines for a precision policy in this job.
pub fn autocast_line(cx: &Ctx, amp: Amp) -> String {
    cx.line("amp", &amp.to_string())
}

pub fn check(cx: &Ctx) -> Vec<Recommendation> {
    let tried: Vec<_> = cx
        .varying("amp")
        .into_iter()
        .filter(|t| t.knobs.amp != Amp::Off)
        .collect();
    let mut out = Vec::new();
    for t in &tried {
        let parity = cx.parity(t);
        let faster = t
            .ratio_vs_baseline
            .filter(|r| r.significant && r.ratio > 1.0);
        let risky = match (&parity, t.status) {
            (Parity::Diverged, _) | (_, Status::Diverged) => true,
            (Parity::LostAccuracy { .. } | Parity::WorseLoss { .. }, Status::Ok) => {
                faster.is_some()
            }
            _ => false,
        };
        if !risky {
            continue;
        }
        let mut evidence = vec![format!("amp={}: {}", t.knobs.amp, parity.describe())];
        if let Some(e) = &t.error {
            evidence.push(e.clone());
        }
        if let (Some(r), Some(base)) = (faster, cx.base) {
            evidence.push(effect_evidence(&t.label, t, base, &r));
        }
        let mut w = warning(Say {
            title: format!(
                "Do not use amp={}: it changes what the model learns",
                t.knobs.amp
            ),
            evidence,
            tune_flag: format!(
                "(keep {}, or fix loss scaling first)",
                super::flag("amp", "off")
            ),
            pytorch: "# keep this model in float32, or use torch.amp.GradScaler with float16"
                .into(),
        });
        w.confidence = "high".into();
        out.push(w);
    }
    if let Some((t, r)) = cx.best_gain(&tried) {
        out.insert(
            0,
            measured_change(
                cx,
                t,
                r,
                "amp",
                Say {
                    title: format!("Train in mixed precision ({})", t.knobs.amp),
                    evidence: vec![format!("amp={}: {}", t.knobs.amp, cx.parity(t).describe())],
                    tune_flag: super::flag("amp", &t.knobs.amp.to_string()),
                    pytorch: autocast_line(cx, t.knobs.amp),
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
    use crate::results::record::Status;

    #[test]
    fn fires_on_a_speedup_with_accuracy_parity() {
        let s = spec("amp = [\"off\", \"bf16\"]", "");
        let r = report(
            &s,
            vec![
                trial(&s, &[], 0.010),
                trial(&s, &[("amp", "bf16")], 0.006).accuracy(Some(0.895)),
            ],
        );
        let recs = by_rule(&r, "amp");
        assert_eq!(recs.len(), 1, "{recs:?}");
        assert_eq!(recs[0].kind, RecKind::Change);
        assert_eq!(recs[0].tune_flag, "--amp bf16");
        assert!(recs[0]
            .pytorch
            .contains("torch.autocast(\"cpu\", dtype=torch.bfloat16)"));
    }

    #[test]
    fn a_faster_run_that_lost_accuracy_is_a_warning_never_a_change() {
        let s = spec("amp = [\"off\", \"fp16\"]", "");
        let r = report(
            &s,
            vec![
                trial(&s, &[], 0.010),
                trial(&s, &[("amp", "fp16")], 0.005).accuracy(Some(0.40)),
            ],
        );
        let recs = by_rule(&r, "amp");
        assert_eq!(recs.len(), 1, "{recs:?}");
        assert_eq!(recs[0].kind, RecKind::Warning);
        assert!(recs[0]
            .finding
            .evidence
            .contains("accuracy fell from 90.0% to 40.0%"));
        assert!(r
            .recommendations
            .iter()
            .all(|x| x.kind == RecKind::Warning || !x.tune_flag.contains("fp16")));
    }

    #[test]
    fn a_diverged_run_is_a_warning() {
        let s = spec("amp = [\"off\", \"fp16\"]", "");
        let r = report(
            &s,
            vec![
                trial(&s, &[], 0.010),
                trial(&s, &[("amp", "fp16")], 0.005)
                    .status(Status::Diverged, "training diverged at step 7: loss is NaN"),
            ],
        );
        let recs = by_rule(&r, "amp");
        assert_eq!(recs.len(), 1);
        assert_eq!(recs[0].kind, RecKind::Warning);
        assert!(recs[0].finding.evidence.contains("diverged"));
    }

    #[test]
    fn a_worse_loss_without_accuracy_blocks_it_too() {
        let s = spec("amp = [\"off\", \"bf16\"]", "");
        let r = report(
            &s,
            vec![
                trial(&s, &[], 0.010).accuracy(None),
                trial(&s, &[("amp", "bf16")], 0.006)
                    .accuracy(None)
                    .losses(|_| 2.0),
            ],
        );
        let recs = by_rule(&r, "amp");
        assert_eq!(recs.len(), 1, "{recs:?}");
        assert_eq!(recs[0].kind, RecKind::Warning);
        assert!(
            recs[0].finding.evidence.contains("final loss rose"),
            "{}",
            recs[0].finding.evidence
        );
    }

    #[test]
    fn silent_when_not_significantly_faster() {
        let s = spec("amp = [\"off\", \"bf16\"]", "");
        let r = report(
            &s,
            vec![trial(&s, &[], 0.010), trial(&s, &[("amp", "bf16")], 0.0101)],
        );
        assert!(by_rule(&r, "amp").is_empty());
    }
}
