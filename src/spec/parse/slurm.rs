//! `[slurm]` and `[search] executor`: checked when the spec is read, like every other key.

use toml::de::{DeTable, DeValue};

use super::{Cx, Val};
use crate::error::{shown, Result};
use crate::limits::{self, Bound};
use crate::spec::cluster::{ExecutorKind, SlurmSpec};
use crate::spec::Workload;

const SLURM_KEYS: &[&str] = &[
    "partition",
    "account",
    "gres",
    "gpus_per_trial",
    "nodes",
    "cpus_per_trial",
    "time_limit_min",
    "extra_args",
    "max_parallel",
    "shared_dir",
    "pending_timeout_s",
    "poll_s",
];

/// Nodes per trial: Slurm accepts far more, a single trial spanning more than this is
/// not something a tuning sweep does.
const NODES: Bound = Bound {
    min: 1,
    max: 1024,
    why: "nodes of one trial",
};
const MAX_PARALLEL: Bound = Bound {
    min: 1,
    max: 10_000,
    why: "jobs of one sweep in the queue at once",
};
const GPUS: Bound = Bound {
    min: 1,
    max: limits::MAX_DEVICES as u64,
    why: "GPUs of one node",
};
const CPUS: Bound = Bound {
    min: 1,
    max: 4096,
    why: "CPUs of one node",
};
/// Slurm's time limits are whole minutes; one week like `search.timeout_s`.
const TIME_MIN: Bound = Bound {
    min: 1,
    max: 7 * 24 * 60,
    why: "one week per trial, in minutes",
};
const PENDING_S: Bound = Bound {
    min: 1,
    max: 7 * 24 * 3600,
    why: "one week",
};

impl Cx<'_> {
    pub(super) fn executor(&self, t: &DeTable<'_>) -> Result<ExecutorKind> {
        let Some(v) = t.get("executor") else {
            return Ok(ExecutorKind::Local);
        };
        let s = self.choice(v, "search.executor", ExecutorKind::ALLOWED)?;
        Ok(ExecutorKind::parse(&s).unwrap_or_default())
    }

    /// Refuses an executor that cannot run this workload, at the key that chose it.
    pub(super) fn check_executor(
        &self,
        doc: &DeTable<'_>,
        kind: ExecutorKind,
        workload: &Workload,
    ) -> Result<()> {
        if kind != ExecutorKind::Slurm || matches!(workload, Workload::Engine(_)) {
            return Ok(());
        }
        let span = doc
            .get("search")
            .and_then(|s| s.get_ref().as_table())
            .and_then(|t| t.get("executor"))
            .map_or(0..0, |v| v.span());
        Err(self.err(
            span,
            "search.executor = \"slurm\" runs built-in engine workloads (model = ...) only; command and python workloads run with executor = \"local\"",
        ))
    }

    /// `[slurm]`, or its defaults when the table is absent.
    pub(super) fn slurm(&self, doc: &DeTable<'_>, timeout_s: u64) -> Result<SlurmSpec> {
        let mut s = SlurmSpec::with_timeout(timeout_s);
        let Some(v) = doc.get("slurm") else {
            return Ok(s);
        };
        let t = self.table(v, "slurm")?;
        self.check_keys(t, SLURM_KEYS, "[slurm]")?;
        let word = |name: &str| -> Result<Option<String>> {
            t.get(name)
                .map(|v| self.word(v, &format!("slurm.{name}")))
                .transpose()
        };
        s.partition = word("partition")?;
        s.account = word("account")?;
        s.gres = word("gres")?;
        let count = |name: &str, bound: &Bound| -> Result<Option<usize>> {
            t.get(name)
                .map(|v| self.count(v, &format!("slurm.{name}"), bound))
                .transpose()
        };
        s.gpus_per_trial = count("gpus_per_trial", &GPUS)?;
        s.cpus_per_trial = count("cpus_per_trial", &CPUS)?;
        s.nodes = count("nodes", &NODES)?.unwrap_or(s.nodes);
        s.max_parallel = count("max_parallel", &MAX_PARALLEL)?.unwrap_or(s.max_parallel);
        if let Some(m) = count("time_limit_min", &TIME_MIN)? {
            s.time_limit_min = m as u64;
        }
        if let Some(p) = count("pending_timeout_s", &PENDING_S)? {
            s.pending_timeout_s = p as u64;
        }
        if let Some(v) = t.get("poll_s") {
            s.poll_s = self.poll(v)?;
        }
        if let Some(v) = t.get("extra_args") {
            let DeValue::Array(a) = v.get_ref() else {
                return Err(self.wrong_type(v, "slurm.extra_args", "an array of strings"));
            };
            for item in a.iter() {
                s.extra_args.push(self.word(item, "slurm.extra_args item")?);
            }
        }
        if let Some(v) = t.get("shared_dir") {
            s.shared_dir = Some(self.string(v, "slurm.shared_dir")?.into());
        }
        Ok(s)
    }

    /// A single-line string without spaces: it becomes one `sbatch` argument.
    fn word(&self, v: &Val<'_>, what: &str) -> Result<String> {
        let s = self.string(v, what)?;
        if s.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(self.err(
                v.span(),
                format!(
                    "{what} '{}' contains whitespace: give one sbatch argument per string",
                    shown(&s)
                ),
            ));
        }
        Ok(s)
    }

    fn poll(&self, v: &Val<'_>) -> Result<f64> {
        let x = match v.get_ref() {
            DeValue::Float(f) => f.as_str().parse::<f64>().ok(),
            DeValue::Integer(i) => i.as_str().parse::<f64>().ok(),
            _ => return Err(self.wrong_type(v, "slurm.poll_s", "a number of seconds")),
        };
        match x {
            Some(x) if (0.05..=600.0).contains(&x) => Ok(x),
            _ => Err(self.err(
                v.span(),
                "slurm.poll_s: must be at least 0.05 and at most 600 seconds",
            )),
        }
    }
}
