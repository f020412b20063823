//! Issue #27, sizes: every size a spec, a flag or an environment variable sets is
//! bounded where it is read. A plan is counted, never built to be counted; a bad value
//! is one line naming it and its bound, exit 2, nothing written; and when tune itself
//! runs out of memory it says so instead of blaming the batch. Everything runs the real
//! binary, under a data-segment cap so a regression dies instead of eating the machine.

use crate::cli;

use std::fmt::Write as _;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use cli::{limit_data, output_within, refused, show, tune, wait_with_rusage};

/// The cap a refused spec runs under: the binary and a 1 MiB spec fit many times over.
const CAP: u64 = 1 << 30;

fn values(n: usize, f: impl Fn(usize) -> String) -> String {
    let v: Vec<String> = (0..n).map(f).collect();
    format!("[{}]", v.join(", "))
}

/// A command spec with three `[params]` of `n` values each.
fn params_spec(n: usize, strategy: &str) -> String {
    let mut s = String::from(
        "name = \"big\"\n[workload.command]\nrun = \"echo {a} {b} {c}\"\nmetric_json_key = \"k\"\n\n[params]\n",
    );
    for p in ["a", "b", "c"] {
        let _ = writeln!(s, "{p} = {}", values(n, |i| format!("\"{p}{i}\"")));
    }
    let _ = write!(s, "\n[search]\nstrategy = \"{strategy}\"\n");
    s
}

/// An engine spec with three knob lists of 100 values each (10^6 configurations).
fn knobs_spec(strategy: &str) -> String {
    format!(
        "name = \"big\"\n[workload]\nmodel = \"mlp\"\ndataset = \"synthetic\"\nsteps = 2\nwarmup = 0\n\
         device = \"cpu\"\nthreads = 1\n\n[knobs]\nbatch_size = {}\ngrad_accum = {}\nnum_workers = {}\n\n\
         [search]\nstrategy = \"{strategy}\"\n",
        values(100, |i| (i + 1).to_string()),
        values(100, |i| (i + 1).to_string()),
        values(100, |i| i.to_string()),
    )
}

/// The 1-based line of the first line of `text` that starts with `header`.
fn line_of(text: &str, header: &str) -> usize {
    text.lines().position(|l| l.starts_with(header)).unwrap() + 1
}

#[test]
fn plans_past_the_bound_are_refused_from_arithmetic_with_the_table() {
    let d = tempfile::tempdir().unwrap();
    let mut cases: Vec<(String, &str, &str)> = Vec::new();
    for strategy in ["grid", "halving"] {
        cases.push((params_spec(1000, strategy), "[params]", "at most 100000"));
        cases.push((knobs_spec(strategy), "[knobs]", "at most 100000"));
    }
    // One value list longer than any knob or parameter needs.
    cases.push((
        format!(
            "[workload.command]\nrun = \"echo {{a}}\"\nmetric_json_key = \"k\"\n[params]\na = {}\n",
            values(20_000, |i| i.to_string())
        ),
        "a = ",
        "at most 10000",
    ));
    // Trials that fit, repeats that do not.
    cases.push((
        params_spec(40, "grid")
            .replace("strategy = \"grid\"", "strategy = \"grid\"\nrepeats = 1000"),
        "repeats",
        "at most 1000000",
    ));
    // Few configurations, each carrying a long value: the plan's text is the bound.
    let long = "x".repeat(4000);
    let mut s = String::from("[workload.command]\nrun = \"echo {a} {b} {c} {l0} {l1} {l2} {l3} {l4} {l5} {l6} {l7} {l8} {l9}\"\nmetric_json_key = \"k\"\n[params]\n");
    for p in ["a", "b", "c"] {
        let _ = writeln!(s, "{p} = {}", values(40, |i| i.to_string()));
    }
    for i in 0..10 {
        let _ = writeln!(s, "l{i} = \"{long}{i}\"");
    }
    s.push_str("[search]\nstrategy = \"grid\"\n");
    cases.push((s, "[params]", "parameter values"));
    for (i, (text, header, bound)) in cases.iter().enumerate() {
        let spec = d.path().join(format!("s{i}.toml"));
        std::fs::write(&spec, text).unwrap();
        let out = d.path().join(format!("out{i}"));
        let child = limit_data(
            tune()
                .arg("sweep")
                .arg(&spec)
                .arg("--out")
                .arg(&out)
                .current_dir(d.path())
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
            CAP,
        )
        .spawn()
        .unwrap();
        let (code, peak, took) = wait_with_rusage(child, Duration::from_secs(60));
        println!("case {i}: exit {code:?}, peak {} MiB, {took:?}", peak >> 20);
        assert_eq!(code, Some(2), "case {i}");
        // Counted, not built: a refusal costs what reading the spec costs.
        assert!(took < Duration::from_secs(10), "case {i}: {took:?}");
        assert!(peak < 200 << 20, "case {i}: peak RSS {} MiB", peak >> 20);
        let o = output_within(
            limit_data(tune().arg("sweep").arg(&spec).arg("--out").arg(&out), CAP),
            Duration::from_secs(60),
        );
        let line = refused(&o);
        let at = format!("{}:{}:", spec.display(), line_of(text, header));
        assert!(line.contains(&at), "case {i}: '{line}' is not at {at}");
        assert!(line.contains(bound), "case {i}: '{line}' lacks {bound}");
        assert!(!out.exists(), "case {i}: output folder created");
    }
}

