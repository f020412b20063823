//! `tune dash`, `tune sweep --tui` and `tune bench --what dash` without a terminal: bad
//! input and a missing terminal are refused with exit 2 before anything is written.

use std::path::Path;
use std::process::{Command, Output, Stdio};

const TUNE: &str = env!("CARGO_BIN_EXE_tune");

fn run(args: &[&str], cwd: &Path) -> Output {
    Command::new(TUNE)
        .args(args)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .env_remove("TUNE_TRIAL_FAULT")
        .output()
        .unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn write_spec(dir: &Path) -> String {
    let p = dir.join("one.toml");
    std::fs::write(
        &p,
        "name = \"one\"\n[workload]\nmodel = \"mlp\"\ndataset = \"synthetic\"\nbatch_size = 16\n\
         steps = 4\nwarmup = 1\ndevice = \"cpu\"\nthreads = 1\n[knobs]\nbatch_size = [16]\n",
    )
    .unwrap();
    p.display().to_string()
}

#[test]
fn dash_refuses_bad_input_and_a_missing_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let o = run(&["dash", "no/such/dir"], d);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("no/such/dir: no such sweep folder or report.json"));

    let o = run(&["dash"], d);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("no sweep folder given"),
        "{}",
        stderr(&o)
    );

    let spec = write_spec(d);
    let o = run(&["sweep", &spec, "--out", "out"], d);
    assert!(o.status.success(), "{}", stderr(&o));
    // Found without arguments (the newest under reports/), and by path; either way the
    // missing terminal is the problem, said before the terminal is touched.
    std::fs::create_dir(d.join("reports")).unwrap();
    std::fs::rename(d.join("out"), d.join("reports/one")).unwrap();
    for args in [
        &["dash"][..],
        &["dash", "reports/one"],
        &["dash", "reports/one/report.json"],
    ] {
        let o = run(args, d);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("needs an interactive terminal"),
            "{}",
            stderr(&o)
        );
        assert!(o.stdout.is_empty(), "no escape sequences written");
    }
}

#[test]
fn sweep_tui_without_a_terminal_is_refused_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let spec = write_spec(d);
    let o = run(&["sweep", &spec, "--out", "out", "--tui"], d);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("tune sweep --tui needs an interactive terminal"));
    let o = run(&["sweep", &spec, "--out", "out", "--tui", "--json"], d);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--json and the dashboard do not go together"));
    assert!(!d.join("out").exists(), "nothing written");
}

#[test]
fn bench_dash_times_a_frame() {
    let dir = tempfile::tempdir().unwrap();
    let o = run(
        &["bench", "--what", "dash", "--runs", "1", "--json"],
        dir.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["workload"], "dash-frame");
    assert_eq!(
        (v["trials"].as_u64(), v["devices"].as_u64()),
        (Some(100), Some(4))
    );
    assert_eq!(v["frames"].as_u64(), Some(100));
    let median = v["median_ms"].as_f64().unwrap();
    assert!(
        median > 0.0 && median <= v["max_ms"].as_f64().unwrap(),
        "{v}"
    );
}
