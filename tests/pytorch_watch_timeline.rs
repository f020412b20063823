//! `tune watch` of a real PyTorch job over its steps (#31): the first step (start-up,
//! compilation) is measured, named and kept out of the steady figures; a warm-up that
//! dominates the run is a finding; report.html draws step time and phase shares per
//! step; trace.json holds every step and its phases in the trace-event format; a batch
//! of token ids gives tokens/s; `tune compare` of two watches tests step time and
//! samples/s.

#[path = "pytorch/support.rs"]
mod support;

/// Jobs whose loop a framework runs (Lightning, the Hugging Face Trainer).
#[path = "pytorch/frameworks.rs"]
mod frameworks;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use serde_json::Value;

fn watch(py: &Path, out: &Path, args: &[&str]) -> (Output, Value) {
    let o = Command::new(env!("CARGO_BIN_EXE_tune"))
        .arg("watch")
        .arg("--out")
        .arg(out)
        .arg("--")
        .arg(py)
        .arg(support::script("tokens.py"))
        .args(args)
        .env("TUNE_CACHE_DIR", out.join("cache"))
        .output()
        .unwrap();
    let text = std::fs::read_to_string(out.join("report.json")).unwrap_or_default();
    (o, serde_json::from_str(&text).unwrap_or(Value::Null))
}

use support::show;

/// A watch run shared by two tests (each run is a Python start and `import torch`, the
/// bulk of its seconds): its folder under the target dir, its output and report.json.
type Shared = (PathBuf, Output, Value);

/// The plain job with a DataLoader, 24 tokens a sample: the first test's job without the
/// planted first step, and the token test's loader case.
fn loader_job(py: &Path) -> &'static Shared {
    static RUN: OnceLock<Shared> = OnceLock::new();
    RUN.get_or_init(|| shared(py, "loader", &["--loader", "--seq", "24", "--steps", "40"]))
}

/// The job fed directly from memory, 24 tokens a sample, 10 ms of sleep a forward: the
/// compare test's quicker watch, and the token test's direct case.
fn direct_job(py: &Path) -> &'static Shared {
    static RUN: OnceLock<Shared> = OnceLock::new();
    RUN.get_or_init(|| {
        shared(
            py,
            "direct",
            &["--seq", "24", "--steps", "40", "--sleep-ms", "10"],
        )
    })
}

fn shared(py: &Path, name: &str, args: &[&str]) -> Shared {
    let out = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("pytorch_watch_timeline")
        .join(name);
    let _ = std::fs::remove_dir_all(&out);
    let (o, r) = watch(py, &out, args);
    (out, o, r)
}

