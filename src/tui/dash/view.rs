//! Drawing the dashboard: `impl Widget for &App`. Reads only the app's memory; every
//! figure was computed when its data arrived.

use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style, Stylize};
use ratatui::text::{Line, Span, Text};
use ratatui::widgets::{
    Block, BorderType, Cell, Clear, Paragraph, Row, StatefulWidget, Table, TableState, Widget, Wrap,
};

use super::app::{App, Mode, Overlay, Panel, SweepState};
use crate::advisor::RecVerdict;
use crate::engine::train::Phases;
use crate::knobs::Knobs;
use crate::results::model::{Recommendation, TrialReport};
use crate::results::record::Status;
use crate::runner::live::LiveTrial;
use crate::tui::widgets::devices::{rows_needed, DevicesView};
use crate::tui::widgets::frame::{centered, pct, popup, too_small};
use crate::tui::widgets::{bar, bytes};

/// Below this the panels cannot show their content legibly; say so instead.
pub const MIN_WIDTH: u16 = 60;
pub const MIN_HEIGHT: u16 = 18;

pub const KEYS: &str = "q quit · tab panel · ↑↓/j/k move · s sort · enter details · ? help";

fn status_style(s: Status) -> Style {
    match s {
        Status::Ok => Style::new().fg(Color::Green),
        Status::Unsupported => Style::new().fg(Color::DarkGray),
        _ => Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
    }
}

fn panel<'a>(title: impl Into<Line<'a>>, focused: bool) -> Block<'a> {
    let b = Block::bordered().title(title);
    if focused {
        b.border_type(BorderType::Thick)
            .border_style(Style::new().fg(Color::Cyan))
    } else {
        b.border_style(Style::new().fg(Color::DarkGray))
    }
}

