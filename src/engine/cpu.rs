//! The CPU executor: the step loop's `Exec` on the host, and its single-device run.

use std::sync::Arc;
use std::time::Instant;

use crate::engine::amp::GradScaler;
use crate::engine::autotune::{Algos, ChoiceSource};
use crate::engine::caps::{self, Layout};
use crate::engine::clock::{HostClock, Phases};
use crate::engine::data::{self, Batch, ImageShape};
use crate::engine::device::{Backend, Device, MemCategory, MemSnapshot};
use crate::engine::nn::model::Model;
use crate::engine::nn::zoo;
use crate::engine::ops::layer::{Ctx, Layer};
use crate::engine::ops::loss::softmax_cross_entropy;
use crate::engine::optim::{OptimConfig, Optimizer};
use crate::engine::parallel::summary::single_device_summary;
use crate::engine::step::{self, Exec};
use crate::engine::tensor::Tensor;
use crate::engine::vocab::{open_source, Observer, RunSummary, Workload};
use crate::error::Result;
use crate::knobs::{Amp, Knobs};

/// The CPU backend of the step loop: the model computes where the loader left the
/// batch, on this thread's rayon pool, timed by the host clock.
pub(crate) struct CpuExec {
    pub(crate) ctx: Ctx,
    pub(crate) dev: Arc<Device>,
    pub(crate) opt: Optimizer,
    pub(crate) classes: usize,
}

impl Exec for CpuExec {
    type L = Box<dyn Layer>;
    type Clock = HostClock;
    type Labels = Vec<u32>;
    type Loss = f32;

    fn ctx(&self) -> &Ctx {
        &self.ctx
    }

    fn clock(&self) -> HostClock {
        HostClock::default()
    }

    fn phases(&self, clock: HostClock) -> Result<Phases> {
        Ok(clock.phases())
    }

    fn zero_grads(&mut self, model: &mut Model) -> Result<()> {
        let mut res = Ok(());
        model.visit_params(&mut |p| {
            if let Some(g) = &mut p.g {
                match g.f32_mut() {
                    Ok(d) => d.fill(0.0),
                    Err(e) => res = Err(e),
                }
            }
        });
        res
    }

    fn upload(&mut self, batch: Batch) -> Result<(Tensor, Vec<u32>)> {
        // Taking ownership of the loader's buffer is the whole "transfer".
        let x = Tensor::from_vec(
            &[batch.n, batch.shape.h, batch.shape.w, batch.shape.c],
            batch.x,
            MemCategory::Activations,
            self.dev.mem(),
        )?;
        Ok((x, batch.y))
    }

    fn loss(&mut self, logits: Tensor, labels: &Vec<u32>, scale: f32) -> Result<(f32, Tensor)> {
        let logits = logits.into_f32()?;
        let mut dlogits = self.ctx.alloc(logits.shape());
        let (loss, _) = softmax_cross_entropy(
            logits.f32()?,
            labels,
            self.classes,
            scale,
            Some(dlogits.f32_mut()?),
        )?;
        drop(logits);
        Ok((loss, self.ctx.store(dlogits)?))
    }

    fn diverged_now(&self, loss: &f32) -> Option<f32> {
        (!loss.is_finite()).then_some(*loss)
    }

    fn grads_finite(&mut self, model: &mut Model) -> Result<bool> {
        grads_finite(model)
    }

    fn poison_one_grad(&mut self, model: &mut Model) -> Result<()> {
        poison_one_grad(model)
    }

    fn update(&mut self, model: &mut Model, loss_scale: f32) -> Result<()> {
        self.opt.begin_step();
        let mut idx = 0;
        let mut res = Ok(());
        model.visit_params(&mut |p| {
            if res.is_ok() {
                res = self.opt.update(idx, p, loss_scale);
            }
            idx += 1;
        });
        res
    }

    fn release_grads(&mut self, model: &mut Model) {
        model.visit_params(&mut |p| p.g = None);
    }

    fn read_loss(&mut self, losses: Vec<f32>, accum: usize) -> Result<f32> {
        Ok(losses
            .into_iter()
            .fold(0.0f32, |sum, l| sum + l / accum as f32))
    }

    fn mem(&self) -> MemSnapshot {
        self.dev.mem().snapshot()
    }

    fn eval_ctx(&self) -> Ctx {
        Ctx {
            amp: self.ctx.amp,
            ..Ctx::eval(&self.dev)
        }
    }

    fn correct(&mut self, logits: Tensor, labels: &Vec<u32>) -> Result<usize> {
        let logits = logits.into_f32()?;
        let (_, c) = softmax_cross_entropy(logits.f32()?, labels, self.classes, 1.0, None)?;
        Ok(c)
    }
}

