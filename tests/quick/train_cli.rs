//! `tune train` end to end: the engine learns the built-in data, runs are deterministic,
//! and bad input gives one clear line and exit code 2.

use std::path::Path;
use std::process::{Command, Output};

fn tune(args: &[&str], cache: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tune"))
        .args(args)
        .env("TUNE_CACHE_DIR", cache)
        .output()
        .expect("run tune")
}

fn json(out: &Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "tune failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON object on stdout")
}

#[test]
/// With its default steps, batch size and learning rate.
fn cnn_small_learns_shapes_to_90_percent() {
    let cache = tempfile::tempdir().unwrap();
    let out = tune(&["train", "--model", "cnn-small", "--json"], cache.path());
    let v = json(&out);
    let acc = v["accuracy"].as_f64().unwrap();
    assert!(acc >= 0.90, "held-out accuracy {acc}");
    assert!(v["samples_per_s"].as_f64().unwrap() > 0.0);
    for cat in [
        "params",
        "grads",
        "optimizer_state",
        "activations",
        "workspace",
    ] {
        assert!(
            v["peak_bytes"][cat].as_u64().unwrap() > 0,
            "peak {cat} missing"
        );
    }
}

#[test]
fn mlp_learns_28x28_shapes_to_90_percent() {
    let cache = tempfile::tempdir().unwrap();
    let out = tune(&["train", "--model", "mlp", "--json"], cache.path());
    let acc = json(&out)["accuracy"].as_f64().unwrap();
    assert!(acc >= 0.90, "held-out accuracy {acc}");
}

#[test]
fn same_seed_on_one_thread_gives_bit_identical_losses() {
    let cache = tempfile::tempdir().unwrap();
    let args = [
        "train",
        "--model",
        "cnn-small",
        "--dataset",
        "shapes:600",
        "--steps",
        "6",
        "--batch-size",
        "16",
        "--threads",
        "1",
        "--seed",
        "3",
        "--no-eval",
        "--json",
    ];
    let a = json(&tune(&args, cache.path()));
    let b = json(&tune(&args, cache.path()));
    let bits = |v: &serde_json::Value| -> Vec<u32> {
        v["losses"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| (x.as_f64().unwrap() as f32).to_bits())
            .collect()
    };
    assert_eq!(bits(&a), bits(&b));
    let mut other = args.to_vec();
    other[12] = "4";
    assert_ne!(
        bits(&a),
        bits(&json(&tune(&other, cache.path()))),
        "a different seed must change the run"
    );
}

fn assert_bad_input(args: &[&str], needle: &str) {
    let cache = tempfile::tempdir().unwrap();
    let out = tune(args, cache.path());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: stderr {err}");
    assert!(
        err.contains(needle),
        "{args:?}: expected '{needle}' in: {err}"
    );
    assert!(out.stdout.is_empty(), "{args:?}: nothing on stdout");
}

#[test]
fn bad_input_exits_2_with_one_clear_line() {
    assert_bad_input(
        &[
            "train",
            "--model",
            "cnn-small",
            "--dataset",
            "shapes:100@50",
        ],
        "whole multiple of the model's 32 pixels",
    );
    assert_bad_input(
        &["train", "--model", "nope"],
        "allowed values are mlp, cnn-small, resnet-mini",
    );
    assert_bad_input(
        &[
            "train",
            "--batch-size",
            "0",
            "--steps",
            "1",
            "--warmup",
            "0",
        ],
        "--batch-size 0: must be at least 1",
    );
    assert_bad_input(
        &[
            "train",
            "--model",
            "mlp",
            "--dataset",
            "mnist:/definitely/missing",
        ],
        "/definitely/missing",
    );
    assert_bad_input(&["train", "--zero-grad", "sometimes"], "memset, none");
    assert_bad_input(&["train", "--checkpoint", "every:0"], "every:K");
    assert_bad_input(&["train", "--steps", "0"], "steps 0");
}

/// Without a usable GPU, `--device cuda` is one line naming the library that does not
/// load (exit 2), and `--device auto` trains on the CPU and says why. On a GPU machine
/// both train on the GPU instead (`tests/gpu_parity.rs` covers that).
#[test]
fn cuda_without_a_gpu_exits_2_and_auto_falls_back_to_the_cpu() {
    if let Ok(gpu) = tune::engine::cuda::usable() {
        eprintln!("skipping: this machine has a usable GPU ({gpu})");
        return;
    }
    let cache = tempfile::tempdir().unwrap();
    let out = tune(
        &["train", "--device", "cuda", "--steps", "1", "--warmup", "0"],
        cache.path(),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {err}");
    assert!(err.contains("does not load"), "{err}");
    assert!(err.contains(".so"), "names the library: {err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    let out = tune(
        &[
            "train",
            "--device",
            "auto",
            "--steps",
            "2",
            "--warmup",
            "0",
            "--dataset",
            "synthetic",
        ],
        cache.path(),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stderr: {err}");
    let all = format!("{err}{}", String::from_utf8_lossy(&out.stdout));
    assert!(all.contains("device auto: CPU backend ("), "{all}");
}

#[test]
fn truncated_idx_file_is_reported_with_its_path() {
    let dir = tempfile::tempdir().unwrap();
    tune::engine::data::fixtures::write_mnist_fixture(dir.path(), 50, 20, 1).unwrap();
    let f = dir.path().join("train-images-idx3-ubyte");
    let len = std::fs::metadata(&f).unwrap().len();
    let file = std::fs::OpenOptions::new().write(true).open(&f).unwrap();
    file.set_len(len - 100).unwrap();
    let spec = format!("mnist:{}", dir.path().display());
    assert_bad_input(
        &[
            "train",
            "--model",
            "mlp",
            "--dataset",
            &spec,
            "--steps",
            "1",
            "--warmup",
            "0",
        ],
        "train-images-idx3-ubyte",
    );
}

#[test]
fn real_format_mnist_and_cifar_files_train() {
    let cache = tempfile::tempdir().unwrap();
    let m = tempfile::tempdir().unwrap();
    tune::engine::data::fixtures::write_mnist_fixture(m.path(), 128, 64, 1).unwrap();
    let spec = format!("mnist:{}", m.path().display());
    let v = json(&tune(
        &[
            "train",
            "--model",
            "mlp",
            "--dataset",
            &spec,
            "--steps",
            "3",
            "--warmup",
            "0",
            "--batch-size",
            "32",
            "--json",
        ],
        cache.path(),
    ));
    assert!(v["accuracy"].as_f64().is_some());
    let c = tempfile::tempdir().unwrap();
    tune::engine::data::fixtures::write_cifar_fixture(c.path(), 96, 32, 1).unwrap();
    let spec = format!("cifar10:{}", c.path().display());
    let v = json(&tune(
        &[
            "train",
            "--model",
            "cnn-small",
            "--dataset",
            &spec,
            "--steps",
            "2",
            "--warmup",
            "0",
            "--batch-size",
            "16",
            "--json",
        ],
        cache.path(),
    ));
    assert_eq!(v["steps"].as_u64(), Some(2));
}

/// `tune train | head`: the reader goes away before tune prints its summary; tune must
/// end quietly (as Unix tools do), not panic on the broken pipe.
#[test]
fn a_closed_stdout_ends_train_quietly_without_a_panic() {
    use std::process::{Command, Stdio};
    let mut child = Command::new(env!("CARGO_BIN_EXE_tune"))
        .args([
            "train",
            "--model",
            "mlp",
            "--dataset",
            "synthetic",
            "--steps",
            "3",
            "--batch-size",
            "8",
            "--threads",
            "1",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
}
