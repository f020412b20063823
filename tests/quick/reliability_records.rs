//! Issue #27, tune's own files: whatever a command prints or a hook reports, tune reads
//! back everything it wrote (`tune report`, `gate`, `compare`, `--resume`); `--resume`
//! touches nothing that is not its journal; a kill loses at most the running repeat; the
//! confirmation is journaled once; `--out` never overwrites another report. Every test
//! runs the real binary on real files and processes.

use crate::cli;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use cli::{output_within, refused, show, tune};
use serde_json::Value;

fn write(path: &Path, text: &str) -> PathBuf {
    std::fs::write(path, text).unwrap();
    path.to_path_buf()
}

fn sweep(spec: &Path, out: &Path, extra: &[&str]) -> Output {
    let mut c = tune();
    c.arg("sweep")
        .arg(spec)
        .arg("--out")
        .arg(out)
        .args(extra)
        .env("TUNE_SAMPLE_MS", "0");
    output_within(&mut c, Duration::from_secs(120))
}

fn run(args: &[&dyn AsRef<std::ffi::OsStr>]) -> Output {
    let mut c = tune();
    for a in args {
        c.arg(a);
    }
    output_within(&mut c, Duration::from_secs(60))
}

/// Every reader of what a sweep wrote accepts it: `tune report` on the folder (the
/// journal) and on report.json, `gate` and `compare` of the report with itself, and
/// `--resume` of the finished sweep.
fn every_reader_accepts(spec: &Path, out: &Path) {
    let report = out.join("report.json");
    let o = run(&[&"report", &out]);
    assert_eq!(o.status.code(), Some(0), "report DIR: {}", show(&o));
    let o = run(&[&"report", &report]);
    assert_eq!(o.status.code(), Some(0), "report FILE: {}", show(&o));
    let o = run(&[&"compare", &report, &report]);
    assert_eq!(o.status.code(), Some(0), "compare: {}", show(&o));
    let o = run(&[&"gate", &"--baseline", &report, &"--current", &report]);
    assert_eq!(o.status.code(), Some(0), "gate: {}", show(&o));
    let o = sweep(spec, out, &["--resume"]);
    assert_eq!(o.status.code(), Some(0), "--resume: {}", show(&o));
}

/// Numbers in the journal that are not finite come out as `null` in a figure's place.
fn assert_no_null_figure(out: &Path) {
    let text = std::fs::read_to_string(out.join("journal.jsonl")).unwrap();
    for (i, line) in text.lines().enumerate() {
        let v: Value = serde_json::from_str(line).unwrap();
        for key in ["step_times", "samples_per_s", "step_ms_median", "wall_s"] {
            let mut stack = vec![&v];
            while let Some(x) = stack.pop() {
                match x {
                    Value::Object(m) => {
                        if let Some(f) = m.get(key) {
                            let nulls = match f {
                                Value::Array(a) => a.iter().any(Value::is_null),
                                f => f.is_null(),
                            };
                            assert!(!nulls, "line {}: {key} holds null: {line}", i + 1);
                        }
                        stack.extend(m.values());
                    }
                    Value::Array(a) => stack.extend(a),
                    _ => {}
                }
            }
        }
    }
}

#[test]
fn a_command_printing_extreme_figures_leaves_files_every_reader_accepts() {
    let d = tempfile::tempdir().unwrap();
    write(
        &d.path().join("emit.sh"),
        "case \"$1\" in\n\
         a) for i in 1 2 3 4 5 6; do echo \"samples/s: 10$i\"; done ;;\n\
         b) echo 'samples/s: 1e-320'; echo 'samples/s: 1.7976931348623157e308'; \
            for i in 1 2 3 4 5 6; do echo \"samples/s: 12$i\"; done ;;\n\
         esac\n",
    );
    let spec = write(
        &d.path().join("s.toml"),
        "name = \"fig\"\n[workload.command]\nrun = \"sh emit.sh {v}\"\n\
         metric_regex = 'samples/s: ([0-9.]+)'\n[params]\nv = [\"a\", \"b\"]\n",
    );
    let out = d.path().join("out");
    let o = sweep(&spec, &out, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert_no_null_figure(&out);
    every_reader_accepts(&spec, &out);
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("outside 1e-30..1e30"),
        "the dropped values are not named: {}",
        show(&o)
    );
}

/// A step event line for the hooks' pipe.
fn step(i: usize, rest: &str) -> String {
    format!("{{\"ev\":\"step\",\"step\":{i},\"dur\":0.01,\"batch\":8,\"forward\":0.005{rest}}}")
}

