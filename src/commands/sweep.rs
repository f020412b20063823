//! `tune sweep`: the runner's rounds through local child processes, the advisor's
//! recommended combination measured once more (the confirmation), then report.json,
//! report.html and summary.md. Exit code 1 only when no trial succeeded.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::json;

use super::cli::SweepArgs;
use crate::advisor::{self, confirm};
use crate::error::{Error, Result};
use crate::executor::slurm::SlurmEnv;
use crate::executor::trial::TrialEnv;
use crate::limits;
use crate::report::{self, JOURNAL, REPORT_HTML, REPORT_JSON, SUMMARY_MD};
use crate::results::build::{confirm_id, rerun_beside, settle_beside, settle_id, CONFIRM_PREFIX};
use crate::results::{Report, Status, TrialRecord};
use crate::runner::live::LIVE_JSON;
use crate::runner::sweep::{
    again_runs, measured_steps, median_sps, Sweep, SweepObserver, SweepSetup,
};
use crate::runner::Executor;
use crate::spec::plan::{self, halving_rounds, Trial};
use crate::spec::{ExecutorKind, Spec, Strategy, Workload};
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
}

impl SweepObserver for Progress {
    fn started(&mut self, label: &str) {
        self.bar.set_message(label.to_string());
    }

    fn note(&mut self, text: &str) {
        if self.tui || self.json {
            return;
        }
        if self.plain {
            eprintln!("{text}");
        } else {
            self.bar.println(text);
        }
    }

    fn finished(&mut self, rec: &TrialRecord, index: usize, total: usize) {
        self.bar.set_length(total as u64);
        self.bar.set_position(index as u64);
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
            crate::fsio::print_out(&format!("{line}\n"));
            return;
        }
        // A script whose steps had no batch the hooks could count: a "sample" is a step.
        let unit = if !rec.repeats.is_empty() && rec.repeats.iter().all(|r| r.batch_unknown) {
            "steps/s (batch size unknown)"
        } else {
            "samples/s"
        };
        let text = match (rec.status, sps) {
            (Status::Ok, Some(v)) => match &rec.error {
                Some(note) => format!("{}: {v:.1} {unit} ({note})", rec.label),
                None => format!("{}: {v:.1} {unit}", rec.label),
            },
            (s, _) => format!(
                "{}: {} ({})",
                rec.label,
                s.as_str(),
                rec.error.as_deref().unwrap_or("no error text")
            ),
        };
        let text = format!("[{index}/{total}] {text}");
        if self.plain {
            eprintln!("{text}");
        } else {
            self.bar.println(text);
        }
    }
}

/// The per-trial memory cap: `TUNE_TRIAL_MEM_CAP_BYTES` if set, else the spec's. A value
/// out of range (0 would make every trial `oom`) or not a number is refused, not ignored.
fn mem_cap(spec: &Spec) -> Result<Option<u64>> {
    let var = crate::executor::child::MEM_CAP_ENV;
    let env = limits::env_u64(
        var,
        std::env::var_os(var).as_deref(),
        &limits::MEM_CAP_BYTES,
    )?;
    Ok(env.or(spec.search.mem_cap_mib.map(|m| m << 20)))
}

/// `TUNE_SAMPLE_MS`, which the sweep's sampler reads: checked here, before anything is
/// written, so a bad value is refused rather than silently replaced by the default.
fn check_sample_ms() -> Result<()> {
    let var = crate::runner::sampling::SAMPLE_MS_ENV;
    let raw = std::env::var_os(var);
    // 0 turns sampling off; anything else is an interval.
    if raw.as_deref().and_then(|v| v.to_str()).map(str::trim) == Some("0") {
        return Ok(());
    }
    limits::env_u64(var, raw.as_deref(), &limits::SAMPLE_INTERVAL_MS).map(|_| ())
}

/// Refuses an output folder whose report files would be overwritten without a journal
/// of their own there: another sweep's report, a `tune watch` report, or files that are
/// not tune's (#27). A folder with a journal is checked by the journal (`--resume`, same
/// spec); a missing or empty folder, or one without any of tune's file names, is used.
fn check_out(out: &Path) -> Result<()> {
    let shown_out = crate::error::shown(&out.display().to_string());
    match std::fs::metadata(out) {
        Ok(m) if !m.is_dir() => {
            return Err(Error::Invalid(format!(
                "--out {shown_out}: not a folder; give a folder for the journal and the reports"
            )))
        }
        Ok(_) => {}
        Err(_) => return Ok(()),
    }
    if std::fs::symlink_metadata(out.join(JOURNAL)).is_ok() {
        return Ok(());
    }
    let theirs = [
        REPORT_JSON,
        REPORT_HTML,
        SUMMARY_MD,
        report::trace::TRACE_JSON,
    ]
    .into_iter()
    .find(|f| std::fs::symlink_metadata(out.join(f)).is_ok());
    match theirs {
        Some(f) => Err(Error::Invalid(format!(
            "--out {shown_out}: holds a {f} but no {JOURNAL}: another sweep's or tool's report, which tune does not overwrite; give another --out or remove it"
        ))),
        None => Ok(()),
    }
}

