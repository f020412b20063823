//! The steps over time of a watched PyTorch job: the rows report.json keeps, the
//! warm-up they show (a slow first step is start-up or compilation, kept out of the
//! steady figures and named, never averaged in), its finding when it dominates the run,
//! the report's step-time and phase charts, and `trace.json`.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{json, Map};

use super::findings::{FindingKind, WatchFinding};
use super::report::WatchReport;
use crate::bridge::{Events, Step};
use crate::report::escape::esc;
use crate::report::lines::{render, Line, LinesChart};
use crate::report::trace::{phase_spans, render as render_trace, Span, Track, PHASE_ORDER};
use crate::results::Finding;
use crate::stats::median;

/// Steps kept per rank in report.json: the first ones, where warm-up shows (a step row
/// is about 150 bytes, so 20,000 keep a report under 4 MB per rank).
pub const MAX_STEPS: usize = 20_000;
/// Points per line in a chart; longer runs are shown as the median of equal runs of steps.
const MAX_POINTS: usize = 500;
/// A first step this many times the steady median is "far slower".
pub const FAR_SLOWER: f64 = 5.0;
/// Warm-up dominates the run when its excess over steady steps is at least this share
/// of all the time the steps took.
pub const DOMINATES: f64 = 0.5;
/// A step after the first one still belongs to warm-up while it is this many times the
/// steady median.
const STILL_WARM: f64 = 2.0;

/// The step rows report.json keeps: each process's first step and its steps (each
/// rank's under torchrun), at most `MAX_STEPS` per rank, and a note when some were left.
pub fn rows(ev: &Events) -> (Vec<Step>, Option<String>) {
    let mut by_rank: BTreeMap<Option<u32>, Vec<Step>> = BTreeMap::new();
    for f in &ev.first_steps {
        by_rank.entry(f.rank).or_default().push(f.clone());
    }
    if ev.ranks.is_empty() {
        for s in &ev.steps {
            by_rank.entry(s.rank).or_default().push(s.clone());
        }
    } else {
        for (r, steps) in &ev.ranks {
            by_rank
                .entry(Some(*r))
                .or_default()
                .extend(steps.iter().cloned());
        }
    }
    let mut out = Vec::new();
    let mut left = 0;
    for (_, mut steps) in by_rank {
        if steps.len() > MAX_STEPS {
            left += steps.len() - MAX_STEPS;
            steps.truncate(MAX_STEPS);
        }
        out.extend(steps);
    }
    let note = (left > 0).then(|| {
        format!(
            "report.json keeps the first {MAX_STEPS} steps of each rank ({left} later steps \
             left out); the step figures use every step"
        )
    });
    (out, note)
}

/// Rank 0's rows (or the one process's), in step order.
fn rank0(steps: &[Step]) -> Vec<&Step> {
    let mut v: Vec<&Step> = steps.iter().filter(|s| s.rank.unwrap_or(0) == 0).collect();
    v.sort_by_key(|s| s.step);
    v
}

/// The warm-up at the start of a run, against the steady median step.
#[derive(Clone, Debug, PartialEq)]
pub struct Warmup {
    pub median_ms: f64,
    /// The first step and the slow steps right after it: (step, ms).
    pub slow: Vec<(u64, f64)>,
    /// What those steps took beyond steady steps, seconds.
    pub excess_s: f64,
    /// All the steps' time, the first included, seconds.
    pub total_s: f64,
}

impl Warmup {
    /// The first step's time, ms.
    pub fn first_ms(&self) -> f64 {
        self.slow.first().map_or(0.0, |s| s.1)
    }

    pub fn dominates(&self) -> bool {
        self.first_ms() >= FAR_SLOWER * self.median_ms
            && self.total_s > 0.0
            && self.excess_s >= DOMINATES * self.total_s
    }
}

