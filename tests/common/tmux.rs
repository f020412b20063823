//! A private tmux server for real-terminal tests: start a script in a detached session,
//! send keys, read the screen back with `capture-pane`, and check the terminal was
//! restored. Without tmux, `have_tmux` prints why and the caller skips; with
//! `TUNE_REQUIRE_TMUX=1` (set by `.ci/run`) it fails instead.
#![allow(dead_code)] // each test file uses its own subset

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const SESSION: &str = "tune";

pub fn have_tmux() -> bool {
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
pub struct Tmux {
    socket: PathBuf,
}

impl Tmux {
    /// Starts `script` (a shell script file) in a detached session of the given size.
    pub fn start(dir: &Path, script: &str, w: u16, h: u16) -> Tmux {
        // A fresh socket per server: a test that starts a second server in the same
        // folder must not race the first one's shutdown on a shared socket path.
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let t = Tmux {
            socket: dir.join(format!(
                "tmux-{}.sock",
                NEXT.fetch_add(1, Ordering::Relaxed)
            )),
        };
        let path = dir.join("run.sh");
        std::fs::write(&path, script).unwrap();
        let o = t
            .cmd()
            .args(["-f", "/dev/null", "new-session", "-d", "-s", SESSION])
            .args(["-x", &w.to_string(), "-y", &h.to_string()])
            .arg(format!("sh {}", path.display()))
            .env("TERM", "xterm-256color")
            .output()
            .unwrap();
        assert!(o.status.success(), "tmux new-session: {}", show(&o));
        // Keep the pane after the script exits, so its last screen can still be read.
        t.run(&["set-option", "-t", SESSION, "remain-on-exit", "on"]);
        t
    }

    pub fn cmd(&self) -> Command {
        let mut c = Command::new("tmux");
        c.arg("-S").arg(&self.socket);
        c
    }

    pub fn run(&self, args: &[&str]) -> String {
        let o = self.cmd().args(args).output().unwrap();
        assert!(o.status.success(), "tmux {args:?}: {}", show(&o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    pub fn keys(&self, keys: &[&str]) {
        let mut a = vec!["send-keys", "-t", SESSION];
        a.extend_from_slice(keys);
        self.run(&a);
    }

    pub fn screen(&self) -> String {
        self.run(&["capture-pane", "-p", "-t", SESSION])
    }

    pub fn format(&self, f: &str) -> String {
        self.run(&["display-message", "-p", "-t", SESSION, f])
            .trim()
            .to_string()
    }

    /// Polls the screen until `pred` holds; the last screen in the panic message if not.
    pub fn wait(&self, what: &str, timeout_s: u64, pred: impl Fn(&str) -> bool) -> String {
        let end = Instant::now() + Duration::from_secs(timeout_s);
        loop {
            let s = self.screen();
            if pred(&s) {
                return s;
            }
            assert!(
                Instant::now() < end,
                "timed out waiting for {what}; screen:\n{s}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn wait_for(&self, needle: &str, timeout_s: u64) -> String {
        self.wait(&format!("{needle:?}"), timeout_s, |s| s.contains(needle))
    }

    /// Polls until every needle is on one screen. A full-screen view is drawn in pieces,
    /// so one needle on screen does not mean the rest of the frame is there yet (CI once
    /// read a frame whose results table had its title but no rows).
    pub fn wait_all(&self, needles: &[&str], timeout_s: u64) -> String {
        let end = Instant::now() + Duration::from_secs(timeout_s);
        loop {
            let s = self.screen();
            let missing: Vec<&&str> = needles.iter().filter(|n| !s.contains(**n)).collect();
            if missing.is_empty() {
                return s;
            }
            assert!(
                Instant::now() < end,
                "timed out waiting for {missing:?}; screen:\n{s}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn resize(&self, w: u16, h: u16) {
        self.run(&[
            "resize-window",
            "-t",
            SESSION,
            "-x",
            &w.to_string(),
            "-y",
            &h.to_string(),
        ]);
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd().arg("kill-server").output();
    }
}

pub fn show(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The script tmux runs: `env` lines, a marker line, the command, its exit code, the
/// terminal settings right after it, then a wait so the pane stays readable.
pub fn script(dir: &Path, env: &str, marker: &str, command: &str) -> String {
    format!(
        "export RUST_BACKTRACE=0\n{env}\nprintf '{marker}\\n'\n{command}\necho \"EXIT=$?\"\nstty -a > {stty}\necho STTY-SAVED\nsleep 120\n",
        stty = dir.join("stty.txt").display()
    )
}

/// After a full-screen view is gone: the normal screen is back with `marker` (printed
/// before the view), the view's `footer` is not on screen, the cursor is visible and the
/// tty is cooked again.
pub fn assert_restored(
    t: &Tmux,
    dir: &Path,
    exit: &str,
    marker: &str,
    footer: &str,
    timeout_s: u64,
) -> String {
    let s = t.wait_for("STTY-SAVED", timeout_s);
    assert!(s.contains(exit), "expected {exit}:\n{s}");
    assert!(s.contains(marker), "the normal screen is back:\n{s}");
    assert!(!s.contains(footer), "no view left on screen:\n{s}");
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
