//! What a report says, decided here once: the headline, the noise it was measured
//! under, each recommendation's verdict with its confirmation, and why nothing was
//! recommended. report.html, summary.md, the terminal and `tune dash` print these
//! sentences as they are, so no face can tell a different story (a confirmation that
//! failed beside "confidence high", "fastest" for a configuration within noise).

use super::{confirm, faster, fmt_ratio, Ctx};
use crate::results::model::{Contamination, Ratio, RecKind, Report, TrialReport};
use crate::results::record::Status;

/// A trial is flagged as measured under load when other processes kept more than this
/// share of all cores (percent, median over its samples) busy while it ran.
pub const LOADED_PCT: f64 = 10.0;

/// The confidence of a recommendation whose confirmation did not hold up.
pub const UNCONFIRMED: &str = "unconfirmed";

/// Everything a face shows beyond the tables, in the words it shows.
#[derive(Clone, Debug, PartialEq)]
pub struct Story {
    /// One sentence: the configuration significantly faster than the baseline, or that
    /// nothing measured beat it beyond noise (with the noise floor).
    pub headline: String,
    /// The trial the headline calls fastest; the only one any face marks as best.
    pub fastest: Option<String>,
    /// What the measurements can resolve, shown at the top: the noise floor, the
    /// baseline's re-run, other processes' load.
    pub noise: Vec<String>,
    /// Trials (plan and confirmation) measured while other processes used the machine,
    /// with that load in percent of all cores.
    pub loaded: Vec<(String, f64)>,
    /// One per recommendation, in the report's order.
    pub recs: Vec<RecVerdict>,
    /// Why no recommended change stands, one sentence per reason; empty when one does.
    pub empty: Vec<String>,
}

/// One recommendation's verdict.
#[derive(Clone, Debug, PartialEq)]
pub struct RecVerdict {
    /// "high", "medium", "low" or "unconfirmed".
    pub confidence: String,
    /// "expect 1.04× [1.01, 1.07]", "predicted ..." once unconfirmed, or "gain not measured".
    pub gain: String,
    /// What the confirmation run said about this change, when it was part of it.
    pub confirmation: Option<String>,
}

impl RecVerdict {
    /// The verdict as one line, the same in every face.
    pub fn line(&self) -> String {
        let mut s = format!("{} · {}", self.confidence, self.gain);
        if let Some(c) = &self.confirmation {
            s.push_str(" · ");
            s.push_str(c);
        }
        s
    }

    /// Unconfirmed or withdrawn: the change does not stand.
    pub fn unconfirmed(&self) -> bool {
        self.confidence == UNCONFIRMED || self.confidence == super::drift::WITHDRAWN
    }
}

impl Story {
    /// The loaded-machine load of trial `id`, when it was flagged.
    pub fn load_of(&self, id: &str) -> Option<f64> {
        self.loaded.iter().find(|(i, _)| i == id).map(|(_, l)| *l)
    }

    /// The flag a face puts beside a loaded trial.
    pub fn load_flag(&self, id: &str) -> Option<String> {
        self.load_of(id)
            .map(|l| format!("measured under load: other processes used {l:.0}% of the CPU"))
    }
}

fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

fn noise_floor_words(r: &Report) -> String {
    match &r.noise_floor {
        Some(n) => format!("noise floor {}", pct(n.median)),
        None => "noise floor unknown: no trial has two successful repeats".into(),
    }
}

/// Ok plan trials measured significantly faster than the baseline, fastest first.
fn significant_wins(r: &Report) -> Vec<&TrialReport> {
    let base = Ctx::new(r).base_knobs().clone();
    let mut wins: Vec<&TrialReport> = significantly_faster(r)
        .filter(|t| could_act(t, &base))
        .collect();
    wins.sort_by(|a, b| {
        let ra = a.ratio_vs_baseline.map_or(0.0, |x| x.ratio);
        let rb = b.ratio_vs_baseline.map_or(0.0, |x| x.ratio);
        rb.total_cmp(&ra)
    });
    wins
}

