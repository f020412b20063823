//! Sweeps on a real Slurm cluster (issue #18): a one-node cluster on this machine from
//! Debian's packages, started by `scripts/slurm-local.sh` (as `.ci/run` does). Without
//! Slurm the tests print why and pass; under `TUNE_REQUIRE_SLURM=1` they fail instead.
//!
//! Every sweep gets a name of its own, so the jobs it submitted can be told apart in
//! `squeue --states=all` (which remembers finished jobs for an hour here) from those of
//! earlier runs. The drained-node sweep drains the one node, so it runs alone, before any
//! other test submits a job (`drained_first`); the other tests then share the cluster.
//! The test that waits for Slurm's own one-minute limit is named to start first, so the
//! others run beside its minute instead of after it (this binary took 101 s when the
//! drained test waited for that minute to end, then ran alone).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;

fn tune() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tune"))
}

fn show(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn answers() -> bool {
    Command::new("squeue")
        .args(["--noheader", "--states=all"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Starts the local cluster when it is not up (idempotent); false, with the reason
/// printed, when there is no Slurm here.
///
/// The start runs once, while every other test waits: slurmctld answers before the start
/// script has resumed the node, so a second test seeing it answer could drain the node
/// in that gap and have the script's resume undo the drain (the drained-node sweep then
/// ran both jobs; seen when the tests started the cluster themselves).
fn cluster(test: &str) -> bool {
    static STARTED: OnceLock<()> = OnceLock::new();
    STARTED.get_or_init(|| {
        if answers() {
            return;
        }
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/slurm-local.sh");
        let out = Command::new(&script).arg("start").output();
        if let Ok(o) = &out {
            if !o.status.success() {
                eprintln!("{}", show(o));
            }
        }
    });
    if answers() {
        drained_first();
        return true;
    }
    let why = format!("{test}: skipped: Slurm does not answer (squeue failed; run scripts/slurm-local.sh start as root after apt-get install slurm-wlm munge)");
    if std::env::var("TUNE_REQUIRE_SLURM").is_ok_and(|v| v == "1") {
        panic!("{why}, and TUNE_REQUIRE_SLURM=1");
    }
    eprintln!("{why}");
    false
}

/// A unique sweep name: job names start with `tune-<name>-`.
fn unique(stem: &str) -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    format!("{stem}-{}-{t}", std::process::id())
}

fn write_spec(dir: &Path, name: &str, knobs: &str, search: &str, slurm: &str) -> PathBuf {
    let p = dir.join("spec.toml");
    std::fs::write(
        &p,
        format!(
            "name = \"{name}\"\n[workload]\nmodel = \"mlp\"\ndataset = \"synthetic\"\nsteps = 6\nwarmup = 1\ndevice = \"cpu\"\nthreads = 1\n\
             [knobs]\n{knobs}\n[search]\nstrategy = \"grid\"\nexecutor = \"slurm\"\n{search}\n[slurm]\npoll_s = 0.2\n{slurm}\n"
        ),
    )
    .unwrap();
    p
}

fn journal(out: &Path) -> Vec<Value> {
    std::fs::read_to_string(out.join("journal.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn lines_of(out: &Path, kind: &str) -> Vec<Value> {
    journal(out)
        .into_iter()
        .filter(|v| v["type"] == kind)
        .collect()
}

/// Job id -> (state, name) of every job slurmctld remembers whose name starts with
/// `tune-<sweep>-`.
fn jobs_named(sweep: &str) -> BTreeMap<String, (String, String)> {
    let o = Command::new("squeue")
        .args(["--noheader", "--states=all", "--format=%i|%T|%j"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.trim().split('|').collect();
            (f.len() == 3 && f[2].starts_with(&format!("tune-{sweep}-")))
                .then(|| (f[0].to_string(), (f[1].to_string(), f[2].to_string())))
        })
        .collect()
}

fn trial<'a>(rep: &'a Value, label: &str) -> &'a Value {
    rep["trials"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["label"] == label)
        .unwrap_or_else(|| panic!("no trial '{label}' in {rep}"))
}

/// `tune sweep SPEC --out OUT`, with a planted trial fault when given.
fn sweep(spec: &Path, out: &Path, fault: Option<&str>) -> Command {
    let mut c = tune();
    c.arg("sweep").arg(spec).arg("--out").arg(out);
    if let Some(f) = fault {
        c.env("TUNE_TRIAL_FAULT", f);
    }
    c
}

fn report(out: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap()
}

/// Waits (a minute at most) until the sweep writing to `out` has journaled `n` submissions.
fn wait_submitted(out: &Path, n: usize) {
    let until = Instant::now() + Duration::from_secs(60);
    while lines_of(out, "submitted").len() < n {
        assert!(Instant::now() < until, "no submissions: {:?}", journal(out));
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Both trials of a `batch_size = [16, 32]` sweep ended `failed`, each error naming all
/// of `words`.
fn both_failed(rep: &Value, words: &[&str]) {
    for label in ["baseline", "batch_size=32"] {
        let t = trial(rep, label);
        assert_eq!(t["status"], "failed", "{t}");
        let e = t["error"].as_str().unwrap();
        assert!(words.iter().all(|w| e.contains(w)), "{e}");
    }
}

#[test]
fn a_sweep_runs_on_the_cluster_and_is_reported() {
    if !cluster("a_sweep_runs_on_the_cluster_and_is_reported") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let name = unique("e2e");
    let spec = write_spec(
        dir.path(),
        &name,
        "batch_size = [16, 32]",
        "repeats = 2",
        "max_parallel = 2",
    );
    let out = dir.path().join("out");
    let o = sweep(&spec, &out, None).output().unwrap();
    assert!(o.status.success(), "{}", show(&o));
    // Every run was a job of its own, each journaled once, each known to Slurm as done.
    let submitted = lines_of(&out, "submitted");
    assert_eq!(submitted.len(), 4, "{submitted:?}");
    let ids: BTreeSet<String> = submitted
        .iter()
        .map(|s| s["job_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids.len(), 4);
    let jobs = jobs_named(&name);
    assert_eq!(
        jobs.keys().cloned().collect::<BTreeSet<_>>(),
        ids,
        "{jobs:?}"
    );
    assert!(jobs.values().all(|(s, _)| s == "COMPLETED"), "{jobs:?}");
    // The report has both trials, measured, with the node of every repeat.
    let rep = report(&out);
    for label in ["baseline", "batch_size=32"] {
        let t = trial(&rep, label);
        assert_eq!(t["status"], "ok", "{t}");
        let nodes = t["nodes"]
            .as_array()
            .unwrap_or_else(|| panic!("no nodes in {t}"));
        assert_eq!(nodes.len(), 2, "{t}");
        for n in nodes {
            assert!(ids.contains(n["job_id"].as_str().unwrap()), "{n}");
            assert!(!n["node"].as_str().unwrap().is_empty(), "{n}");
            assert!(
                !n["fingerprint"]["cpu_model"].as_str().unwrap().is_empty(),
                "{n}"
            );
        }
    }
    let md = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert!(md.contains("Nodes"), "{md}");
    // The report rebuilds from the journal alone, submissions and all.
    let o = tune().arg("report").arg(&out).output().unwrap();
    assert!(o.status.success(), "{}", show(&o));
}

#[test]
fn the_cluster_gets_the_runs_pass_by_pass_with_the_baseline_again() {
    if !cluster("the_cluster_gets_the_runs_pass_by_pass_with_the_baseline_again") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let name = unique("passes");
    let spec = write_spec(
        dir.path(),
        &name,
        "batch_size = [16, 32, 8, 64, 24]",
        "repeats = 2\nconfirm_repeats = 2",
        "max_parallel = 2",
    );
    let out = dir.path().join("out");
    let o = sweep(&spec, &out, None).output().unwrap();
    assert!(o.status.success(), "{}", show(&o));
    // Five plan trials and the baseline once more after the third other one, each twice:
    // every first run is submitted before any second (before, a trial's two runs went
    // to the queue side by side and the baseline ran once, first).
    let submitted = lines_of(&out, "submitted");
    assert_eq!(submitted.len(), 12, "{submitted:?}");
    let passes: Vec<u64> = submitted
        .iter()
        .map(|s| s["repeat"].as_u64().unwrap())
        .collect();
    assert_eq!(passes, [0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1]);
    let ids: Vec<&str> = submitted
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids[..6], ids[6..]);
    assert!(ids[4].starts_with("baseline-again:"), "{ids:?}");
    // The report measures the drift across the baseline's two runs of the plan.
    let rep = report(&out);
    let runs = rep["baseline_runs"]
        .as_array()
        .unwrap_or_else(|| panic!("{rep}"));
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0]["status"], "ok", "{runs:?}");
    assert!(rep["drift"].is_object(), "{rep}");
}

#[test]
fn a_ddp_trial_runs_one_rank_per_srun_task() {
    if !cluster("a_ddp_trial_runs_one_rank_per_srun_task") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let name = unique("ddp");
    let spec = write_spec(
        dir.path(),
        &name,
        "parallel = [\"ddp\"]\ndevices = [2]",
        "",
        "",
    );
    let out = dir.path().join("out");
    let o = sweep(&spec, &out, None).output().unwrap();
    assert!(o.status.success(), "{}", show(&o));
    let rep = report(&out);
    let t = trial(&rep, "baseline");
    assert_eq!(t["status"], "ok", "{t}");
    let r = &t["repeats"][0];
    // Each srun task was one rank: rank 1 trained one device, not a job of its own.
    let rank1 = std::fs::read_dir(out.join("slurm"))
        .unwrap()
        .flatten()
        .find(|e| e.file_name().to_string_lossy().ends_with(".rank1.out"))
        .expect("rank 1's output");
    let text = std::fs::read_to_string(rank1.path()).unwrap();
    let ok: Value = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find_map(|v| v.get("ok").cloned())
        .unwrap_or_else(|| panic!("no summary from rank 1: {text}"));
    assert_eq!(ok["devices"].as_array().map(Vec::len), Some(1), "{ok}");
    // Rank 0's losses are the job's: the same bits as one process with two devices.
    let steps = r["steps"].as_u64().unwrap().to_string();
    let warmup = r["warmup"].as_u64().unwrap().to_string();
    let one = tune()
        .args([
            "train",
            "--model",
            "mlp",
            "--dataset",
            "synthetic",
            "--device",
            "cpu",
        ])
        .args([
            "--threads",
            "1",
            "--parallel",
            "ddp",
            "--devices",
            "2",
            "--json",
        ])
        .args(["--steps", &steps, "--warmup", &warmup])
        .output()
        .unwrap();
    assert!(one.status.success(), "{}", show(&one));
    let one: Value = serde_json::from_slice(&one.stdout).unwrap();
    assert_eq!(r["losses"], one["losses"], "srun ranks vs one process");
}

#[test]
fn a_killed_sweep_resumes_its_jobs_without_submitting_twice() {
    if !cluster("a_killed_sweep_resumes_its_jobs_without_submitting_twice") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let name = unique("resume");
    let spec = write_spec(
        dir.path(),
        &name,
        "batch_size = [16, 24, 32]",
        "repeats = 2",
        "max_parallel = 2",
    );
    let out = dir.path().join("out");
    // Each run sleeps a second first, so jobs are still queued and running at the kill.
    let mut child = sweep(&spec, &out, Some("slow"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_submitted(&out, 3);
    child.kill().unwrap();
    child.wait().unwrap();
    let before = lines_of(&out, "submitted");
    let live: Vec<String> = jobs_named(&name)
        .into_iter()
        .filter(|(_, (s, _))| s == "PENDING" || s == "RUNNING")
        .map(|(id, _)| id)
        .collect();
    assert!(
        !live.is_empty(),
        "the kill came too late to test re-attaching: {before:?}"
    );

    let o = sweep(&spec, &out, Some("slow"))
        .arg("--resume")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", show(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("following"), "{err}");
    // Every run submitted exactly once, over both sweeps; Slurm knows no other job of it.
    let submitted = lines_of(&out, "submitted");
    let mut runs = BTreeSet::new();
    let mut ids = BTreeSet::new();
    for s in &submitted {
        assert!(
            runs.insert((s["id"].to_string(), s["repeat"].to_string())),
            "run submitted twice: {submitted:?}"
        );
        ids.insert(s["job_id"].as_str().unwrap().to_string());
    }
    assert_eq!(runs.len(), 6, "{submitted:?}");
    let jobs = jobs_named(&name);
    assert_eq!(
        jobs.keys().cloned().collect::<BTreeSet<_>>(),
        ids,
        "{jobs:?}"
    );
    for id in &live {
        assert!(
            ids.contains(id),
            "job {id} was live at the kill and is not the journal's"
        );
    }
    // Nothing lost: three trials, two measured repeats each.
    let trials = lines_of(&out, "trial");
    assert_eq!(trials.len(), 3, "{trials:?}");
    for t in &trials {
        assert_eq!(t["status"], "ok", "{t}");
        assert_eq!(t["repeats"].as_array().unwrap().len(), 2, "{t}");
    }
}

#[test]
fn ctrl_c_cancels_the_jobs_it_submitted_and_says_so() {
    if !cluster("ctrl_c_cancels_the_jobs_it_submitted_and_says_so") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let name = unique("sigint");
    let spec = write_spec(
        dir.path(),
        &name,
        "batch_size = [16, 32]",
        "",
        "max_parallel = 2",
    );
    let out = dir.path().join("out");
    let child = sweep(&spec, &out, Some("hang"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_submitted(&out, 2);
    // `tune dash` follows a Slurm sweep through the same live file as a local one.
    let live: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("live.json")).unwrap()).unwrap();
    assert!(
        ["batch_size=32", "baseline"].contains(&live["label"].as_str().unwrap_or("")),
        "{live}"
    );
    // SAFETY: kill(2) on our own child, not yet reaped.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let o = child.wait_with_output().unwrap();
    assert!(!o.status.success(), "{}", show(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("cancelled 2 Slurm job(s)"), "{}", show(&o));
    assert!(
        !out.join("live.json").exists(),
        "live.json left after the sweep ended"
    );
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let jobs = jobs_named(&name);
        if jobs.len() == 2 && jobs.values().all(|(s, _)| s == "CANCELLED") {
            break;
        }
        assert!(Instant::now() < until, "jobs not cancelled: {jobs:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_bad_partition_and_the_trial_limit_each_get_a_clear_status() {
    if !cluster("a_bad_partition_and_the_trial_limit_each_get_a_clear_status") {
        return;
    }
    // A partition that does not exist: sbatch refuses every job, the sweep still ends
    // with a report saying so.
    let dir = tempfile::tempdir().unwrap();
    let spec = write_spec(
        dir.path(),
        &unique("nopart"),
        "batch_size = [16, 32]",
        "",
        "partition = \"no-such-partition\"",
    );
    let out = dir.path().join("out");
    let o = sweep(&spec, &out, None).output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    let rep = report(&out);
    both_failed(&rep, &["Slurm refused the job", "partition"]);
    // The spec's per-trial limit (search.timeout_s) ends a hanging trial on the node; the
    // other trial is measured.
    let dir = tempfile::tempdir().unwrap();
    let spec = write_spec(
        dir.path(),
        &unique("limit"),
        "batch_size = [16, 32]",
        "timeout_s = 3",
        "",
    );
    let out = dir.path().join("out");
    let o = sweep(&spec, &out, Some("hang@batch_size=32"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", show(&o));
    let rep = report(&out);
    assert_eq!(trial(&rep, "baseline")["status"], "ok");
    let t = trial(&rep, "batch_size=32");
    assert_eq!(t["status"], "timeout", "{t}");
    assert!(
        t["error"]
            .as_str()
            .unwrap()
            .contains("per-trial limit of 3 s"),
        "{t}"
    );
}

/// Slurm's own time limit (a minute, its smallest): the job ends as TIMEOUT, the trial
/// as `timeout`, and the sweep goes on. The one test that takes a minute: "a_1" sorts it
/// before every other test of this file, and the test harness starts tests in name order,
/// so the others run beside that minute.
#[test]
fn a_1_minute_slurm_limit_ends_the_job_as_a_timeout() {
    if !cluster("a_1_minute_slurm_limit_ends_the_job_as_a_timeout") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let name = unique("slurmtime");
    let spec = write_spec(
        dir.path(),
        &name,
        "batch_size = [16, 32]",
        "timeout_s = 3600",
        "time_limit_min = 1",
    );
    let out = dir.path().join("out");
    let o = sweep(&spec, &out, Some("hang@batch_size=32"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", show(&o));
    let rep = report(&out);
    assert_eq!(trial(&rep, "baseline")["status"], "ok");
    let t = trial(&rep, "batch_size=32");
    assert_eq!(t["status"], "timeout", "{t}");
    let e = t["error"].as_str().unwrap();
    assert!(
        e.contains("time limit of 1 min") && e.contains("TIMEOUT"),
        "{e}"
    );
    assert!(jobs_named(&name).values().any(|(s, _)| s == "TIMEOUT"));
}

/// Puts the node back however the sweep ends.
struct Undrain(String);

impl Drop for Undrain {
    fn drop(&mut self) {
        let _ = Command::new("scontrol")
            .args(["update", &format!("nodename={}", self.0), "state=resume"])
            .status();
    }
}

/// What the drained-node sweep did: its output and report, or why it could not run.
type Drained = Result<(Output, Value), String>;

/// The drained-node sweep, run once per test binary by the first test that finds the
/// cluster, while every other test waits here: a drained node would hold their jobs back.
fn drained_first() -> &'static Drained {
    static DRAINED: OnceLock<Drained> = OnceLock::new();
    DRAINED.get_or_init(run_on_a_drained_node)
}

fn run_on_a_drained_node() -> Drained {
    let o = Command::new("sinfo")
        .args(["--noheader", "-N", "-o", "%N"])
        .output()
        .map_err(|e| format!("sinfo: {e}"))?;
    let node = String::from_utf8_lossy(&o.stdout)
        .lines()
        .next()
        .unwrap_or("")
        .trim()
        .to_string();
    if node.is_empty() {
        return Err(format!("no node in sinfo: {}", show(&o)));
    }
    let s = Command::new("scontrol")
        .args([
            "update",
            &format!("nodename={node}"),
            "state=drain",
            "reason=tune-test",
        ])
        .status()
        .map_err(|e| format!("scontrol: {e}"))?;
    if !s.success() {
        return Err(format!("scontrol could not drain {node}: {s}"));
    }
    let _undrain = Undrain(node);
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let spec = write_spec(
        dir.path(),
        &unique("drained"),
        "batch_size = [16, 32]",
        "",
        "pending_timeout_s = 3",
    );
    let out = dir.path().join("out");
    let o = sweep(&spec, &out, None)
        .output()
        .map_err(|e| e.to_string())?;
    let rep = std::fs::read_to_string(out.join("report.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(Value::Null);
    Ok((o, rep))
}

#[test]
fn a_trial_stuck_on_a_drained_node_fails_clearly_and_the_sweep_ends() {
    if !cluster("a_trial_stuck_on_a_drained_node_fails_clearly_and_the_sweep_ends") {
        return;
    }
    let (o, rep) = match drained_first() {
        Ok(d) => d,
        Err(e) => panic!("the drained-node sweep did not run: {e}"),
    };
    assert_eq!(o.status.code(), Some(1), "{}", show(o));
    both_failed(rep, &["never started"]);
    for label in ["baseline", "batch_size=32"] {
        let e = trial(rep, label)["error"].as_str().unwrap();
        assert!(
            e.contains("ReqNodeNotAvail") || e.contains("DRAINED"),
            "{e}"
        );
    }
}

/// The sweep's time budget ends with a job still running (a hung trial): the job is
/// cancelled then, not left to Slurm's limit or `timeout_s`; the run counts as not run,
/// with no status of its own, and the report names it (#31).
#[test]
fn a_job_running_when_the_budget_ends_is_cancelled_and_counted_as_not_run() {
    if !cluster("a_job_running_when_the_budget_ends_is_cancelled_and_counted_as_not_run") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let name = unique("slurmbudget");
    let spec = write_spec(
        dir.path(),
        &name,
        "batch_size = [16, 32]",
        "repeats = 1\ntimeout_s = 3600\nbudget_s = 60",
        "",
    );
    let out = dir.path().join("out");
    let began = Instant::now();
    let o = sweep(&spec, &out, Some("hang@batch_size=32"))
        .output()
        .unwrap();
    let took = began.elapsed().as_secs_f64();
    assert!(o.status.success(), "{}", show(&o));
    assert!(took < 100.0, "the sweep took {took:.0} s: {}", show(&o));
    let rep = report(&out);
    assert_eq!(trial(&rep, "baseline")["status"], "ok");
    let trials = rep["trials"].as_array().unwrap();
    assert!(
        trials.iter().all(|t| t["status"] == "ok"),
        "a cancelled run is no failure of its trial: {trials:#?}"
    );
    let stopped = rep["budget"]["stopped"].as_str().unwrap_or_default();
    assert!(stopped.contains("batch_size=32"), "{}", rep["budget"]);
    // Cancelled, through COMPLETING while slurmd ends the job's processes.
    let until = Instant::now() + Duration::from_secs(30);
    let mut jobs = jobs_named(&name);
    while jobs.values().any(|(s, _)| s == "COMPLETING") && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(200));
        jobs = jobs_named(&name);
    }
    assert!(
        jobs.values().any(|(s, _)| s.starts_with("CANCELLED")),
        "{jobs:?}"
    );
    assert!(
        !jobs
            .values()
            .any(|(s, _)| matches!(s.as_str(), "RUNNING" | "PENDING" | "COMPLETING")),
        "{jobs:?}"
    );
}
