//! Communication: when gradient exchange takes a large share of a multi-device step,
//! fewer, larger all-reduces (a bigger DDP bucket) or fewer of them per sample (gradient
//! accumulation) cut it.

use super::{fmt_pct, measured_change, unmeasured_change, Ctx, Say};
use crate::knobs::Parallel;
use crate::results::model::{Recommendation, TrialReport};
use crate::results::record::Status;

/// Communication above this share of a step is worth cutting (DESIGN.md's anchor).
pub const SHARE: f64 = 0.10;

const PYTORCH: &str = "DistributedDataParallel(model, bucket_cap_mb=100); \
                       accumulate with `with model.no_sync(): loss.backward()` on all but the last micro-batch";

/// The step share spent communicating: the `comm` phase, else the devices' mean.
pub fn share(t: &TrialReport) -> f64 {
    if let Some(s) = t.phase_share.get("comm") {
        return *s;
    }
    let v: Vec<f64> = t.devices.iter().filter_map(|d| d.comm_share()).collect();
    if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

pub fn check(cx: &Ctx) -> Vec<Recommendation> {
    let Some(t) = cx
        .report
        .trials
        .iter()
        .filter(|t| t.status == Status::Ok && t.knobs.parallel != Parallel::Single)
        .filter(|t| share(t) > SHARE)
        .max_by(|a, b| share(a).total_cmp(&share(b)))
    else {
        return Vec::new();
    };
    let seen = format!(
        "{}: communication takes {} of each step",
        t.label,
        fmt_pct(share(t))
    );
    // The same configuration with more accumulation, if the sweep ran one.
    let accum: Vec<&TrialReport> = cx
        .report
        .trials
        .iter()
        .filter(|x| {
            x.knobs.grad_accum > t.knobs.grad_accum
                && super::differs_only_in(&x.knobs, &t.knobs, "grad_accum")
        })
        .collect();
    let best = accum
        .iter()
        .filter(|x| x.status == Status::Ok)
        .filter_map(|x| Some((*x, cx.ratio(t, x)?)))
        .filter(|(x, r)| r.significant && r.ratio > 1.0 && cx.parity(x).allows())
        .max_by(|a, b| a.1.ratio.total_cmp(&b.1.ratio));
    if let Some((x, r)) = best {
        let k = x.knobs.grad_accum;
        let mut rec = measured_change(
            cx,
            x,
            r,
            "grad_accum",
            Say {
                title: format!("Accumulate {k} micro-batches per all-reduce"),
                evidence: vec![
                    seen,
                    format!(
                        "{}: {} of the step communicating",
                        x.label,
                        fmt_pct(share(x))
                    ),
                    format!("{} over {}: {}", x.label, t.label, super::fmt_ratio(&r)),
                ],
                tune_flag: super::flag("grad_accum", &k.to_string()),
                pytorch: PYTORCH.into(),
            },
        );
        // The gain is over the communicating configuration, not the baseline.
        rec.finding.evidence = rec
            .finding
            .evidence
            .split("; ")
            .filter(|e| !e.contains("throughput vs the baseline"))
            .collect::<Vec<_>>()
            .join("; ");
        for knob in ["parallel", "devices"] {
            rec.change.take(knob, &x.knobs);
        }
        return vec![rec];
    }
    if accum.iter().any(|x| x.status == Status::Ok) {
        return Vec::new();
    }
    vec![unmeasured_change(Say {
        title: "Cut communication: larger DDP buckets or gradient accumulation".into(),
        evidence: vec![
            seen,
            format!(
                "not measured in this sweep; hiding all of it would give at most {:.2}×",
                1.0 / (1.0 - share(t)).max(1e-6)
            ),
        ],
        tune_flag: format!(
            "{} or {}",
            super::flag("bucket_mb", "100"),
            super::flag("grad_accum", "2")
        ),
        pytorch: PYTORCH.into(),
    })]
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{by_rule, report, spec, trial};

    fn sweep(ddp_comm: f64, accum_step: Option<f64>) -> crate::results::model::Report {
        let s = spec(
            "parallel = [\"single\", \"ddp\"]\ndevices = [1, 2]\ngrad_accum = [1, 2]",
            "strategy = \"grid\"",
        );
        let mut t = vec![
            trial(&s, &[], 0.010),
            trial(&s, &[("parallel", "ddp"), ("devices", "2")], 0.008).phase("comm", ddp_comm),
        ];
        if let Some(step) = accum_step {
            // Two micro-batches per step: twice the samples.
            t.push(
                trial(
                    &s,
                    &[("parallel", "ddp"), ("devices", "2"), ("grad_accum", "2")],
                    step,
                )
                .phase("comm", ddp_comm / 2.0),
            );
        }
        report(&s, t)
    }

    #[test]
    fn fires_with_the_accumulation_gain() {
        let r = sweep(0.30, Some(0.013));
        let recs = by_rule(&r, "comm");
        assert_eq!(recs.len(), 1, "{:?}", r.recommendations);
        assert_eq!(recs[0].tune_flag, "--grad-accum 2");
        let g = recs[0].expected_gain.unwrap();
        assert!(g.significant && g.ratio > 1.15, "{g:?}");
        assert_eq!(recs[0].change.get("parallel").unwrap(), "ddp");
    }

    #[test]
    fn untried_gives_a_low_confidence_suggestion() {
        let r = sweep(0.30, None);
        let recs = by_rule(&r, "comm");
        assert_eq!(recs.len(), 1);
        assert_eq!(recs[0].confidence, "low");
        assert!(recs[0].pytorch.contains("bucket_cap_mb"));
    }

    #[test]
    fn silent_below_the_threshold_or_without_effect() {
        assert!(by_rule(&sweep(0.05, None), "comm").is_empty());
        // Twice the samples in twice the time: no gain.
        assert!(by_rule(&sweep(0.30, Some(0.016)), "comm").is_empty());
    }
}
