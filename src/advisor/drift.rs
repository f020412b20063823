//! Drift cannot make a win. A sweep's trials run minutes apart; when the baseline's
//! minute was a busy one, every later trial looks faster by the same factor (seen: six
//! changes at "high" confidence on a machine that had merely gone quiet). The baseline
//! is run again through the plan (`results::baselines`) and beside each confirmation; a
//! trial's ratio is taken against the baseline run nearest it, and its gain stands only if
//! it also beats the baseline runs on both sides of it in time: its ratio to the nearest
//! must clear the drift between them.

use super::{fmt_ratio, Ctx};
use crate::results::baselines::least;
use crate::results::model::{BaselineRatio, Ratio, RecKind, Recommendation, Report, TrialReport};

/// The least margin above 1 a gain must keep against the re-run. A bootstrap over one
/// run's steps cannot see run-to-run variation (a sweep of one repeat has no noise
/// floor), and identical runs minutes apart on a shared machine differ by a few percent.
pub const MIN_MARGIN: f64 = 0.03;

/// The margin when no trial has two repeats, so run-to-run variation was never measured:
/// identical repeats on a shared 2-core VM differed by a median 18% (the noise floor of
/// README's sample sweep), and a change that does nothing measured 1.13x
/// [1.03, 1.23] against the quiet re-run in `tests/pytorch_advice.rs`'s drift test. Without
/// repeats, only a gain clear of that stands; with them, the measured noise decides.
pub const UNMEASURED_MARGIN: f64 = 0.15;

/// The confidence of a recommendation whose gain did not clear the drift.
pub const WITHDRAWN: &str = "withdrawn";

/// The plan trial that measured `rec`'s change: the baseline's knobs with the change.
pub fn trial_of<'a>(r: &'a Report, rec: &Recommendation) -> Option<&'a TrialReport> {
    let k = recommended_knobs(r, rec);
    r.trials.iter().find(|t| t.knobs == k)
}

/// The baseline's knobs with `rec`'s change: the configuration it recommends.
pub fn recommended_knobs(r: &Report, rec: &Recommendation) -> crate::knobs::Knobs {
    let mut k = r.spec.search.baseline.clone();
    rec.change.apply(&mut k);
    k
}

/// `rec`'s trial against the baseline's re-run after the sweep, when there is one.
pub fn against_rerun(r: &Report, rec: &Recommendation) -> Option<Ratio> {
    let rerun = r.confirmation.as_ref()?.baseline_rerun.as_ref()?;
    Ctx::new(r).ratio(rerun, trial_of(r, rec)?)
}

/// The gain of `rec` that counts: the least of its trial's ratios against the baseline
/// runs on each side of it in time (#31), else against the re-run after the sweep (a
/// report from before interleaving), else its measured gain.
pub fn counted(r: &Report, rec: &Recommendation) -> Option<Ratio> {
    let t = trial_of(r, rec);
    t.and_then(least)
        .map(|b| b.ratio)
        .or_else(|| against_rerun(r, rec))
        .or(rec.expected_gain)
}

/// How far above 1 a gain's interval must stay to count: the repeat noise of the trial
/// and the baseline, at least `MIN_MARGIN`, or `UNMEASURED_MARGIN` when no trial has two
/// repeats.
pub fn margin(r: &Report, t: Option<&TrialReport>) -> f64 {
    let unmeasured = r.noise_floor.is_none();
    t.map_or(0.0, |t| t.noise_floor)
        .max(Ctx::new(r).base.map_or(0.0, |b| b.noise_floor))
        .max(if unmeasured {
            UNMEASURED_MARGIN
        } else {
            MIN_MARGIN
        })
}

/// Why a measured gain is withdrawn: its trial is not significantly faster, by the
/// margin, than the baseline runs on both sides of it (or, in a report from before
/// interleaving, the baseline's re-run after the sweep). None when it is, or when there
/// is nothing to compare with.
pub fn withdrawn(r: &Report, rec: &Recommendation) -> Option<String> {
    withdrawn_against(r, rec, |_| true)
}

/// `withdrawn` as the sweep saw it when it chose what to confirm: against the plan's own
/// baseline runs only, not those run beside a confirmation. The confirmation's pairs
/// are the better judge of a change they measured (side by side, alternating, so drift
/// cancels); the old rule then turned the confirmation's own baseline runs against the
/// change's earlier sweep trial and threw the confirmation away: a bf16 change measured
/// 1.88x in four alternating pairs was "withdrawn" and its confirmation dropped from
/// the report (`already_tuned.py`, this project's evaluation scripts).
pub fn withdrawn_in_plan(r: &Report, rec: &Recommendation) -> Option<String> {
    // As the runner had it: with the baseline run once in the plan, nothing to check.
    let ok = |t: &TrialReport| t.status == crate::results::record::Status::Ok;
    if !r.baseline_runs.iter().any(ok) {
        return None;
    }
    let base_id = r.baseline.as_deref().unwrap_or_default();
    withdrawn_against(r, rec, |b| {
        crate::results::baselines::in_plan(&b.baseline, base_id)
    })
}

fn withdrawn_against(
    r: &Report,
    rec: &Recommendation,
    counts: impl Fn(&BaselineRatio) -> bool,
) -> Option<String> {
    let gain = rec.expected_gain?;
    // A tie (a change recommended for memory) claims no speed-up to withdraw.
    if rec.kind != RecKind::Change || gain.ratio <= 1.0 || !gain.significant {
        return None;
    }
    let t = trial_of(r, rec)?;
    let cx = Ctx::new(r);
    let sides = t
        .against
        .iter()
        .filter(|b| counts(b))
        .min_by(|a, b| a.ratio.lo.total_cmp(&b.ratio.lo));
    let (after, which) = match sides {
        Some(b) => (b.ratio, format!("the baseline run {} it", b.when)),
        None => {
            let rerun = r.confirmation.as_ref()?.baseline_rerun.as_ref()?;
            (
                cx.ratio(rerun, t)?,
                "its re-run after the sweep".to_string(),
            )
        }
    };
    let unmeasured = r.noise_floor.is_none();
    let noise = margin(r, Some(t));
    if after.significant && after.lo > 1.0 + noise {
        return None;
    }
    let moved = match &r.drift {
        Some(d) => format!("; {}", d.summary.trim_end_matches('.')),
        None => cx
            .base
            .zip(
                r.confirmation
                    .as_ref()
                    .and_then(|c| c.baseline_rerun.as_ref()),
            )
            .and_then(|(b, rerun)| cx.ratio(b, rerun))
            .map_or(String::new(), |d| {
                format!(
                    "; the baseline itself ran at {} of its first run's throughput when re-run",
                    fmt_ratio(&d)
                )
            }),
    };
    Some(format!(
        "withdrawn: {} measured {} against the baseline run nearest it but {} against \
         {which}{moved}: the effect does not clear the machine's drift and noise \
         (a gain must stay {:.0}% clear of every baseline run beside it{})",
        t.label,
        fmt_ratio(&gain),
        fmt_ratio(&after),
        noise * 100.0,
        if unmeasured {
            "; run-to-run noise is unmeasured with one repeat: repeats = 2 measures it"
        } else {
            ""
        }
    ))
}
