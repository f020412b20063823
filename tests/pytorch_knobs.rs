//! Knobs injected into an unmodified PyTorch script (`[workload.python]`, PyPI's torch on
//! CPU): each trial's autocast (bf16, fp16 with GradScaler), channels_last, DataLoader
//! persistent_workers/prefetch_factor and cudnn.benchmark are what the script observes
//! from the inside (tests/pytorch/probe.py writes it down), and a script that sets them
//! itself is reported under `not_applicable`, never silently ignored.

#[path = "pytorch/support.rs"]
mod support;

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use support::show;

/// Runs a sweep of probe.py (with `args`) over `knobs` (TOML lines); returns the report
/// and the probe's records, one per trial run. A short window (2 + 8 steps) ends each
/// trial: what is tested is what the script observes, not its speed, and a job tune stops
/// skips the interpreter's teardown (seconds of each trial under load).
fn sweep(py: &Path, dir: &Path, args: &str, knobs: &str) -> (Value, Vec<Value>) {
    let record = dir.join("record.jsonl");
    let spec = dir.join("spec.toml");
    std::fs::write(
        &spec,
        format!(
            "name = \"probe\"\n[workload.python]\nrun = \"{} {} --record {} {args}\"\n\
             warmup = 2\nsteps = 8\nmin_seconds = 0\n[knobs]\n{knobs}\n[search]\nstrategy = \"one-at-a-time\"\nrepeats = 1\nconfirm_repeats = 1\ntimeout_s = 120\n",
            py.display(),
            support::script("probe.py").display(),
            record.display(),
        ),
    )
    .unwrap();
    let r = run_sweep(&spec, &dir.join("out"), dir);
    let records = std::fs::read_to_string(&record)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (r, records)
}

