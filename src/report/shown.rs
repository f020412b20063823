//! Which configurations the per-configuration charts draw. A chart of 100,000 bars is
//! not readable (and its SVG alone ran to gigabytes, #27): past [`CHART_MAX`]
//! configurations each chart shows the baseline, the configuration the headline calls
//! fastest and the fastest others by median samples/s, and the page says so. Every
//! configuration stays in the trials table and in report.json.

use crate::results::model::{Report, TrialReport};

/// Most configurations a chart draws: 50 rows keep the throughput chart under 1,400
/// pixels tall, and a sweep of that size (a grid of 2 x 5 x 5) is still drawn in full.
pub(super) const CHART_MAX: usize = 50;

/// The configurations the charts draw, in report order.
pub(super) struct Shown<'a> {
    pub trials: Vec<&'a TrialReport>,
    /// Configurations in the report.
    pub total: usize,
}

impl<'a> Shown<'a> {
    /// At most [`CHART_MAX`] of `r`'s trials: all of them when they fit; else the
    /// baseline, `fastest` and the fastest others by median samples/s, found by
    /// selection (linear), not by sorting all of them.
    pub(super) fn of(r: &'a Report, fastest: Option<&str>) -> Shown<'a> {
        let total = r.trials.len();
        if total <= CHART_MAX {
            return Shown {
                trials: r.trials.iter().collect(),
                total,
            };
        }
        let mut keep = vec![false; total];
        let mut room = CHART_MAX;
        for (i, t) in r.trials.iter().enumerate() {
            let pinned = r.baseline.as_deref() == Some(t.id.as_str()) || fastest == Some(&t.id);
            if pinned && room > 0 {
                keep[i] = true;
                room -= 1;
            }
        }
        let mut rest: Vec<(f64, usize)> = r
            .trials
            .iter()
            .enumerate()
            .filter(|(i, _)| !keep[*i])
            .filter_map(|(i, t)| Some((t.samples_per_s?.median, i)))
            .filter(|(m, _)| m.is_finite())
            .collect();
        // Fastest first; ties by report order, so the choice is the same on every run.
        let faster = |a: &(f64, usize), b: &(f64, usize)| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1));
        if rest.len() > room && room > 0 {
            rest.select_nth_unstable_by(room - 1, faster);
        }
        rest.truncate(room);
        for (_, i) in rest {
            keep[i] = true;
        }
        Shown {
            trials: r
                .trials
                .iter()
                .zip(&keep)
                .filter(|(_, k)| **k)
                .map(|(t, _)| t)
                .collect(),
            total,
        }
    }

    /// Whether some configurations are left out of the charts.
    pub(super) fn partial(&self) -> bool {
        self.trials.len() < self.total
    }

    /// The sentence the page shows above the charts when they leave configurations out.
    pub(super) fn note(&self) -> Option<String> {
        self.partial().then(|| {
            format!(
                "This report has {} configurations, too many to draw one by one: each chart \
                 shows {} of them, the baseline and the fastest by median throughput (the \
                 throughput-vs-memory chart also its Pareto front). Every configuration is in \
                 the Trials table below and in report.json.",
                self.total,
                self.trials.len()
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::advisor::testkit::{report, spec, trial};

    #[test]
    fn past_the_limit_the_baseline_and_the_fastest_are_shown_in_report_order() {
        let s = spec("num_workers = [0, 1, 2]", "strategy = \"grid\"");
        let n = 3 * CHART_MAX;
        // Step times fall with i: the last trials are the fastest.
        let trials = (0..n)
            .map(|i| {
                let w = i.to_string();
                trial(&s, &[("num_workers", w.as_str())], 0.02 - 0.0001 * i as f64)
            })
            .collect();
        let r = report(&s, trials);
        let slowest_id = r.trials[1].id.clone();
        let shown = Shown::of(&r, Some(&slowest_id));
        assert_eq!(shown.total, n);
        assert_eq!(shown.trials.len(), CHART_MAX);
        assert!(shown.partial() && shown.note().unwrap().contains("150 configurations"));
        let ids: Vec<&str> = shown.trials.iter().map(|t| t.id.as_str()).collect();
        assert_eq!(Some(ids[0]), r.baseline.as_deref(), "the baseline first");
        assert_eq!(ids[1], slowest_id, "the named fastest, whatever its speed");
        // Then the 48 fastest others, in report order.
        let mut others: Vec<&TrialReport> = r.trials[2..].iter().collect();
        others.sort_by(|a, b| {
            let m = |t: &TrialReport| t.samples_per_s.unwrap().median;
            m(b).total_cmp(&m(a))
        });
        let top: Vec<&str> = others[..CHART_MAX - 2]
            .iter()
            .map(|t| t.id.as_str())
            .collect();
        let want: Vec<&str> = r
            .trials
            .iter()
            .map(|t| t.id.as_str())
            .filter(|id| top.contains(id))
            .collect();
        assert_eq!(&ids[2..], &want[..]);
        // Under the limit: everything, no note.
        let small = report(&s, vec![trial(&s, &[], 0.01)]);
        let all = Shown::of(&small, None);
        assert!(!all.partial() && all.note().is_none() && all.trials.len() == small.trials.len());
    }
}
