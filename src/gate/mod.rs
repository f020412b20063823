//! `tune gate`: is the current report slower than the baseline, beyond noise? `pairs`
//! matches the two reports' configurations by workload and knobs, `verdict` judges one
//! metric of one pair (bootstrap interval of the ratio, one-sided Mann-Whitney U on the
//! step times, a threshold widened to the measured noise floor), `render` writes the
//! table, markdown, JUnit XML and JSON; `confirm` names the reports' confirmations the
//! hardware contaminated. The command itself is `commands::gate`.

pub(crate) mod confirm;
pub(crate) mod pairs;
pub(crate) mod render;
pub(crate) mod verdict;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::knobs::Knobs;
use crate::results::model::{Environment, NoiseFloor, Report};
use crate::results::record::Status;
use crate::spec::plan::knobs_hash;
pub use confirm::ConfirmationCheck;
pub use verdict::{compare, Metric, Outcome, Policy, Side, Verdict};

/// Where one side of the comparison came from, for the reader of the verdict.
#[derive(Clone, Debug, Serialize)]
pub struct Source {
    pub path: String,
    pub spec: String,
    pub environment: Environment,
    pub noise_floor: Option<NoiseFloor>,
}

impl Source {
    pub fn new(path: &str, r: &Report) -> Source {
        Source {
            path: path.to_string(),
            spec: r.spec.name.clone(),
            environment: r.environment.clone(),
            noise_floor: r.noise_floor,
        }
    }
}

/// One metric of one configuration.
#[derive(Clone, Debug, Serialize)]
pub struct Check {
    /// The configuration's label in the current report.
    pub config: String,
    pub knobs: Knobs,
    pub metric: Metric,
    pub verdict: Verdict,
    /// None when the pair could not be compared (a failed trial, no data).
    pub outcome: Option<Outcome>,
    /// The verdict in one sentence.
    pub reason: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Overall {
    Pass,
    Regression,
}

/// Everything `tune gate` found; serialised as its `--json` output.
#[derive(Clone, Debug, Serialize)]
pub struct GateReport {
    pub verdict: Overall,
    pub metrics: Vec<Metric>,
    pub max_regression: f64,
    pub alpha: f64,
    /// The significance test, named for the reader.
    pub test: String,
    pub baseline: Source,
    pub current: Source,
    pub checks: Vec<Check>,
    /// The reports' confirmations whose pairs the hardware contaminated (#28): they fail
    /// the gate under `--fail-on-contaminated` when no clean pair remained.
    pub confirmations: Vec<ConfirmationCheck>,
    /// Configurations only one report has; they are not judged.
    pub only_in_baseline: Vec<String>,
    pub only_in_current: Vec<String>,
    pub notes: Vec<String>,
}

impl GateReport {
    /// Checks that fail the gate: regressions, configurations that no longer run, and
    /// (under `--fail-on-contaminated`) figures or confirmations resting on contaminated
    /// runs.
    pub fn failures(&self) -> usize {
        self.checks.iter().filter(|c| c.verdict.fails()).count()
            + self
                .confirmations
                .iter()
                .filter(|c| c.verdict.fails())
                .count()
    }

    /// Every check made: each metric of each configuration, and each contaminated
    /// confirmation.
    pub fn total(&self) -> usize {
        self.checks.len() + self.confirmations.len()
    }