/// `tune sweep SPEC --out OUT`, which must succeed; its report.json.
fn run_sweep(spec: &Path, out: &Path, dir: &Path) -> Value {
    let o = Command::new(env!("CARGO_BIN_EXE_tune"))
        .arg("sweep")
        .arg(spec)
        .arg("--out")
        .arg(out)
        .env("TUNE_CACHE_DIR", dir.join("cache"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", show(&o));
    serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap()
}

#[test]
fn each_injected_knob_is_what_the_script_observes() {
    let _serial = support::serial();
    let Some(py) = support::python("each_injected_knob_is_what_the_script_observes") else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let (r, records) = sweep(
        &py,
        d.path(),
        "--workers 1",
        "amp = [\"off\", \"bf16\", \"fp16\"]\nchannels_last = [false, true]\n\
         persistent_workers = [false, true]\nprefetch_factor = [2, 4]\nautotune = [false, true]",
    );
    // The baseline and one trial per other value, at least.
    assert!(records.len() >= 6, "{records:?}");
    let mut seen_values = std::collections::BTreeSet::new();
    for rec in &records {
        let mut k = rec["knobs"].clone();
        let s = &rec["seen"];
        // A knob at the baseline's value is not injected: the script runs as written
        // (here its own values are PyTorch's defaults, which are the baseline's).
        for (name, default) in [
            ("amp", serde_json::json!("off")),
            ("channels_last", serde_json::json!(false)),
            ("persistent_workers", serde_json::json!(false)),
            ("prefetch_factor", serde_json::json!(2)),
            ("autotune", serde_json::json!(false)),
        ] {
            if k[name].is_null() {
                k[name] = default;
            }
            seen_values.insert(format!("{name}={}", k[name]));
        }
        let k = &k;
        match k["amp"].as_str().unwrap() {
            "off" => {
                assert_eq!(s["autocast"], false, "{rec}");
                assert_eq!(s["out_dtype"], "float32", "{rec}");
                assert_eq!(s["loss_grad"], 1.0, "{rec}");
            }
            "bf16" => {
                assert_eq!(s["autocast"], true, "{rec}");
                assert_eq!(s["autocast_dtype"], "bfloat16", "{rec}");
                assert_eq!(s["out_dtype"], "bfloat16", "{rec}");
                assert_eq!(s["loss_grad"], 1.0, "{rec}");
            }
            "fp16" => {
                assert_eq!(s["autocast"], true, "{rec}");
                assert_eq!(s["autocast_dtype"], "float16", "{rec}");
                assert_eq!(s["out_dtype"], "float16", "{rec}");
                // tune's GradScaler scaled the loss (2^16 to start), and unscaled the
                // gradients before each step: the model still learns, in finite numbers.
                assert_eq!(s["loss_grad"], 65536.0, "{rec}");
                assert_eq!(rec["weights_finite"], true, "{rec}");
                assert!(
                    rec["last_loss"].as_f64().unwrap() < rec["first_loss"].as_f64().unwrap(),
                    "{rec}"
                );
            }
            other => panic!("amp {other}"),
        }
        let cl = k["channels_last"].as_bool().unwrap();
        assert_eq!(s["weight_nhwc"], cl, "{rec}");
        assert_eq!(s["input_nhwc"], cl, "{rec}");
        let l = &rec["loader"];
        assert_eq!(l["persistent_workers"], k["persistent_workers"], "{rec}");
        assert_eq!(l["prefetch_factor"], k["prefetch_factor"], "{rec}");
        assert_eq!(rec["cudnn_benchmark"], k["autotune"], "{rec}");
    }
    for v in [
        "amp=\"bf16\"",
        "amp=\"fp16\"",
        "channels_last=true",
        "persistent_workers=true",
        "prefetch_factor=4",
        "autotune=true",
    ] {
        assert!(seen_values.contains(v), "no trial ran {v}: {seen_values:?}");
    }
    // cudnn.benchmark was set, but a CPU job has no cuDNN: the trial says so.
    let trials = r["trials"].as_array().unwrap();
    let at = trials
        .iter()
        .find(|t| t["knobs"]["autotune"] == true)
        .unwrap();
    assert!(
        at["not_applicable"]["autotune"]
            .as_str()
            .unwrap_or("")
            .contains("does not use CUDA"),
        "{at}"
    );
    for t in trials {
        assert_eq!(t["status"], "ok", "{t}");
    }
    // No autocast of the script's own: its amp is "off", read from its first step.
    let base = trials.iter().find(|t| t["label"] == "baseline").unwrap();
    assert_eq!(base["script_knobs"]["amp"], "off", "{base}");
    let ms = base["repeats"][0]["step_ms_median"].as_f64().unwrap_or(0.0);
    assert!(ms > 0.0, "no step time in {base}");
}

#[test]
fn a_loss_the_script_computes_outside_the_model_runs_under_the_trials_autocast() {
    let _serial = support::serial();
    let Some(py) = support::python(
        "a_loss_the_script_computes_outside_the_model_runs_under_the_trials_autocast",
    ) else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    // --loss bce: F.binary_cross_entropy of the model's output in the script's own code
    // (pytorch/examples' VAE), every other step inside the script's own
    // autocast(enabled=False) with its backward; an evaluation pass every 3 steps with a
    // functional loss too. Before, tune's autocast ended with the model's call and each
    // amp trial crashed: "Found dtype Float but expected BFloat16".
    let (r, records) = sweep(
        &py,
        d.path(),
        "--workers 0 --loss bce --eval-every 3",
        "amp = [\"off\", \"bf16\", \"fp16\"]",
    );
    for t in r["trials"].as_array().unwrap() {
        assert_eq!(t["status"], "ok", "{t}");
    }
    let mut amp_seen = std::collections::BTreeSet::new();
    for rec in &records {
        let amp = rec["knobs"]["amp"].as_str().unwrap_or("off");
        amp_seen.insert(amp.to_string());
        let s = &rec["seen"];
        let on = amp != "off";
        // The loss ran inside the trial's autocast region, as PyTorch's recipe has it...
        assert_eq!(s["loss_autocast"], on, "{rec}");
        assert_eq!(s["autocast"], on, "{rec}");
        // ...which ended before the step did, the script's own region unwound in order.
        assert_eq!(s["autocast_after"], false, "{rec}");
        // The evaluation runs in the script's own precision.
        assert_eq!(s["eval_autocast"], false, "{rec}");
        assert_eq!(s["eval_out_dtype"], "float32", "{rec}");
    }
    assert!(
        amp_seen.contains("bf16") && amp_seen.contains("fp16"),
        "{amp_seen:?}"
    );
}

#[test]
fn knobs_the_script_sets_itself_are_its_baseline_and_overrides_are_said() {
    let _serial = support::serial();
    let Some(py) =
        support::python("knobs_the_script_sets_itself_are_its_baseline_and_overrides_are_said")
    else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    // --own: the script passes prefetch_factor=3 and persistent_workers=True to its
    // DataLoader, sets cudnn.benchmark, converts its model and batches to channels_last
    // and runs its forward under its own bf16 autocast.
    let (r, records) = sweep(
        &py,
        d.path(),
        "--workers 1 --own",
        "amp = [\"off\", \"fp16\", \"bf16\"]\nprefetch_factor = [2, 4]\npersistent_workers = [false, true]",
    );
    let trials = r["trials"].as_array().unwrap();
    let base = trials.iter().find(|t| t["label"] == "baseline").unwrap();
    // The baseline is the script as written: nothing forced, nothing overridden, and what
    // the script does by itself is read.
    assert!(
        base["overrides"].as_object().is_none_or(|o| o.is_empty()),
        "{base}"
    );
    assert!(
        base["not_applicable"]
            .as_object()
            .is_none_or(|o| o.is_empty()),
        "{base}"
    );
    assert_eq!(base["script_knobs"]["persistent_workers"], "true", "{base}");
    assert_eq!(base["script_knobs"]["prefetch_factor"], "3", "{base}");
    // Its own bf16 autocast is its amp: an amp=bf16 trial would be the baseline again,
    // so it is not run (it once ran, and a busy minute made it look 4x slower).
    assert_eq!(base["script_knobs"]["amp"], "bf16", "{base}");
    assert!(
        !trials.iter().any(|t| t["knobs"]["amp"] == "bf16"),
        "{trials:?}"
    );
    let rec = records
        .iter()
        .find(|x| x["knobs"] == serde_json::json!({}))
        .unwrap();
    assert_eq!(rec["seen"]["autocast_dtype"], "bfloat16", "{rec}");
    assert_eq!(rec["loader"]["prefetch_factor"], 3, "{rec}");
    // A trial's value that differs from the script's replaces it, and is said as an
    // override (applied), never as "not applicable".
    let fp16 = trials.iter().find(|t| t["knobs"]["amp"] == "fp16").unwrap();
    assert!(
        fp16["overrides"]["amp"]
            .as_str()
            .unwrap_or("")
            .contains("your script sets"),
        "{fp16}"
    );
    assert!(fp16["not_applicable"]["amp"].is_null(), "{fp16}");
    let rec = records
        .iter()
        .find(|x| x["knobs"]["amp"] == "fp16")
        .unwrap();
    assert_eq!(rec["seen"]["autocast_dtype"], "float16", "{rec}");
    assert_eq!(rec["seen"]["loss_grad"], 65536.0, "{rec}");
    let pf = trials
        .iter()
        .find(|t| t["knobs"]["prefetch_factor"] == 4)
        .unwrap();
    assert!(
        pf["overrides"]["prefetch_factor"]
            .as_str()
            .unwrap_or("")
            .contains("tune applied 4"),
        "{pf}"
    );
    let rec = records
        .iter()
        .find(|x| x["knobs"]["prefetch_factor"] == 4)
        .unwrap();
    assert_eq!(rec["loader"]["prefetch_factor"], 4, "{rec}");
    // The spec's baseline values (amp off, prefetch_factor 2, no persistent workers),
    // which the script's own settings keep out of the baseline, each ran in a trial of
    // their own, applied over the script's (#31).
    let off = trials
        .iter()
        .find(|t| t["label"] == "amp=off")
        .unwrap_or_else(|| panic!("no amp=off trial: {trials:?}"));
    assert_eq!(off["knobs"]["forced"], serde_json::json!(["amp"]), "{off}");
    assert!(
        off["overrides"]["amp"]
            .as_str()
            .unwrap_or("")
            .contains("tune applied \"off\""),
        "{off}"
    );
    let rec = records.iter().find(|x| x["knobs"]["amp"] == "off").unwrap();
    assert_eq!(rec["seen"]["autocast"], false, "{rec}");
    let rec = records
        .iter()
        .find(|x| x["knobs"]["prefetch_factor"] == 2)
        .unwrap();
    assert_eq!(rec["loader"]["prefetch_factor"], 2, "{rec}");
    let rec = records
        .iter()
        .find(|x| x["knobs"]["persistent_workers"] == false)
        .unwrap();
    assert_eq!(rec["loader"]["persistent_workers"], false, "{rec}");
    let notes = r["notes"].to_string();
    assert!(
        notes.contains("the spec's baseline value amp=off ran in a trial of its own"),
        "{notes}"
    );
    // persistent_workers=true is what the script already does: never recommended.
    let recs = r["recommendations"].as_array().unwrap();
    assert!(
        !recs
            .iter()
            .any(|x| x["change"]["persistent_workers"] == "true"),
        "{recs:?}"
    );
}

/// The records of the trials whose `optim_impl` is `impl_` (None: the baseline's, where
/// tune injects nothing).
fn optim_of<'a>(records: &'a [Value], impl_: Option<&str>) -> &'a Value {
    records
        .iter()
        .find(|x| x["knobs"]["optim_impl"].as_str() == impl_)
        .unwrap_or_else(|| panic!("no record with optim_impl {impl_:?}: {records:?}"))
}

