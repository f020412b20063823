//! Drift cannot make a win. A sweep's trials run minutes apart; when the baseline's
//! minute was a busy one, every later trial looks faster by the same factor (seen: six
//! changes at "high" confidence on a machine that had merely gone quiet). The baseline
//! is run again after the sweep, beside the confirmation; a measured gain stands only if
//! its trial beats that re-run as well as the first run, so the trial is compared with
//! a baseline run on each side of it in time.

use super::{fmt_ratio, Ctx};
use crate::results::model::{Ratio, RecKind, Recommendation, Report, TrialReport};

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
    let mut k = r.spec.search.baseline.clone();
    for (n, v) in &rec.change {
        k.set_or_param(n, v).ok()?;
    }
    r.trials.iter().find(|t| t.knobs == k)
}

/// `rec`'s trial against the baseline's re-run after the sweep, when there is one.
pub fn against_rerun(r: &Report, rec: &Recommendation) -> Option<Ratio> {
    let rerun = r.confirmation.as_ref()?.baseline_rerun.as_ref()?;
    Ctx::new(r).ratio(rerun, trial_of(r, rec)?)
}

/// Why a measured gain is withdrawn: its trial is not significantly faster than the
/// baseline's re-run after the sweep. None when it is, or when there is no re-run.
pub fn withdrawn(r: &Report, rec: &Recommendation) -> Option<String> {
    let gain = rec.expected_gain?;
    if rec.kind != RecKind::Change || gain.ratio <= 1.0 {
        return None;
    }
    let rerun = r.confirmation.as_ref()?.baseline_rerun.as_ref()?;
    let t = trial_of(r, rec)?;
    let cx = Ctx::new(r);
    let after = cx.ratio(rerun, t)?;
    let unmeasured = r.noise_floor.is_none();
    let noise = t
        .noise_floor
        .max(cx.base.map_or(0.0, |b| b.noise_floor))
        .max(if unmeasured {
            UNMEASURED_MARGIN
        } else {
            MIN_MARGIN
        });
    if after.significant && after.lo > 1.0 + noise {
        return None;
    }
    let moved = cx
        .base
        .and_then(|b| cx.ratio(b, rerun))
        .map_or(String::new(), |d| {
            format!(
                "; the baseline itself ran at {} of its first run's throughput when re-run",
                fmt_ratio(&d)
            )
        });
    Some(format!(
        "withdrawn: {} measured {} against the baseline's first run but {} against its re-run \
         after the sweep{moved}: the effect does not clear the machine's drift and noise \
         (a gain must stay {:.0}% clear of the re-run{})",
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