#[test]
fn tune_running_out_of_memory_itself_says_so() {
    let d = tempfile::tempdir().unwrap();
    // A report.json of 200 MB (sparse, so it costs no disk): under the read limit, over
    // the data cap, so reading it is an allocation failure of tune, not of a training run.
    let big = d.path().join("report.json");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(200 << 20)
        .unwrap();
    let o = output_within(
        limit_data(tune().arg("report").arg(&big), 128 << 20),
        Duration::from_secs(60),
    );
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("out of memory") && err.contains("tune itself"),
        "{err}"
    );
    assert!(!err.contains("batch"), "blames the batch: {err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

/// A quick engine spec: one trial of two steps, so an accepted value shows as exit 0.
fn tiny_spec(dir: &Path) -> std::path::PathBuf {
    let spec = dir.join("tiny.toml");
    std::fs::write(
        &spec,
        "name = \"tiny\"\n[workload]\nmodel = \"mlp\"\ndataset = \"synthetic\"\nbatch_size = 8\n\
         steps = 2\nwarmup = 0\ndevice = \"cpu\"\nthreads = 1\n",
    )
    .unwrap();
    spec
}

#[test]
fn sweep_environment_variables_are_bounded() {
    let d = tempfile::tempdir().unwrap();
    let spec = tiny_spec(d.path());
    for (i, (var, value)) in [
        ("TUNE_TRIAL_MEM_CAP_BYTES", "0"),
        ("TUNE_TRIAL_MEM_CAP_BYTES", "lots"),
        ("TUNE_TRIAL_MEM_CAP_BYTES", "1e9"),
        ("TUNE_TRIAL_MEM_CAP_BYTES", "99999999999999999999999"),
        ("TUNE_SAMPLE_MS", "often"),
        ("TUNE_SAMPLE_MS", "99999999999"),
        ("TUNE_SAMPLE_MS", "-5"),
    ]
    .into_iter()
    .enumerate()
    {
        let out = d.path().join(format!("out{i}"));
        let o = output_within(
            tune()
                .arg("sweep")
                .arg(&spec)
                .arg("--out")
                .arg(&out)
                .env(var, value),
            Duration::from_secs(120),
        );
        let line = refused(&o);
        assert!(
            line.contains(&format!("{var}=")) && line.contains("at most"),
            "{var}={value}: {line}"
        );
        assert!(!out.exists(), "{var}={value}: output folder created");
    }
}

/// A tiny `tune train` run.
const TRAIN: &[&str] = &[
    "train",
    "--model",
    "mlp",
    "--dataset",
    "synthetic",
    "--steps",
    "2",
    "--threads",
    "1",
    "--no-eval",
];

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

#[test]
fn launch_environment_variables_are_bounded() {
    let d = tempfile::tempdir().unwrap();
    let port = free_port().to_string();
    let base: Vec<(&str, &str)> = vec![
        ("WORLD_SIZE", "2"),
        ("RANK", "1"),
        ("LOCAL_RANK", "1"),
        ("MASTER_ADDR", "127.0.0.1"),
        ("MASTER_PORT", &port),
        ("TUNE_DIST_TIMEOUT", "3"),
    ];
    for (var, value) in [
        // Panicked in Duration::from_secs_f64 (exit 101).
        ("TUNE_DIST_TIMEOUT", "1e20"),
        // Silently meant "wait forever".
        ("TUNE_DIST_TIMEOUT", "1e18"),
        ("TUNE_DIST_TIMEOUT", "0"),
        ("TUNE_DIST_TIMEOUT", "inf"),
        ("WORLD_SIZE", "1000000000000"),
        ("RANK", "18446744073709551616"),
        ("LOCAL_RANK", "7"),
        ("MASTER_PORT", "0"),
        ("TUNE_DIST_PORT", "0"),
        ("TUNE_DIST_PORT", "70000"),
    ] {
        let mut c = tune();
        c.args(TRAIN)
            .args(["--parallel", "ddp", "--cache-dir"])
            .arg(d.path().join("cache"));
        for (k, v) in &base {
            c.env(k, v);
        }
        c.env(var, value);
        let line = refused(&output_within(&mut c, Duration::from_secs(30)));
        assert!(line.contains(var), "{var}={value}: {line}");
    }
}

#[test]
fn size_flags_are_bounded_in_one_line() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("w");
    let list = "1,".repeat(100);
    let cases: &[(&[&str], &str)] = &[
        (
            &["watch", "--interval", "18446744073709551615", "--", "true"],
            "--interval",
        ),
        (&["watch", "--interval", "0", "--", "true"], "--interval"),
        (
            &["watch", "--interval", "often", "--", "true"],
            "--interval",
        ),
        (
            &[TRAIN, &["--sample-interval", "99999999999"]].concat(),
            "--sample-interval",
        ),
        (
            &[
                "bench",
                "--what",
                "mlp,nonsense",
                "--runs",
                "1",
                "--steps",
                "1",
            ],
            "nonsense",
        ),
        (
            &["bench", "--what", "gemm", "--threads", &list[..199]],
            "--threads",
        ),
    ];
    for (args, needle) in cases {
        let o = output_within(
            tune()
                .args(*args)
                .env("HOME", d.path())
                .current_dir(d.path()),
            Duration::from_secs(60),
        );
        let line = refused(&o);
        assert!(line.contains(needle), "{args:?}: {line}");
        // Refused before any work: no benchmark row, no watch report.
        assert!(o.stdout.is_empty(), "{args:?}: {}", show(&o));
        assert!(
            !out.exists() && !d.path().join("reports").exists(),
            "{args:?}"
        );
    }
}
