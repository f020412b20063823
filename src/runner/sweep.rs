//! `tune sweep`: runs a spec's plan trial by trial in child processes, journals each
//! finished trial, then writes report.json, report.html and summary.md.
//!
//! A failing trial is a result, not an error: the sweep goes on and the report says
//! what failed and why. Exit code 1 only when no trial succeeded.

use std::collections::HashSet;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::json;

use super::journal::Journal;
use super::live::{self, LiveTrial, LIVE_JSON};
use super::plan::{self, halving_rounds, select_top, Trial};
use super::record::{Record, Status, TrialRecord};
use super::resume::{existing_records, stamped};
use super::sampling::SweepSampler;
use super::spec::{Spec, Strategy, Workload};
use super::stats;
use super::trial::{run_trial, TrialEnv};
use crate::advisor::confirm;
use crate::cli::SweepArgs;
use crate::error::{Error, Result};
use crate::report::{self, build, markdown, JOURNAL};
use crate::tui;

/// Where progress goes: a bar on a terminal, plain lines otherwise, JSON with `--json`,
/// nowhere with `--tui` (the dashboard owns the terminal and reads the journal).
struct Progress {
    bar: ProgressBar,
    json: bool,
    plain: bool,
    tui: bool,
}

impl Progress {
    fn new(total: usize, json: bool, tui: bool) -> Progress {
        let interactive = !json && !tui && std::io::stderr().is_terminal();
        let bar = ProgressBar::with_draw_target(
            Some(total as u64),
            if interactive {
                ProgressDrawTarget::stderr()
            } else {
                ProgressDrawTarget::hidden()
            },
        );
        bar.set_style(
            ProgressStyle::with_template("{pos}/{len} [{bar:25}] {elapsed} (eta {eta}) {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        if interactive {
            // Trials take seconds to minutes; keep the elapsed time moving meanwhile.
            bar.enable_steady_tick(Duration::from_millis(250));
        }
        Progress {
            bar,
            json,
            plain: !json && !interactive && !tui,
            tui,
        }
    }

    fn start(&self, label: &str) {
        self.bar.set_message(label.to_string());
    }

    fn finished(&self, rec: &TrialRecord) {
        self.bar.inc(1);
        if self.tui {
            return;
        }
        let sps = median_sps(rec);
        if self.json {
            let line = json!({
                "id": rec.id,
                "label": rec.label,
                "round": rec.round,
                "status": rec.status,
                "error": rec.error,
                "samples_per_s": sps,
                "repeats": rec.repeats.len(),
            });
            println!("{line}");
            return;
        }
        let text = match (rec.status, sps) {
            (Status::Ok, Some(v)) => format!("{}: {v:.1} samples/s", rec.label),
            (s, _) => format!(
                "{}: {} ({})",
                rec.label,
                s.as_str(),
                rec.error.as_deref().unwrap_or("no error text")
            ),
        };
        let text = format!(
            "[{}/{}] {text}",
            self.bar.position(),
            self.bar.length().unwrap_or(0)
        );
        if self.plain {
            eprintln!("{text}");
        } else {
            self.bar.println(text);
        }
    }
}

/// Median of the repeats' own throughput figures: the halving score and the progress line.
fn median_sps(rec: &TrialRecord) -> Option<f64> {
    let v: Vec<f64> = rec
        .repeats
        .iter()
        .map(|r| r.samples_per_s)
        .filter(|x| *x > 0.0)
        .collect();
    (rec.status == Status::Ok && !v.is_empty()).then(|| stats::median(&v))
}

/// The per-trial memory cap: `TUNE_TRIAL_MEM_CAP_BYTES` if set, else the spec's.
fn mem_cap(spec: &Spec) -> Option<u64> {
    std::env::var("TUNE_TRIAL_MEM_CAP_BYTES")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .or(spec.search.mem_cap_mib.map(|m| m << 20))
}

struct Sweep<'a> {
    spec: &'a Spec,
    env: TrialEnv,
    journal: Journal,
    /// Finished (id, round) pairs, from the journal and this run.
    done: HashSet<(String, usize)>,
    records: Vec<TrialRecord>,
    progress: Progress,
    sampler: SweepSampler,
}

