//! What a command or Python trial measured, as its outcome (issue #26): a job stopped by
//! tune once its measurement window filled is `ok`, with a line saying so; a job that
//! ended before its window filled is `ok` with what it ran, said in one line; a job that
//! timed out, crashed or ran out of memory keeps its status and every step (or metric
//! value) it measured, marked "partial".

use std::time::{Duration, Instant};

use crate::bridge::Events;
use crate::knobs::{Amp, Knobs};
use crate::results::record::{Repeat, Status};
use crate::runner::sweep::Outcome;
use crate::spec::{Spec, Window, Workload};

/// Most metric values kept from one command: a command printing a figure per line for
/// hours must not grow the sweep without limit.
pub(super) const MAX_VALUES: usize = 1 << 20;
/// Metric values taken as throughput. Beyond it a figure's reciprocal (its step time) or
/// its ratio to another is not finite: `samples/s: 1e-320` put `null` into the journal
/// and report, which no reader accepts (#27). Within it every ratio, square and sum of a
/// million values stays finite.
const METRIC_RANGE: std::ops::RangeInclusive<f64> = 1e-30..=1e30;

/// Metric values read from a command's stdout, and its window's progress.
#[derive(Default)]
pub(super) struct Values {
    pub kept: Vec<f64>,
    pub dropped: usize,
    /// Positive values outside `METRIC_RANGE`: how many, and the first.
    extreme: (usize, Option<f64>),
    window: Option<Window>,
    /// When the first value after warm-up came.
    measuring_since: Option<Instant>,
}

impl Values {
    pub fn new(window: Option<Window>) -> Values {
        Values {
            window,
            ..Values::default()
        }
    }

    fn warmup(&self) -> usize {
        self.window.as_ref().and_then(|w| w.warmup).unwrap_or(0)
    }

    /// One positive value within `METRIC_RANGE` (others are not throughput); none once
    /// the window is full.
    pub fn push(&mut self, v: f64) {
        if v <= 0.0 || v.is_nan() || self.full() {
            return;
        }
        if !METRIC_RANGE.contains(&v) {
            self.extreme.0 += 1;
            self.extreme.1.get_or_insert(v);
            return;
        }
        if self.kept.len() >= MAX_VALUES {
            self.dropped += 1;
            return;
        }
        self.kept.push(v);
        if self.kept.len() > self.warmup() && self.measuring_since.is_none() {
            self.measuring_since = Some(Instant::now());
        }
    }

    /// Values measured after warm-up.
    fn measured(&self) -> usize {
        self.kept.len().saturating_sub(self.warmup())
    }

    /// Whether the window (if any) is full: its count of values after warm-up, or its
    /// seconds since the first of them.
    pub fn full(&self) -> bool {
        let Some(w) = &self.window else {
            return false;
        };
        self.measured() >= w.steps
            || w.seconds.is_some_and(|s| {
                self.measuring_since
                    .is_some_and(|t| t.elapsed() >= Duration::from_secs_f64(s))
            })
    }
}

/// How a supervised job ended, as the executor saw it.
pub(super) struct Ended<'a> {
    /// Ok when it exited 0 within its limits, else its failed status and why.
    pub end: Result<(), (Status, String)>,
    /// Largest resident memory of its process tree.
    pub peak_rss: u64,
    /// tune ended it after its window filled (it did not end by itself in `grace`).
    pub window_stop: bool,
    pub grace: Duration,
    pub line: &'a str,
    pub wall_s: f64,
}

fn ok(repeat: Repeat, note: Option<String>) -> Outcome {
    Outcome {
        status: Status::Ok,
        // An ok outcome's text is a note for the report, not an error.
        error: note,
        repeat: Some(repeat),
        node: None,
        cut: false,
    }
}

fn partial(status: Status, why: &str, repeat: Repeat, unit: &str) -> Outcome {
    let n = repeat.step_times.len();
    let s = if n == 1 { "" } else { "s" };
    Outcome {
        status,
        error: Some(format!(
            "{why}; partial: {n} {unit}{s} measured before it ended, kept"
        )),
        repeat: Some(repeat),
        node: None,
        cut: false,
    }
}

fn stop_note(e: &Ended<'_>, what: String) -> String {
    if e.window_stop && !e.grace.is_zero() {
        format!(
            "{what}; the job did not end at the polite stop (SystemExit at the step boundary), \
             so its processes were ended after {} s",
            e.grace.as_secs()
        )
    } else {
        what
    }
}

