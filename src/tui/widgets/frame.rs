//! The frame every full-screen view shares (`tune dash`, `tune watch --tui`): a centred
//! overlay's area and border, and the "terminal too small" screen.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Style, Stylize};
use ratatui::text::Line;
use ratatui::widgets::{Block, BorderType, Paragraph, Widget, Wrap};

/// `p` percent of `v`, rounded down.
pub(crate) fn pct(v: u16, p: u16) -> u16 {
    (u32::from(v) * u32::from(p) / 100) as u16
}

/// `w_pct` by `h_pct` of `area`, centred (at least 40x10, at most `area`).
pub(crate) fn centered(area: Rect, w_pct: u16, h_pct: u16) -> Rect {
    let w = pct(area.width, w_pct).max(40).min(area.width);
    let h = pct(area.height, h_pct).max(10).min(area.height);
    Rect::new(
        area.x + (area.width - w) / 2,
        area.y + (area.height - h) / 2,
        w,
        h,
    )
}

/// A "too small" message instead of garbage, when the terminal is smaller than
/// `min_w` x `min_h`.
pub(crate) fn too_small(area: Rect, buf: &mut Buffer, who: &str, min_w: u16, min_h: u16) {
    let lines = vec![
        Line::from("terminal too small".bold()),
        Line::from(format!(
            "{}x{} here; {who} needs at least {min_w}x{min_h}",
            area.width, area.height
        )),
        Line::from("enlarge the window, or press q to quit"),
    ];
    let h = (lines.len() as u16).min(area.height);
    let y = area.y + area.height.saturating_sub(h) / 2;
    Paragraph::new(lines)
        .centered()
        .wrap(Wrap { trim: true })
        .render(Rect::new(area.x, y, area.width, h), buf);
}

/// An overlay's border, titled, with how to close it.
pub(crate) fn popup<'a>(title: impl Into<Line<'a>>) -> Block<'a> {
    Block::bordered()
        .border_type(BorderType::Double)
        .border_style(Style::new().fg(Color::Cyan))
        .title(title)
        .title_bottom(Line::from(" esc/enter close ").right_aligned())
}
