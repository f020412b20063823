//! What the hooks' steps come to: the steady steps after warm-up, their mean phases, and
//! the summary a report shows (step count, median step, throughput, phase shares), per
//! rank under torchrun. Apart from events.rs, which reads the hooks' lines.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::evaluation::Evaluation;
use super::events::{steady, Events, Override, Step};
use crate::engine::train::Phases;
use crate::stats::median;

pub(super) fn phases_mean(s: &[Step]) -> Phases {
    let n = s.len().max(1) as f64;
    let sum = |f: fn(&Step) -> f64| s.iter().map(f).sum::<f64>() / n;
    Phases {
        data_wait: sum(|x| x.data_wait),
        h2d: sum(|x| x.h2d),
        zero_grad: sum(|x| x.zero_grad),
        // The engine's phases have no "script": a trial's forward is all between the hooks.
        forward: sum(|x| x.forward + x.script),
        backward: sum(|x| x.backward),
        optimizer: sum(|x| x.optimizer),
        ..Phases::default()
    }
}

/// Step count, median step, throughput and phase shares of one stream of steps.
pub(super) fn summarize(steps: &[Step]) -> Option<StepSummary> {
    let s = steady(steps);
    if s.is_empty() {
        return None;
    }
    let total: f64 = s.iter().map(|x| x.dur).sum();
    // A part said apart from the phases (inside one of them), where any step had it.
    let part =
        |of: fn(&Step) -> f64| Some(s.iter().map(of).sum::<f64>() / total).filter(|r| *r > 0.0);
    // The script's own code is a share only where the hooks split it from the module
    // calls (on the CPU).
    let split = s.iter().any(|x| x.script > 0.0);
    let phase_share: BTreeMap<String, f64> = Step::PHASES
        .iter()
        .filter(|&&k| split || k != "script")
        .map(|&k| {
            (
                k.to_string(),
                s.iter().map(|x| x.phase(k)).sum::<f64>() / total,
            )
        })
        .collect();
    let durs: Vec<f64> = s.iter().map(|x| x.dur).collect();
    let batches: Vec<f64> = s
        .iter()
        .filter(|x| x.batch > 0)
        .map(|x| x.batch as f64)
        .collect();
    let step = crate::stats::typical_step(&durs);
    // One definition of throughput, the sweep's: the median batch over the median step
    // (a mean let a few slow steps, or a warm cache, move it away from the median shown
    // beside it), a bursty loader's steps taken round by round (`stats::typical_step`).
    let samples_per_s = (!batches.is_empty() && step > 0.0).then(|| median(&batches) / step);
    let tokens: Vec<f64> = s
        .iter()
        .filter(|x| x.tokens > 0)
        .map(|x| x.tokens as f64)
        .collect();
    // Only where most steps saw token ids: a stray integer tensor is no token stream.
    let tokens_per_s = (2 * tokens.len() > s.len() && step > 0.0).then(|| median(&tokens) / step);
    let accum: Vec<f64> = s.iter().map(|x| f64::from(x.backwards)).collect();
    let rounds: Vec<f64> = s.iter().map(|x| f64::from(x.optim_steps.max(1))).collect();
    let closure: Vec<f64> = s.iter().map(|x| f64::from(x.closure_calls)).collect();
    Some(StepSummary {
        torch: None,
        steps: steps.len(),
        steady_steps: s.len(),
        median_step_ms: step * 1e3,
        steps_per_s: (step > 0.0).then(|| 1.0 / step),
        backwards_per_step: (accum.iter().any(|b| *b > 0.0)).then(|| median(&accum)),
        optimizer_steps_per_step: Some(median(&rounds)).filter(|r| *r > 1.0),
        closure_calls_per_step: Some(median(&closure)).filter(|c| *c > 0.0),
        samples_per_s,
        tokens_per_s,
        first_step_ms: None,
        phase_share,
        recompute_share: part(|x| x.recompute),
        no_grad_share: part(|x| x.no_grad),
        overrides: Vec::new(),
        not_applicable: BTreeMap::new(),
        script_knobs: BTreeMap::new(),
        notices: Vec::new(),
        ranks: Vec::new(),
        processes: None,
        stream_replayed: None,
        evaluation: Evaluation::of(s),
    })
}