/// A `[workload.python]` trial's outcome from the hooks' events.
pub(super) fn hooked_outcome(
    events: &Events,
    spec: &Spec,
    knobs: &Knobs,
    e: &Ended<'_>,
) -> Outcome {
    let line = e.line;
    if let Some((mode, message)) = &events.compile_failed {
        // Its own status: the configuration cannot run in this job, which is neither a
        // crash of the script nor a hang; the sweep goes on.
        return Outcome::fail(
            Status::Unsupported,
            format!(
                "compile={mode}: torch.compile failed in this job, so this mode cannot be \
                 measured here: {message}"
            ),
        );
    }
    if let Some(c) = &events.compile_over {
        // The time-out of its compile: said as such, with what it means for the job.
        return Outcome::fail(
            Status::Timeout,
            format!(
                "compile={}: torch.compile was still compiling {:.0} s after it began \
                 (compile_budget_s = {}), so tune ended the job: a compile that long pays for \
                 itself only in a job longer than {} s divided by the time each compiled step \
                 saves; raise compile_budget_s to measure this mode",
                c.mode, c.seconds, c.budget, c.budget
            ),
        );
    }
    if let (Some(why), None) = (&events.steps_off, &events.window_full) {
        // Failed, not a time-out: the job ran, but tune could not measure it; the steps
        // measured before are kept.
        let why = format!(
            "`{line}`: tune's PyTorch hooks failed in this job and turned themselves off, so \
             its steps could not be measured and tune ended it: {why}"
        );
        return match crate::bridge::repeat(events, spec, knobs, e.wall_s) {
            Ok(r) => partial(Status::Failed, &why, r, "step"),
            Err(_) => Outcome::fail(Status::Failed, why),
        };
    }
    let repeat = crate::bridge::repeat(events, spec, knobs, e.wall_s).map(|r| Repeat {
        peak_total_bytes: r.peak_total_bytes.max(e.peak_rss),
        ..r
    });
    let compiled = compile_note(events);
    let with_compile = |note: Option<String>| match (note, &compiled) {
        (Some(n), Some(c)) => Some(format!("{n}; {c}")),
        (n, c) => n.or_else(|| c.clone()),
    };
    if let Some(w) = &events.window_full {
        // The window filled: ok however the job then ended (tune ended it, or it exited
        // with whatever code its own `finally` gave).
        return match repeat {
            Ok(r) => {
                let s = if w.measured == 1 { "" } else { "s" };
                let end = w
                    .warmup_end
                    .as_deref()
                    .map_or(",".to_string(), |e| format!(", {e};"));
                let what = format!(
                    "stopped by tune after {} measured step{s} ({} warm-up steps{end} {:.1} s measured)",
                    w.measured, w.warmup, w.seconds
                );
                ok(r, with_compile(Some(stop_note(e, what))))
            }
            Err(why) => Outcome::fail(Status::Failed, format!("`{line}`: {why}")),
        };
    }
    let window = match &spec.workload {
        Workload::Command(c) => c.window.as_ref(),
        Workload::Engine(_) => None,
    };
    match (&e.end, repeat) {
        (Ok(()), Ok(r)) => {
            let note = window.map(|w| {
                format!(
                    "the job ended by itself after {} steps, before its window ({}) filled: \
                     its figures are from the steps it ran",
                    events.steps.len(),
                    w.describe("step")
                )
            });
            ok(r, with_compile(note))
        }
        (Ok(()), Err(why)) => Outcome::fail(Status::Failed, format!("`{line}`: {why}")),
        (Err((status, why)), Ok(r)) => {
            let amp = amp_unsafe(knobs, why).unwrap_or_default();
            partial(*status, &format!("{why}{amp}"), r, "step")
        }
        (Err((status, why)), Err(steps)) => {
            // A crashed job's own error says why it made no steps: asking whether it
            // calls optimizer.step() misled where a trial crashed at its first forward.
            // A job still running at its time limit keeps the question.
            let compiling = events.steps.is_empty() && !events.compiled.is_empty();
            let steps = if *status == Status::Crashed && events.torch.is_some() && !compiling {
                let n = events.steps.len();
                let s = if n == 1 { "" } else { "s" };
                format!("it ended after {n} timed step{s}, fewer than the 3 a measurement needs")
            } else {
                steps
            };
            let amp = amp_unsafe(knobs, why).unwrap_or_default();
            Outcome::fail(*status, format!("{why}; {steps}{amp}"))
        }
    }
}

