//! The devices panel: per device a utilization sparkline, a memory gauge, power and clock
//! where known, and a marker on the one device that stands out from the others.
//!
//! Shared by `tune dash` and `tune watch`. Callers hand in `DeviceSeries`, however they
//! got them; `DeviceHistory` builds them from probe samples (a live `Timeline`) or from
//! a report's timeline samples. A metric nobody measured stays `None` and is shown as
//! absent, never as zero.

use std::collections::BTreeMap;

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style, Stylize};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Sparkline, Widget, Wrap};
use tune_probes::{Sample, Source};

use super::{bar, bytes_pair};

/// Samples kept per device: a few minutes at the dashboard's refresh rate, more than
/// any terminal is wide.
pub const HISTORY: usize = 600;

/// What one device looks like over time.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DeviceSeries {
    /// Short name: `gpu0`, `dev1` (an engine virtual device), `cpu` (the host).
    pub name: String,
    /// Busy share 0..=100, oldest first.
    pub util_pct: Vec<f64>,
    pub mem_used_bytes: Option<u64>,
    pub mem_total_bytes: Option<u64>,
    pub power_w: Option<f64>,
    pub clock_mhz: Option<f64>,
}

impl DeviceSeries {
    pub fn new(name: impl Into<String>) -> DeviceSeries {
        DeviceSeries {
            name: name.into(),
            ..DeviceSeries::default()
        }
    }

    pub fn util_now(&self) -> Option<f64> {
        self.util_pct.last().copied()
    }

    /// Mean of the last `n` utilization readings: one sample is too noisy to compare.
    pub fn util_recent(&self, n: usize) -> Option<f64> {
        let tail = &self.util_pct[self.util_pct.len().saturating_sub(n)..];
        (!tail.is_empty()).then(|| tail.iter().sum::<f64>() / tail.len() as f64)
    }
}

/// One device well above or below the rest: the DataParallel signature (device 0 holds
/// the gathered outputs and the loss, so its memory and busy time run high).
#[derive(Clone, Debug, PartialEq)]
pub struct Outlier {
    /// Index into the slice given to `imbalance`.
    pub device: usize,
    /// Plain words, e.g. "gpu0 memory 1.6x the others' mean".
    pub detail: String,
}

/// Memory counts as standing out at this multiple of the others' mean...
const MEM_RATIO: f64 = 1.25;
/// ...and only when the gap is a visible share of the device (or 64 MiB without a total).
const MEM_MIN_SHARE: f64 = 0.05;
const MEM_MIN_BYTES: f64 = 64.0 * 1048576.0;
/// Utilization gap, in percentage points, over the recent window.
const UTIL_POINTS: f64 = 20.0;
const UTIL_WINDOW: usize = 10;

fn mean_except(v: &[f64], skip: usize) -> f64 {
    let others: Vec<f64> = v
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != skip)
        .map(|(_, x)| *x)
        .collect();
    others.iter().sum::<f64>() / others.len() as f64
}

/// The device that stands out most, if any does. Needs two devices or more, and the
/// metric known on all of them; memory is checked before utilization because it is the
/// steadier signal.
pub fn imbalance(devices: &[DeviceSeries]) -> Option<Outlier> {
    if devices.len() < 2 {
        return None;
    }
    let mem: Option<Vec<f64>> = devices
        .iter()
        .map(|d| d.mem_used_bytes.map(|b| b as f64))
        .collect();
    if let Some(mem) = mem {
        let worst = (0..mem.len())
            .map(|i| (i, mem[i], mean_except(&mem, i)))
            .filter(|(i, m, rest)| {
                let floor = devices[*i]
                    .mem_total_bytes
                    .map_or(MEM_MIN_BYTES, |t| t as f64 * MEM_MIN_SHARE);
                *rest > 0.0 && *m >= rest * MEM_RATIO && m - rest >= floor
            })
            .max_by(|a, b| (a.1 / a.2).total_cmp(&(b.1 / b.2)));
        if let Some((i, m, rest)) = worst {
            return Some(Outlier {
                device: i,
                detail: format!(
                    "{} memory {:.1}x the others' mean",
                    devices[i].name,
                    m / rest
                ),
            });
        }
    }
    let util: Option<Vec<f64>> = devices.iter().map(|d| d.util_recent(UTIL_WINDOW)).collect();
    let util = util?;
    let (i, gap) = (0..util.len())
        .map(|i| (i, util[i] - mean_except(&util, i)))
        .max_by(|a, b| a.1.abs().total_cmp(&b.1.abs()))?;
    (gap.abs() >= UTIL_POINTS).then(|| Outlier {
        device: i,
        detail: format!(
            "{} utilization {:.0} points {} the others",
            devices[i].name,
            gap.abs(),
            if gap > 0.0 { "above" } else { "below" }
        ),
    })
}

