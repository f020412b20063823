//! `tune dash` and `tune sweep --tui` in a real terminal: tmux runs them, the tests send
//! keys, read the screen back with `capture-pane`, and check after each way out (q,
//! ctrl-c, a panic) that the terminal is back to normal: alternate screen left, cursor
//! shown, line editing and echo on again (`stty -a` run by the shell afterwards).
//!
//! Without tmux the tests print why and pass; with `TUNE_REQUIRE_TMUX=1` (set by
//! `.ci/run`) they fail instead.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::tmux::{self, have_tmux, show, Tmux};

const TUNE: &str = env!("CARGO_BIN_EXE_tune");

fn spec(dir: &Path, name: &str) -> PathBuf {
    let text = format!(
        "name = {name:?}\n[workload]\nmodel = \"mlp\"\ndataset = \"synthetic\"\nbatch_size = 16\n\
         steps = 6\nwarmup = 1\ndevice = \"cpu\"\nthreads = 1\n\n[knobs]\nbatch_size = [16, 8]\n\
         zero_grad = [\"memset\", \"none\"]\n\n[search]\nstrategy = \"one-at-a-time\"\nrepeats = 1\ntimeout_s = 60\n"
    );
    let p = dir.join(format!("{name}.toml"));
    std::fs::write(&p, text).unwrap();
    p
}

/// A finished sweep of three trials, the `batch_size=8` one crashed.
fn finished_sweep(dir: &Path) -> PathBuf {
    let out = dir.join("out");
    let o = Command::new(TUNE)
        .arg("sweep")
        .arg(spec(dir, "tmuxdash"))
        .arg("--out")
        .arg(&out)
        .env("TUNE_TRIAL_FAULT", "panic@batch_size=8")
        // The panic's own line must reach the kept stderr tail, not a backtrace.
        .env("RUST_BACKTRACE", "0")
        .env_remove("TUNE_TRIAL_MEM_CAP_BYTES")
        .output()
        .unwrap();
    assert!(o.status.success(), "sweep: {}", show(&o));
    assert!(out.join("report.json").exists());
    out
}

fn script(dir: &Path, env: &str, command: &str) -> String {
    tmux::script(dir, env, "BEFORE-DASH", command)
}

fn assert_restored(t: &Tmux, dir: &Path, exit: &str) -> String {
    tmux::assert_restored(t, dir, exit, "BEFORE-DASH", "q quit · tab panel", 20)
}

#[test]
fn dash_on_a_finished_sweep_keys_resize_and_quit() {
    if !have_tmux() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = finished_sweep(dir.path());
    let cmd = format!("{TUNE} dash {}", out.display());
    let t = Tmux::start(dir.path(), &script(dir.path(), "", &cmd), 120, 40);

    t.wait_all(
        &[
            "Results (3)",
            "tmuxdash",
            "finished",
            "Devices",
            "Current trial",
            "no trial running: the sweep is finished",
            "baseline",
            "zero_grad=none",
            "crashed",
            "Recommendations",
            "q quit · tab panel · ↑↓/j/k move · s sort · enter details · ? help",
        ],
        20,
    );
    assert_eq!(
        t.format("#{alternate_on}"),
        "1",
        "the dashboard uses the alternate screen"
    );
    t.keys(&["?"]);
    t.wait_for(
        "sort the results: plan, samples/s, ratio, memory, status",
        10,
    );
    t.keys(&["Escape"]);
    t.wait("the help to close", 10, |s| {
        !s.contains("sort the results:")
    });

    // Sort by status (failures first: plan -> samples/s -> ratio -> memory -> status),
    // go to the top and open the crashed trial.
    t.keys(&["s"]);
    t.wait_for("sorted by samples/s, fastest first", 10);
    t.keys(&["s", "s", "s"]);
    t.wait_for("sorted by status, failures first", 10);
    t.keys(&["g", "Enter"]);
    // The details pane and the child's panic text in it.
    t.wait_all(
        &["Trial details", "status: crashed", "injected fault: panic"],
        10,
    );
    t.keys(&["Escape"]);
    t.wait("the details to close", 10, |s| !s.contains("Trial details"));

    t.resize(50, 12);
    t.wait_all(&["terminal too small", "50x12 here"], 10);
    t.resize(120, 40);
    t.wait_for("Results (3)", 10);

    t.keys(&["q"]);
    assert_restored(&t, dir.path(), "EXIT=0");
}

#[test]
fn ctrl_c_and_a_panic_restore_the_terminal() {
    if !have_tmux() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = finished_sweep(dir.path());

    let cmd = format!("{TUNE} dash {}", out.display());
    let t = Tmux::start(dir.path(), &script(dir.path(), "", &cmd), 100, 30);
    t.wait_for("Results (3)", 20);
    t.keys(&["C-c"]);
    assert_restored(&t, dir.path(), "EXIT=0");
    drop(t);

    let t = Tmux::start(
        dir.path(),
        &script(dir.path(), "export TUNE_DASH_FAULT=panic", &cmd),
        100,
        30,
    );
    t.wait_for("Results (3)", 20);
    t.keys(&["!"]);
    let s = assert_restored(&t, dir.path(), "EXIT=101");
    assert!(
        s.contains("injected fault: panic (TUNE_DASH_FAULT)"),
        "the panic message is printed on the normal screen:\n{s}"
    );
}

#[test]
fn sweep_tui_runs_the_sweep_under_the_dashboard() {
    if !have_tmux() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    // Each trial sleeps a second first, so the running trial can be seen.
    let cmd = format!(
        "{TUNE} sweep {} --out {} --tui",
        spec(dir.path(), "tuisweep").display(),
        out.display()
    );
    let t = Tmux::start(
        dir.path(),
        &script(dir.path(), "export TUNE_TRIAL_FAULT=slow", &cmd),
        120,
        40,
    );
    t.wait_all(&["sweep running", "tuisweep"], 20);
    t.wait_for("trial 1/3 · repeat 1/1", 20);
    t.wait_all(&["sweep finished: 3 trial(s)", "Results (3)"], 60);
    t.keys(&["q"]);
    let s = assert_restored(&t, dir.path(), "EXIT=0");
    // The usual table and paths follow once the dashboard is gone.
    assert!(s.contains("samples/s [95% CI]"), "{s}");
    assert!(s.contains("report.json"), "{s}");
    assert!(out.join("report.json").exists());
    assert!(!out.join("live.json").exists(), "no stale live file");
}

#[test]
fn quitting_sweep_tui_stops_the_sweep_after_asking() {
    if !have_tmux() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let cmd = format!(
        "{TUNE} sweep {} --out {} --tui",
        spec(dir.path(), "tuistop").display(),
        out.display()
    );
    // The first trial hangs until its 60 s limit; quitting must not wait for it.
    let t = Tmux::start(
        dir.path(),
        &script(dir.path(), "export TUNE_TRIAL_FAULT=hang", &cmd),
        120,
        40,
    );
    t.wait_for("trial 1/3", 20);
    t.keys(&["q"]);
    t.wait_for("the sweep is still running: q again stops it", 10);
    let started = Instant::now();
    t.keys(&["q"]);
    let s = assert_restored(&t, dir.path(), "EXIT=1");
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "the hung trial was killed"
    );
    assert!(s.contains("sweep stopped from the dashboard"), "{s}");
    let journal = std::fs::read_to_string(out.join("journal.jsonl")).unwrap();
    assert!(
        !journal.contains("\"type\":\"trial\""),
        "the cut-short trial is not journaled:\n{journal}"
    );
    assert!(!out.join("live.json").exists());
}
