//! `tune sweep`'s orchestration: runs a spec's plan round by round through an `Executor`,
//! journals each finished trial, skips what the journal already has, and tells a
//! `SweepObserver` what happens. It does not know where trials run (`crate::executor`),
//! nor how progress is shown or reports are written (`crate::commands::sweep`).
//!
//! A failing trial is a result, not an error: the sweep goes on and the record says what
//! failed and why.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::budget::{self, Budget};
use super::hardware::Reruns;
use super::journal::Journal;
use super::live::{self, LiveTrial};
use super::resume::{existing_records, stamped};
use super::sampling::SweepSampler;
use crate::error::{Error, Result};
use crate::knobs::Knobs;
use crate::results::baselines::EVERY;
use crate::results::hardware::RepeatHardware;
use crate::results::model::BudgetUse;
use crate::results::record::{clean, NodeRun, Record, Repeat, RepeatRecord, Status, TrialRecord};
use crate::spec::plan::{select_top, Trial};
use crate::spec::{Spec, Workload};
use crate::stats;

mod batch;
mod rounds;

/// The result of one run of one configuration.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub status: Status,
    /// Why a failed run failed; for an ok run, a note for the report (a Python job's
    /// measurement window: "stopped by tune after 30 measured steps").
    pub error: Option<String>,
    pub repeat: Option<Repeat>,
    /// The node a cluster ran it on (its `repeat` index is set by the runner).
    pub node: Option<NodeRun>,
    /// The sweep's time budget ended it before it finished (`Search::cut_at`): not a
    /// verdict on the configuration, so the runner counts it as not run, whatever its
    /// status says.
    pub cut: bool,
}

impl Outcome {
    pub fn fail(status: Status, error: impl Into<String>) -> Outcome {
        Outcome {
            status,
            error: Some(error.into()),
            repeat: None,
            node: None,
            cut: false,
        }
    }

    /// A run the sweep's time budget stopped before it finished (`Outcome::cut`).
    pub fn cut(why: impl Into<String>) -> Outcome {
        Outcome {
            cut: true,
            ..Outcome::fail(Status::Timeout, why)
        }
    }

    /// What a cut run had measured, for the budget's sentence (", with 12 steps measured
    /// (median 84.1 ms)"): set aside, as short of its window, but never lost from the
    /// report.
    pub fn cut_measured(&self) -> String {
        match &self.repeat {
            // A command's "steps" are its metric values (each one sample of samples/s).
            Some(r) if !r.step_times.is_empty() && r.backend == "command" => {
                let n = r.step_times.len();
                format!(
                    ", with {n} metric value{} read (median {:.4})",
                    if n == 1 { "" } else { "s" },
                    r.samples_per_s
                )
            }
            Some(r) if !r.step_times.is_empty() => {
                let n = r.step_times.len();
                format!(
                    ", with {n} step{} measured (median {:.1} ms)",
                    if n == 1 { "" } else { "s" },
                    crate::stats::median(&r.step_times) * 1e3
                )
            }
            _ => String::new(),
        }
    }
}

/// Where trials run: one call is one run of `knobs` on the spec's workload for `steps`
/// measured steps. Implemented by `crate::executor`.
///
/// An executor that runs many at once (a cluster) says so with `batches` and takes a
/// round's runs together through `run_many`; the local executor keeps the one-at-a-time
/// path, so a local sweep behaves exactly as it did before batching existed.
pub trait Executor: Sync {
    fn run(&self, spec: &Spec, knobs: &Knobs, steps: usize) -> Outcome;

    /// Whether the runner hands this executor whole rounds through `run_many`.
    fn batches(&self) -> bool {
        false
    }

    /// Runs every one of `runs`, telling `events` of each submission (so the runner can
    /// journal it before anything else happens) and each end, in whatever order they
    /// come. An error from `events` or from the executor stops it; what it submitted and
    /// did not finish is then its to clean up or leave to `--resume`.
    ///
    /// A run not yet started starts only while `may_start` says yes (a time budget); the
    /// ones it turned away end with no event, and the runner counts them as not run.
    fn run_many(
        &self,
        spec: &Spec,
        runs: &[Run],
        events: &mut dyn FnMut(RunEvent) -> Result<()>,
        may_start: &dyn Fn() -> bool,
    ) -> Result<()> {
        for (i, r) in runs.iter().enumerate() {
            if !may_start() {
                return Ok(());
            }
            let outcome = self.run(spec, &r.knobs, r.steps);
            events(RunEvent::Finished { run: i, outcome })?;
        }
        Ok(())
    }
}

