//! The bridge's event lines and what they add up to: per-step phase times from the
//! hooks, the knobs the script overrode, and a summary with phase shares and throughput.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::stats::median;

/// One training step, bounded by `Optimizer.step` returns; seconds. Step 0 is the first
/// step (`Events::first_steps`): from the job's first batch, forward or phase hook to its
/// first optimizer step, so start-up and compilation, never counted among the steps.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Step {
    #[serde(default)]
    pub step: u64,
    /// When the step ended, on the job's monotonic clock (`time.perf_counter`, shared by
    /// the processes of one host): only differences mean anything.
    #[serde(default)]
    pub t: f64,
    pub dur: f64,
    #[serde(default)]
    pub batch: u64,
    /// Tokens in the step, where the batch is token ids (an integer `[B, T]` tensor
    /// as the model's input); 0 otherwise.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tokens: u64,
    #[serde(default)]
    pub data_wait: f64,
    #[serde(default)]
    pub h2d: f64,
    #[serde(default)]
    pub zero_grad: f64,
    /// The step's module calls (the model's forward, a loss module's); where the hooks
    /// cannot split the time between them (a CUDA job), everything between the hooks.
    #[serde(default)]
    pub forward: f64,
    /// The script's own code between the hooks (a functional loss, metrics, logging, an
    /// environment's simulation, an update written by hand): measured on the CPU only,
    /// where a module call's time is its work; 0 where it is in `forward`.
    #[serde(default, skip_serializing_if = "is_zero_f")]
    pub script: f64,
    #[serde(default)]
    pub backward: f64,
    /// Of `backward`, the modules called inside it: activation checkpointing's segments
    /// run forward again (`torch.utils.checkpoint`).
    #[serde(default, skip_serializing_if = "is_zero_f")]
    pub recompute: f64,
    /// Of the module calls (`forward`, and `script` where the hooks split them), models
    /// with weights called with gradients off inside training: a distillation's frozen
    /// teacher, a target network, an EMA copy, that run forward only. Measured on the CPU
    /// only, as `script` is.
    #[serde(default, skip_serializing_if = "is_zero_f")]
    pub no_grad: f64,
    #[serde(default)]
    pub optimizer: f64,
    /// The trained model's evaluation since the last step (its forward passes in eval
    /// mode, the batches fetched for them): outside `dur`, so that validating every N
    /// steps is not read as N-periodic slow steps (a bursty loader's rounds, `stats::
    /// rounds_of`, folded a 4.5 s pass every 10 steps into a 815 ms "median step" where
    /// the training step took 330 ms).
    #[serde(default, skip_serializing_if = "is_zero_f")]
    pub eval: f64,
    /// Step 0 only: from the job's first training forward to its first optimizer step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fwd_dur: Option<f64>,
    /// torchrun's `RANK` of the process that took the step, or torch.distributed's rank
    /// (ranks started by mp.spawn); for a process multiprocessing started without one
    /// (Hogwild!'s trainers), the index of its pid among them; none for one process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    /// The pid of a trainer that multiprocessing started, where it has no rank.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proc: Option<u32>,
    /// Backward calls in the step: more than one is gradient accumulation (`batch` then
    /// sums every micro-batch).
    #[serde(default)]
    pub backwards: u32,
    /// Optimizer steps in the step where the job has several optimizers stepping in
    /// turn (a GAN's two): one training step is one round of them; 0 means one.
    #[serde(default)]
    pub optim_steps: u32,
    /// Calls of the optimizer's closure in the step (L-BFGS runs the script's forward and
    /// backward up to 20 times inside one `optimizer.step(closure)`): its backward calls
    /// are not gradient accumulation, and its samples are counted once; 0 without one.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub closure_calls: u32,
    /// Seconds torch.compile spent compiling inside this step (a recompilation), and how
    /// many compilations; 0 for a step that compiled nothing.
    #[serde(default)]
    pub compile: f64,
    #[serde(default)]
    pub compiles: u32,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

fn is_zero_u32(v: &u32) -> bool {
    *v == 0
}

fn is_zero_f(v: &f64) -> bool {
    *v == 0.0
}

