//! The PyTorch hooks' run-time notices, gathered for a sweep's notes.

use super::record::TrialRecord;

/// What the PyTorch hooks said at run time, once per message, with the trials that said
/// it: a redirected torch.save is said by every trial, a warm-up that never settled by one.
pub(crate) fn of(recs: &[TrialRecord]) -> Vec<String> {
    let mut by: Vec<(&str, Vec<&str>)> = Vec::new();
    for r in recs {
        for n in r.repeats.iter().flat_map(|x| &x.notices) {
            match by.iter_mut().find(|(m, _)| *m == n.as_str()) {
                Some((_, who)) if who.contains(&r.label.as_str()) => {}
                Some((_, who)) => who.push(&r.label),
                None => by.push((n, vec![&r.label])),
            }
        }
    }
    by.into_iter()
        .map(|(m, who)| {
            let who = if who.len() == recs.len() && who.len() > 1 {
                "every trial".to_string()
            } else {
                who.join(", ")
            };
            format!("PyTorch hooks ({who}): {m}")
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
}
