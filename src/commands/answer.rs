//! Time to the first answer (issue #26): at the end of every sweep, how long it took
//! from start to report and where that time went: measured steps, warm-up steps, the
//! jobs' start-up and shutdown (interpreter, imports, DataLoader workers, ending), their
//! torch.compile time, and tune's own share (planning, analysis, reports).

use std::time::Duration;

use crate::results::record::{Repeat, TrialRecord};

/// Seconds in one bucket of the sweep's wall time.
#[derive(Debug, Default, PartialEq)]
pub struct Spent {
    pub measuring: f64,
    pub warmup: f64,
    pub startup: f64,
    /// torch.compile beyond the steady step time (mostly before the first reported step,
    /// so taken out of start-up).
    pub compile: f64,
    /// Trials that kept no repeat (crashed, timed out): their span on the timeline. A
    /// sweep of two 40 s timeouts once said "tune's own 1m21s (100%)".
    pub failed: f64,
    /// The run the time budget stopped, which kept nothing (`BudgetUse::stopped_s`).
    pub stopped: f64,
    /// A script's own validation passes between its steps (`Repeat::eval_s`): a script
    /// that validated every 10 steps had them inside "job start-up and shutdown" (1m32s,
    /// 70% of its sweep).
    pub evaluation: f64,
}

/// What every run of the sweep spent, from its journal records: the plan's trials, the
/// baseline's runs interleaved through it, and every confirmation run (alone ones too).
/// Built from the report once, which holds only the plan's trials and the combined
/// confirmation: a sweep whose confirmation ran eight runs said "tune's own 39s (64%)".
pub fn spent(records: &[TrialRecord]) -> Spent {
    let mut s = Spent::default();
    for r in records {
        if r.repeats.is_empty() {
            // Kept no repeat (crashed, timed out): its samples say how long it ran.
            s.failed += r.timeline.iter().map(|x| x.t_s).fold(0.0, f64::max);
        }
        for rep in &r.repeats {
            add(&mut s, rep);
        }
    }
    s
}

fn add(s: &mut Spent, r: &Repeat) {
    // A command's figures are samples/s, not step times: its wall time is split no
    // further.
    if r.backend == "command" {
        s.startup += r.wall_s.max(0.0);
        return;
    }
    let w = r.warmup.min(r.step_times.len());
    let warm: f64 = r.step_times[..w].iter().sum();
    let measured: f64 = r.step_times[w..].iter().sum();
    let compile = r.compile_s.unwrap_or(0.0).max(0.0);
    let eval = r.eval_s.unwrap_or(0.0).max(0.0);
    s.warmup += warm;
    s.measuring += measured;
    s.compile += compile;
    s.evaluation += eval;
    s.startup += (r.wall_s - warm - measured - compile - eval).max(0.0);
}

fn mmss(x: f64) -> String {
    let x = x.max(0.0).round() as u64;
    if x >= 60 {
        format!("{}m{:02}s", x / 60, x % 60)
    } else {
        format!("{x}s")
    }
}

