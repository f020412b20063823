//! The `fuse` knob (#30): fused pointwise chains give the unfused losses, on the CPU bit
//! for bit in f32 (same operations in the same order: ops/fused.rs) and on the CUDA
//! backend within f32 rounding (its fused forward adds the bias after the GEMM's sum:
//! ops/fused_cuda.rs), and a nonsense value is refused with exit 2 before anything runs.
//! The CUDA test runs on the CPU stand-in under `TUNE_CUDA_STANDIN=1` (docs/gpu.md) and
//! skips with the reason where no GPU can run.

#[path = "common/cli.rs"]
mod cli;
#[path = "common/standin.rs"]
mod standin;

use cli::{refused, tune};
use tune::engine::nn::zoo::ModelKind;
use tune::engine::train::{run, DeviceChoice, NoObserver, Workload};
use tune::knobs::{Amp, Fuse, Knobs};

fn workload(model: ModelKind, steps: usize, device: DeviceChoice) -> Workload {
    Workload {
        steps,
        warmup: 1,
        eval: false,
        lr: 0.05,
        threads: 2,
        device,
        cache_dir: tempfile::tempdir().unwrap().keep(),
        ..Workload::new(model, "synthetic")
    }
}

fn losses(model: ModelKind, steps: usize, device: DeviceChoice, k: &Knobs) -> Vec<f32> {
    let s = run(&workload(model, steps, device), k, &mut NoObserver).unwrap();
    assert_eq!(s.losses.len(), steps, "{model}: one loss per step");
    s.losses
}

/// Every model's first losses with `fuse = on` are the unfused ones bit for bit on the
/// CPU (2 threads: the bias-gradient pass splits columns over them), the optimizer's
/// one-sweep update included; under bf16 AMP, within half rounding.
#[test]
fn fused_cpu_training_gives_the_unfused_losses_bit_for_bit() {
    for model in [ModelKind::Mlp, ModelKind::CnnSmall, ModelKind::ResnetMini] {
        for amp in [Amp::Off, Amp::Bf16] {
            let k = |fuse| Knobs {
                batch_size: 16,
                amp,
                fuse,
                ..Knobs::default()
            };
            let off = losses(model, 3, DeviceChoice::Cpu, &k(Fuse::Off));
            let on = losses(model, 3, DeviceChoice::Cpu, &k(Fuse::On));
            eprintln!("{model} amp={amp}: unfused {off:?} fused {on:?}");
            if amp == Amp::Off {
                let bits = |v: &[f32]| v.iter().map(|l| l.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&on), bits(&off), "{model}: fused losses differ");
            } else {
                for (a, b) in on.iter().zip(&off) {
                    assert!(
                        (a - b).abs() <= 1e-2 * b.abs(),
                        "{model} bf16: fused {a} vs unfused {b}"
                    );
                }
            }
        }
    }
}

/// On the CUDA backend (the stand-in in CI) the fused kernels (bias_relu,
/// relu_mask_channel_sum, bn_relu_*) follow the unfused ones' losses within f32
/// rounding: |on - off| <= 1e-4 + 1e-4*|off|.
#[test]
fn fused_cuda_kernels_follow_the_unfused_losses() {
    if standin::gpu_or_skip("fused_cuda_kernels_follow_the_unfused_losses").is_none() {
        return;
    }
    // The stand-in runs kernels on one CPU thread: 2 steps of batch 8, and not
    // resnet-mini, whose fused pairs are cnn-small's batch norm+ReLU again (and which costs
    // most of a minute there).
    for model in [ModelKind::Mlp, ModelKind::CnnSmall] {
        let k = |fuse| Knobs {
            batch_size: 8,
            fuse,
            ..Knobs::default()
        };
        let off = losses(model, 2, DeviceChoice::Cuda, &k(Fuse::Off));
        let on = losses(model, 2, DeviceChoice::Cuda, &k(Fuse::On));
        eprintln!("{}{model}: unfused {off:?} fused {on:?}", standin::label());
        for (a, b) in on.iter().zip(&off) {
            assert!(
                (a - b).abs() <= 1e-4 + 1e-4 * b.abs(),
                "{model}: fused {a} vs unfused {b} on the GPU"
            );
        }
    }
}

/// A value that is neither `off` nor `on` is refused with exit 2, naming the flag or the
/// spec's knob, and the sweep's folder is not created.
#[test]
fn a_nonsense_fuse_value_exits_2_and_writes_nothing() {
    let d = tempfile::tempdir().unwrap();
    let o = tune()
        .args(["train", "--model", "mlp", "--steps", "1", "--fuse", "maybe"])
        .env("TUNE_CACHE_DIR", d.path().join("cache"))
        .output()
        .unwrap();
    let line = refused(&o);
    assert!(
        line.contains("--fuse") && line.contains("off, on"),
        "{line}"
    );

    let spec = d.path().join("s.toml");
    std::fs::write(
        &spec,
        "name = \"t\"\n[workload]\nmodel = \"mlp\"\ndataset = \"synthetic\"\nbatch_size = 16\n\
         steps = 6\nwarmup = 1\ndevice = \"cpu\"\nthreads = 1\n\n[knobs]\n\
         fuse = [\"off\", \"sometimes\"]\n",
    )
    .unwrap();
    let out = d.path().join("out");
    let o = tune()
        .arg("sweep")
        .arg(&spec)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let line = refused(&o);
    assert!(
        line.contains("fuse") && line.contains("sometimes") && line.contains("s.toml"),
        "{line}"
    );
    assert!(!out.exists(), "a refused spec created {}", out.display());
}
