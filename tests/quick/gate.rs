//! `tune gate`: the statistics on seeded synthetic step times (false-alarm rate and
//! power), and the CLI on real report.json files: verdicts, outputs and bad input.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;
use tune::gate::{compare, Metric, Policy, Side};
use tune::results::record::Repeat;
use tune::stats::SplitMix64;

// ---------------------------------------------------------------- synthetic samples

const SEEDED_TRIALS: u64 = 200;

/// How a simulated machine times a step.
#[derive(Clone, Copy)]
struct Noise {
    /// Per-step coefficient of variation, drawn per seeded trial in [lo, hi].
    cv: (f64, f64),
    /// Standard deviation of each repeat's own level: a process's luck with caches,
    /// frequency and neighbours.
    repeat_sd: f64,
}

/// 2-3% CV per step plus a 0.5% level shift per repeat: what a quiet machine shows.
const REALISTIC: Noise = Noise {
    cv: (0.02, 0.03),
    repeat_sd: 0.005,
};

/// Repeats of one configuration: `warmup` slow steps, then `steps` steady ones around
/// `mean` seconds with per-step variation `cv`.
fn repeats(
    rng: &mut SplitMix64,
    mean: f64,
    cv: f64,
    noise: Noise,
    n: usize,
    steps: usize,
) -> Vec<Repeat> {
    (0..n)
        .map(|_| {
            let level = mean * (1.0 + noise.repeat_sd * rng.next_gaussian());
            let warmup = 3;
            let step_times = (0..warmup)
                .map(|_| level * 1.6)
                .chain((0..steps).map(|_| level * (1.0 + cv * rng.next_gaussian())))
                .collect();
            Repeat {
                step_times,
                warmup,
                samples_per_step: 32,
                peak_total_bytes: 22 << 20,
                ..Repeat::default()
            }
        })
        .collect()
}

/// How many of the seeded baseline/current pairs fail the gate; `slowdown` multiplies
/// the current step times (1.05 = 5% slower).
fn failures(slowdown: f64, noise: Noise, policy: &Policy, metric: Metric, use_floor: bool) -> u64 {
    let n = (0..SEEDED_TRIALS)
        .filter(|&seed| {
            let mut rng = SplitMix64::new(0x6a7e_0000 + seed);
            // One machine: both reports share its per-step variation.
            let cv = noise.cv.0 + (noise.cv.1 - noise.cv.0) * rng.next_f64();
            let b = repeats(&mut rng, 0.010, cv, noise, 3, 30);
            let c = repeats(&mut rng, 0.010 * slowdown, cv, noise, 3, 30);
            let side = |r: &[Repeat]| {
                let mut s = Side::measured(r);
                if !use_floor {
                    s.time_noise = None;
                }
                s
            };
            let o = compare(metric, &side(&b), &side(&c), policy, seed).unwrap();
            o.verdict.fails()
        })
        .count() as u64;
    // Shown with --nocapture: the measured rates behind the assertions.
    eprintln!(
        "{metric:?} x{slowdown:.3} cv {:?} repeat sd {} threshold {} floor {use_floor}: {n}/{SEEDED_TRIALS} fail",
        noise.cv, noise.repeat_sd, policy.max_regression
    );
    n
}

/// The default policy at another threshold. The bootstrap interval is only shown, never
/// part of the verdict, so fewer resamples keep 200 seeded trials quick without changing
/// a single outcome.
fn at(max_regression: f64) -> Policy {
    Policy {
        max_regression,
        resamples: 200,
        ..Policy::default()
    }
}

fn default_policy() -> Policy {
    at(Policy::default().max_regression)
}

#[test]
fn a_a_passes_in_at_least_99_percent() {
    let f = failures(1.0, REALISTIC, &default_policy(), Metric::SamplesPerS, true);
    assert!(f <= 2, "A/A failed {f} of {SEEDED_TRIALS}");
    let f = failures(1.0, REALISTIC, &default_policy(), Metric::StepMs, true);
    assert!(f <= 2, "A/A (step_ms) failed {f} of {SEEDED_TRIALS}");
}

#[test]
fn the_test_alone_keeps_its_false_alarm_rate_on_independent_steps() {
    // Threshold 0 and no noise floor: only the Mann-Whitney test decides. With steps
    // independent (no per-repeat level), false alarms stay near alpha = 1%.
    let iid = Noise {
        cv: (0.02, 0.03),
        repeat_sd: 0.0,
    };
    let f = failures(1.0, iid, &at(0.0), Metric::SamplesPerS, false);
    assert!(f <= 4, "A/A at threshold 0 failed {f} of {SEEDED_TRIALS}");
}

