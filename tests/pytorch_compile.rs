//! The `compile` knob on a real, unmodified script (issue #26): tune's hooks compile the
//! model the optimizer trains (`nn.Module.compile`, in place) on its first forward, keep
//! the compile time apart from the steady steps, and recommend a mode only when it pays
//! for its compile within the job (`[search] job_steps`); a compile that fails (here: no
//! C++ compiler for inductor) is its own trial status with PyTorch's message and the
//! sweep goes on; a script that compiles itself is the baseline, and `off` overrides it.
//! Real PyTorch on CPU (inductor needs a C++ compiler; without one the success paths skip
//! with the reason), real processes. The planted effect: tests/pytorch/pointwise.py's
//! chain of 24 pointwise operations, which inductor fuses (3.4x faster here, one thread).

#[path = "pytorch/support.rs"]
mod support;

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

use support::show;

/// Whether inductor compiles on this machine (it needs a working C++ compiler); the
/// reason when it does not. Asked once per test binary: the answer costs a Python start,
/// `import torch` and a compile, 10-20 s under load.
fn inductor_works(py: &Path) -> Result<(), String> {
    static ANSWER: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    ANSWER.get_or_init(|| ask_inductor(py)).clone()
}

fn ask_inductor(py: &Path) -> Result<(), String> {
    let o = Command::new(py)
        .args([
            "-c",
            "import torch; f = torch.compile(lambda x: x * 2 + 1); f(torch.ones(8))",
        ])
        .output()
        .map_err(|e| e.to_string())?;
    if o.status.success() {
        return Ok(());
    }
    let err = String::from_utf8_lossy(&o.stderr);
    Err(err
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .to_string())
}

/// Runs a sweep of pointwise.py with `knobs` and `search` lines (`search` may begin
/// with `[workload.python]` lines, before a `[search]` of its own); returns the output
/// and report.json.
fn sweep(
    d: &Path,
    py: &Path,
    args: &str,
    knobs: &str,
    search: &str,
    envs: &[(&str, &Path)],
    resume: bool,
) -> (Output, Value) {
    let spec = d.join("spec.toml");
    let (python, search) = search.split_once("[search]\n").unwrap_or(("", search));
    std::fs::write(
        &spec,
        format!(
            "name = \"compile\"\n[workload.python]\nrun = \"{} {} {args}\"\nwarmup = 3\nsteps = 15\n{python}\
             [knobs]\n{knobs}\n[search]\nrepeats = 1\nconfirm_repeats = 1\ntimeout_s = 400\n{search}\n",
            py.display(),
            support::script("pointwise.py").display()
        ),
    )
    .unwrap();
    let out = d.join("out");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tune"));
    cmd.arg("sweep")
        .arg(&spec)
        .arg("--out")
        .arg(&out)
        .env("TUNE_CACHE_DIR", d.join("cache"));
    if resume {
        cmd.arg("--resume");
    }
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let o = cmd.output().unwrap();
    let text = std::fs::read_to_string(out.join("report.json")).unwrap_or_default();
    (o, serde_json::from_str(&text).unwrap_or(Value::Null))
}

fn trial<'a>(r: &'a Value, label: &str) -> &'a Value {
    r["trials"]
        .as_array()
        .and_then(|ts| ts.iter().find(|t| t["label"] == label))
        .unwrap_or(&Value::Null)
}

