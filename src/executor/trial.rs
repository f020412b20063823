//! One trial in a child process, parent side: spawn it, enforce the time limit, and turn
//! whatever happened (a result line, a panic, a signal, silence) into a `Status`.
//!
//! Engine workloads run `tune trial --json <flags>` (see `child` for the child side);
//! command workloads run the user's command under `sh -c` and read the metric from its
//! output. A trial's failure is data for the report, never an error of the sweep.

use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Deserialize;

pub use super::child::child_main;
use super::child::MEM_CAP_ENV;
use super::window::Values;
use crate::engine::train::RunSummary;
use crate::fsio::MAX_INPUT_BYTES;
use crate::knobs::Knobs;
use crate::process::alloc::EXIT_OOM;
use crate::process::pipes::{lock, spawn_reader, Shared, Tail};
use crate::process::procs::{die_with_parent, kill_descendants, kill_group};
use crate::process::supervise::{Report as SupReport, REPORT_PREFIX};
use crate::results::record::Status;
use crate::runner::live::LIVE_ENV;
use crate::runner::sweep::{Executor, Outcome};
use crate::spec::metric::{json_value, NumberPattern};
use crate::spec::{CommandWorkload, EngineWorkload, Metric, Spec, Workload};

/// Lines of stderr kept for a crash report.
const STDERR_TAIL: usize = 12;

/// What every trial of a sweep shares.
#[derive(Clone, Debug)]
pub struct TrialEnv {
    /// The `tune` executable to run `tune trial` with.
    pub exe: PathBuf,
    pub timeout: Duration,
    /// Resident-memory cap for engine trials.
    pub mem_cap_bytes: Option<u64>,
    /// Where engine trials write their progress (`live::LIVE_ENV`), if anywhere.
    pub live_file: Option<PathBuf>,
    /// Set to stop the running child at once (the dashboard's quit); its outcome is then
    /// meaningless and must not be journaled.
    pub cancel: Option<Arc<AtomicBool>>,
    /// When the sweep's time budget ends: the child is stopped then, and its outcome is
    /// marked `cut` (taken from each run's `Search::cut_at`).
    pub cut_at: Option<Instant>,
}

impl Executor for TrialEnv {
    fn run(&self, spec: &Spec, knobs: &Knobs, steps: usize) -> Outcome {
        run_trial(self, spec, knobs, steps)
    }
}

/// Runs `knobs` on the spec's workload for `steps` measured steps.
pub fn run_trial(env: &TrialEnv, spec: &Spec, knobs: &Knobs, steps: usize) -> Outcome {
    let env = &TrialEnv {
        cut_at: spec.search.cut_at.or(env.cut_at),
        ..env.clone()
    };
    match &spec.workload {
        Workload::Engine(w) => run_engine(env, w, knobs, steps),
        Workload::Command(c) => run_command(env, spec, c, knobs),
    }
}