#[test]
fn the_optimizer_implementation_is_what_the_update_runs_and_said_where_it_cannot_act() {
    let _serial = support::serial();
    let Some(py) = support::python(
        "the_optimizer_implementation_is_what_the_update_runs_and_said_where_it_cannot_act",
    ) else {
        return;
    };
    // Adam built from a generator of parameters, the script passing nothing itself.
    let d = tempfile::tempdir().unwrap();
    let (r, records) = sweep(
        &py,
        d.path(),
        "--workers 0 --optim adam",
        "optim_impl = [\"default\", \"foreach\", \"fused\"]",
    );
    let trials = r["trials"].as_array().unwrap();
    for t in trials {
        assert_eq!(t["status"], "ok", "{t}");
        assert!(t["not_applicable"]["optim_impl"].is_null(), "{t}");
    }
    let base = trials.iter().find(|t| t["label"] == "baseline").unwrap();
    assert_eq!(base["script_knobs"]["optim_impl"], "default", "{base}");
    // The class, for the PyTorch line of an optim_impl change (#31).
    assert_eq!(
        base["script_knobs"]["optimizer"], "torch.optim.Adam",
        "{base}"
    );
    let o = &optim_of(&records, None)["optim"];
    assert!(o["fused"] != true && o["foreach"] != true, "{o}");
    let o = &optim_of(&records, Some("foreach"))["optim"];
    assert!(o["foreach"] == true && o["fused"] != true, "{o}");
    let o = &optim_of(&records, Some("fused"))["optim"];
    assert!(o["fused"] == true && o["foreach"] != true, "{o}");
    assert!(optim_of(&records, Some("fused"))["weights_finite"] == true);

    // The script asks for fused=True itself: that is its baseline, and a foreach trial
    // replaces it and says so.
    let d = tempfile::tempdir().unwrap();
    let (r, records) = sweep(
        &py,
        d.path(),
        "--workers 0 --optim sgd --own-impl fused",
        "optim_impl = [\"fused\", \"foreach\"]",
    );
    let trials = r["trials"].as_array().unwrap();
    let base = trials.iter().find(|t| t["label"] == "baseline").unwrap();
    assert_eq!(base["script_knobs"]["optim_impl"], "fused", "{base}");
    assert_eq!(
        base["script_knobs"]["optimizer"], "torch.optim.SGD",
        "{base}"
    );
    // The spec's baseline value is off the knob's default, so tune passes it in every
    // trial: the same fused=True the script asks for.
    assert_eq!(optim_of(&records, Some("fused"))["optim"]["fused"], true);
    let fe = trials
        .iter()
        .find(|t| t["knobs"]["optim_impl"] == "foreach")
        .unwrap();
    assert!(
        fe["overrides"]["optim_impl"]
            .as_str()
            .unwrap_or("")
            .contains("your script sets"),
        "{fe}"
    );
    let o = &optim_of(&records, Some("foreach"))["optim"];
    assert!(o["foreach"] == true && o["fused"] != true, "{o}");

    // The script asks for fused=True and the spec's baseline is PyTorch's default: the
    // default runs in a trial of its own, over the script's fused=True, and says so; the
    // fused trial is the script itself and does not run again (#31).
    let d = tempfile::tempdir().unwrap();
    let (r, records) = sweep(
        &py,
        d.path(),
        "--workers 0 --optim adam --own-impl fused",
        "optim_impl = [\"default\", \"fused\"]",
    );
    let trials = r["trials"].as_array().unwrap();
    let base = trials.iter().find(|t| t["label"] == "baseline").unwrap();
    assert_eq!(base["script_knobs"]["optim_impl"], "fused", "{base}");
    let def = trials
        .iter()
        .find(|t| t["knobs"]["forced"] == serde_json::json!(["optim_impl"]))
        .unwrap_or_else(|| panic!("no forced optim_impl trial: {trials:?}"));
    assert_eq!(def["status"], "ok", "{def}");
    assert!(
        def["overrides"]["optim_impl"]
            .as_str()
            .unwrap_or("")
            .contains("tune applied \"default\""),
        "{def}"
    );
    let o = &optim_of(&records, Some("default"))["optim"];
    assert!(o["fused"] != true && o["foreach"] != true, "{o}");
    assert!(
        records.iter().all(|x| x["knobs"]["optim_impl"] != "fused"),
        "{records:?}"
    );

    // A hand-written optimizer has no implementation to choose: the trial says so, and
    // whatever it measured, it is never recommended.
    let d = tempfile::tempdir().unwrap();
    let (r, _) = sweep(
        &py,
        d.path(),
        "--workers 0 --optim custom",
        "optim_impl = [\"default\", \"fused\"]",
    );
    let trials = r["trials"].as_array().unwrap();
    let base = trials.iter().find(|t| t["label"] == "baseline").unwrap();
    assert!(base["script_knobs"]["optimizer"].is_null(), "{base}");
    let fused = trials
        .iter()
        .find(|t| t["knobs"]["optim_impl"] == "fused")
        .unwrap();
    assert!(
        fused["not_applicable"]["optim_impl"]
            .as_str()
            .unwrap_or("")
            .contains("not one of torch.optim's"),
        "{fused}"
    );
    let recs = r["recommendations"].as_array().unwrap();
    assert!(
        !recs.iter().any(|x| x["change"]["optim_impl"].is_string()),
        "{recs:?}"
    );
}