/// Bounds of a step's figures, seconds. Outside them a figure is no measurement (a
/// subnormal duration made samples/s infinite, phases near f64::MAX summed to infinity:
/// `null` in the journal, which no reader accepts), so the step is not trusted.
const MIN_STEP_S: f64 = 1e-9;
const MAX_STEP_S: f64 = 604_800.0;
/// Samples in one step: far above any batch, low enough that a million steps' sum fits.
const MAX_BATCH: u64 = 1 << 32;
/// Tokens in one step: a batch of `MAX_BATCH` sequences of a million tokens.
const MAX_TOKENS: u64 = 1 << 52;
/// The job's clock (`perf_counter`, seconds since boot on Linux): a century.
const MAX_CLOCK_S: f64 = 3.2e9;
/// Trainers told apart by pid: far above any machine's cores, low enough that a job
/// forking a process per batch does not grow the report without bound.
const MAX_PROCS: usize = 256;

impl Step {
    /// The phases of a step, in the order a training loop runs them (`phase` reads each).
    pub const PHASES: [&'static str; 7] = [
        "data_wait",
        "h2d",
        "zero_grad",
        "forward",
        "script",
        "backward",
        "optimizer",
    ];

    /// Seconds of the phase named as in `PHASES` (0 for any other).
    pub fn phase(&self, name: &str) -> f64 {
        match name {
            "data_wait" => self.data_wait,
            "h2d" => self.h2d,
            "zero_grad" => self.zero_grad,
            "forward" => self.forward,
            "script" => self.script,
            "backward" => self.backward,
            "optimizer" => self.optimizer,
            _ => 0.0,
        }
    }

    /// Every figure finite and in range: the duration within `MIN_STEP_S..=MAX_STEP_S`,
    /// each phase `0..=MAX_STEP_S`, the batch at most `MAX_BATCH`.
    fn plausible(&self) -> bool {
        let phases = [
            self.data_wait,
            self.h2d,
            self.zero_grad,
            self.forward,
            self.script,
            self.backward,
            self.optimizer,
            self.compile,
            self.eval,
            self.recompute,
            self.no_grad,
        ];
        (MIN_STEP_S..=MAX_STEP_S).contains(&self.dur)
            && self.recompute <= self.backward + 1e-6
            && self.no_grad <= self.dur + 1e-6
            && phases.iter().all(|p| (0.0..=MAX_STEP_S).contains(p))
            && self.batch <= MAX_BATCH
            && self.tokens <= MAX_TOKENS
            && (-MAX_CLOCK_S..=MAX_CLOCK_S).contains(&self.t)
    }
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

/// The `script_knobs` key of the optimizer classes the script builds ("torch.optim.SGD",
/// or a subclass's own name), joined by ", " where there are several: not a knob, but
/// what an `optim_impl` change's PyTorch line names (`knobs::torch::name_optimizer`).
pub const OPTIMIZER: &str = "optimizer";

/// The `script_knobs` key of the `optim_impl` implementations every optimizer class of
/// the job has a switch for, comma-separated ("foreach,fused"; "foreach" for Adadelta;
/// "" for a class with neither): not a knob, but what the watch may offer.
pub const OPTIM_IMPLS: &str = "optim_impls";

/// Everything one child (and the processes it started) reported.
#[derive(Clone, Debug, Default)]
pub struct Events {
    /// The torch version, once the hooks were installed.
    pub torch: Option<String>,
    /// The job's steps: rank 0's under torchrun, else every step reported.
    pub steps: Vec<Step>,
    /// Each process's first step (step 0), kept apart from `steps`.
    pub first_steps: Vec<Step>,
    /// Under torchrun, each rank's steps (or each trainer's, `procs`).
    pub ranks: BTreeMap<u32, Vec<Step>>,
    /// The pids of the trainers that multiprocessing started with no rank, in the order
    /// their first step came: their steps' `rank` is the index here.
    pub procs: Vec<u32>,
    pub overrides: Vec<Override>,
    /// Knobs that could not act in this job, with the reason (one per knob).
    pub not_applicable: BTreeMap<String, String>,
    /// What the script itself does for a knob (its own argument or PyTorch's default), in
    /// the knob's spelling; and, under [`OPTIMIZER`], the optimizer classes it builds.
    pub script_knobs: BTreeMap<String, String>,
    /// What the hooks said at run time (also printed on the job's stderr).
    pub notices: Vec<String>,
    /// Hook failures the module reported (the script ran on without hooks).
    pub errors: Vec<String>,
    /// The failure that turned off the hooks of the process whose steps are measured:
    /// none of its steps will come, so a trial's window can never fill.
    pub steps_off: Option<String>,
    /// Lines that were not events, or steps with figures out of range (counted, never
    /// trusted).
    pub malformed: usize,
    /// The measurement window (`TUNE_BRIDGE_WINDOW`): warm-up steps, once measuring began.
    pub window_warmup: Option<usize>,
    /// Set when the window filled and the hooks asked the job to stop.
    pub window_full: Option<WindowFull>,
    /// The step before the first reported one, from the first training forward (its
    /// start is before the clock opens): a compiled model's compile is in it.
    pub first_step: Option<FirstStep>,
    /// Modules tune compiled (`compile` knob), with their mode: "ResNet (default)".
    pub compiled: Vec<String>,
    /// The DataLoader workers (2 or more) that each replayed the whole stream of an
    /// IterableDataset that does not shard by worker, as the hooks saw it.
    pub stream_replayed: Option<u32>,
    /// torch.compile failed in the job: the mode and PyTorch's message.
    pub compile_failed: Option<(String, String)>,
    /// The hooks ended the job because its compile ran past `compile_budget_s`.
    pub compile_over: Option<CompileOver>,
}

/// The hooks' word that torch.compile was still compiling at its budget: the mode, the
/// budget and the seconds since the compile began.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct CompileOver {
    pub mode: String,
    pub budget: f64,
    pub seconds: f64,
}