/// A script that writes hook events straight into tune's event pipe: normal steps, then
/// steps with a subnormal duration and with phases near f64::MAX.
fn events_script(dir: &Path) -> PathBuf {
    let mut lines: Vec<String> = (1..=8).map(|i| step(i, "")).collect();
    lines.push(r#"{"ev":"step","step":9,"dur":5e-324,"batch":8}"#.into());
    lines.push(step(10, ",\"backward\":1.7976931348623157e308"));
    lines.push(step(11, ",\"data_wait\":1e308,\"h2d\":1e308"));
    let mut s = String::from(
        "hello='{\"ev\":\"hello\",\"torch\":\"none\"}'\necho \"$hello\" >&$TUNE_BRIDGE_FD\n",
    );
    for l in lines {
        s.push_str(&format!("echo '{l}' >&$TUNE_BRIDGE_FD\n"));
    }
    write(&dir.join("events.sh"), &s)
}

#[test]
fn hook_events_with_extreme_figures_leave_files_every_reader_accepts() {
    let d = tempfile::tempdir().unwrap();
    events_script(d.path());
    let spec = write(
        &d.path().join("s.toml"),
        "name = \"hooks\"\n[workload.python]\nrun = \"sh events.sh {v}\"\n[params]\nv = [\"a\", \"b\"]\n",
    );
    let out = d.path().join("out");
    let o = sweep(&spec, &out, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert_no_null_figure(&out);
    let r: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    assert!(
        r["trials"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["status"] == "ok"),
        "{}",
        r["trials"]
    );
    every_reader_accepts(&spec, &out);

    // The same events through `tune watch`: its report reads back too.
    let w = d.path().join("watch");
    let mut c = tune();
    c.current_dir(d.path())
        .args(["watch", "--json", "--out"])
        .arg(&w)
        .args(["--", "sh", "events.sh"]);
    let o = output_within(&mut c, Duration::from_secs(60));
    assert_eq!(o.status.code(), Some(0), "watch: {}", show(&o));
    let o = run(&[&"report", &w.join("report.json")]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "report of the watch: {}",
        show(&o)
    );
}

/// A finished sweep of a one-trial command spec to resume from.
fn finished_sweep(dir: &Path) -> (PathBuf, PathBuf) {
    let spec = write(
        &dir.join("s.toml"),
        "name = \"j\"\n[workload.command]\nrun = \"echo samples/s: 5\"\n\
         metric_regex = 'samples/s: ([0-9.]+)'\n",
    );
    let out = dir.join("out");
    let o = sweep(&spec, &out, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    (spec, out)
}

#[test]
fn resume_refuses_what_is_not_its_journal_and_touches_nothing() {
    let d = tempfile::tempdir().unwrap();
    let (spec, out) = finished_sweep(d.path());
    let journal = out.join("journal.jsonl");
    let user = d.path().join("users-notes.txt");
    write(&user, "my notes, not a journal\n");

    // A one-line file that is not JSON: it was truncated as a torn line.
    write(&journal, "my notes, not a journal\n");
    for extra in [&["--resume"][..], &[]] {
        let line = refused(&sweep(&spec, &out, extra));
        assert!(line.contains("not a tune journal"), "{line}");
        assert_eq!(
            std::fs::read_to_string(&journal).unwrap(),
            "my notes, not a journal\n"
        );
    }
    // `tune report` (rebuilding from the journal) refuses it the same way.
    std::fs::remove_file(out.join("report.json")).unwrap();
    let line = refused(&run(&[&"report", &out]));
    assert!(line.contains("not a tune journal"), "{line}");

    // A symlink to a user's file: it was truncated and overwritten.
    std::fs::remove_file(&journal).unwrap();
    std::os::unix::fs::symlink(&user, &journal).unwrap();
    let line = refused(&sweep(&spec, &out, &["--resume"]));
    assert!(line.contains("symbolic link"), "{line}");
    assert_eq!(
        std::fs::read_to_string(&user).unwrap(),
        "my notes, not a journal\n"
    );
    assert!(std::fs::symlink_metadata(&journal)
        .unwrap()
        .file_type()
        .is_symlink());

    // A FIFO: `--resume` hung on it.
    std::fs::remove_file(&journal).unwrap();
    let made = Command::new("mkfifo").arg(&journal).status().unwrap();
    assert!(made.success());
    let started = Instant::now();
    let line = refused(&sweep(&spec, &out, &["--resume"]));
    assert!(line.contains("FIFO"), "{line}");
    assert!(started.elapsed() < Duration::from_secs(30));
    let line = refused(&run(&[&"report", &out]));
    assert!(line.contains("FIFO"), "{line}");
}

/// Lines of the journal whose `type` is `kind`.
fn lines_of(out: &Path, kind: &str) -> Vec<Value> {
    std::fs::read_to_string(out.join("journal.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v["type"] == kind)
        .collect()
}

#[test]
fn a_kill_in_the_third_repeat_loses_only_that_repeat() {
    let d = tempfile::tempdir().unwrap();
    // Each run leaves a line in runs.log and lasts a second (shorter repeats are not
    // journaled one by one); the third one hangs until the sweep is killed.
    let spec = write(
        &d.path().join("s.toml"),
        "name = \"k\"\n[workload.command]\n\
         run = \"echo run >> runs.log; n=$(wc -l < runs.log); if [ $n -eq 3 ]; then sleep 60; fi; sleep 1; echo samples/s: 7\"\n\
         metric_regex = 'samples/s: ([0-9.]+)'\n[search]\nrepeats = 3\n",
    );
    let out = d.path().join("out");
    let log = d.path().join("runs.log");
    let mut child = tune()
        .arg("sweep")
        .arg(&spec)
        .arg("--out")
        .arg(&out)
        .env("TUNE_SAMPLE_MS", "0")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let runs = |log: &Path| {
        std::fs::read_to_string(log)
            .map(|t| t.lines().count())
            .unwrap_or(0)
    };
    let until = Instant::now() + Duration::from_secs(60);
    while runs(&log) < 3 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(runs(&log), 3, "the third repeat never started");
    child.kill().unwrap();
    child.wait().unwrap();
    // Two finished repeats are durable; no trial line yet.
    assert_eq!(lines_of(&out, "repeat").len(), 2);
    assert_eq!(lines_of(&out, "trial").len(), 0);

    let o = sweep(&spec, &out, &["--resume"]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("at repeat 3 of 3"),
        "{}",
        show(&o)
    );
    // Only the interrupted repeat ran again.
    assert_eq!(runs(&log), 4, "finished repeats were rerun");
    let trials = lines_of(&out, "trial");
    assert_eq!(trials.len(), 1);
    assert_eq!(trials[0]["repeats"].as_array().unwrap().len(), 3);
    let o = run(&[&"report", &out]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
}

#[test]
fn the_confirmation_is_journaled_once_after_a_kill_between_its_lines() {
    let d = tempfile::tempdir().unwrap();
    let spec = write(
        &d.path().join("p.toml"),
        "name = \"p\"\n[workload.command]\n\
         run = \"r={rate}; for i in 1 2 3 4 5 6 7 8 9 10 11 12; do echo samples/s: $((r + i % 3)); done\"\n\
         metric_regex = 'samples/s: ([0-9.]+)'\n[params]\nrate = [100, 200]\n[search]\nrepeats = 2\n",
    );
    let out = d.path().join("out");
    let o = sweep(&spec, &out, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let journal = out.join("journal.jsonl");
    let text = std::fs::read_to_string(&journal).unwrap();
    let confirm_ids = |text: &str| -> Vec<String> {
        text.lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|v| v["type"] == "trial")
            .filter_map(|v| v["id"].as_str().map(str::to_string))
            .filter(|id| id.starts_with("confirm:"))
            .collect()
    };
    assert_eq!(confirm_ids(&text).len(), 2, "no confirmation ran: {text}");
    // The sweep as a kill between the confirmation's two lines leaves it.
    let mut lines: Vec<&str> = text.lines().collect();
    lines.pop();
    write(&journal, &format!("{}\n", lines.join("\n")));
    let o = sweep(&spec, &out, &["--resume"]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let ids = confirm_ids(&std::fs::read_to_string(&journal).unwrap());
    let mut unique = ids.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(ids.len(), unique.len(), "journaled twice: {ids:?}");
    assert_eq!(ids.len(), 2, "{ids:?}");
}

#[test]
fn resume_says_when_the_journal_is_another_versions_or_repeats_changed() {
    let d = tempfile::tempdir().unwrap();
    let (spec, out) = finished_sweep(d.path());
    let journal = out.join("journal.jsonl");
    let text = std::fs::read_to_string(&journal).unwrap();
    let mut header: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    header["tune_version"] = "0.0.1-old".into();
    let rest: Vec<&str> = text.lines().skip(1).collect();
    write(&journal, &format!("{header}\n{}\n", rest.join("\n")));
    let raised = std::fs::read_to_string(&spec).unwrap() + "[search]\nrepeats = 3\n";
    write(&spec, &raised);
    let o = sweep(&spec, &out, &["--resume"]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("written by tune 0.0.1-old"),
        "no word about the version: {err}"
    );
    assert!(
        err.contains("repeats is 3 in the spec and was 1"),
        "no word about the repeats: {err}"
    );
}

#[test]
fn out_onto_a_folder_with_another_report_is_refused_and_touched_not() {
    let d = tempfile::tempdir().unwrap();
    let spec = write(
        &d.path().join("s.toml"),
        "name = \"o\"\n[workload.command]\nrun = \"echo samples/s: 5\"\n\
         metric_regex = 'samples/s: ([0-9.]+)'\n",
    );
    for name in ["report.json", "report.html", "summary.md"] {
        let out = d.path().join(format!("out-{name}"));
        std::fs::create_dir(&out).unwrap();
        write(&out.join(name), "someone else's report\n");
        let line = refused(&sweep(&spec, &out, &[]));
        assert!(line.contains(name) && line.contains("--out"), "{line}");
        let names: Vec<_> = std::fs::read_dir(&out).unwrap().collect();
        assert_eq!(
            names.len(),
            1,
            "something was written into {}",
            out.display()
        );
        assert_eq!(
            std::fs::read_to_string(out.join(name)).unwrap(),
            "someone else's report\n"
        );
    }
    // A folder holding other files only is used; the sweep's own folder is resumed.
    let out = d.path().join("mine");
    std::fs::create_dir(&out).unwrap();
    write(&out.join("notes.txt"), "x");
    let o = sweep(&spec, &out, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let o = sweep(&spec, &out, &["--resume"]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    // A file as --out.
    let line = refused(&sweep(&spec, &out.join("notes.txt"), &[]));
    assert!(line.contains("not a folder"), "{line}");
}
