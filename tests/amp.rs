//! Mixed precision has its semantic effects: activations are stored in half precision
//! (and their memory halves), the fp16 loss scaler follows GradScaler's rules, loss
//! scaling rescues a loss whose gradients underflow fp16, and half-precision training
//! reaches fp32's accuracy.

use tune::engine::amp::GradScaler;
use tune::engine::amp::ScalerConfig;
use tune::engine::data::Rng;
use tune::engine::device::{Device, MemCategory};
use tune::engine::nn::layer::Ctx;
use tune::engine::nn::zoo::{build, ModelKind};
use tune::engine::ops::loss::softmax_cross_entropy;
use tune::engine::optim::{OptimConfig, Optimizer};
use tune::engine::tensor::Tensor;
use tune::engine::train::{run, NoObserver, Observer, StepEvent, Workload};
use tune::knobs::{Amp, Knobs};

fn workload(steps: usize) -> Workload {
    Workload {
        steps,
        warmup: 1,
        threads: 1,
        eval: false,
        ..Workload::new(ModelKind::Mlp, "synthetic")
    }
}

struct Events(Vec<StepEvent>);
impl Observer for Events {
    fn on_step(&mut self, ev: &StepEvent) {
        self.0.push(ev.clone());
    }
}

#[test]
fn an_injected_overflow_skips_exactly_that_step_and_halves_the_scale() {
    let knobs = Knobs {
        amp: Amp::Fp16,
        batch_size: 16,
        ..Knobs::default()
    };
    let clean = run(&workload(6), &knobs, &mut NoObserver).unwrap();
    assert!(clean.skipped_steps.is_empty());
    assert_eq!(clean.loss_scale_final, Some(65536.0));

    let w = Workload {
        inject_overflow_at: Some(3),
        ..workload(6)
    };
    let mut ev = Events(Vec::new());
    let s = run(&w, &knobs, &mut ev).unwrap();
    assert_eq!(s.skipped_steps, vec![3]);
    let skipped: Vec<bool> = ev.0.iter().map(|e| e.skipped).collect();
    assert_eq!(skipped, [false, false, false, true, false, false]);
    let scales: Vec<f32> = ev.0.iter().filter_map(|e| e.loss_scale).collect();
    assert_eq!(
        scales,
        [65536.0, 65536.0, 65536.0, 65536.0, 32768.0, 32768.0]
    );
    assert_eq!(s.loss_scale_final, Some(32768.0));
    // Steps before the overflow are untouched; the skipped step did not update the
    // weights, so the next loss differs from the clean run's next loss.
    assert_eq!(s.losses[..4], clean.losses[..4]);
    assert_ne!(s.losses[4], clean.losses[4]);
}

#[test]
fn the_scale_grows_after_the_growth_interval() {
    let w = Workload {
        scaler: ScalerConfig {
            growth_interval: 2,
            ..ScalerConfig::default()
        },
        ..workload(5)
    };
    let knobs = Knobs {
        amp: Amp::Fp16,
        batch_size: 8,
        ..Knobs::default()
    };
    let s = run(&w, &knobs, &mut NoObserver).unwrap();
    assert_eq!(s.loss_scale_final, Some(65536.0 * 4.0));
}

#[test]
fn bf16_runs_without_loss_scaling_by_default() {
    let knobs = Knobs {
        amp: Amp::Bf16,
        batch_size: 8,
        ..Knobs::default()
    };
    let s = run(&workload(3), &knobs, &mut NoObserver).unwrap();
    assert_eq!(s.loss_scale_final, None);
    assert!(s.final_loss.is_finite());
}

