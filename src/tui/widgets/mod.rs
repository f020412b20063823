//! Widgets that are not specific to one screen, and the small text helpers they share.

pub mod devices;
pub(crate) mod frame;

use ratatui::buffer::Buffer;

/// A horizontal bar of `width` cells, `ratio` of them filled. Plain characters, so it
/// reads the same in a screenshot, a `tmux capture-pane` and a colourless terminal.
pub fn bar(ratio: f64, width: usize) -> String {
    let r = if ratio.is_finite() {
        ratio.clamp(0.0, 1.0)
    } else {
        0.0
    };
    let filled = (r * width as f64).round() as usize;
    let mut s = "█".repeat(filled);
    s.push_str(&"░".repeat(width - filled.min(width)));
    s
}

/// Bytes in the largest binary unit that keeps the figure at or above 1.
pub fn bytes(b: u64) -> String {
    let (v, unit) = scale(b as f64, b);
    format!("{v:.1} {unit}")
}

/// "used/total unit", both in the total's unit: easier to compare than mixed units.
pub fn bytes_pair(used: u64, total: u64) -> String {
    let (t, unit) = scale(total as f64, total);
    let div = total as f64 / t;
    format!("{:.1}/{t:.1} {unit}", used as f64 / div)
}

fn scale(v: f64, b: u64) -> (f64, &'static str) {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = v;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < UNITS.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        return (b as f64, UNITS[0]);
    }
    (v, UNITS[i])
}

/// The buffer as plain text, one line per row, trailing spaces kept: what a person would
/// read off the screen. For rendering tests and the benchmark's sanity check.
pub fn buffer_text(buf: &Buffer) -> String {
    let area = buf.area;
    let mut out = String::with_capacity(usize::from(area.width + 1) * usize::from(area.height));
    for y in area.top()..area.bottom() {
        for x in area.left()..area.right() {
            out.push_str(buf[(x, y)].symbol());
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_and_byte_figures() {
        assert_eq!(bar(0.5, 4), "██░░");
        assert_eq!(bar(2.0, 3), "███");
        assert_eq!(bar(f64::NAN, 2), "░░");
        assert_eq!(bytes(512), "512.0 B");
        assert_eq!(bytes(3 << 20), "3.0 MiB");
        assert_eq!(bytes_pair(20 << 30, 80 << 30), "20.0/80.0 GiB");
        assert_eq!(bytes_pair(512 << 20, 2 << 30), "0.5/2.0 GiB");
    }
}
