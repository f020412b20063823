//! The single-device knobs have their semantic effect: checkpointing recomputes exactly
//! (bit-identical gradients) and saves activation memory, zero_grad=none releases
//! gradient memory between steps, and gradient accumulation equals one bigger batch. The
//! run-level tests run on every device (`on_each_device`).

use tune::engine::data::Rng;
use tune::engine::device::{Device, MemCategory};
use tune::engine::nn::layer::Ctx;
use tune::engine::nn::zoo::{build, ModelKind};
use tune::engine::ops::loss::softmax_cross_entropy;
use tune::engine::tensor::Tensor;
use tune::engine::train::{run, DeviceChoice, NoObserver, Workload};
use tune::knobs::{Amp, Checkpoint, Knobs, ZeroGrad};

#[path = "common/standin.rs"]
mod standin;

use standin::on_each_device;

fn batch(kind: ModelKind, n: usize, seed: u64) -> (Vec<f32>, Vec<u32>, [usize; 4]) {
    let [h, w, c] = kind.input();
    let mut r = Rng::new(seed);
    let x = (0..n * h * w * c).map(|_| r.normal()).collect();
    let y = (0..n).map(|_| r.below(10) as u32).collect();
    (x, y, [n, h, w, c])
}

/// One forward/backward; returns every parameter gradient and the activation peak.
fn grads(
    kind: ModelKind,
    seg: Option<usize>,
    x: &[f32],
    y: &[u32],
    shape: [usize; 4],
    scale: f32,
    parts: usize,
) -> (Vec<Vec<f32>>, u64) {
    let dev = Device::cpu(0, 1);
    let mut model = build(kind, 10, 7, &dev).unwrap();
    let ctx = Ctx::train(&dev);
    let per = shape[0] / parts;
    let row = x.len() / shape[0];
    dev.mem().reset_peaks();
    let base = dev.mem().current(MemCategory::Activations);
    for p in 0..parts {
        let xs = x[p * per * row..(p + 1) * per * row].to_vec();
        let xt = Tensor::from_vec(
            &[per, shape[1], shape[2], shape[3]],
            xs,
            MemCategory::Activations,
            dev.mem(),
        )
        .unwrap();
        let logits = model.forward(xt, &ctx, seg).unwrap();
        let mut d = Tensor::zeros(logits.shape(), MemCategory::Activations, dev.mem());
        softmax_cross_entropy(
            logits.f32().unwrap(),
            &y[p * per..(p + 1) * per],
            10,
            scale,
            Some(d.f32_mut().unwrap()),
        )
        .unwrap();
        drop(logits);
        model.backward(d, &ctx, seg).unwrap();
    }
    let peak = dev.mem().peak(MemCategory::Activations) - base;
    let mut out = Vec::new();
    model.visit_params(&mut |p| out.push(p.g.as_ref().unwrap().f32().unwrap().to_vec()));
    (out, peak)
}

#[test]
fn checkpointing_gives_bit_identical_gradients_and_saves_40_percent_activations() {
    let kind = ModelKind::ResnetMini;
    let (x, y, shape) = batch(kind, 16, 1);
    let (g_off, peak_off) = grads(kind, None, &x, &y, shape, 1.0, 1);
    let n_layers = 14;
    let seg = Checkpoint::Sqrt.segment_len(n_layers);
    let (g_on, peak_on) = grads(kind, seg, &x, &y, shape, 1.0, 1);
    assert_eq!(g_off.len(), g_on.len());
    for (a, b) in g_off.iter().zip(&g_on) {
        let ab: Vec<u32> = a.iter().map(|v| v.to_bits()).collect();
        let bb: Vec<u32> = b.iter().map(|v| v.to_bits()).collect();
        assert_eq!(ab, bb, "checkpointed gradients differ");
    }
    let drop = 1.0 - peak_on as f64 / peak_off as f64;
    println!(
        "resnet-mini activation peak: off {peak_off} B, sqrt {peak_on} B ({:.0}% less)",
        drop * 100.0
    );
    assert!(
        drop >= 0.40,
        "activation peak fell only {:.1}%",
        drop * 100.0
    );
}

