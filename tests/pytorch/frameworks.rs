//! Part of the `pytorch_watch_timeline` binary (one link less in CI).
//! `tune watch` of jobs whose loop a framework runs (#31): PyTorch Lightning's Trainer and
//! the Hugging Face Trainer, both real (installed beside torch by `.ci/run`). The hooks
//! name the framework, so the advice can give its settings (`src/knobs/framework.rs`);
//! the script's own loader settings are the training loader's, not the validation loader
//! Lightning builds first; Lightning's gradient accumulation is counted as such, not as
//! the closure it hands the optimizer; the Trainer's padded batches count their real
//! tokens. A framework that is not installed skips with the reason, or fails under
//! `TUNE_REQUIRE_FRAMEWORKS=1`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use super::support::{self, show};

/// The interpreter, where it imports torch and `module`; else None after saying why.
fn python_with(test: &str, module: &str) -> Option<PathBuf> {
    let py = support::python(test)?;
    let ok = Command::new(&py)
        .args(["-c", &format!("import {module}")])
        .output()
        .is_ok_and(|o| o.status.success());
    if ok {
        return Some(py);
    }
    let why = format!("{} cannot import {module}", py.display());
    if std::env::var("TUNE_REQUIRE_FRAMEWORKS").is_ok_and(|v| v == "1") {
        panic!("{test}: TUNE_REQUIRE_FRAMEWORKS=1 but {why}");
    }
    eprintln!("skipping {test}: {why}");
    None
}

