//! `tune compare A B`: what changed between two watches or two sweeps, per metric:
//! before, after, the ratio after/before and whether the difference is beyond noise.
//!
//! - Two sweeps: per configuration present in both (matched by label), samples/s as the
//!   ratio of medians with a bootstrap 95% interval over the steady-state step times
//!   (`stats::ratio_ci`, the test every sweep uses), and peak memory (one figure per
//!   side, so no test: shown without a verdict).
//! - Two watches: per device and metric (the watched processes' CPU and memory, the
//!   machine's CPU, each GPU's utilization and memory), the medians of the sampled
//!   series with a Mann-Whitney U test (`stats::mann_whitney_u`, p < 0.05). Samples of
//!   one series are correlated in time, so the p-value is optimistic; a ratio near 1 is
//!   still "no change" whatever p says (see docs/report-schema.md). Where both watches
//!   kept the PyTorch hooks' steps, step time, samples/s and tokens/s are tested as a
//!   sweep's samples/s is (ratio of medians, bootstrap 95% interval over the steady
//!   steps), phase shares side by side (Mann-Whitney over the per-step shares), and a
//!   line says when the two ran under different load (other processes' CPU).
//!
//! A sweep and a watch cannot be compared (their measurements differ in kind): that is
//! refused as bad input (exit 2), as is anything that is neither.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::cli::CompareArgs;
use crate::error::{shown, Error, Result};
use crate::report::{Report, REPORT_JSON};
use crate::results::build::steady_times;
use crate::results::model::{TimelineSample, TrialReport};
use crate::stats::{mann_whitney_u, median, ratio_ci, Bootstrap};
use crate::watch::report::WatchReport;

/// A report read from disk, of either kind.
pub enum Loaded {
    Sweep(Box<Report>),
    Watch(Box<WatchReport>),
}

/// The report.json a path names: the file itself, or the one in a folder.
pub fn report_file(path: &Path) -> PathBuf {
    if path.is_dir() {
        path.join(REPORT_JSON)
    } else {
        path.to_path_buf()
    }
}

/// True when the file is a `tune watch` report (`"kind": "watch"`), read only as far as
/// needed to say so; anything unreadable is left to the real loader to explain.
pub fn is_watch(file: &Path) -> bool {
    let Ok(text) = crate::fsio::read_text_limited(file, crate::fsio::MAX_INPUT_BYTES) else {
        return false;
    };
    #[derive(serde::Deserialize)]
    struct Kind {
        kind: Option<String>,
    }
    serde_json::from_str::<Kind>(&text)
        .ok()
        .and_then(|k| k.kind)
        .as_deref()
        == Some(crate::watch::report::KIND)
}

/// Loads a sweep or a watch report, whichever the file holds.
pub fn load_any(path: &Path) -> Result<Loaded> {
    let file = report_file(path);
    if is_watch(&file) {
        Ok(Loaded::Watch(Box::new(WatchReport::load(&file)?)))
    } else {
        Ok(Loaded::Sweep(Box::new(Report::load(&file)?)))
    }
}

/// One line of the comparison.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Change {
    /// The configuration (sweeps) or device (watches).
    pub subject: String,
    pub metric: String,
    pub before: Option<f64>,
    pub after: Option<f64>,
    /// after / before.
    pub ratio: Option<f64>,
    /// 95% interval of the ratio, where the test gives one (sweeps' samples/s).
    pub ci: Option<(f64, f64)>,
    /// Mann-Whitney p-value, where that is the test (watches).
    pub p: Option<f64>,
    /// Some(true) beyond noise, Some(false) within it, None when there is no test.
    pub significant: Option<bool>,
}

impl Change {
    fn untested(subject: &str, metric: &str, before: Option<f64>, after: Option<f64>) -> Change {
        Change {
            subject: subject.into(),
            metric: metric.into(),
            before,
            after,
            ratio: ratio(before, after),
            ci: None,
            p: None,
            significant: None,
        }
    }
}

fn ratio(before: Option<f64>, after: Option<f64>) -> Option<f64> {
    match (before, after) {
        (Some(b), Some(a)) if b != 0.0 => Some(a / b),
        _ => None,
    }
}

