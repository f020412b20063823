//! Turning journal records into a `Report`: steady-state detection, bootstrap intervals
//! and ratios against the baseline. Pure apart from reading the environment.

use std::collections::BTreeMap;

use super::baselines::{Runs, AGAIN_PREFIX};
use super::model::{
    Ci, Contamination, Environment, NoiseFloor, Partial, Ratio, Report, TimelineSample,
    TrialReport, TrialSpan, FOREIGN_CPU_PCT, MIN_PARTIAL_STEADY, SCHEMA_VERSION,
};
use crate::engine::parallel::DeviceSummary;
use crate::engine::train::Phases;
use crate::knobs::Knobs;
use crate::results::figures::{figures_of, pairs_of, per_sample};
use crate::results::record::{Repeat, Status, TrialRecord};
use crate::spec::plan::{self, knobs_hash};
use crate::spec::Spec;
use crate::stats::{self, Bootstrap, Throughput};

/// Journal ids of confirmation trials start with this; they are reported apart from the
/// plan's trials.
pub const CONFIRM_PREFIX: &str = "confirm:";

/// The steady-state step times of every repeat, pooled, and the samples per step.
fn steady(rec: &TrialRecord) -> (Vec<f64>, f64) {
    steady_times(&rec.repeats)
}

/// The node type a cluster sweep's ratios are taken on: the type most of the baseline's
/// runs had (ties to the first by name). None for a local sweep, where every repeat ran
/// on this machine.
fn reference_type(baseline: Option<&TrialRecord>) -> Option<String> {
    let mut count: BTreeMap<String, usize> = BTreeMap::new();
    for n in baseline?.nodes.iter().filter(|n| n.fingerprint.is_some()) {
        *count.entry(super::nodes::node_type(n)).or_default() += 1;
    }
    let most = count.values().copied().max()?;
    count.into_iter().find(|(_, c)| *c == most).map(|(t, _)| t)
}

/// Like `steady`, over the repeats that ran on node type `ty` only: repeats measured on
/// other hardware are not the same measurement, so ratios never mix them. A record
/// without node information (a local sweep) keeps every repeat. An `ok` record has one
/// repeat per run, so `NodeRun::repeat` indexes `repeats`.
fn steady_on(rec: &TrialRecord, ty: Option<&str>) -> (Vec<f64>, f64) {
    let Some(ty) = ty.filter(|_| rec.nodes.iter().any(|n| n.fingerprint.is_some())) else {
        return steady(rec);
    };
    let kept: Vec<Repeat> = rec
        .nodes
        .iter()
        .filter(|n| n.fingerprint.is_some() && super::nodes::node_type(n) == ty)
        .filter_map(|n| rec.repeats.get(n.repeat).cloned())
        .collect();
    steady_times(&kept)
}

/// The steps of one repeat that count: warm-up and slow leading steps dropped.
pub fn steady_steps(r: &Repeat) -> &[f64] {
    &r.step_times[stats::steady_state(&r.step_times, r.warmup)..]
}

/// The figures a repeat's medians and intervals are taken over: its steady steps, or a
/// bursty loader's rounds of them (`stats::rounds_of`), so that a DataLoader handing
/// over its workers' batches together is not measured by its instant steps.
pub fn steady_slice(r: &Repeat) -> std::borrow::Cow<'_, [f64]> {
    stats::rounds_of(steady_steps(r))
}

/// The steady-state step times of `repeats`, pooled, and the samples per step.
pub fn steady_times(repeats: &[Repeat]) -> (Vec<f64>, f64) {
    let per: Vec<std::borrow::Cow<[f64]>> = repeats.iter().map(steady_slice).collect();
    let sps = repeats.first().map_or(0.0, |r| r.samples_per_step as f64);
    (stats::pooled(&per), sps)
}

/// Spread between the repeats' median step times (max/min - 1); None with fewer than two
/// measured repeats, where the spread is unknown rather than zero.
pub fn repeat_noise_floor(repeats: &[Repeat]) -> Option<f64> {
    let medians: Vec<f64> = repeats
        .iter()
        .map(|r| stats::median(&steady_slice(r)))
        .filter(|m| m.is_finite() && *m > 0.0)
        .collect();
    (medians.len() >= 2)
        .then(|| stats::noise_floor(&medians))
        .filter(|f| f.is_finite())
}

