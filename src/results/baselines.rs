//! The baseline measured again through the sweep (#31). A sweep's trials run minutes
//! apart; when the baseline's own minute was a busy one, every later trial looked faster
//! by the same factor (six changes once came out "high" that way). So the runner runs the
//! baseline again after every `EVERY` plan trials, each trial's ratio is taken against
//! the baseline run nearest it in time, and the runs on each side of it are kept so the
//! advisor can demand that a gain beats both (`advisor::drift`).

use super::model::{BaselineRatio, Drift, Ratio, TrialReport};
use crate::knobs::Knobs;
use crate::results::record::{Repeat, Status, TrialRecord};
use crate::stats::{self, Bootstrap};

/// Journal ids of the baseline's runs interleaved through the plan start with this.
pub const AGAIN_PREFIX: &str = "baseline-again:";

/// Plan trials between two runs of the baseline. Every trial then has a baseline run at
/// most one trial away on one side and two on the other, for at most a third more runs
/// (a paired baseline beside each trial would double the sweep); the sweep's last trials
/// are closed by the confirmation's baseline re-run, so a plan of up to `EVERY` trials
/// besides the baseline costs nothing extra.
pub const EVERY: usize = 3;

/// The id of the `k`-th interleaved run of the baseline whose plan id is `base_id`.
pub fn again_id(k: usize, base_id: &str) -> String {
    format!("{AGAIN_PREFIX}{k}:{base_id}")
}

/// Whether tune itself sets `knob` in the baseline of a script (`[workload.python]`),
/// and so in every trial: the spec's baseline moved it off the default and the hooks can
/// apply it (the rule of `bridge::inject::knob_values`). The script's own value, which
/// the hooks still read and report (`script_knobs`), then never ran: the baseline ran the
/// spec's value, and nothing may say "your script's" of it (#31).
pub fn forced_in_baseline(baseline: &Knobs, knob: &str) -> bool {
    crate::knobs::knob(knob).is_some_and(|k| k.applies.python)
        && baseline.get(knob) != Knobs::default().get(knob)
}

/// What the script does by itself for `knob` in the run `script_knobs` came from, where
/// that is what the baseline ran: None when the hooks read nothing or tune set the
/// spec's value over it (`forced_in_baseline`).
pub fn own_value<'a>(
    baseline: &Knobs,
    script_knobs: &'a std::collections::BTreeMap<String, String>,
    knob: &str,
) -> Option<&'a String> {
    script_knobs
        .get(knob)
        .filter(|_| !forced_in_baseline(baseline, knob))
}

/// Whether the baseline run `id` ran in the plan (the plan's baseline or one of its
/// interleaved runs), not beside a confirmation.
pub fn in_plan(id: &str, base_id: &str) -> bool {
    id == base_id || id.starts_with(AGAIN_PREFIX)
}

/// Steady step times and samples per step.
pub(crate) type Steady = (Vec<f64>, f64);

/// One successful run of the baseline, where it sits in the journal (its time order).
pub(crate) struct Run {
    pub id: String,
    pub pos: usize,
    pub data: Steady,
    /// Run during the plan (the plan's baseline, an interleaved run) rather than beside a
    /// confirmation after it. Only those give ratios, so the rules see the same figures
    /// before and after the confirmation.
    pub in_plan: bool,
}

pub(crate) struct Runs {
    runs: Vec<Run>,
}

impl Runs {
    /// Every successful baseline run in `records` (journal order = time order).
    pub fn collect(
        records: &[TrialRecord],
        base_id: &str,
        base: &Knobs,
        steady: impl Fn(&TrialRecord) -> Steady,
    ) -> Runs {
        let runs = records
            .iter()
            .enumerate()
            .filter(|(_, r)| r.status == Status::Ok)
            .filter_map(|(pos, r)| {
                let in_plan = in_plan(&r.id, base_id);
                let confirm = r.id.starts_with(super::build::CONFIRM_PREFIX) && &r.knobs == base;
                let data = steady(r);
                ((in_plan || confirm) && !data.0.is_empty()).then(|| Run {
                    id: r.id.clone(),
                    pos,
                    data,
                    in_plan,
                })
            })
            .collect();
        Runs { runs }
    }

    /// The plan-time baseline run nearest `pos` (the earlier one on a tie).
    pub fn nearest(&self, pos: usize) -> Option<&Run> {
        self.runs
            .iter()
            .filter(|r| r.in_plan)
            .min_by_key(|r| (r.pos.abs_diff(pos), r.pos > pos))
    }

    /// Ratios of `t` (steady data) against the last plan-time baseline run before `pos`
    /// and the first baseline run of any kind after it. Empty when the baseline ran once.
    pub fn against(&self, pos: usize, t: &Steady, seed: u64) -> Vec<BaselineRatio> {
        if self.runs.len() < 2 {
            return Vec::new();
        }
        let before = self.runs.iter().rfind(|r| r.in_plan && r.pos < pos);
        let after = self.runs.iter().find(|r| r.pos > pos);
        [(before, "before"), (after, "after")]
            .into_iter()
            .filter_map(|(r, when)| {
                let r = r?;
                Some(BaselineRatio {
                    baseline: r.id.clone(),
                    when: when.into(),
                    ratio: ratio(&r.data, t, seed)?,
                })
            })
            .collect()
    }

