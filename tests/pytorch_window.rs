//! A real training script that trains "forever" (tests/pytorch/forever.py: 100,000
//! epochs), swept and watched in bounded time (issue #26): each trial measures its
//! window and is stopped by tune at a step boundary, `ok`, its processes gone; a job
//! that ignores the polite stop is ended after the grace; a crashing or timed-out trial
//! keeps the steps it measured, marked partial; a window that cannot fill and a script
//! that never steps say so in one line; `tune watch --steps` ends the job; `batch_size`
//! reaches the script's DataLoader. Real PyTorch (PyPI's, on CPU), real processes.

#[path = "pytorch/support.rs"]
mod support;

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::Value;

use support::show;

/// Runs a `[workload.python]` sweep of forever.py; returns the output, report.json and
/// the tag its processes carry. One confirmation pair: these tests are about the window,
/// and a second and third pair would only rerun the job (`tests/pytorch_advice.rs` tests
/// the repeated confirmation).
fn sweep(
    d: &Path,
    py: &Path,
    script_args: &str,
    window: &str,
    knobs: &str,
    timeout_s: u32,
) -> (Output, Value, String) {
    let tag = d.display().to_string();
    let spec = format!(
        "name = \"window\"\n[workload.python]\n\
         run = \"{} {} --tag {tag} {script_args}\"\n{window}\n\
         [knobs]\n{knobs}\n[search]\nrepeats = 1\nconfirm_repeats = 1\ntimeout_s = {timeout_s}\n",
        py.display(),
        support::script("forever.py").display()
    );
    let (o, r) = support::sweep_script(d, &spec);
    (o, r, tag)
}

fn trials(r: &Value) -> Vec<Value> {
    r["trials"].as_array().cloned().unwrap_or_default()
}

/// One sweep for the window, the stop and `batch_size` (each trial is a Python start and
/// `import torch`, seconds each: one sweep asserted on twice is cheaper than two). Every
/// trial has DataLoader workers (`--workers 2`), so ending the job must end them too; and
/// a teardown slower than the grace (`--slow-exit 30`: freeing a large model and torch
/// took 5-7 s for ResNet-18 under load) must not keep the job past tune's stop.
#[test]
fn a_forever_script_is_measured_for_its_window_stopped_promptly_and_leaves_no_process() {
    let _serial = support::serial();
    let Some(py) = support::python(
        "a_forever_script_is_measured_for_its_window_stopped_promptly_and_leaves_no_process",
    ) else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let (o, r, tag) = sweep(
        d.path(),
        &py,
        "--batch 8 --workers 2 --slow-exit 30",
        // At least 0.5 s of steps: 20 steps of this job take about 0.2 s on a quiet
        // machine, so the window goes on past 20 until half a second is measured.
        "warmup = 3\nsteps = 20\nmin_seconds = 0.5",
        "batch_size = [8, 24]",
        120,
    );
    assert!(o.status.success(), "{}", show(&o));
    let ts = trials(&r);
    assert!(ts.len() >= 2, "{r}");
    for t in &ts {
        // Stopped by its window, not by the 120 s limit, and promptly: the job ended at
        // the polite stop, not when the grace ran out.
        assert_eq!(t["status"], "ok", "{t}\n{}", show(&o));
        let note = t["error"].as_str().unwrap_or("");
        let measured: usize = note
            .split("stopped by tune after ")
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no measured steps in {note:?}"));
        assert!(note.contains("measured steps"), "{note}");
        assert!(measured >= 20, "{note}");
        assert!(!note.contains("did not end at the polite stop"), "{note}");
        let rep = &t["repeats"][0];
        let times: Vec<f64> = rep["step_times"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_f64)
            .collect();
        assert_eq!(times.len(), 3 + measured, "{rep}");
        assert_eq!(rep["warmup"], 3, "{rep}");
        // The steps after warm-up cover the minimum (their starts and ends bound the
        // window's clock, so allow a step's worth of slack).
        let window_s: f64 = times[3..].iter().sum();
        let slack = times[3..].iter().cloned().fold(0.0, f64::max);
        assert!(window_s + slack >= 0.5, "{window_s} s measured: {note}");
    }
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("time to answer:"), "{err}");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        support::alive_with(&tag),
        Vec::<String>::new(),
        "processes left behind"
    );
    // batch_size reaches the script's DataLoader.
    let per: Vec<(u64, u64)> = ts
        .iter()
        .map(|t| {
            (
                t["knobs"]["batch_size"].as_u64().unwrap(),
                t["repeats"][0]["samples_per_step"].as_u64().unwrap(),
            )
        })
        .collect();
    assert!(per.contains(&(8, 8)) && per.contains(&(24, 24)), "{per:?}");
    // The script passes batch_size=8 itself: tune says it replaced it, as an override
    // (#31), never as "not applicable".
    let t24 = ts.iter().find(|t| t["knobs"]["batch_size"] == 24).unwrap();
    assert!(
        t24["overrides"]["batch_size"]
            .as_str()
            .unwrap_or("")
            .contains("batch_size=8"),
        "{t24}"
    );
    assert!(t24["not_applicable"].get("batch_size").is_none(), "{t24}");
}