impl Sweep<'_> {
    /// Runs `trial` unless the journal already has it; either way returns its record.
    fn run(
        &mut self,
        trial: &Trial,
        round: usize,
        steps: usize,
        repeats: usize,
    ) -> Result<TrialRecord> {
        let key = (trial.id.clone(), round);
        if self.done.contains(&key) {
            if let Some(r) = self
                .records
                .iter()
                .find(|r| r.id == trial.id && r.round == round)
            {
                self.progress.bar.inc(1);
                return Ok(r.clone());
            }
        }
        self.check_cancel(&trial.label)?;
        self.progress.start(&trial.label);
        let mut rec = TrialRecord {
            id: trial.id.clone(),
            label: trial.label.clone(),
            knobs: trial.knobs.clone(),
            round,
            steps,
            status: Status::Ok,
            error: None,
            repeats: Vec::new(),
            timeline: Vec::new(),
        };
        let started_ms = self.sampler.now_ms();
        for r in 0..repeats.max(1) {
            self.show_live(trial, round, r + 1, repeats.max(1));
            let o = run_trial(&self.env, self.spec, &trial.knobs, steps);
            self.check_cancel(&trial.label)?;
            rec.repeats.extend(o.repeat);
            if o.status != Status::Ok {
                // Failures here are deterministic far more often than not (an unsupported
                // knob, a crash): repeating them only costs time.
                rec.status = o.status;
                rec.error = o.error;
                break;
            }
        }
        rec.timeline = self.sampler.since(started_ms);
        self.journal
            .append(&stamped(&Record::Trial(rec.clone()), self.spec)?)?;
        if let Some(p) = &self.env.live_file {
            live::clear(p);
        }
        self.done.insert(key);
        self.records.push(rec.clone());
        self.progress.finished(&rec);
        Ok(rec)
    }
}

impl Sweep<'_> {
    /// Tells a dashboard which trial starts now; its child fills in the steps.
    fn show_live(&self, trial: &Trial, round: usize, repeat: usize, repeats: usize) {
        let Some(path) = &self.env.live_file else {
            return;
        };
        let now = live::unix_ms();
        let state = LiveTrial {
            id: trial.id.clone(),
            label: trial.label.clone(),
            knobs: trial.knobs.clone(),
            round,
            repeat,
            repeats,
            index: self.progress.bar.position() as usize + 1,
            total: self.progress.bar.length().unwrap_or(0) as usize,
            started_unix_ms: now,
            updated_unix_ms: now,
            pid: std::process::id(),
            ..LiveTrial::default()
        };
        // A dashboard that cannot see the trial start is no reason to stop the sweep.
        let _ = state.store(path);
    }

    /// Stops between (or right after killing) trials when the dashboard asked to quit;
    /// the trial that was cut short is not journaled, so `--resume` reruns it.
    fn check_cancel(&self, label: &str) -> Result<()> {
        let stop = self
            .env
            .cancel
            .as_ref()
            .is_some_and(|c| c.load(Ordering::Relaxed));
        if !stop {
            return Ok(());
        }
        if let Some(p) = &self.env.live_file {
            live::clear(p);
        }
        Err(Error::Runtime(format!(
            "sweep stopped from the dashboard before '{label}' finished; {} finished trial(s) are in {}: continue with --resume",
            self.done.len(),
            self.journal.path().display()
        )))
    }

    /// The confirmation: the recommended combination and a fresh run of the baseline,
    /// alternating repeat by repeat so both see the same machine state.
    fn confirm(
        &mut self,
        combo: &Trial,
        rerun: &Trial,
        steps: usize,
        repeats: usize,
    ) -> Result<()> {
        if self.done.contains(&(combo.id.clone(), 0)) {
            self.progress.bar.inc(2);
            return Ok(());
        }
        let fresh = |t: &Trial| TrialRecord {
            id: t.id.clone(),
            label: t.label.clone(),
            knobs: t.knobs.clone(),
            round: 0,
            steps,
            status: Status::Ok,
            error: None,
            repeats: Vec::new(),
            // Alternating runs share one stretch of time; the timeline shows the plan's
            // trials only.
            timeline: Vec::new(),
        };
        let mut recs = [fresh(rerun), fresh(combo)];
        self.progress.start(&combo.label);
        for _ in 0..repeats.max(1) {
            for rec in recs.iter_mut().filter(|r| r.status == Status::Ok) {
                let o = run_trial(&self.env, self.spec, &rec.knobs, steps);
                rec.repeats.extend(o.repeat);
                if o.status != Status::Ok {
                    rec.status = o.status;
                    rec.error = o.error;
                }
            }
        }
        for rec in recs {
            self.journal
                .append(&stamped(&Record::Trial(rec.clone()), self.spec)?)?;
            self.done.insert((rec.id.clone(), rec.round));
            self.progress.finished(&rec);
            self.records.push(rec);
        }
        Ok(())
    }
}

