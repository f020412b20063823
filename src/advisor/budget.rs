//! A change the sweep had no time left to confirm (`[search] budget_s`, #31). Apart from
//! `verdict` so that each file stays under the project's 800 lines.

use crate::results::model::{RecKind, Recommendation, Report};

/// A change the sweep had no time left to confirm (`[search] budget_s` spent first): it
/// rests on the plan's runs minutes apart alone, so its `confidence` is at most low, and
/// the words for its verdict are returned.
pub(super) fn out_of_time(
    r: &Report,
    rec: &Recommendation,
    confidence: &mut String,
) -> Option<String> {
    if rec.kind != RecKind::Change || !r.budget.as_ref().is_some_and(|b| b.cut()) {
        return None;
    }
    if matches!(confidence.as_str(), "high" | "medium") {
        *confidence = "low".into();
    }
    Some(
        "not confirmed: the time budget (budget_s) ran out before its confirmation, so it \
         rests on the sweep's runs alone (at most low); resuming the sweep with a larger \
         budget_s confirms it"
            .into(),
    )
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{spec, trial};
    use super::super::verdict::story;

    /// A sweep whose budget ran out before its confirmation: the change found in the
    /// plan stands at most low, says it was not confirmed and how to confirm it, and the
    /// notes say what did not run. The same records with the budget unspent keep the
    /// plan's confidence and say nothing of it.
    #[test]
    fn a_change_the_budget_left_unconfirmed_is_at_most_low_and_says_so() {
        use crate::results::model::BudgetUse;
        let s = spec("num_workers = [0, 2]", "budget_s = 600");
        let loaded = |pct: f64| -> Vec<_> {
            vec![
                trial(&s, &[], 0.010).under_load(pct).rec,
                trial(&s, &[("num_workers", "2")], 0.005)
                    .under_load(pct)
                    .rec,
            ]
        };
        let build_on = |recs: &[crate::results::TrialRecord], not_run: Vec<String>| {
            let r = crate::advisor::build_report_within(
                &s,
                recs,
                Some(BudgetUse {
                    budget_s: 600,
                    used_s: 601.0,
                    not_run,
                    stopped: None,
                    stopped_s: 0.0,
                }),
            );
            let i = r
                .recommendations
                .iter()
                .position(|x| x.change.keys().any(|k| k == "num_workers"))
                .unwrap_or_else(|| panic!("{:#?}", r.recommendations));
            (story(&r).recs[i].clone(), r)
        };
        let recs = loaded(0.0);
        let build = |not_run: Vec<String>| build_on(&recs, not_run);
        let (within, r) = build(Vec::new());
        assert_eq!(within.confidence, "high", "{within:?}");
        assert!(
            within
                .confirmation
                .as_deref()
                .is_some_and(|c| c.starts_with("not yet confirmed")),
            "{within:?}"
        );
        assert!(
            r.notes
                .iter()
                .any(|n| n.contains("ran within its budget_s = 600")),
            "{:?}",
            r.notes
        );
        let (cut, r) = build(vec!["'confirm: num_workers=2'".into()]);
        assert_eq!(cut.confidence, "low", "{cut:?}");
        let words = cut.confirmation.unwrap_or_default();
        assert!(
            words.starts_with("not confirmed: the time budget") && words.contains("resuming"),
            "{words}"
        );
        assert!(
            r.recommendations.iter().all(|x| x.confidence != "high"),
            "report.json says what the story says: {:#?}",
            r.recommendations
        );
        assert!(
            r.notes
                .iter()
                .any(|n| n.contains("'confirm: num_workers=2' did not run")),
            "{:?}",
            r.notes
        );
        // Under load as well: both sets of words, the budget's first (before, the
        // budget's replaced the load's).
        let (both, _) = build_on(&loaded(60.0), vec!["'confirm: num_workers=2'".into()]);
        let words = both.confirmation.unwrap_or_default();
        assert!(
            words.starts_with("not confirmed: the time budget")
                && words.contains("measured under load only"),
            "{words}"
        );
    }
}
