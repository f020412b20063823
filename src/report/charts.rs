//! The report's charts as inline SVG, drawn with plotters' SVG backend. Without the
//! `ttf` feature plotters writes text as SVG `<text>` (the browser picks the font) and
//! escapes it, so user strings in labels cannot become markup.
//!
//! Each function returns one `<svg>` element, or a short HTML note saying why there is
//! nothing to draw; a drawing error is shown as such, never as an empty chart.

use std::collections::BTreeMap;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::axis::Span;
use super::chart_key::{legend, Key, CHAR_W};
pub(super) use super::charts_xy::{loss, pareto, pareto3};
use super::shown::Shown;
use crate::results::model::{Report, TrialReport};

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;
type Drawn = Result<(), Box<dyn std::error::Error>>;

/// Tableau 10: distinguishable, and readable on white.
pub const PALETTE: [RGBColor; 10] = [
    RGBColor(78, 121, 167),
    RGBColor(242, 142, 43),
    RGBColor(225, 87, 89),
    RGBColor(118, 183, 178),
    RGBColor(89, 161, 79),
    RGBColor(237, 201, 72),
    RGBColor(176, 122, 161),
    RGBColor(255, 157, 167),
    RGBColor(156, 117, 95),
    RGBColor(186, 176, 172),
];
pub(super) const INK: RGBColor = RGBColor(34, 34, 34);
pub(super) const MUTED: RGBColor = RGBColor(119, 119, 119);
pub(super) const GRID: RGBColor = RGBColor(221, 221, 221);
pub(super) const BAR: RGBColor = RGBColor(78, 121, 167);
pub(super) const BEST: RGBColor = RGBColor(89, 161, 79);
const CONFIRM: RGBColor = RGBColor(176, 122, 161);
const BAD: RGBColor = RGBColor(187, 0, 0);
const BAND: RGBColor = RGBColor(242, 242, 242);

const FONT: &str = "sans-serif";
/// plotters' SVG backend writes font-size = size / 1.24; 15 gives 12px text.
pub(super) const TEXT: f64 = 15.0;
pub(super) const WIDTH: u32 = 980;

pub fn color(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

pub fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}

