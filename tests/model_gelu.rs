//! GELU is selectable: the zoo's `mlp-gelu` is `mlp` with GELU where `mlp` has ReLU. A
//! spec or `tune train` names it as a model; a misspelt model is refused when the spec is
//! read (exit 2, nothing written). Three steps of batch 8 on one thread: about a second.

use std::path::Path;
use std::process::{Command, Output};

fn tune(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tune"))
        .args(args)
        .current_dir(dir)
        .env("TUNE_CACHE_DIR", dir.join("cache"))
        .env("TUNE_PROFILE_LAYERS", "1")
        .output()
        .expect("run tune")
}

fn losses(out: &Output) -> Vec<u32> {
    assert!(
        out.status.success(),
        "tune failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    v["losses"]
        .as_array()
        .expect("losses")
        .iter()
        .map(|x| (x.as_f64().unwrap() as f32).to_bits())
        .collect()
}

#[test]
fn mlp_gelu_trains_through_gelu_layers_and_learns_otherwise_than_mlp() {
    let dir = tempfile::tempdir().unwrap();
    let run = |model: &str, json: bool| {
        let mut args = vec![
            "train",
            "--model",
            model,
            "--dataset",
            "synthetic",
            "--steps",
            "3",
            "--batch-size",
            "8",
            "--threads",
            "1",
            "--seed",
            "5",
            "--no-eval",
        ];
        if json {
            args.push("--json");
        }
        tune(&args, dir.path())
    };
    // TUNE_PROFILE_LAYERS names every layer that ran, as a note on stderr.
    let text = run("mlp-gelu", false);
    assert!(text.status.success());
    let layers: Vec<String> = String::from_utf8_lossy(&text.stderr)
        .lines()
        .filter_map(|l| l.strip_prefix("note: layer "))
        .filter_map(|l| l.split(['(', ' ']).next().map(String::from))
        .collect();
    assert_eq!(
        layers,
        ["flatten", "linear", "gelu", "linear", "gelu", "linear"],
        "mlp-gelu's layers: {}",
        String::from_utf8_lossy(&text.stderr)
    );
    // The same weights (the same seed, the same linear layers) through another activation.
    let (lg, lr) = (losses(&run("mlp-gelu", true)), losses(&run("mlp", true)));
    assert_eq!(lg.len(), 3);
    assert_ne!(lg, lr, "GELU must change the losses");
}

#[test]
fn a_spec_names_mlp_gelu_and_a_misspelt_model_exits_2_when_read() {
    let dir = tempfile::tempdir().unwrap();
    let spec = |model: &str| {
        format!(
            "name = \"g\"\n[workload]\nmodel = \"{model}\"\ndataset = \"synthetic\"\n\
             steps = 1\nwarmup = 0\n[knobs]\nbatch_size = [8]\n"
        )
    };
    let good = tune::spec::Spec::parse(&spec("mlp-gelu"), dir.path().join("g.toml"));
    assert!(good.is_ok(), "{:?}", good.err());

    std::fs::write(dir.path().join("bad.toml"), spec("mlp-gelo")).unwrap();
    let out = tune(&["sweep", "bad.toml"], dir.path());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {err}");
    assert!(
        err.contains("bad.toml:3") && err.contains("workload.model") && err.contains("mlp-gelu"),
        "one line naming the file, the key and the allowed values: {err}"
    );
    assert!(
        !dir.path().join("reports").exists(),
        "nothing written for a spec that was refused"
    );
}
