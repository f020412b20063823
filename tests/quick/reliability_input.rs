//! Issue #15, input side: whatever the user gives `tune train`, `tune bench` or `tune
//! sweep` (flags, a spec, a journal to resume) is either accepted or refused with exit 2
//! and one line that names where, before anything is created or run. Everything runs
//! the real binary on temporary folders.

use crate::cli;

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;

use cli::{refused, show, tune, wait_with_rusage};
use serde_json::Value;

/// A spec of a tiny mlp/synthetic workload with `extra` appended to `[workload]` and the
/// given `[knobs]` and `[search]` bodies.
fn spec_text(extra: &str, knobs: &str, search: &str) -> String {
    format!(
        "name = \"t\"\n[workload]\nmodel = \"mlp\"\ndataset = \"synthetic\"\nbatch_size = 16\n\
         steps = 6\nwarmup = 1\ndevice = \"cpu\"\nthreads = 1\n{extra}\n[knobs]\n{knobs}\n\n[search]\n{search}\n"
    )
}

fn sweep(spec: &Path, out: &Path, extra: &[&str]) -> Output {
    tune()
        .arg("sweep")
        .arg(spec)
        .arg("--out")
        .arg(out)
        .args(extra)
        .output()
        .unwrap()
}

#[test]
fn bad_train_flags_exit_2_naming_the_flag_and_range() {
    let d = tempfile::tempdir().unwrap();
    let cache = d.path().join("cache");
    let cases: &[(&[&str], &str, &str)] = &[
        (&["--steps", "1000000000001"], "--steps", "at most 10000000"),
        (
            &["--batch-size", "1000000000"],
            "--batch-size",
            "at most 65536",
        ),
        (
            &["--dataset", "shapes:1000000000000"],
            "--dataset",
            "at most 1000000",
        ),
        (&["--dataset", "shapes:0"], "--dataset", "at least 1"),
        (
            &["--dataset", "imagenet:/x"],
            "--dataset",
            "unknown dataset",
        ),
        (
            &["--dataset", "mnist:/nonexistent/tune-input-test"],
            "--dataset",
            "does not exist",
        ),
        (&["--threads", "100000"], "--threads", "at most 1024"),
        (
            &["--devices", "100000", "--parallel", "dp"],
            "--devices",
            "at most 64",
        ),
        (&["--num-workers", "100000"], "--num-workers", "at most 256"),
        (
            &["--grad-accum", "1000000000"],
            "--grad-accum",
            "at most 65536",
        ),
        (&["--lr", "1e308"], "--lr", "not a usable learning rate"),
        (&["--lr", "1e-50"], "--lr", "not a usable learning rate"),
        (
            &["--steps", "10", "--warmup", "10"],
            "--warmup",
            "none of the 10 steps",
        ),
    ];
    for (args, flag, needle) in cases {
        // A tiny run, with the case's flags in place of the defaults they name.
        let mut base = vec![
            ("--model", "mlp"),
            ("--dataset", "synthetic"),
            ("--steps", "3"),
            ("--warmup", "1"),
            ("--batch-size", "8"),
            ("--threads", "1"),
        ];
        base.retain(|(f, _)| !args.contains(f));
        let o = tune()
            .arg("train")
            .args(base.iter().flat_map(|(f, v)| [*f, *v]))
            .args(["--no-eval", "--json", "--cache-dir"])
            .arg(&cache)
            .args(*args)
            .output()
            .unwrap();
        let line = refused(&o);
        assert!(
            line.contains(flag) && line.contains(needle),
            "{args:?}: '{line}' lacks {flag} / {needle}"
        );
    }
    assert!(!cache.exists(), "a refused run created its cache");
}

#[test]
fn bad_bench_flags_exit_2_naming_the_flag() {
    for (args, flag) in [
        (["--threads", "100000"], "--threads"),
        (["--runs", "1000000"], "--runs"),
        (["--steps", "1000000000000"], "--steps"),
    ] {
        let o = tune()
            .args(["bench", "--what", "mlp"])
            .args(args)
            .output()
            .unwrap();
        let line = refused(&o);
        assert!(line.contains(flag), "{args:?}: {line}");
    }
}