#[test]
fn gradient_accumulation_equals_one_bigger_batch() {
    // The MLP has no batch statistics, so two half batches must sum to the full batch.
    let kind = ModelKind::Mlp;
    let (x, y, shape) = batch(kind, 32, 2);
    let (full, _) = grads(kind, None, &x, &y, shape, 1.0, 1);
    let (acc, _) = grads(kind, None, &x, &y, shape, 0.5, 2);
    for (a, b) in full.iter().zip(&acc) {
        for (u, v) in a.iter().zip(b) {
            assert!((u - v).abs() <= 1e-6 + 1e-4 * u.abs(), "{u} vs {v}");
        }
    }
}

/// A short synthetic MLP run on `device`.
fn short_run(device: DeviceChoice, k: Knobs) -> tune::engine::RunSummary {
    let cache = tempfile::tempdir().unwrap();
    let w = Workload {
        steps: 3,
        warmup: 1,
        threads: 1,
        eval: false,
        device,
        cache_dir: cache.path().to_path_buf(),
        ..Workload::new(ModelKind::Mlp, "synthetic")
    };
    run(&w, &k, &mut NoObserver).unwrap()
}

// The run-level knob tests below are written once and run on every device: the CPU
// always, CUDA when a GPU (or, in CI, the CPU stand-in of the CUDA libraries) is there.

#[test]
fn zero_grad_none_releases_gradients_between_steps_and_learns_the_same() {
    let test = "zero_grad_none_releases_gradients_between_steps_and_learns_the_same";
    on_each_device(test, |device| {
        let memset = short_run(
            device,
            Knobs {
                batch_size: 16,
                ..Knobs::default()
            },
        );
        let none = short_run(
            device,
            Knobs {
                batch_size: 16,
                zero_grad: ZeroGrad::None,
                ..Knobs::default()
            },
        );
        let param_bytes = memset.peak_bytes["params"];
        assert_eq!(
            memset.grad_bytes_between_steps, param_bytes,
            "{device:?}: memset keeps one gradient per parameter"
        );
        assert_eq!(
            none.grad_bytes_between_steps, 0,
            "{device:?}: none releases them"
        );
        let bits =
            |s: &tune::engine::RunSummary| s.losses.iter().map(|l| l.to_bits()).collect::<Vec<_>>();
        assert_eq!(
            bits(&memset),
            bits(&none),
            "{device:?}: accumulating into zeros and writing give the same numbers"
        );
    });
}

#[test]
fn grad_accum_counts_samples_per_optimizer_step() {
    on_each_device("grad_accum_counts_samples_per_optimizer_step", |device| {
        let s = short_run(
            device,
            Knobs {
                batch_size: 8,
                grad_accum: 3,
                ..Knobs::default()
            },
        );
        assert_eq!(s.samples_per_step, 24, "{device:?}");
        assert_eq!(s.losses.len(), 3, "{device:?}: one loss per optimizer step");
    });
}

/// pin_memory is recorded as not applicable where there is no host-to-device copy (the
/// CPU), and is not on a device that has one.
#[test]
fn pin_memory_is_not_applicable_on_cpu_only() {
    on_each_device("pin_memory_is_not_applicable_on_cpu_only", |device| {
        let s = short_run(
            device,
            Knobs {
                batch_size: 8,
                pin_memory: true,
                ..Knobs::default()
            },
        );
        match device {
            DeviceChoice::Cpu => {
                assert!(s.not_applicable["pin_memory"].contains("CPU backend"))
            }
            _ => assert!(
                !s.not_applicable.contains_key("pin_memory"),
                "{device:?}: {:?}",
                s.not_applicable
            ),
        }
    });
}

