//! Where a sweep's trials run: `[search] executor` and the `[slurm]` table (docs/cluster.md).
//! Neither is part of the spec's fingerprint: a sweep started locally may be resumed on a
//! cluster, and the other way round.

use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// `[search] executor`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExecutorKind {
    /// A child process of `tune sweep` per trial, one at a time.
    #[default]
    Local,
    /// A Slurm batch job per trial repeat, up to `[slurm] max_parallel` at once.
    Slurm,
}

impl ExecutorKind {
    pub const ALLOWED: &'static [&'static str] = &["local", "slurm"];

    pub fn parse(s: &str) -> Option<ExecutorKind> {
        match s {
            "local" => Some(ExecutorKind::Local),
            "slurm" => Some(ExecutorKind::Slurm),
            _ => None,
        }
    }
}

impl fmt::Display for ExecutorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ExecutorKind::Local => "local",
            ExecutorKind::Slurm => "slurm",
        })
    }
}

/// The `[slurm]` table: how each trial is submitted with `sbatch`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SlurmSpec {
    /// `--partition`; None is the cluster's default partition.
    pub partition: Option<String>,
    /// `--account`.
    pub account: Option<String>,
    /// `--gres`, e.g. "gpu:a100:1".
    pub gres: Option<String>,
    /// `--gpus-per-node`.
    pub gpus_per_trial: Option<usize>,
    /// `--nodes`: more than one launches the trial through `srun` as a multi-node job.
    pub nodes: usize,
    /// `--cpus-per-task`.
    pub cpus_per_trial: Option<usize>,
    /// `--time` in minutes (Slurm's granularity); default: `search.timeout_s` rounded up.
    pub time_limit_min: u64,
    /// More `sbatch` arguments, passed as given (one argument per string).
    pub extra_args: Vec<String>,
    /// Jobs of this sweep queued or running at once.
    pub max_parallel: usize,
    /// A folder every node sees (a shared file system) for the batch scripts and the
    /// trials' output; relative to the spec's folder. Default: `<out>/slurm`.
    pub shared_dir: Option<PathBuf>,
    /// A job still pending after this long because no node can run it (drained, down,
    /// a partition limit) is cancelled and its trial recorded as failed. Waiting for busy
    /// nodes (`Resources`, `Priority`) is never cut short.
    pub pending_timeout_s: u64,
    /// Seconds between `squeue` polls.
    pub poll_s: f64,
}

impl SlurmSpec {
    pub fn with_timeout(timeout_s: u64) -> SlurmSpec {
        SlurmSpec {
            partition: None,
            account: None,
            gres: None,
            gpus_per_trial: None,
            nodes: 1,
            cpus_per_trial: None,
            time_limit_min: timeout_s.div_ceil(60).max(1),
            extra_args: Vec::new(),
            max_parallel: 4,
            shared_dir: None,
            pending_timeout_s: 600,
            poll_s: 1.0,
        }
    }
}
