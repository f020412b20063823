//! `tune sweep` end to end: real child processes on tiny workloads (mlp on synthetic
//! data, a few steps), failure modes injected through the `TUNE_TRIAL_FAULT` test hook.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

fn tune() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tune"));
    c.env_remove("TUNE_TRIAL_FAULT")
        .env_remove("TUNE_TRIAL_MEM_CAP_BYTES");
    c
}

/// A spec over mlp/synthetic with the given `[knobs]` and `[search]` bodies.
fn write_spec(dir: &Path, name: &str, knobs: &str, search: &str) -> PathBuf {
    let text = format!(
        "name = {name:?}\n[workload]\nmodel = \"mlp\"\ndataset = \"synthetic\"\nbatch_size = 16\n\
         steps = 6\nwarmup = 1\ndevice = \"cpu\"\nthreads = 1\n\n[knobs]\n{knobs}\n\n[search]\n{search}\n"
    );
    let p = dir.join("spec.toml");
    std::fs::write(&p, text).unwrap();
    p
}

fn sweep(spec: &Path, out: &Path, extra: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = tune();
    c.arg("sweep").arg(spec).arg("--out").arg(out).args(extra);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

fn report_json(out: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap()
}

fn trial<'a>(r: &'a Value, label: &str) -> &'a Value {
    r["trials"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["label"] == label)
        .unwrap_or_else(|| panic!("no trial {label} in {r}"))
}