/// The first training step, seconds, with the compiling in it.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct FirstStep {
    pub dur: f64,
    #[serde(default)]
    pub compile: f64,
    #[serde(default)]
    pub compiles: u32,
}

/// The hooks' word that the window filled: steps skipped, steps measured, and seconds.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct WindowFull {
    pub warmup: usize,
    pub measured: usize,
    pub seconds: f64,
    /// How the warm-up ended when not as asked: "cut short by tune's time budget", "not
    /// steady, measured anyway".
    #[serde(default)]
    pub warmup_end: Option<String>,
}

#[derive(Deserialize)]
#[serde(tag = "ev", rename_all = "snake_case")]
enum Line {
    Hello {
        torch: String,
    },
    Step(Step),
    FirstStep(Step),
    Override {
        knob: String,
        script: serde_json::Value,
        applied: serde_json::Value,
    },
    Error {
        message: String,
        /// From the process whose hooks it is (not a forked DataLoader worker).
        #[serde(default)]
        main: bool,
        #[serde(default)]
        rank: Option<u32>,
    },
    NotApplicable {
        knob: String,
        why: String,
    },
    Notice {
        message: String,
    },
    Window {
        warmup: usize,
    },
    WindowFull(WindowFull),
    ScriptKnob {
        knob: String,
        value: serde_json::Value,
    },
    Compiled {
        module: String,
        mode: String,
    },
    StreamReplayed {
        workers: u32,
    },
    CompileFailed {
        #[serde(default)]
        mode: Option<String>,
        message: String,
    },
    CompileBudget(CompileOver),
}

impl Events {
    /// One more optimizer class the script built. A name is a Python dotted identifier
    /// (the hooks write `type(optimizer).__name__`); anything else is dropped, since it
    /// would be printed into a line of Python, and at most four classes are kept.
    fn optimizer_seen(&mut self, name: String) {
        let ok = !name.is_empty()
            && name.len() <= 80
            && name.split('.').all(|p| {
                p.chars()
                    .next()
                    .is_some_and(|c| c.is_alphabetic() || c == '_')
                    && p.chars().all(|c| c.is_alphanumeric() || c == '_')
            });
        if !ok {
            return;
        }
        match self.script_knobs.get_mut(OPTIMIZER) {
            None => {
                self.script_knobs.insert(OPTIMIZER.into(), name);
            }
            Some(all) => {
                let held: Vec<&str> = all.split(", ").collect();
                if held.len() < 4 && !held.contains(&name.as_str()) {
                    all.push_str(", ");
                    all.push_str(&name);
                }
            }
        }
    }

