//! What may be recommended at all. A change whose trial recorded the knob as unable to
//! act (no DataLoader, no CUDA, no 4-D weights) measured noise, not the knob; a change
//! the script already makes by itself cannot speed it up. Both are said in the report's
//! notes, in words, instead of being recommended.

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

fn why_not(report: &Report, base: Option<&TrialReport>, rec: &Recommendation) -> Option<String> {
    if rec.kind != RecKind::Change {
        return None;
    }
    for (knob, value) in &rec.change {
        let blocked = report.trials.iter().find_map(|t| {
            (t.knobs.value(knob).as_deref() == Some(value.as_str()))
                .then(|| t.not_applicable.get(knob))
                .flatten()
        });
        if let Some(why) = blocked {
            return Some(no_effect(knob, value, why));
        }
        if base.and_then(|b| b.script_knobs.get(knob)) == Some(value) {
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
/// those that could not act in this job, those the script already uses, and where the
/// baseline ran the script's own value rather than the spec's baseline value (tune
/// forces no value the script sets itself).
pub fn sweep_notes(report: &Report) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let spec_base = &report.spec.search.baseline;
    for t in &report.trials {
        for (knob, why) in &t.not_applicable {
            let Some(value) = t.knobs.value(knob) else {
                continue;
            };
            if spec_base.value(knob).as_deref() != Some(value.as_str()) {
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
        if own != &said {
            out.push(format!(
                "the baseline is your script as written: it ran your script's own {knob}={own} \
                 (the spec's baseline value {said} was not forced)"
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
