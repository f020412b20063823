//! A trial's figures from its clean repeats, and its energy per sample: what `build` reads
//! from the per-repeat hardware records. Apart from `hardware.rs`, whose types the
//! journal's records carry, so those types import neither the records nor the report.

use super::hardware::{counted, Energy, RepeatHardware};
use super::model::{Ci, Contamination, EnergyPerSample};
use super::record::{NodeRun, TrialRecord};

/// `rec` with only the repeats its figures use (nodes re-indexed), and what to say about
/// the ones left out or kept against the rule.
pub fn figures_of(rec: &TrialRecord) -> (TrialRecord, Option<Contamination>) {
    let (used, all_bad) = counted(rec.repeats.len(), &rec.hardware);
    let bad: Vec<usize> = (0..rec.repeats.len())
        .filter(|&i| {
            rec.hardware
                .get(i)
                .is_some_and(RepeatHardware::contaminated)
        })
        .collect();
    let note = (!bad.is_empty()).then(|| {
        let why: Vec<String> = bad
            .iter()
            .map(|&i| format!("repeat {}: {}", i + 1, rec.hardware[i].reasons.join("; ")))
            .collect();
        let tail = if all_bad {
            "NO CLEAN REPEAT REMAINS: the figures rest on contaminated repeats"
        } else {
            "left out of the figures"
        };
        Contamination {
            repeats: bad.clone(),
            in_figures: all_bad,
            note: format!(
                "{} of {} repeats contaminated ({}); {tail}",
                bad.len(),
                rec.repeats.len(),
                why.join(" | ")
            ),
        }
    });
    if bad.is_empty() || all_bad {
        return (rec.clone(), note);
    }
    let mut out = rec.clone();
    out.repeats = used.iter().map(|&i| rec.repeats[i].clone()).collect();
    out.hardware = used
        .iter()
        .filter_map(|&i| rec.hardware.get(i).cloned())
        .collect();
    out.nodes = rec
        .nodes
        .iter()
        .filter_map(|n| {
            let at = used.iter().position(|&i| i == n.repeat)?;
            Some(NodeRun {
                repeat: at,
                ..n.clone()
            })
        })
        .collect();
    (out, note)
}

/// Joules per sample of the counted repeats: their windows' mean power over the
/// throughput, the interval from the throughput's.
pub fn per_sample(hardware: &[RepeatHardware], sps: Option<&Ci>) -> Option<EnergyPerSample> {
    let sps = sps?;
    let e: Vec<&Energy> = hardware.iter().filter_map(|h| h.energy.as_ref()).collect();
    if e.is_empty() || e.len() < hardware.len() {
        return None;
    }
    let joules: f64 = e.iter().map(|e| e.joules).sum();
    let secs: f64 = e.iter().map(|e| e.window_s).sum();
    let watts = joules / secs;
    let per = |x: f64| (x > 0.0 && watts.is_finite()).then(|| watts / x);
    Some(EnergyPerSample {
        median: per(sps.median)?,
        lo: per(sps.hi)?,
        hi: per(sps.lo)?,
        mean_power_w: watts,
        source: if e.iter().all(|e| e.source == "counter") {
            "counter"
        } else {
            "power"
        }
        .into(),
        stand_in: e.iter().any(|e| e.stand_in),
    })
}
