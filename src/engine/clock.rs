//! Time in a step: the phases a step is split into, their sums, and the clock each
//! backend times them with (base floor: a model times its own layers with it).

use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::error::Result;

/// Seconds spent in each phase of one step (summed over micro-batches).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Phases {
    pub data_wait: f64,
    pub h2d: f64,
    pub zero_grad: f64,
    pub forward: f64,
    pub backward: f64,
    /// Part of `backward` spent recomputing checkpointed segments.
    pub recompute: f64,
    pub comm: f64,
    pub optimizer: f64,
}

impl Phases {
    pub const NAMES: [&'static str; 8] = [
        "data_wait",
        "h2d",
        "zero_grad",
        "forward",
        "backward",
        "recompute",
        "comm",
        "optimizer",
    ];

    pub fn get(&self, name: &str) -> f64 {
        match name {
            "data_wait" => self.data_wait,
            "h2d" => self.h2d,
            "zero_grad" => self.zero_grad,
            "forward" => self.forward,
            "backward" => self.backward,
            "recompute" => self.recompute,
            "comm" => self.comm,
            "optimizer" => self.optimizer,
            _ => 0.0,
        }
    }

    pub(crate) fn add(&mut self, o: &Phases) {
        self.data_wait += o.data_wait;
        self.h2d += o.h2d;
        self.zero_grad += o.zero_grad;
        self.forward += o.forward;
        self.backward += o.backward;
        self.recompute += o.recompute;
        self.comm += o.comm;
        self.optimizer += o.optimizer;
    }

    pub(crate) fn scaled(&self, f: f64) -> Phases {
        Phases {
            data_wait: self.data_wait * f,
            h2d: self.h2d * f,
            zero_grad: self.zero_grad * f,
            forward: self.forward * f,
            backward: self.backward * f,
            recompute: self.recompute * f,
            comm: self.comm * f,
            optimizer: self.optimizer * f,
        }
    }
}
/// A timed phase of a step (`data_wait` is host time, measured by the loop itself).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    H2d,
    ZeroGrad,
    Forward,
    Backward,
    Recompute,
    /// Communication a strategy waits for (DDP's buffer broadcast and bucket wait).
    Comm,
    Optimizer,
}

impl Phases {
    pub(crate) fn add_to(&mut self, p: Phase, s: f64) {
        match p {
            Phase::H2d => self.h2d += s,
            Phase::ZeroGrad => self.zero_grad += s,
            Phase::Forward => self.forward += s,
            Phase::Backward => self.backward += s,
            Phase::Recompute => self.recompute += s,
            Phase::Comm => self.comm += s,
            Phase::Optimizer => self.optimizer += s,
        }
    }
}

/// A backend's phase timer: `Instant` on the CPU, events on a GPU's stream (whose
/// times can only be read after the step's sync, hence marks rather than durations).
pub trait Clock {
    type Mark;
    fn mark(&mut self) -> Result<Self::Mark>;
    /// Charges the time from `from` to now to `phase`.
    fn add(&mut self, phase: Phase, from: Self::Mark) -> Result<()>;
}

/// The host clock: work is done when the call returns.
#[derive(Debug, Default)]
pub struct HostClock {
    ph: Phases,
}

impl HostClock {
    pub fn phases(&self) -> Phases {
        self.ph
    }
}

impl Clock for HostClock {
    type Mark = Instant;
    fn mark(&mut self) -> Result<Instant> {
        Ok(Instant::now())
    }
    fn add(&mut self, phase: Phase, from: Instant) -> Result<()> {
        self.ph.add_to(phase, from.elapsed().as_secs_f64());
        Ok(())
    }
}