/// Configurations of two sweeps, by label.
pub fn compare_sweeps(a: &Report, b: &Report) -> Vec<Change> {
    let boot = Bootstrap::default();
    let mut out = Vec::new();
    // Indexed once: a scan of the other report per trial was quadratic (#27).
    let mut in_b: HashMap<&str, &TrialReport> = HashMap::new();
    for t in &b.trials {
        in_b.entry(t.label.as_str()).or_insert(t);
    }
    let in_a: HashSet<&str> = a.trials.iter().map(|t| t.label.as_str()).collect();
    for ta in &a.trials {
        let Some(tb) = in_b.get(ta.label.as_str()).copied() else {
            out.push(Change::untested(&ta.label, "only in A", None, None));
            continue;
        };
        let (sa, spa) = steady_times(&ta.repeats);
        let (sb, spb) = steady_times(&tb.repeats);
        let thr = |c: &Option<crate::results::model::Ci>| c.as_ref().map(|c| c.median);
        let unit = crate::results::model::throughput_unit([ta, tb]);
        if sa.is_empty() || sb.is_empty() {
            out.push(Change::untested(
                &ta.label,
                unit,
                thr(&ta.samples_per_s),
                thr(&tb.samples_per_s),
            ));
        } else {
            let e = ratio_ci(&sa, spa, &sb, spb, &boot);
            out.push(Change {
                subject: ta.label.clone(),
                metric: unit.into(),
                before: thr(&ta.samples_per_s),
                after: thr(&tb.samples_per_s),
                ratio: Some(e.ratio),
                ci: Some((e.lo, e.hi)),
                p: None,
                significant: Some(e.significant),
            });
        }
        let mib = |t: &TrialReport| t.peak_mib();
        if mib(ta).is_some() || mib(tb).is_some() {
            out.push(Change::untested(&ta.label, "peak MiB", mib(ta), mib(tb)));
        }
    }
    for tb in &b.trials {
        if !in_a.contains(tb.label.as_str()) {
            out.push(Change::untested(&tb.label, "only in B", None, None));
        }
    }
    out
}

/// A device name that means the same thing in two watches: the watched tree's root pid
/// differs between runs, so `proc 1234` is "watched processes"; per-core and per-GPU-
/// process series are left out (their pids and core numbers do not match up).
fn subject(device: &str) -> Option<String> {
    if device.starts_with("proc ") {
        return Some("watched processes".into());
    }
    let core = device.starts_with("cpu") && device[3..].parse::<u32>().is_ok();
    if core || device.contains(" pid ") {
        return None;
    }
    Some(device.to_string())
}

/// The metrics compared between watches, with how each is shown (unit scale, name).
const WATCH_METRICS: &[(&str, f64, &str)] = &[
    ("cpu_pct", 1.0, "CPU % (of one core)"),
    ("cpu_util_pct", 1.0, "CPU %"),
    ("rss_bytes", 1048576.0, "resident MiB"),
    ("util_gpu_pct", 1.0, "GPU utilization %"),
    ("mem_used_bytes", 1048576.0, "GPU memory MiB"),
];

