//! Issue #28, trials that prove their hardware was clean, on the host side: VM steal time
//! planted through `TUNE_PROC_STAT` (a test-only file read instead of `/proc/stat`, which
//! the trial's own command rewrites as a hypervisor would move the counter) contaminates
//! the repeat; `[search] hardware_reruns` bounds the re-runs and is checked when the spec
//! is read; a contaminated repeat is left out of the figures while a clean one remains,
//! and `tune gate` says when its figures rest on contaminated repeats (and fails with
//! `--fail-on-contaminated`). The confirmation's alternating pairs do the same pair by
//! pair. Real binary, real processes and files. The GPU side
//! (throttling, a foreign process, energy) is in tests/gpu_nvml.rs on the NVML stand-in.

use crate::cli;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use cli::{output_within, refused, show, tune};
use serde_json::Value;

/// The aggregate line before any steal: 1200 jiffies, none stolen.
const QUIET: &str = "cpu  100 0 100 1000 0 0 0 0\ncpu0 100 0 100 1000 0 0 0 0\n";

/// A command that, on its first run only (or every run with `always`), moves the planted
/// steal counter by 900 jiffies while the total moves by 900: all of the repeat's CPU
/// time was stolen.
fn spec(dir: &Path, name: &str, always: bool, extra: &str) -> PathBuf {
    let bump =
        "printf 'cpu  100 0 100 1000 0 0 0 %s\\\\ncpu0 100 0 100 1000 0 0 0 %s\\\\n' $s $s > stat";
    let emit = "for i in 1 2 3 4 5 6 7 8 9 10 11 12; do echo samples/s: 50; done";
    let run = if always {
        format!("n=$(cat count 2>/dev/null || echo 0); n=$((n + 1)); echo $n > count; s=$((n * 900)); {bump}; {emit}")
    } else {
        format!("if [ ! -e bumped ]; then touch bumped; s=900; {bump}; fi; {emit}")
    };
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(
        &path,
        format!(
            "name = \"{name}\"\n[workload.command]\nrun = \"{run}\"\n\
             metric_regex = 'samples/s: ([0-9.]+)'\n[search]\nrepeats = 2\n{extra}"
        ),
    )
    .unwrap();
    std::fs::write(dir.join("stat"), QUIET).unwrap();
    path
}

fn sweep(dir: &Path, spec: &Path, out: &Path) -> Output {
    let mut c = tune();
    c.arg("sweep")
        .arg(spec)
        .arg("--out")
        .arg(out)
        .env("TUNE_SAMPLE_MS", "0")
        .env("TUNE_PROC_STAT", dir.join("stat"));
    output_within(&mut c, Duration::from_secs(120))
}

/// `tune gate` of `current` against `baseline`, with `extra` flags.
fn gate_of(baseline: &Path, current: &Path, extra: &[&str]) -> Output {
    let mut c = tune();
    c.args(["gate", "--baseline"])
        .arg(baseline)
        .arg("--current")
        .arg(current)
        .args(extra);
    output_within(&mut c, Duration::from_secs(60))
}

fn report(out: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap()
}

#[test]
fn planted_steal_time_contaminates_the_repeat_which_is_run_again_and_left_out() {
    let d = tempfile::tempdir().unwrap();
    let s = spec(d.path(), "steal", false, "hardware_reruns = 1\n");
    let out = d.path().join("out");
    let o = sweep(d.path(), &s, &out);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("repeat 1 was contaminated (VM steal time 100.0%")
            && err.contains("running it again"),
        "{}",
        show(&o)
    );
    let r = report(&out);
    let t = &r["trials"][0];
    // Two repeats asked for, one re-run: three measured, none lost.
    assert_eq!(t["repeats"].as_array().unwrap().len(), 3, "{t}");
    let hw = t["hardware"].as_array().unwrap();
    assert_eq!(hw.len(), 3, "{t}");
    assert!(
        hw[0]["reasons"][0]
            .as_str()
            .unwrap()
            .contains("steal time 100.0%"),
        "{}",
        hw[0]
    );
    assert_eq!(hw[0]["rerun"], true);
    assert!((hw[0]["steal_pct"].as_f64().unwrap() - 100.0).abs() < 1e-9);
    for h in &hw[1..] {
        assert!(h["reasons"].as_array().unwrap().is_empty(), "{h}");
    }
    let c = &t["contamination"];
    assert_eq!(c["repeats"], serde_json::json!([0]), "{t}");
    assert_eq!(c["in_figures"], false);
    let summary = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert!(summary.contains("1 of 3 repeats contaminated"), "{summary}");
    assert!(summary.contains("left out of the figures"), "{summary}");
}