    pub fn push_line(&mut self, line: &str) {
        match serde_json::from_str::<Line>(line) {
            Ok(Line::Hello { torch }) => self.torch = Some(torch),
            Ok(Line::Step(mut s)) if s.plausible() => {
                if let (None, Some(pid)) = (s.rank, s.proc) {
                    s.rank = Some(self.proc_index(pid));
                }
                if let Some(r) = s.rank {
                    self.ranks.entry(r).or_default().push(s.clone());
                }
                if s.rank.unwrap_or(0) == 0 {
                    self.steps.push(s);
                }
            }
            Ok(Line::FirstStep(mut s)) if s.plausible() && s.dur > 0.0 => {
                s.step = 0;
                // From the first training forward (a compile's cost is judged by it);
                // a line without it (an older hook) started there.
                let fwd = s.fwd_dur.unwrap_or(s.dur);
                if s.rank.unwrap_or(0) == 0 && (0.0..=MAX_STEP_S).contains(&fwd) {
                    self.first_step = Some(FirstStep {
                        dur: fwd,
                        compile: s.compile,
                        compiles: s.compiles,
                    });
                }
                self.first_steps.push(s);
            }
            Ok(Line::Override {
                knob,
                script,
                applied,
            }) => self.overrides.push(Override {
                knob,
                script,
                applied,
            }),
            Ok(Line::Error {
                message,
                main,
                rank,
            }) => {
                // The process that reports the measured steps (rank 0's under torchrun)
                // stepped aside: no more of its steps will come.
                if main && rank.unwrap_or(0) == 0 && self.steps_off.is_none() {
                    self.steps_off = Some(message.clone());
                }
                self.errors.push(message)
            }
            Ok(Line::NotApplicable { knob, why }) => {
                self.not_applicable.insert(knob, why);
            }
            Ok(Line::Notice { message }) => self.notices.push(message),
            Ok(Line::Window { warmup }) if self.rank_zero(line) => {
                self.window_warmup = Some(warmup)
            }
            Ok(Line::WindowFull(w)) if self.rank_zero(line) => self.window_full = Some(w),
            Ok(Line::Window { .. } | Line::WindowFull(_)) => {}
            Ok(Line::ScriptKnob { knob, value }) => {
                let text = match value {
                    serde_json::Value::String(s) => s,
                    v => v.to_string(),
                };
                if knob == OPTIMIZER {
                    self.optimizer_seen(text);
                } else if knob == OPTIM_IMPLS {
                    // Narrowed as each new class is seen: the last word is the job's.
                    self.script_knobs.insert(knob, text);
                } else {
                    self.script_knobs.entry(knob).or_insert(text);
                }
            }
            Ok(Line::StreamReplayed { workers }) => {
                self.stream_replayed.get_or_insert(workers);
            }
            Ok(Line::Compiled { module, mode }) => {
                let m = format!("{module} ({mode})");
                if !self.compiled.contains(&m) {
                    self.compiled.push(m);
                }
            }
            Ok(Line::CompileFailed { mode, message }) => {
                self.compile_failed
                    .get_or_insert((mode.unwrap_or_else(|| "?".into()), message));
            }
            Ok(Line::CompileBudget(c)) => {
                self.compile_over.get_or_insert(c);
            }
            _ => self.malformed += 1,
        }
    }

    /// The index of a trainer's pid among `procs`, a new one added while there are fewer
    /// than `MAX_PROCS` (the rest share the last index).
    fn proc_index(&mut self, pid: u32) -> u32 {
        let at = match self.procs.iter().position(|p| *p == pid) {
            Some(i) => i,
            None if self.procs.len() < MAX_PROCS => {
                self.procs.push(pid);
                self.procs.len() - 1
            }
            None => self.procs.len() - 1,
        };
        at as u32
    }

