//! Time to the first answer (issue #26): at the end of every sweep, how long it took
//! from start to report and where that time went: measured steps, warm-up steps, the
//! jobs' start-up and shutdown (interpreter, imports, DataLoader workers, ending), their
//! torch.compile time, and tune's own share (planning, analysis, reports).

use std::time::Duration;

use crate::results::model::TrialReport;
use crate::results::Report;

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
}

/// What the trials of `report` (confirmation included) spent, from their repeats.
pub fn spent(report: &Report) -> Spent {
    let confirm = report
        .confirmation
        .iter()
        .flat_map(|c| c.trial.iter().chain(c.baseline_rerun.iter()));
    let mut s = Spent::default();
    for t in report.trials.iter().chain(confirm) {
        add(&mut s, t);
    }
    for t in report.trials.iter().filter(|t| t.repeats.is_empty()) {
        if let Some(span) = report.trial_spans.iter().find(|x| x.id == t.id) {
            s.failed += (span.end_s - span.start_s).max(0.0);
        }
    }
    s
}

fn add(s: &mut Spent, t: &TrialReport) {
    for r in &t.repeats {
        // A command's figures are samples/s, not step times: its wall time is split no
        // further.
        if r.backend == "command" {
            s.startup += r.wall_s.max(0.0);
            continue;
        }
        let w = r.warmup.min(r.step_times.len());
        let warm: f64 = r.step_times[..w].iter().sum();
        let measured: f64 = r.step_times[w..].iter().sum();
        let compile = r.compile_s.unwrap_or(0.0).max(0.0);
        s.warmup += warm;
        s.measuring += measured;
        s.compile += compile;
        s.startup += (r.wall_s - warm - measured - compile).max(0.0);
    }
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
pub fn line(report: &Report, wall: Duration) -> String {
    let wall = wall.as_secs_f64();
    let s = spent(report);
    let own = (wall - s.measuring - s.warmup - s.startup - s.compile - s.failed).max(0.0);
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
        if s.failed > 0.0 {
            parts.push(format!(
                "trials that failed {} ({:.0}%)",
                mmss(s.failed),
                pct(s.failed)
            ));
        }
    } else {
        let ran = s.startup + s.failed;
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
    use crate::results::model::TrialSpan;

    fn failed_trial(report: &Report, id: &str) -> TrialReport {
        let mut t = report.trials[0].clone();
        t.id = id.into();
        t.repeats.clear();
        t
    }

    #[test]
    fn trials_that_kept_no_repeat_count_as_running_not_as_tunes_own() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/reports/ci-baseline/report.json"
        );
        let mut r = Report::load(path).unwrap();
        let measured = spent(&r);
        let span = |id: &str, a: f64, b: f64| TrialSpan {
            id: id.into(),
            label: id.into(),
            start_s: a,
            end_s: b,
        };
        r.trials.push(failed_trial(&r, "timeout#1"));
        r.trial_spans.push(span("timeout#1", 100.0, 140.0));
        // A span of a trial that kept its repeats is not counted again.
        let kept = r.trials[0].id.clone();
        r.trial_spans.push(span(&kept, 0.0, 3.0));
        let s = spent(&r);
        assert_eq!(s.failed, 40.0);
        assert_eq!(s.measuring, measured.measuring);
        let wall = s.measuring + s.warmup + s.startup + 40.0 + 1.0;
        let l = line(&r, Duration::from_secs_f64(wall));
        assert!(l.contains("trials that failed 40s"), "{l}");
        assert!(l.contains("tune's own 1s"), "{l}");
        // Nothing measured at all: the failures are the trials' running time.
        r.trials.retain(|t| t.repeats.is_empty());
        let l = line(&r, Duration::from_secs(41));
        assert!(l.contains("running the trials 40s"), "{l}");
        assert!(l.contains("tune's own 1s"), "{l}");
    }
}
