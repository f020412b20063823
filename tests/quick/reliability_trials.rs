//! Trial execution under hostile workloads (issue #15): commands that leave background
//! processes holding their output, detach with setsid, print invalid UTF-8 or hundreds of
//! megabytes, allocate beyond the machine or the cap, and a sweep killed with SIGKILL.
//! Real `tune` binary, real `sh` commands, real signals; processes of a test are found
//! by a unique marker in their environment (/proc/PID/environ), which every descendant
//! inherits.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use tune::executor::trial::{run_trial, TrialEnv};
use tune::results::record::Status;
use tune::spec::Spec;

const MARKER_ENV: &str = "TUNE_RELIABILITY_MARKER";

fn marker(name: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    format!(
        "{name}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Live (non-zombie) processes whose environment holds `MARKER_ENV=marker`.
fn marked(marker: &str) -> Vec<u32> {
    let needle = format!("{MARKER_ENV}={marker}");
    let mut found = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return found;
    };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| s.rsplit_once(") ").map(|(_, r)| r.starts_with('Z')))
            .unwrap_or(true);
        if !zombie && env.split(|&b| b == 0).any(|v| v == needle.as_bytes()) {
            found.push(pid);
        }
    }
    found
}

/// Waits up to `limit` for every marked process to be gone; kills leftovers so a failing
/// test does not leave them behind, and returns what was still alive.
fn wait_none_left(marker: &str, limit: Duration) -> Vec<u32> {
    let until = Instant::now() + limit;
    loop {
        let left = marked(marker);
        if left.is_empty() {
            return left;
        }
        if Instant::now() >= until {
            for &p in &left {
                // SAFETY: kill(2) has no memory effects.
                unsafe {
                    libc::kill(p as libc::pid_t, libc::SIGKILL);
                }
            }
            return left;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn command_spec(dir: &Path, run: &str, search: &str) -> PathBuf {
    let text = format!(
        "name = \"rel\"\n[workload.command]\nrun = {run:?}\nmetric_regex = 'samples/s: ([0-9.]+)'\n\n[search]\n{search}\n"
    );
    let p = dir.join("spec.toml");
    std::fs::write(&p, text).unwrap();
    p
}

fn engine_spec(dir: &Path, batch: u64, search: &str) -> PathBuf {
    let text = format!(
        "name = \"rel\"\n[workload]\nmodel = \"mlp\"\ndataset = \"synthetic\"\nbatch_size = {batch}\n\
         steps = 4\nwarmup = 1\ndevice = \"cpu\"\nthreads = 1\n\n[search]\n{search}\n"
    );
    let p = dir.join("spec.toml");
    std::fs::write(&p, text).unwrap();
    p
}

fn sweep_cmd(spec: &Path, out: &Path, marker: &str) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tune"));
    c.arg("sweep")
        .arg(spec)
        .arg("--out")
        .arg(out)
        .arg("--json")
        .env_remove("TUNE_TRIAL_FAULT")
        .env_remove("TUNE_TRIAL_MEM_CAP_BYTES")
        .env("TUNE_SAMPLE_MS", "0")
        .env(MARKER_ENV, marker)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    c
}

/// Waits for a child up to `limit`; kills it past that. Returns whether it ended in time.
fn wait_child(child: &mut Child, limit: Duration) -> bool {
    let until = Instant::now() + limit;
    while Instant::now() < until {
        if let Ok(Some(_)) = child.try_wait() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    false
}

/// The only plan trial of a one-configuration sweep.
fn only_trial(out: &Path) -> Value {
    let text = std::fs::read_to_string(out.join("report.json")).unwrap();
    let r: Value = serde_json::from_str(&text).unwrap();
    r["trials"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| !t["id"].as_str().unwrap_or("").starts_with("confirm:"))
        .cloned()
        .unwrap_or_else(|| panic!("no trial in {r}"))
}

fn journal_trial(out: &Path) -> Value {
    std::fs::read_to_string(out.join("journal.jsonl"))
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["type"] == "trial")
        .unwrap()
}

/// Runs a sweep to the end (at most `limit`), returning its duration.
fn run_sweep(spec: &Path, out: &Path, marker: &str, limit: Duration) -> Duration {
    let t = Instant::now();
    let mut child = sweep_cmd(spec, out, marker).spawn().unwrap();
    let ended = wait_child(&mut child, limit);
    let left = wait_none_left(marker, Duration::from_secs(3));
    assert!(ended, "the sweep was still running after {limit:?}");
    assert!(left.is_empty(), "processes outlived the sweep: {left:?}");
    t.elapsed()
}

#[test]
fn background_holder_of_stdout_neither_hangs_the_sweep_nor_survives_it() {
    let dir = tempfile::tempdir().unwrap();
    let m = marker("holder");
    // `sleep` inherits stdout and keeps it open long after the command itself is done.
    let spec = command_spec(
        dir.path(),
        "sleep 1000 & echo 'samples/s: 5'",
        "timeout_s = 5",
    );
    let took = run_sweep(&spec, &dir.path().join("out"), &m, Duration::from_secs(15));
    assert!(took < Duration::from_secs(4), "took {took:?}");
    let t = only_trial(&dir.path().join("out"));
    assert_eq!(t["status"], "ok", "{t}");
    // The process tree's peak memory is recorded for a command trial, not 0.
    let peak = t["peak_total_bytes"].as_f64().unwrap_or(0.0);
    assert!(peak > 0.0, "{t}");
}

#[test]
fn nothing_recorded_ok_ran_past_its_limit() {
    let dir = tempfile::tempdir().unwrap();
    let m = marker("late");
    // The command's main process is done at once; a background writer prints a figure
    // 4 s later, past the 1 s limit. That figure must not count, and the trial must not
    // take 4 s and then be called ok.
    let spec = command_spec(
        dir.path(),
        "(sleep 4; echo 'samples/s: 9') & echo 'samples/s: 5'",
        "timeout_s = 1",
    );
    let out = dir.path().join("out");
    let took = run_sweep(&spec, &out, &m, Duration::from_secs(15));
    let rec = journal_trial(&out);
    let wall = rec["repeats"][0]["wall_s"].as_f64().unwrap_or(0.0);
    if rec["status"] == "ok" {
        assert!(wall <= 1.0, "ok after {wall} s with a 1 s limit: {rec}");
        assert_eq!(rec["repeats"][0]["step_times"], serde_json::json!([0.2]));
    } else {
        assert_eq!(rec["status"], "timeout", "{rec}");
    }
    assert!(took < Duration::from_secs(3), "took {took:?}");

    // A main process slower than the limit is a time-out.
    let m = marker("slow");
    let spec = command_spec(
        dir.path(),
        "sleep 1000 & sleep 3; echo 'samples/s: 5'",
        "timeout_s = 1",
    );
    let out = dir.path().join("out2");
    let took = run_sweep(&spec, &out, &m, Duration::from_secs(15));
    assert_eq!(journal_trial(&out)["status"], "timeout");
    assert!(took < Duration::from_secs(3), "took {took:?}");
}

/// Starts a sweep, waits until `ready` marked processes exist besides it, SIGKILLs it,
/// and checks that nothing of it is left.
fn sigkill_leaves_nothing(spec: &Path, out: &Path, m: &str, ready: usize, fault: Option<&str>) {
    let mut cmd = sweep_cmd(spec, out, m);
    if let Some(f) = fault {
        cmd.env("TUNE_TRIAL_FAULT", f);
    }
    let mut child = cmd.spawn().unwrap();
    let until = Instant::now() + Duration::from_secs(10);
    while marked(m).len() < ready + 1 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    // Let the last forks of the command happen.
    std::thread::sleep(Duration::from_millis(300));
    let before = marked(m);
    // SAFETY: kill(2) has no memory effects; the sweep is our child and not yet reaped.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGKILL);
    }
    let _ = child.wait();
    let left = wait_none_left(m, Duration::from_secs(5));
    assert!(before.len() > ready, "the trial never started: {before:?}");
    assert!(
        left.is_empty(),
        "alive after SIGKILL of the sweep: {left:?}"
    );
}

#[test]
fn sigkill_of_the_sweep_ends_an_engine_trial() {
    let dir = tempfile::tempdir().unwrap();
    let spec = engine_spec(dir.path(), 16, "timeout_s = 60");
    let m = marker("engine-kill");
    sigkill_leaves_nothing(&spec, &dir.path().join("out"), &m, 1, Some("hang"));
}

#[test]
fn sigkill_of_the_sweep_ends_a_commands_detached_descendants() {
    let dir = tempfile::tempdir().unwrap();
    // Two that left the command's process group (setsid, a double fork) and one that
    // stayed: sh and three sleeps are at least 4 processes besides the sweep.
    let spec = command_spec(
        dir.path(),
        "setsid sleep 1001 & (sleep 1002 &) ; sleep 1003 & wait",
        "timeout_s = 60",
    );
    let m = marker("cmd-kill");
    sigkill_leaves_nothing(&spec, &dir.path().join("out"), &m, 4, None);
}

/// Peak resident memory of `pid` (VmHWM) while it runs, read every 20 ms.
fn watch_peak(pid: u32, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let mut peak = 0;
        while !stop.load(Ordering::Relaxed) {
            let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
                break;
            };
            if let Some(kb) = s
                .lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<u64>().ok())
            {
                peak = peak.max(kb * 1024);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        peak
    })
}