    /// Whether a window line came from the process whose steps are `steps`: rank 0 under
    /// torchrun, else the one process that reports.
    fn rank_zero(&self, line: &str) -> bool {
        #[derive(Deserialize)]
        struct Rank {
            rank: Option<u32>,
            proc: Option<u32>,
        }
        serde_json::from_str::<Rank>(line).map_or(true, |r| match (r.rank, r.proc) {
            (Some(rank), _) => rank == 0,
            // A trainer multiprocessing started: the first whose steps came.
            (None, Some(pid)) => self.procs.first().is_none_or(|p| *p == pid),
            (None, None) => true,
        })
    }

    /// Steps after warm-up: the measurement window's, when the hooks had one and began
    /// measuring; else the first tenth (at least one when there are five or more)
    /// carries start-up costs (worker processes, allocator, caches).
    pub fn steady(&self) -> &[Step] {
        match self.window_warmup {
            Some(w) if w < self.steps.len() => &self.steps[w..],
            _ => steady(&self.steps),
        }
    }

    /// Seconds the job spent compiling beyond its steady step time, and compilations:
    /// the first step's time and every step that recompiled, each less the median
    /// steady step. None when nothing in the job was compiled.
    pub fn compile_cost(&self) -> Option<(f64, u32)> {
        let first = self.first_step.as_ref();
        let n =
            first.map_or(0, |f| f.compiles) + self.steps.iter().map(|s| s.compiles).sum::<u32>();
        if n == 0 && self.compiled.is_empty() {
            return None;
        }
        let durs: Vec<f64> = self
            .steady()
            .iter()
            .filter(|s| s.compiles == 0)
            .map(|s| s.dur)
            .collect();
        let step = if durs.is_empty() { 0.0 } else { median(&durs) };
        let excess = |d: f64| (d - step).max(0.0);
        let mut total: f64 = self
            .steps
            .iter()
            .filter(|s| s.compiles > 0)
            .map(|s| excess(s.dur))
            .sum();
        total += match first {
            Some(f) => excess(f.dur),
            // No training forward seen before the first step: dynamo's own count.
            None => 0.0,
        };
        let timed: f64 =
            first.map_or(0.0, |f| f.compile) + self.steps.iter().map(|s| s.compile).sum::<f64>();
        // The callbacks' time is inside those steps; it is the floor when the first step
        // was not seen.
        Some((total.max(timed), n))
    }
}

