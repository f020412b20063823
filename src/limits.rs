//! The allowed range of every size and count a user can give: sweep specs and `tune
//! train`/`tune bench` flags check against these, so a value a spec accepts is one every
//! trial accepts too, and a bad size is a one-line refusal (exit 2) instead of an
//! allocation failure deep in a run. A count knob's bound is declared with the knob in
//! `crate::knobs` (the knob table); the ones here that a knob shares with a workload key
//! (`BATCH_SIZE`, `DEVICES`) are named by that table, not listed a second time.
//!
//! Messages here say what is wrong and what is allowed; the caller adds where (the flag
//! name, or `file:line:col` and the spec key).

use std::ffi::OsStr;
use std::path::Path;
use std::time::Duration;

use crate::error::{shown, Error, Result};

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

/// Pairs of runs (the change, the baseline beside it) a confirmation makes
/// (`[search] confirm_repeats`, default `runner`'s four at least): each pair is two more
/// runs of the job.
pub const CONFIRM_REPEATS: Bound = Bound {
    min: 1,
    max: 10,
    why: "each pair is two more runs of the job",
};

/// Extra runs a trial may spend replacing repeats the hardware contaminated (throttling,
/// another process on its GPU, steal time): each costs a whole repeat, and a machine that
/// stays contaminated for ten re-runs will not clean up for an eleventh.
pub const HARDWARE_RERUNS: Bound = Bound {
    min: 0,
    max: 10,
    why: "each re-run costs a whole repeat",
};

/// Other processes' share of all cores (percent) above which a repeat counts as
/// contaminated, when the spec asks for that.
pub const FOREIGN_CPU_PCT: Bound = Bound {
    min: 1,
    max: 100,
    why: "a share of all cores, in percent",
};

/// Per-trial time limit in seconds: one week. Larger values overflow the deadline
/// arithmetic (u64 seconds past `Instant::now()`) and no trial is meant to run longer.
pub const TIMEOUT_S: Bound = Bound {
    min: 1,
    max: 7 * 24 * 3600,
    why: "one week per trial",
};

