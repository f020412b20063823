//! Trials on a Slurm cluster (`[search] executor = "slurm"`, docs/cluster.md): every run
//! of a round is a batch job (`script`), up to `[slurm] max_parallel` queued or running at
//! once; jobs are followed with `squeue` (`sacct` once slurmctld forgets them), and each
//! run's record is the `tune trial` result line its job wrote to the shared folder.
//!
//! The runner journals every job id as it is submitted, so a killed sweep resumed with
//! `--resume` follows its jobs by id instead of submitting them again. SIGINT or SIGTERM
//! cancels (`scancel`) the jobs this sweep is following and says so.

mod query;
mod script;

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use self::query::{
    ended_without_result, live_job_named, sacct, sbatch, scancel, slurm_cmd, squeue, JobState,
};
use self::script::{batch_script, sbatch_args, RunFiles, TIMEOUT_KIND};
use super::trial::{child_line, line_outcome, ChildLine};
use crate::error::{Error, Result};
use crate::knobs::Knobs;
use crate::results::record::{NodeFingerprint, NodeRun, Status};
use crate::runner::{Executor, Outcome, Run, RunEvent};
use crate::spec::{Spec, Workload};

/// Bytes of a job's output read back: the result line of a long run with every step's
/// time is a few MB at most.
const MAX_OUTPUT_BYTES: u64 = 64 << 20;
/// Lines of a job's stderr quoted in a failure.
const STDERR_LINES: usize = 8;

/// What every run of a Slurm sweep shares.
pub struct SlurmEnv {
    /// The `tune` executable the nodes run (on the shared file system).
    pub exe: PathBuf,
    /// The folder for scripts and outputs, seen by every node.
    pub dir: PathBuf,
    pub mem_cap_bytes: Option<u64>,
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_interrupt(_sig: libc::c_int) {
    // Only an atomic store: the async-signal-safe subset.
    INTERRUPTED.store(true, Ordering::SeqCst);
}

impl SlurmEnv {
    /// Checks that Slurm answers and the shared folder exists, and catches SIGINT and
    /// SIGTERM so an interrupted sweep cancels its jobs instead of leaving them queued.
    pub fn start(&self) -> Result<()> {
        slurm_cmd("squeue", &["--noheader".into(), "--jobs=0".into()])
            .or_else(|e| if e.contains("Invalid job id") { Ok(String::new()) } else { Err(e) })
            .map_err(|e| {
                Error::Invalid(format!(
                    "executor slurm: Slurm does not answer here ({e}); run the sweep where sbatch and squeue work, or with --executor local"
                ))
            })?;
        std::fs::create_dir_all(&self.dir).map_err(|e| {
            Error::Runtime(format!(
                "executor slurm: cannot create the shared folder {}: {e}",
                self.dir.display()
            ))
        })?;
        for sig in [libc::SIGINT, libc::SIGTERM] {
            let handler = on_interrupt as extern "C" fn(libc::c_int) as libc::sighandler_t;
            // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
            let old = unsafe { libc::signal(sig, handler) };
            if old == libc::SIG_ERR {
                return Err(Error::Runtime(format!(
                    "executor slurm: cannot install a handler for signal {sig}"
                )));
            }
        }
        Ok(())
    }

    fn submit(&self, spec: &Spec, run: &Run) -> std::result::Result<String, String> {
        let Workload::Engine(w) = &spec.workload else {
            return Err("executor slurm runs built-in engine workloads only".into());
        };
        let files = RunFiles::new(&self.dir, &spec.name, run);
        // A job of this run is queued or running already: submitted by a sweep killed
        // before it journaled the id (seen in tests/slurm_cluster.rs's resume test).
        // Following it keeps every run submitted once.
        if let Some(job) = live_job_named(&files.name) {
            return Ok(job);
        }
        // A previous job's output under the same name must not be read as this one's.
        for f in [&files.stdout, &files.stderr, &files.rank0] {
            let _ = std::fs::remove_file(f);
        }
        let text = batch_script(
            &self.exe,
            w,
            run,
            &spec.slurm,
            spec.search.timeout_s,
            self.mem_cap_bytes,
            &files,
        );
        std::fs::write(&files.script, text)
            .map_err(|e| format!("cannot write {}: {e}", files.script.display()))?;
        sbatch(&sbatch_args(&run.knobs, &spec.slurm, &files))
            .map_err(|e| format!("Slurm refused the job ({e})"))
    }

