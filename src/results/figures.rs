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
    (only(rec, &used), note)
}

/// A confirmation's two sides, `change` and the baseline run `beside` it, with only the
/// pairs its verdict uses (index `i` of each side is pair `i`, `Sweep::confirm`), and
/// what to say about the pairs left out or kept against the rule. A pair is contaminated
/// when either of its runs is: leaving out one side only would pair runs that did not
/// share a stretch of time, and the pairs exist to cancel the machine's drift (#28).
pub fn pairs_of(
    change: &TrialRecord,
    beside: &TrialRecord,
) -> (TrialRecord, TrialRecord, Option<Contamination>) {
    fn bad_in(r: &TrialRecord, i: usize) -> Option<&RepeatHardware> {
        r.hardware.get(i).filter(|h| h.contaminated())
    }
    let n = change.repeats.len().max(beside.repeats.len());
    let bad: Vec<usize> = (0..n)
        .filter(|&i| bad_in(change, i).is_some() || bad_in(beside, i).is_some())
        .collect();
    if bad.is_empty() {
        return (change.clone(), beside.clone(), None);
    }
    let all_bad = bad.len() == n;
    let why: Vec<String> = bad
        .iter()
        .map(|&i| {
            let sides: Vec<String> = [("baseline", beside), ("change", change)]
                .into_iter()
                .filter_map(|(side, r)| {
                    Some(format!("{side}: {}", bad_in(r, i)?.reasons.join("; ")))
                })
                .collect();
            format!("pair {}: {}", i + 1, sides.join(", "))
        })
        .collect();
    let counts = format!(
        "{} of {n} pairs contaminated ({})",
        bad.len(),
        why.join(" | ")
    );
    let note = if all_bad {
        format!("NO CLEAN PAIR REMAINS: the verdict rests on contaminated runs; {counts}")
    } else {
        format!("{counts}; left out of the verdict")
    };
    let c = Contamination {
        repeats: bad.clone(),
        in_figures: all_bad,
        note,
    };
    if all_bad {
        return (change.clone(), beside.clone(), Some(c));
    }
    let keep = |r: &TrialRecord| {
        let used: Vec<usize> = (0..r.repeats.len()).filter(|i| !bad.contains(i)).collect();
        only(r, &used)
    };
    (keep(change), keep(beside), Some(c))
}

/// `rec` with the repeats `used` only, in order: their hardware entries and nodes
/// re-indexed.
fn only(rec: &TrialRecord, used: &[usize]) -> TrialRecord {
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
    out
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
