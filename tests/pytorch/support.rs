//! Finding a Python with real PyTorch for the `pytorch_*` tests: `TUNE_PYTHON` names the
//! interpreter (`.ci/run` sets it to its virtual environment's). Without one that can
//! `import torch`, a test skips with the reason, or fails under `TUNE_REQUIRE_TORCH=1`.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The interpreter to run PyTorch scripts with, or None (after printing why) when the
/// test should skip.
pub fn python(test: &str) -> Option<PathBuf> {
    let why = match found() {
        Ok(p) => return Some(p.clone()),
        Err(why) => why,
    };
    if std::env::var("TUNE_REQUIRE_TORCH").is_ok_and(|v| v == "1") {
        panic!("{test}: TUNE_REQUIRE_TORCH=1 but {why}");
    }
    eprintln!("skipping {test}: {why}");
    None
}

/// TUNE_PYTHON if it can `import torch`, else why not. Asked once per test binary: each
/// answer is a Python start and `import torch` (8-20 s on a loaded 2-core machine, PyPI's
/// CUDA build), which every test of a binary paid before.
fn found() -> &'static Result<PathBuf, String> {
    static FOUND: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    FOUND.get_or_init(|| {
        let Some(p) = std::env::var_os("TUNE_PYTHON") else {
            return Err(
                "TUNE_PYTHON is not set (point it at a python with torch installed)".to_string(),
            );
        };
        let p = PathBuf::from(p);
        match Command::new(&p)
            .args(["-c", "import torch; print(torch.__version__)"])
            .output()
        {
            Ok(o) if o.status.success() => Ok(p),
            Ok(o) => Err(format!(
                "{} cannot import torch: {}",
                p.display(),
                String::from_utf8_lossy(&o.stderr)
                    .lines()
                    .last()
                    .unwrap_or("")
            )),
            Err(e) => Err(format!("{} does not run: {e}", p.display())),
        }
    })
}

/// A test script under tests/pytorch.
pub fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/pytorch")
        .join(name)
}

/// Holds the machine for one PyTorch test at a time. These tests measure timing (data
/// wait against compute, one configuration against another) on 2 cores: two of them
/// running side by side in one test binary would starve each other's loader workers and
/// measure the contention instead of the script.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Processes whose command line holds `tag` (the test's temp folder).
// Only the window tests look for leftover processes; the other crates that include this
// file do not.
#[allow(dead_code)]
pub fn alive_with(tag: &str) -> Vec<String> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(tag) && !cmd.contains("cargo") {
                found.push(format!("{}: {cmd}", e.file_name().to_string_lossy()));
            }
        }
    }
    found
}

/// A finished tune process's status and both streams, for assertion messages.
#[allow(dead_code)]
pub fn show(o: &std::process::Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Writes `spec` to DIR/spec.toml and runs `tune sweep` on it into DIR/out (cache in
/// DIR/cache, no colour): the sweep's output and its report.json (Null when none was
/// written). Every `pytorch_*` sweep test starts this way.
#[allow(dead_code)]
pub fn sweep_script(dir: &Path, spec: &str) -> (std::process::Output, serde_json::Value) {
    let path = dir.join("spec.toml");
    std::fs::write(&path, spec).unwrap();
    let out = dir.join("out");
    let o = Command::new(env!("CARGO_BIN_EXE_tune"))
        .arg("sweep")
        .arg(&path)
        .arg("--out")
        .arg(&out)
        .env("TUNE_CACHE_DIR", dir.join("cache"))
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let r = std::fs::read_to_string(out.join("report.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(serde_json::Value::Null);
    (o, r)
}

/// The trial of `r` labelled `label`.
#[allow(dead_code)]
pub fn trial<'a>(r: &'a serde_json::Value, label: &str) -> &'a serde_json::Value {
    r["trials"]
        .as_array()
        .and_then(|t| t.iter().find(|t| t["label"] == label))
        .unwrap_or_else(|| panic!("no trial {label:?} in {}", r["trials"]))
}
