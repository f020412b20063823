//! Sweeps of a real PyTorch script (PyPI's torch, on CPU): the advisor recommends a
//! configuration measured significantly faster even when no phase data explains it, and
//! the confirmation trial runs for it.

#[path = "pytorch/support.rs"]
mod support;

use std::process::Command;

use serde_json::Value;

fn show(o: &std::process::Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn command_sweep_of_a_starved_script_recommends_more_workers_and_confirms() {
    let Some(py) =
        support::python("command_sweep_of_a_starved_script_recommends_more_workers_and_confirms")
    else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let spec = d.path().join("spec.toml");
    std::fs::write(
        &spec,
        format!(
            "name = \"torch-workers\"\n[workload.command]\n\
             run = \"{} {} --workers {{num_workers}}\"\nmetric_json_key = \"samples_per_s\"\n\
             [knobs]\nnum_workers = [0, 2]\n[search]\nrepeats = 1\ntimeout_s = 120\n",
            py.display(),
            support::script("train.py").display()
        ),
    )
    .unwrap();
    let out = d.path().join("out");
    let o = Command::new(env!("CARGO_BIN_EXE_tune"))
        .arg("sweep")
        .arg(&spec)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", show(&o));
    let r: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    let recs = r["recommendations"].as_array().unwrap();
    let rec = recs
        .iter()
        .find(|x| x["change"]["num_workers"] == "2")
        .unwrap_or_else(|| panic!("no num_workers=2 recommendation in {recs:?}\n{}", show(&o)));
    let gain = &rec["expected_gain"];
    assert!(gain["lo"].as_f64().unwrap() > 1.0, "{rec}");
    assert!(
        rec["pytorch"].as_str().unwrap().contains("num_workers=2"),
        "{rec}"
    );
    assert!(
        rec["evidence"].as_str().unwrap().contains("num_workers=2"),
        "{rec}"
    );
    let c = &r["confirmation"];
    assert_eq!(c["knobs"]["num_workers"], 2, "{c}");
    assert_eq!(c["trial"]["status"], "ok", "{c}");
    assert!(
        c["trial"]["ratio_vs_baseline"]["ratio"].as_f64().unwrap() > 1.0,
        "{c}"
    );
    let md = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert!(md.contains("num_workers=2"), "{md}");
}