/// Steps after warm-up: the first tenth (at least one when there are five or more)
/// carries start-up costs (worker processes, allocator, caches).
pub(super) fn steady(steps: &[Step]) -> &[Step] {
    let n = steps.len();
    let skip = if n >= 5 { (n / 10).max(1) } else { 0 };
    &steps[skip..]
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

    /// A subnormal duration made samples/s infinite and phases near f64::MAX summed to
    /// infinity, both written as `null` into the journal (#27): such steps are not trusted.
    #[test]
    fn steps_with_figures_out_of_range_are_counted_not_used() {
        let mut e = Events::default();
        for i in 1..=6 {
            e.push_line(&format!(
                r#"{{"ev":"step","step":{i},"dur":0.01,"batch":8,"forward":0.005}}"#
            ));
        }
        let hostile = [
            r#""dur":5e-324"#,
            r#""dur":1e-300"#,
            r#""dur":1.7976931348623157e308"#,
            r#""dur":0.01,"forward":1.7976931348623157e308"#,
            r#""dur":0.01,"data_wait":1e300,"backward":1e300"#,
            r#""dur":0.01,"h2d":-1"#,
            r#""dur":0.01,"optimizer":5e-324,"batch":18446744073709551615"#,
        ];
        for h in hostile {
            e.push_line(&format!(r#"{{"ev":"step","step":9,{h}}}"#));
        }
        assert_eq!((e.steps.len(), e.malformed), (6, hostile.len()));
        let s = e.summary().unwrap();
        assert!(s.samples_per_s.unwrap().is_finite() && s.median_step_ms.is_finite());
        assert!(s.phase_share.values().all(|v| v.is_finite()), "{s:?}");
    }

    #[test]
    fn first_steps_stay_apart_and_token_ids_give_tokens_per_second() {
        let mut e = Events::default();
        e.push_line(r#"{"ev":"first_step","t":5.0,"dur":3.0,"forward":2.9}"#);
        for i in 1..=10 {
            e.push_line(&format!(
                r#"{{"ev":"step","step":{i},"t":{},"dur":0.01,"batch":4,"tokens":128,"forward":0.01}}"#,
                5.0 + 0.01 * f64::from(i)
            ));
        }
        assert_eq!((e.steps.len(), e.first_steps.len()), (10, 1));
        assert_eq!(e.first_steps[0].step, 0);
        let s = e.summary().unwrap();
        assert_eq!(s.steps, 10);
        assert!((s.first_step_ms.unwrap() - 3000.0).abs() < 1e-9);
        assert!((s.median_step_ms - 10.0).abs() < 1e-9, "{s:?}");
        assert!((s.tokens_per_s.unwrap() / s.samples_per_s.unwrap() - 32.0).abs() < 1e-9);
    }

    #[test]
    fn the_scripts_optimizer_classes_are_kept_once_each_and_only_as_names() {
        let mut e = Events::default();
        let class = |e: &mut Events, v: &str| {
            e.push_line(&format!(
                r#"{{"ev":"script_knob","knob":"optimizer","value":"{v}"}}"#
            ))
        };
        class(&mut e, "torch.optim.Adam");
        class(&mut e, "torch.optim.Adam");
        class(&mut e, "os.system('rm -rf ~')");
        class(&mut e, "");
        class(&mut e, "MyAdam");
        assert_eq!(e.script_knobs[OPTIMIZER], "torch.optim.Adam, MyAdam");
        let mut only_bad = Events::default();
        class(&mut only_bad, "1x");
        assert!(!only_bad.script_knobs.contains_key(OPTIMIZER));
    }

    /// Only the process whose steps are measured turns a trial's steps off: a forked
    /// DataLoader worker's failure (`main` false) and another rank's leave them on.
    #[test]
    fn only_the_measured_process_failing_turns_the_steps_off() {
        let mut e = Events::default();
        e.push_line(r#"{"ev":"error","message":"in a worker","main":false}"#);
        e.push_line(r#"{"ev":"error","message":"on rank 1","main":true,"rank":1}"#);
        assert_eq!(e.steps_off, None);
        assert_eq!(e.errors.len(), 2);
        e.push_line(r#"{"ev":"error","message":"on rank 0","main":true,"rank":0}"#);
        e.push_line(r#"{"ev":"error","message":"later","main":true}"#);
        assert_eq!(e.steps_off.as_deref(), Some("on rank 0"));
        let mut plain = Events::default();
        plain.push_line(r#"{"ev":"error","message":"no rank","main":true}"#);
        assert_eq!(plain.steps_off.as_deref(), Some("no rank"));
    }

    /// Evaluation passes every 5 steps: their share of steps' and passes' time, their
    /// count and gap; steps with none give no evaluation.
    #[test]
    fn evaluation_passes_are_summed_apart_from_the_steps() {
        let mut e = Events::default();
        for i in 1..=40 {
            let eval = if i % 5 == 0 { 0.04 } else { 0.0 };
            e.push_line(&format!(
                r#"{{"ev":"step","step":{i},"t":0,"dur":0.01,"batch":8,"forward":0.01,"eval":{eval}}}"#
            ));
        }
        let s = e.summary().unwrap();
        let ev = s.evaluation.expect("evaluation");
        // 36 steady steps (the first 4 skipped), 8 passes among them (5, 10, ..., 40).
        assert_eq!(ev.passes, 8);
        assert_eq!(ev.every, 5.0);
        assert!((ev.median_s - 0.04).abs() < 1e-12);
        let want = 8.0 * 0.04 / (8.0 * 0.04 + 36.0 * 0.01);
        assert!((ev.share - want).abs() < 1e-9, "{}", ev.share);
        assert!((s.median_step_ms - 10.0).abs() < 1e-9);
        let mut none = Events::default();
        for i in 1..=10 {
            none.push_line(&format!(
                r#"{{"ev":"step","step":{i},"t":0,"dur":0.01,"forward":0.01}}"#
            ));
        }
        assert!(none.summary().unwrap().evaluation.is_none());
    }
}
