//! Advice a PyTorch user can act on (#31), on real PyTorch scripts written for these
//! tests: a knob that cannot act in the job is never recommended and is said as "no
//! effect possible here"; the baseline is the script as written ("your script already
//! does this"); samples/s counts the real batch, gradient accumulation included; a knob
//! the hooks cannot inject is refused when the spec is read.

#[path = "pytorch/support.rs"]
mod support;

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

use support::show;

fn run_sweep(dir: &Path, spec: &str) -> (Output, std::path::PathBuf, Value) {
    let (o, r) = support::sweep_script(dir, spec);
    (o, dir.join("out"), r)
}

#[test]
fn a_loop_without_a_dataloader_gets_no_loader_advice_and_counts_its_samples() {
    let _serial = support::serial();
    let Some(py) =
        support::python("a_loop_without_a_dataloader_gets_no_loader_advice_and_counts_its_samples")
    else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    // No DataLoader, no CUDA, no 4-D weights, a bare zero_grad(): of these knobs only
    // zero_grad=memset could change anything, and the script clears to None already.
    // One pair for a settling or a confirmation: this test reads neither's figures.
    let spec = format!(
        "name = \"plain\"\n[workload.python]\nrun = \"{} {} --steps 30 --batch 32 --accum 2\"\n\
         [knobs]\nnum_workers = [0, 2]\npin_memory = [false, true]\nautotune = [false, true]\n\
         channels_last = [false, true]\nzero_grad = [\"memset\", \"none\"]\n\
         [search]\nstrategy = \"one-at-a-time\"\nrepeats = 1\nconfirm_repeats = 1\n\
         timeout_s = 120\n",
        py.display(),
        support::script("plain_loop.py").display()
    );
    let (o, out, r) = run_sweep(d.path(), &spec);
    assert!(o.status.success(), "{}", show(&o));
    let trials = r["trials"].as_array().unwrap();
    for t in trials {
        assert_eq!(t["status"], "ok", "{t}");
    }
    let base = trials.iter().find(|t| t["label"] == "baseline").unwrap();
    // Samples are the model's inputs: 2 micro-batches of 32 per optimizer step, not 1
    // "sample" per step.
    assert_eq!(base["repeats"][0]["samples_per_step"], 64, "{base}");
    assert_eq!(base["script_knobs"]["zero_grad"], "none", "{base}");
    let w2 = trials
        .iter()
        .find(|t| t["label"] == "num_workers=2")
        .unwrap();
    assert!(
        w2["not_applicable"]["num_workers"]
            .as_str()
            .unwrap_or("")
            .contains("DataLoader"),
        "{w2}"
    );
    // The script already clears to None: a zero_grad=none trial would be the baseline
    // again, so it is not run, and that is said.
    assert!(
        !trials.iter().any(|t| t["label"] == "zero_grad=none"),
        "a trial identical to the baseline ran: {trials:?}"
    );
    assert!(
        String::from_utf8_lossy(&o.stderr)
            .contains("zero_grad=none: not run, same as the baseline"),
        "{}",
        show(&o)
    );
    let recs = r["recommendations"].as_array().unwrap();
    for x in recs {
        let ch = &x["change"];
        for knob in ["num_workers", "pin_memory", "autotune", "channels_last"] {
            assert!(ch[knob].is_null(), "{knob} recommended: {x}");
        }
        assert_ne!(
            ch["zero_grad"], "none",
            "told to do what the script does: {x}"
        );
    }
    let notes: Vec<&str> = r["notes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let has = |s: &str| notes.iter().any(|n| n.contains(s));
    for said in [
        "no effect possible here: num_workers=2",
        "no effect possible here: pin_memory=true",
        "no effect possible here: autotune=true",
        "no effect possible here: channels_last=true",
        "your script already does this: zero_grad=none",
        "same as the baseline, so not run again",
    ] {
        assert!(has(said), "no note {said:?} in {notes:#?}");
    }
    // Where users look: the terminal and summary.md.
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.contains("no effect possible here: num_workers=2"),
        "{stdout}"
    );
    let md = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert!(
        md.contains("your script already does this: zero\\_grad=none")
            || md.contains("your script already does this: zero_grad=none"),
        "{md}"
    );
}