/// The sweep's noise floor: the spread of every successful trial with two or more
/// repeats, summarised by its median (robust to one unlucky trial) and its maximum.
pub fn noise_summary(trials: &[TrialReport]) -> Option<NoiseFloor> {
    let with: Vec<(&TrialReport, f64)> = trials
        .iter()
        .filter(|t| t.status == Status::Ok)
        .filter_map(|t| Some((t, repeat_noise_floor(&t.repeats)?)))
        .collect();
    if with.is_empty() {
        return None;
    }
    let floors: Vec<f64> = with.iter().map(|w| w.1).collect();
    Some(NoiseFloor {
        trials: with.len(),
        repeats: with.iter().map(|w| w.0.repeats.len()).min().unwrap_or(0),
        median: stats::median(&floors),
        max: floors.iter().copied().fold(0.0, f64::max),
    })
}

/// Per device over the repeats, in the engine's type: the largest peaks, the mean busy
/// and communication figures.
fn devices(rec: &TrialRecord) -> Vec<DeviceSummary> {
    let mut indices: Vec<usize> = Vec::new();
    for r in &rec.repeats {
        for d in &r.devices {
            if !indices.contains(&d.index) {
                indices.push(d.index);
            }
        }
    }
    let mean = |v: Vec<f64>| {
        let v: Vec<f64> = v.into_iter().filter(|x| x.is_finite()).collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    };
    indices
        .into_iter()
        .map(|index| {
            let all: Vec<&DeviceSummary> = rec
                .repeats
                .iter()
                .flat_map(|r| r.devices.iter().filter(|d| d.index == index))
                .collect();
            let avg = |f: fn(&DeviceSummary) -> f64| mean(all.iter().map(|d| f(d)).collect());
            let mut peak_by_category = BTreeMap::new();
            for (k, v) in all.iter().flat_map(|d| &d.peak_by_category) {
                let e = peak_by_category.entry(k.clone()).or_insert(0);
                *e = (*e).max(*v);
            }
            DeviceSummary {
                index,
                threads: all.iter().map(|d| d.threads).max().unwrap_or(0),
                busy_s: avg(|d| d.busy_s).unwrap_or(0.0),
                busy_fraction: avg(|d| d.busy_fraction).unwrap_or(0.0),
                comm_s: avg(|d| d.comm_s).unwrap_or(0.0),
                comm_fraction: avg(|d| d.comm_fraction).unwrap_or(0.0),
                comm_overlap: mean(all.iter().filter_map(|d| d.comm_overlap).collect()),
                peak_bytes: all.iter().map(|d| d.peak_bytes).max().unwrap_or(0),
                peak_by_category,
            }
        })
        .collect()
}

fn finite(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}

/// Mean share of a step per phase. `recompute` is part of `backward`, so it is shown but
/// not added into the remainder.
fn phase_share(rec: &TrialRecord, steady_times: &[f64]) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    let step = stats::mean(steady_times);
    if rec.repeats.is_empty() || step.is_nan() || step <= 0.0 {
        return out;
    }
    let n = rec.repeats.len() as f64;
    let mut timed = 0.0;
    for name in Phases::NAMES {
        let v = rec
            .repeats
            .iter()
            .map(|r| r.phases_mean.get(name))
            .sum::<f64>()
            / n;
        if v > 0.0 {
            out.insert(name.to_string(), v / step);
            if name != "recompute" {
                timed += v / step;
            }
        }
    }
    if !out.is_empty() {
        out.insert("other".into(), (1.0 - timed).max(0.0));
    }
    out
}

fn trial_report(
    full: &TrialRecord,
    base: Option<&(Vec<f64>, f64)>,
    ref_type: Option<&str>,
) -> TrialReport {
    // Figures from the repeats the hardware left clean; the report keeps every repeat.
    let (rec, contamination) = figures_of(full);
    report_of(full, &rec, contamination, base, ref_type)
}

