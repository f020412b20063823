//! Data loading: when the step waits for batches, more loader workers overlap loading
//! with compute (`DataLoader(num_workers=N)`).

use super::{fmt_pct, measured_change, unmeasured_change, Ctx, Say};
use crate::results::model::{Recommendation, Report, TrialReport};
use crate::results::record::Status;

/// Data wait above this share of a step is worth fixing (DESIGN.md's anchor).
pub const SHARE: f64 = 0.05;

/// Fewer loader workers are worth recommending for memory alone when they save at least
/// this share of the resident peak and `MIN_SAVED_MIB`: the planted case (4 workers
/// 2861 MiB against 1043 MiB at the same speed, #31) is far above both, a sampling
/// jitter of a few MiB far below.
pub const MIN_SAVED_SHARE: f64 = 0.20;
pub const MIN_SAVED_MIB: f64 = 64.0;

/// An untested worker count is suggested only when removing all of the wait could gain
/// at least this much, and twice the baseline's repeat noise: a 6.9% wait ("at most
/// 1.07x", noise 6.3%) was suggested on an optimizer-bound recommender whose fused Adam
/// then measured 3.5x (scripts/realistic/recsys.py), a change not worth its time.
pub const UNMEASURED_MIN_GAIN: f64 = 0.10;

/// Whether a wait of `share` of each step on `cores` cores could pay for an untested
/// worker count: removing all of it gains at least `UNMEASURED_MIN_GAIN` and `noise`.
pub fn worth_untested(share: f64, cores: usize, noise: f64) -> bool {
    bound(share, cores) - 1.0 >= UNMEASURED_MIN_GAIN.max(noise)
}

/// The most that overlapping a wait of `share` of each step can give on `cores` cores:
/// Amdahl's 1/(1 - share), and never more than the cores, since loading and training
/// then run on them at once (an upper bound: it assumes training uses one core).
pub fn bound(share: f64, cores: usize) -> f64 {
    (1.0 / (1.0 - share).max(1e-6)).min(cores.max(1) as f64)
}

/// The workers a trial's loader ran: the value tune applied, or for the baseline the
/// script's own (read by the hooks), which tune does not force.
fn workers_of(cx: &Ctx, t: &TrialReport) -> usize {
    let own = (Some(t.id.as_str()) == cx.report.baseline.as_deref())
        .then(|| cx.own("num_workers")?.parse().ok())
        .flatten();
    own.unwrap_or(t.knobs.num_workers)
}