/// Rows one device takes: the sparkline line and the memory line.
pub const ROWS_PER_DEVICE: u16 = 2;

/// Rows the panel needs to show every device (without borders).
pub fn rows_needed(devices: &[DeviceSeries], note: bool) -> u16 {
    let n = devices.len() as u16;
    let marker = u16::from(imbalance(devices).is_some());
    (n * ROWS_PER_DEVICE + marker + u16::from(note)).max(1)
}

/// Draws devices into an area (the caller draws any border around it).
pub struct DevicesView<'a> {
    pub devices: &'a [DeviceSeries],
    /// One line on what is missing and why (e.g. no NVML), shown after the devices.
    pub note: Option<&'a str>,
    /// First device shown, when there are more than fit.
    pub scroll: usize,
}

fn util_color(u: f64) -> Color {
    if u >= 80.0 {
        Color::Green
    } else if u >= 40.0 {
        Color::Yellow
    } else {
        Color::Red
    }
}

impl Widget for DevicesView<'_> {
    fn render(self, area: Rect, buf: &mut Buffer) {
        if area.is_empty() {
            return;
        }
        let mut y = area.y;
        let bottom = area.bottom();
        let marked = imbalance(self.devices);
        if let Some(m) = &marked {
            let line = Line::from(vec![
                Span::styled("▲ imbalance: ", Style::new().fg(Color::Yellow).bold()),
                Span::raw(m.detail.clone()),
            ]);
            buf.set_line(area.x, y, &line, area.width);
            y += 1;
        }
        let note_rows = u16::from(self.note.is_some());
        let name_w = self
            .devices
            .iter()
            .map(|d| d.name.chars().count())
            .max()
            .unwrap_or(3)
            .clamp(4, 12) as u16;
        let first = self.scroll.min(self.devices.len().saturating_sub(1));
        let remaining = self.devices.len().saturating_sub(first);
        let avail = bottom.saturating_sub(y).saturating_sub(note_rows);
        let mut fit = usize::from(avail / ROWS_PER_DEVICE);
        if fit < remaining {
            // Keep a row to say how many are hidden.
            fit = usize::from(avail.saturating_sub(1) / ROWS_PER_DEVICE);
        }
        for (i, d) in self.devices.iter().enumerate().skip(first).take(fit) {
            let is_marked = marked.as_ref().is_some_and(|m| m.device == i);
            let rows = Rect::new(area.x, y, area.width, ROWS_PER_DEVICE);
            render_device(d, is_marked, name_w, rows, buf);
            y += ROWS_PER_DEVICE;
        }
        if fit < remaining && y < bottom {
            let more = format!(
                "+{} more device(s): tab here, then ↑↓ to scroll",
                remaining - fit
            );
            buf.set_stringn(area.x, y, more, area.width.into(), Style::new().dim());
            y += 1;
        }
        if let (Some(note), true) = (self.note, y < bottom) {
            Paragraph::new(note)
                .wrap(Wrap { trim: true })
                .dim()
                .render(Rect::new(area.x, y, area.width, bottom - y), buf);
        }
    }
}

fn render_device(d: &DeviceSeries, marked: bool, name_w: u16, area: Rect, buf: &mut Buffer) {
    let Rect { x, y, width, .. } = area;
    let name_style = if marked {
        Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD)
    } else {
        Style::new().bold()
    };
    let mark = if marked { "▲" } else { " " };
    buf.set_string(x, y, mark, name_style);
    buf.set_stringn(x + 1, y, &d.name, name_w as usize, name_style);
    // Right side of line 1: utilization now, then power and clock when known.
    let mut right = match d.util_now() {
        Some(u) => format!(" {u:>3.0}%"),
        None => " util –".to_string(),
    };
    if let Some(p) = d.power_w {
        right.push_str(&format!(" {p:.0} W"));
    }
    if let Some(c) = d.clock_mhz {
        right.push_str(&format!(" {c:.0} MHz"));
    }
    let right_w = right.chars().count() as u16;
    let spark_x = x + 2 + name_w;
    let spark_w = width.saturating_sub(2 + name_w + right_w + 1);
    if spark_w > 0 && !d.util_pct.is_empty() {
        let tail = &d.util_pct[d.util_pct.len().saturating_sub(spark_w as usize)..];
        let color = d.util_now().map_or(Color::Gray, util_color);
        Sparkline::default()
            .data(tail.iter().map(|u| u.clamp(0.0, 100.0).round() as u64))
            .max(100)
            .style(Style::new().fg(color))
            .render(Rect::new(spark_x, y, spark_w, 1), buf);
    }
    if width > right_w {
        buf.set_string(x + width - right_w, y, &right, Style::new());
    }
    // Line 2: the memory gauge.
    let label = match (d.mem_used_bytes, d.mem_total_bytes) {
        (Some(u), Some(t)) if t > 0 => {
            format!(
                " {} {:>3.0}%",
                bytes_pair(u, t),
                100.0 * u as f64 / t as f64
            )
        }
        (Some(u), _) => format!(" {} used, total unknown", super::bytes(u)),
        _ => " memory –".to_string(),
    };
    let label_w = label.chars().count() as u16;
    let gauge_x = x + 2 + name_w;
    buf.set_stringn(
        x + 2,
        y + 1,
        "mem",
        width.saturating_sub(2).into(),
        Style::new().dim(),
    );
    let gauge_w = width.saturating_sub(2 + name_w + label_w);
    if let (Some(u), Some(t), true) = (d.mem_used_bytes, d.mem_total_bytes, gauge_w > 0) {
        let r = if t > 0 { u as f64 / t as f64 } else { 0.0 };
        let color = if r > 0.9 { Color::Red } else { Color::Cyan };
        buf.set_string(
            gauge_x,
            y + 1,
            bar(r, gauge_w as usize),
            Style::new().fg(color),
        );
    }
    buf.set_stringn(
        gauge_x + gauge_w,
        y + 1,
        &label,
        width.saturating_sub(2 + name_w) as usize,
        Style::new(),
    );
}