/// Trials other than the baseline measured faster than it with an interval clear of 1.
fn significantly_faster(r: &Report) -> impl Iterator<Item = &TrialReport> {
    r.trials
        .iter()
        .filter(|t| r.baseline.as_deref() != Some(t.id.as_str()) && t.status == Status::Ok)
        .filter(|t| {
            t.ratio_vs_baseline
                .is_some_and(|x| x.significant && x.ratio > 1.0)
        })
}

/// Whether `t` changed anything that could act: a `[params]` entry, or a knob its runs
/// did not record as not applicable. A trial none of whose changes could act ran the
/// baseline's configuration in effect, so what it measured against the baseline is the
/// machine's drift and noise, never a win: in #31's closing table, `num_workers=2` in a
/// loop without a DataLoader measured 1.28x and headed the report as "Fastest".
fn could_act(t: &TrialReport, base: &crate::knobs::Knobs) -> bool {
    let changed = faster::changed(t, base);
    changed.is_empty() || changed.keys().any(|k| !t.not_applicable.contains_key(k))
}

fn headline(r: &Report, wins: &[&TrialReport]) -> String {
    let base = Ctx::new(r).base;
    if r.trials.iter().all(|t| t.status != Status::Ok) {
        return "No trial completed: nothing was measured.".into();
    }
    if base.is_none() {
        return "The baseline has no successful measurement, so no configuration can be compared \
                with it."
            .into();
    }
    if let Some(t) = wins.first() {
        let thr = t.samples_per_s.map_or("–".into(), |c| {
            format!(
                "{:.1} [{:.1}, {:.1}] {}",
                c.median,
                c.lo,
                c.hi,
                r.throughput_unit()
            )
        });
        let ratio = t.ratio_vs_baseline.map_or("–".into(), |x| fmt_ratio(&x));
        return format!(
            "Fastest: {} at {thr}, {ratio} the baseline's throughput (95% interval clear of 1; {}).",
            t.label,
            noise_floor_words(r)
        );
    }
    // The configuration that measured fastest, if it is not the baseline itself.
    let top = r
        .trials
        .iter()
        .filter(|t| t.status == Status::Ok && r.baseline.as_deref() != Some(t.id.as_str()))
        .filter_map(|t| Some((t, t.ratio_vs_baseline?)))
        .max_by(|a, b| a.1.ratio.total_cmp(&b.1.ratio));
    let within = match top {
        Some((t, x)) if x.ratio > 1.0 => format!(
            "; the highest, {} at {}, is within noise",
            t.label,
            fmt_ratio(&x)
        ),
        _ => "; the baseline measured fastest".into(),
    };
    format!(
        "Nothing measured beat the baseline beyond noise ({}){within}.",
        noise_floor_words(r)
    )
}

/// Median over the trial's samples of the share of all cores other processes used; for
/// a confirmation's runs, which keep no timeline, the median of their runs' hardware
/// records, so that "N of M trials measured under load" counts them too (#31).
pub fn foreign_load(t: &TrialReport) -> Option<f64> {
    t.foreign_cpu_pct.or_else(|| {
        let v: Vec<f64> = t
            .hardware
            .iter()
            .filter_map(|h| h.foreign_cpu_pct)
            .collect();
        (!v.is_empty()).then(|| crate::stats::median(&v))
    })
}

