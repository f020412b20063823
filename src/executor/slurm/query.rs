//! Talking to Slurm: `sbatch`, `squeue`, `sacct`, `scancel`, and what a job's state means
//! for a trial (the table in docs/cluster.md).

use std::collections::HashMap;
use std::process::Command;

use crate::results::record::Status;

/// A job as `squeue` (or `sacct`) shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobState {
    /// e.g. PENDING, RUNNING, COMPLETED, TIMEOUT.
    pub state: String,
    /// The node list; empty while pending.
    pub nodes: String,
    /// Why a pending job waits, e.g. `Resources`, `ReqNodeNotAvail`.
    pub reason: String,
}

impl JobState {
    /// Still queued or running.
    pub fn is_live(&self) -> bool {
        matches!(
            self.state.as_str(),
            "PENDING"
                | "RUNNING"
                | "CONFIGURING"
                | "COMPLETING"
                | "SUSPENDED"
                | "REQUEUED"
                | "REQUEUE_FED"
                | "REQUEUE_HOLD"
                | "RESIZING"
                | "SIGNALING"
                | "STAGE_OUT"
                | "STOPPED"
                | "RESV_DEL_HOLD"
        )
    }

    /// A pending job that no node can take now for a reason waiting will not cure on its
    /// own soon: drained or down nodes, a down partition, a request beyond its limits.
    pub fn is_stuck(&self) -> bool {
        // squeue writes some reasons with spaces, sacct and scontrol with underscores.
        let reason = self.reason.replace(' ', "_");
        self.state == "PENDING"
            && [
                "ReqNodeNotAvail",
                "NodeDown",
                "PartitionDown",
                "PartitionInactive",
                "PartitionNodeLimit",
                "PartitionTimeLimit",
                "BadConstraints",
                "InvalidAccount",
                "InvalidQOS",
                "Nodes_required_for_job_are_DOWN",
            ]
            .iter()
            .any(|r| reason.starts_with(r))
    }
}

/// Runs a Slurm client; its stdout, or a one-line reason it failed.
pub fn slurm_cmd(program: &str, args: &[String]) -> Result<String, String> {
    let out = Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {program}: {e}"))?;
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    let err = String::from_utf8_lossy(&out.stderr);
    let err = err.trim();
    Err(if err.is_empty() {
        format!("{program} failed ({})", out.status)
    } else {
        format!("{program}: {}", err.lines().collect::<Vec<_>>().join(" | "))
    })
}

/// Submits a batch script; the job id.
pub fn sbatch(args: &[String]) -> Result<String, String> {
    let out = slurm_cmd("sbatch", args)?;
    // `--parsable`: "jobid" or "jobid;cluster".
    let id = out
        .trim()
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_string();
    if id.is_empty() || !id.chars().all(|c| c.is_ascii_digit() || c == '_') {
        return Err(format!(
            "sbatch answered '{}' instead of a job id",
            out.trim()
        ));
    }
    Ok(id)
}

/// States of `ids` that slurmctld still knows (`squeue --states=all` shows finished jobs
/// until they age out). Err when squeue itself did not answer.
pub fn squeue(ids: &[String]) -> Result<HashMap<String, JobState>, String> {
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    let args = vec![
        "--noheader".to_string(),
        "--states=all".into(),
        format!("--jobs={}", ids.join(",")),
        "--format=%i|%T|%N|%r".into(),
    ];
    match slurm_cmd("squeue", &args) {
        Ok(out) => Ok(parse_rows(&out)),
        // Every id has aged out of slurmctld's memory: none known, not a failure.
        Err(e) if e.contains("Invalid job id") => Ok(HashMap::new()),
        Err(e) => Err(e),
    }
}

/// The id of a job named `name` that is still queued or running, if Slurm has one. A
/// sweep killed between `sbatch`'s answer and the journal's line leaves such a job
/// behind; the resumed sweep follows it instead of submitting the run twice.
pub fn live_job_named(name: &str) -> Option<String> {
    let args = [
        "--noheader".to_string(),
        "--states=PENDING,RUNNING,CONFIGURING,COMPLETING".into(),
        format!("--name={name}"),
        "--format=%i".into(),
    ];
    let out = slurm_cmd("squeue", &args).ok()?;
    out.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(String::from)
}

