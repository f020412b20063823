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
//!   still "no change" whatever p says (see docs/report-schema.md). The PyTorch hooks'
//!   samples/s and step time are compared where both watches have them.
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
        if sa.is_empty() || sb.is_empty() {
            out.push(Change::untested(
                &ta.label,
                "samples/s",
                thr(&ta.samples_per_s),
                thr(&tb.samples_per_s),
            ));
        } else {
            let e = ratio_ci(&sa, spa, &sb, spb, &boot);
            out.push(Change {
                subject: ta.label.clone(),
                metric: "samples/s".into(),
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
    out.push(Change::untested(
        "watch",
        "duration s",
        Some(a.duration_s),
        Some(b.duration_s),
    ));
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
    if args.json {
        let text = serde_json::to_string_pretty(&changes)
            .map_err(|e| Error::Runtime(format!("cannot encode the comparison: {e}")))?;
        println!("{text}");
    } else {
        print!("{}", crate::error::inert(&table(&changes)));
    }
    Ok(0)
}
