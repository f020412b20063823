//! What the host gives a run by default: its compute threads and its cache folder.

use std::path::PathBuf;

pub fn default_threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// `$TUNE_CACHE_DIR`, else `$XDG_CACHE_HOME/tune`, else `~/.cache/tune`, else a temp dir.
pub fn default_cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("TUNE_CACHE_DIR") {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(d).join("tune");
    }
    if let Some(h) = std::env::var_os("HOME") {
        return PathBuf::from(h).join(".cache").join("tune");
    }
    std::env::temp_dir().join("tune-cache")
}