#[test]
fn a_five_percent_slowdown_fails_in_at_least_95_percent() {
    for metric in [Metric::SamplesPerS, Metric::StepMs] {
        let f = failures(1.05, REALISTIC, &default_policy(), metric, true);
        assert!(
            f >= 190,
            "{metric:?}: 5% slowdown caught {f} of {SEEDED_TRIALS}"
        );
    }
}

#[test]
fn at_its_threshold_a_slowdown_fails_about_half_the_time() {
    // The verdict compares the point estimate with the threshold: a true 5% slowdown
    // against a 5% threshold is a coin toss (here in throughput terms, 1 - 1/1.05 = 4.8%).
    // To catch a slowdown reliably, set the threshold below it (the default 3% for 5%).
    let f = failures(1.05, REALISTIC, &at(0.05), Metric::StepMs, true);
    assert!((40..=160).contains(&f), "{f} of {SEEDED_TRIALS}");
}

#[test]
fn a_twenty_percent_slowdown_always_fails() {
    let f = failures(1.2, REALISTIC, &default_policy(), Metric::SamplesPerS, true);
    assert_eq!(f, SEEDED_TRIALS);
}

#[test]
fn a_speedup_never_fails() {
    for (speedup, policy) in [(1.2, default_policy()), (1.05, at(0.0)), (1.01, at(0.0))] {
        let f = failures(1.0 / speedup, REALISTIC, &policy, Metric::SamplesPerS, true);
        assert_eq!(f, 0, "{speedup}x faster failed {f} times");
    }
}

#[test]
fn small_slowdowns_within_the_threshold_pass() {
    let f = failures(
        1.01,
        REALISTIC,
        &default_policy(),
        Metric::SamplesPerS,
        true,
    );
    assert!(
        f <= 2,
        "a 1% slowdown failed the 3% gate {f} of {SEEDED_TRIALS} times"
    );
}

#[test]
fn the_noise_floor_prevents_false_alarms_on_a_noisy_machine() {
    // Each repeat (a separate process) lands 5% (sd) off: the pooled step-time test is
    // then overconfident, and only the recorded spread between repeats keeps A/A quiet.
    let noisy = Noise {
        cv: (0.02, 0.03),
        repeat_sd: 0.05,
    };
    let without = failures(1.0, noisy, &default_policy(), Metric::SamplesPerS, false);
    let with = failures(1.0, noisy, &default_policy(), Metric::SamplesPerS, true);
    assert!(
        without >= 30,
        "without the floor only {without} false alarms"
    );
    assert!(
        with <= 2,
        "with the floor still {with} false alarms of {SEEDED_TRIALS}"
    );
    // A large slowdown still fails on that machine.
    let f = failures(1.5, noisy, &default_policy(), Metric::SamplesPerS, true);
    assert!(
        f >= 190,
        "a 50% slowdown on the noisy machine caught {f} times"
    );
}

// ---------------------------------------------------------------- the CLI

const BASELINE: &str = "reports/ci-baseline/report.json";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn tune(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tune"))
        .args(args)
        .current_dir(repo())
        .output()
        .expect("run tune")
}

