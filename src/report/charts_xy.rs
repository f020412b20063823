//! The report's x-y charts: loss curves and throughput against memory (the Pareto
//! plot). Shared drawing helpers live in `charts`.

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, VPos};

use super::axis::Span;
use super::charts::{
    anchored, color, note, svg, text_style, tick, truncate, BAR, BEST, GRID, INK, MUTED, WIDTH,
};
use crate::results::model::{Report, TrialReport};
use crate::results::record::Status;

/// Loss per step of each configuration's first repeat.
pub fn loss(r: &Report) -> String {
    let finite = |v: f32| v.is_finite() && v < f32::MAX;
    let curves: Vec<(&TrialReport, Vec<(f64, f64)>)> = r
        .trials
        .iter()
        .filter_map(|t| {
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
    svg("loss", WIDTH, 340, |root| {
        let mut chart = ChartBuilder::on(root)
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(xs.range(), ys.range())?;
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
        for (i, (t, pts)) in curves.iter().enumerate() {
            let c = color(i);
            chart
                .draw_series(LineSeries::new(
                    pts.iter().map(|&(x, y)| (xs.put(x), ys.put(y))),
                    c.stroke_width(2),
                ))?
                .label(truncate(&t.label, 40))
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(GRID)
            .label_font(text_style(&INK))
            .draw()?;
        Ok(())
    })
}

/// The configurations no other beats on both throughput and peak memory, by memory.
pub fn pareto_front(points: &[(f64, f64)]) -> Vec<usize> {
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
}

/// Throughput against peak memory, one point per successful configuration with its
/// interval; the Pareto front is joined and drawn solid.
pub fn pareto(r: &Report) -> String {
    let pts: Vec<(&TrialReport, f64, f64, f64, f64)> = r
        .trials
        .iter()
        .filter(|t| t.status == Status::Ok)
        .filter_map(|t| {
            let c = t.samples_per_s?;
            Some((t, t.peak_mib()?, c.median, c.lo, c.hi))
        })
        .collect();
    if pts.len() < 2 {
        return note("Fewer than two successful configurations with memory figures.");
    }
    let xy: Vec<(f64, f64)> = pts.iter().map(|p| (p.1, p.2)).collect();
    let front = pareto_front(&xy);
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
    svg("pareto", WIDTH, 400, |root| {
        let mut chart = ChartBuilder::on(root)
            .margin(10)
            .margin_right(40)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(xs.range(), ys.range())?;
        chart
            .configure_mesh()
            .light_line_style(WHITE)
            .bold_line_style(GRID)
            .x_label_formatter(&|v| tick(*v))
            .y_label_formatter(&|v| tick(*v))
            .x_desc("peak memory tracked by the engine (MiB)")
            .y_desc("samples/s")
            .label_style(text_style(&INK))
            .axis_desc_style(text_style(&MUTED))
            .draw()?;
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
        let mut placed: Vec<(i32, i32, i32)> = Vec::new();
        for (i, p) in pts.iter().enumerate() {
            let on_front = front.contains(&i);
            let (x, mid, lo, hi) = at(p);
            chart.draw_series(std::iter::once(ErrorBar::new_vertical(
                x,
                lo,
                mid,
                hi,
                MUTED.stroke_width(1),
                6,
            )))?;
            let style = if on_front {
                BEST.filled()
            } else {
                BAR.stroke_width(2)
            };
            chart.draw_series(std::iter::once(Circle::new((x, mid), 5, style)))?;
            let at = chart.backend_coord(&(x, mid));
            let label = truncate(&p.0.label, 28);
            // Nearby points would print their labels on top of each other: move a label
            // down a line until it is clear of those already placed.
            // A bounded number of moves: thousands of coinciding points must not make
            // this quadratic per label.
            let (x, mut y) = (at.0 + 8, at.1 - 8);
            let w = 7 * label.chars().count() as i32;
            for _ in 0..40 {
                if !placed
                    .iter()
                    .any(|&(px, py, pw)| (py - y).abs() < 13 && x < px + pw && px < x + w)
                {
                    break;
                }
                y += 13;
            }
            placed.push((x, y, w));
            root.draw(&Text::new(
                label,
                (x, y),
                anchored(
                    if on_front { &INK } else { &MUTED },
                    HPos::Left,
                    VPos::Bottom,
                ),
            ))?;
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