/// AMP stores activations at 2 bytes and fp16's loss scaler skips an overflowing step
/// (and only that one) on every device; tf32 stores f32, and is recorded as not
/// applicable where there are no tensor cores (the CPU).
#[test]
fn amp_halves_activations_and_its_scaler_skips_an_overflow_on_every_device() {
    let test = "amp_halves_activations_and_its_scaler_skips_an_overflow_on_every_device";
    on_each_device(test, |device| {
        let with = |amp: Amp, overflow: Option<usize>| {
            let cache = tempfile::tempdir().unwrap();
            let w = Workload {
                steps: 3,
                warmup: 0,
                threads: 1,
                eval: false,
                device,
                inject_overflow_at: overflow,
                cache_dir: cache.path().to_path_buf(),
                ..Workload::new(ModelKind::Mlp, "synthetic")
            };
            let k = Knobs {
                amp,
                batch_size: 8,
                ..Knobs::default()
            };
            run(&w, &k, &mut NoObserver).unwrap()
        };
        let off = with(Amp::Off, None);
        let a_off = off.peak_bytes["activations"];
        for amp in [Amp::Bf16, Amp::Fp16] {
            let s = with(amp, None);
            let a = s.peak_bytes["activations"];
            // About half: an f32 result left un-narrowed is charged as workspace and
            // would make this figure small, not half.
            let r = a as f64 / a_off as f64;
            assert!(
                (0.4..0.75).contains(&r),
                "{device:?} {amp}: activations {a} B vs f32 {a_off} B"
            );
        }
        let fp16 = with(Amp::Fp16, Some(1));
        assert_eq!(fp16.skipped_steps, vec![1], "{device:?}");
        assert_eq!(
            fp16.loss_scale_final,
            Some(32768.0),
            "{device:?}: backed off once"
        );
        let tf32 = with(Amp::Tf32, None);
        assert_eq!(
            tf32.peak_bytes["activations"], a_off,
            "{device:?}: tf32 stores f32"
        );
        assert_eq!(tf32.loss_scale_final, None, "{device:?}: nothing to scale");
        match device {
            DeviceChoice::Cpu => assert!(tf32.not_applicable["amp"].contains("TF32")),
            _ => assert!(!tf32.not_applicable.contains_key("amp"), "{device:?}"),
        }
    });
}

/// Autotuning measures its choices, records them with their timings in the trial record,
/// and keeps them in the cache file, on every device.
#[test]
fn autotune_measures_records_and_caches_its_choices_on_every_device() {
    let test = "autotune_measures_records_and_caches_its_choices_on_every_device";
    on_each_device(test, |device| {
        let cache = tempfile::tempdir().unwrap();
        let w = Workload {
            steps: 2,
            warmup: 0,
            threads: 1,
            eval: false,
            device,
            cache_dir: cache.path().to_path_buf(),
            ..Workload::new(ModelKind::Mlp, "synthetic")
        };
        let k = Knobs {
            autotune: true,
            batch_size: 8,
            ..Knobs::default()
        };
        let s = run(&w, &k, &mut NoObserver).unwrap();
        let measured: Vec<_> = s
            .algorithms
            .iter()
            .filter(|c| c.source == tune::engine::autotune::ChoiceSource::Measured)
            .collect();
        assert!(!measured.is_empty(), "{device:?}: {:?}", s.algorithms);
        for c in &measured {
            assert!(c.timings_ms.contains_key(&c.algo), "{device:?}: {c:?}");
        }
        assert!(cache.path().join("autotune.json").exists(), "{device:?}");
    });
}

/// Each algorithm decision says when it was first needed, on every device: the engine's
/// training batches are fixed (drop_last), so every training key comes from the first two
/// steps (the second adds its weight gradients into the first's: GEMMs of their own), and
/// the GPU's held-out evaluation (batches of 256, then the remainder) marks its
/// own as `eval`. An H200 sweep warned "input shapes vary" on the evaluation's shapes
/// alone before these marks existed (the advisor now counts `late` only).
#[test]
fn autotune_decisions_say_when_they_were_first_needed_on_every_device() {
    let test = "autotune_decisions_say_when_they_were_first_needed_on_every_device";
    on_each_device(test, |device| {
        let cache = tempfile::tempdir().unwrap();
        let w = Workload {
            steps: 10,
            warmup: 1,
            threads: 1,
            eval: true,
            device,
            cache_dir: cache.path().to_path_buf(),
            // 500 training samples: the epoch's short last batch (52) is dropped; 500
            // held-out samples: evaluation batches of 256 and 244.
            ..Workload::new(ModelKind::Mlp, "shapes:500")
        };
        let k = Knobs {
            autotune: true,
            batch_size: 64,
            ..Knobs::default()
        };
        let all = run(&w, &k, &mut NoObserver).unwrap().algorithms;
        assert!(
            all.iter().all(|c| !c.late),
            "{device:?}: fixed shapes, yet a key was first needed after the first two steps: {all:?}"
        );
        assert!(
            all.iter().filter(|c| c.eval).all(|c| !c.key.contains("64")),
            "{device:?}: a training shape marked as the evaluation's: {all:?}"
        );
        // The CPU's evaluation runs its forward pass without autotuned choices; the GPU
        // decides its GEMMs (and convolutions) for the evaluation's batch shapes.
        if device == DeviceChoice::Cuda {
            assert!(
                all.iter().any(|c| c.eval && c.key.contains("256")),
                "{device:?}: the evaluation's batch of 256 is not marked: {all:?}"
            );
        }
    });
}
