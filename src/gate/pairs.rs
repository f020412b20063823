//! Which configuration of the current report is which of the baseline's: the same
//! workload (steps and warm-up may differ: they change how many samples there are, not
//! what a step costs) and the same knobs. Labels are not used, since they depend on
//! each spec's baseline.

use std::collections::{HashMap, HashSet};

use crate::error::{Error, Result};
use crate::knobs::Knobs;
use crate::results::model::{Report, TrialReport};
use crate::spec::Workload;

/// One configuration both reports have.
#[derive(Clone, Debug)]
pub struct Pair<'a> {
    /// The current report's label.
    pub label: String,
    pub knobs: Knobs,
    pub base: &'a TrialReport,
    pub cur: &'a TrialReport,
}

#[derive(Clone, Debug)]
pub struct Matched<'a> {
    /// In the current report's order.
    pub pairs: Vec<Pair<'a>>,
    /// Labels of configurations only one side has.
    pub only_baseline: Vec<String>,
    pub only_current: Vec<String>,
}

/// The workload with what does not change a step's cost cleared. Batch size and device
/// count are knobs, compared per trial.
fn identity(w: &Workload) -> Workload {
    let mut w = w.clone();
    match &mut w {
        Workload::Engine(e) => {
            e.steps = 0;
            e.warmup = 0;
            e.batch_size = 0;
            e.devices = 0;
        }
        Workload::Command(c) => c.cwd = None,
    }
    w
}

fn describe(w: &Workload) -> String {
    match w {
        Workload::Engine(e) => format!(
            "model {}, dataset {}, device {}, threads {}, lr {}",
            e.model,
            e.dataset,
            e.device,
            e.threads.map_or("auto".into(), |t| t.to_string()),
            e.lr.map_or("default".into(), |l| l.to_string())
        ),
        Workload::Command(c) => format!("command `{}`", c.run),
    }
}

/// The trials' knobs as they differ from the defaults: labels would not do, since each
/// is relative to its own spec's baseline.
fn knob_list(ts: &[&TrialReport]) -> String {
    const SHOWN: usize = 6;
    if ts.is_empty() {
        return "no trials".into();
    }
    let mut s: Vec<String> = ts
        .iter()
        .take(SHOWN)
        .map(|t| match t.knobs.diff_label(&Knobs::default()) {
            d if d == "baseline" => "default knobs".into(),
            d => d,
        })
        .collect();
    if ts.len() > SHOWN {
        s.push(format!("and {} more", ts.len() - SHOWN));
    }
    s.join("; ")
}

/// Pairs up the configurations of `baseline` and `current` (each `(path, report)`).
/// Errors when the workloads differ or no configuration is in both.
pub fn match_reports<'a>(
    baseline: (&str, &'a Report),
    current: (&str, &'a Report),
) -> Result<Matched<'a>> {
    let ((bp, base), (cp, cur)) = (baseline, current);
    if identity(&base.spec.workload) != identity(&cur.spec.workload) {
        return Err(Error::Invalid(format!(
            "no matching configurations: the baseline {bp} measured {} but the current {cp} measured {}; \
             gate reports of the same workload",
            describe(&base.spec.workload),
            describe(&cur.spec.workload)
        )));
    }
    // Indexed once: a scan of the other report per trial was quadratic (100,000 trials, #27).
    let mut by_knobs: HashMap<&Knobs, &TrialReport> = HashMap::new();
    for b in &base.trials {
        by_knobs.entry(&b.knobs).or_insert(b);
    }
    let current: HashSet<&Knobs> = cur.trials.iter().map(|c| &c.knobs).collect();
    let mut pairs = Vec::new();
    let mut only_current = Vec::new();
    for c in &cur.trials {
        match by_knobs.get(&c.knobs).copied() {
            Some(b) => pairs.push(Pair {
                label: c.label.clone(),
                knobs: c.knobs.clone(),
                base: b,
                cur: c,
            }),
            None => only_current.push(c),
        }
    }
    let only_baseline: Vec<&TrialReport> = base
        .trials
        .iter()
        .filter(|b| !current.contains(&b.knobs))
        .collect();
    if pairs.is_empty() {
        return Err(Error::Invalid(format!(
            "no matching configurations: no trial of the current {cp} has the knobs of a trial of the baseline {bp} \
             (baseline: {}; current: {}); gate reports of the same sweep spec",
            knob_list(&only_baseline),
            knob_list(&only_current),
        )));
    }
    Ok(Matched {
        pairs,
        only_baseline: only_baseline.iter().map(|t| t.label.clone()).collect(),
        only_current: only_current.iter().map(|t| t.label.clone()).collect(),
    })
}