fn noise_lines(r: &Report, loaded: &[(String, String, f64)]) -> Vec<String> {
    let mut out = Vec::new();
    out.push(match &r.noise_floor {
        Some(n) => format!(
            "Noise floor: identical repeats differed by {} (median over {} trials with {}+ \
             repeats; worst {}); smaller differences cannot be told from noise on this machine.",
            pct(n.median),
            n.trials,
            n.repeats,
            pct(n.max)
        ),
        None => "Noise floor: unknown, no trial has two successful repeats; run with repeats = 2 \
                 or more to measure it."
            .into(),
    });
    let cx = Ctx::new(r);
    if let (Some(base), Some(rerun)) = (
        cx.base,
        r.confirmation
            .as_ref()
            .and_then(|c| c.baseline_rerun.as_ref()),
    ) {
        if let (Some(a), Some(b), Some(x)) = (
            base.samples_per_s,
            rerun.samples_per_s,
            cx.ratio(base, rerun),
        ) {
            out.push(format!(
                "Baseline re-run: {:.1} {} in the sweep, {:.1} when re-run after it ({}{}).",
                a.median,
                r.throughput_unit(),
                b.median,
                fmt_ratio(&x),
                if x.significant {
                    ": the machine's speed drifted while the sweep ran"
                } else {
                    ", within noise"
                }
            ));
        }
    }
    if let Some(d) = &r.drift {
        out.push(d.summary.clone());
    }
    let all: Vec<&TrialReport> = all_trials(r).collect();
    let loads: Vec<f64> = all.iter().filter_map(|t| foreign_load(t)).collect();
    if loads.is_empty() {
        out.push(
            "Other processes' load: not recorded (device sampling was off, or the report \
             predates it)."
                .into(),
        );
    } else {
        let median = crate::stats::median(&loads);
        let (worst, worst_load) = all
            .iter()
            .filter_map(|t| Some((t.label.as_str(), foreign_load(t)?)))
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .unwrap_or(("–", 0.0));
        out.push(if loaded.is_empty() {
            format!(
                "Other processes' load: {median:.0}% of the CPU (median over the trials, at most \
                 {worst_load:.0}%), below the {LOADED_PCT:.0}% at which a trial is flagged."
            )
        } else {
            format!(
                "Other processes' load: {median:.0}% of the CPU (median over the trials, up to \
                 {worst_load:.0}% during {worst}); {} of {} trials were measured while other \
                 processes used more than {LOADED_PCT:.0}% of the CPU and are flagged: their \
                 figures include that contention.",
                loaded.len(),
                loads.len()
            )
        });
    }
    if !r.environment.gpus.is_empty() {
        out.push(
            "GPU: other processes' share of the GPUs is not separated from the sweep's in this \
             report."
                .into(),
        );
    }
    out
}

/// Plan trials, then the confirmation's baseline re-run and combination.
fn all_trials(r: &Report) -> impl Iterator<Item = &TrialReport> {
    let confirm = r
        .confirmation
        .iter()
        .flat_map(|c| c.baseline_rerun.iter().chain(c.trial.iter()));
    r.trials.iter().chain(confirm)
}

/// What the confirmations say of one change, least to most severe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    Fine,
    /// Below the prediction, still clear of the noise margin: low.
    Worse,
    /// The combination did not hold up, or a run failed: unconfirmed.
    Failed,
    /// Its own confirmation missed the prediction and the margin: withdrawn.
    Missed,
}