/// The warm-up of rank 0's steps, where there are steps and a steady median.
pub fn warmup(steps: &[Step], median_ms: f64) -> Option<Warmup> {
    let r = rank0(steps);
    let first = r.first()?;
    if median_ms <= 0.0 || !median_ms.is_finite() {
        return None;
    }
    let m = median_ms / 1e3;
    let mut slow = vec![(first.step, first.dur * 1e3)];
    slow.extend(
        r.iter()
            .skip(1)
            .take_while(|s| s.dur > STILL_WARM * m)
            .take(19)
            .map(|s| (s.step, s.dur * 1e3)),
    );
    let excess_s = slow.iter().map(|s| (s.1 / 1e3 - m).max(0.0)).sum();
    Some(Warmup {
        median_ms,
        slow,
        excess_s,
        total_s: r.iter().map(|s| s.dur).sum(),
    })
}

/// A finding when the first steps are far slower than the steady ones and their extra
/// time is most of the run so far.
pub fn finding(w: &Warmup) -> Option<WatchFinding> {
    if !w.dominates() {
        return None;
    }
    let first = w.first_ms();
    let share = w.excess_s / w.total_s;
    let later = 10_000.0 * w.median_ms / 1e3;
    Some(WatchFinding {
        kind: FindingKind::Warmup,
        device: "python".into(),
        finding: Finding {
            title: "start-up and compilation dominate the run so far".into(),
            evidence: format!(
                "the first step took {} ({:.0}x the steady median of {:.1} ms; it runs from \
                 the job's first batch or forward to its first optimizer step); the warm-up \
                 steps took {:.2} s more than steady steps would have, {:.0}% of the {:.2} s \
                 the steps took, measured by tune's PyTorch hooks",
                fmt_ms(first),
                first / w.median_ms,
                w.median_ms,
                w.excess_s,
                share * 100.0,
                w.total_s
            ),
        },
        hint: format!(
            "a one-time cost per process (torch.compile, cudnn.benchmark autotuning, lazy \
             initialisation, DataLoader workers starting): worth acting on for short or \
             often restarted runs, not long ones (over 10,000 steps of this job it would be \
             {:.1}% of the time); with torch.compile, keep compiled graphs between runs \
             (TORCHINDUCTOR_FX_GRAPH_CACHE=1) or time a run without it: compiling pays back \
             only once its per-step saving over the whole run exceeds {:.1} s",
            100.0 * w.excess_s / (w.excess_s + later),
            w.excess_s
        ),
    })
}

fn fmt_ms(ms: f64) -> String {
    if ms >= 1000.0 {
        format!("{:.2} s", ms / 1e3)
    } else {
        format!("{ms:.1} ms")
    }
}

/// `(x, y)` points, as the median of equal runs when there are more than `MAX_POINTS`.
fn thin(points: Vec<(f64, f64)>) -> Vec<(f64, f64)> {
    if points.len() <= MAX_POINTS {
        return points;
    }
    let k = points.len().div_ceil(MAX_POINTS);
    points
        .chunks(k)
        .map(|c| {
            let xs: Vec<f64> = c.iter().map(|p| p.0).collect();
            let ys: Vec<f64> = c.iter().map(|p| p.1).collect();
            (median(&xs), median(&ys))
        })
        .collect()
}

fn figure(
    id: &'static str,
    x: &str,
    y: &str,
    y_max: Option<f64>,
    lines: &[Line],
    cap: &str,
) -> String {
    format!(
        "<figure class=\"chart\" id=\"{id}\">{}<figcaption>{}</figcaption></figure>",
        render(&LinesChart {
            id,
            x_desc: x,
            y_desc: y,
            y_max,
            lines
        }),
        esc(cap)
    )
}

