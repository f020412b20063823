//! `[search] budget_s`: the whole sweep in bounded time (#31). A real script's sweep is
//! its runs' start-up, warm-up and measuring, times the runs; on a busy 2-core machine
//! one LSTM script's median step took 6.7 s, and its 2-knob sweep passed 25 minutes
//! before the confirmation began (`lstm_text` in the closing note's busy table). With a
//! budget, each Python run measures a share of the time that is left (its window's
//! `seconds`), once the time is spent no run starts, and a run still going when it ends
//! is stopped (`Search::cut_at`): the report holds what was measured and says what was
//! not run.

use std::time::{Duration, Instant};

use crate::results::model::BudgetUse;
use crate::spec::{Spec, Workload};

/// The measuring a run is given at the least, in seconds: below it, a window holds too
/// few steps of any job to tell repeats apart.
const MIN_SHARE_S: f64 = 2.0;

/// The runner's clock against the budget.
pub(crate) struct Budget {
    budget_s: u64,
    began: Instant,
    deadline: Instant,
    /// Runs the sweep expects to make in all, and has made.
    planned: usize,
    made: usize,
    /// Each run's wall time beyond its measured steps: start-up, warm-up, shutdown.
    overheads: Vec<f64>,
    /// What was not run, in the order the sweep gave up on it.
    not_run: Vec<String>,
    /// The run stopped when the budget ended, if one was, and the seconds it had run.
    stopped: Option<(String, f64)>,
}

impl Budget {
    /// A clock for `spec`'s budget, if it has one; `planned` is the runs the plan and one
    /// confirmation will make.
    pub(crate) fn start(spec: &Spec, planned: usize) -> Option<Budget> {
        let budget_s = spec.search.budget_s?;
        let began = Instant::now();
        Some(Budget {
            budget_s,
            began,
            deadline: began + Duration::from_secs(budget_s),
            planned: planned.max(1),
            made: 0,
            overheads: Vec::new(),
            not_run: Vec::new(),
            stopped: None,
        })
    }

    /// The median overhead of the runs so far (0 before the first).
    fn overhead_s(&self) -> f64 {
        if self.overheads.is_empty() {
            0.0
        } else {
            crate::stats::median(&self.overheads)
        }
    }

    /// When the budget ends: a run still going then is stopped (`Search::cut_at`).
    pub(crate) fn deadline(&self) -> Instant {
        self.deadline
    }

    fn left_s(&self) -> f64 {
        self.deadline
            .saturating_duration_since(Instant::now())
            .as_secs_f64()
    }

    /// Whether a run started now could not finish within the budget: less time is left
    /// than the runs so far spent outside their measuring, plus the least measuring.
    pub(crate) fn spent(&self) -> bool {
        self.spent_for(1)
    }

    /// Whether `runs` runs started now could not finish within the budget (a
    /// confirmation's pair is two): a busy machine's LSTM sweep, checking for one run
    /// before each pair, passed its 600 s by 72 s on the pair's second run.
    pub(crate) fn spent_for(&self, runs: usize) -> bool {
        self.left_s() < runs as f64 * (self.overhead_s() + MIN_SHARE_S)
    }

    /// Seconds the next run may measure: its share of what is left, less the overhead
    /// the runs so far showed.
    pub(crate) fn share_s(&self) -> f64 {
        let runs_left = self.planned.saturating_sub(self.made).max(1) as f64;
        (self.left_s() / runs_left - self.overhead_s()).max(MIN_SHARE_S)
    }

    /// More runs than the plan counted (a second confirmation, settling pairs).
    pub(crate) fn expect(&mut self, runs: usize) {
        self.planned += runs;
    }

    /// A run ended after `wall`, having measured `measured_s` of it.
    pub(crate) fn ran(&mut self, wall: Duration, measured_s: f64) {
        self.made += 1;
        self.overheads
            .push((wall.as_secs_f64() - measured_s).max(0.0));
    }

    /// `what` was not run for lack of time (said once).
    pub(crate) fn left_out(&mut self, what: impl Into<String>) {
        let what = what.into();
        if !self.not_run.contains(&what) {
            self.not_run.push(what);
        }
    }

    /// `what` was under way when the budget ended, `secs` in, and was stopped.
    pub(crate) fn stopped(&mut self, what: String, secs: f64) {
        self.stopped.get_or_insert((what, secs));
    }

    /// Moves the deadline to `d` from now: a test's way to spend the budget.
    #[cfg(test)]
    pub(crate) fn end_in(&mut self, d: Duration) {
        self.deadline = Instant::now() + d;
    }

    pub(crate) fn usage(&self) -> BudgetUse {
        BudgetUse {
            budget_s: self.budget_s,
            used_s: self.began.elapsed().as_secs_f64(),
            not_run: self.not_run.clone(),
            stopped: self.stopped.as_ref().map(|s| s.0.clone()),
            stopped_s: self.stopped.as_ref().map_or(0.0, |s| s.1),
        }
    }
}

