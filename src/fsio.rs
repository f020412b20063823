//! File I/O shared by every stage: atomic replacement of a file, and reading an input
//! file with a size limit so that `tune sweep /dev/zero` cannot eat the machine's memory.
//!
//! Errors split by whose fault they are: a file the user named that cannot be read is
//! bad input ([`Error::Io`], exit 2); a file tune cannot write (full disk, read-only
//! folder) is a failed run ([`Error::Write`], exit 1).

use std::fs::{self, File};
use std::io::{Read, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, Result};

/// Largest spec, report or journal tune reads: far above any real one (a 1000-trial
/// report is a few MB), far below the machine's memory.
pub const MAX_INPUT_BYTES: u64 = 256 << 20;

/// Reads `path` whole, refusing a file (or a device such as /dev/zero) larger than
/// `limit` bytes without reading more than `limit + 1` bytes of it.
pub fn read_limited(path: &Path, limit: u64) -> Result<Vec<u8>> {
    let f = File::open(path).map_err(|e| Error::io(path, e))?;
    let mut buf = Vec::new();
    f.take(limit.saturating_add(1))
        .read_to_end(&mut buf)
        .map_err(|e| Error::io(path, e))?;
    if buf.len() as u64 > limit {
        return Err(Error::format(
            path,
            format!("larger than {} MiB: not a file tune wrote", limit >> 20),
        ));
    }
    Ok(buf)
}

/// [`read_limited`] for text: invalid UTF-8 is a format error naming the file.
pub fn read_text_limited(path: &Path, limit: u64) -> Result<String> {
    String::from_utf8(read_limited(path, limit)?)
        .map_err(|e| Error::format(path, format!("not UTF-8 text: {e}")))
}

/// The folder a path lives in (`.` for a bare file name).
pub fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Flushes a folder's entries, so a rename inside it survives a power loss.
pub fn sync_dir(dir: &Path) -> Result<()> {
    #[cfg(unix)]
    {
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| Error::write(dir, e))?;
    }
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

/// A temp-file name next to `path`, unique across processes and threads, that starts
/// with `.` and ends with `.tmp` so stale ones can be recognised and removed.
pub fn temp_path(path: &Path) -> Result<std::path::PathBuf> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let name = path
        .file_name()
        .ok_or_else(|| Error::Invalid(format!("{}: not a file path", path.display())))?;
    Ok(parent_dir(path).join(format!(
        ".{}.{}.{}.tmp",
        name.to_string_lossy(),
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )))
}

/// Writes `bytes` to a fresh temp file beside `path` and fsyncs it; the caller renames.
pub fn write_temp(path: &Path, bytes: &[u8]) -> Result<std::path::PathBuf> {
    let tmp = temp_path(path)?;
    let written = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .and_then(|mut f| {
            f.write_all(bytes)?;
            f.sync_all()
        });
    if let Err(e) = written {
        // Best effort: the write error is what matters.
        let _ = fs::remove_file(&tmp);
        return Err(Error::write(&tmp, e));
    }
    Ok(tmp)
}

/// Replaces `path` with `bytes` so that readers see the old file or the new one, never
/// a mix: written to a temporary file in the same folder, fsynced, then renamed over.
pub fn atomic_write(path: impl AsRef<Path>, bytes: &[u8]) -> Result<()> {
    let path = path.as_ref();
    let tmp = write_temp(path, bytes)?;
    if let Err(e) = fs::rename(&tmp, path) {
        let _ = fs::remove_file(&tmp);
        return Err(Error::write(path, e));
    }
    sync_dir(parent_dir(path))
}

/// Writes `text` to stdout and carries on if nobody reads it any more (`tune sweep |
/// head`): a sweep and a watch own children and files that must still be finished,
/// where `println!` would panic on the closed pipe.
pub fn print_out(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_limited_refuses_an_endless_file_without_reading_it_all() {
        let e = read_limited(Path::new("/dev/zero"), 1 << 20).unwrap_err();
        assert!(e.is_bad_input(), "{e}");
        assert!(e.to_string().contains("larger than 1 MiB"), "{e}");
    }

    #[test]
    fn atomic_write_replaces_and_leaves_no_temp() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.json");
        atomic_write(&p, b"one").unwrap();
        atomic_write(&p, b"two").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"two");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_write_failure_is_not_bad_input() {
        let e = atomic_write("/proc/tune-cannot-write-here", b"x").unwrap_err();
        assert!(!e.is_bad_input(), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let e = atomic_write(dir.path().join("missing/report.json"), b"x").unwrap_err();
        assert!(matches!(e, Error::Write { .. }), "{e}");
    }
}