/// An IterableDataset that does not shard by worker gives every worker the whole stream:
/// a trial with 2 workers says num_workers cannot act (each row would be trained on
/// twice) and is never recommended; the same stream sharded by get_worker_info runs its
/// workers as any loader does (#31).
#[test]
fn workers_that_replay_an_unsharded_stream_are_not_applicable() {
    let _serial = support::serial();
    let Some(py) = support::python("workers_that_replay_an_unsharded_stream_are_not_applicable")
    else {
        return;
    };
    for shard in [false, true] {
        let d = tempfile::tempdir().unwrap();
        let spec = format!(
            "name = \"stream\"\n[workload.python]\nrun = \"{} {}{}\"\nwarmup = 2\nsteps = 10\n\
             [knobs]\nnum_workers = [0, 2]\n[search]\nrepeats = 1\n",
            py.display(),
            support::script("stream.py").display(),
            if shard { " --shard" } else { "" }
        );
        let (o, r) = support::sweep_script(d.path(), &spec);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let trials = r["trials"].as_array().unwrap();
        let two = trials
            .iter()
            .find(|t| t["knobs"]["num_workers"] == 2)
            .unwrap_or_else(|| panic!("no num_workers=2 trial: {trials:?}"));
        assert_eq!(two["status"], "ok", "{two}");
        let na = two["not_applicable"]["num_workers"].as_str();
        if shard {
            assert!(na.is_none(), "shard: {two}");
        } else {
            assert!(
                na.unwrap_or("")
                    .contains("gives each of its 2 workers the whole stream"),
                "{two}"
            );
            let recs = r["recommendations"].as_array().unwrap();
            assert!(
                !recs.iter().any(|x| x["change"]["num_workers"] == "2"),
                "{recs:?}"
            );
        }
    }
}

