//! conv2d through cuDNN on the CUDA backend (`src/engine/cuda/dnn.rs`): where
//! `libcudnn.so.9` loads, the three convolutions of every conv layer run in cuDNN; the
//! losses track the im2col + cuBLASLt path (`TUNE_CUDNN=0`) in f32, bf16 and fp16, with
//! gradients accumulated (grad_accum 2) or written fresh (set-to-none); the record names
//! the path with cuDNN's version and each shape's algorithm with its workspace; autotune
//! times every runnable algorithm per shape and direction, keeps the fastest in the same
//! cache as the GEMMs, and a second run reads them from there.
//!
//! Same activation as gpu_parity.rs: a GPU, or the CPU stand-in under
//! `TUNE_CUDA_STANDIN=1` (whose libcudnn.so.9 is tests/standin/cudnn.cpp: the bookkeeping
//! and arithmetic are checked there, which algorithm wins only on a GPU). Where the CUDA
//! backend runs but cuDNN does not load, the test skips with the reason, and fails
//! instead under `TUNE_REQUIRE_GPU=1` (scripts/gpu-session.sh puts the cuDNN wheel's
//! folder on `TUNE_CUDA_LIB_DIRS`).
//!
//! One test function: `TUNE_CUDNN` is read when a GPU is opened, so the runs that set
//! it must not overlap with others in this binary.

use tune::engine::autotune::{AlgoChoice, ChoiceSource};
use tune::engine::nn::zoo::ModelKind;
use tune::engine::train::{run, DeviceChoice, NoObserver, RunSummary, Workload};
use tune::knobs::{Amp, Knobs, ZeroGrad};

#[path = "common/standin.rs"]
mod standin;

const OPS: [&str; 3] = [
    "conv2d.cudnn.fwd",
    "conv2d.cudnn.bwd_data",
    "conv2d.cudnn.bwd_filter",
];

fn workload(model: ModelKind, steps: usize, cache: &std::path::Path) -> Workload {
    Workload {
        steps,
        warmup: 0,
        eval: false,
        lr: 0.05,
        device: DeviceChoice::Cuda,
        cache_dir: cache.to_path_buf(),
        ..Workload::new(model, "synthetic")
    }
}

fn train(cudnn: bool, w: &Workload, k: &Knobs) -> RunSummary {
    if cudnn {
        std::env::remove_var("TUNE_CUDNN");
    } else {
        std::env::set_var("TUNE_CUDNN", "0");
    }
    let s = run(w, k, &mut NoObserver);
    std::env::remove_var("TUNE_CUDNN");
    s.unwrap()
}

fn path(s: &RunSummary) -> &AlgoChoice {
    s.algorithms
        .iter()
        .find(|c| c.op == "conv2d" && c.key == "path")
        .expect("the conv path is recorded")
}

fn close(what: &str, got: &[f32], want: &[f32], atol: f32, rtol: f32) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= atol + rtol * w.abs(),
            "{what}: step {i}: {g} with cuDNN, {w} with im2col + cuBLASLt"
        );
    }
}

/// Whether cuDNN loads on this GPU (the path of a run says so), else why not.
fn cudnn_or_skip(test: &str, probe: &RunSummary) -> bool {
    let p = path(probe);
    if p.algo.starts_with("cudnn ") {
        return true;
    }
    if std::env::var("TUNE_REQUIRE_GPU").as_deref() == Ok("1") {
        panic!("{test}: TUNE_REQUIRE_GPU=1 but conv2d ran as {}", p.algo);
    }
    eprintln!("skipping {test}: conv2d ran as {}", p.algo);
    false
}

