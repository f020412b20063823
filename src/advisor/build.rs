//! The advisor's part of a report: the report model summarised by `results::build`, judged
//! by the rules (recommendations), the confirmation trial's verdict and the drift note.

use super::{advise, confirm, fmt_ratio, screen, Ctx};
use crate::results::build;
use crate::results::model::{BudgetUse, Report};
use crate::results::record::TrialRecord;
use crate::spec::Spec;

/// The full report of a sweep's records: measurements, recommendations, confirmation.
pub fn build_report(spec: &Spec, records: &[TrialRecord]) -> Report {
    build_report_within(spec, records, None)
}

/// `build_report` of a sweep that ran under `[search] budget_s`: how it used the time,
/// and what it left out, are in the report and its notes, and a change whose
/// confirmation the budget left out says so (`verdict`).
pub fn build_report_within(
    spec: &Spec,
    records: &[TrialRecord],
    budget: Option<BudgetUse>,
) -> Report {
    let build::Measured {
        mut report,
        confirmations,
    } = build::build(spec, records);
    if let Some(b) = &budget {
        report.notes.push(b.sentence());
    }
    report.budget = budget;
    // A change settled in pairs after the plan: its pairs stand for its trial (#31).
    super::settle::apply(&mut report, &confirmations);
    let (recs, cannot) = screen::screen(&report, advise(&report));
    // A compile mode stands only where it pays for its compile within the job.
    let (recs, compile) = super::breakeven::judge(&report, recs);
    report.recommendations = recs;
    for note in cannot
        .into_iter()
        .chain(compile)
        .chain(screen::sweep_notes(&report))
    {
        if !report.notes.contains(&note) {
            report.notes.push(note);
        }
    }
    report.confirmation = confirm::evaluate(&report, |knobs| confirmations.trial(knobs));
    if let Some(note) = drift_note(&report) {
        report.notes.push(note);
    }
    // report.json says what every rendering says: a change whose confirmation failed is
    // unconfirmed there too.
    let verdicts = super::verdict::story(&report).recs;
    for (rec, v) in report.recommendations.iter_mut().zip(verdicts) {
        rec.confidence = v.confidence;
    }
    report
}

/// The baseline's re-run after the sweep against its first run: a significant
/// difference means the machine's speed drifted while the sweep ran.
fn drift_note(report: &Report) -> Option<String> {
    let c = report.confirmation.as_ref()?;
    let rerun = c.baseline_rerun.as_ref()?;
    let base = report.baseline.as_deref().and_then(|id| report.trial(id))?;
    let r = Ctx::new(report).ratio(base, rerun)?;
    r.significant.then(|| {
        format!(
            "the baseline, re-run after the sweep, ran at {} its first run's throughput: this \
             machine's speed drifted while the sweep ran (other load, clocks, heat), so ratios \
             between trials run minutes apart include that drift; the confirmation compares runs \
             made side by side",
            fmt_ratio(&r)
        )
    })
}

#[cfg(test)]
mod tests {
    use crate::advisor::testkit::{report, spec, trial};
    use crate::results::Report;

    #[test]
    fn a_1_0_report_without_the_1_1_fields_still_loads() {
        let s = spec("zero_grad = [\"memset\", \"none\"]", "");
        let r = report(
            &s,
            vec![
                trial(&s, &[], 0.01),
                trial(&s, &[("zero_grad", "none")], 0.009),
            ],
        );
        let mut v = serde_json::to_value(&r).unwrap();
        v["schema_version"] = "1.0".into();
        let obj = v.as_object_mut().unwrap();
        obj.remove("confirmation");
        obj.remove("trial_spans");
        for f in ["gpus", "gpu_notice", "driver", "cuda", "host_memory_bytes"] {
            v["environment"].as_object_mut().unwrap().remove(f);
        }
        for t in v["trials"].as_array_mut().unwrap() {
            let t = t.as_object_mut().unwrap();
            t.remove("devices");
            t.remove("rss_peak_bytes");
        }
        for rec in v["recommendations"].as_array_mut().unwrap() {
            let rec = rec.as_object_mut().unwrap();
            rec.remove("rule");
            rec.remove("kind");
            rec.remove("change");
        }
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("old.json");
        std::fs::write(&p, v.to_string()).unwrap();
        let back = Report::load(&p).unwrap();
        assert_eq!(back.trials.len(), 2);
        assert!(back.confirmation.is_none() && back.trials[0].devices.is_empty());

        v["schema_version"] = "3.0".into();
        std::fs::write(&p, v.to_string()).unwrap();
        let e = Report::load(&p).unwrap_err();
        assert!(e.is_bad_input() && e.to_string().contains("newer"), "{e}");
    }
}
