//! How a local sweep orders a round's runs: every trial's first repeat in plan order,
//! then every trial's second, and so on, with the baseline run again through the plan
//! (#31). A cluster takes a round at once, in the same order (`Sweep::run_batch`).

use std::time::Instant;

use super::{fresh, no_empty_hardware, Sweep, JOURNAL_REPEATS_FROM};
use crate::error::Result;
use crate::knobs::Knobs;
use crate::results::baselines::{again_id, own_value, EVERY};
use crate::results::model::TimelineSample;
use crate::results::record::{clean, NodeRun, Record, RepeatRecord, Status, TrialRecord};
use crate::runner::hardware::Reruns;
use crate::runner::resume::stamped;
use crate::spec::plan::{self, Trial};

/// A trial of the round being run, as the round's passes reach it.
enum Slot {
    /// Not reached yet: the round's first pass decides whether it runs.
    Waiting(Trial),
    Open(Box<Running>),
    /// Journaled, reused from the journal, or not run (same as the baseline).
    Closed,
}

/// Where a repeat's run left its trial.
enum After {
    /// More repeats to run.
    More,
    /// Its last repeat done, or a failure, which is not repeated.
    Ended,
    /// The budget ended while it ran, and the run was stopped: which, and how long in.
    Cut(String, f64),
}

/// A trial whose repeats are under way.
struct Running {
    trial: Trial,
    rec: TrialRecord,
    reruns: Reruns,
    /// Repeats counted so far (the journal's included): the index of the next one.
    next: usize,
    /// Seconds its own runs took so far: its timeline lays them end to end.
    elapsed_s: f64,
    /// Its 1-based place in the sweep, for a dashboard's "3/12".
    index: usize,
}