/// Ids of the plan's trials in the journal (confirmation runs left out).
fn journal_trial_ids(out: &Path) -> Vec<String> {
    std::fs::read_to_string(out.join("journal.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["type"] == "trial")
        .map(|v| v["id"].as_str().unwrap().to_string())
        .filter(|id| !id.starts_with("confirm:"))
        .collect()
}

fn show(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn sweep_writes_journal_and_reports() {
    let d = tempfile::tempdir().unwrap();
    let spec = write_spec(
        d.path(),
        "tiny",
        "zero_grad = [\"memset\", \"none\"]",
        "repeats = 2\ntimeout_s = 60",
    );
    let out = d.path().join("out");
    let o = sweep(&spec, &out, &["--json"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    for f in ["journal.jsonl", "report.json", "report.html", "summary.md"] {
        assert!(out.join(f).exists(), "{f} missing");
    }
    // One JSON line per trial, then the paths. When a change is recommended, its
    // confirmation (the combination and a baseline re-run) adds two trial lines.
    let stdout = String::from_utf8_lossy(&o.stdout);
    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|v: &Value| {
            !v["id"]
                .as_str()
                .is_some_and(|id| id.starts_with("confirm:"))
        })
        .collect();
    assert_eq!(lines.len(), 3, "{stdout}");
    assert_eq!(lines[0]["status"], "ok");
    assert!(lines[2]["report"].is_string());

    let r = report_json(&out);
    assert_eq!(r["schema_version"], tune::results::model::SCHEMA_VERSION);
    assert_eq!(r["trials"].as_array().unwrap().len(), 2);
    let none = trial(&r, "zero_grad=none");
    assert_eq!(none["status"], "ok");
    assert_eq!(none["repeats"].as_array().unwrap().len(), 2);
    let sps = &none["samples_per_s"];
    assert!(sps["lo"].as_f64().unwrap() <= sps["median"].as_f64().unwrap());
    assert!(none["ratio_vs_baseline"]["ratio"].as_f64().unwrap() > 0.0);
    assert_eq!(r["baseline"], trial(&r, "baseline")["id"]);
    assert!(r["environment"]["tune_version"].is_string());
    assert_eq!(journal_trial_ids(&out).len(), 2);

    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("<title>tune sweep: tiny</title>"));
    assert!(html.contains("<svg"));
    // Self-contained: nothing is fetched from elsewhere.
    assert!(!html.contains("src=\"http") && !html.contains("href=\"http"));
    let md = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert!(md.contains("| zero_grad=none"), "{md}");

    // Without --resume an existing journal is refused, and nothing is touched.
    let again = sweep(&spec, &out, &[], &[]);
    assert_eq!(again.status.code(), Some(2), "{}", show(&again));
    assert!(String::from_utf8_lossy(&again.stderr).contains("--resume"));
}

#[test]
fn failing_trials_get_their_status_and_the_sweep_goes_on() {
    let d = tempfile::tempdir().unwrap();
    let spec = write_spec(
        d.path(),
        "faults",
        "batch_size = [16, 8, 12, 20, 24]",
        "timeout_s = 3",
    );
    let out = d.path().join("out");
    let fault = "panic@batch_size=8;abort@batch_size=12;hang@batch_size=20;alloc@batch_size=24";
    let t = Instant::now();
    let o = sweep(
        &spec,
        &out,
        &[],
        &[
            ("TUNE_TRIAL_FAULT", fault),
            ("TUNE_TRIAL_MEM_CAP_BYTES", "400000000"),
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert!(t.elapsed() < Duration::from_secs(30));
    let r = report_json(&out);
    let status = |l: &str| trial(&r, l)["status"].as_str().unwrap().to_string();
    let error = |l: &str| trial(&r, l)["error"].as_str().unwrap_or("").to_string();
    assert_eq!(status("baseline"), "ok");
    assert_eq!(status("batch_size=8"), "crashed");
    assert!(
        error("batch_size=8").contains("panic"),
        "{}",
        error("batch_size=8")
    );
    assert_eq!(status("batch_size=12"), "crashed");
    assert!(
        error("batch_size=12").contains("SIGABRT"),
        "{}",
        error("batch_size=12")
    );
    assert_eq!(status("batch_size=20"), "timeout");
    assert_eq!(status("batch_size=24"), "oom");
    assert!(
        error("batch_size=24").contains("cap"),
        "{}",
        error("batch_size=24")
    );
    let md = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert!(md.contains("Trials that did not complete"));
    assert!(String::from_utf8_lossy(&o.stdout).contains("4 of 5 trials did not complete"));
}

#[test]
fn amp_and_autotune_trials_run_and_all_failed_exits_1() {
    let d = tempfile::tempdir().unwrap();
    let spec = write_spec(
        d.path(),
        "knobs",
        "amp = [\"off\", \"bf16\"]\nautotune = [false, true]",
        "strategy = \"one-at-a-time\"\ntimeout_s = 60",
    );
    let out = d.path().join("out");
    let o = sweep(&spec, &out, &[], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let r = report_json(&out);
    for label in ["amp=bf16", "autotune=true"] {
        let t = trial(&r, label);
        assert_eq!(t["status"], "ok", "{t}");
    }

    let out2 = d.path().join("out2");
    let o = sweep(&spec, &out2, &[], &[("TUNE_TRIAL_FAULT", "panic")]);
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    assert!(out2.join("report.html").exists());
}

#[test]
fn killed_sweep_resumes_without_rerunning_finished_trials() {
    let d = tempfile::tempdir().unwrap();
    let spec = write_spec(
        d.path(),
        "resume",
        "zero_grad = [\"memset\", \"none\"]\nbatch_size = [16, 8]",
        "timeout_s = 60",
    );
    let out = d.path().join("out");
    let mut child = tune()
        .arg("sweep")
        .arg(&spec)
        .arg("--out")
        .arg(&out)
        .env("TUNE_TRIAL_FAULT", "slow")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while journal_trial_ids(&out).is_empty() {
        assert!(Instant::now() < deadline, "no trial finished in time");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let before = journal_trial_ids(&out);
    assert!(!before.is_empty() && before.len() < 3, "{before:?}");
    assert!(!out.join("report.json").exists());

    let o = sweep(&spec, &out, &["--resume"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let after = journal_trial_ids(&out);
    assert_eq!(after.len(), 3, "{after:?}");
    assert_eq!(
        &after[..before.len()],
        &before[..],
        "finished trials were rerun"
    );
    let mut unique = after.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), 3);
    let r = report_json(&out);
    assert_eq!(r["trials"].as_array().unwrap().len(), 3);
    assert!(r["trials"]
        .as_array()
        .unwrap()
        .iter()
        .all(|t| t["status"] == "ok"));
}

#[test]
fn torn_journal_line_is_tolerated_on_resume() {
    let d = tempfile::tempdir().unwrap();
    let spec = write_spec(
        d.path(),
        "torn",
        "zero_grad = [\"memset\", \"none\"]",
        "timeout_s = 60",
    );
    let out = d.path().join("out");
    assert_eq!(sweep(&spec, &out, &[], &[]).status.code(), Some(0));
    // Drop the last record and leave half of it behind, as a kill mid-write would.
    let j = out.join("journal.jsonl");
    let text = std::fs::read_to_string(&j).unwrap();
    let last = text.trim_end().rfind('\n').unwrap() + 1;
    std::fs::write(&j, format!("{}{}", &text[..last], &text[last..last + 20])).unwrap();
    let o = sweep(&spec, &out, &["--resume"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert_eq!(journal_trial_ids(&out).len(), 2);
}

#[test]
fn malformed_spec_exits_2_and_creates_nothing() {
    let d = tempfile::tempdir().unwrap();
    let spec = d.path().join("bad.toml");
    std::fs::write(&spec, "[workload]\nmodel = \"mlp\"\nbogus = 1\n").unwrap();
    let out = d.path().join("out");
    let o = sweep(&spec, &out, &[], &[]);
    assert_eq!(o.status.code(), Some(2), "{}", show(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("bad.toml:3"),
        "{}",
        show(&o)
    );
    assert!(!out.exists());
}

#[test]
fn report_rerenders_from_json_and_from_journal() {
    let d = tempfile::tempdir().unwrap();
    let spec = write_spec(
        d.path(),
        "rerender",
        "zero_grad = [\"memset\", \"none\"]",
        "timeout_s = 60",
    );
    let out = d.path().join("out");
    assert_eq!(sweep(&spec, &out, &[], &[]).status.code(), Some(0));
    let original = report_json(&out);

    std::fs::remove_file(out.join("report.html")).unwrap();
    let o = tune().arg("report").arg(&out).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert!(out.join("report.html").exists());

    // From the journal alone (its header holds the spec).
    std::fs::remove_file(out.join("report.json")).unwrap();
    let md = d.path().join("elsewhere.md");
    let o = tune()
        .arg("report")
        .arg(&out)
        .arg("--md")
        .arg(&md)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert!(md.exists());
    let rebuilt = report_json(&out);
    assert_eq!(rebuilt["trials"], original["trials"]);

    // A report from a newer major schema is refused as bad input.
    let newer = d.path().join("newer.json");
    let mut v = original.clone();
    v["schema_version"] = "3.0".into();
    std::fs::write(&newer, v.to_string()).unwrap();
    let o = tune().arg("report").arg(&newer).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", show(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("newer"),
        "{}",
        show(&o)
    );
}

#[test]
fn html_escapes_every_user_string() {
    use tune::report::html;
    use tune::results::record::{Repeat, Status, TrialRecord};
    use tune::spec::Spec;

    let mut spec = Spec::parse(
        "name = \"esc\"\n[workload]\nmodel = \"mlp\"\ndataset = \"synthetic\"\n\
         [knobs]\nzero_grad = [\"memset\", \"none\"]\n",
        "x.toml",
    )
    .unwrap();
    // The parser refuses such names; a hand-edited report.json need not.
    spec.name = "<script>alert('n')</script>".into();
    let rec = TrialRecord {
        id: "<script>id</script>".into(),
        label: "<script>alert(\"x\")</script> 'q'".into(),
        knobs: spec.search.baseline.clone(),
        round: 0,
        steps: 3,
        status: Status::Crashed,
        error: Some("<img src=x onerror=alert(1)>".into()),
        repeats: vec![Repeat {
            step_times: vec![0.01, 0.01, 0.011],
            samples_per_step: 16,
            samples_per_s: 1600.0,
            losses: vec![2.0, 1.5, 1.0],
            ..Repeat::default()
        }],
        timeline: Vec::new(),
        nodes: Vec::new(),
        hardware: Vec::new(),
    };
    let report = tune::advisor::build_report(&spec, &[rec]);
    let page = html::render(&report);
    assert!(!page.contains("<script"), "unescaped script tag");
    assert!(!page.contains("<img"), "unescaped img tag");
    assert!(page.contains("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &#39;q&#39;"));
    assert!(page.contains("&lt;img src=x onerror=alert(1)&gt;"));
}

#[test]
fn shipped_experiments_parse_and_plan() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments");
    for name in ["quickstart", "seed-knobs", "memory", "dp-vs-ddp"] {
        let spec = tune::spec::Spec::load(dir.join(format!("{name}.toml")))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(spec.name, name);
        let plan = tune::spec::plan::plan(&spec);
        assert!(plan.trials.len() >= 2, "{name}: {plan:?}");
    }
}

#[test]
fn halving_screens_short_then_runs_survivors_longer() {
    let d = tempfile::tempdir().unwrap();
    let spec = write_spec(
        d.path(),
        "halving",
        "zero_grad = [\"memset\", \"none\"]\nbatch_size = [16, 8]",
        "strategy = \"halving\"\neta = 2\ntimeout_s = 60",
    );
    let out = d.path().join("out");
    let o = sweep(&spec, &out, &[], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    // 4 configurations, then the best 2, then the best 1.
    let records: Vec<Value> = std::fs::read_to_string(out.join("journal.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|v: &Value| v["type"] == "trial")
        // A recommended change's confirmation runs after the rounds, at round 0.
        .filter(|v: &Value| !v["id"].as_str().unwrap().starts_with("confirm:"))
        .collect();
    let per_round: Vec<usize> = (0..3)
        .map(|r| records.iter().filter(|v| v["round"] == r).count())
        .collect();
    assert_eq!(per_round, vec![4, 2, 1]);
    let steps: Vec<u64> = (0..3)
        .map(|r| {
            records.iter().find(|v| v["round"] == r).unwrap()["steps"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert!(steps[0] < steps[1] && steps[1] < steps[2], "{steps:?}");
    assert_eq!(steps[2], 6);
    let r = report_json(&out);
    assert_eq!(r["trials"].as_array().unwrap().len(), 4);
}

/// `tune sweep ... | head -0`: nobody reads stdout any more, and the sweep still
/// finishes its trials and writes its files, with no panic (println! would panic on the
/// closed pipe), in both output modes.
#[test]
fn a_closed_stdout_does_not_stop_or_crash_a_sweep() {
    for json in [false, true] {
        let d = tempfile::tempdir().unwrap();
        let spec = write_spec(
            d.path(),
            "closedout",
            "zero_grad = [\"memset\", \"none\"]",
            "repeats = 1\ntimeout_s = 60",
        );
        let out = d.path().join("out");
        let mut c = tune();
        c.arg("sweep").arg(&spec).arg("--out").arg(&out);
        if json {
            c.arg("--json");
        }
        let mut child = c
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let o = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(0), "json {json}: {err}");
        assert!(!err.contains("panicked"), "json {json}: {err}");
        assert!(out.join("report.json").exists(), "json {json}");
    }
}

#[path = "common/standin.rs"]
mod standin;

#[test]
fn device_flag_moves_an_engine_spec_to_cuda_and_refuses_a_command_spec() {
    let d = tempfile::tempdir().unwrap();
    // A command workload chooses its own device: one line, exit 2, nothing written.
    let cmd = d.path().join("cmd.toml");
    std::fs::write(
        &cmd,
        "name = \"c\"\n[workload.command]\nrun = \"true\"\nmetric_regex = 'x=(\\d+)'\n\
         [knobs]\nnum_workers = [0]\n",
    )
    .unwrap();
    let out = d.path().join("c");
    let o = sweep(&cmd, &out, &["--device", "cuda"], &[]);
    assert_eq!(o.status.code(), Some(2), "{}", show(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("--device") && err.trim().lines().count() == 1,
        "{err}"
    );
    assert!(!out.exists(), "nothing is written for bad input");

    // An engine spec written for the CPU trains on CUDA: the stand-in (or a GPU) when
    // the backend runs here, else the trial is `unsupported` with the backend's reason.
    let cuda = standin::activate().unwrap_or(false) || tune::engine::cuda::usable().is_ok();
    let spec = write_spec(d.path(), "dev", "zero_grad = [\"memset\"]", "repeats = 1");
    let out = d.path().join("dev");
    let o = sweep(&spec, &out, &["--device", "cuda"], &[]);
    let r = report_json(&out);
    let t = &r["trials"][0];
    if cuda {
        assert!(o.status.success(), "{}", show(&o));
        assert_eq!(t["status"], "ok", "{t}");
        let backend = r["environment"]["backend"].as_str().unwrap();
        assert!(backend.starts_with("cuda"), "{backend}");
    } else {
        assert_eq!(t["status"], "unsupported", "{t}");
        assert!(t["error"].as_str().unwrap().contains("CUDA backend"), "{t}");
    }
    assert_eq!(r["spec"]["workload"]["device"], "cuda", "{}", r["spec"]);
}

/// Issue #27: a speed-up found by sweeping only a command's `[params]` is recommended
/// (the parameter change, with the command as its line) and confirmed by a measured run,
/// as a knob's would be.
#[test]
fn a_params_only_speedup_is_recommended_and_confirmed() {
    let d = tempfile::tempdir().unwrap();
    let spec = d.path().join("p.toml");
    std::fs::write(
        &spec,
        "name = \"p\"\n[workload.command]\n\
         run = \"r={rate}; for i in 1 2 3 4 5 6 7 8 9 10 11 12; do echo samples/s: $((r + i % 3)); done\"\n\
         metric_regex = 'samples/s: ([0-9.]+)'\n[params]\nrate = [100, 200]\n[search]\nrepeats = 2\n",
    )
    .unwrap();
    let out = d.path().join("out");
    let o = sweep(&spec, &out, &[], &[("TUNE_SAMPLE_MS", "0")]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let r = report_json(&out);
    let recs = r["recommendations"].as_array().unwrap();
    let rec = recs
        .iter()
        .find(|x| x["rule"] == "faster")
        .unwrap_or_else(|| panic!("no recommendation: {recs:?}"));
    assert_eq!(rec["change"]["rate"], "200", "{rec}");
    assert!(rec["title"].as_str().unwrap().contains("rate=200"), "{rec}");
    assert!(rec["pytorch"].as_str().unwrap().contains("r=200;"), "{rec}");
    let c = &r["confirmation"];
    assert_eq!(c["knobs"]["params"]["rate"], "200", "{c}");
    assert_eq!(
        c["trial"]["status"], "ok",
        "the confirmation did not run: {c}"
    );
    assert_eq!(c["verdict"], "matches", "{c}");
}