#[test]
fn a_job_that_ignores_the_polite_stop_is_ended_after_the_grace_and_still_ok() {
    let _serial = support::serial();
    let Some(py) =
        support::python("a_job_that_ignores_the_polite_stop_is_ended_after_the_grace_and_still_ok")
    else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let (o, r, tag) = sweep(
        d.path(),
        &py,
        "--ignore-exit --workers 2",
        "warmup = 2\nsteps = 10\nmin_seconds = 0",
        "zero_grad = [\"none\"]",
        120,
    );
    let ts = trials(&r);
    let t = ts
        .first()
        .unwrap_or_else(|| panic!("no trial: {}", show(&o)));
    assert_eq!(t["status"], "ok", "{t}\n{}", show(&o));
    let note = t["error"].as_str().unwrap_or("");
    assert!(
        note.contains("stopped by tune after 10 measured steps"),
        "{note}"
    );
    assert!(note.contains("did not end at the polite stop"), "{note}");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        support::alive_with(&tag),
        Vec::<String>::new(),
        "processes left behind"
    );
}

#[test]
fn crashed_and_timed_out_trials_keep_their_steps_marked_partial() {
    let _serial = support::serial();
    let Some(py) = support::python("crashed_and_timed_out_trials_keep_their_steps_marked_partial")
    else {
        return;
    };
    // A crash after 30 steps, with a window of 100: 27 measured steps kept.
    let d = tempfile::tempdir().unwrap();
    let (o, r, _) = sweep(
        d.path(),
        &py,
        "--crash-after 30",
        "warmup = 3\nsteps = 100",
        "num_workers = [0]",
        120,
    );
    let t = trials(&r)
        .first()
        .cloned()
        .unwrap_or_else(|| panic!("{}", show(&o)));
    assert_eq!(t["status"], "crashed", "{t}");
    assert!(
        t["error"].as_str().unwrap().contains("partial: 29 steps"),
        "{t}"
    );
    assert_eq!(t["partial"]["steps"], 29, "{t}");
    assert_eq!(t["partial"]["used"], true, "{t}");
    assert!(t["samples_per_s"]["median"].as_f64().unwrap() > 0.0, "{t}");
    let md = std::fs::read_to_string(d.path().join("out/summary.md")).unwrap();
    assert!(md.contains("partial (crashed)"), "{md}");
    // A window the time limit cuts short: a timeout with what it measured. The limit
    // leaves room for `import torch`, seconds on a loaded 2-core machine (20 s: 30 s cost
    // this binary 10 s more for nothing it proves).
    let d = tempfile::tempdir().unwrap();
    let (o, r, tag) = sweep(
        d.path(),
        &py,
        "--cost-ms 20",
        "warmup = 2\nsteps = 100000",
        "num_workers = [0]",
        20,
    );
    let t = trials(&r)
        .first()
        .cloned()
        .unwrap_or_else(|| panic!("{}", show(&o)));
    assert_eq!(t["status"], "timeout", "{t}");
    let steps = t["partial"]["steps"].as_u64().unwrap_or(0);
    assert!(steps >= 3, "{t}");
    assert!(
        t["error"]
            .as_str()
            .unwrap()
            .contains(&format!("partial: {steps} steps")),
        "{t}"
    );
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        support::alive_with(&tag),
        Vec::<String>::new(),
        "processes left behind"
    );
}

#[test]
fn a_window_that_cannot_fill_and_a_script_that_never_steps_say_so() {
    let _serial = support::serial();
    let Some(py) =
        support::python("a_window_that_cannot_fill_and_a_script_that_never_steps_say_so")
    else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let (o, r, _) = sweep(
        d.path(),
        &py,
        "--total 12",
        "warmup = 2\nsteps = 50\nmin_seconds = 0",
        "num_workers = [0]",
        120,
    );
    let t = trials(&r)
        .first()
        .cloned()
        .unwrap_or_else(|| panic!("{}", show(&o)));
    assert_eq!(t["status"], "ok", "{t}");
    let note = t["error"].as_str().unwrap_or("");
    assert!(
        note.contains(
            "ended by itself after 11 steps, before its window (2 warm-up + 50 steps) filled"
        ),
        "{note}"
    );
    let d = tempfile::tempdir().unwrap();
    let (o, r, tag) = sweep(
        d.path(),
        &py,
        "--never-step",
        "",
        "num_workers = [0, 2]",
        12,
    );
    // The sweep goes on past the first trial.
    let ts = trials(&r);
    assert_eq!(ts.len(), 2, "{}", show(&o));
    for t in &ts {
        assert_eq!(t["status"], "timeout", "{t}");
        assert!(
            t["error"]
                .as_str()
                .unwrap()
                .contains("fewer than 3 optimizer steps"),
            "{t}"
        );
    }
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        support::alive_with(&tag),
        Vec::<String>::new(),
        "processes left behind"
    );
}