    /// The outcome of a job that has ended in `st`: its result line when it wrote one,
    /// else what the state says.
    fn collect(&self, spec: &Spec, run: &Run, job: &str, st: &JobState) -> Outcome {
        let files = RunFiles::new(&self.dir, &spec.name, run);
        let text = read_output(&files.rank0).or_else(|| read_output(&files.stdout));
        let fingerprint = text.as_deref().and_then(node_line);
        let node = NodeRun {
            repeat: run.repeat,
            job_id: job.to_string(),
            node: fingerprint
                .as_ref()
                .map(|f| f.hostname.clone())
                .filter(|_| st.nodes.is_empty())
                .unwrap_or_else(|| st.nodes.clone()),
            fingerprint,
        };
        let mut outcome = match text.as_deref().and_then(child_line) {
            // The script's own limit (search.timeout_s) came first.
            Some(ChildLine::Error { kind, message }) if kind == TIMEOUT_KIND => {
                Outcome::fail(Status::Timeout, format!("{message}; Slurm job {job}"))
            }
            // Slurm's limit ends the job however far the trial got.
            _ if st.state == "TIMEOUT" => {
                let (s, why) = ended_without_result(job, st, spec.slurm.time_limit_min);
                Outcome::fail(s, why)
            }
            Some(line) => line_outcome(line),
            None => {
                let (s, why) = ended_without_result(job, st, spec.slurm.time_limit_min);
                Outcome::fail(s, with_stderr(why, &files.stderr))
            }
        };
        let reached =
            outcome.repeat.is_some() || node.fingerprint.is_some() || !node.node.is_empty();
        outcome.node = reached.then_some(node);
        outcome
    }
}

fn read_output(path: &std::path::Path) -> Option<String> {
    crate::fsio::read_text_limited(path, MAX_OUTPUT_BYTES).ok()
}

/// The node fingerprint line the trial printed (`child::NODE_ENV`).
fn node_line(text: &str) -> Option<NodeFingerprint> {
    #[derive(serde::Deserialize)]
    struct Line {
        node: NodeFingerprint,
    }
    text.lines()
        .filter(|l| l.trim_start().starts_with("{\"node\""))
        .find_map(|l| serde_json::from_str::<Line>(l.trim()).ok())
        .map(|l| l.node)
}

fn with_stderr(why: String, path: &std::path::Path) -> String {
    let Some(text) = read_output(path) else {
        return why;
    };
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    if lines.is_empty() {
        return why;
    }
    let tail = &lines[lines.len().saturating_sub(STDERR_LINES)..];
    format!("{why}; stderr: {}", tail.join(" | "))
}

/// A job being followed.
struct Active {
    run: usize,
    /// When it was first seen stuck (pending on a drained node, a down partition, ...).
    stuck_since: Option<Instant>,
    /// When squeue and sacct were first found not to know it.
    unknown_since: Option<Instant>,
    /// Submitted by an earlier, interrupted `tune sweep` (from the journal).
    attached: bool,
}

impl Active {
    fn new(run: usize, attached: bool) -> Active {
        Active {
            run,
            stuck_since: None,
            unknown_since: None,
            attached,
        }
    }
}

impl Executor for SlurmEnv {
    fn run(&self, spec: &Spec, knobs: &Knobs, steps: usize) -> Outcome {
        // One run on its own (the confirmation): not journaled, so not re-attachable.
        let run = Run {
            id: format!(
                "single-{}",
                crate::spec::plan::trial_id(knobs, &spec.search.baseline)
            ),
            label: String::new(),
            round: 0,
            repeat: 0,
            knobs: knobs.clone(),
            steps,
            attach: None,
        };
        let mut out = None;
        let r = self.run_many(
            spec,
            std::slice::from_ref(&run),
            &mut |ev| {
                if let RunEvent::Finished { outcome, .. } = ev {
                    out = Some(outcome);
                }
                Ok(())
            },
            &|| true,
        );
        match (out, r) {
            (Some(o), _) => o,
            (None, Err(e)) => Outcome::fail(Status::Failed, e.to_string()),
            (None, Ok(())) => Outcome::fail(Status::Failed, "the Slurm job gave no outcome"),
        }
    }