#[test]
fn compile_is_injected_timed_apart_and_recommended_only_within_the_job() {
    let _serial = support::serial();
    let test = "compile_is_injected_timed_apart_and_recommended_only_within_the_job";
    let Some(py) = support::python(test) else {
        return;
    };
    if let Err(why) = inductor_works(&py) {
        eprintln!("skipping {test}: torch.compile cannot run here ({why})");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let knobs = "compile = [\"off\", \"default\"]";
    let (o, r) = sweep(d.path(), &py, "", knobs, "", &[], false);
    assert!(o.status.success(), "{}", show(&o));
    let base = trial(&r, "baseline");
    let comp = trial(&r, "compile=default");
    assert_eq!(base["status"], "ok", "{}", show(&o));
    assert_eq!(comp["status"], "ok", "{}", show(&o));
    // Compile time is measured, kept out of the steady steps, and said.
    let rep = &comp["repeats"][0];
    let secs = rep["compile_s"].as_f64().unwrap_or(0.0);
    assert!(secs > 0.0, "{rep}");
    assert!(base["repeats"][0].get("compile_s").is_none(), "{base}");
    let note = comp["error"].as_str().unwrap_or("");
    assert!(
        note.contains("compile ") && note.contains("Chain (default)"),
        "{note}"
    );
    let steps = rep["step_times"].as_array().unwrap();
    let biggest = steps.iter().filter_map(Value::as_f64).fold(0.0, f64::max);
    assert!(
        biggest < secs,
        "a compile step was measured: {biggest} s >= {secs} s"
    );
    // The planted 3x: recommended with its break-even, within the default 10,000 steps.
    let rec = r["recommendations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["change"]["compile"] == "default");
    let rec = rec.unwrap_or_else(|| panic!("no compile recommendation:\n{}", show(&o)));
    let ev = rec["evidence"].as_str().unwrap_or("");
    assert!(ev.contains("pays for its compile after"), "{ev}");
    assert!(rec["pytorch"]
        .as_str()
        .unwrap_or("")
        .contains("torch.compile(model)"));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("torch.compile "), "time to answer: {err}");

    // The same measurements for a job of 10 steps: the compile cannot pay off within it.
    let (o, r) = sweep(d.path(), &py, "", knobs, "job_steps = 10", &[], true);
    assert!(o.status.success(), "{}", show(&o));
    let recs = r["recommendations"].as_array().unwrap();
    assert!(
        recs.iter().all(|x| x["change"].get("compile").is_none()),
        "{recs:?}"
    );
    let notes = r["notes"].to_string();
    assert!(
        notes.contains("not recommended: compile=default measured faster per step")
            && notes.contains("planned 10 steps"),
        "{notes}"
    );
}

#[test]
fn a_compile_that_fails_is_its_own_status_and_the_sweep_goes_on() {
    let _serial = support::serial();
    let Some(py) = support::python("a_compile_that_fails_is_its_own_status_and_the_sweep_goes_on")
    else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    // No C++ compiler for inductor, and an empty cache so nothing compiled before loads.
    let cache = d.path().join("inductor");
    let nocc = d.path().join("no-such-compiler/g++");
    let (o, r) = sweep(
        d.path(),
        &py,
        "",
        "compile = [\"off\", \"default\"]",
        "",
        &[("CXX", &nocc), ("TORCHINDUCTOR_CACHE_DIR", &cache)],
        false,
    );
    assert!(o.status.success(), "{}", show(&o));
    assert_eq!(trial(&r, "baseline")["status"], "ok", "{}", show(&o));
    let t = trial(&r, "compile=default");
    assert_eq!(t["status"], "unsupported", "{t}\n{}", show(&o));
    let why = t["error"].as_str().unwrap_or("");
    assert!(
        why.starts_with("compile=default: torch.compile failed in this job")
            && why.contains("no-such-compiler"),
        "{why}"
    );
}

#[test]
fn a_script_that_compiles_itself_is_the_baseline_and_off_overrides_it() {
    let _serial = support::serial();
    let test = "a_script_that_compiles_itself_is_the_baseline_and_off_overrides_it";
    let Some(py) = support::python(test) else {
        return;
    };
    if let Err(why) = inductor_works(&py) {
        eprintln!("skipping {test}: torch.compile cannot run here ({why})");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    // The script compiles with mode default, the spec's baseline value: its own call is
    // what the baseline runs (read as the script's own), and the `off` trial overrides it.
    let (o, r) = sweep(
        d.path(),
        &py,
        "--script-compile default",
        "compile = [\"default\", \"off\"]",
        "",
        &[],
        false,
    );
    assert!(o.status.success(), "{}", show(&o));
    let base = trial(&r, "baseline");
    assert_eq!(base["status"], "ok", "{}", show(&o));
    assert_eq!(base["script_knobs"]["compile"], "default", "{base}");
    assert!(
        base["repeats"][0]["compile_s"].as_f64().unwrap_or(0.0) > 0.0,
        "{base}"
    );
    let off = trial(&r, "compile=off");
    assert_eq!(off["status"], "ok", "{}", show(&o));
    let said = off["overrides"]["compile"].as_str().unwrap_or("");
    assert!(
        said.contains("your script sets compile=\"default\"") && said.contains("\"off\""),
        "{off}"
    );
    assert!(off["repeats"][0].get("compile_s").is_none(), "{off}");
}

#[test]
fn a_compile_past_its_budget_is_ended_as_a_timeout_that_says_why() {
    let _serial = support::serial();
    let test = "a_compile_past_its_budget_is_ended_as_a_timeout_that_says_why";
    let Some(py) = support::python(test) else {
        return;
    };
    if let Err(why) = inductor_works(&py) {
        eprintln!("skipping {test}: torch.compile cannot run here ({why})");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    // A cold inductor cache: the compile of the 24-layer chain (dynamo, then C++ kernels
    // built by the compiler) takes many seconds, far past a 1 s budget.
    let cache = d.path().join("inductor");
    let tag = d.path().display().to_string();
    let (o, r) = sweep(
        d.path(),
        &py,
        &format!("--tag {tag}"),
        "compile = [\"off\", \"default\"]",
        "compile_budget_s = 1\n[search]\n",
        &[("TORCHINDUCTOR_CACHE_DIR", &cache)],
        false,
    );
    assert!(o.status.success(), "{}", show(&o));
    assert_eq!(trial(&r, "baseline")["status"], "ok", "{}", show(&o));
    let t = trial(&r, "compile=default");
    assert_eq!(t["status"], "timeout", "{t}\n{}", show(&o));
    let why = t["error"].as_str().unwrap_or("");
    assert!(
        why.starts_with("compile=default: torch.compile was still compiling")
            && why.contains("(compile_budget_s = 1)"),
        "{why}"
    );
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(
        support::alive_with(&tag),
        Vec::<String>::new(),
        "processes left behind"
    );
}

/// The engine has no graph compiler: a non-default `compile` is recorded as not
/// applicable there, never faked.
#[test]
fn the_engine_records_compile_as_not_applicable() {
    let o = Command::new(env!("CARGO_BIN_EXE_tune"))
        .args(["train", "--compile", "default", "--steps", "2", "--json"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", show(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
    let why = v["not_applicable"]["compile"].as_str().unwrap_or("");
    assert!(why.contains("no graph compiler"), "{}", show(&o));
}
