//! `tune watch`, `tune train --sample-interval` and `tune probe` end to end: exit codes,
//! live output, reports, bad input, and the no-GPU path on machines without NVML.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn tune(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tune"))
        .args(args)
        .output()
        .expect("run tune")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A shell loop that keeps one core busy for 1-2 s (until the second after next),
/// whatever the machine's load, with a `sleep` child alive meanwhile, then exits with
/// `code`.
fn busy_sh(code: i32) -> String {
    format!(
        "sleep 30 & kid=$!; end=$(( $(date +%s) + 2 )); i=0; \
         while [ $(date +%s) -lt $end ]; do i=$((i+1)); done; \
         kill $kid; echo looped $i >&2; exit {code}"
    )
}

fn report(dir: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(dir.join("report.json")).expect("report.json written");
    serde_json::from_str(&text).expect("report.json is JSON")
}

fn device<'a>(r: &'a serde_json::Value, source: &str) -> Option<&'a serde_json::Value> {
    r["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["source"] == source)
}

#[test]
fn watch_returns_the_exit_code_prints_samples_and_writes_the_report() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("w");
    let cmd = busy_sh(3);
    let out = tune(&[
        "watch",
        "--interval",
        "50",
        "--out",
        out_dir.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        &cmd,
    ]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    // Live lines: "[   1.0s] host cpu ..% | proc PID cpu ..% rss ..".
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with('[')).collect();
    assert!(!lines.is_empty(), "no sample lines in:\n{err}");
    assert!(lines.iter().any(|l| l.contains("| proc ")), "{err}");
    assert!(err.contains("report: "), "{err}");

    let r = report(&out_dir);
    assert_eq!(r["kind"], "watch");
    assert_eq!(r["schema_version"], tune::results::model::SCHEMA_VERSION);
    assert_eq!(r["target"]["exit_code"], 3);
    assert_eq!(r["target"]["command"][0], "sh");
    let tree = device(&r, "tree").expect("a process-tree summary");
    assert!(tree["metrics"]["rss_bytes"]["max"].as_f64().unwrap() > 0.0);
    // The tree followed the shell's `sleep` child.
    assert!(tree["metrics"]["procs"]["max"].as_f64().unwrap() >= 2.0);
    let cpu = tree["metrics"]["cpu_pct"]["max"].as_f64().unwrap();
    assert!(cpu > 5.0, "a busy loop showed only {cpu}% CPU");
    assert!(device(&r, "host").is_some() && device(&r, "core").is_some());
    assert!(r["sampling"]["ticks"].as_u64().unwrap() >= 5);
    assert!(!r["timeline"].as_array().unwrap().is_empty());
    assert!(r["findings"].is_array());
    if r["gpus"].as_array().unwrap().is_empty() {
        // No GPU here: one clear notice, in the output and the report, not a crash.
        let notes = r["notes"].as_array().unwrap();
        assert!(
            notes
                .iter()
                .any(|n| n.as_str().unwrap().starts_with("NVML unavailable")),
            "{notes:?}"
        );
        assert_eq!(err.matches("NVML unavailable").count(), 1, "{err}");
    }
    let md = std::fs::read_to_string(out_dir.join("summary.md")).unwrap();
    assert!(md.contains("exited with code 3"), "{md}");
}

#[test]
fn watch_json_streams_samples_and_keeps_stdout_clean() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("w");
    let cmd = format!("echo from-the-command; {}", busy_sh(0));
    let out = tune(&[
        "watch",
        "--json",
        "--interval",
        "50",
        "--out",
        out_dir.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        &cmd,
    ]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    let samples: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
        .collect();
    assert!(samples.len() >= 5, "{} samples", samples.len());
    assert!(samples
        .iter()
        .all(|s| s["t_ms"].is_number() && s["metrics"].is_object()));
    assert!(samples.iter().any(|s| s["source"] == "tree"));
    // The command's own stdout went to stderr, not into the JSON stream.
    assert!(err.contains("from-the-command"), "{err}");
    assert_eq!(report(&out_dir)["target"]["exit_code"], 0);
}

#[test]
fn watch_dead_pid_is_bad_input_and_writes_nothing() {
    let mut c = Command::new("true").spawn().unwrap();
    let pid = c.id();
    c.wait().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("never");
    let out = tune(&[
        "watch",
        "--pid",
        &pid.to_string(),
        "--out",
        out_dir.to_str().unwrap(),
    ]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!("--pid {pid}: no such running process")),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "one clear line: {err}");
    assert!(!out_dir.exists());
}

#[test]
fn watch_attaches_to_a_running_pid_until_it_exits() {
    let mut sleeper = Command::new("sleep").arg("1.5").spawn().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = tune(&[
        "watch",
        "--pid",
        &sleeper.id().to_string(),
        "--interval",
        "50",
        "--out",
        dir.path().to_str().unwrap(),
    ]);
    sleeper.wait().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let r = report(dir.path());
    assert_eq!(r["target"]["pid"], sleeper.id());
    assert!(r["target"]["command"].is_null() && r["target"]["exit_code"].is_null());
    assert_eq!(r["target"]["ended"], "exited");
    assert!(device(&r, "tree").is_some());
}

