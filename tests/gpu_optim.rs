//! The CUDA backend's optimizer and loss-scaler kernels (`sgd_step`, `adamw_step`,
//! `find_nonfinite`, `scaler_update` in kernels.cu) against the CPU optimizer
//! (engine/optim.rs) and `GradScaler` (engine/amp.rs). Same activation as gpu_parity.rs:
//! skips with the reason without a GPU, fails instead under `TUNE_REQUIRE_GPU=1`, and runs
//! on the CPU stand-in under `TUNE_CUDA_STANDIN=1` (docs/gpu.md).
//!
//! Tolerance |gpu - cpu| <= 1e-6 + 1e-5*|cpu| on the weights after every step: both sides
//! do the same f32 operations in the same order per element (no reduction), so only a
//! GPU's fused multiply-adds separate them. The scaler's state is compared exactly.

use tune::cuda_launch;
use tune::engine::amp::{GradScaler, ScalerConfig};
use tune::engine::device::{Device, MemCategory};
use tune::engine::nn::layer::Param;
use tune::engine::optim::{OptimConfig, Optimizer};
use tune::engine::rng::Rng;
use tune::engine::tensor::Tensor;
use tune::engine::testing::{kernels, DBuf, GOptim, GParam, Gpu};

#[path = "common/standin.rs"]
mod standin;

use standin::gpu_or_skip;

const ATOL: f32 = 1e-6;
const RTOL: f32 = 1e-5;

fn close(what: &str, gpu: &[f32], cpu: &[f32]) {
    assert_eq!(gpu.len(), cpu.len(), "{what}: lengths");
    for (i, (g, c)) in gpu.iter().zip(cpu).enumerate() {
        assert!(
            (g - c).abs() <= ATOL + RTOL * c.abs(),
            "{what}: element {i} is {g} on the GPU, {c} on the CPU"
        );
    }
}

fn random(n: usize, seed: u64) -> Vec<f32> {
    let mut r = Rng::from_keys(&[seed, 23]);
    (0..n).map(|_| r.normal()).collect()
}

/// `[loss scale, found_inf, growth tracker, optimizer steps]`, as the training loop
/// keeps it.
fn amp_state(gpu: &Gpu, scale: f32) -> DBuf {
    tune::engine::testing::amp_state(gpu, scale).unwrap()
}

fn find_nonfinite(gpu: &Gpu, amp: &mut DBuf, g: &DBuf) {
    let n = g.len() as u64;
    let cfg = kernels::elementwise(g.len());
    let r: tune::error::Result<()> =
        (|| cuda_launch!(gpu, "find_nonfinite", cfg, &mut amp.s, &g.s, &n))();
    r.unwrap();
}

fn scaler_update(gpu: &Gpu, amp: &mut DBuf, skipped: &mut DBuf, step: i32, c: &ScalerConfig) {
    let interval = c.growth_interval as i32;
    let cfg = kernels::per_item(1);
    let r: tune::error::Result<()> = (|| {
        cuda_launch!(
            gpu,
            "scaler_update",
            cfg,
            &mut amp.s,
            &mut skipped.s,
            &step,
            &c.growth_factor,
            &c.backoff_factor,
            &interval
        )
    })();
    r.unwrap();
}

/// Two parameters, one with weight decay and one without (a bias), on both backends.
struct Pair {
    cpu: Vec<Param>,
    gpu: Vec<GParam>,
}

const SIZES: [usize; 2] = [1000, 37];

fn pair(gpu: &Gpu, dev: &Device) -> Pair {
    let mut p = Pair {
        cpu: Vec::new(),
        gpu: Vec::new(),
    };
    for (i, &n) in SIZES.iter().enumerate() {
        let w = random(n, 100 + i as u64);
        let decay = i == 0;
        p.cpu
            .push(Param::new(format!("p{i}"), &[n], w.clone(), decay, dev).unwrap());
        p.gpu.push(GParam {
            name: format!("p{i}"),
            w: gpu.upload(&w, MemCategory::Params).unwrap(),
            g: None,
            decay,
        });
    }
    p
}