/// What a trial's crash under tune's autocast means, where its error is two precisions
/// meeting: autocast runs the model's matrix products and convolutions in half
/// precision and leaves the tensors the script makes itself (a `torch.zeros_like`
/// buffer, an `index_add_` target) in float32, so the script is not autocast-safe and
/// would crash the same way under its own `torch.autocast`. A mixture-of-experts
/// script's `out.index_add_(0, rows, expert(x) * w)` crashed so ("self (Float) and
/// source (BFloat16) must have the same scalar type"), and the sweep said only
/// "crashed".
fn amp_unsafe(knobs: &Knobs, why: &str) -> Option<String> {
    let half = match knobs.amp {
        Amp::Bf16 => "BFloat16",
        Amp::Fp16 => "Half",
        Amp::Off | Amp::Tf32 => return None,
    };
    const MIXED: [&str; 6] = [
        "same scalar type",
        "same dtype",
        "expected scalar type",
        "Found dtype",
        "should be the same",
        "have same dtype",
    ];
    (why.contains(half) && MIXED.iter().any(|m| why.contains(m))).then(|| {
        format!(
            "; under amp={} the script's own tensors (float32) met the model's {half} \
             outputs: autocast converts the model's matrix products and convolutions, not \
             what the script makes itself, so `torch.autocast` by hand would crash the same \
             way until the script casts at that line (`.to(other.dtype)`)",
            knobs.amp
        )
    })
}

/// "compile 41.2 s (2 compilations: ResNet (default)), kept apart from the steady steps".
fn compile_note(events: &Events) -> Option<String> {
    let (secs, n) = events.compile_cost()?;
    let what = if events.compiled.is_empty() {
        "the script's own torch.compile".to_string()
    } else {
        events.compiled.join(", ")
    };
    let s = if n == 1 { "" } else { "s" };
    Some(format!(
        "compile {secs:.1} s ({n} compilation{s}: {what}), kept apart from the steady steps"
    ))
}

/// A `[workload.command]` trial's outcome from the metric values it printed.
pub(super) fn command_outcome(v: Values, window: Option<&Window>, e: &Ended<'_>) -> Outcome {
    let line = e.line;
    let full = v.full();
    let warmup = v.warmup().min(v.kept.len());
    let Values {
        kept,
        dropped,
        extreme,
        ..
    } = v;
    if let (n, Some(x)) = extreme {
        eprintln!(
            "note: `{line}` printed {n} metric value(s) outside {:e}..{:e} (first: {x:e}); \
             they are not a throughput and are not used",
            METRIC_RANGE.start(),
            METRIC_RANGE.end()
        );
    }
    if kept.len() <= warmup {
        let none = format!("`{line}` printed no positive metric value in range on stdout");
        let none = if kept.is_empty() {
            none
        } else {
            format!(
                "`{line}` printed {} metric values, all of them warm-up (warmup = {warmup})",
                kept.len()
            )
        };
        return match &e.end {
            Err((status, why)) => Outcome::fail(*status, format!("{why}; {none}")),
            Ok(()) => Outcome::fail(Status::Failed, none),
        };
    }
    if dropped > 0 {
        eprintln!("note: `{line}` printed more than {MAX_VALUES} metric values; the first {MAX_VALUES} are used");
    }
    if kept.len() > crate::stats::BOOTSTRAP_MAX {
        // What the analysis does with them, said before it runs (a second or two).
        eprintln!(
            "note: `{line}`: {} values; their median is exact, its 95% interval is bootstrapped \
             over {} of them, evenly spaced (docs/performance.md, \"Scale of the faces\")",
            kept.len(),
            crate::stats::BOOTSTRAP_MAX
        );
    }
    // Each reported figure is one sample of samples/s: as a "step" of one sample, its
    // time is the reciprocal, so the same statistics apply as to engine trials.
    let step_times: Vec<f64> = kept.iter().map(|v| 1.0 / v).collect();
    let measured = kept.len() - warmup;
    let repeat = Repeat {
        step_times,
        warmup,
        samples_per_step: 1,
        samples_per_s: crate::stats::median(&kept[warmup..]),
        backend: "command".into(),
        wall_s: e.wall_s,
        peak_total_bytes: e.peak_rss,
        ..Repeat::default()
    };
    let s = if measured == 1 { "" } else { "s" };
    if full {
        return ok(
            repeat,
            Some(format!(
                "stopped by tune after {measured} measured metric value{s} ({warmup} warm-up)"
            )),
        );
    }
    match &e.end {
        Ok(()) => {
            let note = window.map(|w| {
                format!(
                    "the command ended by itself after {measured} measured metric value{s}, \
                     before its window ({}) filled",
                    w.describe("value")
                )
            });
            ok(repeat, note)
        }
        Err((status, why)) => partial(*status, why, repeat, "metric value"),
    }
}