fn measured_steps(spec: &Spec) -> usize {
    match &spec.workload {
        Workload::Engine(w) => w.steps,
        // A command decides its own length.
        Workload::Command(_) => 0,
    }
}

pub fn main(args: &SweepArgs) -> Result<i32> {
    let spec = Spec::load(&args.spec)?;
    if args.tui {
        tui::dash::check_terminal("tune sweep --tui", args.json)?;
    }
    let plan = plan::plan(&spec);
    if plan.trials.is_empty() {
        return Err(Error::Invalid(format!(
            "{}: no runnable configuration (every combination was skipped)",
            args.spec.display()
        )));
    }
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("reports").join(&spec.name));
    let journal_path = out.join(JOURNAL);
    let (previous, has_header) = existing_records(&journal_path, &spec, args.resume)?;
    let exe = std::env::current_exe()
        .map_err(|e| Error::Runtime(format!("cannot find the tune executable: {e}")))?;
    let mut journal = Journal::open(&journal_path)?;
    if !has_header {
        journal.append(&Record::Header {
            tune_version: env!("CARGO_PKG_VERSION").into(),
            spec: spec.clone(),
        })?;
    }
    let steps = measured_steps(&spec);
    let n = plan.trials.len();
    let rounds = match spec.search.strategy {
        Strategy::Halving => halving_rounds(n, spec.search.eta),
        _ => vec![(n, 1)],
    };
    let total: usize = rounds.iter().map(|(k, _)| k).sum();
    let mut sweep = Sweep {
        spec: &spec,
        env: TrialEnv {
            exe,
            timeout: Duration::from_secs(spec.search.timeout_s),
            mem_cap_bytes: mem_cap(&spec),
            live_file: Some(out.join(LIVE_JSON)),
            cancel: None,
        },
        journal,
        done: previous.iter().map(|r| (r.id.clone(), r.round)).collect(),
        records: previous,
        progress: Progress::new(total, args.json, args.tui),
        sampler: SweepSampler::start(),
    };
    let skipped = sweep.done.len();
    if skipped > 0 && !args.json && !args.tui {
        eprintln!("resuming: {skipped} finished trial(s) in the journal are not rerun");
    }
    let (report, paths) = if args.tui {
        let link = tui::dash::SweepLink::default();
        sweep.env.cancel = Some(link.cancel.clone());
        std::thread::scope(|s| {
            let worker = s.spawn(|| {
                let _ended = link.on_end();
                let r = execute(&mut sweep, &spec, &plan.trials, &rounds, steps, &out);
                link.end(match &r {
                    Ok((report, _)) => format!(
                        "sweep finished: {} trial(s), reports written",
                        report.trials.len()
                    ),
                    Err(e) => format!("sweep stopped: {e}"),
                });
                r
            });
            let _stop = link.stop_on_unwind();
            let shown = tui::dash::run_attached(&out, &link);
            // Whatever ended the dashboard, the sweep must not outlive this function.
            if shown.is_err() {
                link.cancel.store(true, Ordering::Relaxed);
            }
            let swept = worker
                .join()
                .map_err(|_| Error::Runtime("the sweep thread panicked".into()))?;
            shown?;
            swept
        })?
    } else {
        execute(&mut sweep, &spec, &plan.trials, &rounds, steps, &out)?
    };
    let ok = report
        .trials
        .iter()
        .filter(|t| t.status == Status::Ok)
        .count();
    if args.json {
        println!(
            "{}",
            json!({"report": paths[0], "html": paths[1], "summary": paths[2], "ok": ok, "trials": report.trials.len()})
        );
    } else {
        print_table(&report);
        for p in &paths {
            println!("{}", p.display());
        }
    }
    Ok(if ok == 0 { 1 } else { 0 })
}

