//! Running the real `tune` binary and judging its refusals: exit 2, one line, no raw
//! control characters; and waiting for a child with a deadline and its peak memory.
#![allow(dead_code)] // each test file uses its own subset

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

/// `tune`, without the variables that inject faults or caps into trials.
pub fn tune() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tune"));
    c.env_remove("TUNE_TRIAL_FAULT")
        .env_remove("TUNE_TRIAL_MEM_CAP_BYTES")
        .env_remove("TUNE_SAMPLE_MS")
        .env_remove("TUNE_DIST_TIMEOUT")
        .env_remove("TUNE_DIST_PORT");
    c
}

pub fn show(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Asserts exit 2 and a single stderr line, and returns that line.
pub fn refused(o: &Output) -> String {
    assert_eq!(o.status.code(), Some(2), "{}", show(o));
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "not one line: {}", show(o));
    assert!(
        !err.bytes().any(|b| b == 0x1b || b == 0),
        "raw control characters reach the terminal: {err:?}"
    );
    lines[0].to_string()
}

/// Caps the data segment of the process `c` starts (heap and anonymous mappings), so a
/// tune that grows without bound dies at `bytes` instead of eating the shared machine.
pub fn limit_data(c: &mut Command, bytes: u64) -> &mut Command {
    // SAFETY: the closure runs in the forked child before exec and only calls
    // setrlimit(2), which is async-signal-safe and touches no shared state.
    unsafe {
        c.pre_exec(move || {
            let lim = libc::rlimit {
                rlim_cur: bytes,
                rlim_max: bytes,
            };
            if libc::setrlimit(libc::RLIMIT_DATA, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    }
}

/// Waits for `child` with a deadline (killing it past the deadline) and returns its
/// exit code (None when a signal ended it), peak resident memory in bytes, and how long
/// it ran. Its stdout and stderr must not be pipes nobody reads.
pub fn wait_with_rusage(child: Child, limit: Duration) -> (Option<i32>, u64, Duration) {
    let pid = child.id() as libc::pid_t;
    let start = Instant::now();
    loop {
        let mut status = 0;
        // SAFETY: zeroed rusage is a valid value of this plain C struct.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: pid is our own child, not yet reaped; both pointers are to live locals.
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut ru) };
        if r == pid {
            let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
            return (code, ru.ru_maxrss as u64 * 1024, start.elapsed());
        }
        if start.elapsed() > limit {
            // SAFETY: sending a signal to our own unreaped child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            // SAFETY: as above; reaps it so no zombie outlives the test.
            unsafe { libc::waitpid(pid, &mut status, 0) };
            panic!("still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Runs `c` to the end with its output captured, killing it (and failing the test) past
/// `limit`: a regression that hangs or runs a whole benchmark fails instead of stalling.
pub fn output_within(c: &mut Command, limit: Duration) -> Output {
    use std::io::Read;
    use std::process::Stdio;
    let mut child = c
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = r.read_to_end(&mut v);
            v
        })
    };
    let out = drain(Box::new(child.stdout.take().unwrap()));
    let err = drain(Box::new(child.stderr.take().unwrap()));
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            let e = err.join().unwrap_or_default();
            panic!(
                "still running after {limit:?}; stderr: {}",
                String::from_utf8_lossy(&e)
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Output {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    }
}
