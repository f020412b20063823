//! The bridge's event lines and what they add up to: per-step phase times from the
//! hooks, the knobs the script overrode, and a summary with phase shares and throughput.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::engine::train::Phases;
use crate::stats::median;

/// One training step, bounded by `Optimizer.step` returns; seconds.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct Step {
    pub step: u64,
    pub dur: f64,
    #[serde(default)]
    pub batch: u64,
    #[serde(default)]
    pub data_wait: f64,
    #[serde(default)]
    pub h2d: f64,
    #[serde(default)]
    pub zero_grad: f64,
    /// Everything between the hooks: forward, loss and the script's own Python.
    #[serde(default)]
    pub forward: f64,
    #[serde(default)]
    pub backward: f64,
    #[serde(default)]
    pub optimizer: f64,
}

/// A knob tune applied where the script passed another value explicitly.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Override {
    pub knob: String,
    /// What the script asked for.
    pub script: serde_json::Value,
    /// What tune applied instead (the trial's value).
    pub applied: serde_json::Value,
}

/// Everything one child reported.
#[derive(Clone, Debug, Default)]
pub struct Events {
    /// The torch version, once the hooks were installed.
    pub torch: Option<String>,
    pub steps: Vec<Step>,
    pub overrides: Vec<Override>,
    /// Hook failures the module reported (the script ran on without hooks).
    pub errors: Vec<String>,
    /// Lines that were not events (counted, never trusted).
    pub malformed: usize,
}

#[derive(Deserialize)]
#[serde(tag = "ev", rename_all = "snake_case")]
enum Line {
    Hello {
        torch: String,
    },
    Step(Step),
    Override {
        knob: String,
        script: serde_json::Value,
        applied: serde_json::Value,
    },
    Error {
        message: String,
    },
}

impl Events {
    pub fn push_line(&mut self, line: &str) {
        match serde_json::from_str::<Line>(line) {
            Ok(Line::Hello { torch }) => self.torch = Some(torch),
            Ok(Line::Step(s)) if s.dur.is_finite() && s.dur > 0.0 => self.steps.push(s),
            Ok(Line::Override {
                knob,
                script,
                applied,
            }) => self.overrides.push(Override {
                knob,
                script,
                applied,
            }),
            Ok(Line::Error { message }) => self.errors.push(message),
            _ => self.malformed += 1,
        }
    }

    /// Steps after warm-up: the first tenth (at least one when there are five or more)
    /// carries start-up costs (worker processes, allocator, caches).
    pub fn steady(&self) -> &[Step] {
        let n = self.steps.len();
        let skip = if n >= 5 { (n / 10).max(1) } else { 0 };
        &self.steps[skip..]
    }

    /// Mean time per phase over the steady steps.
    pub fn phases_mean(&self) -> Phases {
        let s = self.steady();
        let n = s.len().max(1) as f64;
        let sum = |f: fn(&Step) -> f64| s.iter().map(f).sum::<f64>() / n;
        Phases {
            data_wait: sum(|x| x.data_wait),
            h2d: sum(|x| x.h2d),
            zero_grad: sum(|x| x.zero_grad),
            forward: sum(|x| x.forward),
            backward: sum(|x| x.backward),
            optimizer: sum(|x| x.optimizer),
            ..Phases::default()
        }
    }

    pub fn summary(&self) -> Option<StepSummary> {
        let s = self.steady();
        if s.is_empty() {
            return None;
        }
        let total: f64 = s.iter().map(|x| x.dur).sum();
        let p = self.phases_mean();
        let n = s.len() as f64;
        let share = |v: f64| v * n / total;
        let phase_share: BTreeMap<String, f64> = [
            ("data_wait", p.data_wait),
            ("h2d", p.h2d),
            ("zero_grad", p.zero_grad),
            ("forward", p.forward),
            ("backward", p.backward),
            ("optimizer", p.optimizer),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), share(v)))
        .collect();
        let samples: u64 = s.iter().map(|x| x.batch).sum();
        let durs: Vec<f64> = s.iter().map(|x| x.dur).collect();
        Some(StepSummary {
            torch: self.torch.clone(),
            steps: self.steps.len(),
            steady_steps: s.len(),
            median_step_ms: median(&durs) * 1e3,
            samples_per_s: (samples > 0).then(|| samples as f64 / total),
            phase_share,
            overrides: self.overrides.clone(),
        })
    }
}

/// What the hooks measured, for a report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepSummary {
    pub torch: Option<String>,
    /// Steps reported, and those after warm-up that the figures below cover.
    pub steps: usize,
    pub steady_steps: usize,
    pub median_step_ms: f64,
    /// Samples (the batch's first dimension) per second of step time.
    pub samples_per_s: Option<f64>,
    /// Share of step time per phase; `forward` is the remainder between the hooks.
    pub phase_share: BTreeMap<String, f64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub overrides: Vec<Override>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_cover_steady_steps_and_junk_is_counted() {
        let mut e = Events::default();
        e.push_line(r#"{"ev":"hello","pid":1,"torch":"2.5","knobs":{}}"#);
        // A slow first step (start-up) that the steady window drops.
        e.push_line(
            r#"{"ev":"step","step":1,"t":0,"dur":1.0,"batch":8,"data_wait":0.9,"forward":0.1}"#,
        );
        for i in 2..=10 {
            e.push_line(&format!(
                r#"{{"ev":"step","step":{i},"t":0,"dur":0.010,"batch":8,"data_wait":0.004,"backward":0.003,"forward":0.003}}"#
            ));
        }
        e.push_line("not json");
        e.push_line(r#"{"ev":"override","knob":"num_workers","script":4,"applied":0}"#);
        let s = e.summary().unwrap();
        assert_eq!((s.steps, s.steady_steps), (10, 9));
        assert!((s.phase_share["data_wait"] - 0.4).abs() < 1e-9, "{s:?}");
        assert!((s.samples_per_s.unwrap() - 800.0).abs() < 1e-6);
        assert_eq!(e.malformed, 1);
        assert_eq!(s.overrides[0].knob, "num_workers");
        assert_eq!(s.torch.as_deref(), Some("2.5"));
    }
}