/// Trains the MLP by hand on one fixed batch whose loss is weighted by 1e-6: in fp16
/// its gradients (~1e-9) fall below the smallest subnormal (6e-8) and flush to zero.
/// Returns the losses per step.
fn tiny_loss_run(amp: Amp, scaling: bool) -> Vec<f32> {
    const WEIGHT: f32 = 1e-6;
    let dev = Device::cpu(0, 1);
    let mut model = build(ModelKind::Mlp, 10, 3, &dev).unwrap();
    let ctx = Ctx {
        amp,
        ..Ctx::train(&dev)
    };
    let mut rng = Rng::new(5);
    let n = 32;
    let x: Vec<f32> = (0..n * 784).map(|_| rng.normal()).collect();
    let y: Vec<u32> = (0..n).map(|_| rng.below(10) as u32).collect();
    // The step size makes up for the loss weight, so fp32 learns at a normal pace.
    let mut opt = Optimizer::new(OptimConfig::sgd(0.05 / WEIGHT)).unwrap();
    let mut scaler = scaling.then(|| GradScaler::new(ScalerConfig::default()));
    let mut losses = Vec::new();
    for _ in 0..8 {
        model.visit_params(&mut |p| p.g = None);
        let xt = Tensor::from_vec(
            &[n, 28, 28, 1],
            x.clone(),
            MemCategory::Activations,
            dev.mem(),
        )
        .unwrap();
        let logits = model.forward(xt, &ctx, None).unwrap().into_f32().unwrap();
        let mut d = Tensor::zeros(logits.shape(), MemCategory::Activations, dev.mem());
        let scale = scaler.as_ref().map_or(1.0, GradScaler::scale);
        let (loss, _) = softmax_cross_entropy(
            logits.f32().unwrap(),
            &y,
            10,
            WEIGHT * scale,
            Some(d.f32_mut().unwrap()),
        )
        .unwrap();
        losses.push(loss);
        drop(logits);
        let d = ctx.store(d).unwrap();
        model.backward(d, &ctx, None).unwrap();
        let mut finite = true;
        model.visit_params(&mut |p| {
            if let Some(g) = &p.g {
                finite &= g.f32().unwrap().iter().all(|v| v.is_finite());
            }
        });
        if scaler.as_mut().is_none_or(|s| s.update(finite)) {
            opt.begin_step();
            let mut i = 0;
            model.visit_params(&mut |p| {
                opt.update(i, p, scale).unwrap();
                i += 1;
            });
        }
    }
    losses
}

#[test]
fn loss_scaling_rescues_fp16_gradients_that_underflow() {
    let fp32 = tiny_loss_run(Amp::Off, false);
    let unscaled = tiny_loss_run(Amp::Fp16, false);
    let scaled = tiny_loss_run(Amp::Fp16, true);
    println!("fp32 {fp32:?}\nfp16 unscaled {unscaled:?}\nfp16 scaled {scaled:?}");
    assert!(fp32[7] < fp32[0] * 0.8, "fp32 must learn: {fp32:?}");
    // Without scaling every gradient flushes to zero: the weights never move.
    assert!(
        unscaled.iter().all(|l| l == &unscaled[0]),
        "unscaled fp16 should not learn: {unscaled:?}"
    );
    assert!(
        scaled[7] < scaled[0] * 0.8,
        "scaled fp16 must learn: {scaled:?}"
    );
    assert!(
        (scaled[7] - fp32[7]).abs() < 0.1 * fp32[0],
        "scaled fp16 should track fp32: {scaled:?} vs {fp32:?}"
    );
}

#[test]
fn half_precision_stores_activations_in_half_the_bytes() {
    let knobs = |amp| Knobs {
        amp,
        batch_size: 16,
        ..Knobs::default()
    };
    let w = Workload {
        model: ModelKind::CnnSmall,
        ..workload(2)
    };
    let off = run(&w, &knobs(Amp::Off), &mut NoObserver).unwrap();
    for amp in [Amp::Bf16, Amp::Fp16] {
        let half = run(&w, &knobs(amp), &mut NoObserver).unwrap();
        let (a, b) = (
            off.peak_bytes["activations"],
            half.peak_bytes["activations"],
        );
        println!("cnn-small activation peak: fp32 {a} B, {amp} {b} B");
        assert!(
            (b as f64) < 0.6 * a as f64,
            "{amp}: activation peak {b} not well below fp32's {a}"
        );
        // Master weights stay f32.
        assert_eq!(half.peak_bytes["params"], off.peak_bytes["params"]);
    }
}

#[test]
fn half_precision_training_matches_fp32_accuracy_on_cnn_small() {
    let cache = std::env::var_os("TUNE_CACHE_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(tune::engine::train::default_cache_dir);
    let w = Workload {
        model: ModelKind::CnnSmall,
        dataset: "shapes:4000".into(),
        steps: 400,
        warmup: 5,
        lr: 0.1,
        eval: true,
        threads: tune::engine::train::default_threads(),
        cache_dir: cache,
        ..Workload::new(ModelKind::CnnSmall, "shapes:4000")
    };
    let acc = |amp| {
        let k = Knobs {
            amp,
            batch_size: 32,
            ..Knobs::default()
        };
        run(&w, &k, &mut NoObserver)
            .unwrap()
            .accuracy
            .expect("evaluated")
    };
    let fp32 = acc(Amp::Off);
    for amp in [Amp::Bf16, Amp::Fp16] {
        let a = acc(amp);
        println!("cnn-small accuracy: fp32 {fp32:.4}, {amp} {a:.4}");
        assert!(fp32 > 0.9, "fp32 run did not learn: {fp32}");
        assert!(
            (a - fp32).abs() <= 0.02,
            "{amp} accuracy {a:.4} is more than 2 points from fp32's {fp32:.4}"
        );
    }
}