pub(super) fn text_style(c: &'static RGBColor) -> TextStyle<'static> {
    TextStyle::from((FONT, TEXT).into_font()).color(c)
}

pub(super) fn anchored(c: &'static RGBColor, h: HPos, v: VPos) -> TextStyle<'static> {
    text_style(c).pos(Pos::new(h, v))
}

/// `tick` as a formatter plotters can hold for a whole mesh (a fn item, not a temporary).
fn tick_of(v: &f64) -> String {
    tick(*v)
}

/// A chart's grid in the reports' one style: white minor and grey major lines, `tick`
/// labels, ink labels and muted descriptions. `y_desc: None` is a bar chart's: no y
/// grid and no y labels (its rows are labelled by hand).
pub(super) fn mesh(
    chart: &mut ChartContext<
        '_,
        SVGBackend<'_>,
        Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
    >,
    x_desc: &str,
    y_desc: Option<&str>,
) -> Drawn {
    let mut m = chart.configure_mesh();
    m.light_line_style(WHITE)
        .bold_line_style(GRID)
        .x_label_formatter(&tick_of)
        .x_desc(x_desc)
        .label_style(text_style(&INK))
        .axis_desc_style(text_style(&MUTED));
    match y_desc {
        Some(d) => m.y_label_formatter(&tick_of).y_desc(d),
        None => m.disable_y_mesh().y_labels(0),
    };
    m.draw()?;
    Ok(())
}

/// Draws into a fresh SVG of `w`×`h` pixels, labelled for screen readers and tests.
pub(super) fn svg(id: &str, w: u32, h: u32, draw: impl FnOnce(&Area) -> Drawn) -> String {
    let mut buf = String::new();
    let res = {
        let root = SVGBackend::with_string(&mut buf, (w, h)).into_drawing_area();
        root.fill(&WHITE)
            .map_err(|e| e.into())
            .and_then(|_| draw(&root))
            .and_then(|_| root.present().map_err(|e| e.into()))
    };
    match res {
        // `id` is one of this module's fixed names, never user text.
        Ok(()) => buf.replacen(
            "<svg ",
            &format!("<svg class=\"chart-svg\" data-chart=\"{id}\" role=\"img\" "),
            1,
        ),
        Err(e) => format!(
            "<p class=\"bad\">chart {id} could not be drawn: {}</p>",
            super::escape::esc(&e.to_string())
        ),
    }
}

pub(super) fn note(text: &str) -> String {
    format!("<p class=\"muted\">{}</p>", super::escape::esc(text))
}

/// An axis tick: no decimals once the numbers are large enough not to need them.
pub(super) fn tick(v: f64) -> String {
    if v.abs() >= 10.0 || v == v.round() {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// Width of the label column for labels of up to `chars` characters.
fn label_width(labels: &[String]) -> u32 {
    let longest = labels.iter().map(|l| l.chars().count()).max().unwrap_or(8);
    (longest as u32 * 7 + 16).clamp(90, 300)
}

/// One row of the throughput chart.
struct Row<'a> {
    label: String,
    trial: &'a TrialReport,
    fill: RGBColor,
}

/// Horizontal bars of median samples/s per configuration shown, with the 95% interval
/// as an error bar and the baseline's median as a vertical rule. The confirmation run,
/// when there is one, is the last row. `fastest` (green) is the trial the report calls
/// fastest: significantly faster than the baseline, or none.
pub(super) fn throughput(r: &Report, shown: &Shown, fastest: Option<&str>) -> String {
    let mut rows: Vec<Row> = shown
        .trials
        .iter()
        .map(|t| Row {
            label: truncate(&t.label, 40),
            trial: t,
            fill: if fastest == Some(t.id.as_str()) {
                BEST
            } else {
                BAR
            },
        })
        .collect();
    if let Some(c) = &r.confirmation {
        for t in c.baseline_rerun.iter().chain(c.trial.iter()) {
            rows.push(Row {
                label: truncate(&t.label, 40),
                trial: t,
                fill: CONFIRM,
            });
        }
    }
    let max = rows
        .iter()
        .filter_map(|row| row.trial.samples_per_s.map(|c| c.hi.max(c.median)))
        .fold(0.0, f64::max);
    if rows.is_empty() || max.is_nan() || max <= 0.0 {
        return note("No successful trial to chart.");
    }
    let n = rows.len();
    let (xs, ys) = (Span::upto(max, 1.05), Span::new(0.0, n as f64));
    let labels: Vec<String> = rows.iter().map(|x| x.label.clone()).collect();
    let lw = label_width(&labels);
    let h = 26 * n as u32 + 70;
    let base = r
        .baseline
        .as_deref()
        .and_then(|id| r.trial(id))
        .and_then(|t| t.samples_per_s);
    svg("throughput", WIDTH, h, |root| {
        let mut chart = ChartBuilder::on(root)
            .margin(10)
            .margin_right(70)
            .x_label_area_size(40)
            .y_label_area_size(lw)
            .build_cartesian_2d(xs.range(), ys.range())?;
        mesh(
            &mut chart,
            &format!("{} (median, 95% bootstrap interval)", r.throughput_unit()),
            None,
        )?;
        let y = |i: usize| (n - 1 - i) as f64;
        for (i, row) in rows.iter().enumerate() {
            let at = chart.backend_coord(&(0.0, y(i) + 0.5));
            root.draw(&Text::new(
                row.label.clone(),
                (at.0 - 8, at.1),
                anchored(&INK, HPos::Right, VPos::Center),
            ))?;
            match row.trial.samples_per_s {
                Some(c) => {
                    let (lo, mid, hi) = (xs.put(c.lo), xs.put(c.median), xs.put(c.hi));
                    chart.draw_series(std::iter::once(Rectangle::new(
                        [(0.0, y(i) + 0.18), (mid, y(i) + 0.82)],
                        row.fill.filled(),
                    )))?;
                    chart.draw_series(std::iter::once(ErrorBar::new_horizontal(
                        y(i) + 0.5,
                        lo,
                        mid,
                        hi,
                        INK.stroke_width(1),
                        8,
                    )))?;
                    let end = chart.backend_coord(&(hi, y(i) + 0.5));
                    root.draw(&Text::new(
                        format!("{:.1}", c.median),
                        (end.0 + 6, end.1),
                        anchored(&INK, HPos::Left, VPos::Center),
                    ))?;
                }
                None => {
                    root.draw(&Text::new(
                        row.trial.status.as_str().to_string(),
                        (at.0 + 6, at.1),
                        anchored(&BAD, HPos::Left, VPos::Center),
                    ))?;
                }
            }
        }
        if let Some(b) = base {
            chart.draw_series(std::iter::once(PathElement::new(
                vec![(xs.put(b.median), 0.0), (xs.put(b.median), n as f64)],
                MUTED.stroke_width(1),
            )))?;
        }
        Ok(())
    })
}

/// Phase names in a fixed, meaningful order; `recompute` is inside `backward` and
/// stacking it would count it twice.
fn phase_order(trials: &[&TrialReport]) -> Vec<String> {
    const ORDER: [&str; 8] = [
        "data_wait",
        "h2d",
        "zero_grad",
        "forward",
        "backward",
        "comm",
        "optimizer",
        "other",
    ];
    let mut names: Vec<String> = ORDER
        .iter()
        .filter(|n| trials.iter().any(|t| t.phase_share.contains_key(**n)))
        .map(|n| n.to_string())
        .collect();
    for t in trials {
        for k in t.phase_share.keys() {
            if k != "recompute" && !names.contains(k) {
                names.push(k.clone());
            }
        }
    }
    names
}

/// One stacked bar per configuration shown: the share of a step in each phase.
pub(super) fn phases(shown: &Shown) -> String {
    let names = phase_order(&shown.trials);
    let rows: Vec<&TrialReport> = shown
        .trials
        .iter()
        .copied()
        .filter(|t| !t.phase_share.is_empty())
        .collect();
    if rows.is_empty() {
        return note("No phase timings recorded (external-command workloads have none).");
    }
    let n = rows.len();
    let labels: Vec<String> = rows.iter().map(|t| truncate(&t.label, 40)).collect();
    let lw = label_width(&labels);
    let h = 26 * n as u32 + 96;
    let (xs, ys) = (Span::new(0.0, 100.0), Span::new(0.0, n as f64));
    svg("phases", WIDTH, h, |root| {
        let (plot, legend) = root.split_vertically(h - 34);
        let mut chart = ChartBuilder::on(&plot)
            .margin(10)
            .margin_right(30)
            .x_label_area_size(40)
            .y_label_area_size(lw)
            .build_cartesian_2d(xs.range(), ys.range())?;
        mesh(&mut chart, "share of a step (%)", None)?;
        for (i, t) in rows.iter().enumerate() {
            let y = (n - 1 - i) as f64;
            let at = chart.backend_coord(&(0.0, y + 0.5));
            root.draw(&Text::new(
                labels[i].clone(),
                (at.0 - 8, at.1),
                anchored(&INK, HPos::Right, VPos::Center),
            ))?;
            // A share that is negative, NaN or infinite counts as nothing.
            let share = |k: &String| {
                t.phase_share
                    .get(k)
                    .copied()
                    .filter(|v| v.is_finite() && *v > 0.0)
            };
            let total: f64 = names.iter().filter_map(share).sum::<f64>().min(f64::MAX);
            let mut x = 0.0;
            for (j, k) in names.iter().enumerate() {
                let Some(v) = share(k) else {
                    continue;
                };
                let end = xs.put(x + 100.0 * (v / total.max(1e-12)));
                let w = end - x;
                chart.draw_series(std::iter::once(Rectangle::new(
                    [(x, y + 0.18), (end, y + 0.82)],
                    color(j).filled(),
                )))?;
                if w >= 7.0 {
                    let mid = chart.backend_coord(&(x + w / 2.0, y + 0.5));
                    root.draw(&Text::new(
                        format!("{:.0}%", v * 100.0),
                        mid,
                        anchored(&WHITE, HPos::Center, VPos::Center),
                    ))?;
                }
                x = end;
            }
        }
        legend_row(&legend, lw as i32 + 10, &names)
    })
}

/// A row of colour swatches with names.
fn legend_row(area: &Area, x0: i32, names: &[String]) -> Drawn {
    let mut x = x0;
    for (j, k) in names.iter().enumerate() {
        area.draw(&Rectangle::new([(x, 10), (x + 12, 22)], color(j).filled()))?;
        area.draw(&Text::new(
            k.clone(),
            (x + 16, 16),
            anchored(&INK, HPos::Left, VPos::Center),
        ))?;
        x += 30 + 7 * k.chars().count() as i32;
    }
    Ok(())
}

/// Per-device series over the sweep's timeline: utilization (%) on top, memory (MiB)
/// below, with each trial's stretch shaded and named.
pub fn device_timeline(r: &Report) -> String {
    if r.timeline.is_empty() {
        return note(
            "No device samples in this report (sampling was off, or the report predates schema 1.1).",
        );
    }
    let cores = r.environment.cores.max(1) as f64;
    // (device, metric) -> (legend, points); CPU use of the trial processes is shown as a
    // share of all cores so it sits on the same 0-100% axis as GPU utilization.
    let mut util: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    let mut mem: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for s in &r.timeline {
        match s.metric.as_str() {
            "cpu_pct" => util
                .entry(format!("{} CPU, trial processes", s.device))
                .or_default()
                .push((s.t_s, s.value / cores)),
            // Everything running on the machine: other work competes with the trials.
            "cpu_util_pct" => util
                .entry(format!("{} CPU, whole machine", s.device))
                .or_default()
                .push((s.t_s, s.value)),
            "util_gpu_pct" => util
                .entry(format!("{} utilization", s.device))
                .or_default()
                .push((s.t_s, s.value)),
            "rss_bytes" => mem
                .entry(format!("{} resident memory", s.device))
                .or_default()
                .push((s.t_s, s.value / 1048576.0)),
            "mem_used_bytes" => mem
                .entry(format!("{} memory used", s.device))
                .or_default()
                .push((s.t_s, s.value / 1048576.0)),
            _ => {}
        }
    }
    if util.is_empty() && mem.is_empty() {
        return note("The timeline has no utilization or memory samples.");
    }
    for pts in util.values_mut().chain(mem.values_mut()) {
        *pts = decimated(pts, WIDTH as usize);
    }
    let banded = r.trial_spans.len() <= BANDS_MAX;
    let t_end = r
        .timeline
        .iter()
        .map(|s| s.t_s)
        .chain(r.trial_spans.iter().map(|s| s.end_s))
        .fold(0.0, f64::max)
        .max(1e-3);
    let xs = Span::upto(t_end, 1.0);
    let panel = 230u32;
    let mut names: Vec<String> = util.keys().cloned().collect();
    names.extend(mem.keys().cloned());
    let chart = svg("device-timeline", WIDTH, 2 * panel + 30, |root| {
        let (top, bottom) = root.split_vertically(panel + 15);
        let util_panel = Panel {
            ys: Span::new(0.0, 100.0),
            y_desc: "utilization (%)",
            series: &util,
            limit: None,
        };
        line_panel(&top, r, xs, &util_panel, &names, banded)?;
        // The per-trial cap is what resident memory is held against.
        let cap = r
            .spec
            .search
            .mem_cap_mib
            .map(|c| (c as f64, format!("per-trial memory cap {c} MiB")));
        let mem_max = mem
            .values()
            .flat_map(|v| v.iter().map(|p| p.1))
            .chain(cap.as_ref().map(|c| c.0))
            .fold(0.0, f64::max)
            .max(1.0);
        let mem_panel = Panel {
            ys: Span::upto(mem_max, 1.1),
            y_desc: "memory (MiB)",
            series: &mem,
            limit: cap,
        };
        line_panel(&bottom, r, xs, &mem_panel, &names, banded)
    });
    let keys: Vec<Key> = names
        .iter()
        .enumerate()
        .map(|(j, n)| Key {
            name: n.clone(),
            color: color(j),
            dash: "",
            marker: "",
            note: String::new(),
        })
        .collect();
    // Bands too narrow for their name show its number; the full names are listed here.
    let mut bands = String::new();
    if !banded {
        bands = note(&format!(
            "The {} trials are not marked on the timeline: their bands would be narrower than \
             a pixel.",
            r.trial_spans.len()
        ));
    }
    for (i, s) in r.trial_spans.iter().enumerate().filter(|_| banded) {
        bands.push_str(&format!(
            "<li><b>{}</b> {}</li>",
            i + 1,
            super::escape::esc(&s.label)
        ));
    }
    if banded && !bands.is_empty() {
        bands = format!("<ol class=\"chart-bands\">{bands}</ol>");
    }
    chart + &legend(&keys) + &bands
}

/// One panel of the device timeline.
struct Panel<'a> {
    ys: Span,
    y_desc: &'a str,
    series: &'a BTreeMap<String, Vec<(f64, f64)>>,
    /// A horizontal reference line: its value and its label.
    limit: Option<(f64, String)>,
}

/// Most trials the timeline marks with bands; more would be narrower than a pixel each.
const BANDS_MAX: usize = 200;

/// At most about `columns` buckets' worth of `pts`: each bucket of consecutive points
/// keeps its lowest and highest value, in time order, so spikes survive. A line of more
/// points than the chart has pixels draws nothing more, only a longer SVG path.
fn decimated(pts: &[(f64, f64)], columns: usize) -> Vec<(f64, f64)> {
    if pts.len() <= 2 * columns {
        return pts.to_vec();
    }
    let per = pts.len().div_ceil(columns);
    let mut out = Vec::with_capacity(2 * columns);
    for chunk in pts.chunks(per) {
        let lo = (0..chunk.len()).fold(0, |a, i| if chunk[i].1 < chunk[a].1 { i } else { a });
        let hi = (0..chunk.len()).fold(0, |a, i| if chunk[i].1 > chunk[a].1 { i } else { a });
        out.push(chunk[lo.min(hi)]);
        if lo != hi {
            out.push(chunk[lo.max(hi)]);
        }
    }
    out
}

fn line_panel(
    area: &Area,
    r: &Report,
    xs: Span,
    p: &Panel,
    all_names: &[String],
    banded: bool,
) -> Drawn {
    let (ys, y_desc, series) = (p.ys, p.y_desc, p.series);
    let (t_end, y_max) = (xs.hi(), ys.hi());
    // The chart maps to whole-SVG pixels; this panel draws relative to its own corner.
    let base = area.get_base_pixel();
    let local = |(x, y): (i32, i32)| (x - base.0, y - base.1);
    let mut chart = ChartBuilder::on(area)
        .margin(10)
        .margin_top(22)
        .x_label_area_size(34)
        .y_label_area_size(60)
        .build_cartesian_2d(xs.range(), ys.range())?;
    mesh(&mut chart, "time (s), trials end to end", Some(y_desc))?;
    for (i, s) in r.trial_spans.iter().enumerate().filter(|_| banded) {
        let (start, end) = (xs.put(s.start_s), xs.put(s.end_s));
        if i % 2 == 0 {
            chart.draw_series(std::iter::once(Rectangle::new(
                [(start, 0.0), (end, y_max)],
                BAND.filled(),
            )))?;
        }
        let left = local(chart.backend_coord(&(start, y_max)));
        let right = local(chart.backend_coord(&(end, y_max)));
        let room = ((right.0 - left.0 - 4) / CHAR_W).max(0) as usize;
        let full = format!("{} {}", i + 1, s.label);
        let text = if full.chars().count() <= room {
            full
        } else {
            (i + 1).to_string()
        };
        if text.chars().count() <= room {
            area.draw(&Text::new(
                text,
                (left.0 + 3, left.1 - 4),
                anchored(&MUTED, HPos::Left, VPos::Bottom),
            ))?;
        }
    }
    if let Some((v, label)) = &p.limit {
        let v = &ys.put(*v);
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(0.0, *v), (t_end, *v)],
            BAD.stroke_width(1),
        )))?;
        let at = local(chart.backend_coord(&(0.0, *v)));
        area.draw(&Text::new(
            label.clone(),
            (at.0 + 4, at.1 - 3),
            anchored(&BAD, HPos::Left, VPos::Bottom),
        ))?;
    }
    for (name, pts) in series {
        let j = all_names.iter().position(|n| n == name).unwrap_or(0);
        let c = color(j);
        chart.draw_series(LineSeries::new(
            pts.iter().map(|&(t, v)| (xs.put(t), ys.put(v))),
            c.stroke_width(2),
        ))?;
    }
    Ok(())
}