/// Runs the rounds of the plan, then writes the reports.
fn execute(
    sweep: &mut Sweep<'_>,
    spec: &Spec,
    trials: &[Trial],
    rounds: &[(usize, usize)],
    steps: usize,
    out: &Path,
) -> Result<(report::Report, [PathBuf; 3])> {
    let repeats = spec.search.repeats;
    let last_mult = rounds.last().map_or(1, |r| r.1);
    let mut candidates: Vec<Trial> = trials.to_vec();
    for (round, &(keep, mult)) in rounds.iter().enumerate() {
        let final_round = round + 1 == rounds.len();
        // Halving's early rounds are short screens; only the last runs the spec's steps.
        let round_steps = if steps == 0 {
            0
        } else {
            (steps * mult / last_mult).max(2)
        };
        if round > 0 {
            let scored: Vec<(Trial, f64)> = candidates
                .iter()
                .map(|t| {
                    let score = sweep
                        .records
                        .iter()
                        .rev()
                        .find(|r| r.id == t.id && r.round == round - 1)
                        .and_then(median_sps)
                        .unwrap_or(f64::NAN);
                    (t.clone(), score)
                })
                .collect();
            candidates = select_top(&scored, keep);
        }
        let reps = if final_round { repeats } else { 1 };
        for t in candidates.clone() {
            sweep.run(&t, round, round_steps, reps)?;
        }
    }
    // The recommended combination, measured once more so the report can say whether
    // the predicted gain holds up.
    let before = build::build(spec, &sweep.records);
    if let Some((knobs, _, _)) = confirm::combination(&before) {
        let base = &spec.search.baseline;
        let combo = Trial {
            id: format!("{}{}", build::CONFIRM_PREFIX, plan::trial_id(&knobs, base)),
            label: format!("confirm: {}", knobs.diff_label(base)),
            knobs,
        };
        let rerun = Trial {
            id: format!("{}{}", build::CONFIRM_PREFIX, plan::trial_id(base, base)),
            label: "confirm: baseline re-run".into(),
            knobs: base.clone(),
        };
        sweep.progress.bar.inc_length(2);
        sweep.confirm(&combo, &rerun, steps, repeats)?;
    }
    sweep.progress.bar.finish_and_clear();
    if let Some(p) = &sweep.env.live_file {
        live::clear(p);
    }
    if let (Some((pct, every)), false) = (
        sweep.sampler.cost(),
        sweep.progress.json || sweep.progress.tui,
    ) {
        eprintln!(
            "note: device sampling every {} ms used {pct:.2}% of one core",
            every.as_millis()
        );
    }
    let report = build::build(spec, &sweep.records);
    let paths = report::write_all(out, &report)?;
    Ok((report, paths))
}

fn print_table(r: &report::Report) {
    let w = r
        .trials
        .iter()
        .map(|t| t.label.chars().count())
        .max()
        .unwrap_or(5)
        .max(5);
    println!(
        "{:<w$}  {:<11}  {:>28}  {:>26}  {:>8}",
        "trial", "status", "samples/s [95% CI]", "vs baseline [95% CI]", "peak MiB"
    );
    for t in &r.trials {
        let is_base = r.baseline.as_deref() == Some(t.id.as_str());
        println!(
            "{:<w$}  {:<11}  {:>28}  {:>26}  {:>8}",
            crate::error::shown(&t.label),
            t.status.as_str(),
            markdown::throughput_cell(t),
            markdown::ratio_cell(t, is_base),
            t.peak_mib().map_or("–".into(), |m| format!("{m:.1}")),
        );
    }
    for n in &r.notes {
        println!("note: {}", crate::error::inert(n));
    }
    for rec in &r.recommendations {
        let gain = rec.expected_gain.map_or(String::new(), |g| {
            format!(" ({})", crate::advisor::fmt_ratio(&g))
        });
        let kind = match rec.kind {
            crate::report::model::RecKind::Change => "recommend",
            crate::report::model::RecKind::Warning => "warning",
        };
        println!("{kind}: {}{gain}: {}", rec.title, rec.tune_flag);
    }
    if let Some(c) = &r.confirmation {
        println!("confirmation ({}): {}", c.verdict, c.summary);
    }
}
