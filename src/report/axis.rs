//! The one guard between a report's numbers and a chart axis. plotters' tick placement
//! loops forever on a range whose span is infinite, NaN or below its float resolution
//! (a throughput of f64::MAX made `tune report` hang), and asserts on NaN. Every chart
//! builds its ranges through [`Span`] and clamps what it draws into them, so no number in
//! a report.json, however hostile, reaches plotters unbounded.

use std::ops::Range;

/// Largest magnitude an axis shows. Far above any real throughput, time or MiB figure;
/// far below where plotters' tick arithmetic (powers of ten of the span) loses precision.
pub(crate) const LIMIT: f64 = 1e15;

/// Narrowest span relative to the axis' magnitude: wider than f64 rounding at that
/// magnitude, so tick steps never round to nothing.
const MIN_RELATIVE_SPAN: f64 = 1e-6;
/// Narrowest span near zero, where a relative minimum would vanish.
const MIN_SPAN: f64 = 1e-9;

/// A finite, ordered axis range that plotters can always place ticks on.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Span {
    lo: f64,
    hi: f64,
}

/// `v` as a drawable number: NaN becomes `or`, infinities and huge values the limit.
fn bounded(v: f64, or: f64) -> f64 {
    if v.is_nan() {
        or
    } else {
        v.clamp(-LIMIT, LIMIT)
    }
}

impl Span {
    /// The range from `lo` to `hi`, repaired: NaN ends fall back to 0 and 1, the ends are
    /// clamped to ±[`LIMIT`], swapped if reversed, and widened if (nearly) equal.
    pub(crate) fn new(lo: f64, hi: f64) -> Span {
        let (a, b) = (bounded(lo, 0.0), bounded(hi, 1.0));
        let (mut lo, mut hi) = (a.min(b), a.max(b));
        let min = (lo.abs().max(hi.abs()) * MIN_RELATIVE_SPAN).max(MIN_SPAN);
        if hi - lo < min {
            hi = lo + min;
            if hi > LIMIT {
                hi = LIMIT;
                lo = LIMIT - min;
            }
        }
        Span { lo, hi }
    }

    /// From zero to `hi` grown by `headroom` (1.05 leaves 5% room at the right).
    pub(crate) fn upto(hi: f64, headroom: f64) -> Span {
        Span::new(0.0, bounded(hi, 0.0) * headroom)
    }

    pub(crate) fn range(self) -> Range<f64> {
        self.lo..self.hi
    }

    pub(crate) fn hi(self) -> f64 {
        self.hi
    }

    /// `v` clamped into the range (NaN to its start), so marks and their labels stay on
    /// the canvas and pixel arithmetic cannot overflow.
    pub(crate) fn put(self, v: f64) -> f64 {
        if v.is_nan() {
            self.lo
        } else {
            v.clamp(self.lo, self.hi)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_range_is_finite_ordered_and_wide_enough() {
        let odd = [
            f64::MAX,
            f64::MIN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            f64::MIN_POSITIVE,
            5e-324,
            -0.0,
            0.0,
            1e308,
            1e15,
            -3.0,
            123.456,
        ];
        for &a in &odd {
            for &b in &odd {
                let s = Span::new(a, b);
                let r = s.range();
                assert!(r.start.is_finite() && r.end.is_finite(), "{a} {b}: {r:?}");
                assert!(r.end > r.start, "{a} {b}: {r:?}");
                assert!(r.end - r.start >= MIN_SPAN, "{a} {b}: {r:?}");
                assert!(r.start.abs() <= LIMIT && r.end.abs() <= LIMIT, "{a} {b}");
                assert!(s.put(a).is_finite() && s.put(b).is_finite());
            }
        }
        assert_eq!(Span::upto(100.0, 1.05).range(), 0.0..105.0);
        assert_eq!(Span::upto(f64::MAX, 1.05).hi(), LIMIT);
    }
}