impl Pair {
    /// Gives both sides the same gradients: `scale * random`, with `poison` written at
    /// one element of the first parameter when given.
    fn set_grads(&mut self, gpu: &Gpu, dev: &Device, seed: u64, scale: f32, poison: Option<f32>) {
        for (i, (c, g)) in self.cpu.iter_mut().zip(&mut self.gpu).enumerate() {
            let n = SIZES[i];
            let mut v: Vec<f32> = random(n, seed * 10 + i as u64)
                .iter()
                .map(|x| x * scale)
                .collect();
            if let (Some(bad), 0) = (poison, i) {
                v[n / 2 + 3] = bad;
            }
            c.g = Some(Tensor::from_vec(&[n], v.clone(), MemCategory::Grads, dev.mem()).unwrap());
            g.g = Some(gpu.upload(&v, MemCategory::Grads).unwrap());
        }
    }

    fn compare(&self, gpu: &Gpu, what: &str) {
        for (c, g) in self.cpu.iter().zip(&self.gpu) {
            let got = gpu.download(&g.w.s).unwrap();
            close(&format!("{what} {}", c.name), &got, c.w.f32().unwrap());
        }
    }

    fn gpu_step(&mut self, gpu: &Gpu, opt: &mut GOptim, amp: &mut DBuf) {
        opt.begin_step(gpu, amp).unwrap();
        for (i, p) in self.gpu.iter_mut().enumerate() {
            opt.update(gpu, i, p, amp).unwrap();
        }
    }
}

fn configs() -> Vec<(&'static str, OptimConfig)> {
    vec![
        (
            "sgd momentum 0.9 wd 0.01",
            OptimConfig {
                weight_decay: 0.01,
                ..OptimConfig::sgd(0.1)
            },
        ),
        (
            "sgd no momentum wd 0.05",
            OptimConfig {
                momentum: 0.0,
                weight_decay: 0.05,
                ..OptimConfig::sgd(0.1)
            },
        ),
        ("adamw wd 0.01", OptimConfig::adamw(0.01)),
        (
            "adamw betas (0.8, 0.99) wd 0.1",
            OptimConfig {
                betas: (0.8, 0.99),
                weight_decay: 0.1,
                ..OptimConfig::adamw(0.003)
            },
        ),
    ]
}

#[test]
fn sgd_and_adamw_steps_match_the_cpu_optimizer() {
    let Some(gpu) = gpu_or_skip("sgd_and_adamw_steps_match_the_cpu_optimizer") else {
        return;
    };
    let dev = Device::cpu(0, 1);
    for (name, cfg) in configs() {
        let mut p = pair(&gpu, &dev);
        let mut cpu = Optimizer::new(cfg.clone()).unwrap();
        let mut g_opt = GOptim::new(cfg);
        let mut amp = amp_state(&gpu, 1.0);
        for step in 0..6 {
            p.set_grads(&gpu, &dev, step, 1.0, None);
            let mut refs: Vec<&mut Param> = p.cpu.iter_mut().collect();
            cpu.step(&mut refs, 1.0).unwrap();
            p.gpu_step(&gpu, &mut g_opt, &mut amp);
            p.compare(&gpu, &format!("{name}, step {step}:"));
        }
    }
}

#[test]
fn find_nonfinite_flags_inf_and_nan_only() {
    let Some(gpu) = gpu_or_skip("find_nonfinite_flags_inf_and_nan_only") else {
        return;
    };
    let n = 3000; // several blocks of 256
    for (what, bad) in [
        ("finite", None),
        ("+inf", Some(f32::INFINITY)),
        ("-inf", Some(f32::NEG_INFINITY)),
        ("NaN", Some(f32::NAN)),
    ] {
        for at in [0, 1234, n - 1] {
            let mut v: Vec<f32> = random(n, 5).iter().map(|x| x * 6.0e4).collect();
            v[1] = f32::MAX;
            v[2] = f32::MIN_POSITIVE / 4.0; // subnormal: finite
            if let Some(b) = bad {
                v[at] = b;
            }
            let g = gpu.upload(&v, MemCategory::Grads).unwrap();
            let mut amp = amp_state(&gpu, 65536.0);
            find_nonfinite(&gpu, &mut amp, &g);
            let got = gpu.download(&amp.s).unwrap();
            let want = if v.iter().all(|x| x.is_finite()) {
                0.0
            } else {
                1.0
            };
            assert_eq!(got[1], want, "{what} at {at}: found_inf");
            assert_eq!((got[0], got[2]), (65536.0, 0.0), "{what}: scale untouched");
        }
    }
}

