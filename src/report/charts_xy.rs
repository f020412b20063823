//! The report's x-y charts: loss curves and throughput against memory (the Pareto
//! plot). Shared drawing helpers live in `charts`.

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, VPos};

use super::axis::Span;
use super::chart_key::{legend, Key, Placer};
use super::charts::{
    anchored, color, note, svg, text_style, tick, BAR, BEST, GRID, INK, MUTED, WIDTH,
};
use super::escape::esc;
use super::shown::{Shown, CHART_MAX};
use crate::results::model::{Report, TrialReport};
use crate::results::record::Status;

/// Longest name drawn beside its point; longer ones are numbered.
const MAX_LABEL: usize = 32;

/// Loss per step of the first repeat of each configuration shown.
pub(super) fn loss(shown: &Shown) -> String {
    let finite = |v: f32| v.is_finite() && v < f32::MAX;
    let curves: Vec<(&TrialReport, Vec<(f64, f64)>)> = shown
        .trials
        .iter()
        .filter_map(|&t| {
            let l = &t.repeats.first()?.losses;
            let pts: Vec<(f64, f64)> = l
                .iter()
                .enumerate()
                .filter(|(_, v)| finite(**v))
                .map(|(i, v)| (i as f64, f64::from(*v)))
                .collect();
            (pts.len() >= 2).then_some((t, pts))
        })
        .collect();
    if curves.is_empty() {
        return note("No loss curves recorded.");
    }
    let steps = curves
        .iter()
        .flat_map(|(_, p)| p.iter().map(|x| x.0))
        .fold(1.0, f64::max);
    let top = curves
        .iter()
        .flat_map(|(_, p)| p.iter().map(|x| x.1))
        .fold(0.0, f64::max)
        .max(1e-6);
    let (xs, ys) = (Span::new(0.0, steps), Span::upto(top, 1.05));
    let chart = svg("loss", WIDTH, 340, |root| {
        let mut chart = ChartBuilder::on(root)
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(xs.range(), ys.range())?;
        // Loss values keep plotters' own y labels (not `tick`'s rounding).
        chart
            .configure_mesh()
            .light_line_style(WHITE)
            .bold_line_style(GRID)
            .x_label_formatter(&|v| tick(*v))
            .x_desc("step (first repeat)")
            .y_desc("training loss")
            .label_style(text_style(&INK))
            .axis_desc_style(text_style(&MUTED))
            .draw()?;
        let every = (curves.iter().map(|c| c.1.len()).max().unwrap_or(1) / 8).max(1);
        for (i, (_, pts)) in curves.iter().enumerate() {
            let (c, (dash, gap)) = (color(i), DASHES[i % DASHES.len()]);
            let line = pts.iter().map(|&(x, y)| (xs.put(x), ys.put(y)));
            if gap == 0 {
                chart.draw_series(LineSeries::new(line, c.stroke_width(2)))?;
            } else {
                chart.draw_series(DashedLineSeries::new(line, dash, gap, c.stroke_width(2)))?;
            }
            // Markers at steps offset per series: coinciding curves still show each one.
            let offset = i * every / curves.len().max(1);
            let marks = pts
                .iter()
                .skip(offset)
                .step_by(every)
                .map(|&(x, y)| (xs.put(x), ys.put(y)));
            match i % 3 {
                0 => chart.draw_series(marks.map(|p| Circle::new(p, 4, c.filled())))?,
                1 => chart.draw_series(marks.map(|p| TriangleMarker::new(p, 5, c.filled())))?,
                _ => chart.draw_series(marks.map(|p| Cross::new(p, 4, c.stroke_width(2))))?,
            };
        }
        Ok(())
    });
    let keys: Vec<Key> = curves
        .iter()
        .enumerate()
        .map(|(i, (t, pts))| {
            let same = curves[..i]
                .iter()
                .find(|(_, q)| same_curve(pts, q))
                .map(|(o, _)| format!("coincides with {}", o.label))
                .unwrap_or_default();
            Key {
                name: t.label.clone(),
                color: color(i),
                dash: DASH_CSS[i % DASHES.len()],
                marker: ["●", "▲", "✕"][i % 3],
                note: same,
            }
        })
        .collect();
    chart + &legend(&keys)
}

/// Dash and gap lengths of each series' line, in turn (0 gap: solid).
const DASHES: [(u32, u32); 4] = [(0, 0), (8, 4), (2, 3), (14, 4)];
/// The same patterns as SVG stroke-dasharray, for the legend.
const DASH_CSS: [&str; 4] = ["", "8 4", "2 3", "14 4"];

