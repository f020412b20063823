//! Low device utilization: the device idles between kernels, so a larger batch gives it
//! more work per launch. Utilization comes from the GPU timeline when there is one, else
//! from the engine's per-device busy shares. Silent when waiting for data explains the
//! idle time (the data-loading rule covers that).

use super::{fmt_pct, measured_change, unmeasured_change, Ctx, Say};
use crate::results::model::{Recommendation, TrialReport};
use crate::results::record::Status;

/// Mean utilization below this is low (DESIGN.md's anchor).
pub const LOW: f64 = 0.50;

/// Mean utilization (0..=1) of `t`'s devices, and where the figure comes from.
pub fn utilization(cx: &Ctx, t: &TrialReport) -> Option<(f64, &'static str)> {
    if let Some(span) = cx.report.trial_spans.iter().find(|s| s.id == t.id) {
        let v: Vec<f64> = cx
            .report
            .timeline
            .iter()
            .filter(|s| s.metric == "util_gpu_pct" && s.t_s >= span.start_s && s.t_s <= span.end_s)
            .map(|s| s.value / 100.0)
            .collect();
        if !v.is_empty() {
            return Some((
                v.iter().sum::<f64>() / v.len() as f64,
                "GPU utilization samples",
            ));
        }
    }
    let v: Vec<f64> = t.devices.iter().filter_map(|d| d.busy_share()).collect();
    (!v.is_empty()).then(|| (v.iter().sum::<f64>() / v.len() as f64, "device busy time"))
}

pub fn check(cx: &Ctx) -> Vec<Recommendation> {
    let Some(base) = cx.base else {
        return Vec::new();
    };
    let Some((util, source)) = utilization(cx, base) else {
        return Vec::new();
    };
    if util >= LOW {
        return Vec::new();
    }
    let idle = 1.0 - util;
    let waiting = base.phase_share.get("data_wait").copied().unwrap_or(0.0)
        + base.phase_share.get("h2d").copied().unwrap_or(0.0);
    if waiting >= idle / 2.0 {
        return Vec::new();
    }
    let seen = format!(
        "the baseline's devices are busy {} of the time ({source}; batch_size={})",
        fmt_pct(util),
        base.knobs.batch_size
    );
    let tried: Vec<_> = cx
        .varying("batch_size")
        .into_iter()
        .filter(|t| t.knobs.batch_size > base.knobs.batch_size)
        .collect();
    if let Some((t, r)) = cx.best_gain(&tried) {
        let b = t.knobs.batch_size;
        let mut evidence = vec![seen];
        if let Some((u, _)) = utilization(cx, t) {
            evidence.push(format!("at batch_size={b}: busy {}", fmt_pct(u)));
        }
        evidence.push("scale the learning rate with the batch (linear rule, with warm-up)".into());
        return vec![measured_change(
            cx,
            t,
            r,
            "batch_size",
            Say {
                title: format!("Raise the batch size to {b}"),
                evidence,
                tune_flag: super::flag("batch_size", &b.to_string()),
                pytorch: cx.line("batch_size", &b.to_string()),
            },
        )];
    }
    if tried.iter().any(|t| t.status == Status::Ok) {
        return Vec::new();
    }
    let b = base.knobs.batch_size * 2;
    vec![unmeasured_change(Say {
        title: format!("Try a larger batch (batch_size={b})"),
        evidence: vec![
            seen,
            "larger batches were not measured in this sweep".into(),
        ],
        tune_flag: super::flag("batch_size", &b.to_string()),
        pytorch: format!("DataLoader(dataset, batch_size={b})  # and scale the learning rate"),
    })]
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{by_rule, report, spec, trial};

    #[test]
    fn fires_when_devices_idle_and_a_bigger_batch_is_faster() {
        let s = spec("batch_size = [32, 64]", "");
        let r = report(
            &s,
            vec![
                trial(&s, &[], 0.010).devices(&[(0.35, 100, 0.0)]),
                // Twice the samples in 1.4 times the time.
                trial(&s, &[("batch_size", "64")], 0.014).devices(&[(0.6, 150, 0.0)]),
            ],
        );
        let recs = by_rule(&r, "utilization");
        assert_eq!(recs.len(), 1, "{:?}", r.recommendations);
        assert_eq!(recs[0].tune_flag, "--batch-size 64");
        assert!(recs[0].finding.evidence.contains("35.0%"));
        assert!(recs[0].pytorch.contains("batch_size=64"));
    }

    #[test]
    fn silent_when_busy_or_when_data_wait_explains_the_idle_time() {
        let s = spec("batch_size = [32, 64]", "");
        let busy = report(
            &s,
            vec![
                trial(&s, &[], 0.010).devices(&[(0.9, 100, 0.0)]),
                trial(&s, &[("batch_size", "64")], 0.014),
            ],
        );
        assert!(by_rule(&busy, "utilization").is_empty());
        let loader = report(
            &s,
            vec![
                trial(&s, &[], 0.010)
                    .devices(&[(0.35, 100, 0.0)])
                    .phase("data_wait", 0.6),
                trial(&s, &[("batch_size", "64")], 0.014),
            ],
        );
        assert!(by_rule(&loader, "utilization").is_empty());
    }

    #[test]
    fn silent_when_the_bigger_batch_is_no_faster() {
        let s = spec("batch_size = [32, 64]", "");
        let r = report(
            &s,
            vec![
                trial(&s, &[], 0.010).devices(&[(0.35, 100, 0.0)]),
                trial(&s, &[("batch_size", "64")], 0.020),
            ],
        );
        assert!(by_rule(&r, "utilization").is_empty());
    }
}
