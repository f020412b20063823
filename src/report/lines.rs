//! A plain series chart: named lines over one axis (time, or steps), for reports that are not
//! sweeps (a `tune watch` report's timeline). The legend is HTML under the chart, not
//! drawn inside it, so it can never cover a line however many series there are; lines
//! that coincide stay distinguishable by their dash pattern as well as their colour.

use plotters::element::DashedPathElement;
use plotters::prelude::*;

use super::axis::Span;
use super::charts::{color, note, svg, WIDTH};
use super::escape::esc;

/// One named series of `(t_s, value)` points.
#[derive(Clone, Debug, PartialEq)]
pub struct Line {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// One chart: its id (a fixed name, never user text), its y axis and its lines.
pub struct LinesChart<'a> {
    pub id: &'static str,
    pub x_desc: &'a str,
    pub y_desc: &'a str,
    /// A fixed top (100 for percentages); None scales to the data.
    pub y_max: Option<f64>,
    pub lines: &'a [Line],
}

/// Dash lengths per line: solid, then dashed patterns, cycling with the palette offset
/// so that line i and line i+10 (same colour) differ.
fn dash(i: usize) -> Option<(u32, u32)> {
    match (i / 3) % 3 {
        0 => None,
        1 => Some((8, 4)),
        _ => Some((2, 3)),
    }
}

/// The chart as `<svg>` followed by its HTML legend, or a note when there is nothing to
/// draw.
pub fn render(c: &LinesChart<'_>) -> String {
    let lines: Vec<&Line> = c.lines.iter().filter(|l| !l.points.is_empty()).collect();
    if lines.is_empty() {
        return note("No samples of this kind were taken.");
    }
    let t_end = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.0))
        .fold(0.0, f64::max)
        .max(1e-3);
    let v_max = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.1))
        .fold(0.0, f64::max);
    let xs = Span::upto(t_end, 1.0);
    let ys = match c.y_max {
        Some(m) => Span::new(0.0, m.max(v_max)),
        None => Span::upto(v_max.max(1e-9), 1.1),
    };
    let chart = svg(c.id, WIDTH, 260, |root| {
        let mut chart = ChartBuilder::on(root)
            .margin(10)
            .margin_right(20)
            .x_label_area_size(34)
            .y_label_area_size(60)
            .build_cartesian_2d(xs.range(), ys.range())?;
        super::charts::mesh(&mut chart, c.x_desc, Some(c.y_desc))?;
        for (i, l) in lines.iter().enumerate() {
            let style = color(i).stroke_width(2);
            let pts: Vec<(f64, f64)> = l
                .points
                .iter()
                .map(|&(t, v)| (xs.put(t), ys.put(v)))
                .collect();
            match dash(i) {
                None => {
                    chart.draw_series(LineSeries::new(pts, style))?;
                }
                Some((size, spacing)) => {
                    chart.draw_series(std::iter::once(DashedPathElement::new(
                        pts, size, spacing, style,
                    )))?;
                }
            }
        }
        Ok(())
    });
    let mut legend = String::from("<ul class=\"legend\">");
    for (i, l) in lines.iter().enumerate() {
        let RGBColor(r, g, b) = color(i);
        let border = match dash(i) {
            None => "solid",
            Some((8, _)) => "dashed",
            Some(_) => "dotted",
        };
        legend.push_str(&format!(
            "<li><span class=\"swatch\" style=\"border-top:3px {border} rgb({r},{g},{b})\"></span>{}</li>",
            esc(&l.name)
        ));
    }
    legend.push_str("</ul>");
    format!("{chart}{legend}")
}