/// A finished job's state from the accounting database, when the cluster keeps one.
pub fn sacct(id: &str) -> Option<JobState> {
    let args = [
        "--noheader",
        "--parsable2",
        "--allocations",
        "--format=JobID,State,NodeList,Reason",
        "-j",
        id,
    ]
    .map(String::from);
    let out = slurm_cmd("sacct", &args).ok()?;
    parse_rows(&out).remove(id)
}

/// Cancels jobs; what scancel said when it failed.
pub fn scancel(ids: &[String]) -> Result<(), String> {
    if ids.is_empty() {
        return Ok(());
    }
    slurm_cmd("scancel", ids).map(|_| ())
}

/// `id|STATE|nodes|reason` rows. sacct writes "CANCELLED by 0": the first word is the state.
fn parse_rows(out: &str) -> HashMap<String, JobState> {
    out.lines()
        .filter_map(|l| {
            let mut f = l.trim().split('|');
            let id = f.next()?.trim().to_string();
            let state = f.next()?.split_whitespace().next()?.to_string();
            Some((
                id,
                JobState {
                    state,
                    nodes: f.next().unwrap_or("").trim().to_string(),
                    reason: f.next().unwrap_or("").trim().to_string(),
                },
            ))
        })
        .collect()
}

/// The trial status of a job that ended in `state` and left no result line, and why.
pub fn ended_without_result(job: &str, st: &JobState, time_limit_min: u64) -> (Status, String) {
    let on = if st.nodes.is_empty() || st.nodes == "(null)" {
        String::new()
    } else {
        format!(" on {}", st.nodes)
    };
    match st.state.as_str() {
        "TIMEOUT" | "DEADLINE" => (
            Status::Timeout,
            format!("Slurm ended job {job}{on} at its time limit of {time_limit_min} min (slurm.time_limit_min) ({})", st.state),
        ),
        "OUT_OF_MEMORY" => (
            Status::Oom,
            format!("Slurm job {job}{on} ran out of memory (OUT_OF_MEMORY)"),
        ),
        "NODE_FAIL" | "BOOT_FAIL" => (
            Status::Crashed,
            format!("the node of Slurm job {job}{on} failed ({})", st.state),
        ),
        "CANCELLED" => (
            Status::Failed,
            format!("Slurm job {job}{on} was cancelled outside this sweep (CANCELLED)"),
        ),
        "PREEMPTED" => (
            Status::Failed,
            format!("Slurm job {job}{on} was preempted (PREEMPTED)"),
        ),
        "FAILED" => (
            Status::Crashed,
            format!("Slurm job {job}{on} failed without a result (FAILED)"),
        ),
        "COMPLETED" => (
            Status::Crashed,
            format!("Slurm job {job}{on} completed without a result line (COMPLETED)"),
        ),
        other => (
            Status::Failed,
            format!("Slurm job {job}{on} ended as {other} without a result"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(state: &str, reason: &str) -> JobState {
        JobState {
            state: state.into(),
            nodes: "n1".into(),
            reason: reason.into(),
        }
    }

    #[test]
    fn rows_parse_with_sacct_suffixes() {
        let m = parse_rows("12|RUNNING|n1|None\n13|CANCELLED by 0|n2|\n");
        assert_eq!(m["12"], st("RUNNING", "None"));
        assert_eq!(m["13"].state, "CANCELLED");
    }

    #[test]
    fn states_map_onto_trial_statuses() {
        let s = |x| ended_without_result("7", &st(x, ""), 1).0;
        assert_eq!(s("TIMEOUT"), Status::Timeout);
        assert_eq!(s("OUT_OF_MEMORY"), Status::Oom);
        assert_eq!(s("NODE_FAIL"), Status::Crashed);
        assert_eq!(s("CANCELLED"), Status::Failed);
        assert_eq!(s("FAILED"), Status::Crashed);
        assert!(st("PENDING", "ReqNodeNotAvail, UnavailableNodes:n1").is_stuck());
        assert!(!st("PENDING", "Resources").is_stuck());
        assert!(st(
            "PENDING",
            "Nodes required for job are DOWN, DRAINED or reserved for jobs in higher priority partitions"
        )
        .is_stuck());
        assert!(st("COMPLETING", "").is_live());
        assert!(!st("COMPLETED", "").is_live());
    }
}