/// `full`'s report with figures from `rec`, the repeats of it that count.
fn report_of(
    full: &TrialRecord,
    rec: &TrialRecord,
    contamination: Option<Contamination>,
    base: Option<&(Vec<f64>, f64)>,
    ref_type: Option<&str>,
) -> TrialReport {
    let (times, sps) = steady(rec);
    let (same_times, same_sps) = steady_on(rec, ref_type);
    let boot = Bootstrap::with_seed(knobs_hash(&rec.knobs));
    let steady_n: usize = rec.repeats.iter().map(|r| steady_steps(r).len()).sum();
    let partial = partial(rec, steady_n);
    let thr = (rec.status == Status::Ok || partial.as_ref().is_some_and(|p| p.used))
        .then(|| Throughput::from_step_times(&times, sps, &boot))
        .flatten();
    let samples_per_s = thr.and_then(|t| {
        Some(Ci {
            median: finite(t.samples_per_s)?,
            lo: finite(t.lo)?,
            hi: finite(t.hi)?,
        })
    });
    // Tokens per sample from the repeats that saw token ids; the samples' interval
    // scaled by it, since a step's tokens follow its batch.
    let tokens_each: Vec<f64> = rec
        .repeats
        .iter()
        .filter_map(|r| Some(r.tokens_per_step? / r.samples_per_step.max(1) as f64))
        .collect();
    let tokens_per_s = samples_per_s.filter(|_| !tokens_each.is_empty()).map(|c| {
        let k = stats::median(&tokens_each);
        Ci {
            median: c.median * k,
            lo: c.lo * k,
            hi: c.hi * k,
        }
    });
    let ratio_vs_baseline = match (samples_per_s, base) {
        (Some(_), Some((bt, bsps))) if !bt.is_empty() && !same_times.is_empty() => {
            let e = stats::ratio_ci(bt, *bsps, &same_times, same_sps, &boot);
            Some(Ratio {
                ratio: finite(e.ratio).unwrap_or(f64::NAN),
                lo: finite(e.lo).unwrap_or(e.ratio),
                hi: finite(e.hi).unwrap_or(e.ratio),
                significant: e.significant,
            })
            .filter(|r| r.ratio.is_finite())
        }
        _ => None,
    };
    let last = rec.repeats.last();
    let mut not_applicable = BTreeMap::new();
    let mut overrides = BTreeMap::new();
    let mut script_knobs = BTreeMap::new();
    for r in &rec.repeats {
        not_applicable.extend(r.not_applicable.clone());
        overrides.extend(r.overrides.clone());
        script_knobs.extend(r.script_knobs.clone());
    }
    TrialReport {
        id: rec.id.clone(),
        label: rec.label.clone(),
        knobs: rec.knobs.clone(),
        status: rec.status,
        error: rec.error.clone(),
        round: rec.round,
        steps: rec.steps,
        repeats: full.repeats.clone(),
        joules_per_sample: per_sample(&rec.hardware, samples_per_s.as_ref()),
        hardware: full.hardware.clone(),
        contamination,
        samples_per_s,
        tokens_per_s,
        ratio_vs_baseline,
        peak_total_bytes: rec.repeats.iter().map(|r| r.peak_total_bytes).max(),
        rss_peak_bytes: rec
            .timeline
            .iter()
            .filter(|s| s.device == "host" && s.metric == "rss_bytes" && s.value.is_finite())
            .map(|s| s.value as u64)
            .max(),
        phase_share: phase_share(rec, &times),
        accuracy: last.and_then(|r| r.accuracy),
        final_loss: last.and_then(|r| r.losses.last().copied()),
        noise_floor: repeat_noise_floor(&rec.repeats).unwrap_or(0.0),
        not_applicable,
        devices: devices(rec),
        nodes: rec.nodes.clone(),
        foreign_cpu_pct: foreign_cpu(rec),
        partial,
        overrides,
        script_knobs,
        nearest_baseline: None,
        against: Vec::new(),
        settled: None,
    }
}

/// The partial mark of a trial that failed after measuring steps (None otherwise).
fn partial(rec: &TrialRecord, steady_steps: usize) -> Option<Partial> {
    if rec.status == Status::Ok || rec.repeats.is_empty() {
        return None;
    }
    let steps: usize = rec.repeats.iter().map(|r| r.step_times.len()).sum();
    let used = steady_steps >= MIN_PARTIAL_STEADY;
    let note = if used {
        format!(
            "partial ({}): its figures are from the {steady_steps} steady steps it measured",
            rec.status.as_str()
        )
    } else {
        format!(
            "partial ({}): {steady_steps} steady steps, too few for figures (at least {MIN_PARTIAL_STEADY})",
            rec.status.as_str()
        )
    };
    Some(Partial {
        steps,
        steady_steps,
        used,
        note,
    })
}