/// The `tune trial` command line for one configuration.
pub fn engine_args(w: &EngineWorkload, knobs: &Knobs, steps: usize) -> Vec<String> {
    let mut a: Vec<String> = vec![
        "trial".into(),
        "--json".into(),
        "--model".into(),
        w.model.clone(),
        "--dataset".into(),
        w.dataset.clone(),
        // The engine counts warm-up steps inside `steps`; the spec does not.
        "--steps".into(),
        (steps + w.warmup).to_string(),
        "--warmup".into(),
        w.warmup.to_string(),
        "--device".into(),
        w.device.clone(),
    ];
    if let Some(t) = w.threads {
        a.extend(["--threads".into(), t.to_string()]);
    }
    if let Some(lr) = w.lr {
        a.extend(["--lr".into(), lr.to_string()]);
    }
    // One structured value, read back with serde and checked by the knob table in the
    // child; Knobs holds only numbers, booleans and words, so encoding cannot fail.
    let json = serde_json::to_string(knobs).unwrap_or_else(|e| format!("unencodable knobs: {e}"));
    a.extend(["--knobs-json".into(), json]);
    a
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum ChildLine {
    Ok(Box<RunSummary>),
    Error { kind: String, message: String },
}

fn run_engine(env: &TrialEnv, w: &EngineWorkload, knobs: &Knobs, steps: usize) -> Outcome {
    let mut cmd = Command::new(&env.exe);
    cmd.args(engine_args(w, knobs, steps));
    if let Some(cap) = env.mem_cap_bytes {
        cmd.env(MEM_CAP_ENV, cap.to_string());
    }
    match &env.live_file {
        Some(p) => cmd.env(LIVE_ENV, p),
        None => cmd.env_remove(LIVE_ENV),
    };
    // The child's one result line; the last one that parses wins.
    let result: Shared<Option<ChildLine>> = Arc::default();
    let seen = Arc::clone(&result);
    let on_line = move |l: &str| {
        let l = l.trim();
        if l.starts_with('{') {
            if let Ok(line) = serde_json::from_str::<ChildLine>(l) {
                *lock(&seen) = Some(line);
            }
        }
    };
    let max_line = usize::try_from(MAX_INPUT_BYTES).unwrap_or(usize::MAX);
    let fin = match run_child(cmd, env, false, max_line, on_line, None) {
        Ok(f) => f,
        Err(e) => return Outcome::fail(Status::Failed, e),
    };
    if fin.cut {
        return Outcome::cut(fin.cut_message());
    }
    // Past the limit is a time-out whatever the child printed before it was killed.
    if fin.timed_out {
        return Outcome::fail(Status::Timeout, fin.timeout_message(env.timeout));
    }
    let line = lock(&result).take();
    match line {
        Some(line) => line_outcome(line),
        None if fin.exit_code() == Some(EXIT_OOM) => {
            Outcome::fail(Status::Oom, fin.describe("exceeded the memory cap"))
        }
        None => Outcome::fail(Status::Crashed, fin.describe("no result")),
    }
}

/// The child's result line, read from `text` (a trial's whole stdout): the last line that
/// parses wins, as when it is read live.
pub(super) fn child_line(text: &str) -> Option<ChildLine> {
    text.lines().rev().find_map(|l| {
        let l = l.trim();
        l.starts_with('{')
            .then(|| serde_json::from_str::<ChildLine>(l).ok())
            .flatten()
    })
}

/// What the child's result line means for the trial.
pub(super) fn line_outcome(line: ChildLine) -> Outcome {
    match line {
        ChildLine::Ok(s) => Outcome {
            status: Status::Ok,
            error: None,
            repeat: Some(crate::results::record::clean(*s)),
            node: None,
            cut: false,
        },
        ChildLine::Error { kind, message } => {
            let status = match kind.as_str() {
                "diverged" => Status::Diverged,
                "unavailable" => Status::Unsupported,
                "oom" => Status::Oom,
                _ => Status::Failed,
            };
            Outcome::fail(status, message)
        }
    }
}

/// Finds the metric in one line of a command's stdout.
type Extract = dyn Fn(&str) -> Option<f64> + Send;

/// Bytes of one stdout line of a command that are looked at.
const COMMAND_LINE_BYTES: usize = 1 << 20;
/// How long a Python job has to end by itself once its window is full (the hooks raise
/// SystemExit at the step boundary; PyTorch joins each DataLoader worker for up to 5 s,
/// `MP_STATUS_CHECK_INTERVAL`), before tune ends its process tree.
const POLITE_GRACE: Duration = Duration::from_secs(10);

fn run_command(env: &TrialEnv, spec: &Spec, c: &CommandWorkload, knobs: &Knobs) -> Outcome {
    let line = c.render(knobs);
    let cwd = match &c.cwd {
        Some(d) => spec.dir().join(d),
        None => spec.dir().to_path_buf(),
    };
    let extract: Box<Extract> = match &c.metric {
        Metric::JsonKey(k) => {
            let k = k.clone();
            Box::new(move |l| json_value(l, &k))
        }
        Metric::Regex(re) => match NumberPattern::parse(re) {
            Ok(p) => Box::new(move |l| p.extract(l)),
            Err(e) => return Outcome::fail(Status::Failed, e),
        },
        // `[workload.python]`: the figures come from the hooks' step events.
        Metric::Hooks => Box::new(|_| None),
    };
    let hooked = c.metric == Metric::Hooks;
    let values: Shared<Values> = Arc::new(Mutex::new(Values::new(
        c.window.clone().filter(|_| !hooked),
    )));
    let sink = Arc::clone(&values);
    let on_line = move |l: &str| {
        if let Some(v) = extract(l) {
            lock(&sink).push(v);
        }
    };
    // The supervisor (`tune supervise`) runs `sh -c` and ends the whole tree; the hooks'
    // pipe is inherited through it.
    let mut cmd = Command::new(&env.exe);
    cmd.arg("supervise")
        .arg("--parent")
        .arg(std::process::id().to_string());
    if let Some(cap) = env.mem_cap_bytes {
        cmd.arg("--mem-cap-bytes").arg(cap.to_string());
    }
    cmd.args(["--", "sh", "-c", &line]).current_dir(&cwd);
    let link = match &c.metric {
        Metric::Hooks => match crate::bridge::Link::for_trial(&mut cmd, spec, knobs) {
            Ok(l) => Some(l),
            Err(e) => return Outcome::fail(Status::Failed, e.to_string()),
        },
        _ => None,
    };
    let py_live = link.as_ref().and_then(|_| {
        super::live_py::PyLive::open(
            env.live_file.as_ref(),
            c.window.as_ref().map_or(0, |w| w.steps),
        )
    });
    let full_hooks = || {
        let Some(l) = link.as_ref() else {
            return false;
        };
        if let Some(v) = &py_live {
            v.tick(&l.progress());
        }
        l.window_full()
    };
    // The hooks failed in the measured process: no window can fill, so the job is ended
    // now, not at its time limit (a LazyModule's dry run turned them off, and the trial
    // ran unmeasured for 380 s of a 400 s budget).
    let off_hooks = || link.as_ref().is_some_and(crate::bridge::Link::steps_off);
    let never = || false;
    let full_values = || lock(&values).full();
    // A Python job is asked to stop at its step boundary by the hooks and given a grace;
    // a command has no boundary tune can reach: its window ends at the value line.
    let window = match (&link, &c.window) {
        (Some(_), _) => Some(WindowWatch {
            full: &full_hooks,
            grace: POLITE_GRACE,
            off: &off_hooks,
        }),
        (None, Some(_)) => Some(WindowWatch {
            full: &full_values,
            grace: Duration::ZERO,
            off: &never,
        }),
        (None, None) => None,
    };
    let fin = match run_child(cmd, env, true, COMMAND_LINE_BYTES, on_line, window) {
        Ok(f) => f,
        Err(e) => return Outcome::fail(Status::Failed, e),
    };
    let end = supervised_end(env, &fin, &line).map(|_| ());
    let peak_rss = fin.report.as_ref().map_or(0, |r| r.peak_rss_bytes);
    let wall_s = fin.elapsed.as_secs_f64();
    let mut o = if let Some(link) = link {
        let events = link.finish(Duration::from_secs(2));
        super::window::hooked_outcome(
            &events,
            spec,
            knobs,
            &super::window::Ended {
                end: end.clone(),
                peak_rss,
                window_stop: fin.window_stop,
                grace: POLITE_GRACE,
                line: &line,
                wall_s,
            },
        )
    } else {
        let vals = std::mem::take(&mut *lock(&values));
        super::window::command_outcome(
            vals,
            c.window.as_ref(),
            &super::window::Ended {
                end,
                peak_rss,
                window_stop: fin.window_stop,
                grace: Duration::ZERO,
                line: &line,
                wall_s,
            },
        )
    };
    // A window that filled before the budget's end stands: the stop only cut its
    // shutdown short.
    o.cut = fin.cut && o.status != Status::Ok;
    o
}

/// How a supervised command ended, as a trial status: its report when the command
/// exited 0 within its limit, else the failed outcome (timeout, over the memory cap,
/// stopped, crashed) as its status and message.
fn supervised_end<'a>(
    env: &TrialEnv,
    fin: &'a Finished,
    line: &str,
) -> Result<&'a SupReport, (Status, String)> {
    if fin.cut {
        return Err((Status::Timeout, fin.cut_message()));
    }
    if fin.timed_out {
        return Err((Status::Timeout, fin.timeout_message(env.timeout)));
    }
    let Some(sup) = &fin.report else {
        return Err((
            Status::Crashed,
            fin.describe(&format!(
                "the supervisor of `{line}` ended without a report"
            )),
        ));
    };
    if let Some(e) = &sup.error {
        return Err((Status::Failed, e.clone()));
    }
    if let Some(rss) = sup.over_cap_bytes {
        return Err((Status::Oom,
            format!(
                "`{line}`: its processes' resident memory reached {:.1} MiB, over the trial cap of {:.1} MiB (mem_cap_mib); the process tree was ended",
                rss as f64 / 1048576.0,
                env.mem_cap_bytes.unwrap_or(0) as f64 / 1048576.0
            ),
        ));
    }
    if sup.stopped {
        return Err((
            Status::Failed,
            format!("`{line}` was stopped before it ended"),
        ));
    }
    if sup.code != Some(0) {
        return Err((Status::Crashed, fin.describe(&format!("`{line}` failed"))));
    }
    Ok(sup)
}

