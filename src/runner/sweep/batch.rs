//! A round through a batching executor (a Slurm cluster). Its runs go to the executor
//! in the same order a local sweep runs them: every trial's first repeat in plan order,
//! the baseline's runs interleaved through the plan included, then every trial's second,
//! and so on. Before, a trial's repeats were queued side by side and the baseline ran
//! once, first: with `max_parallel` jobs at a time, a cluster's busy minute (or a slow
//! node) fell on all of one trial's runs, and nothing measured the drift between the
//! first trial and the last (#31). A time budget stops new jobs from starting; the ones
//! running finish.

use std::cell::Cell;
use std::collections::HashMap;
use std::time::Instant;

use super::{fresh, no_empty_hardware, Outcome, Run, RunEvent, Sweep};
use crate::error::Result;
use crate::results::record::{clean, NodeRun, Record, Status, Submission, TrialRecord};
use crate::runner::budget;
use crate::runner::live;
use crate::runner::resume::stamped;
use crate::spec::plan::Trial;
use crate::spec::{Search, Spec};

/// A trial of the batch not yet journaled: its record so far, each repeat's outcome as
/// it comes, and when the sweep's clock saw it start (for its timeline).
struct Pending {
    rec: TrialRecord,
    outcomes: Vec<Option<Outcome>>,
    began_ms: f64,
}

impl Pending {
    /// The record with every outcome that came, in repeat order; its status is its first
    /// failure in that order (its siblings were submitted with it, so a failed repeat does
    /// not stop them as it does in a local sweep).
    fn record(&mut self) -> TrialRecord {
        let mut rec = self.rec.clone();
        for (i, o) in self.outcomes.iter_mut().enumerate() {
            let Some(o) = o.take() else { continue };
            rec.repeats.extend(o.repeat.map(clean));
            rec.nodes.extend(o.node.map(|n| NodeRun { repeat: i, ..n }));
            if o.status != Status::Ok && rec.status == Status::Ok {
                rec.status = o.status;
                rec.error = o.error;
            }
        }
        rec
    }
}

/// The batch's runs, pass by pass: run `i` is repeat `i / n` of trial `i % n`. A run an
/// interrupted sweep submitted (`submitted`, from the journal) is followed, not sent again.
fn in_passes(
    trials: &[Trial],
    round: usize,
    steps: usize,
    reps: usize,
    submitted: &HashMap<(String, usize, usize), String>,
) -> Vec<Run> {
    let mut runs = Vec::with_capacity(trials.len() * reps);
    for repeat in 0..reps {
        for t in trials {
            runs.push(Run {
                id: t.id.clone(),
                label: t.label.clone(),
                round,
                repeat,
                knobs: t.knobs.clone(),
                steps,
                attach: submitted.get(&(t.id.clone(), round, repeat)).cloned(),
            });
        }
    }
    runs
}

