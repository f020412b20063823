//! Sweeps of a real PyTorch script (PyPI's torch, on CPU): the advisor recommends a
//! configuration measured significantly faster even when no phase data explains it, and
//! the confirmation trial runs for it.

#[path = "pytorch/support.rs"]
mod support;

use std::process::Command;

use serde_json::Value;

use support::show;

#[test]
fn command_sweep_of_a_starved_script_recommends_more_workers_and_confirms() {
    let _serial = support::serial();
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
             [knobs]\nnum_workers = [0, 2]\n[search]\nrepeats = 1\nconfirm_repeats = 1\ntimeout_s = 120\n",
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

#[test]
fn python_sweep_injects_knobs_recommends_the_winner_and_confirms() {
    let _serial = support::serial();
    let Some(py) = support::python("python_sweep_injects_knobs_recommends_the_winner_and_confirms")
    else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let spec = d.path().join("spec.toml");
    // The script is run as it is: it passes num_workers=0 itself (its --workers default),
    // so the hooks must replace it per trial and say so.
    std::fs::write(
        &spec,
        format!(
            "name = \"torch-python\"\n[workload.python]\n\
             run = \"{} {} --cost-ms 2 --width 96 --batch 32 --steps 40\"\n\
             [knobs]\nnum_workers = [0, 2]\nzero_grad = [\"memset\", \"none\"]\n\
             [search]\nrepeats = 1\nconfirm_repeats = 1\ntimeout_s = 120\n",
            py.display(),
            support::script("train.py").display()
        ),
    )
    .unwrap();
    // Reading a batch (32 x 2 ms of sleep) costs about as much as computing it, so two
    // workers should nearly halve the step: at 0.5 ms a sample the baseline waited only
    // ~20% of its step and a clean CI run twice measured 1.17x, within noise. One repeat of
    // the default window (5 + 30 steps) per configuration keeps this under a minute, but a
    // run on a busy 2-core machine can still measure no significant winner. Then the
    // sweep is run once more, after printing what the first one measured, so a real
    // regression (no recommendation twice) still fails.
    let mut attempt = 0;
    let r: Value = loop {
        attempt += 1;
        let out = d.path().join(format!("out{attempt}"));
        let o = Command::new(env!("CARGO_BIN_EXE_tune"))
            .arg("sweep")
            .arg(&spec)
            .arg("--out")
            .arg(&out)
            .env("TUNE_CACHE_DIR", d.path().join("cache"))
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", show(&o));
        let r: Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap())
                .unwrap();
        let found = r["recommendations"]
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x["change"]["num_workers"] == "2"));
        if found || attempt == 2 {
            break r;
        }
        eprintln!(
            "attempt 1 found no num_workers=2 recommendation; it measured:\n{}",
            String::from_utf8_lossy(&o.stdout)
        );
    };
    let trials = r["trials"].as_array().unwrap();
    let base = trials.iter().find(|t| t["label"] == "baseline").unwrap();
    let w2 = trials
        .iter()
        .find(|t| t["label"] == "num_workers=2")
        .unwrap();
    assert_eq!(base["status"], "ok", "{base}");
    // Phases come from the hooks: the baseline waits for data, two workers much less.
    let wait = |t: &Value| t["phase_share"]["data_wait"].as_f64().unwrap_or(0.0);
    assert!(
        // Above the data-wait rule's 5% (the baseline waits for about half of its step).
        wait(base) > 0.05 && wait(w2) < wait(base) / 2.0,
        "{base}\n{w2}"
    );
    // The script passes num_workers=0 itself: the trial's 2 is applied and said as an
    // override, never as "not applicable".
    assert!(
        w2["overrides"]["num_workers"]
            .as_str()
            .unwrap_or("")
            .contains("your script sets num_workers=0"),
        "{w2}"
    );
    assert!(w2["not_applicable"]["num_workers"].is_null(), "{w2}");
    let recs = r["recommendations"].as_array().unwrap();
    let rec = recs
        .iter()
        .find(|x| x["change"]["num_workers"] == "2")
        .unwrap_or_else(|| panic!("no num_workers=2 recommendation in {recs:?}"));
    assert!(
        rec["pytorch"].as_str().unwrap().contains("num_workers=2"),
        "{rec}"
    );
    assert!(rec["expected_gain"]["lo"].as_f64().unwrap() > 1.0, "{rec}");
    let c = &r["confirmation"];
    assert_eq!(c["trial"]["status"], "ok", "{c}");
    assert_eq!(c["knobs"]["num_workers"], 2, "{c}");
}
