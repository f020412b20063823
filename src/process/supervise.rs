//! `tune supervise` (hidden): the process between a sweep and a command trial.
//!
//! A command's descendants can leave its process group (`setsid`, daemons), and a sweep
//! killed with SIGKILL can clean nothing up. So each command trial runs under this small
//! supervisor, which
//! - dies with the sweep: its PDEATHSIG (set by the sweep) is SIGTERM, which it catches;
//! - is a child subreaper, so descendants orphaned by their parents reparent to it and
//!   stay findable through the /proc parent links;
//! - ends the whole tree when the command's main process exits, when the sweep asks
//!   (SIGTERM: time-out or cancel), when the sweep is gone, or when the tree's resident
//!   memory passes the cap; then reaps every descendant and exits;
//! - reports what happened as one last stderr line, `REPORT_PREFIX` + JSON.

use std::io::Write;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::procs::{descendants_rss, die_with_parent, kill_descendants, kill_group};

/// Starts the supervisor's report line on stderr (a record separator keeps it apart from
/// anything a command would print).
pub const REPORT_PREFIX: &str = "\u{1e}tune-supervise ";

/// How the supervised command ended.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Report {
    /// Exit code of the main process, when it exited.
    pub code: Option<i32>,
    /// Signal that killed the main process, when one did.
    pub signal: Option<i32>,
    /// Largest resident memory of the tree seen, in bytes (sampled, and at least the
    /// peak of the largest single descendant reaped).
    pub peak_rss_bytes: u64,
    /// The tree's resident memory when it passed the cap, if it did.
    pub over_cap_bytes: Option<u64>,
    /// Ended because the sweep asked or is gone, before the main process exited.
    pub stopped: bool,
    /// Set when the command could not be started.
    pub error: Option<String>,
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// A full /proc scan per sample: 10 per second keeps the supervisor near 1% of a core.
const SAMPLE_EVERY: Duration = Duration::from_millis(100);

pub fn supervise_main(parent: u32, mem_cap_bytes: Option<u64>, command: &[String]) -> i32 {
    // SAFETY: the handler only stores to an atomic (async-signal-safe); prctl and
    // getppid have no memory effects.
    unsafe {
        for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
            libc::signal(
                sig,
                on_stop as extern "C" fn(libc::c_int) as libc::sighandler_t,
            );
        }
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0, 0, 0);
    }
    let mut report = Report::default();
    let Some((program, rest)) = command.split_first() else {
        report.error = Some("no command to supervise".into());
        return finish(&report);
    };
    if parent_gone(parent) || STOP.load(Ordering::SeqCst) {
        report.stopped = true;
        return finish(&report);
    }
    let mut cmd = Command::new(program);
    cmd.args(rest);
    die_with_parent(&mut cmd, libc::SIGKILL);
    let main_pid = match cmd.spawn() {
        Ok(c) => c.id(),
        Err(e) => {
            report.error = Some(format!("cannot start {program:?}: {e}"));
            return finish(&report);
        }
    };
    let me = std::process::id();
    let mut next_sample = Instant::now();
    loop {
        if let Some(st) = reap_all(main_pid) {
            record_status(&mut report, st);
            break;
        }
        if STOP.load(Ordering::SeqCst) || parent_gone(parent) {
            report.stopped = true;
            break;
        }
        if Instant::now() >= next_sample {
            let rss = descendants_rss(me);
            report.peak_rss_bytes = report.peak_rss_bytes.max(rss);
            if mem_cap_bytes.is_some_and(|cap| rss > cap) {
                report.over_cap_bytes = Some(rss);
                break;
            }
            next_sample = Instant::now() + SAMPLE_EVERY;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    end_tree(me, main_pid, &mut report);
    report.peak_rss_bytes = report.peak_rss_bytes.max(children_max_rss());
    finish(&report)
}

/// The parent that started us is no longer our parent (it died; we were reparented).
fn parent_gone(parent: u32) -> bool {
    // SAFETY: getppid has no memory effects and cannot fail.
    let now = unsafe { libc::getppid() };
    now as u32 != parent
}

/// Reaps every exited child without blocking; returns the main process's wait status
/// once it has been reaped.
fn reap_all(main_pid: u32) -> Option<libc::c_int> {
    let mut main = None;
    loop {
        let mut st: libc::c_int = 0;
        // SAFETY: `st` is a valid out-pointer for the duration of the call.
        let pid = unsafe { libc::waitpid(-1, &mut st, libc::WNOHANG) };
        if pid <= 0 {
            return main;
        }
        if pid as u32 == main_pid {
            main = Some(st);
        }
    }
}

fn record_status(report: &mut Report, st: libc::c_int) {
    if libc::WIFEXITED(st) {
        report.code = Some(libc::WEXITSTATUS(st));
    } else if libc::WIFSIGNALED(st) {
        report.signal = Some(libc::WTERMSIG(st));
    }
}

/// Kills the command's group and every descendant, again until none is left (a process
/// may fork while the tree is being killed), and reaps them all. Bounded: a process in
/// uninterruptible sleep can outlast any wait.
fn end_tree(me: u32, main_pid: u32, report: &mut Report) {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        kill_group(main_pid, libc::SIGKILL);
        let left = kill_descendants(me);
        if let Some(st) = reap_all(main_pid) {
            if report.code.is_none() && report.signal.is_none() {
                record_status(report, st);
            }
        }
        if left == 0 || Instant::now() >= until {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Peak resident memory of the largest descendant reaped, in bytes.
fn children_max_rss() -> u64 {
    // SAFETY: an all-zero rusage is a valid value; getrusage fills it in.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid out-pointer for the duration of the call.
    if unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) } != 0 {
        return 0;
    }
    (ru.ru_maxrss.max(0) as u64) * 1024
}

fn finish(report: &Report) -> i32 {
    let json = serde_json::to_string(report).unwrap_or_else(|_| "{}".into());
    let mut err = std::io::stderr().lock();
    // Newline first: the command may have left a partial line on the shared stderr.
    let _ = writeln!(err, "\n{REPORT_PREFIX}{json}");
    let _ = err.flush();
    0
}