/// `tune watch --steps N` of a fixture, in its own folder (the job's cwd, so whatever
/// the framework writes stays there): the output and report.json.
fn watch(py: &Path, name: &str, script: &str, steps: u32, args: &[&str]) -> (Output, Value) {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("pytorch_frameworks")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("watch");
    let o = Command::new(env!("CARGO_BIN_EXE_tune"))
        .arg("watch")
        .arg("--steps")
        .arg(steps.to_string())
        .arg("--out")
        .arg(&out)
        .arg("--")
        .arg(py)
        .arg(support::script(script))
        .arg(dir.join("job-out"))
        .args(args)
        .current_dir(&dir)
        .env("TUNE_CACHE_DIR", dir.join("cache"))
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let text = std::fs::read_to_string(out.join("report.json")).unwrap_or_default();
    (o, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// Lightning: framework named; batch_size the training loader's 16, not the validation
/// loader's 50 (built first, for the sanity check); `accumulate_grad_batches=2` counted
/// as 2 backward calls and 32 samples a step, and not called "the optimizer's closure,
/// as L-BFGS runs it".
#[test]
fn a_lightning_job_is_named_and_its_accumulation_counted() {
    let test = "a_lightning_job_is_named_and_its_accumulation_counted";
    let Some(py) = python_with(test, "lightning") else {
        return;
    };
    let _machine = support::serial();
    let (o, r) = watch(&py, "lightning", "lightning_fit.py", 12, &[]);
    assert!(o.status.success(), "{}", show(&o));
    let p = &r["python"];
    let knobs = &p["script_knobs"];
    assert_eq!(knobs["framework"], "lightning", "{p}");
    assert_eq!(knobs["batch_size"], "16", "{p}");
    assert_eq!(p["backwards_per_step"].as_f64(), Some(2.0), "{p}");
    let samples = p["samples_per_s"].as_f64().unwrap() * p["median_step_ms"].as_f64().unwrap();
    assert!((samples / 1e3 - 32.0).abs() < 1e-6, "{samples} {p}");
    let err = String::from_utf8_lossy(&o.stderr);
    let steps = err.lines().find(|l| l.starts_with("steps:")).unwrap_or("");
    assert!(
        steps.contains("2 backward calls per step (gradient accumulation)")
            && !steps.contains("closure"),
        "{steps}"
    );
}

/// The Hugging Face Trainer: framework named (its loop, not the accelerate wrapper it
/// runs on); batch_size the Trainer's 8, not the default 1 of the loader accelerate
/// rebuilds around a batch sampler; tokens the attention mask's real ones (20 a sequence
/// on average, 32 with the padding).
#[test]
fn a_hugging_face_trainer_job_is_named_and_its_real_tokens_counted() {
    let test = "a_hugging_face_trainer_job_is_named_and_its_real_tokens_counted";
    let Some(py) = python_with(test, "transformers") else {
        return;
    };
    let _machine = support::serial();
    let (o, r) = watch(&py, "transformers", "hf_trainer.py", 12, &[]);
    assert!(o.status.success(), "{}", show(&o));
    let p = &r["python"];
    let knobs = &p["script_knobs"];
    assert_eq!(knobs["framework"], "transformers", "{p}");
    assert_eq!(knobs["batch_size"], "8", "{p}");
    let per_sample = p["tokens_per_s"].as_f64().unwrap() / p["samples_per_s"].as_f64().unwrap();
    // 8 (a short sequence) to 32 (a long one), the median step's mix; padded it is 32
    // unless a batch drew 8 short ones.
    assert!(per_sample > 8.0 && per_sample < 28.0, "{per_sample} {p}");
}

/// Lightning's DDP on 2 CPU ranks, which it starts by running the script again and whose
/// loaders it re-creates around a DistributedSampler. With tune's hooks the job crashed
/// ("'DataLoader' object has no attribute '__dataset'": Lightning reads the patched
/// constructor's signature); and its DistributedDataParallel wrapper, left in eval mode
/// after the sanity check, hid the forward inside the optimizer's step (forward 4.0%,
/// optimizer 36.5% of rank 0's step, where they are 18.4% and 16.8%).
#[test]
fn a_lightning_ddp_job_runs_and_its_forward_is_its_forward() {
    let test = "a_lightning_ddp_job_runs_and_its_forward_is_its_forward";
    let Some(py) = python_with(test, "lightning") else {
        return;
    };
    let _machine = support::serial();
    let args = ["--ddp", "--accum", "1", "--batch", "512", "--width", "1024"];
    let (o, r) = watch(&py, "lightning_ddp", "lightning_fit.py", 10, &args);
    assert!(o.status.success(), "{}", show(&o));
    let p = &r["python"];
    assert_eq!(p["ranks"].as_array().map(Vec::len), Some(2), "{p}");
    let share = |k: &str| p["phase_share"][k].as_f64().unwrap_or(0.0);
    assert!(
        share("forward") >= 0.08 && share("forward") >= 0.5 * share("optimizer"),
        "{p}"
    );
}

/// The Hugging Face Trainer's batch size swept: the Trainer builds a DataLoader of
/// `per_device_train_batch_size`, which tune's knob sets, and accelerate rebuilds it
/// around that loader's batch sampler. The trial trained on 16 a step and measured 1.64x,
/// yet was called "not applicable" (the rebuilt loader takes a batch_sampler) and its
/// gain "drift, not a knob".
#[test]
fn a_trainers_batch_size_trial_acts_and_is_said_to() {
    let test = "a_trainers_batch_size_trial_acts_and_is_said_to";
    let Some(py) = python_with(test, "transformers") else {
        return;
    };
    let _machine = support::serial();
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("pytorch_frameworks")
        .join("trainer_batch");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let spec = format!(
        "name = \"trainer-batch\"\n[workload.python]\nrun = \"{} {} {}\"\nsteps = 8\n\
         warmup = 2\n[knobs]\nbatch_size = [8, 16]\n[search]\nrepeats = 1\n",
        py.display(),
        support::script("hf_trainer.py").display(),
        dir.join("job-out").display()
    );
    let (o, r) = support::sweep_script(&dir, &spec);
    assert!(o.status.success(), "{}", show(&o));
    let t = support::trial(&r, "batch_size=16");
    assert_eq!(t["status"], "ok", "{t:#}");
    let na = t["not_applicable"].as_object().map_or(0, |m| m.len());
    assert_eq!(na, 0, "{t:#}");
    assert!(t["overrides"]["batch_size"].is_string(), "{t:#}");
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(!stdout.contains("batch_size not applicable"), "{stdout}");
}