/// Median over the trial's samples of other processes' share of all cores; the median
/// because the sampler finds a new trial process up to a second late, and its CPU counts
/// as foreign until then.
fn foreign_cpu(rec: &TrialRecord) -> Option<f64> {
    let v: Vec<f64> = rec
        .timeline
        .iter()
        .filter(|s| s.device == "host" && s.metric == FOREIGN_CPU_PCT && s.value.is_finite())
        .map(|s| s.value)
        .collect();
    (!v.is_empty()).then(|| stats::median(&v))
}

/// Trials' samples laid end to end in plan order, with each trial's span.
fn timeline(recs: &[TrialRecord]) -> (Vec<TimelineSample>, Vec<TrialSpan>) {
    let mut samples = Vec::new();
    let mut spans = Vec::new();
    let mut offset = 0.0;
    for r in recs {
        let wall: f64 = r.repeats.iter().map(|x| x.wall_s).sum();
        let last = r.timeline.iter().map(|s| s.t_s).fold(0.0, f64::max);
        let len = wall.max(last);
        if r.timeline.is_empty() {
            offset += len;
            continue;
        }
        spans.push(TrialSpan {
            id: r.id.clone(),
            label: r.label.clone(),
            start_s: offset,
            end_s: offset + len,
        });
        samples.extend(r.timeline.iter().map(|s| TimelineSample {
            t_s: s.t_s + offset,
            ..s.clone()
        }));
        offset += len;
    }
    (samples, spans)
}

/// The newest record per trial id (a later halving round supersedes an earlier one), in
/// plan order, then any ids the plan no longer has.
fn latest(spec: &Spec, records: &[TrialRecord]) -> Vec<TrialRecord> {
    let mut by_id: BTreeMap<&str, &TrialRecord> = BTreeMap::new();
    for r in records {
        match by_id.get(r.id.as_str()) {
            Some(prev) if prev.round > r.round => {}
            _ => {
                by_id.insert(&r.id, r);
            }
        }
    }
    let mut out = Vec::new();
    for t in plan::plan(spec).trials {
        if let Some(r) = by_id.remove(t.id.as_str()) {
            out.push(r.clone());
        }
    }
    out.extend(by_id.into_values().cloned());
    out
}

/// A report summarised from records, before the advisor judges it: recommendations and
/// the confirmation are still empty, and the confirmation trials are kept aside.
pub struct Measured {
    pub report: Report,
    pub confirmations: Confirmations,
}

/// The confirmation trials' records, kept out of the report's trial list.
pub struct Confirmations {
    confirm: Vec<TrialRecord>,
    baseline: Knobs,
    base_data: Option<(Vec<f64>, f64)>,
    ref_type: Option<String>,
}

/// The journal id of the confirmation run of `knobs` (the combination, one change, or
/// the baseline's re-run when `knobs` is the baseline).
pub fn confirm_id(knobs: &Knobs, base: &Knobs) -> String {
    format!("{CONFIRM_PREFIX}{}", plan::trial_id(knobs, base))
}

/// The journal id of the baseline run beside the confirmation of one change (#31); the
/// combination's is `confirm_id(base, base)`.
pub fn rerun_beside(knobs: &Knobs, base: &Knobs) -> String {
    format!("{}~{}", confirm_id(base, base), plan::trial_id(knobs, base))
}

/// The journal id of a settling run of `knobs`: a change the sweep measured promising but
/// could not settle against drift, run again in pairs beside the baseline (#31).
pub fn settle_id(knobs: &Knobs, base: &Knobs) -> String {
    format!("{CONFIRM_PREFIX}settle~{}", plan::trial_id(knobs, base))
}

/// The journal id of the baseline run beside the settling run of `knobs`.
pub fn settle_beside(knobs: &Knobs, base: &Knobs) -> String {
    format!(
        "{CONFIRM_PREFIX}settle-baseline~{}",
        plan::trial_id(knobs, base)
    )
}