/// When a job's measurement window is full, and how long it then has to end by itself.
pub(super) struct WindowWatch<'a> {
    pub full: &'a dyn Fn() -> bool,
    pub grace: Duration,
    /// The window can never fill: the job is ended at once.
    pub off: &'a dyn Fn() -> bool,
}

/// How a child process ended.
pub(super) struct Finished {
    status: Option<ExitStatus>,
    /// The supervisor's report, for command trials.
    report: Option<SupReport>,
    timed_out: bool,
    /// Stopped when the sweep's time budget ended (`TrialEnv::cut_at`), before its own
    /// limit.
    cut: bool,
    /// Ended by tune after its measurement window filled (the job did not end by itself).
    window_stop: bool,
    stderr_tail: Vec<String>,
    elapsed: Duration,
}

impl Finished {
    fn cut_message(&self) -> String {
        format!(
            "stopped {:.1} s in, when the sweep's time budget (budget_s) ended",
            self.elapsed.as_secs_f64()
        )
    }

    fn timeout_message(&self, limit: Duration) -> String {
        format!(
            "killed after the per-trial limit of {} s (ran {:.1} s)",
            limit.as_secs_f64(),
            self.elapsed.as_secs_f64()
        )
    }

    fn exit_code(&self) -> Option<i32> {
        self.status.and_then(|s| s.code())
    }

