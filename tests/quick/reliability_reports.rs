//! Issue #15, what tune writes and re-reads: hostile numbers in charts, a gate that
//! compared nothing, markdown escaping, error lines, all-or-nothing report sets. Every
//! test runs the real binary on real files.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const BASELINE: &str = "reports/ci-baseline/report.json";
/// Generous for a report of two trials that renders in milliseconds; a hang is forever.
const DEADLINE: Duration = Duration::from_secs(30);

fn baseline() -> Value {
    serde_json::from_str(&std::fs::read_to_string(BASELINE).unwrap()).unwrap()
}

fn write(dir: &Path, name: &str, v: &Value) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, v.to_string()).unwrap();
    p
}

/// Runs tune, killing it at the deadline: returns the output and whether it finished.
fn tune_within(cmd: &mut Command, deadline: Duration) -> (Output, bool) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let finished = loop {
        if child.try_wait().unwrap().is_some() {
            break true;
        }
        if start.elapsed() > deadline {
            child.kill().unwrap();
            break false;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (child.wait_with_output().unwrap(), finished)
}

fn tune(args: &[&str]) -> Output {
    let (o, finished) = tune_within(
        Command::new(env!("CARGO_BIN_EXE_tune")).args(args),
        DEADLINE,
    );
    assert!(finished, "tune {args:?} did not finish in {DEADLINE:?}");
    o
}

fn show(o: &Output) -> String {
    format!(
        "exit {:?}\nstdout: {}\nstderr: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn listing(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap_or_default(),
            )
        })
        .collect();
    v.sort();
    v
}

#[test]
fn a_throughput_of_f64_max_renders_in_bounded_time() {
    let d = tempfile::tempdir().unwrap();
    for (name, x) in [
        ("max", f64::MAX),
        ("huge", 1e308),
        ("tiny", 5e-324),
        ("min_positive", f64::MIN_POSITIVE),
    ] {
        let mut v = baseline();
        v["trials"][0]["samples_per_s"] = serde_json::json!({"median": x, "lo": x, "hi": x});
        v["trials"][1]["peak_total_bytes"] = u64::MAX.into();
        let p = write(d.path(), &format!("{name}.json"), &v);
        let html = d.path().join(format!("{name}.html"));
        let (o, finished) = tune_within(
            Command::new(env!("CARGO_BIN_EXE_tune"))
                .arg("report")
                .arg(&p)
                .arg("--html")
                .arg(&html)
                .arg("--md")
                .arg(d.path().join(format!("{name}.md"))),
            DEADLINE,
        );
        assert!(
            finished,
            "{name}: tune report hung on a throughput of {x:e}"
        );
        assert_eq!(o.status.code(), Some(0), "{name}: {}", show(&o));
        let page = std::fs::read_to_string(&html).unwrap();
        assert!(
            page.contains("data-chart=\"throughput\""),
            "{name}: no chart"
        );
    }
}