/// Builds `DeviceSeries` from readings as they arrive, keeping `HISTORY` utilization
/// readings per device. Order: GPUs, then engine devices, then the host CPU.
#[derive(Clone, Debug, Default)]
pub struct DeviceHistory {
    devices: BTreeMap<(u8, u32, String), DeviceSeries>,
}

/// Sort key of a device name: its kind first, then its number.
fn device_key(name: &str) -> (u8, u32, String) {
    let kind = if name.starts_with("gpu") {
        0
    } else if name.starts_with("dev") {
        1
    } else {
        2
    };
    let digits: String = name.chars().filter(char::is_ascii_digit).collect();
    (kind, digits.parse().unwrap_or(0), name.to_string())
}

impl DeviceHistory {
    pub fn new() -> DeviceHistory {
        DeviceHistory::default()
    }

    pub fn is_empty(&self) -> bool {
        self.devices.is_empty()
    }

    /// The devices, in display order.
    pub fn devices(&self) -> Vec<DeviceSeries> {
        self.devices.values().cloned().collect()
    }

    fn entry(&mut self, name: &str) -> &mut DeviceSeries {
        self.devices
            .entry(device_key(name))
            .or_insert_with(|| DeviceSeries::new(name))
    }

    /// One reading of one metric of one device, under the metric names the probes and
    /// the report timeline use. Unknown metrics are ignored.
    pub fn push(&mut self, device: &str, metric: &str, value: f64) {
        if !value.is_finite() {
            return;
        }
        let d = self.entry(device);
        match metric {
            "util_gpu_pct" | "busy_pct" | "cpu_util_pct" | "util_pct" => {
                if d.util_pct.len() == HISTORY {
                    d.util_pct.remove(0);
                }
                d.util_pct.push(value.clamp(0.0, 100.0));
            }
            "mem_used_bytes" | "bytes" => d.mem_used_bytes = Some(value.max(0.0) as u64),
            "mem_total_bytes" => d.mem_total_bytes = Some(value.max(0.0) as u64),
            "power_w" => d.power_w = Some(value),
            "sm_clock_mhz" => d.clock_mhz = Some(value),
            _ => {}
        }
    }

