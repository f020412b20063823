//! A running job's steps as a live view shows them: `tune watch --tui` and `tune dash`
//! following a `[workload.python]` trial. Before this the watch's screen showed the
//! process tree and devices only, and the dashboard "starting" for a Python trial's
//! whole run: a 16 s compiling first step, or a warm-up that never settles, was seen
//! only in the report written at the end.

use super::events::Events;
use super::summary::phases_mean;
use crate::engine::train::Phases;
use crate::stats::median;

/// Steps the live figures are taken over: recent enough to follow a change (the
/// compile's warm-up ending), enough that one slow step does not move the median.
pub const RECENT: usize = 20;

/// What the hooks have reported so far, as figures over the most recent steps.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Progress {
    /// Steps reported (the first step, reported apart, not among them).
    pub steps: usize,
    /// The measurement window's warm-up, once measuring began; None before (or when the
    /// job has no window).
    pub warmup: Option<usize>,
    /// Median over the recent steps, seconds.
    pub step_s: Option<f64>,
    /// Median over the recent steps of each one's samples over its time; None when the
    /// hooks saw no batch.
    pub samples_per_s: Option<f64>,
    /// Mean seconds per phase over the recent steps.
    pub phases: Option<Phases>,
    /// The first step's seconds and the seconds torch.compile took inside it.
    pub first: Option<(f64, f64)>,
}

impl Events {
    /// The live figures of what was reported so far.
    pub fn progress(&self) -> Progress {
        let recent = &self.steps[self.steps.len().saturating_sub(RECENT)..];
        let durs: Vec<f64> = recent.iter().map(|s| s.dur).collect();
        let batches: Vec<f64> = recent
            .iter()
            .filter(|s| s.batch > 0)
            .map(|s| s.batch as f64)
            .collect();
        // The sweep's definition: the median batch over the typical step, a bursty
        // loader's taken round by round (`stats::typical_step`).
        let step = crate::stats::typical_step(&durs);
        Progress {
            steps: self.steps.len(),
            warmup: self.window_warmup,
            step_s: (!durs.is_empty()).then_some(step),
            samples_per_s: (!batches.is_empty() && step > 0.0).then(|| median(&batches) / step),
            phases: (!recent.is_empty()).then(|| phases_mean(recent)),
            first: self.first_step.as_ref().map(|f| (f.dur, f.compile)),
        }
    }
}

impl Progress {
    /// The steps line: how many, whether still warming up (`windowed`: the job has a
    /// measurement window), the recent step time and throughput, and the first step.
    pub fn line(&self, windowed: bool) -> String {
        if self.steps == 0 && self.first.is_none() {
            return "training: no step reported yet (start-up, first batch, compile)".into();
        }
        let mut parts = vec![match (windowed, self.warmup) {
            (true, None) => format!("{} steps, warming up", self.steps),
            (true, Some(w)) => format!(
                "{} steps, measuring ({w} warm-up)",
                self.steps.saturating_sub(w)
            ),
            (false, _) => format!("{} steps", self.steps),
        }];
        if let Some(s) = self.step_s {
            parts.push(format!("{:.1} ms/step", s * 1e3));
        }
        match (self.samples_per_s, self.step_s) {
            (Some(x), _) => parts.push(format!("{x:.1} samples/s")),
            (None, Some(s)) if s > 0.0 => parts.push(format!("{:.2} steps/s", 1.0 / s)),
            _ => {}
        }
        parts.extend(self.first_words());
        format!("training: {}", parts.join(" · "))
    }

    /// The first step (start-up and any compile in it), in words.
    pub fn first_words(&self) -> Option<String> {
        let (dur, compile) = self.first?;
        Some(if compile > 0.0 {
            format!("first step {dur:.1} s ({compile:.1} s compiling)")
        } else {
            format!("first step {:.1} ms", dur * 1e3)
        })
    }

    /// Phase shares of the recent steps, largest first, as "data_wait 14%".
    pub fn shares(&self) -> Vec<(&'static str, f64)> {
        let Some(p) = self.phases else {
            return Vec::new();
        };
        let total: f64 = Phases::NAMES.iter().map(|n| p.get(n)).sum();
        if total <= 0.0 {
            return Vec::new();
        }
        let mut v: Vec<(&'static str, f64)> = Phases::NAMES
            .iter()
            .map(|n| (*n, p.get(n) / total))
            .filter(|(_, x)| *x >= 0.005)
            .collect();
        v.sort_by(|a, b| b.1.total_cmp(&a.1));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(i: u64, dur: f64, batch: u64) -> String {
        format!(
            r#"{{"ev":"step","step":{i},"t":{i},"dur":{dur},"batch":{batch},"forward":{f},"backward":{b}}}"#,
            f = dur * 0.25,
            b = dur * 0.75
        )
    }

    #[test]
    fn the_line_says_warming_up_then_measuring_and_the_compile_in_the_first_step() {
        let mut e = Events::default();
        assert!(e.progress().line(true).contains("no step reported yet"));
        e.push_line(r#"{"ev":"first_step","t":1,"dur":16.2,"fwd_dur":16.0,"compile":15.1}"#);
        for i in 1..=30 {
            // A slow step long ago does not move the recent figures.
            e.push_line(&step(i, if i == 2 { 1.0 } else { 0.01 }, 64));
        }
        let p = e.progress();
        assert_eq!(p.steps, 30);
        let line = p.line(true);
        assert!(line.contains("30 steps, warming up"), "{line}");
        assert!(line.contains("10.0 ms/step"), "{line}");
        assert!(line.contains("6400.0 samples/s"), "{line}");
        assert!(
            line.contains("first step 16.0 s (15.1 s compiling)"),
            "{line}"
        );
        e.push_line(r#"{"ev":"window","warmup":12}"#);
        let line = e.progress().line(true);
        assert!(line.contains("18 steps, measuring (12 warm-up)"), "{line}");
        assert_eq!(
            e.progress().line(false).split(" · ").next(),
            Some("training: 30 steps")
        );
        let shares = e.progress().shares();
        assert_eq!(shares[0].0, "backward");
        assert!((shares[0].1 - 0.75).abs() < 1e-9, "{shares:?}");
    }

    #[test]
    fn without_a_batch_the_rate_is_steps_per_second() {
        let mut e = Events::default();
        for i in 1..=5 {
            e.push_line(&step(i, 0.5, 0));
        }
        let line = e.progress().line(false);
        assert!(
            line.contains("2.00 steps/s") && !line.contains("samples/s"),
            "{line}"
        );
    }
}
