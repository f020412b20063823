//! The PyTorch bridge: tune's instrumentation module for Python commands it starts.
//!
//! The module (`tune_hook.py` with its parts `tune_loader.py`, `tune_window.py`,
//! `tune_compile.py`, `tune_steps.py`, `tune_optim.py`, `tune_saves.py` and
//! `tune_modes.py`, its transport `tune_pipe.py`, and a `sitecustomize.py` that
//! activates them) is compiled into the binary and written to the
//! cache on use; the child finds it through `PYTHONPATH`, so the user installs nothing
//! and changes nothing. It writes one JSON line per training step to a pipe tune hands it
//! (`TUNE_BRIDGE_FD`, identified by `TUNE_BRIDGE_INO`), and nowhere else whatever the
//! script does to that descriptor; processes the job starts (torchrun's ranks) reopen
//! that pipe, so their steps arrive tagged with their rank. `events` reads and
//! summarises those lines. `TUNE_BRIDGE=0` turns it off.

mod attach;
mod evaluation;
mod events;
mod inject;
mod progress;
mod summary;

use std::io::PipeWriter;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

pub use attach::{classify, StackSampler, StackSummary};
pub use events::{Events, Override, Step, WindowFull, OPTIMIZER, OPTIM_IMPLS};
pub use inject::{injected, knob_values, repeat};
pub use progress::Progress;
pub use summary::{RankSummary, StepSummary};

use crate::error::{Error, Result};
use crate::process::pipes::spawn_reader;

/// The trial's measurement window, as JSON, for the hooks (`spec::Window::hook_json`).
const WINDOW_ENV: &str = "TUNE_BRIDGE_WINDOW";

/// Longest event line read from the hooks (one step's JSON is a few hundred bytes).
const MAX_EVENT_LINE: usize = 1 << 20;

const HOOK_PY: &str = include_str!("tune_hook.py");
const PIPE_PY: &str = include_str!("tune_pipe.py");
const SITE_PY: &str = include_str!("sitecustomize.py");
const COMPILE_PY: &str = include_str!("tune_compile.py");
const LOADER_PY: &str = include_str!("tune_loader.py");
const WINDOW_PY: &str = include_str!("tune_window.py");
const STEPS_PY: &str = include_str!("tune_steps.py");
const OPTIM_PY: &str = include_str!("tune_optim.py");
const SAVES_PY: &str = include_str!("tune_saves.py");
const MODES_PY: &str = include_str!("tune_modes.py");
/// The module's files: name and text.
const FILES: [(&str, &str); 10] = [
    ("tune_hook.py", HOOK_PY),
    ("tune_compile.py", COMPILE_PY),
    ("tune_loader.py", LOADER_PY),
    ("tune_window.py", WINDOW_PY),
    ("tune_steps.py", STEPS_PY),
    ("tune_optim.py", OPTIM_PY),
    ("tune_saves.py", SAVES_PY),
    ("tune_modes.py", MODES_PY),
    ("tune_pipe.py", PIPE_PY),
    ("sitecustomize.py", SITE_PY),
];
/// Room in the event pipe: with Linux's default 64 KiB, a few hundred step lines fill
/// it, and the hooks give up on a pipe that stays full for 2 s (`tune_pipe.FULL_WAIT_S`);
/// 1 MiB (the unprivileged maximum, `/proc/sys/fs/pipe-max-size`) rides out a reader
/// thread starved for longer on a loaded machine.
const PIPE_BYTES: libc::c_int = 1 << 20;

/// Whether the bridge is on (`TUNE_BRIDGE=0` turns it off).
pub fn enabled() -> bool {
    std::env::var("TUNE_BRIDGE").map_or(true, |v| v != "0")
}

/// Writes the module into the cache (once per module text) and returns its folder.
fn install() -> Result<PathBuf> {
    // FNV-1a of the module text: a new tune version with new hooks gets a new folder.
    let hash = FILES
        .iter()
        .flat_map(|(name, text)| name.bytes().chain(text.bytes()))
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
    let dir = crate::engine::train::default_cache_dir().join(format!("pybridge-{hash:016x}"));
    if FILES.iter().all(|(name, _)| dir.join(name).is_file()) {
        return Ok(dir);
    }
    std::fs::create_dir_all(&dir).map_err(|e| Error::write(&dir, e))?;
    for (name, text) in FILES {
        crate::fsio::atomic_write(dir.join(name), text.as_bytes())?;
    }
    Ok(dir)
}

/// One child's event stream: set it up on a `Command` before spawning, call
/// `spawned` after, and `finish` once the child has exited.
pub struct Link {
    writer: Option<PipeWriter>,
    events: Arc<Mutex<Events>>,
    /// Gets `()` when the stream has ended.
    ended: Receiver<()>,
    /// A sweep trial's scratch folder for what the script saves (`tune_saves.py`).
    saves: Option<Scratch>,
}