/// Sweeps tests/pytorch/checkpointed.py (`--ckpt on|off`) over `checkpoint = ["off"]`.
fn checkpoint_sweep(py: &Path, dir: &Path, ckpt: &str) -> Value {
    let spec = dir.join(format!("ckpt-{ckpt}.toml"));
    std::fs::write(
        &spec,
        format!(
            "name = \"ckpt\"\n[workload.python]\nrun = \"{} {} --ckpt {ckpt}\"\nwarmup = 3\n\
             steps = 25\nmin_seconds = 0\n[knobs]\ncheckpoint = [\"off\"]\n[search]\n\
             strategy = \"one-at-a-time\"\nrepeats = 3\nconfirm_repeats = 1\ntimeout_s = 120\n",
            py.display(),
            support::script("checkpointed.py").display(),
        ),
    )
    .unwrap();
    run_sweep(&spec, &dir.join(format!("out-{ckpt}")), dir)
}

/// A script that checkpoints its blocks swept over `checkpoint = ["off"]`: the baseline
/// is the script as written (its checkpointing read as "on"), the trial runs its
/// checkpoint calls as plain calls (an override, said), is measured faster (by hand,
/// calling the blocks directly gave 1.47x), and is recommended with the line that calls
/// the blocks directly. The same script calling its blocks directly runs no such trial:
/// it already does this. Before, checkpointing was no knob for scripts and the watch's
/// recompute finding could only say "time it by hand".
#[test]
fn a_scripts_own_checkpointing_is_swept_off_and_measured() {
    let _serial = support::serial();
    let Some(py) = support::python("a_scripts_own_checkpointing_is_swept_off_and_measured") else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let r = checkpoint_sweep(&py, d.path(), "on");
    let trials = r["trials"].as_array().unwrap();
    let base = trials.iter().find(|t| t["label"] == "baseline").unwrap();
    assert_eq!(base["script_knobs"]["checkpoint"], "on", "{base}");
    let off = trials
        .iter()
        .find(|t| t["label"] == "checkpoint=off")
        .unwrap_or_else(|| panic!("no checkpoint=off trial: {trials:?}"));
    assert_eq!(
        off["knobs"]["forced"],
        serde_json::json!(["checkpoint"]),
        "{off}"
    );
    let said = off["overrides"]["checkpoint"].as_str().unwrap_or("");
    assert!(said.contains("tune applied \"off\""), "{off}");
    let ratio = off["ratio_vs_baseline"]["ratio"].as_f64().unwrap_or(0.0);
    // By hand 1.47x; a noisy VM once read under 1.15 with 2 repeats a trial.
    assert!(ratio > 1.1, "checkpoint=off measured {ratio:.3}x: {off}");
    let recs = r["recommendations"].as_array().unwrap();
    let rec = recs
        .iter()
        .find(|x| x["change"]["checkpoint"] == "off")
        .unwrap_or_else(|| panic!("checkpoint=off not recommended: {recs:#?}"));
    let line = rec["pytorch"].as_str().unwrap_or("");
    assert!(
        line.contains("call the checkpointed blocks directly"),
        "{rec}"
    );

    let r = checkpoint_sweep(&py, d.path(), "off");
    let trials = r["trials"].as_array().unwrap();
    let base = trials.iter().find(|t| t["label"] == "baseline").unwrap();
    assert_eq!(base["script_knobs"]["checkpoint"], "off", "{base}");
    assert_eq!(trials.len(), 1, "only the baseline runs: {trials:#?}");
    let recs = r["recommendations"].as_array().unwrap();
    assert!(
        !recs.iter().any(|x| x["change"]["checkpoint"].is_string()),
        "{recs:#?}"
    );
}