/// All knobs as `name=value`, for the trial panels.
fn knob_text(k: &Knobs) -> String {
    Knobs::NAMES
        .iter()
        .filter_map(|n| Some(format!("{n}={}", k.get(n)?)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Phase rows: name, bar, share. `step_s` is the mean step time the shares are of.
fn phase_lines(phases: &Phases, step_s: f64, width: u16) -> Vec<Line<'static>> {
    if step_s <= 0.0 || !step_s.is_finite() {
        return Vec::new();
    }
    let mut shares: Vec<(&str, f64)> = Phases::NAMES
        .iter()
        .map(|n| (*n, phases.get(n) / step_s))
        .filter(|(_, v)| *v > 0.0)
        .collect();
    let timed: f64 = shares
        .iter()
        .filter(|(n, _)| *n != "recompute")
        .map(|(_, v)| v)
        .sum();
    if !shares.is_empty() {
        shares.push(("other", (1.0 - timed).max(0.0)));
    }
    share_lines(&shares, width)
}

fn share_lines(shares: &[(&str, f64)], width: u16) -> Vec<Line<'static>> {
    let bar_w = usize::from(width.saturating_sub(18)).min(40);
    shares
        .iter()
        .map(|(name, v)| {
            Line::from(vec![
                Span::raw(format!("{name:<10} ")),
                Span::styled(bar(*v, bar_w), Style::new().fg(Color::Blue)),
                Span::raw(format!(" {:>4.1}%", v * 100.0)),
            ])
        })
        .collect()
}

/// `p` percent of `v`, without overflowing on very large terminals.
impl Widget for &App {
    fn render(self, area: Rect, buf: &mut Buffer) {
        if area.width < MIN_WIDTH || area.height < MIN_HEIGHT {
            too_small(area, buf, "tune dash", MIN_WIDTH, MIN_HEIGHT);
            return;
        }
        let [header, body, footer] = Layout::vertical([
            Constraint::Length(1),
            Constraint::Min(0),
            Constraint::Length(1),
        ])
        .areas(area);
        self.render_header(header, buf);
        self.render_footer(footer, buf);

        let note = self.device_note.is_some();
        let dev_need = rows_needed(&self.devices, note) + 2;
        let trial_need = self.live_rows() + 2;
        // `max` then `min`, not `clamp`: at the smallest sizes the cap is below 6.
        let top_h = dev_need.max(trial_need).max(6).min(pct(body.height, 40));
        let recs = self.recommendations_len() as u16;
        let why = match (&self.story, self.mode) {
            (Some(s), Mode::Finished) => s.empty.len() as u16,
            _ => 0,
        };
        let rec_h = (recs + why).max(1) + 2;
        let rec_h = rec_h.clamp(3, 8 + why).min(body.height / 3);
        let [top, results, recs_area] = Layout::vertical([
            Constraint::Length(top_h),
            Constraint::Min(5),
            Constraint::Length(rec_h),
        ])
        .areas(body);
        let [devices, current] =
            Layout::horizontal([Constraint::Percentage(45), Constraint::Percentage(55)]).areas(top);
        self.render_devices(devices, buf);
        self.render_current(current, buf);
        self.render_results(results, buf);
        self.render_recommendations(recs_area, buf);

        match &self.overlay {
            Overlay::None => {}
            Overlay::Help => render_help(centered(body, 70, 80), buf),
            Overlay::Trial(id) => {
                if let Some(t) = self.trial(id) {
                    render_trial_detail(self, t, centered(body, 85, 85), buf);
                }
            }
            Overlay::Recommendation(i) => {
                let rec = self.report.as_ref().and_then(|r| r.recommendations.get(*i));
                let v = self.story.as_ref().and_then(|s| s.recs.get(*i));
                if let (Some(r), Some(v)) = (rec, v) {
                    render_recommendation(r, v, centered(body, 80, 70), buf);
                }
            }
        }
    }
}

impl App {
    fn render_header(&self, area: Rect, buf: &mut Buffer) {
        let state = match (&self.sweep, self.mode) {
            (SweepState::Running, _) => "sweep running".to_string(),
            (SweepState::Ended(_), _) | (_, Mode::Finished) => "finished".to_string(),
            (SweepState::Detached, Mode::Live) => "live: following the journal".to_string(),
        };
        let mut spans = vec![
            Span::styled(" tune dash ", Style::new().bold().reversed()),
            Span::raw(" "),
            Span::styled(self.name.clone(), Style::new().bold()),
            Span::raw(format!(" · {} · {state}", self.source)),
        ];
        if self.mode == Mode::Live {
            let planned = self.runs_planned.map_or(String::new(), |p| format!("/{p}"));
            spans.push(Span::raw(format!(
                " · {}{planned} trial runs done",
                self.runs_done
            )));
        }
        let failed = self.rows.iter().filter(|r| r.status != Status::Ok).count();
        if failed > 0 {
            spans.push(Span::styled(
                format!(" · {failed} not ok"),
                Style::new().fg(Color::Red),
            ));
        }
        Line::from(spans).render(area, buf);
    }

    fn render_footer(&self, area: Rect, buf: &mut Buffer) {
        let line = if self.confirm_quit {
            Line::from(Span::styled(
                " the sweep is still running: q again stops it (finished trials stay in the journal; --resume continues), any other key keeps it",
                Style::new().fg(Color::Black).bg(Color::Yellow),
            ))
        } else {
            let mut spans = vec![Span::styled(format!(" {KEYS}"), Style::new().dim())];
            if let Some(p) = &self.problem {
                spans.push(Span::styled(format!("  {p}"), Style::new().fg(Color::Red)));
            } else if let SweepState::Ended(msg) = &self.sweep {
                spans.push(Span::styled(
                    format!("  {msg}"),
                    Style::new().fg(Color::Green),
                ));
            }
            Line::from(spans)
        };
        line.render(area, buf);
    }

    fn render_devices(&self, area: Rect, buf: &mut Buffer) {
        let title = format!("Devices ({})", self.devices.len());
        let block = panel(title, self.focus == Panel::Devices);
        let inner = block.inner(area);
        block.render(area, buf);
        if self.devices.is_empty() {
            let text = self
                .device_note
                .clone()
                .unwrap_or_else(|| "no device readings yet".into());
            Paragraph::new(text)
                .wrap(Wrap { trim: true })
                .dim()
                .render(inner, buf);
            return;
        }
        DevicesView {
            devices: &self.devices,
            note: self.device_note.as_deref(),
            scroll: self.device_scroll,
        }
        .render(inner, buf);
    }

    /// Rows the current-trial panel would like (without borders).
    fn live_rows(&self) -> u16 {
        match &self.live {
            Some(l) => {
                4 + l.phases.map_or(0, |p| {
                    Phases::NAMES.iter().filter(|n| p.get(n) > 0.0).count() as u16 + 1
                })
            }
            // The headline and the measured noise, a line or two each once wrapped.
            None => {
                2 + self
                    .story
                    .as_ref()
                    .map_or(0, |s| 2 * (1 + s.noise.len() as u16))
            }
        }
    }

    fn render_current(&self, area: Rect, buf: &mut Buffer) {
        let block = panel("Current trial", false);
        let inner = block.inner(area);
        block.render(area, buf);
        match &self.live {
            Some(l) => Paragraph::new(self.live_lines(l, inner.width)).render(inner, buf),
            None => Paragraph::new(self.idle_lines())
                .wrap(Wrap { trim: false })
                .render(inner, buf),
        }
    }

    fn live_lines(&self, l: &LiveTrial, width: u16) -> Vec<Line<'static>> {
        let elapsed = l.elapsed_s(self.now_unix_ms);
        // Halving's later rounds rerun a configuration for longer; say which run this is.
        let round = if l.round > 0 {
            format!(" · round {}", l.round + 1)
        } else {
            String::new()
        };
        let mut lines = vec![
            Line::from(vec![
                Span::styled(l.label.clone(), Style::new().bold().fg(Color::Cyan)),
                Span::raw(format!(
                    "  trial {}/{}{round} · repeat {}/{} · {elapsed:.0} s",
                    l.index, l.total, l.repeat, l.repeats
                )),
            ]),
            Line::from(knob_text(&l.knobs)).dim(),
        ];
        if l.steps == 0 {
            lines.push(Line::from(match &l.note {
                Some(n) => n.clone(),
                None => "starting (command workloads report no steps; their figures arrive at \
                         the end)"
                    .into(),
            }));
            return lines;
        }
        let r = l.step as f64 / l.steps as f64;
        let bar_w = usize::from(width.saturating_sub(34)).min(40);
        let phase = if l.step <= l.warmup { " warm-up" } else { "" };
        lines.push(Line::from(vec![
            Span::raw(format!("step {:>5}/{:<5} ", l.step, l.steps)),
            Span::styled(bar(r, bar_w), Style::new().fg(Color::Green)),
            Span::raw(format!(" {:>3.0}%{phase}", r * 100.0)),
        ]));
        let mut figures = Vec::new();
        match l.samples_per_s {
            Some(v) => figures.push(format!("{v:.1} samples/s")),
            // Past warm-up with no figure: the hooks saw no batch to count (ms/step says it).
            None if l.step > l.warmup => figures.push("batch size unknown".into()),
            None => figures.push("samples/s after warm-up".into()),
        }
        if let Some(s) = l.step_s {
            figures.push(format!("{:.1} ms/step", s * 1e3));
        }
        if let Some(loss) = l.loss {
            figures.push(format!("loss {loss:.3}"));
        }
        if l.mem_peak_bytes > 0 {
            figures.push(format!("peak {}", bytes(l.mem_peak_bytes)));
        }
        // A Python trial's words from the hooks (warm-up, its first step's compile)
        // come before the figures, which say less until measuring begins.
        if let Some(n) = &l.note {
            lines.push(Line::from(n.clone()));
        }
        lines.push(Line::from(figures.join(" · ")).bold());
        if let (Some(p), Some(s)) = (l.phases, l.step_s) {
            lines.extend(phase_lines(&p, s, width));
        }
        lines
    }

    fn idle_lines(&self) -> Vec<Line<'static>> {
        let done = self.runs_planned.is_some_and(|p| self.runs_done >= p);
        let first = match (&self.sweep, self.mode) {
            (SweepState::Ended(msg), _) => msg.clone(),
            (_, Mode::Finished) => "no trial running: the sweep is finished".into(),
            _ if done => "every planned trial has run; the report is being written".into(),
            _ => "no trial running right now (between trials, or the sweep stopped)".into(),
        };
        let mut lines = vec![Line::from(first)];
        if let Some(story) = &self.story {
            let what = if self.mode == Mode::Finished {
                ""
            } else {
                "so far: "
            };
            let style = if story.fastest.is_some() {
                Style::new().bold().fg(Color::Green)
            } else {
                Style::new().bold()
            };
            lines.push(Line::from(vec![
                Span::raw(what),
                Span::styled(story.headline.clone(), style),
            ]));
            for n in &story.noise {
                lines.push(Line::from(n.clone()).dim());
            }
        }
        lines
    }

    fn render_results(&self, area: Rect, buf: &mut Buffer) {
        let focused = self.focus == Panel::Results;
        let title = format!(
            "Results ({}) · sorted by {} · s: sort",
            self.rows.len(),
            self.sort.name()
        );
        let block = panel(title, focused);
        if self.rows.is_empty() {
            let text = match self.mode {
                Mode::Live => {
                    "no finished trials yet: a trial shows here once its last repeat ends"
                }
                Mode::Finished => "this sweep has no trials",
            };
            Paragraph::new(text).dim().block(block).render(area, buf);
            return;
        }
        let header = Row::new([
            "trial".to_string(),
            "status".to_string(),
            format!("{} [95% CI]", self.unit()),
            "vs baseline [95% CI]".to_string(),
            "peak MiB".to_string(),
        ])
        .style(Style::new().bold().underlined());
        // Only the rows that can be on screen: the table keeps the selection in view, so
        // a window of a screen's height either side of it draws the same frame as all
        // rows would, without formatting 100,000 of them per frame.
        let height = usize::from(area.height);
        let first = self.selected.saturating_sub(height);
        let window = &self.order[first..self.order.len().min(self.selected + height + 1)];
        let rows = window.iter().map(|&i| {
            let r = &self.rows[i];
            let mark = match (r.best, r.loaded) {
                (true, _) => "★ ",
                (false, Some(_)) => "⚠ ",
                _ => "",
            };
            let ratio_style = if r.significant {
                Style::new().bold()
            } else {
                Style::new()
            };
            Row::new([
                Cell::from(format!("{mark}{}", r.label)),
                Cell::from(r.status.as_str()).style(status_style(r.status)),
                Cell::from(r.throughput.as_str()),
                Cell::from(r.ratio.as_str()).style(ratio_style),
                Cell::from(r.peak.as_str()),
            ])
        });
        let widths = [
            Constraint::Min(12),
            Constraint::Length(11),
            Constraint::Length(24),
            Constraint::Length(28),
            Constraint::Length(9),
        ];
        let table = Table::new(rows, widths)
            .header(header)
            .block(block)
            .row_highlight_style(if focused {
                Style::new().reversed()
            } else {
                Style::new().add_modifier(Modifier::BOLD)
            })
            .highlight_symbol("▶ ");
        let mut state = TableState::new().with_selected(Some(self.selected - first));
        StatefulWidget::render(table, area, buf, &mut state);
    }

    fn render_recommendations(&self, area: Rect, buf: &mut Buffer) {
        let focused = self.focus == Panel::Recommendations;
        let block = panel(
            format!("Recommendations ({})", self.recommendations_len()),
            focused,
        );
        let recs = self
            .report
            .as_ref()
            .map_or(&[][..], |r| &r.recommendations[..]);
        // While the sweep runs, "why none" would be premature.
        let empty = match (&self.story, self.mode) {
            (Some(s), Mode::Finished) => &s.empty[..],
            _ => &[][..],
        };
        if recs.is_empty() && !empty.is_empty() {
            let lines: Vec<Line> = empty.iter().map(|w| Line::from(w.clone())).collect();
            Paragraph::new(lines)
                .wrap(Wrap { trim: false })
                .block(block)
                .render(area, buf);
            return;
        }
        if recs.is_empty() {
            let text = match (self.mode, &self.sweep) {
                (Mode::Finished, _) => "none in this report",
                (_, SweepState::Ended(_)) => "none: the sweep ended without a report",
                _ => "written with the report when the sweep finishes",
            };
            Paragraph::new(text).dim().block(block).render(area, buf);
            return;
        }
        // Why none of them stands (all unconfirmed) comes first, then the list.
        let mut lines: Vec<Line> = empty
            .iter()
            .map(|w| Line::styled(w.clone(), Style::new().fg(Color::Red)))
            .collect();
        let inner_h = usize::from(block.inner(area).height.max(1))
            .saturating_sub(lines.len())
            .max(1);
        let first = self.rec_selected.saturating_sub(inner_h - 1);
        let listed: Vec<Line> = recs
            .iter()
            .enumerate()
            .skip(first)
            .take(inner_h)
            .map(|(i, r)| {
                let v = self.story.as_ref().and_then(|s| s.recs.get(i));
                let verdict = v.map_or(String::new(), |v| v.line());
                let style = if v.is_some_and(|v| v.unconfirmed()) {
                    Style::new().fg(Color::Red)
                } else {
                    Style::new()
                };
                let line = Line::from(vec![
                    Span::raw(if i == self.rec_selected { "▶ " } else { "  " }),
                    Span::styled(r.finding.title.clone(), Style::new().bold()),
                    Span::raw(" · "),
                    Span::styled(r.tune_flag.clone(), Style::new().fg(Color::Cyan)),
                    Span::raw(" · "),
                    Span::styled(verdict, style),
                ]);
                if focused && i == self.rec_selected {
                    line.reversed()
                } else {
                    line
                }
            })
            .collect();
        lines.extend(listed);
        Paragraph::new(lines).block(block).render(area, buf);
    }
}

