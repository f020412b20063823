//! The trained model's evaluation passes between a job's training steps, summed apart
//! from the steps (`Step::eval`), so that validating every N steps is not read as slow
//! steps.

use serde::{Deserialize, Serialize};

use super::events::Step;
use crate::stats::median;

/// The trained model's evaluation between the steps a summary covers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Evaluation {
    /// Share of the job's time in evaluation: its seconds over steps' and its together.
    pub share: f64,
    /// Steps that an evaluation came before, and the median seconds of one.
    pub passes: usize,
    pub median_s: f64,
    /// Training steps from one evaluation to the next (the median gap; with one pass,
    /// the steps covered).
    pub every: f64,
}

impl Evaluation {
    /// None when no step held an evaluation.
    pub(crate) fn of(s: &[Step]) -> Option<Evaluation> {
        let at: Vec<usize> = (0..s.len()).filter(|i| s[*i].eval > 0.0).collect();
        if at.is_empty() {
            return None;
        }
        let passes: Vec<f64> = at.iter().map(|i| s[*i].eval).collect();
        let gaps: Vec<f64> = at.windows(2).map(|w| (w[1] - w[0]) as f64).collect();
        let eval: f64 = passes.iter().sum();
        let total = eval + s.iter().map(|x| x.dur).sum::<f64>();
        Some(Evaluation {
            share: eval / total,
            passes: passes.len(),
            median_s: median(&passes),
            every: if gaps.is_empty() {
                s.len() as f64
            } else {
                median(&gaps)
            },
        })
    }
}