/// The report's "PyTorch steps" section: the figures, step time per step (one line per
/// rank, ms, the scale of steady steps; slower steps are drawn at its top and named),
/// each phase's share of each step (%), and the warm-up table (ms, as the chart).
pub fn section(r: &WatchReport) -> String {
    let mut b = String::new();
    let Some(p) = &r.python else {
        return b;
    };
    b.push_str("<h2>PyTorch steps</h2><table id=\"python\"><tr><th>figure</th><th>value</th></tr>");
    let mut row = |k: &str, v: String| {
        let _ = write!(
            b,
            "<tr><td>{}</td><td class=\"n\">{}</td></tr>",
            esc(k),
            esc(&v)
        );
    };
    row(
        "steps (after warm-up)",
        format!("{} ({})", p.steps, p.steady_steps),
    );
    row("median step", format!("{:.1} ms", p.median_step_ms));
    row(
        "samples/s",
        p.samples_per_s
            .map_or("unknown (no batch seen)".into(), |s| format!("{s:.1}")),
    );
    if let Some(t) = p.tokens_per_s {
        row("tokens/s", format!("{t:.0}"));
    }
    if let Some(f) = p.first_step_ms {
        row("first step (start-up, compilation)", format!("{f:.1} ms"));
    }
    b.push_str("</table>");
    if r.steps.is_empty() {
        return b;
    }
    let m = p.median_step_ms;
    let top = FAR_SLOWER * m;
    let mut per_rank: BTreeMap<Option<u32>, Vec<(f64, f64)>> = BTreeMap::new();
    let mut above = Vec::new();
    for s in &r.steps {
        let ms = s.dur * 1e3;
        if ms > top && top > 0.0 && s.rank.unwrap_or(0) == 0 {
            above.push(format!("step {}: {}", s.step, fmt_ms(ms)));
        }
        let y = if top > 0.0 { ms.min(top) } else { ms };
        per_rank.entry(s.rank).or_default().push((s.step as f64, y));
    }
    let lines: Vec<Line> = per_rank
        .into_iter()
        .map(|(rank, mut pts)| {
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            Line {
                name: rank.map_or("step time".into(), |r| format!("rank {r}: step time")),
                points: thin(pts),
            }
        })
        .collect();
    let mut cap = format!(
        "Time of each step in ms; step 0 is the first step (from the first batch or forward \
         to the first optimizer step: start-up and compilation). The \"steady median\" line \
         marks the median of the steps after warm-up, {m:.1} ms."
    );
    if !above.is_empty() {
        above.truncate(10);
        let _ = write!(
            cap,
            " Steps above {} are drawn at the top of the scale: {}.",
            fmt_ms(top),
            above.join(", ")
        );
    }
    let mut lines = lines;
    let x_end = r.steps.iter().map(|s| s.step).max().unwrap_or(0) as f64;
    lines.push(Line {
        name: "steady median".into(),
        points: vec![(0.0, m), (x_end, m)],
    });
    b.push_str("<h3>Step time</h3>");
    b.push_str(&figure(
        "watch-steps",
        "step",
        "step time (ms)",
        None,
        &lines,
        &cap,
    ));
    b.push_str(&phase_chart(&r.steps));
    if let Some(w) = warmup(&r.steps, m) {
        b.push_str(
            "<h3>Warm-up</h3><table id=\"warmup\"><tr><th>step</th><th>time (ms)</th>\
             <th>x steady median</th></tr>",
        );
        for (step, ms) in &w.slow {
            let _ = write!(
                b,
                "<tr><td>{}</td><td class=\"n\">{ms:.1}</td><td class=\"n\">{:.1}x</td></tr>",
                if *step == 0 {
                    "0 (first)".to_string()
                } else {
                    step.to_string()
                },
                ms / m
            );
        }
        let _ = write!(
            b,
            "<tr><td>steady median</td><td class=\"n\">{m:.1}</td><td class=\"n\">1.0x</td></tr></table>\
             <p class=\"muted\">Warm-up took {:.2} s more than steady steps would have: {:.0}% of the {:.2} s the steps took. It is kept out of the median, samples/s and phase shares above.</p>",
            w.excess_s,
            100.0 * w.excess_s / w.total_s.max(1e-12),
            w.total_s
        );
    }
    b
}