impl Sweep<'_> {
    /// A round through a batching executor: every repeat of every trial not yet in the
    /// journal, in passes (see the module's note); each submission is journaled as it
    /// happens, and a trial is journaled when its last repeat ends.
    pub(super) fn run_batch(
        &mut self,
        trials: &[Trial],
        round: usize,
        steps: usize,
        repeats: usize,
    ) -> Result<()> {
        let reps = repeats.max(1);
        let mut todo: Vec<Trial> = Vec::new();
        for t in trials {
            if self.done.contains(&(t.id.clone(), round)) {
                self.position += 1;
            } else {
                todo.push(t.clone());
            }
        }
        let runs = in_passes(&todo, round, steps, reps, &self.submitted);
        let n = todo.len();
        let mut pending: Vec<Pending> = todo
            .iter()
            .map(|t| Pending {
                rec: fresh(t, round, steps),
                outcomes: vec![None; reps],
                began_ms: self.sampler.now_ms(),
            })
            .collect();
        if runs.is_empty() {
            return Ok(());
        }
        if reps > 1 && n > 1 {
            self.observer.note(&format!(
                "jobs go to the cluster repeat by repeat: every trial's first run, then every \
                 trial's second, up to {reps}, so that a busy minute or a slow node does not \
                 fall on all of one trial's runs"
            ));
        }
        // Whether the budget still lets a run start: read by the executor before each
        // submission, set after each end (the Sweep itself is borrowed by `on_event`).
        let open = Cell::new(!self.out_of_time());
        let mut started: Vec<Option<Instant>> = vec![None; runs.len()];
        let exec = self.exec;
        let spec = self.spec;
        // The jobs see when the budget ends, and are cancelled then.
        let cut_spec = self.budget.as_ref().map(|b| Spec {
            search: Search {
                cut_at: Some(b.deadline()),
                ..spec.search.clone()
            },
            ..spec.clone()
        });
        let mut on_event = |ev: RunEvent| -> Result<()> {
            match ev {
                RunEvent::Submitted { run, job_id } => {
                    let r = &runs[run];
                    started[run] = Some(Instant::now());
                    if r.repeat == 0 {
                        self.observer.started(&r.label);
                    }
                    // A dashboard follows the latest submission; the journal lists the
                    // others, and the job's own process does not write the live file.
                    let t = Trial {
                        id: r.id.clone(),
                        label: r.label.clone(),
                        knobs: r.knobs.clone(),
                    };
                    self.show_live(&t, round, r.repeat + 1, reps, self.position + 1);
                    let job = Submission {
                        id: r.id.clone(),
                        round,
                        repeat: r.repeat,
                        job_id,
                    };
                    self.journal
                        .append(&stamped(&Record::Submitted(job), spec)?)?;
                }
                RunEvent::Finished { run, outcome } => {
                    let (t, rep) = (run % n, run / n);
                    if let (Some(b), Some(at)) = (&mut self.budget, started[run]) {
                        b.ran(at.elapsed(), budget::measured_s(outcome.repeat.as_ref()));
                    }
                    open.set(!self.out_of_time());
                    if outcome.cut {
                        // Cancelled when the budget ended: counted among the runs not
                        // run (`cut_by_budget`), the trial's other repeats kept.
                        let secs = started[run].map_or(0.0, |at| at.elapsed().as_secs_f64());
                        let r = &runs[run];
                        let what = format!(
                            "'{}' (repeat {} of {reps}), {secs:.1} s in{}",
                            r.label,
                            r.repeat + 1,
                            outcome.cut_measured()
                        );
                        self.stopped(what, secs);
                        return Ok(());
                    }
                    let Some(slot) = pending.get_mut(t) else {
                        return Ok(());
                    };
                    slot.outcomes[rep] = Some(outcome);
                    if slot.outcomes.iter().all(Option::is_some) {
                        let mut rec = slot.record();
                        rec.timeline = self.sampler.since(slot.began_ms);
                        // Journaled once: its outcomes are taken, so none is left to cut.
                        slot.outcomes.clear();
                        self.finish_trial(rec)?;
                    }
                }
            }
            Ok(())
        };
        let res = exec.run_many(
            cut_spec.as_ref().unwrap_or(spec),
            &runs,
            &mut on_event,
            &|| open.get(),
        );
        // Nothing of this batch runs any more, whether it ended or was interrupted.
        if let Some(p) = &self.live_file {
            live::clear(p);
        }
        res?;
        self.cut_by_budget(pending, reps)
    }

    /// The trials of a batch the budget stopped short: runs it did not start are counted
    /// as not run; a trial that failed is journaled as it is (a local sweep would not have
    /// repeated it either); one with measured repeats is kept for the report with a note,
    /// not journaled, so `--resume` runs the rest.
    fn cut_by_budget(&mut self, pending: Vec<Pending>, reps: usize) -> Result<()> {
        let mut not_run = 0;
        for mut p in pending {
            let missing = p.outcomes.iter().filter(|o| o.is_none()).count();
            if p.outcomes.is_empty() || missing == 0 {
                continue;
            }
            not_run += missing;
            let mut rec = p.record();
            rec.timeline = self.sampler.since(p.began_ms);
            if rec.status != Status::Ok {
                no_empty_hardware(&mut rec);
                self.finish_trial(rec)?;
            } else if !rec.repeats.is_empty() {
                self.cut_short(rec, reps);
            }
        }
        self.not_run(not_run);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::super::{Executor, SweepObserver, SweepSetup};
    use super::*;
    use crate::knobs::Knobs;
    use crate::results::baselines::AGAIN_PREFIX;
    use crate::results::record::Repeat;
    use crate::spec::{plan, Spec};

    /// A cluster that runs every job at once when asked: it records what it was handed
    /// and in which order, stops starting runs once `may_start` says no or after `upto`
    /// runs (a budget spent in the middle of the batch), and fails `bad` trials' runs.
    /// With `local`, it is the local executor instead: one run at a time, in `run`.
    struct Cluster {
        upto: usize,
        /// How long each run takes.
        pause: std::time::Duration,
        bad: Option<String>,
        order: Mutex<Vec<(String, usize)>>,
        local: bool,
        /// The batch size whose runs after its first hang until the budget ends.
        hang: Option<usize>,
    }

    impl Cluster {
        fn new(upto: usize, pause_ms: u64, bad: Option<&str>) -> Cluster {
            Cluster {
                upto,
                pause: std::time::Duration::from_millis(pause_ms),
                bad: bad.map(str::to_string),
                order: Mutex::new(Vec::new()),
                local: false,
                hang: None,
            }
        }

        /// A run of `knobs`, the `n`th of all, `again` when its trial ran before: a hung
        /// one waits for the budget's end (`Search::cut_at`, which every run under a
        /// budget must carry) and is cut then.
        fn outcome(
            &self,
            spec: &Spec,
            knobs: &Knobs,
            label: &str,
            again: bool,
            n: usize,
        ) -> Outcome {
            if self.hang == Some(knobs.batch_size) && again {
                let Some(at) = spec.search.cut_at else {
                    return Outcome::fail(Status::Failed, "no cut_at under a budget");
                };
                std::thread::sleep(at.saturating_duration_since(std::time::Instant::now()));
                return Outcome::cut("stopped when the budget ended");
            }
            std::thread::sleep(self.pause);
            if self.bad.as_deref() == Some(label) {
                return Outcome::fail(Status::Failed, "it crashed");
            }
            Outcome {
                status: Status::Ok,
                error: None,
                repeat: Some(Repeat {
                    step_times: vec![0.01; 4],
                    samples_per_s: 100.0 + n as f64,
                    ..Repeat::default()
                }),
                node: None,
                cut: false,
            }
        }
    }

    impl Executor for Cluster {
        fn run(&self, spec: &Spec, knobs: &Knobs, _: usize) -> Outcome {
            if !self.local {
                return Outcome::fail(Status::Failed, "a batch only");
            }
            let label = knobs.diff_label(&spec.search.baseline);
            let mut order = self.order.lock().unwrap();
            let (n, again) = (order.len(), order.iter().any(|(l, _)| *l == label));
            order.push((label.clone(), 0));
            drop(order);
            self.outcome(spec, knobs, &label, again, n)
        }
        fn batches(&self) -> bool {
            !self.local
        }
        fn run_many(
            &self,
            spec: &Spec,
            runs: &[Run],
            events: &mut dyn FnMut(RunEvent) -> Result<()>,
            may_start: &dyn Fn() -> bool,
        ) -> Result<()> {
            for (i, r) in runs.iter().enumerate().take(self.upto) {
                if !may_start() {
                    return Ok(());
                }
                self.order.lock().unwrap().push((r.id.clone(), r.repeat));
                let job_id = format!("{}", 100 + i);
                events(RunEvent::Submitted { run: i, job_id })?;
                let outcome = self.outcome(spec, &r.knobs, &r.label, r.repeat > 0, i);
                events(RunEvent::Finished { run: i, outcome })?;
            }
            Ok(())
        }
    }

    struct Quiet;
    impl SweepObserver for Quiet {
        fn started(&mut self, _: &str) {}
        fn finished(&mut self, _: &TrialRecord, _: usize, _: usize) {}
    }

    const SPEC: &str = "[workload]\nmodel = \"mlp\"\ndataset = \"synthetic\"\n[knobs]\n\
                        batch_size = [16, 8, 32, 64, 128]\n[search]\nrepeats = 2\n";

    /// Runs `spec`'s grid on `cluster`; the budget ends `ends` from the start when given.
    /// With `confirm`, the trial of that batch size is then confirmed, the budget ending
    /// the given time after the confirmation begins. Returns the records, the journal's
    /// lines and what the budget left out.
    fn sweep(
        spec: &str,
        cluster: &Cluster,
        ends: Option<std::time::Duration>,
        confirm: Option<(usize, std::time::Duration)>,
    ) -> (
        Vec<TrialRecord>,
        Vec<serde_json::Value>,
        Option<crate::results::model::BudgetUse>,
    ) {
        let spec = Spec::parse(spec, "c.toml").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let trials = plan::plan(&spec).trials;
        let n = trials.len();
        let mut quiet = Quiet;
        let setup = SweepSetup {
            spec: &spec,
            journal_path: dir.path().join("journal.jsonl"),
            resume: false,
            live_file: None,
            cancel: None,
            total: n + super::super::again_runs(n),
        };
        let mut s = Sweep::open(setup, cluster, &mut quiet).unwrap();
        if let (Some(b), Some(d)) = (&mut s.budget, ends) {
            b.end_in(d);
        }
        s.run_rounds(&trials, &[(n, 1)], 4).unwrap();
        if let Some((b, d)) = confirm {
            let base = spec.search.baseline.clone();
            let t = trials.iter().find(|t| t.knobs.batch_size == b).unwrap();
            let combo = Trial {
                id: crate::results::build::confirm_id(&t.knobs, &base),
                label: format!("confirm: {}", t.label),
                knobs: t.knobs.clone(),
            };
            let beside = Trial {
                id: crate::results::build::rerun_beside(&t.knobs, &base),
                label: "confirm: baseline".into(),
                knobs: base,
            };
            if let Some(budget) = &mut s.budget {
                budget.end_in(d);
            }
            s.confirm(&combo, &beside, 4).unwrap();
        }
        let used = s.budget_use();
        let recs = s.records().to_vec();
        drop(s);
        let lines: Vec<serde_json::Value> =
            std::fs::read_to_string(dir.path().join("journal.jsonl"))
                .unwrap()
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect();
        (recs, lines, used)
    }

    #[test]
    fn a_cluster_gets_every_trials_first_run_then_every_second_with_the_baseline_again() {
        let c = Cluster::new(usize::MAX, 0, None);
        let (recs, lines, _) = sweep(SPEC, &c, None, None);
        let order = c.order.into_inner().unwrap();
        // Five plan trials and one run of the baseline after the third non-baseline
        // trial, twice each, pass by pass.
        assert_eq!(order.len(), 12, "{order:?}");
        let first: Vec<&str> = order[..6].iter().map(|(id, _)| id.as_str()).collect();
        assert!(order[..6].iter().all(|(_, r)| *r == 0), "{order:?}");
        assert!(order[6..].iter().all(|(_, r)| *r == 1), "{order:?}");
        assert_eq!(
            first,
            order[6..]
                .iter()
                .map(|(id, _)| id.as_str())
                .collect::<Vec<_>>()
        );
        assert!(first[4].starts_with(AGAIN_PREFIX), "{first:?}");
        assert!(!first[..4].iter().any(|id| id.starts_with(AGAIN_PREFIX)));
        // Every trial is journaled whole, each submission once.
        assert_eq!(recs.len(), 6);
        assert!(recs
            .iter()
            .all(|r| r.repeats.len() == 2 && r.status == Status::Ok));
        let subs = lines.iter().filter(|l| l["type"] == "submitted").count();
        assert_eq!(subs, 12);
    }

    #[test]
    fn a_budget_spent_mid_batch_keeps_what_ran_and_names_what_did_not() {
        let spec = format!("{SPEC}budget_s = 600\n");
        // The first pass and two runs of the second start; the second trial crashes.
        let c = Cluster::new(8, 0, Some("batch_size=8"));
        let (recs, lines, used) = sweep(&spec, &c, None, None);
        let not_run = used.map(|u| u.not_run);
        let journaled: Vec<&serde_json::Value> =
            lines.iter().filter(|l| l["type"] == "trial").collect();
        // Whole trials (the first two) and the crashed one are journaled; the other four
        // ran once of two times: kept for the report, with a note, not journaled.
        assert_eq!(journaled.len(), 2, "{journaled:?}");
        assert!(
            journaled.iter().any(|t| t["status"] == "failed"),
            "{journaled:?}"
        );
        let cut: Vec<&TrialRecord> = recs.iter().filter(|r| r.repeats.len() == 1).collect();
        assert_eq!(cut.len(), 4, "{recs:?}");
        for t in cut {
            let e = t.error.as_deref().unwrap_or_default();
            assert!(e.contains("after 1 of 2 repeats"), "{e}");
        }
        assert_eq!(not_run, Some(vec!["4 runs of the plan".to_string()]));
    }

    #[test]
    fn no_job_starts_once_the_budget_is_spent() {
        let spec = format!("{SPEC}budget_s = 600\n");
        // Runs of 0.2 s against a budget with 2.7 s left: a run needs the least share
        // (2 s) to start, so the first few start and the rest do not.
        let c = Cluster::new(usize::MAX, 200, None);
        let (recs, _, used) = sweep(
            &spec,
            &c,
            Some(std::time::Duration::from_millis(2700)),
            None,
        );
        let not_run = used.map(|u| u.not_run);
        let ran = c.order.into_inner().unwrap().len();
        assert!((1..12).contains(&ran), "{ran} runs started");
        let s = if 12 - ran == 1 { "" } else { "s" };
        assert_eq!(
            not_run,
            Some(vec![format!("{} run{s} of the plan", 12 - ran)])
        );
        assert!(recs.iter().all(|r| r.repeats.len() == 1), "{recs:?}");
    }

    /// A run under way when the budget ends is stopped then, locally and on a cluster
    /// alike: counted among the runs not run, its trial's measured repeat kept with a
    /// note and not journaled, the report naming the run and when it was stopped (#31).
    #[test]
    fn a_run_under_way_when_the_budget_ends_is_stopped_and_counted_as_not_run() {
        let spec = format!("{SPEC}budget_s = 600\n");
        for local in [true, false] {
            let mut c = Cluster::new(usize::MAX, 0, None);
            c.local = local;
            c.hang = Some(32);
            let began = std::time::Instant::now();
            let (recs, lines, used) =
                sweep(&spec, &c, Some(std::time::Duration::from_secs(3)), None);
            assert!(began.elapsed().as_secs_f64() < 10.0, "local {local}");
            let used = used.expect("a budget");
            let stopped = used.stopped.clone().unwrap_or_default();
            assert!(
                stopped.contains("batch_size=32") && stopped.contains("repeat 2 of 2"),
                "local {local}: {used:?}"
            );
            let t32 = recs
                .iter()
                .find(|r| r.knobs.batch_size == 32)
                .unwrap_or_else(|| panic!("local {local}: its first repeat was lost: {recs:?}"));
            assert_eq!((t32.status, t32.repeats.len()), (Status::Ok, 1), "{t32:?}");
            assert!(t32
                .error
                .as_deref()
                .unwrap_or("")
                .contains("after 1 of 2 repeats"));
            assert!(
                !lines
                    .iter()
                    .any(|l| l["type"] == "trial" && l["id"] == t32.id.as_str()),
                "local {local}: a cut trial was journaled as whole"
            );
            assert!(
                used.not_run.iter().any(|n| n.contains("of the plan")),
                "local {local}: {used:?}"
            );
            assert!(
                used.sentence().contains("was stopped"),
                "{}",
                used.sentence()
            );
            // Its time is said as spent on it (time to answer), not as tune's own.
            assert!(used.stopped_s >= 1.0, "local {local}: {used:?}");
        }
    }

    /// A confirmation whose run is under way when the budget ends: the run is stopped,
    /// the baseline's side of its pair set aside with it, and with no whole pair measured
    /// nothing of the confirmation is journaled or reported; the budget names it (#31).
    #[test]
    fn a_confirmation_run_under_way_when_the_budget_ends_is_stopped_with_its_pair() {
        let spec = format!(
            "{}budget_s = 600\n",
            SPEC.replace("repeats = 2", "repeats = 1")
        );
        let mut c = Cluster::new(usize::MAX, 0, None);
        c.local = true;
        // batch_size=32 ran once in the plan: its confirmation run hangs.
        c.hang = Some(32);
        let began = std::time::Instant::now();
        let confirm = Some((32, std::time::Duration::from_secs(6)));
        let (recs, lines, used) = sweep(&spec, &c, None, confirm);
        assert!(began.elapsed().as_secs_f64() < 15.0);
        let used = used.expect("a budget");
        let stopped = used.stopped.clone().unwrap_or_default();
        assert!(
            stopped.contains("confirm: batch_size=32") && stopped.contains("pair 1 of"),
            "{used:?}"
        );
        assert!(
            used.not_run
                .iter()
                .any(|n| n.contains("confirm: batch_size=32")),
            "{used:?}"
        );
        assert!(
            !recs.iter().any(|r| r.id.starts_with("confirm")),
            "half a pair was kept: {recs:?}"
        );
        assert!(!lines
            .iter()
            .any(|l| l["id"].as_str().is_some_and(|i| i.starts_with("confirm"))));
    }
}
