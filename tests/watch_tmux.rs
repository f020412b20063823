//! `tune watch --tui` in a real terminal: tmux runs it, the tests read the screen back
//! with `capture-pane`, and check after the watch ends (by the command's exit, or by q)
//! that the terminal is back to normal and the exit code is the command's.
//!
//! Without tmux the tests print why and pass; with `TUNE_REQUIRE_TMUX=1` (set by
//! `.ci/run`) they fail instead. The tmux helper is a trimmed copy of the one in
//! `dash_tmux.rs` (integration tests do not share modules without a `tests/common`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const TUNE: &str = env!("CARGO_BIN_EXE_tune");

fn have_tmux() -> bool {
    let ok = Command::new("tmux")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var("TUNE_REQUIRE_TMUX").as_deref() != Ok("1"),
            "tmux is required (TUNE_REQUIRE_TMUX=1) but `tmux -V` does not run"
        );
        eprintln!(
            "skipping: tmux is not installed (apt-get install tmux), so no real-terminal test"
        );
    }
    ok
}

/// One private tmux server (its own socket), killed on drop.
struct Tmux {
    socket: PathBuf,
}

impl Tmux {
    fn start(dir: &Path, script: &str, w: u16, h: u16) -> Tmux {
        let t = Tmux {
            socket: dir.join("tmux.sock"),
        };
        let path = dir.join("run.sh");
        std::fs::write(&path, script).unwrap();
        let o = t
            .cmd()
            .args(["-f", "/dev/null", "new-session", "-d", "-s", "watch"])
            .args(["-x", &w.to_string(), "-y", &h.to_string()])
            .arg(format!("sh {}", path.display()))
            .env("TERM", "xterm-256color")
            .output()
            .unwrap();
        assert!(o.status.success(), "tmux new-session: {}", show(&o));
        t.run(&["set-option", "-t", "watch", "remain-on-exit", "on"]);
        t
    }

    fn cmd(&self) -> Command {
        let mut c = Command::new("tmux");
        c.arg("-S").arg(&self.socket);
        c
    }

    fn run(&self, args: &[&str]) -> String {
        let o = self.cmd().args(args).output().unwrap();
        assert!(o.status.success(), "tmux {args:?}: {}", show(&o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    fn keys(&self, keys: &[&str]) {
        let mut a = vec!["send-keys", "-t", "watch"];
        a.extend_from_slice(keys);
        self.run(&a);
    }

    fn screen(&self) -> String {
        self.run(&["capture-pane", "-p", "-t", "watch"])
    }

    fn format(&self, f: &str) -> String {
        self.run(&["display-message", "-p", "-t", "watch", f])
            .trim()
            .to_string()
    }

    fn wait_for(&self, needle: &str, timeout_s: u64) -> String {
        let end = Instant::now() + Duration::from_secs(timeout_s);
        loop {
            let s = self.screen();
            if s.contains(needle) {
                return s;
            }
            assert!(
                Instant::now() < end,
                "timed out waiting for {needle:?}; screen:\n{s}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd().arg("kill-server").output();
    }
}

fn show(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A marker line, the command, its exit code, the terminal settings right after it,
/// then a wait so the pane stays readable.
fn script(dir: &Path, command: &str) -> String {
    format!(
        "printf 'BEFORE-WATCH\\n'\n{command}\necho \"EXIT=$?\"\nstty -a > {stty}\necho STTY-SAVED\nsleep 120\n",
        stty = dir.join("stty.txt").display()
    )
}

/// The normal screen is back with the lines printed before the view, the cursor is
/// visible and the tty is cooked again.
fn assert_restored(t: &Tmux, dir: &Path, exit: &str) -> String {
    let s = t.wait_for("STTY-SAVED", 30);
    assert!(s.contains(exit), "expected {exit}:\n{s}");
    assert!(
        s.contains("BEFORE-WATCH"),
        "the normal screen is back:\n{s}"
    );
    assert!(
        !s.contains("q stop watching"),
        "no view left on screen:\n{s}"
    );
    assert_eq!(t.format("#{alternate_on}"), "0", "alternate screen left");
    assert_eq!(t.format("#{cursor_flag}"), "1", "cursor shown");
    let stty = std::fs::read_to_string(dir.join("stty.txt")).unwrap();
    let flags: Vec<&str> = stty.split_whitespace().collect();
    for f in ["icanon", "echo", "isig"] {
        assert!(
            flags.contains(&f),
            "{f} is on again after the view:\n{stty}"
        );
    }
    s
}

#[test]
fn watch_tui_shows_tree_and_devices_and_returns_the_exit_code() {
    if !have_tmux() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let cmd = format!(
        "{TUNE} watch --tui --out {} -- sh -c 'echo says-$((40+2)); sleep 3; exit 4'",
        out.display()
    );
    let t = Tmux::start(dir.path(), &script(dir.path(), &cmd), 100, 30);
    // The host CPU is always a device here (no GPU on this machine: NVML's notice).
    let s = t.wait_for("Devices (", 15);
    assert_eq!(
        t.format("#{alternate_on}"),
        "1",
        "the view uses the alternate screen"
    );
    for needle in [
        "tune watch · `sh -c",
        "Process tree",
        "pids: ",
        "q stop watching",
    ] {
        assert!(s.contains(needle), "missing {needle:?}:\n{s}");
    }
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