/// `spec` with `--device` in place of its `[workload] device`.
fn with_device(mut spec: Spec, args: &SweepArgs) -> Result<Spec> {
    let Some(d) = &args.device else {
        return Ok(spec);
    };
    match &mut spec.workload {
        Workload::Engine(e) => e.device = d.clone(),
        Workload::Command(_) => {
            return Err(Error::Invalid(format!(
                "{}: --device sets the device of built-in engine workloads (model = ...); \
                 this spec's workload is a command, which chooses its own device",
                args.spec.display()
            )))
        }
    }
    Ok(spec)
}

pub fn main(args: &SweepArgs) -> Result<i32> {
    let began = std::time::Instant::now();
    let spec = with_device(Spec::load(&args.spec)?, args)?;
    let mem_cap_bytes = mem_cap(&spec)?;
    check_sample_ms()?;
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
    check_out(&out)?;
    let exe = std::env::current_exe()
        .map_err(|e| Error::Runtime(format!("cannot find the tune executable: {e}")))?;
    let steps = measured_steps(&spec);
    let n = plan.trials.len();
    let rounds = match spec.search.strategy {
        Strategy::Halving => halving_rounds(n, spec.search.eta),
        _ => vec![(n, 1)],
    };
    // The baseline's runs interleaved through the last round are counted as trials.
    let total: usize =
        rounds.iter().map(|(k, _)| k).sum::<usize>() + again_runs(rounds.last().map_or(0, |r| r.0));
    let link = args.tui.then(tui::dash::SweepLink::default);
    let cancel = link.as_ref().map(|l| l.cancel.clone());
    let live_file = Some(out.join(LIVE_JSON));
    let kind = match args.executor.as_deref() {
        Some(k) => ExecutorKind::parse(k).unwrap_or_default(),
        None => spec.search.executor,
    };
    let slurm_env;
    let local_env;
    let env: &dyn Executor = match kind {
        ExecutorKind::Slurm => {
            if !matches!(spec.workload, Workload::Engine(_)) {
                return Err(Error::Invalid(format!(
                    "{}: --executor slurm runs built-in engine workloads (model = ...) only; this spec's workload is a command",
                    args.spec.display()
                )));
            }
            let dir = match &spec.slurm.shared_dir {
                Some(d) => spec.dir().join(d),
                None => out.join("slurm"),
            };
            let dir = std::path::absolute(&dir)
                .map_err(|e| Error::Runtime(format!("cannot resolve {}: {e}", dir.display())))?;
            slurm_env = SlurmEnv {
                exe,
                dir,
                mem_cap_bytes,
            };
            slurm_env.start()?;
            &slurm_env
        }
        ExecutorKind::Local => {
            local_env = TrialEnv {
                exe,
                timeout: Duration::from_secs(spec.search.timeout_s),
                mem_cap_bytes,
                live_file: live_file.clone(),
                cancel: cancel.clone(),
                cut_at: None,
            };
            &local_env
        }
    };
    let mut progress = Progress::new(total, args.json, args.tui);
    let setup = SweepSetup {
        spec: &spec,
        journal_path: out.join(JOURNAL),
        resume: args.resume,
        live_file,
        cancel,
        total,
    };
    let mut sweep = Sweep::open(setup, env, &mut progress)?;
    let resumed = sweep.resumed();
    if resumed > 0 && !args.json && !args.tui {
        eprintln!("resuming: {resumed} finished trial(s) in the journal are not rerun");
    }
    let quiet = args.json || args.tui;
    let (report, paths, spent) = match &link {
        Some(link) => std::thread::scope(|s| {
            let worker = s.spawn(|| {
                let _ended = link.on_end();
                let r = execute(&mut sweep, &spec, &plan.trials, &rounds, steps, &out, quiet);
                link.end(match &r {
                    Ok((report, _, _)) => format!(
                        "sweep finished: {} trial(s), reports written",
                        report.trials.len()
                    ),
                    Err(e) => format!("sweep stopped: {e}"),
                });
                r
            });
            let _stop = link.stop_on_unwind();
            let shown = tui::dash::run_attached(&out, link);
            // Whatever ended the dashboard, the sweep must not outlive this function.
            if shown.is_err() {
                link.cancel.store(true, Ordering::Relaxed);
            }
            let swept = worker
                .join()
                .map_err(|_| Error::Runtime("the sweep thread panicked".into()))?;
            shown?;
            swept
        })?,
        None => execute(&mut sweep, &spec, &plan.trials, &rounds, steps, &out, quiet)?,
    };
    drop(sweep);
    progress.bar.finish_and_clear();
    let ok = report
        .trials
        .iter()
        .filter(|t| t.status == Status::Ok)
        .count();
    let answer = super::answer::line(&spent, began.elapsed());
    if args.json {
        crate::fsio::print_out(&format!(
            "{}\n",
            json!({"report": paths[0], "html": paths[1], "summary": paths[2], "trace": paths[3], "ok": ok, "trials": report.trials.len(), "time_to_answer": answer})
        ));
    } else {
        super::summary::print(&report);
        eprintln!("{answer}");
        for p in &paths {
            crate::fsio::print_out(&format!("{}\n", p.display()));
        }
    }
    Ok(if ok == 0 { 1 } else { 0 })
}