#[test]
fn a_knob_the_hooks_cannot_inject_is_refused_when_the_spec_is_read() {
    let d = tempfile::tempdir().unwrap();
    let spec = "name = \"refused\"\n[workload.python]\nrun = \"python train.py\"\n\
                [knobs]\nzero_grad = [\"memset\", \"none\"]\ngrad_accum = [1, 2]\n";
    let (o, out, _) = run_sweep(d.path(), spec);
    assert_eq!(o.status.code(), Some(2), "{}", show(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("spec.toml:6:1") && err.contains("grad_accum"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(!out.exists(), "a refused spec wrote {}", out.display());
    // A placeholder hands the value to the script itself: accepted.
    let ok =
        "name = \"placed\"\n[workload.python]\nrun = \"python train.py --ckpt {checkpoint}\"\n\
              [knobs]\ncheckpoint = [\"off\", \"sqrt\"]\n";
    std::fs::write(d.path().join("ok.toml"), ok).unwrap();
    let parsed = tune::spec::Spec::load(d.path().join("ok.toml"));
    assert!(parsed.is_ok(), "{parsed:?}");
}

// The baseline's first run is made busy by spinning processes; every later run is quiet.
// A trial is judged against the baseline runs on both sides of it (the plan's busy one
// and the quiet one interleaved after the third trial), so a change that is really
// slower, made to look about 2x faster by the busy baseline, is withdrawn before any run
// is spent confirming it, settled in a pair beside a quiet baseline run that measures it
// slower, and the real gain stands and is confirmed (#31).
#[test]
fn a_busy_baseline_minute_cannot_make_a_change_stand() {
    let _serial = support::serial();
    let Some(py) = support::python("a_busy_baseline_minute_cannot_make_a_change_stand") else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    // The script as written wastes 12 forward passes per batch: extra=0 is a real gain
    // (4.1x, 2650 against 10883 samples/s in single runs at load 4). width=768 is a real
    // loss (more than twice the arithmetic of the script's 512). The first run, the
    // baseline, shares the machine with four spinning processes per core, so it gets
    // about a quarter of a core and the loss next to it looks like a 2x gain: far from
    // any margin either way. Everything else makes only losses: no trial is a do-nothing
    // change whose fate is a coin toss of the machine's run-to-run noise (the drift
    // margin's own test, with planted timings, is advisor_confirm's). Five plan trials,
    // so the baseline runs again after the third.
    let marker = d.path().join("burned");
    let burners = 4 * std::thread::available_parallelism().map_or(1, |n| n.get());
    let spec = format!(
        "name = \"drift\"\n[workload.python]\n\
         run = \"{} {} --steps 400 --width {{width}} --burn-once {} --burners {burners} \
         --extra {{extra}}\"\n\
         warmup = 3\nsteps = 30\n\
         [params]\nwidth = [512, 768]\nextra = [12, 0, 14, 16]\n\
         [search]\nstrategy = \"one-at-a-time\"\nrepeats = 1\nconfirm_repeats = 1\n\
         timeout_s = 180\n",
        py.display(),
        support::script("plain_loop.py").display(),
        marker.display()
    );
    let (o, out, r) = run_sweep(d.path(), &spec);
    assert!(o.status.success(), "{}", show(&o));
    assert!(marker.exists(), "the baseline never burned: {}", show(&o));
    // The set-up did what it says: the busy baseline ran far slower than its quiet
    // run interleaved after the third trial.
    let busy = support::trial(&r, "baseline")["samples_per_s"]["median"]
        .as_f64()
        .unwrap_or(0.0);
    let quiet = r["baseline_runs"][0]["samples_per_s"]["median"]
        .as_f64()
        .unwrap_or(0.0);
    assert!(busy < 0.5 * quiet, "{busy} vs {quiet}\n{}", show(&o));
    let recs = r["recommendations"].as_array().unwrap();
    // The wider model is slower: only the busy baseline made it look faster. The drift
    // check withdrew it before the confirmation, and its pairs beside a quiet baseline
    // run, where the drift cancels, measured it slower: it is recommended nowhere.
    let wide = support::trial(&r, "width=768");
    assert!(
        wide["settled"]["sweep"]["ratio"].as_f64().unwrap_or(0.0) > 1.2,
        "width=768 was not settled after reading faster against the busy baseline: \
         {wide}\n{}",
        show(&o)
    );
    assert!(
        wide["ratio_vs_baseline"]["ratio"].as_f64().unwrap_or(9.0) < 1.0,
        "its pairs did not measure it slower: {wide}\n{}",
        show(&o)
    );
    if let Some(w) = recs.iter().find(|x| x["change"]["width"] == "768") {
        assert_eq!(w["confidence"], "withdrawn", "{w}\n{}", show(&o));
    }
    // The real gain is still recommended (it beats the quiet run too), and a
    // confirmation below its prediction is never "partly confirmed".
    let extra = recs
        .iter()
        .find(|x| x["change"]["extra"] == "0")
        .unwrap_or_else(|| panic!("extra=0 not recommended: {recs:?}\n{}", show(&o)));
    assert_ne!(extra["confidence"], "withdrawn", "{extra}\n{}", show(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(!stdout.contains("partly confirmed"), "{stdout}");
    // The drift across the baseline's runs is measured and shown where users look, and
    // so is what the pairs measured of the change it made look faster.
    assert!(
        r["drift"]["runs"].as_u64().unwrap_or(0) >= 2,
        "{}",
        r["drift"]
    );
    let md = std::fs::read_to_string(out.join("summary.md")).unwrap();
    for (face, text) in [("terminal", stdout.as_ref()), ("summary.md", md.as_str())] {
        assert!(text.contains("Drift: the baseline ran"), "{face}:\n{text}");
        assert!(
            text.contains("width=768: read") && text.contains("measured again side by side"),
            "{face}:\n{text}"
        );
    }
    // The withdrawn change is not in the confirmation: extra=0 alone is.
    let c = &r["confirmation"];
    assert_eq!(c["label"], "extra=0", "{c}\n{}", show(&o));
}

#[test]
fn loader_workers_that_buy_nothing_get_a_memory_recommendation() {
    let _serial = support::serial();
    let Some(py) = support::python("loader_workers_that_buy_nothing_get_a_memory_recommendation")
    else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    // The script asks for 4 workers, each holding a 300 MiB cache; its dataset holds
    // ready-made batches, so a worker's work per batch is a tensor index and the loop
    // never waits for data: 2 workers or none run as fast, with 600 MiB or more less, far
    // above the rule's 20% and 64 MiB. (With a per-sample dataset, 0 workers paid 64 reads
    // and a collate per step on the training thread.) A single run's 4% between 4 and 2
    // workers once counted as "significantly slower"; a choice is now slower only beyond
    // the noise margin a gain must clear. What is under test is the recommendation, not
    // its confirmation: one pair of confirmation runs instead of four (each run starts 4
    // workers with their caches).
    let spec = format!(
        "name = \"mem\"\n[workload.python]\nrun = \"{} {} --steps 40\"\n\
         [knobs]\nnum_workers = [0, 2]\n\
         [search]\nstrategy = \"one-at-a-time\"\nrepeats = 1\nconfirm_repeats = 1\ntimeout_s = 180\n",
        py.display(),
        support::script("loader_memory.py").display()
    );
    let (o, _, r) = run_sweep(d.path(), &spec);
    assert!(o.status.success(), "{}", show(&o));
    let trials = r["trials"].as_array().unwrap();
    let mib = |label: &str| {
        trials.iter().find(|t| t["label"] == label).unwrap()["rss_peak_bytes"]
            .as_f64()
            .unwrap_or(0.0)
            / 1048576.0
    };
    // The set-up did what it says: the script's own 4 workers use far more memory.
    assert!(
        mib("baseline") > mib("num_workers=2") + 400.0,
        "{} vs {} MiB\n{}",
        mib("baseline"),
        mib("num_workers=2"),
        show(&o)
    );
    let recs = r["recommendations"].as_array().unwrap();
    // Fewer workers than the script's 4, tied or faster: either way its memory saving is
    // said (a faster-and-cheaper choice is not only a speed-up).
    let fewer = |x: &&Value| x["change"]["num_workers"] == "2" || x["change"]["num_workers"] == "0";
    let x = recs
        .iter()
        .find(fewer)
        .unwrap_or_else(|| panic!("no memory recommendation: {recs:?}\n{}", show(&o)));
    let title = x["title"].as_str().unwrap_or("");
    assert!(title.contains("MiB less memory"), "{x}\n{}", show(&o));
    assert_eq!(recs.iter().filter(fewer).count(), 1, "{recs:?}");
    assert!(
        x["evidence"]
            .as_str()
            .unwrap_or("")
            .contains("your script's 4 loader workers"),
        "{x}"
    );
    assert!(
        !recs.iter().any(|x| x["change"]["num_workers"] == "4"),
        "{recs:?}"
    );
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("MiB less memory"), "{stdout}");
}

fn watch(py: &Path, out: &Path, args: &[&str]) -> (Output, Value) {
    let o = Command::new(env!("CARGO_BIN_EXE_tune"))
        .arg("watch")
        .arg("--out")
        .arg(out)
        .arg("--")
        .arg(py)
        .arg(support::script("bound.py"))
        .args(args)
        .env("TUNE_CACHE_DIR", out.join("cache"))
        .output()
        .unwrap();
    let text = std::fs::read_to_string(out.join("report.json")).unwrap_or_default();
    (o, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// The findings' kinds in their order, contention left out: where another process loads
/// the CPU (a build beside the tests), "contention" rightly comes first, and the order
/// these tests hold is that of the job's own costs.
fn kinds(r: &Value) -> Vec<String> {
    r["findings"]
        .as_array()
        .map(|f| {
            f.iter()
                .filter_map(|x| x["kind"].as_str().map(String::from))
                .filter(|k| k != "contention")
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn the_watch_names_an_optimizer_bound_and_a_compute_bound_step() {
    let _serial = support::serial();
    let Some(py) = support::python("the_watch_names_an_optimizer_bound_and_a_compute_bound_step")
    else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("opt");
    let (o, r) = watch(&py, &out, &["--kind", "optimizer", "--steps", "30"]);
    assert!(o.status.success(), "{}", show(&o));
    let k = kinds(&r);
    assert!(
        k.contains(&"optimizer".to_string()),
        "{k:?}\n{}",
        r["python"]
    );
    assert!(
        !k.contains(&"compute".to_string()),
        "{k:?}\n{}",
        r["python"]
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("the optimizer step is the largest cost"),
        "{stderr}"
    );
    // Adadelta has a foreach switch and no fused implementation: only foreach is offered,
    // in the hint and in sweep.toml (before: "torch.optim.Adadelta(params, ...,
    // fused=True)", and a fused trial that could not act).
    let out = d.path().join("adadelta");
    let (o, _) = watch(
        &py,
        &out,
        &[
            "--kind",
            "optimizer",
            "--steps",
            "20",
            "--optim",
            "adadelta",
        ],
    );
    assert!(o.status.success(), "{}", show(&o));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("torch.optim.Adadelta(params, ..., foreach=True)")
            && !stderr.contains("fused=True"),
        "{stderr}"
    );
    let impls = swept_impls(&out);
    assert_eq!(impls, ["forloop", "default", "foreach"], "{impls:?}");

    // Watched from the script's own folder as `python bound.py`: the sweep written beside
    // the report (in another folder) must still find the script.
    let out = d.path().join("compute");
    let script = support::script("bound.py");
    let here = script.parent().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_tune"))
        .arg("watch")
        .arg("--out")
        .arg(&out)
        .args([
            "--",
            py.to_str().unwrap(),
            "bound.py",
            "--kind",
            "compute",
            "--steps",
            "20",
        ])
        .current_dir(here)
        .env("TUNE_CACHE_DIR", out.join("cache"))
        .output()
        .unwrap();
    let r: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    assert!(o.status.success(), "{}", show(&o));
    let k = kinds(&r);
    assert!(k.contains(&"compute".to_string()), "{k:?}\n{}", r["python"]);
    let f = r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["kind"] == "compute")
        .unwrap();
    // The hypothesis follows the CPU: bf16 where it has bf16 arithmetic of its own,
    // torch.compile's fused kernels where autocast would convert around float32.
    let native = tune_probes::cpu::native_bf16() != Some(false);
    let (said, knob, value) = if native {
        ("bfloat16", "amp", "bf16")
    } else {
        ("without bf16 arithmetic", "compile", "default")
    };
    println!("native bf16 on this CPU: {native}");
    assert!(f["hint"].as_str().unwrap().contains(said), "{f}");
    // One definition of throughput: the batch (no DataLoader: the model's input) over
    // the median step.
    let p = &r["python"];
    let per_step =
        p["samples_per_s"].as_f64().unwrap() * p["median_step_ms"].as_f64().unwrap() / 1e3;
    assert!((per_step - 4096.0).abs() < 1.0, "{p}");
    // The sweep that tests the hypothesis, written beside the report, is a spec tune reads.
    let spec = tune::spec::Spec::load(out.join("sweep.toml")).unwrap();
    assert!(
        spec.knobs
            .iter()
            .any(|(n, v)| n == knob && v.iter().any(|x| x == value)),
        "{:?}",
        spec.knobs
    );
    let tune::spec::Workload::Command(c) = &spec.workload else {
        panic!("{:?}", spec.workload)
    };
    let cwd = spec.dir().join(c.cwd.as_deref().unwrap_or(Path::new("")));
    assert!(cwd.join("bound.py").is_file(), "{c:?}");

    // The same job under its own bf16 autocast: still compute-bound, but bf16 is what it
    // runs already, so neither the hint nor the sweep offers it. On a CPU without bf16
    // arithmetic, where its autocast converts around float32, float32 is offered instead
    // (a small MLP ran 3.79x faster without its autocast by hand on such a CPU).
    let out = d.path().join("autocast");
    let o = Command::new(env!("CARGO_BIN_EXE_tune"))
        .arg("watch")
        .arg("--out")
        .arg(&out)
        .args(["--", py.to_str().unwrap(), "bound.py"])
        .args(["--kind", "compute", "--steps", "20", "--autocast"])
        .current_dir(here)
        .env("TUNE_CACHE_DIR", out.join("cache"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", show(&o));
    let r: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    let f = r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["kind"] == "compute")
        .unwrap_or_else(|| panic!("{}", r["findings"]));
    let hint = f["hint"].as_str().unwrap();
    let sweep = std::fs::read_to_string(out.join("sweep.toml")).unwrap_or_default();
    if native {
        assert!(hint.contains("autocast (bf16) already"), "{f}");
        assert!(!sweep.contains("amp ="), "{sweep}");
    } else {
        assert!(hint.contains("float32 may be faster"), "{f}");
        assert!(sweep.contains("amp = [\"bf16\", \"off\"]"), "{sweep}");
    }
}

/// A compute-bound step whose per-parameter SGD loop takes a quarter of it: the
/// computation is named first, and the update too, with its implementations in the
/// sweep (before, only bf16 was offered; `fused=True` gave 1.21x by hand on such a job).
#[test]
fn a_large_update_beside_the_computation_is_named_and_swept_too() {
    let _serial = support::serial();
    let Some(py) = support::python("a_large_update_beside_the_computation_is_named_and_swept_too")
    else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("mixed");
    let (o, r) = watch(&py, &out, &["--kind", "mixed", "--steps", "60"]);
    assert!(o.status.success(), "{}", show(&o));
    let k = kinds(&r);
    assert_eq!(
        k.first().map(String::as_str),
        Some("compute"),
        "{k:?}\n{}",
        r["python"]
    );
    assert!(
        k.contains(&"optimizer".to_string()),
        "{k:?}\n{}",
        r["python"]
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("the optimizer step is a large cost too")
            && stderr.contains("foreach=False"),
        "{stderr}"
    );
    let impls = swept_impls(&out);
    assert!(impls.first().is_some_and(|x| x == "forloop"), "{impls:?}");
    assert!(impls.iter().any(|x| x == "fused"), "{impls:?}");
}

/// The `optim_impl` values of the sweep.toml a watch wrote into `out`.
fn swept_impls(out: &Path) -> Vec<String> {
    let spec = tune::spec::Spec::load(out.join("sweep.toml")).unwrap();
    let (_, impls) = spec
        .knobs
        .iter()
        .find(|(n, _)| n == "optim_impl")
        .unwrap_or_else(|| panic!("{:?}", spec.knobs));
    impls.iter().map(|x| x.to_string()).collect()
}

/// Processes that keep cores busy outside the watched tree, killed when dropped.
struct Spinners(Vec<std::process::Child>);

impl Spinners {
    fn start(n: usize) -> Spinners {
        Spinners(
            (0..n)
                .map(|_| {
                    Command::new("sh")
                        .args(["-c", "while :; do :; done"])
                        .spawn()
                        .unwrap()
                })
                .collect(),
        )
    }
}

impl Drop for Spinners {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

// PyTorch's threads against the cores other processes leave free (#31): under one
// competing process on 2 cores, the default 2 threads ran an LM 30x slower than 1 thread.
// Here all cores but one spin outside the watched tree while a script computing with 2
// threads runs: the watch says the threads oversubscribe the CPU, in the terminal and in
// summary.md, and the sweep it writes measures the script's 2 threads against 1.
#[test]
fn a_watch_under_competing_processes_names_oversubscribed_threads_and_proposes_fewer() {
    let _serial = support::serial();
    let Some(py) = support::python(
        "a_watch_under_competing_processes_names_oversubscribed_threads_and_proposes_fewer",
    ) else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("w");
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let spin = Spinners::start(cores - 1);
    let o = Command::new(env!("CARGO_BIN_EXE_tune"))
        .arg("watch")
        .arg("--steps")
        .arg("15")
        .arg("--out")
        .arg(&out)
        .arg("--")
        .arg(&py)
        .arg(support::script("plain_loop.py"))
        .args(["--steps", "400", "--threads", "2"])
        .env("TUNE_CACHE_DIR", d.path().join("cache"))
        .output()
        .unwrap();
    drop(spin);
    assert!(o.status.success(), "{}", show(&o));
    let r: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap_or_default())
            .unwrap_or(Value::Null);
    let f = r["findings"]
        .as_array()
        .and_then(|f| f.iter().find(|x| x["kind"] == "contention"))
        .unwrap_or_else(|| panic!("no contention finding: {}\n{}", r["findings"], show(&o)));
    let title = f["title"].as_str().unwrap_or("");
    assert!(title.contains("2 PyTorch threads oversubscribe"), "{f}");
    assert!(
        f["hint"]
            .as_str()
            .unwrap_or("")
            .contains("torch.set_num_threads(1)"),
        "{f}"
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains(title), "{stderr}");
    let md = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert!(md.contains("oversubscribe"), "{md}");
    let spec = tune::spec::Spec::load(out.join("sweep.toml")).unwrap();
    assert!(
        spec.knobs
            .iter()
            .any(|(n, v)| n == "num_threads" && v.len() == 2 && v[0] == "2" && v[1] == "1"),
        "{:?}",
        spec.knobs
    );
}

/// A data-bound job whose compute threads take every core: a loader worker would only
/// compete with them, so the sweep the watch writes crosses the worker counts with one
/// thread fewer (on 2 cores, img_decode.py gained 1.34x from one worker and one thread
/// together, nothing from either alone).
#[test]
fn a_data_bound_job_on_every_core_gets_workers_crossed_with_fewer_threads() {
    let _serial = support::serial();
    let Some(py) =
        support::python("a_data_bound_job_on_every_core_gets_workers_crossed_with_fewer_threads")
    else {
        return;
    };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cores < 2 {
        eprintln!("skipped: one core, so no thread can be left to a loader worker");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("data");
    let (o, r) = watch(&py, &out, &["--kind", "data", "--steps", "25"]);
    assert!(o.status.success(), "{}", show(&o));
    let k = kinds(&r);
    assert!(
        k.contains(&"data_wait".to_string()),
        "{k:?}\n{}",
        r["python"]
    );
    let f = r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["kind"] == "data_wait")
        .unwrap();
    assert!(
        f["hint"]
            .as_str()
            .unwrap()
            .contains("compute threads take all"),
        "{f}"
    );
    let text = std::fs::read_to_string(out.join("sweep.toml")).unwrap();
    let spec = tune::spec::Spec::load(out.join("sweep.toml")).unwrap();
    // Other processes holding a core make the script's threads oversubscribed, and the
    // watch then rightly tests fewer threads first (one knob at a time): seen when a
    // build ran beside the tests. The crossing is for a machine whose cores the job has.
    let busy = r["findings"].as_array().into_iter().flatten().any(|x| {
        x["title"]
            .as_str()
            .is_some_and(|t| t.contains("oversubscribe"))
    });
    if busy {
        eprintln!(
            "skipped the crossing's check: other processes held a core during the watch, so \
             its threads were oversubscribed\n{text}"
        );
        return;
    }
    assert_eq!(spec.search.strategy, tune::spec::Strategy::Grid, "{text}");
    let threads: Vec<String> = vec![cores.to_string(), (cores - 1).to_string()];
    assert!(
        spec.knobs
            .iter()
            .any(|(n, v)| n == "num_threads" && *v == threads),
        "{text}"
    );
    assert!(
        spec.knobs
            .iter()
            .any(|(n, v)| n == "num_workers" && v.len() >= 2 && v[0] == "0"),
        "{text}"
    );
}

/// A compute-bound conv net the script leaves in PyTorch's default NCHW layout is
/// offered channels_last beside its precision (by hand NHWC ran a ResNet-18 1.13x on a
/// 2-core AVX2 EPYC; the watch offered bf16 or compile alone). The same net converted
/// by the script itself is not offered it, and a sweep of it runs only the baseline:
/// the hooks read the script's layout, so the trial is said as what it already does.
#[test]
fn a_conv_net_in_nchw_is_offered_channels_last_and_one_in_nhwc_is_told_it_does_this() {
    let _serial = support::serial();
    let Some(py) = support::python(
        "a_conv_net_in_nchw_is_offered_channels_last_and_one_in_nhwc_is_told_it_does_this",
    ) else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let line = "channels_last = [false, true]";
    for (name, own) in [("nchw", false), ("nhwc", true)] {
        let out = d.path().join(name);
        let mut args = vec!["--kind", "conv", "--steps", "20"];
        if own {
            args.push("--channels-last");
        }
        let (o, r) = watch(&py, &out, &args);
        assert!(o.status.success(), "{}", show(&o));
        let f = r["findings"]
            .as_array()
            .and_then(|f| f.iter().find(|x| x["kind"] == "compute"))
            .unwrap_or_else(|| panic!("no compute finding: {}", r["findings"]));
        let hint = f["hint"].as_str().unwrap();
        let sweep = std::fs::read_to_string(out.join("sweep.toml")).unwrap_or_default();
        assert_eq!(hint.contains("NCHW"), !own, "{hint}");
        assert_eq!(sweep.contains(line), !own, "{sweep}");
        assert!(!sweep.contains("channels_last = [true"), "{sweep}");
    }

    let spec = format!(
        "name = \"nhwc\"\n[workload.python]\nrun = \"{} {} --kind conv --steps 20 \
         --channels-last\"\nwarmup = 2\nsteps = 8\nmin_seconds = 0\n[knobs]\n{line}\n\
         [search]\nstrategy = \"one-at-a-time\"\nrepeats = 1\nconfirm_repeats = 1\n\
         timeout_s = 120\n",
        py.display(),
        support::script("bound.py").display()
    );
    let dir = d.path().join("sweep");
    std::fs::create_dir(&dir).unwrap();
    let (o, _, r) = run_sweep(&dir, &spec);
    assert!(o.status.success(), "{}", show(&o));
    let trials = r["trials"].as_array().unwrap();
    assert_eq!(trials.len(), 1, "only the baseline runs: {trials:#?}");
    assert_eq!(
        trials[0]["script_knobs"]["channels_last"], "true",
        "{}",
        trials[0]
    );
    assert!(
        String::from_utf8_lossy(&o.stderr)
            .contains("channels_last=true: not run, same as the baseline"),
        "{}",
        show(&o)
    );
}
