//! `tune watch --steps N` / `--duration S` on a PyTorch script that trains "forever"
//! (tests/pytorch/forever.py, issue #26): the watch ends, the job with it (no process
//! left), and the report is written. Real PyTorch (PyPI's, on CPU), real processes.

#[path = "pytorch/support.rs"]
mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use support::show;

#[test]
fn watch_steps_ends_the_job_and_writes_the_report() {
    let _serial = support::serial();
    let Some(py) = support::python("watch_steps_ends_the_job_and_writes_the_report") else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("out");
    let tag = d.path().display().to_string();
    let t0 = Instant::now();
    let o = Command::new(env!("CARGO_BIN_EXE_tune"))
        .args(["watch", "--steps", "15", "--out"])
        .arg(&out)
        .arg("--")
        .arg(&py)
        .arg(support::script("forever.py"))
        .args(["--workers", "2", "--tag", &tag])
        .env("TUNE_CACHE_DIR", d.path().join("cache"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", show(&o));
    assert!(t0.elapsed() < Duration::from_secs(90), "{:?}", t0.elapsed());
    let r: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    assert_eq!(r["python"]["steps"], 15, "{}", r["python"]);
    let notes = r["notes"].to_string();
    assert!(notes.contains("the watch ended after 15 steps"), "{notes}");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        support::alive_with(&tag),
        Vec::<String>::new(),
        "processes left behind"
    );
    // --duration on the same forever job.
    let out = d.path().join("out2");
    let o = Command::new(env!("CARGO_BIN_EXE_tune"))
        .args(["watch", "--duration", "6", "--out"])
        .arg(&out)
        .arg("--")
        .arg(&py)
        .arg(support::script("forever.py"))
        .args(["--tag", &tag])
        .env("TUNE_CACHE_DIR", d.path().join("cache"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", show(&o));
    let r: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    assert!(
        r["notes"].to_string().contains("--duration 6"),
        "{}",
        r["notes"]
    );
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        support::alive_with(&tag),
        Vec::<String>::new(),
        "processes left behind"
    );
}