#[test]
fn a_gate_that_compared_nothing_exits_2_with_the_reason_and_writes_nothing() {
    let d = tempfile::tempdir().unwrap();
    let mut crashed = baseline();
    for t in crashed["trials"].as_array_mut().unwrap() {
        t["status"] = "crashed".into();
        t["error"] = "exit code 139".into();
        t["samples_per_s"] = Value::Null;
        t["ratio_vs_baseline"] = Value::Null;
    }
    let crashed = write(d.path(), "crashed.json", &crashed);
    let mut no_memory = baseline();
    for t in no_memory["trials"].as_array_mut().unwrap() {
        t["peak_total_bytes"] = Value::Null;
        for r in t["repeats"].as_array_mut().unwrap() {
            r["peak_total_bytes"] = 0.into();
        }
    }
    let no_memory = write(d.path(), "nomem.json", &no_memory);
    let (md, xml) = (d.path().join("gate.md"), d.path().join("gate.xml"));
    let outs = [
        "--md",
        md.to_str().unwrap(),
        "--junit",
        xml.to_str().unwrap(),
    ];
    for (base, cur, metric) in [
        (
            crashed.to_str().unwrap(),
            crashed.to_str().unwrap(),
            "samples_per_s",
        ),
        (
            no_memory.to_str().unwrap(),
            no_memory.to_str().unwrap(),
            "peak_bytes",
        ),
    ] {
        let mut args = vec![
            "gate",
            "--baseline",
            base,
            "--current",
            cur,
            "--metric",
            metric,
        ];
        args.extend(outs);
        let o = tune(&args);
        assert_eq!(o.status.code(), Some(2), "{metric}: {}", show(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("compared nothing"), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(!md.exists() && !xml.exists(), "outputs written on exit 2");
    }
}

#[test]
fn md_with_a_junit_path_that_is_a_folder_writes_nothing() {
    let d = tempfile::tempdir().unwrap();
    let md = d.path().join("gate.md");
    let folder = d.path().join("junit");
    std::fs::create_dir(&folder).unwrap();
    let o = tune(&[
        "gate",
        "--baseline",
        BASELINE,
        "--current",
        BASELINE,
        "--md",
        md.to_str().unwrap(),
        "--junit",
        folder.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", show(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("--junit"),
        "{}",
        show(&o)
    );
    assert!(!md.exists(), "--md was written before failing");
    assert_eq!(std::fs::read_dir(&folder).unwrap().count(), 0);
}

/// Pipes that split a markdown table row: those not escaped by a backslash.
fn row_pipes(line: &str) -> usize {
    let b = line.as_bytes();
    (0..b.len())
        .filter(|&i| b[i] == b'|' && (i == 0 || b[i - 1] != b'\\'))
        .count()
}

#[test]
fn hostile_names_and_stderr_keep_the_summary_table_intact() {
    let d = tempfile::tempdir().unwrap();
    let evil =
        "a|b <img src=x onerror=alert(1)> `code` **bold**\n# heading\r\n- item \u{1b}[31mred\u{0}";
    let mut v = baseline();
    for t in v["trials"].as_array_mut().unwrap() {
        t["label"] = format!("{evil} {}", t["label"].as_str().unwrap()).into();
    }
    v["trials"][1]["status"] = "crashed".into();
    v["trials"][1]["error"] = evil.into();
    v["spec"]["name"] = evil.into();
    let p = write(d.path(), "report.json", &v);
    let o = tune(&["report", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let md = std::fs::read_to_string(d.path().join("summary.md")).unwrap();
    assert!(
        !md.contains("<img") && !md.contains('\u{1b}') && !md.contains('\0'),
        "{md}"
    );
    assert!(
        !md.contains("\n# heading") && !md.contains("\n- item"),
        "{md}"
    );
    let rows: Vec<&str> = md.lines().filter(|l| l.starts_with("| ")).collect();
    let header = rows[0];
    let columns = row_pipes(header);
    assert_eq!(columns, 7, "{header}");
    for r in &rows {
        assert_eq!(row_pipes(r), columns, "a row's cells were split: {r}");
    }
    // Both trials are rows of the table (plus the header).
    assert_eq!(
        rows.iter().filter(|r| r.contains("&lt;img")).count(),
        2,
        "{md}"
    );
    // The only heading is the title.
    assert_eq!(
        md.lines().filter(|l| l.starts_with("# ")).count(),
        1,
        "{md}"
    );
}

#[test]
fn an_error_line_escapes_control_characters_and_cuts_a_10_mb_value() {
    let d = tempfile::tempdir().unwrap();
    let mut v = baseline();
    let huge = format!("\u{1b}[2J\u{0}{}", "x".repeat(10 << 20));
    v["schema_version"] = huge.into();
    let p = write(d.path(), "report.json", &v);
    let o = tune(&["report", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "exit {:?}", o.status.code());
    let err = &o.stderr;
    assert!(err.len() < 4096, "error line is {} bytes", err.len());
    assert!(
        !err.contains(&0x1b) && !err.contains(&0),
        "raw ESC/NUL printed"
    );
    let err = String::from_utf8_lossy(err);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("error: "), "{err}");
    assert!(err.contains("\\u{1b}[2J\\u{0}x"), "{err}");
    assert!(err.contains(" bytes)"), "{err}");
}

#[test]
fn a_malformed_report_is_exit_2_naming_the_file_and_the_field() {
    let d = tempfile::tempdir().unwrap();
    for (what, edit) in [
        ("steps", serde_json::json!("x")),
        ("steps", serde_json::json!(-1)),
        ("peak_total_bytes", serde_json::json!(1e30)),
        (
            "samples_per_s",
            serde_json::json!({"median": -1.0, "lo": 0.0, "hi": 1.0}),
        ),
    ] {
        let mut v = baseline();
        v["trials"][0][what] = edit;
        let p = write(d.path(), "bad.json", &v);
        let o = tune(&["report", p.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(2), "{what}: {}", show(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("bad.json") && err.contains(what),
            "{what}: {err}"
        );
        assert_eq!(err.lines().count(), 1, "{err}");
    }
}

/// `tune report` with the file-size limit set below one of its outputs: the kernel
/// refuses that write (EFBIG) at write time, as a full disk would (ENOSPC).
fn report_with_file_size_limit(json: &Path, limit: u64) -> Output {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tune"));
    cmd.arg("report").arg(json);
    // SAFETY: setrlimit and signal are async-signal-safe and touch only the child.
    unsafe {
        cmd.pre_exec(move || {
            // Ignored, SIGXFSZ would kill tune instead of failing the write.
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            let lim = libc::rlimit {
                rlim_cur: limit,
                rlim_max: limit,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let (o, finished) = tune_within(&mut cmd, DEADLINE);
    assert!(finished);
    o
}

#[test]
fn a_write_failure_exits_1_and_keeps_the_previous_report_set() {
    let d = tempfile::tempdir().unwrap();
    let json = write(d.path(), "report.json", &baseline());
    let o = tune(&["report", json.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));

    // A failed trial's long error: `*` doubles in markdown (`\*`), so summary.md
    // outgrows report.html and a limit between them fails the second write only.
    let mut v = baseline();
    v["trials"][1]["status"] = "crashed".into();
    v["trials"][1]["error"] = "*".repeat(2 << 20).into();
    let scratch = tempfile::tempdir().unwrap();
    let probe = write(scratch.path(), "report.json", &v);
    let o = tune(&["report", probe.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let size = |n: &str| std::fs::metadata(scratch.path().join(n)).unwrap().len();
    let (html, md) = (size("report.html"), size("summary.md"));
    assert!(md > html + 4096, "precondition: md {md} > html {html}");

    write(d.path(), "report.json", &v);
    let before = listing(d.path());
    let o = report_with_file_size_limit(&json, (html + md) / 2);
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("cannot write"),
        "{}",
        show(&o)
    );
    let after = listing(d.path());
    let names: Vec<&String> = after.iter().map(|f| &f.0).collect();
    assert!(
        before == after,
        "the previous set changed or temps were left: {names:?}"
    );
}

#[test]
fn a_read_only_output_folder_is_exit_1_not_bad_input() {
    use std::os::unix::fs::PermissionsExt;
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("ro");
    std::fs::create_dir(&out).unwrap();
    let json = write(&out, "report.json", &baseline());
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o555)).unwrap();
    if std::fs::write(out.join("probe"), b"x").is_ok() {
        // Running as root: permissions do not stop writes, nothing to test here.
        return;
    }
    let o = tune(&["report", json.to_str().unwrap()]);
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    assert_eq!(std::fs::read_dir(&out).unwrap().count(), 1);
}

#[test]
fn a_stale_temp_from_a_crashed_run_is_removed() {
    let d = tempfile::tempdir().unwrap();
    let json = write(d.path(), "report.json", &baseline());
    // No process has this id (above the kernel's pid_max), as after a crash.
    let stale = d.path().join(".report.html.999999999.0.tmp");
    std::fs::write(&stale, "half a page").unwrap();
    let o = tune(&["report", json.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert!(!stale.exists(), "stale temp left behind");
    let names: Vec<String> = listing(d.path()).into_iter().map(|f| f.0).collect();
    assert_eq!(names, ["report.html", "report.json", "summary.md"]);
}

/// The committed corpus of hostile reports, one by one through `tune report`: `ok-*`
/// render (exit 0), `bad-*` are refused as bad input (exit 2), none hangs.
#[test]
fn the_hostile_report_corpus_renders_or_is_refused_in_bounded_time() {
    let d = tempfile::tempdir().unwrap();
    let mut seen = 0;
    for e in std::fs::read_dir("tests/corpus/report").unwrap() {
        let src = e.unwrap().path();
        let name = src.file_stem().unwrap().to_string_lossy().into_owned();
        let json = d.path().join(format!("{name}.json"));
        std::fs::copy(&src, &json).unwrap();
        let start = Instant::now();
        let o = tune(&["report", json.to_str().unwrap()]);
        let want = if name.starts_with("bad-") { 2 } else { 0 };
        assert_eq!(o.status.code(), Some(want), "{name}: {}", show(&o));
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{name}: {:?}",
            start.elapsed()
        );
        assert!(
            String::from_utf8_lossy(&o.stderr).lines().count() <= 1,
            "{name}"
        );
        seen += 1;
    }
    assert!(seen >= 6);
}

/// Issue #16: a repeat embeds the engine's summary (schema 2.0). A journal and a report
/// written by tune before that change (committed from that binary's output under
/// tests/corpus/v1/) still resume, render and gate, and their figures come through.
const V1: &str = "tests/corpus/v1";

fn json(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn gate_json(base: &Path, cur: &Path) -> (Output, Value) {
    let o = tune(&[
        "gate",
        "--baseline",
        base.to_str().unwrap(),
        "--current",
        cur.to_str().unwrap(),
        "--json",
    ]);
    let v = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
    (o, v)
}

#[test]
fn a_1x_journal_resumes_without_rerunning_and_its_figures_reach_the_2x_report() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let journal = out.join("journal.jsonl");
    std::fs::copy(format!("{V1}/journal.jsonl"), &journal).unwrap();
    let before = std::fs::read_to_string(&journal).unwrap();
    let spec = format!("{V1}/spec.toml");
    let o = tune(&["sweep", &spec, "--out", out.to_str().unwrap(), "--resume"]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    // Every trial was finished: nothing re-ran, nothing was appended.
    assert_eq!(std::fs::read_to_string(&journal).unwrap(), before);
    let report = json(&out.join("report.json"));
    assert_eq!(report["schema_version"], "2.0");
    let old: Value = serde_json::from_str(before.lines().nth(1).unwrap()).unwrap();
    let (old_rep, new_rep) = (&old["repeats"][0], &report["trials"][0]["repeats"][0]);
    assert_eq!(new_rep["step_times"], old_rep["step_times"]);
    assert_eq!(new_rep["phases_mean"], old_rep["phases_mean"]);
    assert_eq!(new_rep["peak_total_bytes"], old_rep["peak_total_bytes"]);
    assert_eq!(
        new_rep["samples_per_step"].as_u64().map(|n| n as f64),
        old_rep["samples_per_step"].as_f64()
    );
    assert_eq!(
        new_rep["devices"][1]["busy_fraction"],
        old_rep["devices"][1]["busy_share"]
    );
    assert_eq!(new_rep["devices"][1]["index"], 1);
    // The report's per-device summary is the engine's type too, one entry per device.
    let devs = report["trials"][0]["devices"].as_array().unwrap();
    assert_eq!(devs.len(), 2);
    assert_eq!(devs[0]["peak_bytes"], old_rep["devices"][0]["peak_bytes"]);
}

#[test]
fn a_1x_report_renders_and_gates_against_a_2x_report_both_ways() {
    let d = tempfile::tempdir().unwrap();
    for (name, src) in [
        ("v1", format!("{V1}/report.json")),
        ("ci", BASELINE.to_string()),
    ] {
        let p = d.path().join(format!("{name}.json"));
        std::fs::copy(&src, &p).unwrap();
        let md = d.path().join(format!("{name}.md"));
        let o = tune(&["report", p.to_str().unwrap(), "--md", md.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(0), "{name}: {}", show(&o));
        // The DataParallel devices of the 1.x report are still named and summarised.
        if name == "v1" {
            let html = std::fs::read_to_string(d.path().join("report.html")).unwrap();
            assert!(html.contains("cpu:1"), "no per-device bars");
        }
    }
    // A fresh 2.0 sweep of the same spec, gated against the 1.x report and back.
    let out = d.path().join("out");
    let spec = format!("{V1}/spec.toml");
    let o = tune(&["sweep", &spec, "--out", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let old = PathBuf::from(format!("{V1}/report.json"));
    let new = out.join("report.json");
    assert_eq!(json(&new)["schema_version"], "2.0");
    for (base, cur) in [(&old, &new), (&new, &old)] {
        let (o, v) = gate_json(base, cur);
        // Pass or regression is the machine's business; bad input (2) is the bug.
        assert!(matches!(o.status.code(), Some(0 | 1)), "{}", show(&o));
        assert_eq!(v["checks"].as_array().map(Vec::len), Some(2), "{v}");
        assert_eq!(v["only_in_baseline"].as_array().map(Vec::len), Some(0));
    }
    // The same measurements, read once in the 1.x and once in the 2.0 form, gate equal.
    let resumed = d.path().join("resumed");
    std::fs::create_dir(&resumed).unwrap();
    std::fs::copy(format!("{V1}/journal.jsonl"), resumed.join("journal.jsonl")).unwrap();
    let o = tune(&[
        "sweep",
        &spec,
        "--out",
        resumed.to_str().unwrap(),
        "--resume",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let (o, v) = gate_json(&old, &resumed.join("report.json"));
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    for c in v["checks"].as_array().unwrap() {
        assert_eq!(c["outcome"]["ratio"], 1.0, "{c}");
    }
}

#[test]
fn a_malformed_2x_report_is_exit_2_naming_the_field_and_where() {
    let d = tempfile::tempdir().unwrap();
    let mut v: Value = json(Path::new("tests/corpus/report/ok-v2-dp-ddp.json"));
    assert_eq!(v["schema_version"], "2.0");
    v["trials"][0]["repeats"][0]["devices"][1]["busy_fraction"] = Value::from("x");
    let p = d.path().join("bad.json");
    std::fs::write(&p, serde_json::to_string_pretty(&v).unwrap()).unwrap();
    let o = tune(&["report", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", show(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("bad.json") && err.contains("field `busy_fraction`") && err.contains("line"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
}
