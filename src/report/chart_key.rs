//! What the charts print beside their data: legends as HTML under the chart (a legend
//! drawn inside the plot covers data), and point labels placed where they overlap
//! neither each other nor the marks.

use plotters::style::RGBColor;

use super::html::esc;

/// Estimated width of one character of 12 px sans-serif text. Generous: an estimate that
/// is too narrow lets real labels collide.
pub(super) const CHAR_W: i32 = 8;
/// Height of one line of 12 px text, with a little air.
pub(super) const LINE_H: i32 = 15;

/// One legend entry.
pub(super) struct Key {
    pub name: String,
    pub color: RGBColor,
    /// SVG stroke-dasharray of the series' line; empty for solid.
    pub dash: &'static str,
    /// The series' marker glyph; empty for none.
    pub marker: &'static str,
    /// Said after the name, e.g. which other series this one coincides with.
    pub note: String,
}

/// A legend as an HTML list, so it never sits on the plot.
pub(super) fn legend(keys: &[Key]) -> String {
    let mut s = String::from("<ul class=\"chart-legend\">");
    for k in keys {
        let RGBColor(r, g, b) = k.color;
        s.push_str(&format!(
            "<li><svg viewBox=\"0 0 28 10\" aria-hidden=\"true\"><line x1=\"0\" y1=\"5\" x2=\"28\" y2=\"5\" \
             stroke=\"#{r:02x}{g:02x}{b:02x}\" stroke-width=\"2\" stroke-dasharray=\"{}\"/></svg>\
             <span style=\"color:#{r:02x}{g:02x}{b:02x}\">{}</span> {}",
            k.dash,
            k.marker,
            esc(&k.name)
        ));
        if !k.note.is_empty() {
            s.push_str(&format!(" <span class=\"muted\">({})</span>", esc(&k.note)));
        }
        s.push_str("</li>");
    }
    s.push_str("</ul>");
    s
}

/// A pixel box: left, top, right, bottom.
pub(super) type Box2 = (i32, i32, i32, i32);

fn overlaps(a: Box2, b: Box2) -> bool {
    a.0 < b.2 && b.0 < a.2 && a.1 < b.3 && b.1 < a.3
}

/// Greedy label placement: each label takes the first spot around its point that lies in
/// `area` and is clear of every obstacle (marks, labels already placed).
pub(super) struct Placer {
    area: Box2,
    taken: Vec<Box2>,
}

impl Placer {
    pub(super) fn new(area: Box2, marks: impl IntoIterator<Item = Box2>) -> Placer {
        Placer {
            area,
            taken: marks.into_iter().collect(),
        }
    }

    /// The top-left corner of a free box for `chars` characters near `at`, taken; None
    /// when every candidate spot collides.
    pub(super) fn place(&mut self, at: (i32, i32), chars: usize) -> Option<(i32, i32)> {
        let w = CHAR_W * chars as i32;
        let h = LINE_H;
        let (x, y) = at;
        let mut spots = Vec::new();
        // Nearest first: right, left, above, below, then the diagonals, then further out.
        for d in [1, 2, 3, 4] {
            let g = 8 * d;
            spots.extend([
                (x + g, y - h / 2),
                (x - g - w, y - h / 2),
                (x - w / 2, y - g - h),
                (x - w / 2, y + g),
                (x + g, y - g - h),
                (x + g, y + g),
                (x - g - w, y - g - h),
                (x - g - w, y + g),
            ]);
        }
        let a = self.area;
        let free = spots.into_iter().find(|&(l, t)| {
            let b = (l, t, l + w, t + h);
            b.0 >= a.0
                && b.1 >= a.1
                && b.2 <= a.2
                && b.3 <= a.3
                && !self.taken.iter().any(|&o| overlaps(o, b))
        })?;
        self.taken.push((free.0, free.1, free.0 + w, free.1 + h));
        Some(free)
    }
}