fn rec_verdicts(r: &Report) -> Vec<RecVerdict> {
    let combined = confirm::combined(r);
    let c = r.confirmation.as_ref();
    let base = &r.spec.search.baseline;
    r.recommendations
        .iter()
        .enumerate()
        .map(|(i, rec)| {
            let in_confirmation = c.filter(|_| combined.contains(&i));
            // Several changes: each was confirmed on its own, and that decides it; the
            // combination's verdict is said beside it.
            let label = super::drift::trial_of(r, rec).map(|t| t.knobs.diff_label(base));
            let alone = in_confirmation.and_then(|c| {
                c.alone
                    .iter()
                    .find(|a| a.rule == rec.rule && Some(&a.label) == label.as_ref())
            });
            // Measured side by side with the baseline and holding up there (alone, or as
            // the one change confirmed): the alternating pairs cancel the drift that the
            // sweep's runs minutes apart cannot, so they decide, not the drift check.
            let held = |v: &str| matches!(v, "matches" | "better");
            let confirmed_beside = alone.map_or_else(
                || in_confirmation.is_some_and(|c| c.rules.len() <= 1 && held(&c.verdict)),
                |a| held(&a.verdict),
            );
            let alone_run = alone.filter(|a| a.verdict != "not_run");
            let single = c.is_some_and(|c| c.rules.len() <= 1);
            // A speed-up that its own confirmation measured as a tie (not faster, not
            // significantly slower), and whose memory saving alone earns a recommendation:
            // kept, for its memory. `explicit_workers` (#31's table) lost num_workers=0's
            // 1607 MiB this way: it read 1.23x in the sweep and 1.04x [0.93, 1.15] alone.
            let tie =
                |v: &str, m: Option<Ratio>| v == "not_confirmed" && m.is_some_and(|m| m.hi >= 1.0);
            // Its own confirmation: the run alone, or the combination when it is the one
            // change in it.
            let own = alone_run
                .map(|a| (a.verdict.as_str(), a.measured))
                .or_else(|| {
                    let c = in_confirmation.filter(|_| single)?;
                    Some((c.verdict.as_str(), c.trial.as_ref()?.ratio_vs_baseline))
                });
            let own_tie = own.is_some_and(|(v, m)| tie(v, m));
            let kept_mib = (own_tie && super::confirm::claims_gain(rec))
                .then(|| super::data_wait::memory_kept(r, rec))
                .flatten();
            if let (false, Some(why), Some(g)) = (
                confirmed_beside || kept_mib.is_some(),
                super::drift::withdrawn(r, rec),
                rec.expected_gain,
            ) {
                return RecVerdict {
                    confidence: super::drift::WITHDRAWN.into(),
                    gain: format!("measured {} before the drift check", fmt_ratio(&g)),
                    confirmation: Some(why),
                };
            }
            // A confirmation's runs are side by side, so the drift between runs minutes
            // apart, which the sweep's margin holds, cancels in them: what they measured
            // must clear the machine's repeat noise, not that drift. Against the sweep's
            // margin, `iterable_eval` (#31's table) had `num_workers=0` withdrawn though
            // its alternating pairs measured 1.33x [1.29, 1.43]: its prediction (1.54x)
            // and the margin (43%, the spread of six baseline runs) came from a machine
            // whose speed moved 1.42x over the sweep; by hand the change gives 2.0x.
            let margin = super::drift::repeat_margin(r);
            let clear = |m: Option<Ratio>| m.is_some_and(|m| m.significant && m.lo > 1.0 + margin);
            // Each confirmation's outcome for this change, the worse one decides: one run
            // alone beside the baseline that missed withdraws it; a combination that did
            // not hold up leaves it unconfirmed; one below its prediction, low.
            // Cut short by the time budget, its interval still reaching the prediction: too
            // few pairs to tell, not a miss. hf_finetune's `checkpoint=off` (1.48-1.51x by
            // hand) was withdrawn on 1 of 4 pairs, 1.65x [0.86, 2.94] against a predicted
            // 1.44x [1.19, 1.85], "missed the predicted interval".
            let cut = alone_run.is_some_and(|a| {
                a.cut_short
                    && a.measured
                        .zip(a.predicted)
                        .is_some_and(|(m, p)| m.hi >= p.lo)
            });
            let of_alone = alone_run.map_or(Outcome::Fine, |a| match a.verdict.as_str() {
                _ if kept_mib.is_some() => Outcome::Fine,
                "not_confirmed" if cut => Outcome::Failed,
                "not_confirmed" => Outcome::Missed,
                "worse" if !clear(a.measured) => Outcome::Missed,
                "worse" => Outcome::Worse,
                "failed" => Outcome::Failed,
                _ => Outcome::Fine,
            });
            // A tie kept for its memory that held up alone: a combination that showed no
            // gain does not touch it, since it never claimed one (the changes beside it
            // did).
            let tie_held = ((alone_run.is_some_and(|a| held(&a.verdict))
                && !super::confirm::claims_gain(rec))
                || kept_mib.is_some())
                && in_confirmation.is_some_and(|c| c.verdict == "not_confirmed");
            let of_combo = in_confirmation.map_or(Outcome::Fine, |c| {
                let m = c.trial.as_ref().and_then(|t| t.ratio_vs_baseline);
                match c.verdict.as_str() {
                    _ if tie_held => Outcome::Fine,
                    "worse" if single && !clear(m) => Outcome::Missed,
                    "worse" => Outcome::Worse,
                    "not_confirmed" | "failed" => Outcome::Failed,
                    _ => Outcome::Fine,
                }
            });
            let outcome = of_alone.max(of_combo);
            let missed = outcome == Outcome::Missed;
            let failed = outcome == Outcome::Failed;
            let worse = outcome == Outcome::Worse;
            let summary = match (alone_run, in_confirmation) {
                (Some(a), Some(c)) => format!("{}; together, {}", a.summary, c.summary),
                (None, Some(c)) => c.summary.clone(),
                _ => String::new(),
            };
            let verdict = in_confirmation.map_or("", |c| c.verdict.as_str());
            let gain = match rec.expected_gain {
                Some(g) if kept_mib.is_some() => format!(
                    "as fast, not faster: predicted {}, {:.0} MiB less memory",
                    fmt_ratio(&g),
                    kept_mib.unwrap_or(0.0)
                ),
                Some(g) if failed || missed => format!("predicted {}", fmt_ratio(&g)),
                Some(g) => match super::drift::counted(r, rec).filter(|x| *x != g) {
                    // The nearest run's figure includes any drift: both are shown.
                    Some(x) => format!(
                        "expect {} ({} against the baseline runs on both sides of it, the \
                         lesser)",
                        fmt_ratio(&g),
                        fmt_ratio(&x)
                    ),
                    None => format!("expect {}", fmt_ratio(&g)),
                },
                None => "gain not measured".into(),
            };
            // A verdict that rests on runs the hardware contaminated (#28).
            let dirty = |x: Option<&Contamination>| x.is_some_and(|x| x.in_figures);
            let dirty = dirty(alone_run.and_then(|a| a.contamination.as_ref()))
                || dirty(in_confirmation.and_then(|c| c.contamination.as_ref()));
            let confirmation = in_confirmation.map(|_| {
                let what = match verdict {
                    _ if missed => {
                        "withdrawn: its confirmation beside the baseline missed the predicted \
                         interval and does not clear the repeat noise"
                    }
                    _ if worse => {
                        "downgraded to low: the confirmation measured less than predicted"
                    }
                    _ if kept_mib.is_some() => {
                        "kept for its memory: its confirmation measured it as fast as the \
                         baseline, not faster"
                    }
                    _ if tie_held => "confirmed as fast alone (it claims no speed-up)",
                    _ if failed && cut => {
                        "not confirmed: the time budget cut its confirmation alone short, \
                         too few pairs to tell (`tune sweep SPEC --resume` runs the rest)"
                    }
                    "not_confirmed" => "not confirmed",
                    "failed" => "confirmation failed",
                    _ if failed => "not confirmed",
                    "matches" | "better" if dirty => "confirmed only on contaminated runs",
                    "matches" | "better" => "confirmed",
                    _ => "not yet confirmed",
                };
                format!("{what}: {summary}")
            });
            let mut v = RecVerdict {
                confidence: if kept_mib.is_some() {
                    "medium".into()
                } else if missed {
                    super::drift::WITHDRAWN.into()
                } else if failed {
                    UNCONFIRMED.into()
                } else if worse && rec.confidence != "low" {
                    "low".into()
                } else {
                    rec.confidence.clone()
                },
                gain,
                confirmation,
            };
            // The budget's words first: the load's are added to them, not lost.
            if in_confirmation.is_none_or(|c| c.verdict == "not_run") {
                if let Some(words) = super::budget::out_of_time(r, rec, &mut v.confidence) {
                    v.confirmation = Some(words);
                }
            }
            super::load::under_load(r, rec, in_confirmation, &mut v);
            v
        })
        .collect()
}