/// An amp trial that crashes because the script mixes precisions (a float32 buffer the
/// script made, the model's bfloat16 outputs added into it) says so, and what would fix
/// it; it does not ask whether the script calls optimizer.step(). The same script with
/// the cast measures.
#[test]
fn an_amp_trial_that_meets_the_scripts_float32_tensors_says_why_it_crashed() {
    let _serial = support::serial();
    let Some(py) =
        support::python("an_amp_trial_that_meets_the_scripts_float32_tensors_says_why_it_crashed")
    else {
        return;
    };
    for cast in [false, true] {
        let d = tempfile::tempdir().unwrap();
        let spec = format!(
            "name = \"scatter\"\n[workload.python]\nrun = \"{} {}{}\"\nwarmup = 2\nsteps = 8\n\
             min_seconds = 0\n[knobs]\namp = [\"off\", \"bf16\"]\n[search]\nrepeats = 1\n",
            py.display(),
            support::script("scatter.py").display(),
            if cast { " --cast" } else { "" }
        );
        let (o, r) = support::sweep_script(d.path(), &spec);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let t = support::trial(&r, "amp=bf16");
        if cast {
            assert_eq!(t["status"], "ok", "{t}");
            continue;
        }
        assert_eq!(t["status"], "crashed", "{t}");
        let e = t["error"].as_str().unwrap_or("");
        assert!(e.contains("must have the same scalar type"), "{e}");
        assert!(
            e.contains("the script's own tensors (float32) met the model's BFloat16 outputs: autocast converts"),
            "{e}"
        );
        assert!(e.contains("fewer than the 3 a measurement needs"), "{e}");
        assert!(!e.contains("does the script call optimizer.step()"), "{e}");
    }
}

