//! The finding for a step whose largest cost is the script's own code between the hooks:
//! outside every module call, the backward, the optimizer and the DataLoader. No knob of
//! tune's acts on it, so the finding sends the user to a profiler instead of a sweep;
//! before the hooks split it from the model's calls it was "forward", and the compute
//! finding's bf16 hypothesis was offered for a reinforcement-learning loop whose time
//! was its environment's simulation (scripts/realistic/actor_critic.py).

use super::findings::{FindingKind, WatchFinding};
use crate::advisor::fmt_pct;
use crate::bridge::StepSummary;
use crate::results::Finding;

/// The finding, where the script's own code (`own`, a share of the step) is the largest
/// cost; `compute` and `optimizer` are the shares beside it, `of_steps` the steps it
/// rests on.
pub(crate) fn finding(
    s: &StepSummary,
    own: f64,
    compute: f64,
    optimizer: f64,
    of_steps: &str,
) -> WatchFinding {
    let manual = s
        .notices
        .iter()
        .any(|n| n.contains("builds no torch.optim optimizer"));
    let update = if manual {
        " Your script updates its parameters by hand (no torch.optim optimizer): that \
         update is part of this share too; an optimizer with foreach=True or fused=True \
         does it in a few calls."
    } else {
        ""
    };
    // Lightning's tiny-model test job spent 34% of its step in this share: Lightning's
    // own loop (hooks, logging, the progress bar), not the user's code.
    let framework = match s
        .script_knobs
        .get(crate::knobs::FRAMEWORK)
        .map(String::as_str)
    {
        Some("lightning" | "pytorch_lightning") => {
            " Lightning's loop runs your steps, so its own per-step work is \
             in this share too: callbacks, `self.log` (on_step metrics, `sync_dist=True`) \
             and the progress bar; where the model is small, a larger batch spreads it over \
             more samples."
        }
        Some("transformers") => {
            " The Hugging Face Trainer runs your steps, so its own \
             per-step work is in this share too: callbacks, logging (`logging_steps`) and \
             the progress bar; where the model is small, a larger batch spreads it over \
             more samples."
        }
        _ => "",
    };
    WatchFinding {
        kind: FindingKind::Script,
        device: "python".into(),
        finding: Finding {
            title: "the script's own code between the model's calls is the largest cost".into(),
            evidence: format!(
                "the script's own code takes {} of step time, outside every module call, \
                 the backward, the optimizer and the DataLoader; the model's calls and \
                 backward take {}, the optimizer {} {of_steps}",
                fmt_pct(own),
                fmt_pct(compute),
                fmt_pct(optimizer),
            ),
        },
        hint: format!(
            "hypothesis: Python between the model's calls bounds the step, not the model's \
             arithmetic, so no knob of tune's (amp, workers, threads) can shorten it and tune \
             wrote no sweep for it. Profile that code (py-spy record -o profile.svg -- \
             python your_script.py, or torch.profiler with with_stack=True): the usual \
             causes are a loss or metrics computed element by element, a `.item()` or \
             `.cpu()` on every step for the log, an environment's simulation (reinforcement \
             learning), and Python loops over tensors that one batched operation would \
             replace.{update}{framework}"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(shares: &[(&str, f64)], notices: &[&str]) -> StepSummary {
        let share: serde_json::Map<String, serde_json::Value> = shares
            .iter()
            .map(|(k, v)| (k.to_string(), serde_json::json!(v)))
            .collect();
        serde_json::from_value(serde_json::json!({
            "torch": "2.15.0", "steps": 40, "steady_steps": 36, "median_step_ms": 12.0,
            "samples_per_s": 100.0, "phase_share": share, "notices": notices,
        }))
        .unwrap()
    }

    #[test]
    fn the_scripts_own_code_is_named_when_it_is_the_largest_cost_and_no_sweep_is_written() {
        let s = summary(
            &[
                ("forward", 0.25),
                ("script", 0.6),
                ("backward", 0.1),
                ("optimizer", 0.05),
            ],
            &[],
        );
        let f = crate::watch::dominant::findings(&s, &Default::default());
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].kind, FindingKind::Script);
        assert!(
            f[0].finding.evidence.contains("60.0%"),
            "{}",
            f[0].finding.evidence
        );
        assert!(!f[0].hint.contains("by hand"), "{}", f[0].hint);
        let knobs = crate::watch::dominant::sweep_knobs(&f, 2, &Default::default(), Some(0.0));
        assert!(knobs.is_empty(), "{knobs:?}");
    }

    #[test]
    fn a_frameworks_loop_is_named_in_the_hint() {
        let mut s = summary(
            &[("script", 0.34), ("forward", 0.1), ("backward", 0.1)],
            &[],
        );
        assert!(!finding(&s, 0.34, 0.2, 0.3, "").hint.contains("Lightning"));
        s.script_knobs
            .insert(crate::knobs::FRAMEWORK.into(), "lightning".into());
        let hint = finding(&s, 0.34, 0.2, 0.3, "").hint;
        assert!(hint.contains("Lightning's loop runs your steps"), "{hint}");
    }

    #[test]
    fn a_hand_written_update_is_named_in_the_hint() {
        let s = summary(
            &[("forward", 0.2), ("script", 0.7), ("backward", 0.1)],
            &["the job builds no torch.optim optimizer (its update is written by hand)"],
        );
        let f = crate::watch::dominant::findings(&s, &Default::default());
        assert!(f[0].hint.contains("by hand"), "{}", f[0].hint);
    }

    #[test]
    fn the_computation_stays_the_finding_where_it_is_larger_and_the_evidence_splits_it() {
        let s = summary(
            &[
                ("forward", 0.4),
                ("script", 0.2),
                ("backward", 0.35),
                ("optimizer", 0.05),
            ],
            &[],
        );
        let f = crate::watch::dominant::findings(&s, &Default::default());
        assert_eq!(f[0].kind, FindingKind::Compute, "{f:?}");
        let e = &f[0].finding.evidence;
        assert!(e.contains("own code between them 20.0%"), "{e}");
        assert!(e.contains("take 75.0%"), "{e}");
    }
}
