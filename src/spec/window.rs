//! How much of a user's job one trial measures (issue #26): a real training script runs
//! for hours, so a `[workload.python]` trial skips a warm-up, measures a window of steps
//! (or seconds), and then tune ends the job at a step boundary. A `[workload.command]`
//! trial does the same in metric samples when it names `samples`.

use serde::{Deserialize, Serialize};

/// Warm-up steps when the spec names none: enough for DataLoader workers to start and
/// the allocator and caches to settle on the small jobs measured here (the steady-state
/// analysis drops any slow steps left after them).
pub const DEFAULT_WARMUP: usize = 5;
/// Measured steps when the spec names none: about 30 steps give a bootstrap interval a
/// few percent wide on a 2-core machine (tests/pytorch_window.rs's jobs).
pub const DEFAULT_STEPS: usize = 30;
/// Seconds a `[workload.python]` window measures at the least when the spec names no
/// `min_seconds`: the steps go on until both the steps and this time are measured. 20
/// steps of a 7 ms step measured 0.15 s, and identical repeats of such windows differed
/// by a median 30% (the closing table of #31, `iterable_eval`: a by-hand 2x from
/// `num_workers=0` was withdrawn as noise); a second of steps is dozens of them.
pub const DEFAULT_MIN_SECONDS: f64 = 1.0;
/// The most warm-up steps "until steady" waits before measuring anyway.
pub const STEADY_MAX_WARMUP: usize = 200;

/// The job's planned length when `[search] job_steps` is not given: 10,000 optimizer
/// steps, a few hours of a mid-sized model on one GPU (two ImageNet epochs of ResNet-50
/// at batch 256). Said in docs/pytorch.md; a user whose job is shorter sets the key.
pub const DEFAULT_JOB_STEPS: u64 = 10_000;
/// `[search] job_steps`: at least one step, at most 10^12 (a million steps a day for
/// three thousand years).
pub const JOB_STEPS: crate::limits::Bound = crate::limits::Bound {
    min: 1,
    max: 1_000_000_000_000,
    why: "the job's planned length in optimizer steps",
};

pub(crate) fn default_job_steps() -> u64 {
    DEFAULT_JOB_STEPS
}

/// One trial's measurement window.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Window {
    /// Steps (samples, for a command) skipped before measuring; None: until the step
    /// times are steady (at most `STEADY_MAX_WARMUP`).
    pub warmup: Option<usize>,
    /// Measured steps (samples) after warm-up: the window is full at this count.
    pub steps: usize,
    /// Or full after this many seconds of measuring, whichever comes first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seconds: Option<f64>,
    /// `[workload.python] min_seconds`: the steps count only once this many seconds are
    /// measured too (None: no minimum), so a job of fast steps is not judged on a
    /// fraction of a second. `seconds`, when set, still ends the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_seconds: Option<f64>,
    /// `[workload.python] compile_budget_s`: a trial whose torch.compile has not
    /// finished its first compiled step this many seconds after it began is ended and
    /// reported as `timeout` with why, instead of eating the trial's whole time limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compile_budget_s: Option<f64>,
    /// Seconds of warm-up after which the window starts measuring (after 2 steps at the
    /// least), steady or not: set for one run by `[search] budget_s`, never by the spec
    /// (`runner::budget::capped`), so it is not part of the spec's form.
    #[serde(skip)]
    pub warmup_max_s: Option<f64>,
}

impl Default for Window {
    fn default() -> Self {
        Window {
            warmup: Some(DEFAULT_WARMUP),
            steps: DEFAULT_STEPS,
            seconds: None,
            min_seconds: Some(DEFAULT_MIN_SECONDS),
            compile_budget_s: None,
            warmup_max_s: None,
        }
    }
}

impl Window {
    /// "5 warm-up + 30 steps", "until steady + 30 steps or 60 s": for messages.
    pub fn describe(&self, unit: &str) -> String {
        let warm = match self.warmup {
            Some(w) => format!("{w} warm-up"),
            None => "warm-up until steady".into(),
        };
        let s = if self.steps == 1 { "" } else { "s" };
        let least = match self.min_seconds {
            Some(m) => format!(" (at least {m} s)"),
            None => String::new(),
        };
        match self.seconds {
            Some(sec) => format!("{warm} + {} {unit}{s}{least} or {sec} s", self.steps),
            None => format!("{warm} + {} {unit}{s}{least}", self.steps),
        }
    }

