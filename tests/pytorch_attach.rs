//! `tune watch --pid` on a running PyTorch job that tune did not start: no hooks there,
//! so tune samples its Python stacks; a data-starved script's samples fall mostly in
//! DataLoader iteration.

#[path = "pytorch/support.rs"]
mod support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use serde_json::Value;

#[test]
fn attaching_to_a_starved_script_attributes_most_samples_to_data_loading() {
    let _serial = support::serial();
    let Some(py) =
        support::python("attaching_to_a_starved_script_attributes_most_samples_to_data_loading")
    else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    // Reading a batch takes 16 × 2 ms; the model's step well under that.
    let mut job = Command::new(&py)
        .arg(support::script("train.py"))
        .args(["--cost-ms", "2", "--steps", "150", "--window", "5"])
        .env("TUNE_BRIDGE", "0")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Attach once it trains (its first line comes after two windows of steps).
    let mut lines = BufReader::new(job.stdout.take().unwrap()).lines();
    let first = lines.next();
    assert!(
        matches!(first, Some(Ok(_))),
        "the script printed nothing: {first:?}"
    );
    let drain = std::thread::spawn(move || lines.count());
    let out = d.path().join("attach");
    let o = Command::new(env!("CARGO_BIN_EXE_tune"))
        .args(["watch", "--interval", "50", "--out"])
        .arg(&out)
        .args(["--pid", &job.id().to_string()])
        .output()
        .unwrap();
    let status = job.wait().unwrap();
    drain.join().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success() && status.success(), "{stderr}");
    let r: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    let st = &r["stacks"];
    assert!(st["samples"].as_u64().unwrap_or(0) >= 50, "{st}\n{stderr}");
    let wait = st["phase_share"]["data_wait"].as_f64().unwrap_or(0.0);
    assert!(wait > 0.5, "{st}");
    let f: Vec<&Value> = r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["kind"] == "data_wait")
        .collect();
    assert_eq!(f.len(), 1, "{r}");
    assert!(stderr.contains("stack samples:"), "{stderr}");
}