impl Sweep<'_> {
    /// `candidates` in plan order with the baseline run again after every `EVERY` other
    /// trials when more follow, so no trial is judged against a baseline run many minutes
    /// away from it (#31). Each rerun's id is fixed by its place in the plan, so a resumed
    /// sweep reuses it instead of running another. Only in the final round, and only when
    /// the baseline is among the candidates.
    pub(super) fn with_baseline_again(
        &self,
        candidates: &[Trial],
        final_round: bool,
    ) -> Vec<Trial> {
        let again = &self.spec.search.baseline;
        let base_id = plan::trial_id(again, again);
        let interleave = final_round && candidates.iter().any(|t| t.id == base_id);
        let mut order = Vec::with_capacity(candidates.len());
        let (mut since, mut k) = (0, 0);
        for (i, t) in candidates.iter().enumerate() {
            order.push(t.clone());
            if !interleave || t.id == base_id {
                continue;
            }
            since += 1;
            let more = candidates[i + 1..].iter().any(|c| c.id != base_id);
            if since == EVERY && more {
                k += 1;
                order.push(Trial {
                    id: again_id(k, &base_id),
                    label: format!("baseline (run {} of the sweep)", k + 1),
                    knobs: again.clone(),
                });
                since = 0;
            }
        }
        order
    }

    /// Runs one round's trials (`order`, the interleaved baseline runs included) repeat by
    /// repeat across the round: every trial's first repeat in plan order, then every
    /// trial's second, and so on (baseline, A, B, C, baseline, A, B, C, ...). Run back to
    /// back, a trial's repeats shared one stretch of time, and a busy minute on a shared
    /// machine landed on all of them (whole trials measured 300 or 1000 samples/s for the
    /// same configuration); spread over the round, each trial sees the machine's busy and
    /// quiet minutes alike, and its repeat noise says so (#31). A trial is journaled when
    /// its last repeat ends, or at once when a repeat fails (a failure is not repeated).
    pub(super) fn run_round(
        &mut self,
        order: Vec<Trial>,
        round: usize,
        steps: usize,
        repeats: usize,
    ) -> Result<()> {
        let reps = repeats.max(1);
        let before = self.position;
        let mut slots: Vec<Slot> = order.into_iter().map(Slot::Waiting).collect();
        for pass in 0..reps {
            if pass > 0 && slots.iter().any(|s| matches!(s, Slot::Open(_))) {
                self.observer.note(&format!(
                    "repeat {} of {reps}: every trial once more, in plan order (repeats are \
                     spread over the sweep so that a busy minute does not fall on all of one \
                     trial's runs)",
                    pass + 1
                ));
            }
            for i in 0..slots.len() {
                if matches!(slots[i], Slot::Waiting(_)) {
                    if let Slot::Waiting(t) = std::mem::replace(&mut slots[i], Slot::Closed) {
                        slots[i] = self.open_slot(t, round, steps, reps, before + i + 1, &slots)?;
                    }
                }
                let Slot::Open(open) = &mut slots[i] else {
                    continue;
                };
                // A trial resumed with repeats from the journal waits for its pass.
                if open.next > pass {
                    continue;
                }
                if open.next < reps && self.out_of_time() {
                    return self.out_of_time_in(slots, reps);
                }
                let after = if open.next >= reps {
                    After::Ended
                } else {
                    self.run_repeat(open, round, steps, reps)?
                };
                match after {
                    After::More => {}
                    After::Ended => {
                        if let Slot::Open(open) = std::mem::replace(&mut slots[i], Slot::Closed) {
                            let mut rec = open.rec;
                            no_empty_hardware(&mut rec);
                            self.finish_trial(rec)?;
                        }
                    }
                    After::Cut(what, secs) => {
                        // The run counts among those not run; the trial's earlier repeats
                        // stand, as for any trial the budget ended.
                        self.stopped(what, secs);
                        return self.out_of_time_in(slots, reps);
                    }
                }
            }
        }
        Ok(())
    }

    /// The budget ran out in the middle of a round: what was not run is noted, and each
    /// trial with repeats measured is kept for the report with a note, but not journaled,
    /// so `--resume` runs its other repeats (its finished ones are in the journal).
    fn out_of_time_in(&mut self, slots: Vec<Slot>, reps: usize) -> Result<()> {
        let mut runs = 0;
        for slot in slots {
            match slot {
                Slot::Waiting(_) => runs += reps,
                Slot::Open(open) if open.next < reps => {
                    runs += reps - open.next;
                    if !open.rec.repeats.is_empty() {
                        self.cut_short(open.rec, reps);
                    }
                }
                Slot::Open(_) | Slot::Closed => {}
            }
        }
        self.not_run(runs);
        Ok(())
    }

    /// A trial the budget ended after some of its `reps` repeats: kept for the report
    /// with a note, not journaled, so `--resume` runs its other repeats.
    pub(super) fn cut_short(&mut self, mut rec: TrialRecord, reps: usize) {
        let cut = format!(
            "the time budget ended it after {} of {reps} repeats",
            rec.repeats.len()
        );
        // Beside what its repeats said (a warm-up the budget cut short), not over it.
        rec.error = Some(match rec.error.take() {
            Some(said) if !said.is_empty() => format!("{said}; {cut}"),
            _ => cut,
        });
        no_empty_hardware(&mut rec);
        self.position += 1;
        self.observer.finished(&rec, self.position, self.total);
        self.records.push(rec);
    }

    /// Notes that `runs` runs of the plan did not start for lack of time.
    pub(super) fn not_run(&mut self, runs: usize) {
        if runs > 0 {
            let s = if runs == 1 { "" } else { "s" };
            self.left_out(format!("{runs} run{s} of the plan"));
        }
    }

    /// Why `trial` would measure nothing new, if so. A trial is the baseline in all but
    /// name when every knob it changes is already what the script does by itself (the
    /// baseline's `script_knobs`, read by the hooks) and no `[params]` entry differs. A
    /// trial that forces the spec's baseline value over the script's (`Knobs::forced`)
    /// measures something only where the hooks read a value of the script's and it is
    /// another: a script without a DataLoader has no `num_workers` to force. The
    /// baseline's first repeat has run by then, journaled or still in `slots`; without an
    /// ok baseline every trial but a forced one runs.
    fn nothing_new(&self, trial: &Trial, slots: &[Slot]) -> Option<&'static str> {
        let base = &self.spec.search.baseline;
        let base_id = plan::trial_id(base, base);
        if trial.id == base_id || trial.knobs.params != base.params {
            return None;
        }
        let running = slots.iter().find_map(|s| match s {
            Slot::Open(o) if o.rec.id == base_id && !o.rec.repeats.is_empty() => Some(&o.rec),
            _ => None,
        });
        let Some(b) = self
            .records
            .iter()
            .rev()
            .find(|r| r.id == base_id)
            .or(running)
            .filter(|r| r.status == Status::Ok)
        else {
            // A forced trial is the spec's value against the script's own, which only an
            // ok baseline read; without one it would only add a run to a failing sweep.
            return (!trial.knobs.forced.is_empty()).then_some(
                "not run: the baseline measured nothing, so there is no script's own value \
                 to set it against",
            );
        };
        // Where tune set the spec's baseline value over the script's, the script's own
        // value is not what the baseline ran: a trial of it measures something new.
        let own = |knob: &str| {
            b.repeats
                .iter()
                .find_map(|r| own_value(base, &r.script_knobs, knob).cloned())
        };
        if trial.knobs.forced.iter().any(|n| own(n).is_none()) {
            return Some(
                "not run: the hooks read no value of your script's for it (the job may not \
                 use it), so the baseline ran PyTorch's default",
            );
        }
        let changed: Vec<&str> = Knobs::NAMES
            .iter()
            .copied()
            .filter(|n| trial.knobs.differs(base, n))
            .collect();
        (!changed.is_empty() && changed.iter().all(|n| own(n) == trial.knobs.get(n)))
            .then_some("not run, same as the baseline: your script already does this")
    }

    /// A trial's slot in its round: closed when the journal already has it or it would
    /// measure the baseline again, else open with the repeats the journal holds.
    fn open_slot(
        &mut self,
        trial: Trial,
        round: usize,
        steps: usize,
        reps: usize,
        index: usize,
        slots: &[Slot],
    ) -> Result<Slot> {
        let key = (trial.id.clone(), round);
        if self.done.contains(&key)
            && self
                .records
                .iter()
                .any(|r| r.id == trial.id && r.round == round)
        {
            self.position += 1;
            return Ok(Slot::Closed);
        }
        if let Some(why) = self.nothing_new(&trial, slots) {
            // Nothing is journaled: a resumed sweep decides the same from the baseline's
            // record. The report says it in its notes (`advisor::screen`).
            self.position += 1;
            eprintln!("[{}/{}] {}: {why}", self.position, self.total, trial.label);
            return Ok(Slot::Closed);
        }
        let mut rec = fresh(&trial, round, steps);
        let earlier = self.partial.remove(&key).unwrap_or_default();
        let first = earlier.len().min(reps);
        if first > 0 {
            eprintln!(
                "resuming '{}' at repeat {} of {reps}: {first} finished repeat(s) are in the journal",
                trial.label,
                first + 1
            );
        }
        for done in earlier.into_iter().take(first) {
            rec.repeats.push(done.run);
            rec.nodes.extend(done.node);
            rec.hardware.push(done.hardware.unwrap_or_default());
        }
        Ok(Slot::Open(Box::new(Running {
            reruns: Reruns::new(&self.spec.search),
            trial,
            rec,
            next: first,
            elapsed_s: 0.0,
            index,
        })))
    }

    /// Runs the next repeat of `slot` (again at once while the hardware contaminates it
    /// and the budget allows); returns where that left the trial.
    fn run_repeat(
        &mut self,
        slot: &mut Running,
        round: usize,
        steps: usize,
        reps: usize,
    ) -> Result<After> {
        loop {
            self.check_cancel(&slot.trial.label)?;
            let shown = if reps > 1 {
                format!("{} (repeat {} of {reps})", slot.trial.label, slot.next + 1)
            } else {
                slot.trial.label.clone()
            };
            self.observer.started(&shown);
            self.show_live(&slot.trial, round, slot.next + 1, reps, slot.index);
            let began = Instant::now();
            let start_ms = self.sampler.now_ms();
            let at = self.sampler.repeat_start();
            let o = self.run_once(&slot.trial.knobs, steps);
            self.check_cancel(&slot.trial.label)?;
            if o.cut {
                let secs = began.elapsed().as_secs_f64();
                return Ok(After::Cut(
                    format!("'{shown}', {secs:.1} s in{}", o.cut_measured()),
                    secs,
                ));
            }
            let run = o.repeat.map(clean);
            let mut hw = self
                .sampler
                .repeat_end(at, run.as_ref(), &self.spec.search)
                .unwrap_or_default();
            // The trial's own samples, its repeats laid end to end: the round's other
            // trials ran in between.
            let offset = slot.elapsed_s;
            slot.rec
                .timeline
                .extend(
                    self.sampler
                        .since(start_ms)
                        .into_iter()
                        .map(|s| TimelineSample {
                            t_s: s.t_s + offset,
                            ..s
                        }),
                );
            slot.elapsed_s += began.elapsed().as_secs_f64();
            let ok = run.is_some() && o.status == Status::Ok;
            let again = slot.reruns.again(&slot.trial.label, slot.next, ok, &mut hw);
            let rec = &mut slot.rec;
            let node = o.node.map(|n| NodeRun {
                repeat: rec.repeats.len(),
                ..n
            });
            let worth = began.elapsed() >= JOURNAL_REPEATS_FROM && !again;
            if let (Some(run), Status::Ok, true, true) =
                (&run, o.status, slot.next + 1 < reps, worth)
            {
                // Durable before the next run starts: a kill there costs only that one.
                let done = RepeatRecord {
                    id: slot.trial.id.clone(),
                    round,
                    index: slot.next,
                    run: run.clone(),
                    node: node.clone(),
                    hardware: Some(hw.clone()),
                };
                self.journal
                    .append(&stamped(&Record::Repeat(done), self.spec)?)?;
            }
            if run.is_some() {
                rec.hardware.push(hw);
            }
            rec.repeats.extend(run);
            rec.nodes.extend(node);
            if again {
                continue;
            }
            slot.next += 1;
            if o.status != Status::Ok {
                // Failures here are deterministic far more often than not (an unsupported
                // knob, a crash): repeating them only costs time.
                rec.status = o.status;
                rec.error = o.error;
                return Ok(After::Ended);
            }
            if o.error.is_some() {
                // An ok run's text is a note ("stopped by tune after 30 measured steps").
                rec.error = o.error;
            }
            return Ok(if slot.next >= reps {
                After::Ended
            } else {
                After::More
            });
        }
    }
}