pub fn check(cx: &Ctx) -> Vec<Recommendation> {
    let Some(base) = cx.base else {
        return Vec::new();
    };
    let share = base.phase_share.get("data_wait").copied().unwrap_or(0.0);
    if share <= SHARE {
        return cheaper(cx, base).into_iter().collect();
    }
    // The workers the baseline really ran: the script's own when tune left them (#31).
    let workers = workers_of(cx, base);
    let seen = format!(
        "{} waits for data {} of each step",
        cx.baseline_named("num_workers"),
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
        let cores = cx.report.environment.cores;
        if n >= cores {
            evidence.push(format!(
                "num_workers={n} is not below this machine's {cores} cores: the workers and the \
                 training compete for them; it measured faster here, but on a busier machine \
                 fewer may do as well"
            ));
        }
        if t.id != best.id {
            evidence.push(format!(
                "num_workers={} measured {}, statistically tied with num_workers={n}'s {}: \
                 the fewer workers cost fewer processes and less memory{}",
                best.knobs.num_workers,
                super::fmt_ratio(&best_r),
                super::fmt_ratio(&r),
                match (best.rss_peak_bytes, t.rss_peak_bytes) {
                    (Some(a), Some(b)) => format!(
                        " ({:.0} MiB against {:.0} MiB resident at the peak: {:.0} MiB saved)",
                        super::mib(a),
                        super::mib(b),
                        super::mib(a.saturating_sub(b))
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
                tune_flag: super::flag("num_workers", &n.to_string()),
                pytorch: cx.line("num_workers", &n.to_string()),
            },
        )];
    }
    if tried.iter().any(|t| t.status == Status::Ok) {
        // More workers were measured and did not help: nothing to recommend for speed.
        return cheaper(cx, base).into_iter().collect();
    }
    let cores = cx.report.environment.cores;
    // One core is left to the training process itself.
    let n = cores.saturating_sub(1).clamp(1, 8);
    if workers_of(cx, base) >= n || !worth_untested(share, cores, 2.0 * base.noise_floor) {
        // The script already runs that many (more would only compete for the cores), or
        // the most the wait could give is too small to be worth an untested change.
        return cheaper(cx, base).into_iter().collect();
    }
    vec![unmeasured_change(Say {
        title: format!("Try loading data in worker processes (num_workers={n})"),
        evidence: vec![
            seen,
            format!(
                "num_workers was not varied in this sweep; overlapping all of the wait would give \
                 at most {:.2}× on this machine's {cores} core{} (loading and training share \
                 them)",
                bound(share, cores),
                if cores == 1 { "" } else { "s" }
            ),
        ],
        tune_flag: super::flag("num_workers", &n.to_string()),
        pytorch: cx.line("num_workers", &n.to_string()),
    })]
}

/// MiB of resident peak that `rec` (this rule's) saves against the baseline, when that
/// alone would earn a recommendation (the thresholds of [`cheaper`]): a change claimed
/// faster whose confirmation measures it as fast, not faster, stays for its memory.
pub fn memory_kept(r: &Report, rec: &Recommendation) -> Option<f64> {
    if rec.rule != "data_wait" {
        return None;
    }
    let t = super::drift::trial_of(r, rec)?;
    let base_mem = Ctx::new(r).base?.rss_peak_bytes? as f64;
    let saved = base_mem - t.rss_peak_bytes? as f64;
    saves_enough(base_mem, saved).then(|| super::mib(saved as u64))
}

/// Whether `saved` bytes of a resident peak of `base_mem` are worth a recommendation.
fn saves_enough(base_mem: f64, saved: f64) -> bool {
    saved >= MIN_SAVED_SHARE * base_mem && super::mib(saved as u64) >= MIN_SAVED_MIB
}

/// Fewer workers for memory: a trial with fewer loader workers than the baseline, not
/// slower beyond the noise margin, whose resident peak is much lower (#31: "4 workers buy
/// nothing"). Of several, the one that saves the most.
fn cheaper(cx: &Ctx, base: &TrialReport) -> Option<Recommendation> {
    let have = workers_of(cx, base);
    let base_mem = base.rss_peak_bytes? as f64;
    let (t, r, saved, noise) = cx
        .varying("num_workers")
        .into_iter()
        .filter(|t| t.status == Status::Ok && t.knobs.num_workers < have)
        .filter(|t| cx.parity(t).allows())
        .filter_map(|t| {
            let r = t.ratio_vs_baseline?;
            let saved = base_mem - t.rss_peak_bytes? as f64;
            // Slower only beyond the run-to-run noise a gain must clear (`drift::margin`):
            // on a quiet 2-core machine a script's 4 idle workers measured 4% faster than
            // 2 (0.959x [0.936, 0.993]) in one run and not in the next, and a bootstrap over
            // one run's steps called that significant.
            let noise = super::drift::margin(cx.report, Some(t)).value;
            let slower = r.significant && r.hi < 1.0 / (1.0 + noise);
            (!slower && saves_enough(base_mem, saved)).then_some((t, r, saved, noise))
        })
        .max_by(|a, b| a.2.total_cmp(&b.2))?;
    let n = t.knobs.num_workers;
    let faster = r.significant && r.ratio > 1.0;
    let mut rec = measured_change(
        cx,
        t,
        r,
        "num_workers",
        Say {
            // Faster and cheaper is said as both (#31): fewer workers that also win on
            // speed keep their memory saving in the title.
            title: format!(
                "Use num_workers={n}: {} here, with {:.0} MiB less memory",
                if faster { "faster" } else { "as fast" },
                super::mib(saved as u64)
            ),
            evidence: vec![format!(
                "{}'s {have} loader workers buy no speed: num_workers={n} measured {} \
                 ({}) at {:.0} MiB resident at the peak against {:.0} MiB; each worker is a \
                 process with its own copy of the dataset object and its prefetched batches",
                if cx.own("num_workers").is_some() {
                    "your script"
                } else {
                    "the baseline"
                },
                super::fmt_ratio(&r),
                if faster {
                    "significantly faster".to_string()
                } else if r.significant && r.ratio < 1.0 {
                    format!(
                        "slower by less than the {:.0}% run-to-run noise margin",
                        noise * 100.0
                    )
                } else {
                    "not significantly slower".to_string()
                },
                super::mib(t.rss_peak_bytes.unwrap_or(0)),
                super::mib(base_mem as u64)
            )],
            tune_flag: super::flag("num_workers", &n.to_string()),
            pytorch: cx.line("num_workers", &n.to_string()),
        },
    );
    // The gain is memory, not speed: a tie is not a claimed speed-up.
    if !faster {
        rec.confidence = "medium".into();
    }
    Some(rec)
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
        assert_eq!(recs[0].change.get("num_workers").unwrap(), "2");
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
        assert_eq!(recs[0].change.get("num_workers").unwrap(), "2", "{recs:?}");
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

    #[test]
    fn the_bound_of_more_workers_respects_the_cores() {
        // 85% wait: Amdahl alone says 6.67×; loading and training share 2 cores.
        assert!((super::bound(0.85, 2) - 2.0).abs() < 1e-9);
        assert!((super::bound(0.5, 16) - 2.0).abs() < 1e-9);
        let s = spec("zero_grad = [\"memset\", \"none\"]", "");
        let mut r = report(
            &s,
            vec![
                trial(&s, &[], 0.010).phase("data_wait", 0.85),
                trial(&s, &[("zero_grad", "none")], 0.010),
            ],
        );
        r.environment.cores = 2;
        let recs = crate::advisor::advise(&r);
        let x = recs.iter().find(|x| x.rule == "data_wait").unwrap();
        assert!(x.tune_flag == "--num-workers 1", "{x:?}");
        assert!(
            x.finding
                .evidence
                .contains("at most 2.00× on this machine's 2 cores"),
            "{}",
            x.finding.evidence
        );
    }

    #[test]
    fn workers_that_buy_nothing_give_a_memory_recommendation() {
        // The baseline's 4 workers and 2 workers measure the same speed; 2 use far less.
        let s = spec("num_workers = [4, 2]", "");
        let r = report(
            &s,
            vec![
                trial(&s, &[], 0.010).rss_mib(2861),
                trial(&s, &[("num_workers", "2")], 0.010).rss_mib(1043),
            ],
        );
        let recs = by_rule(&r, "data_wait");
        assert_eq!(recs.len(), 1, "{recs:?}");
        assert_eq!(recs[0].change.get("num_workers").unwrap(), "2", "{recs:?}");
        assert!(
            recs[0].finding.title.contains("1818 MiB less memory"),
            "{}",
            recs[0].finding.title
        );
        // A small saving is no reason.
        let r = report(
            &s,
            vec![
                trial(&s, &[], 0.010).rss_mib(1100),
                trial(&s, &[("num_workers", "2")], 0.010).rss_mib(1043),
            ],
        );
        assert!(by_rule(&r, "data_wait").is_empty());
    }

    #[test]
    fn the_evidence_names_the_scripts_own_workers() {
        // The script runs 1 worker of its own; tune's first value (0) is not what ran.
        let s = spec("num_workers = [0, 2]", "");
        let r = report(
            &s,
            vec![
                trial(&s, &[], 0.010)
                    .phase("data_wait", 0.30)
                    .script_knob("num_workers", "1"),
                trial(&s, &[("num_workers", "2")], 0.007).phase("data_wait", 0.01),
            ],
        );
        let recs = by_rule(&r, "data_wait");
        assert_eq!(recs.len(), 1, "{recs:?}");
        let ev = &recs[0].finding.evidence;
        assert!(
            ev.contains("your script's num_workers=1 waits for data"),
            "{ev}"
        );
        assert!(!ev.contains("the baseline (num_workers=0)"), "{ev}");
    }

    #[test]
    fn fewer_workers_that_are_also_faster_say_both() {
        // The script's 4 workers are slower than 2 on 2 cores and hold far more memory.
        let s = spec("num_workers = [0, 2]", "");
        let r = report(
            &s,
            vec![
                trial(&s, &[], 0.010)
                    .rss_mib(2861)
                    .script_knob("num_workers", "4"),
                trial(&s, &[("num_workers", "2")], 0.007).rss_mib(1043),
            ],
        );
        let recs = crate::advisor::advise(&r);
        let x = recs
            .iter()
            .find(|x| x.change.get("num_workers") == Some("2"))
            .unwrap_or_else(|| panic!("{recs:?}"));
        assert!(
            x.finding
                .title
                .contains("faster here, with 1818 MiB less memory"),
            "{}",
            x.finding.title
        );
        assert!(
            x.finding
                .evidence
                .contains("your script's 4 loader workers"),
            "{}",
            x.finding.evidence
        );
        assert_eq!(
            recs.iter()
                .filter(|x| x.change.contains_key("num_workers"))
                .count(),
            1,
            "{recs:?}"
        );
    }
}