#[test]
fn invalid_utf8_and_200_mb_of_output_keep_later_metrics_and_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    let m = marker("output");
    // Random bytes are invalid UTF-8 almost at once; a 20 MB line with no newline; the
    // figures before and after must all be read.
    let spec = command_spec(
        dir.path(),
        "echo 'samples/s: 4'; printf '\\377\\376 samples/s: 6\\n'; head -c 200000000 /dev/urandom; \
         echo; head -c 20000000 /dev/zero | tr '\\0' x; echo; echo 'samples/s: 8'",
        "timeout_s = 120",
    );
    let out = dir.path().join("out");
    let mut child = sweep_cmd(&spec, &out, &m).spawn().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let peak = watch_peak(child.id(), stop.clone());
    let ended = wait_child(&mut child, Duration::from_secs(60));
    stop.store(true, Ordering::Relaxed);
    let peak = peak.join().unwrap();
    assert!(ended, "the sweep did not finish");
    let rec = journal_trial(&out);
    assert_eq!(rec["status"], "ok", "{rec}");
    let times: Vec<f64> = rec["repeats"][0]["step_times"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_f64)
        .collect();
    for v in [4.0, 6.0, 8.0] {
        assert!(
            times.iter().any(|t| (t - 1.0 / v).abs() < 1e-12),
            "samples/s {v} lost: {times:?}"
        );
    }
    eprintln!(
        "sweep peak RSS with 220 MB of output: {:.1} MiB",
        peak as f64 / 1048576.0
    );
    assert!(peak > 0, "VmHWM was never read");
    assert!(peak < 64 << 20, "sweep peak RSS {peak} bytes");
    assert!(wait_none_left(&m, Duration::from_secs(3)).is_empty());
}

