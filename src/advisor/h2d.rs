//! Host-to-device copies: when the step waits on them, page-locked (pinned) staging
//! makes them asynchronous (`DataLoader(pin_memory=True)`, `.to(non_blocking=True)`).

use super::{fmt_pct, measured_change, unmeasured_change, Ctx, Say};
use crate::results::model::Recommendation;
use crate::results::record::Status;

/// Copies above this share of a step are worth overlapping.
pub const SHARE: f64 = 0.05;

/// The pin_memory line, and the copy that makes use of it where the script makes its
/// own copies (a framework's loop makes them non-blocking itself).
fn pytorch(cx: &Ctx) -> String {
    let line = cx.line("pin_memory", "true");
    match cx.framework() {
        Some(_) => line,
        None => format!("{line}; x = x.to(\"cuda\", non_blocking=True)"),
    }
}

pub fn check(cx: &Ctx) -> Vec<Recommendation> {
    let Some(base) = cx.base else {
        return Vec::new();
    };
    let share = base.phase_share.get("h2d").copied().unwrap_or(0.0);
    if share <= SHARE || base.knobs.pin_memory {
        return Vec::new();
    }
    let seen = format!(
        "host-to-device copies take {} of each step at the baseline",
        fmt_pct(share)
    );
    // A pinned trial that could not pin (no copy on this backend) is no evidence.
    let tried: Vec<_> = cx
        .varying("pin_memory")
        .into_iter()
        .filter(|t| t.knobs.pin_memory && !t.not_applicable.contains_key("pin_memory"))
        .collect();
    if let Some((t, r)) = cx.best_gain(&tried) {
        let mut evidence = vec![seen];
        if let Some(s) = t.phase_share.get("h2d") {
            evidence.push(format!("pinned, the copies take {}", fmt_pct(*s)));
        }
        return vec![measured_change(
            cx,
            t,
            r,
            "pin_memory",
            Say {
                title: "Pin host memory for device copies".into(),
                evidence,
                tune_flag: super::flag("pin_memory", "true"),
                pytorch: pytorch(cx),
            },
        )];
    }
    if tried.iter().any(|t| t.status == Status::Ok) || cx.backend() == "cpu" {
        // Measured without effect, or a backend with no real copy to pin for.
        return Vec::new();
    }
    vec![unmeasured_change(Say {
        title: "Try pinned memory for host-to-device copies".into(),
        evidence: vec![seen, "pin_memory was not measured in this sweep".into()],
        tune_flag: super::flag("pin_memory", "true"),
        pytorch: pytorch(cx),
    })]
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{by_rule, report, spec, trial};

    #[test]
    fn fires_when_pinning_helps_measurably() {
        let s = spec("pin_memory = [false, true]", "");
        let r = report(
            &s,
            vec![
                trial(&s, &[], 0.010).phase("h2d", 0.20),
                trial(&s, &[("pin_memory", "true")], 0.008).phase("h2d", 0.02),
            ],
        );
        let recs = by_rule(&r, "h2d");
        assert_eq!(recs.len(), 1, "{recs:?}");
        assert_eq!(recs[0].tune_flag, "--pin-memory");
        assert!(recs[0].pytorch.contains("pin_memory=True"));
        assert!(recs[0].expected_gain.unwrap().significant);
    }

    #[test]
    fn silent_without_copy_time_or_without_effect() {
        let s = spec("pin_memory = [false, true]", "");
        let small = report(
            &s,
            vec![
                trial(&s, &[], 0.010).phase("h2d", 0.01),
                trial(&s, &[("pin_memory", "true")], 0.008),
            ],
        );
        assert!(by_rule(&small, "h2d").is_empty());
        let no_effect = report(
            &s,
            vec![
                trial(&s, &[], 0.010).phase("h2d", 0.20),
                trial(&s, &[("pin_memory", "true")], 0.010).phase("h2d", 0.19),
            ],
        );
        assert!(by_rule(&no_effect, "h2d").is_empty());
    }

    #[test]
    fn a_pin_that_did_not_apply_is_no_evidence() {
        let s = spec("pin_memory = [false, true]", "");
        let mut fast = trial(&s, &[("pin_memory", "true")], 0.008);
        for rep in &mut fast.rec.repeats {
            rep.not_applicable
                .insert("pin_memory".into(), "CPU backend".into());
        }
        let r = report(&s, vec![trial(&s, &[], 0.010).phase("h2d", 0.20), fast]);
        assert!(by_rule(&r, "h2d").is_empty());
    }
}