/// Each phase's share of each step (rank 0), in % of the step.
fn phase_chart(steps: &[Step]) -> String {
    let r = rank0(steps);
    let lines: Vec<Line> = PHASE_ORDER
        .iter()
        .map(|&name| {
            let pts: Vec<(f64, f64)> = r
                .iter()
                .map(|s| (s.step as f64, 100.0 * s.phase(name) / s.dur))
                .collect();
            Line {
                name: name.to_string(),
                points: thin(pts),
            }
        })
        .filter(|l| l.points.iter().any(|p| p.1 >= 0.5))
        .collect();
    format!(
        "<h3>Phase shares</h3>{}",
        figure(
            "watch-phases",
            "step",
            "share of the step (%)",
            Some(100.0),
            &lines,
            "Each phase's share of each step in %, rank 0 (forward: the module calls; script: \
             the script's own code between the hooks, measured on the CPU only, else in \
             forward)."
        )
    )
}

/// `trace.json` of a watch: one process per rank (pid = rank, 0 outside torchrun), each
/// step a complete event ending where the hooks saw it end, its phases inside it.
pub fn trace(r: &WatchReport) -> String {
    let mut by: BTreeMap<u32, Vec<Span>> = BTreeMap::new();
    for s in &r.steps {
        let start = s.t - s.dur;
        let mut args = Map::new();
        args.insert("ms".into(), json!(s.dur * 1e3));
        if s.batch > 0 {
            args.insert("samples".into(), json!(s.batch));
        }
        if s.tokens > 0 {
            args.insert("tokens".into(), json!(s.tokens));
        }
        if s.backwards > 1 {
            args.insert("backward_calls".into(), json!(s.backwards));
        }
        let spans = by.entry(s.rank.unwrap_or(0)).or_default();
        if s.eval > 0.0 {
            // The evaluation ran between the last step's end and this step's work.
            let mut args = Map::new();
            args.insert("ms".into(), json!(s.eval * 1e3));
            spans.push(Span {
                name: "evaluation (the model in eval mode)".into(),
                cat: "eval",
                start_s: start - s.eval,
                dur_s: s.eval,
                args,
            });
        }
        spans.push(Span {
            name: if s.step == 0 {
                "step 0 (first: start-up, compilation)".into()
            } else {
                format!("step {}", s.step)
            },
            cat: "step",
            start_s: start,
            dur_s: s.dur,
            args,
        });
        let phases: Vec<(&'static str, f64)> =
            PHASE_ORDER.iter().map(|&n| (n, s.phase(n))).collect();
        spans.extend(phase_spans(start, s.dur, &phases));
    }
    let ranked = r.steps.iter().any(|s| s.rank.is_some());
    let tracks: Vec<Track> = by
        .into_iter()
        .map(|(rank, spans)| Track {
            pid: rank,
            process: if ranked {
                format!("rank {rank}")
            } else {
                "training process".into()
            },
            tid: 0,
            thread: "training steps".into(),
            spans,
        })
        .collect();
    let what = r
        .target
        .command
        .as_ref()
        .map_or_else(|| format!("pid {}", r.target.pid), |c| c.join(" "));
    render_trace(
        &tracks,
        json!({"tool": "tune watch", "command": what, "tune_version": r.environment.tune_version,
            "layout": "one process per rank; each step ends where the hooks saw it end, its phases' totals laid end to end inside it in loop order"}),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(n: u64, dur: f64) -> Step {
        Step {
            step: n,
            dur,
            forward: dur,
            ..Step::default()
        }
    }

    #[test]
    fn a_slow_first_step_dominates_a_short_run_and_not_a_long_one() {
        let mut s = vec![step(0, 3.0)];
        s.extend((1..=30).map(|n| step(n, 0.02)));
        let w = warmup(&s, 20.0).unwrap();
        assert_eq!(w.slow.len(), 1);
        assert!(w.dominates() && finding(&w).is_some(), "{w:?}");
        s.extend((31..=1000).map(|n| step(n, 0.02)));
        let w = warmup(&s, 20.0).unwrap();
        assert!(!w.dominates(), "{w:?}");
    }
}
