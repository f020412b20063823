//! The watched process: a command `tune watch` starts (its exit code becomes tune's), or
//! a running process it attaches to by pid; and the stop signals that end a watch early.

use std::io::ErrorKind;
use std::os::fd::AsFd;
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};

use tune_probes::host::parse_pid_stat;

use crate::error::{Error, Result};

/// How the watched process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    /// The started command exited with this code.
    Exited(i32),
    /// The started command was killed by this signal.
    Signalled(i32),
    /// The attached process is gone (its exit code belongs to its parent, not to us).
    Gone,
    /// The user stopped watching an attached process.
    Interrupted,
}

impl Ended {
    /// The exit code `tune watch` returns: the command's own code, 128 + signal as
    /// shells report it, and 0 when an attached process ended or watching was stopped.
    pub fn exit_code(self) -> i32 {
        match self {
            Ended::Exited(c) => c,
            Ended::Signalled(s) => 128 + s,
            Ended::Gone | Ended::Interrupted => 0,
        }
    }

    pub fn describe(self) -> String {
        match self {
            Ended::Exited(c) => format!("exited with code {c}"),
            Ended::Signalled(s) => format!("killed by signal {s}"),
            Ended::Gone => "exited".into(),
            Ended::Interrupted => "still running (watch stopped by a signal)".into(),
        }
    }
}

fn ended_from(status: ExitStatus) -> Ended {
    match (status.code(), status.signal()) {
        (Some(c), _) => Ended::Exited(c),
        (None, Some(s)) => Ended::Signalled(s),
        // Neither code nor signal does not happen for a reaped child on Unix.
        (None, None) => Ended::Exited(1),
    }
}

pub enum Target {
    Child {
        child: Child,
        command: Vec<String>,
    },
    Pid {
        pid: u32,
        /// With the pid, tells the process apart from a later one that reuses its pid.
        starttime: u64,
    },
}

/// `/proc/<pid>/stat` of a live (not zombie) process.
fn live_stat(pid: u32) -> Option<tune_probes::host::PidStat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_pid_stat(&text)
        .ok()
        .filter(|s| s.state != 'Z' && s.state != 'X')
}

impl Target {
    /// Starts `command` (program and arguments, no shell). With `stdout_to_stderr` its
    /// standard output goes to tune's standard error, keeping tune's stdout for JSON.
    pub fn spawn(
        command: &[String],
        stdout_to_stderr: bool,
        prep: impl FnOnce(&mut Command) -> Result<()>,
    ) -> Result<Target> {
        Target::spawn_with(command, |cmd| {
            prep(cmd)?;
            if stdout_to_stderr {
                let fd = std::io::stderr()
                    .as_fd()
                    .try_clone_to_owned()
                    .map_err(|e| Error::Runtime(format!("watch: cannot duplicate stderr: {e}")))?;
                cmd.stdout(Stdio::from(fd));
            }
            Ok(())
        })
    }

    /// Starts `command` with its output appended to `log` and no input: under the
    /// full-screen view its lines would scribble over the screen, and its reads would
    /// steal the view's keys.
    pub fn spawn_logged(
        command: &[String],
        log: &std::path::Path,
        prep: impl FnOnce(&mut Command) -> Result<()>,
    ) -> Result<Target> {
        Target::spawn_with(command, |cmd| {
            prep(cmd)?;
            let open = || {
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(log)
                    .map_err(|e| Error::io(log, e))
            };
            cmd.stdin(Stdio::null())
                .stdout(Stdio::from(open()?))
                .stderr(Stdio::from(open()?));
            Ok(())
        })
    }

    fn spawn_with(
        command: &[String],
        setup: impl FnOnce(&mut Command) -> Result<()>,
    ) -> Result<Target> {
        let (program, args) = command
            .split_first()
            .ok_or_else(|| Error::Invalid("watch: no command given after --".into()))?;
        let mut cmd = Command::new(program);
        cmd.args(args);
        setup(&mut cmd)?;
        let child = cmd.spawn().map_err(|e| {
            let why = match e.kind() {
                ErrorKind::NotFound => "no such program (not found on PATH)".to_string(),
                ErrorKind::PermissionDenied => "permission denied (not executable?)".to_string(),
                _ => e.to_string(),
            };
            Error::Invalid(format!("watch: cannot start '{program}': {why}"))
        })?;
        Ok(Target::Child {
            child,
            command: command.to_vec(),
        })
    }

    /// Attaches to a running process; a pid with no live process is bad input.
    pub fn attach(pid: u32) -> Result<Target> {
        match live_stat(pid) {
            Some(s) => Ok(Target::Pid {
                pid,
                starttime: s.starttime,
            }),
            None => Err(Error::Invalid(format!(
                "watch: --pid {pid}: no such running process (it may have exited already); \
                 check the pid with `ps -p {pid}`"
            ))),
        }
    }

    pub fn pid(&self) -> u32 {
        match self {
            Target::Child { child, .. } => child.id(),
            Target::Pid { pid, .. } => *pid,
        }
    }