#[test]
fn gate_says_when_figures_rest_on_contaminated_repeats_and_can_fail_on_it() {
    let d = tempfile::tempdir().unwrap();
    let s = spec(d.path(), "dirty", true, "hardware_reruns = 1\n");
    let out = d.path().join("out");
    let o = sweep(d.path(), &s, &out);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let r = report(&out);
    let t = &r["trials"][0];
    // The one re-run allowed was spent and every repeat stayed contaminated: kept, loudly.
    assert_eq!(t["repeats"].as_array().unwrap().len(), 3, "{t}");
    assert_eq!(t["contamination"]["in_figures"], true, "{t}");
    let note = t["contamination"]["note"].as_str().unwrap();
    assert!(note.contains("NO CLEAN REPEAT REMAINS"), "{note}");
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("NO CLEAN REPEAT REMAINS"), "{}", show(&o));

    let gate = |extra: &[&str]| gate_of(&out, &out, extra);
    let warn = gate(&[]);
    assert_eq!(warn.status.code(), Some(0), "{}", show(&warn));
    let text = String::from_utf8_lossy(&warn.stdout);
    assert!(
        text.contains("rest on contaminated repeats"),
        "{}",
        show(&warn)
    );
    assert!(text.contains("--fail-on-contaminated"), "{}", show(&warn));
    let fail = gate(&["--fail-on-contaminated"]);
    assert_eq!(fail.status.code(), Some(1), "{}", show(&fail));
    assert!(
        String::from_utf8_lossy(&fail.stdout).contains("CONTAMINATED"),
        "{}",
        show(&fail)
    );
}

#[test]
fn hardware_rerun_bound_and_load_threshold_are_checked_when_the_spec_is_read() {
    let d = tempfile::tempdir().unwrap();
    for (extra, want) in [
        ("hardware_reruns = 11\n", "search.hardware_reruns 11"),
        ("hardware_reruns = -1\n", "search.hardware_reruns"),
        ("hardware_reruns = \"two\"\n", "search.hardware_reruns"),
        ("max_foreign_cpu_pct = 0\n", "search.max_foreign_cpu_pct 0"),
        (
            "max_foreign_cpu_pct = 101\n",
            "search.max_foreign_cpu_pct 101",
        ),
    ] {
        let s = spec(d.path(), "bad", false, extra);
        let out = d.path().join("never");
        let o = sweep(d.path(), &s, &out);
        let line = refused(&o);
        assert!(
            line.contains(want) && line.contains("bad.toml"),
            "{extra}: {line}"
        );
        assert!(!out.exists(), "{extra}: nothing written");
    }
    // In range, both keys are accepted.
    let s = spec(
        d.path(),
        "ok",
        false,
        "hardware_reruns = 10\nmax_foreign_cpu_pct = 100\n",
    );
    let out = d.path().join("ok-out");
    let o = sweep(d.path(), &s, &out);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
}

/// A sweep of `b = [0, 1]` (b=1 twice as fast) whose confirmation runs are watched for
/// steal: every run counts itself in `count` and logs its `b` in runs.log; the runs whose
/// number is in `stolen` move the planted steal counter (all of their time stolen) and,
/// when `starved`, measure 20 samples/s, as a run the hypervisor starved would.
fn confirm_spec(dir: &Path, stolen: &str, starved: bool, extra: &str) -> PathBuf {
    let slow = if starved { " r=20;" } else { "" };
    let bump =
        "printf 'cpu  100 0 100 1000 0 0 0 %s\\\\ncpu0 100 0 100 1000 0 0 0 %s\\\\n' $s $s > stat";
    let run = format!(
        "n=$(cat count 2>/dev/null || echo 0); n=$((n + 1)); echo $n > count; \
         echo {{b}} >> runs.log; \
         if [ {{b}} = 1 ]; then r=200; else r=100; fi; \
         case \\\" {stolen} \\\" in *\\\" $n \\\"*) s=$((n * 900)); {bump};{slow}; esac; \
         for i in 1 2 3 4 5 6 7 8 9 10 11 12; do echo samples/s: $((r + i % 3)); done"
    );
    let path = dir.join("confirm.toml");
    std::fs::write(
        &path,
        format!(
            "name = \"confirm\"\n[workload.command]\nrun = \"{run}\"\n\
             metric_regex = 'samples/s: ([0-9.]+)'\n[params]\nb = [0, 1]\n\
             [search]\nrepeats = 1\ntimeout_s = 60\n{extra}"
        ),
    )
    .unwrap();
    std::fs::write(dir.join("stat"), QUIET).unwrap();
    path
}