/// One run of a batch: which trial, round and repeat, and what to run.
#[derive(Clone, Debug)]
pub struct Run {
    pub id: String,
    pub label: String,
    pub round: usize,
    pub repeat: usize,
    pub knobs: Knobs,
    pub steps: usize,
    /// The job an earlier, interrupted `tune sweep` submitted for this run (from the
    /// journal): follow it instead of submitting again.
    pub attach: Option<String>,
}

/// What a batching executor reports about run number `run` of the batch.
// Events are handed over one at a time, never stored in bulk.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum RunEvent {
    Submitted { run: usize, job_id: String },
    Finished { run: usize, outcome: Outcome },
}

/// Whoever shows the sweep's progress (a bar, plain lines, JSON lines, nothing).
pub trait SweepObserver: Send {
    /// `label` starts now.
    fn started(&mut self, label: &str);
    /// `rec` is journaled; it is number `index` of `total`.
    fn finished(&mut self, rec: &TrialRecord, index: usize, total: usize);
    /// A line about the sweep's course (which pass of the repeats runs now).
    fn note(&mut self, _text: &str) {}
}

/// Where a sweep journals and what it may reuse.
pub struct SweepSetup<'a> {
    pub spec: &'a Spec,
    pub journal_path: PathBuf,
    /// Reuse finished trials from an existing journal.
    pub resume: bool,
    /// Where the running trial is announced to a dashboard, if anywhere.
    pub live_file: Option<PathBuf>,
    /// Set by a dashboard to stop the sweep between (or right after killing) trials.
    pub cancel: Option<Arc<AtomicBool>>,
    /// Trials the plan will run (rounds included), for "3/12".
    pub total: usize,
}

pub struct Sweep<'a> {
    spec: &'a Spec,
    exec: &'a dyn Executor,
    observer: &'a mut dyn SweepObserver,
    journal: Journal,
    /// Finished (id, round) pairs, from the journal and this run.
    done: HashSet<(String, usize)>,
    records: Vec<TrialRecord>,
    sampler: SweepSampler,
    live_file: Option<PathBuf>,
    cancel: Option<Arc<AtomicBool>>,
    /// Trials finished or reused so far, and how many the sweep will run.
    position: usize,
    total: usize,
    /// How many finished trials came from the journal.
    resumed: usize,
    /// Journaled submissions of runs whose trial has no record yet: (id, round, repeat)
    /// to job id.
    submitted: HashMap<(String, usize, usize), String>,
    /// Journaled repeats of trials that have no record yet, by (id, round), in order.
    partial: HashMap<(String, usize), Vec<RepeatRecord>>,
    /// `[search] budget_s`'s clock, when the spec has one.
    budget: Option<Budget>,
    /// Confirmations begun: the budget counted the first one's runs in the plan.
    confirmations: usize,
}

/// A finished repeat with more to follow is journaled on its own when it ran at least
/// this long; a shorter one costs less to run again after a kill than its fsync'd line
/// costs every sweep: about 10 ms per line on the loaded 2-core machine
/// (`scripts/sweep-overhead.sh`, 100 trials x 3 repeats: 7.7 s -> 9.9 s median).
const JOURNAL_REPEATS_FROM: Duration = Duration::from_secs(1);

/// Pairs of runs (the change and the baseline beside it) a confirmation makes: the
/// sweep's repeats, at least `CONFIRM_REPEATS_MIN` and at most `CONFIRM_REPEATS_MAX`,
/// rounded up to an even count. With one pair, a single busy minute decided the verdict
/// (on a shared 2-core machine a change that does nothing measured 1.16x [1.03, 1.23]
/// beside its baseline run, and a planted 2x gain measured 1.20x); with several, the
/// verdict rests on the median pair and any one pair can be set aside
/// (`results::baselines::paired`). Even, because the pairs alternate their order (see
/// `Sweep::confirm`): half run the baseline first, half the change first, so a machine
/// that speeds up or slows down steadily favours each side in as many pairs, and the
/// median of an even count sits between the two halves. With three pairs in one order, a
/// change that does nothing measured 1.29x [1.13, 1.39] while the machine sped up (#31).
/// Six bounds the cost: each pair is two more runs of the job.
pub const CONFIRM_REPEATS_MIN: usize = 4;
pub const CONFIRM_REPEATS_MAX: usize = 6;