fn show(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn baseline() -> Value {
    serde_json::from_str(&std::fs::read_to_string(repo().join(BASELINE)).unwrap()).unwrap()
}

fn write(dir: &Path, name: &str, v: &Value) -> String {
    let p = dir.join(name);
    std::fs::write(&p, serde_json::to_string(v).unwrap()).unwrap();
    p.to_str().unwrap().to_string()
}

fn trials(v: &mut Value) -> &mut Vec<Value> {
    v["trials"].as_array_mut().unwrap()
}

/// Every step time of every trial multiplied by `k` (the spread between repeats, and so
/// the noise floor, is unchanged).
fn scaled(mut v: Value, k: f64) -> Value {
    for t in trials(&mut v) {
        for r in t["repeats"].as_array_mut().unwrap() {
            for s in r["step_times"].as_array_mut().unwrap() {
                *s = Value::from(s.as_f64().unwrap() * k);
            }
        }
    }
    v
}

fn gate(base: &str, cur: &str, extra: &[&str]) -> Output {
    let mut args = vec!["gate", "--baseline", base, "--current", cur];
    args.extend(extra);
    tune(&args)
}

#[test]
fn the_committed_baseline_passes_against_itself_with_every_output() {
    let d = tempfile::tempdir().unwrap();
    let (md, xml) = (d.path().join("gate.md"), d.path().join("gate.xml"));
    let o = gate(
        BASELINE,
        BASELINE,
        &[
            "--metric",
            "samples_per_s,step_ms,peak_bytes",
            "--md",
            md.to_str().unwrap(),
            "--junit",
            xml.to_str().unwrap(),
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.starts_with("tune gate: PASS"), "{out}");
    assert!(out.contains("baseline noise floor"), "{out}");
    let n = baseline()["trials"].as_array().unwrap().len();
    let xml = std::fs::read_to_string(xml).unwrap();
    assert_eq!(xml.matches("<testcase ").count(), 3 * n, "{xml}");
    assert!(
        xml.contains("failures=\"0\"") && !xml.contains("<failure"),
        "{xml}"
    );
    let md = std::fs::read_to_string(md).unwrap();
    assert!(md.starts_with("## tune gate: PASS"), "{md}");
    assert_eq!(md.matches("| pass |").count(), 3 * n, "{md}");

    let j = gate(BASELINE, BASELINE, &["--json"]);
    assert_eq!(j.status.code(), Some(0), "{}", show(&j));
    let v: Value = serde_json::from_slice(&j.stdout).unwrap();
    assert_eq!(v["verdict"], "pass");
    let c = &v["checks"][0];
    assert_eq!(c["metric"], "samples_per_s");
    assert_eq!(c["outcome"]["ratio"], 1.0);
    assert!(v["baseline"]["noise_floor"]["trials"].as_u64().unwrap() >= 1);
}

#[test]
fn a_slower_current_report_fails_with_exit_1_and_a_junit_failure() {
    let d = tempfile::tempdir().unwrap();
    let cur = write(d.path(), "slow.json", &scaled(baseline(), 10.0));
    let xml = d.path().join("gate.xml");
    let o = gate(BASELINE, &cur, &["--junit", xml.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.starts_with("tune gate: REGRESSION"), "{out}");
    assert!(out.contains("90.0% slower, significant"), "{out}");
    let xml = std::fs::read_to_string(xml).unwrap();
    assert!(xml.contains("<failure message="), "{xml}");

    // The same data as the baseline is ten times faster: improved, never a failure.
    let fast = write(d.path(), "fast.json", &scaled(baseline(), 0.1));
    let o = gate(BASELINE, &fast, &["--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .all(|c| c["verdict"] == "improved"));
}

#[test]
fn memory_growth_and_failed_trials_fail_and_labels_are_escaped() {
    let d = tempfile::tempdir().unwrap();
    let mut v = baseline();
    for t in trials(&mut v) {
        for r in t["repeats"].as_array_mut().unwrap() {
            let p = r["peak_total_bytes"].as_u64().unwrap();
            r["peak_total_bytes"] = Value::from(p * 2);
        }
    }
    let cur = write(d.path(), "mem.json", &v);
    let o = gate(BASELINE, &cur, &["--metric", "peak_bytes"]);
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("100.0% more memory"));
    // Throughput is unchanged, so the default metric passes.
    assert_eq!(gate(BASELINE, &cur, &[]).status.code(), Some(0));

    let mut v = baseline();
    let t = &mut trials(&mut v)[0];
    t["status"] = Value::from("crashed");
    t["error"] = Value::from("panicked at <src/x.rs> & \"quoted\"\u{1b}[0m");
    t["label"] = Value::from("a<b>&\"c\"");
    let cur = write(d.path(), "crash.json", &v);
    let (xml, md) = (d.path().join("g.xml"), d.path().join("g.md"));
    let o = gate(
        BASELINE,
        &cur,
        &[
            "--junit",
            xml.to_str().unwrap(),
            "--md",
            md.to_str().unwrap(),
        ],
    );
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("ended as crashed"));
    let xml = std::fs::read_to_string(xml).unwrap();
    assert!(
        xml.contains("name=\"a&lt;b&gt;&amp;&quot;c&quot; samples_per_s\""),
        "{xml}"
    );
    assert!(
        xml.contains("&lt;src/x.rs&gt; &amp; &quot;quoted&quot;[0m"),
        "{xml}"
    );
    assert!(!xml.contains('\u{1b}') && !xml.contains("<src"), "{xml}");
    assert!(xml.contains("type=\"failed\""), "{xml}");
}

#[test]
fn an_older_1x_report_without_a_noise_floor_is_read_and_said_so() {
    let d = tempfile::tempdir().unwrap();
    let mut v = baseline();
    v["schema_version"] = Value::from("1.0");
    v.as_object_mut().unwrap().remove("noise_floor");
    let old = write(d.path(), "old.json", &v);
    let o = gate(&old, BASELINE, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("baseline has no noise floor"),
        "{}",
        show(&o)
    );
}

/// Runs the gate and expects exit 2 with `needle` in its one-line error.
fn bad(base: &str, cur: &str, extra: &[&str], needle: &str) {
    let o = gate(base, cur, extra);
    assert_eq!(o.status.code(), Some(2), "{}", show(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(needle), "expected '{needle}' in: {err}");
    assert!(o.stdout.is_empty(), "{}", show(&o));
}

#[test]
fn bad_input_exits_2_with_a_clear_message() {
    let d = tempfile::tempdir().unwrap();
    let missing = d.path().join("nope.json");
    let missing = missing.to_str().unwrap();
    bad(missing, BASELINE, &[], "cannot read the baseline report");
    bad(BASELINE, missing, &[], "cannot read the current report");

    let p = d.path().join("broken.json");
    std::fs::write(&p, "{\"schema_version\": \"1.1\", \"trials\": [").unwrap();
    bad(
        BASELINE,
        p.to_str().unwrap(),
        &[],
        "current report: not a JSON report",
    );

    for (version, needle) in [
        ("3.0", "newer than this tune reads"),
        ("0.9", "older major"),
    ] {
        let mut v = baseline();
        v["schema_version"] = Value::from(version);
        let f = write(d.path(), "version.json", &v);
        bad(&f, BASELINE, &[], needle);
    }

    let mut v = baseline();
    for t in trials(&mut v) {
        t["knobs"]["batch_size"] = Value::from(48);
    }
    let disjoint = write(d.path(), "disjoint.json", &v);
    bad(BASELINE, &disjoint, &[], "no matching configurations");
    bad(BASELINE, &disjoint, &[], "batch_size=48");

    let mut v = baseline();
    v["spec"]["workload"]["model"] = Value::from("cnn-small");
    let other = write(d.path(), "other.json", &v);
    bad(BASELINE, &other, &[], "model cnn-small");

    bad(
        BASELINE,
        BASELINE,
        &["--max-regression", "5"],
        "--max-regression",
    );
    let o = gate(BASELINE, BASELINE, &["--metric", "loss"]);
    assert_eq!(o.status.code(), Some(2), "{}", show(&o));

    // Nothing is written when the input is bad.
    let md = d.path().join("never.md");
    let o = gate(BASELINE, &disjoint, &["--md", md.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(!md.exists());
}

#[test]
fn a_real_sweep_records_its_noise_floor_and_gates_against_itself() {
    let d = tempfile::tempdir().unwrap();
    let spec = d.path().join("spec.toml");
    std::fs::write(
        &spec,
        "name = \"noise\"\n[workload]\nmodel = \"mlp\"\ndataset = \"synthetic\"\nbatch_size = 16\n\
         steps = 8\nwarmup = 1\ndevice = \"cpu\"\nthreads = 1\n\n[knobs]\nzero_grad = [\"memset\", \"none\"]\n\n\
         [search]\nrepeats = 2\ntimeout_s = 60\n",
    )
    .unwrap();
    let out = d.path().join("out");
    let o = tune(&[
        "sweep",
        spec.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let report = out.join("report.json");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(v["schema_version"], tune::results::model::SCHEMA_VERSION);
    let n = &v["noise_floor"];
    assert_eq!(
        (n["trials"].as_u64(), n["repeats"].as_u64()),
        (Some(2), Some(2)),
        "{n}"
    );
    let (med, max) = (n["median"].as_f64().unwrap(), n["max"].as_f64().unwrap());
    assert!(med >= 0.0 && med <= max, "{n}");
    // A sweep folder stands for its report.json.
    let r = out.to_str().unwrap();
    let o = gate(r, r, &["--metric", "samples_per_s,peak_bytes"]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("current noise floor"));
}