/// The CPU backend's single-device run, on the caller's rayon pool.
pub(crate) fn run(w: &Workload, k: &Knobs, obs: &mut dyn Observer) -> Result<RunSummary> {
    let started = Instant::now();
    let dev = Device::cpu(0, w.threads);
    obs.on_devices(std::slice::from_ref(&dev));
    let [h, wd, c] = w.model.input();
    let want = ImageShape { h, w: wd, c };
    let not_applicable = caps::admit(Backend::Cpu, k, Layout::Single, obs)?;
    let (mut source, test, classes, norm) = open_source(w, k, want)?;

    let mut model = zoo::build(w.model, classes, w.seed, &dev)?;
    let params = model.num_params();
    if std::env::var_os("TUNE_PROFILE_LAYERS").is_some() {
        model.enable_layer_times();
    }
    let opt = Optimizer::new(OptimConfig::of(w.optimizer, w.lr)?)?;
    let algos = if k.autotune {
        w.autotune_algos(&format!("cpu:{}t", w.threads), obs)?
    } else {
        Algos::heuristic()
    };
    let ctx = Ctx {
        amp: k.amp,
        algos: Arc::clone(&algos),
        ..Ctx::train(&dev)
    };
    let mut scaler = w
        .scaler
        .active_for(k.amp)
        .then(|| GradScaler::new(w.scaler));
    let mut exec = CpuExec {
        ctx,
        dev: Arc::clone(&dev),
        opt,
        classes,
    };
    let trained = step::train(
        &mut exec,
        &mut model,
        &mut source,
        w,
        k,
        &mut scaler,
        obs,
        started,
    )?;
    drop(source);
    if let Some(lt) = &model.layer_times {
        for (l, (f, b)) in model.layers.iter().zip(lt) {
            obs.on_note(&format!(
                "layer {:<28} forward {:8.2} ms/step  backward {:8.2} ms/step",
                l.name(),
                f * 1e3 / w.steps as f64,
                b * 1e3 / w.steps as f64
            ));
        }
    }

    algos.save()?;
    let algorithms = algos.choices();
    for c in algorithms
        .iter()
        .filter(|c| c.source != ChoiceSource::Heuristic)
    {
        obs.on_note(&format!(
            "autotune {} [{}]: {} ({:?})",
            c.op, c.key, c.algo, c.source
        ));
    }

    // Memory figures describe training; evaluation's bigger batches must not count.
    let snap = dev.mem().snapshot();
    let accuracy = match (&test, w.eval) {
        (Some(test), true) => Some(step::evaluate(
            &mut exec,
            &mut model,
            Arc::clone(test),
            &norm,
        )?),
        _ => None,
    };
    let m = trained.measured;
    let busy_wall = m.after_warmup(w.warmup).iter().sum();
    let (devices, imbalance) = single_device_summary(w.threads, &m.phase_sum, busy_wall, &snap);
    Ok(RunSummary {
        accuracy,
        not_applicable,
        skipped_steps: trained.skipped_steps,
        loss_scale_final: scaler.as_ref().map(GradScaler::scale),
        algorithms,
        ..RunSummary::from_measured(w, k, "cpu", params, m, &snap, devices, imbalance)
    })
}

/// True when every gradient is finite (the scaler's inf/nan check).
fn grads_finite(model: &mut Model) -> Result<bool> {
    let mut ok = true;
    let mut res = Ok(());
    model.visit_params(&mut |p| {
        if let (true, Some(g)) = (ok, &p.g) {
            match g.f32() {
                Ok(d) => ok = d.iter().all(|v| v.is_finite()),
                Err(e) => res = Err(e),
            }
        }
    });
    res.map(|()| ok)
}

fn poison_one_grad(model: &mut Model) -> Result<()> {
    let mut done = false;
    let mut res = Ok(());
    model.visit_params(&mut |p| {
        if done {
            return;
        }
        if let Some(g) = &mut p.g {
            match g.f32_mut() {
                Ok(d) if !d.is_empty() => {
                    d[0] = f32::INFINITY;
                    done = true;
                }
                Ok(_) => {}
                Err(e) => res = Err(e),
            }
        }
    });
    res
}

/// Held-out accuracy of a trained CPU model (the multi-device launcher's device 0),
/// through the one `step::evaluate`. Evaluation never steps the optimizer; `CpuExec`
/// carries one only because training does.
pub fn evaluate(
    model: &mut Model,
    test: Arc<dyn data::Dataset>,
    norm: &data::Normalize,
    dev: &Arc<Device>,
    classes: usize,
    amp: Amp,
) -> Result<f64> {
    let mut exec = CpuExec {
        ctx: Ctx {
            amp,
            ..Ctx::train(dev)
        },
        dev: Arc::clone(dev),
        opt: Optimizer::new(OptimConfig::sgd(0.01))?,
        classes,
    };
    step::evaluate(&mut exec, model, test, norm)
}
