//! One `tune watch` from start to report: start or attach to the process, sample its
//! tree, the host and the GPUs on one timeline, show them live, and at exit summarise,
//! judge and write the report.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tune_probes::recorder::lock;
use tune_probes::{
    gpu_inventory, nvml_notice, HostSampler, NvmlSampler, Recorder, Sample, Sampler, Timeline,
    DEFAULT_CAPACITY,
};

use super::findings::{findings, Context, FindingKind, WatchFinding};
use super::live;
use super::model::{group, summarize};
use super::report::{
    timeline_rows, Sampling, TargetReport, WatchReport, KIND, MAX_POINTS_PER_SERIES,
};
use super::target::{catch_stop_signals, stop_signals, Ended, Target};
use super::tui::{Screen, WatchApp};
use crate::bridge::Link;
use crate::error::{Error, Result};
use crate::results::model::SCHEMA_VERSION;
use crate::results::Finding;

pub enum What {
    Pid(u32),
    Command(Vec<String>),
}

pub struct Options {
    pub what: What,
    pub interval: Duration,
    pub json: bool,
    /// The full-screen view (`super::tui`) instead of plain lines.
    pub tui: bool,
    pub out: PathBuf,
    /// End the watch (and a command tune started) after this many steps or this long.
    pub steps: Option<u64>,
    pub duration: Option<Duration>,
}

/// The default report folder: `reports/watch-<unix seconds>-<tune's pid>`.
pub fn default_out() -> PathBuf {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    PathBuf::from("reports").join(format!("watch-{secs}-{}", std::process::id()))
}

/// What `prepare_out` made, taken back unless the watch gets as far as a running target:
/// a command that cannot start is bad input, and bad input writes nothing.
struct OutGuard {
    /// Folders that did not exist before, the report folder first.
    made: Vec<PathBuf>,
    /// The `--tui` command log, when this run would be the one to create it.
    new_log: Option<PathBuf>,
    armed: bool,
}

impl OutGuard {
    fn keep(&mut self) {
        self.armed = false;
    }
}