fn render_help(area: Rect, buf: &mut Buffer) {
    Clear.render(area, buf);
    let key = |k: &str, what: &str| {
        Line::from(vec![
            Span::styled(format!("  {k:<14}"), Style::new().bold().fg(Color::Cyan)),
            Span::raw(what.to_string()),
        ])
    };
    let lines = vec![
        Line::from("Keys".bold()),
        key(
            "q",
            "quit (in `tune sweep --tui`, asks before stopping the sweep)",
        ),
        key(
            "ctrl-c",
            "quit now (stops an in-process sweep; --resume continues it)",
        ),
        key(
            "tab shift-tab",
            "next / previous panel: results, recommendations, devices",
        ),
        key("↑ ↓ j k", "move the selection (or scroll the devices)"),
        key("pgup pgdn g G", "move by ten / to the first / to the last"),
        key(
            "s",
            "sort the results: plan, samples/s, ratio, memory, status",
        ),
        key("enter", "details of the selected trial or recommendation"),
        key("esc", "close this window or the details"),
        key("?", "this help"),
        Line::from(""),
        Line::from("Where the figures come from".bold()),
        Line::from("  results: journal.jsonl while the sweep runs, report.json once it is done"),
        Line::from("  current trial: live.json, rewritten by the trial as its steps finish"),
        Line::from("  devices: sampled here while the sweep runs; the report's timeline after"),
        Line::from("  intervals are 95% bootstrap CIs; (n.s.) = the interval includes 1"),
    ];
    Paragraph::new(lines)
        .wrap(Wrap { trim: false })
        .block(popup(" Help "))
        .render(area, buf);
}

