//! One trial in a child process, parent side: spawn it, enforce the time limit, and turn
//! whatever happened (a result line, a panic, a signal, silence) into a `Status`.
//!
//! Engine workloads run `tune trial --json <flags>` (see `child` for the child side);
//! command workloads run the user's command under `sh -c` and read the metric from its
//! output. A trial's failure is data for the report, never an error of the sweep.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::Deserialize;

pub use super::child::child_main;
use super::child::{EXIT_OOM, MEM_CAP_ENV};
use super::live::LIVE_ENV;
use super::metric::{json_value, NumberPattern};
use super::record::{Repeat, Status};
use super::spec::{CommandWorkload, EngineWorkload, Metric, Spec, Workload};
use crate::engine::train::RunSummary;
use crate::knobs::Knobs;

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
}

/// The result of one run of one configuration.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub status: Status,
    pub error: Option<String>,
    pub repeat: Option<Repeat>,
}

impl Outcome {
    fn fail(status: Status, error: impl Into<String>) -> Outcome {
        Outcome {
            status,
            error: Some(error.into()),
            repeat: None,
        }
    }
}

/// Runs `knobs` on the spec's workload for `steps` measured steps.
pub fn run_trial(env: &TrialEnv, spec: &Spec, knobs: &Knobs, steps: usize) -> Outcome {
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
    for name in Knobs::NAMES {
        let Some(value) = knobs.get(name) else {
            continue;
        };
        let flag = format!("--{}", name.replace('_', "-"));
        // Boolean knobs are clap switches: present or absent.
        match value.as_str() {
            "true" => a.push(flag),
            "false" => {}
            _ => a.extend([flag, value]),
        }
    }
    a
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum ChildLine {
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
    let fin = match supervise(cmd, env, false) {
        Ok(f) => f,
        Err(e) => return Outcome::fail(Status::Failed, e),
    };
    let line = fin
        .stdout
        .iter()
        .rev()
        .find_map(|l| serde_json::from_str::<ChildLine>(l.trim()).ok());
    match line {
        Some(ChildLine::Ok(s)) => Outcome {
            status: Status::Ok,
            error: None,
            repeat: Some(Repeat::from_summary(&s)),
        },
        Some(ChildLine::Error { kind, message }) => {
            let status = match kind.as_str() {
                "diverged" => Status::Diverged,
                "unavailable" => Status::Unsupported,
                "oom" => Status::Oom,
                _ => Status::Failed,
            };
            Outcome::fail(status, message)
        }
        None if fin.timed_out => Outcome::fail(Status::Timeout, fin.timeout_message(env.timeout)),
        None if fin.status.and_then(|s| s.code()) == Some(EXIT_OOM) => {
            Outcome::fail(Status::Oom, fin.describe("exceeded the memory cap"))
        }
        None => Outcome::fail(Status::Crashed, fin.describe("no result")),
    }
}

fn run_command(env: &TrialEnv, spec: &Spec, c: &CommandWorkload, knobs: &Knobs) -> Outcome {
    let line = c.render(knobs);
    let cwd = match &c.cwd {
        Some(d) => spec.dir().join(d),
        None => spec.dir().to_path_buf(),
    };
    let mut cmd = Command::new("sh");
    cmd.arg("-c").arg(&line).current_dir(&cwd);
    let link = match &c.metric {
        Metric::Hooks => match crate::bridge::Link::for_trial(&mut cmd, spec, knobs) {
            Ok(l) => Some(l),
            Err(e) => return Outcome::fail(Status::Failed, e.to_string()),
        },
        _ => None,
    };
    let fin = match supervise(cmd, env, true) {
        Ok(f) => f,
        Err(e) => return Outcome::fail(Status::Failed, e),
    };
    if let Some(link) = link {
        return hooked_outcome(env, &fin, link, spec, knobs, &line);
    }
    if fin.timed_out {
        return Outcome::fail(Status::Timeout, fin.timeout_message(env.timeout));
    }
    let values: Vec<f64> = match &c.metric {
        Metric::JsonKey(k) => fin.stdout.iter().filter_map(|l| json_value(l, k)).collect(),
        Metric::Regex(re) => match NumberPattern::parse(re) {
            Ok(p) => fin.stdout.iter().filter_map(|l| p.extract(l)).collect(),
            Err(e) => return Outcome::fail(Status::Failed, e),
        },
        Metric::Hooks => Vec::new(),
    };
    if !fin.status.is_some_and(|s| s.success()) {
        return Outcome::fail(Status::Crashed, fin.describe(&format!("`{line}` failed")));
    }
    let values: Vec<f64> = values.into_iter().filter(|v| *v > 0.0).collect();
    if values.is_empty() {
        return Outcome::fail(
            Status::Failed,
            format!("`{line}` printed no positive metric value on stdout"),
        );
    }
    // Each reported figure is one sample of samples/s: as a "step" of one sample, its
    // time is the reciprocal, so the same statistics apply as to engine trials.
    let step_times: Vec<f64> = values.iter().map(|v| 1.0 / v).collect();
    let median = crate::runner::stats::median(&values);
    Outcome {
        status: Status::Ok,
        error: None,
        repeat: Some(Repeat {
            step_times,
            samples_per_step: 1.0,
            samples_per_s: median,
            backend: "command".into(),
            wall_s: fin.elapsed.as_secs_f64(),
            ..Repeat::default()
        }),
    }
}

/// A `[workload.python]` trial: its steps as the hooks measured them.
fn hooked_outcome(
    env: &TrialEnv,
    fin: &Finished,
    link: crate::bridge::Link,
    spec: &Spec,
    knobs: &Knobs,
    line: &str,
) -> Outcome {
    let events = link.finish(Duration::from_secs(2));
    if fin.timed_out {
        return Outcome::fail(Status::Timeout, fin.timeout_message(env.timeout));
    }
    if !fin.status.is_some_and(|s| s.success()) {
        return Outcome::fail(Status::Crashed, fin.describe(&format!("`{line}` failed")));
    }
    match crate::bridge::repeat(&events, spec, knobs, fin.elapsed.as_secs_f64()) {
        Ok(r) => Outcome {
            status: Status::Ok,
            error: None,
            repeat: Some(r),
        },
        Err(e) => Outcome::fail(Status::Failed, format!("`{line}`: {e}")),
    }
}

/// How a child process ended.
struct Finished {
    status: Option<ExitStatus>,
    timed_out: bool,
    stdout: Vec<String>,
    stderr_tail: Vec<String>,
    elapsed: Duration,
}

impl Finished {
    fn timeout_message(&self, limit: Duration) -> String {
        format!(
            "killed after the per-trial limit of {} s",
            limit.as_secs_f64()
        )
    }

    /// "what; how it ended; last stderr lines".
    fn describe(&self, what: &str) -> String {
        let how = match self.status {
            Some(s) => exit_description(s),
            None => "ended in an unknown way".into(),
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
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(sig) = s.signal() {
            let name = match sig {
                6 => " (SIGABRT)",
                9 => " (SIGKILL, e.g. the kernel's OOM killer)",
                11 => " (SIGSEGV)",
                15 => " (SIGTERM)",
                _ => "",
            };
            return format!("killed by signal {sig}{name}");
        }
    }
    match s.code() {
        Some(101) => "exited with code 101 (a Rust panic)".into(),
        Some(c) => format!("exited with code {c}"),
        None => "ended without an exit code".into(),
    }
}

fn reader<R: Read + Send + 'static>(r: R, keep: Option<usize>) -> JoinHandle<Vec<String>> {
    std::thread::spawn(move || {
        let mut lines = VecDeque::new();
        for line in BufReader::new(r).lines() {
            let Ok(line) = line else { break };
            lines.push_back(line);
            if keep.is_some_and(|k| lines.len() > k) {
                lines.pop_front();
            }
        }
        lines.into()
    })
}

/// Spawns `cmd` with piped output, waits up to the trial timeout, kills it past that or
/// when cancelled. With `group`, the child leads a new process group and the whole group
/// is killed, so a shell's grandchildren do not outlive it (and keep our pipes open).
fn supervise(mut cmd: Command, env: &TrialEnv, group: bool) -> Result<Finished, String> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    #[cfg(unix)]
    if group {
        use std::os::unix::process::CommandExt;
        cmd.process_group(0);
    }
    let started = Instant::now();
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {:?}: {e}", cmd.get_program()))?;
    let out = child.stdout.take().map(|o| reader(o, None));
    let err = child.stderr.take().map(|e| reader(e, Some(STDERR_TAIL)));
    let (status, timed_out) =
        wait_with_timeout(&mut child, env.timeout, env.cancel.as_deref(), group);
    let join =
        |h: Option<JoinHandle<Vec<String>>>| h.and_then(|h| h.join().ok()).unwrap_or_default();
    Ok(Finished {
        status,
        timed_out,
        stdout: join(out),
        stderr_tail: join(err),
        elapsed: started.elapsed(),
    })
}