/// Issue #28: the confirmation's runs record their hardware as a sweep's repeats do. Two
/// of its pairs are contaminated (the change's run starved by planted steal, at a tenth of
/// its speed): each is flagged with its reason, run again within `hardware_reruns`, and
/// left out of the verdict, which then rests on four clean pairs at 2x ("matches"; with
/// the two starved pairs counted, at 0.2x, it would be "not_confirmed").
#[test]
fn a_contaminated_confirmation_pair_is_flagged_run_again_and_left_out_of_the_verdict() {
    let d = tempfile::tempdir().unwrap();
    // Runs 1-2 are the plan (b=0, b=1); the confirmation's pairs alternate AB, BA, so
    // run 4 is pair 1's change and, after pair 1 runs again (5, 6), run 7 is pair 2's.
    let s = confirm_spec(d.path(), "4 7", true, "hardware_reruns = 2\n");
    let out = d.path().join("out");
    let o = sweep(d.path(), &s, &out);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let runs = std::fs::read_to_string(d.path().join("runs.log")).unwrap();
    let runs: Vec<&str> = runs.lines().collect();
    assert_eq!(
        runs,
        ["0", "1", "0", "1", "0", "1", "1", "0", "1", "0", "0", "1", "1", "0"],
        "plan, then pair 1 twice, pair 2 twice, pairs 3 and 4"
    );
    let err = String::from_utf8_lossy(&o.stderr);
    // Numbered in the order the pairs ran, as the report numbers them: pair 2 is pair
    // 1's re-run.
    for p in [1, 3] {
        assert!(
            err.contains(&format!(
                "'confirm: b=1' pair {p} was contaminated (change: VM steal time 100.0%"
            )) && err.contains("running the pair again"),
            "{}",
            show(&o)
        );
    }
    let r = report(&out);
    let c = &r["confirmation"];
    for side in ["trial", "baseline_rerun"] {
        let t = &c[side];
        assert_eq!(t["repeats"].as_array().unwrap().len(), 6, "{side}: {t}");
        let hw = t["hardware"].as_array().unwrap();
        assert_eq!(hw.len(), 6, "{side}: {t}");
        // In the order they ran, re-runs included: pairs 1 and 3 were contaminated. Both
        // runs of each ran again; only the starved one has reasons.
        for (i, h) in hw.iter().enumerate() {
            let bad = i == 0 || i == 2;
            assert_eq!(h["rerun"], bad, "{side} run {}: {h}", i + 1);
            let reasons = h["reasons"].as_array().unwrap();
            let starved = side == "trial" && bad;
            assert_eq!(!reasons.is_empty(), starved, "{side} run {}: {h}", i + 1);
        }
    }
    assert_eq!(
        c["contamination"]["repeats"],
        serde_json::json!([0, 2]),
        "{c:#}"
    );
    assert_eq!(c["contamination"]["in_figures"], false, "{c:#}");
    let summary = c["summary"].as_str().unwrap();
    assert!(
        summary.contains("2 of 6 pairs contaminated (pair 1: change: VM steal time 100.0%")
            && summary.contains("| pair 3: change: VM steal time 100.0%")
            && summary.contains("left out of the verdict"),
        "{summary}"
    );
    assert_eq!(c["verdict"], "matches", "{c:#}");
    let m = &c["trial"]["ratio_vs_baseline"];
    assert!(m["lo"].as_f64().unwrap() > 1.5, "{m}");
    // The gate names the pairs left out, and passes under --fail-on-contaminated: the
    // verdict rests on clean pairs only.
    let g = gate_of(&out, &out, &["--fail-on-contaminated"]);
    assert_eq!(g.status.code(), Some(0), "{}", show(&g));
    let text = String::from_utf8_lossy(&g.stdout);
    for side in ["baseline", "current"] {
        assert!(
            text.contains(&format!(
                "confirmation of b=1 ({side} report) [pass]: the confirmation (matches) left 2 contaminated pair(s) out"
            )),
            "{}",
            show(&g)
        );
    }
}

/// When every pair of a confirmation is contaminated and no re-run is allowed, its
/// verdict rests on contaminated runs and every face says so loudly: the confirmation's
/// sentence, and the recommendation's verdict ("confirmed only on contaminated runs").
#[test]
fn a_confirmation_with_no_clean_pair_says_so_in_every_face() {
    let d = tempfile::tempdir().unwrap();
    let s = confirm_spec(d.path(), "3 4 5 6", false, "confirm_repeats = 2\n");
    let out = d.path().join("out");
    let o = sweep(d.path(), &s, &out);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("'confirm: b=1' pair 2 was contaminated") && err.contains("no re-run left"),
        "{}",
        show(&o)
    );
    let r = report(&out);
    let c = &r["confirmation"];
    assert_eq!(c["contamination"]["in_figures"], true, "{c:#}");
    assert_eq!(
        c["contamination"]["repeats"],
        serde_json::json!([0, 1]),
        "{c:#}"
    );
    let loud = "NO CLEAN PAIR REMAINS: the verdict rests on contaminated runs";
    assert!(c["summary"].as_str().unwrap().contains(loud), "{c:#}");
    let stdout = String::from_utf8_lossy(&o.stdout).to_string();
    let md = std::fs::read_to_string(out.join("summary.md")).unwrap();
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    for (face, text) in [
        ("terminal", &stdout),
        ("summary.md", &md),
        ("report.html", &html),
    ] {
        assert!(text.contains(loud), "{face}:\n{text}");
        assert!(
            text.contains("confirmed only on contaminated runs"),
            "{face}:\n{text}"
        );
    }
    gate_fails_on_a_contaminated_confirmation(d.path(), &out, &r);
}

