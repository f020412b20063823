//! `tune watch --tui` in a real terminal: tmux runs it, the tests read the screen back
//! with `capture-pane`, and check after the watch ends (by the command's exit, or by q)
//! that the terminal is back to normal and the exit code is the command's.
//!
//! Without tmux the tests print why and pass; with `TUNE_REQUIRE_TMUX=1` (set by
//! `.ci/run`) they fail instead. The tmux helper is `tests/common/tmux.rs`.

use crate::common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::tmux::{self, have_tmux, show, Tmux};

const TUNE: &str = env!("CARGO_BIN_EXE_tune");

fn script(dir: &Path, command: &str) -> String {
    tmux::script(dir, "", "BEFORE-WATCH", command)
}

fn assert_restored(t: &Tmux, dir: &Path, exit: &str) -> String {
    tmux::assert_restored(t, dir, exit, "BEFORE-WATCH", "q stop · P cpu", 30)
}

#[test]
fn watch_tui_shows_tree_and_devices_and_returns_the_exit_code() {
    if !have_tmux() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let cmd = format!(
        "{TUNE} watch --tui --out {} -- sh -c 'echo says-$((40+2)); sleep 6; exit 4'",
        out.display()
    );
    let t = Tmux::start(dir.path(), &script(dir.path(), &cmd), 100, 30);
    // The host CPU is always a device here (no GPU on this machine: NVML's notice).
    t.wait_all(
        &[
            "Devices (",
            "tune watch · `sh -c",
            "Process tree",
            "q stop · P cpu",
        ],
        15,
    );
    assert_eq!(
        t.format("#{alternate_on}"),
        "1",
        "the view uses the alternate screen"
    );
    // The per-process table: a row per process of the tree (sh and its sleep), with
    // htop's keys to sort and filter. No GPU here: its columns show "-".
    // sh's own row names "sleep 6" in its command line: wait for sleep's row.
    let s = t.wait("a row for sleep", 10, |s| {
        ["PID", "COMMAND", "CPU%▼"].iter().all(|n| s.contains(n))
            && s.lines()
                .any(|l| l.contains("sleep 6") && !l.contains("sh -c"))
    });
    let row = s
        .lines()
        .find(|l| l.contains("sleep 6") && !l.contains("sh -c"))
        .unwrap_or_else(|| panic!("no row for sleep:\n{s}"));
    assert!(row.trim_end_matches('│').trim_end().ends_with('-'), "{row}");
    let before = s.matches("sleep 6").count();
    t.keys(&["M"]);
    t.wait_for("RSS▼", 5);
    // sh's command line holds "says", sleep's does not: the filter leaves sh alone.
    t.keys(&["/", "s", "a", "y", "s", "Enter"]);
    let s = t.wait_for("filter: says", 5);
    assert_eq!(
        s.matches("sleep 6").count(),
        before - 1,
        "the filter hides sleep:\n{s}"
    );
    let s = t.wait_for(" cpu ", 10);
    assert!(
        !s.contains("says-42"),
        "the command's output stays off the view:\n{s}"
    );
    let s = assert_restored(&t, dir.path(), "EXIT=4");
    assert!(s.contains("exited with code 4"), "{s}");
    assert!(out.join("report.json").exists());
    let log = std::fs::read_to_string(out.join("command.log")).unwrap();
    assert_eq!(log.trim(), "says-42");
}

#[test]
fn q_sends_the_command_sigint_and_the_report_is_still_written() {
    if !have_tmux() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let cmd = format!("{TUNE} watch --tui --out {} -- sleep 60", out.display());
    let t = Tmux::start(dir.path(), &script(dir.path(), &cmd), 100, 30);
    t.wait_for("Devices (", 15);
    let started = Instant::now();
    t.keys(&["q"]);
    // sleep dies of SIGINT: 128 + 2, as after Ctrl-C without --tui.
    let s = assert_restored(&t, dir.path(), "EXIT=130");
    assert!(started.elapsed() < Duration::from_secs(20), "{s}");
    assert!(s.contains("killed by signal 2"), "{s}");
    assert!(out.join("report.json").exists());
}

#[test]
fn tui_with_json_is_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let o = Command::new(TUNE)
        .args(["watch", "--tui", "--json", "--out"])
        .arg(&out)
        .args(["--", "true"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", show(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--tui and --json"), "{err}");
    assert!(!out.exists(), "nothing written");
    // Without a terminal (stdout is a pipe here) --tui is refused the same way.
    let o = Command::new(TUNE)
        .args(["watch", "--tui", "--out"])
        .arg(&out)
        .args(["--", "true"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", show(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("interactive terminal"),
        "{}",
        show(&o)
    );
    assert!(!out.exists(), "nothing written");
}