fn wait_with_timeout(
    child: &mut Child,
    timeout: Duration,
    cancel: Option<&AtomicBool>,
    group: bool,
) -> (Option<ExitStatus>, bool) {
    let deadline = Instant::now() + timeout;
    let mut poll = Duration::from_millis(5);
    loop {
        match child.try_wait() {
            Ok(Some(s)) => return (Some(s), false),
            Ok(None) => {}
            Err(_) => return (child.wait().ok(), false),
        }
        let cancelled = cancel.is_some_and(|c| c.load(Ordering::Relaxed));
        if cancelled || Instant::now() >= deadline {
            if group {
                // No libc here: kill(1) with a negative pid signals the whole group.
                let _ = Command::new("kill")
                    .args(["-KILL", "--", &format!("-{}", child.id())])
                    .status();
            }
            let _ = child.kill();
            return (child.wait().ok(), !cancelled);
        }
        std::thread::sleep(poll);
        // Short trials answer fast; long ones need not be polled 200 times a second.
        poll = (poll * 2).min(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_flags_follow_knob_names() {
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
        let a = engine_args(&w, &k, 10).join(" ");
        assert!(a.starts_with("trial --json --model mlp --dataset synthetic --steps 12 --warmup 2"));
        assert!(a.contains("--num-workers 2"), "{a}");
        assert!(a.contains(" --autotune"), "{a}");
        assert!(!a.contains("--pin-memory"), "{a}");
        assert!(a.contains("--threads 1"), "{a}");
    }

    #[test]
    fn command_trials_read_the_metric() {
        let spec = Spec::parse(
            "[workload.command]\nrun = \"echo 'samples/s: 10'; echo 'samples/s: 20'; echo 'x {batch_size}'\"\nmetric_regex = 'samples/s: ([0-9.]+)'\n",
            "/tmp/x.toml",
        )
        .unwrap();
        let env = TrialEnv {
            exe: PathBuf::from("unused"),
            timeout: Duration::from_secs(10),
            mem_cap_bytes: None,
            live_file: None,
            cancel: None,
        };
        let o = run_trial(&env, &spec, &spec.search.baseline, 1);
        assert_eq!(o.status, Status::Ok, "{:?}", o.error);
        let r = o.repeat.unwrap();
        assert_eq!(r.step_times, vec![0.1, 0.05]);
        assert_eq!(r.samples_per_s, 15.0);
    }

    #[test]
    fn cancel_kills_the_child_and_is_not_a_timeout() {
        let spec = Spec::parse(
            "[workload.command]\nrun = \"sleep 30; echo 'samples/s: 1'\"\nmetric_regex = 'samples/s: ([0-9.]+)'\n",
            "/tmp/x.toml",
        )
        .unwrap();
        let cancel = Arc::new(AtomicBool::new(false));
        let env = TrialEnv {
            exe: PathBuf::from("unused"),
            timeout: Duration::from_secs(60),
            mem_cap_bytes: None,
            live_file: None,
            cancel: Some(cancel.clone()),
        };
        let t = Instant::now();
        let o = std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(300));
                cancel.store(true, Ordering::Relaxed);
            });
            run_trial(&env, &spec, &spec.search.baseline, 1)
        });
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
        assert_ne!(o.status, Status::Timeout);
        assert_ne!(o.status, Status::Ok);
    }

    #[test]
    fn command_timeout_kills_the_tree() {
        let spec = Spec::parse(
            "[workload.command]\nrun = \"sleep 30; echo 'samples/s: 1'\"\nmetric_regex = 'samples/s: ([0-9.]+)'\n",
            "/tmp/x.toml",
        )
        .unwrap();
        let env = TrialEnv {
            exe: PathBuf::from("unused"),
            timeout: Duration::from_millis(300),
            mem_cap_bytes: None,
            live_file: None,
            cancel: None,
        };
        let t = Instant::now();
        let o = run_trial(&env, &spec, &spec.search.baseline, 1);
        assert_eq!(o.status, Status::Timeout);
        assert!(t.elapsed() < Duration::from_secs(5));
    }
}
