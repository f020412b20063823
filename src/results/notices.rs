//! The run-time notices of the PyTorch hooks and of the engine, gathered for a sweep's
//! notes.

use super::record::TrialRecord;

/// What the PyTorch hooks said at run time, once per message, with the trials that said
/// it: a redirected torch.save is said by every trial, a warm-up that never settled by one.
/// The engine's say who they are as "engine".
pub(crate) fn of(recs: &[TrialRecord]) -> Vec<String> {
    let mut by: Vec<(&str, &str, Vec<&str>)> = Vec::new();
    for r in recs {
        for x in &r.repeats {
            let from = if x.backend == "pytorch" {
                "PyTorch hooks"
            } else {
                "engine"
            };
            for n in &x.notices {
                match by.iter_mut().find(|(m, _, _)| *m == n.as_str()) {
                    Some((_, _, who)) if who.contains(&r.label.as_str()) => {}
                    Some((_, _, who)) => who.push(&r.label),
                    None => by.push((n, from, vec![&r.label])),
                }
            }
        }
    }
    by.into_iter()
        .map(|(m, from, who)| {
            let who = if who.len() == recs.len() && who.len() > 1 {
                "every trial".to_string()
            } else {
                who.join(", ")
            };
            format!("{from} ({who}): {m}")
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::knobs::Knobs;
    use crate::results::record::Repeat;
    use crate::results::record::Status;

    fn said(label: &str, notices: &[&[&str]]) -> TrialRecord {
        said_by("pytorch", label, notices)
    }

    fn said_by(backend: &str, label: &str, notices: &[&[&str]]) -> TrialRecord {
        TrialRecord {
            id: label.into(),
            label: label.into(),
            knobs: Knobs::default(),
            round: 0,
            steps: 3,
            status: Status::Ok,
            error: None,
            repeats: notices
                .iter()
                .map(|n| Repeat {
                    notices: n.iter().map(|s| s.to_string()).collect(),
                    backend: backend.into(),
                    ..Repeat::default()
                })
                .collect(),
            timeline: Vec::new(),
            hardware: Vec::new(),
            nodes: Vec::new(),
        }
    }

    /// Once per message however many repeats said it, with who said it: "every trial"
    /// for what all of them said.
    #[test]
    fn each_message_once_with_the_trials_that_said_it() {
        let recs = [
            said("baseline", &[&["saved"], &["saved", "not steady"]]),
            said("amp=bf16", &[&["saved"]]),
        ];
        assert_eq!(
            of(&recs),
            [
                "PyTorch hooks (every trial): saved",
                "PyTorch hooks (baseline): not steady"
            ]
        );
        assert!(of(&[said("baseline", &[&[]])]).is_empty());
    }

    /// The engine's notices (a storage-only amp) say they are the engine's, not the
    /// hooks'.
    #[test]
    fn an_engine_notice_is_the_engines() {
        let recs = [
            said_by("cpu", "baseline", &[&[]]),
            said_by("cpu", "amp=bf16", &[&["storage only"], &["storage only"]]),
        ];
        assert_eq!(of(&recs), ["engine (amp=bf16): storage only"]);
    }
}