    /// The command line, when tune started it.
    pub fn command(&self) -> Option<&[String]> {
        match self {
            Target::Child { command, .. } => Some(command),
            Target::Pid { .. } => None,
        }
    }

    pub fn is_child(&self) -> bool {
        matches!(self, Target::Child { .. })
    }

    /// `None` while the process runs.
    pub fn poll(&mut self) -> Result<Option<Ended>> {
        match self {
            Target::Child { child, .. } => child
                .try_wait()
                .map(|s| s.map(ended_from))
                .map_err(|e| Error::Runtime(format!("watch: cannot wait for the command: {e}"))),
            Target::Pid { pid, starttime } => Ok(match live_stat(*pid) {
                Some(s) if s.starttime == *starttime => None,
                _ => Some(Ended::Gone),
            }),
        }
    }

    /// Sends `sig` to a started command; attached processes are never signalled.
    pub fn signal(&self, sig: i32) {
        if let Target::Child { child, .. } = self {
            if let Ok(pid) = libc::pid_t::try_from(child.id()) {
                // SAFETY: kill(2) only reads its two integer arguments. The child is not
                // reaped until `poll` sees it exit, so the pid still names our child.
                unsafe {
                    libc::kill(pid, sig);
                }
            }
        }
    }

    /// Waits for a started command to finish.
    pub fn wait(&mut self) -> Result<Option<Ended>> {
        match self {
            Target::Child { child, .. } => child
                .wait()
                .map(|s| Some(ended_from(s)))
                .map_err(|e| Error::Runtime(format!("watch: cannot wait for the command: {e}"))),
            Target::Pid { .. } => self.poll(),
        }
    }
}

/// SIGINT and SIGTERM received so far, and the last one.
static SIGNALS: AtomicUsize = AtomicUsize::new(0);
static LAST_SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    // Only atomic stores: the async-signal-safe subset.
    LAST_SIGNAL.store(sig, Ordering::SeqCst);
    SIGNALS.fetch_add(1, Ordering::SeqCst);
}

/// Catches SIGINT and SIGTERM so a watch can end cleanly and still write its report.
pub fn catch_stop_signals() -> Result<()> {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        let handler = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
        // SAFETY: the handler only touches atomics, which is async-signal-safe; glibc's
        // signal() installs it with BSD semantics (stays installed, restarts syscalls).
        let old = unsafe { libc::signal(sig, handler) };
        if old == libc::SIG_ERR {
            return Err(Error::Runtime(format!(
                "watch: cannot install a handler for signal {sig}"
            )));
        }
    }
    Ok(())
}

/// `(count, last signal)` of stop signals received so far.
pub fn stop_signals() -> (usize, i32) {
    (
        SIGNALS.load(Ordering::SeqCst),
        LAST_SIGNAL.load(Ordering::SeqCst),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_follow_shell_conventions() {
        assert_eq!(Ended::Exited(3).exit_code(), 3);
        assert_eq!(Ended::Signalled(9).exit_code(), 137);
        assert_eq!(Ended::Gone.exit_code(), 0);
        assert_eq!(Ended::Interrupted.exit_code(), 0);
    }

    #[test]
    fn started_command_reports_its_code() {
        let mut t = Target::spawn(&["sh".into(), "-c".into(), "exit 7".into()], false, |_| {
            Ok(())
        })
        .unwrap();
        assert!(t.is_child());
        assert_eq!(t.wait().unwrap(), Some(Ended::Exited(7)));
    }

    #[test]
    fn signalled_command_reports_the_signal() {
        let mut t = Target::spawn(&["sleep".into(), "30".into()], false, |_| Ok(())).unwrap();
        assert_eq!(t.poll().unwrap(), None);
        t.signal(libc::SIGTERM);
        assert_eq!(t.wait().unwrap(), Some(Ended::Signalled(libc::SIGTERM)));
    }

    #[test]
    fn missing_program_and_dead_pid_are_bad_input() {
        let e = Target::spawn(&["/nonexistent/tune-no-such-program".into()], false, |_| {
            Ok(())
        })
        .err()
        .unwrap();
        assert!(
            e.is_bad_input() && e.to_string().contains("no such program"),
            "{e}"
        );
        // A reaped child's pid is free (and only reused after the pid space wraps).
        let mut c = Command::new("true").spawn().unwrap();
        let pid = c.id();
        c.wait().unwrap();
        let e = Target::attach(pid).err().unwrap();
        assert!(e.is_bad_input(), "{e}");
        assert!(e.to_string().contains(&format!("--pid {pid}")), "{e}");
    }

    #[test]
    fn attached_process_is_followed_until_it_exits() {
        let mut c = Command::new("sleep").arg("30").spawn().unwrap();
        let mut t = Target::attach(c.id()).unwrap();
        assert!(!t.is_child());
        assert_eq!(t.poll().unwrap(), None);
        c.kill().unwrap();
        c.wait().unwrap();
        assert_eq!(t.poll().unwrap(), Some(Ended::Gone));
    }
}