/// Whether two loss curves are the same to within rounding.
fn same_curve(a: &[(f64, f64)], b: &[(f64, f64)]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(p, q)| p.0 == q.0 && (p.1 - q.1).abs() <= 1e-6 * p.1.abs().max(1.0))
}

/// The configurations no other beats on both throughput and peak memory, by memory:
/// `points` are (memory, throughput); a point is dominated by one with no more memory
/// and no less throughput, better in one of them. A point with a NaN coordinate is
/// neither dominated nor dominating.
///
/// One sort and one sweep, O(n log n): comparing every pair never finished at 100,000
/// configurations (#27). Sorted by memory, then throughput downwards, a point is on the
/// front when it has its memory's highest throughput and beats every smaller memory's.
pub fn pareto_front(points: &[(f64, f64)]) -> Vec<usize> {
    let nan = |i: &usize| points[*i].0.is_nan() || points[*i].1.is_nan();
    let (mut front, mut order): (Vec<usize>, Vec<usize>) = (0..points.len()).partition(nan);
    order.sort_by(|&a, &b| {
        let (p, q) = (points[a], points[b]);
        p.0.total_cmp(&q.0).then(q.1.total_cmp(&p.1))
    });
    let mut best_below = f64::NEG_INFINITY;
    let mut i = 0;
    while i < order.len() {
        let m = points[order[i]].0;
        let top = points[order[i]].1;
        let mut j = i;
        // The points of equal memory: only its highest throughput can be on the front.
        while j < order.len() && points[order[j]].0 == m {
            let s = points[order[j]].1;
            if s == top && s > best_below {
                front.push(order[j]);
            }
            j += 1;
        }
        best_below = best_below.max(top);
        i = j;
    }
    front.sort_by(|&a, &b| points[a].0.total_cmp(&points[b].0));
    front
}

/// The configurations no other beats on all of throughput (higher), memory and energy
/// per sample (lower): `points` are (throughput, memory, joules). Pairwise, so callers
/// keep it to the GPU sweeps that have energy figures (tens of configurations).
pub fn pareto_front3(points: &[(f64, f64, f64)]) -> Vec<usize> {
    let dominates = |a: &(f64, f64, f64), b: &(f64, f64, f64)| {
        a.0 >= b.0 && a.1 <= b.1 && a.2 <= b.2 && (a.0 > b.0 || a.1 < b.1 || a.2 < b.2)
    };
    (0..points.len())
        .filter(|&i| !points.iter().any(|q| dominates(q, &points[i])))
        .collect()
}

/// Most configurations the three-axis table ranks: pairwise dominance is quadratic.
const PARETO3_MAX: usize = 2000;

/// Speed, memory and energy per sample side by side, the three-axis Pareto front marked;
/// empty when no configuration has energy figures.
pub(super) fn pareto3(r: &Report) -> String {
    let pts: Vec<(&TrialReport, f64, f64, f64)> = r
        .trials
        .iter()
        .filter(|t| t.status == Status::Ok)
        .filter_map(|t| {
            Some((
                t,
                t.samples_per_s?.median,
                t.peak_mib()?,
                t.joules_per_sample.as_ref()?.median,
            ))
        })
        .collect();
    if pts.is_empty() {
        return String::new();
    }
    if pts.len() > PARETO3_MAX {
        return note("Too many configurations with energy figures for the three-axis table.");
    }
    let xyz: Vec<(f64, f64, f64)> = pts.iter().map(|p| (p.1, p.2, p.3)).collect();
    let front = pareto_front3(&xyz);
    let stand_in = pts
        .iter()
        .any(|p| p.0.joules_per_sample.as_ref().is_some_and(|e| e.stand_in));
    let mut s = format!(
        "<table class=\"pareto3\"><caption>Speed, memory and energy{}: ● = on the three-axis \
         Pareto front (no other configuration is at least as fast, as small and as frugal, and \
         better in one)</caption><thead><tr><th>configuration</th><th>{}</th>\
         <th>peak MiB</th><th>J/sample</th><th>front</th></tr></thead><tbody>",
        if stand_in {
            " (stand-in, not a GPU)"
        } else {
            ""
        },
        r.throughput_unit()
    );
    for (i, p) in pts.iter().enumerate() {
        s.push_str(&format!(
            "<tr><td>{}</td><td class=\"n\">{:.1}</td><td class=\"n\">{:.1}</td><td class=\"n\">{}</td><td>{}</td></tr>",
            esc(&p.0.label),
            p.1,
            p.2,
            esc(&super::markdown::joules(p.3)),
            if front.contains(&i) { "●" } else { "" }
        ));
    }
    s.push_str("</tbody></table>");
    s
}