/// `[search] budget_s`: the whole sweep's time. A minute at the least: a Python job's
/// start-up alone took 5-20 s per run on the 2-core machine (`time to answer`'s
/// "job start-up and shutdown" over the realistic scripts), and a sweep is two runs
/// or more. Thirty days at the most.
pub const BUDGET_S: Bound = Bound {
    min: 60,
    max: 30 * 24 * 3600,
    why: "the whole sweep's time: a minute to thirty days",
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

/// Configurations in one sweep's plan (the baseline included; for `halving`, its first
/// round). A plan is held in memory, journaled and drawn in every face, and each trial
/// is at least one child process: a week of one-second trials is 600,000, and the
/// reports are built (and benchmarked) for 100,000 trials.
pub const PLAN_TRIALS: Bound = Bound {
    min: 1,
    max: 100_000,
    why: "configurations one sweep plans, runs and reports",
};

/// Runs of one sweep: every configuration times its repeats, and every round of
/// `halving`. Each is at least one child process and one journal line.
pub const PLAN_RUNS: Bound = Bound {
    min: 1,
    max: 1_000_000,
    why: "runs of one sweep, each a child process: configurations x repeats (x rounds)",
};

/// Bytes of parameter text the plan holds: each configuration carries its own copy of
/// every parameter's value (in its knobs, label and journal record), so long values
/// times many configurations are the plan's memory.
pub const PLAN_BYTES: Bound = Bound {
    min: 0,
    max: 256 << 20,
    why: "the plan's parameter values, one copy per configuration, held in memory",
};

/// Values in one `[knobs]` or `[params]` list.
pub const LIST_VALUES: Bound = Bound {
    min: 1,
    max: 10_000,
    why: "values of one knob or parameter",
};

/// Bytes of one `[params]` value: a command-line argument, far below the kernel's
/// 128 KiB limit on one argument (`MAX_ARG_STRLEN`), which the whole `sh -c` line must
/// also fit.
pub const PARAM_VALUE_BYTES: Bound = Bound {
    min: 0,
    max: 4096,
    why: "one value of a command-line parameter",
};

/// Bytes of the command line a trial hands to `sh -c`: Linux refuses to start a
/// program with one argument longer than 32 pages (`MAX_ARG_STRLEN`, 128 KiB).
pub const COMMAND_BYTES: Bound = Bound {
    min: 1,
    max: 128 << 10,
    why: "the kernel's limit on one argument (MAX_ARG_STRLEN)",
};

/// Characters of a sweep's name, which names its report folder: a folder name's limit.
pub const NAME_BYTES: Bound = Bound {
    min: 1,
    max: 255,
    why: "it names the report folder, and a file name has at most 255 bytes",
};

/// The side in pixels of a stored `shapes:N@S` image: larger PNGs are decoded and
/// shrunk for every sample the loader reads.
pub const SHAPES_SIDE: Bound = Bound {
    min: 1,
    max: 1024,
    why: "the stored side of a generated image",
};

/// Pixels of a generated `shapes` set (samples x side x side): what is rendered and
/// cached before the first step. 10^6 samples of 64x64 pixels.
pub const SHAPES_PIXELS: Bound = Bound {
    min: 1,
    max: 1_000_000 * 64 * 64,
    why: "the generated set is rendered and cached on disk before the first step",
};

/// A sampling interval in milliseconds (`tune watch --interval`, `tune train
/// --sample-interval`, `TUNE_SAMPLE_MS`): above ten minutes a run gets no samples.
pub const SAMPLE_INTERVAL_MS: Bound = Bound {
    min: 1,
    max: 600_000,
    why: "a longer interval samples nothing in most runs",
};

/// Entries of a list flag (`tune bench --threads 1,2 --what mlp,cnn`): each entry is a
/// whole benchmark.
pub const FLAG_LIST: Bound = Bound {
    min: 1,
    max: 64,
    why: "each entry is a whole benchmark",
};

/// The per-trial memory cap of `TUNE_TRIAL_MEM_CAP_BYTES`: `search.mem_cap_mib`'s range
/// in bytes. Below 1 MiB no process starts, so every trial would read as `oom`.
pub const MEM_CAP_BYTES: Bound = Bound {
    min: MEM_CAP_MIB.min << 20,
    max: MEM_CAP_MIB.max << 20,
    why: "1 MiB to 16 TiB; unset it for no cap",
};

/// Seconds a distributed run waits for a rank (`TUNE_DIST_TIMEOUT`): a trial's limit.
pub const DIST_TIMEOUT_S: Bound = Bound {
    min: 0,
    max: TIMEOUT_S.max,
    why: "one week, a trial's longest limit",
};

/// A TCP port to listen on or connect to (`MASTER_PORT`, `TUNE_DIST_PORT`): port 0
/// asks the system for any port, which the other ranks could not know.
pub const PORT: Bound = Bound {
    min: 1,
    max: 65_535,
    why: "a TCP port the other ranks can name",
};

/// A numeric environment variable within `bound`: `None` when it is unset or empty,
/// one line naming the variable when it is not a whole number or out of range. `raw`
/// is the variable's value (`std::env::var_os`), passed in so launchers' variable
/// sources and tests share this reader.
pub fn env_u64(var: &str, raw: Option<&OsStr>, bound: &Bound) -> Result<Option<u64>> {
    let Some(text) = env_text(var, raw)? else {
        return Ok(None);
    };
    text.parse::<u64>()
        .ok()
        .filter(|v| (bound.min..=bound.max).contains(v))
        .map(Some)
        .ok_or_else(|| env_refusal(var, bound.refusal(&text)))
}

/// [`env_u64`] for seconds, which may be fractional (`TUNE_DIST_TIMEOUT=2.5`): more than
/// 0 and at most `bound.max`.
pub fn env_secs(var: &str, raw: Option<&OsStr>, bound: &Bound) -> Result<Option<Duration>> {
    let Some(text) = env_text(var, raw)? else {
        return Ok(None);
    };
    text.parse::<f64>()
        .ok()
        .filter(|s| *s > 0.0 && *s <= bound.max as f64)
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .map(Some)
        .ok_or_else(|| {
            env_refusal(
                var,
                format!(
                    "{}: must be more than 0 and at most {} seconds ({})",
                    shown(&text),
                    bound.max,
                    bound.why
                ),
            )
        })
}

/// The trimmed text of a variable; `None` when unset or blank (`VAR= cmd` unsets it).
fn env_text(var: &str, raw: Option<&OsStr>) -> Result<Option<String>> {
    let Some(raw) = raw else {
        return Ok(None);
    };
    let text = raw
        .to_str()
        .ok_or_else(|| env_refusal(var, format!("{}: not UTF-8", shown(&raw.to_string_lossy()))))?
        .trim();
    Ok((!text.is_empty()).then(|| text.to_string()))
}

fn env_refusal(var: &str, msg: String) -> Error {
    Error::Invalid(format!("{var}={msg} (in the environment)"))
}

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
            let (n, side) = match a.split_once('@') {
                Some((n, s)) => (n.trim(), Some(s.trim())),
                None => (a.trim(), None),
            };
            let n = n.parse::<u64>().map_err(|_| {
                format!(
                    "`{}`: '{}' is not a sample count from {} to {} (try shapes:20000)",
                    shown(spec),
                    shown(n),
                    SHAPES_N.min,
                    SHAPES_N.max
                )
            })?;
            SHAPES_N
                .check(n)
                .map_err(|e| format!("`{}`: sample count {e}", shown(spec)))?;
            let Some(side) = side else {
                return Ok(());
            };
            let side = side
                .parse::<u64>()
                .map_err(|_| SHAPES_SIDE.refusal(side))
                .and_then(|s| SHAPES_SIDE.check(s))
                .map_err(|e| format!("`{}`: stored side {e}", shown(spec)))?;
            SHAPES_PIXELS
                .check(n.saturating_mul(side).saturating_mul(side))
                .map(|_| ())
                .map_err(|e| format!("`{}`: samples x side x side = {e}", shown(spec)))
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
            "shapes:1200@512",
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
            "shapes:10@100000",
            "shapes:10@x",
            "shapes:1000000@1024",
        ] {
            assert!(dataset(bad).is_err(), "{bad}");
        }
    }
}