/// Not PyTorch: a command that prints a metric value forever is stopped after its
/// window of samples.
#[test]
fn a_command_window_stops_after_n_metric_values() {
    let d = tempfile::tempdir().unwrap();
    let spec = d.path().join("spec.toml");
    std::fs::write(
        &spec,
        "name = \"cmd-window\"\n[workload.command]\n\
         run = \"while true; do echo '{{\\\"sps\\\": 100}}'; sleep 0.02; done\"\n\
         metric_json_key = \"sps\"\nwarmup = 2\nsamples = 7\n\
         [knobs]\nnum_workers = [0]\n[search]\nrepeats = 1\ntimeout_s = 60\n",
    )
    .unwrap();
    let out = d.path().join("out");
    let t0 = Instant::now();
    let o = Command::new(env!("CARGO_BIN_EXE_tune"))
        .arg("sweep")
        .arg(&spec)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", show(&o));
    assert!(t0.elapsed() < Duration::from_secs(30), "{:?}", t0.elapsed());
    let r: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    let t = &r["trials"][0];
    assert_eq!(t["status"], "ok", "{t}");
    assert!(
        t["error"]
            .as_str()
            .unwrap()
            .contains("stopped by tune after 7 measured metric values"),
        "{t}"
    );
    assert_eq!(
        t["repeats"][0]["step_times"].as_array().unwrap().len(),
        9,
        "{t}"
    );
}

/// `tune dash` follows a Python trial through `live.json`: the sweep's process rewrites
/// it from the hooks' steps as they arrive, warm-up first, then the measured figures.
/// Before, the file said step 0 of 0 for a Python trial's whole run ("starting").
#[test]
fn a_python_trials_steps_reach_the_live_file_warm_up_then_figures() {
    let _serial = support::serial();
    let Some(py) =
        support::python("a_python_trials_steps_reach_the_live_file_warm_up_then_figures")
    else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let spec = format!(
        "name = \"live\"\n[workload.python]\n\
         run = \"{} {} --tag {} --batch 8 --cost-ms 5\"\nwarmup = 10\nsteps = 40\n\
         [knobs]\nbatch_size = [8, 4]\n[search]\nrepeats = 1\nconfirm_repeats = 1\n",
        py.display(),
        support::script("forever.py").display(),
        d.path().display()
    );
    let path = d.path().join("spec.toml");
    std::fs::write(&path, spec).unwrap();
    let out = d.path().join("out");
    let mut child = Command::new(env!("CARGO_BIN_EXE_tune"))
        .arg("sweep")
        .arg(&path)
        .arg("--out")
        .arg(&out)
        .env("TUNE_CACHE_DIR", d.path().join("cache"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let live = out.join("live.json");
    let mut seen: Vec<Value> = Vec::new();
    let until = Instant::now() + Duration::from_secs(240);
    while child.try_wait().unwrap().is_none() && Instant::now() < until {
        if let Some(v) = std::fs::read_to_string(&live)
            .ok()
            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
        {
            if seen.last() != Some(&v) {
                seen.push(v);
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    assert!(child.wait().unwrap().success(), "the sweep failed");
    let n = |v: &Value, k: &str| v[k].as_u64().unwrap_or(0);
    let warming = seen
        .iter()
        .find(|v| n(v, "step") > 0 && n(v, "step") <= n(v, "warmup"));
    let measuring = seen.iter().find(|v| {
        n(v, "step") > n(v, "warmup") + 5 && v["samples_per_s"].as_f64().is_some_and(|x| x > 0.0)
    });
    let brief: Vec<String> = seen
        .iter()
        .map(|v| {
            format!(
                "{}:{}/{}/{} {}",
                v["label"], v["step"], v["warmup"], v["steps"], v["samples_per_s"]
            )
        })
        .collect();
    assert!(warming.is_some(), "no warm-up state among {brief:?}");
    let m = measuring.unwrap_or_else(|| panic!("no measured state among {brief:?}"));
    // 10 warm-up steps and 40 measured: the total the bar is drawn against.
    assert_eq!(n(m, "steps"), n(m, "warmup") + 40, "{m}");
    assert!(n(m, "warmup") >= 10, "{m}");
    assert!(m["phases"]["data_wait"].as_f64().is_some(), "{m}");
}
