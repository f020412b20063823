//! The CPU executor: the step loop's `Exec` on the host, and its single-device run.

use std::sync::Arc;
use std::time::Instant;

use crate::engine::autotune::Algos;
use crate::engine::caps::{self, Layout};
use crate::engine::clock::{HostClock, Phases};
use crate::engine::collective::Collective;
use crate::engine::data::Batch;
use crate::engine::device::{Backend, Device, MemCategory, MemSnapshot};
use crate::engine::launcher::{self, Rig};
use crate::engine::nn::model::Model;
use crate::engine::nn::zoo;
use crate::engine::ops::layer::{Ctx, Layer};
use crate::engine::ops::loss::softmax_cross_entropy;
use crate::engine::optim::{OptimConfig, Optimizer};
use crate::engine::step::Exec;
use crate::engine::tensor::Tensor;
use crate::engine::vocab::{Observer, RunSummary, Workload};
use crate::error::Result;
use crate::knobs::Knobs;

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

/// The CPU backend's setup of one device (`launcher::Rig`): a device with its own
/// compute threads, and with DDP's SyncBatchNorm collective when it is one rank.
pub(crate) struct CpuRig {
    pub(crate) dev: Arc<Device>,
    pub(crate) sync_bn: Option<Arc<dyn Collective>>,
}

impl Rig for CpuRig {
    type E = CpuExec;

    fn device(&self) -> &Arc<Device> {
        &self.dev
    }

    fn label(&self) -> String {
        "cpu".into()
    }

    fn model(&self, w: &Workload, k: &Knobs, classes: usize) -> Result<(Model, usize)> {
        let mut model = zoo::build_with(w.model, classes, w.seed, &self.dev, k.fuse)?;
        if std::env::var_os("TUNE_PROFILE_LAYERS").is_some() {
            model.enable_layer_times();
        }
        let params = model.num_params();
        Ok((model, params))
    }

    /// Always a table: with autotune off, the heuristic's choices are recorded too.
    fn algos(&self, w: &Workload, k: &Knobs, obs: &mut dyn Observer) -> Result<Option<Arc<Algos>>> {
        Ok(Some(if k.autotune {
            w.autotune_algos(&format!("cpu:{}t", self.dev.threads), obs)?
        } else {
            Algos::heuristic()
        }))
    }

    fn exec(
        &self,
        w: &Workload,
        k: &Knobs,
        classes: usize,
        algos: Option<&Arc<Algos>>,
        _scale: f32,
    ) -> Result<CpuExec> {
        let mut ctx = Ctx {
            amp: k.amp,
            sync_bn: self.sync_bn.clone(),
            ..Ctx::train(&self.dev)
        };
        if let Some(a) = algos {
            ctx.algos = Arc::clone(a);
        }
        Ok(CpuExec {
            ctx,
            dev: Arc::clone(&self.dev),
            opt: Optimizer::new(OptimConfig::of(w.optimizer, w.lr)?)?.with_fuse(k.fuse),
            classes,
        })
    }
}

/// The CPU backend's single-device run, on the caller's rayon pool.
pub(crate) fn run(w: &Workload, k: &Knobs, obs: &mut dyn Observer) -> Result<RunSummary> {
    let started = Instant::now();
    let rig = CpuRig {
        dev: Device::cpu(0, w.threads),
        sync_bn: None,
    };
    let not_applicable = caps::admit(Backend::Cpu, k, Layout::Single, obs)?;
    launcher::single(&rig, w, k, obs, not_applicable, started)
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