/// An amp trial covers a forward the hooks do not see begin: a layer that calls its own
/// `forward` (forward-forward's) runs its first matmul before any module call, so tune's
/// autocast, opened at the first module call, left it in float32 (the realistic script's
/// amp trial read 1.10-1.16x against 1.23-1.29x by hand). Once such a forward is seen,
/// the autocast opens as each optimizer step ends; the baseline's stays float32.
#[test]
fn an_amp_trial_covers_a_forward_called_directly() {
    let _serial = support::serial();
    let Some(py) = support::python("an_amp_trial_covers_a_forward_called_directly") else {
        return;
    };
    for amp in ["off", "bf16"] {
        let d = tempfile::tempdir().unwrap();
        let log = d.path().join(format!("{amp}.log"));
        let spec = format!(
            "name = \"direct\"\n[workload.python]\nrun = \"{} {} --log {}\"\nwarmup = 2\n\
             steps = 10\nmin_seconds = 0\n[knobs]\namp = [\"{amp}\"]\n[search]\nrepeats = 1\n",
            py.display(),
            support::script("direct_forward.py").display(),
            log.display()
        );
        let (o, r) = support::sweep_script(d.path(), &spec);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let t = &r["trials"][0];
        assert_eq!(t["status"], "ok", "{t}");
        let text = std::fs::read_to_string(&log).unwrap();
        let half = text.lines().filter(|l| *l == "torch.bfloat16").count();
        let all = text.lines().count();
        eprintln!("amp={amp}: {half} of {all} steps' first matmul in bfloat16");
        if amp == "off" {
            assert_eq!(half, 0, "{text}");
        } else {
            // All but the first step (before any optimizer step ended).
            assert!(all >= 10 && half + 1 >= all, "{text}");
        }
    }
}