/// Runs the rounds of the plan and the confirmation, then writes the reports.
fn execute(
    sweep: &mut Sweep<'_>,
    spec: &Spec,
    trials: &[Trial],
    rounds: &[(usize, usize)],
    steps: usize,
    out: &Path,
    quiet: bool,
) -> Result<(Report, [PathBuf; 4], super::answer::Spent)> {
    sweep.run_rounds(trials, rounds, steps)?;
    let base = &spec.search.baseline;
    // Promising changes the drift left unsettled, measured again in pairs beside the
    // baseline; their pairs then stand for their trials (#31).
    let mut before = advisor::build_report(spec, sweep.records());
    let unsettled = advisor::settle::candidates(&before);
    for knobs in &unsettled {
        let change = Trial {
            id: settle_id(knobs, base),
            label: format!("settle: {}", knobs.diff_label(base)),
            knobs: knobs.clone(),
        };
        let beside = Trial {
            id: settle_beside(knobs, base),
            label: format!("settle: baseline beside {}", knobs.diff_label(base)),
            knobs: base.clone(),
        };
        sweep.confirm(&change, &beside, steps)?;
    }
    if !unsettled.is_empty() {
        before = advisor::build_report(spec, sweep.records());
    }
    // The recommended combination, measured once more so the report can say whether
    // the predicted gain holds up.
    if let Some((knobs, _, _)) = confirm::combination(&before) {
        let combo = Trial {
            id: format!("{CONFIRM_PREFIX}{}", plan::trial_id(&knobs, base)),
            label: format!("confirm: {}", knobs.diff_label(base)),
            knobs,
        };
        let rerun = Trial {
            id: format!("{CONFIRM_PREFIX}{}", plan::trial_id(base, base)),
            label: "confirm: baseline re-run".into(),
            knobs: base.clone(),
        };
        sweep.confirm(&combo, &rerun, steps)?;
        // Each change on its own too, beside its own baseline run, so one that only rode
        // along in the combination (or on drift) is found out (#31).
        for (_, knobs) in confirm::singles(&before) {
            let single = Trial {
                id: confirm_id(&knobs, base),
                label: format!("confirm alone: {}", knobs.diff_label(base)),
                knobs: knobs.clone(),
            };
            let beside = Trial {
                id: rerun_beside(&knobs, base),
                label: format!("confirm: baseline beside {}", knobs.diff_label(base)),
                knobs: base.clone(),
            };
            sweep.confirm(&single, &beside, steps)?;
        }
    }
    if let (Some((pct, every)), false) = (sweep.finish(), quiet) {
        eprintln!(
            "note: device sampling every {} ms used {pct:.2}% of one core",
            every.as_millis()
        );
    }
    let report = advisor::build_report_within(spec, sweep.records(), sweep.budget_use());
    let paths = report::write_all(out, &report)?;
    let mut spent = super::answer::spent(sweep.records());
    spent.stopped = report.budget.as_ref().map_or(0.0, |b| b.stopped_s);
    Ok((report, paths, spent))
}
