//! The allowed range of every size and count a user can give: sweep specs and `tune
//! train`/`tune bench` flags check against these, so a value a spec accepts is one every
//! trial accepts too, and a bad size is a one-line refusal (exit 2) instead of an
//! allocation failure deep in a run. A count knob's bound is declared with the knob in
//! `crate::knobs` (the knob table); the ones here that a knob shares with a workload key
//! (`BATCH_SIZE`, `DEVICES`) are named by that table, not listed a second time.
//!
//! Messages here say what is wrong and what is allowed; the caller adds where (the flag
//! name, or `file:line:col` and the spec key).

use std::path::Path;

use crate::error::shown;

/// An inclusive integer range and why it ends where it does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bound {
    pub min: u64,
    pub max: u64,
    /// Why the maximum, shown with the error.
    pub why: &'static str,
}

impl Bound {
    /// `v` when it lies in the range, else the message naming the range.
    pub fn check(&self, v: u64) -> Result<u64, String> {
        if (self.min..=self.max).contains(&v) {
            Ok(v)
        } else {
            Err(self.refusal(&v.to_string()))
        }
    }

    /// [`Bound::check`] for a count held in a `usize`.
    pub fn check_usize(&self, v: usize) -> Result<usize, String> {
        self.check(v as u64).map(|_| v)
    }

    /// The message for a value outside the range (or not a number at all).
    pub fn refusal(&self, value: &str) -> String {
        format!(
            "{}: must be at least {} and at most {} ({})",
            shown(value),
            self.min,
            self.max,
            self.why
        )
    }
}

/// Measured steps per run. Every step keeps its time and loss (16 bytes); 10^7 steps is
/// days of training at the engine's fastest step and 160 MB of per-step records.
pub const STEPS: Bound = Bound {
    min: 1,
    max: 10_000_000,
    why: "each step keeps its time and loss in memory",
};

/// Warm-up steps in a spec (run before the measured ones): the same ceiling as steps.
pub const WARMUP: Bound = Bound {
    min: 0,
    max: STEPS.max,
    why: "warm-up steps are steps too",
};

/// Samples per micro-batch. 65536 images of 32x32x3 f32 are 800 MB of input alone, and
/// activations are many times that: larger is an allocation failure, not a measurement.
pub const BATCH_SIZE: Bound = Bound {
    min: 1,
    max: 65_536,
    why: "a larger batch does not fit in memory for any built-in model",
};

/// More virtual devices than this is a typo, not an experiment; the engine refuses more
/// from this same figure (kept here, below the engine, so flags and specs share it).
pub const MAX_DEVICES: usize = 64;

/// Devices of a multi-device run. On the CPU backend each is a model replica with its own
/// threads; past 64 replicas every one gets a sliver of a core on any machine tune targets.
pub const DEVICES: Bound = Bound {
    min: 1,
    max: MAX_DEVICES as u64,
    why: "each device holds a full model replica",
};

/// Compute threads. A fixed cap rather than a multiple of this machine's cores, so a spec
/// valid here is valid on the machine it is copied to; 1024 is above any CPU tune runs on
/// while keeping the pool's stacks (2 MiB each) to a few GB of address space.
pub const THREADS: Bound = Bound {
    min: 1,
    max: 1024,
    why: "each thread reserves its own stack",
};

/// Samples in a generated `shapes` set. The set is rendered once and cached as PNG
/// shards (about 1-3 KB per image), so 10^6 samples are a few GB of cache and minutes of
/// rendering; more fills the disk before the first step.
pub const SHAPES_N: Bound = Bound {
    min: 1,
    max: 1_000_000,
    why: "the generated set is rendered and cached on disk",
};

/// Repeats of each trial.
pub const REPEATS: Bound = Bound {
    min: 1,
    max: 1000,
    why: "repeats multiply the sweep's run time",
};

/// Per-trial time limit in seconds: one week. Larger values overflow the deadline
/// arithmetic (u64 seconds past `Instant::now()`) and no trial is meant to run longer.
pub const TIMEOUT_S: Bound = Bound {
    min: 1,
    max: 7 * 24 * 3600,
    why: "one week per trial",
};

/// Per-trial memory cap in MiB: 16 TiB. The cap is passed on in bytes (`<< 20`), which
/// must not wrap; no machine tune runs on has more memory than this.
pub const MEM_CAP_MIB: Bound = Bound {
    min: 1,
    max: 1 << 24,
    why: "16 TiB, more than any machine's memory",
};