    /// "what; how it ended; last stderr lines".
    fn describe(&self, what: &str) -> String {
        let how = match (&self.report, self.status) {
            (Some(r), _) => match (r.code, r.signal) {
                (_, Some(sig)) => signal_description(sig),
                (Some(c), _) => code_description(c),
                _ => "ended in an unknown way".into(),
            },
            (None, Some(s)) => exit_description(s),
            (None, None) => "ended in an unknown way".into(),
        };
        let mut msg = format!("{what}: {how}");
        if !self.stderr_tail.is_empty() {
            msg.push_str("; stderr: ");
            msg.push_str(&self.stderr_tail.join(" | "));
        }
        msg
    }
}

fn exit_description(s: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (s.signal(), s.code()) {
        (Some(sig), _) => signal_description(sig),
        (None, Some(c)) => code_description(c),
        (None, None) => "ended without an exit code".into(),
    }
}

fn signal_description(sig: i32) -> String {
    let name = match sig {
        6 => " (SIGABRT)",
        9 => " (SIGKILL, e.g. the kernel's OOM killer)",
        11 => " (SIGSEGV)",
        13 => " (SIGPIPE)",
        15 => " (SIGTERM)",
        _ => "",
    };
    format!("killed by signal {sig}{name}")
}

fn code_description(c: i32) -> String {
    match c {
        101 => "exited with code 101 (a Rust panic)".into(),
        c => format!("exited with code {c}"),
    }
}

