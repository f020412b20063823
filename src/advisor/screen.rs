//! What may be recommended at all. A change whose trial recorded the knob as unable to
//! act (no DataLoader, no CUDA, no 4-D weights) measured noise, not the knob; a change
//! the script already makes by itself cannot speed it up. Both are said in the report's
//! notes, in words, instead of being recommended.

use crate::results::baselines::{forced_in_baseline, own_value};
use crate::results::model::{RecKind, Recommendation, Report, TrialReport};

/// The recommendations that can act, and a note for each one that cannot.
pub fn screen(report: &Report, recs: Vec<Recommendation>) -> (Vec<Recommendation>, Vec<String>) {
    let base = report.baseline.as_deref().and_then(|id| report.trial(id));
    let mut notes = Vec::new();
    let mut kept = Vec::new();
    for rec in recs {
        match why_not(report, base, &rec) {
            Some(note) => {
                if !notes.contains(&note) {
                    notes.push(note);
                }
            }
            None => kept.push(rec),
        }
    }
    (kept, notes)
}

/// Whether `change` could act in this job: no trial recorded it as unable to, and the
/// script does not already make it.
pub(crate) fn can_act(report: &Report, change: crate::spec::Change) -> bool {
    let base = report.baseline.as_deref().and_then(|id| report.trial(id));
    let rec = Recommendation {
        kind: RecKind::Change,
        change,
        ..Recommendation::default()
    };
    why_not(report, base, &rec).is_none()
}

fn why_not(report: &Report, base: Option<&TrialReport>, rec: &Recommendation) -> Option<String> {
    if rec.kind != RecKind::Change {
        return None;
    }
    for (knob, value) in rec.change.iter() {
        let blocked = report.trials.iter().find_map(|t| {
            (t.knobs.value(knob).as_deref() == Some(value))
                .then(|| t.not_applicable.get(knob))
                .flatten()
        });
        if let Some(why) = blocked {
            return Some(no_effect(knob, value, why));
        }
        let own = base.and_then(|b| own_value(&report.spec.search.baseline, &b.script_knobs, knob));
        if own.map(String::as_str) == Some(value) {
            return Some(already(knob, value));
        }
    }
    None
}

fn no_effect(knob: &str, value: &str, why: &str) -> String {
    format!(
        "no effect possible here: {knob}={value} ({why}); not recommended, whatever its trial \
         measured"
    )
}

fn already(knob: &str, value: &str) -> String {
    format!(
        "your script already does this: {knob}={value} (read from the running script by \
         tune's hooks); not recommended"
    )
}

