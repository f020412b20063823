//! Autotuning on the CUDA backend (`autotune = true`, the `cudnn.benchmark` analogue):
//! each GEMM key's cuBLASLt heuristic candidates are timed on a scratch output, the
//! winner is kept in the same versioned cache file as the CPU's, a second run reads it
//! from there, and the record names the conv path that ran. Same activation as
//! gpu_parity.rs (the CPU stand-in under `TUNE_CUDA_STANDIN=1`, where every candidate is
//! the same reference loop: the bookkeeping is checked there, the winner only on a GPU).

use tune::engine::autotune::ChoiceSource;
use tune::engine::nn::zoo::ModelKind;
use tune::engine::train::{run, DeviceChoice, NoObserver, Workload};
use tune::knobs::{Amp, Knobs};

#[path = "common/standin.rs"]
mod standin;

#[test]
fn autotune_times_cublaslt_candidates_caches_them_and_records_the_conv_path() {
    let test = "autotune_times_cublaslt_candidates_caches_them_and_records_the_conv_path";
    if standin::gpu_or_skip(test).is_none() {
        return;
    }
    let cache = tempfile::tempdir().unwrap();
    let w = Workload {
        steps: 2,
        warmup: 0,
        eval: false,
        device: DeviceChoice::Cuda,
        cache_dir: cache.path().to_path_buf(),
        ..Workload::new(ModelKind::CnnSmall, "synthetic")
    };
    let k = Knobs {
        autotune: true,
        amp: Amp::Bf16,
        batch_size: 8,
        ..Knobs::default()
    };
    let first = run(&w, &k, &mut NoObserver).unwrap();
    let gemms: Vec<_> = first.algorithms.iter().filter(|c| c.op == "gemm").collect();
    for c in &gemms {
        eprintln!(
            "{}gemm [{}]: {} {:?} {:?}",
            standin::label(),
            c.key,
            c.algo,
            c.source,
            c.timings_ms
        );
    }
    assert!(!gemms.is_empty(), "no GEMM choice recorded");
    for c in &gemms {
        assert_eq!(c.source, ChoiceSource::Measured, "{}", c.key);
        assert!(
            c.key.ends_with(" bf16"),
            "the key names the operand type: {}",
            c.key
        );
        assert!(
            c.timings_ms.len() >= 2 && c.timings_ms.contains_key(&c.algo),
            "{}: candidates {:?}, winner {}",
            c.key,
            c.timings_ms,
            c.algo
        );
        let best = c.timings_ms.values().cloned().fold(f64::INFINITY, f64::min);
        assert_eq!(c.timings_ms[&c.algo], best, "{}: not the fastest", c.key);
    }
    let path = first
        .algorithms
        .iter()
        .find(|c| c.op == "conv2d" && c.key == "path")
        .expect("the conv path is recorded");
    // Which path depends on whether cuDNN loads (tests/gpu_cudnn.rs checks both).
    assert!(
        path.algo.starts_with("im2col+cublasLt (") || path.algo.starts_with("cudnn "),
        "{}",
        path.algo
    );

    // The cache file is the CPU's (versioned, one file); a second run reads every key.
    let text = std::fs::read_to_string(cache.path().join("autotune.json")).unwrap();
    assert!(
        text.contains("\"tune-autotune\"") && text.contains("gemm|cuda:"),
        "{text}"
    );
    let second = run(&w, &k, &mut NoObserver).unwrap();
    let again: Vec<_> = second
        .algorithms
        .iter()
        .filter(|c| c.op == "gemm")
        .collect();
    assert_eq!(again.len(), gemms.len());
    for (a, b) in again.iter().zip(&gemms) {
        assert_eq!(a.source, ChoiceSource::Cache, "{}", a.key);
        assert_eq!((&a.key, &a.algo), (&b.key, &b.algo));
    }
}
