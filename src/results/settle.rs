//! Changes settled side by side. A sweep's runs are minutes apart, and on a machine whose
//! speed drifts a real gain can read as noise against the baseline run nearest it: on
//! `already_tuned.py` (#31's closing table) bf16, 1.55x by hand, read 1.17x, not
//! significant, against a baseline that itself ran 1220 and 1700 samples/s. Such a
//! promising change is run again in alternating pairs beside the baseline
//! (`advisor::settle` picks them), and the pairs' ratio, in which the drift cancels,
//! stands for the trial's.

use super::build::Confirmations;
use super::model::{Report, Settled};
use super::record::Status;

/// Puts each settled trial's pairs in its place: `ratio_vs_baseline` becomes theirs, the
/// sweep's own figure is kept in `settled`, and a note says what happened, in words.
pub(crate) fn apply(report: &mut Report, c: &Confirmations) {
    let mut notes = Vec::new();
    for t in report.trials.iter_mut() {
        if t.status != Status::Ok || report.baseline.as_deref() == Some(t.id.as_str()) {
            continue;
        }
        let Some((pairs, beside)) = c.settled(&t.knobs) else {
            continue;
        };
        let sweep = t.ratio_vs_baseline;
        let read = sweep.map_or("no ratio".into(), |r| fmt(&r));
        let failed = [Some(&pairs.status), beside.map(|b| &b.status)]
            .into_iter()
            .flatten()
            .any(|s| *s != Status::Ok);
        match pairs.ratio_vs_baseline.filter(|_| !failed) {
            Some(r) => {
                notes.push(format!(
                    "{}: read {read} against the baseline run nearest it in the sweep, where \
                     the machine's drift could hide or make a gain; measured again side by side \
                     in {} alternating pairs with the baseline: {}",
                    t.label,
                    pairs.repeats.len(),
                    fmt(&r)
                ));
                t.settled = Some(Settled {
                    sweep,
                    pairs: pairs.repeats.len(),
                    hardware: pairs.contamination.as_ref().map(|h| h.note.clone()),
                });
                t.ratio_vs_baseline = Some(r);
            }
            None => notes.push(format!(
                "{}: read {read} in the sweep; its runs side by side with the baseline did not \
                 complete ({}), so it stays unsettled",
                t.label,
                pairs
                    .error
                    .as_deref()
                    .or(beside.and_then(|b| b.error.as_deref()))
                    .unwrap_or("no ratio")
            )),
        }
    }
    report.notes.extend(notes);
}

fn fmt(r: &super::model::Ratio) -> String {
    format!("{:.2}× [{:.2}, {:.2}]", r.ratio, r.lo, r.hi)
}