impl Confirmations {
    /// The settling run of `knobs` against the baseline run beside it (`settle_id`), when
    /// the sweep made one; either side may have failed.
    pub fn settled(&self, knobs: &Knobs) -> Option<(TrialReport, Option<&TrialRecord>)> {
        let latest = |id: String| self.confirm.iter().rev().find(|r| r.id == id);
        let rec = latest(settle_id(knobs, &self.baseline))?;
        let beside = latest(settle_beside(knobs, &self.baseline));
        match beside.filter(|b| b.status == Status::Ok) {
            Some(b) => Some((self.beside(rec, b), beside)),
            None => Some((trial_report(rec, None, self.ref_type.as_deref()), beside)),
        }
    }

    /// `rec` measured pair by pair against the baseline runs of `beside`.
    fn beside(&self, rec: &TrialRecord, beside: &TrialRecord) -> TrialReport {
        let ref_type = self.ref_type.as_deref();
        // Pair by pair: a pair the hardware contaminated leaves on both sides (#28).
        let (mine, theirs, contamination) = pairs_of(rec, beside);
        let against = steady_on(&theirs, ref_type);
        let mut t = report_of(rec, &mine, contamination, Some(&against), ref_type);
        // Run pair by pair beside its baseline runs: the pairs decide (#31).
        if let Some(pooled) = t.ratio_vs_baseline {
            if let Some(p) = super::baselines::paired(&mine.repeats, &theirs.repeats, pooled) {
                t.ratio_vs_baseline = Some(p);
            }
        }
        t
    }

    /// The latest confirmation run of `knobs`, compared with the baseline run beside it
    /// (its own, else the combination's re-run), else with the baseline.
    pub fn trial(&self, knobs: &Knobs) -> Option<TrialReport> {
        let ok_by_id = |id: &str| {
            self.confirm
                .iter()
                .rev()
                .find(|r| r.id == id && r.status == Status::Ok)
        };
        // A journal from before per-change confirmations named its one re-run otherwise:
        // the latest baseline run that is not beside a single change.
        let combined = || {
            self.confirm
                .iter()
                .rev()
                .find(|r| r.knobs == self.baseline && r.status == Status::Ok && !r.id.contains('~'))
        };
        let rerun = ok_by_id(&rerun_beside(knobs, &self.baseline)).or_else(combined);
        let id = confirm_id(knobs, &self.baseline);
        let rec = self.confirm.iter().rev().find(|r| r.id == id).or_else(|| {
            self.confirm
                .iter()
                .rev()
                .find(|r| &r.knobs == knobs && !r.id.contains('~'))
        })?;
        let ref_type = self.ref_type.as_deref();
        let Some(beside) = rerun.filter(|b| b.id != rec.id) else {
            // The baseline's re-run itself, or a change with no baseline run beside it.
            let against = rerun.map(|r| steady_on(&figures_of(r).0, ref_type));
            return Some(trial_report(
                rec,
                against.as_ref().or(self.base_data.as_ref()),
                ref_type,
            ));
        };
        Some(self.beside(rec, beside))
    }
}

