//! A real gain the drift withdrew, settled side by side (#31). A shell command plays a
//! job whose throughput is its `gain` parameter, on a "machine" that runs its 5th
//! invocation 1.6x fast: that is the baseline's run interleaved after the third trial, so
//! `gain=160`, 1.6x against the baseline run before it, reads 1.0x against the one after
//! it and the drift check withdraws it. The sweep then measures it again in alternating
//! pairs beside the baseline, where it is 1.6x, recommends it and confirms it. The
//! figures are the command's, not timed: the rule, not the machine, is under test.

use crate::cli;

use cli::{show, tune};
use serde_json::Value;

#[test]
fn a_gain_the_drift_withdrew_is_settled_in_pairs_and_recommended() {
    let d = tempfile::tempdir().unwrap();
    let spec = d.path().join("s.toml");
    std::fs::write(
        &spec,
        "name = \"settle\"\n[workload.command]\n\
         run = \"n=$(( $(cat n 2>/dev/null || echo 0) + 1 )); echo $n > n; r={gain}; : {pad}; \
         if [ $n = 5 ]; then r=$((r * 16 / 10)); fi; \
         for i in 1 2 3 4 5 6 7 8 9 10 11 12; do echo samples/s: $((r + i % 3)); done\"\n\
         metric_regex = 'samples/s: ([0-9.]+)'\n\
         [params]\ngain = [100, 160]\npad = [0, 1, 2, 3]\n\
         [search]\nstrategy = \"one-at-a-time\"\nrepeats = 1\ntimeout_s = 60\n",
    )
    .unwrap();
    let out = d.path().join("out");
    let o = tune()
        .current_dir(d.path())
        .arg("sweep")
        .arg(&spec)
        .arg("--out")
        .arg(&out)
        .env("TUNE_SAMPLE_MS", "0")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let r: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    let t = r["trials"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["label"] == "gain=160")
        .unwrap_or_else(|| panic!("no gain=160 trial: {r:#}"));
    // The set-up: the drift made it unsettled in the sweep (1.6x against the run before
    // it, about 1.0x against the fast run after it).
    let against: Vec<f64> = t["against"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["ratio"]["ratio"].as_f64().unwrap())
        .collect();
    assert!(
        against.iter().any(|x| *x > 1.4) && against.iter().any(|x| *x < 1.1),
        "the drift did not fall where planned: {against:?}\n{}",
        show(&o)
    );
    let settled = &t["settled"];
    assert_eq!(
        settled["pairs"],
        4,
        "not settled in pairs: {t:#}\n{}",
        show(&o)
    );
    let m = &t["ratio_vs_baseline"];
    assert!(
        m["significant"] == true && m["lo"].as_f64().unwrap() > 1.4,
        "the pairs measured {m}"
    );
    let rec = r["recommendations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["change"]["gain"] == "160")
        .unwrap_or_else(|| panic!("gain=160 not recommended: {:#}", r["recommendations"]));
    let conf = rec["confidence"].as_str().unwrap();
    assert!(
        !["withdrawn", "unconfirmed"].contains(&conf),
        "{conf}: {rec:#}\n{:#}",
        r["confirmation"]
    );
    assert!(
        ["matches", "better"].contains(&r["confirmation"]["verdict"].as_str().unwrap()),
        "{:#}",
        r["confirmation"]
    );
    let summary = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert!(
        summary.contains("measured again side by side") && summary.contains("(pairs)"),
        "summary.md does not say it was settled:\n{summary}"
    );
}