fn series(rows: &[TimelineSample]) -> BTreeMap<(String, &'static str), Vec<f64>> {
    let mut by: BTreeMap<(String, &'static str), Vec<f64>> = BTreeMap::new();
    for r in rows {
        let Some(&(_, scale, name)) = WATCH_METRICS.iter().find(|m| m.0 == r.metric) else {
            continue;
        };
        if let Some(s) = subject(&r.device) {
            by.entry((s, name)).or_default().push(r.value / scale);
        }
    }
    by
}

/// Devices and metrics of two watches.
pub fn compare_watches(a: &WatchReport, b: &WatchReport) -> Vec<Change> {
    let (sa, sb) = (series(&a.timeline), series(&b.timeline));
    let mut out = Vec::new();
    for (key, va) in &sa {
        let Some(vb) = sb.get(key) else {
            out.push(Change::untested(&key.0, key.1, Some(median(va)), None));
            continue;
        };
        let (before, after) = (median(va), median(vb));
        let (_, p) = mann_whitney_u(va, vb);
        let r = ratio(Some(before), Some(after));
        // A tiny shift in a long, smooth series can be "significant" to the test and
        // mean nothing: a change under 2% is reported as no change.
        let material =
            r.is_some_and(|r| (r - 1.0).abs() >= 0.02) || (before == 0.0 && after != 0.0);
        out.push(Change {
            subject: key.0.clone(),
            metric: key.1.into(),
            before: Some(before),
            after: Some(after),
            ratio: r,
            ci: None,
            p: Some(p),
            significant: Some(p < 0.05 && material),
        });
    }
    for (key, vb) in &sb {
        if !sa.contains_key(key) {
            out.push(Change::untested(&key.0, key.1, None, Some(median(vb))));
        }
    }
    if let (Some(pa), Some(pb)) = (&a.python, &b.python) {
        if let (Some(sa), Some(sb)) = (Steady::of(a), Steady::of(b)) {
            out.extend(compare_steps(&sa, &sb));
        } else {
            out.push(Change::untested(
                "PyTorch steps",
                "samples/s",
                pa.samples_per_s,
                pb.samples_per_s,
            ));
            out.push(Change::untested(
                "PyTorch steps",
                "median step ms",
                Some(pa.median_step_ms),
                Some(pb.median_step_ms),
            ));
        }
    }
    let (la, lb) = (
        crate::watch::html::cpu_load(a).map(|l| l.2),
        crate::watch::html::cpu_load(b).map(|l| l.2),
    );
    if la.is_some() || lb.is_some() {
        out.push(Change::untested("host", LOAD_METRIC, la, lb));
    }
    out.push(Change::untested(
        "watch",
        "duration s",
        Some(a.duration_s),
        Some(b.duration_s),
    ));
    out
}

/// The row with other processes' mean CPU use while watching, % of the machine.
const LOAD_METRIC: &str = "other processes' CPU %";
/// Two watches whose other load differs by this many points of the machine's CPU ran
/// under different conditions: the contention finding's own threshold (25%) is what
/// slows a job measurably, so a gap of 20 points is said.
const LOAD_GAP: f64 = 20.0;

/// A line when the two watches ran under different load, from their `LOAD_METRIC` rows.
pub fn load_line(changes: &[Change]) -> Option<String> {
    let c = changes.iter().find(|c| c.metric == LOAD_METRIC)?;
    let (a, b) = (c.before?, c.after?);
    ((a - b).abs() >= LOAD_GAP).then(|| {
        format!(
            "note: A and B ran under different load: other processes used {a:.0}% of the \
             machine's CPU during A and {b:.0}% during B, so a difference between them may \
             come from the load, not from the change"
        )
    })
}

/// One watch's steady steps (rank 0's, after warm-up, as the summary counts them).
struct Steady {
    durs: Vec<f64>,
    samples: f64,
    tokens: f64,
    shares: BTreeMap<&'static str, Vec<f64>>,
}

impl Steady {
    fn of(r: &WatchReport) -> Option<Steady> {
        let p = r.python.as_ref()?;
        let mut rows: Vec<&crate::bridge::Step> = r
            .steps
            .iter()
            .filter(|s| s.step > 0 && s.rank.unwrap_or(0) == 0)
            .collect();
        rows.sort_by_key(|s| s.step);
        let skip = rows.len().saturating_sub(p.steady_steps);
        let rows = &rows[skip..];
        if rows.len() < 2 {
            return None;
        }
        let med = |f: &dyn Fn(&crate::bridge::Step) -> u64| {
            let v: Vec<f64> = rows
                .iter()
                .map(|s| f(s) as f64)
                .filter(|x| *x > 0.0)
                .collect();
            if v.is_empty() {
                0.0
            } else {
                median(&v)
            }
        };
        let mut shares = BTreeMap::new();
        for name in crate::report::trace::PHASE_ORDER {
            let v: Vec<f64> = rows.iter().map(|s| 100.0 * s.phase(name) / s.dur).collect();
            shares.insert(name, v);
        }
        Some(Steady {
            durs: rows.iter().map(|s| s.dur).collect(),
            samples: med(&|s| s.batch),
            tokens: med(&|s| s.tokens),
            shares,
        })
    }
}

/// Step time, samples/s and tokens/s with the sweep's test; phase shares side by side.
fn compare_steps(a: &Steady, b: &Steady) -> Vec<Change> {
    let boot = Bootstrap::default();
    let subject = "PyTorch steps";
    let mut out = Vec::new();
    // Steps per second B/A; a step time's ratio is its inverse.
    let e = ratio_ci(&a.durs, 1.0, &b.durs, 1.0, &boot);
    out.push(Change {
        subject: subject.into(),
        metric: "median step ms".into(),
        before: Some(median(&a.durs) * 1e3),
        after: Some(median(&b.durs) * 1e3),
        ratio: Some(1.0 / e.ratio),
        ci: Some((1.0 / e.hi, 1.0 / e.lo)),
        p: None,
        significant: Some(e.significant),
    });
    for (metric, x, y) in [
        ("samples/s", a.samples, b.samples),
        ("tokens/s", a.tokens, b.tokens),
    ] {
        if x <= 0.0 || y <= 0.0 {
            if x > 0.0 || y > 0.0 {
                let rate = |v: f64, d: &[f64]| (v > 0.0).then(|| v / median(d));
                out.push(Change::untested(
                    subject,
                    metric,
                    rate(x, &a.durs),
                    rate(y, &b.durs),
                ));
            }
            continue;
        }
        let e = ratio_ci(&a.durs, x, &b.durs, y, &boot);
        out.push(Change {
            subject: subject.into(),
            metric: metric.into(),
            before: Some(x / median(&a.durs)),
            after: Some(y / median(&b.durs)),
            ratio: Some(e.ratio),
            ci: Some((e.lo, e.hi)),
            p: None,
            significant: Some(e.significant),
        });
    }
    for (name, va) in &a.shares {
        let Some(vb) = b.shares.get(name) else {
            continue;
        };
        let (before, after) = (median(va), median(vb));
        if before < 0.5 && after < 0.5 {
            continue;
        }
        let (_, p) = mann_whitney_u(va, vb);
        out.push(Change {
            subject: subject.into(),
            metric: format!("{name} share %"),
            before: Some(before),
            after: Some(after),
            ratio: ratio(Some(before), Some(after)),
            ci: None,
            p: Some(p),
            // A shift under one point of the step is no change, whatever p says.
            significant: Some(p < 0.05 && (after - before).abs() >= 1.0),
        });
    }
    out
}

fn num(v: Option<f64>) -> String {
    v.map_or("–".into(), |v| {
        if v.abs() >= 100.0 {
            format!("{v:.0}")
        } else {
            format!("{v:.2}")
        }
    })
}

/// The plain table printed by `tune compare`.
pub fn table(changes: &[Change]) -> String {
    let rows: Vec<[String; 6]> = changes
        .iter()
        .map(|c| {
            let verdict = match (c.significant, c.ratio) {
                (Some(true), Some(r)) if r > 1.0 => "higher".to_string(),
                (Some(true), Some(_)) => "lower".into(),
                (Some(false), _) => "n.s.".into(),
                _ => "–".into(),
            };
            let ratio = match (c.ratio, c.ci) {
                (Some(r), Some((lo, hi))) => format!("{r:.3} [{lo:.3}, {hi:.3}]"),
                (Some(r), None) => match c.p {
                    Some(p) => format!("{r:.3} (p={p:.2})"),
                    None => format!("{r:.3}"),
                },
                (None, _) => "–".into(),
            };
            [
                c.subject.clone(),
                c.metric.clone(),
                num(c.before),
                num(c.after),
                ratio,
                verdict,
            ]
        })
        .collect();
    let head = ["subject", "metric", "A", "B", "B/A", "change"];
    let mut w = head.map(str::len);
    for r in &rows {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let line = |cells: [&str; 6]| {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            let pad = w[i] - c.chars().count();
            if (2..5).contains(&i) {
                s.push_str(&" ".repeat(pad));
                s.push_str(c);
            } else {
                s.push_str(c);
                s.push_str(&" ".repeat(pad));
            }
            s.push_str("  ");
        }
        s.trim_end().to_string() + "\n"
    };
    let mut out = line(head);
    for r in &rows {
        out.push_str(&line([&r[0], &r[1], &r[2], &r[3], &r[4], &r[5]]));
    }
    out
}

pub fn main(args: &CompareArgs) -> Result<i32> {
    let a = load_any(&args.a)?;
    let b = load_any(&args.b)?;
    let changes = match (&a, &b) {
        (Loaded::Sweep(a), Loaded::Sweep(b)) => compare_sweeps(a, b),
        (Loaded::Watch(a), Loaded::Watch(b)) => compare_watches(a, b),
        _ => {
            let kind = |l: &Loaded| match l {
                Loaded::Sweep(_) => "a sweep report",
                Loaded::Watch(_) => "a watch report",
            };
            return Err(Error::Invalid(format!(
                "{} is {} and {} is {}: tune compare compares two sweeps or two watches",
                shown(&args.a.display().to_string()),
                kind(&a),
                shown(&args.b.display().to_string()),
                kind(&b)
            )));
        }
    };
    if let Some(line) = load_line(&changes) {
        eprintln!("{line}");
    }
    if args.json {
        let text = serde_json::to_string_pretty(&changes)
            .map_err(|e| Error::Runtime(format!("cannot encode the comparison: {e}")))?;
        println!("{text}");
    } else {
        print!("{}", crate::error::inert(&table(&changes)));
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_load_gap_is_said_and_a_small_one_is_not() {
        let load = |a, b| vec![Change::untested("host", LOAD_METRIC, Some(a), Some(b))];
        let line = load_line(&load(5.0, 62.0)).unwrap();
        assert!(
            line.contains("5% of the machine's CPU during A and 62% during B"),
            "{line}"
        );
        assert!(load_line(&load(40.0, 52.0)).is_none());
    }
}
