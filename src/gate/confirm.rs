//! The reports' confirmations, judged for their hardware (#28). A recommendation rests on
//! its confirmation (the recommended combination measured again in pairs with the
//! baseline, and each change alone): when the hardware contaminated every pair, the
//! verdict rests on contaminated runs, and a gate that looked only at the configurations'
//! repeats would pass a report whose advice nobody measured cleanly. Such a confirmation
//! is said in the gate's verdict lines, and fails under `--fail-on-contaminated`; pairs
//! left out while a clean pair remained are only named, as repeats are.

use serde::Serialize;

use super::verdict::{Policy, Verdict};
use crate::results::model::{Contamination, Report};

/// One confirmation of one report whose pairs the hardware contaminated.
#[derive(Clone, Debug, Serialize)]
pub struct ConfirmationCheck {
    /// Which report: "baseline" or "current".
    pub report: String,
    /// The confirmed change, as the report labels it.
    pub label: String,
    /// "combination" (the recommended changes together) or "alone" (one of them).
    pub what: String,
    /// The confirmation's own verdict (`matches`, `not_confirmed`, ...).
    pub confirmation_verdict: String,
    /// No clean pair remained: the confirmation's verdict rests on contaminated runs.
    pub in_figures: bool,
    /// `pass`, or `FAILED` when it rests on contaminated runs under
    /// `--fail-on-contaminated`.
    pub verdict: Verdict,
    /// The verdict in one sentence.
    pub reason: String,
}

impl ConfirmationCheck {
    /// The line's subject: "confirmation of b=1 (current report)".
    pub fn subject(&self) -> String {
        let alone = if self.what == "alone" { " alone" } else { "" };
        format!(
            "confirmation of {}{alone} ({} report)",
            self.label, self.report
        )
    }
}

fn judge(
    report: &str,
    label: &str,
    what: &str,
    verdict: &str,
    x: &Contamination,
    policy: &Policy,
) -> ConfirmationCheck {
    let (v, reason) = if x.in_figures {
        let said = format!(
            "the recommendation's confirmation ({verdict}) rests on contaminated runs: {}",
            x.note
        );
        if policy.fail_on_contaminated {
            (
                Verdict::Failed,
                format!("CONTAMINATED (--fail-on-contaminated): {said}"),
            )
        } else {
            (
                Verdict::Pass,
                format!("{said}; pass --fail-on-contaminated to fail on it"),
            )
        }
    } else {
        (
            Verdict::Pass,
            format!(
                "the confirmation ({verdict}) left {} contaminated pair(s) out: {}",
                x.repeats.len(),
                x.note
            ),
        )
    };
    ConfirmationCheck {
        report: report.into(),
        label: label.into(),
        what: what.into(),
        confirmation_verdict: verdict.into(),
        in_figures: x.in_figures,
        verdict: v,
        reason,
    }
}

/// Every confirmation of either report (the combination and each change alone) whose
/// pairs the hardware contaminated; clean confirmations have nothing to say.
pub fn confirmations(base: &Report, cur: &Report, policy: &Policy) -> Vec<ConfirmationCheck> {
    let mut out = Vec::new();
    for (name, r) in [("baseline", base), ("current", cur)] {
        let Some(c) = &r.confirmation else { continue };
        if let Some(x) = &c.contamination {
            out.push(judge(name, &c.label, "combination", &c.verdict, x, policy));
        }
        for a in &c.alone {
            if let Some(x) = &a.contamination {
                out.push(judge(name, &a.label, "alone", &a.verdict, x, policy));
            }
        }
    }
    out
}
