//! `tune probe` reads NCCL's and cuDNN's versions from the libraries themselves (NCCL
//! through tune's private `libnccl.so` link, as a multi-GPU run would load it): checked
//! against the versions pip recorded for the wheels that ship them, in the PyTorch venv.

// Only its torch finder is needed here.
#[allow(dead_code)]
#[path = "pytorch/support.rs"]
mod support;

use std::path::PathBuf;
use std::process::Command;

/// (lib folder, pip version) of an `nvidia-*-cu13` wheel in `py`'s environment.
fn wheel(py: &PathBuf, module: &str, dist: &str) -> Option<(String, String)> {
    let code = format!(
        "import importlib.metadata as m, nvidia.{module} as n, os; \
         print(os.path.join(list(n.__path__)[0], 'lib')); print(m.version('{dist}'))"
    );
    let o = Command::new(py).args(["-c", &code]).output().ok()?;
    let text = String::from_utf8(o.stdout).ok()?;
    let mut lines = text.lines();
    Some((lines.next()?.to_string(), lines.next()?.to_string()))
}

#[test]
fn probe_reports_the_nccl_and_cudnn_versions_of_the_wheels() {
    let Some(py) = support::python("probe_reports_the_nccl_and_cudnn_versions_of_the_wheels")
    else {
        return;
    };
    let (Some((nccl_dir, nccl_v)), Some((cudnn_dir, cudnn_v))) = (
        wheel(&py, "nccl", "nvidia-nccl-cu13"),
        wheel(&py, "cudnn", "nvidia-cudnn-cu13"),
    ) else {
        eprintln!("skipping: this torch has no nvidia-nccl-cu13 / nvidia-cudnn-cu13 wheels");
        return;
    };
    let cache = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tune"))
        .args(["probe", "--json"])
        .env("TUNE_CUDA_LIB_DIRS", format!("{nccl_dir}:{cudnn_dir}"))
        .env("TUNE_CACHE_DIR", cache.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    println!("nccl {} cudnn {}", v["nccl"], v["cudnn"]);
    // pip's versions have a fourth (build) part for cuDNN: 9.26.0.51.
    assert!(
        nccl_v.starts_with(v["nccl"]["version"].as_str().unwrap()),
        "{nccl_v} vs {}",
        v["nccl"]
    );
    assert!(
        cudnn_v.starts_with(v["cudnn"]["version"].as_str().unwrap()),
        "{cudnn_v} vs {}",
        v["cudnn"]
    );
    let link = PathBuf::from(v["nccl"]["path"].as_str().unwrap());
    assert_eq!(link.file_name().unwrap(), "libnccl.so");
    assert!(
        link.starts_with(cache.path()),
        "the link is tune's own: {link:?}"
    );
    assert_eq!(
        std::fs::read_link(&link).unwrap(),
        PathBuf::from(&nccl_dir)
            .join("libnccl.so.2")
            .canonicalize()
            .unwrap()
    );
    // Without the folders: one line each, no version made up.
    let out = Command::new(env!("CARGO_BIN_EXE_tune"))
        .args(["probe", "--json"])
        .env_remove("TUNE_CUDA_LIB_DIRS")
        .env("LD_LIBRARY_PATH", "")
        .env("TUNE_CACHE_DIR", cache.path())
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["nccl"].is_null() && v["nccl_notice"].is_string(), "{v}");
}

#[path = "common/standin.rs"]
mod standin;

/// The real cuDNN of the wheel, loaded through tune's preload, under the CPU stand-in of
/// the driver (no GPU): `cudnnCreate` cannot work there, and training falls back to
/// im2col + cuBLASLt with cuDNN's own status in the record, instead of failing or
/// crashing. Shows that tune's lazily resolved cuDNN symbols load from the real library.
#[test]
fn the_real_cudnn_that_cannot_start_leaves_conv_on_im2col_with_its_status() {
    let test = "the_real_cudnn_that_cannot_start_leaves_conv_on_im2col_with_its_status";
    let Some(py) = support::python(test) else {
        return;
    };
    let Some((cudnn_dir, _)) = wheel(&py, "cudnn", "nvidia-cudnn-cu13") else {
        eprintln!("skipping {test}: this torch has no nvidia-cudnn-cu13 wheel");
        return;
    };
    let Some(standin) = standin::activate().ok().and(standin::dir()) else {
        eprintln!("skipping {test}: needs the CUDA stand-in (TUNE_CUDA_STANDIN=1)");
        return;
    };
    let cache = tempfile::tempdir().unwrap();
    // The wheel's folder first, so its libcudnn.so.9 is the one loaded, then the
    // stand-in's driver and cuBLASLt, then what the environment had (NVRTC).
    let dirs = format!(
        "{cudnn_dir}:{}:{}",
        standin.display(),
        std::env::var("TUNE_CUDA_LIB_DIRS").unwrap_or_default()
    );
    let out = Command::new(env!("CARGO_BIN_EXE_tune"))
        .args([
            "train",
            "--device",
            "cuda",
            "--model",
            "cnn-small",
            "--dataset",
            "synthetic",
            "--steps",
            "1",
            "--warmup",
            "0",
            "--batch-size",
            "4",
            "--no-eval",
            "--json",
        ])
        .env("TUNE_CUDA_LIB_DIRS", dirs)
        .env("TUNE_CACHE_DIR", cache.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let path = v["algorithms"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["op"] == "conv2d" && c["key"] == "path")
        .unwrap_or_else(|| panic!("no conv path in {v}"));
    println!("{}conv path: {}", standin::label(), path["algo"]);
    let algo = path["algo"].as_str().unwrap();
    assert!(
        algo.starts_with("im2col+cublasLt (cudnnCreate: CUDNN_STATUS_"),
        "{algo}"
    );
}