    /// The JSON the hooks read (`TUNE_BRIDGE_WINDOW`).
    pub fn hook_json(&self) -> String {
        serde_json::json!({
            "warmup": self.warmup,
            "steps": self.steps,
            "seconds": self.seconds,
            "min_seconds": self.min_seconds,
            "steady_max": STEADY_MAX_WARMUP,
            "compile_budget_s": self.compile_budget_s,
            "warmup_max_s": self.warmup_max_s,
        })
        .to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{Spec, Workload};

    fn window(text: &str) -> Result<Option<Window>, String> {
        match Spec::parse(text, "w.toml") {
            Ok(Spec {
                workload: Workload::Command(c),
                ..
            }) => Ok(c.window),
            Ok(_) => Err("not a command workload".into()),
            Err(e) => Err(e.to_string()),
        }
    }

    #[test]
    fn a_python_spec_with_only_run_measures_the_default_window() {
        let w = window("[workload.python]\nrun = \"python t.py\"\n").unwrap();
        assert_eq!(w, Some(Window::default()));
        let w = window(
            "[workload.python]\nrun = \"python t.py\"\nwarmup = \"steady\"\nsteps = 40\nseconds = 2.5\n",
        )
        .unwrap()
        .unwrap();
        assert_eq!((w.warmup, w.steps, w.seconds), (None, 40, Some(2.5)));
        assert_eq!(
            w.describe("step"),
            "warm-up until steady + 40 steps (at least 1 s) or 2.5 s"
        );
        // A window of fast steps measures at least a second by default; 0 drops the
        // minimum, and a maximum below the default minimum wins.
        assert_eq!(Window::default().min_seconds, Some(DEFAULT_MIN_SECONDS));
        let read = |keys: &str| {
            window(&format!(
                "[workload.python]\nrun = \"python t.py\"\n{keys}\n"
            ))
            .unwrap()
            .unwrap()
            .min_seconds
        };
        assert_eq!(read("min_seconds = 0"), None);
        assert_eq!(read("min_seconds = 3"), Some(3.0));
        assert_eq!(read("seconds = 0.5"), None);
        assert_eq!(read("seconds = 4\nmin_seconds = 2.5"), Some(2.5));
    }

    #[test]
    fn bad_window_keys_are_refused_with_their_place() {
        let bad = [
            (
                "warmup = \"later\"",
                "expected a number of steps or \"steady\"",
            ),
            ("steps = 0", "steps 0: must be at least 1"),
            ("seconds = -1", "must be more than 0"),
            ("seconds = \"x\"", "expected a number of seconds"),
            (
                "compile_budget_s = 0",
                "compile_budget_s: must be more than 0",
            ),
            ("compile_budget_s = \"x\"", "expected a number of seconds"),
            ("min_seconds = -1", "min_seconds: must be at least 0"),
            ("min_seconds = \"x\"", "expected a number of seconds"),
            (
                "min_seconds = 5\nseconds = 2",
                "at most the window's seconds = 2",
            ),
        ];
        for (line, want) in bad {
            let e = window(&format!(
                "[workload.python]\nrun = \"python t.py\"\n{line}\n"
            ))
            .unwrap_err();
            assert!(e.contains(want) && e.contains("w.toml:3:"), "{line}: {e}");
        }
    }

    #[test]
    fn a_compile_budget_is_read_and_one_the_time_limit_beats_is_refused() {
        let w = window("[workload.python]\nrun = \"python t.py\"\ncompile_budget_s = 90\n")
            .unwrap()
            .unwrap();
        assert_eq!(w.compile_budget_s, Some(90.0));
        assert!(
            w.hook_json().contains("\"compile_budget_s\":90.0"),
            "{}",
            w.hook_json()
        );
        let e = window(
            "[workload.python]\nrun = \"python t.py\"\ncompile_budget_s = 600\n[search]\ntimeout_s = 600\n",
        )
        .unwrap_err();
        assert!(
            e.contains("w.toml:3:") && e.contains("less than the trial's time limit"),
            "{e}"
        );
        // A command has no torch.compile tune can see.
        let e = window(
            "[workload.command]\nrun = \"x\"\nmetric_json_key = \"k\"\ncompile_budget_s = 9\n",
        )
        .unwrap_err();
        assert!(e.contains("compile_budget_s"), "{e}");
    }

    #[test]
    fn job_steps_has_a_stated_default_and_nonsense_is_refused_with_its_place() {
        let spec = |search: &str| {
            Spec::parse(
                &format!("[workload.python]\nrun = \"python t.py\"\n[search]\n{search}\n"),
                "w.toml",
            )
        };
        assert_eq!(spec("").unwrap().search.job_steps, DEFAULT_JOB_STEPS);
        assert_eq!(spec("job_steps = 500").unwrap().search.job_steps, 500);
        for (line, want) in [
            ("job_steps = 0", "search.job_steps 0"),
            ("job_steps = -5", "expected a non-negative integer"),
            ("job_steps = \"long\"", "search.job_steps"),
            ("job_steps = 1e20", "search.job_steps"),
        ] {
            let e = spec(line).unwrap_err().to_string();
            assert!(e.contains(want) && e.contains("w.toml:4:"), "{line}: {e}");
        }
    }

    #[test]
    fn a_compile_mode_outside_the_five_is_refused() {
        let e = window(
            "[workload.python]\nrun = \"python t.py\"\n[knobs]\ncompile = [\"off\", \"fast\"]\n",
        )
        .unwrap_err();
        assert!(
            e.contains("'fast'")
                && e.contains("max-autotune-no-cudagraphs")
                && e.contains("w.toml:4:"),
            "{e}"
        );
    }

    #[test]
    fn a_command_has_a_window_only_with_samples() {
        let base = "[workload.command]\nrun = \"x\"\nmetric_json_key = \"k\"\n";
        assert_eq!(window(base).unwrap(), None);
        let w = window(&format!("{base}samples = 5\nwarmup = 2\n"))
            .unwrap()
            .unwrap();
        assert_eq!((w.warmup, w.steps), (Some(2), 5));
        let e = window(&format!("{base}warmup = 2\n")).unwrap_err();
        assert!(e.contains("needs samples = N"), "{e}");
    }
}
