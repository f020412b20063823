//! What the charts print beside their data: legends as HTML under the chart (a legend
//! drawn inside the plot covers data), and point labels placed where they overlap
//! neither each other nor the marks.

use plotters::style::RGBColor;

use super::escape::esc;

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

/// Side of the placer's grid cells in pixels: a little wider than a short label, so a
/// candidate box touches a few cells and each cell holds a few boxes.
const CELL: i32 = 48;

/// Greedy label placement: each label takes the first spot around its point that lies in
/// `area` and is clear of every obstacle (marks, labels already placed).
///
/// Obstacles are filed in a grid of `CELL`-pixel cells over `area`, and a candidate is
/// checked only against the boxes in the cells it touches: checking every box placed so
/// far made placement quadratic (8,000 points took 3 s, 100,000 never finished, #27).
pub(super) struct Placer {
    area: Box2,
    cols: i32,
    rows: i32,
    cells: Vec<Vec<usize>>,
    boxes: Vec<Box2>,
    /// Box-against-box tests made so far: what the placement costs, for the test that
    /// holds it linear.
    pub(super) comparisons: u64,
}

impl Placer {
    pub(super) fn new(area: Box2, marks: impl IntoIterator<Item = Box2>) -> Placer {
        let cols = ((area.2 - area.0).max(1) + CELL - 1) / CELL;
        let rows = ((area.3 - area.1).max(1) + CELL - 1) / CELL;
        let mut p = Placer {
            area,
            cols,
            rows,
            cells: vec![Vec::new(); (cols * rows) as usize],
            boxes: Vec::new(),
            comparisons: 0,
        };
        for m in marks {
            p.take(m);
        }
        p
    }

    /// The grid cells `b` touches (clamped to the area: nothing outside it is placed).
    fn cells_of(&self, b: Box2) -> impl Iterator<Item = usize> {
        let (cols, rows) = (self.cols, self.rows);
        let col = |x: i32| ((x - self.area.0).div_euclid(CELL)).clamp(0, cols - 1);
        let row = |y: i32| ((y - self.area.1).div_euclid(CELL)).clamp(0, rows - 1);
        let (c0, c1, r0, r1) = (col(b.0), col(b.2 - 1), row(b.1), row(b.3 - 1));
        (r0..=r1).flat_map(move |r| (c0..=c1).map(move |c| (r * cols + c) as usize))
    }

    fn take(&mut self, b: Box2) {
        let i = self.boxes.len();
        self.boxes.push(b);
        let cells: Vec<usize> = self.cells_of(b).collect();
        for c in cells {
            self.cells[c].push(i);
        }
    }

    fn clear(&mut self, b: Box2) -> bool {
        let cells: Vec<usize> = self.cells_of(b).collect();
        for c in cells {
            for &i in &self.cells[c] {
                self.comparisons += 1;
                if overlaps(self.boxes[i], b) {
                    return false;
                }
            }
        }
        true
    }

    /// The top-left corner of a free box for `chars` characters near `at`, taken; None
    /// when every candidate spot collides.
    pub(super) fn place(&mut self, at: (i32, i32), chars: usize) -> Option<(i32, i32)> {
        let (w, h) = (CHAR_W * chars as i32, LINE_H);
        let a = self.area;
        let free = spots(at, w, h).find(|&(l, t)| {
            let b = (l, t, l + w, t + h);
            b.0 >= a.0 && b.1 >= a.1 && b.2 <= a.2 && b.3 <= a.3 && self.clear(b)
        })?;
        self.take((free.0, free.1, free.0 + w, free.1 + h));
        Some(free)
    }
}

/// Top-left corners of the spots a `w`x`h` label may take around `at`, nearest first:
/// right, left, above, below, then the diagonals, then further out.
fn spots(at: (i32, i32), w: i32, h: i32) -> impl Iterator<Item = (i32, i32)> {
    let (x, y) = at;
    (1..=4).flat_map(move |d| {
        let g = 8 * d;
        [
            (x + g, y - h / 2),
            (x - g - w, y - h / 2),
            (x - w / 2, y - g - h),
            (x - w / 2, y + g),
            (x + g, y - g - h),
            (x + g, y + g),
            (x - g - w, y - g - h),
            (x - g - w, y + g),
        ]
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The grid finds exactly the collisions a check against every box finds.
    #[test]
    fn placement_matches_checking_every_box() {
        let area = (60, 10, 940, 350);
        let mut rng = crate::stats::SplitMix64::new(27);
        let pts: Vec<(i32, i32)> = (0..400)
            .map(|_| {
                let x = 60 + rng.below(880) as i32;
                (x, 10 + rng.below(340) as i32)
            })
            .collect();
        let marks: Vec<Box2> = pts
            .iter()
            .map(|&(x, y)| (x - 6, y - 6, x + 7, y + 7))
            .collect();
        let mut grid = Placer::new(area, marks.clone());
        let mut all = marks;
        for (i, &p) in pts.iter().enumerate() {
            let chars = 3 + i % 12;
            let got = grid.place(p, chars);
            // The same search, checked against every box.
            let (w, h) = (CHAR_W * chars as i32, LINE_H);
            let want = spots(p, w, h).find(|&(l, t)| {
                let b = (l, t, l + w, t + h);
                b.0 >= area.0
                    && b.1 >= area.1
                    && b.2 <= area.2
                    && b.3 <= area.3
                    && !all.iter().any(|&o| overlaps(o, b))
            });
            assert_eq!(got, want, "label {i} at {p:?}");
            if let Some((l, t)) = want {
                all.push((l, t, l + w, t + h));
            }
        }
    }

    /// Placing n labels over points spread across a plot costs a bounded number of box
    /// tests per label, not one per box placed so far: 10,000 labels would take about
    /// 5*10^7 tests (5,000 per label) if every placed box were checked.
    #[test]
    fn placement_cost_grows_linearly() {
        let area = (0, 0, 8000, 8000);
        let n = 10_000u64;
        let mut rng = crate::stats::SplitMix64::new(5);
        let mut p = Placer::new(area, std::iter::empty());
        for _ in 0..n {
            let at = (rng.below(8000) as i32, rng.below(8000) as i32);
            p.place(at, 6);
        }
        assert!(
            p.comparisons < 100 * n,
            "{} box tests for {n} labels",
            p.comparisons
        );
    }
}