#[test]
fn allocation_failure_in_a_trial_is_oom_not_a_crash() {
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().unwrap();
    let m = marker("alloc");
    // The largest batch a spec accepts (65536 samples of the mlp: over 1 GB of
    // activations) in a sweep whose address space is capped at 1 GiB, as a small
    // machine or a container limit would: the trial's allocation fails for real.
    let spec = engine_spec(dir.path(), 65536, "timeout_s = 60");
    let out = dir.path().join("out");
    let mut cmd = sweep_cmd(&spec, &out, &m);
    // SAFETY: setrlimit is async-signal-safe and touches only the child being spawned.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: 1 << 30,
                rlim_max: 1 << 30,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap();
    assert!(
        wait_child(&mut child, Duration::from_secs(60)),
        "sweep hung"
    );
    assert!(wait_none_left(&m, Duration::from_secs(3)).is_empty());
    let rec = journal_trial(&out);
    assert_eq!(rec["status"], "oom", "{rec}");
    let err = rec["error"].as_str().unwrap_or("");
    assert!(err.contains("out of memory allocating"), "{err}");
}

#[test]
fn mem_cap_ends_a_command_tree_over_it_with_oom() {
    let dir = tempfile::tempdir().unwrap();
    let m = marker("memcap");
    // `tail -c N` of a pipe holds N bytes; it is a grandchild of the trial's shell.
    let spec = command_spec(
        dir.path(),
        "head -c 400000000 /dev/zero | tail -c 300000000 > /dev/null; echo 'samples/s: 5'",
        "timeout_s = 60\nmem_cap_mib = 64",
    );
    let out = dir.path().join("out");
    run_sweep(&spec, &out, &m, Duration::from_secs(30));
    let rec = journal_trial(&out);
    assert_eq!(rec["status"], "oom", "{rec}");
    assert!(
        rec["error"].as_str().unwrap_or("").contains("mem_cap_mib"),
        "{rec}"
    );
}

fn env_for(timeout: Duration, cancel: Option<Arc<AtomicBool>>) -> TrialEnv {
    TrialEnv {
        exe: PathBuf::from(env!("CARGO_BIN_EXE_tune")),
        timeout,
        mem_cap_bytes: None,
        live_file: None,
        cancel,
        cut_at: None,
    }
}