/// A folder removed when dropped: where a sweep trial's `torch.save` writes instead of
/// the user's files (TUNE_BRIDGE_SAVES). Named `<tune's pid>-<n>` under the cache, so a
/// later tune removes what a killed one left.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Result<Scratch> {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let root = crate::engine::train::default_cache_dir().join("trial-saves");
        // Folders of tune processes that are gone (killed before they could remove them).
        for entry in std::fs::read_dir(&root).into_iter().flatten().flatten() {
            let name = entry.file_name();
            let pid = name.to_str().and_then(|n| n.split('-').next());
            if pid.is_some_and(|p| !Path::new("/proc").join(p).exists()) {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = root.join(format!("{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| Error::write(&dir, e))?;
        Ok(Scratch(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Link {
    /// Prepares `cmd` to load the hooks and report to this link; `knobs` (knob name →
    /// JSON value) are applied inside the script.
    pub fn attach(
        cmd: &mut Command,
        knobs: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<Link> {
        let dir = install()?;
        let (rd, wr) = std::io::pipe()
            .map_err(|e| Error::Runtime(format!("bridge: cannot create a pipe: {e}")))?;
        let fd = wr.as_raw_fd();
        // SAFETY: fcntl on a descriptor this function owns; F_SETPIPE_SZ only resizes the
        // pipe's buffer. Best effort: a refusal (a lower system maximum) keeps the default.
        #[cfg(target_os = "linux")]
        unsafe {
            libc::fcntl(fd, libc::F_SETPIPE_SZ, PIPE_BYTES);
        }
        // The pipe's identity: a process that did not inherit the descriptor (torchrun
        // closes it for its ranks) may hold another file under the same number.
        let ino = std::fs::metadata(format!("/proc/self/fd/{fd}"))
            .map(|m| std::os::unix::fs::MetadataExt::ino(&m))
            .map_err(|e| Error::Runtime(format!("bridge: cannot read the pipe's inode: {e}")))?;
        let mut path = std::ffi::OsString::from(dir.as_os_str());
        if let Some(old) = std::env::var_os("PYTHONPATH").filter(|p| !p.is_empty()) {
            path.push(":");
            path.push(old);
        }
        cmd.env("PYTHONPATH", path)
            .env("TUNE_BRIDGE_FD", fd.to_string())
            .env("TUNE_BRIDGE_INO", ino.to_string())
            .env_remove("TUNE_BRIDGE_HOLDER")
            .env_remove("TUNE_BRIDGE_SAVES")
            .env_remove(WINDOW_ENV)
            .env(
                "TUNE_BRIDGE_KNOBS",
                serde_json::Value::Object(knobs.clone()).to_string(),
            );
        {
            use std::os::unix::process::CommandExt;
            // SAFETY: the closure runs in the forked child before exec and only calls
            // fcntl, which is async-signal-safe; `fd` is open there (inherited).
            unsafe {
                cmd.pre_exec(move || {
                    // The pipe is close-on-exec; the command must keep its write end.
                    if libc::fcntl(fd, libc::F_SETFD, 0) == -1 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let events = Arc::new(Mutex::new(Events::default()));
        let sink = Arc::clone(&events);
        // The runner's bounded, lossy line reader: a stray non-UTF-8 byte or an endless
        // line from the script neither ends the stream nor grows memory.
        let ended = spawn_reader(rd, MAX_EVENT_LINE, move |line| {
            sink.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push_line(line.trim_end());
        });
        Ok(Link {
            writer: Some(wr),
            events,
            ended,
            saves: None,
        })
    }

    /// `attach` for one sweep trial of `[workload.python]`: the trial's knobs injected.
    pub fn for_trial(
        cmd: &mut Command,
        spec: &crate::spec::Spec,
        knobs: &crate::knobs::Knobs,
    ) -> Result<Link> {
        let mut link = Link::attach(cmd, &knob_values(spec, knobs))?;
        // A trial is tune's run, not the user's: what it saves must not replace theirs.
        let saves = Scratch::new()?;
        cmd.env("TUNE_BRIDGE_SAVES", &saves.0);
        link.saves = Some(saves);
        if let crate::spec::Workload::Command(c) = &spec.workload {
            if let Some(w) = &c.window {
                cmd.env(WINDOW_ENV, w.hook_json());
            }
        }
        Ok(link)
    }

    /// Whether the hooks said the job's measurement window is full.
    pub fn window_full(&self) -> bool {
        self.events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .window_full
            .is_some()
    }

    /// Whether the hooks of the process whose steps are measured failed and turned
    /// themselves off (`Events::steps_off`).
    pub fn steps_off(&self) -> bool {
        self.events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .steps_off
            .is_some()
    }

    /// The live figures of what the job reported so far.
    pub fn progress(&self) -> Progress {
        self.events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .progress()
    }

    /// Steps the job has reported so far.
    pub fn steps_seen(&self) -> usize {
        self.events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .steps
            .len()
    }

    /// Closes tune's copy of the write end, so the stream ends when the child's does.
    pub fn spawned(&mut self) {
        self.writer = None;
    }

    /// What the child reported. Waits up to `grace` for the stream to end (a
    /// grandchild that outlives the command may hold it open).
    pub fn finish(mut self, grace: Duration) -> Events {
        self.writer = None;
        let _ = self.ended.recv_timeout(grace);
        std::mem::take(&mut *self.events.lock().unwrap_or_else(PoisonError::into_inner))
    }
}