/// At most `n` of `items`, evenly spaced, the first and the last kept.
fn thinned<T: Copy>(items: &[T], n: usize) -> Vec<T> {
    if items.len() <= n {
        return items.to_vec();
    }
    if n < 2 {
        return items[..n].to_vec();
    }
    (0..n)
        .map(|k| items[k * (items.len() - 1) / (n - 1)])
        .collect()
}

/// The successful configurations with memory figures the Pareto chart draws: all of
/// them, or when the charts show a part ([`Shown`]), those shown and the sweep's Pareto
/// front (at most [`CHART_MAX`] of its points, evenly spaced, when it is longer).
fn pareto_points<'a>(r: &'a Report, shown: &Shown) -> Vec<(&'a TrialReport, f64, f64, f64, f64)> {
    let point = |t: &'a TrialReport| {
        let c = t.samples_per_s.filter(|_| t.status == Status::Ok)?;
        Some((t, t.peak_mib()?, c.median, c.lo, c.hi))
    };
    let all: Vec<_> = r.trials.iter().filter_map(point).collect();
    if !shown.partial() {
        return all;
    }
    let xy: Vec<(f64, f64)> = all.iter().map(|p| (p.1, p.2)).collect();
    let mut keep = vec![false; all.len()];
    for i in thinned(&pareto_front(&xy), CHART_MAX) {
        keep[i] = true;
    }
    let on_chart: std::collections::HashSet<&str> =
        shown.trials.iter().map(|t| t.id.as_str()).collect();
    all.into_iter()
        .zip(keep)
        .filter(|(p, k)| *k || on_chart.contains(p.0.id.as_str()))
        .map(|(p, _)| p)
        .collect()
}