/// Per trial shown, one bar per device: peak memory, with the device's busy share
/// written at the end. DataParallel's device 0 stands out here.
pub(super) fn device_memory(shown: &Shown) -> String {
    let rows: Vec<(&TrialReport, usize)> = shown
        .trials
        .iter()
        .copied()
        .filter(|t| t.devices.iter().any(|d| d.peak().is_some()))
        .flat_map(|t| (0..t.devices.len()).map(move |i| (t, i)))
        .collect();
    if rows.is_empty() {
        return note("No per-device figures recorded.");
    }
    let max = rows
        .iter()
        .filter_map(|(t, i)| t.devices[*i].peak())
        .max()
        .unwrap_or(1) as f64
        / 1048576.0;
    let labels: Vec<String> = rows
        .iter()
        .map(|(t, i)| {
            format!(
                "{} · {}",
                truncate(&t.label, 32),
                t.device_name(&t.devices[*i])
            )
        })
        .collect();
    let lw = label_width(&labels);
    let n = rows.len();
    let h = 22 * n as u32 + 70;
    let (xs, ys) = (Span::upto(max, 1.05), Span::new(0.0, n as f64));
    svg("device-memory", WIDTH, h, |root| {
        let mut chart = ChartBuilder::on(root)
            .margin(10)
            .margin_right(90)
            .x_label_area_size(40)
            .y_label_area_size(lw)
            .build_cartesian_2d(xs.range(), ys.range())?;
        mesh(
            &mut chart,
            "peak memory per device (MiB); busy share at the bar's end",
            None,
        )?;
        for (k, (t, i)) in rows.iter().enumerate() {
            let d = &t.devices[*i];
            let y = (n - 1 - k) as f64;
            let at = chart.backend_coord(&(0.0, y + 0.5));
            root.draw(&Text::new(
                labels[k].clone(),
                (at.0 - 8, at.1),
                anchored(&INK, HPos::Right, VPos::Center),
            ))?;
            let v = xs.put(d.peak_bytes as f64 / 1048576.0);
            chart.draw_series(std::iter::once(Rectangle::new(
                [(0.0, y + 0.15), (v, y + 0.85)],
                color(*i).filled(),
            )))?;
            let end = chart.backend_coord(&(v, y + 0.5));
            let busy = d
                .busy_share()
                .map_or(String::new(), |b| format!(" · busy {:.0}%", b * 100.0));
            root.draw(&Text::new(
                format!("{v:.1}{busy}"),
                (end.0 + 6, end.1),
                anchored(&INK, HPos::Left, VPos::Center),
            ))?;
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_chart_shows_every_device_of_a_multi_device_trial() {
        use crate::advisor::testkit::{report, spec, trial};
        let s = spec(
            "parallel = [\"single\", \"dp\"]\ndevices = [1, 2]",
            "strategy = \"grid\"",
        );
        let r = report(
            &s,
            vec![
                trial(&s, &[], 0.01).devices(&[(0.9, 100, 0.0)]),
                trial(&s, &[("parallel", "dp"), ("devices", "2")], 0.008)
                    .devices(&[(0.95, 180, 0.0), (0.55, 100, 0.0)]),
            ],
        );
        let svg = device_memory(&Shown::of(&r, None));
        assert!(svg.starts_with("<svg"), "{svg}");
        for text in [
            "parallel=dp devices=2 · cpu:0",
            "· cpu:1",
            "180.0 · busy 95%",
            "100.0 · busy 55%",
        ] {
            assert!(svg.contains(text), "{text} missing");
        }
        // No samples: a sentence, not an empty chart.
        assert!(device_timeline(&r).contains("No device samples"));
    }

    #[test]
    fn decimation_keeps_each_buckets_extremes_in_time_order() {
        let pts: Vec<(f64, f64)> = (0..10_000)
            .map(|i| (i as f64, if i == 4321 { 1e6 } else { (i % 7) as f64 }))
            .collect();
        let d = decimated(&pts, 100);
        assert!(d.len() <= 200, "{}", d.len());
        assert!(d.windows(2).all(|w| w[0].0 < w[1].0), "time order");
        assert!(d.contains(&(4321.0, 1e6)), "the spike survives");
        assert_eq!(d.iter().map(|p| p.1).fold(f64::MAX, f64::min), 0.0);
        assert_eq!(decimated(&pts[..150], 100), pts[..150].to_vec());
    }

    #[test]
    fn truncation_counts_characters() {
        assert_eq!(truncate("ünïcödé", 4), "ünï…");
        assert_eq!(truncate("abc", 4), "abc");
    }
}
