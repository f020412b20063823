//! `tune dash` and `tune sweep --tui` in a real terminal: tmux runs them, the tests send
//! keys, read the screen back with `capture-pane`, and check after each way out (q,
//! ctrl-c, a panic) that the terminal is back to normal: alternate screen left, cursor
//! shown, line editing and echo on again (`stty -a` run by the shell afterwards).
//!
//! Without tmux the tests print why and pass; with `TUNE_REQUIRE_TMUX=1` (set by
//! `.ci/run`) they fail instead.

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
    /// Starts `script` (a shell script file) in a detached session of the given size.
    fn start(dir: &Path, script: &str, w: u16, h: u16) -> Tmux {
        let t = Tmux {
            socket: dir.join("tmux.sock"),
        };
        let path = dir.join("run.sh");
        std::fs::write(&path, script).unwrap();
        let o = t
            .cmd()
            .args(["-f", "/dev/null", "new-session", "-d", "-s", "dash"])
            .args(["-x", &w.to_string(), "-y", &h.to_string()])
            .arg(format!("sh {}", path.display()))
            .env("TERM", "xterm-256color")
            .output()
            .unwrap();
        assert!(o.status.success(), "tmux new-session: {}", show(&o));
        // Keep the pane after the script exits, so its last screen can still be read.
        t.run(&["set-option", "-t", "dash", "remain-on-exit", "on"]);
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
        let mut a = vec!["send-keys", "-t", "dash"];
        a.extend_from_slice(keys);
        self.run(&a);
    }

    fn screen(&self) -> String {
        self.run(&["capture-pane", "-p", "-t", "dash"])
    }

    fn format(&self, f: &str) -> String {
        self.run(&["display-message", "-p", "-t", "dash", f])
            .trim()
            .to_string()
    }

    /// Polls the screen until `pred` holds; the last screen in the panic message if not.
    fn wait(&self, what: &str, timeout_s: u64, pred: impl Fn(&str) -> bool) -> String {
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

    fn wait_for(&self, needle: &str, timeout_s: u64) -> String {
        self.wait(&format!("{needle:?}"), timeout_s, |s| s.contains(needle))
    }

    fn resize(&self, w: u16, h: u16) {
        self.run(&[
            "resize-window",
            "-t",
            "dash",
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

fn show(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

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

/// The script tmux runs: a marker line, the command, its exit code, the terminal
/// settings right after it, then a wait so the pane stays readable.
fn script(dir: &Path, env: &str, command: &str) -> String {
    format!(
        "export RUST_BACKTRACE=0\n{env}\nprintf 'BEFORE-DASH\\n'\n{command}\necho \"EXIT=$?\"\nstty -a > {stty}\necho STTY-SAVED\nsleep 120\n",
        stty = dir.join("stty.txt").display()
    )
}

/// After the dashboard is gone: the normal screen is back with the lines printed before
/// it, the cursor is visible and the tty is cooked again.
fn assert_restored(t: &Tmux, dir: &Path, exit: &str) -> String {
    let s = t.wait_for("STTY-SAVED", 20);
    assert!(s.contains(exit), "expected {exit}:\n{s}");
    assert!(s.contains("BEFORE-DASH"), "the normal screen is back:\n{s}");
    assert!(
        !s.contains("q quit · tab panel"),
        "no dashboard left on screen:\n{s}"
    );
    assert_eq!(t.format("#{alternate_on}"), "0", "alternate screen left");
    assert_eq!(t.format("#{cursor_flag}"), "1", "cursor shown");
    let stty = std::fs::read_to_string(dir.join("stty.txt")).unwrap();
    let flags: Vec<&str> = stty.split_whitespace().collect();
    for f in ["icanon", "echo", "isig"] {
        assert!(
            flags.contains(&f),
            "{f} is on again after the dashboard:\n{stty}"
        );
    }
    s
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

    let s = t.wait_for("Results (3)", 20);
    assert_eq!(
        t.format("#{alternate_on}"),
        "1",
        "the dashboard uses the alternate screen"
    );
    for needle in [
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
    ] {
        assert!(s.contains(needle), "missing {needle:?}:\n{s}");
    }

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
    let s = t.wait_for("Trial details", 10);
    assert!(s.contains("status: crashed"), "{s}");
    assert!(
        s.contains("injected fault: panic"),
        "the child's panic text:\n{s}"
    );
    t.keys(&["Escape"]);
    t.wait("the details to close", 10, |s| !s.contains("Trial details"));

    t.resize(50, 12);
    let s = t.wait_for("terminal too small", 10);
    assert!(s.contains("50x12 here"), "{s}");
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
    let s = t.wait_for("sweep running", 20);
    assert!(s.contains("tuisweep"), "{s}");
    t.wait_for("trial 1/3 · repeat 1/1", 20);
    let s = t.wait_for("sweep finished: 3 trial(s)", 60);
    assert!(s.contains("Results (3)"), "{s}");
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
