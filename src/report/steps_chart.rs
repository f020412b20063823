//! A sweep's step time per step: the baseline's and the fastest configuration's first
//! repeat, every step including warm-up (kept out of every figure, shown here so a slow
//! start, a compile or a drift within a trial is visible), in ms.

use super::escape::esc;
use super::lines::{render, Line, LinesChart};
use crate::results::model::{Report, TrialReport};
use crate::stats::median;

/// Points per line; a longer repeat is shown as the median of equal runs of steps.
const MAX_POINTS: usize = 500;

fn line(t: &TrialReport, role: &str) -> Option<(Line, usize)> {
    let rep = t.repeats.first().filter(|r| !r.step_times.is_empty())?;
    let pts: Vec<(f64, f64)> = rep
        .step_times
        .iter()
        .enumerate()
        .map(|(i, d)| ((i + 1) as f64, d * 1e3))
        .collect();
    let k = pts.len().div_ceil(MAX_POINTS);
    let points = pts
        .chunks(k)
        .map(|c| {
            let xs: Vec<f64> = c.iter().map(|p| p.0).collect();
            let ys: Vec<f64> = c.iter().map(|p| p.1).collect();
            (median(&xs), median(&ys))
        })
        .collect();
    Some((
        Line {
            name: format!("{role}: {}", t.label),
            points,
        },
        rep.warmup,
    ))
}

/// The figure (id `fig-steps`), or an empty string when no trial kept step times.
pub fn figure(r: &Report, fastest: Option<&str>) -> String {
    let find = |id: Option<&str>| id.and_then(|id| r.trials.iter().find(|t| t.id == id));
    let base = find(r.baseline.as_deref());
    let best = find(fastest).filter(|b| Some(b.id.as_str()) != base.map(|t| t.id.as_str()));
    let mut lines = Vec::new();
    let mut warm = Vec::new();
    for (t, role) in [(base, "baseline"), (best, "fastest")] {
        if let Some((l, w)) = t.and_then(|t| line(t, role)) {
            warm.push(format!("{} {w}", esc(&l.name)));
            lines.push(l);
        }
    }
    if lines.is_empty() {
        return String::new();
    }
    format!(
        "<h2>Step time per step</h2><figure class=\"chart\" id=\"fig-steps\">{}<figcaption>\
         Time of every step of the first repeat, in ms, warm-up included (warm-up steps: {}; \
         they are kept out of the throughput and every comparison).</figcaption></figure>",
        render(&LinesChart {
            id: "fig-steps",
            x_desc: "step",
            y_desc: "step time (ms)",
            y_max: None,
            lines: &lines,
        }),
        warm.join(", ")
    )
}