/// What the hooks measured, for a report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepSummary {
    pub torch: Option<String>,
    /// Steps reported, and those after warm-up that the figures below cover.
    pub steps: usize,
    pub steady_steps: usize,
    pub median_step_ms: f64,
    /// Samples (the batch's first dimension) per second: the median samples of a step
    /// over the median step. None when the hooks saw no batch (then only steps/s).
    pub samples_per_s: Option<f64>,
    /// Tokens per second, where the batch is token ids: the median tokens of a step over
    /// the median step (the same definition as samples/s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_per_s: Option<f64>,
    /// The first step (rank 0's), from the job's first batch or forward to its first
    /// optimizer step: start-up and compilation, kept out of every figure above.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_step_ms: Option<f64>,
    /// Optimizer steps per second (1 / the median step).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps_per_s: Option<f64>,
    /// Median backward calls per training step: above 1 with one optimizer is gradient
    /// accumulation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backwards_per_step: Option<f64>,
    /// Median optimizer steps per training step, where several optimizers step in turn
    /// (a GAN's): a training step is one round of them. None for one optimizer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub optimizer_steps_per_step: Option<f64>,
    /// Median calls of the optimizer's closure per step (L-BFGS), where it takes one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closure_calls_per_step: Option<f64>,
    /// Share of step time per phase; `forward` is the module calls, `script` (on the CPU)
    /// the script's own code between the hooks, else in `forward`.
    pub phase_share: BTreeMap<String, f64>,
    /// Share of step time, within backward's, that checkpointed segments spent running
    /// their forward again (`Step::recompute`); None where nothing was recomputed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recompute_share: Option<f64>,
    /// Share of step time that models called with gradients off inside training (a
    /// teacher, a target network: `Step::no_grad`) took, on the CPU; None where none ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_grad_share: Option<f64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub overrides: Vec<Override>,
    /// Knobs that could not act in this job, with the reason.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub not_applicable: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notices: Vec<String>,
    /// What the script does by itself, as the hooks read it (`Events::script_knobs`):
    /// its DataLoader's settings, its optimizer, the framework whose loop ran it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub script_knobs: BTreeMap<String, String>,
    /// Under torchrun, each rank's figures (the ones above are rank 0's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ranks: Vec<RankSummary>,
    /// Trainers that multiprocessing started without ranks (Hogwild!'s, sharing one
    /// model), 2 or more: `ranks` holds each one's figures (its index, in the order their
    /// first steps came), and the ones above are the first's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub processes: Option<usize>,
    /// The DataLoader workers (2 or more) that each replayed an IterableDataset's whole
    /// stream: every sample trained on that many times per pass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_replayed: Option<u32>,
    /// The trained model's evaluation passes between these steps, kept out of every
    /// figure above (`Step::eval`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evaluation: Option<Evaluation>,
}

/// One torchrun rank's steps.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RankSummary {
    pub rank: u32,
    pub steps: usize,
    pub steady_steps: usize,
    pub median_step_ms: f64,
    /// Median time per step outside `backward`: the rank's own work. Under DDP every
    /// rank's step lasts as long as the slowest one's, because the others wait for its
    /// gradients inside backward's all-reduce; this is where a straggler shows.
    pub outside_backward_ms: f64,
    pub samples_per_s: Option<f64>,
    pub phase_share: BTreeMap<String, f64>,
}

impl Events {
    /// Mean time per phase over the steady steps.
    pub fn phases_mean(&self) -> Phases {
        phases_mean(self.steady())
    }

    pub fn summary(&self) -> Option<StepSummary> {
        let mut s = summarize(&self.steps)?;
        s.first_step_ms = self
            .first_steps
            .iter()
            .find(|f| f.rank.unwrap_or(0) == 0)
            .map(|f| f.dur * 1e3);
        s.torch = self.torch.clone();
        s.overrides = self.overrides.clone();
        s.not_applicable = self.not_applicable.clone();
        s.notices = self.notices.clone();
        s.script_knobs = self.script_knobs.clone();
        s.stream_replayed = self.stream_replayed;
        s.processes = (self.procs.len() >= 2).then_some(self.procs.len());
        s.ranks = self
            .ranks
            .iter()
            .filter_map(|(r, steps)| {
                let x = summarize(steps)?;
                let outside: Vec<f64> = steady(steps).iter().map(|s| s.dur - s.backward).collect();
                Some(RankSummary {
                    rank: *r,
                    steps: x.steps,
                    steady_steps: x.steady_steps,
                    median_step_ms: x.median_step_ms,
                    outside_backward_ms: median(&outside) * 1e3,
                    samples_per_s: x.samples_per_s,
                    phase_share: x.phase_share,
                })
            })
            .collect();
        Some(s)
    }
}