/// "time to answer: 4m12s; measuring 3m05s (73%), warm-up steps 20s (8%), job start-up
/// and shutdown 40s (16%), tune's own 7s (3%)".
pub fn line(s: &Spent, wall: Duration) -> String {
    let wall = wall.as_secs_f64();
    let own = (wall
        - s.measuring
        - s.warmup
        - s.startup
        - s.compile
        - s.evaluation
        - s.failed
        - s.stopped)
        .max(0.0);
    let pct = |x: f64| {
        if wall > 0.0 {
            100.0 * x / wall
        } else {
            0.0
        }
    };
    let mut parts = Vec::new();
    if s.measuring > 0.0 || s.warmup > 0.0 {
        parts.push(format!(
            "measuring {} ({:.0}%)",
            mmss(s.measuring),
            pct(s.measuring)
        ));
        parts.push(format!(
            "warm-up steps {} ({:.0}%)",
            mmss(s.warmup),
            pct(s.warmup)
        ));
        parts.push(format!(
            "job start-up and shutdown {} ({:.0}%)",
            mmss(s.startup),
            pct(s.startup)
        ));
        if s.compile > 0.0 {
            parts.push(format!(
                "torch.compile {} ({:.0}%)",
                mmss(s.compile),
                pct(s.compile)
            ));
        }
        if s.evaluation > 0.0 {
            parts.push(format!(
                "your script's evaluation passes {} ({:.0}%)",
                mmss(s.evaluation),
                pct(s.evaluation)
            ));
        }
        if s.failed > 0.0 {
            parts.push(format!(
                "trials that failed {} ({:.0}%)",
                mmss(s.failed),
                pct(s.failed)
            ));
        }
        if s.stopped > 0.0 {
            parts.push(format!(
                "a run the budget stopped {} ({:.0}%)",
                mmss(s.stopped),
                pct(s.stopped)
            ));
        }
    } else {
        let ran = s.startup + s.failed + s.stopped;
        parts.push(format!(
            "running the trials {} ({:.0}%)",
            mmss(ran),
            pct(ran)
        ));
    }
    parts.push(format!("tune's own {} ({:.0}%)", mmss(own), pct(own)));
    format!("time to answer: {}; {}", mmss(wall), parts.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::model::TimelineSample;

    fn record(id: &str, repeats: Vec<Repeat>, ran_s: f64) -> TrialRecord {
        TrialRecord {
            id: id.into(),
            label: id.into(),
            knobs: Default::default(),
            round: 0,
            steps: 10,
            status: if repeats.is_empty() {
                crate::results::record::Status::Timeout
            } else {
                crate::results::record::Status::Ok
            },
            error: None,
            repeats,
            timeline: vec![TimelineSample {
                t_s: ran_s,
                device: "host".into(),
                metric: "cpu".into(),
                value: 0.0,
            }],
            nodes: Vec::new(),
            hardware: Vec::new(),
        }
    }

    fn repeat(wall: f64) -> Repeat {
        Repeat {
            step_times: vec![0.5; 10],
            warmup: 2,
            wall_s: wall,
            backend: "pytorch".into(),
            ..Repeat::default()
        }
    }

    #[test]
    fn every_run_counts_confirmations_included_and_failures_as_running() {
        let records = vec![
            record("baseline#1", vec![repeat(8.0)], 8.0),
            record("timeout#2", Vec::new(), 40.0),
            // A confirmation alone run and the baseline beside it: the report keeps
            // neither as a trial, yet they ran.
            record("confirm:alone", vec![repeat(8.0), repeat(8.0)], 16.0),
            record("confirm:beside", vec![repeat(8.0), repeat(8.0)], 16.0),
        ];
        let s = spent(&records);
        assert_eq!(s.failed, 40.0);
        assert_eq!(s.measuring, 5.0 * 4.0);
        assert_eq!(s.warmup, 5.0 * 1.0);
        assert_eq!(s.startup, 5.0 * 3.0);
        let l = line(&s, Duration::from_secs(81));
        assert!(l.contains("trials that failed 40s"), "{l}");
        assert!(l.contains("tune's own 1s"), "{l}");
        // Nothing measured at all: the failures are the trials' running time.
        let s = spent(&records[1..2]);
        let l = line(&s, Duration::from_secs(41));
        assert!(l.contains("running the trials 40s"), "{l}");
        assert!(l.contains("tune's own 1s"), "{l}");
    }

    /// A run the budget stopped kept nothing, yet its time was spent running the job:
    /// a sweep whose last minute went to one said "tune's own 1m00s (100%)".
    #[test]
    fn a_run_the_budget_stopped_is_time_spent_running() {
        let mut s = spent(&[record("baseline#1", vec![repeat(8.0)], 8.0)]);
        s.stopped = 50.0;
        let l = line(&s, Duration::from_secs(59));
        assert!(l.contains("a run the budget stopped 50s"), "{l}");
        assert!(l.contains("tune's own 1s"), "{l}");
        let l = line(
            &Spent {
                stopped: 50.0,
                ..Spent::default()
            },
            Duration::from_secs(51),
        );
        assert!(l.contains("running the trials 50s"), "{l}");
    }

    /// A script that validates every few steps spends that time inside its runs, not
    /// starting up: eval_heavy.py's passes were 70% of its sweep, all called "job start-up
    /// and shutdown".
    #[test]
    fn a_scripts_evaluation_passes_are_their_own_part() {
        let mut r = repeat(20.0);
        r.eval_s = Some(12.0);
        let s = spent(&[record("baseline#1", vec![r], 20.0)]);
        assert_eq!(s.evaluation, 12.0);
        assert_eq!(s.startup, 20.0 - 5.0 - 12.0);
        let l = line(&s, Duration::from_secs(21));
        assert!(
            l.contains("your script's evaluation passes 12s (57%)"),
            "{l}"
        );
        assert!(l.contains("job start-up and shutdown 3s"), "{l}");
        assert!(l.contains("tune's own 1s"), "{l}");
    }
}