fn render_trial_detail(app: &App, t: &TrialReport, area: Rect, buf: &mut Buffer) {
    Clear.render(area, buf);
    let is_base = app
        .report
        .as_ref()
        .is_some_and(|r| r.baseline.as_deref() == Some(t.id.as_str()));
    let mut lines = vec![
        Line::from(vec![
            Span::styled(t.label.clone(), Style::new().bold()),
            Span::raw(format!("  ({})", t.id)).dim(),
        ]),
        Line::from(vec![
            Span::raw("status: "),
            Span::styled(t.status.as_str(), status_style(t.status)),
            Span::raw(format!(
                " · {} repeat(s) of {} steps · round {}",
                t.repeats.len(),
                t.steps,
                t.round
            )),
        ]),
    ];
    if let Some(e) = &t.error {
        lines.push(Line::from(vec![
            Span::styled("error: ", Style::new().fg(Color::Red).bold()),
            Span::raw(e.clone()),
        ]));
    }
    lines.push(Line::from(format!("knobs: {}", knob_text(&t.knobs))));
    lines.push(Line::from(format!(
        "{}: {} · vs baseline: {}",
        app.unit(),
        crate::report::markdown::throughput_cell(t),
        crate::report::markdown::ratio_cell(t, is_base)
    )));
    let mut extra = vec![format!("noise floor {:.1}%", t.noise_floor * 100.0)];
    if let Some(a) = t.accuracy {
        extra.push(format!("accuracy {:.3}", a));
    }
    if let Some(l) = t.final_loss {
        extra.push(format!("final loss {l:.4}"));
    }
    lines.push(Line::from(extra.join(" · ")));
    if let Some(peak) = t.peak_total_bytes {
        // Per category from the repeat with the largest peak.
        let cats = t
            .repeats
            .iter()
            .max_by_key(|r| r.peak_total_bytes)
            .map(|r| {
                r.peak_bytes
                    .iter()
                    .filter(|(_, b)| **b > 0)
                    .map(|(k, b)| format!("{k} {}", bytes(*b)))
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_default();
        lines.push(Line::from(format!("peak memory {}: {cats}", bytes(peak))));
    }
    for (k, why) in &t.not_applicable {
        lines.push(Line::from(format!("not applicable: {k}: {why}")).dim());
    }
    if !t.phase_share.is_empty() {
        lines.push(Line::from("step phases (mean share of a step)".bold()));
        let order: Vec<(&str, f64)> = Phases::NAMES
            .iter()
            .copied()
            .chain(std::iter::once("other"))
            .filter_map(|n| Some((n, *t.phase_share.get(n)?)))
            .collect();
        lines.extend(share_lines(&order, area.width.saturating_sub(2)));
    }
    Paragraph::new(Text::from(lines))
        .wrap(Wrap { trim: false })
        .block(popup(" Trial details · ↑↓ previous/next "))
        .render(area, buf);
}

fn render_recommendation(r: &Recommendation, v: &RecVerdict, area: Rect, buf: &mut Buffer) {
    Clear.render(area, buf);
    let lines = vec![
        Line::from(r.finding.title.clone().bold()),
        Line::from(format!("verdict: {}", v.line())),
        Line::from(""),
        Line::from(format!("evidence: {}", r.finding.evidence)),
        Line::from(""),
        Line::from(vec![
            Span::raw("tune:    "),
            Span::styled(r.tune_flag.clone(), Style::new().fg(Color::Cyan)),
        ]),
        Line::from(vec![
            Span::raw("PyTorch: "),
            Span::styled(r.pytorch.clone(), Style::new().fg(Color::Cyan)),
        ]),
    ];
    Paragraph::new(lines)
        .wrap(Wrap { trim: false })
        .block(popup(" Recommendation "))
        .render(area, buf);
}