/// Summarises records into the report model: per-trial throughputs with confidence
/// intervals, ratios against the baseline, phase shares, the timeline, the noise floor.
pub fn build(spec: &Spec, records: &[TrialRecord]) -> Measured {
    let (confirm, records_plan): (Vec<TrialRecord>, Vec<TrialRecord>) = records
        .iter()
        .cloned()
        .partition(|r| r.id.starts_with(CONFIRM_PREFIX));
    let (again, plan_records): (Vec<TrialRecord>, Vec<TrialRecord>) = records_plan
        .into_iter()
        .partition(|r| r.id.starts_with(AGAIN_PREFIX));
    let recs = latest(spec, &plan_records);
    let base_id = plan::trial_id(&spec.search.baseline, &spec.search.baseline);
    let base_rec = recs
        .iter()
        .find(|r| r.id == base_id && r.status == Status::Ok);
    let ref_type = reference_type(base_rec);
    let base_data = base_rec.map(|r| steady_on(&figures_of(r).0, ref_type.as_deref()));
    let runs = Runs::collect(records, &base_id, &spec.search.baseline, |r| {
        steady_on(&figures_of(r).0, ref_type.as_deref())
    });
    let trials: Vec<TrialReport> = recs
        .iter()
        .map(|r| {
            // Journal order is time order: a trial is compared with the baseline run
            // nearest it (#31).
            let pos = records
                .iter()
                .rposition(|x| x.id == r.id && x.round == r.round)
                .unwrap_or(0);
            let near = runs.nearest(pos).filter(|_| r.id != base_id);
            let against = near.map(|n| &n.data).or(base_data.as_ref());
            let mut t = trial_report(r, against, ref_type.as_deref());
            if r.id != base_id && t.samples_per_s.is_some() {
                t.nearest_baseline = near.map(|n| n.id.clone()).filter(|id| *id != base_id);
                let seed = knobs_hash(&r.knobs);
                t.against =
                    runs.against(pos, &steady_on(&figures_of(r).0, ref_type.as_deref()), seed);
            }
            t
        })
        .collect();
    let baseline_runs: Vec<TrialReport> = again
        .iter()
        .map(|r| trial_report(r, base_data.as_ref(), ref_type.as_deref()))
        .collect();
    let best = trials
        .iter()
        .filter_map(|t| Some((t, t.samples_per_s?.median)))
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(t, _)| t.id.clone());
    let mut notes = Vec::new();
    let failed = trials.iter().filter(|t| t.status != Status::Ok).count();
    if failed > 0 {
        notes.push(format!(
            "{failed} of {} trials did not complete; their errors are listed with them",
            trials.len()
        ));
    }
    notes.extend(trials.iter().filter_map(|t| {
        let c = t.contamination.as_ref()?;
        Some(format!("{}: {}", t.label, c.note))
    }));
    if base_data.is_none() {
        notes.push("the baseline has no successful measurement: no ratios".into());
    }
    notes.extend(super::notices::of(&recs));
    notes.extend(super::nodes::notes(&trials, Some(base_id.as_str())));
    if let Some(ty) = &ref_type {
        let mixed = recs.iter().any(|r| {
            r.nodes
                .iter()
                .any(|n| n.fingerprint.is_some() && &super::nodes::node_type(n) != ty)
        });
        if mixed {
            notes.push(format!(
                "ratios use only the repeats measured on the baseline's node type ({ty}); \
                 a configuration with none there has no ratio"
            ));
        }
    }
    let backend = trials
        .iter()
        .flat_map(|t| t.repeats.first())
        .map(|r| r.backend.as_str())
        .find(|b| !b.is_empty())
        .unwrap_or("cpu")
        .to_string();
    let noise_floor = noise_summary(&trials);
    let (timeline, trial_spans) = timeline(&recs);
    let report = Report {
        schema_version: SCHEMA_VERSION.into(),
        environment: environment(backend),
        spec: spec.clone(),
        drift: runs.drift(crate::results::model::throughput_unit(&trials)),
        trials,
        skipped: plan::plan(spec).skipped,
        baseline: recs.iter().any(|r| r.id == base_id).then_some(base_id),
        best,
        recommendations: Vec::new(),
        confirmation: None,
        timeline,
        trial_spans,
        noise_floor,
        notes,
        baseline_runs,
        budget: None,
    };
    Measured {
        report,
        confirmations: Confirmations {
            confirm,
            baseline: spec.search.baseline.clone(),
            base_data,
            ref_type,
        },
    }
}

fn read_trimmed(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

pub fn environment(backend: String) -> Environment {
    let cpu_model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    let git_commit = std::process::Command::new("git")
        .args(["rev-parse", "HEAD"])
        .stderr(std::process::Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|s| !s.is_empty());
    let host_memory_bytes = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        let line = m.lines().find(|l| l.starts_with("MemTotal:"))?;
        let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kb * 1024)
    });
    let (gpus, gpu_notice) = match tune_probes::gpu_inventory() {
        Ok(g) => {
            let notice = g.is_empty().then(|| "NVML loaded, no GPUs".to_string());
            (g, notice)
        }
        Err(e) => (Vec::new(), Some(e.to_string())),
    };
    Environment {
        driver: gpus.first().map(|g| g.driver_version.clone()),
        cuda: gpus.first().map(|g| g.cuda_driver_version.clone()),
        gpus,
        gpu_notice,
        host_memory_bytes,
        host: read_trimmed("/proc/sys/kernel/hostname")
            .or_else(|| std::env::var("HOSTNAME").ok())
            .unwrap_or_else(|| "unknown".into()),
        cpu_model,
        cores: crate::engine::train::default_threads(),
        backend,
        os: format!("{} {}", std::env::consts::OS, std::env::consts::ARCH),
        tune_version: env!("CARGO_PKG_VERSION").into(),
        git_commit,
    }
}

#[cfg(test)]
mod tests;
