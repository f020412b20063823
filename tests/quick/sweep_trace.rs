//! `tune sweep` writes trace.json beside report.json (#31): the trace-event format that
//! Perfetto loads, one process per trial and one thread per repeat, each measured step a
//! complete event of its recorded duration; report.html draws step time per step.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

fn read(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

#[test]
fn a_sweep_traces_every_step_of_every_repeat() {
    let d = tempfile::tempdir().unwrap();
    let spec = d.path().join("spec.toml");
    std::fs::write(
        &spec,
        "name = \"traced\"\n[workload]\nmodel = \"mlp\"\ndataset = \"synthetic\"\nbatch_size = 16\n\
         steps = 6\nwarmup = 1\ndevice = \"cpu\"\nthreads = 1\n\n[knobs]\nzero_grad = [\"memset\", \"none\"]\n\n\
         [search]\nrepeats = 2\ntimeout_s = 60\n",
    )
    .unwrap();
    let out = d.path().join("out");
    let o = Command::new(env!("CARGO_BIN_EXE_tune"))
        .env_remove("TUNE_TRIAL_FAULT")
        .arg("sweep")
        .arg(&spec)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r = read(&out.join("report.json"));
    let t = read(&out.join("trace.json"));
    let ev = t["traceEvents"].as_array().expect("traceEvents");
    for (i, trial) in r["trials"].as_array().unwrap().iter().enumerate() {
        let pid = i + 1;
        let name = ev
            .iter()
            .find(|e| e["ph"] == "M" && e["name"] == "process_name" && e["pid"] == pid)
            .unwrap_or_else(|| panic!("no process name for trial {pid}"));
        assert!(name["args"]["name"]
            .as_str()
            .unwrap()
            .contains(trial["label"].as_str().unwrap()));
        for (k, rep) in trial["repeats"].as_array().unwrap().iter().enumerate() {
            let steps: Vec<f64> = rep["step_times"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_f64().unwrap())
                .collect();
            let x: Vec<&Value> = ev
                .iter()
                .filter(|e| e["ph"] == "X" && e["pid"] == pid && e["tid"] == k)
                .collect();
            assert_eq!(x.len(), steps.len(), "trial {pid} repeat {k}");
            let mut end = 0.0;
            for (e, d) in x.iter().zip(&steps) {
                assert!(
                    (e["dur"].as_f64().unwrap() - d * 1e6).abs() < 0.01,
                    "{e} {d}"
                );
                let ts = e["ts"].as_f64().unwrap();
                assert!(ts + 0.01 >= end, "steps overlap: {e}");
                end = ts + e["dur"].as_f64().unwrap();
            }
        }
    }
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("id=\"fig-steps\""), "no step-time chart");
}