/// Every step is 16 sequences of 24 tokens: exactly 24 tokens per sample, said on stderr.
fn tokens_per_sample_is_24(name: &str, o: &Output, r: &Value) {
    assert!(o.status.success(), "{name}: {}", show(o));
    let p = &r["python"];
    let samples = p["samples_per_s"]
        .as_f64()
        .unwrap_or_else(|| panic!("{name}: {p}"));
    let tokens = p["tokens_per_s"]
        .as_f64()
        .unwrap_or_else(|| panic!("{name}: {p}"));
    assert!((tokens / samples - 24.0).abs() < 1e-6, "{name}: {p}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("tokens/s"), "{name}: {err}");
}

fn kinds(r: &Value) -> Vec<String> {
    r["findings"]
        .as_array()
        .map(|f| {
            f.iter()
                .filter_map(|x| x["kind"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// Every step of report.json appears in trace.json as a complete event of its duration
/// (microseconds), ending where the hooks saw it end, on pid 0, with its phases nested
/// inside it; processes are named by metadata events.
fn check_trace(r: &Value, trace: &Value) {
    let ev = trace["traceEvents"].as_array().expect("traceEvents");
    assert!(
        ev.iter()
            .any(|e| e["ph"] == "M" && e["name"] == "process_name" && e["pid"] == 0),
        "{trace}"
    );
    let steps = r["steps"].as_array().expect("steps in report.json");
    let t0 = steps
        .iter()
        .map(|s| s["t"].as_f64().unwrap() - s["dur"].as_f64().unwrap())
        .fold(f64::INFINITY, f64::min);
    let x: Vec<&Value> = ev.iter().filter(|e| e["ph"] == "X").collect();
    let step_events: Vec<&Value> = x.iter().copied().filter(|e| e["cat"] == "step").collect();
    assert_eq!(step_events.len(), steps.len(), "one event per step");
    for (s, e) in steps.iter().zip(&step_events) {
        let dur = s["dur"].as_f64().unwrap();
        let start = s["t"].as_f64().unwrap() - dur - t0;
        assert!(
            (e["dur"].as_f64().unwrap() - dur * 1e6).abs() < 0.01,
            "{s} {e}"
        );
        assert!(
            (e["ts"].as_f64().unwrap() - start * 1e6).abs() < 1.0,
            "{s} {e}"
        );
        assert_eq!(e["pid"], 0, "{e}");
    }
    for p in x.iter().filter(|e| e["cat"] == "phase") {
        let (ts, end) = (
            p["ts"].as_f64().unwrap(),
            p["ts"].as_f64().unwrap() + p["dur"].as_f64().unwrap(),
        );
        let inside = step_events.iter().any(|s| {
            let st = s["ts"].as_f64().unwrap();
            ts >= st - 0.01 && end <= st + s["dur"].as_f64().unwrap() + 0.01
        });
        assert!(inside, "phase outside every step: {p}");
    }
}

#[test]
fn a_slow_first_step_is_named_as_warmup_drawn_and_traced() {
    let _serial = support::serial();
    let Some(py) = support::python("a_slow_first_step_is_named_as_warmup_drawn_and_traced") else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("slow");
    // A 3 s first step against steps of a few ms: far from the rule's thresholds (5x the
    // median, half of the run) either way.
    let (o, r) = watch(&py, &out, &["--loader", "--first-s", "3", "--steps", "40"]);
    assert!(o.status.success(), "{}", show(&o));
    let p = &r["python"];
    let first = p["first_step_ms"]
        .as_f64()
        .unwrap_or_else(|| panic!("{p}\n{}", show(&o)));
    let median = p["median_step_ms"].as_f64().unwrap();
    assert!(first >= 3000.0, "{p}");
    // Kept out of the steady figures, not averaged in.
    assert!(median < 300.0, "{p}");
    assert!(
        kinds(&r).contains(&"warmup".to_string()),
        "{}\n{}",
        r["findings"],
        show(&o)
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("first step") && err.contains("start-up and compilation dominate"),
        "{err}"
    );
    let steps = r["steps"].as_array().unwrap();
    assert_eq!(steps[0]["step"], 0, "{}", steps[0]);
    assert_eq!(steps.len() as u64, p["steps"].as_u64().unwrap() + 1);
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    for want in [
        "id=\"watch-steps\"",
        "id=\"watch-phases\"",
        "id=\"warmup\"",
        "0 (first)",
    ] {
        assert!(html.contains(want), "report.html lacks {want}");
    }
    let md = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert!(md.contains("first step (start-up, compilation)"), "{md}");
    let trace: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("trace.json")).unwrap()).unwrap();
    check_trace(&r, &trace);

    // The same job without the planted first-step cost: no warm-up finding.
    let (_, o, r) = loader_job(&py);
    assert!(o.status.success(), "{}", show(o));
    assert!(
        !kinds(r).contains(&"warmup".to_string()),
        "{}",
        r["findings"]
    );
}

#[test]
fn token_ids_give_tokens_per_second_beside_samples() {
    let _serial = support::serial();
    let Some(py) = support::python("token_ids_give_tokens_per_second_beside_samples") else {
        return;
    };
    // Batches of 16 sequences of 24 tokens, from a DataLoader and fed directly.
    let (_, o, r) = loader_job(&py);
    tokens_per_sample_is_24("loader", o, r);
    let (_, o, r) = direct_job(&py);
    tokens_per_sample_is_24("direct", o, r);
}

/// A tokenizer's padded batches (a UserDict of `input_ids`, `attention_mask` and
/// `labels`, as transformers' BatchEncoding is): tokens are the mask's ones, not the
/// padded [B, T], from a DataLoader and from a loop that calls its model with keyword
/// arguments only; samples are the batch's sequences in both. A collate's dataclass of
/// the same fields reads the same (it read "batch size unknown").
#[test]
fn a_padded_batch_counts_its_real_tokens_and_its_sequences() {
    let _serial = support::serial();
    let test = "a_padded_batch_counts_its_real_tokens_and_its_sequences";
    let Some(py) = support::python(test) else {
        return;
    };
    for args in [&["--loader"][..], &[][..], &["--loader", "--dataclass"][..]] {
        let d = tempfile::tempdir().unwrap();
        let out = d.path().join("w");
        let o = Command::new(env!("CARGO_BIN_EXE_tune"))
            .args(["watch", "--steps", "40", "--out"])
            .arg(&out)
            .arg("--")
            .arg(&py)
            .arg(support::script("padded.py"))
            .args(args)
            .env("TUNE_CACHE_DIR", out.join("cache"))
            .output()
            .unwrap();
        assert!(o.status.success(), "{args:?}: {}", show(&o));
        let printed = |tag: &str| -> f64 {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .find_map(|l| l.strip_prefix(tag)?.trim().parse().ok())
                .unwrap_or(f64::NAN)
        };
        let (real, padded) = (printed("REAL"), printed("PADDED"));
        let r: Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap())
                .unwrap();
        let p = &r["python"];
        let per_s = |k: &str| p[k].as_f64().unwrap_or_else(|| panic!("{args:?}: {p:#}"));
        let steps = per_s("steps_per_s");
        eprintln!(
            "{test} {args:?}: {:.1} tokens a step (the script's real {real}, padded \
             {padded}), {:.2} samples a step",
            per_s("tokens_per_s") / steps,
            per_s("samples_per_s") / steps
        );
        assert!(
            (per_s("tokens_per_s") / steps - real).abs() < 1e-6 * real,
            "{p:#}"
        );
        assert!(
            (per_s("samples_per_s") / steps - 16.0).abs() < 1e-6,
            "{p:#}"
        );
    }
}

#[test]
fn compare_of_two_watches_tests_step_time_and_samples() {
    let _serial = support::serial();
    let Some(py) = support::python("compare_of_two_watches_tests_step_time_and_samples") else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    // B sleeps 40 ms more in every forward: about 2x the step or more, far from noise.
    let (a, o, _) = direct_job(&py);
    assert!(o.status.success(), "{}", show(o));
    let b = d.path().join("b");
    let (o, _) = watch(
        &py,
        &b,
        &["--seq", "24", "--steps", "40", "--sleep-ms", "50"],
    );
    assert!(o.status.success(), "{}", show(&o));
    let o = Command::new(env!("CARGO_BIN_EXE_tune"))
        .args(["compare", "--json"])
        .arg(a)
        .arg(&b)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", show(&o));
    let rows: Vec<Value> = serde_json::from_slice(&o.stdout).unwrap();
    let row = |m: &str| {
        rows.iter()
            .find(|r| r["subject"] == "PyTorch steps" && r["metric"] == m)
            .unwrap_or_else(|| panic!("no {m} row: {rows:?}"))
            .clone()
    };
    let step = row("median step ms");
    assert_eq!(step["significant"], true, "{step}");
    let ratio = step["ratio"].as_f64().unwrap();
    let (lo, hi) = (
        step["ci"][0].as_f64().unwrap(),
        step["ci"][1].as_f64().unwrap(),
    );
    assert!(
        ratio > 1.5 && lo > 1.0 && lo <= ratio && ratio <= hi,
        "{step}"
    );
    let thr = row("samples/s");
    assert_eq!(thr["significant"], true, "{thr}");
    assert!(thr["ratio"].as_f64().unwrap() < 0.67, "{thr}");
    assert!(
        rows.iter().any(|r| r["metric"] == "forward share %"),
        "{rows:?}"
    );
    let o = Command::new(env!("CARGO_BIN_EXE_tune"))
        .arg("compare")
        .arg(a)
        .arg(&b)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    let line = text
        .lines()
        .find(|l| l.contains("median step ms"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(line.ends_with("higher"), "{text}");
}

#[test]
fn a_sweep_of_token_ids_reports_tokens_per_second_and_traces_each_steps_phases() {
    let _serial = support::serial();
    let Some(py) = support::python(
        "a_sweep_of_token_ids_reports_tokens_per_second_and_traces_each_steps_phases",
    ) else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    // One trial (the script as written): what is reported, not what is faster.
    let spec = format!(
        "name = \"tok\"\n[workload.python]\nrun = \"{} {} --loader --seq 24 --batch 16 --steps 30\"\n\
         [knobs]\nzero_grad = [\"memset\"]\n[search]\nrepeats = 1\ntimeout_s = 120\n",
        py.display(),
        support::script("tokens.py").display()
    );
    let (o, r) = support::sweep_script(d.path(), &spec);
    assert!(o.status.success(), "{}", show(&o));
    let t = support::trial(&r, "baseline");
    let samples = t["samples_per_s"]["median"].as_f64().unwrap();
    let tokens = t["tokens_per_s"]["median"]
        .as_f64()
        .unwrap_or_else(|| panic!("no tokens_per_s: {t}"));
    // 16 sequences of 24 tokens a step: exactly 24 tokens per sample, interval too.
    assert!((tokens / samples - 24.0).abs() < 1e-6, "{t}");
    assert!(
        (t["tokens_per_s"]["lo"].as_f64().unwrap() / t["samples_per_s"]["lo"].as_f64().unwrap()
            - 24.0)
            .abs()
            < 1e-6,
        "{t}"
    );
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("tokens/s [95% CI]"), "{stdout}");
    let md = std::fs::read_to_string(d.path().join("out/summary.md")).unwrap();
    assert!(md.contains("tokens/s [95% CI]"), "{md}");
    // The trace nests each step's own phases inside it (pid 1: the first trial).
    let trace: Value =
        serde_json::from_str(&std::fs::read_to_string(d.path().join("out/trace.json")).unwrap())
            .unwrap();
    let ev = trace["traceEvents"].as_array().unwrap();
    let of = |cat: &str| -> Vec<&Value> {
        ev.iter()
            .filter(|e| e["ph"] == "X" && e["pid"] == 1 && e["cat"] == cat)
            .collect()
    };
    let (steps, phases) = (of("step"), of("phase"));
    assert!(!steps.is_empty(), "{trace}");
    assert!(
        phases.iter().any(|p| p["name"] == "forward")
            && phases.iter().any(|p| p["name"] == "backward"),
        "no phases in the sweep's trace: {} step events, {} phase events",
        steps.len(),
        phases.len()
    );
    for p in &phases {
        let (ts, dur) = (p["ts"].as_f64().unwrap(), p["dur"].as_f64().unwrap());
        assert!(
            steps.iter().any(|s| {
                let (a, b) = (s["ts"].as_f64().unwrap(), s["dur"].as_f64().unwrap());
                ts >= a - 1e-3 && ts + dur <= a + b + 1e-3
            }),
            "phase outside every step: {p}"
        );
    }
}