/// `tune gate` over a report whose recommendation's confirmation rests on contaminated
/// pairs (its configurations' repeats are clean): the verdict lines say so and the gate
/// passes with a warning; under `--fail-on-contaminated` it fails (exit 1) in the table,
/// markdown and JUnit alike. The same for a change confirmed alone: the report with the
/// contamination moved from the combination to an `alone[]` entry.
fn gate_fails_on_a_contaminated_confirmation(dir: &Path, out: &Path, r: &Value) {
    for t in r["trials"].as_array().unwrap() {
        assert!(t.get("contamination").is_none(), "plan runs are clean: {t}");
    }
    let warn = gate_of(out, out, &[]);
    assert_eq!(warn.status.code(), Some(0), "{}", show(&warn));
    let text = String::from_utf8_lossy(&warn.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with("confirmation of b=1 (current report) [pass]: "))
        .unwrap_or_else(|| panic!("no verdict line for the confirmation: {}", show(&warn)));
    assert!(
        line.contains("rests on contaminated runs: NO CLEAN PAIR REMAINS"),
        "{line}"
    );
    assert!(
        text.contains("pass --fail-on-contaminated"),
        "{}",
        show(&warn)
    );
    let md = dir.join("gate.md");
    let junit = dir.join("gate.xml");
    let fail = gate_of(
        out,
        out,
        &[
            "--fail-on-contaminated",
            "--md",
            md.to_str().unwrap(),
            "--junit",
            junit.to_str().unwrap(),
        ],
    );
    assert_eq!(fail.status.code(), Some(1), "{}", show(&fail));
    let text = String::from_utf8_lossy(&fail.stdout);
    assert!(
        text.contains("REGRESSION: 2 of 4 check(s) failed")
            && text.contains(
                "confirmation of b=1 (baseline report) [FAILED]: CONTAMINATED (--fail-on-contaminated)"
            )
            && text.contains("confirmation of b=1 (current report) [FAILED]"),
        "{}",
        show(&fail)
    );
    let md = std::fs::read_to_string(&md).unwrap();
    assert!(
        md.contains("confirmation of b=1 (current report) **FAILED**: CONTAMINATED"),
        "{md}"
    );
    let junit = std::fs::read_to_string(&junit).unwrap();
    assert!(
        junit.contains("failures=\"2\"") && junit.contains("type=\"contaminated\""),
        "{junit}"
    );

    // The contamination on one change confirmed alone instead of on the combination.
    let mut alone = r.clone();
    let c = alone["confirmation"].as_object_mut().unwrap();
    let x = c.remove("contamination").unwrap();
    c.insert(
        "alone".into(),
        serde_json::json!([{
            "rule": "fastest",
            "label": "b=1",
            "predicted": null,
            "measured": null,
            "verdict": "not_confirmed",
            "summary": "confirmed alone",
            "contamination": x,
        }]),
    );
    let path = dir.join("alone.json");
    std::fs::write(&path, serde_json::to_string(&alone).unwrap()).unwrap();
    // Against the clean-confirmation report of the same sweep: only the current one says it.
    let mut clean = r.clone();
    clean["confirmation"]
        .as_object_mut()
        .unwrap()
        .remove("contamination");
    let base = dir.join("clean.json");
    std::fs::write(&base, serde_json::to_string(&clean).unwrap()).unwrap();
    let g = gate_of(&base, &path, &["--fail-on-contaminated"]);
    assert_eq!(g.status.code(), Some(1), "{}", show(&g));
    let text = String::from_utf8_lossy(&g.stdout);
    assert!(
        text.contains("confirmation of b=1 alone (current report) [FAILED]")
            && !text.contains("(baseline report)"),
        "{}",
        show(&g)
    );
    // Neither report's confirmation contaminated: the gate passes.
    let g = gate_of(&base, &base, &["--fail-on-contaminated"]);
    assert_eq!(g.status.code(), Some(0), "{}", show(&g));
    assert!(
        !String::from_utf8_lossy(&g.stdout).contains("confirmation of"),
        "{}",
        show(&g)
    );
}