#[test]
fn scaler_update_follows_gradscaler() {
    let Some(gpu) = gpu_or_skip("scaler_update_follows_gradscaler") else {
        return;
    };
    // Clean and overflowing steps, growth interval 3: grows after 3 clean steps, backs off
    // and restarts the count on each overflow (twice in a row included).
    let pattern = [
        true, true, true, true, false, true, true, true, false, false, true, true, true, true,
        true, true,
    ];
    // The default start (2^16), and a start where growing would overflow f32: the scale
    // must stay finite, as PyTorch's (and the CPU's) GradScaler keeps it.
    for init in [65536.0f32, 2.0f32.powi(127)] {
        let c = ScalerConfig {
            growth_interval: 3,
            init_scale: init,
            ..ScalerConfig::default()
        };
        let mut cpu = GradScaler::new(c);
        let mut amp = amp_state(&gpu, c.init_scale);
        let mut skipped = gpu.zeros(pattern.len(), MemCategory::Workspace).unwrap();
        for (step, &finite) in pattern.iter().enumerate() {
            let mut v = random(64, step as u64);
            if !finite {
                v[7] = if step % 2 == 0 {
                    f32::INFINITY
                } else {
                    f32::NAN
                };
            }
            let g = gpu.upload(&v, MemCategory::Grads).unwrap();
            find_nonfinite(&gpu, &mut amp, &g);
            scaler_update(&gpu, &mut amp, &mut skipped, step as i32, &c);
            let applied = cpu.update(finite);
            let got = gpu.download(&amp.s).unwrap();
            assert_eq!(got[0], cpu.scale(), "start {init}, step {step}: loss scale");
            assert_eq!(
                got[1], 0.0,
                "step {step}: found_inf cleared for the next step"
            );
            let flags = gpu.download(&skipped.s).unwrap();
            assert_eq!(flags[step] != 0.0, !applied, "step {step}: skip flag");
        }
    }
}

#[test]
fn scaled_steps_unscale_and_skipped_steps_change_nothing() {
    let Some(gpu) = gpu_or_skip("scaled_steps_unscale_and_skipped_steps_change_nothing") else {
        return;
    };
    let dev = Device::cpu(0, 1);
    let sc = ScalerConfig {
        growth_interval: 2,
        ..ScalerConfig::default()
    };
    // (overflow at this step?) The first step overflowing checks SGD's "first step"
    // momentum buffer and AdamW's bias correction, which counts only applied steps (the
    // device's step counter); later overflows, twice in a row included, check it again.
    let pattern = [true, false, true, false, false, true, true, false, false];
    for (name, cfg) in configs() {
        let mut p = pair(&gpu, &dev);
        let mut cpu = Optimizer::new(cfg.clone()).unwrap();
        let mut scaler = GradScaler::new(sc);
        let mut g_opt = GOptim::new(cfg);
        let mut amp = amp_state(&gpu, sc.init_scale);
        let mut skipped = gpu.zeros(pattern.len(), MemCategory::Workspace).unwrap();
        for (step, &overflow) in pattern.iter().enumerate() {
            let scale = scaler.scale();
            let poison = overflow.then_some(if step % 2 == 0 {
                f32::NAN
            } else {
                f32::INFINITY
            });
            p.set_grads(&gpu, &dev, step as u64, scale, poison);
            let before: Vec<Vec<f32>> = p
                .gpu
                .iter()
                .map(|g| gpu.download(&g.w.s).unwrap())
                .collect();
            // CPU: GradScaler decides, the optimizer steps only when the grads are finite.
            if scaler.update(!overflow) {
                let mut refs: Vec<&mut Param> = p.cpu.iter_mut().collect();
                cpu.step(&mut refs, scale).unwrap();
            }
            // GPU: no host sync, every kernel reads the scale and flag from amp_state.
            for g in &p.gpu {
                find_nonfinite(&gpu, &mut amp, g.g.as_ref().unwrap());
            }
            p.gpu_step(&gpu, &mut g_opt, &mut amp);
            scaler_update(&gpu, &mut amp, &mut skipped, step as i32, &sc);
            let what = format!("{name}, step {step} (scale {scale}, overflow {overflow}):");
            if overflow {
                for (g, b) in p.gpu.iter().zip(&before) {
                    assert_eq!(&gpu.download(&g.w.s).unwrap(), b, "{what} skipped step");
                }
            }
            p.compare(&gpu, &what);
            assert_eq!(gpu.download(&amp.s).unwrap()[0], scaler.scale(), "{what}");
            assert_eq!(gpu.download(&skipped.s).unwrap()[step] != 0.0, overflow);
        }
    }
}