/// Each of these passed the old spec check, then failed (or crashed) every trial.
#[test]
fn spec_values_every_trial_rejects_are_refused_at_spec_time() {
    let d = tempfile::tempdir().unwrap();
    let cases: Vec<(String, &str)> = vec![
        (spec_text("lr = 1e308", "", ""), "workload.lr"),
        (spec_text("lr = 5e-324", "", ""), "workload.lr"),
        (spec_text("devices = 100000", "", ""), "workload.devices"),
        (
            spec_text("", "", "mem_cap_mib = 17592186044416"),
            "search.mem_cap_mib",
        ),
        (
            spec_text("", "", "timeout_s = 9223372036854775807"),
            "search.timeout_s",
        ),
        (spec_text("", "", "repeats = 100000000"), "search.repeats"),
        (
            spec_text("", "batch_size = [16, 1000000000]", ""),
            "batch_size",
        ),
        (
            spec_text("", "num_workers = [0, 100000]", ""),
            "num_workers",
        ),
        (spec_text("", "devices = [1, 100000]", ""), "devices"),
        (
            spec_text("", "", "").replace("steps = 6", "steps = 1000000000001"),
            "workload.steps",
        ),
        (
            spec_text("", "", "").replace("batch_size = 16", "batch_size = 1000000000"),
            "workload.batch_size",
        ),
        (
            spec_text("", "", "").replace("threads = 1", "threads = 100000"),
            "workload.threads",
        ),
    ];
    let mut cases = cases;
    for ds in [
        "shapes:0",
        "shapes:-5",
        "shapes:1000000000000",
        "imagenet:/x",
        "mnist:/nonexistent/tune-input-test",
        "cifar10:/nonexistent/tune-input-test",
    ] {
        cases.push((
            spec_text("", "", "").replace("\"synthetic\"", &format!("{ds:?}")),
            "workload.dataset",
        ));
    }
    cases.push((
        "[workload.command]\nrun = \"true\"\nmetric_json_key = \"k\"\ncwd = \"no-such-folder\"\n"
            .into(),
        "no-such-folder",
    ));
    for (i, (text, needle)) in cases.iter().enumerate() {
        let spec = d.path().join(format!("s{i}.toml"));
        std::fs::write(&spec, text).unwrap();
        let out = d.path().join(format!("out{i}"));
        let o = sweep(&spec, &out, &[]);
        let line = refused(&o);
        let at = format!("{}:", spec.display());
        assert!(
            line.contains(&at) && line.contains(needle),
            "case {i}: '{line}' lacks {at}LINE:COL / {needle}\n{text}"
        );
        // file:line:col, both numbers.
        let rest = &line[line.find(&at).unwrap() + at.len()..];
        let mut parts = rest.splitn(3, ':');
        for what in ["line", "col"] {
            let n = parts.next().unwrap_or("");
            assert!(
                n.parse::<usize>().is_ok(),
                "case {i}: no {what} in '{line}'"
            );
        }
        assert!(
            !out.exists(),
            "case {i}: output folder created for a refused spec"
        );
    }
}

#[test]
fn hostile_corpus_specs_exit_2_without_output() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/spec");
    let mut specs: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    specs.sort();
    assert!(specs.len() >= 12, "corpus shrank: {specs:?}");
    let d = tempfile::tempdir().unwrap();
    for (i, spec) in specs.iter().enumerate() {
        let out = d.path().join(format!("out{i}"));
        let o = tune()
            .arg("sweep")
            .arg(spec)
            .arg("--out")
            .arg(&out)
            .current_dir(d.path())
            .output()
            .unwrap();
        let line = refused(&o);
        assert!(
            line.len() < 1000,
            "{}: {} bytes",
            spec.display(),
            line.len()
        );
        assert!(line.contains(&spec.display().to_string()), "{line}");
        assert!(!out.exists(), "{}: output folder created", spec.display());
        assert!(
            std::fs::read_dir(d.path()).unwrap().next().is_none(),
            "{}: something was created in the working folder",
            spec.display()
        );
    }
}

#[test]
fn control_characters_and_huge_values_are_escaped_and_cut() {
    let d = tempfile::tempdir().unwrap();
    let spec = d.path().join("s.toml");
    let long = "n".repeat(500_000);
    for (name, raw) in [
        ("\\u001b[2J\\u001b[31mred".to_string(), "\u{1b}[2J"),
        (format!("bad/{long}"), long.as_str()),
    ] {
        std::fs::write(
            &spec,
            format!(
                "name = \"{name}\"\n{}",
                spec_text("", "", "").replacen("name = \"t\"\n", "", 1)
            ),
        )
        .unwrap();
        let o = sweep(&spec, &d.path().join("out"), &[]);
        let line = refused(&o);
        assert!(line.contains("not a folder name"), "{line}");
        assert!(
            !line.contains(&raw[..raw.len().min(300)]),
            "value echoed raw: {line:?}"
        );
        assert!(line.len() < 1000, "{} bytes", line.len());
    }
}