impl Drop for OutGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        // Best effort, and never more than this run made: `remove_dir` leaves a folder
        // that something else has written into since.
        if let Some(log) = &self.new_log {
            let _ = std::fs::remove_file(log);
        }
        for dir in &self.made {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// Fails now, before any command runs, if the report could not be written later.
fn prepare_out(dir: &Path, log: Option<PathBuf>) -> Result<OutGuard> {
    let made = dir
        .ancestors()
        .take_while(|p| !p.as_os_str().is_empty() && !p.exists())
        .map(Path::to_path_buf)
        .collect();
    let guard = OutGuard {
        made,
        new_log: log.filter(|l| !l.exists()),
        armed: true,
    };
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let probe = dir.join(format!(".tune-watch-probe.{}", std::process::id()));
    std::fs::write(&probe, b"").map_err(|e| Error::io(dir, e))?;
    // Best effort: a leftover empty probe file is harmless.
    let _ = std::fs::remove_file(&probe);
    Ok(guard)
}

/// Prints what arrived since the last call: every sample as JSON at once, or one plain
/// line per display period.
struct Printer {
    json: bool,
    every: Duration,
    last_line: Instant,
    cursor_ms: f64,
    pending: Vec<Sample>,
    started: Instant,
}

impl Printer {
    fn pull(&mut self, timeline: &Mutex<Timeline>) {
        let new = lock(timeline).samples_since(self.cursor_ms);
        if let Some(last) = new.last() {
            self.cursor_ms = last.t_ms;
        }
        self.pending.extend(new);
    }

    fn show(&mut self, force: bool) {
        use std::io::Write;
        if self.json {
            if !self.pending.is_empty() {
                let mut out = std::io::stdout().lock();
                // A closed stdout (e.g. `| head`) must not stop the watch.
                let _ = out.write_all(live::json_lines(&self.pending).as_bytes());
                let _ = out.flush();
                self.pending.clear();
            }
            return;
        }
        if force || self.last_line.elapsed() >= self.every {
            if let Some(l) = live::line(self.started.elapsed().as_secs_f64(), &self.pending) {
                eprintln!("{l}");
            }
            self.pending.clear();
            self.last_line = Instant::now();
        }
    }
}

pub fn run(opts: &Options) -> Result<i32> {
    if opts.interval.is_zero() {
        return Err(Error::Invalid(
            "watch: --interval must be at least 1 ms".into(),
        ));
    }
    if opts.tui {
        check_tui(opts.json)?;
    }
    // Attach first: a dead pid must leave nothing behind. Then make sure the report
    // can be written before a command is started, not after it ran for hours.
    let attached = match &opts.what {
        What::Pid(p) => Some(Target::attach(*p)?),
        What::Command(_) => None,
    };
    let mut out_guard = prepare_out(&opts.out, opts.tui.then(|| log_path(opts)))?;
    catch_stop_signals()?;
    // A Python job started here reports its steps through the PyTorch hooks.
    let mut link: Option<Link> = None;
    let mut window = super::window::WatchWindow::new(opts.steps, opts.duration);
    if window.steps.is_some() && (matches!(opts.what, What::Pid(_)) || !crate::bridge::enabled()) {
        return Err(Error::Invalid(
            "watch: --steps counts the steps the PyTorch hooks report, which needs a command              tune starts with the hooks on (not --pid, not TUNE_BRIDGE=0); use --duration"
                .into(),
        ));
    }
    let hook_window = window.hook_json();
    let prep = |cmd: &mut std::process::Command| -> Result<()> {
        if crate::bridge::enabled() {
            link = Some(Link::attach(cmd, &serde_json::Map::new())?);
            if let Some(w) = &hook_window {
                cmd.env("TUNE_BRIDGE_WINDOW", w);
            }
        }
        Ok(())
    };
    let mut target = match (attached, &opts.what) {
        (Some(t), _) => t,
        (None, What::Command(c)) if opts.tui => Target::spawn_logged(c, &log_path(opts), prep)?,
        (None, What::Command(c)) => Target::spawn(c, opts.json, prep)?,
        (None, What::Pid(p)) => Target::attach(*p)?,
    };
    out_guard.keep();
    if let Some(l) = link.as_mut() {
        l.spawned();
    }
    let started = Instant::now();
    // Attached: no hooks in a process tune did not start, so sample its Python stacks.
    let stacks = match &opts.what {
        What::Pid(p) if crate::bridge::enabled() => Some(crate::bridge::StackSampler::start(
            *p,
            opts.interval.min(Duration::from_millis(10)),
        )),
        _ => None,
    };
    let host = HostSampler::new().watch(target.pid());
    let members = host.tree_members();
    let samplers: Vec<Box<dyn Sampler>> = vec![Box::new(host), Box::new(NvmlSampler::new())];
    let mut notes = Vec::new();
    if let Some(n) = nvml_notice() {
        eprintln!("note: {n}");
        notes.push(n.to_string());
    }
    let timeline = Arc::new(Mutex::new(Timeline::new(opts.interval, DEFAULT_CAPACITY)));
    let recorder = Recorder::start(samplers, Arc::clone(&timeline))?;
    let what = match target.command() {
        Some(c) => format!("`{}` (pid {})", c.join(" "), target.pid()),
        None => format!("pid {}", target.pid()),
    };
    eprintln!(
        "watch: following {what} and its children every {} ms; report in {}",
        opts.interval.as_millis(),
        opts.out.display()
    );

    let mut screen = None;
    if opts.tui {
        let log = target
            .is_child()
            .then(|| log_path(opts).display().to_string());
        if let Some(l) = &log {
            eprintln!("watch: the command's output goes to {l}");
        }
        let app = WatchApp::new(what.clone(), notes.first().cloned(), log);
        match Screen::start(app) {
            Ok(s) => screen = Some(s),
            // The command runs already: watch it without the view rather than leave it.
            Err(e) => eprintln!("watch: no full-screen view ({e}); plain lines instead"),
        }
    }
    let mut printer = Printer {
        json: opts.json,
        every: opts.interval.max(Duration::from_secs(1)),
        last_line: Instant::now(),
        cursor_ms: f64::NEG_INFINITY,
        pending: Vec::new(),
        started,
    };
    let poll = opts.interval.min(Duration::from_millis(50));
    let mut signals_seen = 0;
    let mut stops = 0;
    let ended = loop {
        if let Some(e) = target.poll()? {
            break e;
        }
        if window.check(started, link.as_ref(), &target) {
            break Ended::Interrupted;
        }
        let keys = match screen.as_mut().map(Screen::take_keys) {
            Some(Err(msg)) => {
                screen = None;
                eprintln!("watch: the full-screen view stopped ({msg}); plain lines from here");
                0
            }
            Some(Ok(k)) => k,
            None => 0,
        };
        let (n, sig) = stop_signals();
        if n > signals_seen || keys > 0 {
            let by_signal = n - signals_seen;
            signals_seen = n;
            if !target.is_child() {
                break Ended::Interrupted;
            }
            stops += by_signal + keys;
            if stops == 1 {
                // Ctrl-C reaches the whole foreground process group, the command
                // included; a SIGTERM sent to tune alone is passed on. Under --tui the
                // terminal is raw, so q and Ctrl-C make no signal: send the one Ctrl-C
                // would have sent.
                if keys == 1 {
                    target.signal(libc::SIGINT);
                } else if sig == libc::SIGTERM {
                    target.signal(libc::SIGTERM);
                }
                let msg = "waiting for the command to exit (again to kill it)";
                match screen.as_mut() {
                    Some(s) => s.app.status = Some(format!("{msg}: q")),
                    None => eprintln!("watch: {msg}: signal"),
                }
            } else {
                target.signal(libc::SIGKILL);
            }
        }
        printer.pull(&timeline);
        if let Some(s) = screen.as_mut() {
            let fresh = std::mem::take(&mut printer.pending);
            s.app.push_samples(&fresh);
            if !fresh.is_empty() {
                s.app.members = members.pids().into_iter().collect();
                s.app.refresh_procs();
            }
            s.app.elapsed_s = started.elapsed().as_secs_f64();
            if let Some(l) = &link {
                let p = l.progress();
                s.app.training = Some((p.line(hook_window.is_some()), p.shares()));
            }
            if let Err(e) = s.draw(!fresh.is_empty() || keys > 0) {
                // The command runs on: leave the view, keep watching.
                screen = None;
                eprintln!("{e}; plain lines from here");
            }
        } else {
            printer.show(false);
        }
        std::thread::sleep(poll);
    };
    let duration_s = started.elapsed().as_secs_f64();
    let had_screen = screen.is_some();
    // Back to the normal screen before anything is printed.
    drop(screen);
    recorder.stop()?;
    printer.pull(&timeline);
    if had_screen {
        printer.pending.clear();
    } else {
        printer.show(true);
    }

    let snap = lock(&timeline).snapshot();
    if snap.dropped > 0 {
        notes.push(format!(
            "the timeline held {} samples; the oldest {} were dropped, so summaries cover the later part",
            snap.capacity, snap.dropped
        ));
    }
    let series = group(&snap.samples);
    let ctx = Context {
        tree: members.pids(),
        cores: crate::engine::train::default_threads(),
    };
    let mut found = findings(&series, &ctx);
    let mut step_rows = Vec::new();
    let mut script = super::dominant::ScriptKnobs::new();
    let python = link.map(|l| {
        let ev = l.finish(Duration::from_secs(2));
        script = ev.script_knobs.clone();
        let cpu = script
            .get(super::dominant::PARAM_DEVICE)
            .is_some_and(|d| d == "cpu");
        if cpu && tune_probes::cpu::native_bf16() == Some(false) {
            script.insert(super::dominant::NO_NATIVE_BF16.into(), "true".into());
        }
        for e in &ev.errors {
            notes.push(format!("the PyTorch hooks failed and were off: {e}"));
        }
        notes.extend(ev.notices.iter().map(|n| format!("PyTorch hooks: {n}")));
        let (rows, note) = super::timeline::rows(&ev);
        step_rows = rows;
        notes.extend(note);
        ev.summary()
    });
    let stacks = stacks.map(crate::bridge::StackSampler::stop);
    if let Some(st) = &stacks {
        match &st.error {
            Some(e) if st.samples == 0 => notes.push(format!("no Python stacks: {e}")),
            Some(e) => notes.push(e.clone()),
            None => {}
        }
        found.extend(super::steps::stack_findings(st));
    }
    match &python {
        Some(Some(s)) => {
            found.extend(
                super::timeline::warmup(&step_rows, s.median_step_ms)
                    .as_ref()
                    .and_then(super::timeline::finding),
            );
            // The dominant cost first: a 7% data wait listed above an optimizer at 80%
            // of the step read as the main finding (scripts/realistic/recsys.py).
            // Evaluation outweighing the training steps themselves is named first.
            let eval = super::steps::evaluation_finding(s);
            let eval_first = s.evaluation.as_ref().is_some_and(|e| e.share >= 0.5);
            found.extend(eval.clone().filter(|_| eval_first));
            found.extend(super::dominant::findings(s, &script));
            found.extend(super::steps::findings(s, &script, ctx.cores));
            found.extend(eval.filter(|_| !eval_first));
        }
        // Only where a Python job was expected: for `sleep 5` the note is noise.
        Some(None) if looks_like_python(target.command()) => notes.push(
            "no training steps from the PyTorch hooks (not a Python job that imports torch \
             and calls Optimizer.step, or TUNE_BRIDGE=0): step phases are unknown"
                .into(),
        ),
        _ => {}
    }
    // A fault in the script comes before any cost: its samples are trained on N times.
    found.sort_by_key(|f| f.kind != FindingKind::ReplayedStream);
    notes.extend(window.note());
    let mut report = WatchReport {
        schema_version: SCHEMA_VERSION.into(),
        kind: KIND.into(),
        environment: crate::results::build::environment("command".into()),
        gpus: gpu_inventory().unwrap_or_default(),
        target: TargetReport {
            command: target.command().map(<[String]>::to_vec),
            pid: target.pid(),
            exit_code: target.is_child().then(|| ended.exit_code()),
            ended: ended.describe(),
        },
        duration_s,
        sampling: Sampling::of(&snap),
        devices: summarize(&series),
        findings: found,
        notes,
        python: python.flatten(),
        steps: step_rows,
        stacks,
        timeline: timeline_rows(&snap.samples, MAX_POINTS_PER_SERIES),
    };
    // Each training process (DDP's ranks, Hogwild!'s trainers) runs the script's threads.
    let procs = report
        .python
        .as_ref()
        .map_or(1, |p| p.processes.unwrap_or(p.ranks.len()).max(1));
    let threads = super::dominant::script_count(&script, "num_threads")
        .zip(super::html::cpu_load(&report))
        .map(|(n, load)| super::dominant::Threads::of(n, procs, report.environment.cores, load.2));
    // Contention first: it slows every phase the other findings measure (8 threads on 2
    // cores made a U-Net's step 3.3x longer, scripts/realistic/oversub.py).
    if let Some(f) = super::dominant::contention(super::html::foreign_load(&report), threads) {
        report.findings.insert(0, f);
    }
    let compute = report
        .findings
        .iter()
        .any(|f| f.kind == FindingKind::Compute);
    let idle = super::dominant::idle_cores(threads, compute).map(|(f, line)| {
        report.findings.push(f);
        line
    });
    let spec = report
        .python
        .as_ref()
        .and(report.target.command.as_deref())
        .and_then(|c| {
            let wait = report
                .python
                .as_ref()
                .and_then(|p| p.phase_share.get("data_wait").copied());
            let mut knobs =
                super::dominant::sweep_knobs(&report.findings, ctx.cores, &script, wait);
            let over = threads.and_then(|t| t.sweep_line()).or(idle);
            let loader = super::dominant::loader_threads_line(&script, ctx.cores, wait)
                .filter(|_| over.is_none() && knobs.iter().any(|k| k.starts_with("num_workers")));
            let grid = loader.is_some();
            knobs.extend(over.or(loader));
            // The command ran where tune watch was started (a `--pid` job writes no spec).
            let cwd = std::env::current_dir().ok();
            super::dominant::sweep_spec(c, &knobs, cwd.as_deref(), grid)
        });
    let paths = report.write(&opts.out)?;
    let spec_path = match spec {
        Some(text) => {
            let path = opts.out.join(super::dominant::SWEEP_TOML);
            crate::fsio::atomic_write(&path, text.as_bytes())?;
            Some(path)
        }
        None => None,
    };
    print_outcome(&report, &paths);
    if let Some(p) = spec_path {
        eprintln!("sweep to test the findings: tune sweep {}", p.display());
    }
    // A command tune itself stopped at the end of its window did what was asked.
    Ok(if window.stopped_it() {
        0
    } else {
        ended.exit_code()
    })
}

fn looks_like_python(command: Option<&[String]>) -> bool {
    command.is_some_and(|c| {
        c.iter().any(|a| {
            let name = a.rsplit('/').next().unwrap_or(a);
            name.starts_with("python") || name.ends_with(".py") || name == "torchrun"
        })
    })
}

fn log_path(opts: &Options) -> PathBuf {
    opts.out.join("command.log")
}

/// Refuses `--tui` where it cannot work, before anything is started or written.
fn check_tui(json: bool) -> Result<()> {
    use std::io::IsTerminal;
    if json {
        return Err(Error::Invalid(
            "watch: --tui and --json do not go together (--json streams samples on \
             stdout, --tui draws there); drop one of them"
                .into(),
        ));
    }
    if !std::io::stdout().is_terminal() || !std::io::stdin().is_terminal() {
        return Err(Error::Invalid(
            "watch --tui needs an interactive terminal on stdin and stdout; without one, \
             drop --tui for plain progress lines"
                .into(),
        ));
    }
    Ok(())
}

fn print_outcome(r: &WatchReport, paths: &[PathBuf]) {
    eprintln!(
        "watch: the process {} after {:.1} s ({} samples over {} ticks)",
        r.target.ended, r.duration_s, r.sampling.samples, r.sampling.ticks
    );
    if let Some(p) = &r.python {
        let shares: Vec<String> = p
            .phase_share
            .iter()
            .filter(|(_, v)| **v >= 0.005)
            .map(|(k, v)| format!("{k} {:.1}%", v * 100.0))
            .collect();
        let mut rate = match (p.samples_per_s, p.steps_per_s) {
            (Some(x), _) => format!(", {x:.1} samples/s"),
            (None, Some(x)) => format!(", {x:.2} steps/s (batch size unknown)"),
            _ => String::new(),
        };
        if let Some(t) = p.tokens_per_s {
            rate.push_str(&format!(", {t:.0} tokens/s"));
        }
        if let Some(f) = p.first_step_ms {
            rate.push_str(&format!("; first step {f:.1} ms (start-up, compilation)"));
        }
        let accum = passes_per_step(p);
        eprintln!(
            "steps: {} (median {:.1} ms{rate}{accum}): {}",
            p.steps,
            p.median_step_ms,
            shares.join(", ")
        );
        if let Some(n) = p.processes {
            eprintln!(
                "  {n} training processes that Python's multiprocessing started, with no \
                 torch.distributed rank (Hogwild!'s trainers sharing one model): the figures \
                 above are the first's, each one's below; the job trains their sum"
            );
        }
        let who = if p.processes.is_some() {
            "process"
        } else {
            "rank"
        };
        for k in &p.ranks {
            let shares: Vec<String> = k
                .phase_share
                .iter()
                .filter(|(_, v)| **v >= 0.005)
                .map(|(k, v)| format!("{k} {:.1}%", v * 100.0))
                .collect();
            eprintln!(
                "  {who} {}: {} steps (median {:.1} ms, {:.1} ms outside backward): {}",
                k.rank,
                k.steps,
                k.median_step_ms,
                k.outside_backward_ms,
                shares.join(", ")
            );
        }
    }
    if let Some(st) = r.stacks.as_ref().filter(|s| s.samples > 0) {
        let shares: Vec<String> = st
            .phase_share
            .iter()
            .map(|(k, v)| format!("{k} {:.1}%", v * 100.0))
            .collect();
        eprintln!("stack samples: {}: {}", st.samples, shares.join(", "));
    }
    if r.findings.is_empty() {
        eprintln!(
            "findings: none (no imbalance, starvation, throttling, GPU sharing, contention or \
             dominant step cost seen)"
        );
    }
    for WatchFinding {
        finding: Finding { title, evidence },
        hint,
        ..
    } in &r.findings
    {
        eprintln!("finding: {title}: {evidence}");
        eprintln!("  try: {hint}");
    }
    let shown: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    eprintln!("report: {}", shown.join(", "));
}

/// What one step holds beyond one forward and backward, for the steps line. A closure
/// that ran once is no news: PyTorch Lightning hands every optimizer step its training
/// step as a closure, and its jobs read "1 forward and backward passes per step (the
/// optimizer's closure, as L-BFGS runs it)", which hid Lightning's own gradient
/// accumulation (`accumulate_grad_batches=4`: three backward calls before the step, one
/// inside its closure).
fn passes_per_step(p: &crate::bridge::StepSummary) -> String {
    match (
        p.closure_calls_per_step.filter(|c| *c > 1.0),
        p.optimizer_steps_per_step,
        p.backwards_per_step,
    ) {
        (Some(c), _, _) => format!(
            ", {c:.0} forward and backward passes per step (the optimizer's closure, as \
             L-BFGS runs it; samples counted once)"
        ),
        (None, Some(o), b) => format!(
            ", {o:.0} optimizer steps per step (several optimizers in turn: one step \
             is one round of them{})",
            b.map_or(String::new(), |b| format!(", {b:.0} backward calls"))
        ),
        (None, None, Some(b)) if b > 1.0 => {
            format!(", {b:.0} backward calls per step (gradient accumulation)")
        }
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::passes_per_step;

    fn steps(extra: serde_json::Value) -> crate::bridge::StepSummary {
        let mut v = serde_json::json!({
            "torch": "2.x", "steps": 40, "steady_steps": 36, "median_step_ms": 441.0,
            "samples_per_s": 580.5, "phase_share": {"forward": 0.45, "backward": 0.5},
        });
        if let (Some(o), Some(e)) = (v.as_object_mut(), extra.as_object()) {
            o.extend(e.clone());
        }
        serde_json::from_value(v).unwrap()
    }

    /// Lightning's `accumulate_grad_batches=4`: one closure call a step, four backward
    /// calls. The line said "1 forward and backward passes per step (the optimizer's
    /// closure, as L-BFGS runs it)".
    #[test]
    fn a_closure_run_once_is_not_named_and_accumulation_behind_it_is() {
        let lightning = steps(serde_json::json!({
            "closure_calls_per_step": 1.0, "backwards_per_step": 4.0,
        }));
        assert_eq!(
            passes_per_step(&lightning),
            ", 4 backward calls per step (gradient accumulation)"
        );
        let plain = steps(serde_json::json!({
            "closure_calls_per_step": 1.0, "backwards_per_step": 1.0,
        }));
        assert_eq!(passes_per_step(&plain), "");
        let lbfgs = steps(serde_json::json!({
            "closure_calls_per_step": 20.0, "backwards_per_step": 1.0,
        }));
        assert!(passes_per_step(&lbfgs).contains("20 forward and backward passes"));
    }
}