fn empty_reasons(r: &Report, wins: &[&TrialReport], recs: &[RecVerdict]) -> Vec<String> {
    let changes: Vec<usize> = r
        .recommendations
        .iter()
        .enumerate()
        .filter(|(_, x)| x.kind == RecKind::Change)
        .map(|(i, _)| i)
        .collect();
    if changes.iter().any(|&i| !recs[i].unconfirmed()) {
        return Vec::new();
    }
    let mut out = Vec::new();
    if !changes.is_empty() {
        let summary = r
            .confirmation
            .as_ref()
            .map_or(String::new(), |c| format!(": {}", c.summary));
        let withdrawn = changes
            .iter()
            .filter(|&&i| recs[i].confidence == super::drift::WITHDRAWN)
            .count();
        if withdrawn > 0 {
            out.push(format!(
                "Withdrawn: {withdrawn} measured change{} did not beat the baseline runs beside \
                 it (in the sweep or in its confirmation): the machine's speed drifted or its \
                 runs were noisy, and the effect does not clear that.",
                if withdrawn == 1 { "" } else { "s" }
            ));
            if withdrawn == changes.len() {
                return out;
            }
        }
        out.push(format!(
            "Not confirmed: the {} recommended change{} did not hold up when measured again \
             beside the baseline{summary}.",
            changes.len(),
            if changes.len() == 1 { "" } else { "s" }
        ));
        return out;
    }
    if Ctx::new(r).base.is_none() {
        out.push(
            "Nothing to compare: the baseline has no successful measurement, so no change can \
             be shown to help."
                .into(),
        );
        return out;
    }
    if wins.is_empty() {
        out.push(format!(
            "Nothing significant: no configuration measured faster than the baseline with a 95% \
             interval clear of 1 ({}).",
            noise_floor_words(r)
        ));
    }
    let cx = Ctx::new(r);
    for t in significantly_faster(r).filter(|t| !could_act(t, cx.base_knobs())) {
        let ratio = t.ratio_vs_baseline.map_or("–".into(), |x| fmt_ratio(&x));
        let changed = faster::changed(t, cx.base_knobs());
        let knobs: Vec<&str> = changed.keys().collect();
        out.push(format!(
            "Drift, not a knob: {} measured {ratio} the baseline although {} could not act in \
             this job (its trial says why): the machine's speed moved between the runs.",
            t.label,
            knobs.join(" and ")
        ));
    }
    for t in wins {
        let ratio = t.ratio_vs_baseline.map_or("–".into(), |x| fmt_ratio(&x));
        let parity = cx.parity(t);
        let knobs = faster::changed(t, cx.base_knobs());
        let covered = r.recommendations.iter().any(|x| {
            knobs.keys().any(|k| {
                x.change.contains_key(k)
                    || super::switch(k).is_some_and(|f| x.tune_flag.contains(&f))
            })
        });
        out.push(if !parity.allows() {
            format!(
                "Significant but not learning the same: {} measured {ratio} the baseline, but {}.",
                t.label,
                parity.describe()
            )
        } else if covered {
            format!(
                "Significant but explained by no rule: {} measured {ratio} the baseline, but a \
                 warning above covers its knobs.",
                t.label
            )
        } else {
            format!(
                "Significant but explained by no rule: {} measured {ratio} the baseline and no \
                 rule applies to it.",
                t.label
            )
        });
    }
    out
}

/// The story of `r`: computed once per rendering, from the report alone.
pub fn story(r: &Report) -> Story {
    let wins = significant_wins(r);
    let loaded_full: Vec<(String, String, f64)> = all_trials(r)
        .filter_map(|t| {
            let l = foreign_load(t)?;
            (l > LOADED_PCT).then(|| (t.id.clone(), t.label.clone(), l))
        })
        .collect();
    let recs = rec_verdicts(r);
    Story {
        headline: headline(r, &wins),
        fastest: wins.first().map(|t| t.id.clone()),
        noise: noise_lines(r, &loaded_full),
        loaded: loaded_full.into_iter().map(|(id, _, l)| (id, l)).collect(),
        empty: empty_reasons(r, &wins, &recs),
        recs,
    }
}

#[cfg(test)]
mod tests;