#[test]
fn sweep_of_dev_zero_exits_2_quickly_with_bounded_memory() {
    let d = tempfile::tempdir().unwrap();
    let child = tune()
        .args(["sweep", "/dev/zero", "--out"])
        .arg(d.path().join("out"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (code, peak, took) = wait_with_rusage(child, Duration::from_secs(20));
    assert_eq!(code, Some(2));
    assert!(took < Duration::from_secs(5), "took {took:?}");
    // The spec limit is 1 MiB; the binary itself is a few tens of MB resident.
    assert!(peak < 200 << 20, "peak RSS {} MiB", peak >> 20);
    let o = tune().args(["sweep", "/dev/zero"]).output().unwrap();
    let line = refused(&o);
    assert!(
        line.contains("/dev/zero") && line.contains("larger than"),
        "{line}"
    );
}

fn journal_lines(out: &Path) -> Vec<Value> {
    std::fs::read_to_string(out.join("journal.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn write_journal(out: &Path, lines: &[Value]) {
    let text: String = lines.iter().map(|v| format!("{v}\n")).collect();
    std::fs::write(out.join("journal.jsonl"), text).unwrap();
}

fn remove_reports(out: &Path) {
    for f in ["report.json", "report.html", "summary.md"] {
        let _ = std::fs::remove_file(out.join(f));
    }
}

#[test]
fn resume_refuses_a_trial_record_from_another_spec() {
    let d = tempfile::tempdir().unwrap();
    let spec_a = d.path().join("a.toml");
    std::fs::write(&spec_a, spec_text("", "zero_grad = [\"memset\"]", "")).unwrap();
    let spec_b = d.path().join("b.toml");
    // The same knobs, so the same trial ids: only the workload tells the records apart.
    std::fs::write(
        &spec_b,
        spec_text("", "zero_grad = [\"memset\"]", "").replace("steps = 6", "steps = 4"),
    )
    .unwrap();
    let (out_a, out_b) = (d.path().join("a"), d.path().join("b"));
    for (s, o) in [(&spec_a, &out_a), (&spec_b, &out_b)] {
        let r = sweep(s, o, &[]);
        assert_eq!(r.status.code(), Some(0), "{}", show(&r));
    }
    // A trial line of sweep b, appended to sweep a's journal.
    let foreign = journal_lines(&out_b)
        .into_iter()
        .find(|v| v["type"] == "trial")
        .unwrap();
    let mut lines = journal_lines(&out_a);
    lines.push(foreign);
    let n = lines.len();
    write_journal(&out_a, &lines);
    remove_reports(&out_a);
    let o = sweep(&spec_a, &out_a, &["--resume"]);
    let line = refused(&o);
    assert!(
        line.contains("journal.jsonl") && line.contains(&format!("line {n}")),
        "{line}"
    );
    assert!(line.contains("different spec"), "{line}");
    assert!(!out_a.join("report.json").exists(), "a report was written");

    // The whole journal of b resumed under spec a: its header names what differs.
    remove_reports(&out_b);
    let o = sweep(&spec_a, &out_b, &["--resume"]);
    let line = refused(&o);
    assert!(line.contains("line 1"), "{line}");
    assert!(
        line.contains("workload.steps is 4 in the journal, 6 in the spec"),
        "{line}"
    );
    assert!(!out_b.join("report.json").exists());
}

#[test]
fn resume_accepts_more_repeats_old_unstamped_journals_and_refuses_garbage() {
    let d = tempfile::tempdir().unwrap();
    let spec = d.path().join("s.toml");
    std::fs::write(&spec, spec_text("", "zero_grad = [\"memset\"]", "")).unwrap();
    let out = d.path().join("out");
    let r = sweep(&spec, &out, &[]);
    assert_eq!(r.status.code(), Some(0), "{}", show(&r));
    let before = journal_lines(&out);

    // Journals from before trial lines were stamped: still resumable under their spec.
    let unstamped: Vec<Value> = before
        .iter()
        .cloned()
        .map(|mut v| {
            v.as_object_mut().unwrap().remove("spec_fingerprint");
            v
        })
        .collect();
    write_journal(&out, &unstamped);
    // More repeats requested: the same experiment, so it resumes without rerunning.
    std::fs::write(
        &spec,
        spec_text("", "zero_grad = [\"memset\"]", "repeats = 3"),
    )
    .unwrap();
    let r = sweep(&spec, &out, &["--resume"]);
    assert_eq!(r.status.code(), Some(0), "{}", show(&r));
    assert_eq!(
        journal_lines(&out).len(),
        unstamped.len(),
        "trials were rerun"
    );

    // A garbage line in the middle: refused with its number.
    let mut text = std::fs::read_to_string(out.join("journal.jsonl")).unwrap();
    text.insert_str(text.find('\n').unwrap() + 1, "{not json\n");
    std::fs::write(out.join("journal.jsonl"), text).unwrap();
    let line = refused(&sweep(&spec, &out, &["--resume"]));
    assert!(line.contains("line 2"), "{line}");
}
