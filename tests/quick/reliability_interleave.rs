//! Interleaved baseline runs across a kill and `--resume` (#31): a sweep of more than
//! five trials runs the baseline again after every three, and each of those runs has an
//! id fixed by its place in the plan. Killed mid-way and resumed, the sweep keeps every
//! line it had journaled, runs none of the baseline's runs twice, and its interleave
//! schedule is the one an uninterrupted sweep has. A cheap shell command workload (no
//! PyTorch, no engine): the schedule, not the figures, is under test.

use crate::cli;

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use cli::{output_within, show, tune};
use serde_json::Value;

fn journal(out: &Path) -> Vec<String> {
    std::fs::read_to_string(out.join("journal.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

fn trial_ids(lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["type"] == "trial")
        .filter_map(|v| v["id"].as_str().map(str::to_string))
        .collect()
}

#[test]
fn a_killed_sweep_of_eight_trials_resumes_its_interleave_without_running_a_baseline_twice() {
    let d = tempfile::tempdir().unwrap();
    // Eight plan trials (the baseline rate=100 and seven more): the baseline runs again
    // after the 3rd and the 6th. The run of rate=105 (the 5th after the baseline) hangs
    // the first time, and the sweep is killed there.
    let spec = d.path().join("s.toml");
    std::fs::write(
        &spec,
        "name = \"inter\"\n[workload.command]\n\
         run = \"r={rate}; echo $r >> runs.log; if [ $r = 105 ] && [ ! -e hung ]; then touch hung; sleep 60; fi; \
         for i in 1 2 3 4 5 6 7 8 9 10 11 12; do echo samples/s: $((r + i % 3)); done\"\n\
         metric_regex = 'samples/s: ([0-9.]+)'\n\
         [params]\nrate = [100, 101, 102, 103, 104, 105, 106, 107]\n[search]\nrepeats = 1\ntimeout_s = 120\n",
    )
    .unwrap();
    let out = d.path().join("out");
    let mut child = tune()
        .current_dir(d.path())
        .arg("sweep")
        .arg(&spec)
        .arg("--out")
        .arg(&out)
        .env("TUNE_SAMPLE_MS", "0")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let hung = d.path().join("hung");
    let until = Instant::now() + Duration::from_secs(60);
    while !hung.exists() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(hung.exists(), "the trial rate=105 never started");
    child.kill().unwrap();
    child.wait().unwrap();
    let before = journal(&out);
    let ids_before = trial_ids(&before);
    // Baseline, three trials, the baseline again, the 4th: the 5th was running.
    assert_eq!(ids_before.len(), 6, "{ids_before:#?}");
    assert!(
        ids_before[4].starts_with("baseline-again:1:"),
        "{ids_before:#?}"
    );

    let mut c = tune();
    c.current_dir(d.path())
        .arg("sweep")
        .arg(&spec)
        .arg("--out")
        .arg(&out)
        .arg("--resume")
        .env("TUNE_SAMPLE_MS", "0");
    let o = output_within(&mut c, Duration::from_secs(120));
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let after = journal(&out);
    // Nothing measured is lost: the journal before the kill is the start of the one after.
    assert_eq!(
        &after[..before.len()],
        &before[..],
        "the journal was rewritten"
    );
    let ids = trial_ids(&after);
    let plan: Vec<&String> = ids.iter().filter(|i| !i.starts_with("confirm:")).collect();
    // No id twice: the baseline and its interleaved runs ran once each.
    let mut unique = plan.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(plan.len(), unique.len(), "run twice: {plan:#?}");
    // The schedule of an uninterrupted sweep: again after the 3rd and the 6th trial.
    let again: Vec<usize> = plan
        .iter()
        .enumerate()
        .filter(|(_, i)| i.starts_with("baseline-again:"))
        .map(|(k, _)| k)
        .collect();
    assert_eq!(again, vec![4, 8], "{plan:#?}");
    assert!(plan[8].starts_with("baseline-again:2:"), "{plan:#?}");
    assert_eq!(plan.len(), 10, "{plan:#?}");
    // Only the interrupted trial ran again; each finished one ran once (107, the fastest,
    // runs again in the confirmation, after the plan).
    let runs = std::fs::read_to_string(d.path().join("runs.log")).unwrap();
    let plan_runs: Vec<&str> = runs.lines().take(11).collect();
    let of = |rate: &str| plan_runs.iter().filter(|l| **l == rate).count();
    assert_eq!(of("105"), 2, "{runs}");
    for rate in ["101", "102", "103", "104", "106", "107"] {
        assert_eq!(of(rate), 1, "rate={rate}: {runs}");
    }
    // The baseline: the plan's run and its two interleaved runs, none twice.
    assert_eq!(of("100"), 3, "{runs}");
    let r: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    let trials = r["trials"].as_array().unwrap();
    assert_eq!(trials.len(), 8, "{}", r["trials"]);
    assert!(
        trials.iter().all(|t| t["status"] == "ok"),
        "{}",
        r["trials"]
    );
    // The drift is measured over the plan's three baseline runs (and any beside the
    // confirmation).
    assert!(
        r["drift"]["runs"].as_u64().unwrap_or(0) >= 3,
        "{}",
        r["drift"]
    );
}
