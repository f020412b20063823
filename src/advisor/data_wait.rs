//! Data loading: when the step waits for batches, more loader workers overlap loading
//! with compute (`DataLoader(num_workers=N)`).

use super::{fmt_pct, measured_change, unmeasured_change, Ctx, Say};
use crate::knobs::torch_line;
use crate::results::model::Recommendation;
use crate::results::record::Status;

/// Data wait above this share of a step is worth fixing (DESIGN.md's anchor).
pub const SHARE: f64 = 0.05;

pub fn check(cx: &Ctx) -> Vec<Recommendation> {
    let Some(base) = cx.base else {
        return Vec::new();
    };
    let share = base.phase_share.get("data_wait").copied().unwrap_or(0.0);
    if share <= SHARE {
        return Vec::new();
    }
    let workers = base.knobs.num_workers;
    let seen = format!(
        "the baseline (num_workers={workers}) waits for data {} of each step",
        fmt_pct(share)
    );
    let tried: Vec<_> = cx
        .varying("num_workers")
        .into_iter()
        .filter(|t| t.knobs.num_workers > workers)
        .collect();
    if let Some((best, best_r)) = cx.best_gain(&tried) {
        // Each worker is a process with its own copy of the dataset object and prefetched
        // batches (seen: 4 workers 2861 MiB against 1043 MiB for the same speed): of the
        // configurations statistically tied with the fastest, the fewest workers.
        let (t, r) = tried
            .iter()
            .filter(|x| x.knobs.num_workers < best.knobs.num_workers)
            .filter_map(|x| Some((*x, cx.best_gain(&[*x])?.1)))
            .filter(|(_, x)| x.lo <= best_r.hi && best_r.lo <= x.hi)
            .min_by_key(|(x, _)| x.knobs.num_workers)
            .unwrap_or((best, best_r));
        let n = t.knobs.num_workers;
        let mut evidence = vec![seen];
        if t.id != best.id {
            evidence.push(format!(
                "num_workers={} measured {}, statistically tied with num_workers={n}'s {}: \
                 the fewer workers cost fewer processes and less memory{}",
                best.knobs.num_workers,
                super::fmt_ratio(&best_r),
                super::fmt_ratio(&r),
                match (best.rss_peak_bytes, t.rss_peak_bytes) {
                    (Some(a), Some(b)) => format!(
                        " ({:.0} MiB against {:.0} MiB resident at the peak)",
                        super::mib(a),
                        super::mib(b)
                    ),
                    _ => String::new(),
                }
            ));
        }
        if let Some(s) = t.phase_share.get("data_wait") {
            evidence.push(format!("with num_workers={n} the wait is {}", fmt_pct(*s)));
        }
        return vec![measured_change(
            cx,
            t,
            r,
            "num_workers",
            Say {
                title: format!("Load data in {n} worker threads"),
                evidence,
                tune_flag: format!("--num-workers {n}"),
                pytorch: torch_line("num_workers", &n.to_string(), cx.backend()),
            },
        )];
    }
    if tried.iter().any(|t| t.status == Status::Ok) {
        // More workers were measured and did not help: nothing to recommend.
        return Vec::new();
    }
    let n = (cx.report.environment.cores / 2).clamp(2, 8);
    vec![unmeasured_change(Say {
        title: format!("Try loading data in worker threads (num_workers={n})"),
        evidence: vec![
            seen,
            format!(
                "num_workers was not varied in this sweep; overlapping all of the wait would give at most {:.2}×",
                1.0 / (1.0 - share).max(1e-6)
            ),
        ],
        tune_flag: format!("--num-workers {n}"),
        pytorch: torch_line("num_workers", &n.to_string(), cx.backend()),
    })]
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{by_rule, report, spec, trial};

    #[test]
    fn fires_with_the_measured_gain() {
        let s = spec("num_workers = [0, 2]", "");
        let r = report(
            &s,
            vec![
                trial(&s, &[], 0.010).phase("data_wait", 0.30),
                trial(&s, &[("num_workers", "2")], 0.007).phase("data_wait", 0.01),
            ],
        );
        let recs = by_rule(&r, "data_wait");
        assert_eq!(recs.len(), 1, "{recs:?}");
        let g = recs[0].expected_gain.unwrap();
        assert!(g.significant && g.lo > 1.3 && g.hi < 1.6, "{g:?}");
        assert_eq!(recs[0].tune_flag, "--num-workers 2");
        assert!(recs[0].pytorch.contains("num_workers=2"));
        assert!(
            recs[0].finding.evidence.contains("30.0%"),
            "{}",
            recs[0].finding.evidence
        );
        assert_eq!(recs[0].confidence, "high");
        assert_eq!(recs[0].change["num_workers"], "2");
    }

    #[test]
    fn of_tied_worker_counts_the_fewest_is_recommended() {
        let s = spec("num_workers = [0, 2, 4]", "");
        let r = report(
            &s,
            vec![
                trial(&s, &[], 0.010).phase("data_wait", 0.30),
                trial(&s, &[("num_workers", "2")], 0.0070).phase("data_wait", 0.01),
                trial(&s, &[("num_workers", "4")], 0.00696).phase("data_wait", 0.01),
            ],
        );
        let recs = by_rule(&r, "data_wait");
        assert_eq!(recs.len(), 1, "{recs:?}");
        assert_eq!(recs[0].change["num_workers"], "2", "{recs:?}");
        assert!(
            recs[0].finding.evidence.contains("statistically tied"),
            "{}",
            recs[0].finding.evidence
        );
    }

    #[test]
    fn silent_when_loading_is_not_the_bottleneck() {
        let s = spec("num_workers = [0, 2]", "");
        let r = report(
            &s,
            vec![
                trial(&s, &[], 0.010).phase("data_wait", 0.02),
                trial(&s, &[("num_workers", "2")], 0.007),
            ],
        );
        assert!(by_rule(&r, "data_wait").is_empty());
    }

    #[test]
    fn silent_when_more_workers_show_no_significant_effect() {
        let s = spec("num_workers = [0, 2]", "");
        let r = report(
            &s,
            vec![
                trial(&s, &[], 0.010).phase("data_wait", 0.30),
                trial(&s, &[("num_workers", "2")], 0.010).phase("data_wait", 0.28),
            ],
        );
        let t = &r.trials[1];
        assert!(!t.ratio_vs_baseline.unwrap().significant, "{t:?}");
        assert!(by_rule(&r, "data_wait").is_empty());
    }

    #[test]
    fn untried_knob_gives_a_low_confidence_suggestion_without_a_gain() {
        let s = spec("zero_grad = [\"memset\", \"none\"]", "");
        let r = report(
            &s,
            vec![
                trial(&s, &[], 0.010).phase("data_wait", 0.40),
                trial(&s, &[("zero_grad", "none")], 0.010),
            ],
        );
        let recs = by_rule(&r, "data_wait");
        assert_eq!(recs.len(), 1);
        assert_eq!(recs[0].confidence, "low");
        assert!(recs[0].expected_gain.is_none());
        assert!(recs[0].change.is_empty());
    }
}