#[test]
fn cudnn_convolutions_track_im2col_record_their_algorithms_and_autotune() {
    let test = "cudnn_convolutions_track_im2col_record_their_algorithms_and_autotune";
    if standin::gpu_or_skip(test).is_none() {
        return;
    }
    // The stand-in runs every kernel on one CPU thread: 2 steps of batch 4 there (the
    // second loss depends on the first update, with or without accumulation; the shapes
    // and algorithms are the batch's in any size).
    let (steps, batch) = if standin::requested() {
        (2, 4)
    } else {
        (8, 32)
    };
    let cache = tempfile::tempdir().unwrap();
    let base = Knobs {
        batch_size: batch,
        ..Knobs::default()
    };
    let w = workload(ModelKind::CnnSmall, steps, cache.path());
    let first = train(true, &w, &base);
    if !cudnn_or_skip(test, &first) {
        return;
    }

    // The record: the path with cuDNN's version, then each shape's heuristic algorithm
    // per direction, with its workspace; cnn-small has three conv shapes.
    eprintln!("{}path: {}", standin::label(), path(&first).algo);
    for op in OPS {
        let mine: Vec<_> = first.algorithms.iter().filter(|c| c.op == op).collect();
        for c in &mine {
            eprintln!(
                "{}{op} [{}]: {} {:?}",
                standin::label(),
                c.key,
                c.algo,
                c.source
            );
        }
        // The first conv's input gradient is never computed (the input needs none).
        let shapes = if op == "conv2d.cudnn.bwd_data" { 2 } else { 3 };
        assert_eq!(mine.len(), shapes, "{op}: one choice per conv shape");
        for c in mine {
            assert_eq!(c.source, ChoiceSource::Heuristic, "{op} {}", c.key);
            assert!(
                c.key.ends_with(" F32"),
                "{op}: the key names the type: {}",
                c.key
            );
            assert!(c.algo.ends_with(" B workspace)"), "{op}: {}", c.algo);
        }
    }
    let off = train(false, &w, &base);
    assert_eq!(path(&off).algo, "im2col+cublasLt (TUNE_CUDNN=0)");
    assert!(
        !off.algorithms.iter().any(|c| OPS.contains(&c.op.as_str())),
        "no cuDNN choice when cuDNN is off"
    );

    // Losses: f32, both zero_grad modes with accumulation (beta = 1 on the weight
    // gradient) and without; bf16 and fp16 (half operands and outputs, f32 compute).
    let cases = [
        ("f32", base.clone(), 1e-4, 1e-3),
        (
            "f32 grad_accum 2 set-to-none",
            Knobs {
                grad_accum: 2,
                zero_grad: ZeroGrad::None,
                ..base.clone()
            },
            1e-4,
            1e-3,
        ),
        (
            "bf16",
            Knobs {
                amp: Amp::Bf16,
                ..base.clone()
            },
            2e-3,
            2e-2,
        ),
        (
            "fp16 grad_accum 2",
            Knobs {
                amp: Amp::Fp16,
                grad_accum: 2,
                ..base.clone()
            },
            2e-3,
            2e-2,
        ),
    ];
    for (name, k, atol, rtol) in cases {
        // The f32 case is the base knobs, which the two runs above already trained.
        let (with, without) = if k == base {
            (first.clone(), off.clone())
        } else {
            (train(true, &w, &k), train(false, &w, &k))
        };
        eprintln!(
            "{}cnn-small {name}: cudnn {:?} im2col {:?}",
            standin::label(),
            with.losses,
            without.losses
        );
        close(name, &with.losses, &without.losses, atol, rtol);
        assert!(path(&with).algo.starts_with("cudnn "), "{name}");
        assert_eq!(with.skipped_steps, without.skipped_steps, "{name}");
    }

    // A shape cuDNN has no algorithm for (the stand-in's hook lists nothing runnable for
    // 3 input channels, as cuDNN does for a configuration it has no kernel for) runs as
    // im2col + cuBLASLt, the record says so, and the other shapes stay on cuDNN.
    if standin::requested() {
        std::env::set_var("TUNE_CUDNN_STANDIN_NO_ALGO_C", "3");
        let mixed = train(true, &w, &base);
        std::env::remove_var("TUNE_CUDNN_STANDIN_NO_ALGO_C");
        let fell: Vec<_> = mixed
            .algorithms
            .iter()
            .filter(|c| c.op == "conv2d" && c.key != "path")
            .collect();
        assert_eq!(fell.len(), 1, "{:?}", mixed.algorithms);
        assert!(fell[0].key.contains("32x32x3 -> 32"), "{:?}", fell[0]);
        assert!(
            fell[0]
                .algo
                .starts_with("im2col+cublasLt (cuDNN has no runnable"),
            "{:?}",
            fell[0]
        );
        let fwd = mixed.algorithms.iter().filter(|c| c.op == OPS[0]).count();
        assert_eq!(fwd, 2, "the two other shapes ran in cuDNN");
        close(
            "one shape on im2col",
            &mixed.losses,
            &first.losses,
            1e-4,
            1e-3,
        );
    }

    // resnet-mini: 1x1 stride-2 shortcuts and more shapes.
    let rw = workload(ModelKind::ResnetMini, 2, cache.path());
    let with = train(true, &rw, &base);
    let without = train(false, &rw, &base);
    eprintln!(
        "{}resnet-mini: cudnn {:?} im2col {:?}",
        standin::label(),
        with.losses,
        without.losses
    );
    close("resnet-mini f32", &with.losses, &without.losses, 1e-4, 1e-3);

    // Autotune: every runnable algorithm timed per shape and direction, the fastest kept
    // in the versioned cache beside the GEMMs, read back by a second run.
    let tuned = Knobs {
        autotune: true,
        amp: Amp::Bf16,
        ..base.clone()
    };
    let a = train(true, &w, &tuned);
    let mut timed = 0;
    for c in a.algorithms.iter().filter(|c| OPS.contains(&c.op.as_str())) {
        eprintln!(
            "{}{} [{}]: {} {:?} {:?}",
            standin::label(),
            c.op,
            c.key,
            c.algo,
            c.source,
            c.timings_ms
        );
        assert_eq!(c.source, ChoiceSource::Measured, "{} {}", c.op, c.key);
        assert!(c.key.ends_with(" Bf16"), "{}", c.key);
        assert!(c.timings_ms.contains_key(&c.algo), "{c:?}");
        let best = c.timings_ms.values().cloned().fold(f64::INFINITY, f64::min);
        assert_eq!(c.timings_ms[&c.algo], best, "{}: not the fastest", c.key);
        timed += usize::from(c.timings_ms.len() >= 2);
    }
    assert_eq!(
        timed, 8,
        "3 + 2 + 3 shapes and directions, each with 2+ candidates"
    );
    let text = std::fs::read_to_string(cache.path().join("autotune.json")).unwrap();
    assert!(text.contains("conv2d.cudnn.fwd|cuda:"), "{text}");
    let b = train(true, &w, &tuned);
    let again: Vec<_> = b
        .algorithms
        .iter()
        .filter(|c| OPS.contains(&c.op.as_str()))
        .collect();
    assert_eq!(again.len(), 8);
    for c in again {
        assert_eq!(c.source, ChoiceSource::Cache, "{} {}", c.op, c.key);
        let was = a
            .algorithms
            .iter()
            .find(|x| x.op == c.op && x.key == c.key)
            .unwrap();
        assert_eq!(c.algo, was.algo);
    }
}
