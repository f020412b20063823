//! `trace.json`: the steps and their phases in the Chrome trace-event format, which
//! Perfetto (ui.perfetto.dev) and `chrome://tracing` open, since that is where users go to
//! look deeper. One process per rank (a watch) or per trial (a sweep), one thread per
//! stream of steps; each step is a complete ("X") event with its phases nested inside it,
//! timestamps and durations in microseconds from the earliest event. Names come from
//! "M" (metadata) events.

use serde_json::{json, Map, Value};

use super::Report;

pub const TRACE_JSON: &str = "trace.json";

/// One interval: a step or a phase inside one.
#[derive(Clone, Debug, PartialEq)]
pub struct Span {
    pub name: String,
    pub cat: &'static str,
    /// Seconds on the track's clock (any origin: the file starts at the earliest span).
    pub start_s: f64,
    pub dur_s: f64,
    pub args: Map<String, Value>,
}

/// One stream of spans: a thread (`tid`) of a process (`pid`).
#[derive(Clone, Debug, PartialEq)]
pub struct Track {
    pub pid: u32,
    pub process: String,
    pub tid: u32,
    pub thread: String,
    pub spans: Vec<Span>,
}

/// The phases of a step laid end to end inside it, in the order a training loop runs
/// them. The hooks measure each phase's total within the step, not when it ran, so the
/// nesting shows how the step divides, and the args say so.
pub const PHASE_ORDER: [&str; 7] = crate::bridge::Step::PHASES;

/// `phases` (name, seconds) as spans laid end to end from `start_s`, scaled down if
/// their sum exceeds `dur_s` (rounding in the hooks) so that each nests in its step.
pub fn phase_spans(start_s: f64, dur_s: f64, phases: &[(&'static str, f64)]) -> Vec<Span> {
    let sum: f64 = phases.iter().map(|p| p.1.max(0.0)).sum();
    let scale = if sum > dur_s && sum > 0.0 {
        dur_s / sum
    } else {
        1.0
    };
    let mut t = start_s;
    let mut out = Vec::new();
    for &(name, d) in phases {
        let d = d.max(0.0) * scale;
        if d <= 0.0 {
            continue;
        }
        let mut args = Map::new();
        args.insert("ms".into(), json!(d * 1e3));
        args.insert(
            "placement".into(),
            json!("the phase's total within the step, laid end to end in loop order"),
        );
        out.push(Span {
            name: name.to_string(),
            cat: "phase",
            start_s: t,
            dur_s: d,
            args,
        });
        t += d;
    }
    out
}

fn us(s: f64) -> f64 {
    // Whole nanoseconds: enough for any step, and no float noise in the file.
    (s * 1e9).round() / 1e3
}

/// The trace file's text. `other` goes into `otherData` (what was traced, by whom).
pub fn render(tracks: &[Track], other: Value) -> String {
    let t0 = tracks
        .iter()
        .flat_map(|t| t.spans.iter().map(|s| s.start_s))
        .filter(|t| t.is_finite())
        .fold(f64::INFINITY, f64::min);
    let t0 = if t0.is_finite() { t0 } else { 0.0 };
    let mut events: Vec<Value> = Vec::new();
    let mut named = std::collections::BTreeSet::new();
    for tr in tracks {
        if named.insert(tr.pid) {
            events.push(
                json!({"name": "process_name", "ph": "M", "pid": tr.pid, "tid": 0,
                "args": {"name": tr.process}}),
            );
            events.push(
                json!({"name": "process_sort_index", "ph": "M", "pid": tr.pid,
                "tid": 0, "args": {"sort_index": tr.pid}}),
            );
        }
        events.push(
            json!({"name": "thread_name", "ph": "M", "pid": tr.pid, "tid": tr.tid,
            "args": {"name": tr.thread}}),
        );
        for s in &tr.spans {
            if !(s.start_s.is_finite() && s.dur_s.is_finite() && s.dur_s >= 0.0) {
                continue;
            }
            events.push(json!({"name": s.name, "cat": s.cat, "ph": "X",
                "ts": us(s.start_s - t0), "dur": us(s.dur_s), "pid": tr.pid, "tid": tr.tid,
                "args": s.args}));
        }
    }
    let doc = json!({"traceEvents": events, "displayTimeUnit": "ms", "otherData": other});
    // Values built here are finite numbers and strings: encoding cannot fail.
    serde_json::to_string(&doc).unwrap_or_else(|_| "{\"traceEvents\":[]}".into())
}

/// A sweep's trace: one process per trial, one thread per repeat, its measured steps
/// laid end to end from the repeat's start (the records keep step durations, not when
/// each began). A repeat whose steps' events carried their phases (a script's hooks)
/// has them nested in each step; the engine's records keep only means, so its steps
/// carry none rather than a mean dressed as each step's.
pub fn sweep(r: &Report) -> String {
    let mut tracks = Vec::new();
    for (i, t) in r.trials.iter().enumerate() {
        let pid = u32::try_from(i + 1).unwrap_or(u32::MAX);
        for (k, rep) in t.repeats.iter().enumerate() {
            let mut at = 0.0;
            let mut spans = Vec::with_capacity(rep.step_times.len());
            for (n, &d) in rep.step_times.iter().enumerate() {
                let mut args = Map::new();
                args.insert("ms".into(), json!(d * 1e3));
                args.insert("warmup".into(), json!(n < rep.warmup));
                spans.push(Span {
                    name: format!("step {}", n + 1),
                    cat: "step",
                    start_s: at,
                    dur_s: d,
                    args,
                });
                if let Some(p) = rep
                    .step_phases
                    .get(n)
                    .filter(|_| rep.step_phases.len() == rep.step_times.len())
                {
                    let named: Vec<(&'static str, f64)> =
                        PHASE_ORDER.iter().map(|&k| (k, p.get(k))).collect();
                    spans.extend(phase_spans(at, d, &named));
                }
                at += d;
            }
            tracks.push(Track {
                pid,
                process: format!("trial {}: {}", t.id, t.label),
                tid: u32::try_from(k).unwrap_or(u32::MAX),
                thread: format!("repeat {}", k + 1),
                spans,
            });
        }
    }
    render(
        &tracks,
        json!({"tool": "tune sweep", "tune_version": r.environment.tune_version,
            "layout": "one process per trial, one thread per repeat; each repeat's steps laid end to end from its start"}),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_nest_inside_their_step_and_times_are_microseconds() {
        let p = phase_spans(10.0, 0.010, &[("data_wait", 0.004), ("forward", 0.007)]);
        assert_eq!(p.len(), 2);
        let end = p[1].start_s + p[1].dur_s;
        assert!(end <= 10.010 + 1e-12, "{p:?}");
        let text = render(
            &[Track {
                pid: 0,
                process: "rank 0".into(),
                tid: 0,
                thread: "steps".into(),
                spans: p,
            }],
            json!({}),
        );
        let v: Value = serde_json::from_str(&text).unwrap();
        let ev = v["traceEvents"].as_array().unwrap();
        let x: Vec<&Value> = ev.iter().filter(|e| e["ph"] == "X").collect();
        assert_eq!(x[0]["ts"], 0.0);
        // 4 ms of 11 scaled into the 10 ms step.
        assert!((x[0]["dur"].as_f64().unwrap() - 4000.0 * 10.0 / 11.0).abs() < 0.01);
        assert!(ev
            .iter()
            .any(|e| e["ph"] == "M" && e["args"]["name"] == "rank 0"));
    }
}