/// Starts `tune watch ARGS`, waits for its "watch: following" line (signal handlers
/// are in place by then), sends `signal` to tune alone and returns its exit code and
/// all of its stderr.
fn signal_watch(args: &[&str], signal: &str) -> (Option<i32>, String) {
    use std::io::{BufRead, BufReader, Read};
    let mut child = Command::new(env!("CARGO_BIN_EXE_tune"))
        .args(args)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        if err.read_line(&mut line).unwrap() == 0 {
            panic!("tune watch ended before it started watching: {seen}");
        }
        seen.push_str(&line);
        if line.starts_with("watch: following") {
            break;
        }
    }
    let t0 = Instant::now();
    let status = Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    err.read_to_string(&mut seen).unwrap();
    let code = child.wait().unwrap().code();
    assert!(
        t0.elapsed() < Duration::from_secs(20),
        "the watch did not stop: {seen}"
    );
    (code, seen)
}

#[test]
fn sigterm_is_passed_to_the_command_and_the_report_still_written() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let (code, err) = signal_watch(
        &["watch", "--interval", "50", "--out", d, "--", "sleep", "30"],
        "-TERM",
    );
    assert_eq!(code, Some(128 + 15), "{err}");
    assert_eq!(report(dir.path())["target"]["ended"], "killed by signal 15");
}

#[test]
fn interrupting_a_pid_watch_ends_it_cleanly_and_leaves_the_process() {
    let mut sleeper = Command::new("sleep").arg("30").spawn().unwrap();
    let pid = sleeper.id().to_string();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let (code, err) = signal_watch(&["watch", "--pid", &pid, "--out", d], "-INT");
    let still_running = sleeper.try_wait().unwrap().is_none();
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    assert_eq!(code, Some(0), "{err}");
    assert!(still_running, "watching must not stop the watched process");
    let r = report(dir.path());
    assert_eq!(
        r["target"]["ended"],
        "still running (watch stopped by a signal)"
    );
}

#[test]
fn watch_flag_errors_exit_2() {
    for args in [
        vec!["watch"],
        vec!["watch", "--pid", "1", "--", "true"],
        vec!["watch", "--interval", "0", "--", "true"],
        vec!["watch", "--out", "/proc/no-such-dir/x", "--", "true"],
        vec!["watch", "--", "/nonexistent/tune-no-such-program"],
    ] {
        // In an empty folder, where the default report folder (reports/watch-...) would go.
        let cwd = tempfile::tempdir().unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_tune"))
            .args(&args)
            .current_dir(cwd.path())
            .output()
            .expect("run tune");
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        let left: Vec<_> = std::fs::read_dir(cwd.path()).unwrap().flatten().collect();
        assert!(left.is_empty(), "{args:?} wrote {left:?}");
    }
    // A folder named with --out that could not be used is not left behind either.
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("a/b");
    let out = tune(&[
        "watch",
        "--out",
        out_dir.to_str().unwrap(),
        "--",
        "/nonexistent/tune-no-such-program",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(!dir.path().join("a").exists(), "{}", stderr(&out));
}

#[test]
fn train_sample_interval_puts_engine_devices_on_the_timeline() {
    let cache = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tune"))
        .args([
            "train",
            "--model",
            "mlp",
            "--dataset",
            "synthetic",
            "--steps",
            "12",
            "--batch-size",
            "32",
            "--no-eval",
            "--json",
            "--sample-interval",
            "20",
        ])
        .env("TUNE_CACHE_DIR", cache.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["samples_per_s"].as_f64().unwrap() > 0.0);
    let p = &v["probes"];
    assert!(p["sampling"]["ticks"].as_u64().unwrap() >= 2, "{p}");
    let engine = device(p, "engine").expect("engine device 0 on the timeline");
    assert_eq!(engine["index"], 0);
    let peak = engine["metrics"]["peak_bytes"]["max"].as_f64().unwrap();
    let reported = v["peak_total_bytes"].as_f64().unwrap();
    // The sampled peak is the tracker's own peak, so it matches the run summary.
    assert_eq!(peak, reported);
    let busy = engine["metrics"]["busy_pct"]["mean"].as_f64().unwrap();
    assert!(busy > 0.0 && busy <= 100.0, "{busy}");
    assert!(device(p, "tree").is_some());

    // Without the flag the output has no probes section.
    let out = Command::new(env!("CARGO_BIN_EXE_tune"))
        .args([
            "train",
            "--model",
            "mlp",
            "--dataset",
            "synthetic",
            "--steps",
            "2",
        ])
        .args(["--warmup", "0", "--batch-size", "8", "--no-eval", "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v.get("probes").is_none());
}

#[test]
fn probe_names_cpu_gpus_and_cuda_libraries() {
    let out = tune(&["probe"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("cpu: "), "{text}");
    assert!(
        text.contains("\ngpus: ") || text.contains("\ngpu 0: "),
        "{text}"
    );
    for lib in ["driver", "cudart", "cublas", "cudnn", "nccl"] {
        assert!(text.contains(&format!("cuda library {lib}: ")), "{text}");
    }
    let out = tune(&["probe", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["cuda_libraries"].as_array().unwrap().len(), 8);
    assert!(v["cpu"]["logical_cores"].as_u64().unwrap() >= 1);
    if v["gpus"].is_null() {
        assert!(v["gpu_notice"]
            .as_str()
            .unwrap()
            .starts_with("NVML unavailable"));
    }
}