/// See `CONFIRM_REPEATS_MIN`; `[search] confirm_repeats` sets it outright.
pub fn confirm_repeats(search: &crate::spec::Search) -> usize {
    search.confirm_repeats.unwrap_or_else(|| {
        let n = search
            .repeats
            .clamp(CONFIRM_REPEATS_MIN, CONFIRM_REPEATS_MAX);
        n + n % 2
    })
}

/// Median of the repeats' own throughput figures: the halving score and the progress line.
pub fn median_sps(rec: &TrialRecord) -> Option<f64> {
    let v: Vec<f64> = rec
        .repeats
        .iter()
        .map(|r| r.samples_per_s)
        .filter(|x| *x > 0.0)
        .collect();
    (rec.status == Status::Ok && !v.is_empty()).then(|| stats::median(&v))
}

/// Runs of the baseline the final round interleaves among its `trials` plan trials
/// (the baseline's own included): one after every `EVERY` others when more follow.
pub fn again_runs(trials: usize) -> usize {
    trials.saturating_sub(2) / EVERY
}

/// Steps measured per trial: the engine workload's, or 0 when a command decides its own.
pub fn measured_steps(spec: &Spec) -> usize {
    match &spec.workload {
        Workload::Engine(w) => w.steps,
        Workload::Command(_) => 0,
    }
}

/// A record whose runs' hardware records are all empty (nothing sampled) keeps none.
fn no_empty_hardware(rec: &mut TrialRecord) {
    if rec.hardware.iter().all(|h| *h == RepeatHardware::default()) {
        rec.hardware.clear();
    }
}

fn fresh(t: &Trial, round: usize, steps: usize) -> TrialRecord {
    TrialRecord {
        id: t.id.clone(),
        label: t.label.clone(),
        knobs: t.knobs.clone(),
        round,
        steps,
        status: Status::Ok,
        error: None,
        repeats: Vec::new(),
        timeline: Vec::new(),
        nodes: Vec::new(),
        hardware: Vec::new(),
    }
}

