//! A bursty DataLoader's steps taken round by round (#31): the one place where the
//! median step is not the job's pace.

use std::borrow::Cow;

use super::{mean, median, quantile};

/// A step counts as one a burst waits on when it takes this many times the lower
/// quartile step: a DataLoader's workers, started together, hand over their batches
/// together, so all but one step of each round are instant (2 ms) and one waits for the
/// round (200 ms): tests/pytorch/forever.py with 4 workers and 25 ms per sample.
const BURST_SLOW: f64 = 3.0;

/// The period of the bursts `times` come in, in steps: 1 when they do not (fewer than
/// three slow steps, `BURST_SLOW`), else the steps per slow step, 2 to 16. The median
/// step of a bursty job is one of its instant ones: forever.py with 4 workers measured
/// "4267 samples/s" where its window ran 164 (35 steps of 8 samples in 1.70 s).
pub fn burst_period(times: &[f64]) -> usize {
    let n = times.len();
    let q1 = quantile(times, 0.25);
    if n < 6 || q1.is_nan() || q1 <= 0.0 {
        return 1;
    }
    let slow = times.iter().filter(|t| **t > BURST_SLOW * q1).count();
    if slow < 3 {
        return 1;
    }
    ((n as f64 / slow as f64).round() as usize).clamp(2, 16)
}

/// `times` as the figures a median is taken over: each step, or for a bursty job
/// (`burst_period`) the mean of each whole round of steps, so that a round's wait is
/// shared by its steps while one slow round (a hiccup) still moves only one figure. The
/// steps after the last whole round are left out; fewer steps than one round give their
/// mean.
pub fn rounds_of(times: &[f64]) -> Cow<'_, [f64]> {
    let p = burst_period(times);
    if p <= 1 {
        return Cow::Borrowed(times);
    }
    let v: Vec<f64> = times.chunks_exact(p).map(mean).collect();
    if v.is_empty() {
        return Cow::Owned(vec![mean(times)]);
    }
    Cow::Owned(v)
}

/// The typical step of `times`: the median over `rounds_of` them.
pub fn typical_step(times: &[f64]) -> f64 {
    median(&rounds_of(times))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A loader whose workers hand over batches in bursts: the typical step is a round's
    /// mean, not the instant steps'; a steady job and one with a single hiccup keep
    /// their median.
    #[test]
    fn a_bursty_loader_steps_at_its_rounds_pace_and_a_hiccup_moves_nothing() {
        // forever.py, 4 workers: three instant steps and one that waits, over and over.
        let four: Vec<f64> = (0..32)
            .map(|i| if i % 4 == 3 { 0.190 } else { 0.002 })
            .collect();
        assert_eq!(burst_period(&four), 4);
        let t = typical_step(&four);
        assert!((t - 0.049).abs() < 1e-9, "{t}");
        // Two workers, the median falling between the two kinds of step.
        let two: Vec<f64> = (0..30)
            .map(|i| if i % 2 == 1 { 0.200 } else { 0.002 })
            .collect();
        assert_eq!(burst_period(&two), 2);
        assert!((typical_step(&two) - 0.101).abs() < 1e-9);
        // Steady steps, with one hiccup: the median, as before.
        let mut steady: Vec<f64> = (0..30).map(|i| 0.100 + 0.001 * (i % 3) as f64).collect();
        steady[7] = 2.0;
        assert_eq!(burst_period(&steady), 1);
        assert_eq!(typical_step(&steady), median(&steady));
        // A hiccup in a bursty job moves one round's figure only.
        let mut hic = four.clone();
        hic[9] = 5.0;
        let h = typical_step(&hic);
        assert!((h - 0.049).abs() < 1e-9, "{h}");
    }
}
