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

/// `[search] budget_s` bounds a whole sweep of a job whose runs would each take minutes
/// (forever.py with a 1000-step window of 200 ms steps: 200 s a run, 14 runs with the
/// confirmation): it ends near its minute, each run measured a share of it, and the
/// report, the CLI and summary.md say what did not run and how to go on. Without the
/// budget this sweep would take about 50 minutes (#31).
#[test]
fn a_budget_bounds_a_sweep_of_long_runs_and_names_what_did_not_run() {
    let _serial = support::serial();
    let Some(py) =
        support::python("a_budget_bounds_a_sweep_of_long_runs_and_names_what_did_not_run")
    else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let spec = format!(
        "name = \"budget\"\n[workload.python]\n\
         run = \"{} {} --cost-ms 25 --workers {{num_workers}}\"\nwarmup = 150\nsteps = 1000\n\
         [knobs]\nnum_workers = [0, 1, 2]\n[search]\nrepeats = 2\ntimeout_s = 600\nbudget_s = 60\n",
        py.display(),
        support::script("forever.py").display()
    );
    let began = std::time::Instant::now();
    let (o, r) = support::sweep_script(d.path(), &spec);
    let took = began.elapsed().as_secs_f64();
    assert!(o.status.success(), "{}", show(&o));
    // The last run may start with a little time left: it measures its share and stops
    // at a step boundary; start-up, warm-up and the polite stop come on top.
    assert!(
        took < 60.0 + 40.0,
        "the sweep took {took:.0} s\n{}",
        show(&o)
    );
    let b = &r["budget"];
    assert_eq!(b["budget_s"], 60, "{b}");
    let not_run: Vec<&str> = b["not_run"]
        .as_array()
        .map(|v| v.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    assert!(!not_run.is_empty(), "{b}\n{}", show(&o));
    // Each run measured a share of the minute, not its 1000-step window.
    let trials = r["trials"].as_array().cloned().unwrap_or_default();
    assert!(!trials.is_empty(), "{}", show(&o));
    for t in &trials {
        for rep in t["repeats"].as_array().into_iter().flatten() {
            let measured: f64 = rep["step_times"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_f64)
                .sum();
            let steps = rep["step_times"].as_array().map_or(0, Vec::len);
            assert!(
                measured < 60.0 && steps < 1000,
                "{}: {steps} steps, {measured:.1} s measured",
                t["label"]
            );
        }
    }
    // The spec's 150 warm-up steps (30 s of a 200 ms step) were cut to half of each
    // run's share, and each trial says so.
    for t in trials.iter().filter(|t| t["status"] == "ok") {
        let note = t["error"].as_str().unwrap_or_default();
        assert!(
            note.contains("cut short by tune's time budget") && !note.contains("150 warm-up"),
            "{}: {note}",
            t["label"]
        );
    }
    let sentence = "Time budget: budget_s = 60 was spent after";
    let cli = String::from_utf8_lossy(&o.stdout);
    let md = std::fs::read_to_string(d.path().join("out/summary.md")).unwrap_or_default();
    assert!(cli.contains(sentence), "{}", show(&o));
    assert!(md.contains(sentence) && md.contains("--resume"), "{md}");
    // A change the budget left unconfirmed is said so, and is at most low.
    for rec in r["recommendations"].as_array().into_iter().flatten() {
        if rec["kind"] == "change" && r["confirmation"]["verdict"] == "not_run" {
            assert!(
                matches!(
                    rec["confidence"].as_str(),
                    Some("low" | "unconfirmed" | "withdrawn")
                ),
                "{rec}"
            );
            assert!(md.contains("not confirmed: the time budget"), "{md}");
        }
    }
}

/// A DataLoader whose workers hand over their batches together (forever.py, 25 ms per
/// sample, 8 per batch): with 4 workers three steps of four are instant and one waits
/// for the round. Each figure tune gives, the progress line's, the repeat's and the
/// trial's, is the job's real pace within a third, and the gain is about 4x; the median
/// step alone said 4267 samples/s where the window ran 164, a 109x "gain" (#31).
#[test]
fn a_bursty_loader_is_measured_at_its_real_pace() {
    let _serial = support::serial();
    let Some(py) = support::python("a_bursty_loader_is_measured_at_its_real_pace") else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let spec = format!(
        "name = \"bursty\"\n[workload.python]\n\
         run = \"{} {} --cost-ms 25 --workers {{num_workers}}\"\nsteps = 32\n\
         [knobs]\nnum_workers = [0, 4]\n[search]\nrepeats = 1\nconfirm_repeats = 1\n",
        py.display(),
        support::script("forever.py").display()
    );
    let (o, r) = support::sweep_script(d.path(), &spec);
    assert!(o.status.success(), "{}", show(&o));
    let four = support::trial(&r, "num_workers=4");
    let rep = &four["repeats"][0];
    let times: Vec<f64> = rep["step_times"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_f64)
        .collect();
    let steady = &times[rep["warmup"].as_u64().unwrap() as usize..];
    let instant = steady.iter().filter(|t| **t < 0.02).count();
    // The set-up: most steps are instant, so their median is not the job's pace.
    assert!(2 * instant > steady.len(), "not bursty: {steady:?}");
    let real = 8.0 * steady.len() as f64 / steady.iter().sum::<f64>();
    let near = |x: f64| (0.67 * real..=1.5 * real).contains(&x);
    let rep_sps = rep["samples_per_s"].as_f64().unwrap();
    let trial_sps = four["samples_per_s"]["median"].as_f64().unwrap();
    assert!(
        near(rep_sps) && near(trial_sps),
        "real {real:.1} samples/s, the repeat said {rep_sps:.1}, the trial {trial_sps:.1}"
    );
    let x = four["ratio_vs_baseline"]["ratio"].as_f64().unwrap();
    assert!(
        (2.5..6.0).contains(&x),
        "num_workers=4 at {x}x the baseline"
    );
}