    fn batches(&self) -> bool {
        true
    }

    fn run_many(
        &self,
        spec: &Spec,
        runs: &[Run],
        events: &mut dyn FnMut(RunEvent) -> Result<()>,
        may_start: &dyn Fn() -> bool,
    ) -> Result<()> {
        let slurm = &spec.slurm;
        let poll = Duration::from_secs_f64(slurm.poll_s);
        let mut queue: VecDeque<usize> = VecDeque::new();
        let mut active: HashMap<String, Active> = HashMap::new();
        for (i, r) in runs.iter().enumerate() {
            match &r.attach {
                Some(job) => {
                    active.insert(job.clone(), Active::new(i, true));
                }
                None => queue.push_back(i),
            }
        }
        if !active.is_empty() {
            eprintln!(
                "resuming: following {} Slurm job(s) submitted before the interruption: {}",
                active.len(),
                sorted(active.keys())
            );
        }
        loop {
            if INTERRUPTED.load(Ordering::SeqCst) {
                return Err(self.interrupted(&active));
            }
            if !may_start() {
                // The time budget is spent: what is queued here never reaches Slurm.
                queue.clear();
            }
            if spec.search.cut_at.is_some_and(|c| Instant::now() >= c) {
                // The budget has ended: what is queued or running is cancelled.
                return self.cut(spec, runs, &active, events);
            }
            while active.len() < slurm.max_parallel {
                let Some(i) = queue.pop_front() else { break };
                match self.submit(spec, &runs[i]) {
                    Ok(job) => {
                        events(RunEvent::Submitted {
                            run: i,
                            job_id: job.clone(),
                        })?;
                        active.insert(job, Active::new(i, false));
                    }
                    Err(why) => events(RunEvent::Finished {
                        run: i,
                        outcome: Outcome::fail(Status::Failed, why),
                    })?,
                }
            }
            if active.is_empty() && queue.is_empty() {
                return Ok(());
            }
            // Awake when the budget ends, not up to a poll later.
            let to_cut = spec
                .search
                .cut_at
                .map_or(poll, |c| c.saturating_duration_since(Instant::now()));
            std::thread::sleep(poll.min(to_cut));
            let ids: Vec<String> = active.keys().cloned().collect();
            let states = match squeue(&ids) {
                Ok(s) => s,
                Err(e) => {
                    // slurmctld restarting or busy: the jobs go on; ask again.
                    eprintln!("note: squeue did not answer ({e}); asking again");
                    continue;
                }
            };
            for id in ids {
                let Some(a) = active.get_mut(&id) else {
                    continue;
                };
                let run = &runs[a.run];
                let st = match states.get(&id).cloned().or_else(|| sacct(&id)) {
                    Some(st) => st,
                    None => {
                        // Aged out of slurmctld and no accounting: the output decides,
                        // once it has had time to reach the shared folder.
                        let since = *a.unknown_since.get_or_insert_with(Instant::now);
                        if since.elapsed() < Duration::from_secs(10) {
                            continue;
                        }
                        JobState {
                            state: "UNKNOWN".into(),
                            nodes: String::new(),
                            reason: String::new(),
                        }
                    }
                };
                if st.is_live() {
                    a.unknown_since = None;
                    if !st.is_stuck() {
                        a.stuck_since = None;
                        continue;
                    }
                    let since = *a.stuck_since.get_or_insert_with(Instant::now);
                    if since.elapsed() < Duration::from_secs(slurm.pending_timeout_s) {
                        continue;
                    }
                    let cancelled = scancel(std::slice::from_ref(&id));
                    let why = format!(
                        "Slurm job {id} never started: pending for {} s because {} (slurm.pending_timeout_s); {}",
                        slurm.pending_timeout_s,
                        st.reason,
                        match cancelled {
                            Ok(()) => "it was cancelled".to_string(),
                            Err(e) => format!("cancelling it failed: {e}"),
                        }
                    );
                    let i = a.run;
                    active.remove(&id);
                    events(RunEvent::Finished {
                        run: i,
                        outcome: Outcome::fail(Status::Failed, why),
                    })?;
                    continue;
                }
                let outcome = self.collect(spec, run, &id, &st);
                let i = a.run;
                if a.attached && st.state == "CANCELLED" && outcome.repeat.is_none() {
                    // Cancelled while no sweep followed it (the interrupted sweep's own
                    // scancel, most likely): the run never finished, so it runs again.
                    eprintln!("note: Slurm job {id} of '{}' was cancelled before it finished; submitting it again", run.label);
                    active.remove(&id);
                    queue.push_back(i);
                    continue;
                }
                active.remove(&id);
                events(RunEvent::Finished { run: i, outcome })?;
            }
        }
    }
}

impl SlurmEnv {
    /// The budget ended with `active` jobs queued or running: the ones that finished since
    /// the last poll are collected as usual; the rest are cancelled (`scancel`) and end
    /// as cut, so the runner counts them as not run.
    fn cut(
        &self,
        spec: &Spec,
        runs: &[Run],
        active: &HashMap<String, Active>,
        events: &mut dyn FnMut(RunEvent) -> Result<()>,
    ) -> Result<()> {
        let ids: Vec<String> = active.keys().cloned().collect();
        let states = squeue(&ids).unwrap_or_default();
        let state = |id: &String| states.get(id).cloned().or_else(|| sacct(id));
        let live: Vec<String> = ids
            .iter()
            .filter(|id| state(id).is_none_or(|st| st.is_live()))
            .cloned()
            .collect();
        if !live.is_empty() {
            let how = match scancel(&live) {
                Ok(()) => "cancelled".to_string(),
                Err(e) => format!("cancelling them failed ({e}); cancel them with scancel"),
            };
            eprintln!(
                "the time budget ended: {} Slurm job(s) of this sweep {how} ({})",
                live.len(),
                sorted(live.iter())
            );
        }
        for id in &ids {
            let Some(a) = active.get(id) else { continue };
            let outcome = match state(id) {
                Some(st) if !live.contains(id) => self.collect(spec, &runs[a.run], id, &st),
                _ => Outcome::cut(format!(
                    "Slurm job {id} was cancelled when the sweep's time budget (budget_s) ended"
                )),
            };
            events(RunEvent::Finished {
                run: a.run,
                outcome,
            })?;
        }
        Ok(())
    }

    /// Cancels what this sweep follows, says so, and returns the error that stops it.
    fn interrupted(&self, active: &HashMap<String, Active>) -> Error {
        let ids: Vec<String> = active.keys().cloned().collect();
        if ids.is_empty() {
            return Error::Runtime("interrupted: no Slurm job of this sweep was queued or running; continue with --resume".into());
        }
        match scancel(&ids) {
            Ok(()) => {
                eprintln!(
                    "interrupted: cancelled {} Slurm job(s) of this sweep (scancel {})",
                    ids.len(),
                    sorted(active.keys())
                );
                Error::Runtime(format!(
                    "interrupted: {} Slurm job(s) cancelled; finished trials are in the journal: continue with --resume",
                    ids.len()
                ))
            }
            Err(e) => Error::Runtime(format!(
                "interrupted: cancelling Slurm job(s) {} failed ({e}); cancel them with scancel",
                sorted(active.keys())
            )),
        }
    }
}

fn sorted<'a>(ids: impl Iterator<Item = &'a String>) -> String {
    let mut v: Vec<&String> = ids.collect();
    v.sort_by_key(|s| (s.len(), s.to_string()));
    v.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(" ")
}