/// How long readers may take to reach EOF once the trial's processes are gone.
const READER_GRACE: Duration = Duration::from_secs(2);
/// How long a supervisor may take to end its tree after SIGTERM.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// Spawns `cmd` (a `tune trial` child, or with `supervised` a `tune supervise`), feeds
/// its stdout lines to `on_stdout`, and waits up to the trial timeout; past it, or when
/// cancelled, it ends the child and everything under it.
fn run_child<F>(
    mut cmd: Command,
    env: &TrialEnv,
    supervised: bool,
    max_line: usize,
    on_stdout: F,
    window: Option<WindowWatch<'_>>,
) -> Result<Finished, String>
where
    F: FnMut(&str) + Send + 'static,
{
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // A supervisor catches SIGTERM to end its tree first; an engine child has no tree.
    die_with_parent(
        &mut cmd,
        if supervised {
            libc::SIGTERM
        } else {
            libc::SIGKILL
        },
    );
    let started = Instant::now();
    // No deadline when the limit is beyond what the clock can represent.
    let limit = started.checked_add(env.timeout);
    // The budget's end, where it comes before the trial's own limit.
    let by_budget = env.cut_at.filter(|c| limit.is_none_or(|d| *c < d));
    let deadline = by_budget.or(limit);
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {:?}: {e}", cmd.get_program()))?;
    let out = child
        .stdout
        .take()
        .map(|o| spawn_reader(o, max_line, on_stdout));
    let err_state: Shared<(Tail, Option<SupReport>)> =
        Arc::new(Mutex::new((Tail::new(STDERR_TAIL), None)));
    let sink = Arc::clone(&err_state);
    let err = child.stderr.take().map(|e| {
        spawn_reader(e, 64 << 10, move |l| {
            let mut s = lock(&sink);
            match l.strip_prefix(REPORT_PREFIX) {
                Some(json) if supervised => s.1 = serde_json::from_str(json).ok(),
                _ => s.0.push(l),
            }
        })
    });
    let (status, timed_out, window_stop) = wait_until(
        &mut child,
        deadline,
        env.cancel.as_deref(),
        supervised,
        window,
    );
    // Every writer is dead now, so EOF is near; an escaped holder only costs the grace.
    let grace = Instant::now() + READER_GRACE;
    for rx in [out, err].into_iter().flatten() {
        let _ = rx.recv_timeout(grace.saturating_duration_since(Instant::now()));
    }
    let (tail, report) = lock(&err_state).clone();
    Ok(Finished {
        status,
        report,
        timed_out: timed_out && by_budget.is_none(),
        cut: timed_out && by_budget.is_some(),
        window_stop,
        stderr_tail: tail.lines(),
        elapsed: started.elapsed(),
    })
}

/// The child's exit status, whether the time limit ended it, and whether tune ended it
/// after its measurement window filled.
fn wait_until(
    child: &mut Child,
    deadline: Option<Instant>,
    cancel: Option<&AtomicBool>,
    supervised: bool,
    window: Option<WindowWatch<'_>>,
) -> (Option<ExitStatus>, bool, bool) {
    let mut poll = Duration::from_millis(5);
    let mut full_at: Option<Instant> = None;
    loop {
        match child.try_wait() {
            Ok(Some(s)) => return (Some(s), false, false),
            Ok(None) => {}
            Err(_) => return (child.wait().ok(), false, false),
        }
        if let Some(w) = &window {
            if full_at.is_none() && (w.full)() {
                full_at = Some(Instant::now());
            }
            if full_at.is_some_and(|at| at.elapsed() >= w.grace) || (w.off)() {
                stop(child, supervised);
                return (child.wait().ok(), false, true);
            }
        }
        let cancelled = cancel.is_some_and(|c| c.load(Ordering::Relaxed));
        if cancelled || deadline.is_some_and(|d| Instant::now() >= d) {
            stop(child, supervised);
            return (child.wait().ok(), !cancelled, false);
        }
        std::thread::sleep(poll);
        // Short trials answer fast; long ones need not be polled 200 times a second.
        poll = (poll * 2).min(Duration::from_millis(50));
    }
}

/// Ends a child and its tree: a supervisor is asked (SIGTERM) so it can reap what
/// left its group, and forced if it does not finish in time.
fn stop(child: &mut Child, supervised: bool) {
    let pid = child.id();
    if supervised {
        // SAFETY: kill(2) has no memory effects; the child is not reaped yet, so `pid`
        // is still ours.
        unsafe {
            libc::kill(pid as libc::pid_t, libc::SIGTERM);
        }
        let until = Instant::now() + STOP_GRACE;
        while Instant::now() < until {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        kill_descendants(pid);
    }
    kill_group(pid, libc::SIGKILL);
    let _ = child.kill();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_args_pass_the_knobs_as_one_json_value() {
        let w = EngineWorkload {
            model: "mlp".into(),
            dataset: "synthetic".into(),
            batch_size: 16,
            steps: 10,
            warmup: 2,
            device: "cpu".into(),
            devices: 1,
            threads: Some(1),
            lr: None,
        };
        let k = Knobs {
            autotune: true,
            num_workers: 2,
            ..Knobs::default()
        };
        let args = engine_args(&w, &k, 10);
        let a = args.join(" ");
        assert!(a.starts_with("trial --json --model mlp --dataset synthetic --steps 12 --warmup 2"));
        assert!(a.contains("--threads 1"), "{a}");
        // The knobs travel as one JSON value that reads back to the same configuration.
        let at = args.iter().position(|x| x == "--knobs-json").unwrap();
        assert_eq!(Knobs::from_json(&args[at + 1]).unwrap(), k);
        assert!(!a.contains("--num-workers"), "{a}");
    }
}