    /// 0 pass, 1 regression (the CLI's contract).
    pub fn exit_code(&self) -> i32 {
        match self.verdict {
            Overall::Pass => 0,
            Overall::Regression => 1,
        }
    }
}

pub const TEST_NAME: &str =
    "one-sided Mann-Whitney U on steady-state step times (peak_bytes: repeat ranges must not overlap)";

fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

/// Judges every metric of every configuration both reports measured. Errors (exit 2)
/// when nothing can be matched, or when every check had to be skipped.
pub fn gate(
    baseline: (&str, &Report),
    current: (&str, &Report),
    metrics: &[Metric],
    policy: &Policy,
) -> Result<GateReport> {
    let matched = pairs::match_reports(baseline, current)?;
    let (base, cur) = (baseline.1, current.1);
    let mut checks = Vec::new();
    for p in &matched.pairs {
        for &metric in metrics {
            checks.push(check(p, metric, base, cur, policy));
        }
    }
    let mut notes = Vec::new();
    for (name, r) in [("baseline", base), ("current", cur)] {
        notes.push(match &r.noise_floor {
            Some(n) => format!(
                "{name} noise floor: identical repeats differed by {} (median over {} configuration(s) with {}+ repeats, max {}); \
                 step-time thresholds below it are widened to it",
                pct(n.median),
                n.trials,
                n.repeats,
                pct(n.max)
            ),
            None => format!(
                "{name} has no noise floor (no configuration with two or more successful repeats): \
                 run its sweep with repeats >= 2 so the gate can allow for run-to-run noise"
            ),
        });
    }
    let widened = checks
        .iter()
        .filter_map(|c| c.outcome.as_ref())
        .filter(|o| o.threshold > policy.max_regression)
        .count();
    if widened > 0 {
        notes.push(format!(
            "the {} threshold was widened to the noise floor in {widened} of {} check(s): \
             a smaller change there cannot be told from run-to-run noise",
            pct(policy.max_regression),
            checks.len()
        ));
    }
    let resting = checks
        .iter()
        .filter(|c| c.reason.contains("rest on contaminated repeats"))
        .count();
    if resting > 0 {
        notes.push(format!(
            "{resting} check(s) compare figures that rest on repeats the hardware contaminated \
             (throttling, another process on the GPU, steal time): {}",
            if policy.fail_on_contaminated {
                "they fail (--fail-on-contaminated)"
            } else {
                "pass --fail-on-contaminated to fail on them"
            }
        ));
    }
    let confirmations = confirm::confirmations(base, cur, policy);
    let resting = confirmations.iter().filter(|c| c.in_figures).count();
    if resting > 0 {
        notes.push(format!(
            "{resting} confirmation(s) of a recommendation rest on runs the hardware contaminated \
             (no clean pair remained): {}",
            if policy.fail_on_contaminated {
                "they fail (--fail-on-contaminated)"
            } else {
                "pass --fail-on-contaminated to fail on them"
            }
        ));
    }
    let (eb, ec) = (&base.environment, &cur.environment);
    if eb.host != ec.host || eb.cpu_model != ec.cpu_model || eb.cores != ec.cores {
        notes.push(format!(
            "the reports come from different machines (baseline: {} cores of {} on {}; current: {} cores of {} on {}): \
             the differences include the machine",
            eb.cores, eb.cpu_model, eb.host, ec.cores, ec.cpu_model, ec.host
        ));
    }
    // A gate that compared nothing has shown nothing: passing it would let any
    // regression through (a baseline whose trials all crashed, a metric neither report
    // measured).
    if checks.iter().all(|c| c.verdict == Verdict::Skipped) {
        let why = checks
            .first()
            .map_or("no configuration in common".to_string(), |c| {
                format!("{} {}: {}", c.config, c.metric.name(), c.reason)
            });
        return Err(Error::Invalid(format!(
            "tune gate compared nothing: all {} check(s) were skipped (first: {why}); \
             gate against a baseline whose trials completed and measured the chosen --metric",
            checks.len()
        )));
    }
    let verdict = if checks.iter().any(|c| c.verdict.fails())
        || confirmations.iter().any(|c| c.verdict.fails())
    {
        Overall::Regression
    } else {
        Overall::Pass
    };
    Ok(GateReport {
        verdict,
        metrics: metrics.to_vec(),
        max_regression: policy.max_regression,
        alpha: policy.alpha,
        test: TEST_NAME.into(),
        baseline: Source::new(baseline.0, base),
        current: Source::new(current.0, cur),
        checks,
        confirmations,
        only_in_baseline: matched.only_baseline,
        only_in_current: matched.only_current,
        notes,
    })
}

fn check(
    p: &pairs::Pair<'_>,
    metric: Metric,
    base: &Report,
    cur: &Report,
    policy: &Policy,
) -> Check {
    let mut c = Check {
        config: p.label.clone(),
        knobs: p.knobs.clone(),
        metric,
        verdict: Verdict::Skipped,
        outcome: None,
        reason: String::new(),
    };
    if p.cur.status != Status::Ok {
        c.verdict = Verdict::Failed;
        c.reason = format!(
            "the current run of this configuration ended as {}{}; the baseline's completed",
            p.cur.status.as_str(),
            p.cur
                .error
                .as_deref()
                .map(|e| format!(" ({})", e.lines().next().unwrap_or(e)))
                .unwrap_or_default()
        );
        if p.base.status != Status::Ok {
            c.verdict = Verdict::Skipped;
            c.reason = format!(
                "neither report measured it (baseline {}, current {})",
                p.base.status.as_str(),
                p.cur.status.as_str()
            );
        }
        return c;
    }
    if p.base.status != Status::Ok {
        c.reason = format!(
            "no baseline to compare with: the baseline's run ended as {}",
            p.base.status.as_str()
        );
        return c;
    }
    let bs = Side::from_trial(p.base, base.noise_floor.as_ref());
    let cs = Side::from_trial(p.cur, cur.noise_floor.as_ref());
    // Seeded by configuration and metric, so re-running the gate gives the same interval.
    let seed = knobs_hash(&p.knobs) ^ metric as u64;
    match compare(metric, &bs, &cs, policy, seed) {
        Ok(o) => {
            c.verdict = o.verdict;
            c.reason = o.explain(metric, policy);
            c.outcome = Some(o);
        }
        Err(why) => c.reason = why,
    }
    contaminated(&mut c, p, policy);
    c
}

/// A verdict that rests on repeats the hardware contaminated says so, and fails under
/// `--fail-on-contaminated`; repeats left out (a clean one remained) are only named.
fn contaminated(c: &mut Check, p: &pairs::Pair<'_>, policy: &Policy) {
    let mut said = Vec::new();
    for (side, t) in [("baseline", p.base), ("current", p.cur)] {
        let Some(x) = &t.contamination else { continue };
        if x.in_figures {
            said.push(format!(
                "the {side}'s figures rest on contaminated repeats ({})",
                x.note
            ));
        } else {
            said.push(format!(
                "the {side} left {} contaminated repeat(s) out",
                x.repeats.len()
            ));
        }
    }
    if said.is_empty() {
        return;
    }
    let resting = [p.base, p.cur]
        .iter()
        .any(|t| t.contamination.as_ref().is_some_and(|x| x.in_figures));
    c.reason = format!("{}; {}", c.reason, said.join("; "));
    if resting && policy.fail_on_contaminated && c.verdict != Verdict::Skipped {
        c.verdict = Verdict::Failed;
        c.reason = format!("CONTAMINATED (--fail-on-contaminated): {}", c.reason);
    }
}