    /// The fastest baseline run against the slowest, when there are two or more; `unit`
    /// is the sweep's throughput unit (`throughput_unit`).
    pub fn drift(&self, unit: &str) -> Option<Drift> {
        let thr = |d: &Steady| d.1 / stats::median(&d.0);
        let valid: Vec<&Run> = self.runs.iter().filter(|r| thr(&r.data) > 0.0).collect();
        if valid.len() < 2 {
            return None;
        }
        let by = |a: &&&Run, b: &&&Run| thr(&a.data).total_cmp(&thr(&b.data));
        let slow = valid.iter().min_by(by)?;
        let fast = valid.iter().max_by(by)?;
        let r = ratio(&slow.data, &fast.data, 0x0d21f7)?;
        let (lo, hi) = (thr(&slow.data), thr(&fast.data));
        let what = if r.significant {
            "the machine's speed drifted while the sweep ran: each trial is compared with the \
             baseline run nearest it, and its gain counts only if it beats the baseline runs on \
             both sides of it"
        } else {
            "within noise"
        };
        Some(Drift {
            runs: valid.len(),
            slowest: lo,
            fastest: hi,
            ratio: r,
            summary: format!(
                "Drift: the baseline ran {} times through the sweep, from {lo:.1} to {hi:.1} \
                 {unit} (fastest/slowest {:.2}× [{:.2}, {:.2}]): {what}.",
                valid.len(),
                r.ratio,
                r.lo,
                r.hi
            ),
        })
    }
}

/// Throughput of `b` over `a`, bootstrapped over their steady steps.
pub(crate) fn ratio(a: &Steady, b: &Steady, seed: u64) -> Option<Ratio> {
    if a.0.is_empty() || b.0.is_empty() {
        return None;
    }
    let e = stats::ratio_ci(&a.0, a.1, &b.0, b.1, &Bootstrap::with_seed(seed));
    (e.ratio.is_finite() && e.lo.is_finite() && e.hi.is_finite()).then_some(Ratio {
        ratio: e.ratio,
        lo: e.lo,
        hi: e.hi,
        significant: e.significant,
    })
}

/// The least of `t`'s ratios against the plan's baseline runs beside it (the one that
/// counts), by its interval's low end; None when the baseline ran once. Not a run beside a
/// confirmation (`base_id` names the plan's baseline): that is what the confirmation is
/// judged against, not a side of the sweep's trial.
pub fn least<'a>(t: &'a TrialReport, base_id: &str) -> Option<&'a BaselineRatio> {
    t.against
        .iter()
        .filter(|b| in_plan(&b.baseline, base_id))
        .min_by(|a, b| a.ratio.lo.total_cmp(&b.ratio.lo))
}

/// A confirmation's runs of a change against the baseline runs it alternated with, pair
/// by pair (#31): each pair's throughput ratio (its medians over steady steps), their
/// median as the figure, and as the interval the wider of the pooled steps' bootstrap
/// interval and the pairs' range once the single lowest and highest pair are set aside.
/// So one noisy run, on either side, can neither make a gain significant nor take a
/// significant one away: with three pairs, two must agree. None below three pairs (a
/// journal from before repeated confirmations): the pooled bootstrap alone decides.
pub fn paired(change: &[Repeat], beside: &[Repeat], pooled: Ratio) -> Option<Ratio> {
    let thr = |r: &Repeat| {
        let m = stats::median(&super::build::steady_slice(r));
        (m.is_finite() && m > 0.0).then(|| r.samples_per_step as f64 / m)
    };
    let mut pairs: Vec<f64> = change
        .iter()
        .zip(beside)
        .filter_map(|(c, b)| Some(thr(c)? / thr(b)?))
        .filter(|x| x.is_finite())
        .collect();
    if pairs.len() < 3 {
        return None;
    }
    pairs.sort_by(f64::total_cmp);
    let n = pairs.len();
    let ratio = stats::median(&pairs);
    let lo = pairs[1].min(pooled.lo).min(ratio);
    let hi = pairs[n - 2].max(pooled.hi).max(ratio);
    Some(Ratio {
        ratio,
        lo,
        hi,
        significant: lo > 1.0 || hi < 1.0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(steps_ms: &[f64]) -> Vec<Repeat> {
        steps_ms
            .iter()
            .map(|&ms| Repeat {
                step_times: vec![ms / 1e3; 12],
                samples_per_step: 32,
                ..Repeat::default()
            })
            .collect()
    }

    fn wide() -> Ratio {
        Ratio {
            ratio: 1.2,
            lo: 1.1,
            hi: 1.3,
            significant: true,
        }
    }

    #[test]
    fn one_noisy_pair_neither_confirms_nor_withdraws() {
        // No effect, but the first baseline run landed in a busy minute: that pair
        // alone says 1.5x.
        let r = paired(&rec(&[10.0, 10.0, 10.0]), &rec(&[15.0, 10.0, 10.0]), wide()).unwrap();
        assert!((r.ratio - 1.0).abs() < 1e-9, "{r:?}");
        assert!(!r.significant, "{r:?}");
        // A real 2x gain whose last run of the change was slowed: still a gain.
        let r = paired(&rec(&[5.0, 5.0, 10.0]), &rec(&[10.0, 10.0, 10.0]), wide()).unwrap();
        assert!((r.ratio - 2.0).abs() < 1e-9, "{r:?}");
        assert!(r.significant && r.lo > 1.0, "{r:?}");
    }

    #[test]
    fn fewer_than_three_pairs_leave_it_to_the_pooled_interval() {
        assert!(paired(&rec(&[5.0, 5.0]), &rec(&[10.0, 10.0]), wide()).is_none());
    }
}