impl<'a> Sweep<'a> {
    /// Opens (or creates) the journal, writes its header once, and loads the finished
    /// trials a resumed sweep will not rerun.
    pub fn open(
        setup: SweepSetup<'a>,
        exec: &'a dyn Executor,
        observer: &'a mut dyn SweepObserver,
    ) -> Result<Sweep<'a>> {
        let spec = setup.spec;
        let existing = existing_records(&setup.journal_path, spec, setup.resume)?;
        let previous = existing.trials;
        let mut journal = Journal::open(&setup.journal_path)?;
        if !existing.has_header {
            journal.append(&Record::Header {
                tune_version: env!("CARGO_PKG_VERSION").into(),
                spec: spec.clone(),
            })?;
        }
        let done: HashSet<(String, usize)> =
            previous.iter().map(|r| (r.id.clone(), r.round)).collect();
        let submitted = existing
            .submitted
            .into_iter()
            .filter(|j| !done.contains(&(j.id.clone(), j.round)))
            .map(|j| ((j.id, j.round, j.repeat), j.job_id))
            .collect();
        let mut partial: HashMap<(String, usize), Vec<RepeatRecord>> = HashMap::new();
        for r in existing.repeats {
            let key = (r.id.clone(), r.round);
            if done.contains(&key) {
                continue;
            }
            let runs = partial.entry(key).or_default();
            // The next repeat in order only: a gap or a repeat seen twice is not resumed from.
            if r.index == runs.len() {
                runs.push(r);
            }
        }
        Ok(Sweep {
            spec,
            exec,
            observer,
            journal,
            resumed: done.len(),
            done,
            records: previous,
            sampler: SweepSampler::start(),
            live_file: setup.live_file,
            cancel: setup.cancel,
            position: 0,
            total: setup.total,
            submitted,
            partial,
            budget: Budget::start(
                spec,
                setup.total * spec.search.repeats.max(1) + 2 * confirm_repeats(&spec.search),
            ),
            confirmations: 0,
        })
    }

    /// Finished trials found in the journal when the sweep opened.
    pub fn resumed(&self) -> usize {
        self.resumed
    }

    /// How the sweep used its time budget, when the spec set one.
    pub fn budget_use(&self) -> Option<BudgetUse> {
        self.budget.as_ref().map(Budget::usage)
    }

    /// Whether the time budget is spent: no run may start.
    pub(crate) fn out_of_time(&self) -> bool {
        self.budget.as_ref().is_some_and(Budget::spent)
    }

    /// Notes that `what` did not run for lack of time.
    pub(crate) fn left_out(&mut self, what: impl Into<String>) {
        if let Some(b) = &mut self.budget {
            b.left_out(what);
        }
    }

    /// `what` was under way when the budget ended, `secs` in, and was stopped.
    pub(crate) fn stopped(&mut self, what: String, secs: f64) {
        if let Some(b) = &mut self.budget {
            b.stopped(what, secs);
        }
    }

    /// One run of `knobs`: under a budget, a Python window measures the run's share of
    /// the time left, and the run's overhead is counted for the next share.
    fn run_once(&mut self, knobs: &Knobs, steps: usize) -> Outcome {
        let began = std::time::Instant::now();
        let o = match &self.budget {
            Some(b) => self.exec.run(
                &budget::capped(self.spec, b.share_s(), b.deadline()),
                knobs,
                steps,
            ),
            None => self.exec.run(self.spec, knobs, steps),
        };
        if let Some(b) = &mut self.budget {
            b.ran(began.elapsed(), budget::measured_s(o.repeat.as_ref()));
        }
        o
    }

    /// Every record so far, the journal's included.
    pub fn records(&self) -> &[TrialRecord] {
        &self.records
    }

    /// Runs the plan's rounds: one round for a grid, shrinking rounds for halving, whose
    /// early rounds are short screens and only the last runs the spec's steps.
    pub fn run_rounds(
        &mut self,
        trials: &[Trial],
        rounds: &[(usize, usize)],
        steps: usize,
    ) -> Result<()> {
        let repeats = self.spec.search.repeats;
        let last_mult = rounds.last().map_or(1, |r| r.1);
        let mut candidates: Vec<Trial> = trials.to_vec();
        for (round, &(keep, mult)) in rounds.iter().enumerate() {
            let final_round = round + 1 == rounds.len();
            if self.out_of_time() {
                self.left_out(format!("round {} of {}", round + 1, rounds.len()));
                break;
            }
            let round_steps = if steps == 0 {
                0
            } else {
                (steps * mult / last_mult).max(2)
            };
            if round > 0 {
                let scored: Vec<(Trial, f64)> = candidates
                    .iter()
                    .map(|t| {
                        let score = self
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
            // Earlier halving rounds only screen; the figures come from the last.
            let order = self.with_baseline_again(&candidates, final_round);
            if self.exec.batches() {
                self.run_batch(&order, round, round_steps, reps)?;
            } else {
                self.run_round(order, round, round_steps, reps)?;
            }
        }
        Ok(())
    }

    /// Journals a finished trial and tells the observer.
    fn finish_trial(&mut self, rec: TrialRecord) -> Result<()> {
        self.journal
            .append(&stamped(&Record::Trial(rec.clone()), self.spec)?)?;
        if let Some(p) = &self.live_file {
            live::clear(p);
        }
        self.done.insert((rec.id.clone(), rec.round));
        self.position += 1;
        self.observer.finished(&rec, self.position, self.total);
        self.records.push(rec);
        Ok(())
    }

    /// Tells a dashboard which trial starts now (its `index` of the sweep's total); its
    /// child fills in the steps.
    fn show_live(&self, t: &Trial, round: usize, repeat: usize, repeats: usize, index: usize) {
        let Some(path) = &self.live_file else {
            return;
        };
        let now = live::unix_ms();
        let state = LiveTrial {
            id: t.id.clone(),
            label: t.label.clone(),
            knobs: t.knobs.clone(),
            round,
            repeat,
            repeats,
            index,
            total: self.total,
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
            .cancel
            .as_ref()
            .is_some_and(|c| c.load(Ordering::Relaxed));
        if !stop {
            return Ok(());
        }
        if let Some(p) = &self.live_file {
            live::clear(p);
        }
        Err(Error::Runtime(format!(
            "sweep stopped from the dashboard before '{label}' finished; {} finished trial(s) are in {}: continue with --resume",
            self.done.len(),
            self.journal.path().display()
        )))
    }

    /// The confirmation: the recommended combination and a fresh run of the baseline,
    /// alternating repeat by repeat so both see the same machine state, `confirm_repeats`
    /// pairs of them so that one noisy run can neither confirm nor withdraw, the
    /// baseline first in the 1st, 3rd, ... pair and second in the others (#31). Each run
    /// records its hardware as a sweep's repeat does; a pair the hardware contaminated is
    /// run again within `[search] hardware_reruns` (#28).
    pub fn confirm(&mut self, combo: &Trial, rerun: &Trial, steps: usize) -> Result<()> {
        self.total += 2;
        let pairs = confirm_repeats(&self.spec.search);
        self.confirmations += 1;
        if self.confirmations > 1 {
            if let Some(b) = &mut self.budget {
                b.expect(2 * pairs);
            }
        }
        // Each of the two is journaled once: a sweep killed between the two lines runs
        // only the one that is missing when resumed (it journaled the other twice).
        let mut recs: Vec<TrialRecord> = [rerun, combo]
            .into_iter()
            .filter(|t| {
                let done = self.done.contains(&(t.id.clone(), 0));
                self.position += usize::from(done);
                !done
            })
            .map(|t| fresh(t, 0, steps))
            .collect();
        if recs.is_empty() {
            return Ok(());
        }
        if self
            .budget
            .as_ref()
            .is_some_and(|b| b.spent_for(recs.len()))
        {
            self.left_out(format!("'{}'", combo.label));
            return Ok(());
        }
        // Alternating runs share one stretch of time; the timeline shows the plan's
        // trials only.
        self.observer.started(&combo.label);
        let sides: Vec<&'static str> = recs
            .iter()
            .map(|r| {
                if r.id == rerun.id {
                    "baseline"
                } else {
                    "change"
                }
            })
            .collect();
        // One budget of re-runs for the confirmation, as for one trial of the sweep: a
        // pair the hardware contaminated runs again, both sides, so that its verdict
        // rests on pairs measured on clean hardware (#28).
        let mut reruns = Reruns::new(&self.spec.search);
        // Pairs counted, and pairs run (re-runs included: the report's pair numbers).
        let (mut pair, mut ran_pairs) = (0, 0);
        while pair < pairs {
            if self
                .budget
                .as_ref()
                .is_some_and(|b| b.spent_for(recs.len()))
            {
                if self.confirm_ended(combo, &mut recs, pair, pairs) {
                    return Ok(());
                }
                break;
            }
            // AB, BA, AB, BA: a steady drift of the machine's speed favours the baseline
            // in half the pairs and the change in the other half, so it cancels in the
            // median instead of deciding it (#31). A pair run again keeps its order.
            let n = recs.len();
            let mut ran: Vec<(usize, RepeatHardware)> = Vec::with_capacity(n);
            let mut ok = true;
            let mut cut = None;
            for k in 0..n {
                let i = if pair % 2 == 0 { k } else { n - 1 - k };
                let rec = &mut recs[i];
                if rec.status != Status::Ok {
                    ok = false;
                    continue;
                }
                let at = self.sampler.repeat_start();
                let knobs = rec.knobs.clone();
                let began = std::time::Instant::now();
                let o = self.run_once(&knobs, steps);
                if o.cut {
                    cut = Some((began.elapsed().as_secs_f64(), o.cut_measured()));
                    break;
                }
                let rec = &mut recs[i];
                let run = o.repeat.map(clean);
                let hw = self
                    .sampler
                    .repeat_end(at, run.as_ref(), &self.spec.search)
                    .unwrap_or_default();
                let r = rec.repeats.len();
                if run.is_some() {
                    ran.push((i, hw));
                }
                rec.repeats.extend(run);
                rec.nodes.extend(o.node.map(|n| NodeRun { repeat: r, ..n }));
                if o.status != Status::Ok {
                    rec.status = o.status;
                    rec.error = o.error;
                    ok = false;
                }
            }
            if let Some((secs, measured)) = cut {
                // Half a pair is no pair: the side that ran in it is set aside too.
                for (i, _) in &ran {
                    let rec = &mut recs[*i];
                    rec.repeats.pop();
                    let kept = rec.repeats.len();
                    rec.nodes.retain(|n| n.repeat < kept);
                }
                let what = format!(
                    "'{}' (pair {} of {pairs}), {secs:.1} s in{measured}",
                    combo.label,
                    pair + 1
                );
                self.stopped(what, secs);
                if self.confirm_ended(combo, &mut recs, pair, pairs) {
                    return Ok(());
                }
                break;
            }
            let mut hws: Vec<(&str, &mut RepeatHardware)> =
                ran.iter_mut().map(|(i, h)| (sides[*i], h)).collect();
            let again = reruns.again_pair(&combo.label, ran_pairs, ok, &mut hws);
            ran_pairs += 1;
            // Index-aligned with the repeats: one entry per run that measured.
            for (i, hw) in ran {
                recs[i].hardware.push(hw);
            }
            if !again {
                pair += 1;
            }
        }
        for rec in &mut recs {
            no_empty_hardware(rec);
        }
        for rec in recs {
            self.journal
                .append(&stamped(&Record::Trial(rec.clone()), self.spec)?)?;
            self.done.insert((rec.id.clone(), rec.round));
            self.position += 1;
            self.observer.finished(&rec, self.position, self.total);
            self.records.push(rec);
        }
        Ok(())
    }

    /// The budget ended a confirmation after `pair` of its `pairs`: the pairs measured
    /// stand, with a note of how many; returns whether nothing was measured, and so
    /// nothing is to be journaled.
    fn confirm_ended(
        &mut self,
        combo: &Trial,
        recs: &mut [TrialRecord],
        pair: usize,
        pairs: usize,
    ) -> bool {
        if recs.iter().all(|r| r.repeats.is_empty()) {
            self.left_out(format!("'{}'", combo.label));
            return true;
        }
        let cut = crate::results::model::BUDGET_CUT;
        let note = format!("{cut} {pair} of {pairs} pairs");
        for rec in recs.iter_mut() {
            rec.error.get_or_insert_with(|| note.clone());
        }
        self.left_out(format!("the rest of '{}'", combo.label));
        false
    }

    /// Clears the dashboard's live file; returns what device sampling cost (percent of
    /// one core, sampling period), when it measured that.
    pub fn finish(&mut self) -> Option<(f64, std::time::Duration)> {
        if let Some(p) = &self.live_file {
            live::clear(p);
        }
        self.sampler.cost()
    }
}

#[cfg(test)]
mod tests {
    use crate::spec::Spec;

    fn spec(search: &str) -> crate::error::Result<Spec> {
        Spec::parse(
            &format!("[workload.python]\nrun = \"python t.py\"\n[search]\n{search}\n"),
            "c.toml",
        )
    }

    #[test]
    fn a_confirmation_makes_four_or_six_pairs_unless_the_spec_says() {
        let n = |s: &str| super::confirm_repeats(&spec(s).unwrap().search);
        assert_eq!(n(""), 4);
        assert_eq!(n("repeats = 4"), 4);
        assert_eq!(n("repeats = 5"), 6);
        assert_eq!(n("repeats = 9"), 6);
        assert_eq!(n("repeats = 9\nconfirm_repeats = 3"), 3);
        assert_eq!(n("repeats = 9\nconfirm_repeats = 2"), 2);
        for line in [
            "confirm_repeats = 0",
            "confirm_repeats = 11",
            "confirm_repeats = \"x\"",
        ] {
            let e = spec(line).unwrap_err().to_string();
            assert!(
                e.contains("search.confirm_repeats") && e.contains("c.toml:4:"),
                "{line}: {e}"
            );
        }
    }
}
