//! Clearing gradients by releasing them (`zero_grad(set_to_none=True)`) instead of
//! zero-filling: recommended when measured faster and learning the same.

use super::{measured_change, mib, Ctx, Say};
use crate::knobs::ZeroGrad;
use crate::results::model::Recommendation;

pub fn check(cx: &Ctx) -> Vec<Recommendation> {
    let tried: Vec<_> = cx
        .varying("zero_grad")
        .into_iter()
        .filter(|t| t.knobs.zero_grad == ZeroGrad::None)
        .collect();
    let Some((t, r)) = cx.best_gain(&tried) else {
        return Vec::new();
    };
    let mut evidence = Vec::new();
    if let (Some(b), Some(x)) = (cx.base.and_then(|b| b.peak_total_bytes), t.peak_total_bytes) {
        evidence.push(format!(
            "peak memory {:.1} MiB vs {:.1} MiB at the baseline",
            mib(x),
            mib(b)
        ));
    }
    vec![measured_change(
        cx,
        t,
        r,
        "zero_grad",
        Say {
            title: "Release gradients instead of zero-filling them".into(),
            evidence,
            tune_flag: super::flag("zero_grad", "none"),
            pytorch: cx.line("zero_grad", "none"),
        },
    )]
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{by_rule, report, spec, trial};

    #[test]
    fn fires_on_a_significant_speedup() {
        let s = spec("zero_grad = [\"memset\", \"none\"]", "");
        let r = report(
            &s,
            vec![
                trial(&s, &[], 0.010),
                trial(&s, &[("zero_grad", "none")], 0.0095),
            ],
        );
        let recs = by_rule(&r, "zero_grad");
        assert_eq!(recs.len(), 1, "{:?}", r.trials[1].ratio_vs_baseline);
        assert_eq!(recs[0].pytorch, "optimizer.zero_grad(set_to_none=True)");
        assert_eq!(recs[0].tune_flag, "--zero-grad none");
    }

    #[test]
    fn silent_when_not_significant_or_slower() {
        let s = spec("zero_grad = [\"memset\", \"none\"]", "");
        for step in [0.0100, 0.0110] {
            let r = report(
                &s,
                vec![
                    trial(&s, &[], 0.010),
                    trial(&s, &[("zero_grad", "none")], step),
                ],
            );
            assert!(by_rule(&r, "zero_grad").is_empty(), "{step}");
        }
    }

    #[test]
    fn silent_when_the_faster_run_lost_accuracy() {
        let s = spec("zero_grad = [\"memset\", \"none\"]", "");
        let r = report(
            &s,
            vec![
                trial(&s, &[], 0.010),
                trial(&s, &[("zero_grad", "none")], 0.008).accuracy(Some(0.5)),
            ],
        );
        assert!(by_rule(&r, "zero_grad").is_empty());
    }
}