/// Throughput against peak memory, one point per successful configuration drawn with
/// its interval; the Pareto front is joined and drawn solid.
pub(super) fn pareto(r: &Report, shown: &Shown) -> String {
    let pts = pareto_points(r, shown);
    if pts.len() < 2 {
        return note("Fewer than two successful configurations with memory figures.");
    }
    let xy: Vec<(f64, f64)> = pts.iter().map(|p| (p.1, p.2)).collect();
    let front = pareto_front(&xy);
    let mut on_front = vec![false; pts.len()];
    for &i in &front {
        on_front[i] = true;
    }
    let (x_lo, x_hi) = pts
        .iter()
        .fold((f64::MAX, 0.0f64), |(a, b), p| (a.min(p.1), b.max(p.1)));
    let y_hi = pts.iter().map(|p| p.4).fold(0.0, f64::max);
    let pad = ((x_hi - x_lo) * 0.08).max(1.0);
    let (xs, ys) = (
        Span::new((x_lo - pad).max(0.0), x_hi + pad),
        Span::upto(y_hi, 1.1),
    );
    // Every point, clamped onto the canvas: (memory, median, lo, hi).
    let at = |p: &(&TrialReport, f64, f64, f64, f64)| {
        (xs.put(p.1), ys.put(p.2), ys.put(p.3), ys.put(p.4))
    };
    // Configurations whose name is drawn as a number, listed under the chart.
    let mut numbered: Vec<usize> = Vec::new();
    // A command workload's memory is the sampled RSS of its process tree.
    let x_desc = if r.environment.backend == "command" {
        "peak resident memory of the process tree (MiB)"
    } else {
        "peak memory tracked by the engine (MiB)"
    };
    let unit = r.throughput_unit();
    let chart = svg("pareto", WIDTH, 400, |root| {
        let mut chart = ChartBuilder::on(root)
            .margin(10)
            .margin_right(40)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(xs.range(), ys.range())?;
        super::charts::mesh(&mut chart, x_desc, Some(unit))?;
        chart.draw_series(std::iter::once(PathElement::new(
            front
                .iter()
                .map(|&i| {
                    let (x, y, _, _) = at(&pts[i]);
                    (x, y)
                })
                .collect::<Vec<_>>(),
            BEST.stroke_width(2),
        )))?;
        // Marks first, so that labels are placed around all of them.
        let mut marks = Vec::new();
        let mut spots = Vec::new();
        for (i, p) in pts.iter().enumerate() {
            let (x, mid, lo, hi) = at(p);
            chart.draw_series(std::iter::once(ErrorBar::new_vertical(
                x,
                lo,
                mid,
                hi,
                MUTED.stroke_width(1),
                6,
            )))?;
            let style = if on_front[i] {
                BEST.filled()
            } else {
                BAR.stroke_width(2)
            };
            chart.draw_series(std::iter::once(Circle::new((x, mid), 5, style)))?;
            let c = chart.backend_coord(&(x, mid));
            let (top, bottom) = (
                chart.backend_coord(&(x, hi)).1,
                chart.backend_coord(&(x, lo)).1,
            );
            marks.push((c.0 - 6, c.1 - 6, c.0 + 7, c.1 + 7));
            marks.push((c.0 - 4, top - 1, c.0 + 5, bottom + 1));
            spots.push(c);
        }
        let (xr, yr) = chart.plotting_area().get_pixel_range();
        let mut placer = Placer::new((xr.start, yr.start, xr.end, yr.end), marks);
        for (i, p) in pts.iter().enumerate() {
            let ink = if on_front[i] { &INK } else { &MUTED };
            let name = p.0.label.as_str();
            // A long name would cover half the plot: it gets a number, and its full text
            // goes in the key under the chart; so does a label with no free spot.
            let spot = (name.chars().count() <= MAX_LABEL)
                .then(|| placer.place(spots[i], name.chars().count()))
                .flatten();
            let (text, corner) = match spot {
                Some(c) => (name.to_string(), Some(c)),
                None => {
                    numbered.push(i);
                    let n = (numbered.len()).to_string();
                    let c = placer.place(spots[i], n.chars().count());
                    (n, c)
                }
            };
            if let Some((l, t)) = corner {
                root.draw(&Text::new(
                    text,
                    (l, t + 1),
                    anchored(ink, HPos::Left, VPos::Top),
                ))?;
            }
        }
        Ok(())
    });
    if numbered.is_empty() {
        return chart;
    }
    let mut key = format!(
        "<table class=\"chart-key\"><thead><tr><th>#</th><th>configuration</th><th>peak MiB</th><th>{unit}</th></tr></thead><tbody>",
    );
    for (n, &i) in numbered.iter().enumerate() {
        let p = &pts[i];
        key.push_str(&format!(
            "<tr><td class=\"n\">{}</td><td>{}</td><td class=\"n\">{:.1}</td><td class=\"n\">{:.1}</td></tr>",
            n + 1,
            esc(&p.0.label),
            p.1,
            p.2
        ));
    }
    key.push_str("</tbody></table>");
    chart + &key
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each `<text>` of an SVG as an estimated box (left, top, right, bottom) and its text;
    /// rotated axis titles are left out.
    fn text_boxes(svg: &str) -> Vec<(f64, f64, f64, f64, String)> {
        let attr = |tag: &str, name: &str| -> Option<String> {
            let at = tag.find(&format!("{name}=\""))? + name.len() + 2;
            Some(tag[at..].split('"').next()?.to_string())
        };
        let mut out = Vec::new();
        for part in svg.split("<text").skip(1) {
            let (tag, rest) = part.split_once('>').unwrap();
            if tag.contains("transform") {
                continue;
            }
            let text = ["&lt;", "&gt;", "&quot;", "&#39;", "&amp;"]
                .iter()
                .zip(["<", ">", "\"", "'", "&"])
                .fold(
                    rest.split("</text>").next().unwrap().trim().to_string(),
                    |t, (e, c)| t.replace(e, c),
                );
            let num = |n: &str| {
                attr(tag, n)
                    .and_then(|v| v.parse::<f64>().ok())
                    .unwrap_or_else(|| panic!("{n} in {tag}"))
            };
            let (x, y, size) = (num("x"), num("y"), num("font-size"));
            let w = text.chars().count() as f64 * size * 0.6;
            let left = match attr(tag, "text-anchor").as_deref() {
                Some("middle") => x - w / 2.0,
                Some("end") => x - w,
                _ => x,
            };
            let dy = attr(tag, "dy").unwrap_or_default();
            let top = if dy.contains("0.76em") {
                y
            } else if dy.contains("0.5ex") {
                y - size / 2.0
            } else {
                y - size
            };
            out.push((left, top, left + w, top + size, text));
        }
        out
    }

    #[test]
    fn pareto_labels_never_overlap_and_stay_on_the_canvas() {
        use crate::advisor::testkit::{report, spec, trial};
        let s = spec("num_workers = [0, 1, 2]", "strategy = \"grid\"");
        let trials = (0..14)
            .map(|i| {
                let w = i.to_string();
                // Clusters of near-equal points, the case that made labels collide.
                trial(
                    &s,
                    &[("num_workers", w.as_str())],
                    0.01 + 0.0002 * (i % 5) as f64,
                )
                .peak_mib(100 + (i / 5) as u64)
            })
            .collect();
        let mut r = report(&s, trials);
        for (i, t) in r.trials.iter_mut().enumerate() {
            t.label = match i % 3 {
                0 => format!("w={i}"),
                1 => format!("num_workers={i} <b>&amp;</b>"),
                _ => format!("a_very_long_configuration_name_{i}_that_cannot_fit_beside_a_point"),
            };
        }
        let html = pareto(&r, &Shown::of(&r, None));
        let svg = &html[..html.find("</svg>").unwrap()];
        let boxes = text_boxes(svg);
        assert!(boxes.len() > 14, "{svg}");
        for (i, a) in boxes.iter().enumerate() {
            assert!(
                a.0 >= 0.0 && a.1 >= 0.0 && a.2 <= WIDTH as f64 && a.3 <= 400.0,
                "{a:?} off the canvas"
            );
            for b in &boxes[i + 1..] {
                let clear = a.2 <= b.0 || b.2 <= a.0 || a.3 <= b.1 || b.3 <= a.1;
                assert!(clear, "{a:?} overlaps {b:?}");
            }
        }
        // Long names are keyed under the chart in full.
        assert!(html.contains("chart-key") && html.contains("that_cannot_fit_beside_a_point"));
    }

    #[test]
    fn three_axis_front_keeps_a_point_better_on_energy_alone() {
        // (samples/s, MiB, J/sample): 1 is slower and larger than 0 but uses less energy;
        // 2 is beaten by 0 on every axis.
        let pts = [(100.0, 10.0, 0.5), (90.0, 12.0, 0.4), (80.0, 12.0, 0.6)];
        assert_eq!(pareto_front3(&pts), vec![0, 1]);
    }

    #[test]
    fn pareto_front_keeps_only_undominated_points() {
        // (memory, throughput)
        let pts = [
            (100.0, 50.0),
            (80.0, 40.0),
            (120.0, 45.0),
            (60.0, 20.0),
            (90.0, 50.0),
        ];
        assert_eq!(pareto_front(&pts), vec![3, 1, 4]);
    }

    /// The sweep finds what comparing every pair finds, ties and NaN included.
    #[test]
    fn pareto_front_matches_the_pairwise_definition() {
        let naive = |points: &[(f64, f64)]| {
            let mut front: Vec<usize> = (0..points.len())
                .filter(|&i| {
                    let (m, s) = points[i];
                    !points
                        .iter()
                        .enumerate()
                        .any(|(j, &(m2, s2))| j != i && m2 <= m && s2 >= s && (m2 < m || s2 > s))
                })
                .collect();
            front.sort_by(|&a, &b| points[a].0.total_cmp(&points[b].0));
            front
        };
        let mut rng = crate::stats::SplitMix64::new(3);
        for round in 0..300 {
            // Few distinct values: many ties in memory, throughput or both.
            let pts: Vec<(f64, f64)> = (0..1 + round % 40)
                .map(|_| {
                    let v = |r: &mut crate::stats::SplitMix64| match r.below(12) {
                        0 => f64::NAN,
                        k => k as f64,
                    };
                    (v(&mut rng), v(&mut rng))
                })
                .collect();
            let (mut got, mut want) = (pareto_front(&pts), naive(&pts));
            // Equal memories may come in either order.
            got.sort_unstable();
            want.sort_unstable();
            assert_eq!(got, want, "{pts:?}");
        }
    }

    /// A million configurations: one sort. Comparing every pair (10^12 comparisons)
    /// would run for hours; the deadline is far above the sort's time on a loaded machine.
    #[test]
    fn pareto_front_of_a_million_points_is_not_quadratic() {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut rng = crate::stats::SplitMix64::new(9);
            let pts: Vec<(f64, f64)> = (0..1_000_000)
                .map(|_| (rng.next_f64() * 1e3, rng.next_f64() * 1e3))
                .collect();
            let _ = tx.send(pareto_front(&pts).len());
        });
        let n = rx
            .recv_timeout(std::time::Duration::from_secs(300))
            .expect("the Pareto front of 10^6 points took over 300 s");
        assert!(n >= 1);
    }
}