fn parse(run: &str) -> Spec {
    let text =
        format!("[workload.command]\nrun = {run:?}\nmetric_regex = 'samples/s: ([0-9.]+)'\n");
    Spec::parse(&text, "/tmp/x.toml").unwrap()
}

#[test]
fn a_limit_beyond_the_clock_means_no_limit_not_a_panic() {
    let spec = parse("echo 'samples/s: 10'; echo 'samples/s: 20'");
    for secs in [u64::MAX, u64::MAX / 2, 1 << 62] {
        let o = run_trial(
            &env_for(Duration::from_secs(secs), None),
            &spec,
            &spec.search.baseline,
            1,
        );
        assert_eq!(o.status, Status::Ok, "{:?}", o.error);
        let r = o.repeat.unwrap();
        assert_eq!(r.step_times, vec![0.1, 0.05]);
        assert_eq!(r.samples_per_s, 15.0);
    }
}

#[test]
fn cancel_kills_the_command_and_is_not_a_timeout() {
    let spec = parse("sleep 30; echo 'samples/s: 1'");
    let cancel = Arc::new(AtomicBool::new(false));
    let env = env_for(Duration::from_secs(60), Some(cancel.clone()));
    let t = Instant::now();
    let o = std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(300));
            cancel.store(true, Ordering::Relaxed);
        });
        run_trial(&env, &spec, &spec.search.baseline, 1)
    });
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    assert_ne!(o.status, Status::Timeout);
    assert_ne!(o.status, Status::Ok);
}

/// The sweep's budget ends while a run is under way (`Search::cut_at`, before the run's
/// own limit): the run's process tree is ended then, and its outcome is marked `cut`, not
/// a time-out of its configuration, for a command and for the built-in engine alike. A
/// budget that ends after the run's own limit leaves the time-out as it was (#31).
#[test]
fn the_budgets_end_stops_a_run_and_marks_it_cut_not_timed_out() {
    let m = marker("budgetcut");
    // The marker in the sleep's own environment: this test's process is shared.
    let mut spec = parse(&format!(
        "env {MARKER_ENV}={m} sleep 60; echo 'samples/s: 1'"
    ));
    let env = env_for(Duration::from_secs(60), None);
    spec.search.cut_at = Some(Instant::now() + Duration::from_millis(800));
    let t = Instant::now();
    let o = run_trial(&env, &spec, &spec.search.baseline, 1);
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    assert!(o.cut, "{:?}: {:?}", o.status, o.error);
    assert!(
        o.error.as_deref().unwrap_or("").contains("time budget"),
        "{:?}",
        o.error
    );
    assert!(wait_none_left(&m, Duration::from_secs(3)).is_empty());

    // What a cut run had read is said, not lost: a command that printed values before.
    let mut printing = parse(&format!(
        "env {MARKER_ENV}={m} sh -c 'for i in 1 2 3; do echo samples/s: 4; done; sleep 60'"
    ));
    printing.search.cut_at = Some(Instant::now() + Duration::from_millis(1500));
    let o = run_trial(&env, &printing, &printing.search.baseline, 1);
    assert!(o.cut, "{:?}: {:?}", o.status, o.error);
    assert_eq!(
        o.cut_measured(),
        ", with 3 metric values read (median 4.0000)",
        "{:?}",
        o.repeat
    );
    assert!(wait_none_left(&m, Duration::from_secs(3)).is_empty());

    // The built-in engine, far more steps than the budget allows.
    let mut engine = Spec::parse(
        "[workload]\nmodel = \"mlp\"\ndataset = \"synthetic\"\n[knobs]\nnum_workers = [0]\n",
        "/tmp/x.toml",
    )
    .unwrap();
    engine.search.cut_at = Some(Instant::now() + Duration::from_millis(800));
    let t = Instant::now();
    let o = run_trial(&env, &engine, &engine.search.baseline, 1_000_000);
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    assert!(o.cut && o.repeat.is_none(), "{:?}: {:?}", o.status, o.error);

    // Its own limit first: a time-out as before, not a cut.
    let short = env_for(Duration::from_millis(500), None);
    spec.search.cut_at = Some(Instant::now() + Duration::from_secs(30));
    let o = run_trial(&short, &spec, &spec.search.baseline, 1);
    assert!(!o.cut, "{:?}", o.error);
    assert_eq!(o.status, Status::Timeout, "{:?}", o.error);
    assert!(wait_none_left(&m, Duration::from_secs(3)).is_empty());
}