/// What every face says about the swept values whether or not a rule fired on them:
/// those that could not act in this job, those the script already uses, and which value
/// the baseline ran where the script's own differs from the spec's baseline value: the
/// script's, unless the spec's baseline moved the knob off PyTorch's default, which tune
/// then applies in every trial (`forced_in_baseline`; the baseline row's override says
/// the same).
pub fn sweep_notes(report: &Report) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let spec_base = &report.spec.search.baseline;
    for t in &report.trials {
        for (knob, why) in &t.not_applicable {
            let Some(value) = t.knobs.value(knob) else {
                continue;
            };
            if spec_base.value(knob).as_deref() != Some(value.as_str())
                || t.knobs.forced.contains(knob)
            {
                let note = no_effect(knob, &value, why);
                if !out.contains(&note) {
                    out.push(note);
                }
            }
        }
    }
    let Some(base) = report.baseline.as_deref().and_then(|id| report.trial(id)) else {
        return out;
    };
    for (knob, values) in &report.spec.knobs {
        let (Some(own), Some(said)) = (base.script_knobs.get(knob), spec_base.get(knob)) else {
            continue;
        };
        if forced_in_baseline(spec_base, knob) {
            if own != &said {
                out.push(format!(
                    "the baseline ran {knob}={said}, not your script's own {knob}={own}: tune \
                     applied it (a spec's baseline value other than PyTorch's default is set \
                     in every trial)"
                ));
            }
            // The script's own value never ran as the baseline: a trial of it is measured.
            continue;
        }
        let measured = report.trials.iter().any(|t| t.knobs.forced.contains(knob));
        if own != &said && measured {
            out.push(format!(
                "the baseline is your script as written: it ran your script's own {knob}={own}; \
                 the spec's baseline value {knob}={said} ran in a trial of its own, tune \
                 applying it over your script's"
            ));
        } else if own != &said {
            // The spec's first value is the baseline's name for it, so no trial runs it:
            // say so, with the spec line that measures it (the script's value first is
            // then the baseline, and tune applies every other value in its own trial).
            let toml = |v: &str| {
                if v.parse::<f64>().is_ok() || v == "true" || v == "false" {
                    v.to_string()
                } else {
                    format!("\"{v}\"")
                }
            };
            let listed: Vec<String> = std::iter::once(own.to_string())
                .chain(values.iter().map(|v| v.to_string()).filter(|v| v != own))
                .map(|v| toml(&v))
                .collect();
            out.push(format!(
                "the baseline is your script as written: it ran your script's own {knob}={own} \
                 (the spec's baseline value {said} was not forced), so {knob}={said} was not \
                 measured; to measure it against your script's {own}, list that first: \
                 {knob} = [{}]",
                listed.join(", ")
            ));
        }
        for v in values.iter().filter(|v| **v != said && *v == own) {
            // The runner does not run a trial that is the baseline in all but name.
            let ran = report
                .trials
                .iter()
                .any(|t| t.knobs.get(knob).as_deref() == Some(v.as_str()));
            out.push(if ran {
                already(knob, v)
            } else {
                format!(
                    "{}: same as the baseline, so not run again",
                    already(knob, v).trim_end_matches("; not recommended")
                )
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{report, spec, trial};
    use super::super::Ctx;

    #[test]
    fn the_baseline_note_names_the_value_tune_ran() {
        // The spec's baseline (1) is not PyTorch's default (0): tune applies it in every
        // trial, the baseline's included, over the script's own 4 (its row's override
        // says "tune applied 1"), so the note must not say 1 "was not forced", and a
        // trial of 4 is not the baseline.
        let s = spec("num_workers = [1, 4]", "");
        let r = report(
            &s,
            vec![
                trial(&s, &[], 0.010).script_knob("num_workers", "4"),
                trial(&s, &[("num_workers", "4")], 0.010).script_knob("num_workers", "4"),
            ],
        );
        let has = |s: &str| r.notes.iter().any(|n| n.contains(s));
        assert!(!has("was not forced"), "{:#?}", r.notes);
        assert!(!has("your script already does this"), "{:#?}", r.notes);
        assert!(
            has("the baseline ran num_workers=1, not your script's own num_workers=4: tune applied it"),
            "{:#?}",
            r.notes
        );
        assert_eq!(
            Ctx::new(&r).baseline_named("num_workers"),
            "the baseline (num_workers=1)"
        );
        // The spec's baseline is the default: tune leaves the knob to the script, whose
        // own 4 is what the baseline ran.
        let s = spec("num_workers = [0, 4]", "");
        let r = report(
            &s,
            vec![trial(&s, &[], 0.010).script_knob("num_workers", "4")],
        );
        let has = |s: &str| r.notes.iter().any(|n| n.contains(s));
        assert!(
            has("it ran your script's own num_workers=4 (the spec's baseline value 0 was not forced)"),
            "{:#?}",
            r.notes
        );
        // The spec's 0 ran in no trial: the note says so and how to measure it.
        assert!(
            has(
                "so num_workers=0 was not measured; to measure it against your script's 4, \
                 list that first: num_workers = [4, 0]"
            ),
            "{:#?}",
            r.notes
        );
        assert!(
            has("your script already does this: num_workers=4"),
            "{:#?}",
            r.notes
        );
        assert_eq!(
            Ctx::new(&r).baseline_named("num_workers"),
            "your script's num_workers=4"
        );
    }

    #[test]
    fn a_forced_trial_of_the_spec_baseline_value_is_measured_and_can_be_recommended() {
        // The script's 4 workers are the baseline; the spec's 0, forced in a trial of its
        // own, measured twice as fast (#31).
        let s = spec("num_workers = [0, 2]", "");
        let base = s.search.baseline.clone();
        let r = report(
            &s,
            vec![
                trial(&s, &[], 0.020).script_knob("num_workers", "4"),
                trial(&s, &[], 0.010)
                    .forced(&base, "num_workers")
                    .script_knob("num_workers", "4"),
                trial(&s, &[("num_workers", "2")], 0.020).script_knob("num_workers", "4"),
            ],
        );
        let has = |s: &str| r.notes.iter().any(|n| n.contains(s));
        assert!(!has("was not measured"), "{:#?}", r.notes);
        assert!(
            has("the spec's baseline value num_workers=0 ran in a trial of its own"),
            "{:#?}",
            r.notes
        );
        let rec = r
            .recommendations
            .iter()
            .find(|x| x.change.get("num_workers") == Some("0"))
            .unwrap_or_else(|| panic!("num_workers=0 not recommended: {:#?}", r.recommendations));
        // Its confirmation would run the forced trial's configuration.
        let k = crate::advisor::drift::recommended_knobs(&r, rec);
        assert!(k.forced.contains("num_workers"), "{k:?}");
    }
}
