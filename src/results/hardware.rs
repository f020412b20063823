//! What the hardware was doing while one repeat ran: the conditions that could have
//! distorted it (GPU throttling, clocks below their maximum, the power cap, other
//! processes on the trial's GPUs, other processes' CPU load, VM steal time) and the
//! energy the trial's GPUs drew. The runner writes one per repeat (`runner::hardware`);
//! the report leaves a contaminated repeat out of the figures while a clean one remains.

use serde::{Deserialize, Serialize};

/// One repeat's hardware state. `reasons` empty = clean.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RepeatHardware {
    /// Why the repeat's figures may be distorted, one sentence each ("gpu0:
    /// hw_thermal_slowdown in 4 of 9 samples"); empty when nothing was seen.
    #[serde(default)]
    pub reasons: Vec<String>,
    /// This repeat was run again because of `reasons` (the re-run follows it).
    #[serde(default)]
    pub rerun: bool,
    /// Share of all CPU time the hypervisor gave other guests while the repeat ran
    /// (`/proc/stat` steal), percent; None where the kernel does not count it.
    #[serde(default)]
    pub steal_pct: Option<f64>,
    /// Median share of all cores busy outside the sweep's process tree, percent.
    #[serde(default)]
    pub foreign_cpu_pct: Option<f64>,
    /// Per GPU the repeat used (or every GPU NVML sees, when none could be told apart).
    #[serde(default)]
    pub gpus: Vec<GpuState>,
    /// The energy the repeat's GPUs drew while it ran, when GPUs were sampled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub energy: Option<Energy>,
}

impl RepeatHardware {
    pub fn contaminated(&self) -> bool {
        !self.reasons.is_empty()
    }
}

/// One GPU over one repeat.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuState {
    /// NVML index.
    pub index: u32,
    /// Samples taken of it in the repeat.
    pub samples: usize,
    /// Throttle reasons seen (idle and application-clock settings left out: they do
    /// not slow a running kernel), with the samples that showed each.
    #[serde(default)]
    pub throttle: Vec<(String, usize)>,
    /// Lowest SM clock over its maximum in a busy sample (1.0 = at its maximum).
    #[serde(default)]
    pub sm_clock_ratio_min: Option<f64>,
    /// Samples whose draw reached the enforced power limit (`sw_power_cap`).
    #[serde(default)]
    pub power_cap_samples: usize,
    /// Processes outside the sweep's tree holding memory or SM time on it.
    #[serde(default)]
    pub foreign_pids: Vec<u32>,
    /// Growth of NVML's volatile ECC error counts over the repeat's samples.
    #[serde(default)]
    pub ecc_corrected: u64,
    #[serde(default)]
    pub ecc_uncorrected: u64,
    /// XID codes of the critical XID events NVML delivered during the repeat.
    #[serde(default)]
    pub xid: Vec<u64>,
}

/// Energy of one repeat's window.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Energy {
    /// Joules the counted GPUs drew over `window_s`.
    pub joules: f64,
    pub window_s: f64,
    /// `counter` (NVML's total-energy counter) or `power` (power samples integrated:
    /// the GPU has no counter).
    pub source: String,
    /// GPUs counted (NVML indices).
    pub gpus: Vec<u32>,
    /// The figures came from tune's NVML stand-in, not a GPU.
    #[serde(default)]
    pub stand_in: bool,
}

impl Energy {
    pub fn mean_power_w(&self) -> Option<f64> {
        (self.window_s > 0.0 && self.joules.is_finite()).then(|| self.joules / self.window_s)
    }
}

/// Which repeats a trial's figures use: the clean ones, or every one when none is clean
/// (then `all_contaminated` is true, and the report says so loudly). `hardware` is
/// index-aligned with the repeats; a repeat without an entry (older journals, cluster
/// runs) counts as clean.
pub fn counted(repeats: usize, hardware: &[RepeatHardware]) -> (Vec<usize>, bool) {
    let bad = |i: usize| hardware.get(i).is_some_and(RepeatHardware::contaminated);
    let clean: Vec<usize> = (0..repeats).filter(|&i| !bad(i)).collect();
    if clean.is_empty() && repeats > 0 {
        ((0..repeats).collect(), true)
    } else {
        (clean, false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hw(bad: bool) -> RepeatHardware {
        RepeatHardware {
            reasons: if bad { vec!["x".into()] } else { vec![] },
            ..RepeatHardware::default()
        }
    }

    #[test]
    fn contaminated_repeats_are_left_out_while_a_clean_one_remains() {
        assert_eq!(counted(3, &[hw(true), hw(false)]), (vec![1, 2], false));
        assert_eq!(counted(2, &[hw(true), hw(true)]), (vec![0, 1], true));
        assert_eq!(counted(2, &[]), (vec![0, 1], false));
        assert_eq!(counted(0, &[]), (vec![], false));
    }
}