/// `spec` as one run under the budget sees it: stopped at `cut_at`, the budget's end,
/// whatever the workload; and a Python window that would measure longer than `share_s`
/// capped at it, its warm-up at half that (`WARMUP_SHARE`). Only the run sees it: the
/// journal is stamped with the spec's own fingerprint, so a resumed sweep with another
/// budget still matches.
pub(crate) fn capped(spec: &Spec, share_s: f64, cut_at: Instant) -> Spec {
    let mut out = spec.clone();
    out.search.cut_at = Some(cut_at);
    if let Workload::Command(c) = &mut out.workload {
        if let Some(w) = &mut c.window {
            if w.seconds.is_none_or(|s| s > share_s) {
                w.seconds = Some(share_s);
                // The window's least measuring must not outlast its share.
                w.min_seconds = w.min_seconds.map(|m| m.min(share_s));
            }
            w.warmup_max_s = Some(WARMUP_SHARE * w.seconds.unwrap_or(share_s));
        }
    }
    out
}

/// The warm-up a run may take under a budget, as a share of its measuring. On a busy
/// 2-core machine an LSTM's 5 warm-up steps took 4m35s of an 11-minute sweep, as long as
/// all its measuring (the closing table of #31, `lstm_text`); "until steady" could wait
/// 200 steps. Half the measuring keeps two thirds of a run's steps measured; the
/// analysis still sets aside slow steps left in the window (`stats::rounds`).
const WARMUP_SHARE: f64 = 0.5;

/// Seconds a run measured: its steps' times (seconds each).
pub(crate) fn measured_s(run: Option<&crate::results::record::Repeat>) -> f64 {
    run.map_or(0.0, |r| r.step_times.iter().sum::<f64>())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(extra: &str) -> Spec {
        Spec::parse(
            &format!(
                "[workload.python]\nrun = \"python t.py\"\n{extra}[knobs]\nnum_workers = [0, 2]\n[search]\nbudget_s = 600\n"
            ),
            "x.toml",
        )
        .expect("spec")
    }

    #[test]
    fn a_run_measures_its_share_of_what_is_left_less_the_overhead_seen() {
        let s = spec("");
        let mut b = Budget::start(&s, 10).expect("a budget");
        let first = b.share_s();
        assert!((55.0..=60.0).contains(&first), "{first}");
        // A run of 50 s that measured 30: 20 s of overhead is taken off the next share.
        b.ran(Duration::from_secs(50), 30.0);
        let next = b.share_s();
        assert!((44.0..=47.0).contains(&next), "{next}");
        assert!(!b.spent());
        // Each run needs the overhead seen (20 s) and the least share: 30 do not fit
        // 600 s, 2 (a confirmation's pair) do.
        assert!(!b.spent_for(2));
        assert!(b.spent_for(30));
        // Far more runs than time: the least share, not nothing.
        b.expect(10_000);
        assert_eq!(b.share_s(), MIN_SHARE_S);
    }

    #[test]
    fn the_python_window_and_its_warm_up_are_capped_and_every_run_stopped_at_the_end() {
        let s = spec("");
        let at = Instant::now();
        let c = capped(&s, 12.5, at);
        assert_eq!(c.search.cut_at, Some(at));
        let Workload::Command(w) = &c.workload else {
            panic!("a command workload")
        };
        let w = w.window.as_ref().expect("a window");
        assert_eq!(w.seconds, Some(12.5));
        assert_eq!(w.warmup_max_s, Some(6.25));
        // A spec's own shorter window is kept, its warm-up capped at half of it.
        let own = spec("seconds = 5\n");
        let c = capped(&own, 12.5, at);
        let Workload::Command(w) = &c.workload else {
            panic!("a command workload")
        };
        let w = w.window.as_ref().expect("a window");
        assert_eq!((w.seconds, w.warmup_max_s), (Some(5.0), Some(2.5)));
        // The spec itself never carries the cap: the journal's fingerprint is the spec's.
        assert!(!serde_json::to_string(w).unwrap().contains("warmup_max"));
        // Engine workloads have no window to cap, but are stopped at the budget's end too.
        let e = Spec::parse(
            "[workload]\nmodel = \"mlp\"\ndataset = \"synthetic\"\n[knobs]\nnum_workers = [0]\n",
            "x.toml",
        )
        .expect("spec");
        let c = capped(&e, 1.0, at);
        assert_eq!((&c.workload, c.search.cut_at), (&e.workload, Some(at)));
    }

    #[test]
    fn the_sentence_says_what_did_not_run_and_how_to_go_on() {
        let mut u = BudgetUse {
            budget_s: 600,
            used_s: 612.0,
            not_run: Vec::new(),
            stopped: None,
            stopped_s: 0.0,
        };
        assert!(u.sentence().contains("within"), "{}", u.sentence());
        u.not_run.push("the confirmation".into());
        let t = u.sentence();
        assert!(
            t.contains("the confirmation did not run") && t.contains("--resume"),
            "{t}"
        );
        u.stopped = Some("'num_workers=2' (repeat 2 of 3), 41.3 s in".into());
        let t = u.sentence();
        assert!(
            t.contains(
                "The run under way then, 'num_workers=2' (repeat 2 of 3), 41.3 s in, was stopped"
            ),
            "{t}"
        );
    }
}