/// Halving's reduction factor.
pub const ETA: Bound = Bound {
    min: 2,
    max: 64,
    why: "each round keeps 1/eta of the configurations",
};

/// Timed runs of `tune bench`.
pub const BENCH_RUNS: Bound = Bound {
    min: 1,
    max: 1000,
    why: "runs multiply the benchmark's time",
};

/// The learning rate as the engine uses it (f32): positive, finite and a normal number,
/// so `1e308` (infinite as f32) and `5e-324` (zero as f32) are refused.
pub fn lr(x: f64) -> Result<f32, String> {
    let f = x as f32;
    if x > 0.0 && f.is_normal() {
        Ok(f)
    } else {
        Err(format!(
            "{x:e}: not a usable learning rate: the engine computes in f32, which needs a positive normal number between {:e} and {:e}",
            f32::MIN_POSITIVE,
            f32::MAX
        ))
    }
}

/// Warm-up steps of `tune train`, which are part of `steps`: at least one step must be
/// measured.
pub fn warmup_within(warmup: usize, steps: usize) -> Result<usize, String> {
    if warmup < steps {
        Ok(warmup)
    } else {
        Err(format!(
            "{warmup}: leaves none of the {steps} steps to measure (warm-up steps count within the steps): give fewer warm-up steps than steps"
        ))
    }
}

/// Checks a dataset spec as far as it can be checked before opening it: the kind, the
/// sample count of `shapes:N`, and that the folder of `mnist:DIR`/`cifar10:DIR` exists
/// (relative to the current folder, where trials run). The files inside are checked when
/// the dataset is opened.
pub fn dataset(spec: &str) -> Result<(), String> {
    let (kind, arg) = match spec.split_once(':') {
        Some((k, a)) => (k, Some(a)),
        None => (spec, None),
    };
    match (kind, arg) {
        ("synthetic", None) | ("shapes", None) => Ok(()),
        ("shapes", Some(a)) => {
            let n = a.split_once('@').map_or(a, |(n, _)| n).trim();
            match n.parse::<u64>() {
                Ok(v) => SHAPES_N
                    .check(v)
                    .map(|_| ())
                    .map_err(|e| format!("`{}`: sample count {e}", shown(spec))),
                Err(_) => Err(format!(
                    "`{}`: '{}' is not a sample count from {} to {} (try shapes:20000)",
                    shown(spec),
                    shown(n),
                    SHAPES_N.min,
                    SHAPES_N.max
                )),
            }
        }
        ("mnist" | "cifar10", Some(dir)) if !dir.is_empty() => {
            if Path::new(dir).is_dir() {
                Ok(())
            } else {
                Err(format!(
                    "{kind} folder '{}' does not exist (relative paths are relative to the folder tune runs in)",
                    shown(dir)
                ))
            }
        }
        ("mnist" | "cifar10", _) => Err(format!(
            "`{}` needs a folder: {kind}:/path/to/dir",
            shown(spec)
        )),
        _ => Err(format!(
            "unknown dataset `{}`: expected synthetic, shapes, shapes:N, mnist:DIR or cifar10:DIR",
            shown(spec)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_name_the_range() {
        assert_eq!(STEPS.check(5), Ok(5));
        let e = BATCH_SIZE.check(1_000_000_000).unwrap_err();
        assert!(e.contains("at least 1 and at most 65536"), "{e}");
        assert!(MEM_CAP_MIB.check(1 << 44).is_err());
        assert!(TIMEOUT_S.check(i64::MAX as u64).is_err());
    }

    #[test]
    fn lr_must_survive_f32() {
        assert_eq!(lr(0.05), Ok(0.05));
        assert!(lr(1e308).is_err());
        assert!(lr(5e-324).is_err());
        assert!(lr(-1.0).is_err());
        assert!(lr(f64::NAN).is_err());
    }

    #[test]
    fn datasets_are_checked_without_opening_them() {
        for ok in [
            "synthetic",
            "shapes",
            "shapes:4000",
            "shapes:4000@128",
            "mnist:/",
        ] {
            assert_eq!(dataset(ok), Ok(()), "{ok}");
        }
        for bad in [
            "shapes:0",
            "shapes:-5",
            "shapes:1000000000000",
            "imagenet:/x",
            "mnist:",
            "cifar10:/nonexistent/tune-test",
            "synthetic:3",
        ] {
            assert!(dataset(bad).is_err(), "{bad}");
        }
    }
}