    /// A probe sample: GPUs as `gpuN`, engine virtual devices as `devN`, the host as
    /// `cpu`. Per-core, per-process and process-tree samples are not devices.
    pub fn push_sample(&mut self, s: &Sample) {
        let name = match (s.source, s.device) {
            (Source::Gpu, Some(n)) => format!("gpu{n}"),
            (Source::Engine, Some(n)) => format!("dev{n}"),
            (Source::Host, _) => "cpu".to_string(),
            _ => return,
        };
        for (metric, value) in &s.metrics {
            self.push(&name, metric, *value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tui::widgets::buffer_text;

    const GIB: u64 = 1 << 30;

    fn gpu(i: usize, util: f64, used_gib: u64) -> DeviceSeries {
        DeviceSeries {
            name: format!("gpu{i}"),
            util_pct: (0..40).map(|k| util - 5.0 + (k % 10) as f64).collect(),
            mem_used_bytes: Some(used_gib * GIB),
            mem_total_bytes: Some(80 * GIB),
            power_w: Some(310.0),
            clock_mhz: Some(1755.0),
        }
    }

    fn draw(devices: &[DeviceSeries], note: Option<&str>, w: u16, h: u16) -> String {
        let mut buf = Buffer::empty(Rect::new(0, 0, w, h));
        DevicesView {
            devices,
            note,
            scroll: 0,
        }
        .render(buf.area, &mut buf);
        buffer_text(&buf)
    }

    #[test]
    fn one_device_shows_sparkline_memory_power_and_clock() {
        let text = draw(&[gpu(0, 70.0, 20)], None, 70, 3);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with(" gpu0"), "{text}");
        assert!(lines[0].contains("74%"), "{text}");
        assert!(
            lines[0].contains("310 W") && lines[0].contains("1755 MHz"),
            "{text}"
        );
        // The sparkline draws block characters between the name and the figures.
        assert!(lines[0].chars().any(|c| ('▁'..='█').contains(&c)), "{text}");
        assert!(
            lines[1].contains("20.0/80.0 GiB") && lines[1].contains("25%"),
            "{text}"
        );
        assert!(lines[1].contains('█') && lines[1].contains('░'), "{text}");
        assert!(!text.contains("imbalance"), "{text}");
    }

    #[test]
    fn four_devices_with_one_heavy_get_the_marker() {
        let devs = vec![
            gpu(0, 95.0, 60),
            gpu(1, 60.0, 30),
            gpu(2, 61.0, 31),
            gpu(3, 59.0, 30),
        ];
        let text = draw(&devs, None, 80, 9);
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[0].contains("imbalance: gpu0 memory 2.0x the others' mean"),
            "{text}"
        );
        assert!(lines[1].starts_with("▲gpu0"), "{text}");
        for (k, name) in ["gpu1", "gpu2", "gpu3"].iter().enumerate() {
            assert!(lines[3 + 2 * k].starts_with(&format!(" {name}")), "{text}");
        }
        // Balanced devices carry no marker.
        let even = vec![
            gpu(0, 60.0, 30),
            gpu(1, 61.0, 30),
            gpu(2, 60.0, 31),
            gpu(3, 59.0, 30),
        ];
        assert!(imbalance(&even).is_none());
        assert!(!draw(&even, None, 80, 9).contains('▲'));
    }

    #[test]
    fn utilization_straggler_is_an_imbalance_too() {
        let mut devs = vec![gpu(0, 90.0, 30), gpu(1, 90.0, 30), gpu(2, 40.0, 30)];
        let m = imbalance(&devs).unwrap();
        assert_eq!(m.device, 2);
        assert!(m.detail.contains("below"), "{}", m.detail);
        // Unknown memory on one device: memory is not compared, utilization still is.
        devs[1].mem_used_bytes = None;
        assert_eq!(imbalance(&devs).map(|m| m.device), Some(2));
        assert!(imbalance(&devs[..1]).is_none());
    }

    #[test]
    fn unknown_metrics_show_as_absent_and_overflow_says_so() {
        let d = DeviceSeries::new("cpu");
        let text = draw(&[d], Some("no GPU: NVML unavailable"), 60, 3);
        assert!(
            text.contains("util –") && text.contains("memory –"),
            "{text}"
        );
        assert!(text.contains("no GPU: NVML unavailable"), "{text}");
        let many: Vec<DeviceSeries> = (0..8).map(|i| gpu(i, 50.0, 10)).collect();
        let text = draw(&many, None, 70, 6);
        assert!(text.contains("+6 more device(s)"), "{text}");
    }

    #[test]
    fn history_maps_probe_samples_and_report_metrics() {
        let mut h = DeviceHistory::new();
        let mut s = Sample::new(0.0, Source::Gpu).with_device(1);
        s.set("util_gpu_pct", 55.0);
        s.set("mem_used_bytes", 1e9);
        s.set("mem_total_bytes", 8e9);
        s.set("power_w", 120.0);
        h.push_sample(&s);
        let mut c = Sample::new(0.0, Source::Core).with_device(0);
        c.set("cpu_util_pct", 99.0);
        h.push_sample(&c);
        h.push("cpu", "cpu_util_pct", 30.0);
        h.push("dev0", "busy_pct", 80.0);
        h.push("dev0", "bytes", 2048.0);
        h.push("gpu0", "util_gpu_pct", f64::NAN);
        let d = h.devices();
        let names: Vec<&str> = d.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(
            names,
            ["gpu1", "dev0", "cpu"],
            "NaN readings create no device"
        );
        assert_eq!(d[0].util_pct, vec![55.0]);
        assert_eq!(d[0].mem_total_bytes, Some(8_000_000_000));
        assert_eq!(d[0].clock_mhz, None);
        assert_eq!(d[1].mem_used_bytes, Some(2048));
        assert_eq!(
            d[2].util_pct,
            vec![30.0],
            "per-core samples are not the host"
        );
        for _ in 0..HISTORY + 5 {
            h.push("cpu", "cpu_util_pct", 1.0);
        }
        assert_eq!(h.devices()[2].util_pct.len(), HISTORY);
    }
}
